//! Replays of the direct path: a blocking call (or barrier) shaped like the last one
//! reuses its decisions (choice, descriptor, slots) without asking again.

#[allow(clippy::wildcard_imports)]
use super::*;

impl Coll {
    /// Runs a blocking call whose shape `key` is the last direct call's, from that
    /// call's decisions (see the module docs, *Replay*), if they still hold: the same
    /// team and tuner generation, nothing else in flight on the endpoint. It restarts
    /// the kept operation in place, begins and takes the first step (with
    /// [`direct_step`](Self::direct_step)'s bookkeeping, for a body known to be the
    /// slot protocol's); a call that has to wait is left in `slot` for the caller's
    /// wait loop, with its wait recorded (the caller asks for the progress hook
    /// before the endpoint's wait loop).
    ///
    /// It needs nothing of the endpoint but its wait `policy` and a way to `wake`
    /// members, so a caller holding the layer's state alone
    /// ([`layer::state`](gex_core::layer::state)) runs it
    /// and does the wakes it asked for afterwards ([`wake_team`](Self::wake_team)).
    #[inline]
    pub(crate) fn replay_run(
        &mut self,
        team: &Team,
        key: &ReplayKey,
        io: &mut Io<'_>,
        slot: &mut Option<DirectOp>,
        (policy, wake): (WaitPolicy, &mut impl FnMut(EpAddr)),
    ) -> Replayed {
        let Coll {
            fast,
            shm,
            tuning,
            ops,
            teams,
            wire,
            ..
        } = self;
        let Some(r) = fast.replay.as_mut() else {
            return Replayed::Declined;
        };
        let mb = &wire.mb;
        if r.key != *key
            || r.generation != fast.tuner_gen
            || !ops.is_empty()
            || (mb.alarm && (!mb.aborts.is_empty() || teams.failed(key.team).is_some()))
        {
            return Replayed::Declined;
        }
        let counters = &mut tuning.counters;
        let Some(x) = teams.borrowed_ext(team) else {
            return Replayed::Declined;
        };
        let Some(t) = x.shm.as_ref() else {
            return Replayed::Declined;
        };
        let seq = x.next_seq();
        // The kept operation carries the belief and the digest of its tags.
        let op = &mut r.op;
        op.restart(seq);
        // A wait left by a call that unwound (a panicking handler) is stale.
        shm.set_wait(None);
        counters.direct_calls += 1;
        counters.replayed_calls += 1;
        op.keep_own(io.input, io.out);
        counters.publish(op, t, io.input, r.oversubscribed);
        if shm.shm_step(t, op, (seq, r.belief, Some(&r.desc)), io, (policy, wake)) {
            shm.calm();
            return Replayed::Done;
        }
        let d = slot.insert(DirectOp {
            team: key.team,
            seq,
            belief: r.belief,
            body: DirectBody::Shm(op.clone()),
            size: team.size(),
            rank: team.rank(),
        });
        shm.set_wait(d.pending_wait(Stall::default()));
        Replayed::Pending
    }

    /// Runs a blocking barrier under default options on `team` with `entry` as the
    /// last one did, if its decision still holds (the same team and tuner
    /// generation, nothing in flight on the endpoint): begins the shared-memory
    /// barrier and takes its first step, as [`direct_begin`](Self::direct_begin) and
    /// [`direct_step`](Self::direct_step) do for a barrier, without the tuner's key,
    /// the belief or the endpoint's context. Like [`replay_run`](Self::replay_run)
    /// it needs nothing of the endpoint but a way to `wake` members; a barrier that
    /// has to wait is left in `slot` for the caller, with its wait recorded as
    /// [`replay_run`](Self::replay_run) does. 2 ranks, VM in its fast state: about
    /// 0.07 µs per barrier, 0.10 through the general direct path (docs/coll.md,
    /// *Replayed barriers*).
    #[inline]
    pub(crate) fn barrier_replay(
        &mut self,
        team: &Team,
        entry: Entry,
        slot: &mut Option<DirectOp>,
        wake: &mut impl FnMut(EpAddr),
    ) -> Replayed {
        let Some((id, size, generation, belief)) = self.fast.bar_replay else {
            return Replayed::Declined;
        };
        if id != team.id()
            || size != team.size()
            || generation != self.fast.tuner_gen
            || !self.ops.is_empty()
            || self.team_failed(id)
        {
            return Replayed::Declined;
        }
        let Coll {
            shm, tuning, teams, ..
        } = self;
        let counters = &mut tuning.counters;
        let Some(x) = teams.borrowed_ext(team) else {
            return Replayed::Declined;
        };
        let Some(t) = x.shm.as_ref() else {
            return Replayed::Declined;
        };
        // A wait left by a call that unwound (a panicking handler) is stale.
        shm.set_wait(None);
        counters.direct_calls += 1;
        counters.replayed_calls += 1;
        let seq = x.next_seq();
        let mut b = ShmBar::new(size, x.next_barrier(), entry);
        let done = b.step(t);
        t.wake_fenced(b.take_wake(), wake);
        if done {
            shm.calm();
        }
        // The belief serves the stall checks of a barrier that waits (the digest the
        // first barrier computed).
        let d = slot.insert(DirectOp {
            team: id,
            seq,
            belief,
            body: DirectBody::Bar(b),
            size,
            rank: team.rank(),
        });
        if done {
            Replayed::Done
        } else {
            shm.set_wait(d.pending_wait(Stall::default()));
            Replayed::Pending
        }
    }
}
