//! Configuration: every `GEX_*` environment variable gex reads, in one place.
//!
//! Every crate declares the `GEX_*` variables it reads in its own `ENV_VARS` registry
//! (this module's [`ENV_VARS`] holds the core's); conduits and layers expose theirs as
//! [`Conduit::ENV_VARS`](crate::spi::Conduit::ENV_VARS) and
//! [`Layer::ENV_VARS`](crate::layer::Layer::ENV_VARS), and the facade collects all of
//! them (`gex::env_vars()`, printed by `gex-info env`). `docs/env.md` mirrors the
//! registries, and `ci/check-env-docs` keeps the two in step (and finds `GEX_*` names
//! used anywhere in the sources but declared nowhere). Set `GEX_VERBOSEENV=1` to have
//! rank 0 print every variable of its client (core, conduit, layers) with its
//! effective value at start-up.
//!
//! Values are read once, when a [`Config`] is built; nothing re-reads the environment
//! on a data path.

use crate::error::InitError;
use gex_sync::wait::WaitPolicy;
use std::collections::BTreeMap;
use std::time::Duration;

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

/// The `GEX_*` variables gex-core reads.
pub const ENV_VARS: &[EnvVar] = &[
    EnvVar {
        name: "GEX_ENDPOINTS",
        default: "1",
        doc: "Endpoints provisioned per rank at initialisation (EP 0 plus extra communication domains); overrides ClientBuilder::endpoints.",
    },
    EnvVar {
        name: "GEX_MAX_ENDPOINTS",
        default: "16",
        doc: "Endpoint capacity per rank: the endpoints made at initialisation plus those Client::create_endpoint may make over the client's life (indices are never reused); at least GEX_ENDPOINTS. A conduit that offers endpoints at run time may reserve room (address space) for this many.",
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
        name: "GEX_SHARE_INTERVAL",
        default: "20us",
        doc: "Under spin-then-block (ranks outnumber cores): a rank that injects active messages without waiting yields its core at most this often (checked every 32 injections; any wait starts the interval again), so the peers sharing its core get to drain their rings instead of waiting a whole time slice; 0 never yields while injecting.",
    },
    EnvVar {
        name: "GEX_VERBOSEENV",
        default: "0",
        doc: "1: rank 0 prints every GEX_* variable and its effective value at initialisation.",
    },
    EnvVar {
        name: "GEX_STALL_REPORT",
        default: "60",
        doc: "Seconds a wait may go without any progress (no message handled, no event completed) before the endpoint prints its state report (per-peer counters, what each layer and the conduit have in flight); repeated at that interval; 0: never.",
    },
    EnvVar {
        name: "GEX_REPORT_SIGNAL",
        default: "1",
        doc: "1: SIGUSR1 makes every waiting endpoint print its state report (installed only where SIGUSR1 has its default disposition); 0: leave SIGUSR1 alone.",
    },
    EnvVar {
        name: "GEX_PROGRESS_THREAD",
        default: "0",
        doc: "1: every endpoint gets a progress thread that polls it while the rank computes outside gex (serves peers' AM-path gets, atomics and collectives); overrides ClientBuilder::progress_thread.",
    },
    EnvVar {
        name: "GEX_PROGRESS_INTERVAL",
        default: "20us",
        doc: "Longest nap of an idle progress thread between polls on conduits without a doorbell (ConduitEp::sleeper; on a conduit with one, such as the shared-memory conduit, the thread sleeps until a sender rings instead), and while the rank itself is inside gex (a duration: 20us, 1ms); a peer's AM-path request waits about this long at most.",
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

    /// `name` parsed as a duration: a number with a unit `ns`, `us`, `ms` or `s`
    /// (`20us`, `1ms`); a bare number is microseconds.
    ///
    /// # Errors
    /// [`InitError::Config`] naming the variable if the value does not parse.
    pub fn duration(&self, name: &str, default: Duration) -> Result<Duration, InitError> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => parse_duration(v).ok_or_else(|| {
                InitError::Config(format!("{name}={v:?} is not a duration (e.g. 20us, 1ms)"))
            }),
        }
    }

    /// Text listing every variable of `registries` with its effective value, and the
    /// `GEX_*` variables set that none of them declares.
    pub fn describe(&self, registries: &[&[EnvVar]]) -> String {
        let mut s = String::new();
        let all = || registries.iter().flat_map(|r| r.iter());
        for v in all() {
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
            if !all().any(|v| v.name == k) {
                s.push_str(&format!(
                    "{k:<20} : not read by this client's crates (ignored)\n"
                ));
            }
        }
        s
    }
}

/// Parses `20us`, `1ms`, `3s`, `500ns` (a bare number is microseconds).
pub fn parse_duration(v: &str) -> Option<Duration> {
    let v = v.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let n: u64 = v[..split].parse().ok()?;
    match v[split..].trim() {
        "ns" => Some(Duration::from_nanos(n)),
        "" | "us" | "µs" => Some(Duration::from_micros(n)),
        "ms" => Some(Duration::from_millis(n)),
        "s" => Some(Duration::from_secs(n)),
        _ => None,
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
    fn durations_parse() {
        assert_eq!(parse_duration("20us"), Some(Duration::from_micros(20)));
        assert_eq!(parse_duration("20"), Some(Duration::from_micros(20)));
        assert_eq!(parse_duration(" 1ms"), Some(Duration::from_millis(1)));
        assert_eq!(parse_duration("2s"), Some(Duration::from_secs(2)));
        assert_eq!(parse_duration("7ns"), Some(Duration::from_nanos(7)));
        assert_eq!(parse_duration("7 fortnights"), None);
        assert_eq!(parse_duration("ms"), None);
    }

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
