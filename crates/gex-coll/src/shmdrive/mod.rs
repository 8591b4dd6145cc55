//! Driving shared-memory collectives: the `shm` algorithm's collectives and flag
//! barriers in the layer's table, the *direct* path of blocking calls, and the sleep
//! protocol of members that wait for flags in shared memory.
//!
//! **Order.** Collectives of one team that go through the team's data slots run one
//! at a time, in sequence order, on every member (they share the slots); flag
//! barriers of a team also run one at a time (see [`crate::barrier`]), but
//! independently of the slot collectives.
//!
//! **Direct path.** A blocking call on a team with a shared-memory channel, when
//! nothing else is in flight on the endpoint and the tuner picks `shm`, runs over the
//! caller's buffers: no table entry, no event, no copy in or out, no allocation. The
//! caller's function steps it (through [`layer::with`]) and, between steps,
//! waits through the endpoint ([`layer::wait_until`]) for the one flag the
//! step stopped at; the layer's progress hook sees the wait (in [`ShmPath::waiting`](crate::shmpath::ShmPath::waiting)) so
//! that it can keep the endpoint awake, announce a sleep, and run the stall checks.
//!
//! **Replay.** A blocking call over borrowed slices (or an in-place broadcast) whose
//! shape ([`ReplayKey`]: team, operation, root, element size, slice lengths,
//! reduction kind) equals the last direct call's, with default options, starts from
//! that call's decisions ([`Replay`]): the checks of its lengths and root, the
//! tuner's choice, the belief and the operation's fixed fields held then and still
//! hold (same team, tuner unchanged, nothing else in flight), so a call only takes a
//! sequence number and restarts the kept operation in place ([`Coll::replay_run`]).
//! Calls in a loop pay for lowering and choosing once. A replayed call needs only the
//! layer's state: without a progress thread the caller reaches it directly
//! ([`layer::state`](gex_core::layer::state)), and enters
//! the layer with the endpoint's context only to record a wait or to wake sleeping
//! members.
//!
//! **Sleeping.** A member whose wait for a flag lasts longer than the spin part of
//! its wait policy ([`sleep_after`](crate::shmpath::sleep_after)) announces that it may sleep (its `SLEEPY` word)
//! and reports [`Progress::Busy`](gex_core::layer::Progress::Busy) to the endpoint,
//! which may then block in the conduit; before that it reports
//! [`Progress::Spinning`](gex_core::layer::Progress::Spinning) (the endpoint spins or
//! yields, never sleeps). Writers of flags wake announced sleepers
//! ([`ShmOp::wake_members`](crate::shm::ShmOp::wake_members)). See [`crate::shm`],
//! *Sleeping*.
//!
//! [`layer::with`]: gex_core::layer::with
//! [`layer::wait_until`]: gex_core::layer::wait_until

use crate::barrier::{Entry, ShmBar};
use crate::error::CollError;
use crate::layer::Coll;
use crate::op::{AddrMode, OpKind, Opts};
use crate::optable::{Body, OpState};
use crate::path::ring_eligible;
use crate::ring;
use crate::rootcheck::{self, Desc, Stall};
use crate::shm::{Area, Io, ShmOp, WaitOn};
use crate::shmpath::{
    ChoiceKey, DirectBody, DirectOp, DirectWait, Replay, ReplayKey, RingKey, Stepped, step_parts,
    take_wait,
};
use crate::teams::ext;
use crate::tuning::query;
use gex_core::layer::Cx;
use gex_core::spi::Conduit;
use gex_core::{EpAddr, Team, WaitPolicy};

mod replay;
mod ringdrive;

/// The digest the ring tags of broadcasts with `belief` on `team` start from.
fn ring_digest(team: &Team, belief: u32) -> u64 {
    let generation = ext(team).shm.as_ref().map_or(0, |t| t.generation);
    crate::mix::mix_all(&[generation, team.id(), u64::from(belief), 0xb7ca])
}

/// How [`Coll::replay_run`] ended.
pub(crate) enum Replayed {
    /// The call's decisions are not the last direct call's (nothing consumed).
    Declined,
    /// Done.
    Done,
    /// Waits (the call is in the caller's slot, its wait recorded).
    Pending,
}

/// How [`Coll::ring_begin`] answered.
pub(crate) enum RingBegin {
    /// The ring's direct path does not apply (nothing consumed).
    Declined,
    /// Done (a root that published, a reader whose root had).
    Done,
    /// Waits (the call is in the caller's [`RingCall`]).
    Pending,
}

/// A small broadcast's direct call in flight on the caller's stack.
pub(crate) struct RingCall {
    pub(crate) b: ring::Bcast<Area>,
    /// This member's area.
    pub(crate) own: Area,
    /// This member fences ring flags (it completes only through the layer then).
    pub(crate) fencing: bool,
    seq: u32,
    belief: u32,
}

impl RingCall {
    /// Completes a reader whose root published outside the layer (see
    /// [`ring::Bcast::finish`]): true if done.
    #[inline]
    pub(crate) fn finish(&mut self, out: &mut [u8]) -> bool {
        self.b
            .finish(self.own, &ring::Fencing { on: self.fencing }, out)
    }

    /// True once what the call waits for has happened.
    #[inline]
    pub(crate) fn ready(&self) -> bool {
        self.b.wait.is_some_and(|w| w.ready())
    }
}

/// The request of a blocking call for the direct path.
pub(crate) struct DirectReq<'a> {
    pub(crate) kind: OpKind,
    pub(crate) root: u32,
    pub(crate) elem: usize,
    pub(crate) count: usize,
    pub(crate) commutative: bool,
    pub(crate) opts: &'a Opts<'a>,
    /// A barrier's entry.
    pub(crate) entry: Entry,
    /// Decline with [`Begin::Trial`] when the online tuner has yet to time the call's
    /// cell (the caller runs the trial and asks again).
    pub(crate) trial: bool,
    /// The call's shape, if later calls of the same shape may replay its decisions.
    pub(crate) replay: Option<ReplayKey>,
    /// The element type's code and the reduction's ([`crate::engine::Start::codes`]).
    pub(crate) codes: (u8, u8),
}

impl DirectReq<'_> {
    /// The descriptor members compare ([`crate::rootcheck`]).
    #[inline]
    pub(crate) fn desc(&self) -> Desc {
        let size = (self.elem, self.count);
        Desc::of_call(self.kind, self.root, self.codes, size, self.opts.sync)
    }
}

/// How [`Coll::direct_begin`] answered.
pub(crate) enum Begin<'s> {
    /// The direct path does not apply (nothing consumed): the table's path.
    Declined,
    /// The online tuner times this call's cell first (nothing consumed).
    Trial,
    /// Begun.
    Began(&'s mut DirectOp),
}

impl Coll {
    /// Advances shared-memory collective or flag barrier `id`; true if it did
    /// something.
    pub(crate) fn advance_shm<C: Conduit>(&mut self, cx: &mut Cx<'_, C>, id: u64) -> bool {
        let st = &self.ops[&id];
        if !st.started {
            let waits = if st.is_bar() {
                self.ops.earlier_unfinished(st, OpState::is_bar)
            } else {
                self.ops.earlier_unfinished(st, OpState::is_shm)
            };
            if waits {
                return false;
            }
        }
        let Coll { ops, shm, .. } = self;
        let st = ops.get_mut(&id).expect("present");
        let desc = st.desc;
        let x = ext(&st.team);
        let Some(t) = x.shm.as_ref() else {
            st.result = Some(Err(CollError::NotMember { team: st.team.id() }));
            return true;
        };
        let first = !st.started;
        st.started = true;
        // `stored`: flags this member stored (others may wait for them).
        let (done, stored) = match &mut st.body {
            Body::Shm(op) => {
                if first {
                    op.op().set_belief(t, st.belief);
                    shm.announce(t, st.seq, st.belief, || desc);
                }
                let done = op.step(t, shm.expected_mut());
                let stored = op.op().stored();
                if done {
                    rootcheck::finished(t, st.seq);
                    st.result = Some(Ok(op.take_output()));
                }
                op.op()
                    .wake_members(t, shm.fencing_mut(), &mut |a| cx.wake(a));
                (done, stored)
            }
            Body::Bar(b) => {
                let done = b.step(t);
                if done {
                    st.result = Some(Ok(b.entry().encode()));
                }
                let wake = b.take_wake();
                t.wake_fenced(wake, &mut |a| cx.wake(a));
                (done, wake != 0)
            }
            Body::Ring(r) => {
                if first {
                    shm.announce(t, st.seq, st.belief, || desc);
                }
                let view = t.view();
                let (local, fencing) = shm.ring_parts(t.ch);
                let done = r.op.step(&view, local, fencing, &r.input, &mut r.out);
                if done {
                    st.result = Some(Ok(std::mem::take(&mut r.out)));
                }
                let wake = std::mem::take(&mut r.op.wake);
                t.wake_fenced(wake, &mut |a| cx.wake(a));
                (done, done)
            }
            _ => (false, false),
        };
        first || done || stored
    }

    /// What stalled shared-memory collective `id` waits for.
    pub(crate) fn shm_wait(&mut self, id: u64) -> Option<WaitOn> {
        match &mut self.ops.get_mut(&id)?.body {
            Body::Shm(op) => op.op().wait,
            Body::Bar(b) => b.wait(),
            Body::Ring(r) => r.op.wait.map(WaitOn::Ring),
            _ => None,
        }
    }

    /// Whether a direct call `r` on `team` runs `shm` (the tuned or forced choice);
    /// `None` when the online tuner has yet to time its cell and `r.trial` asks to
    /// be told. A tuned call's decision depends on its key alone: it is kept for the
    /// next call, so calls in a loop skip the tuner.
    ///
    /// Returns (shm, whether the decision is kept).
    #[inline]
    fn direct_takes_shm(
        &mut self,
        team: &Team,
        r: &DirectReq<'_>,
    ) -> Result<Option<(bool, bool)>, CollError> {
        let n = r.elem * r.count;
        let key = ChoiceKey {
            team: team.id(),
            size: team.size(),
            kind: r.kind,
            bytes: n,
            commutative: r.commutative,
            sync: r.opts.sync,
            generation: self.fast.tuner_gen,
        };
        if let Some((k, shm)) = self.fast.direct_choice {
            if r.opts.algorithm.is_none() && k == key {
                return Ok(Some((shm, true)));
            }
        }
        let q = query(team, r.kind, n, AddrMode::Local, r.opts, r.commutative);
        let (shm, fixed) = if self.tuning.online_applies(&q, r.opts) {
            match self.tuning.tuner().online_choice(team.id(), &q) {
                Some(a) => (a.is_shared_memory(), true),
                None if r.trial => return Ok(None),
                None => (false, false),
            }
        } else {
            let a = self.tuning.tuner_mut().select(&q, r.opts.algorithm)?;
            (a.is_shared_memory(), r.opts.algorithm.is_none())
        };
        if fixed {
            self.fast.direct_choice = Some((key, shm));
        }
        Ok(Some((shm, fixed)))
    }

    /// Starts a blocking call on the direct path if it applies (see the module docs):
    /// `Ok(None)` if not (nothing consumed, the caller uses the table).
    pub(crate) fn direct_begin<'s, C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        team: &Team,
        r: &DirectReq<'_>,
        io: &mut Io<'_>,
        slot: &'s mut Option<DirectOp>,
    ) -> Result<Begin<'s>, CollError> {
        let x = ext(team);
        let Some(sh) = x.shm.as_ref() else {
            return Ok(Begin::Declined);
        };
        if !self.ops.is_empty() {
            return Ok(Begin::Declined);
        }
        self.check_team(cx, team)?;
        // A wait left by a call that unwound (a panicking handler) is stale.
        self.shm.set_wait(None);
        let (p, me, n) = (team.size(), team.rank(), r.elem * r.count);
        if r.root >= p {
            return Err(CollError::BadRank {
                rank: r.root,
                size: p,
            });
        }
        let Some((shm, fixed)) = self.direct_takes_shm(team, r)? else {
            return Ok(Begin::Trial);
        };
        if !shm || (r.kind != OpKind::Barrier && !ShmOp::fits(r.kind, p, r.elem, sh.ch)) {
            return Ok(Begin::Declined);
        }
        let seq = x.next_seq();
        let ring = r.kind != OpKind::Barrier && ring_eligible(r.kind, n, r.opts.sync);
        let desc = r.desc();
        let (base, belief) = if ring {
            self.ring_base(team, &desc)
        } else {
            (0, desc.belief())
        };
        let body = if r.kind == OpKind::Barrier {
            if fixed && *r.opts == Opts::default() {
                self.fast.bar_replay = Some((team.id(), p, self.fast.tuner_gen, belief));
            }
            DirectBody::Bar(ShmBar::new(p, x.next_barrier(), r.entry))
        } else if ring {
            if me == r.root && !io.out.is_empty() {
                io.out.copy_from_slice(&io.input[..n]);
            }
            self.tuning.counters.ring_calls += 1;
            DirectBody::Ring {
                b: ring::Bcast::new(seq, base, r.root, n, self.tuning.ring_packs(p)),
                own: sh.areas[me as usize],
                fencing: self.shm.fencing_on(),
            }
        } else {
            let mut op = ShmOp::new(
                r.kind,
                (p, me, r.root),
                r.elem,
                n,
                r.opts.sync,
                (team.id(), seq),
                sh.ch,
            );
            let cpus = self.tuning.tuner().host_cpus();
            let oversubscribed = cpus > 0 && p > cpus;
            op.set_belief(sh, belief);
            if let (Some(key), true) = (r.replay, fixed) {
                self.fast.replay = Some(Replay {
                    key,
                    generation: self.fast.tuner_gen,
                    desc,
                    belief,
                    oversubscribed,
                    op: op.clone(),
                });
            }
            op.keep_own(io.input, io.out);
            self.tuning
                .counters
                .publish(&mut op, sh, io.input, oversubscribed);
            DirectBody::Shm(op)
        };
        if !matches!(body, DirectBody::Bar(_)) {
            // Its first step follows at once (the caller's `drive`).
            self.shm.announce(sh, seq, belief, || desc);
        }
        self.tuning.counters.direct_calls += 1;
        Ok(Begin::Began(slot.insert(DirectOp {
            team: team.id(),
            seq,
            belief,
            body,
            size: p,
            rank: me,
        })))
    }

    /// Wakes the members of `team` that announced they may sleep: the wakes a call
    /// run without the endpoint ([`replay_run`](Self::replay_run)) asked for, done
    /// after it (each asked after the fence that pairs with the sleepers'; reading
    /// the `SLEEPY` words again finds those still asleep).
    #[cold]
    pub(crate) fn wake_team<C: Conduit>(&mut self, cx: &mut Cx<'_, C>, team: &Team) {
        if let Some(t) = ext(team).shm.as_ref() {
            t.wake_fenced(t.others(), &mut |a| cx.wake(a));
        }
    }

    /// Records that the direct call, collective `seq` of `team` with `desc`, waits
    /// for `wait` (its progress hook then keeps the endpoint awake, runs the stall
    /// checks and the sleep protocol).
    #[inline]
    fn await_flag<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        wait: WaitOn,
        stall: Stall,
        who: (u64, u32, u32, u32),
    ) {
        self.record_flag_wait(wait, stall, who);
        cx.set_busy();
    }

    /// Records the wait of a direct call (as [`await_flag`](Self::await_flag) does,
    /// without asking for the progress hook: the caller does if it runs in the
    /// endpoint's context).
    fn record_flag_wait(
        &mut self,
        wait: WaitOn,
        stall: Stall,
        (team, rank, seq, belief): (u64, u32, u32, u32),
    ) {
        self.shm.set_wait(Some(DirectWait {
            wait,
            stall,
            check: false,
            team,
            rank,
            seq,
            belief,
            failed: false,
        }));
    }

    /// Lends `team` to the wait of the direct call that is about to wait in the
    /// endpoint's wait loop ([`ShmPath::watch`](crate::shmpath::ShmPath::watch)), and asks for the progress hook.
    /// Only before that loop: not on a call that completes without it (the step that
    /// ends the call drops it: no entry into the layer for that).
    #[cold]
    pub(crate) fn watch_direct<C: Conduit>(&mut self, cx: &mut Cx<'_, C>, team: &Team) {
        let Coll { shm, teams, .. } = self;
        shm.watch(team.id(), || teams.resolve(team).ok());
        cx.set_busy();
    }

    /// Records that the blocking call on `team` failed with `e` (members disagreed:
    /// a [`CollError::Mismatch`] its step found): the team fails here and every
    /// member is told (at once: the caller may not poll again).
    #[cold]
    pub(crate) fn direct_failed<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        team: &Team,
        e: &CollError,
    ) {
        let CollError::Mismatch { seq, found, .. } = e else {
            return;
        };
        self.shm.set_wait(None);
        let Ok(team) = self.resolve(team) else {
            return;
        };
        if self.teams.failed(team.id()).is_some() {
            return;
        }
        self.fail_team(team.id(), e);
        self.agree.history.failed(team.id(), *seq, e);
        self.agree.aborted.insert((team.id(), *seq));
        self.agree.pending_aborts.push((team, *seq, *found));
        self.send_aborts(cx);
        cx.set_busy();
    }

    /// Steps a direct call of `team` over `io`; on `Pending`, records its wait and
    /// asks for the progress hook (which keeps the endpoint awake, runs the stall
    /// checks and the sleep protocol). Runs the stall checks when the hook found them
    /// due (a mismatch fails the call and poisons the team).
    pub(crate) fn direct_step<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        team: &Team,
        d: &mut DirectOp,
        io: &mut Io<'_>,
    ) -> Result<Stepped, CollError> {
        let policy = cx.wait_policy();
        let r = step_parts(
            &mut self.shm,
            ext(team),
            team.id(),
            d,
            io,
            (policy, &mut |a| cx.wake(a)),
        );
        if let Ok(Stepped::Pending) = r {
            cx.set_busy();
        }
        r
    }

    /// [`direct_step`](Self::direct_step) on the layer's state alone (its caller
    /// borrows it: [`layer::state`](gex_core::layer::state)),
    /// under wait policy `policy`, asking `wake` for the members to wake: records
    /// the wait of a pending call but leaves asking for the progress hook to the
    /// caller, which does it only before the endpoint's wait loop (8 ranks on 2
    /// cores wait by handing the core over, never entering the layer between
    /// steps). `None` (nothing done) for a team that is not this endpoint's.
    #[inline]
    pub(crate) fn step_borrowed(
        &mut self,
        team: &Team,
        d: &mut DirectOp,
        io: &mut Io<'_>,
        (policy, wake): (WaitPolicy, &mut impl FnMut(EpAddr)),
    ) -> Option<Result<Stepped, CollError>> {
        let Coll { shm, teams, .. } = self;
        let x = teams.borrowed_ext(team)?;
        Some(step_parts(shm, x, team.id(), d, io, (policy, wake)))
    }

    /// No wait on shared-memory flags is stalled any more: withdraw a sleep
    /// announcement.
    #[inline]
    pub(crate) fn calm(&mut self) {
        self.shm.calm();
    }
}
