//! The RMA conformance suite: cases for gex-rma ([`gex_rma::RmaEp`]), written once
//! against the conduit SPI and run on every conduit with the same macro and runners as
//! the AM suite ([`suite_tests!`](crate::suite_tests) with `suite: rma`;
//! [`conformance::Runner`](crate::conformance::Runner):
//! [`SimRunner`](crate::sim::SimRunner), [`ProcRunner`](crate::procs::ProcRunner), ...).
//!
//! Each case wraps EP 0 of every rank in an `RmaEp`, partitions every segment into
//! one slot per rank (rank `r` only writes slot `r` of any target), and ends with a
//! barrier (gex-rma's own, [`gex_rma::RmaEp::barrier`]) so that no rank leaves while peers still need it to serve AM-path traffic.
//! Run both ways: as built, and with `RUSTFLAGS="--cfg gex_force_am_rma"` (reference
//! path everywhere).
//!
//! # Cases
//! | case | checks |
//! |---|---|
//! | `rma_contiguous` | blocking put/get, every rank to every rank (self included), sizes 0, 1, 7, 8, 4096, 65537, 1 MiB (as the slot allows), unaligned offsets; data checked at the target and read back |
//! | `rma_large` | sizes 0, 1, 17, 301, 4099, 65539, 1 MiB+3, 4 MiB+1, 8 MiB-5 and 16 MiB (as the segment allows) at unaligned offsets, from rank 0 to its right neighbour and to itself, blocking/NB/NBI in rotation; read back and checked by content at the target |
//! | `rma_values_memset` | `put_val`/`get_val` for 1-, 2-, 4-, 8-byte types; `memset` of several lengths |
//! | `rma_nb_events` | `put_nb` (buffer back at LC), `put_nb_copy`, `get_nb`, raw variants; `test`, `wait`, `wait_all`, `wait_some`; a forgotten get event |
//! | `rma_nbi_regions` | NBI puts/gets/memsets with `wait_syncnbi_*`/`test_syncnbi_*`; access regions (and their nesting errors); overlapping NBI puts each synced: the last synced value is visible |
//! | `rma_vis_shapes` | strided (random shapes, negative and zero strides, transposes, reflections, degenerate shapes), vector and indexed, blocking/NB/NBI, against a local model |
//! | `rma_multi_ep` | (2 EPs) one thread per endpoint; each puts/gets into the *other* endpoint of every rank and reads what the other ranks wrote there |
//! | `rma_atomic_ops` | every atomic op of every type (`i32`, `u32`, `i64`, `u64`, `f32`, `f64`; bitwise ops for integers) in every completion mode (blocking, NB, NBI with `wait_syncnbi_atomics`/`wait_syncnbi_all`/`test_syncnbi_atomics`, access region), random flags and operands (extremes, `-0.0`, infinity), on a private word at every rank: fetched values and the word checked against a sequential model |
//! | `rma_atomic_concurrency` | all ranks on words of the last rank: fetch-add (blocking and NB) whose fetched values must form a permutation of `0..n*k`, NBI fetch-dec, a CAS lock (acquire/release) protecting a plain counter, min/max convergence, f64/f32 sums and products, or/and/xor |
//! | `rma_atomic_errors` | `BadOpSet`, `OpNotInDomain`, `NotFetching`, `Misaligned`, `OutOfSegment` (incl. overflow), `BadRank`; failed atomics change nothing |
//! | `rma_barrier` | gex-rma's barrier: `BarrierNotNotified`/`BarrierAlreadyNotified`; 60 barriers in a row (blocking, `barrier_nb`, split-phase with named ids, anonymous/named mixes with `barrier_try`); a mismatch (two named ids) reported on every rank through wait and try, and a clean barrier after it; barriers with NBI puts synced before notify (visible after wait) and atomics between notify and wait |
//! | `rma_errors` | `BadRank`, `BadEndpoint`, `OutOfSegment` (incl. offset overflow), `LocalOutOfBounds`, `ShapeMismatch`, `MixedTargets`; failed operations write nothing, local or remote |
//!
//! # Running it
//! ```ignore
//! mod r3 {
//!     gex_testkit::suite_tests! {
//!         suite: rma,
//!         conduit: gex_testkit::sim::Sim,
//!         runner: gex_testkit::sim::SimRunner::new(Default::default()).segment_size(4 << 20),
//!         ranks: 3,
//!     }
//! }
//! ```
//! Runners should give segments of at least 1 MiB (4 MiB or more to exercise the 1 MiB
//! size on every pair; 17 MiB for the 16 MiB case).

mod atomics;
mod cases;

use crate::conformance::Case;
use gex_core::spi::Conduit;

/// Names of every RMA case, in registry order.
pub const CASE_NAMES: &[&str] = &[
    "rma_contiguous",
    "rma_large",
    "rma_values_memset",
    "rma_nb_events",
    "rma_nbi_regions",
    "rma_vis_shapes",
    "rma_errors",
    "rma_multi_ep",
    "rma_atomic_ops",
    "rma_atomic_concurrency",
    "rma_atomic_errors",
    "rma_barrier",
];

/// Every RMA case, in [`CASE_NAMES`] order.
pub fn cases<C: Conduit>() -> Vec<Case<C>> {
    fn c<C: Conduit>(
        name: &'static str,
        about: &'static str,
        run: fn(&gex_core::Client<C>) -> Result<(), String>,
    ) -> Case<C> {
        Case {
            name,
            about,
            min_ranks: 1,
            min_eps: 1,
            run,
        }
    }
    vec![
        c(
            "rma_contiguous",
            "blocking put/get, all pairs, many sizes and offsets",
            cases::contiguous::<C>,
        ),
        c(
            "rma_large",
            "sizes 0..16 MiB, unaligned, to a neighbour and to itself",
            cases::large::<C>,
        ),
        c(
            "rma_values_memset",
            "put_val/get_val and memset",
            cases::values_memset::<C>,
        ),
        c(
            "rma_nb_events",
            "NB operations with test/wait/wait_all/wait_some",
            cases::nb_events::<C>,
        ),
        c(
            "rma_nbi_regions",
            "NBI operations, syncs and access regions",
            cases::nbi_regions::<C>,
        ),
        c(
            "rma_vis_shapes",
            "strided/vector/indexed against a model",
            cases::vis_shapes::<C>,
        ),
        c(
            "rma_errors",
            "every argument error; failed operations write nothing",
            cases::errors::<C>,
        ),
        Case {
            name: "rma_multi_ep",
            about: "one thread per endpoint; RMA into the other endpoint of every rank",
            min_ranks: 1,
            min_eps: 2,
            run: cases::multi_ep::<C>,
        },
        c(
            "rma_atomic_ops",
            "every atomic op x type x completion mode against a model",
            atomics::atomic_ops::<C>,
        ),
        c(
            "rma_atomic_concurrency",
            "all ranks on shared words: fetch-add permutation, CAS lock, min/max, floats, bitwise",
            atomics::atomic_concurrency::<C>,
        ),
        c(
            "rma_atomic_errors",
            "atomic argument errors; failed atomics change nothing",
            atomics::atomic_errors::<C>,
        ),
        c(
            "rma_barrier",
            "gex-rma barrier: flavours, ids, anonymous mixes, mismatch everywhere, with RMA traffic",
            atomics::barrier::<C>,
        ),
    ]
}

/// True if `name` is an RMA case (used by [`suite_tests!`](crate::suite_tests)'s
/// exclusion check).
pub const fn is_case_name(name: &str) -> bool {
    let mut i = 0;
    while i < CASE_NAMES.len() {
        let (a, b) = (CASE_NAMES[i].as_bytes(), name.as_bytes());
        if a.len() == b.len() {
            let mut j = 0;
            while j < a.len() && a[j] == b[j] {
                j += 1;
            }
            if j == a.len() {
                return true;
            }
        }
        i += 1;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_matches_names() {
        let names: Vec<&str> = cases::<gex_core::loopback::Loopback>()
            .iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(names, CASE_NAMES);
        assert!(is_case_name("rma_errors") && !is_case_name("rma_error"));
    }
}
