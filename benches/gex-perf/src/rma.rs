//! One-sided benchmarks over gex-rma, and the barrier: `put`, `get`, `atomic`, `barrier`.
//!
//! Ranks pair up as `(0,1), (2,3), …` like the `am` tests and every pair measures at
//! the same time; rank 0 reports its own pair (barrier: every rank takes part).
//! - `put_lat` / `get_lat` (µs): a blocking put / get of `size` bytes into / from the
//!   peer's segment (remote completion), averaged over a batch.
//! - `put_fence_lat` / `put_val_fence_lat` (µs, 8 B only): a blocking 8-byte put
//!   (`put` of a slice / `put_val` of a `u64`) followed by a full barrier
//!   (`gex_sync::word::full_fence`): the semantics of OpenSHMEM's `shmem_putmem` /
//!   `shmem_long_p` followed by `shmem_quiet` (complete at the target, and ordered
//!   before every later load and store), the rows gex-shmem's benchmark compares with.
//! - `put_observed_lat` (µs, one-way): rank A puts a sequence number into B's segment,
//!   B polls its own segment until it sees it and puts it back; half the round trip.
//!   This is UCX's `put_lat` (the peer polls memory) and needs no handler on B.
//! - `put_bw` / `get_bw` (GB/s = 1e9 B/s): NBI puts of `size` bytes back to back, then
//!   one sync; blocking gets back to back. The puts lend the source to a scope
//!   ([`ScopeRmaExt::put_from`]: GASNet-EX's deferred local completion, the form of
//!   GASNet's bulk-put bandwidth tests and of a raw `fi_write` flood): the source is
//!   not copied first, and the scope's end is the sync.
//! - `atomic_fadd_lat` (µs): a blocking fetch-add (`u64` domain) on a word of the
//!   peer's segment, averaged over a batch: a round trip on the AM path, one CPU atomic
//!   through the mapping on smp, a NIC atomic where the conduit offers them.
//! - `atomic_fadd_rate` (Mop/s = 1e6 operations/s): NBI fetch-adds (value discarded)
//!   back to back, one `sync_nbi(ATOMICS)` per batch. After both, the leader checks
//!   the word holds the number of adds it made.
//! - `barrier_lat` (µs): the collectives layer's barrier on the world team, every
//!   rank, back to back (the same barrier as `coll_barrier_lat`).
//!
//! # Safety
//! `put_observed_lat` reads the word that the peer writes into this rank's segment
//! through an `AtomicU64` made from the segment's address: the segment is mapped for
//! the life of the client, the offset is 8-byte aligned (segments are page aligned),
//! and the peer writes the word as one 8-byte copy.
#![allow(unsafe_code)]

use crate::PinMode;
use crate::report::{Record, Reporter};
use crate::world_barrier as barrier;
use gex::core::{Client, Endpoint};
use gex::rma::{
    AtomicFlags, AtomicOp, AtomicOps, GlobalPtr, NbiCategories, RmaError, RmaExt, ScopeRmaExt,
};
use gex::spi::Conduit;
use gex::{Am, Blocking, Body, ClientBuilder, EpAddr, HandlerId, Nbi, Token};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Which one-sided benchmark family to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    /// put_lat, put_observed_lat, put_bw.
    Put,
    /// get_lat, get_bw.
    Get,
    /// atomic_fadd_lat, atomic_fadd_rate.
    Atomic,
    /// barrier_lat.
    Barrier,
}

/// Options of the `put`, `get`, `atomic` and `barrier` benchmarks.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct RmaArgs {
    /// Smoke run: few sizes, short timings.
    #[arg(long)]
    pub(crate) quick: bool,
    /// `put` only: also report `am_short_rtt` (µs) measured in the same process, in
    /// batches alternating with those of an 8-byte blocking `put_lat_8_alt` (µs), so
    /// the AM-reference put can be compared with an AM round trip under the same load.
    #[arg(long)]
    pub(crate) am_ref: bool,
    /// `put` / `get` only: transfer sizes, comma separated, K/M/G suffixes allowed
    /// (e.g. 8,1M); latency is measured for those of 8 B..4 KiB, bandwidth for those of
    /// 1 KiB..64 MiB (default: all of both ranges).
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = crate::parse_size)]
    pub(crate) sizes: Vec<usize>,
}

/// A `put`, `get`, `atomic` or `barrier` run.
pub(crate) struct RmaJob {
    pub(crate) family: Family,
    pub(crate) args: RmaArgs,
    pub(crate) pin: PinMode,
    pub(crate) json: bool,
}

/// Largest bandwidth size (and segment length) of a full run.
const BW_MAX: usize = 64 << 20;
/// Where the observed-latency word lives in every segment.
const FLAG_OFFSET: usize = 0;
/// Where bulk data goes (after the flag's cache line).
const DATA_OFFSET: usize = 4096;

/// The page size by which the local buffers of the put and get figures are placed.
const PAGE: usize = 4096;
/// Where in a page those buffers start (half of it).
const LOCAL_OFFSET: usize = PAGE / 2;

/// `len` bytes of `store` (which has `len + PAGE + LOCAL_OFFSET`) from [`LOCAL_OFFSET`]
/// past its first page boundary.
///
/// Where a heap block starts depends on what was allocated before it, which differs
/// between two builds of gex, and a sub-10-ns copy moves by up to a third with its
/// destination's offset in a cache line and with the distance between its source and
/// destination modulo 4 KiB: a load at the page offset of a store still in flight waits
/// for it (4K aliasing). Placed so, the buffers sit at the same place for every build,
/// and half a page away from the page offset of the remote data ([`DATA_OFFSET`]), so
/// no figure measures 4K aliasing between its own buffers (docs/performance.md,
/// "Method for these sub-10-ns figures").
fn placed(store: &mut [u8], len: usize) -> &mut [u8] {
    let at = store.as_ptr().align_offset(PAGE) + LOCAL_OFFSET;
    &mut store[at..at + len]
}

impl RmaJob {
    pub(crate) fn builder(&self) -> ClientBuilder<crate::Layers> {
        let max = if self.args.quick { 1 << 20 } else { BW_MAX };
        crate::builder().segment_size(DATA_OFFSET + max)
    }
}

rank_job!(RmaJob, run, "gex-perf");

/// The batches of a test point for [`batches`] (length of each, how many): 7 of
/// `full`, or 3 of 4 ms with `--quick`. Also gex-perf msg's.
pub(crate) fn timing(quick: bool, full: Duration) -> (Duration, u32) {
    if quick {
        (Duration::from_millis(4), 3)
    } else {
        (full, 7)
    }
}

/// Runs `op(k)` in batches sized to about `batch` each; returns seconds per iteration
/// of every batch (warm-up doubling `k` first). Also gex-perf msg's.
pub(crate) fn batches(
    batch: Duration,
    count: u32,
    mut op: impl FnMut(u64) -> Res<()>,
) -> Res<Vec<f64>> {
    let mut k = 1u64;
    let per = loop {
        let t0 = Instant::now();
        op(k)?;
        let e = t0.elapsed();
        if e >= batch / 4 || k >= 1 << 30 {
            break e.as_secs_f64() / k as f64;
        }
        k *= 2;
    };
    let iters = ((batch.as_secs_f64() / per.max(1e-9)) as u64).clamp(1, 1 << 30);
    (0..count)
        .map(|_| {
            let t0 = Instant::now();
            op(iters)?;
            Ok(t0.elapsed().as_secs_f64() / iters as f64)
        })
        .collect()
}

/// Client handlers of the `--am-ref` round trip.
const H_REF_PING: HandlerId = HandlerId::at(200);
const H_REF_PONG: HandlerId = HandlerId::at(201);

/// `--am-ref`: batches of Short AM round trips and of 8-byte blocking puts, alternating
/// (same iteration count per batch); seconds per operation of each batch.
fn am_ref<C: Conduit>(
    r: &mut Endpoint<C>,
    pongs: &AtomicU64,
    peer: u32,
    data: GlobalPtr<u8>,
    batch: Duration,
    count: u32,
) -> Res<(Vec<f64>, Vec<f64>)> {
    let src = [0x5au8; 8];
    let rtt = |r: &mut Endpoint<C>, k: u64| -> Res<()> {
        let start = pongs.load(Ordering::Relaxed);
        for want in start + 1..=start + k {
            r.request(EpAddr::rank(peer), H_REF_PING, Body::short(&[]))?;
            r.wait_until(|| pongs.load(Ordering::Relaxed) >= want);
        }
        Ok(())
    };
    // Calibrate on the round trip, then alternate.
    let mut k = 1u64;
    let per = loop {
        let t0 = Instant::now();
        rtt(r, k)?;
        let e = t0.elapsed();
        if e >= batch / 4 || k >= 1 << 30 {
            break e.as_secs_f64() / k as f64;
        }
        k *= 2;
    };
    let iters = ((batch.as_secs_f64() / per.max(1e-9)) as u64).clamp(1, 1 << 30);
    let (mut a, mut p) = (Vec::new(), Vec::new());
    for _ in 0..count {
        let t0 = Instant::now();
        rtt(r, iters)?;
        a.push(t0.elapsed().as_secs_f64() / iters as f64);
        let t0 = Instant::now();
        for _ in 0..iters {
            r.put(data, &src, Blocking)?;
        }
        p.push(t0.elapsed().as_secs_f64() / iters as f64);
    }
    Ok((a, p))
}

/// The message sizes of the latency runs (8 B to 4 KiB) and of the bandwidth runs
/// (1 KiB up to `BW_MAX`, as the segment of `seg_len` bytes holds): `--sizes` within
/// those ranges, else the defaults (fewer with `--quick`).
fn sizes(job: &RmaJob, seg_len: usize) -> (Vec<usize>, Vec<usize>) {
    // The `--sizes` that `keep` keeps, in order, without repeats next to each other.
    let asked = |keep: &dyn Fn(usize) -> bool| -> Vec<usize> {
        let mut v: Vec<usize> = job
            .args
            .sizes
            .iter()
            .copied()
            .filter(|&s| keep(s))
            .collect();
        v.dedup();
        v
    };
    let lat_sizes: Vec<usize> = if !job.args.sizes.is_empty() {
        asked(&|s| (8..=4096).contains(&s))
    } else if job.args.quick {
        vec![8, 4096]
    } else {
        (3..=12).map(|p| 1usize << p).collect()
    };
    let bw_sizes: Vec<usize> = if !job.args.sizes.is_empty() {
        asked(&|s| (1024..=BW_MAX).contains(&s) && DATA_OFFSET + s <= seg_len)
    } else if job.args.quick {
        vec![1 << 10, 1 << 20]
    } else {
        (10..=26)
            .step_by(2)
            .map(|p| 1usize << p)
            .filter(|&s| DATA_OFFSET + s <= seg_len)
            .collect()
    };
    (lat_sizes, bw_sizes)
}

/// The observed latency of a put: a sequence number ping-pongs through the flag words
/// of the segments between the leader of `pair` and its peer (the follower answers);
/// the leader's round-trip times (two observed puts each), `None` elsewhere.
fn observed_lat<C: Conduit>(r: &mut Endpoint<C>, pair: Pair) -> Res<Option<Vec<f64>>> {
    let flag: GlobalPtr<u64> = GlobalPtr::new(EpAddr::rank(pair.peer), FLAG_OFFSET);
    let base = r.segment().as_ptr();
    // SAFETY: see the module's Safety section (aligned, mapped, 8-byte writes).
    let mine = unsafe { AtomicU64::from_ptr(base.add(FLAG_OFFSET).cast::<u64>()) };
    let mut seq = 0u64;
    if pair.leader {
        let v = batches(pair.batch, pair.count, |k| {
            for _ in 0..k {
                seq += 1;
                r.put_val(flag, seq, Blocking)?;
                while mine.load(Ordering::Acquire) != seq {
                    r.poll();
                }
            }
            Ok(())
        })?;
        r.put_val(flag, u64::MAX, Blocking)?;
        return Ok(Some(v));
    }
    if pair.follower {
        loop {
            let v = mine.load(Ordering::Acquire);
            if v == u64::MAX {
                break;
            }
            if v > seq {
                seq = v;
                r.put_val(flag, v, Blocking)?;
            }
            r.poll();
        }
    }
    Ok(None)
}

/// Fetch-and-add on a counter in the peer's segment (its first data word): the
/// leader's blocking latencies and `Nbi` rates per batch (the counter checked after),
/// `None` elsewhere. Collective over the team (an atomic domain, a barrier).
fn fadd<C: Conduit>(r: &mut Endpoint<C>, pair: Pair) -> Res<Option<(Vec<f64>, Vec<f64>)>> {
    let world = r.world();
    let ad = r.atomic_domain::<u64>(&world, AtomicOps::FADD | AtomicOps::GET)?;
    // The leader's counter lives in the peer's segment (first data word).
    let word: GlobalPtr<u64> = GlobalPtr::new(EpAddr::rank(pair.peer), DATA_OFFSET);
    let f = AtomicFlags::empty();
    barrier(r)?;
    if !pair.leader {
        return Ok(None);
    }
    let mut adds = 0u64;
    let lat = batches(pair.batch, pair.count, |k| {
        for _ in 0..k {
            std::hint::black_box(r.fetch_atomic(&ad, word, AtomicOp::Add(1), f, Blocking)?);
        }
        adds += k;
        Ok(())
    })?;
    let rate = batches(pair.batch, pair.count, |k| {
        for _ in 0..k {
            r.fetch_atomic(&ad, word, AtomicOp::Add(1), f, Nbi)?;
        }
        r.sync_nbi(NbiCategories::ATOMICS)?;
        adds += k;
        Ok(())
    })?;
    let got = r.fetch_atomic(&ad, word, AtomicOp::Get, f, Blocking)?;
    if got != adds {
        return Err(format!("the counter holds {got}, {adds} adds were made").into());
    }
    Ok(Some((lat, rate)))
}

/// A rank's part in the pair tests of [`run`]: its peer, whether it leads (measures)
/// or follows (answers), and the timing of the batches.
#[derive(Clone, Copy)]
struct Pair {
    peer: u32,
    leader: bool,
    follower: bool,
    batch: Duration,
    count: u32,
}

/// The put or get family of [`run`] (`job.family`): latencies at `sizes.0`, the AM
/// reference (`--am-ref`, answers counted in `pongs`), the observed put latency, and
/// bandwidths at `sizes.1`, between each leader and its peer; rank 0 reports each row
/// as it is measured. `bufs`: the local source and destination buffers.
/// The same operations as OpenSHMEM's `shmem_putmem` of 8 B + `shmem_quiet` and
/// `shmem_long_p` + `shmem_quiet`: a blocking put (complete at the target), then the
/// full barrier a quiet needs for store→load order. The times of both, in batches.
fn fence_lat<C: Conduit>(
    r: &mut Endpoint<C>,
    data: GlobalPtr<u8>,
    bytes: &[u8],
    batch: Duration,
    count: u32,
) -> Res<(Vec<f64>, Vec<f64>)> {
    let word: GlobalPtr<u64> = GlobalPtr::new(data.addr(), data.byte_offset());
    let fenced = batches(batch, count, |k| {
        for _ in 0..k {
            r.put(data, bytes, Blocking)?;
            gex_sync::word::full_fence();
        }
        Ok(())
    })?;
    let mut i = 0u64;
    let val = batches(batch, count, |k| {
        for _ in 0..k {
            i += 1;
            r.put_val(word, i, Blocking)?;
            gex_sync::word::full_fence();
        }
        Ok(())
    })?;
    Ok((fenced, val))
}

fn put_get<C: Conduit>(
    r: &mut Endpoint<C>,
    job: &RmaJob,
    pair: Pair,
    pongs: &AtomicU64,
    sizes: (&[usize], &[usize]),
    bufs: (&[u8], &mut [u8]),
    report: &impl Fn(&'static str, usize, &'static str, Vec<f64>),
) -> Res<()> {
    let me = r.rank();
    let Pair {
        peer,
        leader,
        batch,
        count,
        ..
    } = pair;
    let (lat_sizes, bw_sizes) = sizes;
    let (buf, dst) = bufs;
    let data: GlobalPtr<u8> = GlobalPtr::new(EpAddr::rank(peer), DATA_OFFSET);
    // One size after the other, a barrier before each: the leader's transfers in
    // `mode`, reported as `names` (put, get) in `unit` (`value` of size and time).
    let mut sweep = |r: &mut Endpoint<C>,
                     mode: Mode,
                     sizes: &[usize],
                     names: (&'static str, &'static str),
                     unit: &'static str,
                     value: fn(usize, f64) -> f64|
     -> Res<()> {
        for &s in sizes {
            barrier(r)?;
            if leader {
                let v = transfers(
                    r,
                    job.family,
                    mode,
                    data,
                    &buf[..s],
                    &mut dst[..s],
                    batch,
                    count,
                )?;
                if me == 0 {
                    let name = if job.family == Family::Put {
                        names.0
                    } else {
                        names.1
                    };
                    report(name, s, unit, v.iter().map(|&t| value(s, t)).collect());
                }
            }
        }
        Ok(())
    };
    sweep(
        r,
        Mode::Blocking,
        lat_sizes,
        ("put_lat", "get_lat"),
        "us",
        |_, t| t * 1e6,
    )?;
    if job.family == Family::Put && lat_sizes.contains(&8) {
        barrier(r)?;
        if leader {
            let (fenced, val) = fence_lat(r, data, &buf[..8], batch, count)?;
            if me == 0 {
                let us = |v: Vec<f64>| v.iter().map(|t| t * 1e6).collect();
                report("put_fence_lat", 8, "us", us(fenced));
                report("put_val_fence_lat", 8, "us", us(val));
            }
        }
    }
    if job.family == Family::Put && job.args.am_ref {
        barrier(r)?;
        if leader {
            let (a, p) = am_ref(r, pongs, peer, data, batch, count)?;
            if me == 0 {
                let ratio: Vec<f64> = p.iter().zip(&a).map(|(p, a)| p / a).collect();
                report("am_short_rtt", 0, "us", a.iter().map(|t| t * 1e6).collect());
                report(
                    "put_lat_8_alt",
                    8,
                    "us",
                    p.iter().map(|t| t * 1e6).collect(),
                );
                report("put_over_am_rtt", 8, "x", ratio);
            }
        }
    }
    if job.family == Family::Put {
        // Observed latency: a sequence number ping-pongs through the segments.
        barrier(r)?;
        let v = observed_lat(r, pair)?;
        if me == 0
            && let Some(v) = v
        {
            report(
                "put_observed_lat",
                8,
                "us",
                v.iter().map(|t| t * 1e6 / 2.0).collect(),
            );
        }
    }
    sweep(
        r,
        Mode::Stream,
        bw_sizes,
        ("put_bw", "get_bw"),
        "GB/s",
        |s, t| s as f64 / t / 1e9,
    )?;
    Ok(())
}

fn run<C: Conduit>(job: &RmaJob, client: &Client<C>) -> Res<()> {
    let (me, n) = (client.rank(), client.size());
    let mut r = client.endpoint(0)?;
    let pongs = Arc::new(AtomicU64::new(0));
    if job.args.am_ref {
        r.register_at(H_REF_PING.index(), |t: &mut Token<'_>, _am: Am<'_>| {
            let _ = t.reply(H_REF_PONG, Body::short(&[]));
        })?;
        let p = pongs.clone();
        r.register_at(
            H_REF_PONG.index(),
            move |_t: &mut Token<'_>, _am: Am<'_>| {
                p.fetch_add(1, Ordering::Relaxed);
            },
        )?;
    }
    crate::pin::pin_rank(client, job.pin)?;
    let reporter = Reporter::new(job.json);
    let (batch, count) = timing(job.args.quick, Duration::from_millis(40));
    if me == 0 {
        reporter.header(&[format!(
            "gex-perf {:?}: {n} ranks, conduit {}, wait policy {:?}; value: median of {count} batches, min/max: extreme batches",
            job.family,
            client.conduit_name(),
            r.wait_policy()
        )]);
    }
    let report = |name: &'static str, size: usize, unit: &'static str, mut v: Vec<f64>| {
        reporter.record(&Record::of_samples(client, name, size, unit, &mut v));
    };
    let leader = me % 2 == 0 && me + 1 < n;
    let pair = Pair {
        peer: if leader { me + 1 } else { me.wrapping_sub(1) },
        leader,
        follower: me % 2 == 1,
        batch,
        count,
    };
    let seg_len = r.segment().len();
    let (lat_sizes, bw_sizes) = sizes(job, seg_len);
    let most = bw_sizes
        .iter()
        .chain(&lat_sizes)
        .copied()
        .max()
        .unwrap_or(8);
    let (mut buf_store, mut dst_store) = (
        vec![0x5au8; most + PAGE + LOCAL_OFFSET],
        vec![0u8; most + PAGE + LOCAL_OFFSET],
    );
    let buf: &[u8] = placed(&mut buf_store, most);
    let dst: &mut [u8] = placed(&mut dst_store, most);
    match job.family {
        Family::Barrier => {
            // Every rank must run the same number of barriers, so the count is fixed
            // rather than calibrated per rank.
            let k: u64 = if job.args.quick { 2_000 } else { 20_000 };
            for _ in 0..k / 10 {
                barrier(&mut r)?;
            }
            let mut v = Vec::with_capacity(count as usize);
            for _ in 0..count {
                let t0 = Instant::now();
                for _ in 0..k {
                    barrier(&mut r)?;
                }
                v.push(t0.elapsed().as_secs_f64() / k as f64);
            }
            if me == 0 {
                report("barrier_lat", 0, "us", v.iter().map(|t| t * 1e6).collect());
            }
        }
        Family::Atomic if n >= 2 => {
            let v = fadd(&mut r, pair)?;
            if me == 0
                && let Some((lat, rate)) = v
            {
                report(
                    "atomic_fadd_lat",
                    8,
                    "us",
                    lat.iter().map(|t| t * 1e6).collect(),
                );
                report(
                    "atomic_fadd_rate",
                    8,
                    "Mop/s",
                    rate.iter().map(|t| 1e-6 / t).collect(),
                );
            }
        }
        Family::Put | Family::Get if n >= 2 => {
            let sizes = (&lat_sizes[..], &bw_sizes[..]);
            put_get(&mut r, job, pair, &pongs, sizes, (buf, dst), &report)?;
        }
        _ => return Err("put, get and atomic need at least 2 ranks".into()),
    }
    barrier(&mut r)?;
    Ok(())
}

/// How a batch of transfers completes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Every operation blocks until complete (latency).
    Blocking,
    /// Puts are NBI with one sync per batch; gets stay blocking (bandwidth).
    Stream,
}

/// Times batches of puts of `src` (or gets into `dst`) at `data`; seconds per operation.
#[allow(clippy::too_many_arguments)]
fn transfers<C: Conduit>(
    r: &mut Endpoint<C>,
    family: Family,
    mode: Mode,
    data: GlobalPtr<u8>,
    src: &[u8],
    dst: &mut [u8],
    batch: Duration,
    count: u32,
) -> Res<Vec<f64>> {
    batches(batch, count, |k| {
        match (family, mode) {
            (Family::Put, Mode::Blocking) => {
                for _ in 0..k {
                    r.put(data, src, Blocking)?;
                }
            }
            // The source is lent to the scope (no copy); the scope's end is the sync.
            (Family::Put, Mode::Stream) => r.scope(|s| {
                for _ in 0..k {
                    s.put_from(data, src)?;
                }
                Ok::<(), RmaError>(())
            })?,
            _ => {
                for _ in 0..k {
                    r.get(&mut *dst, data, Blocking)?;
                }
            }
        }
        Ok(())
    })
}
