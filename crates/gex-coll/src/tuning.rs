//! The layer's tuning state ([`Tuning`], a component of [`Coll`](crate::Coll)): the
//! tuner, whether an online trial or a hierarchical stage is starting calls, and
//! the layer's counters; and the query a call puts to the tuner ([`query`]).

use crate::algo::{Algorithm, Query};
use crate::error::CollError;
use crate::op::{AddrMode, OpKind, Opts};
use crate::shm::{Publish, ShmOp, ShmTeam};
use crate::teams::ext;
use crate::tune::{TuneMode, Tuner};
use gex_core::Team;
use std::sync::Arc;

/// The layer's tuning state.
pub(crate) struct Tuning {
    tuner: Tuner,
    /// An online trial is running (its calls are not tuned online themselves).
    in_trial: bool,
    /// A hierarchical stage is starting its sub-collective: an override that cannot
    /// run it gives way to the tuner.
    in_stage: bool,
    /// The layer's counters (plain counts, read by
    /// [`CollExt::coll_stats`](crate::CollExt::coll_stats)).
    pub(crate) counters: Counters,
}

/// Counters of the layer ([`CollStats`](crate::CollStats)).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Counters {
    pub(crate) online_trials: u64,
    pub(crate) direct_calls: u64,
    pub(crate) replayed_calls: u64,
    pub(crate) by_reference_calls: u64,
    pub(crate) cma_calls: u64,
    pub(crate) ring_calls: u64,
    pub(crate) sleep_polls: u64,
}

impl Counters {
    /// Publishes `op`'s input by reference if it can ([`ShmOp::publish_by_reference`]),
    /// counting how.
    #[inline]
    pub(crate) fn publish(&mut self, op: &mut ShmOp, sh: &ShmTeam, input: &[u8], over: bool) {
        match op.publish_by_reference(sh, input, over) {
            Publish::Segment => self.by_reference_calls += 1,
            Publish::Process => self.cma_calls += 1,
            Publish::Slots => {}
        }
    }
}

impl Tuning {
    /// The tuning state of a layer whose tuner is `tuner`.
    pub(crate) fn new(tuner: Tuner) -> Tuning {
        Tuning {
            tuner,
            in_trial: false,
            in_stage: false,
            counters: Counters::default(),
        }
    }

    /// The tuner.
    #[inline]
    pub(crate) fn tuner(&self) -> &Tuner {
        &self.tuner
    }

    /// Whether one-word ring broadcasts of a team of `p` members take packed slots
    /// ([`crate::ring::packs`], from the tuner's host CPU count): the one place every
    /// path asks, so that the members' paths agree.
    #[inline]
    pub(crate) fn ring_packs(&self, p: u32) -> bool {
        crate::ring::packs(p, self.tuner.host_cpus())
    }

    /// The tuner, to change or to ask (its selections keep caches). A change that
    /// may make it decide differently must reach the direct path's caches too
    /// ([`FastPath::tuner_changed`](crate::shmpath::FastPath::tuner_changed)).
    #[inline]
    pub(crate) fn tuner_mut(&mut self) -> &mut Tuner {
        &mut self.tuner
    }

    /// Marks whether an online trial is running; returns whether one was.
    pub(crate) fn set_trial(&mut self, on: bool) -> bool {
        std::mem::replace(&mut self.in_trial, on)
    }

    /// Marks whether a hierarchical stage is starting its sub-collective.
    #[inline]
    pub(crate) fn set_stage(&mut self, on: bool) {
        self.in_stage = on;
    }

    /// True if the online tuner decides `q` (no forced algorithm, no override or
    /// profile cell, local mode, not inside a trial).
    #[inline]
    pub(crate) fn online_applies(&self, q: &Query, opts: &Opts<'_>) -> bool {
        opts.algorithm.is_none()
            && !self.in_trial
            && q.addr == AddrMode::Local
            && self.tuner.mode() == TuneMode::Online
            && !self.tuner.fixed_by_config(q)
    }

    /// The algorithm of a call (an online winner, an override or the model's choice;
    /// a stage gives way to the tuner when an override cannot run it).
    pub(crate) fn choose(
        &mut self,
        team: &Team,
        q: &Query,
        opts: &Opts<'_>,
    ) -> Result<Arc<dyn Algorithm>, CollError> {
        if self.online_applies(q, opts) {
            if let Some(a) = self.tuner.online_choice(team.id(), q) {
                return Ok(a.clone());
            }
        }
        let r = if self.in_stage {
            self.tuner.select_within(q).cloned()
        } else {
            self.tuner.select(q, opts.algorithm).cloned()
        };
        r.map_err(|e| scratch_error(team, q, e, &self.tuner))
    }
}

/// The tuner's query for a call of `op` with `n`-byte blocks on `team` (resolved: it
/// carries the layer's extension).
pub(crate) fn query(
    team: &Team,
    op: OpKind,
    n: usize,
    addr: AddrMode,
    opts: &Opts<'_>,
    commutative: bool,
) -> Query {
    let x = ext(team);
    let p = team.size();
    let hier = x.hier.get();
    let n = if op == OpKind::Barrier { 0 } else { n };
    // Local mode can use signaling put / rendezvous through the team's scratch
    // space when every member's can hold the whole output.
    let scratch = addr == AddrMode::Local
        && n > 0
        && x.scratch.len() == p as usize
        && x.scratch.iter().all(|s| s.1 >= p as usize * n);
    Query {
        op,
        size: p,
        bytes: n,
        addr,
        sync: opts.sync,
        commutative,
        scratch,
        shm: x.shm.is_some(),
        hier: hier.is_some(),
        hosts: hier.map_or(0, |h| h.hosts()),
        host_ranges: hier.is_some_and(|h| h.ranges),
    }
}

/// A forced algorithm that cannot run: if scratch space is what it lacks, the error
/// says how much is needed and how much there is.
fn scratch_error(team: &Team, q: &Query, e: CollError, tuner: &Tuner) -> CollError {
    let CollError::Unsupported { algorithm, .. } = &e else {
        return e;
    };
    let Some(a) = tuner.algorithms().iter().find(|a| a.name() == algorithm) else {
        return e;
    };
    if q.addr != AddrMode::Local
        || q.scratch
        || !a.supports(&Query {
            scratch: true,
            ..*q
        })
    {
        return e;
    }
    let x = ext(team);
    let available = if x.scratch.len() == team.size() as usize {
        x.scratch.iter().map(|s| s.1).min().unwrap_or(0)
    } else {
        0
    };
    CollError::ScratchTooSmall {
        algorithm: algorithm.clone(),
        needed: team.size() as usize * q.bytes,
        available,
        size: team.size(),
        block: q.bytes,
    }
}
