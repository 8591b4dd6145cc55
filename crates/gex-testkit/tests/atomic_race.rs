//! Probes (proof under Miri): one rank performs RMA atomics of 4 and 8 bytes on words
//! of another rank's segment while that rank reads the same bytes with `Segment::read`
//! on its own thread, over aligned and unaligned ranges: with CPU atomics on the direct
//! path (both ranks on one host) and with the simulated NIC's atomics (one rank per
//! host). Safe code only.
//!
//! Every access to those words is byte-sized in Rust's model: `Segment::read` is a
//! byte-wise atomic copy (`gex_sync::copy`), and the CPU atomics of gex-rma and the
//! simulated NIC's are `gex_sync::word` operations, defined over bytes. Before, a `u32`
//! or `u64` atomic was a 4- or 8-byte `AtomicU32`/`AtomicU64` access: Miri reported a
//! *mixed-size* race (undefined behaviour in Rust's memory model
//! although every access is atomic). A native run proves nothing, so outside Miri the
//! probes are ignored: `cargo +nightly miri test -p gex-testkit --test atomic_race`
//! (docs/soundness.md, class 4).
#![cfg(feature = "rma")]

use gex_core::{Blocking, EpAddr};
use gex_rma::{AtomicFlags, AtomicOp, AtomicOps, GlobalPtr, RmaExt};
use gex_testkit::sim::{SimConfig, run_sim};

fn atomics_against_reads(cfg: SimConfig, native: bool) {
    run_sim(
        2,
        cfg,
        || gex_testkit::rma::client_builder().segment_size(4096),
        move |client| {
            let mut ep = client.endpoint(0).unwrap();
            let world = ep.world();
            let d32 = ep.atomic_domain::<u32>(&world, AtomicOps::FADD).unwrap();
            let d64 = ep.atomic_domain::<u64>(&world, AtomicOps::FADD).unwrap();
            assert_eq!(d32.is_native(), native);
            gex_testkit::exchange_barrier(&mut ep).unwrap();
            if client.rank() == 1 {
                let t = EpAddr::rank(0);
                let f = AtomicFlags::empty();
                for _ in 0..2 {
                    // 4 bytes: both halves of the word at 0, the low half of the one at 8.
                    for off in [0, 4, 8] {
                        let p = GlobalPtr::<u32>::new(t, off);
                        ep.fetch_atomic(&d32, p, AtomicOp::Add(1), f, Blocking)
                            .unwrap();
                    }
                    let p = GlobalPtr::<u64>::new(t, 16);
                    ep.fetch_atomic(&d64, p, AtomicOp::Add(1), f, Blocking)
                        .unwrap();
                }
            } else {
                let mut b = [0u8; 32];
                let seg = ep.segment();
                seg.read(0, &mut b).unwrap();
                seg.read(3, &mut b[..11]).unwrap();
                seg.read(9, &mut b[..13]).unwrap();
            }
            gex_testkit::exchange_barrier(&mut ep).unwrap();
            if client.rank() == 0 {
                let mut w = [0u8; 24];
                ep.segment().read(0, &mut w).unwrap();
                let word = |i: usize| u32::from_le_bytes(w[i..i + 4].try_into().unwrap());
                assert_eq!([word(0), word(4), word(8), word(12)], [2, 2, 2, 0]);
                assert_eq!(u64::from_le_bytes(w[16..24].try_into().unwrap()), 2);
            }
        },
    );
}

#[test]
#[cfg_attr(not(miri), ignore = "proves something only under Miri")]
fn cpu_atomics_and_segment_reads_of_the_same_words_do_not_race() {
    atomics_against_reads(SimConfig::default(), false);
}

#[test]
#[cfg_attr(not(miri), ignore = "proves something only under Miri")]
fn nic_atomics_and_segment_reads_of_the_same_words_do_not_race() {
    // One rank per host: the simulated NIC serves only other hosts.
    atomics_against_reads(
        SimConfig::default().ranks_per_host(1).native(false, true),
        true,
    );
}
