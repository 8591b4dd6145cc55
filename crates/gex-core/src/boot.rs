//! The bootstrap SPI: how a rank learns who it is and exchanges the small amounts of
//! data that conduits need before any network path exists.
//!
//! A bootstrap is *slow path only*: it is used during client initialisation, at
//! finalisation and on abort. Nothing on a data path may call it.
//!
//! Backends live outside gex-core (`gex-boot`: the local fork launcher, the PMI-1 and
//! PMI-2 clients used under `mpiexec`/`srun`, the PMIx client used under `mpirun`), except
//! [`Singleton`] (a job of one rank). Conduits receive a `&mut dyn Bootstrap` in
//! [`crate::spi::Conduit::open`].
//!
//! # Contract (every backend must provide)
//!
//! | item | semantics |
//! |---|---|
//! | [`Bootstrap::rank`], [`Bootstrap::size`] | this process's rank in `0..size`; constant for the job |
//! | [`Bootstrap::host_ids`] | one entry per rank; two ranks with the same value share a host and may map each other's memory (the *neighbourhood*) |
//! | [`Bootstrap::exchange`] | collective all-gather: every rank passes a blob (sizes may differ) and receives every rank's blob, indexed by rank |
//! | [`Bootstrap::barrier`] | collective: returns once every rank has entered |
//! | [`Bootstrap::broadcast`] | collective: every rank receives `root`'s blob |
//! | [`Bootstrap::abort`] | ends the whole job promptly with `code`, printing `msg` once; never returns |
//! | [`Bootstrap::finalize`] | tells the launcher that this rank has finished cleanly and will exit with `code`; a rank whose process ends without it is treated as having failed |
//!
//! Collective calls must be made by every rank in the same order. A backend that loses
//! its launcher or a peer must return [`BootError::Lost`] (or end the process) rather
//! than block forever.

use thiserror::Error;

/// Errors from bootstrap operations.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum BootError {
    /// The launcher or a peer went away (the job is ending).
    #[error("bootstrap connection lost: {0}")]
    Lost(String),
    /// The launcher sent something this rank did not expect.
    #[error("bootstrap protocol error: {0}")]
    Protocol(String),
    /// The environment that describes the job is missing or malformed.
    #[error("bad bootstrap environment: {0}")]
    Environment(String),
    /// An operating-system call failed.
    #[error("bootstrap I/O error: {0}")]
    Io(#[from] std::io::Error),
}

/// The bootstrap contract. See the [module documentation](self) for the semantics
/// every backend must provide.
pub trait Bootstrap: Send + std::fmt::Debug {
    /// Short name of the backend (for diagnostics), e.g. `"fork"` or `"singleton"`.
    fn name(&self) -> &'static str;
    /// This process's rank.
    fn rank(&self) -> u32;
    /// Number of ranks in the job.
    fn size(&self) -> u32;
    /// Host identifier of every rank (length [`size`](Bootstrap::size)); ranks with equal
    /// identifiers share memory.
    fn host_ids(&self) -> &[u32];
    /// Collective all-gather of one blob per rank; the result is indexed by rank.
    ///
    /// # Errors
    /// [`BootError::Lost`] if the job is ending; [`BootError::Protocol`] on a malformed reply.
    fn exchange(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, BootError>;
    /// Collective barrier.
    ///
    /// # Errors
    /// As for [`exchange`](Bootstrap::exchange).
    fn barrier(&mut self) -> Result<(), BootError>;
    /// Collective broadcast of `root`'s `data` (ignored on other ranks).
    ///
    /// # Errors
    /// As for [`exchange`](Bootstrap::exchange).
    fn broadcast(&mut self, root: u32, data: &[u8]) -> Result<Vec<u8>, BootError>;
    /// Ends the whole job with `code`, reporting `msg`. Never returns.
    fn abort(&mut self, code: i32, msg: &str) -> !;
    /// Tells the launcher this rank finished cleanly and will exit with `code`.
    ///
    /// # Errors
    /// As for [`exchange`](Bootstrap::exchange).
    fn finalize(&mut self, code: i32) -> Result<(), BootError>;
    /// Asks the launcher to end the whole job with `code` (GASNet's `gasnet_exit`
    /// semantics: any rank's exit ends the job). Returns once the request is sent;
    /// the caller then exits the process.
    fn request_exit(&mut self, code: i32);
}

/// The bootstrap of a job of one rank with no launcher: every collective is trivial.
#[derive(Debug)]
pub struct Singleton {
    host: [u32; 1],
}

impl Singleton {
    /// A singleton bootstrap.
    pub fn new() -> Self {
        Singleton { host: [0] }
    }
}

impl Default for Singleton {
    fn default() -> Self {
        Self::new()
    }
}

impl Bootstrap for Singleton {
    fn name(&self) -> &'static str {
        "singleton"
    }
    fn rank(&self) -> u32 {
        0
    }
    fn size(&self) -> u32 {
        1
    }
    fn host_ids(&self) -> &[u32] {
        &self.host
    }
    fn exchange(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, BootError> {
        Ok(vec![mine.to_vec()])
    }
    fn barrier(&mut self) -> Result<(), BootError> {
        Ok(())
    }
    fn broadcast(&mut self, _root: u32, data: &[u8]) -> Result<Vec<u8>, BootError> {
        Ok(data.to_vec())
    }
    fn abort(&mut self, code: i32, msg: &str) -> ! {
        eprintln!("gex: rank 0 aborted the job (code {code}): {msg}");
        std::process::exit(if code == 0 { 1 } else { code })
    }
    fn finalize(&mut self, _code: i32) -> Result<(), BootError> {
        Ok(())
    }
    fn request_exit(&mut self, _code: i32) {}
}
