//! # gex-testkit
//!
//! Test infrastructure for gex, used by every conduit and layer crate's tests
//! (`publish = false`):
//!
//! - [`boot`]: a bootstrap ([`boot::ThreadJob`], [`boot::ThreadBoot`]) for jobs whose
//!   ranks are threads of one process.
//! - [`sim`]: a simulated fabric conduit ([`sim::Sim`]) for thread ranks, with seeded
//!   delays, reordering, bounded queues (back-pressure) and per-peer limits, and the
//!   launcher [`sim::run_sim`] with a watchdog.
//! - [`conformance`] and [`rma`]: the conformance suites (core AM and RMA), written
//!   once against the conduit SPI and run on every conduit, and the [`suite_tests!`]
//!   macro that turns a suite into one `#[test]` per case in a conduit's `tests/`, for
//!   any conduit and runner.
//! - [`procs`]: the process runner. Every multi-process test (a conduit's, a layer's,
//!   the facade's) starts its job with [`procs::Procs`]: ranks are copies of the test
//!   binary, under gex-boot's fork launcher (optionally with a host layout) or Hydra's
//!   `mpiexec`, with a watchdog, per-rank results and logs, and checks that no
//!   process and nothing in `/dev/shm` is left; [`procs::ProcRunner`] runs the suites
//!   that way.
//! - [`tamper`]: [`tamper::Tampered`], a bootstrap that changes what another one says
//!   (a rank, blobs of an exchange), for the tests of what gex checks of its
//!   bootstrap and of its peers.
//!
//! ## What it does not do
//! - It is not a network: `sim` moves bytes between threads of one process; it models
//!   latency and reordering, not bandwidth or the LogGP gap (yet).
//! - It does not launch jobs across machines: [`procs`] starts ranks on this host
//!   (simulated hosts, e.g. network namespaces, through a command prefix).
//!
//! ## Words
//! - **job**: the ranks that initialised one client each together; here often threads.
//! - **case**: one conformance check, a function every rank of a fresh job runs.
//! - **suite**: a list of cases (`core`, `rma`).
//! - **runner**: what starts a job and runs a case on each rank ([`conformance::Runner`]).
//! - **exclusion**: a case a conduit declares it cannot pass, with the reason; shown as
//!   an ignored test, never as a pass.
//!
//! ## Running the conformance suites on your conduit
//! In the conduit crate, add `gex-testkit` as a dev-dependency and write
//! `tests/conformance.rs`:
//! ```ignore
//! use gex_testkit::procs::ProcRunner;
//!
//! gex_testkit::suite_tests! {
//!     suite: core,            // or `rma`
//!     conduit: my_conduit::MyConduit,
//!     runner: ProcRunner::new(), // a process per rank; each runs conformance::run_on_rank
//!     ranks: 3,
//!     endpoints: 2,
//!     exclude: {
//!         back_pressure: "MyConduit's queues are unbounded, non-waiting requests never report WouldBlock",
//!     },
//! }
//! ```
//! `cargo test --test conformance` then runs every case (`cargo test --test conformance
//! many_in_flight` one of them). Thread-based conduits use [`sim::SimRunner`]-like
//! runners; one-rank conduits use [`conformance::SingletonRunner`]; process-based
//! conduits use [`procs::ProcRunner`].
//!
//! ## Example: a job of thread ranks on the simulator
//! ```
//! use gex_core::ClientBuilder;
//! use gex_testkit::sim::{run_sim, SimConfig};
//!
//! let ranks = run_sim(4, SimConfig::default(), || ClientBuilder::new().segment_size(4096), |client| {
//!     let mut ep = client.endpoint(0).unwrap();
//!     gex_testkit::exchange_barrier(&mut ep).unwrap();
//!     client.rank()
//! });
//! assert_eq!(ranks, vec![0, 1, 2, 3]);
//! ```

pub mod boot;
pub mod child;
pub mod conformance;
pub mod procs;
#[cfg(feature = "rma")]
pub mod rma;
pub mod rng;
pub mod sim;
pub mod tamper;
pub mod threads;

use gex_core::config::EnvVar;

/// The `GEX_*` settings of the test kit (the simulated fabric, and test switches).
pub const ENV_VARS: &[EnvVar] = &[
    EnvVar {
        name: "GEX_SIM_SEED",
        default: "0",
        doc: "sim conduit: seed of the deterministic delivery schedule.",
    },
    EnvVar {
        name: "GEX_SIM_LATENCY_NS",
        default: "0",
        doc: "sim conduit: modelled one-way latency in nanoseconds.",
    },
    EnvVar {
        name: "GEX_SIM_REORDER",
        default: "0",
        doc: "sim conduit: 1 to let messages from different senders overtake each other.",
    },
    EnvVar {
        name: "GEX_SKIP_NETNS",
        default: "0",
        doc: "Tests: 1 lets the network-namespace tests pass without running (printing why) when namespaces cannot be made here.",
    },
];

/// The [`Endpoint::exchange_tagged`](gex_core::Endpoint::exchange_tagged) tag of
/// [`exchange_barrier`] ("barr").
pub const BARRIER_TAG: u32 = 0x6261_7272;

/// A barrier over the core's all-gather ([`Endpoint::exchange`](gex_core::Endpoint::exchange))
/// on `ep`'s primordial team, for tests of the AM layer that run without the
/// collectives layer (whose barrier is the fast one). An exchange completes on a member
/// only once every member has entered it.
///
/// # Errors
/// As [`Endpoint::exchange`](gex_core::Endpoint::exchange).
pub fn exchange_barrier<C: gex_core::spi::Conduit>(
    ep: &mut gex_core::Endpoint<C>,
) -> Result<(), gex_core::AmError> {
    let w = ep.world();
    ep.exchange_tagged(&w, crate::BARRIER_TAG, &[]).map(drop)
}

/// Endpoint 0 of `client` with a handler at `index` that does nothing, returned once
/// every rank has one (an [`exchange_barrier`]): a target other ranks may send to.
///
/// # Panics
/// If the endpoint cannot be taken, the handler registered or the barrier fails.
pub fn barrier_endpoint<C: gex_core::spi::Conduit>(
    client: &gex_core::Client<C>,
    index: gex_core::HandlerIndex,
) -> gex_core::OwnedEndpoint<C> {
    let mut ep = client.endpoint(0).expect("ep");
    ep.register_at(index, |_: &mut gex_core::Token<'_>, _: gex_core::Am<'_>| {})
        .expect("register");
    exchange_barrier(&mut ep).expect("barrier");
    ep
}

/// The end of a rank's body: drops `ep`, then finalizes `client`.
///
/// # Errors
/// [`Client::finalize`](gex_core::Client::finalize)'s error, as text.
pub fn finalize<C: gex_core::spi::Conduit>(
    ep: gex_core::OwnedEndpoint<C>,
    client: gex_core::Client<C>,
) -> Result<(), String> {
    drop(ep);
    client.finalize().map_err(|e| e.to_string())
}

/// Registers at `index` on `ep` a handler that counts the messages it runs for, and
/// returns the count.
///
/// # Panics
/// If `index` cannot be registered (taken, or not a client index).
pub fn counting_handler<C: gex_core::spi::Conduit>(
    ep: &mut gex_core::Endpoint<C>,
    index: gex_core::HandlerIndex,
) -> std::sync::Arc<std::sync::atomic::AtomicU64> {
    use std::sync::atomic::Ordering;
    let n = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let m = n.clone();
    ep.register_at(
        index,
        move |_: &mut gex_core::Token<'_>, _: gex_core::Am<'_>| {
            m.fetch_add(1, Ordering::Relaxed);
        },
    )
    .unwrap();
    n
}

/// Runs `f`, ending the test process (exit code 101, naming `what`) if it takes
/// longer than `limit`: a hang is a failure, never a stuck test run.
pub fn watchdog<T>(what: &str, limit: std::time::Duration, f: impl FnOnce() -> T) -> T {
    use std::sync::atomic::{AtomicBool, Ordering};
    let done = std::sync::Arc::new(AtomicBool::new(false));
    let d = done.clone();
    let what = what.to_string();
    std::thread::spawn(move || {
        let start = std::time::Instant::now();
        while !d.load(Ordering::Relaxed) {
            if start.elapsed() > limit {
                eprintln!("{what}: a job hung for {limit:?}");
                std::process::exit(101);
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    });
    let r = f();
    done.store(true, Ordering::Relaxed);
    r
}

/// `rounds` AM round trips from `ep` to the endpoint of the same index on rank `peer`,
/// in lockstep with another thread's endpoint: after round `i` this one stores `i` in
/// `mine`, then waits (inside its own wait loop) until `other` reaches `i`, so each
/// thread must make progress while the other waits. Registers a handler at `ping`
/// that replies with `pong`, and one at `pong` that counts; the first request is
/// retried while the peer's endpoint does not exist yet. Returns once the peer's
/// `rounds + 1` requests were served too.
///
/// # Panics
/// If a handler cannot be registered or a request fails otherwise.
pub fn lockstep_round_trips<C: gex_core::spi::Conduit>(
    ep: &mut gex_core::Endpoint<C>,
    (ping, pong): (gex_core::HandlerId, gex_core::HandlerId),
    peer: u32,
    rounds: u64,
    (mine, other): (&std::sync::atomic::AtomicU64, &std::sync::atomic::AtomicU64),
) {
    use gex_core::{Am, AmError, Body, EpAddr, Token, spi::ConduitError};
    use std::sync::atomic::{AtomicU64, Ordering};
    let served = std::sync::Arc::new(AtomicU64::new(0));
    let s = served.clone();
    ep.register_at(ping.index(), move |t: &mut Token<'_>, am: Am<'_>| {
        s.fetch_add(1, Ordering::Relaxed);
        t.reply(pong, Body::short(am.args())).unwrap();
    })
    .unwrap();
    let pongs = counting_handler(ep, pong.index());
    let dst = EpAddr::new(peer, ep.index());
    // The peer creates its endpoint at the same time: retry until it exists.
    loop {
        match ep.request(dst, ping, Body::short(&[0])) {
            Ok(()) => break,
            Err(AmError::Conduit(ConduitError::NoEndpoint { .. })) => {
                ep.poll();
                std::thread::yield_now();
            }
            Err(e) => panic!("{e}"),
        }
    }
    ep.wait_until(|| pongs.load(Ordering::Relaxed) == 1);
    for i in 1..=rounds {
        ep.request(dst, ping, Body::short(&[i as u32])).unwrap();
        ep.wait_until(|| pongs.load(Ordering::Relaxed) == i + 1);
        mine.store(i, Ordering::Release);
        // Inside this endpoint's wait loop: the other thread must advance meanwhile.
        ep.wait_until(|| other.load(Ordering::Acquire) >= i);
    }
    // Serve the peer's last requests before closing.
    ep.wait_until(|| served.load(Ordering::Relaxed) == rounds + 1);
}

/// Endpoint 0 of `c` and an endpoint made at run time (index 1), each on a thread of
/// its own, make `rounds` [`lockstep_round_trips`] with the endpoint of the same index
/// on rank `peer` (each thread's progress waiting for the other's). Endpoint 1 is
/// dropped by its thread; endpoint 0 is returned.
///
/// # Panics
/// If an endpoint cannot be had, a round trip fails, or a thread did not make every
/// round.
pub fn two_threads_two_endpoints<C: gex_core::spi::Conduit>(
    c: &gex_core::Client<C>,
    handlers: (gex_core::HandlerId, gex_core::HandlerId),
    peer: u32,
    rounds: u64,
) -> gex_core::OwnedEndpoint<C> {
    use std::sync::atomic::{AtomicU64, Ordering};
    let mut ep0 = c.endpoint(0).unwrap();
    let ep1 = c.create_endpoint().unwrap();
    let (a, b) = (AtomicU64::new(0), AtomicU64::new(0));
    std::thread::scope(|s| {
        let (a, b, ep0) = (&a, &b, &mut ep0);
        s.spawn(move || lockstep_round_trips(ep0, handlers, peer, rounds, (a, b)));
        s.spawn(move || lockstep_round_trips(&mut { ep1 }, handlers, peer, rounds, (b, a)));
    });
    assert_eq!(
        (a.load(Ordering::Relaxed), b.load(Ordering::Relaxed)),
        (rounds, rounds)
    );
    ep0
}

/// Asserts that `r`, a request to `dst`, failed with the conduit's
/// [`NoEndpoint`](gex_core::spi::ConduitError::NoEndpoint) in `state` ("not created
/// yet", "closed").
///
/// # Panics
/// If it did not, naming `dst`.
pub fn assert_not_open(
    r: Result<(), gex_core::AmError>,
    dst: gex_core::EpAddr,
    state: &'static str,
) {
    use gex_core::{AmError, spi::ConduitError};
    assert_eq!(
        r,
        Err(AmError::Conduit(ConduitError::NoEndpoint { dst, state })),
        "send to {dst}"
    );
}

/// Asserts what requests from `ep` (with the handler `h`) to endpoints that do not
/// exist come to: a Short, a Medium and a Long to `absent` (within the capacity, not
/// created yet) fail with the conduit's `NoEndpoint` and send nothing, and a Short to
/// `beyond` (an index at or past the capacity `eps`) with the core's own
/// [`AmError::BadEndpoint`](gex_core::AmError::BadEndpoint).
///
/// # Panics
/// If any request ends otherwise.
pub fn assert_absent_and_beyond<C: gex_core::spi::Conduit>(
    ep: &mut gex_core::Endpoint<C>,
    h: gex_core::HandlerId,
    absent: gex_core::EpAddr,
    (beyond, eps): (gex_core::EpAddr, u16),
) {
    use gex_core::{AmError, Body};
    let state = "not created yet";
    assert_not_open(ep.request(absent, h, Body::short(&[])), absent, state);
    let data: &[u8] = &[1, 2, 3];
    let medium = ep.request(absent, h, Body::medium(&[], data));
    assert_not_open(medium, absent, state);
    let long = ep.request(absent, h, Body::long(&[], data, 0));
    assert_not_open(long, absent, state);
    assert_eq!(
        ep.request(beyond, h, Body::short(&[])),
        Err(AmError::BadEndpoint { dst: beyond, eps }),
        "send beyond the capacity"
    );
}

/// Asserts that `c` can make no more endpoints: `create_endpoint` fails with
/// [`EpError::Full`](gex_core::EpError::Full) naming the capacity and the endpoints
/// made at initialisation.
///
/// # Panics
/// If it makes one, or fails otherwise.
pub fn assert_endpoints_full<C: gex_core::spi::Conduit>(
    c: &gex_core::Client<C>,
    capacity: u16,
    init: u16,
) {
    assert_eq!(
        c.create_endpoint().map(|_| ()),
        Err(gex_core::EpError::Full { capacity, init }),
        "create_endpoint past the capacity"
    );
}

/// The text of a panic payload (`&str` or `String`).
pub(crate) fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".to_string()
    }
}
