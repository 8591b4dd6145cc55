//! Every environment variable gex-boot sets or reads, in one place.
//!
//! | variable | set by | read by | meaning | default when unset |
//! |---|---|---|---|---|
//! | [`GEX_BOOT`](BOOT) | launcher (`fork`), or the user (`pmix`, `pmi2`, `pmi1`, `singleton`) | [`from_env`](crate::from_env), [`spawn_self`](crate::spawn_self) | which bootstrap the rank uses | detected: see [`detect`](crate::detect) |
//! | [`GEX_BOOT_FD`](BOOT_FD) | launcher | fork client | the rank's end of its launcher socket | required with `GEX_BOOT=fork` |
//! | [`GEX_RANK`](RANK) | launcher | fork client | this process's rank, `0..GEX_SIZE` | required with `GEX_BOOT=fork` |
//! | [`GEX_SIZE`](SIZE) | launcher | fork client | number of ranks in the job | required with `GEX_BOOT=fork` |
//! | [`GEX_JOB_ID`](JOB_ID) | launcher | conduits (not gex-boot) | identifier unique to this job on this host, for naming job-wide resources | none |
//! | [`GEX_LOCAL_RANK`](LOCAL_RANK) | launcher | conduits (not gex-boot) | rank among the ranks on this host (fork launcher: equals `GEX_RANK` unless `gex-run --hosts` / `JobSpec::hosts` names several hosts) | none |
//! | [`GEX_LOCAL_SIZE`](LOCAL_SIZE) | launcher | conduits (not gex-boot) | number of ranks on this host (fork launcher: equals `GEX_SIZE` unless several hosts are named) | none |
//! | [`GEX_THREADS`](THREADS) | `gex-run --threads T`, or the user | [`threads::run_from_env`](crate::threads::run_from_env) | thread ranks per process | `1` |
//! | [`GEX_CONDUIT`](CONDUIT) | `gex-run --conduit NAME` | the `gex` facade (not gex-boot) | conduit the ranks should open | the facade's default |
//! | [`PMI_FD`] | `mpiexec` (Hydra), `srun --mpi=pmi2` | [`from_env`](crate::from_env), PMI clients | the rank's inherited socket to the PMI server | — |
//! | [`PMI_JOBID`] | `srun --mpi=pmi2` | [`detect`](crate::detect), PMI-2 client | the PMI-2 job id (sent in `fullinit`); with `PMI_FD` it selects PMI-2 | — |
//! | [`PMI_PORT`] | `mpiexec -pmi-port`, other PMI-1 servers | [`from_env`](crate::from_env), PMI client | `host:port` of the PMI server (used when `PMI_FD` is not set) | — |
//! | [`PMI_ID`] | with `PMI_PORT` | PMI client | identity for the `initack` handshake | `PMI_RANK` |
//! | [`PMI_RANK`] | `mpiexec` | PMI client | this process's rank | required with `PMI_FD` |
//! | [`PMI_SIZE`] | `mpiexec` | PMI client | number of ranks | required with `PMI_FD` |
//! | [`PMIX_NAMESPACE`] | PMIx servers (`mpirun`, `srun --mpi=pmix`) | [`detect`](crate::detect) | the job's PMIx namespace; with `PMIX_RANK` it selects PMIx | — |
//! | [`PMIX_RANK`] | PMIx servers | [`detect`](crate::detect) | this process's PMIx rank | — |
//! | [`IPATH_NO_BACKTRACE`] | fork launcher (`1`, unless set) | libinfinipath (not gex) | keeps libinfinipath's constructor from catching SIGINT, SIGTERM, SIGABRT, SIGILL, SIGBUS and SIGSEGV | — |
//!
//! The `PMI_*` variables belong to the PMI-1 and PMI-2 protocols (see
//! [`crate::pmi`]), the `PMIX_*` ones to PMIx (libpmix reads more of them): gex reads
//! them and never sets them.
//!
//! The fork launcher overwrites any value of the `GEX_*` variables above inherited
//! from its own environment, except `GEX_CONDUIT`, which it sets only when asked to.
//!
//! ```
//! assert_eq!(gex_boot::env::BOOT, "GEX_BOOT");
//! ```

/// `GEX_BOOT`: the bootstrap backend. The fork launcher sets `fork`; a user may force
/// `pmix`, `pmi2`, `pmi1` (or `pmi`, the same) or `singleton`. Unset or empty means
/// "detect": see [`detect`](crate::detect) for the order. Any other value is an
/// error.
pub const BOOT: &str = "GEX_BOOT";

/// `GEX_BOOT_FD`: decimal number of the inherited file descriptor of the rank's
/// UNIX stream socket to the fork launcher.
pub const BOOT_FD: &str = "GEX_BOOT_FD";

/// `GEX_THREADS`: number of thread ranks each process of the job runs, decimal, at
/// least 1 (read by [`threads::run_from_env`](crate::threads::run_from_env); set by
/// `gex-run --threads T`).
pub const THREADS: &str = "GEX_THREADS";

/// `GEX_RANK`: this process's rank, decimal, in `0..GEX_SIZE`.
pub const RANK: &str = "GEX_RANK";

/// `GEX_SIZE`: number of ranks in the job, decimal, at least 1.
pub const SIZE: &str = "GEX_SIZE";

/// `GEX_JOB_ID`: an identifier unique to the job on this host (launcher pid and
/// start time, in hexadecimal: `<pid>-<nanoseconds>`). Conduits use it to name
/// job-wide resources such as shared-memory objects.
pub const JOB_ID: &str = "GEX_JOB_ID";

/// `GEX_LOCAL_RANK`: this process's rank among the ranks on its host.
pub const LOCAL_RANK: &str = "GEX_LOCAL_RANK";

/// `GEX_LOCAL_SIZE`: number of ranks on this host.
pub const LOCAL_SIZE: &str = "GEX_LOCAL_SIZE";

/// `GEX_CONDUIT`: name of the conduit the ranks should use; set by
/// `gex-run --conduit NAME`, read by the `gex` facade.
pub const CONDUIT: &str = "GEX_CONDUIT";

/// The value of [`BOOT`] that selects the fork launcher's client.
pub const BOOT_FORK: &str = "fork";

/// A value of [`BOOT`] that selects the PMI-1 client ([`crate::pmi::PmiClient`]);
/// the same as [`BOOT_PMI1`].
pub const BOOT_PMI: &str = "pmi";

/// The value of [`BOOT`] that selects the PMI-1 client ([`crate::pmi::PmiClient`]).
pub const BOOT_PMI1: &str = "pmi1";

/// The value of [`BOOT`] that selects the PMI-2 client ([`crate::pmi::Pmi2Client`]).
pub const BOOT_PMI2: &str = "pmi2";

/// The value of [`BOOT`] that selects the PMIx client (`gex_boot::pmix`, cargo feature
/// `pmix`).
pub const BOOT_PMIX: &str = "pmix";

/// The value of [`BOOT`] that makes the process a job of one rank
/// ([`gex_core::boot::Singleton`]) whatever launcher variables it sees.
pub const BOOT_SINGLETON: &str = "singleton";

/// `PMI_FD`: decimal number of an inherited, connected stream socket to the PMI-1
/// server (set by MPICH's Hydra `mpiexec`).
pub const PMI_FD: &str = "PMI_FD";

/// `PMI_PORT`: `host:port` of the PMI-1 server, for launchers that do not pass a
/// socket (Hydra with `-pmi-port`). Used only when [`PMI_FD`] is not set.
pub const PMI_PORT: &str = "PMI_PORT";

/// `PMI_ID`: the identity a PMI-1 client sends in the `initack` handshake over
/// [`PMI_PORT`].
pub const PMI_ID: &str = "PMI_ID";

/// `PMI_RANK`: this process's rank, as set by a PMI-1 launcher.
pub const PMI_RANK: &str = "PMI_RANK";

/// `PMI_SIZE`: number of ranks in the job, as set by a PMI-1 launcher.
pub const PMI_SIZE: &str = "PMI_SIZE";

/// `PMI_JOBID`: the job id a PMI-2 launcher (Slurm's `--mpi=pmi2` plugin) gives its
/// ranks; the PMI-2 client sends it in `fullinit`. Together with [`PMI_FD`] it makes
/// [`detect`](crate::detect) choose PMI-2.
pub const PMI_JOBID: &str = "PMI_JOBID";

/// `PMIX_NAMESPACE`: the job's namespace, set by a PMIx server for its clients
/// (Open MPI's `mpirun`, `prterun`, `srun --mpi=pmix`).
pub const PMIX_NAMESPACE: &str = "PMIX_NAMESPACE";

/// `PMIX_RANK`: this process's rank in [`PMIX_NAMESPACE`], set by a PMIx server.
pub const PMIX_RANK: &str = "PMIX_RANK";

/// `IPATH_NO_BACKTRACE`: read by libinfinipath (the library of libfabric's `psm`
/// provider, which Debian's libfabric loads in every process linked with it). Unless
/// it is set, libinfinipath's constructor installs handlers for SIGINT, SIGTERM,
/// SIGABRT, SIGILL, SIGBUS and SIGSEGV that print a backtrace and `exit(1)`: a rank
/// of a program built with the ofi conduit then *exits with code 1* when it is sent
/// SIGTERM, or calls `abort`, instead of being killed by the signal, and the job's
/// exit code no longer says which signal ended it. The fork launcher sets it to `1`
/// in every rank's environment unless the launcher's environment sets it; set it
/// yourself for a self-launching program (the launching process has run the
/// constructor already) and under `mpiexec` or `srun`.
pub const IPATH_NO_BACKTRACE: &str = "IPATH_NO_BACKTRACE";

/// `Some(value)` if `GEX_BOOT` is set and not empty.
pub(crate) fn boot() -> Option<std::ffi::OsString> {
    std::env::var_os(BOOT).filter(|v| !v.is_empty())
}

use gex_core::config::EnvVar;

/// The registry of the `GEX_*` variables gex-boot sets or reads (collected with the
/// other crates' by the facade; `ci/check-env-docs` keeps `docs/env.md` in step).
pub const ENV_VARS: &[EnvVar] = &[
    EnvVar {
        name: "GEX_BOOT",
        default: "",
        doc: "Bootstrap backend: fork (set by the gex fork launcher), or forced: pmix, pmi2, pmi1 (or pmi), singleton. Unset: detected in the order PMIx (PMIX_NAMESPACE+PMIX_RANK), PMI-2 (PMI_FD+PMI_JOBID), PMI-1 (PMI_FD or PMI_PORT), singleton; gex-info boot says which.",
    },
    EnvVar {
        name: "GEX_THREADS",
        default: "1",
        doc: "Thread ranks per process for programs started through gex_boot::threads::run_from_env (gex-run --threads T sets it); the job has processes x threads ranks. A process that makes a single rank while it is above 1 fails at init (InitError::Config), instead of running a job of fewer ranks than asked.",
    },
    EnvVar {
        name: "GEX_BOOT_FD",
        default: "",
        doc: "Set by the fork launcher: inherited socket to the launcher.",
    },
    EnvVar {
        name: "GEX_RANK",
        default: "",
        doc: "Set by the launcher: this process's rank.",
    },
    EnvVar {
        name: "GEX_SIZE",
        default: "",
        doc: "Set by the launcher: number of ranks.",
    },
    EnvVar {
        name: "GEX_JOB_ID",
        default: "",
        doc: "Set by the launcher: unique job identifier.",
    },
    EnvVar {
        name: "GEX_LOCAL_RANK",
        default: "",
        doc: "Set by the launcher: rank among the ranks of this host.",
    },
    EnvVar {
        name: "GEX_LOCAL_SIZE",
        default: "",
        doc: "Set by the launcher: ranks on this host.",
    },
];
