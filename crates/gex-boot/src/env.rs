//! Every environment variable gex-boot sets or reads, in one place.
//!
//! | variable | set by | read by | meaning | default when unset |
//! |---|---|---|---|---|
//! | [`GEX_BOOT`](BOOT) | launcher (`fork`) | [`from_env`](crate::from_env), [`spawn_self`](crate::spawn_self) | which bootstrap the rank uses | singleton job of one rank |
//! | [`GEX_BOOT_FD`](BOOT_FD) | launcher | fork client | the rank's end of its launcher socket | required with `GEX_BOOT=fork` |
//! | [`GEX_RANK`](RANK) | launcher | fork client | this process's rank, `0..GEX_SIZE` | required with `GEX_BOOT=fork` |
//! | [`GEX_SIZE`](SIZE) | launcher | fork client | number of ranks in the job | required with `GEX_BOOT=fork` |
//! | [`GEX_JOB_ID`](JOB_ID) | launcher | conduits (not gex-boot) | identifier unique to this job on this host, for naming job-wide resources | none |
//! | [`GEX_LOCAL_RANK`](LOCAL_RANK) | launcher | conduits (not gex-boot) | rank among the ranks on this host (the fork launcher runs one host: equals `GEX_RANK`) | none |
//! | [`GEX_LOCAL_SIZE`](LOCAL_SIZE) | launcher | conduits (not gex-boot) | number of ranks on this host (fork launcher: equals `GEX_SIZE`) | none |
//! | [`GEX_CONDUIT`](CONDUIT) | `gex-run --conduit NAME` | the `gex` facade (not gex-boot) | conduit the ranks should open | the facade's default |
//!
//! A launcher overwrites any value of these variables inherited from its own
//! environment, except `GEX_CONDUIT`, which it sets only when asked to.
//!
//! ```
//! assert_eq!(gex_boot::env::BOOT, "GEX_BOOT");
//! ```

/// `GEX_BOOT`: the bootstrap backend. The fork launcher sets `fork`. Unset or
/// empty means "no launcher": the process is a job of one rank
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

/// `Some(value)` if `GEX_BOOT` is set and not empty.
pub(crate) fn boot() -> Option<std::ffi::OsString> {
    std::env::var_os(BOOT).filter(|v| !v.is_empty())
}
