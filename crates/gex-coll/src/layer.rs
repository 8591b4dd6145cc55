//! The collectives layer: [`Coll`], its state on one endpoint, and its side of the
//! layer contract of gex-core ([`Layer`]): attaching (after gex-rma's layer, reading
//! the `GEX_COLL_*` settings), the handlers (arms of [`Layer::handle`] that record
//! into the layer's mailbox), and the progress hook that advances every collective in
//! flight.

use crate::error::CollError;
use crate::msg::{H_ABORT, H_PROBE, HANDLERS, Probe, Wire, abort_args};
use crate::optable::{Body, OpState, OpTable, waited_peers};
use crate::rma::Rma;
use crate::rootcheck::{self, Agreement, mismatch};
use crate::shm::{self, Area};
use crate::shmpath::{FastPath, ShmPath};
use crate::teams::{Found, Teams, ext};
use crate::tuning::Tuning;
use gex_core::config::EnvVar;
use gex_core::layer::{Attach, Cx, Layer, Progress};
use gex_core::spi::Conduit;
use gex_core::{Am, Capabilities, Endpoint, EpAddr, InitError, Team, Token};
use gex_sync::atomic::{Ordering, fence};

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
    /// The team registry: this endpoint's address, the world team, the teams that
    /// failed, split-phase barriers notified, the scratch allocator.
    pub(crate) teams: Teams,
    /// Collectives in flight.
    pub(crate) ops: OpTable,
    /// Handler ids, the mailbox and the control messages waiting to be sent.
    pub(crate) wire: Wire,
    /// Agreement: what this member knows of its collectives' outcomes and whom it
    /// must tell ([`crate::rootcheck`]).
    pub(crate) agree: Agreement,
    /// The shared-memory direct path: this endpoint's area and channels, the sleep
    /// protocol, a blocking call's wait.
    pub(crate) shm: ShmPath,
    /// The direct path's caches: the last decisions of blocking calls, replayed by
    /// calls of the same shape (apart from `shm`, which a replayed call steps while
    /// it reads them).
    pub(crate) fast: FastPath,
    /// The tuner, trial and stage flags, counters.
    pub(crate) tuning: Tuning,
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
    // The cached address only (no closure handed to the endpoint, so `f` is inlined
    // once and its captures stay in registers); a layer past the endpoint's cache
    // takes the caller's general way.
    gex_core::layer::state_cached::<Coll, C>(ep).map(|p| f(Coll::unpin(p)))
}

/// Runs `f` with the collectives layer of `ep`.
///
/// # Errors
/// [`CollError::Layer`] if the endpoint does not carry it.
#[inline]
pub(crate) fn coll<C: Conduit, R>(
    ep: &mut Endpoint<C>,
    f: impl FnOnce(&mut Coll, &mut Cx<'_, C>) -> R,
) -> Result<R, CollError> {
    // (The error is made only when returned: one built eagerly for `ok_or` was
    // dropped on every call.)
    match gex_core::layer::with::<Coll, C, R>(ep, |p, cx| f(Coll::unpin(p), cx)) {
        Some(r) => Ok(r),
        None => Err(CollError::Layer(
            "the endpoint does not carry the collectives layer",
        )),
    }
}

/// `team` resolved for `ep` (see [`Coll::resolve`]).
pub(crate) fn resolve<C: Conduit>(ep: &mut Endpoint<C>, team: &Team) -> Result<Team, CollError> {
    coll(ep, |c, _| c.resolve(team))?
}

impl std::fmt::Debug for Coll {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coll")
            .field("addr", &self.teams.me())
            .field("in_flight", &self.ops.len())
            .field("tuner", self.tuning.tuner())
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
        let mut shm = ShmPath::new(own, generation).with_sleep_yields(sleep_yields);
        shm.note_policy(cx.wait_policy());
        let owner = crate::teams::Owner::new();
        let shared = (generation, shm.used());
        let world = crate::teams::world_team(cx, shared, &owner);
        crate::teams::setup_world_hier(&world, cx, shared, &owner);
        let x = ext(&world);
        let host = x.hier.get().map(|h| &h.host);
        for t in [x.shm.as_ref(), host.and_then(|h| ext(h).shm.as_ref())]
            .into_iter()
            .flatten()
        {
            shm.join(t);
        }
        Ok(Coll {
            teams: Teams::new(me, world, owner, cx.segment().len()),
            ops: OpTable::new(),
            wire: Wire::new(hids),
            agree: Agreement::default(),
            shm,
            fast: FastPath::default(),
            tuning: Tuning::new(tuner),
            _pin: std::marker::PhantomPinned,
        })
    }

    #[inline]
    fn handle(self: std::pin::Pin<&mut Self>, h: u8, _t: &mut Token<'_>, am: Am<'_>) {
        let this = Coll::unpin(self);
        this.wire.mb.deliver(h, &am);
    }

    fn describe(&self) -> String {
        let mut lines: Vec<String> = self.ops.values().map(OpState::describe).collect();
        if let Some(d) = self.shm.waiting() {
            lines.push(format!(
                "a blocking call (team {:#x} seq {}) waits for {}",
                d.team, d.seq, d.wait
            ));
        }
        if !self.wire.outbox.is_empty() {
            lines.push(format!(
                "{} control messages wait for send resources",
                self.wire.outbox.len()
            ));
        }
        let m = &self.wire.mb;
        let held = m.eager.len() + m.long.len() + m.ready.len() + m.rdv.len();
        if held > 0 {
            lines.push(format!("{held} received messages not taken yet"));
        }
        lines.join("\n")
    }

    fn progress<C: Conduit>(self: std::pin::Pin<&mut Self>, cx: &mut Cx<'_, C>) -> Progress {
        let this = Coll::unpin(self);
        this.shm.note_policy(cx.wait_policy());
        this.flush_outbox(cx);
        if this.wire.mb.alarm || !this.wire.mb.probes.is_empty() {
            this.answer(cx);
        }
        let (mut progressed, shm_active) = this.advance_all(cx);
        if !this.agree.pending_aborts.is_empty() || !this.agree.pending_replies.is_empty() {
            this.send_aborts(cx);
        }
        progressed |= this.shm.direct_progress();
        let busy = !this.ops.is_empty() || !this.wire.outbox.is_empty();
        if !shm_active && this.shm.waiting().is_none() {
            this.calm();
            return if busy { Progress::Busy } else { Progress::Idle };
        }
        if progressed {
            this.calm();
            return Progress::Spinning;
        }
        if !this.shm.sleep_gate() {
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
        this.tuning.counters.sleep_polls += 1;
        Progress::Busy
    }
}

/// True if this endpoint runs shared-memory collectives: the conduit maps neighbours'
/// areas (never under `gex_force_am_rma`, which keeps the message paths tested).
fn shared_memory<C: Conduit>(cx: &Cx<'_, C>) -> bool {
    !cfg!(gex_force_am_rma) && cx.capabilities().contains(Capabilities::SHARED_MEMORY)
}

impl Coll {
    /// `team` with the layer's extension: itself, or this layer's world team for the
    /// endpoint's primordial team.
    ///
    /// # Errors
    /// [`CollError::NotMember`] if this endpoint is not `team.me()` (or the team was
    /// not made by this layer).
    pub(crate) fn resolve(&self, team: &Team) -> Result<Team, CollError> {
        self.teams.resolve(team)
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
        self.with_resolved_boxed(team, |c, t| f(c, t).map_err(Box::new))
            .map_err(|e| *e)
    }

    /// [`with_resolved`](Self::with_resolved) with the error boxed, for the hottest
    /// calls: a `Result` of a small value and a box comes back in registers, where
    /// one holding a `CollError` (64 bytes) is copied through memory at every level
    /// (see [`ring_begin`](Self::ring_begin)).
    ///
    /// # Errors
    /// As [`with_resolved`](Self::with_resolved).
    #[inline(always)]
    pub(crate) fn with_resolved_boxed<R>(
        &mut self,
        team: &Team,
        f: impl FnOnce(&mut Coll, &Team) -> Result<R, Box<CollError>>,
    ) -> Result<R, Box<CollError>> {
        // One call of `f` (its own team, or the world lent for it), so that it is
        // inlined here: called from two places it was a function of its own, its
        // captures passed through the stack.
        let lent = match self.teams.lookup(team) {
            Ok(Found::Own) => None,
            // (The error is made only when returned: one built eagerly for `ok_or`
            // was dropped on every call.)
            Ok(_) => match self.teams.lend_world() {
                Some(world) => Some(world),
                None => {
                    return Err(Box::new(CollError::Layer("the world team is lent already")));
                }
            },
            Err(e) => return Err(Box::new(e)),
        };
        let r = f(self, lent.as_ref().unwrap_or(team));
        if let Some(world) = lent {
            self.teams.give_back(world);
        }
        r
    }

    /// Advances every collective in flight and removes those that are over; returns
    /// (some made progress, some shared-memory collective is in flight).
    pub(crate) fn advance_all<C: Conduit>(&mut self, cx: &mut Cx<'_, C>) -> (bool, bool) {
        let mut progressed = false;
        let mut shm_active = false;
        let mut next = self.ops.next_after(None);
        while let Some(id) = next {
            next = self.ops.next_after(Some(id));
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

    /// True unless this member waits for a publication (a slot's, a small
    /// broadcast's) whose writer does not wake sleepers yet
    /// ([`shm::WaitOn::sleep_safe`]).
    fn waits_sleep_safe(&self) -> bool {
        self.shm.waiting().is_none_or(|d| d.wait.sleep_safe())
            && self.ops.values().all(|st| {
                st.ring_wait().is_none_or(|w| w.sleep_safe())
                    && st.slot_wait().is_none_or(|w| w.sleep_safe())
            })
    }

    /// A direct call waits and can step now.
    fn direct_ready_now(&self) -> bool {
        self.shm
            .waiting()
            .is_some_and(|d| d.check || d.wait.ready())
    }

    /// Answers probes and takes aborts (see [`crate::rootcheck`]).
    fn answer<C: Conduit>(&mut self, cx: &mut Cx<'_, C>) {
        for (team, seq, found) in std::mem::take(&mut self.wire.mb.aborts) {
            self.agree.aborted.insert((team, seq));
            let e = mismatch(team, seq, found);
            match self.ops.find(team, seq) {
                Some(id) => self.fail_op(id, e, false),
                None => self.fail_team(team, &e),
            }
        }
        for p in std::mem::take(&mut self.wire.mb.probes) {
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
        if let Some(id) = self.ops.find(p.team, p.seq) {
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
        if let Some(&d) = self.shm.waiting() {
            // A blocking call on the direct path.
            if (d.team, d.seq) == (p.team, p.seq) {
                if d.belief != theirs && !d.failed {
                    let ours = self.shm.watched().and_then(|t| {
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
                .teams
                .failed(p.team)
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

    /// Records that team `id` failed with `e` (the first error stays): every later
    /// collective of it fails with it, as do those in flight here (at their next
    /// advance) and a blocking call waiting on the direct path.
    pub(crate) fn fail_team(&mut self, id: u64, e: &CollError) {
        self.wire.mb.alarm = true;
        // The earliest failed collective stays (later ones follow from it).
        if self.teams.record_failure(id, e, rootcheck::earlier) {
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
            .shm
            .waiting()
            .is_some_and(|d| d.team == id && rootcheck::covers(e, d.seq))
        {
            self.shm.fail_direct(e);
        }
    }

    /// True if team `id` failed, or aborts wait to be taken (the fast paths then
    /// decline: the general path takes them, [`check_team`](Self::check_team)).
    #[inline(always)]
    pub(crate) fn team_failed(&self, id: u64) -> bool {
        self.wire.mb.alarm && (!self.wire.mb.aborts.is_empty() || self.teams.failed(id).is_some())
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
        match self.teams.failed(team.id()) {
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
            if let Body::Hier(h) = &mut st.body {
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
        self.wire.mb.forget(team, seq);
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
            let me = self.teams.me();
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
        let args = abort_args(*team, *seq, self.teams.me().rank, *found);
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
            Body::Sched(s) => {
                let peers = waited_peers(s);
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
            Body::Hier(h) => {
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
                let me = self.teams.me();
                for &m in sub_team.members().iter().filter(|&&m| m != me) {
                    let _ = self.ctl(cx, m, H_PROBE, &args);
                }
            }
            Body::Shm(_) | Body::Ring(_) | Body::Bar(_) => {
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
        self.wire.mb.dropped
    }
}
