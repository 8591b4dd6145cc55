//! Endpoints made at run time (`Client::create_endpoint`, issue 25 point 1) on the smp
//! conduit, with process ranks (gex-testkit's process runner) and with thread ranks
//! (`gex_boot::threads`): each body runs unchanged on both.
//!
//! - `lifecycle`: a send to an index a peer has not created yet is
//!   `ConduitError::NoEndpoint` ("not created yet"), never a hang; once created it is
//!   reached without a collective (first contact), both from the peer's endpoint made at
//!   init and from its endpoint made at run time; after the owner drops it, a send is
//!   `NoEndpoint` ("closed"); indices are not reused; past the capacity
//!   (`GEX_MAX_ENDPOINTS`) `create_endpoint` answers `EpError::Full`.
//! - `poll_mask`: traffic queued for endpoint 0 stays unconsumed while endpoint 1 (made at
//!   run time) is polled, and is delivered when endpoint 0 is polled.
//! - `two_threads_two_endpoints`: two threads of a rank, each driving its own endpoint
//!   (0, and one made at run time), run round trips with the peer's matching endpoint in
//!   lockstep with each other: a thread waits, inside its own endpoint's wait loop, for
//!   the other thread's progress on the other endpoint, so the test can only finish if
//!   driving one endpoint needs nothing from the other (no shared queue, no shared lock).

use gex_conduit_smp::Smp;
use gex_core::boot::Bootstrap;

use gex_core::{Body, ClientBuilder, Config, EpAddr, HandlerId};
use gex_testkit::procs::Procs;
use gex_testkit::{assert_absent_and_beyond, assert_not_open};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const COUNT: HandlerId = HandlerId::at(140);
const PING: HandlerId = HandlerId::at(141);
const PONG: HandlerId = HandlerId::at(142);
/// Lockstep round trips of each thread in `two_threads_two_endpoints` (four threads
/// on CI's two cores, each spinning in its wait: kept short).
const ROUNDS: u64 = 200;

fn client(boot: Box<dyn Bootstrap>, max_eps: u32) -> gex_core::Client<Smp> {
    let mut cfg = Config::from_env();
    cfg.set("GEX_MAX_ENDPOINTS", max_eps.to_string());
    ClientBuilder::new()
        .segment_size(4096)
        .config(cfg)
        .init::<Smp>(boot)
        .unwrap()
}

/// A counting handler at `COUNT` on `ep`.
fn counter(ep: &mut gex_core::Endpoint<Smp>) -> Arc<AtomicU64> {
    gex_testkit::counting_handler(ep, COUNT.index())
}

fn lifecycle(boot: Box<dyn Bootstrap>) {
    let c = client(boot, 3);
    assert!(c.runtime_endpoints());
    assert_eq!(c.layout().eps, vec![1, 1]);
    assert_eq!(c.layout().max_eps, vec![3, 3]);
    assert_eq!(c.endpoint_capacity(1), Some(3));
    let peer = 1 - c.rank();
    let mut ep0 = c.endpoint(0).unwrap();
    // Handlers are checked at the sender too: every endpoint that sends registers it.
    let _ = counter(&mut ep0);
    gex_testkit::exchange_barrier(&mut ep0).unwrap();
    // Not created yet on the peer: an error, nothing sent (Short, Medium, Long).
    let absent = EpAddr::new(peer, 1);
    // Beyond the capacity: the core's own error.
    let beyond = EpAddr::new(peer, 3);
    assert_absent_and_beyond(&mut ep0, COUNT, absent, (beyond, 3));
    gex_testkit::exchange_barrier(&mut ep0).unwrap();

    let mut ep1 = c.create_endpoint().unwrap();
    assert_eq!(ep1.addr(), EpAddr::new(c.rank(), 1));
    let got1 = counter(&mut ep1);
    gex_testkit::exchange_barrier(&mut ep0).unwrap();
    // First contact from the peer's endpoint made at init, then from its endpoint made
    // at run time (which its owner's endpoint 1 starts polling on that contact).
    let dst = EpAddr::new(peer, 1);
    ep0.request(dst, COUNT, Body::short(&[])).unwrap();
    ep1.request(dst, COUNT, Body::medium(&[], &[7; 100]))
        .unwrap();
    ep1.request(dst, COUNT, Body::long(&[], &[9; 64], 128))
        .unwrap();
    ep1.wait_until(|| got1.load(Ordering::Relaxed) == 3);
    let mut long = [0u8; 64];
    ep1.segment().read(128, &mut long).unwrap();
    assert_eq!(
        long, [9; 64],
        "a Long lands in the segment of the endpoint made at run time"
    );
    gex_testkit::exchange_barrier(&mut ep0).unwrap();
    drop(ep1);
    gex_testkit::exchange_barrier(&mut ep0).unwrap();
    // Closed: an error from the endpoint that reached it before, and from one that never did.
    assert_not_open(ep0.request(dst, COUNT, Body::short(&[])), dst, "closed");
    let mut ep2 = c.create_endpoint().unwrap();
    assert_eq!(ep2.index(), 2, "indices are not reused");
    let _ = counter(&mut ep2);
    assert_not_open(ep2.request(dst, COUNT, Body::short(&[])), dst, "closed");
    gex_testkit::assert_endpoints_full(&c, 3, 1);
    drop(ep2);
    gex_testkit::exchange_barrier(&mut ep0).unwrap();
}

fn poll_mask(boot: Box<dyn Bootstrap>) {
    let c = client(boot, 4);
    let peer = 1 - c.rank();
    let mut ep0 = c.endpoint(0).unwrap();
    let got0 = counter(&mut ep0);
    let mut ep1 = c.create_endpoint().unwrap();
    let got1 = counter(&mut ep1);
    gex_testkit::exchange_barrier(&mut ep0).unwrap();
    if c.rank() == 1 {
        // Rank 0 says, from its endpoint 1, that it has left the barrier on endpoint 0
        // (and polls only endpoint 1 from now on).
        ep1.wait_until(|| got1.load(Ordering::Relaxed) == 1);
        // Ten requests to the peer's endpoint 0, published before the one to its
        // endpoint 1 (same thread, rings published in order).
        for _ in 0..10 {
            ep0.request(EpAddr::new(peer, 0), COUNT, Body::short(&[]))
                .unwrap();
        }
        ep1.request(EpAddr::new(peer, 1), COUNT, Body::short(&[]))
            .unwrap();
    } else {
        ep1.request(EpAddr::new(peer, 1), COUNT, Body::short(&[]))
            .unwrap();
        ep1.wait_until(|| got1.load(Ordering::Relaxed) == 1);
        // Polling endpoint 1 more: endpoint 0's traffic, already in its rings, stays.
        for _ in 0..1000 {
            ep1.poll();
        }
        assert_eq!(
            got0.load(Ordering::Relaxed),
            0,
            "ep 1 consumed ep 0's traffic"
        );
        ep0.wait_until(|| got0.load(Ordering::Relaxed) == 10);
        assert_eq!(got1.load(Ordering::Relaxed), 1);
    }
    gex_testkit::exchange_barrier(&mut ep0).unwrap();
    drop(ep1);
}

fn two_threads_two_endpoints(boot: Box<dyn Bootstrap>) {
    let c = client(boot, 2);
    let peer = 1 - c.rank();
    gex_testkit::two_threads_two_endpoints(&c, (PING, PONG), peer, ROUNDS);
}

fn procs(body: fn(Box<dyn Bootstrap>)) {
    Procs::new(2)
        .timeout(Duration::from_secs(120))
        .run(body)
        .assert_success();
}

fn threads(body: fn(Box<dyn Bootstrap>)) {
    gex_testkit::watchdog("runtime_endpoints", Duration::from_secs(120), || {
        gex_boot::threads::run(2, |boot| body(Box::new(boot))).unwrap();
    });
}

#[test]
fn lifecycle_on_processes() {
    procs(lifecycle);
}

#[test]
fn lifecycle_on_thread_ranks() {
    threads(lifecycle);
}

#[test]
fn poll_mask_on_processes() {
    procs(poll_mask);
}

#[test]
fn poll_mask_on_thread_ranks() {
    threads(poll_mask);
}

#[test]
fn two_threads_two_endpoints_on_processes() {
    procs(two_threads_two_endpoints);
}

#[test]
fn two_threads_two_endpoints_on_thread_ranks() {
    threads(two_threads_two_endpoints);
}

/// The type-level facts docs/threads.md states: a client is shared between threads
/// (`create_endpoint` takes `&self`), an endpoint moves between threads but is not
/// shared (gex-core's compile-fail doctest on `Endpoint` pins the `!Sync` half), and a
/// program that serialises calls on one endpoint puts it behind its own `Mutex`.
#[test]
fn clients_are_sync_and_endpoints_send() {
    fn sync<T: Sync + ?Sized>() {}
    fn send<T: Send + ?Sized>() {}
    sync::<gex_core::Client<Smp>>();
    send::<gex_core::OwnedEndpoint<Smp>>();
    sync::<std::sync::Mutex<gex_core::OwnedEndpoint<Smp>>>();
}
