//! Bad input and faults on the ofi conduit: every failure is a clear error naming the
//! provider and the operation, and a job whose peer disappears ends instead of hanging.

use gex_conduit_ofi::Ofi;
use gex_core::boot::Singleton;
use gex_core::{Am, Body, Client, ClientBuilder, Config, EpAddr, HandlerId, InitError, Token};
use gex_testkit::exchange_barrier;
use gex_testkit::procs::{self, Procs};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A builder of clients over `provider` with 64 KiB segments.
fn builder(provider: &str) -> ClientBuilder {
    ClientBuilder::new()
        .config(Config::from_pairs([("GEX_OFI_PROVIDER", provider)]))
        .segment_size(64 << 10)
}

/// A client over tcp;ofi_rxm on a thread rank's bootstrap.
fn tcp_thread_client(boot: gex_testkit::boot::ThreadBoot) -> Client<Ofi> {
    builder("tcp").init::<Ofi>(Box::new(boot)).expect("init")
}

/// The text of a caught panic (`String` or `&str`).
fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// A 2-rank job over `provider` (`eps` endpoints each): rank 1 counts rank 0's
/// requests and, after 100, leaves by `leave`; rank 0 floods it with Mediums until the
/// job is ended under it (or the conduit reports the failure: exit 9). Every rank ends
/// its process itself.
fn flood_a_leaving_peer(provider: &'static str, eps: u16, leave: fn() -> !) -> procs::Report {
    Procs::new(2).run(move |boot| -> () {
        let client = builder(provider)
            .endpoints(eps)
            .init::<Ofi>(boot)
            .expect("init");
        let mut ep = client.endpoint(0).expect("ep");
        let got = gex_testkit::counting_handler(&mut ep, 200);
        exchange_barrier(&mut ep).expect("barrier");
        if client.rank() == 1 {
            ep.wait_until(|| got.load(Ordering::Relaxed) >= 100);
            leave();
        }
        loop {
            if let Err(e) = ep.request(
                EpAddr::rank(1),
                HandlerId::at(200),
                Body::medium(&[], &[1; 2000]),
            ) {
                eprintln!("rank 0: {e}");
                std::process::exit(9);
            }
        }
    })
}

fn singleton(pairs: &[(&str, &str)]) -> Result<Client<Ofi>, InitError> {
    ClientBuilder::new()
        .config(Config::from_pairs(pairs.iter().copied()))
        .segment_size(64 << 10)
        .init::<Ofi>(Box::new(Singleton::new()))
}

fn init_error(pairs: &[(&str, &str)]) -> String {
    match singleton(pairs) {
        Ok(_) => panic!("init with {pairs:?} succeeded"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn unknown_provider_names_provider_and_call() {
    let e = init_error(&[("GEX_OFI_PROVIDER", "no-such-provider")]);
    assert!(
        e.contains("conduit ofi")
            && e.contains("fi_getinfo(provider=no-such-provider")
            && e.contains("No data available"),
        "{e}"
    );
}

#[test]
fn unknown_domain_lists_what_is_offered() {
    let e = init_error(&[("GEX_OFI_PROVIDER", "tcp"), ("GEX_OFI_DOMAIN", "nic9")]);
    assert!(e.contains("nic9") && e.contains("lo"), "{e}");
}

#[test]
fn bad_settings_name_the_variable() {
    for (k, v) in [
        ("GEX_OFI_CREDITS", "1"),
        ("GEX_OFI_CREDITS", "many"),
        ("GEX_OFI_MAX_MEDIUM", "10"),
        ("GEX_OFI_MULTI_RECV", "maybe"),
    ] {
        let e = init_error(&[(k, v)]);
        assert!(e.contains(k), "{k}={v}: {e}");
    }
}

/// A one-rank job over tcp;ofi_rxm: the report names the provider, the loopback domain
/// and the path of each operation; an AM to itself goes through the provider.
#[test]
fn report_and_self_send_over_tcp() {
    let client = singleton(&[("GEX_OFI_PROVIDER", "tcp")]).expect("tcp;ofi_rxm opens");
    let report = client.conduit().report().clone();
    assert_eq!(report.provider(), "tcp;ofi_rxm");
    assert_eq!(report.domain(), "lo", "one-host jobs stay on loopback");
    let recv = report.path("AM receive").expect("listed");
    assert!(recv.path.contains("FI_MULTI_RECV"), "{recv:?}");
    assert!(report.path("RMA put/get").is_some());
    let text = report.to_string();
    eprintln!("{text}");
    assert!(
        text.contains("tcp;ofi_rxm") && text.contains("AM injection"),
        "{text}"
    );

    let mut ep = client.endpoint(0).expect("ep");
    let got = Arc::new(AtomicU64::new(0));
    let g = got.clone();
    let h = ep
        .register(move |_t: &mut Token<'_>, am: Am<'_>| {
            g.fetch_add(u64::from(am.args()[0]), Ordering::Release);
        })
        .expect("register");
    // Three requests not yet delivered (nobody polled): the hang report shows the
    // credits they hold.
    for i in 0..3 {
        ep.request(EpAddr::rank(0), h, Body::medium(&[i], &[7; 3000]))
            .expect("request");
    }
    let state = ep.report();
    assert!(
        state.contains("conduit ofi: to global ep 0: ") && state.contains("request credits left"),
        "{state}"
    );
    for i in 3..100 {
        ep.request(EpAddr::rank(0), h, Body::medium(&[i], &[7; 3000]))
            .expect("request");
    }
    ep.wait_until(|| got.load(Ordering::Acquire) == (0..100).sum());
}

#[test]
fn multi_receive_can_be_turned_off() {
    let client =
        singleton(&[("GEX_OFI_PROVIDER", "shm"), ("GEX_OFI_MULTI_RECV", "0")]).expect("shm opens");
    let r = client.conduit().report();
    assert_eq!(r.provider(), "shm");
    let recv = r.path("AM receive").expect("listed");
    assert!(
        recv.path.contains("pre-posted") && recv.reason.contains("GEX_OFI_MULTI_RECV=0"),
        "{recv:?}"
    );
}

/// Rank 1 disappears (exits without finalizing) while rank 0 floods it with requests:
/// the job ends promptly with a non-zero code instead of hanging.
#[test]
fn peer_exit_mid_transfer_ends_the_job() {
    let r = flood_a_leaving_peer("tcp", 1, || std::process::exit(7));
    assert!(
        r.code().is_some_and(|c| c != 0),
        "a rank died: the job must fail\n{r}"
    );
    assert!(r.took < Duration::from_secs(60), "took {:?}", r.took);
    r.assert_clean();
}
/// With a wait policy that may block, tcp;ofi_rxm sleeps in its CQ's file-descriptor
/// wait object (`BLOCKING_WAIT`); shm 1.17 offers none, so it degrades to yielding and
/// says why.
#[test]
fn waiting_paths_follow_the_provider() {
    for (prov, sleeps) in [("tcp", true), ("shm", false)] {
        let client = builder(prov)
            .wait_policy(gex_core::WaitPolicy::Block)
            .init::<Ofi>(Box::new(Singleton::new()))
            .expect("opens");
        let w = client
            .conduit()
            .report()
            .path("waiting")
            .expect("listed")
            .clone();
        let ep = client.endpoint(0).expect("ep");
        let caps = ep.capabilities();
        assert_eq!(
            caps.contains(gex_core::Capabilities::BLOCKING_WAIT),
            sleeps,
            "{prov}: {w:?}"
        );
        assert_eq!(w.path.contains("fi_cq_sread"), sleeps, "{prov}: {w:?}");
    }
}

/// Over the shm provider, a rank killed with SIGKILL in the middle of a flood (2 ranks,
/// 2 endpoints each): the job ends promptly with a non-zero code, and nothing named by
/// one of its ranks remains in /dev/shm (the conduit unlinks the provider's regions once
/// every peer has mapped them; the process runner lists, and removes, what a job left
/// there: libfabric's shm provider names its regions `<pid>:<uid>:<index>`).
#[test]
fn kill_9_of_a_rank_leaves_nothing_in_dev_shm() {
    let r = flood_a_leaving_peer("shm", 2, || {
        let _ = std::process::Command::new("kill")
            .args(["-9", &std::process::id().to_string()])
            .status();
        std::process::exit(3); // not reached
    });
    assert!(
        r.code().is_some_and(|c| c != 0),
        "a rank was killed: the job must fail\n{r}"
    );
    assert!(r.took < Duration::from_secs(60), "took {:?}", r.took);
    // Both ranks started (and recorded their pids), and the launcher has reaped every
    // rank when it returns.
    assert_eq!(r.ranks.len(), 2, "both ranks started\n{r}");
    assert!(r.shm_left.is_empty(), "left in /dev/shm: {:?}", r.shm_left);
    r.assert_clean();
}

/// A peer whose endpoint vanishes (its thread panics, closing its libfabric objects
/// without finalizing; no launcher watches thread ranks) while this rank floods it over
/// tcp;ofi_rxm: this rank gets a clear error naming the provider, the rank and the
/// operation, instead of waiting forever.
#[test]
fn vanished_peer_over_tcp_is_a_clear_error() {
    use gex_testkit::boot::ThreadJob;
    let job = ThreadJob::new(2);
    let (gone_tx, gone_rx) = std::sync::mpsc::channel::<()>();
    let b1 = job.boot(1);
    let peer = std::thread::spawn(move || {
        let client = tcp_thread_client(b1);
        let _ep = gex_testkit::barrier_endpoint(&client, 200);
        // Vanish: unwinding drops endpoint and client without finalizing.
        let _ = gone_tx.send(());
        std::panic::resume_unwind(Box::new("rank 1 vanishes (on purpose)"));
    });
    let client = tcp_thread_client(job.boot(0));
    let mut ep = gex_testkit::barrier_endpoint(&client, 200);
    gone_rx.recv().expect("rank 1 reached the barrier");
    assert!(peer.join().is_err(), "rank 1 panicked on purpose");
    std::thread::sleep(Duration::from_millis(100));
    let t0 = Instant::now();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        loop {
            match ep.try_request(
                EpAddr::rank(1),
                HandlerId::at(200),
                Body::medium(&[], &[7; 2000]),
            ) {
                Err(e) => return e.to_string(),
                Ok(_) => {
                    ep.poll();
                }
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "no error 30 s after the peer vanished"
            );
        }
    }));
    let msg = match outcome {
        Ok(m) => m,
        Err(p) => panic_text(p),
    };
    eprintln!("rank 0 saw: {msg}");
    assert!(
        msg.contains("ofi(tcp;ofi_rxm) rank 0 EP 0"),
        "names provider, rank and endpoint: {msg}"
    );
    assert!(!msg.contains("no error 30 s"), "{msg}");
    // Finalizing would wait for rank 1 in the bootstrap's barrier: end the job instead.
    job.poison("rank 1 vanished (on purpose)");
    drop(ep);
    drop(client);
}

/// A rank that only waits -- for the reply to a request whose handler makes its peer
/// vanish -- over tcp;ofi_rxm: the provider reports nothing by itself, but the conduit
/// probes a peer it waits on once it has been silent for a while, and the probe's error
/// completion ends the wait with a clear message instead of a hang.
#[test]
fn waiting_on_a_vanished_peer_over_tcp_is_a_clear_error() {
    use gex_testkit::boot::ThreadJob;
    let job = ThreadJob::new(2);
    let b1 = job.boot(1);
    let peer = std::thread::spawn(move || {
        let client = tcp_thread_client(b1);
        let mut ep = client.endpoint(0).expect("ep");
        let asked = Arc::new(AtomicU64::new(0));
        let a = asked.clone();
        ep.register_at(200, move |_t: &mut Token<'_>, _am: Am<'_>| {
            a.store(1, Ordering::Relaxed); // never replies
        })
        .expect("register");
        ep.register_at(201, |_t: &mut Token<'_>, _am: Am<'_>| {})
            .expect("register");
        exchange_barrier(&mut ep).expect("barrier");
        ep.wait_until(|| asked.load(Ordering::Relaxed) == 1);
        // Vanish: unwinding drops endpoint and client without finalizing.
        std::panic::resume_unwind(Box::new("rank 1 vanishes (on purpose)"));
    });
    let client = tcp_thread_client(job.boot(0));
    let mut ep = client.endpoint(0).expect("ep");
    let replies = gex_testkit::counting_handler(&mut ep, 201);
    ep.register_at(200, |_t: &mut Token<'_>, _am: Am<'_>| {})
        .expect("register");
    exchange_barrier(&mut ep).expect("barrier");
    ep.request(EpAddr::rank(1), HandlerId::at(200), Body::short(&[]))
        .expect("request");
    assert!(peer.join().is_err(), "rank 1 panicked on purpose");
    let t0 = Instant::now();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ep.wait_until(|| {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "no error 30 s after the peer vanished"
            );
            replies.load(Ordering::Relaxed) > 0
        })
    }));
    let took = t0.elapsed();
    let msg = match outcome {
        Ok(()) => "the reply arrived".to_string(),
        Err(p) => panic_text(p),
    };
    eprintln!("rank 0 saw after {took:?}: {msg}");
    assert!(
        msg.contains("ofi(tcp;ofi_rxm) rank 0 EP 0")
            && (msg.contains("rank 1 EP 0 is unreachable") || msg.contains("completed in error")),
        "names provider, rank, endpoint and what failed: {msg}"
    );
    assert!(took < Duration::from_secs(20), "took {took:?}");
    // Finalizing would wait for rank 1 in the bootstrap's barrier: end the job instead.
    job.poison("rank 1 vanished (on purpose)");
    drop(ep);
    drop(client);
}
