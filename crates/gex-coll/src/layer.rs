//! The collectives layer: [`Coll`], its state on one endpoint, and its side of the
//! layer contract of gex-core ([`Layer`]): attaching (after gex-rma's layer, reading
//! the `GEX_COLL_*` settings), the handlers (arms of [`Layer::handle`] that record
//! into the layer's mailbox), and the progress hook that advances every collective in
//! flight.

use crate::barrier::Notified;
use crate::engine::OpState;
use crate::error::CollError;
use crate::msg::{H_ABORT, H_PROBE, HANDLERS, Mailbox, Outbox, Probe, abort_args};
use crate::ring;
use crate::rma::Rma;
use crate::rootcheck::{self, Agreement, Described, mismatch};
use crate::shm::{self, Area, Expected, ShmTeam};
use crate::shmdrive::DirectWait;
use crate::teams::{SegAlloc, ext};
use crate::tune::Tuner;
use gex_core::config::EnvVar;
use gex_core::layer::{Attach, Cx, Layer, Progress};
use gex_core::spi::Conduit;
use gex_core::{Am, Capabilities, EpAddr, HandlerId, InitError, Team, Token, WaitPolicy};
use gex_sync::atomic::{AtomicU32, Ordering, fence};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// The collectives layer of gex: teams, the barrier and every collective, as a layer
/// of an endpoint ([`gex_core::layer`]). Add it to the client after gex-rma's layer;
/// its operations are methods of the endpoint ([`CollExt`](crate::CollExt)).
///
/// ```
/// use gex_coll::{Allreduce, BuiltinOp, Coll, CollExt};
/// use gex_core::{Blocking, ClientBuilder};
/// use gex_testkit::sim::{run_sim, SimConfig};
///
/// let builder = || ClientBuilder::new().layer::<gex_rma::Rma>().layer::<Coll>().segment_size(1 << 16);
/// let out = run_sim(3, SimConfig::default(), builder, |client| {
///     let mut ep = client.endpoint(0).unwrap();
///     let world = ep.world();
///     ep.collective(&world, Allreduce::new(vec![world.rank()], BuiltinOp::Sum), Blocking).unwrap()
/// });
/// assert_eq!(out, vec![vec![3u32]; 3]);
/// ```
///
/// Attaching fails (and so does [`Client::endpoint`](gex_core::Client::endpoint)) if
/// gex-rma's layer is not attached before it, or if a `GEX_COLL_*` setting is bad: the
/// error names the variable.
///
/// `!Unpin`: it holds the addresses of the endpoint's shared areas, so no code
/// outside this crate may swap or replace it (it is reached as `Pin<&mut Coll>`; see
/// "Pinned states" in [`gex_core::layer`]).
pub struct Coll {
    pub(crate) hids: [HandlerId; HANDLERS as usize],
    pub(crate) me: EpAddr,
    pub(crate) mb: Mailbox,
    pub(crate) outbox: Outbox,
    /// Collectives in flight, by start order.
    pub(crate) ops: BTreeMap<u64, OpState>,
    pub(crate) next_op: u64,
    pub(crate) tuner: Tuner,
    /// The primordial team with the layer's extension.
    pub(crate) world: Team,
    /// A stand-in for `world` while [`with_resolved`](Self::with_resolved) lends it.
    pub(crate) hole: Option<Team>,
    pub(crate) alloc: SegAlloc,
    pub(crate) seg_len: usize,
    pub(crate) shm: ShmLocal,
    /// An online trial is running (its calls are not tuned online themselves).
    pub(crate) in_trial: bool,
    /// A hierarchical stage is starting its sub-collective: an override that cannot
    /// run it gives way to the tuner.
    pub(crate) in_stage: bool,
    pub(crate) counters: Counters,
    /// The wait of a blocking call on the direct path.
    pub(crate) direct: Option<DirectWait>,
    /// Agreement: what this member knows of its collectives' outcomes and whom it
    /// must tell ([`crate::rootcheck`]).
    pub(crate) agree: Agreement,
    /// Teams whose members disagreed on a collective, by id, with the error: every
    /// later collective of them fails with it ([`crate::rootcheck`]).
    pub(crate) failed: HashMap<u64, CollError>,
    /// Split-phase barriers notified and not yet waited for, by team id.
    pub(crate) notified: HashMap<u64, Notified>,
    pub(crate) policy: WaitPolicy,
    /// `GEX_COLL_SLEEP_YIELDS` ([`crate::shmdrive::sleep_after`]).
    pub(crate) sleep_yields: u32,
    /// The direct path's fast-path caches (the last decisions, replayed by calls of
    /// the same shape).
    pub(crate) fast: crate::shmdrive::FastPath,
    /// This layer instance, the maker of the team extensions it uses
    /// ([`crate::teams::Owner`]).
    pub(crate) owner: crate::teams::Owner,
    /// Pinned (see the type's documentation).
    _pin: std::marker::PhantomPinned,
}

mod pinned {
    //! # Safety
    //! One unsafe block: `Pin::get_unchecked_mut` on the layer's own state, which no
    //! code of this crate moves.
    #![allow(unsafe_code)]
    use super::Coll;
    use std::pin::Pin;

    impl Coll {
        /// The state, reached pinned through [`gex_core::layer`], as `&mut`.
        #[inline(always)]
        pub(crate) fn unpin(p: Pin<&mut Coll>) -> &mut Coll {
            // SAFETY: no code of this crate moves a `Coll` out of the place the endpoint
            // keeps it in (nothing swaps, replaces or takes a state reached this way);
            // the type is `!Unpin` so that no code outside the crate can.
            unsafe { p.get_unchecked_mut() }
        }
    }
}

/// Runs `f` with `ep`'s collectives state alone when the endpoint lends it without a
/// progress thread (the fast paths); `None` with a progress thread (which shares the
/// state: the caller takes the endpoint's context instead, so the thread's progress
/// hook watches what it waits for) or without the layer.
#[inline(always)]
pub(crate) fn lent<C: Conduit, R>(
    ep: &mut gex_core::Endpoint<C>,
    f: impl FnOnce(&mut Coll) -> R,
) -> Option<R> {
    if ep.has_progress_thread() {
        return None;
    }
    gex_core::layer::state::<Coll, C, R>(ep, |p| f(Coll::unpin(p)))
}

/// This endpoint's shared-memory state.
#[derive(Debug)]
pub(crate) struct ShmLocal {
    /// This endpoint's area (`None`: no shared-memory collectives).
    pub(crate) own: Option<Area>,
    /// Channels in use (bit 0: the world team).
    pub(crate) used: Arc<AtomicU32>,
    /// Acknowledgements expected per channel and slot of this endpoint's area.
    pub(crate) expected: Expected,
    /// Generation of this layer on its endpoint (0: no shared-memory collectives).
    pub(crate) generation: u64,
    /// This member announced it may sleep ([`crate::shmdrive`]).
    pub(crate) sleepy: bool,
    /// Fruitless progress calls while waiting for shared-memory flags.
    pub(crate) fruitless: u32,
    /// This endpoint's small-broadcast ring, per channel ([`crate::ring`]).
    pub(crate) ring: [ring::Local<Area>; shm::NCH],
    /// This member's side of the ring's sleep protocol.
    pub(crate) fencing: ring::Fencing,
    /// This member's `MAYSLEEP` word is set (it may sleep).
    pub(crate) may_sleep: bool,
    /// The members' areas of the last team this member joined on each channel (whose
    /// `TEAMSLEEP` words it sets when it may sleep: [`join`](Self::join)).
    pub(crate) teams: [Vec<Area>; shm::NCH],
    /// Which descriptors this member's records hold, per channel
    /// ([`rootcheck::announce`]).
    pub(crate) described: [Described; shm::NCH],
    /// The error a direct call's wait failed with
    /// ([`DirectWait::failed`](crate::shmdrive::DirectWait::failed)).
    pub(crate) direct_error: Option<CollError>,
    /// The team of a direct call, lent while it waits in the endpoint's wait loop:
    /// the progress hook then runs its stall checks itself, and the wait goes on
    /// unless they find something, so that a wait making no progress reaches
    /// `GEX_STALL_REPORT` ([`Coll::watch_direct`]). The call's step that ends it
    /// (done or failed) drops it.
    pub(crate) watch: Option<Team>,
}

impl ShmLocal {
    /// The state of an endpoint whose area is `own` (`None`: no shared-memory
    /// collectives), layer generation `generation`: only the world channel in use,
    /// the acknowledgements its slots hold already expected, nothing announced.
    pub(crate) fn new(own: Option<Area>, generation: u64) -> ShmLocal {
        ShmLocal {
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
        }
    }

    /// Announces at once that this member may sleep when `policy` sleeps at every
    /// wait (`Block`); under spin-then-block the announcement waits for the member's
    /// first sleep ([`may_sleep_now`](Self::may_sleep_now)), so that members that
    /// never sleep (a spin part never exhausted) never make their writers fence.
    #[inline]
    pub(crate) fn note_policy(&mut self, policy: WaitPolicy) {
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

impl std::fmt::Debug for Coll {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coll")
            .field("addr", &self.me)
            .field("in_flight", &self.ops.len())
            .field("tuner", &self.tuner)
            .finish_non_exhaustive()
    }
}

impl Layer for Coll {
    const NAME: &'static str = "coll";
    const HANDLERS: u8 = HANDLERS;
    const AUX_BYTES: usize = shm::AREA_LEN;
    const ENV_VARS: &'static [EnvVar] = crate::env::ENV_VARS;

    fn attach<C: Conduit>(cx: &mut Attach<'_, C, Self>) -> Result<Self, InitError> {
        if cx.layer::<Rma>().is_none() {
            return Err(InitError::Layer {
                layer: Self::NAME,
                msg: "gex-coll needs gex-rma's layer attached before it \
                      (ClientBuilder::new().layer::<gex_rma::Rma>().layer::<gex_coll::Coll>())"
                    .into(),
            });
        }
        let tuner = crate::env::tuner(cx.config())?;
        let sleep_yields = crate::env::sleep_yields(cx.config())?;
        let hids = std::array::from_fn(|i| cx.handler(i as u8));
        let me = cx.addr();
        let own = shared_memory(cx)
            .then(|| cx.aux(me).map(Area::new))
            .flatten();
        let mut generation = 0;
        if let Some(own) = own {
            own.set_cma(shm::cma_capable());
            generation = own.next_generation();
        }
        let mut shm = ShmLocal::new(own, generation);
        shm.note_policy(cx.wait_policy());
        let owner = crate::teams::Owner::new();
        let world = crate::teams::world_team(cx, &mut shm, &owner);
        let mut c = Coll {
            hids,
            me,
            mb: Mailbox::default(),
            outbox: Outbox::new(),
            ops: BTreeMap::new(),
            next_op: 1,
            tuner,
            world,
            hole: Some(crate::teams::placeholder(me)),
            alloc: SegAlloc::default(),
            seg_len: cx.segment().len(),
            shm,
            in_trial: false,
            in_stage: false,
            counters: Counters::default(),
            direct: None,
            agree: Agreement::default(),
            failed: HashMap::new(),
            notified: HashMap::new(),
            policy: cx.wait_policy(),
            sleep_yields,
            fast: crate::shmdrive::FastPath::default(),
            owner,
            _pin: std::marker::PhantomPinned,
        };
        crate::teams::setup_world_hier(&mut c, cx);
        Ok(c)
    }

    #[inline]
    fn handle(self: std::pin::Pin<&mut Self>, h: u8, _t: &mut Token<'_>, am: Am<'_>) {
        let this = Coll::unpin(self);
        this.mb.deliver(h, &am);
    }

    fn describe(&self) -> String {
        let mut lines: Vec<String> = self.ops.values().map(OpState::describe).collect();
        if let Some(d) = &self.direct {
            lines.push(format!(
                "a blocking call (team {:#x} seq {}) waits for {}",
                d.team, d.seq, d.wait
            ));
        }
        if !self.outbox.is_empty() {
            lines.push(format!(
                "{} control messages wait for send resources",
                self.outbox.len()
            ));
        }
        let m = &self.mb;
        let held = m.eager.len() + m.long.len() + m.ready.len() + m.rdv.len();
        if held > 0 {
            lines.push(format!("{held} received messages not taken yet"));
        }
        lines.join("\n")
    }

    fn progress<C: Conduit>(self: std::pin::Pin<&mut Self>, cx: &mut Cx<'_, C>) -> Progress {
        let this = Coll::unpin(self);
        this.policy = cx.wait_policy();
        this.shm.note_policy(this.policy);
        this.flush_outbox(cx);
        if this.mb.alarm || !this.mb.probes.is_empty() {
            this.answer(cx);
        }
        let (mut progressed, shm_active) = this.advance_all(cx);
        if !this.agree.pending_aborts.is_empty() || !this.agree.pending_replies.is_empty() {
            this.send_aborts(cx);
        }
        progressed |= this.direct_progress();
        let busy = !this.ops.is_empty() || !this.outbox.is_empty();
        if !shm_active && this.direct.is_none() {
            this.calm();
            return if busy { Progress::Busy } else { Progress::Idle };
        }
        if progressed {
            this.calm();
            return Progress::Spinning;
        }
        if !this.sleep_gate() {
            return Progress::Spinning;
        }
        // Announced: look once more at every flag waited for (crate::shm, *Sleeping*).
        fence(Ordering::SeqCst);
        // A publication (a slot's or a small broadcast's) whose writer does not fence
        // yet: stay awake (checked before the flags themselves: crate::shm and
        // crate::ring, *Sleeping*).
        if !this.waits_sleep_safe() {
            return Progress::Spinning;
        }
        let (again, _) = this.advance_all(cx);
        if again || this.direct_ready_now() {
            return Progress::Spinning;
        }
        this.counters.sleep_polls += 1;
        Progress::Busy
    }
}

/// True if this endpoint runs shared-memory collectives: the conduit maps neighbours'
/// areas (never under `gex_force_am_rma`, which keeps the message paths tested).
fn shared_memory<C: Conduit>(cx: &Cx<'_, C>) -> bool {
    !cfg!(gex_force_am_rma) && cx.capabilities().contains(Capabilities::SHARED_MEMORY)
}

impl Coll {
    /// The id of handler `h` of the layer's block.
    #[inline]
    pub(crate) fn hid(&self, h: u8) -> HandlerId {
        self.hids[h as usize]
    }

    /// `team` with the layer's extension: itself, or this layer's world team for the
    /// endpoint's primordial team.
    ///
    /// # Errors
    /// [`CollError::NotMember`] if this endpoint is not `team.me()` (or the team was
    /// not made by this layer).
    pub(crate) fn resolve(&self, team: &Team) -> Result<Team, CollError> {
        let not_member = || CollError::NotMember { team: team.id() };
        if team.me() != self.me {
            return Err(not_member());
        }
        if self.owner.ext_of(team).is_some() {
            return Ok(team.clone());
        }
        // `me` matched: the primordial team of this endpoint's index (a team with
        // another layer instance's extension is no team of this endpoint's, but for
        // this rule, which ignores its members as for a team without one).
        if team.id() == 0 && team.size() == self.world.size() {
            return Ok(self.world.clone());
        }
        Err(not_member())
    }

    /// Runs `f` with `team` resolved by reference (no reference count touched: the
    /// hot path of blocking calls): `team` itself, or this layer's world team lent for
    /// the call.
    ///
    /// # Errors
    /// As [`resolve`](Self::resolve), or `f`'s.
    #[inline]
    pub(crate) fn with_resolved<R>(
        &mut self,
        team: &Team,
        f: impl FnOnce(&mut Coll, &Team) -> Result<R, CollError>,
    ) -> Result<R, CollError> {
        if team.me() != self.me {
            return Err(CollError::NotMember { team: team.id() });
        }
        if self.owner.ext_of(team).is_some() {
            return f(self, team);
        }
        if team.id() != 0 || team.size() != self.world.size() {
            return Err(CollError::NotMember { team: team.id() });
        }
        // (The error is made only when returned: one built eagerly for `ok_or` was
        // dropped on every call.)
        let Some(hole) = self.hole.take() else {
            return Err(CollError::Layer("the world team is lent already"));
        };
        let world = std::mem::replace(&mut self.world, hole);
        let r = f(self, &world);
        self.hole = Some(std::mem::replace(&mut self.world, world));
        r
    }

    /// Advances every collective in flight and removes those that are over; returns
    /// (some made progress, some shared-memory collective is in flight).
    pub(crate) fn advance_all<C: Conduit>(&mut self, cx: &mut Cx<'_, C>) -> (bool, bool) {
        let mut progressed = false;
        let mut shm_active = false;
        let mut next = self.ops.keys().next().copied();
        while let Some(id) = next {
            next = self.ops.range(id + 1..).next().map(|(&k, _)| k);
            progressed |= self.advance(cx, id);
            self.settle(id);
            if self.reap(id) {
                continue;
            }
            let Some(st) = self.ops.get(&id) else {
                continue;
            };
            if (st.is_shm() || st.is_bar()) && st.result.is_none() && !st.taken {
                shm_active = true;
            }
        }
        (progressed, shm_active)
    }

    /// Before a sleep: counts a fruitless call and, once the wait policy's spin part
    /// is over, announces that this member may sleep; true if it did.
    fn sleep_gate(&mut self) -> bool {
        let Some(after) = crate::shmdrive::sleep_after(self.policy, self.sleep_yields) else {
            return false;
        };
        self.shm.fruitless = self.shm.fruitless.saturating_add(1);
        if self.shm.fruitless < after {
            return false;
        }
        let Some(own) = self.shm.own else {
            return false;
        };
        if !self.shm.sleepy {
            self.shm.may_sleep_now();
            own.sleepy().store(1, Ordering::Relaxed);
            self.shm.sleepy = true;
        }
        true
    }

    /// True unless this member waits for a publication (a slot's, a small
    /// broadcast's) whose writer does not wake sleepers yet
    /// ([`shm::WaitOn::sleep_safe`]).
    fn waits_sleep_safe(&self) -> bool {
        self.direct.as_ref().is_none_or(|d| d.wait.sleep_safe())
            && self.ops.values().all(|st| {
                st.ring_wait().is_none_or(|w| w.sleep_safe())
                    && st.slot_wait().is_none_or(|w| w.sleep_safe())
            })
    }

    /// A direct call waits and can step now.
    fn direct_ready_now(&self) -> bool {
        self.direct
            .as_ref()
            .is_some_and(|d| d.check || d.wait.ready())
    }

    /// Answers probes and takes aborts (see [`crate::rootcheck`]).
    fn answer<C: Conduit>(&mut self, cx: &mut Cx<'_, C>) {
        for (team, seq, found) in std::mem::take(&mut self.mb.aborts) {
            self.agree.aborted.insert((team, seq));
            let e = mismatch(team, seq, found);
            match self.find_op(team, seq) {
                Some(id) => self.fail_op(id, e, false),
                None => self.fail_team(team, &e),
            }
        }
        for p in std::mem::take(&mut self.mb.probes) {
            self.answer_probe(cx, p);
        }
    }

    /// Answers probe `p`: if this member runs (or ran) its collective with another
    /// descriptor, it names the first field that differs, fails its part (or, if its
    /// part completed, the team) and tells every member; if the collective failed
    /// here, it tells the prober why; else it keeps the probe for when it starts the
    /// collective.
    #[cold]
    fn answer_probe<C: Conduit>(&mut self, cx: &mut Cx<'_, C>, p: Probe) {
        let theirs = p.desc.belief();
        if let Some(id) = self.find_op(p.team, p.seq) {
            let st = &self.ops[&id];
            if st.belief != theirs {
                let found = st.desc.disagreement(st.team.rank(), &p.desc, p.rank);
                let e = mismatch(p.team, p.seq, found);
                self.fail_op(id, e, true);
            } else if let Some(Err(e)) = &st.result {
                let e = e.clone();
                self.abort_to(cx, p.src, &e);
            } else if !st.probers.contains(&p.src) {
                // Told if the collective fails here later.
                let st = self.ops.get_mut(&id).expect("found");
                st.probers.push(p.src);
            }
            return;
        }
        if let Some(d) = self.direct {
            // A blocking call on the direct path.
            if (d.team, d.seq) == (p.team, p.seq) {
                if d.belief != theirs && !d.failed {
                    let ours = self.shm.watch.as_ref().and_then(|t| {
                        let t = ext(t).shm.as_ref()?;
                        rootcheck::own_desc(t, d.belief)
                    });
                    let found = ours.and_then(|o| o.disagreement(d.rank, &p.desc, p.rank));
                    let e = mismatch(p.team, p.seq, found);
                    self.fail_team(p.team, &e);
                    self.abort_to(cx, p.src, &e);
                }
                return;
            }
        }
        match self.agree.history.lookup(p.team, p.seq).cloned() {
            Some(k) if k.failed.is_some() => {
                self.abort_to(cx, p.src, k.failed.as_ref().expect("checked"));
            }
            Some(k) if k.desc.belief() != theirs => {
                // Its part completed here: the team fails here (the next collective
                // of it reports it) and the prober is told; members still waiting
                // learn it from their own probes, of this member or of the prober.
                let found = k.desc.disagreement(k.rank, &p.desc, p.rank);
                let e = mismatch(p.team, p.seq, found);
                self.agree.history.failed(p.team, p.seq, &e);
                self.fail_team(p.team, &e);
                self.abort_to(cx, p.src, &e);
            }
            Some(_) => {}
            None => match self
                .failed
                .get(&p.team)
                .filter(|e| rootcheck::covers(e, p.seq))
            {
                Some(e) => {
                    let e = e.clone();
                    self.abort_to(cx, p.src, &e);
                }
                None => self.agree.history.keep(p),
            },
        }
    }

    /// The collective (team, seq) in flight here.
    pub(crate) fn find_op(&self, team: u64, seq: u32) -> Option<u64> {
        self.ops
            .iter()
            .find(|(_, o)| o.team.id() == team && o.seq == seq)
            .map(|(&id, _)| id)
    }

    /// Records that team `id` failed with `e` (the first error stays): every later
    /// collective of it fails with it, as do those in flight here (at their next
    /// advance) and a blocking call waiting on the direct path.
    pub(crate) fn fail_team(&mut self, id: u64, e: &CollError) {
        self.mb.alarm = true;
        // The earliest failed collective stays (later ones follow from it).
        let earlier = |k: &CollError| rootcheck::earlier(e, k);
        if self.failed.get(&id).is_none_or(earlier) {
            self.failed.insert(id, e.clone());
            // Members that asked about a collective of it not started here.
            let early = std::mem::take(&mut self.agree.history.early);
            let (theirs, rest): (Vec<Probe>, Vec<Probe>) = early
                .into_iter()
                .partition(|p| p.team == id && rootcheck::covers(e, p.seq));
            self.agree.history.early = rest;
            for p in theirs {
                self.agree.pending_replies.push((p.src, e.clone()));
            }
        }
        if self
            .direct
            .as_ref()
            .is_some_and(|d| d.team == id && rootcheck::covers(e, d.seq))
        {
            crate::shmdrive::fail_direct(&mut self.direct, &mut self.shm, e);
        }
    }

    /// True if team `id` failed, or aborts wait to be taken (the fast paths then
    /// decline: the general path takes them, [`check_team`](Self::check_team)).
    #[inline(always)]
    pub(crate) fn team_failed(&self, id: u64) -> bool {
        self.mb.alarm && (!self.mb.aborts.is_empty() || self.failed.contains_key(&id))
    }

    /// The error of team `id` if members disagreed on one of its collectives
    /// ([`fail_team`](Self::fail_team)); aborts received meanwhile are taken first.
    #[inline]
    pub(crate) fn check_team<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        team: &Team,
    ) -> Result<(), CollError> {
        if !self.team_failed(team.id()) {
            return Ok(());
        }
        self.check_team_slow(cx, team)
    }

    #[cold]
    fn check_team_slow<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        team: &Team,
    ) -> Result<(), CollError> {
        self.answer(cx);
        self.send_aborts(cx);
        // The collective about to start: covered if it is the failed one or later
        // (a member still creating the team may learn that a later one failed).
        let next = ext(team).peek_seq();
        match self.failed.get(&team.id()) {
            Some(e) if rootcheck::covers(e, next) => Err(e.clone()),
            _ => Ok(()),
        }
    }

    /// Fails collective `id` with `e` (a [`CollError::Mismatch`]) unless it already
    /// completed, and the team with it; with `tell`, makes every member of its team
    /// fail it too.
    pub(crate) fn fail_op(&mut self, id: u64, e: CollError, tell: bool) {
        let Some(st) = self.ops.get_mut(&id) else {
            return;
        };
        let (team, seq) = (st.team.id(), st.seq);
        let complete = st.taken || st.result.as_ref().is_some_and(|r| r.is_ok());
        if !complete {
            st.result = Some(Err(e.clone()));
            for m in std::mem::take(&mut st.probers) {
                self.agree.pending_replies.push((m, e.clone()));
            }
            if let Some(t) = ext(&st.team).shm.as_ref() {
                if st.is_shm() || st.is_bar() {
                    rootcheck::poison(t, &e);
                }
            }
            if let crate::engine::Body::Hier(h) = &mut st.body {
                if let Some(sub) = h.sub.take() {
                    self.fail_op(sub, e.clone(), false);
                    if let Some(o) = self.ops.get_mut(&sub) {
                        o.taken = true;
                    }
                }
            }
        }
        self.agree.history.failed(team, seq, &e);
        self.agree.aborted.insert((team, seq));
        self.mb.forget(team, seq);
        self.fail_team(team, &e);
        if tell {
            let st = &self.ops[&id];
            let found = match &e {
                CollError::Mismatch { found, .. } => *found,
                _ => None,
            };
            self.agree
                .pending_aborts
                .push((st.team.clone(), seq, found));
        }
        self.settle(id);
    }

    /// Tells the members of the collectives in `pending_aborts` that they failed, and
    /// the members in `pending_replies`.
    pub(crate) fn send_aborts<C: Conduit>(&mut self, cx: &mut Cx<'_, C>) {
        for (m, e) in std::mem::take(&mut self.agree.pending_replies) {
            self.abort_to(cx, m, &e);
        }
        for (team, seq, found) in std::mem::take(&mut self.agree.pending_aborts) {
            let me = self.me;
            let e = mismatch(team.id(), seq, found);
            for &m in team.members().iter().filter(|&&m| m != me) {
                self.abort_to(cx, m, &e);
            }
        }
    }

    /// Tells `dst` that collective `e` names failed, and what was found.
    fn abort_to<C: Conduit>(&mut self, cx: &mut Cx<'_, C>, dst: EpAddr, e: &CollError) {
        let CollError::Mismatch { team, seq, found } = e else {
            return;
        };
        let args = abort_args(*team, *seq, self.me.rank, *found);
        // A failure to tell a member that is gone is not this member's error.
        let _ = self.ctl(cx, dst, H_ABORT, &args);
    }

    /// Checks a collective that just started against what is known of it: an abort
    /// received before, or probes of members with another descriptor.
    pub(crate) fn early_checks(&mut self, id: u64) {
        let st = &self.ops[&id];
        let (team, seq, belief) = (st.team.id(), st.seq, st.belief);
        if self.agree.aborted.contains(&(team, seq)) {
            let e = self
                .agree
                .history
                .lookup(team, seq)
                .and_then(|k| k.failed.clone())
                .unwrap_or_else(|| mismatch(team, seq, None));
            self.fail_op(id, e, false);
            return;
        }
        let probes = self.agree.history.take_early(team, seq);
        if let Some(p) = probes.iter().find(|p| p.desc.belief() != belief) {
            let found = st.desc.disagreement(st.team.rank(), &p.desc, p.rank);
            self.fail_op(id, mismatch(team, seq, found), true);
        }
    }

    /// The stall checks of collective `id` (see [`crate::rootcheck`]).
    pub(crate) fn stall_checks<C: Conduit>(&mut self, cx: &mut Cx<'_, C>, id: u64) {
        let Some(st) = self.ops.get_mut(&id) else {
            return;
        };
        let (team, seq, desc) = (st.team.clone(), st.seq, st.desc);
        match &mut st.body {
            crate::engine::Body::Sched(s) => {
                let peers = crate::engine::waited_peers(s);
                let args = Probe::args(team.id(), seq, team.rank(), &desc);
                for &q in &peers {
                    let dst = team.members()[q as usize];
                    let _ = self.ctl(cx, dst, H_PROBE, &args);
                }
                // On a team with a channel, a member it waits for may run the
                // collective through shared memory (another descriptor may choose
                // another algorithm): its check line tells.
                if let Some(t) = ext(&team).shm.as_ref() {
                    if let Some(e) = rootcheck::peers_differ(t, team.id(), (seq, &desc), &peers) {
                        self.fail_op(id, e, true);
                    }
                }
            }
            crate::engine::Body::Hier(h) => {
                // Ask the members of the stage's sub-team about this collective: one
                // that passed another descriptor may run another algorithm (the
                // tuner's choice depends on the block length), never joining the
                // stages (its messages to this collective stay untaken).
                let Some(sub) = h.sub.filter(|_| h.probed != Some(h.stage)) else {
                    return;
                };
                h.probed = Some(h.stage);
                let Some(sub_team) = self.ops.get(&sub).map(|o| o.team.clone()) else {
                    return;
                };
                let args = Probe::args(team.id(), seq, team.rank(), &desc);
                let me = self.me;
                for &m in sub_team.members().iter().filter(|&&m| m != me) {
                    let _ = self.ctl(cx, m, H_PROBE, &args);
                }
            }
            crate::engine::Body::Shm(_)
            | crate::engine::Body::Ring(_)
            | crate::engine::Body::Bar(_) => {
                let Some(w) = self.shm_wait(id) else {
                    return;
                };
                let x = ext(&team);
                let Some(t) = x.shm.as_ref() else {
                    return;
                };
                if let Some(e) = rootcheck::shm_stalled(t, team.id(), (seq, &desc), &w) {
                    self.fail_op(id, e, true);
                }
            }
        }
    }

    /// Messages the handlers dropped as malformed (0 in a healthy job).
    pub(crate) fn dropped(&self) -> u64 {
        self.mb.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::ShmLocal;
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
        let mut m2 = ShmLocal::new(Some(a2), 1);
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
