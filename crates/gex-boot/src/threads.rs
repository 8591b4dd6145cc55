//! Thread ranks: a job whose ranks are threads of one process.
//!
//! [`ThreadJob`] is the shared state of one such job; [`ThreadJob::boot`] hands out one
//! [`ThreadBoot`] per rank, which implements [`gex_core::boot::Bootstrap`]. Each thread
//! rank initialises its own client with its `ThreadBoot`, exactly as a process rank does
//! with the bootstrap [`from_env`](crate::from_env) returns; everything else (conduit,
//! layers, teams) is the same. [`run`] (and [`ThreadJob::run`]) is the self-launch call:
//! it starts one thread per rank, hands each its bootstrap, joins them and names a rank
//! that panicked.
//!
//! See `docs/threads.md` for the thread model (what thread ranks share, what may race)
//! and `docs/launching.md` for how thread ranks compare with process ranks.
//!
//! # Collectives
//! `exchange`, `barrier` and `broadcast` meet in a mutex-protected table keyed by the
//! collective's sequence number: every rank makes the same collective calls in the same
//! order (the bootstrap contract), so the n-th call of every rank is the same
//! collective. They are slow-path only (client initialisation and finalisation), like
//! every bootstrap.
//!
//! # Failure instead of hangs
//! - Every collective wait is bounded by the job's timeout ([`DEFAULT_TIMEOUT`] unless
//!   [`ThreadJob::with_timeout`] says otherwise); a rank that waits longer gets
//!   [`BootError::Lost`] naming the ranks that never arrived.
//! - [`ThreadJob::poison`] (called by [`run`] when a rank panics) makes every waiting and
//!   future collective return [`BootError::Lost`] at once, with the reason.
//! - [`Bootstrap::abort`] ends the whole job, which for thread ranks is the whole
//!   process: it prints `gex: rank R aborted the job (code C): MSG` once and exits the
//!   process with `C` (1 if `C` is 0), as the process bootstraps do. A program that must
//!   survive an abort (a test harness, an embedding runtime) chooses
//!   [`OnAbort::Panic`] instead: the job is poisoned and the rank's thread panics with
//!   the message, which [`run`] reports with the rank number.
//! - [`Bootstrap::request_exit`] (behind `Client::exit`) records the request and
//!   poisons the job; `Client::exit` then ends the process, which ends every thread
//!   rank. Under [`OnAbort::Panic`] it panics instead, so that `Client::exit` does not
//!   end the process.
//!
//! # Example
//! ```
//! use gex_boot::threads;
//! use gex_core::boot::Bootstrap;
//!
//! // Four thread ranks, each swapping one byte with the others.
//! let got = threads::run(4, |mut boot| boot.exchange(&[boot.rank() as u8]).unwrap()).unwrap();
//! assert!(got.iter().all(|v| v == &vec![vec![0u8], vec![1], vec![2], vec![3]]));
//! ```

use gex_core::boot::{BootError, Bootstrap};
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, mpsc};
use std::time::{Duration, Instant};

/// Default bound on one collective wait of a thread job (5 minutes: a rank may compute
/// for a long time between initialising its client and finalising it, while the others
/// already wait in the finalisation barrier).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// How long [`run`] waits for the other ranks to end after one rank panicked before it
/// ends the process (they may be blocked in a conduit wait that only the dead rank
/// could end).
pub const PANIC_GRACE: Duration = Duration::from_secs(2);

/// Stack size of the threads [`run`] starts (8 MiB, the size of a process's main
/// thread stack on Linux, not the 2 MiB of a spawned thread).
pub const RANK_STACK: usize = 8 << 20;

/// What [`Bootstrap::abort`] does on a thread rank.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnAbort {
    /// End the process (every thread rank with it) with the abort's code, after
    /// printing the message once: the semantics of the process bootstraps.
    #[default]
    Exit,
    /// Poison the job and panic on the aborting rank's thread with the message (the
    /// process survives; [`run`] reports the rank). `Client::exit` panics the same way.
    Panic,
}

/// Errors of [`run`] and [`ThreadJob::run`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ThreadsError {
    /// A job needs at least one rank.
    #[error("a thread job needs at least one rank")]
    NoRanks,
    /// The operating system refused to start the thread of a rank.
    #[error("could not start the thread of rank {rank}: {source}")]
    Spawn {
        /// The rank whose thread did not start.
        rank: u32,
        /// Why.
        source: std::io::Error,
    },
    /// A rank could not initialise its client (the first rank whose failure was not
    /// caused by another rank's: the others were released through the poisoned
    /// bootstrap). Returned by launchers that build the clients, such as the facade's
    /// `gex::run_threads`.
    #[error("thread rank {rank} could not initialise its client: {source}")]
    Init {
        /// The rank that failed.
        rank: u32,
        /// Why.
        source: gex_core::InitError,
    },
    /// The process's bootstrap could not be made ([`run_from_env`]: the launcher's
    /// environment, or a `GEX_THREADS` that is not a number of at least 1).
    #[error(transparent)]
    Boot(#[from] BootError),
    /// A rank panicked (the first one to do so; the others were released through the
    /// poisoned bootstrap and joined).
    #[error("thread rank {rank} panicked: {msg}")]
    Panicked {
        /// The rank that panicked first.
        rank: u32,
        /// The panic's message (`"(no message)"` for a payload that is not a string).
        msg: String,
    },
}

#[derive(Debug, Default)]
struct Round {
    blobs: Vec<Option<Vec<u8>>>,
    arrived: u32,
    departed: u32,
}

#[derive(Debug, Default)]
struct State {
    rounds: HashMap<u64, Round>,
    poisoned: Option<String>,
    finalized: Vec<Option<i32>>,
    exit_requested: Option<(u32, i32)>,
    /// Whether the process bootstrap of a `within` job was finalised.
    process_finalized: bool,
}

/// The process-level bootstrap of a job of several processes with thread ranks each
/// ([`ThreadJob::within`]).
#[derive(Debug)]
struct Outer {
    /// This process's bootstrap; used by the leader (thread rank 0 of the process) for
    /// collectives, by the last rank to finalise, and by abort.
    boot: Mutex<Box<dyn Bootstrap>>,
    /// Global rank of this process's first thread rank.
    base: u32,
    /// Ranks in the whole job (processes × threads).
    size: u32,
}

#[derive(Debug)]
struct Inner {
    /// Thread ranks of this process (the size of the thread-level collectives).
    size: u32,
    /// Host id of every rank of the job (global ranks).
    hosts: Vec<u32>,
    outer: Option<Outer>,
    timeout: Duration,
    on_abort: OnAbort,
    state: Mutex<State>,
    cv: Condvar,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The shared state of a job of thread ranks. Cheap to clone (a handle).
#[derive(Clone, Debug)]
pub struct ThreadJob {
    inner: Arc<Inner>,
}

impl ThreadJob {
    /// A job of `size` thread ranks of this process (host 0: one neighbourhood).
    ///
    /// ```
    /// let job = gex_boot::threads::ThreadJob::new(2);
    /// assert_eq!(job.size(), 2);
    /// ```
    ///
    /// # Panics
    /// If `size` is 0.
    pub fn new(size: u32) -> Self {
        Self::with_hosts(vec![0; size as usize])
    }

    /// A job whose rank `r` claims host `hosts[r]`: ranks with different host ids are
    /// treated as different machines (no shared memory between them), which lets tests
    /// model several hosts inside one process.
    ///
    /// ```
    /// let job = gex_boot::threads::ThreadJob::with_hosts(vec![0, 0, 1, 1]);
    /// assert_eq!(job.size(), 4);
    /// ```
    ///
    /// # Panics
    /// If `hosts` is empty.
    pub fn with_hosts(hosts: Vec<u32>) -> Self {
        Self::build(hosts, DEFAULT_TIMEOUT, OnAbort::Exit)
    }

    /// As [`with_hosts`](Self::with_hosts), with a bound on every collective wait.
    ///
    /// ```
    /// use std::time::Duration;
    /// let job = gex_boot::threads::ThreadJob::with_hosts_and_timeout(vec![0], Duration::from_secs(5));
    /// assert_eq!(job.size(), 1);
    /// ```
    ///
    /// # Panics
    /// If `hosts` is empty.
    pub fn with_hosts_and_timeout(hosts: Vec<u32>, timeout: Duration) -> Self {
        Self::build(hosts, timeout, OnAbort::Exit)
    }

    /// This job with every collective wait bounded by `timeout`. Call it before handing
    /// out bootstraps (it makes a new job with the same shape).
    ///
    /// ```
    /// use std::time::Duration;
    /// let job = gex_boot::threads::ThreadJob::new(2).with_timeout(Duration::from_secs(10));
    /// assert_eq!(job.timeout(), Duration::from_secs(10));
    /// ```
    pub fn with_timeout(self, timeout: Duration) -> Self {
        let on_abort = self.inner.on_abort;
        self.rebuild(timeout, on_abort)
    }

    /// The same job with other settings (the process bootstrap of a
    /// [`within`](Self::within) job moves over when this is the only handle).
    fn rebuild(self, timeout: Duration, on_abort: OnAbort) -> Self {
        match Arc::try_unwrap(self.inner) {
            Ok(inner) => Self::assemble(inner.size, inner.hosts, inner.outer, timeout, on_abort),
            Err(inner) => {
                assert!(
                    inner.outer.is_none(),
                    "set a within() job's options before cloning it"
                );
                Self::build(inner.hosts.clone(), timeout, on_abort)
            }
        }
    }

    /// This job with `on_abort` as the behaviour of [`Bootstrap::abort`] and
    /// [`Bootstrap::request_exit`]. Call it before handing out bootstraps (it makes a new
    /// job with the same shape).
    ///
    /// ```
    /// use gex_boot::threads::{OnAbort, ThreadJob};
    /// let job = ThreadJob::new(2).on_abort(OnAbort::Panic);
    /// assert_eq!(job.abort_mode(), OnAbort::Panic);
    /// ```
    pub fn on_abort(self, on_abort: OnAbort) -> Self {
        let timeout = self.inner.timeout;
        self.rebuild(timeout, on_abort)
    }

    /// The thread ranks of this process in a job of several processes: every process of
    /// the job started by the launcher of `outer` (its bootstrap, e.g. from
    /// [`from_env`](crate::from_env) under `gex-run`, `mpiexec` or `srun`) runs
    /// `threads` thread ranks. Process `p` holds the global ranks `p * threads ..
    /// (p + 1) * threads`; a rank's host is its process's host. Every process must call
    /// this with the same `threads`. The bootstraps' collectives run among the threads
    /// of a process, then among the processes (by thread rank 0 of each), then back
    /// among the threads; the last thread rank to finalise finalises `outer`.
    ///
    /// ```
    /// use gex_core::boot::{Bootstrap, Singleton};
    /// // One process (a singleton job) of 3 thread ranks.
    /// let job = gex_boot::threads::ThreadJob::within(Box::new(Singleton::new()), 3).unwrap();
    /// let ranks = job.run(|b| (b.rank(), b.size())).unwrap();
    /// assert_eq!(ranks, vec![(0, 3), (1, 3), (2, 3)]);
    /// ```
    ///
    /// # Errors
    /// [`BootError::Environment`] if `threads` is 0 or the job would have more than
    /// `u32::MAX` ranks, or `outer`'s host ids do not match its size.
    pub fn within(outer: Box<dyn Bootstrap>, threads: u32) -> Result<ThreadJob, BootError> {
        let bad = |m: String| Err(BootError::Environment(m));
        if threads == 0 {
            return bad("a process needs at least one thread rank".into());
        }
        let (procs, p) = (outer.size(), outer.rank());
        let Some(size) = procs.checked_mul(threads) else {
            return bad(format!(
                "{procs} processes of {threads} thread ranks is too many ranks"
            ));
        };
        if outer.host_ids().len() != procs as usize || p >= procs {
            return bad(format!(
                "the process bootstrap says rank {p} of {procs} with {} host ids",
                outer.host_ids().len()
            ));
        }
        let hosts = outer
            .host_ids()
            .iter()
            .flat_map(|&h| std::iter::repeat_n(h, threads as usize))
            .collect();
        let outer = Outer {
            boot: Mutex::new(outer),
            base: p * threads,
            size,
        };
        Ok(Self::assemble(
            threads,
            hosts,
            Some(outer),
            DEFAULT_TIMEOUT,
            OnAbort::Exit,
        ))
    }

    fn build(hosts: Vec<u32>, timeout: Duration, on_abort: OnAbort) -> Self {
        assert!(!hosts.is_empty(), "a job needs at least one rank");
        let size = hosts.len() as u32;
        Self::assemble(size, hosts, None, timeout, on_abort)
    }

    fn assemble(
        size: u32,
        hosts: Vec<u32>,
        outer: Option<Outer>,
        timeout: Duration,
        on_abort: OnAbort,
    ) -> Self {
        let state = State {
            finalized: vec![None; size as usize],
            ..State::default()
        };
        ThreadJob {
            inner: Arc::new(Inner {
                size,
                hosts,
                outer,
                timeout,
                on_abort,
                state: Mutex::new(state),
                cv: Condvar::new(),
            }),
        }
    }

    /// Number of thread ranks of this process (the number of bootstraps
    /// [`boot`](Self::boot) hands out; the whole job's size for a job of one process).
    pub fn size(&self) -> u32 {
        self.inner.size
    }

    /// Number of ranks of the whole job (processes × thread ranks for a
    /// [`within`](Self::within) job).
    pub fn job_size(&self) -> u32 {
        self.inner
            .outer
            .as_ref()
            .map_or(self.inner.size, |o| o.size)
    }

    /// The bound on one collective wait.
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// What [`Bootstrap::abort`] does in this job.
    pub fn abort_mode(&self) -> OnAbort {
        self.inner.on_abort
    }

    /// The bootstrap of this process's thread rank `rank` (`0..size()`; its rank in the
    /// job is offset by the process's first rank in a [`within`](Self::within) job).
    /// Hand each rank's bootstrap to exactly one thread (a second bootstrap of the same
    /// rank makes that rank's collectives fail with [`BootError::Protocol`]).
    ///
    /// # Panics
    /// If `rank >= size`.
    pub fn boot(&self, rank: u32) -> ThreadBoot {
        assert!(
            rank < self.inner.size,
            "rank {rank} out of range for a job of {}",
            self.inner.size
        );
        ThreadBoot {
            job: self.clone(),
            rank,
            seq: 0,
        }
    }

    /// Makes every pending and future collective of this job fail with
    /// [`BootError::Lost`] carrying `why`. The first reason wins.
    ///
    /// ```
    /// let job = gex_boot::threads::ThreadJob::new(2);
    /// job.poison("stop");
    /// assert_eq!(job.poisoned().as_deref(), Some("stop"));
    /// ```
    pub fn poison(&self, why: &str) {
        self.poison_first(why);
    }

    /// Poisons the job; true if `why` is the reason that stuck (the first one).
    fn poison_first(&self, why: &str) -> bool {
        let mut st = self.inner.lock();
        let first = st.poisoned.is_none();
        if first {
            st.poisoned = Some(why.to_string());
        }
        drop(st);
        self.inner.cv.notify_all();
        first
    }

    /// The reason the job was poisoned, if it was.
    pub fn poisoned(&self) -> Option<String> {
        self.inner.lock().poisoned.clone()
    }

    /// The code each rank passed to [`Bootstrap::finalize`] (`None`: not finalized).
    pub fn finalized(&self) -> Vec<Option<i32>> {
        self.inner.lock().finalized.clone()
    }

    /// The first `(rank, code)` that asked to end the job through
    /// [`Bootstrap::request_exit`].
    pub fn exit_requested(&self) -> Option<(u32, i32)> {
        self.inner.lock().exit_requested
    }

    /// Runs `f` on one thread per rank of this job, each with its rank's bootstrap,
    /// and returns their results in rank order.
    ///
    /// A rank that panics poisons the job (every bootstrap collective of the others
    /// fails at once); once every rank has ended, the first panic is returned as
    /// [`ThreadsError::Panicked`] with its rank. Ranks blocked elsewhere (in a conduit
    /// wait for the dead rank) cannot be released: if some rank is still running
    /// [`PANIC_GRACE`] after the panic, the process ends with exit code 1 and a message
    /// naming the rank that panicked, as a job of process ranks would.
    ///
    /// ```
    /// use gex_core::boot::Bootstrap;
    /// let job = gex_boot::threads::ThreadJob::new(3);
    /// let ranks = job.run(|b| b.rank()).unwrap();
    /// assert_eq!(ranks, vec![0, 1, 2]);
    /// ```
    ///
    /// # Errors
    /// [`ThreadsError::Spawn`] if a thread cannot be started (the job is poisoned and
    /// the ranks already started are joined); [`ThreadsError::Panicked`] as above.
    pub fn run<T, F>(&self, f: F) -> Result<Vec<T>, ThreadsError>
    where
        T: Send,
        F: Fn(ThreadBoot) -> T + Sync,
    {
        let n = self.size();
        let (tx, rx) = mpsc::channel::<(u32, Option<String>)>();
        std::thread::scope(|s| {
            let mut handles = Vec::with_capacity(n as usize);
            for r in 0..n {
                let boot = self.boot(r);
                let (f, tx_r, job) = (&f, tx.clone(), self.clone());
                let spawned = std::thread::Builder::new()
                    .name(format!("gex-rank-{r}"))
                    .stack_size(RANK_STACK)
                    .spawn_scoped(s, move || {
                        let out =
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(boot)));
                        let msg = out.as_ref().err().map(|p| panic_text(p.as_ref()));
                        if let Some(m) = &msg {
                            job.poison(&format!("rank {r} panicked: {m}"));
                        }
                        // The receiver outlives the scope's threads.
                        let _ = tx_r.send((r, msg));
                        out.ok()
                    });
                match spawned {
                    Ok(h) => handles.push(h),
                    Err(source) => {
                        self.poison(&format!("the thread of rank {r} did not start"));
                        drop(tx);
                        drop(handles);
                        return Err(ThreadsError::Spawn { rank: r, source });
                    }
                }
            }
            drop(tx);
            let mut first: Option<(u32, String)> = None;
            let mut ended = vec![false; n as usize];
            let mut left = n;
            while left > 0 {
                let got = match &first {
                    None => rx.recv().ok(),
                    Some((rank, msg)) => match rx.recv_timeout(PANIC_GRACE) {
                        Ok(x) => Some(x),
                        Err(_) => {
                            let stuck: Vec<u32> = (0..n).filter(|&q| !ended[q as usize]).collect();
                            eprintln!(
                                "gex: thread rank {rank} panicked: {msg}; ranks {stuck:?} still running {PANIC_GRACE:?} later: ending the process"
                            );
                            std::process::exit(1);
                        }
                    },
                };
                let Some((r, msg)) = got else { break };
                ended[r as usize] = true;
                left -= 1;
                if let (None, Some(m)) = (&first, msg) {
                    first = Some((r, m));
                }
            }
            let outs: Vec<Option<T>> = handles
                .into_iter()
                .map(|h| h.join().ok().flatten())
                .collect();
            match first {
                Some((rank, msg)) => Err(ThreadsError::Panicked { rank, msg }),
                None => Ok(outs
                    .into_iter()
                    .map(|o| o.expect("every rank returned"))
                    .collect()),
            }
        })
    }
}

/// Starts a job of `ranks` thread ranks of this process and runs `f` on each with its
/// bootstrap ([`ThreadJob::new`] then [`ThreadJob::run`]). Each rank typically builds
/// its own client with the bootstrap it is given (`ClientBuilder::init` or the facade's
/// `gex::init_with_boot`) and finalises it before returning.
///
/// ```
/// use gex_core::boot::Bootstrap;
/// let sizes = gex_boot::threads::run(2, |mut b| {
///     b.barrier().unwrap();
///     b.size()
/// })
/// .unwrap();
/// assert_eq!(sizes, vec![2, 2]);
/// ```
///
/// # Errors
/// [`ThreadsError::NoRanks`] if `ranks` is 0; otherwise as [`ThreadJob::run`].
pub fn run<T, F>(ranks: u32, f: F) -> Result<Vec<T>, ThreadsError>
where
    T: Send,
    F: Fn(ThreadBoot) -> T + Sync,
{
    if ranks == 0 {
        return Err(ThreadsError::NoRanks);
    }
    ThreadJob::new(ranks).run(f)
}

/// A list of blobs as one: the count, then each blob's length and bytes (u32
/// little-endian lengths).
fn encode(blobs: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + blobs.iter().map(|b| 4 + b.len()).sum::<usize>());
    out.extend_from_slice(&(blobs.len() as u32).to_le_bytes());
    for b in blobs {
        out.extend_from_slice(&(b.len() as u32).to_le_bytes());
        out.extend_from_slice(b);
    }
    out
}

/// The blobs of [`encode`]; `None` for anything else (it comes from another process
/// through a bootstrap, so it is checked, not trusted).
fn decode(mut b: &[u8]) -> Option<Vec<Vec<u8>>> {
    let n = take_len(&mut b)?;
    let mut out = Vec::with_capacity(n.min(b.len() / 4));
    for _ in 0..n {
        let len = take_len(&mut b)?;
        out.push(take(&mut b, len)?.to_vec());
    }
    b.is_empty().then_some(out)
}

/// The first `n` bytes of `b`, which moves past them; `None` if `b` is shorter.
fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    let (head, rest) = b.split_at_checked(n)?;
    *b = rest;
    Some(head)
}

/// A little-endian u32 length taken from the front of `b`.
fn take_len(b: &mut &[u8]) -> Option<usize> {
    let w = take(b, 4)?;
    Some(u32::from_le_bytes([w[0], w[1], w[2], w[3]]) as usize)
}

/// Runs this process's thread ranks of a job started by a launcher: `GEX_THREADS`
/// (default 1) thread ranks per process ([`ThreadJob::within`] over the bootstrap
/// [`from_env`](crate::from_env) returns), each running `f` with its bootstrap, as
/// [`ThreadJob::run`]. Under `gex-run -n P --threads T` the job has `P × T` ranks;
/// started alone, a process runs `GEX_THREADS` thread ranks of a one-process job.
///
/// ```
/// use gex_core::boot::Bootstrap;
/// // Started alone (no launcher, GEX_THREADS unset): one process of one thread rank.
/// let ranks = gex_boot::threads::run_from_env(|b| (b.rank(), b.size())).unwrap();
/// assert_eq!(ranks, vec![(0, 1)]);
/// ```
///
/// # Errors
/// [`ThreadsError::Boot`] if `GEX_THREADS` is not a number of at least 1 or the
/// process bootstrap cannot be made; otherwise as [`ThreadJob::run`].
pub fn run_from_env<T, F>(f: F) -> Result<Vec<T>, ThreadsError>
where
    T: Send,
    F: Fn(ThreadBoot) -> T + Sync,
{
    let threads = match std::env::var(crate::env::THREADS) {
        Err(_) => 1,
        Ok(v) if v.is_empty() => 1,
        Ok(v) => match v.trim().parse::<u32>() {
            Ok(t) if t >= 1 => t,
            _ => {
                return Err(ThreadsError::Boot(BootError::Environment(format!(
                    "{}={v:?}: not a number of thread ranks of at least 1",
                    crate::env::THREADS
                ))));
            }
        },
    };
    let outer = crate::from_env()?;
    ThreadJob::within(outer, threads)?.run(f)
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

/// The bootstrap of one thread rank of a [`ThreadJob`]. See the
/// [module documentation](self) for how failures surface.
#[derive(Debug)]
pub struct ThreadBoot {
    job: ThreadJob,
    rank: u32,
    seq: u64,
}

impl ThreadBoot {
    /// The job this rank belongs to.
    pub fn job(&self) -> &ThreadJob {
        &self.job
    }

    /// This rank's number in the whole job.
    fn global(&self) -> u32 {
        self.job.inner.outer.as_ref().map_or(0, |o| o.base) + self.rank
    }

    /// The job-wide all-gather: among the threads of this process, then (in a
    /// [`ThreadJob::within`] job) among the processes by thread rank 0, whose result
    /// the threads then share. Indexed by global rank.
    fn gather(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, BootError> {
        let local = self.collective(mine)?;
        let inner = Arc::clone(&self.job.inner);
        let Some(outer) = inner.outer.as_ref() else {
            return Ok(local);
        };
        let leader_blob = if self.rank == 0 {
            let procs = outer.size / inner.size;
            let r = outer
                .boot
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .exchange(&encode(&local))
                .and_then(|all| {
                    if all.len() != procs as usize {
                        return Err(BootError::Protocol(format!(
                            "the process bootstrap returned {} blobs for {procs} processes",
                            all.len()
                        )));
                    }
                    let mut flat = Vec::with_capacity(outer.size as usize);
                    for (p, b) in all.iter().enumerate() {
                        match decode(b) {
                            Some(v) if v.len() == inner.size as usize => flat.extend(v),
                            _ => {
                                return Err(BootError::Protocol(format!(
                                    "process {p}'s blob does not hold {} thread ranks' blobs",
                                    inner.size
                                )));
                            }
                        }
                    }
                    Ok(flat)
                });
            match r {
                Ok(flat) => encode(&flat),
                Err(e) => {
                    self.job.poison(&format!(
                        "rank {}: the process-level collective failed: {e}",
                        self.global()
                    ));
                    return Err(e);
                }
            }
        } else {
            Vec::new()
        };
        let got = self.collective(&leader_blob)?;
        decode(&got[0]).ok_or_else(|| BootError::Protocol("malformed job-wide blob".into()))
    }

    fn collective(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, BootError> {
        let inner = &*self.job.inner;
        let n = inner.size;
        let seq = self.seq;
        self.seq += 1;
        let mut st = inner.lock();
        if let Some(why) = &st.poisoned {
            return Err(BootError::Lost(format!("job poisoned: {why}")));
        }
        let round = st.rounds.entry(seq).or_default();
        if round.blobs.is_empty() {
            round.blobs = vec![None; n as usize];
        }
        if round.blobs[self.rank as usize].is_some() {
            return Err(BootError::Protocol(format!(
                "rank {} entered collective {seq} twice",
                self.global()
            )));
        }
        round.blobs[self.rank as usize] = Some(mine.to_vec());
        round.arrived += 1;
        if round.arrived == n {
            inner.cv.notify_all();
        }
        let deadline = Instant::now() + inner.timeout;
        loop {
            if let Some(why) = &st.poisoned {
                return Err(BootError::Lost(format!("job poisoned: {why}")));
            }
            let round = st
                .rounds
                .get(&seq)
                .expect("round stays until every rank left");
            if round.arrived == n {
                break;
            }
            let now = Instant::now();
            if now >= deadline {
                let missing: Vec<usize> = round
                    .blobs
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| b.is_none())
                    .map(|(r, _)| r)
                    .collect();
                let base = self.global() - self.rank;
                let missing: Vec<u32> = missing.iter().map(|&r| base + r as u32).collect();
                return Err(BootError::Lost(format!(
                    "rank {}: collective {seq} timed out after {:?}; ranks {missing:?} never arrived",
                    self.global(),
                    inner.timeout
                )));
            }
            st = inner
                .cv
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let round = st.rounds.get_mut(&seq).expect("present");
        let out: Vec<Vec<u8>> = round
            .blobs
            .iter()
            .map(|b| b.clone().expect("all arrived"))
            .collect();
        round.departed += 1;
        if round.departed == n {
            st.rounds.remove(&seq);
        }
        Ok(out)
    }
}

impl Bootstrap for ThreadBoot {
    fn name(&self) -> &'static str {
        "threads"
    }
    fn rank(&self) -> u32 {
        self.global()
    }
    fn size(&self) -> u32 {
        self.job.job_size()
    }
    fn host_ids(&self) -> &[u32] {
        &self.job.inner.hosts
    }
    fn exchange(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, BootError> {
        self.gather(mine)
    }
    fn barrier(&mut self) -> Result<(), BootError> {
        self.gather(&[]).map(|_| ())
    }
    fn broadcast(&mut self, root: u32, data: &[u8]) -> Result<Vec<u8>, BootError> {
        if root >= self.size() {
            return Err(BootError::Protocol(format!(
                "broadcast root {root} out of range"
            )));
        }
        let mine = if root == self.global() { data } else { &[] };
        let mut all = self.gather(mine)?;
        Ok(std::mem::take(&mut all[root as usize]))
    }
    /// Poisons the job, then ends the process with `code` (1 if 0) after printing the
    /// message once (through the process bootstrap in a [`ThreadJob::within`] job, so
    /// its launcher ends the other processes), or panics with it under
    /// [`OnAbort::Panic`].
    fn abort(&mut self, code: i32, msg: &str) -> ! {
        let why = format!(
            "rank {} aborted the job (code {code}): {msg}",
            self.global()
        );
        let first = self.job.poison_first(&why);
        match self.job.inner.on_abort {
            OnAbort::Panic => panic!("gex: {why}"),
            OnAbort::Exit => {
                if let Some(outer) = &self.job.inner.outer
                    && let Ok(mut b) = outer.boot.try_lock()
                {
                    b.abort(code, &format!("(thread rank {}) {msg}", self.global()));
                }
                if first {
                    eprintln!("gex: {why}");
                }
                std::process::exit(if code == 0 { 1 } else { code })
            }
        }
    }
    /// Records this rank's code; in a [`ThreadJob::within`] job, the last thread rank
    /// of the process to finalise finalises the process bootstrap (with the first
    /// non-zero code of its thread ranks, else 0).
    fn finalize(&mut self, code: i32) -> Result<(), BootError> {
        let mut st = self.job.inner.lock();
        st.finalized[self.rank as usize] = Some(code);
        // Exactly one rank (the last) finalises the process bootstrap.
        let all: Option<Vec<i32>> = match st.finalized.iter().copied().collect() {
            Some(codes) if !st.process_finalized => {
                st.process_finalized = true;
                Some(codes)
            }
            _ => None,
        };
        drop(st);
        match (&self.job.inner.outer, all) {
            (Some(outer), Some(codes)) => {
                let code = codes.into_iter().find(|&c| c != 0).unwrap_or(0);
                outer
                    .boot
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .finalize(code)
            }
            _ => Ok(()),
        }
    }
    /// Records the request and poisons the job (the caller then ends the process; in a
    /// [`ThreadJob::within`] job the request goes to the process bootstrap first);
    /// under [`OnAbort::Panic`] it also panics, so the process survives.
    fn request_exit(&mut self, code: i32) {
        let why = format!(
            "rank {} asked to end the job with exit code {code}",
            self.global()
        );
        self.job
            .inner
            .lock()
            .exit_requested
            .get_or_insert((self.global(), code));
        self.job.poison(&why);
        if self.job.inner.on_abort == OnAbort::Panic {
            panic!("gex: {why}");
        }
        if let Some(outer) = &self.job.inner.outer
            && let Ok(mut b) = outer.boot.try_lock()
        {
            b.request_exit(code);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collectives_agree() {
        let job = ThreadJob::with_hosts(vec![0, 0, 1, 1]);
        let out = job
            .run(|mut b| {
                let r = b.rank();
                assert_eq!(b.host_ids(), &[0, 0, 1, 1]);
                let mut log = Vec::new();
                for i in 0..50u32 {
                    let blob = vec![r as u8; (r + i) as usize % 5];
                    let all = b.exchange(&blob).unwrap();
                    for (q, x) in all.iter().enumerate() {
                        assert_eq!(x, &vec![q as u8; (q as u32 + i) as usize % 5]);
                    }
                    b.barrier().unwrap();
                    let root = i % 4;
                    let got = b.broadcast(root, &[i as u8, root as u8, 7]).unwrap();
                    log.push(got);
                }
                b.finalize(0).unwrap();
                log
            })
            .unwrap();
        for l in &out {
            assert_eq!(l, &out[0]);
            assert_eq!(l[5], vec![5, 1, 7]);
        }
        assert_eq!(job.finalized(), vec![Some(0); 4]);
        assert!(job.inner.lock().rounds.is_empty(), "rounds are cleaned up");
    }

    #[test]
    fn missing_rank_times_out_instead_of_hanging() {
        let job = ThreadJob::with_hosts_and_timeout(vec![0, 0], Duration::from_millis(50));
        let mut b0 = job.boot(0);
        let e = b0.barrier().unwrap_err().to_string();
        assert!(e.contains("timed out") && e.contains("[1]"), "{e}");
    }

    #[test]
    fn poison_releases_waiters() {
        let job = ThreadJob::new(2);
        let j = job.clone();
        let t = std::thread::spawn(move || j.boot(0).barrier());
        std::thread::sleep(Duration::from_millis(20));
        job.poison("test says stop");
        let e = t.join().unwrap().unwrap_err().to_string();
        assert!(e.contains("test says stop"), "{e}");
        assert!(job.boot(1).barrier().is_err());
    }

    #[test]
    fn abort_in_panic_mode_panics_with_message_and_poisons() {
        let job = ThreadJob::new(2).on_abort(OnAbort::Panic);
        let mut b = job.boot(1);
        let p =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| b.abort(3, "disk on fire")))
                .unwrap_err();
        let msg = panic_text(p.as_ref());
        assert!(
            msg.contains("rank 1") && msg.contains("disk on fire") && msg.contains("code 3"),
            "{msg}"
        );
        assert!(job.poisoned().unwrap().contains("disk on fire"));
    }

    #[test]
    fn request_exit_is_recorded_and_poisons() {
        let job = ThreadJob::new(1);
        job.boot(0).request_exit(4);
        assert_eq!(job.exit_requested(), Some((0, 4)));
        assert!(job.poisoned().unwrap().contains("exit code 4"));
        let job = ThreadJob::new(1).on_abort(OnAbort::Panic);
        let mut b = job.boot(0);
        assert!(
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| b.request_exit(5))).is_err()
        );
        assert_eq!(job.exit_requested(), Some((0, 5)));
    }

    #[test]
    fn run_names_the_rank_that_panicked_and_releases_the_others() {
        let e = run(3, |mut b| {
            if b.rank() == 2 {
                panic!("rank two gives up");
            }
            // Released by the poison, not by the timeout.
            b.barrier()
        })
        .unwrap_err();
        match e {
            ThreadsError::Panicked { rank, msg } => {
                assert_eq!(rank, 2);
                assert!(msg.contains("rank two gives up"), "{msg}");
            }
            other => panic!("{other}"),
        }
    }

    #[test]
    fn blobs_encode_and_decode_and_garbage_is_refused() {
        let v = vec![vec![], vec![1u8, 2, 3], vec![9; 300]];
        assert_eq!(decode(&encode(&v)).unwrap(), v);
        let e = encode(&v);
        for cut in 0..e.len() {
            assert!(decode(&e[..cut]).is_none(), "prefix of {cut} bytes");
        }
        let mut long = e.clone();
        long.push(0);
        assert!(decode(&long).is_none());
        assert!(decode(&[255, 255, 255, 255]).is_none());
    }

    /// Two "processes" (thread ranks of an outer job) of three thread ranks each: the
    /// job-wide collectives see six ranks in process-major order, and each process's
    /// bootstrap is finalised once, by its last thread rank.
    #[test]
    fn within_a_job_of_processes() {
        let procs = ThreadJob::with_hosts(vec![5, 7]).on_abort(OnAbort::Panic);
        let out = procs
            .run(|outer| {
                let job = ThreadJob::within(Box::new(outer), 3).unwrap();
                assert_eq!((job.size(), job.job_size()), (3, 6));
                job.run(|mut b| {
                    let r = b.rank();
                    assert_eq!(b.size(), 6);
                    assert_eq!(b.host_ids(), &[5, 5, 5, 7, 7, 7]);
                    let all = b.exchange(&[r as u8; 2]).unwrap();
                    assert_eq!(all, (0..6u8).map(|q| vec![q; 2]).collect::<Vec<_>>());
                    b.barrier().unwrap();
                    let got = b.broadcast(4, &[r as u8, 42]).unwrap();
                    assert_eq!(got, vec![4, 42]);
                    b.finalize(0).unwrap();
                    r
                })
                .unwrap()
            })
            .unwrap();
        assert_eq!(out, vec![vec![0, 1, 2], vec![3, 4, 5]]);
        assert_eq!(procs.finalized(), vec![Some(0), Some(0)]);
    }

    #[test]
    fn within_refuses_zero_threads() {
        let e = ThreadJob::within(Box::new(gex_core::boot::Singleton::new()), 0).unwrap_err();
        assert!(e.to_string().contains("at least one thread rank"), "{e}");
    }

    #[test]
    fn run_of_no_ranks_is_an_error() {
        assert!(matches!(run(0, |_| ()), Err(ThreadsError::NoRanks)));
    }
}
