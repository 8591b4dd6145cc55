//! The `halo` kernel of `gex-perf overlap` (gex-overlap's message scheduling, seed
//! 000's trains and piggybacking): a ring halo exchange of many small puts.
//!
//! Every iteration, each rank puts `--puts` (64) puts of `--put-size` (16) bytes into
//! each neighbour's halo region (double-buffered by iteration parity), then signals
//! each neighbour (`sched_signal`), and waits for both neighbours' signals. One round
//! is `--iters` (200) iterations in one scheduling mode; the modes alternate round by
//! round: `plain` (every put a gex-rma NBI put, then an NBI sync and the signal: the
//! baseline), `train`, `piggyback` and `auto` (`SchedMode`), and `request`: as
//! `piggyback`, but the per-iteration signal is the program's own active message sent
//! with `sched_request` (the neighbour's handler bumps a counter; the puts ride the
//! message), for a comparison with piggybacking on the layer's signal. The last
//! iteration of every round checks the halos' bytes.
//!
//! Rows (rank 0; median of `--rounds` rounds, min/max the extreme rounds):
//! `overlap_halo_<mode>` (µs per iteration) and `overlap_halo_<mode>_speedup` (`x`,
//! plain / mode, per round) for the four other modes.

use crate::overlap::OverlapArgs;
use crate::report::{Record, Reporter};
use gex::coll::CollExt;
use gex::core::{Client, Endpoint};
use gex::overlap::{OverlapExt, SchedExt, SchedMode};
use gex::rma::GlobalPtr;
use gex::spi::Conduit;
use gex::{Am, Body, EpAddr, HandlerId, Token};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The modes, with their rows' names (time, speedup over `plain`); the last one
/// signals with the program's own request (`REQUEST`).
const MODES: [(SchedMode, &str, &str); 5] = [
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
    (
        SchedMode::Piggyback,
        "overlap_halo_request",
        "overlap_halo_request_speedup",
    ),
];

/// The index in `MODES` of the mode whose signals are the program's requests.
const REQUEST: usize = 4;

/// The program's signal of the `request` mode: its handler, and what it counted per
/// side (requests from the left neighbour, from the right one).
struct Signals {
    handler: HandlerId,
    seen: Arc<[AtomicU64; 2]>,
}

/// Bytes of segment the kernel needs: two signal words, then two halo regions per
/// neighbour side (parity).
pub(crate) fn segment_len(args: &OverlapArgs) -> usize {
    64 + 4 * args.puts as usize * args.put_size
}

fn byte(rank: u32, seq: u64, k: usize) -> u8 {
    (rank as u8).wrapping_mul(29) ^ (seq as u8).wrapping_mul(3) ^ k as u8
}

/// One iteration: this rank's puts and signals for sequence number `seq`, then the
/// wait for its neighbours' (the `expect`-th signal or request of each; `check`: and
/// their halos' bytes).
fn step<C: Conduit>(
    ep: &mut Endpoint<C>,
    args: &OverlapArgs,
    (me, left, right): (u32, u32, u32),
    (seq, expect): (u64, u64),
    check: bool,
    request: Option<&Signals>,
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
        match request {
            // The puts ride the program's message; its handler counts it.
            Some(r) => ep.sched_request(at, r.handler, Body::short(&[side as u32]))?,
            None => ep.sched_signal(GlobalPtr::new(at, 8 * side), 1)?,
        }
    }
    // `expect`: how many signals (or requests) each side has sent so far.
    match request {
        Some(r) => {
            // Polled as `signal_wait` polls (not the endpoint's wait policy, which
            // may sleep), so that the two modes differ only in what carries the puts.
            let seen = |s: usize| r.seen[s].load(Ordering::Acquire);
            let mut spins = 0u32;
            while seen(0) < expect || seen(1) < expect {
                ep.poll();
                if spins < 64 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
                spins = spins.saturating_add(1);
            }
        }
        None => {
            ep.signal_wait(0, expect)?;
            ep.signal_wait(8, expect)?;
        }
    }
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
    // The `request` mode's handler (registered in the same order on every rank): a
    // request names the side of the receiver's halo it put into (0: from the left).
    let seen: Arc<[AtomicU64; 2]> = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let s = seen.clone();
    let handler = ep.register(move |_t: &mut Token<'_>, am: Am<'_>| {
        s[am.args()[0] as usize & 1].fetch_add(1, Ordering::AcqRel);
    })?;
    let signals = Signals { handler, seen };
    // Signals (and requests) sent so far per side: their waits' targets.
    let (mut sig_n, mut req_n) = (0u64, 0u64);
    let mut seq = 0u64;
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); MODES.len()];
    for round in 0..=args.rounds {
        for m in 0..MODES.len() {
            // The order of the modes rotates round by round.
            let m = (m + round as usize) % MODES.len();
            ep.set_sched(MODES[m].0)?;
            ep.barrier(&world)?;
            let t0 = Instant::now();
            let request = (m == REQUEST).then_some(&signals);
            for i in 0..iters {
                seq += 1;
                let n = if request.is_some() {
                    &mut req_n
                } else {
                    &mut sig_n
                };
                *n += 1;
                step(ep, args, ranks, (seq, *n), i + 1 == iters, request)?;
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
