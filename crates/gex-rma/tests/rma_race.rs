//! Probe (Miri only): a put on the direct path copies into the target's segment with
//! plain stores (`std::ptr::copy`), while the segment's owner may read it at the same
//! time with `Segment::read` (relaxed atomic loads) from another thread. Two endpoints
//! of one loopback client on two threads, safe code only: under Miri this is a data
//! race (undefined behaviour in Rust's memory model), not "unspecified bytes".
//!
//! Known hole, not fixed on this branch (docs/rma.md, *Data races*): run with
//! `cargo +nightly miri test -p gex-rma --test rma_race -- --include-ignored`.

use gex_core::boot::Singleton;
use gex_core::loopback::Loopback;
use gex_core::{Blocking, ClientBuilder, EpAddr};
use gex_rma::{GlobalPtr, Rma, RmaExt};

#[test]
#[ignore = "a known data race that only Miri sees: direct RMA copies are not atomic"]
fn a_direct_put_races_with_an_atomic_segment_read() {
    let c = ClientBuilder::new()
        .layer::<Rma>()
        .segment_size(4096)
        .endpoints(2)
        .init::<Loopback>(Box::new(Singleton::new()))
        .unwrap();
    let mut e0 = c.endpoint(0).unwrap();
    let e1 = c.endpoint(1).unwrap();
    std::thread::scope(|s| {
        s.spawn(move || {
            let p = GlobalPtr::<u64>::new(EpAddr::new(0, 1), 0);
            for i in 0..4u64 {
                e0.put(p, &[i; 4], Blocking).unwrap();
            }
        });
        s.spawn(move || {
            let mut b = [0u8; 32];
            for _ in 0..4 {
                e1.segment().read(0, &mut b).unwrap();
            }
        });
    });
}
