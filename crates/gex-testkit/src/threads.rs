//! A conformance [`Runner`] whose ranks are threads of this process: each case runs as a
//! job of gex-boot's thread ranks ([`gex_boot::threads`]), every rank building its own
//! client of the conduit under test with its thread bootstrap. With the smp conduit it
//! runs the suites over shared memory between thread ranks of one process.
//!
//! # Example
//! ```no_run
//! use gex_testkit::threads::ThreadRunner;
//!
//! gex_testkit::suite_tests! {
//!     suite: core,
//!     conduit: gex_conduit_smp::Smp,
//!     runner: ThreadRunner::new().builder(|| gex_testkit::conformance::builder().segment_size(1 << 20)),
//!     ranks: 4,
//! }
//! ```

use crate::boot::ThreadJob;
use crate::conformance::{self, Case, Job, Runner};
use gex_core::ClientBuilder;
use gex_core::layer::LayerSet;
use gex_core::spi::Conduit;
use std::fmt;
use std::marker::PhantomData;
use std::sync::{Mutex, mpsc};
use std::time::Duration;

type BuilderFn<L> = Box<dyn Fn() -> ClientBuilder<L>>;

/// Runs each conformance case on a job of thread ranks (see the [module docs](self)).
///
/// A rank whose case fails aborts the job: its bootstrap (abort mode
/// [`OnAbort::Panic`](crate::boot::OnAbort::Panic)) poisons the job and panics, and the
/// thread runner names the rank. A job that runs past the runner's timeout ends the test
/// process with a message (a hang is never an option).
pub struct ThreadRunner<C: Conduit, L: LayerSet = ((), conformance::Probe)> {
    builder: BuilderFn<L>,
    timeout: Duration,
    conduit: PhantomData<fn() -> C>,
}

impl<C: Conduit, L: LayerSet> fmt::Debug for ThreadRunner<C, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadRunner")
            .field("conduit", &C::NAME)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl<C: Conduit> Default for ThreadRunner<C> {
    fn default() -> Self {
        ThreadRunner::new()
    }
}

impl<C: Conduit> ThreadRunner<C> {
    /// Clients from [`conformance::builder`] (the AM suite's probe layer), 10 minutes
    /// per case.
    pub fn new() -> Self {
        ThreadRunner {
            builder: Box::new(conformance::builder),
            timeout: Duration::from_secs(600),
            conduit: PhantomData,
        }
    }
}

impl<C: Conduit, L: LayerSet> ThreadRunner<C, L> {
    /// How each rank's client is built (layers, segment size, settings, wait policy);
    /// the runner adds the job's endpoint count.
    pub fn builder<L2: LayerSet>(
        self,
        f: impl Fn() -> ClientBuilder<L2> + 'static,
    ) -> ThreadRunner<C, L2> {
        ThreadRunner {
            builder: Box::new(f),
            timeout: self.timeout,
            conduit: PhantomData,
        }
    }

    /// Bound on one case; past it the test process ends with a message.
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.timeout = limit;
        self
    }
}

impl<C: Conduit, L: LayerSet> Runner<C> for ThreadRunner<C, L>
where
    ClientBuilder<L>: Send,
{
    fn run(&self, job: &Job<'_>, case: &Case<C>) -> Result<(), String> {
        let builders: Vec<Option<ClientBuilder<L>>> = (0..job.ranks)
            .map(|_| Some((self.builder)().endpoints(job.endpoints)))
            .collect();
        let builders = Mutex::new(builders);
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let (limit, name) = (self.timeout, job.case.to_string());
        // The watchdog: a job that hangs ends the process rather than the test run.
        let dog = std::thread::spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = done_rx.recv_timeout(limit) {
                eprintln!(
                    "gex-testkit ThreadRunner: case {name} still running after {limit:?}; ending the process"
                );
                std::process::exit(101);
            }
        });
        let tj = ThreadJob::new(job.ranks);
        let out = tj.run(|boot| {
            let rank = gex_core::boot::Bootstrap::rank(&boot);
            let b = builders.lock().unwrap_or_else(|e| e.into_inner())[rank as usize]
                .take()
                .expect("one builder per rank");
            let client = b.init::<C>(Box::new(boot)).map_err(|e| e.to_string())?;
            if let Err(e) = conformance::run_on_rank(&client, case) {
                // Ends the job (poison + panic: the thread runner names the rank).
                client.abort(1, &e);
            }
            client.finalize().map_err(|e| e.to_string())
        });
        drop(done_tx);
        let _ = dog.join();
        match out {
            Ok(rs) => rs.into_iter().collect(),
            Err(e) => Err(e.to_string()),
        }
    }
}
