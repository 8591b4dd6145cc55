//! Error completions on the ibv conduit over the emulation: a wrong remote key and a
//! network that goes away end the waiting rank with a clear error naming the peer
//! endpoint and what failed, never a hang; bad settings name the variable. Two thread
//! ranks of one process (gex-testkit's `ThreadJob`), whose emulated devices are reached
//! through `Ibv::emu_inject`.

use gex_conduit_ibv::Ibv;
use gex_conduit_ibv::emu::Fault;
use gex_core::boot::Singleton;
use gex_core::{Blocking, Body, ClientBuilder, Config, EpAddr, HandlerId};
use gex_rma::{GlobalPtr, RmaExt};
use gex_testkit::barrier_endpoint;
use gex_testkit::boot::{ThreadBoot, ThreadJob};
use std::time::{Duration, Instant};

mod common;

fn init(boot: ThreadBoot) -> gex_core::Client<Ibv> {
    common::emu_client(gex_testkit::rma::client_builder(), boot, &[], 64 << 10)
}

fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// Runs `fail` on rank 0 after a barrier, while rank 1 waits in a barrier it never
/// leaves; returns rank 0's panic message and how long the failure took to show.
fn rank0_fails(fail: impl FnOnce(&Ibv, &mut gex_core::OwnedEndpoint<Ibv>)) -> (String, Duration) {
    let job = ThreadJob::new(2);
    let b1 = job.boot(1);
    let peer = std::thread::spawn(move || {
        let client = init(b1);
        let mut ep = barrier_endpoint(&client, 200);
        // Keep serving until rank 0 has failed and the job is poisoned.
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(60) && !job_poisoned() {
            ep.poll();
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(ep);
        std::mem::forget(client);
    });
    let client = init(job.boot(0));
    let mut ep = barrier_endpoint(&client, 200);
    let t0 = Instant::now();
    let conduit = client.conduit().clone();
    let outcome =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fail(&conduit, &mut ep)));
    let took = t0.elapsed();
    POISONED.store(true, std::sync::atomic::Ordering::Release);
    job.poison("rank 0 failed (on purpose)");
    let _ = peer.join();
    std::mem::forget(ep);
    std::mem::forget(client);
    match outcome {
        Ok(()) => ("no failure".into(), took),
        Err(p) => (panic_text(p), took),
    }
}

/// Rank 0's failure `msg` (case `what`), after `took`, names both endpoints and
/// `error`, and came in bounded time.
fn assert_names_both_endpoints(what: &str, msg: &str, took: Duration, error: &str) {
    eprintln!("{what}: after {took:?}: {msg}");
    assert!(
        msg.contains("rank 0 endpoint 0")
            && msg.contains("to rank 1 endpoint 0")
            && msg.contains(error),
        "{what}: names both endpoints and the error: {msg}"
    );
    assert!(took < Duration::from_secs(20), "{what}: took {took:?}");
}

static POISONED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
fn job_poisoned() -> bool {
    POISONED.load(std::sync::atomic::Ordering::Acquire)
}

#[test]
fn faults() {
    // One test: the two jobs share the poison flag.

    // A wrong remote key: the put's RDMA WRITE completes with a remote access error.
    let (msg, took) = rank0_fails(|ibv, ep| {
        assert!(ibv.emu_inject(0, Fault::CorruptRkey { count: 1 }));
        ep.put(
            GlobalPtr::<u8>::new(EpAddr::rank(1), 0),
            &[7u8; 64],
            Blocking,
        )
        .expect("the put starts");
    });
    assert_names_both_endpoints("wrong rkey", &msg, took, "remote access error");
    POISONED.store(false, std::sync::atomic::Ordering::Release);

    // The network goes away: the request's SEND completes in error.
    let (msg, took) = rank0_fails(|ibv, ep| {
        assert!(ibv.emu_inject(0, Fault::DropAll));
        let sent = ep.request(EpAddr::rank(1), HandlerId::at(200), Body::short(&[]));
        let t0 = Instant::now();
        // Either the request already fails, or its completion does while we wait.
        if sent.is_ok() {
            ep.wait_until(|| t0.elapsed() > Duration::from_secs(30));
        }
    });
    assert_names_both_endpoints("network gone", &msg, took, "retry counter exceeded");
}

#[test]
fn bad_settings_name_the_variable() {
    for (k, v) in [
        ("GEX_IBV_PROVIDER", "carrier-pigeon"),
        ("GEX_IBV_CREDITS", "1"),
        ("GEX_IBV_MAX_MEDIUM", "10"),
        ("GEX_IBV_PORT", "0"),
        ("GEX_IBV_RMA", "maybe"),
        ("GEX_IBV_CONNECT", "sometimes"),
        ("GEX_IBV_CONNECT_TIMEOUT", "soon"),
        ("GEX_IBV_CONNECT_TIMEOUT", "0s"),
        ("GEX_IBV_REG_CACHE", "lots"),
    ] {
        let r = ClientBuilder::new()
            .config(Config::from_pairs([("GEX_IBV_PROVIDER", "emu"), (k, v)]))
            .segment_size(64 << 10)
            .init::<Ibv>(Box::new(Singleton::new()));
        let e = r.map(|_| ()).expect_err("refused").to_string();
        assert!(e.contains(k), "{k}={v}: {e}");
    }
    // No device and no emulation asked for: says so, and how to get the emulation.
    let e = ClientBuilder::new()
        .init::<Ibv>(Box::new(Singleton::new()))
        .map(|_| ())
        .expect_err("no RDMA device here")
        .to_string();
    assert!(
        e.contains("no RDMA device") && e.contains("GEX_IBV_PROVIDER=emu"),
        "{e}"
    );
    // The emulation on a device or port it does not have.
    let e = ClientBuilder::new()
        .config(Config::from_pairs([
            ("GEX_IBV_PROVIDER", "emu"),
            ("GEX_IBV_DEVICE", "mlx5_0"),
        ]))
        .init::<Ibv>(Box::new(Singleton::new()))
        .map(|_| ())
        .expect_err("no such device")
        .to_string();
    assert!(e.contains("mlx5_0") && e.contains("GEX_IBV_DEVICE"), "{e}");
}
