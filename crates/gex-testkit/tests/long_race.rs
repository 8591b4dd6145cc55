//! Probes (proof under Miri): the simulated fabric delivers Long payloads and native
//! puts into a rank's segment on the sender's thread while that rank reads the same
//! bytes with `Segment::read` on its own thread. Safe code only: conflicting
//! concurrent accesses, which must give unspecified bytes, not a data race. Before the
//! fabric's copies were byte-wise atomic (`gex_sync::copy`) Miri reported a data race
//! here. A native run proves nothing (the race is in the abstract machine), so outside
//! Miri the probes are ignored: `cargo +nightly miri test -p gex-testkit --test
//! long_race` (docs/soundness.md, class 4).

use gex_core::{Am, Body, ClientBuilder, EpAddr, HandlerId, Token};
use gex_testkit::sim::{SimConfig, run_sim};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

const H: HandlerId = HandlerId::at(128);

#[test]
#[cfg_attr(not(miri), ignore = "proves something only under Miri")]
fn a_long_delivery_and_a_segment_read_do_not_race() {
    run_sim(
        2,
        SimConfig::default(),
        || ClientBuilder::new().segment_size(4096),
        |client| {
            let mut ep = client.endpoint(0).unwrap();
            let got = Arc::new(AtomicU32::new(0));
            let g = got.clone();
            ep.register_at(H.index(), move |_t: &mut Token<'_>, _a: Am<'_>| {
                g.fetch_add(1, Ordering::Relaxed);
            })
            .unwrap();
            gex_testkit::exchange_barrier(&mut ep).unwrap();
            if client.rank() == 1 {
                for i in 1..=3u8 {
                    ep.request(EpAddr::rank(0), H, Body::long(&[], &[i; 27], 5))
                        .unwrap();
                }
            } else {
                let mut b = [0u8; 40];
                for _ in 0..3 {
                    ep.segment().read(0, &mut b).unwrap();
                    assert!(b.iter().all(|x| [0, 1, 2, 3].contains(x)), "{b:?}");
                }
                ep.wait_until(|| got.load(Ordering::Relaxed) == 3);
            }
            gex_testkit::exchange_barrier(&mut ep).unwrap();
        },
    );
}

#[cfg(feature = "rma")]
#[test]
#[cfg_attr(not(miri), ignore = "proves something only under Miri")]
fn a_native_put_and_a_segment_read_do_not_race() {
    // One rank per host: the simulated NIC serves only other hosts.
    let cfg = SimConfig::default().ranks_per_host(1).native(true, false);
    run_sim(
        2,
        cfg,
        || gex_testkit::rma::client_builder().segment_size(4096),
        |client| {
            use gex_rma::{GlobalPtr, RmaExt};
            let mut ep = client.endpoint(0).unwrap();
            gex_testkit::exchange_barrier(&mut ep).unwrap();
            if client.rank() == 1 {
                let p = GlobalPtr::<u8>::new(EpAddr::rank(0), 5);
                for i in 1..=3u8 {
                    ep.put(p, &[i; 27], gex_core::Blocking).unwrap();
                }
                let puts = gex_core::layer::with::<gex_rma::Rma, _, _>(&mut *ep, |_, cx| {
                    cx.conduit().native_counts().puts
                })
                .unwrap();
                assert_eq!(puts, 3, "the puts took the simulated NIC");
            } else {
                let mut b = [0u8; 40];
                for _ in 0..3 {
                    ep.segment().read(0, &mut b).unwrap();
                    assert!(b.iter().all(|x| [0, 1, 2, 3].contains(x)), "{b:?}");
                }
            }
            gex_testkit::exchange_barrier(&mut ep).unwrap();
        },
    );
}
