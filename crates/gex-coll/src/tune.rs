//! The autotuner core: LogGP parameters, candidate filtering by capability, choice by
//! cost model, a per-key cache and per-operation overrides.

use crate::algo::{Algorithm, Query};
use crate::error::CollError;
use crate::op::{AddrMode, OpKind, SyncMode};
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

/// LogGP parameters (times in µs, `big_g` and `copy` in µs per byte).
///
/// `l` latency, `o` per-message CPU overhead, `g` gap between injections, `big_g` gap
/// per byte (1 / bandwidth); `copy` is the cost of copying one byte out of a
/// receive buffer (what a signaling put saves).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LogGP {
    /// Latency L.
    pub l: f64,
    /// Overhead o.
    pub o: f64,
    /// Gap g.
    pub g: f64,
    /// Gap per byte G.
    pub big_g: f64,
    /// Local copy cost per byte.
    pub copy: f64,
}

impl Default for LogGP {
    /// Parameters of shared memory on a current machine (used until a calibration
    /// or `GEX_COLL_LOGGP` says otherwise).
    fn default() -> Self {
        LogGP {
            l: 0.3,
            o: 0.1,
            g: 0.05,
            big_g: 1.0 / 10_000.0,
            copy: 1.0 / 20_000.0,
        }
    }
}

impl LogGP {
    /// Cray XT4 (Franklin) after seed 003's Table 1: 6.2 µs latency, 7.6 GB/s.
    pub const CRAY_XT4: LogGP = LogGP {
        l: 6.2,
        o: 0.5,
        g: 0.5,
        big_g: 1.0 / 7_600.0,
        copy: 1.0 / 10_600.0,
    };
    /// IBM BlueGene/P (Intrepid) after seed 003's Table 1: 1.5 µs, 0.85 GB/s.
    pub const BLUEGENE_P: LogGP = LogGP {
        l: 1.5,
        o: 0.5,
        g: 0.5,
        big_g: 1.0 / 850.0,
        copy: 1.0 / 13_600.0,
    };
    /// Sun Constellation (Ranger) after seed 003's Table 1: 2.3 µs, 1 GB/s.
    pub const RANGER: LogGP = LogGP {
        l: 2.3,
        o: 0.5,
        g: 0.5,
        big_g: 1.0 / 1_000.0,
        copy: 1.0 / 10_600.0,
    };

    /// Parses `L,o,g,G[,copy]` (µs, µs, µs, µs per byte, µs per byte), the format of
    /// `GEX_COLL_LOGGP`.
    ///
    /// ```
    /// let m = gex_coll::LogGP::parse("6.2,0.5,0.5,0.0001").unwrap();
    /// assert_eq!(m.l, 6.2);
    /// assert!(gex_coll::LogGP::parse("1,2").is_err());
    /// ```
    ///
    /// # Errors
    /// [`CollError::Config`] naming the problem.
    pub fn parse(s: &str) -> Result<LogGP, CollError> {
        let v: Result<Vec<f64>, _> = s.split(',').map(|x| x.trim().parse::<f64>()).collect();
        let v = v.map_err(|e| CollError::Config(format!("GEX_COLL_LOGGP={s:?}: {e}")))?;
        if !(4..=5).contains(&v.len()) || v.iter().any(|x| !x.is_finite() || *x < 0.0) {
            return Err(CollError::Config(format!(
                "GEX_COLL_LOGGP={s:?}: expected 4 or 5 non-negative numbers L,o,g,G[,copy]"
            )));
        }
        Ok(LogGP {
            l: v[0],
            o: v[1],
            g: v[2],
            big_g: v[3],
            copy: v.get(4).copied().unwrap_or(LogGP::default().copy),
        })
    }
}

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
/// modes and commutativity, packed into 64 bits.
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

/// Why an algorithm was chosen (what `gex-info coll` would print).
#[derive(Clone, Debug, PartialEq)]
pub struct Choice {
    /// The chosen algorithm.
    pub algorithm: String,
    /// `"override"` (env var or option) or `"model"`.
    pub reason: &'static str,
    /// (name, predicted µs) of every candidate that supports the query, cheapest
    /// first.
    pub candidates: Vec<(String, f64)>,
}

/// The autotuner: the registered algorithms, the LogGP parameters and the cache of
/// choices.
pub struct Tuner {
    algos: Vec<Arc<dyn Algorithm>>,
    model: LogGP,
    overrides: [Option<usize>; OpKind::ALL.len()],
    cache: HashMap<u64, usize, BuildHasherDefault<KeyHasher>>,
}

impl fmt::Debug for Tuner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tuner")
            .field("algorithms", &self.algos.len())
            .field("model", &self.model)
            .field("cached", &self.cache.len())
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
        }
    }

    /// Reads `GEX_COLL_<OP>` overrides and `GEX_COLL_LOGGP` through `get` (the
    /// client's configuration snapshot).
    ///
    /// # Errors
    /// [`CollError::UnknownAlgorithm`] if an override names no registered algorithm
    /// or one that does not implement the operation; [`CollError::Config`] for a bad
    /// `GEX_COLL_LOGGP`.
    pub fn configure(&mut self, get: impl Fn(&str) -> Option<String>) -> Result<(), CollError> {
        if let Some(s) = get("GEX_COLL_LOGGP").filter(|s| !s.trim().is_empty()) {
            self.model = LogGP::parse(&s)?;
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

    /// Adds an algorithm (e.g. a hardware collective); clears the cache.
    pub fn register(&mut self, a: Arc<dyn Algorithm>) {
        self.algos.push(a);
        self.cache.clear();
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
                None => {
                    let k = key(q);
                    match self.cache.get(&k) {
                        Some(&i) => i,
                        None => {
                            let i = self.best(q)?;
                            self.cache.insert(k, i);
                            i
                        }
                    }
                }
            },
        };
        Ok(&self.algos[i])
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

    fn best(&self, q: &Query) -> Result<usize, CollError> {
        let qc = Self::at_class(q);
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

    /// A human-readable table of the choice for every operation and a range of size
    /// classes on a team of `size` members (commutative operators, default sync modes):
    /// the chosen algorithm, its predicted time and the runner-up.
    ///
    /// ```
    /// let mut t = gex_coll::Tuner::new(gex_coll::algo::catalog(), gex_coll::LogGP::RANGER);
    /// let table = t.table(1024, gex_coll::AddrMode::Local);
    /// assert!(table.contains("allreduce") && table.contains("1048576"));
    /// ```
    pub fn table(&mut self, size: u32, addr: AddrMode) -> String {
        use std::fmt::Write as _;
        let mut out = format!(
            "team size {size}, {addr:?} address mode, model {:?}\n",
            self.model
        );
        let _ = writeln!(
            out,
            "{:<15} {:>9}  {:<16} {:>12}  {:<16} {:>12}",
            "op", "bytes", "choice", "µs", "runner-up", "µs"
        );
        for op in OpKind::ALL {
            for bytes in [8usize, 512, 4096, 65536, 1 << 20] {
                let q = Query {
                    op,
                    size,
                    bytes,
                    addr,
                    sync: crate::op::SyncModes::default(),
                    commutative: true,
                    scratch: false,
                    shm: false,
                    hier: false,
                };
                match self.explain(&q) {
                    Ok(c) => {
                        let (a, ac) = c.candidates.first().cloned().unwrap_or_default();
                        let (b, bc) = c.candidates.get(1).cloned().unwrap_or_default();
                        let chosen = if c.algorithm == a {
                            a
                        } else {
                            format!("{} ({})", c.algorithm, c.reason)
                        };
                        let _ = writeln!(
                            out,
                            "{:<15} {:>9}  {:<16} {:>12.2}  {:<16} {:>12.2}",
                            op.name(),
                            bytes,
                            chosen,
                            ac,
                            b,
                            bc
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

    /// Explains the choice for `q` (no caching): candidates with their predicted
    /// cost.
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
        let reason = if self.overrides[q.op as usize].is_some() {
            "override"
        } else {
            "model"
        };
        let algorithm = self.select(q, None)?.name().to_string();
        Ok(Choice {
            algorithm,
            reason,
            candidates,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::catalog;
    use crate::op::SyncModes;

    fn q(op: OpKind, size: u32, bytes: usize) -> Query {
        Query {
            op,
            size,
            bytes,
            addr: AddrMode::Local,
            sync: SyncModes::default(),
            commutative: true,
            scratch: false,
            shm: false,
            hier: false,
        }
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
        for op in OpKind::ALL {
            for p in [1, 2, 3, 5, 8, 13, 64] {
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
            "override"
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
