//! Probes (proof under Miri): the direct path copies into and out of a peer's segment
//! while the segment's owner, or a third thread, reads or writes the same bytes with
//! `Segment::read`/`write`. Two or three endpoints of one loopback client on threads,
//! safe code only: conflicting concurrent accesses to the same bytes.
//!
//! Before the direct path's copies were byte-wise atomic (`gex_sync::copy`), Miri
//! reported the first probe as a data race (undefined behaviour in Rust's memory
//! model); now the bytes are unspecified and nothing is undefined. A native run shows
//! nothing either way (the race is in the abstract machine, and x86 has no torn bytes),
//! so outside Miri the probes are ignored; run them with
//! `cargo +nightly miri test -p gex-rma --test rma_race` (docs/soundness.md, class 4).

use gex_core::loopback::Loopback;
use gex_core::{Blocking, EpAddr};
use gex_rma::{GlobalPtr, RmaExt};

mod common;

fn client(eps: u16) -> gex_core::Client<Loopback> {
    common::rma(4096, Some(eps), None)
}

/// Every byte the reader saw is one that some writer stored (or the initial zero).
fn bytes_are_from(b: &[u8], values: &[u8]) {
    assert!(b.iter().all(|x| *x == 0 || values.contains(x)), "{b:?}");
}

#[test]
#[cfg_attr(not(miri), ignore = "proves something only under Miri")]
fn a_direct_put_and_a_segment_read_do_not_race() {
    let c = client(2);
    let mut e0 = c.endpoint(0).unwrap();
    let e1 = c.endpoint(1).unwrap();
    std::thread::scope(|s| {
        s.spawn(move || {
            let p = GlobalPtr::<u64>::new(EpAddr::new(0, 1), 0);
            for i in 1..=4u64 {
                e0.put(p, &[i * 0x0101_0101_0101_0101; 4], Blocking)
                    .unwrap();
            }
        });
        s.spawn(move || {
            let mut b = [0u8; 32];
            for _ in 0..4 {
                e1.segment().read(0, &mut b).unwrap();
                bytes_are_from(&b, &[1, 2, 3, 4]);
            }
        });
    });
}

#[test]
#[cfg_attr(not(miri), ignore = "proves something only under Miri")]
fn a_direct_get_memset_and_segment_write_do_not_race() {
    let c = client(3);
    let mut e0 = c.endpoint(0).unwrap();
    let mut e1 = c.endpoint(1).unwrap();
    let e2 = c.endpoint(2).unwrap();
    std::thread::scope(|s| {
        // A get of bytes another thread writes.
        s.spawn(move || {
            let p = GlobalPtr::<u8>::new(EpAddr::new(0, 2), 3);
            for _ in 0..3 {
                let mut b = [0u8; 21];
                e0.get(&mut b[..], p, Blocking).unwrap();
                bytes_are_from(&b, &[7, 9]);
            }
        });
        // A memset of the same bytes, unaligned.
        s.spawn(move || {
            let p = GlobalPtr::<u8>::new(EpAddr::new(0, 2), 1);
            for _ in 0..3 {
                e1.memset(p, 9, 19, Blocking).unwrap();
            }
        });
        // The owner writes them.
        s.spawn(move || {
            for _ in 0..3 {
                e2.segment().write(0, &[7; 24]).unwrap();
            }
        });
    });
}
