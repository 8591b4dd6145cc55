//! Timing one cell (operation, block bytes, algorithm) on the world team.
//!
//! Every rank runs the operation back to back with `u8` blocks (reductions: wrapping
//! sum, roots: rank 0). A warm-up doubles the number of calls per batch until a batch
//! lasts a quarter of the batch budget on the slowest rank (the ranks agree with a
//! max-allreduce, so every rank runs the same calls), then `batches` batches are timed;
//! each rank returns its own per-call times, rank 0's median is the figure reported.

use gex::spi::Conduit;
use gex_coll::{AddrMode, BuiltinOp, CollEp, CollError, OpKind, Opts, Query, ReduceOp};
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
/// team has a shared-memory channel ([`CollEp::shared_memory`](gex_coll::CollEp::shared_memory)).
pub fn query(op: OpKind, size: u32, bytes: usize, shm: bool) -> Query {
    Query {
        op,
        size,
        bytes,
        addr: AddrMode::Local,
        sync: Default::default(),
        commutative: true,
        scratch: false,
        shm,
        hier: false,
        hosts: 0,
        host_ranges: false,
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

/// Runs `k` calls of `op` with blocks of `bytes` under `opts` on the world team.
///
/// # Errors
/// The collective's error.
pub fn calls<C: Conduit>(
    c: &mut CollEp<C>,
    op: OpKind,
    bytes: usize,
    opts: &Opts<'_>,
    k: u64,
) -> Result<(), CollError> {
    let w = c.world().clone();
    let p = w.size() as usize;
    let sum = ReduceOp::<u8>::builtin(BuiltinOp::Sum)?;
    let len = input_len(op, p, bytes);
    for _ in 0..k {
        let buf = vec![1u8; len];
        match op {
            OpKind::Barrier => {
                let h = c.barrier_nb(&w, opts)?;
                c.wait(h)?
            }
            OpKind::Broadcast => {
                let h = c.broadcast_nb(&w, 0, buf, opts)?;
                c.wait(h).map(drop)?
            }
            OpKind::Scatter => {
                let h = c.scatter_nb(&w, 0, buf, bytes, opts)?;
                c.wait(h).map(drop)?
            }
            OpKind::Gather => {
                let h = c.gather_nb(&w, 0, buf, opts)?;
                c.wait(h).map(drop)?
            }
            OpKind::GatherAll => {
                let h = c.gather_all_nb(&w, buf, opts)?;
                c.wait(h).map(drop)?
            }
            OpKind::Exchange => {
                let h = c.exchange_nb(&w, buf, opts)?;
                c.wait(h).map(drop)?
            }
            OpKind::Reduce => {
                let h = c.reduce_nb(&w, 0, buf, &sum, opts)?;
                c.wait(h).map(drop)?
            }
            OpKind::Allreduce => {
                let h = c.allreduce_nb(&w, buf, &sum, opts)?;
                c.wait(h).map(drop)?
            }
            OpKind::ReduceScatter => {
                let h = c.reduce_scatter_nb(&w, buf, &sum, opts)?;
                c.wait(h).map(drop)?
            }
            OpKind::Scan => {
                let h = c.scan_nb(&w, buf, &sum, opts)?;
                c.wait(h).map(drop)?
            }
            OpKind::Exscan => {
                let h = c.exscan_nb(&w, buf, &sum, opts)?;
                c.wait(h).map(drop)?
            }
        }
    }
    Ok(())
}

/// Times `op` with blocks of `bytes` under `opts` (see the module docs) and returns
/// this rank's µs per call of every timed batch. Collective over the world team.
///
/// # Errors
/// The collective's error.
pub fn time_cell<C: Conduit>(
    c: &mut CollEp<C>,
    op: OpKind,
    bytes: usize,
    opts: &Opts<'_>,
    budget: Budget,
) -> Result<Vec<f64>, CollError> {
    let w = c.world().clone();
    let iters = calibrate(c, op, bytes, opts, budget)?;
    let mut per = Vec::with_capacity(budget.batches as usize);
    for _ in 0..budget.batches {
        c.barrier(&w)?;
        let t0 = Instant::now();
        calls(c, op, bytes, opts, iters)?;
        per.push(t0.elapsed().as_secs_f64() * 1e6 / iters as f64);
    }
    Ok(per)
}

/// Calls per timed batch for one variant of a cell: doubles a trial batch until it
/// lasts a quarter of `budget.batch` on the slowest member (agreed by a max-allreduce,
/// so every member runs the same number of calls), then takes four times that.
/// Collective.
fn calibrate<C: Conduit>(
    c: &mut CollEp<C>,
    op: OpKind,
    bytes: usize,
    opts: &Opts<'_>,
    budget: Budget,
) -> Result<u64, CollError> {
    let w = c.world().clone();
    let max = ReduceOp::<u8>::builtin(BuiltinOp::Max)?;
    let mut k = 1u64;
    loop {
        c.barrier(&w)?;
        let t0 = Instant::now();
        calls(c, op, bytes, opts, k)?;
        let long = t0.elapsed() >= budget.batch / 4 || k >= 1 << 24;
        let mut all = [0u8];
        c.allreduce(&w, &[u8::from(long)], &mut all, &max)?;
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
/// Returns this rank's µs per call per batch, per variant. Collective.
///
/// # Errors
/// The collective's error.
pub fn time_interleaved<C: Conduit>(
    c: &mut CollEp<C>,
    op: OpKind,
    bytes: usize,
    opts: &[Opts<'_>],
    budget: Budget,
) -> Result<Vec<Vec<f64>>, CollError> {
    let w = c.world().clone();
    let mut iters = Vec::with_capacity(opts.len());
    for o in opts {
        iters.push(calibrate(c, op, bytes, o, budget)?);
    }
    let mut per = vec![Vec::with_capacity(budget.batches as usize); opts.len()];
    for _ in 0..budget.batches {
        for (i, o) in opts.iter().enumerate() {
            c.barrier(&w)?;
            let t0 = Instant::now();
            calls(c, op, bytes, o, iters[i])?;
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
    }
}
