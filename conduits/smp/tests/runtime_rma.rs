//! RMA and remote atomics between endpoints made at run time (`Client::create_endpoint`,
//! issue 25 point 1: every layer attached to them) on the smp conduit, with 3 process
//! ranks (gex-testkit's process runner) and 3 thread ranks (`gex_boot::threads`): each
//! body runs unchanged on both. `ci/test` also runs this file with
//! `--cfg gex_force_am_rma` (step `force-am`), so both the direct path and the AM
//! reference path are exercised between run-time endpoints.
//!
//! - `errors_then_mesh`: before the peers create index 1, a put, a get, an empty put and
//!   a memset to `(peer, 1)` are `RmaError::NoEndpoint` ("not created yet") and move
//!   nothing; an index at the capacity (`GEX_MAX_ENDPOINTS`) is `RmaError::BadEndpoint`.
//!   Once every rank made index 1, the run-time endpoints put, get (blocking, `Nb`,
//!   `Nbi`), memset, put strided and run fetching atomics (a domain on their world team)
//!   to each other; each endpoint has its own segment (a put to `(r, 1)` leaves `(r, 0)`
//!   untouched). Then every rank but 0 drops its endpoint 1: rank 0's put, get and
//!   atomic to a closed one are `RmaError::NoEndpoint` ("closed"), from its run-time
//!   endpoint and from endpoint 0.
//! - `across_kinds` (`gex_testkit::rma::runtime`, shared with the ofi conduit's tests):
//!   two threads per rank, one driving endpoint 0 (made at init) and one driving
//!   endpoint 1 (made at run time): each puts to and gets from the peer's endpoint of
//!   the other kind, and each thread keeps polling its own endpoint until both are
//!   done, so the AM path's handlers run on the target endpoint's thread.

use gex_conduit_smp::Smp;
use gex_core::boot::Bootstrap;
use gex_core::{Blocking, ClientBuilder, Config, EpAddr, Nb, Nbi};
use gex_rma::{
    AtomicFlags, AtomicOp, AtomicOps, GlobalPtr, NbiCategories, Rma, RmaError, RmaExt, Strided,
};
use gex_testkit::exchange_barrier;
use gex_testkit::procs::Procs;
use std::time::Duration;

/// Ranks of every job.
const RANKS: u32 = 3;
/// Endpoint capacity of every rank (1 made at init + 2 at run time).
const CAP: u16 = 3;

fn client(boot: Box<dyn Bootstrap>) -> gex_core::Client<Smp> {
    let mut cfg = Config::from_env();
    cfg.set("GEX_MAX_ENDPOINTS", CAP.to_string());
    ClientBuilder::new()
        .layer::<Rma>()
        .segment_size(4096)
        .config(cfg)
        .init::<Smp>(boot)
        .unwrap()
}

fn not_open<T: std::fmt::Debug>(r: Result<T, RmaError>, dst: EpAddr, state: &'static str) {
    match r {
        Err(RmaError::NoEndpoint { dst: d, state: s }) if d == dst && s == state => {}
        other => panic!("to {dst}: expected NoEndpoint ({state}), got {other:?}"),
    }
}

fn errors_then_mesh(boot: Box<dyn Bootstrap>) {
    let c = client(boot);
    let (me, n) = (c.rank(), c.size());
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    assert_eq!(c.endpoint_capacity(next), Some(CAP));
    let mut ep0 = c.endpoint(0).unwrap();
    exchange_barrier(&mut ep0).unwrap();

    // Not created yet on the peer: errors naming the endpoint and its state.
    let absent = EpAddr::new(next, 1);
    let p = GlobalPtr::<u64>::new(absent, 64);
    not_open(ep0.put(p, &[1, 2], Blocking), absent, "not created yet");
    not_open(
        ep0.put::<u64, _>(p, &[], Blocking),
        absent,
        "not created yet",
    );
    not_open(ep0.put_val(p, 5, Nbi), absent, "not created yet");
    not_open(ep0.get(vec![0u64; 2], p, Nb), absent, "not created yet");
    let mut back = [0u64; 2];
    not_open(ep0.get(&mut back, p, Blocking), absent, "not created yet");
    not_open(
        ep0.memset(GlobalPtr::<u8>::new(absent, 0), 7, 16, Blocking),
        absent,
        "not created yet",
    );
    ep0.sync_nbi(NbiCategories::ALL).unwrap();
    // Index 2 (never created by anyone) and the capacity itself.
    let two = EpAddr::new(next, 2);
    not_open(
        ep0.put_val(GlobalPtr::<u32>::new(two, 0), 1, Blocking),
        two,
        "not created yet",
    );
    let beyond = EpAddr::new(next, CAP);
    assert_eq!(
        ep0.put_val(GlobalPtr::<u32>::new(beyond, 0), 1, Blocking),
        Err(RmaError::BadEndpoint { dst: beyond })
    );
    exchange_barrier(&mut ep0).unwrap();

    // Every rank makes index 1; the barrier on endpoint 0 says they all did.
    let mut ep1 = c.create_endpoint().unwrap();
    assert_eq!(ep1.index(), 1);
    exchange_barrier(&mut ep0).unwrap();
    // Nothing of the refused operations landed.
    let mut seg = [0u8; 128];
    ep1.segment().read(0, &mut seg).unwrap();
    assert_eq!(seg, [0; 128], "a refused operation wrote a segment");
    exchange_barrier(&mut ep1).unwrap();

    // Blocking put from the run-time endpoint to the next rank's; each endpoint has its
    // own segment: the next rank's endpoint 0 is untouched.
    let tag = u64::from(me) + 1;
    let to = GlobalPtr::<u64>::new(EpAddr::new(next, 1), 0);
    ep1.put(to, &[tag, tag * 10, tag * 100, tag * 1000], Blocking)
        .unwrap();
    // Nb and Nbi puts further in.
    let ev = ep1.put(to.add(4), &[tag + 7], Nb).unwrap();
    ep1.wait(ev).unwrap();
    ep1.put_val(to.add(5), tag + 8, Nbi).unwrap();
    ep1.sync_nbi(NbiCategories::PUTS).unwrap();
    ep1.memset(
        GlobalPtr::<u8>::new(EpAddr::new(next, 1), 48),
        0xab,
        8,
        Blocking,
    )
    .unwrap();
    // A strided put: every other word of 6..12 from 3 values.
    let shape = Strided {
        counts: &[3],
        remote_strides: &[2],
        local_start: 0,
        local_strides: &[1],
    };
    ep1.put_strided(to.add(8), &[tag; 3], shape, Blocking)
        .unwrap();
    exchange_barrier(&mut ep1).unwrap();

    // What the previous rank put here, read from the own segment and from a get of
    // the next rank's (what this rank put there).
    let prev_tag = u64::from(prev) + 1;
    let mut got = [0u64; 13];
    ep1.get(&mut got, GlobalPtr::<u64>::new(ep1.addr(), 0), Blocking)
        .unwrap();
    let want = |t: u64| {
        [
            t,
            t * 10,
            t * 100,
            t * 1000,
            t + 7,
            t + 8,
            u64::from_ne_bytes([0xab; 8]),
            0,
            t,
            0,
            t,
            0,
            t,
        ]
    };
    assert_eq!(got, want(prev_tag), "rank {me}: its endpoint 1's segment");
    let there = ep1.get(vec![0u64; 13], to, Nb).unwrap();
    assert_eq!(ep1.wait(there).unwrap(), want(tag).to_vec());
    ep1.get(vec![0u64; 13], to, Nbi).unwrap();
    ep1.sync_nbi(NbiCategories::GETS).unwrap();
    let v = ep1.get_val(to.add(3), Blocking).unwrap();
    assert_eq!(v, tag * 1000);
    let mut zero = [1u8; 128];
    ep0.segment().read(0, &mut zero).unwrap();
    assert_eq!(zero, [0; 128], "a put to (r, 1) reached (r, 0)'s segment");

    // Atomics among the run-time endpoints: a domain on their world team.
    let world1 = ep1.world();
    assert!(world1.members().iter().all(|a| a.ep == 1));
    let ad = ep1
        .atomic_domain::<u64>(&world1, AtomicOps::FADD | AtomicOps::GET)
        .unwrap();
    let counter = GlobalPtr::<u64>::new(EpAddr::new(0, 1), 512);
    let f = AtomicFlags::empty();
    for _ in 0..10 {
        ep1.fetch_atomic(&ad, counter, AtomicOp::Add(tag), f, Blocking)
            .unwrap();
    }
    let ev = ep1
        .fetch_atomic(&ad, counter, AtomicOp::Add(0), f, Nb)
        .unwrap();
    ep1.wait(ev).unwrap();
    exchange_barrier(&mut ep1).unwrap();
    let total: u64 = (1..=u64::from(n)).map(|t| t * 10).sum();
    assert_eq!(
        ep1.fetch_atomic(&ad, counter, AtomicOp::Get, f, Blocking)
            .unwrap(),
        total
    );
    exchange_barrier(&mut ep1).unwrap();

    // Every rank but 0 closes its endpoint 1; rank 0 then finds them closed.
    if me != 0 {
        drop(ep1);
        exchange_barrier(&mut ep0).unwrap();
    } else {
        exchange_barrier(&mut ep0).unwrap();
        let closed = EpAddr::new(1, 1);
        let p = GlobalPtr::<u64>::new(closed, 0);
        not_open(ep1.put_val(p, 1, Blocking), closed, "closed");
        not_open(ep1.get_val(p, Blocking), closed, "closed");
        not_open(ep0.put(p, &[1, 2, 3], Nbi), closed, "closed");
        not_open(ep0.get(vec![0u64; 3], p, Nb), closed, "closed");
        not_open(
            ep1.fetch_atomic(&ad, p, AtomicOp::Add(1), f, Blocking),
            closed,
            "closed",
        );
        ep0.sync_nbi(NbiCategories::ALL).unwrap();
        ep1.sync_nbi(NbiCategories::ALL).unwrap();
        // Its own endpoint 1 still works (its segment is its own).
        ep1.put_val(GlobalPtr::<u64>::new(ep1.addr(), 8), 99, Blocking)
            .unwrap();
        assert_eq!(gex_testkit::rma::runtime::read_u64(&ep1, 8), 99);
        drop(ep1);
    }
    exchange_barrier(&mut ep0).unwrap();
}

/// `gex_testkit::rma::runtime::across_kinds` on smp (ofi runs it too).
fn across_kinds(boot: Box<dyn Bootstrap>) {
    let c = client(boot);
    let ep0 = c.endpoint(0).unwrap();
    gex_testkit::rma::runtime::across_kinds(&c, ep0);
}

fn procs(body: fn(Box<dyn Bootstrap>)) {
    Procs::new(RANKS)
        .timeout(Duration::from_secs(180))
        .run(body)
        .assert_success();
}

fn threads(body: fn(Box<dyn Bootstrap>)) {
    gex_testkit::watchdog("runtime_rma", Duration::from_secs(180), || {
        gex_boot::threads::run(RANKS, |boot| body(Box::new(boot))).unwrap();
    });
}

#[test]
fn errors_then_mesh_on_processes() {
    procs(errors_then_mesh);
}

#[test]
fn errors_then_mesh_on_thread_ranks() {
    threads(errors_then_mesh);
}

#[test]
fn across_kinds_on_processes() {
    procs(across_kinds);
}

#[test]
fn across_kinds_on_thread_ranks() {
    threads(across_kinds);
}
