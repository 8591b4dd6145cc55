//! The messaging layer on thread ranks (`gex::boot::threads`, ranks as threads of
//! this process over the smp conduit) and on mixed jobs (2 processes of 2 thread
//! ranks each: between thread ranks of one process the rendezvous reads the sender's
//! lent buffer, between processes it reads with CMA when the host allows it, else in
//! chunks), and the sequential MPI-matching model of `model/` played on sim, smp
//! processes, thread ranks and mixed jobs.
//!
//! - `*_storm*`: every rank sends every other a stream of eager and rendezvous
//!   messages while receiving them with any-source receives (racing with arrivals
//!   from every peer); per (source, tag) the order and every byte are checked.
//! - `*_protocols*`: eager and rendezvous messages to a thread rank of the same
//!   process and to one of another process, each receive kind (posted first,
//!   unexpected, blocking), truncation (the message consumed, the sender complete),
//!   tags out of range, synchronous sends complete only after the match, persistent
//!   requests, with the single-copy path on and off (`GEX_MSG_SINGLE_COPY=0`): the
//!   counters say which path was taken.
//! - `*_model*`: random scripts of arrivals, receives and probes against the model.

mod common;
mod model;

use common::{OnRank, RankJob, settle, stats};

use gex::spi::Conduit;
use gex_core::{Client, ClientBuilder, Config, Endpoint};
use gex_msg::{Comm, Msg, MsgError, MsgExt, TAG_MAX};
use gex_testkit::exchange_barrier;
use gex_testkit::procs::Procs;

fn builder(eager: usize, single_copy: bool) -> ClientBuilder<((), Msg)> {
    ClientBuilder::new()
        .layer::<Msg>()
        .config(Config::from_pairs([
            ("GEX_MSG_EAGER_MAX", eager.to_string()),
            // Nonblocking sends between processes keep the same threshold, so
            // that the rendezvous paths these tests count are taken.
            ("GEX_MSG_NB_EAGER_MAX", eager.to_string()),
            ("GEX_MSG_SINGLE_COPY", u8::from(single_copy).to_string()),
        ]))
}

/// Ends the test process if `f` takes more than 5 minutes (a hang in an in-process
/// job must fail the run, not stall it).
fn watchdog<R>(f: impl FnOnce() -> R) -> R {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let dog = std::thread::spawn(move || {
        if rx.recv_timeout(std::time::Duration::from_secs(300))
            == Err(std::sync::mpsc::RecvTimeoutError::Timeout)
        {
            eprintln!("tests/ranks.rs: an in-process job hung for 300 s");
            std::process::abort();
        }
    });
    let r = f();
    drop(tx);
    dog.join().unwrap();
    r
}

/// Thread ranks of this process over smp.
fn threads<J: RankJob>(ranks: u32, eager: usize, single_copy: bool, job: impl Fn() -> J + Sync) {
    watchdog(|| threads_unguarded(ranks, eager, single_copy, job));
}

fn threads_unguarded<J: RankJob>(
    ranks: u32,
    eager: usize,
    single_copy: bool,
    job: impl Fn() -> J + Sync,
) {
    gex::boot::threads::run(ranks, |boot| {
        gex::init_with_boot(
            builder(eager, single_copy),
            Box::new(boot),
            Some("smp"),
            OnRank(job()),
        )
        .unwrap();
    })
    .unwrap();
}

/// `ranks` processes, one rank each, on the conduit the facade selects.
fn procs<J: RankJob>(ranks: u32, eager: usize, job: impl Fn() -> J + Sync) {
    started(ranks)
        .run(|boot| gex::init_with_boot(builder(eager, true), boot, None, OnRank(job())).unwrap())
        .assert_success();
}

/// A runner of `ranks` processes that fails a job hung for 5 minutes.
fn started(ranks: u32) -> Procs {
    Procs::new(ranks).timeout(std::time::Duration::from_secs(300))
}

/// `procs` processes of `per` thread ranks each, smp between all.
fn mixed<J: RankJob>(
    procs: u32,
    per: u32,
    eager: usize,
    single_copy: bool,
    job: impl Fn() -> J + Sync,
) {
    started(procs)
        .run(|boot| {
            let t = gex::boot::threads::ThreadJob::within(boot, per).unwrap();
            t.run(|tb| {
                gex::init_with_boot(
                    builder(eager, single_copy),
                    Box::new(tb),
                    Some("smp"),
                    OnRank(job()),
                )
                .unwrap();
            })
            .unwrap();
        })
        .assert_success();
}

struct Storm {
    eager: usize,
    single_copy: bool,
}

impl RankJob for Storm {
    fn body<C: Conduit>(self, _: &Client<C>, ep: &mut Endpoint<C>) {
        common::all_to_all(ep, 40, 3, 8, self.eager);
        let st = stats(ep);
        // Every rank received rendezvous messages (sizes eager + 1 and 1500..4500 >
        // eager): with the single copy on, from thread ranks of its own process by
        // the lent buffer (always possible), else in chunks.
        if self.single_copy {
            assert!(st.rndv_single_copy > 0, "{st:?}");
        } else {
            assert_eq!((st.rndv_single_copy, st.rndv_fallback), (0, 0), "{st:?}");
        }
    }
}

#[test]
fn threads_storm_4() {
    threads(4, 1000, true, || Storm {
        eager: 1000,
        single_copy: true,
    });
}

#[test]
fn threads_storm_3_chunks_only() {
    threads(3, 1000, false, || Storm {
        eager: 1000,
        single_copy: false,
    });
}

#[test]
fn mixed_storm_2x2() {
    mixed(2, 2, 1000, true, || Storm {
        eager: 1000,
        single_copy: true,
    });
}

/// Rank pairs (0, 1) and (2, 3): on a 2×2 mixed job the first pair are threads of one
/// process, and (0, 2), (1, 3) are in different processes; on 4 thread ranks every
/// pair shares the process.
struct Protocols {
    single_copy: bool,
}

const EAGER: usize = 512;

impl RankJob for Protocols {
    fn body<C: Conduit>(self, client: &Client<C>, ep: &mut Endpoint<C>) {
        let w = Comm::WORLD;
        let me = ep.addr().rank;
        // Two partners: the other thread of my pair, and my rank in the other pair.
        for (round, peer) in [me ^ 1, me ^ 2].into_iter().enumerate() {
            let lower = me < peer;
            for (i, n) in [0usize, 100, EAGER, EAGER + 1, 70_000]
                .into_iter()
                .enumerate()
            {
                let data = common::payload(me, round as u32, i as u32, n);
                let theirs = common::payload(peer, round as u32, i as u32, n);
                let n = data.len();
                // Posted first, then unexpected (blocking receive), both ways.
                let ev = ep.irecv(w, Some(peer), Some(1), vec![0; n]).unwrap();
                exchange_barrier(ep).unwrap();
                ep.send(w, peer, 1, &data).unwrap();
                assert_eq!(ep.wait(ev).unwrap().data, theirs);
                ep.send(w, peer, 2, &data).unwrap();
                exchange_barrier(ep).unwrap();
                let mut buf = vec![0u8; n + 5];
                let st = ep.recv(w, None, Some(2), &mut buf).unwrap();
                assert_eq!((st.source, st.len, &buf[..n]), (peer, n, &theirs[..]));
                // Truncation: the lower rank receives into a buffer one byte short;
                // the message is consumed and the sender completes.
                if n > 0 {
                    if lower {
                        let mut small = vec![0u8; n - 1];
                        let e = ep.recv(w, Some(peer), Some(3), &mut small).unwrap_err();
                        assert!(
                            matches!(e, MsgError::Truncated { len, capacity, source_rank, tag: 3 }
                                if len == n && capacity == n - 1 && source_rank == peer),
                            "{e:?}"
                        );
                        let ev = ep.irecv(w, Some(peer), Some(3), vec![0; n - 1]).unwrap();
                        assert!(matches!(ep.wait(ev), Err(MsgError::Truncated { .. })));
                    } else {
                        ep.send(w, peer, 3, &data).unwrap();
                        let s = ep.issend(w, peer, 3, &data).unwrap();
                        ep.wait(s).unwrap();
                    }
                }
                // Synchronous: not complete before the receive is posted.
                let s = ep.issend(w, peer, 4, &data).unwrap();
                for _ in 0..20 {
                    ep.poll();
                }
                assert!(!s.is_done(), "{n}: an issend completed before its match");
                exchange_barrier(ep).unwrap();
                let mut buf = vec![0u8; n];
                ep.recv(w, Some(peer), Some(4), &mut buf).unwrap();
                assert_eq!(buf, theirs);
                ep.wait(s).unwrap();
                // Persistent requests, three rounds.
                let tx = ep.send_init(w, peer, 5, i % 2 == 0).unwrap();
                let rx = ep.recv_init(w, Some(peer), Some(5)).unwrap();
                for k in 0..3u8 {
                    let r = ep.start_recv(&rx, vec![0; n]).unwrap();
                    let mut d = data.clone();
                    if let Some(b) = d.last_mut() {
                        *b = k;
                    }
                    let s = ep.start_send(&tx, &d).unwrap();
                    let got = ep.wait(r).unwrap();
                    ep.wait(s).unwrap();
                    let mut t = theirs.clone();
                    if let Some(b) = t.last_mut() {
                        *b = k;
                    }
                    assert_eq!(got.data, t);
                }
                exchange_barrier(ep).unwrap();
            }
        }
        // Tags out of range.
        let big = TAG_MAX + 1;
        assert!(
            matches!(ep.send(w, me ^ 1, big, b"x"), Err(MsgError::TagOutOfRange { tag, .. }) if tag == big)
        );
        assert!(matches!(
            ep.send(w, me ^ 1, big, &[0; 70_000]),
            Err(MsgError::TagOutOfRange { .. })
        ));
        assert!(matches!(
            ep.irecv(w, None, Some(big), vec![]),
            Err(MsgError::TagOutOfRange { .. })
        ));
        let st = settle(ep);
        assert_eq!(st.dropped, 0, "{st:?}");
        if self.single_copy {
            // From a thread of my own process, every rendezvous message is read
            // from the lent buffer; from another process by CMA if the host allows
            // (a container's seccomp profile may refuse it: then in chunks).
            let thread_peer =
                (0..client.size()).any(|r| r != me && client.layout().same_process(r, me));
            if thread_peer || gex_sync::cma::cma_capable() {
                assert!(st.rndv_single_copy > 0, "{st:?}");
            }
            if gex_sync::cma::cma_capable() {
                assert_eq!(st.rndv_fallback, 0, "{st:?}");
            }
        } else {
            assert_eq!((st.rndv_single_copy, st.rndv_fallback), (0, 0), "{st:?}");
        }
        exchange_barrier(ep).unwrap();
    }
}

#[test]
fn threads_protocols_4() {
    threads(4, EAGER, true, || Protocols { single_copy: true });
}

#[test]
fn threads_protocols_4_chunks_only() {
    threads(4, EAGER, false, || Protocols { single_copy: false });
}

#[test]
fn mixed_protocols_2x2() {
    mixed(2, 2, EAGER, true, || Protocols { single_copy: true });
}

#[test]
fn procs_protocols_4() {
    procs(4, EAGER, || Protocols { single_copy: true });
}

struct Model {
    seed: u8,
}

const MODEL_EAGER: usize = 256;

impl RankJob for Model {
    fn body<C: Conduit>(self, _: &Client<C>, ep: &mut Endpoint<C>) {
        model::play(ep, self.seed, 24, 40, MODEL_EAGER);
    }
}

#[test]
fn threads_model_4() {
    threads(4, MODEL_EAGER, true, || Model { seed: 1 });
}

#[test]
fn mixed_model_2x2() {
    mixed(2, 2, MODEL_EAGER, true, || Model { seed: 2 });
}

#[test]
fn procs_model_3() {
    procs(3, MODEL_EAGER, || Model { seed: 3 });
}

#[test]
fn sim_model_4() {
    watchdog(sim_model_runs);
}

fn sim_model_runs() {
    use gex_testkit::sim::{Delay, SimConfig, run_sim};
    for (seed, reorder) in [(4u8, true), (5, false)] {
        let cfg = SimConfig {
            seed: u64::from(seed),
            reorder,
            latency: Delay::polls(2),
            jitter: Delay::polls(3),
            max_medium: 512,
            ..SimConfig::default()
        };
        run_sim(
            4,
            cfg,
            || builder(MODEL_EAGER, true),
            |client| {
                let mut ep = client.endpoint(0).unwrap();
                model::play(&mut ep, seed, 16, 40, MODEL_EAGER);
            },
        );
    }
}

/// A bad value of `GEX_MSG_SINGLE_COPY` fails the endpoint, naming the setting.
#[test]
fn a_bad_single_copy_setting_fails_the_endpoint() {
    use gex_core::boot::Singleton;
    use gex_core::loopback::Loopback;
    let bad = ClientBuilder::new()
        .layer::<Msg>()
        .config(Config::from_pairs([("GEX_MSG_SINGLE_COPY", "sometimes")]))
        .init::<Loopback>(Box::new(Singleton::new()))
        .unwrap();
    match bad.endpoint(0) {
        Err(gex_core::EpError::Layer(e)) => {
            assert!(e.to_string().contains("GEX_MSG_SINGLE_COPY"), "{e}")
        }
        other => panic!("{other:?}"),
    }
}

/// A blocking send of a large message to a thread rank of the same process that is
/// already waiting in `recv` is read straight from the caller's buffer (the only
/// copy), in a ping-pong of 8 MiB messages; every byte is checked. (The sender waits
/// about 1 ms for the receiver before it copies, so on a loaded host only some rounds
/// may be in place: at least one of them must be.)
struct InPlace;

impl RankJob for InPlace {
    fn body<C: Conduit>(self, _: &Client<C>, ep: &mut Endpoint<C>) {
        let w = Comm::WORLD;
        let me = ep.addr().rank;
        let peer = 1 - me;
        let n = 8 << 20;
        let mut buf = vec![0u8; n];
        for round in 0..12u32 {
            let mine = common::payload(me, 0, round, n);
            if (round + me) % 2 == 0 {
                ep.send(w, peer, 0, &mine).unwrap();
            } else {
                let st = ep.recv(w, Some(peer), Some(0), &mut buf).unwrap();
                assert_eq!(st.len, n);
                assert!(buf == common::payload(peer, 0, round, n), "round {round}");
            }
        }
        let st = settle(ep);
        assert_eq!(st.rndv_single_copy, 6, "{st:?}");
        assert!(st.rndv_in_place <= 6, "{st:?}");
        // Rank 0 checks that some rounds, of either rank, were read in place.
        let mine = st.rndv_in_place.to_le_bytes();
        if me == 1 {
            ep.send(w, 0, 9, &mine).unwrap();
        } else {
            let mut b = [0u8; 8];
            ep.recv(w, Some(1), Some(9), &mut b).unwrap();
            let total = st.rndv_in_place + u64::from_le_bytes(b);
            assert!(total > 0, "no round was read in place: {st:?}");
        }
        exchange_barrier(ep).unwrap();
    }
}

#[test]
fn threads_in_place_pingpong() {
    threads(2, EAGER, true, || InPlace);
}

/// A sender that offers the single copy to a receiver that refuses it
/// (`GEX_MSG_SINGLE_COPY=0` on rank 1 only): the lent slice is withdrawn into a copy
/// when the clear-to-send comes, and the chunks come from the copy.
#[test]
fn threads_receiver_refusing_the_single_copy() {
    watchdog(|| {
        gex::boot::threads::run(2, |boot| {
            let on = gex_core::boot::Bootstrap::rank(&boot) == 0;
            gex::init_with_boot(
                builder(EAGER, on),
                Box::new(boot),
                Some("smp"),
                OnRank(Refused),
            )
            .unwrap();
        })
        .unwrap();
    });
}

struct Refused;

impl RankJob for Refused {
    fn body<C: Conduit>(self, _: &Client<C>, ep: &mut Endpoint<C>) {
        let w = Comm::WORLD;
        let me = ep.addr().rank;
        for (i, n) in [EAGER + 1, 100_000].into_iter().enumerate() {
            let data = common::payload(0, 0, i as u32, n);
            if me == 0 {
                ep.send(w, 1, 0, &data).unwrap();
                let s = ep.isend(w, 1, 1, &data).unwrap();
                ep.wait(s).unwrap();
            } else {
                let mut buf = vec![0u8; n];
                ep.recv(w, Some(0), Some(0), &mut buf).unwrap();
                assert_eq!(buf, data);
                let got = ep.irecv(w, Some(0), Some(1), vec![0; n]).unwrap();
                assert_eq!(ep.wait(got).unwrap().data, data);
            }
        }
        let st = settle(ep);
        if me == 1 {
            // Four offers (two blocking sends, two isends), each taken in chunks.
            assert_eq!((st.rndv_single_copy, st.rndv_fallback), (0, 4), "{st:?}");
        }
        assert_eq!(st.rndv_in_place, 0, "{st:?}");
        exchange_barrier(ep).unwrap();
    }
}

/// A blocking receive that waits when an eager message comes: the handler copies the
/// message straight into the receive's buffer (`landed`), unless a posted receive
/// takes it first, it is not the receive's, it is too long (left as unexpected: the
/// receive reports the truncation), or it is synchronous (acknowledged all the same).
#[test]
fn threads_eager_lands_in_a_waiting_recv() {
    threads(2, EAGER, true, || Landed);
}

struct Landed;

impl RankJob for Landed {
    fn body<C: Conduit>(self, _: &Client<C>, ep: &mut Endpoint<C>) {
        let w = Comm::WORLD;
        let me = ep.addr().rank;
        // Above the near path's 104 bytes, within the eager limit.
        let n = 300;
        let msg = |i: u32| common::payload(0, 0, i, n);
        // Time for rank 1 to be waiting in its `recv` before each message.
        let pause = || std::thread::sleep(std::time::Duration::from_millis(50));
        if me == 0 {
            exchange_barrier(ep).unwrap();
            pause();
            // To the posted any-tag receive, then to the waiting receive.
            ep.send(w, 1, 1, &msg(0)).unwrap();
            ep.send(w, 1, 1, &msg(1)).unwrap();
            pause();
            // Completes only once the landing matched it.
            ep.ssend(w, 1, 2, &msg(2)).unwrap();
            pause();
            // Not the waiting receive's tag, then its tag.
            ep.send(w, 1, 5, &msg(3)).unwrap();
            ep.send(w, 1, 4, &msg(4)).unwrap();
            pause();
            // Longer than the waiting receive's buffer.
            ep.send(w, 1, 6, &msg(5)).unwrap();
        } else {
            let posted = ep.irecv(w, Some(0), None, vec![0; n]).unwrap();
            exchange_barrier(ep).unwrap();
            let mut buf = vec![0u8; n];
            let st = ep.recv(w, Some(0), Some(1), &mut buf).unwrap();
            assert_eq!((st.source, st.tag, st.len), (0, 1, n));
            assert_eq!(buf, msg(1));
            assert_eq!(ep.wait(posted).unwrap().data, msg(0));
            let st = ep.recv(w, Some(0), Some(2), &mut buf).unwrap();
            assert_eq!((st.tag, st.len), (2, n));
            assert_eq!(buf, msg(2));
            ep.recv(w, Some(0), Some(4), &mut buf).unwrap();
            assert_eq!(buf, msg(4));
            ep.recv(w, Some(0), Some(5), &mut buf).unwrap();
            assert_eq!(buf, msg(3));
            let mut short = vec![0u8; n - 1];
            let err = ep.recv(w, Some(0), Some(6), &mut short).unwrap_err();
            assert!(
                matches!(err, MsgError::Truncated { len, .. } if len == n),
                "{err:?}"
            );
            let st = stats(ep);
            // Messages 1, 2 and 4 landed; 0 went to the posted receive, 3 and 5 were
            // unexpected.
            assert_eq!((st.landed, st.matched_posted), (3, 1), "{st:?}");
        }
        settle(ep);
    }
}
