//! The autotuner core: LogGP parameters, candidate filtering by capability, choice by
//! cost model or by a measured profile, a per-key cache and per-operation overrides.
//!
//! Adding an algorithm needs nothing here: the tuner considers every registered
//! [`Algorithm`] (its `supports` and `cost`), and a profile or an online trial names
//! algorithms by [`Algorithm::name`].

use crate::algo::{Algorithm, Query};
use crate::error::CollError;
use crate::loggp::LogGP;
use crate::op::{AddrMode, OpKind, SyncMode};
use crate::profile::Profile;
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

/// Size class of a block: `ceil(log2(bytes + 1))`, so 0 B is class 0, 1 B class 1,
/// 2–3 B class 2, ... The cost of a class is evaluated at its largest size.
pub fn size_class(bytes: usize) -> u32 {
    usize::BITS - bytes.leading_zeros()
}

fn class_bytes(class: u32) -> usize {
    if class == 0 {
        0
    } else {
        ((1u128 << class) - 1).min(usize::MAX as u128) as usize
    }
}

/// A compact selection key: operation, team size, size class, address mode, sync
/// modes, commutativity, scratch, shared memory and hierarchy (host count capped at
/// 2047), packed into 64 bits.
fn key(q: &Query) -> u64 {
    let sm = |m: SyncMode| match m {
        SyncMode::No => 0u64,
        SyncMode::My => 1,
        SyncMode::All => 2,
    };
    (q.op as u64)
        | (u64::from(q.commutative) << 4)
        | (u64::from(q.addr == AddrMode::Single) << 5)
        | (sm(q.sync.input) << 6)
        | (sm(q.sync.output) << 8)
        | (u64::from(q.scratch) << 17)
        | (u64::from(q.shm) << 18)
        | (u64::from(q.hier) << 19)
        | (u64::from(size_class(q.bytes)) << 10)
        | (u64::from(q.size) << 20)
        | (u64::from(q.host_ranges) << 52)
        | (u64::from(q.hosts.min(0x7ff)) << 53)
}

/// A multiply-shift hasher for the 64-bit keys (no SipHash on the selection path).
#[derive(Default, Clone, Copy, Debug)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = (x ^ (x >> 29)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// Why an algorithm was chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// `GEX_COLL_<OP>` names it.
    Override,
    /// A measured cell of the loaded profile (`GEX_COLL_PROFILE`).
    Profile,
    /// Timed on first use (`GEX_COLL_TUNE=online`).
    Online,
    /// The cheapest supporting candidate under the LogGP cost model.
    Model,
}

impl Reason {
    /// `override`, `profile`, `online` or `model`.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Override => "override",
            Reason::Profile => "profile",
            Reason::Online => "online",
            Reason::Model => "model",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an algorithm was chosen (what `gex-info coll` prints).
#[derive(Clone, Debug, PartialEq)]
pub struct Choice {
    /// The chosen algorithm.
    pub algorithm: String,
    /// Where the choice comes from.
    pub reason: Reason,
    /// (name, predicted µs) of every candidate that supports the query, cheapest
    /// first.
    pub candidates: Vec<(String, f64)>,
    /// (name, measured µs) of the profile cell used (empty unless the reason is
    /// [`Reason::Profile`]), fastest first.
    pub measured: Vec<(String, f64)>,
    /// One line: the evidence (the variable, the measured or predicted time against
    /// the runner-up).
    pub detail: String,
}

/// How the tuner fills a cache miss.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TuneMode {
    /// Profile cell if one applies, else the cost model (`GEX_COLL_TUNE=model`, the
    /// default).
    #[default]
    Model,
    /// As `Model` for the first guess, but the collectives layer times the
    /// surviving candidates on the first use of a cell on a team and keeps the winner
    /// (`GEX_COLL_TUNE=online`).
    Online,
}

/// Where a team's members are, as the layer sees it when it asks the tuner
/// ([`Tuner::table_on`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// The members map each other's memory (one host, a conduit with shared memory):
    /// the team has a shared-memory channel and `shm` can run.
    pub shm: bool,
    /// Hosts the team spans (0 or 1: one). Over more than one, `hier` can run; the
    /// members are taken to be placed in blocks of consecutive ranks per host.
    pub hosts: u32,
}

impl Placement {
    /// The query the layer builds for a call of `op` with `bytes` per block on a team
    /// of `size` members placed so (default sync modes, a commutative operator, no
    /// scratch space).
    pub fn query(&self, op: OpKind, size: u32, bytes: usize, addr: AddrMode) -> Query {
        let hier = self.hosts > 1 && size > 1;
        Query {
            op,
            size,
            bytes: if op == OpKind::Barrier { 0 } else { bytes },
            addr,
            sync: crate::op::SyncModes::default(),
            commutative: true,
            scratch: false,
            shm: self.shm && !hier,
            hier,
            hosts: if hier { self.hosts } else { 0 },
            host_ranges: hier,
        }
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.hosts > 1, self.shm) {
            (true, _) => write!(f, "{} hosts", self.hosts),
            (false, true) => write!(f, "one host, shared memory"),
            (false, false) => write!(f, "messages only"),
        }
    }
}

/// The autotuner: the registered algorithms, the LogGP parameters and the cache of
/// choices.
pub struct Tuner {
    algos: Vec<Arc<dyn Algorithm>>,
    model: LogGP,
    overrides: [Option<usize>; OpKind::ALL.len()],
    cache: HashMap<u64, usize, BuildHasherDefault<KeyHasher>>,
    profile: Option<(String, Profile)>,
    mode: TuneMode,
    /// Online winners per (team id, key).
    online: HashMap<(u64, u64), usize, BuildHasherDefault<KeyHasher>>,
    /// CPUs of this host (0: unknown); see [`set_host_cpus`](Self::set_host_cpus).
    host_cpus: u32,
}

impl fmt::Debug for Tuner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tuner")
            .field("algorithms", &self.algos.len())
            .field("model", &self.model)
            .field("cached", &self.cache.len())
            .field("profile", &self.profile.as_ref().map(|p| &p.0))
            .field("mode", &self.mode)
            .finish()
    }
}

impl Tuner {
    /// A tuner over `algos` with cost parameters `model` and no overrides.
    pub fn new(algos: Vec<Arc<dyn Algorithm>>, model: LogGP) -> Tuner {
        Tuner {
            algos,
            model,
            overrides: [None; OpKind::ALL.len()],
            cache: HashMap::default(),
            profile: None,
            mode: TuneMode::Model,
            online: HashMap::default(),
            host_cpus: 0,
        }
    }

    /// Tells the model how many CPUs this host has (0: unknown, the default). A team
    /// that lives on one host and has more members than that (`Query::shm`, size >
    /// CPUs) is *oversubscribed*: its members take turns on the CPUs, so every round
    /// of a message algorithm waits until the peer it needs is scheduled again, which
    /// the LogGP parameters do not describe (measured, 8 ranks on 2 CPUs, allreduce of
    /// 64 KiB: `rechalv` 222 µs where the model predicts 37, `shm` 60 µs). There the
    /// model picks `shm` whenever it can run the call (readers copy from a block that
    /// stays published while its owner is descheduled). The layer sets this from the
    /// host's online CPUs; every member of such a team is on the same host and sees
    /// the same count, so they agree on the choice. A program that sets it must set
    /// the same count on every member of a team before its collectives: it also
    /// decides whether one-word broadcasts take the ring's packed slots (members
    /// outnumbering the CPUs) or its one-line slots, and members that disagree wait in
    /// different places (the stall report names the wait). Clears the cache.
    pub fn set_host_cpus(&mut self, cpus: u32) {
        self.host_cpus = cpus;
        self.cache.clear();
    }

    /// The CPUs of this host the model assumes (0: unknown).
    pub fn host_cpus(&self) -> u32 {
        self.host_cpus
    }

    /// True if `q`'s team is on one host and has more members than its CPUs.
    fn oversubscribed(&self, q: &Query) -> bool {
        q.shm && self.host_cpus > 0 && q.size > self.host_cpus
    }

    /// Reads `GEX_COLL_PROFILE`, `GEX_COLL_LOGGP`, `GEX_COLL_TUNE` and the
    /// `GEX_COLL_<OP>` overrides through `get` (the client's configuration snapshot).
    /// A profile's parameters replace the model's unless `GEX_COLL_LOGGP` is set.
    ///
    /// # Errors
    /// [`CollError::UnknownAlgorithm`] if an override names no registered algorithm
    /// or one that does not implement the operation; [`CollError::Config`] for a bad
    /// `GEX_COLL_LOGGP` or `GEX_COLL_TUNE`; [`CollError::Profile`] for a profile that
    /// cannot be read, is malformed or names an unknown algorithm.
    pub fn configure(&mut self, get: impl Fn(&str) -> Option<String>) -> Result<(), CollError> {
        if let Some(path) = get("GEX_COLL_PROFILE").filter(|s| !s.trim().is_empty()) {
            let path = path.trim();
            self.set_profile(path, Profile::load(path)?)?;
        }
        if let Some(s) = get("GEX_COLL_LOGGP").filter(|s| !s.trim().is_empty()) {
            self.model = LogGP::parse(&s)?;
        }
        if let Some(s) = get("GEX_COLL_TUNE").filter(|s| !s.trim().is_empty()) {
            self.mode = match s.trim() {
                "model" => TuneMode::Model,
                "online" => TuneMode::Online,
                other => {
                    return Err(CollError::Config(format!(
                        "GEX_COLL_TUNE={other:?}: expected model or online"
                    )));
                }
            };
        }
        for op in OpKind::ALL {
            if let Some(name) = get(op.env_var()).filter(|s| !s.trim().is_empty()) {
                let name = name.trim();
                if name == "auto" {
                    continue;
                }
                let i = self.find(op, name)?;
                self.overrides[op as usize] = Some(i);
            }
        }
        self.cache.clear();
        Ok(())
    }

    fn find(&self, op: OpKind, name: &str) -> Result<usize, CollError> {
        self.algos
            .iter()
            .position(|a| a.name() == name && a.ops().contains(&op))
            .ok_or_else(|| CollError::UnknownAlgorithm {
                op,
                name: name.to_string(),
            })
    }

    /// Uses the measured cells of `profile` (read from `what`, named in messages) for
    /// local-address-mode calls of the same operation and team size, and its LogGP
    /// parameters if it has some; clears the cache.
    ///
    /// # Errors
    /// [`CollError::Profile`] if a cell's choice is not a registered algorithm of its
    /// operation.
    pub fn set_profile(&mut self, what: &str, profile: Profile) -> Result<(), CollError> {
        for c in &profile.cells {
            if self.find(c.op, &c.choice).is_err() {
                return Err(CollError::Profile {
                    path: what.to_string(),
                    line: 0,
                    reason: format!(
                        "cell {} team {} bytes {}: {:?} is not an algorithm of {} here",
                        c.op, c.team, c.bytes, c.choice, c.op
                    ),
                });
            }
        }
        if let Some(m) = profile.loggp {
            self.model = m;
        }
        self.profile = Some((what.to_string(), profile));
        self.cache.clear();
        self.online.clear();
        Ok(())
    }

    /// The loaded profile and where it came from.
    pub fn profile(&self) -> Option<(&str, &Profile)> {
        self.profile.as_ref().map(|(w, p)| (w.as_str(), p))
    }

    /// How cache misses are filled.
    pub fn mode(&self) -> TuneMode {
        self.mode
    }

    /// Sets how cache misses are filled; clears the online winners.
    pub fn set_mode(&mut self, mode: TuneMode) {
        self.mode = mode;
        self.online.clear();
    }

    /// Adds an algorithm (e.g. a hardware collective); clears the cache.
    pub fn register(&mut self, a: Arc<dyn Algorithm>) {
        self.algos.push(a);
        self.cache.clear();
        self.online.clear();
    }

    /// The registered algorithms.
    pub fn algorithms(&self) -> &[Arc<dyn Algorithm>] {
        &self.algos
    }

    /// The cost parameters.
    pub fn model(&self) -> &LogGP {
        &self.model
    }

    /// Sets the cost parameters; clears the cache.
    pub fn set_model(&mut self, m: LogGP) {
        self.model = m;
        self.cache.clear();
        self.online.clear();
    }

    /// The algorithm for `q`: the option's or environment's override if any (it must
    /// support `q`), else the cached or freshly computed cheapest candidate.
    ///
    /// # Errors
    /// [`CollError::UnknownAlgorithm`], [`CollError::Unsupported`] for a forced
    /// algorithm that cannot run `q`; [`CollError::NoAlgorithm`] if nothing can.
    #[inline]
    pub fn select(
        &mut self,
        q: &Query,
        forced: Option<&str>,
    ) -> Result<&Arc<dyn Algorithm>, CollError> {
        let i = match forced {
            Some(name) => self.checked(q, self.find(q.op, name)?)?,
            None => match self.overrides[q.op as usize] {
                Some(i) => self.checked(q, i)?,
                None => self.cached_best(q)?,
            },
        };
        Ok(&self.algos[i])
    }

    /// The cheapest candidate for `q`, from the cache or computed and cached.
    #[inline]
    fn cached_best(&mut self, q: &Query) -> Result<usize, CollError> {
        let k = key(q);
        match self.cache.get(&k) {
            Some(&i) => Ok(i),
            None => {
                let i = self.best(q)?.0;
                self.cache.insert(k, i);
                Ok(i)
            }
        }
    }

    /// The algorithm for a sub-collective that a composite algorithm (a stage of
    /// `hier`) runs on one of its sub-teams: the environment's override when it can
    /// run `q`, else the cached or computed cheapest candidate. An override is a
    /// statement about the application's calls; one that cannot run a stage (e.g.
    /// `GEX_COLL_ALLREDUCE=hier`, whose leaders' stage is an allreduce on a team of
    /// one rank per host) must not fail the call it was chosen for.
    ///
    /// # Errors
    /// [`CollError::NoAlgorithm`] if nothing can run `q`.
    pub fn select_within(&mut self, q: &Query) -> Result<&Arc<dyn Algorithm>, CollError> {
        match self.overrides[q.op as usize] {
            Some(i) if self.algos[i].supports(q) => Ok(&self.algos[i]),
            _ => {
                let i = self.cached_best(q)?;
                Ok(&self.algos[i])
            }
        }
    }

    fn checked(&self, q: &Query, i: usize) -> Result<usize, CollError> {
        if self.algos[i].supports(q) {
            Ok(i)
        } else {
            Err(CollError::Unsupported {
                algorithm: self.algos[i].name().to_string(),
                op: q.op,
                size: q.size,
            })
        }
    }

    fn at_class(q: &Query) -> Query {
        Query {
            bytes: class_bytes(size_class(q.bytes)),
            ..*q
        }
    }

    /// The profile cell for `q` (same operation and team size, local address mode,
    /// nearest size class) if its choice supports `q`: (algorithm index, cell).
    fn profile_cell(&self, q: &Query) -> Option<(usize, &crate::profile::Cell)> {
        if q.addr != AddrMode::Local || q.scratch {
            return None;
        }
        let (_, p) = self.profile.as_ref()?;
        let c = size_class(q.bytes);
        let cell = p
            .cells
            .iter()
            .filter(|x| x.op == q.op && x.team == q.size)
            .min_by_key(|x| size_class(x.bytes).abs_diff(c))?;
        let i = self.find(q.op, &cell.choice).ok()?;
        self.algos[i].supports(q).then_some((i, cell))
    }

    fn best(&self, q: &Query) -> Result<(usize, Reason), CollError> {
        if let Some((i, _)) = self.profile_cell(q) {
            return Ok((i, Reason::Profile));
        }
        self.model_best(q).map(|i| (i, Reason::Model))
    }

    fn model_best(&self, q: &Query) -> Result<usize, CollError> {
        let qc = Self::at_class(q);
        if self.oversubscribed(q) {
            let shm = self
                .algos
                .iter()
                .position(|a| a.is_shared_memory() && a.supports(&qc));
            if let Some(i) = shm {
                return Ok(i);
            }
        }
        let mut best: Option<(usize, f64)> = None;
        for (i, a) in self.algos.iter().enumerate() {
            if a.supports(&qc) {
                let c = a.cost(&qc, &self.model);
                if best.is_none_or(|(_, bc)| c < bc) {
                    best = Some((i, c));
                }
            }
        }
        best.map(|b| b.0).ok_or(CollError::NoAlgorithm {
            op: q.op,
            size: q.size,
        })
    }

    /// A human-readable table of the choice for every operation and a range of sizes
    /// on a team of `size` members (commutative operators, default sync modes) whose
    /// members exchange messages only (no shared memory, one host): the chosen
    /// algorithm, why (override, profile or model), the path a blocking call takes and
    /// the evidence — the measured or predicted time against the runner-up. See
    /// [`table_on`](Self::table_on) for other placements.
    ///
    /// ```
    /// let mut t = gex_coll::Tuner::new(gex_coll::catalog(), gex_coll::LogGP::RANGER);
    /// let table = t.table(1024, gex_coll::AddrMode::Local);
    /// assert!(table.contains("allreduce") && table.contains("1048576"));
    /// ```
    pub fn table(&mut self, size: u32, addr: AddrMode) -> String {
        self.table_on(size, addr, Placement::default())
    }

    /// [`table`](Self::table) for a team placed as `place`: the queries are those the
    /// layer builds for such a team (its `shm` and `hier` fields), so the table shows
    /// what a job would run — on one host with shared memory, `shm` where the tuner
    /// takes it, and the path: `shm-ring` (the small-broadcast ring), `shm-direct`
    /// (the slots, in the caller), `shm-channel` (the slots, through the layer),
    /// `hier` (host and leader stages) or `messages` (the schedule engine). The path is
    /// that of a blocking call on an otherwise idle endpoint.
    ///
    /// ```
    /// use gex_coll::{AddrMode, Placement, Tuner};
    /// let mut t = Tuner::new(gex_coll::catalog(), gex_coll::LogGP::default());
    /// let one_host = t.table_on(8, AddrMode::Local, Placement { shm: true, hosts: 1 });
    /// let row = one_host.lines().find(|l| l.starts_with("allreduce")).unwrap();
    /// assert!(row.contains("shm"), "{row}");
    /// ```
    pub fn table_on(&mut self, size: u32, addr: AddrMode, place: Placement) -> String {
        use std::fmt::Write as _;
        let profile = match &self.profile {
            Some((w, _)) => format!(", profile {w}"),
            None => String::new(),
        };
        let mut out = format!(
            "team size {size}, {addr:?} address mode, {place}, mode {:?}{profile}, model {:?}\n",
            self.mode, self.model
        );
        let _ = writeln!(
            out,
            "{:<15} {:>9}  {:<16} {:<8}  {:<11}  why",
            "op", "bytes", "choice", "reason", "path"
        );
        for op in OpKind::ALL {
            for bytes in [8usize, 512, 4096, 65536, 1 << 20] {
                let q = place.query(op, size, bytes, addr);
                match self.explain(&q) {
                    Ok(c) => {
                        let path = self
                            .algos
                            .iter()
                            .find(|a| a.name() == c.algorithm)
                            .map_or("?", |a| crate::path::blocking_path(a.as_ref(), &q));
                        let _ = writeln!(
                            out,
                            "{:<15} {:>9}  {:<16} {:<8}  {:<11}  {}",
                            op.name(),
                            bytes,
                            c.algorithm,
                            c.reason.as_str(),
                            path,
                            c.detail
                        );
                    }
                    Err(e) => {
                        let _ = writeln!(out, "{:<15} {:>9}  error: {e}", op.name(), bytes);
                    }
                }
                if op == OpKind::Barrier {
                    break;
                }
            }
        }
        out
    }

    /// Explains the choice for `q` (no caching): where it comes from, the model's
    /// prediction for every supporting candidate, the measurements of the profile
    /// cell if one decided.
    ///
    /// # Errors
    /// As [`select`](Self::select).
    pub fn explain(&mut self, q: &Query) -> Result<Choice, CollError> {
        let qc = Self::at_class(q);
        let mut candidates: Vec<(String, f64)> = self
            .algos
            .iter()
            .filter(|a| a.supports(&qc))
            .map(|a| (a.name().to_string(), a.cost(&qc, &self.model)))
            .collect();
        candidates.sort_by(|a, b| a.1.total_cmp(&b.1));
        let (i, reason) = match self.overrides[q.op as usize] {
            Some(i) => (self.checked(q, i)?, Reason::Override),
            None => self.best(q)?,
        };
        let algorithm = self.algos[i].name().to_string();
        let mut measured = Vec::new();
        let vs = |list: &[(String, f64)], what: &str| -> String {
            let mine = list.iter().find(|x| x.0 == algorithm).map(|x| x.1);
            let other = list.iter().find(|x| x.0 != algorithm);
            match (mine, other) {
                (Some(t), Some((n, u))) => format!(
                    "{what} {t:.2} us; next {n} {u:.2} us ({:+.0}%)",
                    (u / t.max(1e-9) - 1.0) * 100.0
                ),
                (Some(t), None) => format!("{what} {t:.2} us; the only candidate"),
                (None, _) => format!("{what}: not evaluated"),
            }
        };
        let detail = match reason {
            Reason::Override => format!("{}={algorithm}", q.op.env_var()),
            Reason::Profile => {
                let (_, cell) = self.profile_cell(q).expect("chosen by profile");
                measured = cell.times.clone();
                measured.sort_by(|a, b| a.1.total_cmp(&b.1));
                let w = self.profile.as_ref().map(|p| p.0.as_str()).unwrap_or("");
                format!(
                    "{} (cell of {} B in {w})",
                    vs(&measured, "measured"),
                    cell.bytes
                )
            }
            Reason::Model if self.oversubscribed(q) && self.algos[i].is_shared_memory() => {
                format!(
                    "oversubscribed host ({} members on {} CPUs): shared memory; {}",
                    q.size,
                    self.host_cpus,
                    vs(&candidates, "predicted")
                )
            }
            Reason::Online | Reason::Model => vs(&candidates, "predicted"),
        };
        Ok(Choice {
            algorithm,
            reason,
            candidates,
            measured,
            detail,
        })
    }

    // ------------------------------------------------------------ online tuning

    #[cfg(test)]
    fn clone_best_name(&self, q: &Query) -> String {
        self.algos[self.model_best(q).unwrap()].name().to_string()
    }

    /// True if an override or a profile cell decides `q` (online mode does not
    /// re-time those).
    pub fn fixed_by_config(&self, q: &Query) -> bool {
        self.overrides[q.op as usize].is_some() || self.profile_cell(q).is_some()
    }

    /// The online winner recorded for `q` on team `team`, if any.
    pub fn online_choice(&self, team: u64, q: &Query) -> Option<&Arc<dyn Algorithm>> {
        self.online.get(&(team, key(q))).map(|&i| &self.algos[i])
    }

    /// The candidates an online trial times for `q`: every supporting algorithm
    /// whose predicted cost is within 4× of the cheapest, at most `max`, cheapest
    /// first (indices into [`algorithms`](Self::algorithms)).
    pub fn online_candidates(&self, q: &Query, max: usize) -> Vec<usize> {
        let qc = Self::at_class(q);
        let mut c: Vec<(usize, f64)> = self
            .algos
            .iter()
            .enumerate()
            .filter(|(_, a)| a.supports(&qc))
            .map(|(i, a)| (i, a.cost(&qc, &self.model)))
            .collect();
        c.sort_by(|a, b| a.1.total_cmp(&b.1));
        let best = c.first().map_or(0.0, |x| x.1);
        c.into_iter()
            .filter(|x| x.1 <= 4.0 * best + 1.0)
            .take(max)
            .map(|x| x.0)
            .collect()
    }

    /// Records the winner of an online trial for `q` on team `team`.
    pub fn record_online(&mut self, team: u64, q: &Query, index: usize) {
        self.online.insert((team, key(q)), index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::catalog;

    fn q(op: OpKind, size: u32, bytes: usize) -> Query {
        Query::plain(op, size, bytes)
    }

    #[test]
    fn classes() {
        assert_eq!(size_class(0), 0);
        assert_eq!(size_class(1), 1);
        assert_eq!(size_class(3), 2);
        assert_eq!(size_class(4), 3);
        assert_eq!(class_bytes(3), 7);
    }

    #[test]
    fn every_op_has_a_choice_on_every_size() {
        let mut t = Tuner::new(catalog(), LogGP::default());
        // Four team sizes instead of seven under Miri (37 s there).
        let sizes: &[u32] = if cfg!(miri) {
            &[1, 2, 5, 64]
        } else {
            &[1, 2, 3, 5, 8, 13, 64]
        };
        for op in OpKind::ALL {
            for &p in sizes {
                for b in [0, 8, 4096, 1 << 20] {
                    let a = t.select(&q(op, p, b), None).unwrap();
                    assert!(a.ops().contains(&op));
                    let mut nq = q(op, p, b);
                    nq.commutative = false;
                    let a = t.select(&nq, None).unwrap().clone();
                    assert!(a.supports(&nq), "{} for {nq:?}", a.name());
                }
            }
        }
    }

    #[test]
    fn table_has_a_row_per_op_and_size() {
        let mut t = Tuner::new(catalog(), LogGP::RANGER);
        let table = t.table(1024, AddrMode::Local);
        println!("{table}");
        assert_eq!(table.lines().count(), 2 + 1 + 10 * 5);
        assert!(!table.contains("error"));
    }

    #[test]
    fn overrides_and_errors() {
        let mut t = Tuner::new(catalog(), LogGP::default());
        t.configure(|k| (k == "GEX_COLL_BROADCAST").then(|| "chain".to_string()))
            .unwrap();
        assert_eq!(
            t.select(&q(OpKind::Broadcast, 8, 8), None).unwrap().name(),
            "chain"
        );
        assert_eq!(
            t.explain(&q(OpKind::Broadcast, 8, 8)).unwrap().reason,
            Reason::Override
        );
        let e = t
            .configure(|k| (k == "GEX_COLL_BARRIER").then(|| "ring".to_string()))
            .unwrap_err();
        assert!(matches!(e, CollError::UnknownAlgorithm { .. }));
        // recursive doubling gather_all needs a power of two.
        let e = t
            .select(&q(OpKind::GatherAll, 6, 8), Some("recdbl"))
            .unwrap_err();
        assert!(matches!(e, CollError::Unsupported { .. }));
        assert!(
            t.select(&q(OpKind::GatherAll, 8, 8), Some("recdbl"))
                .is_ok()
        );
    }

    /// An oversubscribed one-host team (more members than CPUs) takes `shm` wherever
    /// it can run, even where the LogGP model prefers a message algorithm; a team
    /// that fits the CPUs, or spans hosts, keeps the model's choice.
    #[test]
    fn oversubscribed_hosts_take_shared_memory() {
        let mut t = Tuner::new(catalog(), LogGP::default());
        let big = Query {
            shm: true,
            ..q(OpKind::Allreduce, 8, 65536)
        };
        let model = t.select(&big, None).unwrap().name().to_string();
        assert_ne!(model, "shm", "the model alone prefers messages here");
        t.set_host_cpus(2);
        assert_eq!(t.host_cpus(), 2);
        assert_eq!(t.select(&big, None).unwrap().name(), "shm");
        let why = t.explain(&big).unwrap();
        assert_eq!((why.algorithm.as_str(), why.reason), ("shm", Reason::Model));
        assert!(why.detail.contains("8 members on 2 CPUs"), "{}", why.detail);
        for op in OpKind::ALL {
            let qq = Query {
                shm: true,
                ..q(op, 5, 4096)
            };
            assert_eq!(t.select(&qq, None).unwrap().name(), "shm", "{op}");
        }
        // Not one host (no shm): the model decides.
        let spread = q(OpKind::Allreduce, 8, 65536);
        assert_eq!(t.select(&spread, None).unwrap().name(), model);
        t.set_host_cpus(8);
        assert_eq!(t.select(&big, None).unwrap().name(), model);
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "writes a profile file: no file system under Miri's isolation"
    )]
    fn profile_cells_win_over_the_model() {
        use crate::profile::{Cell, Profile};
        let mut t = Tuner::new(catalog(), LogGP::default());
        let model = t
            .select(&q(OpKind::Broadcast, 4, 4096), None)
            .unwrap()
            .name()
            .to_string();
        // Measured: a chain beat everything (whatever the model says).
        let other = if model == "chain" { "flat" } else { "chain" };
        let p = Profile {
            machine: vec![],
            loggp: Some(LogGP::RANGER),
            cells: vec![
                Cell::from_times(
                    OpKind::Broadcast,
                    4,
                    4096,
                    vec![(other.into(), 1.0), (model.clone(), 2.0)],
                )
                .unwrap(),
            ],
        };
        let text = p.to_toml();
        let dir = std::env::temp_dir().join(format!("gex-coll-prof-{}", std::process::id()));
        std::fs::write(&dir, &text).unwrap();
        let path = dir.to_str().unwrap().to_string();
        t.configure(|k| (k == "GEX_COLL_PROFILE").then(|| path.clone()))
            .unwrap();
        std::fs::remove_file(&dir).unwrap();
        assert_eq!(*t.model(), LogGP::RANGER);
        // Same cell, and the nearest class (8 KiB) of the same op and team size.
        for b in [4096, 5000, 8192] {
            assert_eq!(
                t.select(&q(OpKind::Broadcast, 4, b), None).unwrap().name(),
                other
            );
        }
        let c = t.explain(&q(OpKind::Broadcast, 4, 4096)).unwrap();
        assert_eq!(c.reason, Reason::Profile);
        assert_eq!(c.measured[0], (other.to_string(), 1.0));
        assert!(c.detail.contains("measured 1.00 us"), "{}", c.detail);
        // Other team sizes, other ops and single mode: the model.
        assert_eq!(
            t.explain(&q(OpKind::Broadcast, 8, 4096)).unwrap().reason,
            Reason::Model
        );
        assert_eq!(
            t.explain(&q(OpKind::Reduce, 4, 4096)).unwrap().reason,
            Reason::Model
        );
        let mut single = q(OpKind::Broadcast, 4, 4096);
        single.addr = AddrMode::Single;
        assert_eq!(t.explain(&single).unwrap().reason, Reason::Model);
        // An override still wins over the profile.
        t.configure(|k| (k == "GEX_COLL_BROADCAST").then(|| "binomial".to_string()))
            .unwrap();
        assert_eq!(
            t.explain(&q(OpKind::Broadcast, 4, 4096)).unwrap().reason,
            Reason::Override
        );
        // GEX_COLL_LOGGP wins over the profile's parameters.
        let mut t = Tuner::new(catalog(), LogGP::default());
        let mut bad = p.clone();
        bad.cells[0].choice = "no-such-algorithm".into();
        let e = t.set_profile("x", bad).unwrap_err();
        assert!(e.to_string().contains("no-such-algorithm"), "{e}");
        t.set_profile("x", p).unwrap();
        t.configure(|k| (k == "GEX_COLL_LOGGP").then(|| "1,2,3,4".to_string()))
            .unwrap();
        assert_eq!(t.model().l, 1.0);
        let e = t
            .configure(|k| (k == "GEX_COLL_PROFILE").then(|| "/nonexistent/p.toml".to_string()))
            .unwrap_err();
        assert!(matches!(e, CollError::Profile { .. }), "{e}");
        let e = t
            .configure(|k| (k == "GEX_COLL_TUNE").then(|| "sometimes".to_string()))
            .unwrap_err();
        assert!(matches!(e, CollError::Config(_)), "{e}");
    }

    #[test]
    fn online_candidates_are_supported_and_bounded() {
        let t = Tuner::new(catalog(), LogGP::default());
        for op in OpKind::ALL {
            let qq = q(op, 6, 4096);
            let c = t.online_candidates(&qq, 4);
            assert!(!c.is_empty() && c.len() <= 4, "{op}");
            assert!(c.iter().all(|&i| t.algorithms()[i].supports(&qq)));
            assert_eq!(t.algorithms()[c[0]].name(), t.clone_best_name(&qq));
        }
    }

    #[test]
    fn model_prefers_trees_for_small_and_pipelines_or_rings_for_large() {
        let mut t = Tuner::new(catalog(), LogGP::BLUEGENE_P);
        let small = t
            .select(&q(OpKind::Broadcast, 64, 8), None)
            .unwrap()
            .name()
            .to_string();
        assert!(small.contains("nomial") || small == "binomial", "{small}");
        let big = t
            .select(&q(OpKind::Allreduce, 64, 8 << 20), None)
            .unwrap()
            .name()
            .to_string();
        assert!(big == "ring" || big == "rechalv", "{big}");
    }
}
