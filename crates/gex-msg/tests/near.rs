//! The near path (queues in the receiver's auxiliary area, `gex_msg::near`) on thread
//! ranks (gex-testkit's simulated fabric with shared memory) and on smp processes
//! (gex-testkit's process runner): small standard sends take the queues; a queue
//! filled by a receiver that does not receive sends the rest by the AM path, and the
//! receiver still gets every message once, in sending order per (source, tag), with
//! specific, any-tag and any-source receives, receives posted before the traffic, and
//! probes; messages above the slot size and synchronous sends take the AM path between
//! the same pair. A lying peer's head word and slot length are refused without
//! losing the honest messages around them.
#![allow(unsafe_code)] // `lying_peer_is_refused` writes a peer's area as a liar would.

use gex::Job;
use gex::spi::Conduit;
use gex_core::EpAddr;
use gex_core::{Client, ClientBuilder, Endpoint};
use gex_msg::near::{PAYLOAD_MAX, QUEUE_WORDS, Queue, SLOTS};
use gex_msg::{Comm, Msg, MsgExt, MsgStats};
use gex_sync::atomic::{AtomicU64, Ordering};
use gex_testkit::exchange_barrier;
use gex_testkit::procs::Procs;
use gex_testkit::sim::{Delay, Sim, SimConfig, run_sim};

const W: Comm = Comm::WORLD;
/// Messages each sender floods the receiver with: several times a queue.
const FLOOD: u32 = 3 * SLOTS as u32 + 5;

fn stats<C: Conduit>(ep: &mut Endpoint<C>) -> MsgStats {
    gex_core::layer::with::<Msg, _, _>(ep, |m, _| m.stats()).unwrap()
}

/// Message `i` of `src`: the first `2 * SLOTS` fit a slot (so the queue surely fills:
/// nothing else reaches the receiver, whose progress hook then has no reason to drain
/// it), then lengths cycle on both sides of the slot size; it starts with `i` and
/// `src` and is filled with `i`.
fn msg(src: u32, i: u32) -> Vec<u8> {
    let len = if i < 2 * SLOTS as u32 {
        [8, PAYLOAD_MAX, 64][i as usize % 3]
    } else {
        [8, PAYLOAD_MAX, PAYLOAD_MAX + 1, 300, 8, 64][i as usize % 6]
    };
    let mut v = vec![i as u8; len];
    v[..4].copy_from_slice(&i.to_le_bytes());
    v[4..8].copy_from_slice(&src.to_le_bytes());
    v
}

fn index(b: &[u8]) -> (u32, u32) {
    let w = |k: usize| u32::from_le_bytes([b[k], b[k + 1], b[k + 2], b[k + 3]]);
    (w(0), w(4))
}

fn body<C: Conduit>(ep: &mut Endpoint<C>, n: u32) {
    let me = ep.addr().rank;
    // 1. An 8-byte ping-pong between 0 and 1 (blocking calls).
    let mut b8 = [0u8; 8];
    for i in 0..100u64 {
        if me == 0 {
            ep.send(W, 1, 1, &i.to_le_bytes()).unwrap();
            let st = ep.recv(W, Some(1), Some(1), &mut b8).unwrap();
            assert_eq!((st.source, st.len, u64::from_le_bytes(b8)), (1, 8, i + 1));
        } else if me == 1 {
            let st = ep.recv(W, Some(0), Some(1), &mut b8).unwrap();
            assert_eq!((st.source, u64::from_le_bytes(b8)), (0, i));
            ep.send(W, 0, 1, &(i + 1).to_le_bytes()).unwrap();
        }
    }
    let s = stats(ep);
    if me < 2 {
        assert!(s.near_sent >= 100 && s.near_received >= 100, "{s:?}");
    }
    exchange_barrier(ep).unwrap();

    // 2. Every other rank floods rank 1, which does not receive meanwhile: queues
    //    fill, senders fall back to the AM path. Tags: 2 for even i, 3 for odd i;
    //    one synchronous send in the middle. Rank 1 stays out of gex while the others
    //    flood (a sleep, no poll): polling, even inside the barrier, drains its queues
    //    into the unexpected queue, and a rank 1 that polled as fast as the senders
    //    sent would keep them from ever filling (seen under CI load). The flood needs
    //    nothing of rank 1 (its rings hold every fallback message), so the senders
    //    finish it well within the sleep.
    if me == 1 {
        std::thread::sleep(std::time::Duration::from_millis(400));
    }
    if me != 1 {
        let mut evs = Vec::new();
        for i in 0..FLOOD {
            let tag = 2 + i % 2;
            if i == FLOOD / 2 {
                evs.push(ep.issend(W, 1, tag, &msg(me, i)).unwrap());
            } else {
                ep.send(W, 1, tag, &msg(me, i)).unwrap();
            }
        }
        // The barrier lets the synchronous send be matched (rank 1 receives after it).
        exchange_barrier(ep).unwrap();
        for e in evs {
            ep.wait(e).unwrap();
        }
        let s = stats(ep);
        assert!(s.near_full > 0, "the queue never filled: {s:?}");
        assert!(s.eager_sent > 0 && s.near_sent > 0, "{s:?}");
    } else {
        exchange_barrier(ep).unwrap();
        let mut next = vec![[0u32, 1u32]; n as usize];
        let mut check = |buf: &[u8], src: u32, tag: u32, len: usize| {
            let (i, s) = index(buf);
            assert_eq!(s, src);
            assert_eq!(buf[..len], msg(src, i)[..], "message {i} of {src}");
            let k = (tag - 2) as usize;
            assert_eq!(i, next[src as usize][k], "order of ({src}, {tag})");
            next[src as usize][k] += 2;
        };
        let mut buf = vec![0u8; 400];
        // A receive posted first takes the first message of its kind.
        let posted = ep.irecv(W, Some(0), Some(3), vec![0; 400]).unwrap();
        let got = ep.wait(posted).unwrap();
        check(&got.data, 0, 3, got.status.len);
        // Tag 2 of rank 0 by specific receives, probing first.
        for _ in (0..FLOOD).step_by(2) {
            let p = ep.probe(W, Some(0), Some(2)).unwrap();
            let st = ep.recv(W, Some(0), Some(2), &mut buf).unwrap();
            assert_eq!(p, st);
            check(&buf, 0, 2, st.len);
        }
        // The rest (tag 3 of rank 0, everything of the others) by any-source,
        // any-tag receives.
        let rest = (FLOOD - FLOOD.div_ceil(2) - 1) + (n - 2) * FLOOD;
        for _ in 0..rest {
            let st = ep.recv(W, None, None, &mut buf).unwrap();
            check(&buf, st.source, st.tag, st.len);
        }
        let extra = ep.iprobe(W, None, None).unwrap();
        assert_eq!(extra, None, "{:?}", stats(ep));
        let s = stats(ep);
        assert!(s.near_received > 0 && s.dropped == 0, "{s:?}");
    }
    exchange_barrier(ep).unwrap();
    assert!(gex_core::layer::wait_until::<Msg, _>(ep, Msg::is_quiet));
    exchange_barrier(ep).unwrap();
}

/// Runs `f` on endpoint 0 of each of `ranks` thread ranks of the simulated fabric
/// `cfg`, with the messaging layer.
fn on_sim(ranks: u32, cfg: SimConfig, f: impl Fn(Box<Endpoint<Sim>>) + Send + Sync) {
    run_sim(
        ranks,
        cfg,
        || ClientBuilder::new().layer::<Msg>(),
        |client| f(client.endpoint(0).unwrap()),
    );
}

/// On thread ranks, with an AM path that keeps order and with one that reorders and
/// delays (AM messages then overtake queued ones and wait for them in `Reorder`).
#[test]
fn near_thread_ranks() {
    let reordering = SimConfig {
        seed: 11,
        reorder: true,
        latency: Delay::polls(2),
        jitter: Delay::polls(5),
        ..SimConfig::default()
    };
    for cfg in [SimConfig::default(), reordering] {
        for n in [2, 3] {
            on_sim(n, cfg.clone(), move |mut ep| {
                body(&mut ep, n);
            });
        }
    }
}

/// Without shared memory there are no queues: everything takes the AM path.
#[test]
fn no_shared_memory_no_near_path() {
    let cfg = SimConfig {
        shared_memory: false,
        ..SimConfig::default()
    };
    on_sim(2, cfg, |mut ep| {
        let me = ep.addr().rank;
        ep.send(W, 1 - me, 1, b"hi").unwrap();
        let mut b = [0u8; 2];
        ep.recv(W, Some(1 - me), Some(1), &mut b).unwrap();
        assert_eq!(&b, b"hi");
        let s = stats(&mut ep);
        assert_eq!((s.near_sent, s.near_received, s.eager_sent), (0, 0, 1));
        exchange_barrier(&mut ep).unwrap();
    });
}

/// Word `k` of the layer's slice of `rank`'s auxiliary area (endpoint 0), as a liar
/// sharing the memory would write it.
fn area_word<C: Conduit>(ep: &mut Endpoint<C>, rank: u32, k: usize) -> &'static AtomicU64 {
    let p = gex_core::layer::with::<Msg, _, _>(ep, |_, cx| cx.aux(EpAddr { rank, ep: 0 }))
        .unwrap()
        .expect("the area is mapped");
    assert!(k < gex_msg::near::AREA_BYTES / 8);
    // SAFETY: the layer's slice holds `AREA_BYTES` bytes, 64-byte aligned, and lives as
    // long as the simulated fabric (the whole `run_sim` call, longer than the test's
    // use of the word); every access to it is atomic.
    unsafe { &*p.as_ptr().cast::<AtomicU64>().add(k) }
}

/// A lying peer: rank 1 writes a `head` word no consumer could have written into the
/// queue rank 0 sends through (rank 0 refuses it and sends by AM once the queue seems
/// full); then rank 0 garbles the length of a message it queued (rank 1 drops it and
/// still receives the next one, whose sequence number follows the dropped one's).
#[test]
fn lying_peer_is_refused() {
    on_sim(2, SimConfig::default(), |mut ep| {
        let me = ep.addr().rank;
        // Both ranks' host-local index is their rank: rank 0 writes queue 0 of rank 1.
        if me == 1 {
            area_word(&mut ep, 1, 0).store(u64::MAX, Ordering::Relaxed);
        }
        exchange_barrier(&mut ep).unwrap();
        if me == 0 {
            for i in 0..=SLOTS as u8 {
                ep.send(W, 1, 5, &[i; 8]).unwrap();
            }
            let s = stats(&mut ep);
            assert_eq!(
                (s.near_sent, s.near_refused, s.eager_sent),
                (SLOTS as u64, 1, 1)
            );
        }
        exchange_barrier(&mut ep).unwrap();
        let mut b = [0u8; 8];
        if me == 1 {
            for i in 0..=SLOTS as u8 {
                ep.recv(W, Some(0), Some(5), &mut b).unwrap();
                assert_eq!(b, [i; 8]);
            }
        }
        exchange_barrier(&mut ep).unwrap();
        if me == 0 {
            // Message number SLOTS of the pair: slot 0 again; its word 1 holds the
            // length (low half) and the tag.
            ep.send(W, 1, 6, &[0xaa; 8]).unwrap();
            area_word(&mut ep, 1, Queue::words_for(0) + 1).store(u64::MAX, Ordering::Relaxed);
            ep.send(W, 1, 6, &[0xbb; 8]).unwrap();
            assert_eq!(stats(&mut ep).near_sent, SLOTS as u64 + 2);
        }
        exchange_barrier(&mut ep).unwrap();
        if me == 1 {
            let st = ep.recv(W, Some(0), None, &mut b).unwrap();
            assert_eq!((st.tag, b), (6, [0xbb; 8]));
            assert_eq!(ep.iprobe(W, None, None).unwrap(), None);
            assert_eq!(stats(&mut ep).dropped, 1);
        }
        exchange_barrier(&mut ep).unwrap();
        assert_eq!(QUEUE_WORDS, Queue::words_for(SLOTS));
    });
}

struct Near(u32);

impl Job for Near {
    type Output = ();
    fn run<C: Conduit>(self, client: Client<C>) {
        let mut ep = client.endpoint(0).unwrap();
        body(&mut ep, self.0);
        drop(ep);
        client.finalize().unwrap();
    }
}

/// One job per test: the runner re-runs the test in every child process, so a test
/// must start exactly one job.
fn procs(n: u32) {
    Procs::new(n)
        .timeout(std::time::Duration::from_secs(120))
        .run(move |boot| {
            let b = ClientBuilder::new().layer::<Msg>();
            gex::init_with_boot(b, boot, None, Near(n)).unwrap();
        })
        .assert_success();
}

#[test]
fn near_smp_processes_2() {
    procs(2);
}

#[test]
fn near_smp_processes_3() {
    procs(3);
}
