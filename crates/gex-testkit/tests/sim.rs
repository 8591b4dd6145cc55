//! Behaviour specific to the simulated fabric and its launcher: delivery order and
//! determinism, delays, back-pressure, deferred local completion, failure reporting.

use gex_core::boot::Singleton;
use gex_core::{
    Am, AmError, Body, ClientBuilder, EpAddr, HandlerId, Injected, Nb, Token, WaitPolicy,
};
use gex_testkit::boot::ThreadJob;
use gex_testkit::sim::{Delay, Sim, SimConfig, SimFabric, run_sim};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const H: HandlerId = HandlerId::at(128);

/// Messages per sender in the delivery-order tests (40 under Miri, where each costs
/// milliseconds).
const N: u32 = if cfg!(miri) { 40 } else { 300 };

fn small() -> ClientBuilder {
    ClientBuilder::new().segment_size(4096)
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// Rank 1 (and 2, ...) send `n` Short requests `[sender, seq]` to rank 0 while rank 0
/// does not poll; then rank 0 drains. Returns rank 0's arrival order.
fn arrival_order(ranks: u32, cfg: SimConfig, n: u32) -> Vec<(u32, u32)> {
    let out = run_sim(ranks, cfg, small, |client| {
        let mut ep = client.endpoint(0).unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let l = log.clone();
        ep.register_at(H.index(), move |_t: &mut Token<'_>, am: Am<'_>| {
            l.lock().unwrap().push((am.args()[0], am.args()[1]))
        })
        .unwrap();
        gex_testkit::exchange_barrier(&mut ep).unwrap();
        client.boot_barrier().unwrap(); // rank 0 stops polling before anyone sends
        if client.rank() != 0 {
            for seq in 0..n {
                ep.request(EpAddr::rank(0), H, Body::short(&[client.rank(), seq]))
                    .unwrap();
            }
        }
        client.boot_barrier().unwrap(); // rank 0 has not polled since the barrier
        let want = (n * (ranks - 1)) as usize;
        if client.rank() == 0 {
            ep.wait_until(|| log.lock().unwrap().len() == want);
        }
        gex_testkit::exchange_barrier(&mut ep).unwrap();
        log.lock().unwrap().clone()
    });
    out.into_iter().next().unwrap()
}

fn per_sender(order: &[(u32, u32)], s: u32) -> Vec<u32> {
    order
        .iter()
        .filter(|(src, _)| *src == s)
        .map(|&(_, q)| q)
        .collect()
}

#[test]
fn fifo_per_pair_without_reorder_even_with_jitter() {
    let cfg = SimConfig::default()
        .jitter(Delay::polls(7))
        .latency(Delay::polls(2))
        .ring_capacity(1 << 20);
    let order = arrival_order(3, cfg, N);
    for s in [1, 2] {
        assert_eq!(
            per_sender(&order, s),
            (0..N).collect::<Vec<_>>(),
            "sender {s}"
        );
    }
}

#[test]
fn reorder_overtakes_within_one_sender_and_loses_nothing() {
    let cfg = SimConfig::default()
        .reorder(true)
        .jitter(Delay::polls(5))
        .ring_capacity(1 << 20);
    let order = arrival_order(2, cfg, N);
    let got = per_sender(&order, 1);
    assert_ne!(
        got,
        (0..N).collect::<Vec<_>>(),
        "no message overtook another"
    );
    let mut sorted = got.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..N).collect::<Vec<_>>());
}

#[test]
fn delivery_order_is_a_function_of_the_seed() {
    let cfg = |seed| {
        SimConfig::default()
            .seed(seed)
            .reorder(true)
            .jitter(Delay::polls(3))
            .ring_capacity(1 << 20)
    };
    let a = arrival_order(2, cfg(1), N);
    let b = arrival_order(2, cfg(1), N);
    let c = arrival_order(2, cfg(2), N);
    assert_eq!(a, b, "same seed, different order");
    assert_ne!(a, c, "different seeds, same order");
}

#[test]
fn latency_in_polls_holds_messages_back() {
    let cfg = SimConfig::default().latency(Delay::polls(5));
    run_sim(2, cfg, small, |client| {
        let mut ep = client.endpoint(0).unwrap();
        let got = gex_testkit::counting_handler(&mut ep, H.index());
        gex_testkit::exchange_barrier(&mut ep).unwrap();
        client.boot_barrier().unwrap(); // rank 0 stops polling before rank 1 sends
        if client.rank() == 1 {
            ep.request(EpAddr::rank(0), H, Body::short(&[])).unwrap();
        }
        client.boot_barrier().unwrap();
        if client.rank() == 0 {
            for k in 1..5 {
                ep.poll();
                assert_eq!(got.load(Ordering::Relaxed), 0, "delivered after {k} polls");
            }
            ep.poll();
            assert_eq!(
                got.load(Ordering::Relaxed),
                1,
                "not delivered after 5 polls"
            );
        }
        gex_testkit::exchange_barrier(&mut ep).unwrap();
    });
}

#[test]
fn latency_in_nanoseconds_holds_messages_back_and_sleepers_wake() {
    let cfg = SimConfig::default().latency(Delay::nanos(50_000_000));
    let sent_at = Arc::new(Mutex::new(None::<Instant>));
    run_sim(2, cfg, small, |client| {
        let mut ep = client.endpoint(0).unwrap();
        ep.set_wait_policy(WaitPolicy::Block);
        let got = Arc::new(Mutex::new(None::<Instant>));
        let g = got.clone();
        ep.register_at(H.index(), move |_t: &mut Token<'_>, _am: Am<'_>| {
            *g.lock().unwrap() = Some(Instant::now());
        })
        .unwrap();
        gex_testkit::exchange_barrier(&mut ep).unwrap();
        if client.rank() == 1 {
            *sent_at.lock().unwrap() = Some(Instant::now());
            ep.request(EpAddr::rank(0), H, Body::short(&[])).unwrap();
        } else {
            ep.wait_until(|| got.lock().unwrap().is_some());
            let dt = got.lock().unwrap().unwrap() - sent_at.lock().unwrap().unwrap();
            assert!(dt >= Duration::from_millis(50), "delivered after {dt:?}");
            assert!(
                dt < Duration::from_secs(5),
                "a blocked receiver slept through: {dt:?}"
            );
        }
        gex_testkit::exchange_barrier(&mut ep).unwrap();
    });
}

#[test]
fn back_pressure_follows_ring_capacity_and_replies_never_block() {
    // 100-byte Medium, no args: 64 + 100 = 164 bytes each; 6 fit in 1000 bytes.
    let cfg = SimConfig::default().ring_capacity(1000);
    run_sim(2, cfg, small, |client| {
        let mut ep = client.endpoint(0).unwrap();
        let got = Arc::new(AtomicU32::new(0));
        let replies = Arc::new(AtomicU32::new(0));
        let g = got.clone();
        ep.register_at(H.index(), move |t: &mut Token<'_>, am: Am<'_>| {
            g.fetch_add(1, Ordering::Relaxed);
            if am.args().is_empty() {
                // 4 KiB replies to a rank that is not polling: must never block.
                t.reply(HandlerId::at(H.index() + 1), Body::medium(&[], &[7; 4096]))
                    .unwrap();
            }
        })
        .unwrap();
        let r = replies.clone();
        ep.register_at(H.index() + 1, move |_t: &mut Token<'_>, _am: Am<'_>| {
            r.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
        gex_testkit::exchange_barrier(&mut ep).unwrap();
        client.boot_barrier().unwrap(); // barrier traffic drained: the lanes are empty
        if client.rank() == 0 {
            let dst = EpAddr::rank(1);
            let mut sent = 0;
            while ep
                .try_request(dst, H, Body::medium(&[1], &[0; 96]))
                .unwrap()
                == Injected::Sent
            {
                sent += 1;
                assert!(sent < 100, "no back-pressure");
            }
            assert_eq!(sent, 6, "6 messages of 164 bytes fit in 1000");
        }
        client.boot_barrier().unwrap();
        if client.rank() == 1 {
            ep.wait_until(|| got.load(Ordering::Relaxed) == 6);
            // Many requests to self, each replied to rank 1 itself; all replies queue up.
            for _ in 0..50 {
                ep.request(EpAddr::rank(1), H, Body::short(&[])).unwrap();
            }
            ep.wait_until(|| replies.load(Ordering::Relaxed) == 50);
        }
        gex_testkit::exchange_barrier(&mut ep).unwrap();
    });
}

#[test]
fn deferred_local_completion_waits_for_delivery() {
    run_sim(2, SimConfig::default(), small, |client| {
        let mut ep = client.endpoint(0).unwrap();
        ep.register_at(H.index(), |_t: &mut Token<'_>, _am: Am<'_>| {})
            .unwrap();
        gex_testkit::exchange_barrier(&mut ep).unwrap();
        client.boot_barrier().unwrap(); // rank 1 stops polling before rank 0 sends
        if client.rank() == 0 {
            let ev = ep
                .request_owned(EpAddr::rank(1), H, Body::medium(&[], vec![5; 64]), Nb)
                .unwrap();
            for _ in 0..10 {
                assert!(
                    !ep.test(&ev).unwrap(),
                    "complete before the receiver polled"
                );
            }
            client.boot_barrier().unwrap(); // rank 1 polls after this
            let buf = ep.wait(ev).unwrap();
            assert_eq!(buf, vec![5; 64]);
        } else {
            client.boot_barrier().unwrap();
        }
        gex_testkit::exchange_barrier(&mut ep).unwrap();
    });
}

#[test]
fn unregistered_handler_at_the_receiver_panics_with_a_clear_message() {
    // The AM must reach rank 0 inside catch_unwind, not while rank 0 still polls in
    // the AM barrier: the boot barrier (which delivers no AMs) separates the two. And
    // rank 0's (caught) panic poisons the job for the boot barrier: rank 0 provokes it
    // only once rank 1 has left the boot barrier (a test-local flag, not an AM).
    let left = Arc::new(AtomicU32::new(0));
    run_sim(2, SimConfig::default(), small, move |client| {
        let mut ep = client.endpoint(0).unwrap();
        if client.rank() == 1 {
            ep.register_at(200, |_t: &mut Token<'_>, _am: Am<'_>| {})
                .unwrap();
        }
        gex_testkit::exchange_barrier(&mut ep).unwrap();
        client.boot_barrier().unwrap();
        if client.rank() == 1 {
            ep.request(EpAddr::rank(0), HandlerId::at(200), Body::short(&[]))
                .unwrap();
        }
        client.boot_barrier().unwrap();
        if client.rank() == 1 {
            left.store(1, Ordering::Release);
        }
        if client.rank() == 0 {
            while left.load(Ordering::Acquire) == 0 {
                std::thread::yield_now();
            }
            let p = catch_unwind(AssertUnwindSafe(|| {
                loop {
                    ep.poll();
                }
            }))
            .unwrap_err();
            let msg = panic_text(&*p);
            assert!(
                msg.contains("unregistered handler 200") && msg.contains("rank 1"),
                "{msg}"
            );
        }
        gex_testkit::exchange_barrier(&mut ep).unwrap();
    });
}

#[test]
fn a_panicking_rank_is_reported_and_the_others_do_not_hang() {
    let t0 = Instant::now();
    let p = catch_unwind(|| {
        run_sim(3, SimConfig::default(), small, |client| {
            let mut ep = client.endpoint(0).unwrap();
            if client.rank() == 1 {
                panic!("boom");
            }
            gex_testkit::exchange_barrier(&mut ep).unwrap(); // would wait for rank 1 forever
        })
    })
    .unwrap_err();
    let msg = panic_text(&*p);
    assert!(msg.contains("rank 1 panicked: boom"), "{msg}");
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "took {:?}",
        t0.elapsed()
    );
}

#[test]
fn the_watchdog_fails_a_stuck_job_loudly() {
    let p = catch_unwind(|| {
        run_sim(
            2,
            SimConfig::default().timeout(Duration::from_millis(300)),
            small,
            |client| {
                let mut ep = client.endpoint(0).unwrap();
                ep.wait_until(|| false);
            },
        )
    })
    .unwrap_err();
    let msg = panic_text(&*p);
    assert!(msg.contains("watchdog") && msg.contains("[0, 1]"), "{msg}");
}

#[test]
fn a_rank_that_calls_exit_ends_the_job_without_ending_the_process() {
    let p = catch_unwind(|| {
        run_sim(2, SimConfig::default(), small, |client| {
            if client.rank() == 0 {
                client.exit(3);
            }
            gex_testkit::exchange_barrier(&mut client.endpoint(0).unwrap()).unwrap();
        })
    })
    .unwrap_err();
    let msg = panic_text(&*p);
    assert!(msg.contains("exit code 3"), "{msg}");
}

#[test]
fn one_rank_without_a_context_gets_a_private_fabric() {
    let client = ClientBuilder::new()
        .segment_size(4096)
        .init::<Sim>(Box::new(Singleton::new()))
        .unwrap();
    let mut ep = client.endpoint(0).unwrap();
    let got = gex_testkit::counting_handler(&mut ep, H.index());
    ep.request(ep.addr(), H, Body::short(&[])).unwrap();
    ep.wait_until(|| got.load(Ordering::Relaxed) == 1);
}

#[test]
fn bad_contexts_are_refused_at_init() {
    let job = ThreadJob::new(2);
    let errs: Vec<String> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|r| {
                let b = job.boot(r);
                s.spawn(move || {
                    let builder = small().conduit_context(Arc::new(5u32));
                    builder
                        .init::<Sim>(Box::new(b))
                        .map(|_| ())
                        .unwrap_err()
                        .to_string()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(
        errs.iter()
            .all(|e| e.contains("not a gex_testkit::sim::SimFabric")),
        "{errs:?}"
    );
    let job = ThreadJob::new(2);
    let e = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|r| {
                let b = job.boot(r);
                s.spawn(move || {
                    small()
                        .init::<Sim>(Box::new(b))
                        .map(|_| ())
                        .unwrap_err()
                        .to_string()
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    assert!(
        e.iter().all(|e| e.contains("needs a shared SimFabric")),
        "{e:?}"
    );
}

#[test]
fn a_fabric_carries_one_job() {
    let fabric = SimFabric::new(SimConfig::default());
    let open = |job: &ThreadJob| -> Vec<Result<(), String>> {
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..job.size())
                .map(|r| {
                    let (b, ctx) = (job.boot(r), fabric.context());
                    s.spawn(move || {
                        small()
                            .conduit_context(ctx)
                            .init::<Sim>(Box::new(b))
                            .map(|c| drop(c.finalize()))
                            .map_err(|e| e.to_string())
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    };
    assert!(open(&ThreadJob::new(2)).iter().all(Result::is_ok));
    let again = open(&ThreadJob::with_hosts_and_timeout(
        vec![0, 0],
        Duration::from_secs(2),
    ));
    assert!(
        again.iter().any(|r| r
            .as_ref()
            .is_err_and(|e| e.contains("one SimFabric per job"))),
        "{again:?}"
    );
}

/// A layer with an auxiliary slice (4 KiB), for ranks whose layer sets differ.
#[derive(Debug)]
struct Wide;

impl gex_core::layer::Layer for Wide {
    const NAME: &'static str = "wide";
    const AUX_BYTES: usize = 4096;
    fn attach<C: gex_core::spi::Conduit>(
        _: &mut gex_core::layer::Attach<'_, C, Self>,
    ) -> Result<Self, gex_core::InitError> {
        Ok(Wide)
    }
}

/// The fabric sizes every endpoint's auxiliary area once, from the first rank that
/// opens it, and maps those areas to every rank on the host: a rank whose layers need
/// another size (rank 1 carries one more layer with an auxiliary slice) is refused
/// with an error naming it and the sizes, instead of being handed areas smaller than
/// its layers' slices (it read and wrote past a 64 KiB area before, under valgrind).
#[test]
fn ranks_with_other_auxiliary_areas_are_refused() {
    use gex_testkit::conformance::Probe;
    let fabric = SimFabric::new(SimConfig::default());
    let job = ThreadJob::with_hosts_and_timeout(vec![0, 0], Duration::from_secs(5));
    let out: Vec<Result<(), String>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2u32)
            .map(|r| {
                let (b, ctx) = (job.boot(r), fabric.context());
                s.spawn(move || {
                    let c = if r == 0 {
                        small()
                            .layer::<Probe>()
                            .conduit_context(ctx)
                            .init::<Sim>(Box::new(b))
                            .map(|c| drop(c.finalize()))
                    } else {
                        small()
                            .layer::<Probe>()
                            .layer::<Wide>()
                            .conduit_context(ctx)
                            .init::<Sim>(Box::new(b))
                            .map(|c| drop(c.finalize()))
                    };
                    c.map_err(|e| e.to_string())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let refused: Vec<usize> = (0..2)
        .filter(|&r| {
            out[r]
                .as_ref()
                .is_err_and(|e| e.contains("auxiliary area") && e.contains(&format!("rank {r}")))
        })
        .collect();
    assert!(!refused.is_empty(), "{out:?}");
}

/// Payload limits are per peer (`ConduitEp::limits(dst)`): the core must validate a
/// request against the destination's limit, so a message over an off-host peer's
/// smaller limit fails with `PayloadTooLarge` instead of reaching the conduit.
/// (Regression test: the core once checked against the sender's own limits.)
#[test]
fn payload_limits_are_per_peer() {
    let mut cfg = SimConfig::default().ranks_per_host(1);
    cfg.max_medium_off_host = Some(1024);
    run_sim(2, cfg, small, |client| {
        let mut ep = client.endpoint(0).unwrap();
        ep.register_at(H.index(), |_t: &mut Token<'_>, _am: Am<'_>| {})
            .unwrap();
        gex_testkit::exchange_barrier(&mut ep).unwrap();
        let peer = EpAddr::rank(1 - client.rank());
        assert_eq!(ep.max_medium(peer), 1024);
        let r = ep.request(peer, H, Body::medium(&[], &[0; 2000]));
        assert_eq!(
            r,
            Err(AmError::PayloadTooLarge {
                len: 2000,
                max: 1024
            })
        );
        gex_testkit::exchange_barrier(&mut ep).unwrap();
    });
}

/// The simulated fabric does not make endpoints at run time: `create_endpoint` answers
/// `EpError::Conduit(ConduitError::Unsupported)`, and the core keeps refusing the
/// indices past the endpoints made at init (`AmError::BadEndpoint`), whatever
/// `GEX_MAX_ENDPOINTS` says.
#[test]
fn create_endpoint_is_unsupported_on_sim() {
    let out = run_sim(2, SimConfig::default(), small, |client| {
        assert!(!client.runtime_endpoints());
        assert_eq!(client.endpoint_capacity(1), Some(1));
        let r = client.create_endpoint().map(|_| ());
        let mut ep = client.endpoint(0).unwrap();
        ep.register_at(H.index(), |_t: &mut Token<'_>, _am: Am<'_>| {})
            .unwrap();
        let dst = EpAddr::new(1 - client.rank(), 1);
        let bad = ep.request(dst, H, Body::short(&[]));
        gex_testkit::exchange_barrier(&mut ep).unwrap();
        (r, bad, dst)
    });
    for (r, bad, dst) in out {
        assert_eq!(
            r,
            Err(gex_core::EpError::Conduit(
                gex_core::spi::ConduitError::Unsupported {
                    conduit: "sim",
                    what: "endpoints made at run time",
                }
            ))
        );
        assert_eq!(bad, Err(AmError::BadEndpoint { dst, eps: 1 }));
    }
}
