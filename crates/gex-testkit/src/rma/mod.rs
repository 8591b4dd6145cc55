//! The RMA conformance suite: cases for gex-rma (the [`gex_rma::Rma`] layer and its
//! API, [`gex_rma::RmaExt`]), written once against the conduit SPI and run on every
//! conduit with the same macro and runners as the AM suite
//! ([`suite_tests!`](crate::suite_tests) with `suite: rma`;
//! [`conformance::Runner`](crate::conformance::Runner):
//! [`SimRunner`](crate::sim::SimRunner), [`ProcRunner`](crate::procs::ProcRunner), ...).
//!
//! **Runners must build the client with the RMA layer**
//! (`ClientBuilder::new().layer::<gex_rma::Rma>()`); a case fails with a message
//! saying so otherwise. Each case uses EP 0 of every rank, partitions every segment
//! into one slot per rank (rank `r` only writes slot `r` of any target), and ends with
//! a barrier of the primordial team (the core's all-gather,
//! [`Endpoint::exchange`](gex_core::Endpoint::exchange), which polls, so no rank
//! leaves while peers still need it to serve AM-path traffic; the collectives layer's
//! barrier is not a dependency of this suite). Run both ways: as built, and with
//! `RUSTFLAGS="--cfg gex_force_am_rma"` or `GEX_RMA_PATH=am` (reference path
//! everywhere).
//!
//! # Cases
//! | case | checks |
//! |---|---|
//! | `rma_contiguous` | blocking put/get, every rank to every rank (self included), sizes 0, 1, 7, 8, 4096, 65537, 1 MiB (as the slot allows), unaligned offsets; data checked at the target and read back |
//! | `rma_large` | sizes 0, 1, 17, 301, 4099, 65539, 1 MiB+3, 4 MiB+1, 8 MiB-5 and 16 MiB (as the segment allows) at unaligned offsets, from rank 0 to its right neighbour and to itself, blocking/NB/NBI/scoped in rotation; read back and checked by content at the target |
//! | `rma_values_memset` | `put_val`/`get_val` for 1-, 2-, 4-, 8-byte types; `memset` of several lengths |
//! | `rma_nb_events` | NB put (source reusable on return), NB get into an owned buffer; `test`, `wait`, `wait_all`, `wait_some`; a scoped get; forgotten and dropped get events (their buffers live on, the op table drains) |
//! | `rma_nbi_regions` | NBI puts/gets/memsets with `sync_nbi`/`test_nbi` by category; scopes (GASNet-EX's access regions): lent sources and destinations, not covered by the category syncs, nested; overlapping NBI puts each synced: the last synced value is visible |
//! | `rma_vis_shapes` | strided (random shapes, negative and zero strides, transposes, reflections, degenerate shapes), vector and indexed, blocking/NB/NBI/scoped, against a local model |
//! | `rma_multi_ep` | (2 EPs) one thread per endpoint; each puts/gets into the *other* endpoint of every rank and reads what the other ranks wrote there |
//! | `rma_atomic_ops` | every atomic op of every type (`i32`, `u32`, `i64`, `u64`, `f32`, `f64`; bitwise ops for integers) in every completion mode (blocking, NB, NBI with `sync_nbi(ATOMICS)`/`sync_nbi(ALL)`/`test_nbi`, scoped fetches synced inside and at the end of the scope), random flags and operands (extremes, `-0.0`, infinity), on a private word at every rank: fetched values and the word checked against a sequential model |
//! | `rma_atomic_concurrency` | all ranks on words of the last rank: fetch-add (blocking and NB) whose fetched values must form a permutation of `0..n*k`, NBI fetch-dec, a CAS lock (acquire/release) protecting a plain counter, min/max convergence, f64/f32 sums and products, or/and/xor |
//! | `rma_atomic_errors` | `BadOpSet`, `DomainMismatch` (different op sets, different types: on every rank), `NotInTeam`, `OpNotInDomain` (also a fetching set, which is a swap), `Misaligned`, `OutOfSegment` (incl. overflow), `BadRank`; failed atomics change nothing |
//! | `rma_barrier_visibility` | NBI puts synced before a barrier are visible to every rank after it; atomics between barriers all counted (the barrier's own protocol is the collectives layer's) |
//! | `rma_errors` | `BadRank`, `BadEndpoint` (an index at the neighbour's capacity), `NoEndpoint` (an index below it not created yet, where the conduit makes endpoints at run time), `OutOfSegment` (incl. offset overflow), `LocalOutOfBounds`, `ShapeMismatch`, `MixedTargets`; failed operations write nothing, local or remote |
//!
//! # Running it
//! ```ignore
//! mod r3 {
//!     // `rma_runner` starts a job whose clients carry the RMA layer (see
//!     // gex-testkit's tests/rma_sim.rs for one on the simulator).
//!     gex_testkit::suite_tests! {
//!         suite: rma,
//!         conduit: gex_testkit::sim::Sim,
//!         runner: rma_runner(4 << 20),
//!         ranks: 3,
//!     }
//! }
//! ```
//! Runners should give segments of at least 1 MiB (4 MiB or more to exercise the 1 MiB
//! size on every pair; 17 MiB for the 16 MiB case).

mod atomics;
mod cases;
pub mod runtime;

use crate::conformance::Case;
use gex_core::spi::Conduit;

/// A client builder whose clients carry the RMA layer, as the RMA cases need
/// (`ClientBuilder::new().layer::<gex_rma::Rma>()`), for runners of conduit crates that
/// do not depend on gex-rma themselves.
pub fn client_builder() -> gex_core::ClientBuilder<((), gex_rma::Rma)> {
    gex_core::ClientBuilder::new().layer::<gex_rma::Rma>()
}

/// The atomics half and the end of the conduits' `native_path_is_taken` tests, on
/// every rank: after a barrier, a `u64` atomic domain (fetch-add and get) on the world
/// team, which must be native exactly when `native`; 100 blocking fetch-adds of 1 on
/// the word at offset 64 of rank 1's segment through it; the conduit's count of native
/// atomics (`native_atomics` of the client, read before and after) must grow by 100
/// exactly when `native`, and after a barrier the word must hold 100 per rank. Ends
/// with a barrier and [`finalize`](crate::finalize)s `ep` and `client`.
///
/// # Errors
/// A message saying which check failed, or an RMA, barrier or finalize error.
pub fn finish_with_hundred_fetch_adds<C: Conduit>(
    mut ep: gex_core::OwnedEndpoint<C>,
    client: gex_core::Client<C>,
    native: bool,
    native_atomics: impl Fn(&gex_core::Client<C>) -> u64,
) -> Result<(), String> {
    use gex_core::{Blocking, EpAddr};
    use gex_rma::{AtomicFlags, AtomicOp, AtomicOps, GlobalPtr, RmaExt};
    crate::exchange_barrier(&mut ep).map_err(|e| e.to_string())?;
    let world = ep.world();
    let ad = &ep
        .atomic_domain::<u64>(&world, AtomicOps::FADD | AtomicOps::GET)
        .map_err(|e| e.to_string())?;
    if ad.is_native() != native {
        return Err(format!(
            "atomic domain native = {}, expected {native}",
            ad.is_native()
        ));
    }
    let word = GlobalPtr::<u64>::new(EpAddr::rank(1), 64);
    let f = AtomicFlags::empty();
    let before = native_atomics(&client);
    for _ in 0..100 {
        ep.fetch_atomic(ad, word, AtomicOp::Add(1), f, Blocking)
            .map_err(|e| e.to_string())?;
    }
    let counted = native_atomics(&client) - before;
    if counted != if native { 100 } else { 0 } {
        return Err(format!(
            "{counted} native atomics counted for 100 fetch-adds (native: {native})"
        ));
    }
    crate::exchange_barrier(&mut ep).map_err(|e| e.to_string())?;
    let total = ep
        .fetch_atomic(ad, word, AtomicOp::Get, f, Blocking)
        .map_err(|e| e.to_string())?;
    if total != 100 * u64::from(ep.size()) {
        return Err(format!("word holds {total} after 100 fetch-adds per rank"));
    }
    crate::exchange_barrier(&mut ep).map_err(|e| e.to_string())?;
    crate::finalize(ep, client)
}

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
    "rma_barrier_visibility",
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
            "rma_barrier_visibility",
            "NBI puts synced before a barrier visible after it; atomics between barriers",
            atomics::barrier_visibility::<C>,
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
