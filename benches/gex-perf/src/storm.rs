//! The `storm` mode: every rank floods Medium active messages of mixed sizes to random
//! peers while it serves the messages of every other rank (many to many), for a fixed
//! time or a fixed count, and every payload is verified.
//!
//! Each rank draws, from its own generator (seeded with `--seed` and the rank), a table
//! of [`TABLE`] messages: a size (log-uniform from 8 B to the Medium limit, so small
//! and large messages mix), an offset into a buffer of random bytes, and the payload's
//! checksum. It then sends table entries in turn, each to a peer drawn at random (never
//! itself, unless it is alone), with `try_request`: an injection the conduit
//! refuses for back-pressure ([`Injected::WouldBlock`]) is retried with
//! [`layer::retry`] (which polls, so the rank serves its peers meanwhile) and the time
//! from the first refusal to the accepted injection is recorded in a log-linear
//! histogram (no allocation in the loop). Handlers only count and check: the checksum
//! and length carried in the arguments must match the payload.
//!
//! At the end every rank says how many messages it sent to each peer (an allreduce of
//! the count matrix), waits until it has received them all, and the totals (messages,
//! errors, the histograms, the slowest sending phase) are reduced to rank 0, which
//! reports them. Lost, duplicated or corrupted messages are errors, and any error fails
//! the job.

use crate::complain;
use crate::report::{Record, Reporter};
use gex::coll::{Allreduce, BuiltinOp, CollExt};
use gex::core::layer::{self, Retry};
use gex::core::{Client, Endpoint};
use gex::spi::Conduit;
use gex::{Am, Blocking, Body, ClientBuilder, EpAddr, Injected, Team, Token};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Options of the `storm` mode.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct StormArgs {
    /// How long every rank sends, in seconds (its own clock, from a common barrier);
    /// ignored with --count.
    #[arg(long, value_name = "S", default_value_t = 2.0, value_parser = parse_seconds)]
    pub(crate) seconds: f64,
    /// Send exactly this many messages per rank instead of sending for --seconds.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) count: Option<u64>,
    /// Largest payload (default and upper bound: the Medium limit towards every peer).
    #[arg(long, value_name = "BYTES", value_parser = crate::parse_size)]
    pub(crate) max_size: Option<usize>,
    /// The seed and test aid `soak` has too.
    #[command(flatten)]
    pub(crate) verified: crate::VerifiedArgs,
}

fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 7.0 * 24.0 * 3600.0 => Ok(v),
        _ => Err(format!(
            "`{s}` is not a duration in seconds (0 < S ≤ a week)"
        )),
    }
}

/// A `storm` run.
pub(crate) type StormJob = crate::Run<StormArgs>;

impl StormJob {
    /// Default layers (the collectives count and reduce at the end).
    pub(crate) fn builder(&self) -> ClientBuilder<crate::Layers> {
        crate::builder()
    }
}

rank_job!(StormJob, run, "gex-perf storm");

/// Messages in a rank's table (sent in turn, to random peers).
const TABLE: usize = 4096;
/// Smallest payload.
const MIN_SIZE: usize = 8;
/// Errors printed before the rest are only counted.
const PRINT_ERRORS: u64 = 10;

/// A 64-bit checksum of `b` (word at a time; the length is mixed in).
pub(crate) fn checksum(b: &[u8]) -> u64 {
    let mut h = 0x243f_6a88_85a3_08d3u64 ^ b.len() as u64;
    let mut chunks = b.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        h = (h.rotate_left(23) ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    let mut tail = [0u8; 8];
    tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    h = (h.rotate_left(23) ^ u64::from_le_bytes(tail)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^ (h >> 29)
}

/// Buckets of the wait histogram: exact below 64 ns, then 8 per power of two up to
/// 2^40 ns (about 18 minutes); longer waits land in the last bucket.
pub(crate) const BUCKETS: usize = 64 + 34 * 8;

/// The bucket of a wait of `ns` nanoseconds.
pub(crate) fn bucket(ns: u64) -> usize {
    if ns < 64 {
        return ns as usize;
    }
    let e = 63 - ns.leading_zeros() as usize; // 6.. for ns >= 64
    let sub = ((ns >> (e - 3)) & 7) as usize;
    (64 + (e - 6) * 8 + sub).min(BUCKETS - 1)
}

/// The middle of bucket `b`, in nanoseconds.
pub(crate) fn bucket_mid(b: usize) -> f64 {
    if b < 64 {
        return b as f64;
    }
    let (e, sub) = ((b - 64) / 8 + 6, (b - 64) % 8);
    let lo = (1u64 << e) + ((sub as u64) << (e - 3));
    lo as f64 + (1u64 << (e - 3)) as f64 / 2.0
}

/// The `q`-quantile (0..=1) of a histogram, in nanoseconds (the middle of the bucket
/// holding it); `None` if it is empty.
pub(crate) fn quantile(h: &[u64], q: f64) -> Option<f64> {
    let total: u64 = h.iter().sum();
    if total == 0 {
        return None;
    }
    // The rank of the quantile, 1-based: the smallest r with r >= q * total.
    let want = ((q * total as f64).ceil() as u64).clamp(1, total);
    let mut seen = 0;
    for (b, &c) in h.iter().enumerate() {
        seen += c;
        if seen >= want {
            return Some(bucket_mid(b));
        }
    }
    None
}

/// State the handler shares with the driver.
struct Shared {
    /// Messages received, by source rank.
    got: Vec<AtomicU64>,
    errors: AtomicU64,
}

impl Shared {
    fn error(&self, what: &str) {
        if self.errors.fetch_add(1, Relaxed) < PRINT_ERRORS {
            complain(&format!("storm: {what}"));
        }
    }
}

/// One message of a rank's table.
#[derive(Clone, Copy)]
struct Msg {
    off: usize,
    len: usize,
    sum: u64,
}

/// A rank's table of messages: `TABLE` entries with sizes log-uniform over
/// `[MIN_SIZE, max]` at random offsets into random bytes (returned with it), each with
/// its checksum.
fn table(rng: &mut SmallRng, max: usize) -> (Vec<u8>, Vec<Msg>) {
    let mut bytes = vec![0u8; max + 4096];
    rng.fill(&mut bytes[..]);
    let (lo_bits, hi_bits) = (MIN_SIZE.ilog2(), max.ilog2());
    let table: Vec<Msg> = (0..TABLE)
        .map(|_| {
            let e = rng.random_range(lo_bits..=hi_bits);
            let len = rng
                .random_range((1usize << e)..(1usize << (e + 1)))
                .clamp(MIN_SIZE, max);
            let off = rng.random_range(0..=bytes.len() - len);
            Msg {
                off,
                len,
                sum: checksum(&bytes[off..off + len]),
            }
        })
        .collect();
    (bytes, table)
}

/// Every rank's counts of messages towards every rank (a row per source), then per
/// source: the messages that arrived here against those it sent (waiting up to 30 s
/// for late ones), and no more once everything sent has arrived; a difference is an
/// error counted in `sh`.
fn check_arrivals<C: Conduit>(
    ep: &mut Endpoint<C>,
    world: &Team,
    sh: &Shared,
    sent: &[u64],
) -> Res<()> {
    let (me, n) = (ep.rank(), ep.size());
    // Every rank's counts towards every rank: row = source.
    let mut matrix = vec![0u64; (n as usize) * (n as usize)];
    matrix[me as usize * n as usize..][..n as usize].copy_from_slice(sent);
    let matrix = ep.collective(world, Allreduce::new(matrix, BuiltinOp::Sum), Blocking)?;
    for src in 0..n as usize {
        let want = matrix[src * n as usize + me as usize];
        let c = &sh.got[src];
        ep.wait_until_timeout(|| c.load(Relaxed) >= want, Duration::from_secs(30));
        let got = c.load(Relaxed);
        if got != want {
            sh.error(&format!(
                "rank {me}: {got} messages arrived from rank {src}, it sent {want}"
            ));
        }
    }
    // Everything that was sent has arrived: a later duplicate would show here.
    ep.barrier(world)?;
    for src in 0..n as usize {
        let (want, got) = (
            matrix[src * n as usize + me as usize],
            sh.got[src].load(Relaxed),
        );
        if got > want {
            sh.error(&format!(
                "rank {me}: {got} messages from rank {src}, it sent {want}"
            ));
        }
    }
    Ok(())
}

/// Rank 0's rows: the rate, the back-pressure waits (median and 99th percentile of
/// every rank's histogram, the longest as their max), events, messages, seconds and
/// errors, from the job's sums (`msgs, errors, events, histogram...`) and maxes
/// (`send time, longest wait`, in ns); `max` is the largest message.
fn report<C: Conduit>(job: &StormJob, client: &Client<C>, max: usize, sums: &[u64], maxes: &[u64]) {
    let n = client.size();
    let count = job.args.count;
    let (msgs, errors, events, hist) = (sums[0], sums[1], sums[2], &sums[3..]);
    let secs = maxes[0] as f64 / 1e9;
    let rep = Reporter::new(job.json);
    rep.header(&[format!(
        "gex-perf storm: {n} ranks as {}, conduit {}, Medium {MIN_SIZE}..{max} B, seed {}, {}",
        crate::rank_kind(),
        client.conduit_name(),
        job.args.verified.seed,
        match count {
            Some(k) => format!("{k} messages per rank"),
            None => format!("{} s", job.args.seconds),
        }
    )]);
    let us = |ns: Option<f64>| ns.map_or(0.0, |v| v / 1e3);
    let longest = (events > 0).then_some(maxes[1] as f64 / 1e3);
    let rows: [(&'static str, f64, &'static str, Option<f64>); 7] = [
        ("storm_rate", msgs as f64 / secs, "msg/s", None),
        (
            "storm_backpressure_wait",
            us(quantile(hist, 0.5)),
            "us",
            longest,
        ),
        (
            "storm_backpressure_wait_p99",
            us(quantile(hist, 0.99)),
            "us",
            longest,
        ),
        ("storm_backpressure_events", events as f64, "events", None),
        ("storm_messages", msgs as f64, "msgs", None),
        ("storm_seconds", secs, "s", None),
        ("storm_errors", errors as f64, "errors", None),
    ];
    for (name, value, unit, max) in rows {
        rep.record(&Record {
            max,
            ..Record::of(client, name, 0, value, unit)
        });
    }
}

fn run<C: Conduit>(job: &StormJob, client: &Client<C>) -> Res<()> {
    let (me, n) = (client.rank(), client.size());
    let (mut ep, world) = crate::rank_endpoint(client, job.pin)?;
    let sh = Arc::new(Shared {
        got: (0..n).map(|_| AtomicU64::new(0)).collect(),
        errors: AtomicU64::new(0),
    });
    let s = sh.clone();
    let h = ep.register(move |_t: &mut Token<'_>, am: Am<'_>| {
        let (a, p) = (am.args(), am.payload());
        if a.len() != 4 {
            s.error(&format!(
                "rank {me}: a storm message with {} arguments",
                a.len()
            ));
            return;
        }
        let (src, len, lo, hi) = (a[0], a[1], a[2], a[3]);
        let sum = u64::from(lo) | (u64::from(hi) << 32);
        if len as usize != p.len() || checksum(p) != sum {
            s.error(&format!(
                "rank {me}: a message from rank {src} of {} bytes (said {len}) fails its checksum",
                p.len()
            ));
        }
        match s.got.get(src as usize) {
            Some(c) => {
                c.fetch_add(1, Relaxed);
            }
            None => s.error(&format!("rank {me}: a message from rank {src} of {n}")),
        }
    })?;
    let limit = (0..n)
        .map(|r| ep.max_medium(EpAddr::rank(r)))
        .min()
        .unwrap_or(0);
    let max = job.args.max_size.unwrap_or(limit).min(limit);
    if max < MIN_SIZE {
        return Err(
            format!("the Medium limit ({limit} B) or --max-size is below {MIN_SIZE} B").into(),
        );
    }

    // The table: sizes log-uniform over [MIN_SIZE, max], random offsets into random bytes.
    let mut rng = SmallRng::seed_from_u64(job.args.verified.seed ^ (u64::from(me) << 32) ^ 0x5707);
    let (bytes, table) = table(&mut rng, max);

    let mut bad = vec![0u8; max];
    let mut sent = vec![0u64; n as usize];
    let mut hist = vec![0u64; BUCKETS];
    let mut longest_ns = 0u64;
    let count = job.args.count;
    let limit_t = Duration::from_secs_f64(job.args.seconds);
    ep.barrier(&world)?;
    let t0 = Instant::now();
    let mut i = 0usize;
    loop {
        if let Some(k) = count {
            if i as u64 >= k {
                break;
            }
        } else if i % 64 == 0 && t0.elapsed() >= limit_t {
            break;
        }
        let m = table[i % TABLE];
        i += 1;
        let peer = if n == 1 {
            0
        } else {
            let p = rng.random_range(0..n - 1);
            if p >= me { p + 1 } else { p }
        };
        let args = [me, m.len as u32, m.sum as u32, (m.sum >> 32) as u32];
        let mut payload = &bytes[m.off..m.off + m.len];
        if job.args.verified.corrupt && i % 16 == 0 {
            bad[..m.len].copy_from_slice(payload);
            bad[m.len / 2] ^= 0x40;
            payload = &bad[..m.len];
        }
        let dst = EpAddr::rank(peer);
        if ep.try_request(dst, h, Body::medium(&args, payload))? == Injected::WouldBlock {
            let blocked = Instant::now();
            let mut r = Retry::default();
            loop {
                layer::retry(&mut ep, &mut r);
                if ep.try_request(dst, h, Body::medium(&args, payload))? == Injected::Sent {
                    break;
                }
            }
            let ns = u64::try_from(blocked.elapsed().as_nanos()).unwrap_or(u64::MAX);
            hist[bucket(ns)] += 1;
            longest_ns = longest_ns.max(ns);
        }
        sent[peer as usize] += 1;
    }
    let send_ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);

    check_arrivals(&mut ep, &world, &sh, &sent)?;
    let msgs: u64 = sent.iter().sum();
    let events: u64 = hist.iter().sum();
    let mut sums = vec![msgs, sh.errors.load(Relaxed), events];
    sums.extend_from_slice(&hist);
    let sums = ep.collective(&world, Allreduce::new(sums, BuiltinOp::Sum), Blocking)?;
    let maxes = ep.collective(
        &world,
        Allreduce::new(vec![send_ns, longest_ns], BuiltinOp::Max),
        Blocking,
    )?;
    if me == 0 {
        report(job, client, max, &sums, &maxes);
    }
    let errors = sums[1];
    if errors != 0 {
        return Err(format!("{errors} errors in {} messages", sums[0]).into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotone_and_hold_their_values() {
        let mut last = 0;
        for ns in (0..100_000u64)
            .step_by(7)
            .chain([1 << 20, 1 << 30, 1 << 39])
        {
            let b = bucket(ns);
            assert!(b >= last, "{ns}");
            last = b;
            let mid = bucket_mid(b);
            assert!(
                (mid - ns as f64).abs() <= ns as f64 / 8.0 + 1.0,
                "{ns} -> {mid}"
            );
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn quantiles_of_a_histogram() {
        let mut h = vec![0u64; BUCKETS];
        assert_eq!(quantile(&h, 0.5), None);
        for ns in 1..=100u64 {
            h[bucket(ns * 1000)] += 1;
        }
        let med = quantile(&h, 0.5).unwrap();
        assert!((med - 50_000.0).abs() < 50_000.0 / 8.0, "{med}");
        let p99 = quantile(&h, 0.99).unwrap();
        assert!((p99 - 99_000.0).abs() < 99_000.0 / 8.0, "{p99}");
    }

    #[test]
    fn checksum_sees_every_byte_and_the_length() {
        let a = [7u8; 37];
        let s = checksum(&a);
        for i in 0..a.len() {
            let mut b = a;
            b[i] ^= 1;
            assert_ne!(checksum(&b), s, "{i}");
        }
        assert_ne!(checksum(&a[..36]), s);
    }
}
