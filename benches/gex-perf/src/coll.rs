//! Collective latency over gex-coll: `gex-perf -n N coll [--op OP] [--algorithm ALG|tuned|all] [--svg FILE]`.
//!
//! `--algorithm all` measures, per (op, size), the tuner's choice and every fixed
//! algorithm that supports the call, with their batches interleaved
//! (`gex_tune::measure::time_interleaved`, 40 ms × 7), and prints the tuned /
//! best-fixed ratio per cell (table on stdout, or on stderr with `--json`). `--svg
//! FILE` plots every series.
//!
//! Every rank runs the operation on the world team (every rank's EP 0), back to back,
//! with `u8` blocks of `size` bytes per rank (barrier: size 0); the value is rank 0's
//! time per call, median of the batches (batches are sized to a time budget after a
//! warm-up). Names: `coll_<op>_lat` (µs), with an `algorithm` key: the tuner's choice
//! for the (op, team size, size) query, or the forced algorithm, and a `buffers` key.
//! The calls are blocking [`CollExt::collective`] calls over borrowed slices (the way
//! MPI benchmarks call `MPI_Bcast`), so the direct shared-memory path is measured when it
//! applies; the slices lie in the rank's segment (`--buffers segment`, the default: a
//! PGAS program's shared data, and what GASNet-EX's testcollperf uses) or in private
//! heap memory (`--buffers private`, what MPI benchmarks use). The timing loop is
//! gex-tune's (`gex_tune::measure`), so gex-perf and gex-tune time cells alike.
#![allow(unsafe_code)]

use crate::report::{Record, Reporter, median};
use gex::ClientBuilder;
use gex::coll::{CollExt, OpKind, Opts, Query};
use gex::core::Client;
use gex::spi::Conduit;
use gex_tune::measure::{Budget, Placement};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The operations `coll` measures (the others follow the same schedules).
pub(crate) const OPS: [OpKind; 6] = [
    OpKind::Barrier,
    OpKind::Broadcast,
    OpKind::Reduce,
    OpKind::Allreduce,
    OpKind::GatherAll,
    OpKind::Exchange,
];

/// Options of the `coll` benchmark.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct CollArgs {
    /// Smoke run: sizes 8 B and 4 KiB, short timings.
    #[arg(long)]
    pub(crate) quick: bool,
    /// Only this operation (repeatable): barrier, broadcast, reduce, allreduce,
    /// gather_all, exchange. Default: all of them.
    #[arg(long = "op", value_name = "OP", value_parser = parse_op)]
    pub(crate) ops: Vec<OpKind>,
    /// `tuned` (the autotuner's choice, the default), an algorithm name, as
    /// `gex-info coll` and `CollExt::algorithms` list them (e.g. binomial, knomial4),
    /// or `all`: the tuner's choice and every fixed algorithm per cell, then a table of
    /// tuned / best-fixed ratios.
    #[arg(long, value_name = "ALG", default_value = "tuned")]
    pub(crate) algorithm: String,
    /// Also write an SVG plot of latency against size, one chart per operation and
    /// one line per algorithm measured.
    #[arg(long, value_name = "FILE")]
    pub(crate) svg: Option<String>,
    /// Where the buffers live: `segment` (the default; a PGAS program's shared data:
    /// `shm` reads blocks of 16 KiB and more straight from the publisher's segment)
    /// or `private` (heap memory, as MPI benchmarks use: blocks go through the
    /// shared-memory slots).
    #[arg(long, value_name = "WHERE", default_value = "segment", value_parser = Placement::parse)]
    pub(crate) buffers: Placement,
    /// Block sizes per rank, comma separated, K/M/G suffixes allowed (default
    /// 8,64,512,4K,64K; with --quick 8,4K). The segment grows to hold the largest
    /// operation's buffers (an exchange's input and output: twice block × ranks).
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = crate::parse_size)]
    pub(crate) sizes: Vec<usize>,
}

fn parse_op(s: &str) -> Result<OpKind, String> {
    OPS.iter().copied().find(|o| o.name() == s).ok_or_else(|| {
        let names: Vec<&str> = OPS.iter().map(|o| o.name()).collect();
        format!(
            "`{s}` is not an operation gex-perf coll measures ({})",
            names.join(", ")
        )
    })
}

/// A `coll` run.
pub(crate) type CollJob = crate::Run<CollArgs>;

/// Block sizes measured by default.
const SIZES: [usize; 5] = [8, 64, 512, 4096, 65536];
/// Block sizes of a `--quick` run.
const QUICK_SIZES: [usize; 2] = [8, 4096];
/// Smallest segment (what the default sizes need on 64 ranks, with room to spare).
const MIN_SEGMENT: usize = 16 << 20;

impl CollJob {
    /// The operations to measure: the `--op`s, else all of [`OPS`].
    fn ops(&self) -> &[OpKind] {
        if self.args.ops.is_empty() {
            &OPS
        } else {
            &self.args.ops
        }
    }

    /// The forced algorithm (or `all`); `None`: the tuner's choice.
    fn algorithm(&self) -> Option<&String> {
        Some(&self.args.algorithm).filter(|a| a.as_str() != "tuned")
    }

    /// The block sizes to measure.
    fn sizes(&self) -> &[usize] {
        if !self.args.sizes.is_empty() {
            &self.args.sizes
        } else if self.args.quick {
            &QUICK_SIZES
        } else {
            &SIZES
        }
    }

    pub(crate) fn builder(&self) -> ClientBuilder<crate::Layers> {
        let largest = self.sizes().iter().copied().max().unwrap_or(0);
        // An exchange's input and output (block × ranks each) at 64-byte boundaries,
        // the largest buffers of any operation measured.
        crate::builder().segment_size_with(move |shape| {
            let ranks = shape.size as usize;
            largest
                .saturating_mul(ranks)
                .saturating_mul(2)
                .saturating_add(4096)
                .max(MIN_SEGMENT)
        })
    }
}

rank_job!(CollJob, run, "gex-perf");

/// The JSON name of an operation's latency.
fn record_name(op: OpKind) -> &'static str {
    match op {
        OpKind::Barrier => "coll_barrier_lat",
        OpKind::Broadcast => "coll_broadcast_lat",
        OpKind::Scatter => "coll_scatter_lat",
        OpKind::Gather => "coll_gather_lat",
        OpKind::GatherAll => "coll_gather_all_lat",
        OpKind::Exchange => "coll_exchange_lat",
        OpKind::Reduce => "coll_reduce_lat",
        OpKind::Allreduce => "coll_allreduce_lat",
        OpKind::ReduceScatter => "coll_reduce_scatter_lat",
        OpKind::Scan => "coll_scan_lat",
        OpKind::Exscan => "coll_exscan_lat",
    }
}

/// One figure kept by rank 0 for the comparison and the plot.
struct Point {
    op: OpKind,
    bytes: usize,
    /// `tuned` or the forced algorithm.
    label: String,
    value: f64,
}

fn run<C: Conduit>(job: &CollJob, client: &Client<C>) -> Res<()> {
    let (me, n) = (client.rank(), client.size());
    crate::pin::pin_rank(client, job.pin)?;
    let mut c = client.endpoint(0)?;
    let world = c.world();
    let all = job.algorithm().is_some_and(|a| a == "all");
    if let Some(a) = job.algorithm().filter(|_| !all) {
        for &op in job.ops() {
            if !c.algorithms(op).iter().any(|x| x == a) {
                return Err(format!(
                    "{a} is not an algorithm of {} (offered: {})",
                    op.name(),
                    c.algorithms(op).join(", ")
                )
                .into());
            }
        }
    }
    let rep = Reporter::new(job.json);
    if me == 0 {
        rep.header(&[format!(
            "gex-perf coll: {n} ranks, conduit {}, wait policy {:?}, algorithm {}, buffers {}; value: rank 0's median batch",
            client.conduit_name(),
            client.wait_policy(),
            job.args.algorithm,
            job.args.buffers.name()
        )]);
    }
    let (budget, at) = if job.args.quick {
        (Budget::QUICK, job.args.buffers)
    } else {
        (Budget::FULL, job.args.buffers)
    };
    let sizes = job.sizes();
    let provider = crate::report::provider_of(client);
    let mut points: Vec<Point> = Vec::new();
    for &op in job.ops() {
        for &bytes in if op == OpKind::Barrier {
            &[0][..]
        } else {
            sizes
        } {
            let q = Query {
                shm: c.shared_memory(&world),
                ..Query::plain(op, n, bytes)
            };
            // (label, forced algorithm): the tuner's choice and/or fixed algorithms.
            let runs: Vec<(String, Option<String>)> = match job.algorithm() {
                None => vec![("tuned".into(), None)],
                Some(_) if all => {
                    let mut v = vec![("tuned".to_string(), None)];
                    let fixed = c.tuner(|t| {
                        t.algorithms()
                            .iter()
                            .filter(|a| a.supports(&q))
                            .map(|a| a.name().to_string())
                            .collect::<Vec<_>>()
                    })?;
                    v.extend(fixed.into_iter().map(|a| (a.clone(), Some(a))));
                    v
                }
                Some(a) => vec![(a.clone(), Some(a.clone()))],
            };
            let algorithms: Vec<String> = runs
                .iter()
                .map(|(_, forced)| match forced {
                    Some(a) => Ok(a.clone()),
                    None => c.explain(&q).map(|x| x.algorithm),
                })
                .collect::<Result<_, _>>()?;
            let per: Vec<Vec<f64>> = if all {
                // Batches of the tuned choice and of every fixed algorithm interleaved,
                // so that load changes during the cell hit them alike.
                let opts: Vec<Opts<'_>> = runs
                    .iter()
                    .map(|(_, f)| match f {
                        Some(a) => Opts::default().with_algorithm(a),
                        None => Opts::default(),
                    })
                    .collect();
                // SAFETY: nothing else touches this rank's segment while gex-perf
                // times (no RMA into it, no scratch region).
                unsafe {
                    gex_tune::measure::time_interleaved(&mut c, op, bytes, &opts, budget, at)?
                }
            } else {
                let opts = match &runs[0].1 {
                    Some(a) => Opts::default().with_algorithm(a),
                    None => Opts::default(),
                };
                // SAFETY: as above.
                vec![unsafe { gex_tune::measure::time_cell(&mut c, op, bytes, &opts, budget, at)? }]
            };
            for (((label, forced), algorithm), mut per) in runs.into_iter().zip(algorithms).zip(per)
            {
                if me == 0 {
                    let (lo, hi) = per
                        .iter()
                        .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
                    let value = median(&mut per);
                    rep.record(&Record {
                        name: record_name(op),
                        size: bytes,
                        ranks: n,
                        conduit: C::NAME,
                        provider: provider.clone(),
                        algorithm: Some(if forced.is_none() && all {
                            format!("tuned:{algorithm}")
                        } else {
                            algorithm
                        }),
                        buffers: Some(job.args.buffers.name()),
                        value,
                        unit: "us",
                        min: Some(lo),
                        max: Some(hi),
                    });
                    points.push(Point {
                        op,
                        bytes,
                        label,
                        value,
                    });
                }
            }
        }
    }
    if me == 0 {
        if all {
            compare(&points, job.ops(), job.json);
        }
        if let Some(path) = &job.args.svg {
            std::fs::write(path, plot(&points, job.ops(), n, C::NAME))
                .map_err(|e| format!("{path}: {e}"))?;
        }
    }
    Ok(())
}

/// Prints, per (op, size), the tuner's choice against the best fixed algorithm
/// measured in the same run: `ratio = tuned / best` (1.00 = as fast as the best).
fn compare(points: &[Point], ops: &[OpKind], json: bool) {
    let mut worst = (0.0f64, String::new());
    let mut lines = vec![format!(
        "# tuned vs best fixed algorithm (same run)\n{:<15} {:>8}  {:>10}  {:<16} {:>10}  {:>6}",
        "op", "bytes", "tuned us", "best fixed", "us", "ratio"
    )];
    for &op in ops {
        let mut sizes: Vec<usize> = points
            .iter()
            .filter(|p| p.op == op)
            .map(|p| p.bytes)
            .collect();
        sizes.dedup();
        for bytes in sizes {
            let cell: Vec<&Point> = points
                .iter()
                .filter(|p| p.op == op && p.bytes == bytes)
                .collect();
            let Some(tuned) = cell.iter().find(|p| p.label == "tuned") else {
                continue;
            };
            let Some(best) = cell
                .iter()
                .filter(|p| p.label != "tuned")
                .min_by(|a, b| a.value.total_cmp(&b.value))
            else {
                continue;
            };
            let ratio = tuned.value / best.value.max(1e-9);
            if ratio > worst.0 {
                worst = (ratio, format!("{} {bytes} B", op.name()));
            }
            lines.push(format!(
                "{:<15} {:>8}  {:>10.2}  {:<16} {:>10.2}  {:>6.2}",
                op.name(),
                bytes,
                tuned.value,
                best.label,
                best.value,
                ratio
            ));
        }
    }
    lines.push(format!("# worst ratio {:.2} ({})", worst.0, worst.1));
    let text = lines.join("\n") + "\n";
    // With --json the comparison goes to stderr, so stdout stays JSON lines.
    if json {
        eprint!("{text}");
    } else {
        print!("{text}");
    }
}

/// An SVG page: one chart per operation, latency against size per algorithm.
fn plot(points: &[Point], ops: &[OpKind], n: u32, conduit: &str) -> String {
    use gex_tune::svg::{Chart, Series, page};
    let mut charts = Vec::new();
    for &op in ops {
        let mut labels: Vec<&str> = Vec::new();
        for p in points.iter().filter(|p| p.op == op) {
            if !labels.contains(&p.label.as_str()) {
                labels.push(&p.label);
            }
        }
        let series = labels
            .iter()
            .map(|l| Series {
                name: (*l).to_string(),
                points: points
                    .iter()
                    .filter(|p| p.op == op && p.label == *l)
                    // Barrier: plotted at 1 B (log axis).
                    .map(|p| (p.bytes.max(1) as f64, p.value))
                    .collect(),
            })
            .collect();
        charts.push(Chart {
            title: format!("{}, {n} ranks", op.name()),
            x_label: "bytes per block".into(),
            y_label: "latency (us, rank 0 median)".into(),
            series,
        });
    }
    page(
        &format!("gex-perf coll on {conduit}, {n} ranks"),
        &charts,
        2,
    )
}
