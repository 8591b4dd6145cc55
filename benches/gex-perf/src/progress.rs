//! The `progress` benchmark: how fast a peer's AM-path get is served while the target
//! computes without calling gex.
//!
//! Rank 1 (the *target*) writes the round number into its segment, then computes for
//! `--compute-ms` (10 ms by default) of wall-clock time without any gex call: chunks
//! of dependent arithmetic, the clock read (vDSO, no system call) between chunks of
//! about 4 µs. A time bound, not a fixed amount of work calibrated beforehand: this
//! machine's CPU speed changes under it (a calibrated loop took 3 to 13 ms per round
//! for a nominal 10). Rank 0 (the *origin*) sleeps 1 ms into that computation, then times
//! one blocking 8-byte get from the target's segment on the active-message path
//! (`GEX_RMA_PATH=am` is set for this run, so even smp, which could copy directly,
//! sends a request that a handler of the target must answer). Without a progress
//! thread the request waits until the target's next poll, after its computation:
//! about `compute-ms` minus the 1 ms head start. With `--thread`
//! ([`ClientBuilder::progress_thread`](gex::ClientBuilder::progress_thread)) the
//! target's progress thread runs the handler at once.
//!
//! Figures (rank 0; median of the rounds, min/max the extreme rounds):
//! - `progress_get_lat` (µs): the get's latency, with `algorithm` = `thread` or
//!   `no-thread`;
//! - `progress_compute_ms` (ms): the target's computation per round, as timed by the
//!   target (about `--compute-ms`);
//! - `progress_compute_rate` (M steps/s): the target's arithmetic rate while it
//!   computes, the cost of the progress thread to the computing rank (it shares the
//!   cores): compare the `thread` and `no-thread` rows of one run.
//!
//! Every got value is checked against the round number the target wrote.

use crate::report::{Record, Reporter};
use gex::coll::CollExt;
use gex::core::Client;
use gex::rma::{GlobalPtr, RmaExt};
use gex::spi::Conduit;
use gex::{Blocking, ClientBuilder, EpAddr};
use std::time::{Duration, Instant};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Options of the `progress` benchmark.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ProgressArgs {
    /// Start a progress thread on every rank (the builder option; GEX_PROGRESS_THREAD=1
    /// does the same).
    #[arg(long)]
    pub(crate) thread: bool,
    /// Length of the target's computation per round, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(2..=10_000))]
    pub(crate) compute_ms: u64,
    /// Rounds (one get each).
    #[arg(long, value_name = "N", default_value_t = 21, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub(crate) rounds: u32,
}

/// A `progress` run.
pub(crate) type ProgressJob = crate::Run<ProgressArgs>;

impl ProgressJob {
    /// Default layers, the AM path forced for RMA, the progress thread as asked.
    pub(crate) fn builder(&self) -> ClientBuilder<crate::Layers> {
        let mut cfg = gex::config::Config::from_env();
        cfg.set("GEX_RMA_PATH", "am");
        crate::builder()
            .config(cfg)
            .segment_size(4096)
            .progress_thread(self.args.thread)
    }
}

rank_job!(ProgressJob, run, "gex-perf");

/// `iters` steps of a dependent multiply-add chain: work the optimiser cannot remove.
#[inline(never)]
fn compute(iters: u64) -> u64 {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..iters {
        x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
    }
    x
}

/// Steps of [`compute`] between two looks at the clock (a few µs).
const CHUNK: u64 = 4096;

/// Computes for `d` of wall-clock time; returns (elapsed, steps done).
fn compute_for(d: Duration) -> (Duration, u64) {
    let t0 = Instant::now();
    let mut steps = 0u64;
    loop {
        std::hint::black_box(compute(CHUNK));
        steps += CHUNK;
        let e = t0.elapsed();
        if e >= d {
            return (e, steps);
        }
    }
}

fn run<C: Conduit>(job: &ProgressJob, client: &Client<C>) -> Res<()> {
    let (me, n) = (client.rank(), client.size());
    // Pins this (the main) thread only: the progress thread, started by the client,
    // keeps the process's full mask.
    let (mut ep, world) = crate::two_or_more(client, "progress", job.pin)?;
    let compute_time = Duration::from_millis(job.args.compute_ms);
    let word = GlobalPtr::<u64>::new(EpAddr::rank(1), 0);
    let (mut lat, mut work, mut rate) = (Vec::new(), Vec::new(), Vec::new());
    let mut got = [0u64; 1];
    for round in 1..=u64::from(job.args.rounds) {
        // The target writes the round's value; the barrier after the round keeps it
        // there until the origin's get has returned.
        if me == 1 {
            ep.segment().write(0, &round.to_ne_bytes())?;
        }
        ep.barrier(&world)?;
        match me {
            1 => {
                let (took, steps) = compute_for(compute_time);
                work.push(took.as_secs_f64() * 1e3);
                rate.push(steps as f64 / took.as_secs_f64() / 1e6);
            }
            0 => {
                std::thread::sleep(Duration::from_millis(1));
                let t0 = Instant::now();
                ep.get(&mut got[..], word, Blocking)?;
                lat.push(t0.elapsed().as_secs_f64() * 1e6);
                if got[0] != round {
                    return Err(format!("round {round}: the get returned {}", got[0]).into());
                }
            }
            _ => {}
        }
        ep.barrier(&world)?;
    }
    // The target's compute times and rates travel to rank 0 through an exchange.
    let mine: Vec<u8> = work
        .iter()
        .chain(rate.iter())
        .flat_map(|w| w.to_ne_bytes())
        .collect();
    let all = ep.exchange(&world, &mine)?;
    ep.barrier(&world)?;
    if me == 0 {
        let theirs: Vec<f64> = all
            .get(1)
            .map(|b| {
                b.chunks_exact(8)
                    .map(|c| f64::from_ne_bytes(c.try_into().unwrap_or([0; 8])))
                    .collect()
            })
            .unwrap_or_default();
        let (w, r) = theirs.split_at(theirs.len() / 2);
        let (mut work, mut rate) = (w.to_vec(), r.to_vec());
        let label = if job.args.thread {
            "thread"
        } else {
            "no-thread"
        };
        let rep = Reporter::new(job.json);
        rep.header(&[format!(
            "gex-perf progress: {n} ranks, conduit {}, target computes {} ms per round without gex, progress thread {}; value: median of {} rounds",
            client.conduit_name(),
            job.args.compute_ms,
            if job.args.thread { "on" } else { "off" },
            job.args.rounds
        )]);
        for (name, unit, v) in [
            ("progress_get_lat", "us", &mut lat),
            ("progress_compute_ms", "ms", &mut work),
            ("progress_compute_rate", "Msteps/s", &mut rate),
        ] {
            rep.record(&Record {
                algorithm: Some(label.into()),
                ..Record::of_samples(client, name, 8, unit, v)
            });
        }
    }
    Ok(())
}
