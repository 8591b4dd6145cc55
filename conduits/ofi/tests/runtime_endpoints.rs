//! Endpoints made at run time (`Client::create_endpoint`, issue 25 point 1) on the ofi
//! conduit over `tcp;ofi_rxm`, as process jobs of gex-testkit's process runner. Each
//! endpoint made at run time has its own libfabric domain, CQ, AV and registration of
//! its segment; peers find it on first contact through its rank's endpoint 0
//! (docs/ofi.md, "Endpoints made at run time").
//!
//! - `lifecycle` (2 and 3 ranks): a send to an index a peer has not created yet is
//!   `ConduitError::NoEndpoint` ("not created yet"), never a hang; once created it is
//!   reached without a collective, from the peer's endpoint 0 and from the peer's
//!   endpoint made at run time (AM Short, Medium and Long both ways between endpoints
//!   made at run time of different ranks, with replies); after its owner drops it, a
//!   send is `NoEndpoint` ("closed"), from an endpoint that reached it before (once the
//!   closing notice has arrived) and from one that never did (its rank's endpoint 0
//!   answers "closed"); indices are not reused; past the capacity
//!   (`GEX_MAX_ENDPOINTS`) `create_endpoint` answers `EpError::Full`.
//! - `two_threads_two_endpoints`: two threads of a rank, each driving its own endpoint
//!   (0, and one made at run time), run round trips with the peer's endpoint of the same
//!   index in lockstep with each other: a thread waits, inside its own endpoint's wait
//!   loop, for the other thread's progress on the other endpoint, so the test can only
//!   finish if driving one endpoint needs nothing from the other.
//! - `rma_across_kinds` (`gex_testkit::rma::runtime::across_kinds`, shared with smp):
//!   gex-rma on endpoints made at run time. First a put and a get from endpoint 0 to a
//!   peer's index 1 that does not exist yet are `RmaError::NoEndpoint` ("not created
//!   yet"); then two threads per rank, one driving endpoint 0 and one a run-time
//!   endpoint 1, put to and get from the next rank's endpoint of the other kind
//!   (blocking and NBI, gex-rma's AM path, which is how ofi carries RMA to endpoints
//!   made at run time), each thread serving its own endpoint meanwhile; every rank
//!   checks what landed in its two segments.
//! - `shm_and_far_part_refuse`: with the `shm` provider `create_endpoint` answers
//!   `Unsupported` (and the capability flag is off).

use gex_conduit_ofi::Ofi;
use gex_core::boot::Bootstrap;
use gex_core::spi::{Capabilities, ConduitError};
use gex_core::{Am, Body, ClientBuilder, Config, EpAddr, EpError, HandlerId, Token};
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

fn client(boot: Box<dyn Bootstrap>, max_eps: u32, provider: &str) -> gex_core::Client<Ofi> {
    let cfg = Config::from_pairs([
        ("GEX_OFI_PROVIDER", provider.to_string()),
        ("GEX_MAX_ENDPOINTS", max_eps.to_string()),
    ]);
    ClientBuilder::new()
        .segment_size(4096)
        .config(cfg)
        .init::<Ofi>(boot)
        .unwrap()
}

/// A handler at `COUNT` on `ep` counting messages and replying to each request with a
/// Short `PONG` carrying its first argument (when it has one).
fn counter(ep: &mut gex_core::Endpoint<Ofi>) -> (Arc<AtomicU64>, Arc<AtomicU64>) {
    let (n, pongs) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let m = n.clone();
    ep.register_at(COUNT.index(), move |t: &mut Token<'_>, am: Am<'_>| {
        m.fetch_add(1, Ordering::Relaxed);
        if let Some(&a) = am.args().first() {
            t.reply(PONG, Body::short(&[a])).unwrap();
        }
    })
    .unwrap();
    let p = pongs.clone();
    ep.register_at(PONG.index(), move |_: &mut Token<'_>, _: Am<'_>| {
        p.fetch_add(1, Ordering::Relaxed);
    })
    .unwrap();
    (n, pongs)
}

/// Sends a Short to `dst` from `ep` until it fails with `NoEndpoint` (the closing
/// notice of `dst` may still be on its way: sends before it are discarded).
fn until_closed(ep: &mut gex_core::Endpoint<Ofi>, dst: EpAddr) {
    loop {
        match ep.request(dst, COUNT, Body::short(&[])) {
            Ok(()) => {
                ep.poll();
                std::thread::sleep(Duration::from_millis(1));
            }
            r => return assert_not_open(r, dst, "closed"),
        }
    }
}

/// Rank `me`'s next rank, in a ring of `n`.
fn next(me: u32, n: u32) -> u32 {
    (me + 1) % n
}

fn lifecycle(boot: Box<dyn Bootstrap>) {
    let c = client(boot, 3, "tcp");
    let n = c.size();
    assert!(c.runtime_endpoints());
    assert_eq!(c.layout().max_eps, vec![3; n as usize]);
    assert_eq!(c.endpoint_capacity(1), Some(3));
    let (me, peer) = (c.rank(), next(c.rank(), n));
    let mut ep0 = c.endpoint(0).unwrap();
    assert!(ep0.capabilities().contains(Capabilities::RUNTIME_ENDPOINTS));
    // Handlers are checked at the sender too: every endpoint that sends registers it.
    let (got0, pongs0) = counter(&mut ep0);
    gex_testkit::exchange_barrier(&mut ep0).unwrap();
    // Not created yet on the peer: an error, nothing sent (Short, Medium, Long); its
    // endpoint 0 answers, which the barrier's polls serve.
    let absent = EpAddr::new(peer, 1);
    // Beyond the capacity: the core's own error.
    let beyond = EpAddr::new(peer, 3);
    assert_absent_and_beyond(&mut ep0, COUNT, absent, (beyond, 3));
    // Nor on this rank.
    let mine = EpAddr::new(me, 1);
    assert_not_open(
        ep0.request(mine, COUNT, Body::short(&[])),
        mine,
        "not created yet",
    );
    gex_testkit::exchange_barrier(&mut ep0).unwrap();

    let mut ep1 = c.create_endpoint().unwrap();
    assert_eq!(ep1.addr(), EpAddr::new(me, 1));
    assert!(ep1.capabilities().contains(Capabilities::RUNTIME_ENDPOINTS));
    let (got1, pongs1) = counter(&mut ep1);
    gex_testkit::exchange_barrier(&mut ep0).unwrap();
    // First contact from the peer's endpoint made at init (it asks the peer's endpoint
    // 0, which the peer polls in the same call; the provider's connection to the new
    // endpoint needs that endpoint polled too: a helper thread does), and from this
    // rank's endpoint 0 to its endpoint made at run time (the directory, then the
    // in-process path).
    let dst = EpAddr::new(peer, 1);
    polling(&mut ep1, || {
        ep0.request(dst, COUNT, Body::short(&[1])).unwrap();
        ep0.request(mine, COUNT, Body::short(&[5])).unwrap();
    });
    // Between endpoints made at run time of different ranks, and from one to the
    // peer's endpoint 0: each first asks the other rank's endpoint 0, which a thread of
    // that rank must poll meanwhile (here a helper thread; docs/ofi.md). Replies come
    // back to both endpoints.
    polling(&mut ep0, || {
        ep1.request(dst, COUNT, Body::medium(&[2], &[7; 100]))
            .unwrap();
        ep1.request(dst, COUNT, Body::long(&[3], &[9; 64], 128))
            .unwrap();
        ep1.request(EpAddr::new(peer, 0), COUNT, Body::short(&[4]))
            .unwrap();
        // Each endpoint 1 receives 3 from the rank before it and 1 from its own
        // endpoint 0; each endpoint 0 one from the rank before it's endpoint 1.
        ep1.wait_until(|| {
            got1.load(Ordering::Relaxed) == 4
                && got0.load(Ordering::Relaxed) == 1
                && pongs0.load(Ordering::Relaxed) == 2
                && pongs1.load(Ordering::Relaxed) == 3
        });
    });
    let mut long = [0u8; 64];
    ep1.segment().read(128, &mut long).unwrap();
    assert_eq!(
        long, [9; 64],
        "a Long lands in the segment of the endpoint made at run time"
    );
    // Every rank is done with every endpoint 1 before any drops its own.
    polling(&mut ep1, || {
        gex_testkit::exchange_barrier(&mut ep0).unwrap()
    });
    drop(ep1);
    gex_testkit::exchange_barrier(&mut ep0).unwrap();
    // Closed: an error from the endpoints that reached it before (once the closing
    // notice has arrived), and from one that never did (the peer's endpoint 0 answers).
    until_closed(&mut ep0, dst);
    until_closed(&mut ep0, mine);
    let mut ep2 = c.create_endpoint().unwrap();
    assert_eq!(ep2.index(), 2, "indices are not reused");
    let _ = counter(&mut ep2);
    polling(&mut ep0, || {
        assert_not_open(ep2.request(dst, COUNT, Body::short(&[])), dst, "closed");
        assert_not_open(ep2.request(mine, COUNT, Body::short(&[])), mine, "closed");
    });
    gex_testkit::assert_endpoints_full(&c, 3, 1);
    polling(&mut ep2, || {
        gex_testkit::exchange_barrier(&mut ep0).unwrap()
    });
    drop(ep2);
    gex_testkit::exchange_barrier(&mut ep0).unwrap();
}

/// Runs `f` while a helper thread polls `ep` (its peers may need it to answer where
/// an endpoint is, or to take a message).
fn polling<T>(ep: &mut gex_core::Endpoint<Ofi>, f: impl FnOnce() -> T) -> T {
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let stop = &stop;
        s.spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                ep.poll();
                std::thread::yield_now();
            }
        });
        let r = f();
        stop.store(true, Ordering::Relaxed);
        r
    })
}

fn two_threads_two_endpoints(boot: Box<dyn Bootstrap>) {
    let c = client(boot, 2, "tcp");
    let peer = 1 - c.rank();
    let mut ep0 = gex_testkit::two_threads_two_endpoints(&c, (PING, PONG), peer, ROUNDS);
    // Endpoint 1 (dropped by its thread) is closed; the peer's may still be
    // sending: the final barrier (with every endpoint 1 dropped) is on ep0.
    gex_testkit::exchange_barrier(&mut ep0).unwrap();
}

fn shm_refuses(boot: Box<dyn Bootstrap>) {
    let c = client(boot, 3, "shm");
    assert!(!c.runtime_endpoints());
    let ep0 = c.endpoint(0).unwrap();
    assert!(!ep0.capabilities().contains(Capabilities::RUNTIME_ENDPOINTS));
    match c.create_endpoint() {
        Err(EpError::Conduit(ConduitError::Unsupported { .. })) => {}
        r => panic!("create_endpoint with shm: {:?}", r.map(|e| e.addr())),
    }
}

fn rma_across_kinds(boot: Box<dyn Bootstrap>) {
    use gex_rma::{GlobalPtr, RmaError, RmaExt};
    let cfg = Config::from_pairs([
        ("GEX_OFI_PROVIDER", "tcp;ofi_rxm".to_string()),
        ("GEX_MAX_ENDPOINTS", "2".to_string()),
    ]);
    let c = gex_testkit::rma::client_builder()
        .segment_size(4096)
        .config(cfg)
        .init::<Ofi>(boot)
        .unwrap();
    assert!(c.runtime_endpoints());
    let mut ep0 = c.endpoint(0).unwrap();
    gex_testkit::exchange_barrier(&mut ep0).unwrap();
    {
        let absent = EpAddr::new(next(c.rank(), c.size()), 1);
        let p = GlobalPtr::<u64>::new(absent, 0);
        for r in [
            ep0.put_val(p, 1, gex_core::Blocking).map(|_| 0),
            ep0.get_val(p, gex_core::Blocking),
        ] {
            match r {
                Err(RmaError::NoEndpoint { dst, state })
                    if dst == absent && state == "not created yet" => {}
                other => panic!("RMA to {absent} before it exists: {other:?}"),
            }
        }
        gex_testkit::exchange_barrier(&mut ep0).unwrap();
    }
    gex_testkit::rma::runtime::across_kinds(&c, ep0);
}

fn procs(n: u32, body: fn(Box<dyn Bootstrap>)) {
    Procs::new(n)
        .timeout(Duration::from_secs(120))
        .run(body)
        .assert_success();
}

#[test]
fn lifecycle_two_ranks() {
    procs(2, lifecycle);
}

#[test]
fn lifecycle_three_ranks() {
    procs(3, lifecycle);
}

#[test]
fn two_threads_two_endpoints_on_processes() {
    procs(2, two_threads_two_endpoints);
}

#[test]
fn rma_across_kinds_two_ranks() {
    procs(2, rma_across_kinds);
}

#[test]
fn rma_across_kinds_three_ranks() {
    procs(3, rma_across_kinds);
}

#[test]
fn shm_refuses_endpoints_made_at_run_time() {
    procs(2, shm_refuses);
}
