//! Online tuning (`GEX_COLL_TUNE=online`): the first call of a cell (operation, team
//! size, size class, modes) on a team times the surviving candidates, collectively,
//! and the winner is kept for the team.

use super::{owned_start, start_event, vec_from_bytes};
use crate::algo::Query;
use crate::engine::{Input, Start};
use crate::error::CollError;
use crate::layer::coll;
use crate::op::{BuiltinOp, OpKind, Opts, ReduceOp};
use crate::sched::ReduceFn;
use gex_core::event::Data;
use gex_core::spi::Conduit;
use gex_core::{Endpoint, Team};

/// Timed calls per candidate in an online trial (after one warm-up call).
const TRIAL_CALLS: u32 = 8;
/// Candidates an online trial times at most.
const TRIAL_CANDIDATES: usize = 4;

/// Times the surviving candidates of `q` on `team` (every member does the same calls
/// in the same order, so this is collective), agrees on the slowest member's time per
/// candidate and records the fastest.
#[allow(clippy::too_many_arguments)]
pub(crate) fn trial<C: Conduit>(
    ep: &mut Endpoint<C>,
    team: &Team,
    q: &Query,
    root: u32,
    elem: usize,
    count: usize,
    reduce: &Option<(ReduceFn, bool)>,
    opts: &Opts<'_>,
) -> Result<(), CollError> {
    let cands = coll(ep, |c, _| {
        c.tuning.tuner().online_candidates(q, TRIAL_CANDIDATES)
    })?;
    let winner = if cands.len() <= 1 {
        *cands.first().ok_or(CollError::NoAlgorithm {
            op: q.op,
            size: q.size,
        })?
    } else {
        coll(ep, |c, _| c.tuning.set_trial(true))?;
        let r = time_candidates(ep, team, q, &cands, (root, elem, count), reduce, opts);
        coll(ep, |c, _| c.tuning.set_trial(false))?;
        r?
    };
    coll(ep, |c, _| {
        c.tuning.tuner_mut().record_online(team.id(), q, winner);
        c.fast.tuner_changed();
        c.tuning.counters.online_trials += 1;
    })
}

fn time_candidates<C: Conduit>(
    ep: &mut Endpoint<C>,
    team: &Team,
    q: &Query,
    cands: &[usize],
    (root, elem, count): (u32, usize, usize),
    reduce: &Option<(ReduceFn, bool)>,
    opts: &Opts<'_>,
) -> Result<usize, CollError> {
    let in_len = q.op.shape(q.size, root, root).0.max(1) * elem * count;
    // Every member times the same calls: element type and operator need no codes
    // (members whose calls differ time calls of different lengths, which the
    // descriptors tell apart).
    let codes = (0, 0);
    let names: Vec<String> = coll(ep, |c, _| {
        cands
            .iter()
            .map(|&i| c.tuning.tuner().algorithms()[i].name().to_string())
            .collect()
    })?;
    let mut times = Vec::with_capacity(names.len());
    for name in &names {
        let o = Opts {
            sync: opts.sync,
            algorithm: Some(name),
        };
        let mut t0 = std::time::Instant::now();
        for rep in 0..=TRIAL_CALLS {
            if rep == 1 {
                t0 = std::time::Instant::now();
            }
            let s = Start {
                kind: q.op,
                root,
                elem,
                count,
                input: Input::Owned(vec![0u8; in_len]),
                reduce: reduce.clone(),
                opts: o,
                codes,
                desc: None,
            };
            let ev = start_event(ep, team, s, |d: Data, _: Option<()>| drop(d))?;
            ep.wait(ev)?;
        }
        times.push(t0.elapsed().as_secs_f64() * 1e6 / f64::from(TRIAL_CALLS));
    }
    let max = ReduceOp::<f64>::builtin(BuiltinOp::Max);
    let s = owned_start(OpKind::Allreduce, times, Some(&max));
    let ev = start_event(ep, team, s, |d: Data, _: Option<Vec<f64>>| match d {
        Data::Bytes(b) => vec_from_bytes(b),
        _ => Vec::new(),
    })?;
    let agreed: Vec<f64> = ep.wait(ev)?;
    let best = agreed
        .iter()
        .enumerate()
        .min_by(|a, b| a.1.total_cmp(b.1))
        .map_or(0, |x| x.0);
    Ok(cands[best])
}
