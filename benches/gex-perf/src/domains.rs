//! The `domains` mode (seed 002's communication domains): AM message rate of N threads
//! of one rank, each driving its own endpoint.
//!
//! Every rank has as many endpoints as the largest N asked (`--eps`): endpoint 0 made
//! at init and the others made at run time ([`Client::create_endpoint`]) when the
//! conduit can (`Client::runtime_endpoints`; smp and loopback), else all made at init
//! (`--at-init` forces that; the header says which). For each N,
//! N worker threads of the rank each take endpoint `i`, register a counting handler on
//! it and, for `--seconds`, send batches of `--window` Short AMs to that same endpoint
//! (`(me, i)`: the messages travel through the conduit's ring from the endpoint to
//! itself) and poll until the batch has been handled. Nothing is shared between the
//! workers but the client: a worker never touches another endpoint's queues (the AM
//! poll mask), so on a machine with N free cores the aggregate rate should grow with N,
//! and with more threads than cores it should not drop.
//!
//! Rank 0 reports, per N, `domains_rate` (messages/s handled by all its workers
//! together: the sum over workers of each worker's messages over its own time; `size`
//! is N) and `domains_speedup` (that rate over the N = 1 rate of the same run). Run it
//! on one rank (`gex-perf -n 1 domains`): more ranks add more threads on the same cores.

use crate::report::{Record, Reporter};
use crate::{PinMode, complain};
use gex::core::Client;
use gex::spi::Conduit;
use gex::{Am, Body, ClientBuilder, EpAddr, Injected, Token};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Options of the `domains` mode.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct DomainsArgs {
    /// Worker thread counts to measure, comma separated (each worker drives its own
    /// endpoint; the N = 1 point is always measured first, as the reference).
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "1,2,4",
          value_parser = clap::value_parser!(u16).range(1..=256))]
    pub(crate) eps: Vec<u16>,
    /// Seconds every worker sends for, per N.
    #[arg(long, value_name = "S", default_value_t = 1.0)]
    pub(crate) seconds: f64,
    /// Messages a worker sends before it polls them all back.
    #[arg(long, value_name = "K", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub(crate) window: u32,
    /// Make every endpoint at init (`ClientBuilder::endpoints`) instead of making
    /// those past endpoint 0 at run time.
    #[arg(long)]
    pub(crate) at_init: bool,
}

/// A `domains` run.
pub(crate) type DomainsJob = crate::Run<DomainsArgs>;

impl DomainsJob {
    /// Default layers, with as many endpoints as the largest N made at init
    /// (`--at-init`), or endpoint 0 and the capacity for the rest.
    pub(crate) fn builder(&self) -> ClientBuilder<crate::Layers> {
        let most = self.counts().into_iter().max().unwrap_or(1);
        if self.args.at_init {
            crate::builder().endpoints(most)
        } else {
            crate::builder().max_endpoints(most)
        }
    }

    /// The thread counts, 1 first, without repeats.
    fn counts(&self) -> Vec<u16> {
        let mut v = vec![1u16];
        for &n in &self.args.eps {
            if !v.contains(&n) {
                v.push(n);
            }
        }
        v
    }
}

rank_job!(DomainsJob, run, "gex-perf domains");

/// One worker: drives endpoint `ep` for `secs`; returns (messages, seconds).
fn drive<C: Conduit>(
    ep: &mut gex::core::Endpoint<C>,
    me: u32,
    window: u32,
    secs: Duration,
    start: &std::sync::Barrier,
) -> Res<(u64, f64)> {
    // On its own cache line: the workers' counters are small allocations that the
    // allocator placed side by side (two of 8 workers' counters 32 bytes apart), and
    // two workers on different cores then bounced one line on every message: a drop
    // of the 4- and 8-worker rates that was the benchmark's, not gex's.
    let got = Arc::new(gex_sync::CachePadded::new(AtomicU64::new(0)));
    let g = got.clone();
    let h = ep.register(move |_t: &mut Token<'_>, am: Am<'_>| {
        g.fetch_add(
            u64::from(am.args().first().copied().unwrap_or(0) == 7),
            Relaxed,
        );
    })?;
    let dst = EpAddr {
        rank: me,
        ep: ep.index(),
    };
    start.wait();
    let t0 = Instant::now();
    let mut sent = 0u64;
    while t0.elapsed() < secs {
        for _ in 0..window {
            while ep.try_request(dst, h, Body::short(&[7]))? == Injected::WouldBlock {
                ep.poll();
            }
            sent += 1;
        }
        while got.load(Relaxed) < sent {
            ep.poll();
        }
    }
    let t = t0.elapsed().as_secs_f64();
    let n = got.load(Relaxed);
    if n != sent {
        return Err(format!("endpoint {}: {n} messages handled, {sent} sent", dst.ep).into());
    }
    let _ = h;
    Ok((n, t))
}

fn run<C: Conduit>(job: &DomainsJob, client: &Client<C>) -> Res<()> {
    let me = client.rank();
    let counts = job.counts();
    let most = counts.iter().copied().max().unwrap_or(1);
    let made = client.endpoint_count();
    let mut eps = (0..made.min(most))
        .map(|i| client.endpoint(i))
        .collect::<Result<Vec<_>, _>>()?;
    let at_run_time = eps.len() < most as usize;
    while eps.len() < most as usize {
        eps.push(
            client
                .create_endpoint()
                .map_err(|e| format!("endpoint {} at run time (try --at-init): {e}", eps.len()))?,
        );
    }
    let cores = crate::pin::allowed_cores()?;
    let secs = Duration::from_secs_f64(job.args.seconds.clamp(0.01, 3600.0));
    let rep = Reporter::new(job.json);
    if me == 0 {
        rep.header(&[format!(
            "gex-perf domains: {} rank(s), conduit {}, {} core(s), window {}, endpoints past 0 made {}",
            client.size(),
            client.conduit_name(),
            cores.len(),
            job.args.window,
            if at_run_time { "at run time" } else { "at init" }
        )]);
    }
    let mut base = None;
    for &n in &counts {
        let start = std::sync::Barrier::new(n as usize);
        let results: Vec<Result<(u64, f64), String>> = std::thread::scope(|s| {
            let hs: Vec<_> = eps[..n as usize]
                .iter_mut()
                .enumerate()
                .map(|(i, ep)| {
                    let start = &start;
                    let pin = job.pin;
                    let window = job.args.window;
                    s.spawn(move || -> Result<(u64, f64), String> {
                        if pin != PinMode::Off {
                            crate::pin::pin_to_nth_allowed(i as u32)?;
                        }
                        drive(ep, me, window, secs, start).map_err(|e| e.to_string())
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("a worker panicked".to_string()))
                })
                .collect()
        });
        let mut rate = 0.0;
        for r in results {
            let (m, t) = r?;
            rate += m as f64 / t;
        }
        let base = *base.get_or_insert(rate);
        if me == 0 {
            for (name, value, unit) in [
                ("domains_rate", rate, "msg/s"),
                ("domains_speedup", rate / base, "x"),
            ] {
                rep.record(&Record::of(client, name, n as usize, value, unit));
            }
        }
    }
    if eps.is_empty() {
        complain("domains: no endpoint");
    }
    Ok(())
}
