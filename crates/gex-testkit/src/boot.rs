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

/// What the exchange of a [`ScriptedBoot`] returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Exchange {
    /// These blobs, whatever this rank sent (a corrupt launcher, or a fuzz input).
    Blobs(Vec<Vec<u8>>),
    /// Every rank's blob as that rank would publish it: this rank's, but for the first
    /// four bytes (the sender's rank, which the core's layout blob starts with), which
    /// become each rank's number (little-endian).
    EchoPerRank,
    /// `BootError::Lost` (the launcher is gone).
    Fail,
}

/// A bootstrap whose collectives answer as scripted, for tests of what
/// `ClientBuilder::init` makes of a bootstrap that says something inconsistent (a
/// corrupt launcher, or a runtime's own `impl Bootstrap`): the exchange returns
/// [`Exchange`], the barrier fails if `fail_barrier`, a broadcast returns the root's
/// data, and an abort panics with its message.
#[derive(Clone, Debug)]
pub struct ScriptedBoot {
    /// This rank.
    pub rank: u32,
    /// Ranks in the job.
    pub size: u32,
    /// The host id of every rank ([`ScriptedBoot::new`]: all 0).
    pub hosts: Vec<u32>,
    /// What the exchange returns.
    pub exchange: Exchange,
    /// Whether the barrier (also the one of finalisation) fails with `BootError::Lost`.
    pub fail_barrier: bool,
}

impl ScriptedBoot {
    /// Rank `rank` of a job of `size` ranks on host 0 whose exchange returns `exchange`
    /// and whose barrier succeeds.
    pub fn new(rank: u32, size: u32, exchange: Exchange) -> Self {
        ScriptedBoot {
            rank,
            size,
            hosts: vec![0; size as usize],
            exchange,
            fail_barrier: false,
        }
    }
}

fn lost() -> gex_core::boot::BootError {
    gex_core::boot::BootError::Lost("the launcher is gone".into())
}

impl gex_core::boot::Bootstrap for ScriptedBoot {
    gex_boot::bootstrap_identity!("scripted");
    fn exchange(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, gex_core::boot::BootError> {
        match &self.exchange {
            Exchange::Blobs(b) => Ok(b.clone()),
            Exchange::EchoPerRank => Ok((0..self.size)
                .map(|r| {
                    let mut b = mine.to_vec();
                    if let Some(head) = b.get_mut(..4) {
                        head.copy_from_slice(&r.to_le_bytes());
                    }
                    b
                })
                .collect()),
            Exchange::Fail => Err(lost()),
        }
    }
    fn barrier(&mut self) -> Result<(), gex_core::boot::BootError> {
        if self.fail_barrier {
            return Err(lost());
        }
        Ok(())
    }
    fn broadcast(&mut self, _root: u32, data: &[u8]) -> Result<Vec<u8>, gex_core::boot::BootError> {
        Ok(data.to_vec())
    }
    fn abort(&mut self, code: i32, msg: &str) -> ! {
        panic!("abort({code}): {msg}")
    }
    fn finalize(&mut self, _code: i32) -> Result<(), gex_core::boot::BootError> {
        Ok(())
    }
    fn request_exit(&mut self, _code: i32) {}
}

/// Bytes of a layout blob ([`layout_blob`]).
pub const LAYOUT_BLOB_LEN: usize = 28;

/// A layout blob as `ClientBuilder::init` publishes it: rank, job size, endpoints,
/// segment length, host id, process id (this process's), endpoint capacity (the
/// default `GEX_MAX_ENDPOINTS`, 16, or `eps` if more), little-endian.
pub fn layout_blob(rank: u32, size: u32, eps: u16, seg: u64, host: u32) -> Vec<u8> {
    let mut b = rank.to_le_bytes().to_vec();
    b.extend(size.to_le_bytes());
    b.extend(eps.to_le_bytes());
    b.extend(seg.to_le_bytes());
    b.extend(host.to_le_bytes());
    b.extend(std::process::id().to_le_bytes());
    b.extend(eps.max(16).to_le_bytes());
    b
}
