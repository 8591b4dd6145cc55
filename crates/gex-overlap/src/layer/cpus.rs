//! Where the mover thread runs (`GEX_OVERLAP_MOVER_CPUS`).
//!
//! A thread inherits the CPU affinity of the thread that spawns it. The mover is
//! spawned at an endpoint's first demand-driven transfer by the rank's own thread,
//! which a runtime (or `gex-perf`) has often pinned to one core by then, so by default
//! (`inherit`) the mover shares that core with the rank. A woken mover then preempts
//! its rank and copies before the rank runs again: nothing overlaps, but nothing
//! crosses cores either. `beside` gives the mover the CPUs the attaching thread could
//! use when the layer attached (the launcher's placement of the process, unless the
//! program pinned the thread before it made the endpoint), less those the spawning
//! thread is pinned to if any remain; a CPU list places it explicitly. On the 2-vCPU
//! development VM `beside` cut the issue of a 4 MiB get from about 400 to 120 µs but
//! made the overlapped kernel slower overall (cross-vCPU wake-ups and TLB shootdowns
//! cost tens of microseconds there): docs/overlap.md, "Where the mover runs". The
//! affinity calls are rustix's (`sched_getaffinity`, `sched_setaffinity`).

use gex_core::InitError;
use rustix::thread::{CpuSet, sched_getaffinity, sched_setaffinity};

/// The mover's placement, decided when the layer attaches.
#[derive(Clone, Copy, Debug)]
pub(crate) enum MoverCpus {
    /// Keep the spawning thread's affinity.
    Inherit,
    /// Run on these CPUs.
    Set(CpuSet),
    /// `beside`: these CPUs (the attaching thread's), less the spawning thread's if
    /// that leaves any.
    Beside(CpuSet),
}

impl MoverCpus {
    /// Reads `GEX_OVERLAP_MOVER_CPUS` (`value`): unset, empty or `inherit`;
    /// `beside`: the calling thread's affinity now (`Inherit` if it cannot be read);
    /// or a list of CPUs (`0-3,6`), each of which the calling thread may run on now.
    pub(crate) fn from_config(value: Option<&str>) -> Result<MoverCpus, InitError> {
        let now = sched_getaffinity(None).ok();
        let v = value.map(str::trim).unwrap_or("");
        match v {
            "" | "inherit" => Ok(MoverCpus::Inherit),
            "beside" => Ok(now.map_or(MoverCpus::Inherit, MoverCpus::Beside)),
            list => {
                let bad = |why: String| {
                    InitError::Config(format!("GEX_OVERLAP_MOVER_CPUS={list}: {why}"))
                };
                let cpus = parse_list(list).map_err(bad)?;
                let mut set = CpuSet::new();
                for c in cpus {
                    if now.is_some_and(|n| !n.is_set(c)) {
                        return Err(bad(format!(
                            "CPU {c} is not one this process may run on (allowed: {})",
                            now.map_or_else(String::new, |n| format_set(&n))
                        )));
                    }
                    set.set(c);
                }
                Ok(MoverCpus::Set(set))
            }
        }
    }

    /// The placement of a mover the calling thread is about to spawn: `Beside`
    /// resolved against the calling thread's affinity.
    pub(crate) fn for_spawn(&self) -> MoverCpus {
        let MoverCpus::Beside(set) = *self else {
            return *self;
        };
        let Ok(mine) = sched_getaffinity(None) else {
            return MoverCpus::Set(set);
        };
        let mut rest = set;
        for c in 0..CpuSet::MAX_CPU {
            if mine.is_set(c) {
                rest.unset(c);
            }
        }
        MoverCpus::Set(if rest.count() > 0 { rest } else { set })
    }

    /// Applies the placement (resolved by [`for_spawn`](Self::for_spawn)) to the
    /// calling thread (the mover, as it starts). A failure leaves the inherited
    /// affinity (the CPUs may have been taken from the process since the layer
    /// attached); the mover still runs.
    pub(crate) fn apply(&self) {
        if let MoverCpus::Set(set) = self {
            let _ = sched_setaffinity(None, set);
        }
    }
}

/// Parses a CPU list (`0-3,6`): comma-separated numbers and inclusive ranges, each
/// CPU below [`CpuSet::MAX_CPU`]; at least one.
pub(crate) fn parse_list(list: &str) -> Result<Vec<usize>, String> {
    let num = |s: &str| -> Result<usize, String> {
        let c: usize = s
            .trim()
            .parse()
            .map_err(|_| format!("`{}` is not a CPU number", s.trim()))?;
        if c >= CpuSet::MAX_CPU {
            return Err(format!(
                "CPU {c} is beyond the largest, {}",
                CpuSet::MAX_CPU - 1
            ));
        }
        Ok(c)
    };
    let mut out = Vec::new();
    for part in list.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(format!("the range {a}-{b} is empty"));
                }
                out.extend(a..=b);
            }
            None => out.push(num(part)?),
        }
    }
    Ok(out)
}

/// `set` as a CPU list (`0-1,4`).
pub(crate) fn format_set(set: &CpuSet) -> String {
    let mut parts = Vec::new();
    let mut c = 0;
    while c < CpuSet::MAX_CPU {
        if !set.is_set(c) {
            c += 1;
            continue;
        }
        let start = c;
        while c + 1 < CpuSet::MAX_CPU && set.is_set(c + 1) {
            c += 1;
        }
        parts.push(if start == c {
            format!("{c}")
        } else {
            format!("{start}-{c}")
        });
        c += 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_and_print_back() {
        assert_eq!(parse_list("0-3,6").unwrap(), vec![0, 1, 2, 3, 6]);
        assert_eq!(parse_list(" 2 ").unwrap(), vec![2]);
        let mut s = CpuSet::new();
        for c in [0, 1, 2, 3, 6, 8, 9] {
            s.set(c);
        }
        assert_eq!(format_set(&s), "0-3,6,8-9");
    }

    #[test]
    fn bad_lists_are_refused_with_the_reason() {
        assert!(parse_list("").unwrap_err().contains("not a CPU number"));
        assert!(parse_list("1,x").unwrap_err().contains("`x`"));
        assert!(parse_list("3-1").unwrap_err().contains("empty"));
        let far = format!("{}", CpuSet::MAX_CPU);
        assert!(parse_list(&far).unwrap_err().contains("beyond"));
    }

    #[test]
    fn beside_takes_this_threads_affinity_and_a_foreign_cpu_is_refused() {
        let now = sched_getaffinity(None).unwrap();
        match MoverCpus::from_config(Some("beside")).unwrap() {
            MoverCpus::Beside(s) => assert_eq!(format_set(&s), format_set(&now)),
            m => panic!("beside must read the affinity: {m:?}"),
        }
        for v in [None, Some(""), Some("inherit")] {
            assert!(matches!(
                MoverCpus::from_config(v).unwrap(),
                MoverCpus::Inherit
            ));
        }
        // A CPU this thread may not run on: the highest one not in its mask.
        let outside = (0..CpuSet::MAX_CPU)
            .rev()
            .find(|&c| !now.is_set(c))
            .unwrap();
        let e = MoverCpus::from_config(Some(&outside.to_string())).unwrap_err();
        assert!(
            e.to_string().contains("not one this process may run on"),
            "{e}"
        );
    }
}
