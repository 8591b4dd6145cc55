//! The lazy wire-up (`GEX_IBV_CONNECT=lazy`, the default) over the emulation: queue
//! pairs are made only for the peers an endpoint talks with (counted by the emulated
//! devices), a passive target (one that never polls) is connected by its connection
//! thread, simultaneous first contact from both sides, lost and duplicated connection
//! datagrams (fault injection), a peer that never answers (an error naming it, in
//! bounded time), and finalize with a connection pending. Thread ranks of one process
//! (gex-testkit's `ThreadJob`), each with its own emulated device.

use gex_conduit_ibv::Ibv;
use gex_conduit_ibv::emu::Fault;
use gex_core::boot::Bootstrap;
use gex_core::{Body, ClientBuilder, Config, EpAddr, HandlerId, Injected};
use gex_testkit::boot::{ThreadBoot, ThreadJob};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

mod common;

fn init(boot: ThreadBoot, extra: &[(&str, &str)]) -> gex_core::Client<Ibv> {
    common::emu_client(ClientBuilder::new(), boot, extra, 64 << 10)
}

/// An endpoint with handler 200 counting the requests it got.
fn counting_ep(client: &gex_core::Client<Ibv>) -> (gex_core::OwnedEndpoint<Ibv>, Arc<AtomicU64>) {
    let mut ep = client.endpoint(0).expect("ep");
    let got = gex_testkit::counting_handler(&mut ep, 200);
    (ep, got)
}

/// `n` requests from `ep` to handler 200 of rank `to`.
fn send(ep: &mut gex_core::OwnedEndpoint<Ibv>, to: u32, n: u64) {
    for _ in 0..n {
        ep.request(EpAddr::rank(to), HandlerId::at(200), Body::short(&[]))
            .expect("request");
    }
}

/// What the emulated device of `client`'s endpoint 0 counted.
fn emu_counts(client: &gex_core::Client<Ibv>) -> gex_conduit_ibv::emu::EmuCounts {
    client.conduit().emu_counts(0).expect("emulated device")
}

fn wait_for(ep: &mut gex_core::OwnedEndpoint<Ibv>, got: &AtomicU64, n: u64) {
    common::wait_for_count(ep, got, n, Duration::from_secs(30), "requests");
}

/// Runs `body` on every rank of an `n`-rank thread job with the rank's number, its
/// client (from `make`), a [`counting_ep`] and its count, and a barrier of all ranks;
/// then finalizes the rank.
fn run_ranks(
    n: u32,
    make: impl Fn(ThreadBoot) -> gex_core::Client<Ibv> + Sync,
    body: impl Fn(u32, &gex_core::Client<Ibv>, &mut gex_core::OwnedEndpoint<Ibv>, &AtomicU64, &Barrier)
    + Sync,
) {
    let all = Barrier::new(n as usize);
    ThreadJob::new(n)
        .run(|boot| {
            let rank = boot.rank();
            let client = make(boot);
            let (mut ep, got) = counting_ep(&client);
            body(rank, &client, &mut ep, &got, &all);
            gex_testkit::finalize(ep, client).expect("finalize");
        })
        .expect("job");
}

/// Ranks talk in pairs (0 with 1, 2 with 3): lazily each endpoint makes one RC queue
/// pair (its partner's) and one UD queue pair; eagerly, one RC queue pair per endpoint
/// of the job and no UD queue pair.
#[test]
fn only_the_peers_talked_with_get_queue_pairs() {
    for (mode, rc, ud) in [("lazy", 1u64, 1u64), ("eager", 4, 0)] {
        let make = |boot| init(boot, &[("GEX_IBV_CONNECT", mode)]);
        run_ranks(4, make, |rank, client, ep, got, start| {
            start.wait();
            let partner = rank ^ 1;
            send(ep, partner, 10);
            wait_for(ep, got, 10);
            let c = emu_counts(client);
            assert_eq!(
                (c.rc_qps, c.ud_qps),
                (rc, ud),
                "{mode}: rank {rank} made {c:?}"
            );
            // Nobody leaves before everyone has counted (a late message would not
            // make a queue pair, but keep the counts exact).
            start.wait();
        });
    }
}

/// Both sides send their first request at the same moment: one connection results
/// (one queue pair each), every message arrives.
#[test]
fn simultaneous_first_contact() {
    for round in 0..5 {
        run_ranks(
            2,
            |boot| init(boot, &[]),
            |rank, client, ep, got, start| {
                start.wait();
                send(ep, 1 - rank, 50);
                wait_for(ep, got, 50);
                let c = emu_counts(client);
                assert_eq!(c.rc_qps, 1, "round {round}: rank {rank}: {c:?}");
                start.wait();
            },
        );
    }
}

/// Rank 0's first two CONNECTs are lost, rank 1's first ACCEPT is lost and the next
/// datagrams are duplicated: the connection forms through retransmission and
/// idempotent answers, and the messages arrive once each.
#[test]
fn lost_and_duplicated_connection_datagrams() {
    run_ranks(
        2,
        |boot| init(boot, &[]),
        |rank, client, ep, got, start| {
            let ibv = client.conduit();
            let lost = if rank == 0 { 2 } else { 1 };
            assert!(ibv.emu_inject(0, Fault::LoseDatagrams { count: lost }));
            assert!(ibv.emu_inject(0, Fault::DuplicateDatagrams { count: 4 }));
            start.wait();
            if rank == 0 {
                send(ep, 1, 5);
                wait_for(ep, got, 1);
            } else {
                wait_for(ep, got, 5);
                send(ep, 0, 1);
            }
            let c = emu_counts(client);
            assert_eq!(c.datagrams_lost, if rank == 0 { 2 } else { 1 }, "{c:?}");
            assert!(c.datagrams > c.datagrams_lost, "{c:?}");
            assert_eq!(c.rc_qps, 1, "{c:?}");
            start.wait();
            // Exactly the messages sent arrived (a duplicated datagram is not a message).
            ep.poll();
            assert_eq!(got.load(Ordering::Relaxed), if rank == 0 { 1 } else { 5 });
        },
    );
}

/// Rank 1 never polls while rank 0 makes first contact with AMs, a large put and a get:
/// its connection thread answers, so everything goes through; rank 1 then finds the
/// requests and the bytes.
#[test]
fn a_passive_target_is_connected() {
    let make = |boot| common::emu_client(gex_testkit::rma::client_builder(), boot, &[], 1 << 20);
    run_ranks(2, make, |rank, _client, ep, got, phase| {
        phase.wait();
        let bytes: Vec<u8> = (0..300_000u32).map(|i| (i * 13) as u8).collect();
        if rank == 0 {
            use gex_rma::{GlobalPtr, RmaExt};
            send(ep, 1, 5);
            let dst = GlobalPtr::<u8>::new(EpAddr::rank(1), 4096);
            ep.put(dst, &bytes, gex_core::Blocking).expect("put");
            let mut back = vec![0u8; bytes.len()];
            ep.get(&mut back[..], dst, gex_core::Blocking).expect("get");
            assert!(back == bytes);
        }
        // Rank 1 has not polled until here.
        phase.wait();
        if rank == 1 {
            wait_for(ep, got, 5);
            let mut mine = vec![0u8; bytes.len()];
            ep.segment().read(4096, &mut mine).expect("read");
            assert!(mine == bytes, "the put's bytes are in rank 1's segment");
        }
        phase.wait();
    });
}

/// Rank 1's device loses every datagram it sends (its answers never arrive): rank 0's
/// request fails after `GEX_IBV_CONNECT_TIMEOUT` with an error naming rank 1's endpoint
/// and the setting, and nothing hangs.
#[test]
fn a_peer_that_never_answers_is_named() {
    let make = |boot| init(boot, &[("GEX_IBV_CONNECT_TIMEOUT", "1s")]);
    run_ranks(2, make, |rank, client, ep, _got, done| {
        if rank == 1 {
            assert!(
                client
                    .conduit()
                    .emu_inject(0, Fault::LoseDatagrams { count: u32::MAX })
            );
        }
        done.wait();
        if rank == 0 {
            let t0 = Instant::now();
            let e = ep
                .request(EpAddr::rank(1), HandlerId::at(200), Body::short(&[]))
                .expect_err("no answer")
                .to_string();
            let took = t0.elapsed();
            eprintln!("after {took:?}: {e}");
            assert!(
                e.contains("rank 1 endpoint 0")
                    && e.contains("did not answer")
                    && e.contains("GEX_IBV_CONNECT_TIMEOUT"),
                "{e}"
            );
            assert!(
                took >= Duration::from_millis(900) && took < Duration::from_secs(10),
                "took {took:?}"
            );
            // Later operations to it fail at once.
            let t1 = Instant::now();
            assert!(
                ep.request(EpAddr::rank(1), HandlerId::at(200), Body::short(&[]))
                    .is_err()
            );
            assert!(t1.elapsed() < Duration::from_millis(500));
        }
        done.wait();
    });
}

/// Rank 0 starts a connection (its request answers would-block) and both ranks
/// finalize without waiting for it: finalize returns (the connection threads are
/// stopped and joined), nothing hangs or panics.
#[test]
fn finalize_with_a_pending_connection() {
    let t0 = Instant::now();
    run_ranks(
        2,
        |boot| init(boot, &[]),
        |rank, client, ep, _got, _all| {
            if rank == 0 {
                let r = ep
                    .try_request(EpAddr::rank(1), HandlerId::at(200), Body::short(&[]))
                    .expect("no error");
                assert_eq!(r, Injected::WouldBlock);
                // The queue pair is made and CONNECT sent (rank 1's connection thread may
                // already be answering).
                let c = emu_counts(client);
                assert!(c.rc_qps == 1 && c.datagrams >= 1, "{c:?}");
            }
        },
    );
    assert!(t0.elapsed() < Duration::from_secs(20));
}

/// Ranks that disagree on `GEX_IBV_CONNECT` are refused at open, naming the setting.
#[test]
fn mixed_wire_up_modes_are_refused() {
    let job = ThreadJob::new(2);
    let errs = job
        .run(|boot| {
            let mode = if boot.rank() == 0 { "lazy" } else { "eager" };
            ClientBuilder::new()
                .config(Config::from_pairs([
                    ("GEX_IBV_PROVIDER", "emu"),
                    ("GEX_IBV_CONNECT", mode),
                ]))
                .segment_size(64 << 10)
                .init::<Ibv>(Box::new(boot))
                .map(|_| ())
                .expect_err("refused")
                .to_string()
        })
        .expect("job");
    for e in errs {
        assert!(e.contains("GEX_IBV_CONNECT"), "{e}");
    }
}
