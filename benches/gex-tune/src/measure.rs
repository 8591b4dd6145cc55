//! Timing one cell (operation, block bytes, algorithm) on the world team.
//!
//! Every rank runs the operation back to back with `u8` blocks (reductions: wrapping
//! sum, roots: rank 0). A warm-up doubles the number of calls per batch until a batch
//! lasts a quarter of the batch budget on the slowest rank (the ranks agree with a
//! max-allreduce, so every rank runs the same calls), then `batches` batches are timed;
//! each rank returns its own per-call times, rank 0's median is the figure reported.
//! The calls are the blocking ones over buffers allocated once per cell, in the
//! segment ([`Placement::Segment`], the default) or in private memory: one
//! [`CollExt::collective`] per call with the operation's borrowed descriptor (the
//! plain barrier: [`CollExt::barrier`]), made and consumed inside the loop, so the
//! time per call is the collective's as a program calls it. Every wait is the
//! endpoint's own (its one progress engine): this module never polls by itself.
#![allow(unsafe_code)]

use gex::core::Endpoint;
use gex::spi::Conduit;
use gex::{Blocking, Team};
use gex_coll::{
    Allreduce, Barrier, Broadcast, BuiltinOp, CollError, CollExt, Exchange, Exscan, Gather,
    GatherAll, OpKind, Opts, Query, Reduce, ReduceOp, ReduceScatter, Scan, Scatter,
};
use std::time::{Duration, Instant};

/// How long to measure one cell.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// Target duration of one batch.
    pub batch: Duration,
    /// Timed batches.
    pub batches: u32,
}

impl Budget {
    /// 40 ms × 7 batches (gex-perf's full run).
    pub const FULL: Budget = Budget {
        batch: Duration::from_millis(40),
        batches: 7,
    };
    /// 12 ms × 5 batches (gex-tune's default).
    pub const TUNE: Budget = Budget {
        batch: Duration::from_millis(12),
        batches: 5,
    };
    /// 4 ms × 3 batches (smoke runs).
    pub const QUICK: Budget = Budget {
        batch: Duration::from_millis(4),
        batches: 3,
    };
}

/// The query the tuner answers for `op` with blocks of `bytes` on a team of `size` as
/// measured here (local address mode, default sync modes, commutative); `shm`: the
/// team has a shared-memory channel ([`CollExt::shared_memory`]).
pub fn query(op: OpKind, size: u32, bytes: usize, shm: bool) -> Query {
    Query {
        shm,
        ..Query::plain(op, size, bytes)
    }
}

/// Input bytes one rank passes for `op` with blocks of `bytes` on `p` members.
fn input_len(op: OpKind, p: usize, bytes: usize) -> usize {
    match op {
        OpKind::Barrier => 0,
        OpKind::Exchange | OpKind::Scatter | OpKind::ReduceScatter => bytes * p,
        _ => bytes,
    }
}

/// Output bytes one rank gets for `op` with blocks of `bytes` on `p` members (the
/// largest over members: a root's).
fn output_len(op: OpKind, p: usize, bytes: usize) -> usize {
    match op {
        OpKind::Barrier => 0,
        OpKind::Gather | OpKind::GatherAll | OpKind::Exchange => bytes * p,
        _ => bytes,
    }
}

/// Where the benchmark's buffers live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Placement {
    /// In the rank's segment, as a PGAS program keeps shared data (and as GASNet-EX's
    /// testcollperf runs): `shm` then reads blocks of 16 KiB and more straight from
    /// the publisher's segment.
    #[default]
    Segment,
    /// In private heap memory (as MPI benchmarks run): every block is copied through
    /// the shared-memory slots.
    Private,
}

impl Placement {
    /// `segment` or `private`.
    pub fn name(self) -> &'static str {
        match self {
            Placement::Segment => "segment",
            Placement::Private => "private",
        }
    }

    /// The placement called `name` ([`Placement::name`]), for the tools' `--buffers`.
    ///
    /// # Errors
    /// Any other name, with a message listing the two.
    pub fn parse(name: &str) -> Result<Placement, String> {
        [Placement::Segment, Placement::Private]
            .into_iter()
            .find(|p| p.name() == name)
            .ok_or_else(|| format!("`{name}` is not a placement (segment, private)"))
    }
}

/// The source and destination buffers of one rank for one cell.
#[derive(Debug)]
pub struct Buffers {
    src: *mut u8,
    src_len: usize,
    dst: *mut u8,
    dst_len: usize,
    /// The heap memory behind `src` and `dst` (private placement).
    _heap: Option<(Vec<u8>, Vec<u8>)>,
}

impl Buffers {
    /// Buffers for `op` with blocks of `bytes` on `ep`'s world team, placed as asked:
    /// in the segment, the input at offset 0 and the output at the next 64-byte
    /// boundary.
    ///
    /// # Safety
    /// With [`Placement::Segment`], nothing else may write or read this rank's
    /// segment bytes `0..input + output` while the buffers are alive (no RMA into
    /// them, no other `Buffers` of the same rank, no scratch region there), and the
    /// buffers must not outlive `ep`'s client (which keeps the segment mapped): they
    /// hold its address, not a borrow.
    ///
    /// # Errors
    /// [`CollError::BadLength`] if the segment is too small for them.
    pub unsafe fn new<C: Conduit>(
        ep: &Endpoint<C>,
        op: OpKind,
        bytes: usize,
        placement: Placement,
    ) -> Result<Buffers, CollError> {
        let p = ep.world().size() as usize;
        let (src_len, dst_len) = (input_len(op, p, bytes), output_len(op, p, bytes));
        match placement {
            Placement::Private => {
                let (mut s, mut d) = (vec![1u8; src_len], vec![0u8; dst_len]);
                Ok(Buffers {
                    src: s.as_mut_ptr(),
                    src_len,
                    dst: d.as_mut_ptr(),
                    dst_len,
                    _heap: Some((s, d)),
                })
            }
            Placement::Segment => {
                let seg = ep.segment();
                let at = src_len.next_multiple_of(64);
                if at + dst_len > seg.len() {
                    return Err(CollError::BadLength {
                        what: "benchmark buffers in the segment",
                        expected: at + dst_len,
                        got: seg.len(),
                    });
                }
                let base = seg.as_ptr();
                // SAFETY: both ranges lie inside the mapped segment (checked above) and
                // do not overlap; the caller rules out other accesses to them.
                unsafe {
                    std::ptr::write_bytes(base, 1, src_len);
                    std::ptr::write_bytes(base.add(at), 0, dst_len);
                    Ok(Buffers {
                        src: base,
                        src_len,
                        dst: base.add(at),
                        dst_len,
                        _heap: None,
                    })
                }
            }
        }
    }

    /// The input and the output.
    pub fn io(&mut self) -> (&[u8], &mut [u8]) {
        // SAFETY: two disjoint live ranges (heap vectors owned here, or segment bytes
        // reserved by the caller of `new`), borrowed for as long as `self` is.
        unsafe {
            (
                std::slice::from_raw_parts(self.src, self.src_len),
                std::slice::from_raw_parts_mut(self.dst, self.dst_len),
            )
        }
    }
}

/// Runs `k` blocking calls of `op` with blocks of `bytes` under `opts` on `ep`'s world
/// team, over `bufs`: each call is one [`CollExt::collective`] with the operation's
/// borrowed descriptor (`Broadcast::in_place`, `Allreduce::slices`, ...; roots: rank
/// 0, reductions: wrapping sum) in mode [`Blocking`], as MPI benchmarks call
/// `MPI_Bcast`, so gex-coll's direct shared-memory path runs when it applies. A barrier
/// under default options is [`CollExt::barrier`] (what a program calls); with an
/// algorithm forced, the [`Barrier`] descriptor.
///
/// # Errors
/// The collective's error.
pub fn calls<C: Conduit>(
    ep: &mut Endpoint<C>,
    op: OpKind,
    bytes: usize,
    opts: &Opts<'_>,
    k: u64,
    bufs: &mut Buffers,
) -> Result<(), CollError> {
    let w = ep.world();
    // Made once: each call borrows it (no reference count touched per call).
    let sum = ReduceOp::<u8>::builtin(BuiltinOp::Sum);
    let plain_barrier = *opts == Opts::default();
    let o = *opts;
    let (src, dst) = bufs.io();
    for _ in 0..k {
        match op {
            OpKind::Barrier if plain_barrier => ep.barrier(&w)?,
            OpKind::Barrier => ep.collective(&w, Barrier::new().opts(o), Blocking)?,
            OpKind::Broadcast => {
                let d = Broadcast::in_place(0, &mut dst[..bytes]).opts(o);
                ep.collective(&w, d, Blocking)?
            }
            OpKind::Scatter => {
                let d = Scatter::slices(0, src, &mut dst[..bytes]).opts(o);
                ep.collective(&w, d, Blocking)?
            }
            OpKind::Gather => ep.collective(&w, Gather::slices(0, src, dst).opts(o), Blocking)?,
            OpKind::GatherAll => {
                ep.collective(&w, GatherAll::slices(src, dst).opts(o), Blocking)?
            }
            OpKind::Exchange => ep.collective(&w, Exchange::slices(src, dst).opts(o), Blocking)?,
            OpKind::Reduce => {
                let d = Reduce::slices(0, src, dst, &sum).opts(o);
                ep.collective(&w, d, Blocking)?
            }
            OpKind::Allreduce => {
                let d = Allreduce::slices(src, dst, &sum).opts(o);
                ep.collective(&w, d, Blocking)?
            }
            OpKind::ReduceScatter => {
                let d = ReduceScatter::slices(src, &mut dst[..bytes], &sum).opts(o);
                ep.collective(&w, d, Blocking)?
            }
            OpKind::Scan => {
                let d = Scan::slices(src, dst, &sum).opts(o);
                ep.collective(&w, d, Blocking)?
            }
            OpKind::Exscan => {
                let d = Exscan::slices(src, dst, &sum).opts(o);
                ep.collective(&w, d, Blocking)?
            }
        }
    }
    Ok(())
}

/// Times `op` with blocks of `bytes` under `opts` (see the module docs) and returns
/// this rank's µs per call of every timed batch. Collective over `ep`'s world team.
///
/// # Safety
/// As [`Buffers::new`] for `placement` (the segment's first bytes are the buffers).
///
/// # Errors
/// The collective's error.
pub unsafe fn time_cell<C: Conduit>(
    ep: &mut Endpoint<C>,
    op: OpKind,
    bytes: usize,
    opts: &Opts<'_>,
    budget: Budget,
    placement: Placement,
) -> Result<Vec<f64>, CollError> {
    let w = ep.world();
    // SAFETY: forwarded to the caller.
    let mut bufs = unsafe { Buffers::new(ep, op, bytes, placement)? };
    let iters = calibrate(ep, &w, op, bytes, opts, budget, &mut bufs)?;
    let mut per = Vec::with_capacity(budget.batches as usize);
    for _ in 0..budget.batches {
        ep.barrier(&w)?;
        let t0 = Instant::now();
        calls(ep, op, bytes, opts, iters, &mut bufs)?;
        per.push(t0.elapsed().as_secs_f64() * 1e6 / iters as f64);
    }
    Ok(per)
}

/// Calls per timed batch for one variant of a cell: doubles a trial batch until it
/// lasts a quarter of `budget.batch` on the slowest member (agreed by a max-allreduce,
/// so every member runs the same number of calls), then takes four times that.
/// Collective over `w`, the world team.
fn calibrate<C: Conduit>(
    ep: &mut Endpoint<C>,
    w: &Team,
    op: OpKind,
    bytes: usize,
    opts: &Opts<'_>,
    budget: Budget,
    bufs: &mut Buffers,
) -> Result<u64, CollError> {
    let mut k = 1u64;
    loop {
        ep.barrier(w)?;
        let t0 = Instant::now();
        calls(ep, op, bytes, opts, k, bufs)?;
        let long = t0.elapsed() >= budget.batch / 4 || k >= 1 << 24;
        let (mine, mut all) = ([u8::from(long)], [0u8]);
        let agree = Allreduce::slices(&mine, &mut all, BuiltinOp::Max);
        ep.collective(w, agree, Blocking)?;
        if all[0] == 1 {
            return Ok((k * 4).max(1));
        }
        k *= 2;
    }
}

/// Times several variants (`opts`, e.g. forced algorithms) of one cell with their
/// batches interleaved — batch 1 of every variant, then batch 2, … — so that a change
/// of machine load during the cell hits every variant alike and their ratios stay
/// meaningful. Each variant's batch size is calibrated first as in [`time_cell`].
/// Returns this rank's µs per call per batch, per variant. Collective over `ep`'s
/// world team.
///
/// # Safety
/// As [`Buffers::new`] for `placement`.
///
/// # Errors
/// The collective's error.
pub unsafe fn time_interleaved<C: Conduit>(
    ep: &mut Endpoint<C>,
    op: OpKind,
    bytes: usize,
    opts: &[Opts<'_>],
    budget: Budget,
    placement: Placement,
) -> Result<Vec<Vec<f64>>, CollError> {
    let w = ep.world();
    // SAFETY: forwarded to the caller.
    let mut bufs = unsafe { Buffers::new(ep, op, bytes, placement)? };
    let mut iters = Vec::with_capacity(opts.len());
    for o in opts {
        iters.push(calibrate(ep, &w, op, bytes, o, budget, &mut bufs)?);
    }
    let mut per = vec![Vec::with_capacity(budget.batches as usize); opts.len()];
    for _ in 0..budget.batches {
        for (i, o) in opts.iter().enumerate() {
            ep.barrier(&w)?;
            let t0 = Instant::now();
            calls(ep, op, bytes, o, iters[i], &mut bufs)?;
            per[i].push(t0.elapsed().as_secs_f64() * 1e6 / iters[i] as f64);
        }
    }
    Ok(per)
}

/// The median of `v` (0 for an empty slice).
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => 0.0,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_lengths() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
        assert_eq!(input_len(OpKind::Exchange, 4, 8), 32);
        assert_eq!(input_len(OpKind::Barrier, 4, 8), 0);
        assert_eq!(input_len(OpKind::Gather, 4, 8), 8);
        assert_eq!(output_len(OpKind::Gather, 4, 8), 32);
        assert_eq!(output_len(OpKind::Reduce, 4, 8), 8);
    }
}
