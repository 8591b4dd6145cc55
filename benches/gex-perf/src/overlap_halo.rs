//! The `halo` kernel of `gex-perf overlap` (gex-overlap's message scheduling, seed
//! 000's trains and piggybacking): a ring halo exchange of many small puts.
//!
//! Every iteration, each rank puts `--puts` (64) puts of `--put-size` (16) bytes into
//! each neighbour's halo region (double-buffered by iteration parity), then signals
//! each neighbour (`sched_signal`), and waits for both neighbours' signals. One round
//! is `--iters` (200) iterations in one scheduling mode; the modes alternate round by
//! round: `plain` (every put a gex-rma NBI put, then an NBI sync and the signal: the
//! baseline), `train`, `piggyback` and `auto` (`SchedMode`). The last iteration of
//! every round checks the halos' bytes.
//!
//! Rows (rank 0; median of `--rounds` rounds, min/max the extreme rounds):
//! `overlap_halo_<mode>` (µs per iteration) and `overlap_halo_<mode>_speedup` (`x`,
//! plain / mode, per round) for the three other modes.

use crate::overlap::OverlapArgs;
use crate::report::{Record, Reporter};
use gex::EpAddr;
use gex::coll::CollExt;
use gex::core::{Client, Endpoint};
use gex::overlap::{OverlapExt, SchedExt, SchedMode};
use gex::rma::GlobalPtr;
use gex::spi::Conduit;
use std::time::Instant;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The modes, with their rows' names (time, speedup over `plain`).
const MODES: [(SchedMode, &str, &str); 4] = [
    (SchedMode::Plain, "overlap_halo_plain", ""),
    (
        SchedMode::Train,
        "overlap_halo_train",
        "overlap_halo_train_speedup",
    ),
    (
        SchedMode::Piggyback,
        "overlap_halo_piggyback",
        "overlap_halo_piggyback_speedup",
    ),
    (
        SchedMode::Auto,
        "overlap_halo_auto",
        "overlap_halo_auto_speedup",
    ),
];

/// Bytes of segment the kernel needs: two signal words, then two halo regions per
/// neighbour side (parity).
pub(crate) fn segment_len(args: &OverlapArgs) -> usize {
    64 + 4 * args.puts as usize * args.put_size
}

fn byte(rank: u32, seq: u64, k: usize) -> u8 {
    (rank as u8).wrapping_mul(29) ^ (seq as u8).wrapping_mul(3) ^ k as u8
}

/// One iteration: this rank's puts and signals for sequence number `seq`, then the
/// wait for its neighbours' (`check`: and their halos' bytes).
fn step<C: Conduit>(
    ep: &mut Endpoint<C>,
    args: &OverlapArgs,
    (me, left, right): (u32, u32, u32),
    seq: u64,
    check: bool,
) -> Res<()> {
    let (k, sz) = (args.puts as usize, args.put_size);
    let region = |side: usize| 64 + (2 * side + (seq % 2) as usize) * k * sz;
    let mut data = vec![0u8; sz];
    // I am my right neighbour's left one (side 0, signal word 0) and my left
    // neighbour's right one (side 1, signal word 8).
    for (peer, side) in [(right, 0), (left, 1)] {
        let at = EpAddr::new(peer, 0);
        for i in 0..k {
            data.fill(byte(me, seq, i));
            ep.sched_put(GlobalPtr::new(at, region(side) + i * sz), &data)?;
        }
        ep.sched_signal(GlobalPtr::new(at, 8 * side), 1)?;
    }
    ep.signal_wait(0, seq)?;
    ep.signal_wait(8, seq)?;
    if check {
        for (from, side) in [(left, 0), (right, 1)] {
            for i in 0..k {
                ep.segment().read(region(side) + i * sz, &mut data)?;
                if data.iter().any(|&b| b != byte(from, seq, i)) {
                    return Err(
                        format!("halo from {from}, put {i}, iteration {seq}: wrong bytes").into(),
                    );
                }
            }
        }
    }
    Ok(())
}

/// Runs the halo kernel for the warm-up round and `--rounds` rounds; rank 0 reports
/// to `rep`.
pub(crate) fn run<C: Conduit>(
    args: &OverlapArgs,
    rep: &Reporter,
    client: &Client<C>,
    ep: &mut Endpoint<C>,
) -> Res<()> {
    let world = ep.world();
    let (me, n) = (world.rank(), world.size());
    let ranks = (me, (me + n - 1) % n, (me + 1) % n);
    let iters = u64::from(args.iters.max(1));
    let mut seq = 0u64;
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); MODES.len()];
    for round in 0..=args.rounds {
        for m in 0..MODES.len() {
            // The order of the modes rotates round by round.
            let m = (m + round as usize) % MODES.len();
            ep.set_sched(MODES[m].0)?;
            ep.barrier(&world)?;
            let t0 = Instant::now();
            for i in 0..iters {
                seq += 1;
                step(ep, args, ranks, seq, i + 1 == iters)?;
            }
            ep.retire_all()?;
            let us = t0.elapsed().as_secs_f64() * 1e6 / iters as f64;
            ep.barrier(&world)?;
            if round > 0 {
                times[m].push(us);
            }
        }
    }
    if me != 0 {
        return Ok(());
    }
    rep.header(&[format!(
        "gex-perf overlap --kernel halo: {n} ranks, conduit {}, {} puts of {} B per neighbour per iteration, {iters} iterations per round; value: median of {} rounds",
        client.conduit_name(),
        args.puts,
        args.put_size,
        args.rounds
    )]);
    let mut rows: Vec<(&'static str, &str, Vec<f64>)> = Vec::new();
    for (m, &(_, name, speedup)) in MODES.iter().enumerate() {
        rows.push((name, "us", times[m].clone()));
        if m > 0 {
            let s = times[0]
                .iter()
                .zip(&times[m])
                .map(|(p, t)| p / t.max(1e-6))
                .collect();
            rows.push((speedup, "x", s));
        }
    }
    for (name, unit, mut v) in rows {
        rep.record(&Record::of_samples(
            client,
            name,
            args.put_size,
            unit,
            &mut v,
        ));
    }
    Ok(())
}
