//! The conformance suite: one set of cases, written once against the conduit SPI and
//! run on every conduit (sim, loopback, smp, ...).
//!
//! A [`Case`] is a function `fn(&Client<C>) -> Result<(), String>` that every rank of a
//! fresh job runs (SPMD); it takes the endpoints it needs from the client, registers
//! its handlers, synchronises with a barrier over the core's all-gather (as
//! [`exchange_barrier`](crate::exchange_barrier)) before sending, and quiesces before
//! it returns. [`cases`] lists them all. The cases
//! port the *semantics* of GASNet-EX's `testam` and `testcore*` tests.
//!
//! # Cases
//! | case | ranks | EPs | checks |
//! |---|---|---|---|
//! | `segment_basics` | 1 | 1 | segments zero-filled, sized as agreed, local read/write round trip and bounds; endpoints taken once |
//! | `register_errors` | 1 | 1 | `RegisterError::{Zero, Reserved, AlreadyRegistered}`; a refused registration keeps the first handler |
//! | `request_errors` | 1 | 1 | `BadRank`, `BadEndpoint`, `TooManyArgs`, `UnregisteredHandler`, `PayloadTooLarge`, `OutOfSegment` (also offsets near `usize::MAX`), waiting and non-waiting (`try_request`); failed requests send nothing |
//! | `reply_errors` | 1 | 1 | in handlers: reply validation errors, then `AlreadyReplied` (every category), `ReplyFromReply` (every category); failed replies send nothing |
//! | `am_categories` | 1 | 1 | Short/Medium/Long x args `0..=max_args` x sizes 0, 1, max-1, max, as request and as reply, to the right neighbour and to self; bytes, args, kind, source, Long offset and address |
//! | `ping_pong_all_pairs` | 1 | 1 | every rank pings every rank (self included) in all three categories, concurrently |
//! | `long_offsets` | 1 | 1 | Long payloads at many offsets (unaligned, zero-length, at the segment's end) land exactly there and nowhere else |
//! | `payload_source_reuse` | 1 | 1 | payload buffers reusable when injection returns; `request_owned` gives its buffer back intact |
//! | `many_in_flight` | 1 | 1 | 10 000 requests from every rank to every other before waiting, all replied; no loss, no duplicates |
//! | `flood_one_rank` | 3 | 1 | every rank floods rank 0 at once; contents, no loss, no duplicates |
//! | `multi_ep` | 1 | 2 | one thread per EP; EP k sends to EP k and EP k+1 of every rank; sources, targets, replies |
//! | `immediate_flood` | 1 | 1 | non-waiting flood into a rank that does not poll; `WouldBlock` only from non-waiting requests; exactly the requests reported `Sent` arrive |
//! | `back_pressure` | 1 | 1 | as `immediate_flood`, and every sender sees `WouldBlock` (bounded queues) |
//! | `negotiated_payload` | 1 | 1 | prepare/fill/commit fewer bytes (Medium, Long, zero bytes, non-waiting); dropped and failed commits send nothing; prepare-time errors |
//! | `barrier_with_traffic` | 1 | 1 | a barrier (the core's all-gather, `Endpoint::exchange_tagged`) 60 times with requests in flight; no rank passes it early |
//! | `capabilities` | 1 | 1 | `SHARED_MEMORY`, `NP_IN_PLACE`, `BLOCKING_WAIT` match behaviour |
//!
//! Under Miri (`cfg(miri)`, `ci/miri.sh`) the cases are Miri-sized: the loops of
//! `many_in_flight`, `flood_one_rank`, `multi_ep`, the floods, `barrier_with_traffic`,
//! `ping_pong_all_pairs` and `payload_source_reuse` run fewer iterations, and
//! [`SingletonRunner`] and [`SimRunner`](crate::sim::SimRunner) give 4 KiB segments
//! (every byte of a Long payload is read with an atomic load, which Miri makes slow),
//! and the simulator's Medium payloads and request lanes are smaller; what each case
//! checks is the same (docs/testing.md, "Miri").
//!
//! # Running the suite on a conduit
//! A conduit crate expands one `#[test]` per case with
//! [`suite_tests!`](crate::suite_tests) (crate root; `suite: core` for this suite,
//! `suite: rma` for [the RMA suite](crate::rma)), giving a [`Runner`]: the thing that
//! starts a job of N ranks and runs a case on every rank with [`run_on_rank`].
//!
//! ## Thread-based runners (the simulator, one-rank conduits)
//! ```ignore
//! // tests/conformance_sim.rs
//! mod r3 {
//!     gex_testkit::suite_tests! {
//!         suite: core,
//!         conduit: gex_testkit::sim::Sim,
//!         runner: gex_testkit::sim::SimRunner::new(gex_testkit::sim::SimConfig::default()),
//!         ranks: 3,
//!     }
//! }
//! ```
//!
//! ## Process-based runners (smp, ofi, ...)
//! [`ProcRunner`](crate::procs::ProcRunner) re-executes the test binary for each rank
//! through [`procs::Procs`](crate::procs::Procs), running only the current test
//! (`Job::test_path`) in the children; each rank builds its client and runs the case,
//! aborting the job if it fails:
//! ```ignore
//! use gex_conduit_smp::Smp;
//! use gex_core::ClientBuilder;
//! use gex_testkit::procs::ProcRunner;
//!
//! gex_testkit::suite_tests! {
//!     suite: core,
//!     conduit: Smp,
//!     runner: ProcRunner::new().builder(|| ClientBuilder::new().segment_size(1 << 20)),
//!     ranks: 3,
//!     endpoints: 2,
//! }
//! ```
//! The generated test functions are named after the cases, so `Job::test_path` is the
//! exact libtest name of the running test (module path below the crate plus case name)
//! and children started with `<test_path> --exact` run exactly that test. A runner
//! that needs more around a job (network namespaces made before it and deleted after)
//! is a function `fn(&Job<'_>, &Case<C>) -> Result<(), String>` calling
//! [`procs::Procs`](crate::procs::Procs) itself.
//!
//! # Exclusions
//! A case a conduit cannot pass is listed with its reason:
//! `exclude: { back_pressure: "queues are unbounded", }`. The macro marks that test
//! `#[ignore = "<reason>"]`, so `cargo test` prints it as
//! `test back_pressure ... ignored, queues are unbounded` and counts it as ignored,
//! never as passed. A name that is not a case is a compile error.
//! `cargo test -- --ignored` runs the excluded cases (to see whether an exclusion is
//! still needed), on thread and process runners alike (the process runner starts its
//! ranks with `--include-ignored`).
//!
//! # Ranks and endpoints
//! A job has `max(ranks, case.min_ranks)` ranks and `max(endpoints, case.min_eps)`
//! endpoints per rank ([`Job`]); a runner must honour both. Cases assume that limits are
//! symmetric between two peers (`limits(a → b) == limits(b → a)`) and that segments are
//! small enough to send a segment-sized Long payload several hundred times (runners
//! should use segments of a few hundred KiB at most).

mod am;
mod aux;
mod basic;
mod caps;
mod load;
mod np;
mod probe;
mod raw;
mod util;

use gex_core::Client;
use gex_core::spi::Conduit;
use std::time::{Duration, Instant};

pub use probe::{Probe, builder};
pub use util::CASE_WAIT;

/// The client builder of the conformance suite (its probe layer), as
/// [`builder`] makes it.
pub type Builder = gex_core::ClientBuilder<((), Probe)>;

/// One conformance case.
pub struct Case<C: Conduit> {
    /// Name (also the name of the generated test function).
    pub name: &'static str,
    /// One line on what it checks.
    pub about: &'static str,
    /// Fewest ranks the case needs.
    pub min_ranks: u32,
    /// Fewest endpoints per rank the case needs.
    pub min_eps: u16,
    /// The case body, run on every rank of the job.
    pub run: fn(&Client<C>) -> Result<(), String>,
}

impl<C: Conduit> Clone for Case<C> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<C: Conduit> Copy for Case<C> {}
impl<C: Conduit> std::fmt::Debug for Case<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Case")
            .field("name", &self.name)
            .field("min_ranks", &self.min_ranks)
            .field("min_eps", &self.min_eps)
            .finish()
    }
}

/// Names of every case, in registry order. [`suite_tests!`](crate::suite_tests)
/// expands exactly these for `suite: core`.
pub const CASE_NAMES: &[&str] = &[
    "segment_basics",
    "register_errors",
    "request_errors",
    "reply_errors",
    "am_categories",
    "ping_pong_all_pairs",
    "long_offsets",
    "payload_source_reuse",
    "many_in_flight",
    "flood_one_rank",
    "multi_ep",
    "immediate_flood",
    "back_pressure",
    "negotiated_payload",
    "barrier_with_traffic",
    "capabilities",
    "aux_area",
];

/// Every case, in [`CASE_NAMES`] order.
pub fn cases<C: Conduit>() -> Vec<Case<C>> {
    fn c<C: Conduit>(
        name: &'static str,
        about: &'static str,
        min_ranks: u32,
        min_eps: u16,
        run: fn(&Client<C>) -> Result<(), String>,
    ) -> Case<C> {
        Case {
            name,
            about,
            min_ranks,
            min_eps,
            run,
        }
    }
    vec![
        c(
            "segment_basics",
            "segments are zero-filled, sized as agreed, and addressable",
            1,
            1,
            basic::segment_basics::<C>,
        ),
        c(
            "register_errors",
            "handler registration: Zero, Reserved, AlreadyRegistered",
            1,
            1,
            basic::register_errors::<C>,
        ),
        c(
            "request_errors",
            "every sender-side validation error, and that a failed request sends nothing",
            1,
            1,
            basic::request_errors::<C>,
        ),
        c(
            "reply_errors",
            "reply rules: AlreadyReplied, ReplyFromReply, and reply validation",
            1,
            1,
            basic::reply_errors::<C>,
        ),
        c(
            "am_categories",
            "Short/Medium/Long x 0..=max args x sizes 0, 1, max-1, max, as request and reply",
            1,
            1,
            am::am_categories::<C>,
        ),
        c(
            "ping_pong_all_pairs",
            "request/reply ping-pong between every pair of ranks, self included",
            1,
            1,
            am::ping_pong_all_pairs::<C>,
        ),
        c(
            "long_offsets",
            "Long payloads land at their offsets; handlers see offset and payload",
            1,
            1,
            am::long_offsets::<C>,
        ),
        c(
            "payload_source_reuse",
            "payload sources are reusable as soon as injection returns",
            1,
            1,
            am::payload_source_reuse::<C>,
        ),
        c(
            "many_in_flight",
            "10000 requests from every rank to every other before waiting",
            1,
            1,
            load::many_in_flight::<C>,
        ),
        c(
            "flood_one_rank",
            "every rank floods one rank concurrently",
            3,
            1,
            load::flood_one_rank::<C>,
        ),
        c(
            "multi_ep",
            "one thread per endpoint; EP k talks to EP k and to other EPs of every rank",
            1,
            2,
            load::multi_ep::<C>,
        ),
        c(
            "immediate_flood",
            "non-waiting floods lose and duplicate nothing; WouldBlock only from non-waiting requests",
            1,
            1,
            load::immediate_flood::<C>,
        ),
        c(
            "back_pressure",
            "a non-waiting flood into a rank that does not poll reports WouldBlock",
            1,
            1,
            load::back_pressure::<C>,
        ),
        c(
            "negotiated_payload",
            "prepare/commit in place, commit fewer bytes, drop sends nothing, errors",
            1,
            1,
            np::negotiated_payload::<C>,
        ),
        c(
            "barrier_with_traffic",
            "the core barrier, many times, with AM traffic in flight",
            1,
            1,
            load::barrier_with_traffic::<C>,
        ),
        c(
            "capabilities",
            "capability flags match behaviour (NP_IN_PLACE, SHARED_MEMORY, BLOCKING_WAIT)",
            1,
            1,
            caps::capabilities::<C>,
        ),
        c(
            "aux_area",
            "auxiliary areas: offered with the segment mappings, shared, zeroed; wake",
            1,
            1,
            aux::aux_area::<C>,
        ),
    ]
}

/// The case called `name`.
pub fn case<C: Conduit>(name: &str) -> Option<Case<C>> {
    cases::<C>().into_iter().find(|c| c.name == name)
}

/// True if `name` is a case (usable in constants: the macro checks exclusion lists with it).
pub const fn is_case_name(name: &str) -> bool {
    let mut i = 0;
    while i < CASE_NAMES.len() {
        if str_eq(CASE_NAMES[i], name) {
            return true;
        }
        i += 1;
    }
    false
}

const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// What a runner must start for one case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Job<'a> {
    /// The case name.
    pub case: &'a str,
    /// Ranks of the job.
    pub ranks: u32,
    /// Endpoints each rank's client must be built with
    /// ([`ClientBuilder::endpoints`](gex_core::ClientBuilder::endpoints)).
    pub endpoints: u16,
    /// The exact libtest name of the running test (for runners that re-execute the
    /// test binary: `<binary> <test_path> --exact`).
    pub test_path: &'a str,
}

/// Starts a job and runs a case on every rank (see the [module docs](self)).
pub trait Runner<C: Conduit> {
    /// Runs `case` on every rank of a fresh job shaped by `job`, each rank calling
    /// [`run_on_rank`]. Returns an error describing the first failure.
    ///
    /// # Errors
    /// Whatever failed, as text (rank number included).
    fn run(&self, job: &Job<'_>, case: &Case<C>) -> Result<(), String>;
}

impl<C: Conduit, F> Runner<C> for F
where
    F: Fn(&Job<'_>, &Case<C>) -> Result<(), String>,
{
    fn run(&self, job: &Job<'_>, case: &Case<C>) -> Result<(), String> {
        self(job, case)
    }
}

/// Runs `case` on this rank: checks the job's shape, then calls the case.
///
/// # Errors
/// The case's failure, prefixed with the rank and case name.
pub fn run_on_rank<C: Conduit>(client: &Client<C>, case: &Case<C>) -> Result<(), String> {
    let me = client.rank();
    let needs = |what: &str, need: u32, has: u32| {
        if has < need {
            Err(format!(
                "rank {me}: case {} needs {need} {what} {has}",
                case.name
            ))
        } else {
            Ok(())
        }
    };
    needs("ranks, the job has", case.min_ranks, client.size())?;
    needs(
        "endpoints, the client has",
        case.min_eps.into(),
        client.endpoint_count().into(),
    )?;
    (case.run)(client).map_err(|e| {
        format!(
            "rank {me}: case {} on {}: {e}",
            case.name,
            client.conduit_name()
        )
    })
}

/// The libtest name of test `name` generated in the module `module_path` (as given by
/// `module_path!()`, whose first segment is the crate and is dropped).
pub fn test_path(module_path: &str, name: &str) -> String {
    match module_path.split_once("::") {
        Some((_, rest)) => format!("{rest}::{name}"),
        None => name.to_string(),
    }
}

/// The suites [`suite_tests!`](crate::suite_tests) knows, by the name it is given
/// (`suite: core`): the core AM suite ([`cases`]) and the RMA suite
/// ([`rma::cases`](crate::rma::cases)).
pub const SUITES: &[&str] = &["core", "rma"];

/// True if `name` is a case of the suite called `suite` (usable in constants: the
/// macro checks exclusion lists with it).
pub const fn suite_has_case(suite: &str, name: &str) -> bool {
    if str_eq(suite, "core") {
        is_case_name(name)
    } else if str_eq(suite, "rma") {
        crate::rma::is_case_name(name)
    } else {
        false
    }
}

/// The body of every test [`suite_tests!`](crate::suite_tests) generates: finds case
/// `name` of suite `suite`, shapes the job, runs it with `runner`, and panics with the
/// failure.
///
/// # Panics
/// If `suite` is not a suite, `name` is not one of its cases, or the case fails.
pub fn run_case<C: Conduit, R: Runner<C> + ?Sized>(
    suite: &str,
    name: &str,
    runner: &R,
    ranks: u32,
    endpoints: u16,
    module_path: &str,
) {
    let (label, all) = match suite {
        "core" => ("conformance", cases::<C>()),
        "rma" => ("rma conformance", crate::rma::cases::<C>()),
        other => panic!("{other} is not a suite (the suites are {SUITES:?})"),
    };
    let case = all
        .into_iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("{name} is not a case of the {suite} suite"));
    let path = test_path(module_path, name);
    let job = Job {
        case: name,
        ranks: ranks.max(case.min_ranks),
        endpoints: endpoints.max(case.min_eps),
        test_path: &path,
    };
    // The RMA suite runs both ways: as built, and with the reference path forced.
    let path_kind = match (suite, cfg!(gex_force_am_rma)) {
        ("rma", true) => ", forced AM path",
        ("rma", false) => ", auto path",
        _ => "",
    };
    let t0 = Instant::now();
    match runner.run(&job, &case) {
        Ok(()) => eprintln!(
            "{label} {}: {name} passed ({} ranks, {} endpoints{path_kind}, {:?})",
            C::NAME,
            job.ranks,
            job.endpoints,
            t0.elapsed()
        ),
        Err(e) => panic!(
            "{label} {}: {name} FAILED ({} ranks, {} endpoints{path_kind}): {e}",
            C::NAME,
            job.ranks,
            job.endpoints
        ),
    }
}

/// A [`Runner`] for conduits that run a job of one rank with gex-core's
/// [`Singleton`](gex_core::boot::Singleton) bootstrap (e.g.
/// [`Loopback`](gex_core::loopback::Loopback)). The rank runs on its own thread with a
/// timeout; cases needing more than one rank fail with a message asking to exclude them.
#[derive(Clone, Copy, Debug)]
pub struct SingletonRunner {
    /// Segment length of every endpoint.
    pub segment_size: usize,
    /// Bound on one case; the test fails (and leaks the rank thread) after it.
    pub timeout: Duration,
}

impl Default for SingletonRunner {
    /// 64 KiB segments (4 KiB under Miri), 60 s per case.
    fn default() -> Self {
        SingletonRunner {
            segment_size: if cfg!(miri) { 4 << 10 } else { 64 << 10 },
            timeout: Duration::from_secs(60),
        }
    }
}

impl<C: Conduit> Runner<C> for SingletonRunner {
    fn run(&self, job: &Job<'_>, case: &Case<C>) -> Result<(), String> {
        if job.ranks != 1 {
            return Err(format!(
                "case {} needs {} ranks; SingletonRunner runs one (exclude the case with its reason)",
                case.name, job.ranks
            ));
        }
        let (seg, eps, case) = (self.segment_size, job.endpoints, *case);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("singleton-rank".into())
            .stack_size(8 << 20)
            .spawn(move || {
                let r = std::panic::catch_unwind(|| {
                    let client = builder()
                        .segment_size(seg)
                        .endpoints(eps)
                        .init::<C>(Box::new(gex_core::boot::Singleton::new()))
                        .map_err(|e| format!("init failed: {e}"))?;
                    run_on_rank(&client, &case)
                });
                let _ = tx.send(
                    r.unwrap_or_else(|p| Err(format!("panicked: {}", crate::panic_text(&*p)))),
                );
            })
            .map_err(|e| format!("spawn: {e}"))?;
        match rx.recv_timeout(self.timeout) {
            Ok(r) => r,
            Err(_) => Err(format!(
                "case {} did not finish within {:?} (its thread is leaked)",
                case.name, self.timeout
            )),
        }
    }
}

/// Expands one `#[test]` per case of a suite, for one conduit and runner.
///
/// ```ignore
/// gex_testkit::suite_tests! {
///     suite: core,                   // `core` (the AM suite) or `rma` (the RMA suite)
///     conduit: MyConduit,            // a type implementing gex_core::spi::Conduit
///     runner: my_runner,             // an expression implementing conformance::Runner<MyConduit>
///     ranks: 3,                      // ranks per job (raised to a case's min_ranks)
///     endpoints: 2,                  // optional, default 1 (raised to a case's min_eps)
///     exclude: {                     // optional: case name: "reason"
///         back_pressure: "MyConduit's queues are unbounded",
///     },
/// }
/// ```
/// Every generated test is named after its case; excluded cases become
/// `#[ignore = "<reason>"]` tests, listed as ignored with their reason and never
/// counted as passes; a name in `exclude` that is not a case of the suite, or an
/// unknown suite, is a compile error. The runner expression is evaluated once per
/// test: a thread runner ([`SimRunner`](crate::sim::SimRunner),
/// [`SingletonRunner`]) or the process runner
/// ([`ProcRunner`](crate::procs::ProcRunner)) for conduits whose ranks are
/// processes. Invoke the macro at most once per module (wrap each configuration in
/// its own `mod`). See the [`conformance`](crate::conformance) module.
#[macro_export]
macro_rules! suite_tests {
    (
        suite: $s:ident,
        conduit: $c:ty,
        runner: $r:expr,
        ranks: $n:expr
        $(, endpoints: $e:expr)?
        $(, exclude: { $($x:ident : $why:literal),* $(,)? })?
        $(,)?
    ) => {
        $crate::__gex_suite_impl! {
            ($) $s [$c] [$r] [$n] [$crate::__gex_first!($($e,)? 1u16)] [$($($x : $why),*)?]
        }
    };
}

/// Several configurations of one suite, each in its own module (what
/// [`suite_tests!`] asks for), one entry a configuration: its doc, module name, runner,
/// ranks and optionally endpoints. Each module has `use super::*;`.
///
/// ```ignore
/// gex_testkit::suite_modules! {
///     suite: rma,
///     conduit: MyConduit;
///
///     /// Native RMA, three ranks.
///     native: runner(config("1")), ranks 3;
///
///     /// Two ranks with two endpoints each.
///     two_eps: runner(config("1")), ranks 2, endpoints 2;
/// }
/// ```
#[macro_export]
macro_rules! suite_modules {
    (
        suite: $s:ident,
        conduit: $c:ty;
        $($(#[$doc:meta])* $name:ident: $r:expr, ranks $n:expr $(, endpoints $e:expr)?;)*
    ) => {
        $(
            $(#[$doc])*
            mod $name {
                use super::*;
                $crate::suite_tests! {
                    suite: $s,
                    conduit: $c,
                    runner: $r,
                    ranks: $n,
                    $(endpoints: $e,)?
                }
            }
        )*
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __gex_first {
    ($a:expr $(, $rest:expr)*) => {
        $a
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __gex_suite_impl {
    (($d:tt) $s:ident [$c:ty] [$r:expr] [$n:expr] [$e:expr] [$($x:ident : $why:literal),*]) => {
        $(
            const _: () = ::core::assert!(
                $crate::conformance::suite_has_case(::core::stringify!($s), ::core::stringify!($x)),
                ::core::concat!("suite_tests!: `", ::core::stringify!($x), "` in the exclude list is not a case of the `", ::core::stringify!($s), "` suite"),
            );
        )*
        macro_rules! __gex_suite_one {
            $(
                ($x) => {
                    #[test]
                    #[ignore = $why]
                    fn $x() {
                        $crate::conformance::run_case::<$c, _>(::core::stringify!($s), ::core::stringify!($x), &$r, $n, $e, ::core::module_path!());
                    }
                };
            )*
            ($d name:ident) => {
                #[test]
                fn $d name() {
                    $crate::conformance::run_case::<$c, _>(::core::stringify!($s), ::core::stringify!($d name), &$r, $n, $e, ::core::module_path!());
                }
            };
        }
        $crate::__gex_suite_cases! { $s, __gex_suite_one }
    };
}

/// Calls `$cb!(name)` for every case name of a suite. Keep in step with [`CASE_NAMES`]
/// and [`rma::CASE_NAMES`](crate::rma::CASE_NAMES) (a unit test checks it).
#[doc(hidden)]
#[macro_export]
macro_rules! __gex_suite_cases {
    (core, $cb:ident) => {
        $cb!(segment_basics);
        $cb!(register_errors);
        $cb!(request_errors);
        $cb!(reply_errors);
        $cb!(am_categories);
        $cb!(ping_pong_all_pairs);
        $cb!(long_offsets);
        $cb!(payload_source_reuse);
        $cb!(many_in_flight);
        $cb!(flood_one_rank);
        $cb!(multi_ep);
        $cb!(immediate_flood);
        $cb!(back_pressure);
        $cb!(negotiated_payload);
        $cb!(barrier_with_traffic);
        $cb!(capabilities);
        $cb!(aux_area);
    };
    (rma, $cb:ident) => {
        $cb!(rma_contiguous);
        $cb!(rma_large);
        $cb!(rma_values_memset);
        $cb!(rma_nb_events);
        $cb!(rma_nbi_regions);
        $cb!(rma_vis_shapes);
        $cb!(rma_errors);
        $cb!(rma_multi_ep);
        $cb!(rma_atomic_ops);
        $cb!(rma_atomic_concurrency);
        $cb!(rma_atomic_errors);
        $cb!(rma_barrier_visibility);
    };
    ($other:ident, $cb:ident) => {
        ::core::compile_error!(::core::concat!(
            "suite_tests!: unknown suite `",
            ::core::stringify!($other),
            "` (the suites are `core` and `rma`)"
        ));
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use gex_core::loopback::Loopback;

    #[test]
    fn registry_matches_names_and_macro_list() {
        let names: Vec<&str> = cases::<Loopback>().iter().map(|c| c.name).collect();
        assert_eq!(names, CASE_NAMES);
        let mut expanded: Vec<&str> = Vec::new();
        macro_rules! collect {
            ($n:ident) => {
                expanded.push(stringify!($n));
            };
        }
        crate::__gex_suite_cases!(core, collect);
        assert_eq!(expanded, CASE_NAMES);
        expanded.clear();
        crate::__gex_suite_cases!(rma, collect);
        assert_eq!(expanded, crate::rma::CASE_NAMES);
        assert!(suite_has_case("core", "multi_ep") && suite_has_case("rma", "rma_multi_ep"));
        assert!(!suite_has_case("core", "rma_multi_ep") && !suite_has_case("rma", "multi_ep"));
        assert!(!suite_has_case("coll", "multi_ep"));
        assert!(is_case_name("am_categories"));
        assert!(!is_case_name("am_categorie"));
        assert!(!is_case_name(""));
    }

    #[test]
    fn test_paths() {
        assert_eq!(
            test_path("conformance_smp", "am_categories"),
            "am_categories"
        );
        assert_eq!(test_path("conformance_sim::r3", "multi_ep"), "r3::multi_ep");
    }
}
