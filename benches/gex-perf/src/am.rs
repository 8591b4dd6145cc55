//! The `am` benchmarks.
//!
//! Ranks pair up as `(0,1), (2,3), …`; in each pair the even rank (the *leader*)
//! drives and the odd rank (the *follower*) only answers, inside its handlers, while it
//! waits for the leader's STOP. An odd last rank idles. Every pair runs every test
//! point at the same time; points are separated by the collectives layer's barrier. A job of one
//! rank pairs rank 0 with itself (useful on the loopback conduit).
//!
//! A point is measured as: warm-up (which also estimates the time per iteration),
//! then `B` timed batches of `k` iterations; the value is the median batch and min/max
//! the extreme batches. Rank 0 reports the median of the pairs' values and the extremes
//! of their min/max. Nothing is allocated inside the timed loops; handlers only touch
//! atomics captured through an `Arc`. While waiting, a rank whose wait policy is
//! [`WaitPolicy::Spin`] (every rank has a core) polls in a tight loop, like GASNet's
//! `GASNET_BLOCKUNTIL`; otherwise (ranks outnumber cores: spin then block) it waits
//! through [`Endpoint::wait_until`], which sleeps in the kernel after its spin budget.

use crate::report::{Record, Reporter, median};
use crate::{AmArgs, PinMode, TestName, complain};
use gex::core::{Client, Endpoint};
use gex::spi::Conduit;
use gex::{Am, Body, ClientBuilder, EpAddr, HandlerId, Token, WaitPolicy};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Request: Short ping, answered by [`H_PONG_SHORT`].
const H_PING_SHORT: HandlerId = HandlerId::at(128);
/// Reply: Short pong.
const H_PONG_SHORT: HandlerId = HandlerId::at(129);
/// Request: Medium ping, echoed by [`H_PONG_MEDIUM`].
const H_PING_MEDIUM: HandlerId = HandlerId::at(130);
/// Reply: Medium pong.
const H_PONG_MEDIUM: HandlerId = HandlerId::at(131);
/// Request: Long ping, answered by a Long [`H_PONG_LONG`] of the same size.
const H_PING_LONG: HandlerId = HandlerId::at(132);
/// Reply: Long pong.
const H_PONG_LONG: HandlerId = HandlerId::at(133);
/// Request (any category): one flood message; counted, never answered.
const H_FLOOD: HandlerId = HandlerId::at(134);
/// Request: end of a flood; answered by [`H_FLOOD_ACK`] with the count received.
const H_FLOOD_END: HandlerId = HandlerId::at(135);
/// Reply: flood acknowledgement, args = count (low, high).
const H_FLOOD_ACK: HandlerId = HandlerId::at(136);
/// Request: leader → follower, "point `args[0]` is over".
const H_STOP: HandlerId = HandlerId::at(137);
/// Request: leader → rank 0, the pair's result of a point.
const H_RESULT: HandlerId = HandlerId::at(138);

/// Largest Long size of the default sweep.
const LONG_MAX_DEFAULT: usize = 1 << 20;
/// Largest segment gex-perf asks for by itself.
const SEGMENT_MAX: usize = 256 << 20;

/// State the handlers update. Handlers run on the thread that polls, so relaxed
/// atomics suffice; they are atomics only because handlers must be `Send`.
#[derive(Debug, Default)]
struct Counters {
    /// Replies received by the leader (every pong kind).
    pong: AtomicU64,
    /// Flood messages received since the last flood end.
    arrivals: AtomicU64,
    /// Flood acknowledgements received.
    ack_seq: AtomicU64,
    /// Count carried by the last acknowledgement.
    ack_count: AtomicU64,
    /// Highest point id a STOP was received for (+1).
    stop: AtomicU64,
    /// Results from other pairs (rank 0 only).
    results: Mutex<Vec<PairResult>>,
}

#[derive(Debug, Clone, Copy)]
struct PairResult {
    point: u32,
    stats: Stats,
}

/// One pair's figure for a point.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Stats {
    value: f64,
    min: f64,
    max: f64,
}

impl Stats {
    fn to_args(self, point: u32) -> [u32; 7] {
        let (v, lo, hi) = (self.value.to_bits(), self.min.to_bits(), self.max.to_bits());
        [
            point,
            v as u32,
            (v >> 32) as u32,
            lo as u32,
            (lo >> 32) as u32,
            hi as u32,
            (hi >> 32) as u32,
        ]
    }
    fn from_args(a: &[u32]) -> Option<(u32, Stats)> {
        if a.len() != 7 {
            return None;
        }
        let f = |i: usize| f64::from_bits(u64::from(a[i]) | (u64::from(a[i + 1]) << 32));
        Some((
            a[0],
            Stats {
                value: f(1),
                min: f(3),
                max: f(5),
            },
        ))
    }
}

/// How long each phase of a point lasts.
#[derive(Debug, Clone, Copy)]
struct Timing {
    warm: Duration,
    batch: Duration,
    batches: u32,
    iters: Option<u64>,
}

/// One test at one size.
#[derive(Debug, Clone, Copy)]
struct Point {
    test: TestName,
    size: usize,
}

/// This rank's part in the pairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Leader { peer: EpAddr },
    Follower,
    Idle,
}

/// The `am` job: runs on every rank once the client exists.
pub(crate) type AmJob = crate::Run<AmArgs>;

impl AmJob {
    /// The client settings: a segment large enough for the largest Long payload, at
    /// most [`SEGMENT_MAX`] (`GEX_SEGMENT_SIZE` still overrides; larger sizes are
    /// skipped with a note).
    pub(crate) fn builder(&self) -> ClientBuilder<crate::Layers> {
        let largest = self
            .args
            .sizes
            .iter()
            .copied()
            .max()
            .unwrap_or(LONG_MAX_DEFAULT)
            .clamp(LONG_MAX_DEFAULT, SEGMENT_MAX);
        crate::builder().segment_size(largest.next_multiple_of(4096))
    }
}

rank_job!(AmJob, run_am, "gex-perf");

fn register<C: Conduit>(ep: &mut Endpoint<C>, c: &Arc<Counters>) -> Res<()> {
    ep.register_at(H_PING_SHORT.index(), |t: &mut Token<'_>, _am: Am<'_>| {
        t.reply(H_PONG_SHORT, Body::short(&[]))
            .expect("gex-perf: Short reply failed");
    })?;
    ep.register_at(H_PING_MEDIUM.index(), |t: &mut Token<'_>, am: Am<'_>| {
        t.reply(H_PONG_MEDIUM, Body::medium(&[], am.payload()))
            .expect("gex-perf: Medium reply failed");
    })?;
    let me = ep.addr();
    let mut own = Vec::new();
    ep.register_at(H_PING_LONG.index(), move |t: &mut Token<'_>, am: Am<'_>| {
        // Send the bytes that just landed in this segment back to the same offset of
        // the requester's segment, straight from the segment.
        let l = am.long().expect("gex-perf: a Long ping");
        if t.src() == me {
            // `-n 1`: the requester is this endpoint, so the pong writes the very range
            // a view would cover; reply from a copy (the buffer grows once), as any
            // Long to a segment that is also its source must.
            own.resize(l.len(), 0);
            l.read(&mut own);
            t.reply(H_PONG_LONG, Body::long(&[], &own, l.offset()))
                .expect("gex-perf: Long reply failed");
            return;
        }
        // SAFETY: during a Long round trip nothing else writes this range: the leader
        // (another endpoint) sends the next ping only after this pong arrived, and the
        // pong writes the leader's segment, not this one.
        #[allow(unsafe_code)]
        let bytes = unsafe { l.as_slice() };
        t.reply(H_PONG_LONG, Body::long(&[], bytes, l.offset()))
            .expect("gex-perf: Long reply failed");
    })?;
    for h in [H_PONG_SHORT, H_PONG_MEDIUM, H_PONG_LONG] {
        let c = c.clone();
        ep.register_at(h.index(), move |_t: &mut Token<'_>, _am: Am<'_>| {
            c.pong.fetch_add(1, Relaxed);
        })?;
    }
    let cc = c.clone();
    ep.register_at(H_FLOOD.index(), move |_t: &mut Token<'_>, _am: Am<'_>| {
        cc.arrivals.fetch_add(1, Relaxed);
    })?;
    let cc = c.clone();
    ep.register_at(
        H_FLOOD_END.index(),
        move |t: &mut Token<'_>, _am: Am<'_>| {
            // Messages from one sender are delivered in order: every flood message has
            // been counted by now.
            let n = cc.arrivals.swap(0, Relaxed);
            t.reply(H_FLOOD_ACK, Body::short(&[n as u32, (n >> 32) as u32]))
                .expect("gex-perf: ack reply failed");
        },
    )?;
    let cc = c.clone();
    ep.register_at(
        H_FLOOD_ACK.index(),
        move |_t: &mut Token<'_>, am: Am<'_>| {
            let a = am.args();
            cc.ack_count
                .store(u64::from(a[0]) | (u64::from(a[1]) << 32), Relaxed);
            cc.ack_seq.fetch_add(1, Relaxed);
        },
    )?;
    let cc = c.clone();
    ep.register_at(H_STOP.index(), move |_t: &mut Token<'_>, am: Am<'_>| {
        cc.stop.fetch_max(u64::from(am.args()[0]) + 1, Relaxed);
    })?;
    let cc = c.clone();
    ep.register_at(H_RESULT.index(), move |_t: &mut Token<'_>, am: Am<'_>| {
        let (point, stats) =
            Stats::from_args(am.args()).expect("gex-perf: malformed result message");
        cc.results
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(PairResult { point, stats });
    })?;
    Ok(())
}

/// Powers of two from `lo` up to `hi` (inclusive), plus `hi` itself when it is not one.
fn pow2_sweep(lo: usize, hi: usize) -> Vec<usize> {
    let mut v = Vec::new();
    let mut s = lo;
    while s <= hi {
        v.push(s);
        s *= 2;
    }
    if hi >= lo && v.last() != Some(&hi) {
        v.push(hi);
    }
    v
}

/// The test points, identical on every rank.
fn plan(args: &AmArgs, max_medium: usize, max_long: usize) -> (Vec<Point>, Vec<String>) {
    let tests: Vec<TestName> = if args.tests.is_empty() {
        TestName::ALL.to_vec()
    } else {
        TestName::ALL
            .iter()
            .copied()
            .filter(|t| args.tests.contains(t))
            .collect()
    };
    let long_top = max_long.min(LONG_MAX_DEFAULT);
    let mut points = Vec::new();
    let mut notes = Vec::new();
    for t in tests {
        let (limit, default): (usize, Vec<usize>) = match (t, args.quick) {
            (TestName::ShortRtt | TestName::ShortFlood, _) => {
                points.push(Point { test: t, size: 0 });
                continue;
            }
            (TestName::MediumRtt, false) => (max_medium, pow2_sweep(8, max_medium)),
            (TestName::MediumRtt, true) => (max_medium, vec![8, 4096]),
            (TestName::LongRtt, false) => (max_long, pow2_sweep(8, long_top)),
            (TestName::LongRtt, true) => (max_long, vec![8, 4096, 65536]),
            (TestName::MediumFloodBw, false) => (max_medium, pow2_sweep(4096, max_medium)),
            (TestName::MediumFloodBw, true) => (max_medium, vec![max_medium.min(65536)]),
            (TestName::LongFloodBw, false) => (max_long, pow2_sweep(4096, long_top)),
            (TestName::LongFloodBw, true) => (max_long, vec![65536]),
        };
        let sizes = if args.sizes.is_empty() {
            default
        } else {
            args.sizes.clone()
        };
        for s in sizes {
            if s <= limit {
                points.push(Point { test: t, size: s });
            } else {
                notes.push(format!("{}: size {s} skipped (limit {limit})", t.name()));
            }
        }
    }
    (points, notes)
}

fn run_am<C: Conduit>(job: &AmJob, client: &Client<C>) -> Res<()> {
    let (me, n) = (client.rank(), client.size());
    let mut ep = client.endpoint(0)?;
    let counters = Arc::new(Counters::default());
    register(&mut ep, &counters)?;

    // Decide before pinning: the affinity mask shrinks to one core afterwards.
    let cores = crate::pin::allowed_cores()?.len();
    let neighbours = client.neighbours();
    let on_host = neighbours.len();
    // Rank among the ranks of this host: consecutive ranks (a pair) land on
    // different cores.
    let local = neighbours.iter().position(|&r| r == me).unwrap_or(0) as u32;
    let pinned = match job.pin {
        PinMode::On => true,
        PinMode::Off => false,
        PinMode::Auto => true,
    }
    .then(|| crate::pin::pin_to_nth_allowed(local))
    .transpose()?;

    let role = if n == 1 {
        Role::Leader { peer: ep.addr() }
    } else if me % 2 == 0 && me + 1 < n {
        Role::Leader {
            peer: EpAddr::rank(me + 1),
        }
    } else if me % 2 == 1 {
        Role::Follower
    } else {
        Role::Idle
    };
    let pairs = (n / 2).max(1);
    // Every rank computes the same plan from the limits towards rank 1 (or itself).
    let probe = EpAddr::rank(1 % n);
    let (points, notes) = plan(&job.args, ep.max_medium(probe), ep.max_long(probe));
    let (warm, batch, batches) = if job.args.quick {
        (Duration::from_millis(5), Duration::from_millis(4), 5)
    } else {
        (Duration::from_millis(40), Duration::from_millis(50), 7)
    };
    let timing = Timing {
        warm,
        batch,
        batches: job.args.batches.unwrap_or(batches),
        iters: job.args.iters,
    };

    let reporter = Reporter::new(job.json);
    let provider = crate::report::provider_of(client);
    if me == 0 {
        let mut lines = vec![
            format!(
                "gex-perf am: {n} ranks as {} ({pairs} pair{}), conduit {}, wait policy {:?}, pinning {}",
                crate::rank_kind(),
                if pairs == 1 { "" } else { "s" },
                match &provider {
                    Some(p) => format!("{} ({p})", client.conduit_name()),
                    None => client.conduit_name().to_string(),
                },
                ep.wait_policy(),
                match pinned {
                    Some(cpu) =>
                        format!("on (rank 0 on core {cpu}; {on_host} ranks on {cores} cores)"),
                    None => format!("off ({on_host} ranks on {cores} cores)"),
                }
            ),
            format!(
                "value: median of {} batches{}; min/max: extreme batches; us per round trip or message, GB/s = 1e9 B/s",
                timing.batches,
                if pairs > 1 {
                    " (median over pairs)"
                } else {
                    ""
                }
            ),
        ];
        if job.json {
            notes.iter().for_each(|n| complain(n));
        } else {
            lines.extend(notes);
        }
        reporter.header(&lines);
    }

    let buf = vec![0xa5u8; points.iter().map(|p| p.size).max().unwrap_or(0).max(8)];
    let spin = ep.wait_policy() == WaitPolicy::Spin;
    let mut bench = Bench {
        ep,
        c: counters,
        buf,
        timing,
        spin,
    };
    for (id, point) in points.iter().enumerate() {
        let id = id as u32;
        bench.barrier()?;
        match role {
            Role::Leader { peer } => {
                let stats = bench.measure(*point, peer)?;
                if peer.rank != me {
                    bench.ep.request(peer, H_STOP, Body::short(&[id]))?;
                }
                if me != 0 {
                    bench
                        .ep
                        .request(EpAddr::rank(0), H_RESULT, Body::short(&stats.to_args(id)))?;
                } else {
                    let c = bench.c.clone();
                    let others = pairs as usize - 1;
                    bench.ep.wait_until(|| {
                        c.results.lock().unwrap_or_else(|e| e.into_inner()).len() >= others
                    });
                    let mut all: Vec<Stats> =
                        std::mem::take(&mut *c.results.lock().unwrap_or_else(|e| e.into_inner()))
                            .into_iter()
                            .map(|r| {
                                if r.point == id {
                                    Ok(r.stats)
                                } else {
                                    Err(format!(
                                        "result of point {} arrived during point {id}",
                                        r.point
                                    ))
                                }
                            })
                            .collect::<Result<_, _>>()?;
                    all.push(stats);
                    let min = all.iter().map(|s| s.min).fold(f64::INFINITY, f64::min);
                    let max = all.iter().map(|s| s.max).fold(f64::NEG_INFINITY, f64::max);
                    let value = median(&mut all.iter().map(|s| s.value).collect::<Vec<_>>());
                    let (name, unit) = (point.test.name(), point.test.unit());
                    reporter.record(&Record {
                        min: Some(min),
                        max: Some(max),
                        ..Record::of(client, name, point.size, value, unit)
                    });
                }
            }
            Role::Follower => {
                let c = bench.c.clone();
                let want = u64::from(id) + 1;
                wait(&mut bench.ep, bench.spin, || c.stop.load(Relaxed) >= want);
            }
            Role::Idle => {}
        }
    }
    bench.barrier()?;
    Ok(())
}

/// The leader's side of the measurements.
struct Bench<C: Conduit> {
    ep: gex::core::OwnedEndpoint<C>,
    c: Arc<Counters>,
    buf: Vec<u8>,
    timing: Timing,
    /// Poll in a tight loop while waiting (the wait policy is spin).
    spin: bool,
}

/// Waits until `cond` holds, running handlers meanwhile, under the endpoint's wait
/// policy ([`Endpoint::wait_until`]: under spin it pauses only every few polls and
/// yields after a long fruitless spin).
#[inline(always)]
fn wait<C: Conduit>(ep: &mut Endpoint<C>, _spin: bool, cond: impl FnMut() -> bool) {
    ep.wait_until(cond);
}

impl<C: Conduit> Bench<C> {
    /// The collectives layer's barrier over every rank (separates test points).
    fn barrier(&mut self) -> Res<()> {
        crate::world_barrier(&mut self.ep)
    }

    /// Measures one point against `peer`; values in the test's unit.
    fn measure(&mut self, p: Point, peer: EpAddr) -> Res<Stats> {
        let s = p.size;
        // Seconds per iteration of each batch.
        let per_iter = match p.test {
            TestName::ShortRtt => self.batches(|b, k| b.short_rtt(peer, k))?,
            TestName::MediumRtt => self.batches(|b, k| b.medium_rtt(peer, s, k))?,
            TestName::LongRtt => self.batches(|b, k| b.long_rtt(peer, s, k))?,
            TestName::ShortFlood => self.batches(|b, k| b.flood(peer, Kind::Short, 0, k))?,
            TestName::MediumFloodBw => self.batches(|b, k| b.flood(peer, Kind::Medium, s, k))?,
            TestName::LongFloodBw => self.batches(|b, k| b.flood(peer, Kind::Long, s, k))?,
        };
        let mut vals: Vec<f64> = match p.test.unit() {
            "GB/s" => per_iter.iter().map(|t| s as f64 / t / 1e9).collect(),
            _ => per_iter.iter().map(|t| t * 1e6).collect(),
        };
        let min = vals.iter().copied().fold(f64::INFINITY, f64::min);
        let max = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Ok(Stats {
            value: median(&mut vals),
            min,
            max,
        })
    }

    /// Warm-up (estimating the time of one iteration), then the timed batches.
    fn batches(&mut self, mut op: impl FnMut(&mut Self, u64) -> Res<()>) -> Res<Vec<f64>> {
        let t = self.timing;
        let iters = match t.iters {
            Some(k) => {
                op(self, (k / 10).max(1))?;
                k.div_ceil(u64::from(t.batches)).max(1)
            }
            None => {
                let mut k = 1u64;
                let mut spent = Duration::ZERO;
                let per = loop {
                    let t0 = Instant::now();
                    op(self, k)?;
                    let e = t0.elapsed();
                    spent += e;
                    if spent >= t.warm || k >= 1 << 30 {
                        break e.as_secs_f64() / k as f64;
                    }
                    k *= 2;
                };
                ((t.batch.as_secs_f64() / per.max(1e-9)) as u64).clamp(1, 1 << 30)
            }
        };
        let mut out = Vec::with_capacity(t.batches as usize);
        for _ in 0..t.batches {
            let t0 = Instant::now();
            op(self, iters)?;
            out.push(t0.elapsed().as_secs_f64() / iters as f64);
        }
        Ok(out)
    }

    fn short_rtt(&mut self, peer: EpAddr, k: u64) -> Res<()> {
        self.round_trips(peer, H_PING_SHORT, 0, k, |_| Body::short(&[]))
    }

    fn medium_rtt(&mut self, peer: EpAddr, size: usize, k: u64) -> Res<()> {
        self.round_trips(peer, H_PING_MEDIUM, size, k, |p| Body::medium(&[], p))
    }

    fn long_rtt(&mut self, peer: EpAddr, size: usize, k: u64) -> Res<()> {
        self.round_trips(peer, H_PING_LONG, size, k, |p| Body::long(&[], p, 0))
    }

    /// `k` round trips to `peer`: each sends `body` of the first `size` bytes of the
    /// buffer to `handler` and waits for the pong it answers. Inlined into each caller,
    /// so every loop is compiled with its own handler and category, as when each was
    /// written out.
    #[inline(always)]
    fn round_trips(
        &mut self,
        peer: EpAddr,
        handler: HandlerId,
        size: usize,
        k: u64,
        body: impl for<'b> Fn(&'b [u8]) -> Body<'b>,
    ) -> Res<()> {
        let c = &*self.c;
        let body = body(&self.buf[..size]);
        let start = c.pong.load(Relaxed);
        for want in start + 1..=start + k {
            self.ep.request(peer, handler, body)?;
            wait(&mut self.ep, self.spin, || c.pong.load(Relaxed) >= want);
        }
        Ok(())
    }

    /// `k` back-to-back requests of one category, then a flood end and its ack.
    fn flood(&mut self, peer: EpAddr, kind: Kind, size: usize, k: u64) -> Res<()> {
        let c = &*self.c;
        let payload = &self.buf[..size];
        let ep = &mut self.ep;
        match kind {
            Kind::Short => {
                for _ in 0..k {
                    ep.request(peer, H_FLOOD, Body::short(&[]))?;
                }
            }
            Kind::Medium => {
                for _ in 0..k {
                    ep.request(peer, H_FLOOD, Body::medium(&[], payload))?;
                }
            }
            Kind::Long => {
                for _ in 0..k {
                    ep.request(peer, H_FLOOD, Body::long(&[], payload, 0))?;
                }
            }
        }
        let want = c.ack_seq.load(Relaxed) + 1;
        ep.request(peer, H_FLOOD_END, Body::short(&[]))?;
        wait(ep, self.spin, || c.ack_seq.load(Relaxed) >= want);
        let got = c.ack_count.load(Relaxed);
        if got != k {
            return Err(format!("flood: {peer} acknowledged {got} messages, {k} were sent").into());
        }
        Ok(())
    }
}

/// AM category of a flood.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Short,
    Medium,
    Long,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweeps() {
        assert_eq!(pow2_sweep(8, 64), vec![8, 16, 32, 64]);
        assert_eq!(
            pow2_sweep(4096, 65000),
            vec![4096, 8192, 16384, 32768, 65000]
        );
        assert!(pow2_sweep(4096, 100).is_empty());
    }

    #[test]
    fn stats_round_trip() {
        let s = Stats {
            value: 0.4375,
            min: 0.25,
            max: 1e9,
        };
        assert_eq!(Stats::from_args(&s.to_args(42)), Some((42, s)));
    }

    #[test]
    fn plan_filters_and_limits() {
        let args = AmArgs {
            quick: false,
            sizes: vec![8, 1 << 20],
            iters: None,
            batches: None,
            tests: vec![TestName::MediumRtt, TestName::ShortRtt],
        };
        let (points, notes) = plan(&args, 65536, 1 << 26);
        let names: Vec<_> = points.iter().map(|p| (p.test.name(), p.size)).collect();
        assert_eq!(names, vec![("am_short_rtt", 0), ("am_medium_rtt", 8)]);
        assert_eq!(notes.len(), 1);
    }

    /// The Long round trip of `gex-perf -n 1`: the leader is its own peer, so the pong
    /// goes to the very range of its own segment the ping landed in. Holding a view of
    /// that range (`LongPayload::as_slice`) while the reply writes it breaks the view's
    /// `# Safety`; Miri reports the write under a live shared reference (run
    /// `cargo +nightly miri test -p gex-perf --bin gex-perf self_long` on a build where
    /// Miri can run the loopback conduit: no `sigaction` at init, a segment pointer
    /// that covers the whole segment; it failed before the handler replied from a copy
    /// in that case).
    #[test]
    fn self_long_round_trip_holds_no_view_of_what_its_reply_writes() {
        let client = ClientBuilder::new()
            .segment_size(4096)
            .init::<gex::conduit::Loopback>(Box::new(gex::boot::Singleton::new()))
            .unwrap();
        let mut ep = client.endpoint(0).unwrap();
        let c = Arc::new(Counters::default());
        register(&mut ep, &c).unwrap();
        let me = ep.addr();
        let ping = [7u8; 64];
        for want in 1..=2 {
            ep.request(me, H_PING_LONG, Body::long(&[], &ping, 128))
                .unwrap();
            ep.wait_until(|| c.pong.load(Relaxed) >= want);
        }
        let mut back = [0u8; 64];
        ep.segment().read(128, &mut back).unwrap();
        assert_eq!(back, ping);
    }
}
