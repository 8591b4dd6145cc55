//! A bootstrap for jobs whose ranks are threads of one process, set up for tests.
//!
//! The bootstrap itself is gex-boot's production one ([`gex_boot::threads`]): collectives
//! bounded by a timeout, a poison that releases every waiting rank. The only difference
//! is what [`Bootstrap::abort`](gex_core::boot::Bootstrap::abort) and
//! [`Bootstrap::request_exit`](gex_core::boot::Bootstrap::request_exit) do: a
//! [`ThreadJob`] made here uses [`OnAbort::Panic`], so they poison the job and **panic**
//! with the message instead of ending the process (a test process must not vanish
//! because one thread rank aborted, and `Client::exit` must not end the test binary).
//! The panic unwinds the rank's thread and the runner reports it with the rank number.
//!
//! # Example
//! ```
//! use gex_core::boot::Bootstrap;
//! use gex_testkit::boot::ThreadJob;
//!
//! let job = ThreadJob::new(3);
//! let got = job.run(|mut b| b.exchange(&[b.rank() as u8]).unwrap()).unwrap();
//! assert!(got.iter().all(|v| v == &vec![vec![0u8], vec![1], vec![2]]));
//! ```

pub use gex_boot::threads::{OnAbort, ThreadBoot};
use std::time::Duration;

/// Default bound on one collective wait of a test job (shorter than gex-boot's
/// production default: a test that waits a minute in a bootstrap collective is hung).
pub const DEFAULT_BOOT_TIMEOUT: Duration = Duration::from_secs(60);

/// A job of thread ranks whose abort panics ([`OnAbort::Panic`]); it dereferences to
/// gex-boot's [`ThreadJob`](gex_boot::threads::ThreadJob) (`boot`, `poison`, `run`, …).
#[derive(Clone, Debug)]
pub struct ThreadJob(gex_boot::threads::ThreadJob);

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
        ThreadJob(
            gex_boot::threads::ThreadJob::with_hosts_and_timeout(hosts, timeout)
                .on_abort(OnAbort::Panic),
        )
    }
}

impl std::ops::Deref for ThreadJob {
    type Target = gex_boot::threads::ThreadJob;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What abort and request_exit do in panic mode is gex-boot's (tested there); the
    /// test kit's jobs must be in that mode, with the test timeout.
    #[test]
    fn test_jobs_panic_on_abort() {
        for job in [
            ThreadJob::new(2),
            ThreadJob::with_hosts(vec![0, 1]),
            ThreadJob::with_hosts_and_timeout(vec![0], Duration::from_secs(1)),
        ] {
            assert_eq!(job.abort_mode(), OnAbort::Panic);
        }
        assert_eq!(ThreadJob::new(1).timeout(), DEFAULT_BOOT_TIMEOUT);
    }
}
