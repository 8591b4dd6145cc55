//! Output: the human table (like GASNet's testam) and JSON lines.

use gex::core::Client;
use gex::spi::Conduit;
use serde::Serialize;
use std::io::Write;

/// The provider behind the client's conduit, for conduits that have one: the libfabric
/// provider the ofi conduit opened (`Ofi::report`), alone or as the far part of the
/// hybrid conduit `GEX_CONDUIT=ofi` runs; the ibv conduit's verbs provider (`emu`, or
/// `verbs:<device>`), alone or as the far part of the hybrid conduit `GEX_CONDUIT=ibv`
/// runs. `None` for the others.
pub(crate) fn provider_of<C: Conduit>(client: &Client<C>) -> Option<String> {
    #[cfg(feature = "ofi")]
    {
        use gex::conduit::ofi::{Ofi, OfiHybrid};
        let any: &dyn std::any::Any = &**client.conduit();
        let ofi = any
            .downcast_ref::<OfiHybrid>()
            .map(OfiHybrid::far)
            .or_else(|| any.downcast_ref::<Ofi>());
        if let Some(ofi) = ofi {
            return Some(ofi.report().provider().to_string());
        }
    }
    #[cfg(feature = "ibv")]
    {
        use gex::conduit::ibv::{Ibv, IbvHybrid};
        let any: &dyn std::any::Any = &**client.conduit();
        let ibv = any
            .downcast_ref::<IbvHybrid>()
            .map(IbvHybrid::far)
            .or_else(|| any.downcast_ref::<Ibv>());
        if let Some(ibv) = ibv {
            return Some(match ibv.provider() {
                gex::conduit::ibv::Provider::Emu => "emu".to_string(),
                gex::conduit::ibv::Provider::Verbs => format!("verbs:{}", ibv.device()),
            });
        }
    }
    let _ = client;
    None
}

/// One measured figure.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Record {
    /// Test name, e.g. `am_short_rtt`.
    pub(crate) name: &'static str,
    /// Payload size in bytes (0 for Short).
    pub(crate) size: usize,
    /// Ranks in the job.
    pub(crate) ranks: u32,
    /// Conduit name.
    pub(crate) conduit: &'static str,
    /// The network provider under the conduit, for conduits that have one (ofi: the
    /// libfabric provider, e.g. `tcp;ofi_rxm`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) provider: Option<String>,
    /// The algorithm measured, for collectives (`coll`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) algorithm: Option<String>,
    /// Where the benchmark's buffers lived, for collectives (`segment` or `private`);
    /// absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) buffers: Option<&'static str>,
    /// Median over batches (and over pairs).
    pub(crate) value: f64,
    /// `us`, `GB/s` or `Mop/s`.
    pub(crate) unit: &'static str,
    /// Smallest batch value over every pair.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) min: Option<f64>,
    /// Largest batch value over every pair.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) max: Option<f64>,
}

impl Record {
    /// A figure of `client`'s job with no algorithm, placement or batch extremes.
    pub(crate) fn of<C: Conduit>(
        client: &Client<C>,
        name: &'static str,
        size: usize,
        value: f64,
        unit: &'static str,
    ) -> Self {
        Record {
            name,
            size,
            ranks: client.size(),
            conduit: client.conduit_name(),
            provider: provider_of(client),
            algorithm: None,
            buffers: None,
            value,
            unit,
            min: None,
            max: None,
        }
    }

    /// A figure of `client`'s job from the samples `v` (of batches, pairs or rounds):
    /// their median, with their smallest and largest as the extremes (reorders `v`).
    pub(crate) fn of_samples<C: Conduit>(
        client: &Client<C>,
        name: &'static str,
        size: usize,
        unit: &'static str,
        v: &mut [f64],
    ) -> Self {
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Record {
            min: Some(min),
            max: Some(max),
            ..Record::of(client, name, size, median(v), unit)
        }
    }
}

/// One JSON line: a [`Record`] and how the job's ranks were made.
#[derive(Serialize)]
struct Line<'a> {
    #[serde(flatten)]
    record: &'a Record,
    /// `processes` (every rank a process) or `threads` (`--threads T`: processes of
    /// `T` thread ranks each).
    ranks_as: &'static str,
    /// Thread ranks per process (1 for process ranks).
    threads_per_process: u32,
}

impl<'a> Line<'a> {
    fn new(record: &'a Record, kind: crate::RankKind) -> Self {
        Line {
            record,
            ranks_as: if kind.threads.is_some() {
                "threads"
            } else {
                "processes"
            },
            threads_per_process: kind.threads.unwrap_or(1),
        }
    }
}

/// Writes records to stdout, flushing each line (each line is written under the
/// stdout lock, so lines of several ranks of one process do not interleave; only
/// rank 0 reports).
#[derive(Debug)]
pub(crate) struct Reporter {
    json: bool,
}

impl Reporter {
    pub(crate) fn new(json: bool) -> Self {
        Reporter { json }
    }

    /// Prints the header (human format only).
    pub(crate) fn header(&self, lines: &[String]) {
        if self.json {
            return;
        }
        let mut out = std::io::stdout().lock();
        for l in lines {
            let _ = writeln!(out, "# {l}");
        }
        let _ = writeln!(
            out,
            "{:<20} {:>9} {:>12} {:<5} {:>12} {:>12}",
            "name", "size", "value", "unit", "min", "max"
        );
        let _ = out.flush();
    }

    /// Prints one record.
    pub(crate) fn record(&self, r: &Record) {
        let mut out = std::io::stdout().lock();
        if self.json {
            match serde_json::to_string(&Line::new(r, crate::rank_kind())) {
                Ok(s) => {
                    let _ = writeln!(out, "{s}");
                }
                Err(e) => crate::complain(&format!("cannot encode a record: {e}")),
            }
        } else {
            let opt = |v: Option<f64>| v.map_or_else(|| "-".to_string(), fmt_value);
            let _ = writeln!(
                out,
                "{:<20} {:>9} {:>12} {:<5} {:>12} {:>12}{}",
                r.name,
                r.size,
                fmt_value(r.value),
                r.unit,
                opt(r.min),
                opt(r.max),
                r.algorithm
                    .as_deref()
                    .map_or_else(String::new, |a| format!("  {a}"))
            );
        }
        let _ = out.flush();
    }
}

/// Four significant digits, at least three decimals below 10.
fn fmt_value(v: f64) -> String {
    if v >= 1000.0 {
        format!("{v:.1}")
    } else if v >= 10.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// Median of a non-empty slice (sorted in place; mean of the two middle values
/// when the length is even).
pub(crate) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&mut []).is_nan());
    }

    #[test]
    fn json_keys() {
        let r = Record {
            name: "am_short_rtt",
            size: 0,
            ranks: 2,
            conduit: "smp",
            provider: None,
            algorithm: None,
            buffers: None,
            value: 0.5,
            unit: "us",
            min: Some(0.4),
            max: Some(0.6),
        };
        let line = |r: &Record, threads| {
            let l = Line::new(r, crate::RankKind { threads });
            let v: serde_json::Value =
                serde_json::from_str(&serde_json::to_string(&l).unwrap()).unwrap();
            v
        };
        let v = line(&r, None);
        let keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys.len(), 10);
        assert_eq!(v["ranks_as"], "processes");
        assert_eq!(v["threads_per_process"], 1);
        let t = line(&r, Some(4));
        assert_eq!(t["ranks_as"], "threads");
        assert_eq!(t["threads_per_process"], 4);
        for k in [
            "name",
            "size",
            "ranks",
            "conduit",
            "value",
            "unit",
            "min",
            "max",
            "ranks_as",
            "threads_per_process",
        ] {
            assert!(keys.iter().any(|x| x == k), "{k}");
        }
        let with = Record {
            provider: Some("tcp;ofi_rxm".into()),
            ..r
        };
        let v = line(&with, None);
        assert_eq!(v["provider"], "tcp;ofi_rxm");
        assert_eq!(v.as_object().unwrap().len(), 11);
    }
}
