//! Configuration: every `GEX_*` environment variable gex reads, in one place.
//!
//! [`ENV_VARS`] is the single registry: name, default and meaning of every variable read
//! by any gex crate (conduits and launchers included). `docs/env.md` mirrors it, and
//! `ci/check-env-docs` keeps the two in step (and finds `GEX_*` names used anywhere
//! in the sources but missing here). Set `GEX_VERBOSEENV=1` to have rank 0 print every
//! variable with its effective value at start-up.
//!
//! Values are read once, when a [`Config`] is built; nothing re-reads the environment
//! on a data path.

use crate::error::InitError;
use gex_sync::wait::WaitPolicy;
use std::collections::BTreeMap;

/// One documented environment variable.
#[derive(Clone, Copy, Debug)]
pub struct EnvVar {
    /// Variable name.
    pub name: &'static str,
    /// Default value, as text ("" if unset by default).
    pub default: &'static str,
    /// Who reads it and what it means.
    pub doc: &'static str,
}

/// Every `GEX_*` variable gex reads or sets.
pub const ENV_VARS: &[EnvVar] = &[
    EnvVar {
        name: "GEX_CONDUIT",
        default: "smp",
        doc: "Conduit to use, among those compiled in (facade, gex-perf, gex-run --conduit).",
    },
    EnvVar {
        name: "GEX_ENDPOINTS",
        default: "1",
        doc: "Endpoints provisioned per rank at initialisation (EP 0 plus extra communication domains); overrides ClientBuilder::endpoints.",
    },
    EnvVar {
        name: "GEX_SEGMENT_SIZE",
        default: "67108864",
        doc: "Bytes of segment per endpoint (suffixes K, M, G accepted); overrides ClientBuilder::segment_size.",
    },
    EnvVar {
        name: "GEX_WAIT",
        default: "auto",
        doc: "Wait policy: spin, block, spin-then-block, or auto (spin when ranks on the host <= cores, else spin-then-block).",
    },
    EnvVar {
        name: "GEX_SPIN",
        default: "1000",
        doc: "Spin iterations before blocking under spin-then-block (also when auto picks it).",
    },
    EnvVar {
        name: "GEX_YIELDS",
        default: "64",
        doc: "Under spin-then-block: sched_yield calls between the spin phase and the sleep, so an oversubscribed rank hands its core to the peer it waits for before paying for a sleep and a wake-up.",
    },
    EnvVar {
        name: "GEX_VERBOSEENV",
        default: "0",
        doc: "1: rank 0 prints every GEX_* variable and its effective value at initialisation.",
    },
    EnvVar {
        name: "GEX_SMP_RING_SIZE",
        default: "262144",
        doc: "smp conduit: bytes per AM ring (one request and one reply ring per ordered endpoint pair); power of two.",
    },
    EnvVar {
        name: "GEX_SMP_MAX_MEDIUM",
        default: "65536",
        doc: "smp conduit: largest Medium payload; must fit a ring record.",
    },
    EnvVar {
        name: "GEX_OFI_PROVIDER",
        default: "tcp",
        doc: "ofi conduit: libfabric provider for RDM endpoints (tcp = tcp;ofi_rxm, shm, verbs, ...); auto lets libfabric choose (its FI_PROVIDER applies, and is used when this is unset).",
    },
    EnvVar {
        name: "GEX_OFI_DOMAIN",
        default: "",
        doc: "ofi conduit: libfabric domain or fabric name (lo, eth0, shm, ...); unset: lo when all ranks share a host, else the provider's first offer.",
    },
    EnvVar {
        name: "GEX_OFI_MAX_MEDIUM",
        default: "8192",
        doc: "ofi conduit: largest Medium (and, until native RMA, Long) payload, 512..=1048576; the job uses the smallest value of all ranks.",
    },
    EnvVar {
        name: "GEX_OFI_CREDITS",
        default: "64",
        doc: "ofi conduit: request credits per ordered endpoint pair (2..=4096); bounds unprocessed requests at a receiver and queued replies at a sender.",
    },
    EnvVar {
        name: "GEX_OFI_MULTI_RECV",
        default: "1",
        doc: "ofi conduit: 0 posts single receive buffers even when the provider offers FI_MULTI_RECV.",
    },
    EnvVar {
        name: "GEX_COLL_BARRIER",
        default: "",
        doc: "gex-coll: algorithm of every barrier (a name from CollEp::algorithms, e.g. binomial, ring); unset or auto: the autotuner's choice.",
    },
    EnvVar {
        name: "GEX_COLL_BROADCAST",
        default: "",
        doc: "gex-coll: algorithm of every broadcast (a name from CollEp::algorithms, e.g. binomial, ring); unset or auto: the autotuner's choice.",
    },
    EnvVar {
        name: "GEX_COLL_SCATTER",
        default: "",
        doc: "gex-coll: algorithm of every scatter (a name from CollEp::algorithms, e.g. binomial, ring); unset or auto: the autotuner's choice.",
    },
    EnvVar {
        name: "GEX_COLL_GATHER",
        default: "",
        doc: "gex-coll: algorithm of every gather (a name from CollEp::algorithms, e.g. binomial, ring); unset or auto: the autotuner's choice.",
    },
    EnvVar {
        name: "GEX_COLL_GATHER_ALL",
        default: "",
        doc: "gex-coll: algorithm of every gather_all (a name from CollEp::algorithms, e.g. binomial, ring); unset or auto: the autotuner's choice.",
    },
    EnvVar {
        name: "GEX_COLL_EXCHANGE",
        default: "",
        doc: "gex-coll: algorithm of every exchange (a name from CollEp::algorithms, e.g. binomial, ring); unset or auto: the autotuner's choice.",
    },
    EnvVar {
        name: "GEX_COLL_REDUCE",
        default: "",
        doc: "gex-coll: algorithm of every reduce (a name from CollEp::algorithms, e.g. binomial, ring); unset or auto: the autotuner's choice.",
    },
    EnvVar {
        name: "GEX_COLL_ALLREDUCE",
        default: "",
        doc: "gex-coll: algorithm of every allreduce (a name from CollEp::algorithms, e.g. binomial, ring); unset or auto: the autotuner's choice.",
    },
    EnvVar {
        name: "GEX_COLL_REDUCE_SCATTER",
        default: "",
        doc: "gex-coll: algorithm of every reduce_scatter (a name from CollEp::algorithms, e.g. binomial, ring); unset or auto: the autotuner's choice.",
    },
    EnvVar {
        name: "GEX_COLL_SCAN",
        default: "",
        doc: "gex-coll: algorithm of every scan (a name from CollEp::algorithms, e.g. binomial, ring); unset or auto: the autotuner's choice.",
    },
    EnvVar {
        name: "GEX_COLL_EXSCAN",
        default: "",
        doc: "gex-coll: algorithm of every exscan (a name from CollEp::algorithms, e.g. binomial, ring); unset or auto: the autotuner's choice.",
    },
    EnvVar {
        name: "GEX_COLL_LOGGP",
        default: "",
        doc: "gex-coll: LogGP parameters of the autotuner's cost models, L,o,g,G[,copy] in microseconds (G and copy per byte); unset: built-in shared-memory defaults.",
    },
    EnvVar {
        name: "GEX_COLL_PROFILE",
        default: "",
        doc: "gex-coll: path of a tuning profile written by gex-tune; its measured choices win over the cost model and its LogGP parameters replace the defaults (GEX_COLL_LOGGP still wins). A bad file is an error when the CollEp is built.",
    },
    EnvVar {
        name: "GEX_COLL_TUNE",
        default: "model",
        doc: "gex-coll: model (profile, else cost model) or online (time the surviving candidates on the first use of each cell on a team, collectively, and keep the winner).",
    },
    EnvVar {
        name: "GEX_OFI_RMA",
        default: "1",
        doc: "ofi conduit: 0 leaves native RMA (fi_writemsg/fi_read) and atomics (fi_atomic) off, so gex-rma uses its AM reference path even when the provider offers FI_RMA/FI_ATOMIC.",
    },
    EnvVar {
        name: "GEX_OFI_ATOMICS",
        default: "1",
        doc: "ofi conduit: 0 leaves native atomics (fi_atomic) off while native RMA stays on, so gex-rma's atomic domains use AMs.",
    },
    EnvVar {
        name: "GEX_HYBRID",
        default: "auto",
        doc: "hybrid conduit (GEX_CONDUIT=ofi runs one): shared memory between ranks of one host, the network between hosts. auto: when the job spans several hosts and a host has several ranks; 1: whenever a host has several ranks; 0: never (network only). Must agree on every rank.",
    },
    EnvVar {
        name: "GEX_OFI_HYBRID",
        default: "",
        doc: "Old name of GEX_HYBRID (from when hybrid jobs were the ofi conduit's), read when GEX_HYBRID is unset.",
    },
    EnvVar {
        name: "GEX_OFI_RELAXED_PUTS",
        default: "1",
        doc: "ofi conduit: 0 makes implicit-event puts ask for FI_DELIVERY_COMPLETE one by one, instead of transmit-complete writes flushed by one ordered read per destination at the sync (used only where the provider orders reads after writes).",
    },
    EnvVar {
        name: "GEX_OFI_MR_LOCAL",
        default: "0",
        doc: "ofi conduit, testing aid: 1 acts as if the provider required FI_MR_LOCAL (descriptors passed, local RMA buffers outside the segments registered on demand and cached) although it does not, so tcp and shm exercise that path.",
    },
    EnvVar {
        name: "GEX_OFI_MR_CACHE_ENTRIES",
        default: "256",
        doc: "ofi conduit, under FI_MR_LOCAL: registrations of local RMA buffers an endpoint keeps (0 to 65536); beyond it the least recently used idle client-region registrations are closed. 0 keeps none once idle.",
    },
    EnvVar {
        name: "GEX_OFI_MR_CACHE_BYTES",
        default: "1G",
        doc: "ofi conduit, under FI_MR_LOCAL: bytes of local RMA buffers an endpoint keeps registered (LRU eviction beyond it); a client region larger than this is not cached.",
    },
    EnvVar {
        name: "GEX_SIM_SEED",
        default: "0",
        doc: "sim conduit: seed of the deterministic delivery schedule.",
    },
    EnvVar {
        name: "GEX_SIM_LATENCY_NS",
        default: "0",
        doc: "sim conduit: modelled one-way latency in nanoseconds.",
    },
    EnvVar {
        name: "GEX_SIM_REORDER",
        default: "0",
        doc: "sim conduit: 1 to let messages from different senders overtake each other.",
    },
    EnvVar {
        name: "GEX_SKIP_NETNS",
        default: "0",
        doc: "Tests: 1 lets the network-namespace tests pass without running (printing why) when namespaces cannot be made here.",
    },
    EnvVar {
        name: "GEX_BOOT",
        default: "",
        doc: "Bootstrap backend: fork (set by the gex fork launcher) or pmi (force the PMI-1 client). Unset: PMI-1 if PMI_FD or PMI_PORT is set (mpiexec, srun), else a singleton job.",
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

/// How blocking waits behave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitMode {
    /// Pick from the number of ranks on the host and the cores available; `spins` is
    /// the budget used if that choice is spin-then-block.
    Auto {
        /// Spin iterations before blocking.
        spins: u32,
    },
    /// Always this policy.
    Fixed(WaitPolicy),
}

/// A snapshot of gex's configuration (from the environment or given explicitly).
#[derive(Clone, Debug, Default)]
pub struct Config {
    vars: BTreeMap<String, String>,
}

impl Config {
    /// Reads every `GEX_*` variable from the process environment.
    pub fn from_env() -> Self {
        let vars = std::env::vars()
            .filter(|(k, _)| k.starts_with("GEX_"))
            .collect();
        Config { vars }
    }

    /// A configuration from explicit pairs (for tests and embedding).
    pub fn from_pairs<I, K, V>(pairs: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        Config {
            vars: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }

    /// Sets one variable (overriding the environment).
    pub fn set(&mut self, name: &str, value: impl Into<String>) {
        self.vars.insert(name.to_string(), value.into());
    }

    /// The raw value of `name`, if set.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }

    /// `name` parsed as a size in bytes (decimal, optional K/M/G suffix, powers of 1024).
    ///
    /// # Errors
    /// [`InitError::Config`] naming the variable if the value does not parse.
    pub fn size(&self, name: &str, default: usize) -> Result<usize, InitError> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => parse_size(v).ok_or_else(|| {
                InitError::Config(format!("{name}={v:?} is not a size (e.g. 65536, 64K, 16M)"))
            }),
        }
    }

    /// `name` parsed as an unsigned integer.
    ///
    /// # Errors
    /// [`InitError::Config`] naming the variable if the value does not parse.
    pub fn u64(&self, name: &str, default: u64) -> Result<u64, InitError> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => v
                .trim()
                .parse()
                .map_err(|_| InitError::Config(format!("{name}={v:?} is not an unsigned integer"))),
        }
    }

    /// `name` as a boolean (`1`, `true`, `yes`, `on` / `0`, `false`, `no`, `off`).
    ///
    /// # Errors
    /// [`InitError::Config`] naming the variable if the value is not a boolean.
    pub fn bool(&self, name: &str, default: bool) -> Result<bool, InitError> {
        match self.get(name).map(|v| v.trim().to_ascii_lowercase()) {
            None => Ok(default),
            Some(v) => match v.as_str() {
                "1" | "true" | "yes" | "on" => Ok(true),
                "0" | "false" | "no" | "off" | "" => Ok(false),
                _ => Err(InitError::Config(format!(
                    "{name}={v:?} is not a boolean (1/0)"
                ))),
            },
        }
    }

    /// The wait mode from `GEX_WAIT` and `GEX_SPIN`.
    ///
    /// # Errors
    /// [`InitError::Config`] if either is malformed.
    pub fn wait_mode(&self) -> Result<WaitMode, InitError> {
        let spins = self.u64("GEX_SPIN", gex_sync::wait::default_spins() as u64)?;
        let spins =
            u32::try_from(spins).map_err(|_| InitError::Config("GEX_SPIN is too large".into()))?;
        match self
            .get("GEX_WAIT")
            .map(|v| v.trim().to_ascii_lowercase())
            .as_deref()
        {
            None | Some("auto") | Some("") => Ok(WaitMode::Auto { spins }),
            Some("spin") => Ok(WaitMode::Fixed(WaitPolicy::Spin)),
            Some("block") => Ok(WaitMode::Fixed(WaitPolicy::Block)),
            Some("spin-then-block") | Some("spinblock") => {
                Ok(WaitMode::Fixed(WaitPolicy::SpinThenBlock { spins }))
            }
            Some(other) => Err(InitError::Config(format!(
                "GEX_WAIT={other:?}: expected spin, block, spin-then-block or auto"
            ))),
        }
    }

    /// Text listing every registered variable with its effective value.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        for v in ENV_VARS {
            let (val, src) = match self.get(v.name) {
                Some(x) => (x.to_string(), "set"),
                None => (v.default.to_string(), "default"),
            };
            s.push_str(&format!(
                "{:<20} = {:<12} ({src})  {}\n",
                v.name, val, v.doc
            ));
        }
        for k in self.vars.keys() {
            if !ENV_VARS.iter().any(|v| v.name == k) {
                s.push_str(&format!("{k:<20} : unknown GEX_ variable (ignored)\n"));
            }
        }
        s
    }
}

/// Parses `123`, `64K`, `16M`, `1G` (powers of 1024). Returns `None` on overflow or junk.
pub fn parse_size(v: &str) -> Option<usize> {
    let v = v.trim();
    let (num, mult) = match v.char_indices().last()? {
        (i, 'k' | 'K') => (&v[..i], 1usize << 10),
        (i, 'm' | 'M') => (&v[..i], 1 << 20),
        (i, 'g' | 'G') => (&v[..i], 1 << 30),
        _ => (v, 1),
    };
    num.trim().parse::<usize>().ok()?.checked_mul(mult)
}

/// Resolves a wait mode for a rank given the host's rank count and the cores available.
pub fn resolve_wait(mode: WaitMode, ranks_on_host: usize) -> WaitPolicy {
    match mode {
        WaitMode::Fixed(p) => p,
        WaitMode::Auto { spins } => {
            let cores = std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1);
            match gex_sync::wait::auto_policy(ranks_on_host, cores) {
                WaitPolicy::SpinThenBlock { .. } => WaitPolicy::SpinThenBlock { spins },
                p => p,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("65536"), Some(65536));
        assert_eq!(parse_size("64K"), Some(65536));
        assert_eq!(parse_size(" 16m "), Some(16 << 20));
        assert_eq!(parse_size("1G"), Some(1 << 30));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("99999999999999999999G"), None);
    }

    #[test]
    fn bad_values_name_the_variable() {
        let c = Config::from_pairs([("GEX_SEGMENT_SIZE", "lots"), ("GEX_WAIT", "nap")]);
        let e = c.size("GEX_SEGMENT_SIZE", 1).unwrap_err().to_string();
        assert!(e.contains("GEX_SEGMENT_SIZE"), "{e}");
        let e = c.wait_mode().unwrap_err().to_string();
        assert!(e.contains("GEX_WAIT"), "{e}");
    }

    #[test]
    fn wait_modes() {
        let c = Config::from_pairs([("GEX_WAIT", "block")]);
        assert_eq!(c.wait_mode().unwrap(), WaitMode::Fixed(WaitPolicy::Block));
        let c = Config::from_pairs([("GEX_WAIT", "spin-then-block"), ("GEX_SPIN", "7")]);
        assert_eq!(
            c.wait_mode().unwrap(),
            WaitMode::Fixed(WaitPolicy::SpinThenBlock { spins: 7 })
        );
        assert_eq!(
            Config::default().wait_mode().unwrap(),
            WaitMode::Auto {
                spins: gex_sync::wait::default_spins()
            }
        );
        let c = Config::from_pairs([("GEX_SPIN", "42")]);
        assert_eq!(c.wait_mode().unwrap(), WaitMode::Auto { spins: 42 });
        // More ranks than any machine has cores: auto must pick spin-then-block and keep
        // the configured budget; one rank always spins.
        assert_eq!(
            resolve_wait(WaitMode::Auto { spins: 42 }, 1 << 20),
            WaitPolicy::SpinThenBlock { spins: 42 }
        );
        assert_eq!(
            resolve_wait(WaitMode::Auto { spins: 42 }, 1),
            WaitPolicy::Spin
        );
    }

    #[test]
    fn yields_default_matches_the_registry() {
        let v = ENV_VARS.iter().find(|v| v.name == "GEX_YIELDS").unwrap();
        assert_eq!(v.default, crate::DEFAULT_YIELDS.to_string());
    }

    #[test]
    fn spin_default_matches_the_registry() {
        let v = ENV_VARS.iter().find(|v| v.name == "GEX_SPIN").unwrap();
        assert_eq!(v.default, gex_sync::wait::default_spins().to_string());
    }

    #[test]
    fn registry_names_are_unique_and_prefixed() {
        let mut names: Vec<_> = ENV_VARS.iter().map(|v| v.name).collect();
        assert!(names.iter().all(|n| n.starts_with("GEX_")));
        names.sort();
        names.dedup();
        assert_eq!(names.len(), ENV_VARS.len());
    }
}
