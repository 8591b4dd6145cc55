//! gex-boot: launching gex jobs and the rank side of their bootstrap.
//!
//! A gex job is a set of *ranks*, usually one process each. Before any conduit can
//! move data, each rank must learn its rank and the job size and swap a few small
//! blobs (addresses, segment names) with the others. That is the *bootstrap*,
//! whose contract is [`gex_core::boot::Bootstrap`]. This crate provides:
//!
//! - [`launch`]: the **local fork launcher**. [`launch::run_job`] starts `N`
//!   processes of a program on this host, serves their bootstrap collectives over
//!   anonymous socketpairs, and ends the job as a unit: when any rank fails, exits
//!   or aborts, every other rank is terminated within about a second and the job's
//!   exit code says what happened. The `gex-run` binary is a thin command line over
//!   it: `gex-run -n N [--conduit NAME] [--hosts LIST [--host-exec PREFIX]] [--]
//!   prog args…`.
//! - [`from_env`]: the **rank side**. [`detect`] reads [`GEX_BOOT`](env::BOOT)
//!   and the launchers' variables, in the order gex-run, PMIx, PMI-2, PMI-1,
//!   singleton, and `from_env` returns the matching [`Bootstrap`]: the fork client
//!   ([`fork::ForkClient`]) under the fork launcher, the PMIx client
//!   (`pmix::PmixClient`, cargo feature `pmix`) under Open MPI's `mpirun`,
//!   `prterun` or `srun --mpi=pmix`, the PMI-2 client ([`pmi::Pmi2Client`]) under
//!   `srun --mpi=pmi2`, the PMI-1 client ([`pmi::PmiClient`]) under MPICH's Hydra
//!   `mpiexec`, or a one-rank [`Singleton`] when the program was started on its
//!   own.
//! - [`spawn_self`] and [`spawn_self_test`]: **self-launch** for tests and
//!   benchmarks. The same executable is both launcher and ranks: the first call
//!   runs a job of copies of the current executable and returns its exit code; in
//!   the copies, the same call returns their bootstrap.
//!
//! - [`threads`]: **thread ranks**. A job whose ranks are threads of one process:
//!   [`threads::run`] starts `N` threads, hands each its [`threads::ThreadBoot`]
//!   (each initialises its own client with it), joins them and names a rank that
//!   panicked.
//!
//! Every environment variable involved is listed in [`env`](mod@env); the exit semantics
//! and the wire protocol are in [`launch`].
//!
//! # What it does not do (yet)
//!
//! - Multi-host jobs across machines with its own launcher. The fork launcher runs
//!   every rank on the local host; it can give ranks distinct host ids and start
//!   them through a prefix such as `ip netns exec {host}` (simulated hosts: network
//!   namespaces of this machine, see [`launch`](launch#several-simulated-hosts)),
//!   but not over `ssh`. For several machines, start the job with `mpiexec`,
//!   `srun` or `mpirun` (the PMI and PMIx clients report their host layout).
//! - PMIx without the `pmix` feature: the default build links no native library,
//!   so it has no PMIx client; a process it finds under a PMIx server fails with an
//!   error saying so (rather than running as one of many one-rank jobs).
//! - Platforms other than Linux: the launcher relies on `PR_SET_PDEATHSIG` and
//!   pidfds (Linux 5.3 or later; without `pidfd_open` it polls `waitid`, see
//!   [`launch`](launch#how-a-job-runs)).
//!
//! # Recipes
//!
//! - A local job: `gex-run -n 4 ./my-app args…` (add `--conduit smp` to choose the
//!   conduit through `GEX_CONDUIT`). Exit code, failure messages and cleanup are
//!   described in [`launch`].
//! - A test or benchmark that launches itself: [`spawn_self_test`] inside a
//!   `#[test]`, [`spawn_self`] in a `main`.
//! - MPICH's Hydra: `mpiexec -n 4 ./my-app args…` (PMI-1); Slurm: `srun --mpi=pmi2
//!   --kill-on-bad-exit=1 -n 4 ./my-app args…` (PMI-2), or `--mpi=pmix`; Open
//!   MPI: `mpirun -n 4 ./my-app args…` (PMIx; built with the `pmix` feature).
//!   [`from_env`] (and [`spawn_self`], which then never launches) returns the
//!   matching client. Faults are handled by the launcher: see
//!   [`pmi`](mod@pmi#ending-the-job) and `docs/launching.md`.
//!
//! # Cargo features
//!
//! - `pmix` (off): the PMIx client (links the system libpmix).
//! - `fuzz` (off): the hidden `fuzz_api` module, through which `benches/gex-fuzz`
//!   reaches the decoders of launcher frames, PMI wire lines, base64 and PMI
//!   mappings. Not API: only gex-fuzz enables it.
//!
//! # Words
//!
//! - **rank**: one member of a job, numbered `0..size`.
//! - **launcher**: the process that starts the ranks and serves their bootstrap
//!   (`gex-run`, a test that called [`spawn_self`], or `mpiexec`).
//! - **HELLO / FINALIZE**: the first and last bootstrap messages of a gex rank. A
//!   rank that said HELLO and ends without FINALIZE has failed.
//!
//! # Example
//!
//! ```
//! use gex_core::boot::Bootstrap;
//!
//! // Started without a launcher (as here), this is a job of one rank.
//! let mut boot = gex_boot::from_env()?;
//! let all = boot.exchange(b"my address")?;
//! assert_eq!(all.len(), boot.size() as usize);
//! boot.finalize(0)?;
//! # Ok::<(), gex_core::boot::BootError>(())
//! ```

#[macro_use]
mod client;
mod child;
mod coord;
mod detect;
pub mod env;
pub use env::ENV_VARS;
pub mod fork;
mod inherit;
pub mod launch;
pub mod pmi;
#[cfg(feature = "pmix")]
pub mod pmix;
mod proto;
mod signals;
pub mod threads;

#[cfg(feature = "fuzz")]
#[doc(hidden)]
pub mod fuzz_api;

use std::ffi::OsString;

use gex_core::boot::{BootError, Bootstrap, Singleton};

use crate::launch::{JobSpec, LaunchError};

pub use detect::{Backend, Detection, detect, detect_with};

/// Whether this build of gex-boot has the PMIx client (cargo feature `pmix`).
pub const PMIX_BUILT: bool = cfg!(feature = "pmix");

/// Returns this process's bootstrap: the one [`detect`] names, in the order
/// gex-run, PMIx, PMI-2, PMI-1, singleton:
///
/// | [`detect`] finds | bootstrap |
/// |---|---|
/// | `GEX_BOOT=fork` (the fork launcher) | [`fork::ForkClient`] over the inherited socket; it says HELLO before this returns |
/// | `PMIX_NAMESPACE` and `PMIX_RANK` (`mpirun`, `prterun`, `srun --mpi=pmix`), or `GEX_BOOT=pmix` | `pmix::PmixClient` (cargo feature `pmix`; without it, an error) |
/// | `PMI_FD` and `PMI_JOBID` (`srun --mpi=pmi2`) | [`pmi::Pmi2Client`], or [`pmi::PmiClient`] if the server refuses PMI-2 |
/// | `GEX_BOOT=pmi2` | [`pmi::Pmi2Client`] (no fallback) |
/// | `PMI_FD` or `PMI_PORT` (Hydra's `mpiexec`), or `GEX_BOOT=pmi1`/`pmi` | [`pmi::PmiClient`] |
/// | nothing, or `GEX_BOOT=singleton` | [`Singleton`]: a job of one rank |
///
/// Under a PMI or PMIx launcher every rank must call this (it may make a collective
/// exchange to learn the host layout).
///
/// ```
/// let boot = gex_boot::from_env()?;
/// assert!(boot.rank() < boot.size());
/// # Ok::<(), gex_core::boot::BootError>(())
/// ```
///
/// # Errors
/// [`BootError::Environment`] for an unknown `GEX_BOOT` value, a malformed job
/// environment, or a PMIx launcher in a build without the `pmix` feature;
/// [`BootError::Lost`] if the launcher is already gone; [`BootError::Protocol`] if a
/// PMI or PMIx server answers unexpectedly.
pub fn from_env() -> Result<Box<dyn Bootstrap>, BootError> {
    let d = detect()?;
    tracing::debug!(
        backend = d.backend.name(),
        reason = d.reason.as_str(),
        "bootstrap detected"
    );
    open(&d)
}

/// Opens the bootstrap `d` names.
fn open(d: &Detection) -> Result<Box<dyn Bootstrap>, BootError> {
    match d.backend {
        Backend::Fork => Ok(Box::new(fork::ForkClient::from_env()?)),
        Backend::Pmix => open_pmix(d),
        Backend::Pmi2 if d.pmi1_fallback => pmi::negotiate(),
        Backend::Pmi2 => Ok(Box::new(pmi::Pmi2Client::from_env()?)),
        Backend::Pmi1 => Ok(Box::new(pmi::PmiClient::from_env()?)),
        Backend::Singleton => Ok(Box::new(Singleton::new())),
    }
}

#[cfg(feature = "pmix")]
fn open_pmix(_d: &Detection) -> Result<Box<dyn Bootstrap>, BootError> {
    Ok(Box::new(pmix::PmixClient::from_env()?))
}

#[cfg(not(feature = "pmix"))]
fn open_pmix(d: &Detection) -> Result<Box<dyn Bootstrap>, BootError> {
    Err(BootError::Environment(format!(
        "this process needs the PMIx bootstrap ({}), but this build of gex-boot has no \
         PMIx client: rebuild with the cargo feature `gex-boot/pmix` (the `pmix` feature of \
         gex, gex-perf and gex-info; C libraries: their install.sh with CARGO_FEATURES=pmix) \
         and libpmix-dev, or set {}={} to run it as a job of one rank",
        d.reason,
        env::BOOT,
        env::BOOT_SINGLETON
    )))
}

/// What [`spawn_self`] made of this process.
#[derive(Debug)]
pub enum Role {
    /// This process is a rank of the job: here is its bootstrap.
    Rank(Box<dyn Bootstrap>),
    /// This process launched the job, which has ended with this exit code.
    Launcher(i32),
}

/// Whether this process was started by a launcher (`GEX_BOOT` is set, or a PMI or
/// PMIx launcher's variables are): [`detect`] finds something other than a
/// singleton, or `GEX_BOOT` names one.
fn is_rank() -> bool {
    env::boot().is_some() || detect().is_ok_and(|d| d.backend != Backend::Singleton)
}

fn self_job(
    ranks: u32,
    args: Vec<OsString>,
    quiet_stdout: bool,
    configure: impl FnOnce(JobSpec) -> JobSpec,
) -> Result<Role, LaunchError> {
    if is_rank() {
        // A rank never launches again, whatever it was asked: this is what
        // prevents a self-launching program from recursing.
        return Ok(Role::Rank(from_env()?));
    }
    let exe = std::env::current_exe().map_err(LaunchError::CurrentExe)?;
    let spec = JobSpec::new(ranks, exe)
        .args(args)
        .require_hello(true)
        .stdout_to_stderr(quiet_stdout);
    launch::run_job(&configure(spec)).map(Role::Launcher)
}

/// Runs this executable as a job of `ranks` ranks.
///
/// In a process started without a launcher, starts `ranks` copies of
/// [`std::env::current_exe`] with the same arguments under the fork launcher, waits
/// for the job and returns [`Role::Launcher`] with its exit code. In those copies
/// (`GEX_BOOT` is set), returns [`Role::Rank`] with their bootstrap instead, so one
/// `main` serves as both. Every copy must create its bootstrap (this function does
/// it) and finalize it, or the job fails. A process started by `mpiexec` or `srun`
/// (`PMI_FD` or `PMI_PORT` is set) is a rank too: `ranks` is then ignored and the
/// launcher's job size applies.
///
/// ```no_run
/// use gex_boot::{spawn_self, Role};
///
/// fn main() -> Result<(), Box<dyn std::error::Error>> {
///     match spawn_self(4)? {
///         Role::Launcher(code) => std::process::exit(code),
///         Role::Rank(mut boot) => {
///             boot.barrier()?;
///             println!("rank {} of {}", boot.rank(), boot.size());
///             boot.finalize(0)?;
///         }
///     }
///     Ok(())
/// }
/// ```
///
/// # Errors
/// As for [`launch::run_job`]; in a rank, [`LaunchError::Boot`] if its bootstrap
/// cannot be created.
pub fn spawn_self(ranks: u32) -> Result<Role, LaunchError> {
    self_job(ranks, std::env::args_os().skip(1).collect(), false, |s| s)
}

/// [`spawn_self`] for use inside a `#[test]` function of a libtest harness.
///
/// The copies are started as `<test binary> <test_path> --exact --nocapture
/// --test-threads=1`, so that each copy runs exactly the calling test, which then
/// takes the [`Role::Rank`] branch. `test_path` is the test's full path in its
/// binary: the function name for a test at the top of an integration-test file,
/// `module::tests::name` for a unit test. A copy that runs no test (a wrong path, false)
/// exits without creating its bootstrap, which fails the job.
///
/// ```no_run
/// use gex_boot::{spawn_self_test, Role};
///
/// #[test]
/// fn four_ranks_barrier() {
///     match spawn_self_test(4, "four_ranks_barrier").unwrap() {
///         Role::Launcher(code) => assert_eq!(code, 0),
///         Role::Rank(mut boot) => {
///             boot.barrier().unwrap();
///             boot.finalize(0).unwrap();
///         }
///     }
/// }
/// ```
///
/// # Errors
/// As for [`spawn_self`].
pub fn spawn_self_test(ranks: u32, test_path: &str) -> Result<Role, LaunchError> {
    spawn_self_test_with(ranks, test_path, |s| s)
}

/// [`spawn_self_test`] with a say in the job: in the launching process, `configure`
/// receives the [`JobSpec`] about to run and returns the one to run (to add
/// [`hosts`](JobSpec::hosts), a [`host_exec`](JobSpec::host_exec) prefix or
/// environment variables). In a rank, `configure` is not called.
///
/// ```no_run
/// use gex_boot::{spawn_self_test_with, Role};
/// use gex_core::boot::Bootstrap;
///
/// #[test]
/// fn two_hosts() {
///     let job = spawn_self_test_with(4, "two_hosts", |s| s.hosts(["a", "a", "b", "b"]));
///     match job.unwrap() {
///         Role::Launcher(code) => assert_eq!(code, 0),
///         Role::Rank(mut boot) => {
///             assert_eq!(boot.host_ids(), [0, 0, 1, 1]);
///             boot.finalize(0).unwrap();
///         }
///     }
/// }
/// ```
///
/// # Errors
/// As for [`spawn_self`].
pub fn spawn_self_test_with(
    ranks: u32,
    test_path: &str,
    configure: impl FnOnce(JobSpec) -> JobSpec,
) -> Result<Role, LaunchError> {
    let args = [test_path, "--exact", "--nocapture", "--test-threads=1"]
        .into_iter()
        .map(OsString::from)
        .collect();
    self_job(ranks, args, true, configure)
}
