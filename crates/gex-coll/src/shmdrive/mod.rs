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
//! step stopped at; the layer's progress hook sees the wait (in [`Coll::direct`]) so
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
//! its wait policy ([`sleep_after`]) announces that it may sleep (its `SLEEPY` word)
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
use crate::engine::{Body, OpState};
use crate::error::CollError;
use crate::layer::{Coll, Counters, ShmLocal};
use crate::op::{AddrMode, OpKind, Opts, SyncModes};
use crate::path::ring_eligible;
use crate::ring;
use crate::rootcheck::{self, Desc, Stall};
use crate::shm::{Area, Io, Publish, ShmOp, ShmTeam, WaitOn};
use crate::teams::{CollTeam, Owner, ext};
use gex_core::layer::Cx;
use gex_core::spi::Conduit;
use gex_core::{EpAddr, Team, WaitPolicy};
use gex_sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

mod replay;
mod ringdrive;

/// Fruitless progress calls after which a member waiting for a shared-memory flag
/// announces that it may sleep, under each wait policy (`None`: never); `yields`:
/// `GEX_COLL_SLEEP_YIELDS` (default [`crate::env::SLEEP_YIELDS`]).
pub(crate) fn sleep_after(p: WaitPolicy, yields: u32) -> Option<u32> {
    match p {
        WaitPolicy::Spin => None,
        WaitPolicy::Block => Some(0),
        // Yielding hands the core to the member we wait for when ranks outnumber
        // cores.
        WaitPolicy::SpinThenBlock { spins } => Some(spins.saturating_add(yields)),
    }
}

/// How long a direct step of the slot protocol under [`WaitPolicy::Spin`] keeps
/// stepping after it stopped at a publication before it returns `Pending` and the caller's wait loop takes over (serving the endpoint): a
/// symmetric call (allreduce, gather_all, exchange) mostly waits for a publication
/// that is a cache-line transfer or two away, and leaving and re-entering the layer
/// cost about a fifth of a call (2 ranks, 8 B: 0.12 µs with the looks, 0.15 without).
/// A bound in time, not in looks: 64 looks were 0.2-0.3 µs here, shorter than a
/// 64 B exchange's wait when transfers are slow (this VM's slow state: 0.4 µs per
/// call), and calls that left the layer were 15-30 % slower (2 ranks, 64 B
/// exchange, gather_all, allreduce; same minutes, against the build before issue 12).
const INNER_WAIT: Duration = Duration::from_micros(2);

/// Looks between two readings of the clock while looking (the first after as many
/// looks: a short wait never reads it).
const INNER_LOOKS: u32 = 64;

/// The last small broadcast's descriptor, as the ring's cache keeps it
/// ([`Coll::ring_base`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RingKey {
    team: u64,
    /// [`Desc::ring_key`].
    key: u64,
    desc: Desc,
    /// The digest its ring tags start from.
    base: u64,
    belief: u32,
    /// The tuner generation in which a blocking in-place call of this key took `shm`
    /// by the tuner's choice ([`Coll::ring_begin`]): later ones skip the tuner's key.
    shm_gen: Option<u64>,
}

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

/// A small broadcast in the layer's table, with buffers of its own.
pub(crate) struct OwnedRing {
    pub(crate) op: ring::Bcast<Area>,
    pub(crate) input: Vec<u8>,
    /// The output (the root's: a copy of its input).
    pub(crate) out: Vec<u8>,
}

/// A blocking call running directly over the caller's buffers (its team is the
/// caller's, resolved at each step: no reference count on the hot path).
pub(crate) struct DirectOp {
    /// The team's id and the collective's sequence number in it.
    pub(crate) team: u64,
    pub(crate) seq: u32,
    /// The digest of the descriptor members compare ([`crate::rootcheck`]; the
    /// descriptor is in this member's records, [`rootcheck::own_desc`]).
    pub(crate) belief: u32,
    pub(crate) body: DirectBody,
    /// The team's size and this member's rank in it.
    pub(crate) size: u32,
    pub(crate) rank: u32,
}

/// What a direct call runs.
pub(crate) enum DirectBody {
    Shm(ShmOp),
    Bar(ShmBar),
    /// A small broadcast; this member's area and whether it fences (for the
    /// reader's completion outside the layer).
    Ring {
        b: ring::Bcast<Area>,
        own: Area,
        fencing: bool,
    },
}

impl DirectOp {
    /// Completes a barrier whose last wait is over (a counter barrier's release, a
    /// flag barrier's last member), or a small broadcast's reader whose root
    /// published (into `out`), outside the layer (the layer's record of the wait is
    /// dropped by its next poll or direct call): true if done. Other calls step
    /// through the layer.
    #[inline]
    pub(crate) fn finish(&mut self, out: &mut [u8]) -> bool {
        match &mut self.body {
            DirectBody::Bar(ShmBar::Count(b)) => b.finish(),
            DirectBody::Bar(ShmBar::Flag(b)) => b.finish(self.size, self.rank),
            DirectBody::Ring { b, own, fencing } => {
                b.finish(*own, &ring::Fencing { on: *fencing }, out)
            }
            DirectBody::Shm(_) => false,
        }
    }

    /// The layer's record of the wait of this call, which a step left pending,
    /// with the stall count `stall` carried over from its earlier waits.
    #[inline(always)]
    fn pending_wait(&self, stall: Stall) -> Option<DirectWait> {
        let wait = self.wait().expect("a pending step records its wait");
        Some(DirectWait {
            wait,
            stall,
            check: false,
            team: self.team,
            rank: self.rank,
            seq: self.seq,
            belief: self.belief,
            failed: false,
        })
    }

    /// The word and value its wait for a publication looks for ([`WaitOn::post_word`]).
    #[inline]
    pub(crate) fn post_word(&self) -> Option<(&AtomicU64, u64)> {
        match &self.body {
            DirectBody::Shm(op) => op.wait.as_ref().and_then(WaitOn::post_word),
            _ => None,
        }
    }

    /// What the call waits for (after a step returned false).
    #[inline]
    pub(crate) fn wait(&self) -> Option<WaitOn> {
        match &self.body {
            DirectBody::Shm(op) => op.wait,
            DirectBody::Bar(b) => b.wait(),
            DirectBody::Ring { b, .. } => b.wait.map(WaitOn::Ring),
        }
    }
}

/// A direct call's wait, as the progress hook sees it. Plain data (no drop glue):
/// every call clears the record a call before it left, on the fast path.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DirectWait {
    pub(crate) wait: WaitOn,
    pub(crate) stall: Stall,
    /// The stall checks are due (run by the next step, which has the team).
    pub(crate) check: bool,
    /// The call's team (id), this member's rank in it, its collective and belief
    /// (its descriptor is in this member's records, [`rootcheck::own_desc`]).
    pub(crate) team: u64,
    pub(crate) rank: u32,
    pub(crate) seq: u32,
    pub(crate) belief: u32,
    /// The call failed (the error is [`ShmLocal::direct_error`]): the stall checks
    /// found its members disagree, or its team failed ([`Coll::fail_team`]). The
    /// next step returns it.
    pub(crate) failed: bool,
}

/// Fails the direct call waiting in `direct` with `e` (kept in `shm` for its next
/// step), unless it failed already.
pub(crate) fn fail_direct(direct: &mut Option<DirectWait>, shm: &mut ShmLocal, e: &CollError) {
    if let Some(d) = direct.as_mut() {
        if !d.failed {
            d.failed = true;
            shm.direct_error = Some(e.clone());
        }
    }
}

/// How a direct step ended.
pub(crate) enum Stepped {
    Done,
    Pending,
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
        let (ty, red) = self.codes;
        let n = self.elem * self.count;
        Desc::new(
            self.kind,
            self.root,
            (ty, self.elem),
            n,
            red,
            self.opts.sync,
        )
    }
}

/// The shape of a blocking call over borrowed slices with default options, as far as
/// the checks and decisions of the direct path depend on it (see the module docs,
/// *Replay*).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReplayKey {
    pub(crate) team: u64,
    pub(crate) kind: OpKind,
    pub(crate) root: u32,
    /// Bytes of an element.
    pub(crate) elem: usize,
    /// Elements of the input and output slices (of the buffer twice, in place).
    pub(crate) lens: (usize, usize),
    /// One buffer in place (a broadcast) rather than two slices.
    pub(crate) in_place: bool,
    /// The explicit count of elements per block, if any.
    pub(crate) count: Option<usize>,
    /// Whether the call reduces, and then whether its reduction is commutative.
    pub(crate) reduce: Option<bool>,
    /// The element type's code and the reduction's ([`crate::engine::Start::codes`]).
    pub(crate) codes: (u8, u8),
}

/// The direct path's caches: the last decisions of blocking calls, so that calls in
/// a loop skip the tuner, the descriptor digest and the slot choice. Owned by the
/// layer record, read and written by the direct path alone (and cleared when a team
/// goes or the tuner may decide differently).
#[derive(Default)]
pub(crate) struct FastPath {
    /// Changes whenever the tuner may decide differently (a program's access to it,
    /// an online winner recorded).
    pub(crate) tuner_gen: u64,
    /// The last tuned direct call's decision (its key, and whether it takes the
    /// shared-memory algorithm).
    pub(crate) direct_choice: Option<(ChoiceKey, bool)>,
    /// The last small broadcast's key (team, root, context), digest and belief
    /// ([`Coll::ring_base`]).
    pub(crate) ring_key: Option<RingKey>,
    /// The last direct call's decisions, for calls of the same shape (module docs,
    /// *Replay*).
    pub(crate) replay: Option<Replay>,
    /// The team (id, size), tuner generation and belief of the last blocking barrier
    /// under default options that took the shared-memory barrier
    /// ([`Coll::barrier_replay`]).
    pub(crate) bar_replay: Option<(u64, u32, u64, u32)>,
}

impl FastPath {
    /// The tuner may decide differently: every cached decision is stale.
    pub(crate) fn tuner_changed(&mut self) {
        self.tuner_gen += 1;
    }

    /// Forgets every cached decision (a team went: its id may come back).
    pub(crate) fn forget(&mut self) {
        self.direct_choice = None;
        self.replay = None;
        self.bar_replay = None;
        self.ring_key = None;
    }
}

/// The decisions of the last direct call that ran the slot protocol (see the module
/// docs, *Replay*).
pub(crate) struct Replay {
    key: ReplayKey,
    /// The tuner's generation the decisions were taken in.
    generation: u64,
    desc: Desc,
    belief: u32,
    oversubscribed: bool,
    /// The call's operation (its fixed fields, belief and tag digest), restarted in
    /// place by every replayed call ([`ShmOp::restart`]).
    op: ShmOp,
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

/// What a tuned direct call's decision depends on besides its team's fixed shape
/// (channel, scratch, hosts): the cached decision holds while the key is equal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ChoiceKey {
    team: u64,
    size: u32,
    kind: OpKind,
    bytes: usize,
    commutative: bool,
    sync: SyncModes,
    generation: u64,
}

impl Coll {
    /// True if a collective of `st`'s team started before it (lower sequence number)
    /// and of the kind `kind` selects has not finished here: `st` must wait its turn.
    pub(crate) fn earlier_unfinished(&self, st: &OpState, kind: impl Fn(&OpState) -> bool) -> bool {
        let (tid, seq) = (st.team.id(), st.seq);
        self.ops
            .values()
            .any(|o| kind(o) && o.team.id() == tid && o.seq < seq && !o.taken && o.result.is_none())
    }

    /// Advances shared-memory collective or flag barrier `id`; true if it did
    /// something.
    pub(crate) fn advance_shm<C: Conduit>(&mut self, cx: &mut Cx<'_, C>, id: u64) -> bool {
        let st = &self.ops[&id];
        if !st.started {
            let waits = if st.is_bar() {
                self.earlier_unfinished(st, OpState::is_bar)
            } else {
                self.earlier_unfinished(st, OpState::is_shm)
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
                    let rec = &mut shm.described[t.ch];
                    rootcheck::announce(t, rec, st.seq, st.belief, || desc);
                }
                let done = op.step(t, &mut shm.expected);
                let stored = op.op().stored();
                if done {
                    rootcheck::finished(t, st.seq);
                    st.result = Some(Ok(op.take_output()));
                }
                op.op()
                    .wake_members(t, &mut shm.fencing, &mut |a| cx.wake(a));
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
                    let rec = &mut shm.described[t.ch];
                    rootcheck::announce(t, rec, st.seq, st.belief, || desc);
                }
                let view = t.view();
                let local = &mut shm.ring[t.ch];
                let done =
                    r.op.step(&view, local, &mut shm.fencing, &r.input, &mut r.out);
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
        let q = Self::query(team, r.kind, n, AddrMode::Local, r.opts, r.commutative);
        let (shm, fixed) = if self.online_applies(&q, r.opts) {
            match self.tuner.online_choice(team.id(), &q) {
                Some(a) => (a.is_shared_memory(), true),
                None if r.trial => return Ok(None),
                None => (false, false),
            }
        } else {
            let a = self.tuner.select(&q, r.opts.algorithm)?;
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
        self.direct = None;
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
            self.counters.ring_calls += 1;
            DirectBody::Ring {
                b: ring::Bcast::new(seq, base, r.root, n),
                own: sh.areas[me as usize],
                fencing: self.shm.fencing.on,
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
            let cpus = self.tuner.host_cpus();
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
            self.counters.publish(&mut op, sh, io.input, oversubscribed);
            DirectBody::Shm(op)
        };
        if !matches!(body, DirectBody::Bar(_)) {
            // Its first step follows at once (the caller's `drive`).
            rootcheck::announce(sh, &mut self.shm.described[sh.ch], seq, belief, || desc);
        }
        self.counters.direct_calls += 1;
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
        (team, rank, seq, belief): (u64, u32, u32, u32),
    ) {
        self.direct = Some(DirectWait {
            wait,
            stall,
            check: false,
            team,
            rank,
            seq,
            belief,
            failed: false,
        });
        cx.set_busy();
    }

    /// Lends `team` to the wait of the direct call that is about to wait in the
    /// endpoint's wait loop ([`ShmLocal::watch`]), and asks for the progress hook.
    /// Only before that loop: not on a call that completes without it (the step that
    /// ends the call drops it: no entry into the layer for that).
    #[cold]
    pub(crate) fn watch_direct<C: Conduit>(&mut self, cx: &mut Cx<'_, C>, team: &Team) {
        if self.shm.watch.as_ref().is_none_or(|t| t.id() != team.id()) {
            self.shm.watch = self.resolve(team).ok();
        }
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
        self.direct = None;
        let Ok(team) = self.resolve(team) else {
            return;
        };
        if self.failed.contains_key(&team.id()) {
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
            (&mut self.direct, &mut self.shm),
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
        let Coll {
            direct,
            shm,
            world,
            me,
            owner,
            ..
        } = self;
        let x = borrowed_ext(team, world, (*me, owner))?;
        Some(step_parts(
            (direct, shm),
            x,
            team.id(),
            d,
            io,
            (policy, wake),
        ))
    }

    /// True once the direct call can step again (the condition its caller waits for).
    pub(crate) fn direct_ready(&self) -> bool {
        self.direct
            .as_ref()
            .is_none_or(|d| d.check || d.failed || d.wait.ready())
    }

    /// The progress hook's part for a direct call's wait: counts it stalled and says
    /// when the stall checks are due (the caller's next step runs them). True if the
    /// call can step now.
    pub(crate) fn direct_progress(&mut self) -> bool {
        let rare = self.policy == WaitPolicy::Block || self.shm.sleepy;
        let Some(d) = self.direct.as_mut() else {
            return false;
        };
        if d.wait.ready() {
            // Its caller steps (or finished on its own: `DirectOp::finish`).
            self.direct = None;
            return true;
        }
        if d.check || d.failed {
            return true;
        }
        if !d.stall.fruitless(rare) {
            return false;
        }
        let Some(team) = self.shm.watch.as_ref().filter(|t| t.id() == d.team) else {
            // The caller has not lent its team: its next step runs the checks.
            d.check = true;
            return true;
        };
        // In the endpoint's wait loop: the checks run here, and the wait goes on
        // unless they find the call can never complete.
        let Some(t) = ext(team).shm.as_ref() else {
            return false;
        };
        let desc = rootcheck::own_desc(t, d.belief);
        let call = (d.seq, d.belief, desc.as_ref());
        match rootcheck::shm_stalled_as(t, d.team, call, &d.wait) {
            Some(e) => {
                rootcheck::poison(t, &e);
                d.failed = true;
                self.shm.direct_error = Some(e);
                true
            }
            None => false,
        }
    }

    /// No wait on shared-memory flags is stalled any more: withdraw a sleep
    /// announcement.
    #[inline]
    pub(crate) fn calm(&mut self) {
        self.shm.calm();
    }
}

/// One direct step of `d` over `io` on the layer's `direct` wait and shared-memory
/// state `shm`, for the team with extension `x` and id `id`, under wait policy
/// `policy`, asking `wake` for the members to wake: runs the stall checks first when
/// the progress hook found them due (a mismatch fails the call and poisons the
/// team); on `Pending`, records the wait (without asking for the progress hook: the
/// callers do, [`Coll::direct_step`] at once, the borrowed path only before the
/// endpoint's wait loop).
#[inline]
fn step_parts(
    (direct, shm): (&mut Option<DirectWait>, &mut ShmLocal),
    x: &CollTeam,
    id: u64,
    d: &mut DirectOp,
    io: &mut Io<'_>,
    (policy, wake): (WaitPolicy, &mut impl FnMut(EpAddr)),
) -> Result<Stepped, CollError> {
    let t = x.shm.as_ref().expect("direct calls need a channel");
    let stall = take_wait((direct, shm), t, id, (d.seq, d.belief))?;
    let done = match &mut d.body {
        DirectBody::Shm(op) => shm.shm_step(t, op, (d.seq, d.belief, None), io, (policy, wake)),
        DirectBody::Bar(b) => {
            let done = b.step(t);
            t.wake_fenced(b.take_wake(), wake);
            done
        }
        DirectBody::Ring { b, fencing, .. } => {
            let local = &mut shm.ring[t.ch];
            let done = b.step(&t.view(), local, &mut shm.fencing, io.input, io.out);
            *fencing = shm.fencing.on;
            // Already fenced (crate::ring).
            t.wake_fenced(std::mem::take(&mut b.wake), wake);
            done
        }
    };
    if done {
        shm.calm();
        shm.unwatch();
        return Ok(Stepped::Done);
    }
    *direct = d.pending_wait(stall);
    Ok(Stepped::Pending)
}

/// Takes the layer's record of a direct call's wait (`direct`) before the call's
/// next step on team `t` (id `id`) as collective `seq` with descriptor `desc`: the
/// stall count to carry over, or the mismatch that the stall checks find when the
/// progress hook found them due, or that the hook found itself (the team is then
/// poisoned and the sleep announcement withdrawn).
#[inline]
fn take_wait(
    (direct, shm): (&mut Option<DirectWait>, &mut ShmLocal),
    t: &ShmTeam,
    id: u64,
    (seq, belief): (u32, u32),
) -> Result<Stall, CollError> {
    let Some(w) = direct.take() else {
        return Ok(Stall::default());
    };
    if w.failed {
        shm.calm();
        shm.unwatch();
        let e = shm.direct_error.take();
        return Err(e.unwrap_or_else(|| rootcheck::mismatch(id, seq, None)));
    }
    if w.check {
        let desc = rootcheck::own_desc(t, belief);
        let call = (seq, belief, desc.as_ref());
        if let Some(e) = rootcheck::shm_stalled_as(t, id, call, &w.wait) {
            rootcheck::poison(t, &e);
            shm.calm();
            shm.unwatch();
            return Err(e);
        }
    }
    Ok(w.stall)
}

/// `team`'s extension, resolved as [`Coll::with_resolved`] does but by reference (no
/// lending: the caller borrows the layer's fields apart), given the layer's `world`
/// team, this endpoint's address `me` and the layer instance `owner`; `None` for a
/// team that is not this endpoint's (the general path reports it).
#[inline]
fn borrowed_ext<'a>(
    team: &'a Team,
    world: &'a Team,
    (me, owner): (EpAddr, &Owner),
) -> Option<&'a CollTeam> {
    if team.me() != me {
        return None;
    }
    owner
        .ext_of(team)
        .or_else(|| (team.id() == 0 && team.size() == world.size()).then(|| ext(world)))
}

impl ShmLocal {
    /// One direct step of the slot protocol for collective `seq` under `belief`
    /// (`announce`: the descriptor of a first step that announces the collective to
    /// the checks, a replayed call's; a call begun by [`Coll::direct_begin`] was
    /// announced there): steps (with
    /// [`step_shm`](Self::step_shm)'s inner looks under wait policy `policy`),
    /// records it finished when done, and wakes (`wake`) the members it stored flags
    /// for. True if done.
    #[inline]
    fn shm_step(
        &mut self,
        t: &ShmTeam,
        op: &mut ShmOp,
        (seq, belief, announce): (u32, u32, Option<&Desc>),
        io: &mut Io<'_>,
        (policy, wake): (WaitPolicy, &mut impl FnMut(EpAddr)),
    ) -> bool {
        if let Some(desc) = announce {
            op.set_belief(t, belief);
            rootcheck::announce(t, &mut self.described[t.ch], seq, belief, || *desc);
        }
        let done = self.step_shm(t, op, io, (policy, &mut *wake));
        if done {
            rootcheck::finished(t, seq);
        }
        op.wake_members(t, &mut self.fencing, wake);
        done
    }

    /// Steps `op` over `io`; under [`WaitPolicy::Spin`], if it has to wait for a
    /// publication or for the readers of a publication by reference
    /// ([`ShmOp::worth_looking`]), steps again for up to [`INNER_WAIT`] per wait
    /// before giving up: true if done.
    #[inline]
    fn step_shm(
        &mut self,
        t: &ShmTeam,
        op: &mut ShmOp,
        io: &mut Io<'_>,
        (policy, wake): (WaitPolicy, &mut impl FnMut(EpAddr)),
    ) -> bool {
        let mut done = op.step(t, &mut self.expected, io);
        if !done && policy == WaitPolicy::Spin && op.worth_looking() {
            // Every member has a core: keep stepping a while before leaving the
            // layer (a peer's publication is usually a cache-line transfer away),
            // after waking whoever sleeps on what this step stored. Each look is a
            // whole step, not a load of the awaited flag: looking at the flag alone
            // (in a loop of loads and pauses) was slower whenever cache-line
            // transfers were slow (2 ranks, allreduce 512 B: 0.41-0.44 µs against
            // 0.38-0.40 stepping, this VM's slow state), and it needed a fence after
            // the step's stores (without one, 8 B took 1 µs instead of 0.15);
            // stepping needs none (docs/coll.md, *Waiting inside the layer*).
            op.wake_members(t, &mut self.fencing, wake);
            let mut looks = 0u32;
            let mut until = None;
            let mut at = op.position();
            loop {
                gex_sync::hint::spin_loop();
                done = op.step(t, &mut self.expected, io);
                if done {
                    break;
                }
                if op.position() != at {
                    // Past a wait (a copy of 64 KiB takes half the bound): the next
                    // wait gets the whole bound.
                    at = op.position();
                    looks = 0;
                    until = None;
                    continue;
                }
                looks += 1;
                if looks % INNER_LOOKS == 0 {
                    let now = Instant::now();
                    match until {
                        None => until = Some(now + INNER_WAIT),
                        Some(u) if now >= u => break,
                        Some(_) => {}
                    }
                }
            }
        }
        done
    }

    /// The direct call that lent its team for its waits ended: drops it.
    #[inline]
    fn unwatch(&mut self) {
        if self.watch.is_some() {
            self.drop_watch();
        }
    }

    #[cold]
    #[inline(never)]
    fn drop_watch(&mut self) {
        self.watch = None;
    }

    /// No wait on shared-memory flags is stalled any more: withdraw a sleep
    /// announcement.
    #[inline]
    pub(crate) fn calm(&mut self) {
        self.fruitless = 0;
        if self.sleepy {
            self.sleepy = false;
            if let Some(own) = self.own {
                own.sleepy().store(0, Ordering::Relaxed);
            }
        }
    }
}

impl Counters {
    /// Publishes `op`'s input by reference if it can ([`ShmOp::publish_by_reference`]),
    /// counting how.
    #[inline]
    fn publish(&mut self, op: &mut ShmOp, sh: &ShmTeam, input: &[u8], over: bool) {
        match op.publish_by_reference(sh, input, over) {
            Publish::Segment => self.by_reference_calls += 1,
            Publish::Process => self.cma_calls += 1,
            Publish::Slots => {}
        }
    }
}
