//! The delta kernels of `gex-perf overlap --kernel ...` (gex-overlap, seed 001's
//! kernels), each against its own blocking baseline in the same run, round by round
//! (the order of the two alternates):
//!
//! - `pair` (ranks 0 and 1): rank 0 updates one page in `--fraction` (8) of its
//!   `--size` buffer (`--work` steps of arithmetic per page; a block of pages that
//!   moves round by round) and sends it to rank 1, which reads all of it. Baseline: the whole
//!   buffer sent (a blocking put and a flag) and received (copied out); delta: a
//!   `DeltaBuf` sent to a receive window (only the updated pages cross, each as soon as
//!   a delta of them is computed) and a `delta_recv` read page by page, no wait.
//! - `cascade` (all ranks): a chain; rank 0 computes a buffer, every other rank
//!   computes its own from the one it receives (page by page, `--work` per page) and
//!   sends it on; the last keeps it. Baseline: each rank receives the whole buffer,
//!   computes, sends; delta: `delta_relay` stages, each chunk sent as computed.
//! - `ring` (all ranks): each rank computes from what its left neighbour sent last
//!   (its own seed at the first step) and sends to its right, for as many steps as
//!   ranks.
//! - `reduce` (all ranks): an array reduce up the binary tree (children `2r+1`,
//!   `2r+2`): every rank adds its children's buffers to its own contribution (computed,
//!   `--work` per page) and sends the sum to its parent.
//!
//! The round time is the slowest rank's, from a barrier to its end. Every rank
//! compares the checksum of what it computed (or received, in `pair`) in the two
//! variants of each round: they must be equal.
//!
//! Rows (rank 0; median of `--rounds` rounds after one warm-up round, min/max the
//! extreme rounds): `overlap_delta_<kernel>_blocking` (`pair`: `_whole`) and
//! `overlap_delta_<kernel>_delta` (µs per round), `overlap_delta_<kernel>_speedup`
//! (`x`, blocking / delta per round).

use crate::overlap::OverlapArgs;
use crate::report::{Record, Reporter};
use gex::coll::{Allreduce, BuiltinOp, CollExt};
use gex::core::{Client, Endpoint};
use gex::overlap::{DeltaBuf, DeltaExt, DeltaRecv, Tracking, page_size};
use gex::rma::{GlobalPtr, RmaExt};
use gex::spi::Conduit;
use gex::{Blocking, EpAddr};
use std::time::Instant;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Which delta kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kernel {
    Pair,
    Cascade,
    Ring,
    Reduce,
}

impl Kernel {
    fn names(self) -> [&'static str; 3] {
        match self {
            Kernel::Pair => [
                "overlap_delta_pair_whole",
                "overlap_delta_pair_delta",
                "overlap_delta_pair_speedup",
            ],
            Kernel::Cascade => [
                "overlap_delta_cascade_blocking",
                "overlap_delta_cascade_delta",
                "overlap_delta_cascade_speedup",
            ],
            Kernel::Ring => [
                "overlap_delta_ring_blocking",
                "overlap_delta_ring_delta",
                "overlap_delta_ring_speedup",
            ],
            Kernel::Reduce => [
                "overlap_delta_reduce_blocking",
                "overlap_delta_reduce_delta",
                "overlap_delta_reduce_speedup",
            ],
        }
    }
}

/// Steps of arithmetic per page when `--work` is not given.
pub(crate) const DEFAULT_WORK: u64 = 4096;

/// The segment a delta run needs for buffers of `len` bytes: two receive windows and
/// two blocking regions.
pub(crate) fn segment_len(len: usize) -> usize {
    4 * slot(len) + (1 << 20)
}

fn slot(len: usize) -> usize {
    DeltaRecv::window_len(len).next_multiple_of(1 << 16)
}

/// A window (`k` in 0..2) or a blocking region (`k` in 2..4) of `rank`'s segment.
fn at(rank: u32, k: usize, len: usize) -> GlobalPtr<u8> {
    GlobalPtr::new(EpAddr::rank(rank), k * slot(len))
}

fn lcg(x: u64) -> u64 {
    x.wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407)
}

/// An order-sensitive checksum, cheap next to the copies (8 bytes per step).
fn checksum(b: &[u8]) -> u64 {
    let mut words = b.chunks_exact(8);
    let mut s = 0u64;
    for w in &mut words {
        let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        s = s.rotate_left(5).wrapping_add(w);
    }
    for &x in words.remainder() {
        s = s.rotate_left(5).wrapping_add(u64::from(x));
    }
    s
}

/// One page of a stage: `work` dependent steps seeded by `seed` and the inputs'
/// bytes, then the page written from the result plus the inputs (byte-wise sum).
#[inline(never)]
fn stage_page(seed: u64, ins: &[&[u8]], out: &mut [u8], work: u64) {
    let mut x = ins.iter().fold(seed, |s, i| s ^ checksum(i));
    for _ in 0..work {
        x = std::hint::black_box(lcg(x));
    }
    for (i, o) in out.iter_mut().enumerate() {
        let v = (x >> ((i & 7) * 8)) as u8 ^ (i as u8);
        *o = ins.iter().fold(v, |s, inp| s.wrapping_add(inp[i]));
    }
}

/// A stage over `[at, at + out.len())` of the buffer, page by page.
fn stage(seed: u64, at: usize, ins: &[&[u8]], out: &mut [u8], work: u64) {
    let pg = page_size();
    let mut pieces: Vec<&[u8]> = Vec::with_capacity(ins.len());
    for (j, o) in out.chunks_mut(pg).enumerate() {
        let off = j * pg;
        pieces.clear();
        pieces.extend(ins.iter().map(|i| &i[off..off + o.len()]));
        let page = (at + off) / pg;
        stage_page(
            seed ^ (page as u64).wrapping_mul(0x9E37_79B9),
            &pieces,
            o,
            work,
        );
    }
}

fn seed(rank: u32, round: u32) -> u64 {
    lcg(u64::from(rank) << 32 | u64::from(round))
}

/// How the baseline waits: as gex-overlap's fault handler does (spin, then yield,
/// then sleep 20 µs at a time), so that neither side leaves the other fewer cores
/// when ranks outnumber them. Every look serves the endpoint first: over a network
/// whose one-sided operations progress in software at the target (ofi
/// `tcp;ofi_rxm`), the peer's put into this rank's region and its get of the
/// acknowledgement complete only while this rank polls (without it the kernel hung
/// there: the receiver looked at its own flag, the sender's put never completed).
fn backoff<C: Conduit>(ep: &mut Endpoint<C>, spins: &mut u32) {
    ep.poll();
    if *spins < 256 {
        std::hint::spin_loop();
    } else if *spins < 1024 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(std::time::Duration::from_micros(20));
    }
    *spins += 1;
}

/// The blocking baseline's channel: the whole buffer put into region `k` of the
/// receiver with a flag after it; the receiver copies it out and acknowledges, and the
/// sender waits for the previous acknowledgement before it writes the region again.
fn bsend<C: Conduit>(ep: &mut Endpoint<C>, to: u32, k: usize, data: &[u8], seq: u64) -> Res<()> {
    let region = at(to, k, data.len());
    let ctl = region.offset + data.len().next_multiple_of(64);
    let mut spins = 0;
    loop {
        let ack: u64 = ep.get_val(GlobalPtr::new(EpAddr::rank(to), ctl + 8), Blocking)?;
        if ack + 1 >= seq {
            break;
        }
        backoff(ep, &mut spins);
    }
    ep.put(region, data, Blocking)?;
    ep.put_val(GlobalPtr::<u64>::new(EpAddr::rank(to), ctl), seq, Blocking)?;
    Ok(())
}

fn brecv<C: Conduit>(ep: &mut Endpoint<C>, k: usize, out: &mut [u8], seq: u64) -> Res<()> {
    let me = ep.addr();
    let region = GlobalPtr::<u8>::new(me, k * slot(out.len()));
    let ctl = region.offset + out.len().next_multiple_of(64);
    let mut spins = 0;
    loop {
        let flag: u64 = ep.get_val(GlobalPtr::new(me, ctl), Blocking)?;
        if flag >= seq {
            break;
        }
        backoff(ep, &mut spins);
    }
    ep.get(&mut out[..], region, Blocking)?;
    ep.put_val(GlobalPtr::<u64>::new(me, ctl + 8), seq, Blocking)?;
    Ok(())
}

/// What every round of a kernel runs with: the kernel, `--work` steps per page,
/// `--fraction` (`pair`) and the page size.
#[derive(Clone, Copy)]
struct Cfg {
    kernel: Kernel,
    work: u64,
    fraction: usize,
    pg: usize,
}

/// A rank's state for one kernel: its delta buffers and windows, its plain buffers.
struct State {
    tx: DeltaBuf,
    rx: Vec<DeltaRecv>,
    plain: Vec<u8>,
    ins: Vec<Vec<u8>>,
    local: Vec<u8>,
}

fn tree(me: u32, n: u32) -> (Vec<u32>, Option<u32>) {
    let kids = [2 * me + 1, 2 * me + 2]
        .into_iter()
        .filter(|&c| c < n)
        .collect();
    (kids, (me > 0).then(|| (me - 1) / 2))
}

/// Runs `kernel` for the warm-up round and `--rounds` rounds; rank 0 reports to `rep`.
pub(crate) fn run<C: Conduit>(
    args: &OverlapArgs,
    rep: &Reporter,
    kernel: Kernel,
    client: &Client<C>,
    ep: &mut Endpoint<C>,
) -> Res<()> {
    let (me, n) = (client.rank(), client.size());
    let world = ep.world();
    let len = args.size;
    let pg = page_size();
    let work = args.work.unwrap_or(DEFAULT_WORK);
    let tracking = if args.os_triggered {
        Tracking::OsTriggered
    } else {
        Tracking::Annotated
    };
    // Receive windows: from the left (chain, ring, pair) or from each child (reduce).
    let inputs = match kernel {
        Kernel::Pair => usize::from(me == 1),
        Kernel::Cascade => usize::from(me > 0),
        Kernel::Ring => 1,
        Kernel::Reduce => tree(me, n).0.len(),
    };
    let mut st = State {
        tx: DeltaBuf::new(len, tracking)?,
        rx: (0..inputs)
            .map(|k| ep.delta_recv_window(k * slot(len), len))
            .collect::<Result<_, _>>()?,
        plain: vec![0; len],
        ins: vec![vec![0; len]; inputs.max(1)],
        local: vec![0; len],
    };
    // The blocking regions' flags and acknowledgements start at 0 in every run (an
    // earlier kernel of this process used them).
    for k in 2..4 {
        let ctl = k * slot(len) + len.next_multiple_of(64);
        ep.put_val(GlobalPtr::<u64>::new(ep.addr(), ctl), 0u64, Blocking)?;
        ep.put_val(GlobalPtr::<u64>::new(ep.addr(), ctl + 8), 0u64, Blocking)?;
    }
    ep.barrier(&world)?;
    let (mut blocking, mut delta, mut speedup) = (Vec::new(), Vec::new(), Vec::new());
    let mut seq = 0u64;
    let cfg = Cfg {
        kernel,
        work,
        fraction: args.fraction as usize,
        pg,
    };
    for round in 0..=args.rounds {
        let mut times = [0.0f64; 2];
        let mut sums = [0u64; 2];
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for use_delta in order {
            ep.barrier(&world)?;
            let t0 = Instant::now();
            let sum = if use_delta {
                run_delta(ep, &mut st, cfg, round)?
            } else {
                run_blocking(ep, &mut st, cfg, round, &mut seq)?
            };
            let ns = t0.elapsed().as_nanos() as u64;
            let slowest =
                ep.collective(&world, Allreduce::new(vec![ns], BuiltinOp::Max), Blocking)?;
            times[usize::from(use_delta)] = slowest[0] as f64 / 1e3;
            sums[usize::from(use_delta)] = sum;
        }
        if sums[0] != sums[1] {
            return Err(format!(
                "{kernel:?} round {round}: rank {me} computed checksum {} blocking, {} delta",
                sums[0], sums[1]
            )
            .into());
        }
        if round > 0 {
            blocking.push(times[0]);
            delta.push(times[1]);
            speedup.push(times[0] / times[1].max(1e-3));
        }
    }
    for r in &mut st.rx {
        ep.delta_recv_wait(r)?;
    }
    ep.barrier(&world)?;
    if me == 0 {
        rep.header(&[format!(
            "gex-perf overlap --kernel {kernel:?}: {n} ranks, conduit {}, {len} B buffers, {work} steps per page, {} tracking; value: median of {} rounds",
            client.conduit_name(),
            if args.os_triggered { "OS-triggered" } else { "annotated" },
            args.rounds
        )]);
        let names = kernel.names();
        for (name, unit, v) in [
            (names[0], "us", &mut blocking),
            (names[1], "us", &mut delta),
            (names[2], "x", &mut speedup),
        ] {
            rep.record(&Record::of_samples(client, name, len, unit, v));
        }
    }
    Ok(())
}

/// The pages `pair` updates in `round`: a block of one page in `fraction`, at a
/// place that moves round by round (an iterative update of a part of the array).
fn pair_pages(len: usize, pg: usize, round: u32, fraction: usize) -> std::ops::Range<usize> {
    let pages = len.div_ceil(pg);
    let n = pages.div_ceil(fraction);
    let start = (round as usize * 7919 % pages.max(1)).min(pages - n);
    start..start + n
}

/// `pair`'s update of page `p` of `buf` in `round` (rank 0's stage); the page's end.
fn pair_update(buf: &mut [u8], p: usize, round: u32, cfg: Cfg) -> usize {
    let end = ((p + 1) * cfg.pg).min(buf.len());
    stage(
        seed(0, round),
        p * cfg.pg,
        &[],
        &mut buf[p * cfg.pg..end],
        cfg.work,
    );
    end
}

fn run_blocking<C: Conduit>(
    ep: &mut Endpoint<C>,
    st: &mut State,
    cfg: Cfg,
    round: u32,
    seq: &mut u64,
) -> Res<u64> {
    let (me, n) = (ep.addr().rank, ep.world().size());
    let len = st.plain.len();
    *seq += 1;
    let s = *seq;
    match cfg.kernel {
        Kernel::Pair => {
            if me == 0 {
                for p in pair_pages(len, cfg.pg, round, cfg.fraction) {
                    pair_update(&mut st.plain, p, round, cfg);
                }
                bsend(ep, 1, 2, &st.plain, s)?;
            } else if me == 1 {
                brecv(ep, 2, &mut st.ins[0], s)?;
                return Ok(checksum(&st.ins[0]));
            }
            Ok(0)
        }
        Kernel::Cascade => {
            let sd = seed(me, round);
            if me == 0 {
                stage(sd, 0, &[], &mut st.plain, cfg.work);
            } else {
                brecv(ep, 2, &mut st.ins[0], s)?;
                stage(sd, 0, &[&st.ins[0]], &mut st.plain, cfg.work);
            }
            if me + 1 < n {
                bsend(ep, me + 1, 2, &st.plain, s)?;
            }
            Ok(checksum(&st.plain))
        }
        Kernel::Ring => {
            let right = (me + 1) % n;
            // The channel from the left carries n - 1 buffers per round, numbered on.
            let base = (s - 1) * u64::from(n - 1);
            for step in 0..n {
                let sd = seed(me, round * n + step);
                if step == 0 {
                    stage(sd, 0, &[], &mut st.plain, cfg.work);
                } else {
                    brecv(ep, 2, &mut st.ins[0], base + u64::from(step))?;
                    stage(sd, 0, &[&st.ins[0]], &mut st.plain, cfg.work);
                }
                if step + 1 < n {
                    bsend(ep, right, 2, &st.plain, base + u64::from(step) + 1)?;
                }
            }
            Ok(checksum(&st.plain))
        }
        Kernel::Reduce => {
            let (kids, parent) = tree(me, n);
            for k in 0..kids.len() {
                brecv(ep, 2 + k, &mut st.ins[k], s)?;
            }
            let ins: Vec<&[u8]> = st.ins[..kids.len()].iter().map(|v| &v[..]).collect();
            stage(seed(me, round), 0, &ins, &mut st.plain, cfg.work);
            if let Some(p) = parent {
                bsend(ep, p, 2 + ((me - 1) % 2) as usize, &st.plain, s)?;
            }
            Ok(checksum(&st.plain))
        }
    }
}

/// A relay stage of `cascade` and `reduce`: computes from every input window of `st`
/// into its delta buffer (`work` steps per page, seeded by `sd`), sent to `to` chunk by
/// chunk as computed; the checksum of what was sent.
fn relay<C: Conduit>(
    ep: &mut Endpoint<C>,
    st: &mut State,
    to: GlobalPtr<u8>,
    sd: u64,
    work: u64,
) -> Res<u64> {
    ep.delta_send_begin(&mut st.tx, to)?;
    let ins: Vec<&DeltaRecv> = st.rx.iter().collect();
    ep.delta_relay(&ins, &mut st.tx, 0, |a, i, o| stage(sd, a, i, o, work))?;
    ep.delta_end(&mut st.tx)?;
    let sum = checksum(&st.tx);
    ep.delta_wait(&mut st.tx)?;
    Ok(sum)
}

fn run_delta<C: Conduit>(ep: &mut Endpoint<C>, st: &mut State, cfg: Cfg, round: u32) -> Res<u64> {
    let (me, n) = (ep.addr().rank, ep.world().size());
    let len = st.tx.len();
    // The end of a chain or the root of a tree computes locally from its inputs,
    // chunk by chunk as their pages arrive.
    let local = |st: &mut State, sd: u64| {
        let chunk = 16 * cfg.pg;
        let mut at = 0;
        while at < len {
            let end = (at + chunk).min(len);
            let ins: Vec<&[u8]> = st.rx.iter().map(|r| &r[at..end]).collect();
            stage(sd, at, &ins, &mut st.local[at..end], cfg.work);
            at = end;
        }
        checksum(&st.local)
    };
    match cfg.kernel {
        Kernel::Pair => {
            if me == 0 {
                ep.delta_send_begin(&mut st.tx, at(1, 0, len))?;
                let mut since_flush = 0;
                for p in pair_pages(len, cfg.pg, round, cfg.fraction) {
                    let end = pair_update(&mut st.tx, p, round, cfg);
                    match st.tx.mode() {
                        Tracking::Annotated => {
                            ep.delta_mark(&mut st.tx, p * cfg.pg, end - p * cfg.pg)?
                        }
                        Tracking::OsTriggered => {
                            since_flush += 1;
                            if since_flush == 4 {
                                ep.delta_flush(&mut st.tx)?;
                                since_flush = 0;
                            }
                        }
                    }
                }
                ep.delta_end(&mut st.tx)?;
                ep.delta_wait(&mut st.tx)?;
            } else if me == 1 {
                ep.delta_recv(&mut st.rx[0])?;
                return Ok(checksum(&st.rx[0]));
            }
            Ok(0)
        }
        Kernel::Cascade => {
            for r in &mut st.rx {
                ep.delta_recv(r)?;
            }
            let sd = seed(me, round);
            if me + 1 == n {
                return Ok(local(st, sd));
            }
            relay(ep, st, at(me + 1, 0, len), sd, cfg.work)
        }
        Kernel::Ring => {
            let right = (me + 1) % n;
            let mut sum = 0;
            for step in 0..n {
                let sd = seed(me, round * n + step);
                if step + 1 == n {
                    sum = local(st, sd);
                    break;
                }
                ep.delta_send_begin(&mut st.tx, at(right, 0, len))?;
                let ins: Vec<&DeltaRecv> = if step == 0 {
                    vec![]
                } else {
                    st.rx.iter().collect()
                };
                ep.delta_relay(&ins, &mut st.tx, 0, |a, i, o| stage(sd, a, i, o, cfg.work))?;
                ep.delta_end(&mut st.tx)?;
                // Left's output of this step, the input of the next.
                ep.delta_recv(&mut st.rx[0])?;
            }
            Ok(sum)
        }
        Kernel::Reduce => {
            let (_, parent) = tree(me, n);
            for r in &mut st.rx {
                ep.delta_recv(r)?;
            }
            let sd = seed(me, round);
            let Some(p) = parent else {
                return Ok(local(st, sd));
            };
            relay(ep, st, at(p, ((me - 1) % 2) as usize, len), sd, cfg.work)
        }
    }
}
