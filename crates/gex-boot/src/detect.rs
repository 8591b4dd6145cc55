//! Which bootstrap a process uses, and why: [`detect`].

use std::ffi::OsString;

use gex_core::boot::BootError;

use crate::env;

/// A bootstrap backend of gex-boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// The fork launcher's client ([`fork::ForkClient`](crate::fork::ForkClient)):
    /// `gex-run` and self-launch.
    Fork,
    /// The PMIx client (`gex_boot::pmix::PmixClient`, cargo feature `pmix`): Open
    /// MPI's `mpirun`, `prterun`, `srun --mpi=pmix`.
    Pmix,
    /// The PMI-2 client ([`pmi::Pmi2Client`](crate::pmi::Pmi2Client)): `srun
    /// --mpi=pmi2`, Hydra with `GEX_BOOT=pmi2`.
    Pmi2,
    /// The PMI-1 client ([`pmi::PmiClient`](crate::pmi::PmiClient)): Hydra's
    /// `mpiexec`.
    Pmi1,
    /// A job of one rank ([`Singleton`](gex_core::boot::Singleton)).
    Singleton,
}

impl Backend {
    /// The backend's name, as its bootstrap's [`name`](gex_core::boot::Bootstrap::name)
    /// says it (`"pmi"` for PMI-1) and as `gex-info boot` prints it.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Fork => "fork",
            Backend::Pmix => "pmix",
            Backend::Pmi2 => "pmi2",
            Backend::Pmi1 => "pmi",
            Backend::Singleton => "singleton",
        }
    }
}

/// What [`detect`] found: the backend [`from_env`](crate::from_env) opens, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detection {
    /// The backend.
    pub backend: Backend,
    /// `true` when `GEX_BOOT` named it; `false` when the launcher's variables did.
    pub forced: bool,
    /// A detected PMI-2 falls back to PMI-1 on the same connection when the server
    /// refuses version 2 (`true` only for a detected [`Backend::Pmi2`]).
    pub pmi1_fallback: bool,
    /// Why, in one sentence naming the variables that decided.
    pub reason: String,
}

/// Works out which bootstrap this process uses, from its environment only (no
/// connection is made):
///
/// 1. `GEX_BOOT` set and not empty: the backend it names (`fork`, `pmix`, `pmi2`,
///    `pmi1` or `pmi`, `singleton`); the fork launcher sets `fork` (**gex-run**).
/// 2. **PMIx**: `PMIX_NAMESPACE` and `PMIX_RANK` are set (Open MPI's `mpirun`,
///    `prterun`, `srun --mpi=pmix`).
/// 3. **PMI-2**: `PMI_FD` and `PMI_JOBID` are set (`srun --mpi=pmi2`). If the
///    server then refuses version 2, the client falls back to PMI-1 on the same
///    connection.
/// 4. **PMI-1**: `PMI_FD` or `PMI_PORT` is set (Hydra's `mpiexec`, which serves
///    PMI-2 as well but lacks its `abort` in MPICH 4.0: forcing `GEX_BOOT=pmi2`
///    there loses the abort's exit code).
/// 5. **Singleton**: none of these; a job of one rank.
///
/// Variables set to the empty string count as unset.
///
/// ```
/// let d = gex_boot::detect()?;
/// println!("{} ({})", d.backend.name(), d.reason);
/// # Ok::<(), gex_core::boot::BootError>(())
/// ```
///
/// # Errors
/// [`BootError::Environment`] if `GEX_BOOT` names no known backend.
pub fn detect() -> Result<Detection, BootError> {
    detect_with(|name| std::env::var_os(name))
}

/// [`detect`] over another environment: `var(name)` returns a variable's value.
///
/// ```
/// use gex_boot::{Backend, detect_with};
///
/// let env = [("PMI_FD", "5"), ("PMI_JOBID", "42.0"), ("PMI_RANK", "0")];
/// let d = detect_with(|n| env.iter().find(|(k, _)| *k == n).map(|(_, v)| v.into()))?;
/// assert_eq!(d.backend, Backend::Pmi2);
/// # Ok::<(), gex_core::boot::BootError>(())
/// ```
///
/// # Errors
/// As for [`detect`].
pub fn detect_with(var: impl Fn(&str) -> Option<OsString>) -> Result<Detection, BootError> {
    let get = |name: &str| var(name).filter(|v| !v.is_empty());
    let has = |name: &str| get(name).is_some();
    let found = |backend, reason: String| Detection {
        backend,
        forced: false,
        pmi1_fallback: backend == Backend::Pmi2,
        reason,
    };
    if let Some(v) = get(env::BOOT) {
        let backend = match v.to_str() {
            Some(env::BOOT_FORK) => Backend::Fork,
            Some(env::BOOT_PMIX) => Backend::Pmix,
            Some(env::BOOT_PMI2) => Backend::Pmi2,
            Some(env::BOOT_PMI1 | env::BOOT_PMI) => Backend::Pmi1,
            Some(env::BOOT_SINGLETON) => Backend::Singleton,
            _ => {
                return Err(BootError::Environment(format!(
                    "{}={v:?} names no known bootstrap (expected one of {}, {}, {}, {}, {}, \
                     {}, or unset)",
                    env::BOOT,
                    env::BOOT_FORK,
                    env::BOOT_PMIX,
                    env::BOOT_PMI2,
                    env::BOOT_PMI1,
                    env::BOOT_PMI,
                    env::BOOT_SINGLETON
                )));
            }
        };
        let why = if backend == Backend::Fork {
            "set by the fork launcher (gex-run or self-launch)"
        } else {
            "forced"
        };
        return Ok(Detection {
            backend,
            forced: true,
            pmi1_fallback: false,
            reason: format!("{}={} ({why})", env::BOOT, v.to_string_lossy()),
        });
    }
    if has(env::PMIX_NAMESPACE) && has(env::PMIX_RANK) {
        let ns = get(env::PMIX_NAMESPACE).unwrap_or_default();
        return Ok(found(
            Backend::Pmix,
            format!(
                "{}={} and {} are set: a PMIx server started this process (mpirun, prterun, \
                 srun --mpi=pmix)",
                env::PMIX_NAMESPACE,
                ns.to_string_lossy(),
                env::PMIX_RANK
            ),
        ));
    }
    if has(env::PMI_FD) && has(env::PMI_JOBID) {
        return Ok(found(
            Backend::Pmi2,
            format!(
                "{} and {} are set: a PMI-2 launcher (srun --mpi=pmi2) started this process; \
                 PMI-1 if its server refuses version 2",
                env::PMI_FD,
                env::PMI_JOBID
            ),
        ));
    }
    for v in [env::PMI_FD, env::PMI_PORT] {
        if has(v) {
            return Ok(found(
                Backend::Pmi1,
                format!(
                    "{v} is set without {}: a PMI-1 launcher (Hydra's mpiexec) started this \
                     process",
                    env::PMI_JOBID
                ),
            ));
        }
    }
    Ok(found(
        Backend::Singleton,
        format!(
            "none of {}, {}/{}, {}, {} is set: no launcher, a job of one rank",
            env::BOOT,
            env::PMIX_NAMESPACE,
            env::PMIX_RANK,
            env::PMI_FD,
            env::PMI_PORT
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> Result<Detection, BootError> {
        detect_with(|n| vars.iter().find(|(k, _)| *k == n).map(|(_, v)| v.into()))
    }

    fn backend(vars: &[(&str, &str)]) -> Backend {
        with(vars).unwrap().backend
    }

    const PMIX: [(&str, &str); 2] = [("PMIX_NAMESPACE", "ns"), ("PMIX_RANK", "0")];
    const PMI2: [(&str, &str); 3] = [("PMI_FD", "5"), ("PMI_JOBID", "1.0"), ("PMI_RANK", "0")];
    const PMI1: [(&str, &str); 2] = [("PMI_FD", "5"), ("PMI_RANK", "0")];

    #[test]
    fn the_order_is_gex_run_pmix_pmi2_pmi1_singleton() {
        let all: Vec<_> = [("GEX_BOOT", "fork")]
            .into_iter()
            .chain(PMIX)
            .chain(PMI2)
            .collect();
        assert_eq!(backend(&all), Backend::Fork);
        assert_eq!(backend(&all[1..]), Backend::Pmix);
        assert_eq!(backend(&all[3..]), Backend::Pmi2);
        assert_eq!(backend(&PMI1), Backend::Pmi1);
        assert_eq!(
            backend(&[("PMI_PORT", "h:1"), ("PMI_ID", "0")]),
            Backend::Pmi1
        );
        assert_eq!(backend(&[]), Backend::Singleton);
    }

    #[test]
    fn partial_or_empty_variables_do_not_count() {
        assert_eq!(backend(&[("PMIX_NAMESPACE", "ns")]), Backend::Singleton);
        assert_eq!(backend(&[("PMIX_RANK", "0")]), Backend::Singleton);
        assert_eq!(
            backend(&[("PMIX_NAMESPACE", ""), ("PMIX_RANK", "0")]),
            Backend::Singleton
        );
        // PMI_JOBID without the socket is not PMI-2; PMI_PORT with it stays PMI-1.
        assert_eq!(backend(&[("PMI_JOBID", "1.0")]), Backend::Singleton);
        assert_eq!(
            backend(&[("PMI_PORT", "h:1"), ("PMI_JOBID", "1.0")]),
            Backend::Pmi1
        );
        assert_eq!(backend(&[("GEX_BOOT", ""), ("PMI_FD", "5")]), Backend::Pmi1);
    }

    #[test]
    fn gex_boot_forces_any_backend() {
        for (v, b) in [
            ("fork", Backend::Fork),
            ("pmix", Backend::Pmix),
            ("pmi2", Backend::Pmi2),
            ("pmi1", Backend::Pmi1),
            ("pmi", Backend::Pmi1),
            ("singleton", Backend::Singleton),
        ] {
            let vars: Vec<_> = [("GEX_BOOT", v)].into_iter().chain(PMIX).collect();
            let d = with(&vars).unwrap();
            assert_eq!(
                (d.backend, d.forced, d.pmi1_fallback),
                (b, true, false),
                "{v}"
            );
            assert!(d.reason.contains(v), "{}", d.reason);
        }
        let e = with(&[("GEX_BOOT", "mpi")]).unwrap_err();
        assert!(
            matches!(&e, BootError::Environment(m) if m.contains("pmix") && m.contains("\"mpi\"")),
            "{e}"
        );
    }

    #[test]
    fn reasons_name_the_deciding_variables() {
        let d = with(&PMIX).unwrap();
        assert!(!d.forced && d.reason.contains("PMIX_NAMESPACE=ns"), "{d:?}");
        let d = with(&PMI2).unwrap();
        assert!(d.pmi1_fallback && d.reason.contains("PMI_JOBID"), "{d:?}");
        let d = with(&PMI1).unwrap();
        assert!(!d.pmi1_fallback && d.reason.contains("PMI_FD"), "{d:?}");
        assert_eq!(Backend::Pmi1.name(), "pmi");
    }
}
