//! Every environment variable gex-boot sets or reads, in one place.
//!
//! | variable | set by | read by | meaning | default when unset |
//! |---|---|---|---|---|
//! | [`GEX_BOOT`](BOOT) | launcher (`fork`), or the user (`pmi`) | [`from_env`](crate::from_env), [`spawn_self`](crate::spawn_self) | which bootstrap the rank uses | PMI-1 if `PMI_FD` or `PMI_PORT` is set, else a singleton job of one rank |
//! | [`GEX_BOOT_FD`](BOOT_FD) | launcher | fork client | the rank's end of its launcher socket | required with `GEX_BOOT=fork` |
//! | [`GEX_RANK`](RANK) | launcher | fork client | this process's rank, `0..GEX_SIZE` | required with `GEX_BOOT=fork` |
//! | [`GEX_SIZE`](SIZE) | launcher | fork client | number of ranks in the job | required with `GEX_BOOT=fork` |
//! | [`GEX_JOB_ID`](JOB_ID) | launcher | conduits (not gex-boot) | identifier unique to this job on this host, for naming job-wide resources | none |
//! | [`GEX_LOCAL_RANK`](LOCAL_RANK) | launcher | conduits (not gex-boot) | rank among the ranks on this host (fork launcher: equals `GEX_RANK` unless `gex-run --hosts` / `JobSpec::hosts` names several hosts) | none |
//! | [`GEX_LOCAL_SIZE`](LOCAL_SIZE) | launcher | conduits (not gex-boot) | number of ranks on this host (fork launcher: equals `GEX_SIZE` unless several hosts are named) | none |
//! | [`GEX_CONDUIT`](CONDUIT) | `gex-run --conduit NAME` | the `gex` facade (not gex-boot) | conduit the ranks should open | the facade's default |
//! | [`PMI_FD`] | `mpiexec` (Hydra) | [`from_env`](crate::from_env), PMI client | the rank's inherited socket to the PMI server | — |
//! | [`PMI_PORT`] | `mpiexec -pmi-port`, other PMI-1 servers | [`from_env`](crate::from_env), PMI client | `host:port` of the PMI server (used when `PMI_FD` is not set) | — |
//! | [`PMI_ID`] | with `PMI_PORT` | PMI client | identity for the `initack` handshake | `PMI_RANK` |
//! | [`PMI_RANK`] | `mpiexec` | PMI client | this process's rank | required with `PMI_FD` |
//! | [`PMI_SIZE`] | `mpiexec` | PMI client | number of ranks | required with `PMI_FD` |
//!
//! The `PMI_*` variables belong to the PMI-1 protocol (see [`crate::pmi`]): gex
//! reads them and never sets them.
//!
//! The fork launcher overwrites any value of the `GEX_*` variables above inherited
//! from its own environment, except `GEX_CONDUIT`, which it sets only when asked to.
//!
//! ```
//! assert_eq!(gex_boot::env::BOOT, "GEX_BOOT");
//! ```

/// `GEX_BOOT`: the bootstrap backend. The fork launcher sets `fork`; `pmi` forces
/// the PMI-1 client ([`crate::pmi`]). Unset or empty means "not the fork
/// launcher": the PMI-1 client if [`PMI_FD`] or [`PMI_PORT`] is set (the process
/// was started by `mpiexec` or `srun`), else a job of one rank
/// ([`gex_core::boot::Singleton`]). Any other value is an error.
pub const BOOT: &str = "GEX_BOOT";

/// `GEX_BOOT_FD`: decimal number of the inherited file descriptor of the rank's
/// UNIX stream socket to the fork launcher.
pub const BOOT_FD: &str = "GEX_BOOT_FD";

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

/// The value of [`BOOT`] that selects the PMI-1 client ([`crate::pmi`]).
pub const BOOT_PMI: &str = "pmi";

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

/// `Some(value)` if `GEX_BOOT` is set and not empty.
pub(crate) fn boot() -> Option<std::ffi::OsString> {
    std::env::var_os(BOOT).filter(|v| !v.is_empty())
}

/// Whether a PMI-1 launcher started this process (`PMI_FD` or `PMI_PORT` is set
/// and not empty).
pub(crate) fn pmi_present() -> bool {
    [PMI_FD, PMI_PORT]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|v| !v.is_empty()))
}

/// The registry of the `GEX_*` variables gex-boot sets or reads (collected with the
/// other crates' by the facade; `ci/check-env-docs` keeps `docs/env.md` in step).
pub const ENV_VARS: &[gex_core::config::EnvVar] = &[
    gex_core::config::EnvVar {
        name: "GEX_BOOT",
        default: "",
        doc: "Bootstrap backend: fork (set by the gex fork launcher) or pmi (force the PMI-1 client). Unset: PMI-1 if PMI_FD or PMI_PORT is set (mpiexec, srun), else a singleton job.",
    },
    gex_core::config::EnvVar {
        name: "GEX_BOOT_FD",
        default: "",
        doc: "Set by the fork launcher: inherited socket to the launcher.",
    },
    gex_core::config::EnvVar {
        name: "GEX_RANK",
        default: "",
        doc: "Set by the launcher: this process's rank.",
    },
    gex_core::config::EnvVar {
        name: "GEX_SIZE",
        default: "",
        doc: "Set by the launcher: number of ranks.",
    },
    gex_core::config::EnvVar {
        name: "GEX_JOB_ID",
        default: "",
        doc: "Set by the launcher: unique job identifier.",
    },
    gex_core::config::EnvVar {
        name: "GEX_LOCAL_RANK",
        default: "",
        doc: "Set by the launcher: rank among the ranks of this host.",
    },
    gex_core::config::EnvVar {
        name: "GEX_LOCAL_SIZE",
        default: "",
        doc: "Set by the launcher: ranks on this host.",
    },
];
