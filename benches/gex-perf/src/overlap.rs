//! The `overlap` benchmark (gex-overlap, seed 000's first kernel): a 4 MiB get
//! followed by streaming use of the data, demand-driven against blocking, in the same
//! run.
//!
//! Rank 1 fills its segment with a known pattern. Each round, rank 0 (1) times a
//! blocking get of `--size` bytes (4 MiB) into a private buffer followed by the use:
//! for every page in order, `--work` steps of arithmetic on the page's bytes (the
//! consumer's computation) and a checksum of them; then (2) the same with
//! `get_demand` into an `OverlapBuf` (gex-overlap), whose pages the
//! use waits for one by one as strips land. The two alternate, round by round.
//! Every checksum is compared with the pattern's.
//!
//! Figures (rank 0; median of `--rounds` rounds, min/max the extreme rounds):
//! - `overlap_get_stream_blocking` and `overlap_get_stream_demand` (µs per round);
//! - `overlap_get_stream_speedup` (`x`): blocking / demand time, per round;
//! - `overlap_strip` (bytes): the strip length the model chose (`value`), with the
//!   number of strips in `min`/`max`;
//! - `overlap_get_stream_equal` and `overlap_get_stream_variable` (µs per round): the
//!   same get forced into the model's equal strips (`Decomp::Equal`) and into its
//!   variable ones (`Decomp::Variable`: a small first strip, then growing), alternated
//!   with the others round by round; `overlap_get_stream_variable_speedup` (`x`):
//!   equal / variable per round; `overlap_strip_variable` (bytes): the variable plan's
//!   first strip, with the number of strips in `min`/`max`;
//! - `overlap_get_stream_floor` (µs per round): the same copy and use overlapped by
//!   hand, in the model's strips, by a helper thread on another core and no page
//!   protection (`crate::overlap_floor`): what a perfect demand-driven get would take
//!   here; `overlap_get_stream_floor_speedup` (`x`): blocking / floor per round, the
//!   most any implementation can gain on this machine. Over shared memory only (over
//!   a network the transfer is not a copy by a core, and these rows are left out). The ranks other than 0 wait in
//!   a barrier meanwhile: under the `spin` policy (the default when the ranks fit the
//!   cores) they keep their cores busy; `GEX_WAIT=block` frees them for the movers.

use crate::overlap_delta::Kernel;
use crate::overlap_floor::Floor;
use crate::report::{Record, Reporter};
use gex::coll::CollExt;
use gex::core::Client;
use gex::overlap::{Decomp, OverlapBuf, OverlapExt};
use gex::rma::{GlobalPtr, RmaExt};
use gex::spi::Conduit;
use gex::{Blocking, ClientBuilder, EpAddr, Job};
use std::sync::Arc;
use std::time::Instant;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Options of the `overlap` benchmark.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct OverlapArgs {
    /// Bytes per get (K/M suffixes allowed).
    #[arg(long, value_name = "BYTES", default_value = "4M", value_parser = crate::parse_size)]
    pub(crate) size: usize,
    /// Steps of arithmetic per page of the use (its computation between pages);
    /// default 64 for `stream`, 4096 for the delta kernels.
    #[arg(long, value_name = "N")]
    pub(crate) work: Option<u64>,
    /// Rounds of each kind.
    #[arg(long, value_name = "N", default_value_t = 11, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub(crate) rounds: u32,
    /// The kernel: `stream` (seed 000: a get then streaming use), or seed 001's delta
    /// kernels `pair`, `cascade`, `ring`, `reduce`, or `delta` (those four in turn).
    #[arg(long, value_enum, default_value = "stream")]
    pub(crate) kernel: KernelArg,
    /// `pair`: one page in this many is updated per round.
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub(crate) fraction: u64,
    /// Delta kernels: OS-triggered tracking of the sender's writes (default: annotated).
    #[arg(long)]
    pub(crate) os_triggered: bool,
    /// `halo`: puts per neighbour per iteration.
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub(crate) puts: u32,
    /// `halo`: bytes per put.
    #[arg(long, value_name = "BYTES", default_value = "16", value_parser = crate::parse_size)]
    pub(crate) put_size: usize,
    /// `halo`: iterations per round.
    #[arg(long, value_name = "N", default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub(crate) iters: u32,
}

/// `--kernel`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum KernelArg {
    /// Seed 000's get then streaming use.
    Stream,
    /// Seed 001's pair.
    Pair,
    /// Seed 001's cascade (a chain of all ranks).
    Cascade,
    /// Seed 001's ring.
    Ring,
    /// Seed 001's array reduce.
    Reduce,
    /// The four delta kernels in turn.
    Delta,
    /// A halo exchange of small puts: message scheduling (trains, piggybacking)
    /// against plain NBI puts.
    Halo,
}

impl KernelArg {
    fn delta_kernels(self) -> Vec<Kernel> {
        match self {
            KernelArg::Stream | KernelArg::Halo => vec![],
            KernelArg::Pair => vec![Kernel::Pair],
            KernelArg::Cascade => vec![Kernel::Cascade],
            KernelArg::Ring => vec![Kernel::Ring],
            KernelArg::Reduce => vec![Kernel::Reduce],
            KernelArg::Delta => vec![Kernel::Pair, Kernel::Cascade, Kernel::Ring, Kernel::Reduce],
        }
    }
}

/// The layers of an `overlap` run: gex-perf's and gex-overlap.
pub(crate) type OverlapLayers = (crate::Layers, gex::overlap::Overlap);

/// An `overlap` run.
pub(crate) type OverlapJob = crate::Run<OverlapArgs>;

impl OverlapJob {
    /// gex-perf's layers plus gex-overlap; a segment holding the source.
    pub(crate) fn builder(&self) -> ClientBuilder<OverlapLayers> {
        let seg = match self.args.kernel {
            KernelArg::Stream => self.args.size,
            KernelArg::Halo => crate::overlap_halo::segment_len(&self.args),
            _ => crate::overlap_delta::segment_len(self.args.size),
        };
        crate::builder()
            .layer::<gex::overlap::Overlap>()
            .segment_size(seg.next_multiple_of(1 << 20).max(1 << 20))
    }
}

impl Job for OverlapJob {
    type Output = crate::RankEnd;
    fn run<C: Conduit>(self, client: Client<C>) -> Self::Output {
        let r = match self.args.kernel {
            KernelArg::Stream => run(&self, &client),
            KernelArg::Halo => run_halo(&self, &client),
            _ => run_delta(&self, &client),
        };
        crate::end_job(client, "gex-perf", r)
    }
}

fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(7) ^ (i >> 12)) as u8
}

/// The use of one page: `work` dependent steps seeded by its bytes, and their sum.
#[inline(never)]
fn use_page(page: &[u8], work: u64) -> u64 {
    let sum: u64 = page.iter().map(|&b| u64::from(b)).sum();
    let mut x = sum;
    for _ in 0..work {
        x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
    }
    std::hint::black_box(x);
    sum
}

fn stream(data: &[u8], page: usize, work: u64) -> u64 {
    data.chunks(page).map(|p| use_page(p, work)).sum()
}

/// The halo kernel (`crate::overlap_halo`).
fn run_halo<C: Conduit>(job: &OverlapJob, client: &Client<C>) -> Res<()> {
    let (mut ep, _) = crate::two_or_more(client, "the halo kernel", job.pin)?;
    crate::overlap_halo::run(&job.args, &Reporter::new(job.json), client, &mut ep)
}

/// Seed 001's kernels (`crate::overlap_delta`), one after the other.
fn run_delta<C: Conduit>(job: &OverlapJob, client: &Client<C>) -> Res<()> {
    if client.size() < 2 {
        return Err("the delta kernels need at least 2 ranks".into());
    }
    let (mut ep, _) = crate::rank_endpoint(client, job.pin)?;
    let mut args = job.args.clone();
    args.fraction = args.fraction.max(1);
    for k in job.args.kernel.delta_kernels() {
        crate::overlap_delta::run(&args, &Reporter::new(job.json), k, client, &mut ep)?;
    }
    Ok(())
}

fn run<C: Conduit>(job: &OverlapJob, client: &Client<C>) -> Res<()> {
    let me = client.rank();
    // The cores this rank may use before it pins itself: the floor's mover takes one
    // apart from the rank's.
    let cores = crate::pin::allowed_cores().unwrap_or_default();
    let (mut ep, world) = crate::two_or_more(client, "overlap", job.pin)?;
    let mine = crate::pin::allowed_cores()
        .ok()
        .filter(|c| c.len() == 1)
        .map(|c| c[0]);
    let len = job.args.size;
    let work = job.args.work.unwrap_or(64);
    let page = 4096;
    let data: Vec<u8> = (0..len).map(pattern).collect();
    let want: u64 = data.iter().map(|&b| u64::from(b)).sum();
    if me == 1 {
        ep.put(GlobalPtr::<u8>::new(ep.addr(), 0), &data, Blocking)?;
    }
    ep.barrier(&world)?;
    let mut x = Series::default();
    if me == 0 {
        let src = GlobalPtr::<u8>::new(EpAddr::rank(1), 0);
        let mut plain = vec![0u8; len];
        let mut buf = OverlapBuf::new(len)?;
        // Warm-up: one of each (first-touch of the buffers, the model's measurement).
        ep.get(&mut plain[..], src, Blocking)?;
        let warm = ep.get_demand(&mut buf, 0, src, len)?;
        ep.retire_all()?;
        // The floor: the same copy and use overlapped by hand (`overlap_floor`), in
        // the model's strips. Over shared memory only: there a get is a copy by a
        // core, which the floor's mover does; over a network it would not be the
        // transfer's.
        let mut fl = (client.conduit_name() == "smp")
            .then(|| Floor::new(Arc::new(data.clone()), warm.strip_len, &cores, mine));
        if let Some(fl) = fl.as_mut() {
            x.floor_core = fl.core;
            fl.round(|s| stream(s, page, work))?;
        }
        for round in 0..job.args.rounds {
            let t0 = Instant::now();
            ep.get(&mut plain[..], src, Blocking)?;
            let s1 = stream(&plain, page, work);
            let b = t0.elapsed().as_secs_f64() * 1e6;
            let t0 = Instant::now();
            let issued = ep.get_demand(&mut buf, 0, src, len)?;
            let s2 = stream(&buf, page, work);
            let d = t0.elapsed().as_secs_f64() * 1e6;
            ep.retire_all()?;
            if s1 != want || s2 != want {
                return Err(format!("round {round}: checksums {s1} and {s2}, want {want}").into());
            }
            x.strips = (issued.strip_len, issued.strips);
            x.blocking.push(b);
            x.demand.push(d);
            x.speedup.push(b / d.max(1e-3));
            // Equal against variable strips, forced (the model's lengths).
            let mut t = [0.0f64; 2];
            for (k, d) in [Decomp::Equal, Decomp::Variable].into_iter().enumerate() {
                ep.set_decomp(d, 0)?;
                let t0 = Instant::now();
                let issued = ep.get_demand(&mut buf, 0, src, len)?;
                let s = stream(&buf, page, work);
                t[k] = t0.elapsed().as_secs_f64() * 1e6;
                ep.retire_all()?;
                if s != want {
                    return Err(format!("round {round}: checksum {s}, want {want}").into());
                }
                if k == 1 {
                    x.var_strips = (issued.strip_len, issued.strips);
                }
            }
            ep.set_decomp(Decomp::Auto, 65536)?;
            x.equal.push(t[0]);
            x.variable.push(t[1]);
            x.var_speedup.push(t[0] / t[1].max(1e-3));
            if let Some(fl) = fl.as_mut() {
                let (f, s) = fl.round(|s| stream(s, page, work))?;
                if s != want {
                    return Err(format!("round {round}: floor checksum {s}, want {want}").into());
                }
                x.floor.push(f);
                x.floor_speedup.push(b / f.max(1e-3));
            }
        }
    }
    ep.barrier(&world)?;
    if me == 0 {
        report(job, client, work, &mut x);
    }
    Ok(())
}

/// The samples of rank 0 (`run`): µs per round, per-round speedups, the strips.
#[derive(Default)]
struct Series {
    blocking: Vec<f64>,
    demand: Vec<f64>,
    speedup: Vec<f64>,
    equal: Vec<f64>,
    variable: Vec<f64>,
    var_speedup: Vec<f64>,
    floor: Vec<f64>,
    floor_speedup: Vec<f64>,
    /// (length, count) of the model's strips and of its variable plan.
    strips: (usize, usize),
    var_strips: (usize, usize),
    floor_core: Option<usize>,
}

/// Rank 0's header and rows (the module's list).
fn report<C: Conduit>(job: &OverlapJob, client: &Client<C>, work: u64, x: &mut Series) {
    let (n, len) = (client.size(), job.args.size);
    let rep = Reporter::new(job.json);
    rep.header(&[format!(
        "gex-perf overlap: {n} ranks, conduit {}, wait policy {:?}, {} B get then {} steps per page of use; value: median of {} rounds; the floor's mover: {}",
        client.conduit_name(),
        client.wait_policy(),
        len,
        work,
        job.args.rounds,
        match (x.floor.is_empty(), x.floor_core) {
            (true, _) => "none (not shared memory)".to_string(),
            (false, Some(c)) => format!("core {c}"),
            (false, None) => "the rank's core".to_string(),
        },
    )]);
    let mut strip = vec![x.strips.0 as f64];
    let mut var_strip = vec![x.var_strips.0 as f64];
    for (name, unit, v, mm) in [
        ("overlap_get_stream_blocking", "us", &mut x.blocking, None),
        ("overlap_get_stream_demand", "us", &mut x.demand, None),
        ("overlap_get_stream_speedup", "x", &mut x.speedup, None),
        (
            "overlap_strip",
            "B",
            &mut strip,
            Some((x.strips.1 as f64, x.strips.1 as f64)),
        ),
        ("overlap_get_stream_equal", "us", &mut x.equal, None),
        ("overlap_get_stream_variable", "us", &mut x.variable, None),
        (
            "overlap_get_stream_variable_speedup",
            "x",
            &mut x.var_speedup,
            None,
        ),
        (
            "overlap_strip_variable",
            "B",
            &mut var_strip,
            Some((x.var_strips.1 as f64, x.var_strips.1 as f64)),
        ),
        ("overlap_get_stream_floor", "us", &mut x.floor, None),
        (
            "overlap_get_stream_floor_speedup",
            "x",
            &mut x.floor_speedup,
            None,
        ),
    ] {
        if v.is_empty() {
            continue;
        }
        let mut r = Record::of_samples(client, name, len, unit, v);
        if let Some((min, max)) = mm {
            (r.min, r.max) = (Some(min), Some(max));
        }
        rep.record(&r);
    }
}
