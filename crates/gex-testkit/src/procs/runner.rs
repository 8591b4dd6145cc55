//! The conformance runner over processes ([`ProcRunner`]).

use super::*;

type BuilderFn<L> = Box<dyn Fn() -> ClientBuilder<L>>;
type ProcsFn = Box<dyn Fn(Procs, &Job<'_>) -> Procs>;
type CheckFn<C> = Box<dyn Fn(&Client<C>, &Job<'_>) -> Result<(), String>>;
type AfterFn<C> = fn(&C) -> Result<(), String>;

/// The conformance [`Runner`] for process-based conduits: each case is one job of
/// [`Procs`] (by default the fork launcher, `job.ranks` ranks on this host), in which
/// every rank builds its client from the [`builder`](Self::builder) with
/// `job.endpoints` endpoints, runs the optional [`check`](Self::check), then the case
/// ([`conformance::run_on_rank`]), aborts the job on the first failure (so that no
/// peer waits for it) and finalizes.
///
/// The clients carry the layers of the builder: the AM suite needs the conformance
/// probe ([`conformance::builder`], the default), the RMA suite the RMA layer
/// ([`rma::client_builder`](crate::rma::client_builder)).
///
/// ```ignore
/// // conduits/smp/tests/conformance.rs
/// use gex_testkit::procs::ProcRunner;
///
/// gex_testkit::suite_tests! {
///     suite: core,
///     conduit: gex_conduit_smp::Smp,
///     runner: ProcRunner::new().builder(|| gex_testkit::conformance::builder().segment_size(1 << 20)),
///     ranks: 3,
///     endpoints: 2,
/// }
/// ```
pub struct ProcRunner<C: Conduit, L: LayerSet = ((), conformance::Probe)> {
    builder: BuilderFn<L>,
    procs: ProcsFn,
    check: Option<CheckFn<C>>,
    after: Option<AfterFn<C>>,
}

impl<C: Conduit, L: LayerSet> fmt::Debug for ProcRunner<C, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcRunner")
            .field("conduit", &C::NAME)
            .field("check", &self.check.is_some())
            .field("after_finalize", &self.after.is_some())
            .finish_non_exhaustive()
    }
}

impl<C: Conduit> Default for ProcRunner<C> {
    fn default() -> Self {
        ProcRunner::new()
    }
}

impl<C: Conduit> ProcRunner<C> {
    /// Clients from [`conformance::builder`] (the AM suite's probe layer), jobs of the
    /// fork launcher on this host.
    pub fn new() -> Self {
        ProcRunner {
            builder: Box::new(conformance::builder),
            procs: Box::new(|p, _| p),
            check: None,
            after: None,
        }
    }
}

impl<C: Conduit, L: LayerSet> ProcRunner<C, L> {
    /// How each rank's client is built (layers, segment size, settings, wait
    /// policy); the runner adds the job's endpoint count.
    pub fn builder<L2: LayerSet>(
        self,
        f: impl Fn() -> ClientBuilder<L2> + 'static,
    ) -> ProcRunner<C, L2> {
        ProcRunner {
            builder: Box::new(f),
            procs: self.procs,
            check: self.check,
            after: self.after,
        }
    }

    /// [`builder`](Self::builder) with `builder`'s clients given `segment` bytes of
    /// segment.
    pub fn sized<L2: LayerSet>(
        self,
        builder: impl Fn() -> ClientBuilder<L2> + 'static,
        segment: usize,
    ) -> ProcRunner<C, L2> {
        self.builder(move || builder().segment_size(segment))
    }

    /// Every job is ended, and fails, once it has run for `limit` (on top of the shape
    /// [`procs`](Self::procs) gave it, if called before).
    pub fn timeout(mut self, limit: std::time::Duration) -> Self {
        let shape = self.procs;
        self.procs = Box::new(move |p, job| shape(p, job).timeout(limit));
        self
    }

    /// Jobs on two "hosts" ([`two_hosts`](super::two_hosts)): before the case, each rank
    /// checks that `peers` (the ranks its client reaches through shared memory, or an
    /// error) are exactly the ranks of its host. Sets the jobs' shape (call
    /// [`timeout`](Self::timeout) after it).
    pub fn on_two_hosts(
        self,
        peers: impl Fn(&Client<C>) -> Result<Vec<u32>, String> + 'static,
    ) -> Self {
        self.procs(|p, job| p.hosts(super::two_hosts(job.ranks)))
            .check(move |client, job| {
                let want = super::two_hosts_neighbours(job.ranks, client.rank());
                let got = peers(client)?;
                if got != want {
                    return Err(format!(
                        "rank {}: shared-memory peers {got:?}, want {want:?}",
                        client.rank()
                    ));
                }
                Ok(())
            })
    }

    /// Shapes each job: `f` gets the [`Procs`] of `job.ranks` ranks running the
    /// case's test and returns the one to run (host layout, environment, timeout,
    /// launcher).
    pub fn procs(mut self, f: impl Fn(Procs, &Job<'_>) -> Procs + 'static) -> Self {
        self.procs = Box::new(f);
        self
    }

    /// A check every rank runs on its fresh client before the case (e.g. which peers
    /// it reaches through shared memory); a failure fails the job like the case's.
    pub fn check(
        mut self,
        f: impl Fn(&Client<C>, &Job<'_>) -> Result<(), String> + 'static,
    ) -> Self {
        self.check = Some(Box::new(f));
        self
    }

    /// A check every rank runs on its conduit after the client is finalized (e.g. that
    /// every memory registration was closed).
    pub fn after_finalize(mut self, f: fn(&C) -> Result<(), String>) -> Self {
        self.after = Some(f);
        self
    }

    fn rank(&self, boot: Box<dyn Bootstrap>, job: &Job<'_>, case: &Case<C>) -> Result<(), String> {
        let client = (self.builder)()
            .endpoints(job.endpoints)
            .init::<C>(boot)
            .map_err(|e| e.to_string())?;
        let conduit = client.conduit().clone();
        let r = match &self.check {
            Some(check) => check(&client, job),
            None => Ok(()),
        }
        .and_then(|()| conformance::run_on_rank(&client, case));
        if let Err(e) = r {
            // Record the failure (abort ends this process), then end the whole job
            // promptly rather than leaving peers waiting.
            failed(&e);
            client.abort(1, &e);
        }
        client.finalize().map_err(|e| e.to_string())?;
        match self.after {
            Some(after) => after(&conduit),
            None => Ok(()),
        }
    }
}

impl<C: Conduit, L: LayerSet> Runner<C> for ProcRunner<C, L> {
    fn run(&self, job: &Job<'_>, case: &Case<C>) -> Result<(), String> {
        let procs = (self.procs)(Procs::new(job.ranks).test(job.test_path), job);
        procs.run(|boot| self.rank(boot, job, case)).result()
    }
}
