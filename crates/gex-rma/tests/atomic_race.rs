//! Probe (proof under Miri): RMA atomics of 4 and 8 bytes on words that another thread
//! puts and gets at the same time, over aligned and unaligned ranges. Two endpoints of
//! one loopback client on threads, safe code only: endpoint 0 performs CPU atomics on
//! its own segment while endpoint 1 copies into and out of it on the direct path.
//! (`Segment::read` against atomics, and the sim's NIC atomics, are probed in
//! `crates/gex-testkit/tests/atomic_race.rs`.)
//!
//! Every access to those words is byte-sized in Rust's model: the copies are byte-wise
//! atomic (`gex_sync::copy`), and the CPU atomics are `gex_sync::word` operations,
//! defined over bytes (read-modify-writes under a lock of their own). Before, a `u32`
//! or `u64` atomic was a 4- or 8-byte `AtomicU32`/`AtomicU64` access: Miri reported a
//! *mixed-size* race (undefined behaviour in Rust's memory model although every access
//! is atomic). A native run shows nothing either way, so outside Miri the
//! probe is ignored; run it with
//! `cargo +nightly miri test -p gex-rma --test atomic_race` (docs/soundness.md, class 4).

mod common;

use gex_core::{Blocking, EpAddr};
use gex_rma::{AtomicFlags, AtomicOp, AtomicOps, GlobalPtr, RmaExt};

#[test]
#[cfg_attr(not(miri), ignore = "proves something only under Miri")]
fn atomics_and_puts_and_gets_of_the_same_words_do_not_race() {
    let c = common::rma(4096, Some(2), None);
    let mut e0 = c.endpoint(0).unwrap();
    let mut e1 = c.endpoint(1).unwrap();
    let world = e0.world();
    let d32 = e0.atomic_domain::<u32>(&world, AtomicOps::FADD).unwrap();
    let d64 = e0.atomic_domain::<u64>(&world, AtomicOps::FADD).unwrap();
    let t = EpAddr::new(0, 0);
    std::thread::scope(|s| {
        // Fetch-adds of 4 bytes (both halves of the word at 0, the low half of the word
        // at 8) and of 8 bytes (the word at 16).
        s.spawn(move || {
            let f = AtomicFlags::empty();
            for _ in 0..2 {
                for off in [0, 4, 8] {
                    let p = GlobalPtr::<u32>::new(t, off);
                    e0.fetch_atomic(&d32, p, AtomicOp::Add(1), f, Blocking)
                        .unwrap();
                }
                let p = GlobalPtr::<u64>::new(t, 16);
                e0.fetch_atomic(&d64, p, AtomicOp::Add(1), f, Blocking)
                    .unwrap();
            }
        });
        // Puts and gets of the same words: aligned whole words, then unaligned ranges
        // over parts of them.
        s.spawn(move || {
            e1.put(GlobalPtr::<u64>::new(t, 0), &[0u64; 3], Blocking)
                .unwrap();
            e1.put(GlobalPtr::<u8>::new(t, 2), &[0u8; 9], Blocking)
                .unwrap();
            e1.put(GlobalPtr::<u8>::new(t, 13), &[0u8; 6], Blocking)
                .unwrap();
            let mut b = [0u8; 21];
            e1.get(&mut b[..], GlobalPtr::<u8>::new(t, 1), Blocking)
                .unwrap();
            let mut w = [0u64; 3];
            e1.get(&mut w[..], GlobalPtr::<u64>::new(t, 0), Blocking)
                .unwrap();
        });
    });
}
