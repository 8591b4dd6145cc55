//! Shared by the simulator and multi-process tests: an all-to-all message storm
//! received with any-source receives, checked against the sending order.
#![allow(dead_code)]

use gex_core::spi::Conduit;
use gex_core::{Client, Endpoint, Event};
use gex_msg::{Comm, Msg, MsgError, MsgExt, MsgStats, Received};
use gex_testkit::exchange_barrier;

/// The body of a job run on endpoint 0 of every rank (see [`OnRank`]).
pub(crate) trait RankJob {
    /// Runs on endpoint `ep` of `client`.
    fn body<C: Conduit>(self, client: &Client<C>, ep: &mut Endpoint<C>);
}

/// A [`RankJob`] as a job: opens endpoint 0, runs the body on it, then drops the
/// endpoint and finalizes the client.
pub(crate) struct OnRank<J>(pub J);

impl<J: RankJob> gex::Job for OnRank<J> {
    type Output = ();
    fn run<C: Conduit>(self, client: Client<C>) {
        let mut ep = client.endpoint(0).unwrap();
        self.0.body(&client, &mut ep);
        drop(ep);
        client.finalize().unwrap();
    }
}

/// The layer's counters on `ep`.
pub(crate) fn stats<C: Conduit>(ep: &mut Endpoint<C>) -> MsgStats {
    gex_core::layer::with::<Msg, _, _>(ep, |m, _| m.stats()).unwrap()
}

/// A barrier, then the wait until the layer is quiet (asserted), then a second barrier;
/// returns its counters. The second barrier keeps every rank from sending again until
/// every rank has seen its layer quiet: without it a rank that settled first could send
/// its next message before a slower one looked, and the slower one's layer, holding
/// that message unmatched, would never be quiet (seen once in 37 runs of
/// `tests/ranks.rs` beside `ci/miri.sh`: `threads_in_place_pingpong` hung).
pub(crate) fn settle<C: Conduit>(ep: &mut Endpoint<C>) -> MsgStats {
    exchange_barrier(ep).unwrap();
    assert!(gex_core::layer::wait_until::<Msg, _>(ep, Msg::is_quiet));
    let st = stats(ep);
    exchange_barrier(ep).unwrap();
    st
}

/// Message `i` of `src` with tag `tag`: its length and bytes (the first 8 bytes are
/// (src, i), then a pattern).
pub(crate) fn payload(src: u32, tag: u32, i: u32, len: usize) -> Vec<u8> {
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

pub(crate) fn check(
    got: &Received,
    next: &mut [Vec<u32>],
    tags: u32,
    plan: &dyn Fn(u32, u32) -> usize,
) {
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
pub(crate) fn all_to_all<C: Conduit>(
    ep: &mut Endpoint<C>,
    per_peer: u32,
    tags: u32,
    early: usize,
    eager: usize,
) {
    let w = Comm::WORLD;
    let (me, n) = (ep.addr().rank, ep.world().size());
    let plan = move |src: u32, i: u32| -> usize {
        match (i + src) % 5 {
            0 => 0,
            1 => 17,
            2 => eager,
            3 => eager + 1,
            _ => 1500 + (i as usize * 97) % 3000,
        }
    };
    let cap = 8192.max(2 * eager + 16);
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
