//! Probe (proof under Miri): the loopback conduit writes a Long payload into the
//! target endpoint's segment on the sender's thread while the target's owner reads the
//! same bytes with `Segment::read` on its own thread. Safe code only: conflicting
//! concurrent accesses, which must give unspecified bytes, not a data race. Before the
//! conduit's copy was byte-wise atomic (`gex_sync::copy::atomic_write`) Miri reported a
//! data race here. A native run proves nothing (the race is in the abstract machine),
//! so outside Miri the probe is ignored: `cargo +nightly miri test -p gex-core --test
//! long_race` (docs/soundness.md, class 4).

use gex_core::boot::Singleton;
use gex_core::loopback::Loopback;
use gex_core::{Am, Body, ClientBuilder, EpAddr, HandlerId, Token};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

const H: HandlerId = HandlerId::at(128);

#[test]
#[cfg_attr(not(miri), ignore = "proves something only under Miri")]
fn a_long_delivery_and_a_segment_read_do_not_race() {
    let c = ClientBuilder::new()
        .segment_size(4096)
        .endpoints(2)
        .init::<Loopback>(Box::new(Singleton::new()))
        .unwrap();
    let mut e0 = c.endpoint(0).unwrap();
    let mut e1 = c.endpoint(1).unwrap();
    let got = Arc::new(AtomicU32::new(0));
    let g = got.clone();
    e0.register_at(H.index(), |_t: &mut Token<'_>, _a: Am<'_>| {})
        .unwrap();
    e1.register_at(H.index(), move |_t: &mut Token<'_>, _a: Am<'_>| {
        g.fetch_add(1, Ordering::Relaxed);
    })
    .unwrap();
    std::thread::scope(|s| {
        s.spawn(move || {
            for i in 1..=3u8 {
                e0.request(EpAddr::new(0, 1), H, Body::long(&[], &[i; 27], 5))
                    .unwrap();
            }
        });
        s.spawn(move || {
            let mut b = [0u8; 40];
            for _ in 0..3 {
                e1.segment().read(0, &mut b).unwrap();
                assert!(b.iter().all(|x| [0, 1, 2, 3].contains(x)), "{b:?}");
            }
            e1.wait_until(|| got.load(Ordering::Relaxed) == 3);
        });
    });
}
