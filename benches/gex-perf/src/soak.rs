//! The `soak` mode: random active messages, RMA, atomics and collectives across every
//! rank for a given time, with every byte verified.
//!
//! The run is a sequence of rounds. In a round every rank performs a random number of
//! point-to-point operations against random peers (itself included), drawn from its own
//! generator (seeded with `--seed` and the rank):
//! - Medium AM round trip: a patterned payload of 0..8 KiB, checked by the target's
//!   handler and, echoed in the reply, by the origin's;
//! - Long AM round trip: a patterned payload of 1 B..32 KiB into the slot this rank owns
//!   in the target's segment, read back (atomic copies) and checked by the handler;
//! - a flood of 1..64 Short requests, counted per source by the target;
//! - a blocking put of 1 B..32 KiB into the slot this rank owns in the target's
//!   segment, then a nonblocking get of the same range (an owned buffer held by its
//!   event), checked;
//! - a scope that lends two buffers: a put from one and a get into the other;
//! - remote atomics on the target's counter word: NBI adds and blocking fetch-adds of
//!   random amounts.
//!
//! Then every rank runs the round's collective, drawn from a generator every rank seeds
//! alike: barrier, broadcast (random root and size), allreduce, reduce (random root),
//! gather_all or exchange, all with patterned data checked by every receiver; and an
//! allreduce of rank 0's "time is up" flag ends the run. At the end, every rank checks
//! its counter word against the sum of the adds every rank says it made to it, and the
//! Short counts against what every source says it sent.
//!
//! Rank 0 prints the totals (operations, errors, seconds, operations per second); any
//! error makes the job fail (exit code 1). The first errors are printed as they occur.

use crate::complain;
use crate::report::{Record, Reporter};
use gex::coll::{Allreduce, Broadcast, BuiltinOp, CollExt, Exchange, GatherAll, Reduce};
use gex::core::{Client, Endpoint};
use gex::rma::{
    AtomicDomain, AtomicFlags, AtomicOp, AtomicOps, GlobalPtr, NbiCategories, RmaError, RmaExt,
    ScopeRmaExt,
};
use gex::spi::Conduit;
use gex::{Am, Blocking, Body, ClientBuilder, EpAddr, Nb, Nbi, Team, Token};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Options of the `soak` mode.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct SoakArgs {
    /// How long to run, in seconds (rank 0's clock; the round in progress finishes).
    #[arg(long, value_name = "S", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=7 * 24 * 3600))]
    pub(crate) seconds: u64,
    /// The seed and test aid `storm` has too.
    #[command(flatten)]
    pub(crate) verified: crate::VerifiedArgs,
}

/// A `soak` run.
pub(crate) type SoakJob = crate::Run<SoakArgs>;

/// The counter word the atomics target, in every segment.
const OFF_COUNTER: usize = 0;
/// Long AM slots: one per source rank.
const OFF_LONG: usize = 64 << 10;
/// RMA slots: one per source rank.
const OFF_PUT: usize = 4 << 20;
/// Bytes of a slot.
const SLOT: usize = 32 << 10;
/// Largest Medium payload used.
const MEDIUM_MAX: usize = 8 << 10;
/// Largest collective block (bytes).
const COLL_MAX: usize = 16 << 10;
/// Errors printed before the rest are only counted.
const PRINT_ERRORS: u64 = 10;

impl SoakJob {
    /// Default layers, a segment with a Long slot and an RMA slot per rank.
    pub(crate) fn builder(&self) -> ClientBuilder<crate::Layers> {
        crate::builder().segment_size_with(|shape| {
            (OFF_PUT + shape.size as usize * SLOT).next_multiple_of(4096)
        })
    }
}

rank_job!(SoakJob, run, "gex-perf soak");

/// SplitMix64's output function: the byte pattern of message `(src, seq)`.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Fills `buf` with the pattern of `(src, seq)`.
fn pattern(src: u64, seq: u64, buf: &mut [u8]) {
    let x = mix(src.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ seq);
    for (i, chunk) in buf.chunks_mut(8).enumerate() {
        let w = mix(x.wrapping_add(i as u64)).to_le_bytes();
        chunk.copy_from_slice(&w[..chunk.len()]);
    }
}

/// Whether `buf` holds the pattern of `(src, seq)`.
fn check(src: u64, seq: u64, buf: &[u8]) -> bool {
    let x = mix(src.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ seq);
    buf.chunks(8).enumerate().all(|(i, chunk)| {
        let w = mix(x.wrapping_add(i as u64)).to_le_bytes();
        chunk == &w[..chunk.len()]
    })
}

/// State the handlers share with the driver.
#[derive(Debug)]
struct Shared {
    errors: AtomicU64,
    replies: AtomicU64,
    /// Short flood messages received, by source rank.
    flood: Vec<AtomicU64>,
}

impl Shared {
    fn error(&self, what: &str) {
        if self.errors.fetch_add(1, Relaxed) < PRINT_ERRORS {
            complain(&format!("soak: {what}"));
        }
    }
}

fn seq_of(a: &[u32]) -> u64 {
    u64::from(a[0]) | (u64::from(a[1]) << 32)
}

/// The end of a soak: every operation's effect checked against what its sources say
/// (the counter of this rank against every rank's adds to it, the Short requests that
/// arrived against those sent); a difference is an error counted in `sh`.
fn verify<C: Conduit>(
    ep: &mut Endpoint<C>,
    world: &Team,
    ad: &AtomicDomain<u64>,
    sh: &Shared,
    adds: &[u64],
    sent: &[u64],
) -> Res<()> {
    let (me, n) = (ep.rank(), ep.size());
    ep.sync_nbi(NbiCategories::ALL)?;
    ep.barrier(world)?;
    let mut tally = vec![0u64; 2 * n as usize * n as usize];
    for j in 0..n as usize {
        tally[me as usize * n as usize + j] = adds[j];
        tally[(n as usize + me as usize) * n as usize + j] = sent[j];
    }
    let tally = ep.collective(world, Allreduce::new(tally, BuiltinOp::Sum), Blocking)?;
    let want_counter: u64 = (0..n as usize)
        .map(|i| tally[i * n as usize + me as usize])
        .sum();
    let counter = ep.fetch_atomic(
        ad,
        GlobalPtr::<u64>::new(EpAddr::rank(me), OFF_COUNTER),
        AtomicOp::Get,
        AtomicFlags::empty(),
        Blocking,
    )?;
    if counter != want_counter {
        sh.error(&format!(
            "rank {me}: the counter holds {counter}, the ranks added {want_counter}"
        ));
    }
    for i in 0..n as usize {
        let want = tally[(n as usize + i) * n as usize + me as usize];
        // A barrier orders no AM handling (as in GASNet-EX): requests sent before it
        // may still wait in this rank's queues after it. Serve them until the count
        // is reached; a count still short after the grace period is a loss.
        ep.wait_until_timeout(
            || sh.flood[i].load(Relaxed) >= want,
            std::time::Duration::from_secs(10),
        );
        let got = sh.flood[i].load(Relaxed);
        if got != want {
            sh.error(&format!(
                "rank {me}: {got} Short requests arrived from rank {i}, it sent {want}"
            ));
        }
    }
    Ok(())
}

/// Two halves of this rank's put slot at `dst`: a put from `buf` and a get into `back`,
/// both lent to one scope, then both halves checked (`len` bytes of each; errors
/// counted in `sh`).
fn scoped_put_get<C: Conduit>(
    ep: &mut Endpoint<C>,
    sh: &Shared,
    dst: EpAddr,
    seq: u64,
    len: usize,
    buf: &mut [u8],
    back: &mut [u8],
) -> Res<()> {
    let (me, peer) = (ep.rank(), dst.rank);
    // Two halves of the slot: a put from `buf` and a get into `back`,
    // both lent to one scope.
    let half = SLOT / 2;
    let base = OFF_PUT + me as usize * SLOT;
    let (pa, pb) = (
        GlobalPtr::<u8>::new(dst, base),
        GlobalPtr::<u8>::new(dst, base + half),
    );
    pattern(u64::from(me), seq, &mut buf[..len]);
    ep.put(pb, &buf[..len], Blocking)?;
    pattern(u64::from(me), seq + (1 << 63), &mut buf[half..half + len]);
    let (src, dst_buf) = (&buf[half..half + len], &mut back[..len]);
    ep.scope(|s| {
        s.put_from(pa, src)?;
        s.get_into(dst_buf, pb)?;
        Ok::<(), RmaError>(())
    })?;
    if !check(u64::from(me), seq, &back[..len]) {
        sh.error(&format!(
            "rank {me}: scoped get of {len} B from rank {peer} read other bytes"
        ));
    }
    ep.get(&mut back[..len], pa, Blocking)?;
    if !check(u64::from(me), seq + (1 << 63), &back[..len]) {
        sh.error(&format!(
            "rank {me}: scoped put of {len} B to rank {peer} left other bytes"
        ));
    }
    Ok(())
}

fn run<C: Conduit>(job: &SoakJob, client: &Client<C>) -> Res<()> {
    let (me, n) = (client.rank(), client.size());
    let (mut ep, world) = crate::rank_endpoint(client, job.pin)?;
    let sh = Arc::new(Shared {
        errors: AtomicU64::new(0),
        replies: AtomicU64::new(0),
        flood: (0..n).map(|_| AtomicU64::new(0)).collect(),
    });
    let h = register(&mut ep, &sh, me)?;
    let ad = ep.atomic_domain::<u64>(&world, AtomicOps::ADD | AtomicOps::FADD | AtomicOps::GET)?;
    let max_medium = (0..n)
        .map(|r| ep.max_medium(EpAddr::rank(r)))
        .min()
        .unwrap_or(0);
    let max_long = (0..n)
        .map(|r| ep.max_long(EpAddr::rank(r)))
        .min()
        .unwrap_or(0);
    let medium_max = MEDIUM_MAX.min(max_medium);
    let long_max = SLOT.min(max_long);

    let mut rng = SmallRng::seed_from_u64(mix(job.args.verified.seed ^ (u64::from(me) << 32)));
    let mut ops = 0u64;
    let mut seq = 0u64;
    let mut adds = vec![0u64; n as usize];
    // Of `adds`, those made by blocking fetch-adds (complete when they return).
    let mut fetched = vec![0u64; n as usize];
    let mut sent = vec![0u64; n as usize];
    let mut buf = vec![0u8; SLOT.max(COLL_MAX)];
    let mut back = vec![0u8; SLOT.max(COLL_MAX)];
    let t0 = Instant::now();
    let limit = Duration::from_secs(job.args.seconds);
    let f = AtomicFlags::empty();
    let mut round = 0u64;
    loop {
        round += 1;
        for _ in 0..rng.random_range(1..=32u32) {
            let peer = rng.random_range(0..n);
            let dst = EpAddr::rank(peer);
            seq += 1;
            let args = [seq as u32, (seq >> 32) as u32];
            match rng.random_range(0..7u32) {
                0 => {
                    let len = rng.random_range(0..=medium_max);
                    pattern(u64::from(me), seq, &mut buf[..len]);
                    if job.args.verified.corrupt && seq % 16 == 0 && len > 0 {
                        buf[len / 2] ^= 0x40;
                    }
                    let want = sh.replies.load(Relaxed) + 1;
                    ep.request(dst, h.med_req, Body::medium(&args, &buf[..len]))?;
                    ep.wait_until(|| sh.replies.load(Relaxed) >= want);
                }
                1 => {
                    let len = rng.random_range(1..=long_max);
                    pattern(u64::from(me), seq, &mut buf[..len]);
                    let want = sh.replies.load(Relaxed) + 1;
                    let off = OFF_LONG + me as usize * SLOT;
                    ep.request(dst, h.long_req, Body::long(&args, &buf[..len], off))?;
                    ep.wait_until(|| sh.replies.load(Relaxed) >= want);
                }
                2 => {
                    let k = rng.random_range(1..=64u64);
                    for _ in 0..k {
                        ep.request(dst, h.flood, Body::short(&[]))?;
                    }
                    sent[peer as usize] += k;
                }
                3 => {
                    let len = rng.random_range(1..=SLOT);
                    let at = rng.random_range(0..=SLOT - len);
                    let p = GlobalPtr::<u8>::new(dst, OFF_PUT + me as usize * SLOT + at);
                    pattern(u64::from(me), seq, &mut buf[..len]);
                    ep.put(p, &buf[..len], Blocking)?;
                    let ev = ep.get(vec![0u8; len], p, Nb)?;
                    let got = ep.wait(ev)?;
                    if !check(u64::from(me), seq, &got) {
                        sh.error(&format!(
                            "rank {me}: put/get of {len} B at rank {peer} read back other bytes"
                        ));
                    }
                }
                4 => {
                    let len = rng.random_range(1..=SLOT / 2);
                    scoped_put_get(&mut ep, &sh, dst, seq, len, &mut buf, &mut back)?;
                }
                5 => {
                    let v = rng.random_range(1..=1000u64);
                    let p = GlobalPtr::<u64>::new(dst, OFF_COUNTER);
                    ep.atomic(&ad, p, AtomicOp::Add(v), f, Nbi)?;
                    adds[peer as usize] += v;
                }
                _ => {
                    let v = rng.random_range(1..=1000u64);
                    let p = GlobalPtr::<u64>::new(dst, OFF_COUNTER);
                    let old = ep.fetch_atomic(&ad, p, AtomicOp::Add(v), f, Blocking)?;
                    // The completed adds this rank made to that word are in it (its NBI
                    // adds may still be on their way).
                    if old < fetched[peer as usize] {
                        sh.error(&format!("rank {me}: fetch-add at rank {peer} returned {old}, below this rank's own {} completed adds", fetched[peer as usize]));
                    }
                    adds[peer as usize] += v;
                    fetched[peer as usize] += v;
                }
            }
            ops += 1;
        }
        collective(&mut ep, &sh, round, job.args.verified.seed, &mut buf)?;
        ops += 1;
        let stop = u64::from(me == 0 && t0.elapsed() >= limit);
        let stop = ep.collective(&world, Allreduce::new(vec![stop], BuiltinOp::Max), Blocking)?;
        if stop[0] != 0 {
            break;
        }
    }
    let secs = t0.elapsed().as_secs_f64();

    // The end: every operation's effect checked against what its sources say.
    verify(&mut ep, &world, &ad, &sh, &adds, &sent)?;
    let totals = ep.collective(
        &world,
        Allreduce::new(vec![ops, sh.errors.load(Relaxed)], BuiltinOp::Sum),
        Blocking,
    )?;
    ep.barrier(&world)?;
    if me == 0 {
        let rep = Reporter::new(job.json);
        rep.header(&[format!(
            "gex-perf soak: {n} ranks, conduit {}, seed {}, {round} rounds",
            client.conduit_name(),
            job.args.verified.seed
        )]);
        for (name, value, unit) in [
            ("soak_ops", totals[0] as f64, "ops"),
            ("soak_errors", totals[1] as f64, "errors"),
            ("soak_seconds", secs, "s"),
            ("soak_rate", totals[0] as f64 / secs / 1e3, "kop/s"),
        ] {
            rep.record(&Record::of(client, name, 0, value, unit));
        }
    }
    if totals[1] != 0 {
        return Err(format!("{} errors in {} operations", totals[1], totals[0]).into());
    }
    Ok(())
}

/// The handlers' ids.
struct Handlers {
    med_req: gex::HandlerId,
    long_req: gex::HandlerId,
    flood: gex::HandlerId,
}

fn register<C: Conduit>(ep: &mut Endpoint<C>, sh: &Arc<Shared>, me: u32) -> Res<Handlers> {
    let s = sh.clone();
    let reply = ep.register(move |_t: &mut Token<'_>, _am: Am<'_>| {
        s.replies.fetch_add(1, Relaxed);
    })?;
    let s = sh.clone();
    let med_rep = ep.register(move |t: &mut Token<'_>, am: Am<'_>| {
        // The echo of this rank's own Medium.
        if !check(u64::from(me), seq_of(am.args()), am.payload()) {
            s.error(&format!(
                "rank {me}: a Medium echo from {} differs",
                t.src()
            ));
        }
        s.replies.fetch_add(1, Relaxed);
    })?;
    let s = sh.clone();
    let med_req = ep.register(move |t: &mut Token<'_>, am: Am<'_>| {
        let src = u64::from(t.src().rank);
        if !check(src, seq_of(am.args()), am.payload()) {
            s.error(&format!(
                "rank {me}: a Medium of {} B from {} differs",
                am.len(),
                t.src()
            ));
        }
        if let Err(e) = t.reply(med_rep, Body::medium(am.args(), am.payload())) {
            s.error(&format!(
                "rank {me}: Medium reply to {} failed: {e}",
                t.src()
            ));
        }
    })?;
    let s = sh.clone();
    let mut scratch = vec![0u8; SLOT];
    let long_req = ep.register(move |t: &mut Token<'_>, am: Am<'_>| {
        let src = t.src().rank;
        match am.long() {
            Some(l) if l.offset() == OFF_LONG + src as usize * SLOT => {
                let n = l.read(&mut scratch);
                if n != l.len() || !check(u64::from(src), seq_of(am.args()), &scratch[..n]) {
                    s.error(&format!(
                        "rank {me}: a Long of {} B from {} differs",
                        l.len(),
                        t.src()
                    ));
                }
            }
            _ => s.error(&format!(
                "rank {me}: a Long from {} landed elsewhere",
                t.src()
            )),
        }
        if let Err(e) = t.reply(reply, Body::short(&[])) {
            s.error(&format!("rank {me}: Long reply to {} failed: {e}", t.src()));
        }
    })?;
    let s = sh.clone();
    let flood = ep.register(move |t: &mut Token<'_>, _am: Am<'_>| {
        s.flood[t.src().rank as usize].fetch_add(1, Relaxed);
    })?;
    Ok(Handlers {
        med_req,
        long_req,
        flood,
    })
}

/// The round's collective, the same on every rank.
fn collective<C: Conduit>(
    ep: &mut Endpoint<C>,
    sh: &Shared,
    round: u64,
    seed: u64,
    buf: &mut [u8],
) -> Res<()> {
    let world = ep.world();
    let (me, n) = (world.rank(), world.size());
    let mut rng = SmallRng::seed_from_u64(mix(seed ^ round.wrapping_mul(0x2545_f491_4f6c_dd1d)));
    let root = rng.random_range(0..n);
    let len = rng.random_range(1..=COLL_MAX);
    let tag = round << 8;
    match rng.random_range(0..6u32) {
        0 => ep.barrier(&world)?,
        1 => {
            let b = &mut buf[..len];
            if me == root {
                pattern(u64::from(root), tag, b);
            } else {
                b.fill(0);
            }
            ep.collective(&world, Broadcast::in_place(root, b), Blocking)?;
            if !check(u64::from(root), tag, b) {
                sh.error(&format!(
                    "rank {me}: broadcast of {len} B from {root} differs"
                ));
            }
        }
        k @ (2 | 3) => {
            let words = len.div_ceil(8);
            let mine: Vec<u64> = (0..words as u64)
                .map(|i| mix(tag ^ i).wrapping_mul(u64::from(me) + 1))
                .collect();
            let want = |i: u64| mix(tag ^ i).wrapping_mul(u64::from(n) * (u64::from(n) + 1) / 2);
            let (got, checked) = if k == 2 {
                (
                    ep.collective(&world, Allreduce::new(mine, BuiltinOp::Sum), Blocking)?,
                    true,
                )
            } else {
                let r = ep.collective(&world, Reduce::new(root, mine, BuiltinOp::Sum), Blocking)?;
                (r, me == root)
            };
            if checked
                && (got.len() != words || got.iter().enumerate().any(|(i, &v)| v != want(i as u64)))
            {
                sh.error(&format!("rank {me}: a reduction of {words} words differs"));
            }
        }
        4 => {
            let block = len.min(COLL_MAX / n as usize).max(1);
            let mut mine = vec![0u8; block];
            pattern(u64::from(me), tag, &mut mine);
            let all = ep.collective(&world, GatherAll::new(mine), Blocking)?;
            let ok = all.len() == block * n as usize
                && all
                    .chunks(block)
                    .enumerate()
                    .all(|(r, b)| check(r as u64, tag, b));
            if !ok {
                sh.error(&format!(
                    "rank {me}: gather_all of {block} B blocks differs"
                ));
            }
        }
        _ => {
            let block = len.min(COLL_MAX / n as usize).max(1);
            let mut mine = vec![0u8; block * n as usize];
            for (j, b) in mine.chunks_mut(block).enumerate() {
                pattern(u64::from(me) * u64::from(n) + j as u64, tag, b);
            }
            let got = ep.collective(&world, Exchange::new(mine), Blocking)?;
            let ok = got.len() == block * n as usize
                && got
                    .chunks(block)
                    .enumerate()
                    .all(|(i, b)| check(i as u64 * u64::from(n) + u64::from(me), tag, b));
            if !ok {
                sh.error(&format!("rank {me}: exchange of {block} B blocks differs"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_check_and_differ() {
        let mut a = vec![0u8; 37];
        pattern(3, 9, &mut a);
        assert!(check(3, 9, &a));
        assert!(!check(3, 10, &a));
        assert!(!check(4, 9, &a));
        a[36] ^= 1;
        assert!(!check(3, 9, &a));
    }
}
