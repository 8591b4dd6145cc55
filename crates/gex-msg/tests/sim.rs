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

use gex_core::{ClientBuilder, Config, Endpoint, Event};
use gex_msg::{Comm, Msg, MsgError, MsgExt, Received};
use gex_testkit::exchange_barrier;
use gex_testkit::sim::{Delay, Sim, SimConfig, run_sim};
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

/// Message `i` of `src` with tag `tag`: its length and bytes (the first 8 bytes are
/// (src, i), then a pattern).
fn payload(src: u32, tag: u32, i: u32, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len.max(8))
        .map(|k| {
            (k as u32)
                .wrapping_mul(7)
                .wrapping_add(src * 13 + tag * 5 + i) as u8
        })
        .collect();
    v[..4].copy_from_slice(&src.to_le_bytes());
    v[4..8].copy_from_slice(&i.to_le_bytes());
    v
}

fn check(got: &Received, next: &mut [Vec<u32>], tags: u32, plan: &dyn Fn(u32, u32) -> usize) {
    let (s, t) = (got.status.source, got.status.tag);
    assert!(t < tags, "tag {t}");
    let src = u32::from_le_bytes(got.data[..4].try_into().unwrap());
    let i = u32::from_le_bytes(got.data[4..8].try_into().unwrap());
    assert_eq!(src, s, "status source");
    let want = &mut next[s as usize][t as usize];
    assert_eq!(
        i, *want,
        "from {s} tag {t}: message {i} overtook or repeated (expected {want})"
    );
    *want += 1;
    assert_eq!(
        got.data,
        payload(s, t, i, plan(s, i)),
        "bytes of message {i} from {s}"
    );
}

/// Every rank sends `per_peer` messages to every other (sizes from `plan`), tags
/// `i % tags`; receives them all with any-source receives, posted `early` ahead.
fn all_to_all(ep: &mut Endpoint<Sim>, per_peer: u32, tags: u32, early: usize, eager: usize) {
    let w = Comm::WORLD;
    let (me, n) = (ep.addr().rank, ep.world().size() as u32);
    let plan = move |src: u32, i: u32| -> usize {
        match (i + src) % 5 {
            0 => 0,
            1 => 17,
            2 => eager,
            3 => eager + 1,
            _ => 1500 + (i as usize * 97) % 3000,
        }
    };
    let cap = 8192;
    let total = (per_peer * (n - 1)) as usize;
    let mut posted: std::collections::VecDeque<Event<Received, MsgError>> = (0..early.min(total))
        .map(|_| ep.irecv(w, None, None, vec![0; cap]).unwrap())
        .collect();
    exchange_barrier(ep).unwrap();
    let mut next = vec![vec![0u32; tags as usize]; n as usize];
    let mut sends = Vec::new();
    let mut received = 0;
    for i in 0..per_peer {
        for k in 1..n {
            let dst = (me + k) % n;
            let t = i % tags;
            // Tag streams: message number per (source, tag) is i / tags.
            let d = payload(me, t, i / tags, plan(me, i / tags));
            sends.push(ep.isend(w, dst, t, &d).unwrap());
        }
        // Take what has arrived meanwhile.
        while let Some(ev) = posted.front() {
            if !ep.test(ev).unwrap() {
                break;
            }
            let got = ep.wait(posted.pop_front().unwrap()).unwrap();
            check(&got, &mut next, tags, &|s, i| plan(s, i).max(8));
            received += 1;
        }
        if posted.len() + received < total {
            posted.push_back(ep.irecv(w, None, None, vec![0; cap]).unwrap());
        }
    }
    while posted.len() + received < total {
        posted.push_back(ep.irecv(w, None, None, vec![0; cap]).unwrap());
    }
    for ev in posted {
        let got = ep.wait(ev).unwrap();
        check(&got, &mut next, tags, &|s, i| plan(s, i).max(8));
        received += 1;
    }
    assert_eq!(received, total);
    for ev in sends {
        ep.wait(ev).unwrap();
    }
    exchange_barrier(ep).unwrap();
    assert!(gex_core::layer::wait_until::<Msg, _>(ep, Msg::is_quiet));
    let st = gex_core::layer::with::<Msg, _, _>(ep, |m, _| m.stats()).unwrap();
    assert_eq!(st.dropped, 0);
    exchange_barrier(ep).unwrap();
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
