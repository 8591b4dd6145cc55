//! The shared-memory direct path's state, in two components of
//! [`Coll`](crate::Coll): [`ShmPath`] (this endpoint's area and what it knows of its
//! channels, the sleep protocol's words, the wait of a blocking call on the direct
//! path, the path's settings) and [`FastPath`] (the direct path's caches); and the
//! direct step over that state ([`step_parts`]), which blocking calls run with or
//! without the endpoint's context ([`crate::shmdrive`] starts them).

use crate::barrier::ShmBar;
use crate::error::CollError;
use crate::op::{OpKind, SyncModes};
use crate::ring;
use crate::rootcheck::{self, Desc, Described, Stall};
use crate::shm::{self, Area, Expected, Io, ShmOp, ShmTeam, WaitOn};
use crate::teams::{CollTeam, ext};
use gex_core::{EpAddr, Team, WaitPolicy};
use gex_sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The shared-memory direct path's state on this endpoint (a component of
/// [`Coll`](crate::Coll), its field `shm`): this endpoint's area and channels, the
/// sleep protocol's words, the wait of a blocking call on the direct path, the
/// endpoint's wait policy and `GEX_COLL_SLEEP_YIELDS`.
pub(crate) struct ShmPath {
    /// This endpoint's area (`None`: no shared-memory collectives).
    own: Option<Area>,
    /// Channels in use (bit 0: the world team).
    used: Arc<AtomicU32>,
    /// Acknowledgements expected per channel and slot of this endpoint's area.
    expected: Expected,
    /// Generation of this layer on its endpoint (0: no shared-memory collectives).
    generation: u64,
    /// This member announced it may sleep ([`crate::shmdrive`]).
    sleepy: bool,
    /// Fruitless progress calls while waiting for shared-memory flags.
    fruitless: u32,
    /// This endpoint's small-broadcast ring, per channel ([`crate::ring`]).
    ring: [ring::Local<Area>; shm::NCH],
    /// This member's side of the ring's sleep protocol.
    fencing: ring::Fencing,
    /// This member's `MAYSLEEP` word is set (it may sleep).
    may_sleep: bool,
    /// The members' areas of the last team this member joined on each channel (whose
    /// `TEAMSLEEP` words it sets when it may sleep: [`join`](Self::join)).
    teams: [Vec<Area>; shm::NCH],
    /// Which descriptors this member's records hold, per channel
    /// ([`rootcheck::announce`]).
    described: [Described; shm::NCH],
    /// The error a direct call's wait failed with
    /// ([`DirectWait::failed`]).
    direct_error: Option<CollError>,
    /// The team of a direct call, lent while it waits in the endpoint's wait loop:
    /// the progress hook then runs its stall checks itself, and the wait goes on
    /// unless they find something, so that a wait making no progress reaches
    /// `GEX_STALL_REPORT` ([`Coll::watch_direct`](crate::Coll::watch_direct)). The call's step that ends it
    /// (done or failed) drops it.
    watch: Option<Team>,
    /// The wait of a blocking call on the direct path.
    wait: Option<DirectWait>,
    /// The endpoint's wait policy (as the last progress call saw it).
    policy: WaitPolicy,
    /// `GEX_COLL_SLEEP_YIELDS` ([`sleep_after`]).
    sleep_yields: u32,
}

impl ShmPath {
    /// The state of an endpoint whose area is `own` (`None`: no shared-memory
    /// collectives), layer generation `generation`: only the world channel in use,
    /// the acknowledgements its slots hold already expected, nothing announced, no
    /// wait, wait policy `Spin` until [`note_policy`](Self::note_policy)
    /// says otherwise, [`crate::env::SLEEP_YIELDS`].
    pub(crate) fn new(own: Option<Area>, generation: u64) -> ShmPath {
        ShmPath {
            own,
            used: Arc::new(AtomicU32::new(1)),
            expected: Expected::from_area(own),
            generation,
            sleepy: false,
            fruitless: 0,
            ring: Default::default(),
            fencing: ring::Fencing::default(),
            may_sleep: false,
            teams: Default::default(),
            described: Default::default(),
            direct_error: None,
            watch: None,
            wait: None,
            policy: WaitPolicy::Spin,
            sleep_yields: crate::env::SLEEP_YIELDS,
        }
    }

    /// Takes the endpoint's wait policy `policy`, and announces at once that this
    /// member may sleep when it sleeps at every wait (`Block`); under spin-then-block
    /// the announcement waits for the member's first sleep
    /// ([`may_sleep_now`](Self::may_sleep_now)), so that members that never sleep (a
    /// spin part never exhausted) never make their writers fence.
    #[inline]
    pub(crate) fn note_policy(&mut self, policy: WaitPolicy) {
        self.policy = policy;
        if policy == WaitPolicy::Block {
            self.may_sleep_now();
        }
    }

    /// Announces, once, that this member may sleep ([`crate::ring`], *Sleeping
    /// without a fence per broadcast*: members storing flags it waits for start
    /// fencing when they see it). Before the member's first `SLEEPY` store: a member
    /// that sees `SLEEPY` set sees `MAYSLEEP` too (`ShmOp::wake_members` relies on
    /// it).
    #[inline]
    pub(crate) fn may_sleep_now(&mut self) {
        if !self.may_sleep {
            if let Some(own) = self.own {
                // Every team's members first (`ShmTeam::may_sleep_any` reads their
                // words before the members' `MAYSLEEP`).
                for (c, areas) in self.teams.iter().enumerate() {
                    for a in areas {
                        a.set_team_may_sleep(c);
                    }
                }
                own.set_may_sleep();
                self.may_sleep = true;
            }
        }
    }

    /// This member joins `t` (made here, before any of its collectives): a member
    /// that may sleep already sets the channel's `TEAMSLEEP` word in every member's
    /// area; one that announces later sets them then
    /// ([`may_sleep_now`](Self::may_sleep_now)). The channel's previous team is
    /// forgotten: words it set stay set (they are never cleared, since a member
    /// of the new team may have set them), which costs its owners only the look at
    /// the members' words.
    pub(crate) fn join(&mut self, t: &ShmTeam) {
        if self.may_sleep {
            for a in &t.areas {
                a.set_team_may_sleep(t.ch);
            }
        }
        self.teams[t.ch] = t.areas.clone();
    }

    /// Sets `GEX_COLL_SLEEP_YIELDS` ([`sleep_after`]).
    pub(crate) fn with_sleep_yields(mut self, yields: u32) -> ShmPath {
        self.sleep_yields = yields;
        self
    }

    /// The generation of this layer on its endpoint (0: no shared-memory
    /// collectives).
    #[inline]
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// The channels in use on this endpoint (bit 0: the world team), shared with the
    /// teams that use them.
    #[inline]
    pub(crate) fn used(&self) -> &Arc<AtomicU32> {
        &self.used
    }

    /// The endpoint's wait policy, as the last progress call saw it.
    #[inline]
    pub(crate) fn policy(&self) -> WaitPolicy {
        self.policy
    }

    /// True if the endpoint may sleep between polls of a shared-memory wait (it
    /// blocks at every wait, or this member announced it may sleep): polls are rare,
    /// so a stall counts polls as it would time ([`Stall::fruitless`]).
    #[inline]
    pub(crate) fn polls_rare(&self) -> bool {
        self.policy == WaitPolicy::Block || self.sleepy
    }

    /// The wait of a blocking call on the direct path, if one waits.
    #[inline(always)]
    pub(crate) fn waiting(&self) -> Option<&DirectWait> {
        self.wait.as_ref()
    }

    /// Records that a blocking call on the direct path waits for `w` (`None`: none
    /// waits; a wait left by a call that unwound is stale).
    #[inline(always)]
    pub(crate) fn set_wait(&mut self, w: Option<DirectWait>) {
        self.wait = w;
    }

    /// The team a direct call lent for its waits in the endpoint's wait loop.
    #[inline]
    pub(crate) fn watched(&self) -> Option<&Team> {
        self.watch.as_ref()
    }

    /// Lends `team` (resolved) for the waits of the direct call about to wait in the
    /// endpoint's wait loop, unless it is lent already; `resolve` makes it.
    #[inline]
    pub(crate) fn watch(&mut self, id: u64, resolve: impl FnOnce() -> Option<Team>) {
        if self.watch.as_ref().is_none_or(|t| t.id() != id) {
            self.watch = resolve();
        }
    }

    /// The acknowledgements expected on this endpoint's slots.
    #[inline(always)]
    pub(crate) fn expected_mut(&mut self) -> &mut Expected {
        &mut self.expected
    }

    /// This member's side of the ring's sleep protocol.
    #[inline(always)]
    pub(crate) fn fencing_mut(&mut self) -> &mut ring::Fencing {
        &mut self.fencing
    }

    /// Whether this member fences ring flags.
    #[inline(always)]
    pub(crate) fn fencing_on(&self) -> bool {
        self.fencing.on
    }

    /// This endpoint's small-broadcast ring on channel `ch` and its side of the
    /// ring's sleep protocol.
    #[inline(always)]
    pub(crate) fn ring_parts(&mut self, ch: usize) -> (&mut ring::Local<Area>, &mut ring::Fencing) {
        (&mut self.ring[ch], &mut self.fencing)
    }

    /// This member starts collective `seq` of team `t` with `belief`
    /// ([`rootcheck::announce`], with this member's records of the channel).
    #[inline(always)]
    pub(crate) fn announce(
        &mut self,
        t: &ShmTeam,
        seq: u32,
        belief: u32,
        desc: impl FnOnce() -> Desc,
    ) {
        rootcheck::announce(t, &mut self.described[t.ch], seq, belief, desc);
    }

    /// Before a sleep: counts a fruitless progress call and, once the wait policy's
    /// spin part is over, announces that this member may sleep; true if it did.
    pub(crate) fn sleep_gate(&mut self) -> bool {
        let Some(after) = sleep_after(self.policy, self.sleep_yields) else {
            return false;
        };
        self.fruitless = self.fruitless.saturating_add(1);
        if self.fruitless < after {
            return false;
        }
        let Some(own) = self.own else {
            return false;
        };
        if !self.sleepy {
            self.may_sleep_now();
            own.sleepy().store(1, Ordering::Relaxed);
            self.sleepy = true;
        }
        true
    }

    /// True once the direct call can step again (the condition its caller waits for).
    #[inline]
    pub(crate) fn direct_ready(&self) -> bool {
        self.wait
            .as_ref()
            .is_none_or(|d| d.check || d.failed || d.wait.ready())
    }

    /// The progress hook's part for a direct call's wait: counts it stalled and says
    /// when the stall checks are due (the caller's next step runs them, or, with the
    /// team lent ([`watch`](Self::watch)), this call). True if the call can step now.
    pub(crate) fn direct_progress(&mut self) -> bool {
        let rare = self.polls_rare();
        let Some(d) = self.wait.as_mut() else {
            return false;
        };
        if d.wait.ready() {
            // Its caller steps (or finished on its own: `DirectOp::finish`).
            self.wait = None;
            return true;
        }
        if d.check || d.failed {
            return true;
        }
        if !d.stall.fruitless(rare) {
            return false;
        }
        let Some(team) = self.watch.as_ref().filter(|t| t.id() == d.team) else {
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
                self.direct_error = Some(e);
                true
            }
            None => false,
        }
    }

    /// Fails the direct call waiting here with `e` (kept for its next step), unless
    /// it failed already.
    pub(crate) fn fail_direct(&mut self, e: &CollError) {
        if let Some(d) = self.wait.as_mut() {
            if !d.failed {
                d.failed = true;
                self.direct_error = Some(e.clone());
            }
        }
    }
}

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
/// ([`Coll::ring_base`](crate::Coll::ring_base)).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RingKey {
    pub(crate) team: u64,
    /// [`Desc::ring_key`].
    pub(crate) key: u64,
    pub(crate) desc: Desc,
    /// The digest its ring tags start from.
    pub(crate) base: u64,
    pub(crate) belief: u32,
    /// The tuner generation in which a blocking in-place call of this key took `shm`
    /// by the tuner's choice ([`Coll::ring_begin`](crate::Coll::ring_begin)): later ones skip the tuner's key.
    pub(crate) shm_gen: Option<u64>,
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
    pub(crate) fn pending_wait(&self, stall: Stall) -> Option<DirectWait> {
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
    /// The call failed (the error is [`ShmPath::direct_error`]): the stall checks
    /// found its members disagree, or its team failed ([`Coll::fail_team`](crate::Coll::fail_team)). The
    /// next step returns it.
    pub(crate) failed: bool,
}

/// How a direct step ended.
pub(crate) enum Stepped {
    Done,
    Pending,
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
    /// ([`Coll::ring_base`](crate::Coll::ring_base)).
    pub(crate) ring_key: Option<RingKey>,
    /// The last direct call's decisions, for calls of the same shape (module docs,
    /// *Replay*).
    pub(crate) replay: Option<Replay>,
    /// The team (id, size), tuner generation and belief of the last blocking barrier
    /// under default options that took the shared-memory barrier
    /// ([`Coll::barrier_replay`](crate::Coll::barrier_replay)).
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
    pub(crate) key: ReplayKey,
    /// The tuner's generation the decisions were taken in.
    pub(crate) generation: u64,
    pub(crate) desc: Desc,
    pub(crate) belief: u32,
    pub(crate) oversubscribed: bool,
    /// The call's operation (its fixed fields, belief and tag digest), restarted in
    /// place by every replayed call ([`ShmOp::restart`]).
    pub(crate) op: ShmOp,
}

/// What a tuned direct call's decision depends on besides its team's fixed shape
/// (channel, scratch, hosts): the cached decision holds while the key is equal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ChoiceKey {
    pub(crate) team: u64,
    pub(crate) size: u32,
    pub(crate) kind: OpKind,
    pub(crate) bytes: usize,
    pub(crate) commutative: bool,
    pub(crate) sync: SyncModes,
    pub(crate) generation: u64,
}

/// One direct step of `d` over `io` on the direct path's state `shm` (its wait
/// record included), for the team with extension `x` and id `id`, under wait policy
/// `policy`, asking `wake` for the members to wake: runs the stall checks first when
/// the progress hook found them due (a mismatch fails the call and poisons the
/// team); on `Pending`, records the wait (without asking for the progress hook: the
/// callers do, [`Coll::direct_step`](crate::Coll::direct_step) at once, the borrowed path only before the
/// endpoint's wait loop).
#[inline]
pub(crate) fn step_parts(
    shm: &mut ShmPath,
    x: &CollTeam,
    id: u64,
    d: &mut DirectOp,
    io: &mut Io<'_>,
    (policy, wake): (WaitPolicy, &mut impl FnMut(EpAddr)),
) -> Result<Stepped, CollError> {
    let t = x.shm.as_ref().expect("direct calls need a channel");
    let stall = take_wait(shm, t, id, (d.seq, d.belief))?;
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
    shm.wait = d.pending_wait(stall);
    Ok(Stepped::Pending)
}

/// Takes the record of a direct call's wait (`shm.wait`) before the call's
/// next step on team `t` (id `id`) as collective `seq` with descriptor `desc`: the
/// stall count to carry over, or the mismatch that the stall checks find when the
/// progress hook found them due, or that the hook found itself (the team is then
/// poisoned and the sleep announcement withdrawn).
#[inline]
pub(crate) fn take_wait(
    shm: &mut ShmPath,
    t: &ShmTeam,
    id: u64,
    (seq, belief): (u32, u32),
) -> Result<Stall, CollError> {
    let Some(w) = shm.wait.take() else {
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

impl ShmPath {
    /// One direct step of the slot protocol for collective `seq` under `belief`
    /// (`announce`: the descriptor of a first step that announces the collective to
    /// the checks, a replayed call's; a call begun by [`Coll::direct_begin`](crate::Coll::direct_begin) was
    /// announced there): steps (with
    /// [`step_shm`](Self::step_shm)'s inner looks under wait policy `policy`),
    /// records it finished when done, and wakes (`wake`) the members it stored flags
    /// for. True if done.
    #[inline]
    pub(crate) fn shm_step(
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
    pub(crate) fn unwatch(&mut self) {
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

#[cfg(test)]
mod tests {
    use super::ShmPath;
    use crate::shm::{AREA_LEN, Area, ShmTeam};
    use gex_core::EpAddr;
    use gex_sync::atomic::AtomicU32;
    use std::ptr::NonNull;
    use std::sync::Arc;

    /// A zeroed area in process memory, accessed only through atomics once shared, as
    /// the conduit's. A `Vec` (moving a `Box` would retag it as unique under Miri's
    /// Stacked Borrows and invalidate `base`), zeroed by the allocator (a loop over a
    /// megabyte of words takes a minute under Miri).
    fn area() -> (Vec<u64>, Area) {
        let mut words = vec![0u64; AREA_LEN / 8];
        let base = NonNull::new(words.as_mut_ptr().cast::<u8>()).expect("a vec is not null");
        (words, Area::new(base))
    }

    /// Member `me`'s view of a team of `areas` on channel `ch`.
    fn team(ch: usize, areas: &[Area], me: u32) -> ShmTeam {
        let members = (0..areas.len() as u32).map(|q| EpAddr::new(q, 0)).collect();
        let used = Arc::new(AtomicU32::new(1 << ch));
        ShmTeam::new(ch, areas.to_vec(), Vec::new(), 1, used, members, me, 7)
    }

    /// A writer asks its own `TEAMSLEEP` word first: a member that may sleep sets it
    /// in every member's area of each team it joined (when it announces, or at the
    /// join if it announced before), and a member's `MAYSLEEP` without it is not
    /// looked at.
    #[test]
    fn team_sleep_words_follow_announcements_and_joins() {
        let (_b0, a0) = area();
        let (_b1, a1) = area();
        let (_b2, a2) = area();
        let t = [a0, a1, a2];
        let writer = team(1, &t, 0);
        let mut m2 = ShmPath::new(Some(a2), 1);
        m2.join(&team(1, &t, 2));
        assert!(!writer.may_sleep_any(0b110), "nobody announced");
        m2.may_sleep_now();
        assert!(writer.may_sleep_any(0b100), "member 2 announced");
        assert!(!writer.may_sleep_any(0b010), "member 1 did not");
        assert!(a1.team_may_sleep(1), "every member's word is set");
        // A team joined after the announcement: set at the join.
        let later = team(2, &[a1, a2], 0);
        assert!(!later.may_sleep_any(0b10), "not joined yet");
        m2.join(&team(2, &[a1, a2], 1));
        assert!(later.may_sleep_any(0b10), "set at the join");
        // A team without member 2 on another channel: its words stay clear, and a
        // member's own `MAYSLEEP` is not looked at without them.
        let other = team(3, &[a0, a1], 0);
        a1.set_may_sleep();
        assert!(
            !other.may_sleep_any(0b10),
            "no member of this team announced"
        );
    }
}
