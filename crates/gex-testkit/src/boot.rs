//! A bootstrap for jobs whose ranks are threads of one process.
//!
//! [`ThreadJob`] is the shared state of one job; [`ThreadJob::boot`] hands out one
//! [`ThreadBoot`] per rank, which implements [`gex_core::boot::Bootstrap`]: exchange,
//! barrier and broadcast meet in a mutex-protected table keyed by the collective's
//! sequence number (every rank makes the same collective calls in the same order, so the
//! n-th call of every rank is the same collective).
//!
//! # Failure instead of hangs
//! - Every collective wait is bounded by the job's timeout (default 60 s); a rank that
//!   waits longer gets [`BootError::Lost`].
//! - [`ThreadJob::poison`] (called by [`run_sim`](crate::sim::run_sim) when a rank
//!   panics or the watchdog fires) makes every waiting and future collective return
//!   [`BootError::Lost`] at once.
//! - [`Bootstrap::abort`] **panics** with the message (after poisoning the job) instead
//!   of ending the process: a test process must not vanish because one thread rank
//!   aborted. The panic unwinds the rank's thread and the launcher reports it with the
//!   rank number.
//! - [`Bootstrap::request_exit`] (behind [`Client::exit`](gex_core::Client::exit)) also
//!   panics, for the same reason: `Client::exit` would otherwise call
//!   `std::process::exit` and end the whole test binary.
//!
//! # Example
//! ```
//! use gex_core::boot::Bootstrap;
//! use gex_testkit::boot::ThreadJob;
//!
//! let job = ThreadJob::new(3);
//! let got: Vec<Vec<Vec<u8>>> = std::thread::scope(|s| {
//!     let hs: Vec<_> = (0..3)
//!         .map(|r| {
//!             let mut b = job.boot(r);
//!             s.spawn(move || b.exchange(&[r as u8]).unwrap())
//!         })
//!         .collect();
//!     hs.into_iter().map(|h| h.join().unwrap()).collect()
//! });
//! assert!(got.iter().all(|v| v == &vec![vec![0u8], vec![1], vec![2]]));
//! ```

use gex_core::boot::{BootError, Bootstrap};
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Default bound on one collective wait.
pub const DEFAULT_BOOT_TIMEOUT: Duration = Duration::from_secs(60);

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
}

#[derive(Debug)]
struct Inner {
    size: u32,
    hosts: Vec<u32>,
    timeout: Duration,
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
    /// A job of `size` ranks, all on host 0 (so they form one neighbourhood).
    ///
    /// # Panics
    /// If `size` is 0.
    pub fn new(size: u32) -> Self {
        Self::with_hosts(vec![0; size as usize])
    }

    /// A job whose rank `r` lives on host `hosts[r]`: ranks with different host ids
    /// model different machines (no shared memory between them).
    ///
    /// # Panics
    /// If `hosts` is empty.
    pub fn with_hosts(hosts: Vec<u32>) -> Self {
        Self::with_hosts_and_timeout(hosts, DEFAULT_BOOT_TIMEOUT)
    }

    /// As [`with_hosts`](Self::with_hosts), with a bound on every collective wait.
    ///
    /// # Panics
    /// If `hosts` is empty.
    pub fn with_hosts_and_timeout(hosts: Vec<u32>, timeout: Duration) -> Self {
        assert!(!hosts.is_empty(), "a job needs at least one rank");
        let size = hosts.len() as u32;
        let state = State {
            finalized: vec![None; size as usize],
            ..State::default()
        };
        ThreadJob {
            inner: Arc::new(Inner {
                size,
                hosts,
                timeout,
                state: Mutex::new(state),
                cv: Condvar::new(),
            }),
        }
    }

    /// Number of ranks.
    pub fn size(&self) -> u32 {
        self.inner.size
    }

    /// The bootstrap of rank `rank`. Hand each rank's bootstrap to exactly one thread.
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
    pub fn poison(&self, why: &str) {
        let mut st = self.inner.lock();
        if st.poisoned.is_none() {
            st.poisoned = Some(why.to_string());
        }
        drop(st);
        self.inner.cv.notify_all();
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
                self.rank
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
                return Err(BootError::Lost(format!(
                    "rank {}: collective {seq} timed out after {:?}; ranks {missing:?} never arrived",
                    self.rank, inner.timeout
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
        self.rank
    }
    fn size(&self) -> u32 {
        self.job.inner.size
    }
    fn host_ids(&self) -> &[u32] {
        &self.job.inner.hosts
    }
    fn exchange(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, BootError> {
        self.collective(mine)
    }
    fn barrier(&mut self) -> Result<(), BootError> {
        self.collective(&[]).map(|_| ())
    }
    fn broadcast(&mut self, root: u32, data: &[u8]) -> Result<Vec<u8>, BootError> {
        if root >= self.size() {
            return Err(BootError::Protocol(format!(
                "broadcast root {root} out of range"
            )));
        }
        let mine = if root == self.rank { data } else { &[] };
        let mut all = self.collective(mine)?;
        Ok(std::mem::take(&mut all[root as usize]))
    }
    /// Poisons the job, then **panics** with the message (never ends the process).
    fn abort(&mut self, code: i32, msg: &str) -> ! {
        let why = format!("rank {} aborted the job (code {code}): {msg}", self.rank);
        self.job.poison(&why);
        panic!("gex-testkit: {why}");
    }
    fn finalize(&mut self, code: i32) -> Result<(), BootError> {
        let mut st = self.job.inner.lock();
        st.finalized[self.rank as usize] = Some(code);
        Ok(())
    }
    /// Records the request, poisons the job and **panics** (a thread rank must not
    /// end the test process through `Client::exit`).
    fn request_exit(&mut self, code: i32) {
        let why = format!(
            "rank {} asked to end the job with exit code {code}",
            self.rank
        );
        {
            let mut st = self.job.inner.lock();
            st.exit_requested.get_or_insert((self.rank, code));
        }
        self.job.poison(&why);
        panic!("gex-testkit: {why}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on_threads<T: Send>(job: &ThreadJob, f: impl Fn(ThreadBoot) -> T + Sync) -> Vec<T> {
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..job.size())
                .map(|r| {
                    let b = job.boot(r);
                    let f = &f;
                    s.spawn(move || f(b))
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    #[test]
    fn collectives_agree() {
        let job = ThreadJob::with_hosts(vec![0, 0, 1, 1]);
        let out = on_threads(&job, |mut b| {
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
        });
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
    fn abort_panics_with_message_and_poisons() {
        let job = ThreadJob::new(2);
        let mut b = job.boot(1);
        let p =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| b.abort(3, "disk on fire")))
                .unwrap_err();
        let msg = p.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            msg.contains("rank 1") && msg.contains("disk on fire") && msg.contains("code 3"),
            "{msg}"
        );
        assert!(job.poisoned().unwrap().contains("disk on fire"));
    }

    #[test]
    fn request_exit_panics_and_is_recorded() {
        let job = ThreadJob::new(1);
        let mut b = job.boot(0);
        assert!(
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| b.request_exit(4))).is_err()
        );
        assert_eq!(job.exit_requested(), Some((0, 4)));
    }
}
