//! `Hybrid<Near, Far>` over two mock conduits (`mock`: neither smp nor ofi, so the
//! hybrid conduit is shown to rely on the contract of gex-core's SPI only), with
//! thread ranks on two simulated hosts:
//! - the core conformance suite, hybrid (2 + 2 ranks, 1 and 2 endpoints), forced on
//!   one host (`GEX_HYBRID=1`), and off (`GEX_HYBRID=0`: the far part alone);
//! - which part carries each peer's AMs and replies, counted by the hybrid conduit
//!   and by the parts;
//! - the far part's poll schedule (doubling intervals while idle, every poll after a
//!   request to another host), `block` napping on the near part, the far part opened
//!   on the near part's segments (a native put from another host lands where the
//!   neighbours read), the mode agreed by every rank, finalisation nesting.
//!
//! Exclusions: `back_pressure` (the mock parts' queues are unbounded, so a non-waiting
//! flood never reports WouldBlock).
//!
//! # Safety
//! One test calls a native put and reads a neighbour's mapped segment directly (the
//! conduit contract's own operations); each block says why it is sound.
#![allow(unsafe_code)]

mod mock;

use gex_conduit_hybrid::{FAR_POLL_MAX, Hybrid, NAP};
use gex_core::boot::Bootstrap;
use gex_core::spi::{Conduit, ConduitEp, Native, SegRange};
use gex_core::{Am, Body, Client, Config, EpAddr, HandlerId, Token, WaitPolicy};
use gex_testkit::boot::ThreadJob;
use gex_testkit::conformance::{self, Case, Job, Probe};
use gex_testkit::exchange_barrier;
use gex_testkit::tamper::Tampered;
use mock::{Fabric, MockFar, MockNear};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

type H = Hybrid<MockNear, MockFar>;

/// Longest a test job may run before the process is aborted (a hang is never an option).
const JOB_LIMIT: Duration = Duration::from_secs(120);

/// Runs `f` on every rank of a job of thread ranks on hosts `hosts`, with `eps`
/// endpoints and rank `r`'s settings `config(r)`; returns each rank's result (an
/// initialisation error or a panic as text). The clients carry the conformance
/// suite's probe layer ([`conformance::builder`]): the suite needs it, and the tests
/// here reach the conduit endpoint through it ([`conduit_ep`]).
fn run_job<R: Send>(
    hosts: Vec<u32>,
    eps: u16,
    config: impl Fn(u32) -> Config + Sync,
    f: impl Fn(&Client<H>, &Fabric) -> R + Sync,
) -> Vec<Result<R, String>> {
    run_job_boot(hosts, eps, config, |_, b| b, f)
}

/// [`run_job`], with rank `r`'s bootstrap `boot(r, its thread bootstrap)`.
fn run_job_boot<R: Send>(
    hosts: Vec<u32>,
    eps: u16,
    config: impl Fn(u32) -> Config + Sync,
    boot: impl Fn(u32, Box<dyn Bootstrap>) -> Box<dyn Bootstrap> + Sync,
    f: impl Fn(&Client<H>, &Fabric) -> R + Sync,
) -> Vec<Result<R, String>> {
    let n = hosts.len() as u32;
    let job = ThreadJob::with_hosts_and_timeout(hosts, Duration::from_secs(60));
    let fabric = Arc::new(Fabric::default());
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let d = done.clone();
    std::thread::spawn(move || {
        let t0 = Instant::now();
        while !d.load(Ordering::Relaxed) {
            if t0.elapsed() > JOB_LIMIT {
                eprintln!("mock_parts: a job is still running after {JOB_LIMIT:?}; aborting");
                std::process::abort();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    let out = std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|r| {
                let (job, fabric, config, f, boot) = (&job, &fabric, &config, &f, &boot);
                s.spawn(move || {
                    let res = catch_unwind(AssertUnwindSafe(|| {
                        let client = conformance::builder()
                            .config(config(r))
                            .segment_size(64 << 10)
                            .endpoints(eps)
                            .conduit_context(Arc::new(fabric.clone()))
                            .init::<H>(boot(r, Box::new(job.boot(r))))
                            .map_err(|e| e.to_string())?;
                        let out = f(&client, fabric);
                        client.finalize().map_err(|e| e.to_string())?;
                        Ok(out)
                    }));
                    let res = res.unwrap_or_else(|p| {
                        let msg = p
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_default();
                        Err(format!("rank {r} panicked: {msg}"))
                    });
                    // A panicking rank would leave its peers waiting for it: end the
                    // job's collectives. (An initialisation error is every rank's here.)
                    if let Err(e) = &res {
                        if e.contains(" panicked: ") {
                            job.poison(e);
                        }
                    }
                    res
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("rank thread"))
            .collect()
    });
    done.store(true, Ordering::Relaxed);
    out
}

/// The first error of a job, if any.
fn first_error<R>(results: Vec<Result<R, String>>) -> Result<Vec<R>, String> {
    results.into_iter().collect()
}

/// Runs `f` with the hybrid conduit endpoint under `ep` (reached through the probe
/// layer every client of [`run_job`] carries).
fn conduit_ep<R>(
    ep: &mut gex_core::Endpoint<H>,
    f: impl FnOnce(&mut gex_conduit_hybrid::HybridEp<MockNear, MockFar>) -> R,
) -> R {
    gex_core::layer::with::<Probe, _, _>(&mut *ep, |_, cx| {
        // SAFETY: the conduit endpoint is lent to `f`, which neither moves nor keeps it.
        f(unsafe { cx.conduit_mut() })
    })
    .expect("the clients of run_job carry the probe layer")
}

/// Two hosts: the first half of the ranks on host 0, the others on host 1.
fn two_hosts(ranks: u32) -> Vec<u32> {
    (0..ranks).map(|r| u32::from(r >= ranks / 2)).collect()
}

fn settings(pairs: &[(&'static str, &'static str)]) -> Config {
    Config::from_pairs(pairs.iter().copied())
}

/// A conformance runner: `hosts(ranks)` places the ranks, `pairs` are every rank's
/// settings.
fn runner(
    job: &Job<'_>,
    case: &Case<H>,
    hosts: fn(u32) -> Vec<u32>,
    pairs: &'static [(&'static str, &'static str)],
) -> Result<(), String> {
    let r = run_job(
        hosts(job.ranks),
        job.endpoints,
        |_| settings(pairs),
        |client, _| conformance::run_on_rank(client, case),
    );
    first_error(r)?.into_iter().collect()
}

/// A module of the core conformance suite over the mock parts, its ranks placed by
/// `hosts` with every rank's settings `pairs` (`endpoints` per rank if given).
macro_rules! conformance_on {
    ($(#[$doc:meta])* $name:ident: ranks $ranks:literal, $(endpoints $eps:literal,)? hosts $hosts:expr, pairs $pairs:expr) => {
        $(#[$doc])*
        mod $name {
            use super::*;
            fn run(job: &Job<'_>, case: &Case<H>) -> Result<(), String> {
                runner(job, case, $hosts, $pairs)
            }
            gex_testkit::suite_tests! {
                suite: core,
                conduit: H,
                runner: run,
                ranks: $ranks,
                $(endpoints: $eps,)?
                exclude: {
                    back_pressure: "the mock parts' queues are unbounded: a non-waiting flood never reports WouldBlock",
                },
            }
        }
    };
}

conformance_on! {
    /// 4 ranks on two hosts, one endpoint each.
    conformance_two_hosts: ranks 4, hosts two_hosts, pairs &[]
}
conformance_on! {
    /// 4 ranks on two hosts, two endpoints each.
    conformance_two_hosts_two_eps: ranks 4, endpoints 2, hosts two_hosts, pairs &[]
}
conformance_on! {
    /// 3 ranks on one host with `GEX_HYBRID=1`: every peer through the near part.
    conformance_one_host_forced: ranks 3, hosts |n| vec![0; n as usize], pairs &[("GEX_HYBRID", "1")]
}
conformance_on! {
    /// 4 ranks on two hosts with `GEX_HYBRID=0`: the far part alone, every call forwarded.
    conformance_off: ranks 4, hosts two_hosts, pairs &[("GEX_HYBRID", "0")]
}

/// Requests each rank sends to every rank in [`paths`].
const PINGS: u64 = 50;

/// Every rank pings every rank [`PINGS`] times; returns (the hybrid conduit's
/// counts, the parts' counts) of requests sent near and far.
fn paths(client: &Client<H>, fabric: &Fabric) -> Result<[u64; 6], String> {
    let mut ep = client.endpoint(0).map_err(|e| e.to_string())?;
    let got = Arc::new(AtomicU32::new(0));
    let g = got.clone();
    ep.register_at(200, |t: &mut Token<'_>, _am: Am<'_>| {
        t.reply(HandlerId::at(201), Body::short(&[7]))
            .expect("reply")
    })
    .map_err(|e| e.to_string())?;
    ep.register_at(201, move |_t: &mut Token<'_>, am: Am<'_>| {
        assert_eq!(am.args(), &[7]);
        g.fetch_add(1, Ordering::Relaxed);
    })
    .map_err(|e| e.to_string())?;
    // Deliveries from before the barrier: a peer that leaves it first may send to us
    // while we are still in it.
    let before = client.conduit().stats();
    exchange_barrier(&mut ep).map_err(|e| e.to_string())?;
    let s0 = client.conduit().stats();
    let c = fabric.counts(client.rank());
    let (n0, f0) = (
        c.near_sent.load(Ordering::Relaxed),
        c.far_sent.load(Ordering::Relaxed),
    );
    let n = client.size();
    for _ in 0..PINGS {
        for r in 0..n {
            ep.request(EpAddr::rank(r), HandlerId::at(200), Body::short(&[1]))
                .map_err(|e| e.to_string())?;
        }
    }
    let want = PINGS as u32 * n;
    ep.wait_until(|| got.load(Ordering::Relaxed) == want);
    let s1 = client.conduit().stats();
    let (n1, f1) = (
        c.near_sent.load(Ordering::Relaxed),
        c.far_sent.load(Ordering::Relaxed),
    );
    // After the barrier every peer has its replies, so we delivered its requests.
    exchange_barrier(&mut ep).map_err(|e| e.to_string())?;
    let s2 = client.conduit().stats();
    Ok([
        s1.near_am_requests - s0.near_am_requests,
        s1.far_am_requests - s0.far_am_requests,
        s2.near_am_delivered - before.near_am_delivered,
        s2.far_am_delivered - before.far_am_delivered,
        n1 - n0,
        f1 - f0,
    ])
}

/// Near ranks' requests and replies go through the near part, the others' through the
/// far part, and the hybrid conduit counts what the parts carried.
#[test]
fn each_peer_takes_its_part() {
    let r = run_job(
        two_hosts(4),
        1,
        |_| settings(&[]),
        |client, fabric| {
            assert!(client.conduit().is_hybrid());
            let me = client.rank();
            let want: Vec<u32> = if me < 2 { vec![0, 1] } else { vec![2, 3] };
            assert_eq!(client.conduit().shared_memory_peers(), want.as_slice());
            assert!(client.conduit().reason().contains("several hosts"));
            paths(client, fabric)
        },
    );
    for (rank, counts) in first_error(r).unwrap().into_iter().enumerate() {
        let counts = counts.unwrap();
        let [near_req, far_req, near_del, far_del, near_part, far_part] = counts;
        // 2 near ranks (self included) and 2 far ranks, PINGS requests each.
        assert_eq!(
            (near_req, far_req),
            (2 * PINGS, 2 * PINGS),
            "rank {rank}: {counts:?}"
        );
        assert_eq!((near_part, far_part), (2 * PINGS, 2 * PINGS), "rank {rank}");
        // Our replies plus the peers' requests, each by its own part (the barriers add
        // a few of their own).
        assert!(
            near_del >= 4 * PINGS && far_del >= 4 * PINGS,
            "rank {rank}: {counts:?}"
        );
    }
}

/// `GEX_HYBRID=0`: no near part, every AM through the far part.
#[test]
fn off_means_the_far_part_alone() {
    let r = run_job(
        two_hosts(4),
        1,
        |_| settings(&[("GEX_HYBRID", "0")]),
        |client, fabric| {
            assert!(!client.conduit().is_hybrid());
            assert!(client.conduit().shared_memory_peers().is_empty());
            assert!(
                !fabric
                    .counts(client.rank())
                    .near_opened
                    .load(Ordering::SeqCst)
            );
            paths(client, fabric)
        },
    );
    for counts in first_error(r).unwrap() {
        let [near_req, far_req, _, _, near_part, far_part] = counts.unwrap();
        assert_eq!((near_req, near_part), (0, 0));
        assert_eq!((far_req, far_part), (4 * PINGS, 4 * PINGS));
    }
}

/// One rank alone on its host and one host: `auto` is not hybrid (nothing to share, or
/// the shared-memory conduit's job); the reason says so.
#[test]
fn auto_needs_several_hosts_and_a_crowded_one() {
    for (hosts, hybrid, why) in [
        (vec![0, 0], false, "one host"),
        (vec![0, 1], false, "every host has one rank"),
        (vec![0, 0, 1], true, "several hosts"),
    ] {
        let r = run_job(
            hosts.clone(),
            1,
            |_| settings(&[]),
            |client, _| {
                (
                    client.conduit().is_hybrid(),
                    client.conduit().reason().to_string(),
                )
            },
        );
        for (h, reason) in first_error(r).unwrap() {
            assert_eq!(h, hybrid, "{hosts:?}: {reason}");
            assert!(reason.contains(why), "{hosts:?}: {reason}");
        }
    }
}

/// Ranks that disagree on the mode fail to initialise, naming the setting (here its
/// legacy name, `GEX_<FAR>_HYBRID` for the far conduit named `mock`).
#[test]
fn ranks_must_agree_on_the_mode() {
    // The mock far conduit's own name for the setting (not a gex variable).
    const LEGACY: &str = "GEX_MOCK_HYBRID"; // env-docs: ignore
    let r = run_job(
        two_hosts(4),
        1,
        |r| {
            if r == 3 {
                Config::from_pairs([(LEGACY, "0")])
            } else {
                settings(&[])
            }
        },
        |_, _| (),
    );
    let errs: Vec<String> = r.into_iter().filter_map(Result::err).collect();
    assert_eq!(errs.len(), 4, "{errs:?}");
    for e in &errs {
        assert!(
            e.contains("disagree on the hybrid mode") && e.contains("GEX_"),
            "{e}"
        );
    }
    assert!(errs.iter().any(|e| e.contains(LEGACY)), "{errs:?}");
}

/// A bootstrap whose exchange of the hybrid mode (the second exchange, after the
/// core's layout) returns one vote fewer than ranks: every rank fails naming the count.
/// Before, the votes present agreed and the missing one counted as agreement.
#[test]
fn a_missing_mode_vote_is_an_error() {
    let r = run_job_boot(
        two_hosts(4),
        1,
        |_| settings(&[]),
        |_, b| {
            Tampered::new(b)
                .incoming(|n, all| {
                    if n == 1 {
                        all.pop();
                    }
                })
                .boxed()
        },
        |_, _| (),
    );
    let errs: Vec<String> = r.into_iter().filter_map(Result::err).collect();
    assert_eq!(errs.len(), 4, "{errs:?}");
    for e in &errs {
        assert!(e.contains("returned 3 votes for 4 ranks"), "{e}");
    }
}

/// While nothing is in flight on the far part, polls read it at doubling intervals (at
/// most every `FAR_POLL_MAX + 1` polls); a request to another host makes the next polls
/// read it.
#[test]
fn far_reads_back_off_while_idle() {
    let r = run_job(
        two_hosts(4),
        1,
        |_| settings(&[]),
        |client, fabric| {
            let me = client.rank();
            let c = fabric.counts(me);
            let mut ep = client.endpoint(0).expect("ep");
            exchange_barrier(&mut ep).expect("barrier");
            let got = Arc::new(AtomicU32::new(0));
            let g = got.clone();
            ep.register_at(200, |t: &mut Token<'_>, _am: Am<'_>| {
                t.reply(HandlerId::at(201), Body::short(&[]))
                    .expect("reply")
            })
            .unwrap();
            ep.register_at(201, move |_t: &mut Token<'_>, _am: Am<'_>| {
                g.fetch_add(1, Ordering::Relaxed);
            })
            .unwrap();
            exchange_barrier(&mut ep).expect("barrier");
            // Idle: 20 000 polls read the far part at most ~8 + 20000 / 257 times.
            let p0 = c.far_polls.load(Ordering::Relaxed);
            for _ in 0..20_000 {
                ep.poll();
            }
            let idle = c.far_polls.load(Ordering::Relaxed) - p0;
            // A request to the other host: the next poll reads the far part.
            let other = (me + 2) % 4;
            let p1 = c.far_polls.load(Ordering::Relaxed);
            ep.request(EpAddr::rank(other), HandlerId::at(200), Body::short(&[]))
                .unwrap();
            ep.poll();
            let after_request = c.far_polls.load(Ordering::Relaxed) - p1;
            ep.wait_until(|| got.load(Ordering::Relaxed) == 1);
            exchange_barrier(&mut ep).expect("barrier");
            (idle, after_request)
        },
    );
    let bound = 9 + 20_000 / u64::from(FAR_POLL_MAX + 1);
    for (idle, after_request) in first_error(r).unwrap() {
        assert!(idle >= 20_000 / u64::from(FAR_POLL_MAX + 1), "{idle}");
        assert!(idle <= bound + 40, "{idle} far reads in 20 000 idle polls");
        assert!(
            after_request >= 1,
            "the poll after a far request reads the far part"
        );
    }
}

/// With a blocking wait policy, `block` naps on the near part for at most [`NAP`] and
/// never sleeps in the far part; a far message still arrives.
#[test]
fn block_naps_on_the_near_part() {
    let r = run_job(
        two_hosts(4),
        1,
        |_| settings(&[]),
        |client, fabric| {
            let me = client.rank();
            let mut ep = client.endpoint(0).expect("ep");
            ep.set_wait_policy(WaitPolicy::Block);
            let got = Arc::new(AtomicU32::new(0));
            let g = got.clone();
            ep.register_at(200, move |_t: &mut Token<'_>, _am: Am<'_>| {
                g.fetch_add(1, Ordering::Relaxed);
            })
            .unwrap();
            exchange_barrier(&mut ep).expect("barrier");
            if me == 0 {
                std::thread::sleep(Duration::from_millis(50));
                // To the other host: only the far part carries it.
                ep.request(EpAddr::rank(2), HandlerId::at(200), Body::short(&[]))
                    .unwrap();
            }
            if me == 2 {
                ep.wait_until(|| got.load(Ordering::Relaxed) == 1);
            }
            exchange_barrier(&mut ep).expect("barrier");
            let c = fabric.counts(me);
            (
                c.near_blocks.load(Ordering::Relaxed),
                c.near_block_max_ns.load(Ordering::Relaxed),
                c.far_blocks.load(Ordering::Relaxed),
                me,
            )
        },
    );
    for (near_blocks, max_ns, far_blocks, me) in first_error(r).unwrap() {
        assert_eq!(far_blocks, 0, "rank {me}: slept in the far part");
        assert!(
            max_ns <= NAP.as_nanos() as u64,
            "rank {me}: napped {max_ns} ns"
        );
        if me == 2 {
            assert!(near_blocks > 0, "rank 2 waited without napping");
        }
    }
}

/// The far part is opened on the near part's segments: the hybrid endpoint's segment
/// is the near endpoint's, and a native put from another host lands where the
/// neighbours read through their mapping.
#[test]
fn far_part_uses_the_near_segments() {
    let r = run_job(
        two_hosts(4),
        2,
        |_| settings(&[]),
        |client, fabric| {
            let me = client.rank();
            assert!(
                fabric
                    .counts(me)
                    .far_opened_on_shared
                    .load(Ordering::SeqCst)
            );
            let mut ep = client.endpoint(1).expect("ep");
            let mine = ep.segment().as_ptr();
            let (near_seg, far_seg) = conduit_ep(&mut ep, |cep| {
                (
                    cep.near()
                        .expect("near endpoint")
                        .local_segment()
                        .0
                        .as_ptr(),
                    cep.far().local_segment().0.as_ptr(),
                )
            });
            assert_eq!(mine, near_seg, "the hybrid segment is the near endpoint's");
            assert_eq!(far_seg, near_seg, "the far part uses it");
            exchange_barrier(&mut ep).expect("barrier");
            if me == 0 {
                // Rank 0 (host 0) puts into rank 2's EP 1 (host 1) through the far part.
                let data = [0x5au8; 64];
                // SAFETY: `data` lives until the put returns `Done` (the mock completes at
                // once); the range lies in the peer's segment.
                let done = conduit_ep(&mut ep, |cep| unsafe {
                    cep.native_put(SegRange::new(EpAddr::new(2, 1), 128, 64), data.as_ptr())
                });
                assert_eq!(done, Ok(Native::Done));
            }
            exchange_barrier(&mut ep).expect("barrier");
            if me == 3 {
                // Rank 3 shares host 1 with rank 2: it reads the bytes through its mapping.
                let (peer, _) = conduit_ep(&mut ep, |cep| cep.peer_segment(EpAddr::new(2, 1)))
                    .expect("rank 2 is mapped");
                // SAFETY: inside rank 2's segment; written before the barrier.
                let got = unsafe { std::slice::from_raw_parts(peer.as_ptr().add(128), 64) };
                assert!(got.iter().all(|&b| b == 0x5a));
            }
            exchange_barrier(&mut ep).expect("barrier");
        },
    );
    first_error(r).unwrap();
}

/// Finalisation: the far part's around the near part's around one barrier (the mock
/// near part checks, when it finalises, that the far part has begun); the name of the
/// hybrid conduit is the far conduit's.
#[test]
fn finalisation_nests_and_the_name_is_the_far_one() {
    assert_eq!(H::NAME, "mock");
    let r = run_job(
        two_hosts(4),
        1,
        |_| settings(&[]),
        |client, fabric| {
            assert_eq!(client.conduit_name(), "mock");
            fabric.counts(client.rank())
        },
    );
    for c in first_error(r).unwrap() {
        assert!(c.far_finalized.load(Ordering::SeqCst));
        assert!(c.near_finalized.load(Ordering::SeqCst));
    }
}
