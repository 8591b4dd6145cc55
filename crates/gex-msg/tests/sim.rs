//! The messaging layer on gex-testkit's simulated fabric: 2–4 thread ranks, with
//! reordering and delays, small Medium limits (rendezvous in many chunks).
//!
//! - `any_source_races_every_peer`: every rank sends to every other rank a stream of
//!   messages of mixed sizes (eager and rendezvous) and tags, while each receiver
//!   takes them with any-source receives (some posted before the traffic, most
//!   racing with it), then with specific ones; per (source, tag) the sequence numbers
//!   in the payloads must come in sending order, and every message exactly once.
//! - `ring_sendrecv_and_ssend`: sendrecv around a ring, then synchronous ping-pong.
//! - `prop_random_traffic`: random traffic patterns and seeds against the model
//!   (every message received exactly once, in order per (source, tag, context)).

mod common;

use common::{all_to_all, payload};
use gex_core::{ClientBuilder, Config};
use gex_msg::{Comm, Msg, MsgExt};
use gex_testkit::exchange_barrier;
use gex_testkit::sim::{Delay, SimConfig, run_sim};
use proptest::prelude::*;

fn cfg(seed: u64, reorder: bool) -> SimConfig {
    SimConfig {
        seed,
        reorder,
        latency: Delay::polls(2),
        jitter: Delay::polls(3),
        max_medium: 512,
        ..SimConfig::default()
    }
}

fn builder(eager: usize) -> impl Fn() -> ClientBuilder<((), Msg)> {
    move || {
        ClientBuilder::new()
            .layer::<Msg>()
            .config(Config::from_pairs([(
                "GEX_MSG_EAGER_MAX",
                eager.to_string(),
            )]))
    }
}

#[test]
fn any_source_races_every_peer() {
    for (ranks, seed, reorder, early) in [
        (2, 1, false, 0),
        (3, 2, true, 5),
        (4, 3, true, 40),
        (4, 4, false, 3),
    ] {
        run_sim(ranks, cfg(seed, reorder), builder(100), |client| {
            let mut ep = client.endpoint(0).unwrap();
            all_to_all(&mut ep, 30, 3, early, 100);
        });
    }
}

#[test]
fn ring_sendrecv_and_ssend() {
    run_sim(4, cfg(9, true), builder(64), |client| {
        let mut ep = client.endpoint(0).unwrap();
        let w = Comm::WORLD;
        let (me, n) = (ep.addr().rank, 4u32);
        for len in [5usize, 64, 65, 3000] {
            let out = payload(me, 1, 0, len);
            let mut buf = vec![0u8; len.max(8)];
            let from = (me + n - 1) % n;
            let st = ep
                .sendrecv(w, (me + 1) % n, 1, &out, Some(from), Some(1), &mut buf)
                .unwrap();
            assert_eq!((st.source, st.len), (from, len.max(8)));
            assert_eq!(buf, payload(from, 1, 0, len));
        }
        // Synchronous ping-pong between pairs (0,1) and (2,3); specific receives.
        let peer = me ^ 1;
        for (round, len) in [10usize, 5000].into_iter().enumerate() {
            let mut buf = vec![0u8; len];
            if me % 2 == 0 {
                ep.ssend(w, peer, 2, &vec![round as u8; len]).unwrap();
                ep.recv(w, Some(peer), Some(3), &mut buf).unwrap();
            } else {
                ep.recv(w, Some(peer), Some(2), &mut buf).unwrap();
                ep.ssend(w, peer, 3, &buf).unwrap();
            }
            assert_eq!(buf, vec![round as u8; len]);
        }
        exchange_barrier(&mut ep).unwrap();
        assert!(gex_core::layer::wait_until::<Msg, _>(
            &mut ep,
            Msg::is_quiet
        ));
        exchange_barrier(&mut ep).unwrap();
    });
}

/// The layer after gex-rma (as `ClientBuilder::new().layer::<Rma>().layer::<Msg>()`
/// and the facade attach it), on two endpoints per rank: traffic of endpoint 1 never
/// matches receives of endpoint 0 (a message goes to the endpoint of the same index).
/// Each endpoint makes progress only while it is polled, so a rendezvous in the
/// background of endpoint 1 is finished before the thread waits on endpoint 0.
#[test]
fn after_rma_on_two_endpoints() {
    run_sim(
        3,
        cfg(5, true),
        || {
            ClientBuilder::new()
                .layer::<gex_rma::Rma>()
                .layer::<Msg>()
                .endpoints(2)
                .config(Config::from_pairs([("GEX_MSG_EAGER_MAX", "64")]))
        },
        |client| {
            let mut e0 = client.endpoint(0).unwrap();
            let mut e1 = client.endpoint(1).unwrap();
            assert_eq!(e0.layers(), ["rma", "msg"]);
            let w = Comm::WORLD;
            let (me, n) = (e0.addr().rank, 3u32);
            let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
            for len in [10usize, 1000] {
                let zero = payload(me, 0, 0, len);
                let one = payload(me, 1, 1, len);
                let s0 = e0.isend(w, next, 1, &zero).unwrap();
                let mut buf = vec![0u8; len.max(8)];
                let st = e1.sendrecv(w, next, 1, &one, None, None, &mut buf).unwrap();
                assert_eq!((st.source, &buf), (prev, &payload(prev, 1, 1, len)));
                // The rendezvous send of endpoint 1 is complete (the layer has the
                // bytes) but its bytes move only while endpoint 1 is polled: finish
                // it before this thread turns to endpoint 0 (per-endpoint progress).
                // (Not `is_quiet`: a peer may already have sent the next round.)
                assert!(gex_core::layer::wait_until::<Msg, _>(&mut e1, |m| {
                    m.sends_in_flight() == 0
                }));
                let st = e0.recv(w, None, None, &mut buf).unwrap();
                assert_eq!((st.source, &buf), (prev, &payload(prev, 0, 0, len)));
                e0.wait(s0).unwrap();
            }
            exchange_barrier(&mut e0).unwrap();
            for ep in [&mut e0, &mut e1] {
                assert!(gex_core::layer::wait_until::<Msg, _>(ep, Msg::is_quiet));
            }
            exchange_barrier(&mut e0).unwrap();
        },
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    #[test]
    fn prop_random_traffic(
        ranks in 2u32..=4,
        seed in any::<u64>(),
        reorder in any::<bool>(),
        per_peer in 1u32..25,
        tags in 1u32..4,
        early in 0usize..20,
        eager in prop_oneof![Just(0usize), Just(32), Just(400)],
    ) {
        run_sim(ranks, cfg(seed, reorder), builder(eager), |client| {
            let mut ep = client.endpoint(0).unwrap();
            all_to_all(&mut ep, per_peer, tags, early, eager);
        });
    }
}
