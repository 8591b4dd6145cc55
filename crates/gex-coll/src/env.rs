//! The settings of the collectives layer (`GEX_COLL_*`), declared here and read when
//! the layer attaches to an endpoint: a bad value, an unknown algorithm or a profile
//! that cannot be read fails [`Client::endpoint`](gex_core::Client::endpoint) with an
//! error that names the variable. They are collected with the core's and the
//! conduits' into the registry that `GEX_VERBOSEENV=1` and `gex-info env` print, and
//! documented in docs/env.md.

use crate::loggp::LogGP;
use crate::op::OpKind;
use crate::tune::Tuner;
use gex_core::InitError;
use gex_core::config::{Config, EnvVar};
use std::cell::Cell;

/// Every `GEX_COLL_*` variable, with its default and meaning.
pub const ENV_VARS: &[EnvVar] = &[
    EnvVar {
        name: "GEX_COLL_BARRIER",
        default: "",
        doc: "gex-coll: algorithm of every barrier (a name from CollExt::algorithms, e.g. binomial, ring); unset or auto: the autotuner's choice. Read when the layer attaches; an unknown name fails Client::endpoint.",
    },
    EnvVar {
        name: "GEX_COLL_BROADCAST",
        default: "",
        doc: "gex-coll: algorithm of every broadcast (a name from CollExt::algorithms, e.g. binomial, ring); unset or auto: the autotuner's choice. Read when the layer attaches; an unknown name fails Client::endpoint.",
    },
    EnvVar {
        name: "GEX_COLL_SCATTER",
        default: "",
        doc: "gex-coll: algorithm of every scatter (a name from CollExt::algorithms, e.g. binomial, ring); unset or auto: the autotuner's choice. Read when the layer attaches; an unknown name fails Client::endpoint.",
    },
    EnvVar {
        name: "GEX_COLL_GATHER",
        default: "",
        doc: "gex-coll: algorithm of every gather (a name from CollExt::algorithms, e.g. binomial, ring); unset or auto: the autotuner's choice. Read when the layer attaches; an unknown name fails Client::endpoint.",
    },
    EnvVar {
        name: "GEX_COLL_GATHER_ALL",
        default: "",
        doc: "gex-coll: algorithm of every gather_all (a name from CollExt::algorithms, e.g. binomial, ring); unset or auto: the autotuner's choice. Read when the layer attaches; an unknown name fails Client::endpoint.",
    },
    EnvVar {
        name: "GEX_COLL_EXCHANGE",
        default: "",
        doc: "gex-coll: algorithm of every exchange (a name from CollExt::algorithms, e.g. binomial, ring); unset or auto: the autotuner's choice. Read when the layer attaches; an unknown name fails Client::endpoint.",
    },
    EnvVar {
        name: "GEX_COLL_REDUCE",
        default: "",
        doc: "gex-coll: algorithm of every reduce (a name from CollExt::algorithms, e.g. binomial, ring); unset or auto: the autotuner's choice. Read when the layer attaches; an unknown name fails Client::endpoint.",
    },
    EnvVar {
        name: "GEX_COLL_ALLREDUCE",
        default: "",
        doc: "gex-coll: algorithm of every allreduce (a name from CollExt::algorithms, e.g. binomial, ring); unset or auto: the autotuner's choice. Read when the layer attaches; an unknown name fails Client::endpoint.",
    },
    EnvVar {
        name: "GEX_COLL_REDUCE_SCATTER",
        default: "",
        doc: "gex-coll: algorithm of every reduce_scatter (a name from CollExt::algorithms, e.g. binomial, ring); unset or auto: the autotuner's choice. Read when the layer attaches; an unknown name fails Client::endpoint.",
    },
    EnvVar {
        name: "GEX_COLL_SCAN",
        default: "",
        doc: "gex-coll: algorithm of every scan (a name from CollExt::algorithms, e.g. binomial, ring); unset or auto: the autotuner's choice. Read when the layer attaches; an unknown name fails Client::endpoint.",
    },
    EnvVar {
        name: "GEX_COLL_EXSCAN",
        default: "",
        doc: "gex-coll: algorithm of every exscan (a name from CollExt::algorithms, e.g. binomial, ring); unset or auto: the autotuner's choice. Read when the layer attaches; an unknown name fails Client::endpoint.",
    },
    EnvVar {
        name: "GEX_COLL_LOGGP",
        default: "",
        doc: "gex-coll: LogGP parameters of the autotuner's cost models, L,o,g,G[,copy] in microseconds (G and copy per byte); unset: built-in shared-memory defaults.",
    },
    EnvVar {
        name: "GEX_COLL_PROFILE",
        default: "",
        doc: "gex-coll: path of a tuning profile written by gex-tune; its measured choices win over the cost model and its LogGP parameters replace the defaults (GEX_COLL_LOGGP still wins). A bad file fails Client::endpoint.",
    },
    EnvVar {
        name: "GEX_COLL_TUNE",
        default: "model",
        doc: "gex-coll: model (profile, else cost model) or online (time the surviving candidates on the first use of each cell on a team, collectively, and keep the winner).",
    },
    EnvVar {
        name: "GEX_COLL_SLEEP_YIELDS",
        default: "20000",
        doc: "gex-coll: under spin-then-block, fruitless polls (each hands the core over) after the policy's spins before a member waiting for a flag in shared memory may sleep; read when the layer attaches (a value that is not an unsigned 32-bit integer fails Client::endpoint).",
    },
];

const _: () = assert!(ENV_VARS.len() == OpKind::ALL.len() + 4);

/// Default of `GEX_COLL_SLEEP_YIELDS`: gex-rma's barrier measured 20 000 yields before
/// sleeping as the best trade between wake-up latency and idle CPU when ranks
/// outnumber cores.
pub(crate) const SLEEP_YIELDS: u32 = 20_000;

/// `GEX_COLL_SLEEP_YIELDS` of `cfg`.
///
/// # Errors
/// [`InitError::Layer`] naming the variable if its value is not a `u32`.
pub(crate) fn sleep_yields(cfg: &Config) -> Result<u32, InitError> {
    const VAR: &str = "GEX_COLL_SLEEP_YIELDS";
    cfg.u64(VAR, u64::from(SLEEP_YIELDS))
        .ok()
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| InitError::Layer {
            layer: "coll",
            msg: format!(
                "{VAR}={:?}: not an unsigned 32-bit integer",
                cfg.get(VAR).unwrap_or_default()
            ),
        })
}

/// The tuner of a new layer: the built-in catalogue and cost model, configured by
/// `cfg`'s `GEX_COLL_*` settings, and this host's CPU count.
///
/// # Errors
/// [`InitError::Layer`] naming the variable whose value is wrong.
pub(crate) fn tuner(cfg: &Config) -> Result<Tuner, InitError> {
    let mut t = Tuner::new(crate::catalog::catalog(), LogGP::default());
    // The variable read last is the one that failed.
    let last = Cell::new("");
    let r = t.configure(|k| {
        let v = cfg.get(k).map(str::to_string);
        if v.as_deref().is_some_and(|v| !v.trim().is_empty()) {
            last.set(ENV_VARS.iter().find(|e| e.name == k).map_or("", |e| e.name));
        }
        v
    });
    if let Err(e) = r {
        let var = last.get();
        let value = cfg.get(var).unwrap_or_default();
        return Err(InitError::Layer {
            layer: "coll",
            msg: format!("{var}={value:?}: {e}"),
        });
    }
    t.set_host_cpus(host_cpus());
    Ok(t)
}

/// CPUs of this host: the count in `/sys/devices/system/cpu/online` (the same for
/// every process on the host, whatever its affinity; a pinned rank still sees them
/// all), else `std::thread::available_parallelism`, else 0 (unknown). Read once per
/// layer ([`Tuner::set_host_cpus`]).
fn host_cpus() -> u32 {
    let listed = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| count_cpu_list(s.trim()));
    listed
        .or_else(|| {
            std::thread::available_parallelism()
                .ok()
                .map(|n| n.get() as u32)
        })
        .unwrap_or(0)
}

/// Counts a kernel CPU list such as `0-3,8-11` or `0` (`None` if malformed).
fn count_cpu_list(s: &str) -> Option<u32> {
    let mut n = 0u32;
    for part in s.split(',') {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?),
            None => {
                let a = part.parse::<u32>().ok()?;
                (a, a)
            }
        };
        n += b.checked_sub(a)? + 1;
    }
    (n > 0).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(count_cpu_list("0"), Some(1));
        assert_eq!(count_cpu_list("0-1"), Some(2));
        assert_eq!(count_cpu_list("0-3,8-11"), Some(8));
        assert_eq!(count_cpu_list("0,2,4-5"), Some(4));
        assert_eq!(count_cpu_list(""), None);
        assert_eq!(count_cpu_list("3-1"), None);
        assert_eq!(count_cpu_list("x"), None);
    }

    #[test]
    fn bad_settings_name_their_variable() {
        let bad = |k: &str, v: &str| {
            let e = tuner(&Config::from_pairs([(k, v)]))
                .unwrap_err()
                .to_string();
            assert!(e.contains(k), "{e}");
        };
        bad("GEX_COLL_TUNE", "sometimes");
        for v in ["-1", "many", "4294967296"] {
            let e = sleep_yields(&Config::from_pairs([("GEX_COLL_SLEEP_YIELDS", v)]))
                .unwrap_err()
                .to_string();
            assert!(e.contains("GEX_COLL_SLEEP_YIELDS"), "{e}");
        }
        assert_eq!(
            sleep_yields(&Config::from_pairs([("GEX_COLL_SLEEP_YIELDS", "7")])).unwrap(),
            7
        );
        assert_eq!(
            sleep_yields(&Config::from_pairs::<[(&str, &str); 0], _, _>([])).unwrap(),
            SLEEP_YIELDS
        );
        bad("GEX_COLL_BROADCAST", "no-such-algorithm");
        bad("GEX_COLL_LOGGP", "1,2");
        bad("GEX_COLL_PROFILE", "/nonexistent/profile");
        assert!(tuner(&Config::from_pairs([("GEX_COLL_BROADCAST", "binomial")])).is_ok());
        assert!(tuner(&Config::default()).is_ok());
    }
}
