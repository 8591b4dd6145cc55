//! Launching thread-rank jobs on the simulated fabric, with a watchdog.

use super::{Sim, SimConfig, SimFabric};
use crate::boot::ThreadJob;
use crate::conformance::{self, Case, Job, Runner};
use crate::panic_text;
use gex_core::{Client, ClientBuilder, WaitPolicy};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long [`run_sim`] waits, after its watchdog fired and the job was killed, for
/// rank threads to unwind before it aborts the process.
const GRACE: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
struct Progress {
    running: Vec<bool>,
    failures: Vec<(u32, String)>,
}

/// Runs `f` on `ranks` thread ranks of a fresh simulated job and returns each rank's
/// result, in rank order.
///
/// Each rank thread (named `sim-rank-<r>`) builds its client from `builder()` (called
/// on the calling thread, once per rank; it may add layers) with the job's [`SimFabric`] as conduit
/// context and a [`ThreadBoot`](crate::boot::ThreadBoot) placing ranks on hosts per
/// [`SimConfig::placement`] or [`SimConfig::ranks_per_host`], initialises it
/// (collectively), and calls `f` with it.
/// `f` owns the client; dropping it finalises (collectively), so every rank should
/// quiesce its traffic (e.g. with [`exchange_barrier`](crate::exchange_barrier), or the
/// collectives layer's barrier when the builder adds it) before returning.
///
/// `cfg` is used as given: start from [`SimConfig::from_env`] to let `GEX_SIM_SEED`,
/// `GEX_SIM_LATENCY_NS` and `GEX_SIM_REORDER` retune a test (e.g. to replay a seed).
/// Other `GEX_*` variables reach each client through `ClientBuilder` as usual.
///
/// # Panics
/// - If a rank panics (also in `init`): the first panic is re-raised as
///   `run_sim: rank <r> panicked: <message>` after every rank finished. The first
///   failure poisons the fabric and the bootstrap, so ranks waiting for the failed one
///   unwind at once instead of hanging (their secondary panics are listed too).
/// - Watchdog: if the job is still running after [`SimConfig::timeout`], the fabric
///   is poisoned (every rank inside gex unwinds) and `run_sim` panics naming the
///   ranks that had not finished and the fabric's queue state. If some rank thread
///   still does not finish within 10 s more (it is stuck outside gex), the process is
///   **aborted** with a message: a hang is never an option.
pub fn run_sim<F, R, L>(
    ranks: u32,
    cfg: SimConfig,
    builder: impl Fn() -> ClientBuilder<L>,
    f: F,
) -> Vec<R>
where
    F: Fn(Client<Sim>) -> R + Send + Sync,
    R: Send,
    L: gex_core::layer::LayerSet,
{
    assert!(ranks >= 1, "run_sim needs at least one rank");
    let timeout = cfg.timeout;
    let job = ThreadJob::with_hosts_and_timeout(cfg.hosts(ranks), timeout);
    let fabric = SimFabric::new(cfg);
    let progress = Mutex::new(Progress {
        running: vec![true; ranks as usize],
        failures: Vec::new(),
    });
    let cv = Condvar::new();
    let lock = || progress.lock().unwrap_or_else(|e| e.into_inner());
    let mut stalled: Option<(Vec<u32>, String)> = None;

    let results: Vec<std::thread::Result<R>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..ranks)
            .map(|r| {
                let b = builder().conduit_context(fabric.context());
                let boot = job.boot(r);
                let (f, fabric, job, progress, cv) = (&f, &fabric, &job, &progress, &cv);
                std::thread::Builder::new()
                    .name(format!("sim-rank-{r}"))
                    .stack_size(8 << 20)
                    .spawn_scoped(s, move || {
                        let res = catch_unwind(AssertUnwindSafe(|| {
                            let client = b
                                .init::<Sim>(Box::new(boot))
                                .unwrap_or_else(|e| panic!("client init failed: {e}"));
                            f(client)
                        }));
                        let mut p = progress.lock().unwrap_or_else(|e| e.into_inner());
                        if let Err(e) = &res {
                            let msg = panic_text(&**e);
                            let first = p.failures.is_empty();
                            p.failures.push((r, msg.clone()));
                            if first {
                                let why = format!("rank {r} panicked: {msg}");
                                fabric.poison(&why);
                                job.poison(&why);
                            }
                        }
                        p.running[r as usize] = false;
                        drop(p);
                        cv.notify_all();
                        res
                    })
                    .expect("spawn a rank thread")
            })
            .collect();

        let wait_all = |deadline: Instant| -> bool {
            let mut p = lock();
            loop {
                if p.running.iter().all(|&x| !x) {
                    return true;
                }
                let now = Instant::now();
                if now >= deadline {
                    return false;
                }
                p = cv
                    .wait_timeout(p, deadline - now)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        };
        if !wait_all(Instant::now() + timeout) {
            let running: Vec<u32> = lock()
                .running
                .iter()
                .enumerate()
                .filter(|&(_, &x)| x)
                .map(|(r, _)| r as u32)
                .collect();
            let state = fabric.describe();
            eprintln!(
                "gex-testkit run_sim: watchdog: ranks {running:?} still running after {timeout:?}; killing the job\n{state}"
            );
            let why = format!("run_sim watchdog: job still running after {timeout:?}");
            fabric.poison(&why);
            job.poison(&why);
            if !wait_all(Instant::now() + GRACE) {
                eprintln!(
                    "gex-testkit run_sim: ranks {:?} are stuck outside gex {GRACE:?} after the watchdog fired; aborting the process",
                    lock()
                        .running
                        .iter()
                        .enumerate()
                        .filter(|&(_, &x)| x)
                        .map(|(r, _)| r)
                        .collect::<Vec<_>>()
                );
                std::process::abort();
            }
            stalled = Some((running, state));
        }
        handles
            .into_iter()
            .map(|h| h.join().expect("rank panics are caught"))
            .collect()
    });

    let p = progress.into_inner().unwrap_or_else(|e| e.into_inner());
    if let Some((running, state)) = stalled {
        let first = p
            .failures
            .iter()
            .find(|(r, _)| !running.contains(r))
            .map(|(r, m)| format!("; earlier failure: rank {r}: {m}"))
            .unwrap_or_default();
        panic!(
            "run_sim: watchdog fired after {timeout:?}: ranks {running:?} had not finished{first}\n{state}"
        );
    }
    if let Some((r, msg)) = p.failures.first() {
        let others: Vec<String> = p.failures[1..]
            .iter()
            .map(|(r, m)| format!("rank {r}: {}", m.lines().next().unwrap_or("")))
            .collect();
        let others = if others.is_empty() {
            String::new()
        } else {
            format!("\n(then: {})", others.join("; "))
        };
        panic!("run_sim: rank {r} panicked: {msg}{others}");
    }
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|_| unreachable!("failures were reported above")))
        .collect()
}

/// A conformance [`Runner`] for the simulated fabric: every case runs as one
/// [`run_sim`] job with this configuration.
#[derive(Clone, Debug)]
pub struct SimRunner {
    /// Fabric configuration of every job.
    pub cfg: SimConfig,
    /// Segment length of every endpoint (cases send Long payloads up to the segment
    /// length, so keep it small: the default is 64 KiB, 4 KiB under Miri).
    pub segment_size: usize,
    /// Wait policy of every endpoint (`None`: gex's automatic choice, i.e. `GEX_WAIT`).
    pub wait: Option<WaitPolicy>,
}

impl SimRunner {
    /// A runner with this configuration, 64 KiB segments (4 KiB under Miri) and
    /// automatic waiting.
    pub fn new(cfg: SimConfig) -> Self {
        SimRunner {
            cfg,
            segment_size: if cfg!(miri) { 4 << 10 } else { 64 << 10 },
            wait: None,
        }
    }
    /// Sets the segment length.
    pub fn segment_size(mut self, bytes: usize) -> Self {
        self.segment_size = bytes;
        self
    }
    /// Sets the wait policy.
    pub fn wait_policy(mut self, p: WaitPolicy) -> Self {
        self.wait = Some(p);
        self
    }
}

impl Runner<Sim> for SimRunner {
    fn run(&self, job: &Job<'_>, case: &Case<Sim>) -> Result<(), String> {
        let (seg, eps, wait) = (self.segment_size, job.endpoints, self.wait);
        let builder = || {
            let b = crate::conformance::builder()
                .segment_size(seg)
                .endpoints(eps);
            match wait {
                Some(w) => b.wait_policy(w),
                None => b,
            }
        };
        catch_unwind(AssertUnwindSafe(|| {
            run_sim(job.ranks, self.cfg.clone(), builder, |client| {
                if let Err(e) = conformance::run_on_rank(&client, case) {
                    panic!("{e}");
                }
            })
        }))
        .map(|_| ())
        .map_err(|p| panic_text(&*p))
    }
}
