//! The one progress engine of an endpoint: [`Endpoint::poll`] drains the conduit
//! (running client, layer and core handlers) and runs the progress hook of every busy
//! layer; every wait of any kind (an event, a condition, back-pressure, an exchange) is
//! the same loop of polls under the endpoint's wait policy. Events, implicit events
//! and scopes are waited on here.
//!
//! A handler's panic is caught where the handler runs (module `dispatch`) and kept in
//! `Core::panicked`; [`Inner::rethrow`] raises it. Which call raises it is decided
//! here: [`Endpoint::poll`] and the waits on a program's condition at once; the waits
//! on events, implicit events and scopes once what they wait for is complete (so a
//! transfer into a borrowed buffer has finished before the panic ends the borrow);
//! the layers' `poll` and `retry` never (the operation that called them raises it when
//! it ends). A wait on a transfer that uses a borrowed buffer ([`Inner::wait_lent`],
//! the scope's drop) also waits when something else unwinds through it
//! ([`Inner::wait_on_unwind`]).

use super::{Core, Endpoint, Inner};
use crate::error::EventError;
use crate::event::{AnyEvent, Event, EventErr, Finish, OpCompleter, Outcome, Parts};
use crate::layer::Progress;
use crate::spi::{Conduit, ConduitEp};
use gex_sync::slot::{Taken, Waiter};
use gex_sync::wait::WaitPolicy;
use std::marker::PhantomData;
use std::time::{Duration, Instant};

/// Core sharing while injecting, on an oversubscribed host (spin-then-block).
///
/// A rank that injects without ever waiting never lets go of its core: the ranks that
/// share that core cannot drain their rings until the scheduler's time slice ends
/// (milliseconds), and every peer sending to them waits that long for room
/// (back-pressure). Under [`WaitPolicy::SpinThenBlock`] an endpoint therefore yields
/// its core after it has been injecting without a pause for `GEX_SHARE_INTERVAL` (20 µs
/// by default): the clock is read every [`SHARE_EVERY`] successful injections, and only
/// then, so the cost without oversubscription is one predictable branch; any wait
/// (a poll loop's step, a back-pressure retry) starts the interval again, so a rank
/// that waits between its messages (a round trip) never yields here: a yield at the
/// wrong moment hands the core to a rank that may keep it for its whole spin budget.
#[derive(Debug)]
pub(crate) struct Share {
    interval: Option<Duration>,
    count: u32,
    since: Option<Instant>,
}

/// Successful injections between two reads of the clock (see [`Share`]).
const SHARE_EVERY: u32 = 32;

impl Share {
    /// Sharing for an endpoint under `policy`, with the client's interval.
    pub(crate) fn new(policy: WaitPolicy, interval: Option<Duration>) -> Self {
        Share {
            interval: interval.filter(|_| matches!(policy, WaitPolicy::SpinThenBlock { .. })),
            count: 0,
            since: None,
        }
    }

    /// One successful injection.
    #[inline(always)]
    pub(crate) fn sent(&mut self) {
        if let Some(i) = self.interval {
            self.count += 1;
            if self.count >= SHARE_EVERY {
                self.tick(i);
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn tick(&mut self, interval: Duration) {
        self.count = 0;
        let now = Instant::now();
        match self.since {
            Some(t) if now.duration_since(t) >= interval => {
                std::thread::yield_now();
                self.since = Some(Instant::now());
            }
            Some(_) => {}
            None => self.since = Some(now),
        }
    }

    /// The endpoint waits (any step of a wait or a back-pressure retry): it is not
    /// injecting without pause, so the interval starts again at the next injections.
    /// Only an endpoint that injects at least `2 × SHARE_EVERY` messages with no wait in
    /// between, over at least the interval, ever yields here (a ping-pong never does).
    #[inline(always)]
    pub(crate) fn rest(&mut self) {
        self.since = None;
    }
}

/// Idle polls after which a spinning wait starts yielding now and then (about a few
/// hundred microseconds of fruitless spinning).
const SPIN_YIELD_AFTER: u32 = 1 << 14;

/// One implicit (mode `Nbi`) operation the endpoint tracks until a sync.
pub(crate) enum Implicit {
    /// Still running; the kept value (a buffer it writes) lives until completion.
    Pending(u32, Waiter<Outcome>, Option<Box<dyn std::any::Any + Send>>),
    /// Failed already: reported by the next sync of its tag.
    Failed(u32, String),
}

impl Implicit {
    fn tag(&self) -> u32 {
        match self {
            Implicit::Pending(t, ..) | Implicit::Failed(t, _) => *t,
        }
    }
}

impl<C: Conduit> Core<C> {
    /// A pending event of this endpoint and its completer.
    pub(crate) fn pending<T: Send + 'static, E: EventErr>(
        &mut self,
        hold: Option<T>,
        finish: Finish<T>,
    ) -> (Event<T, E>, OpCompleter) {
        let (c, w) = self.events.pair();
        (
            Event::pending(self.me, self.uid, w, hold, finish),
            OpCompleter::new(c),
        )
    }

    pub(crate) fn check_bound(&self, ev: &dyn AnyEvent) -> Result<(), EventError> {
        let (ep, uid) = ev.bound_to();
        if uid != self.uid {
            return Err(EventError::WrongEndpoint {
                started_on: ep,
                waited_on: self.me,
            });
        }
        Ok(())
    }
}

impl<C: Conduit> Inner<C> {
    /// Drains the conduit and runs the busy layers' progress hooks.
    #[inline]
    pub(crate) fn poll(&mut self) -> usize {
        let n = self.core.poll_conduit(&mut self.layers);
        if self.core.busy != 0 {
            self.run_progress();
        }
        if !self.core.lc.is_empty() {
            self.check_lc();
        }
        n
    }

    #[cold]
    fn run_progress(&mut self) {
        let mut spinning = false;
        for i in 0..self.layers.len().min(64) {
            let bit = 1u64 << i;
            if self.core.busy & bit == 0 {
                continue;
            }
            self.core.busy &= !bit;
            let Some(p) = self.in_slot(i, |slot, cx| slot.run_progress(cx)) else {
                break;
            };
            match p {
                Progress::Idle => {}
                Progress::Busy => self.core.busy |= bit,
                Progress::Spinning => {
                    self.core.busy |= bit;
                    spinning = true;
                }
            }
        }
        self.core.spinning = spinning;
    }

    /// One step of waiting for send resources (back-pressure): polls (so handlers
    /// run and the peer's credits come back), then spins or, past the policy's spin
    /// budget, yields the core (the peer that frees the resources does not wake us, so
    /// there is nothing to sleep on). Every 1024 steps it checks for a report signal
    /// and a stall, as every wait does. Never inlined: it holds the whole receive path,
    /// which would bloat every injection loop's fast path.
    #[inline(never)]
    pub(crate) fn retry(&mut self, r: &mut Retry) {
        self.core.share.rest();
        if self.poll() > 0 {
            r.last_progress = None;
        }
        r.checks = r.checks.wrapping_add(1);
        if r.checks & 0x3ff == 0 {
            self.check_stall(Instant::now(), &mut r.last_progress);
        }
        let yield_now = match self.core.policy {
            WaitPolicy::Spin => false,
            WaitPolicy::Block => true,
            WaitPolicy::SpinThenBlock { spins: budget } => r.spins >= budget,
        };
        if yield_now {
            std::thread::yield_now();
        } else {
            r.spins = r.spins.saturating_add(1);
            gex_sync::hint::spin_loop();
        }
    }

    /// One step of waiting under the wait policy: spin, or sleep in the conduit until a
    /// message may have arrived once the spin budget (`spins`) is used up. A layer
    /// whose work nothing announces keeps the endpoint awake (yielding instead).
    #[inline]
    pub(crate) fn idle(&mut self, spins: &mut u32) {
        self.core.share.rest();
        let policy = if self.core.spinning && self.core.busy != 0 {
            match self.core.policy {
                WaitPolicy::Spin => WaitPolicy::Spin,
                _ => {
                    std::thread::yield_now();
                    return;
                }
            }
        } else {
            self.core.policy
        };
        match policy {
            WaitPolicy::Spin => {
                // A poll is itself a read of the rings; pausing after every one adds
                // tens of nanoseconds to the time a message waits to be noticed.
                *spins = spins.saturating_add(1);
                if *spins & 3 == 0 {
                    gex_sync::hint::spin_loop();
                }
                if *spins >= SPIN_YIELD_AFTER && *spins & 255 == 0 {
                    // Long without a message: the peer may share our core.
                    std::thread::yield_now();
                }
            }
            WaitPolicy::Block => self.core.cep.block(Duration::from_millis(10)),
            WaitPolicy::SpinThenBlock { spins: budget } => {
                let n = *spins;
                *spins = n.saturating_add(1);
                if n < budget {
                    gex_sync::hint::spin_loop();
                } else if n < budget.saturating_add(self.core.yields) {
                    // Oversubscribed: hand the core to a runnable rank (likely the peer
                    // we wait for) before paying for a sleep and a wake-up.
                    std::thread::yield_now();
                } else {
                    self.core.cep.block(Duration::from_millis(10));
                }
            }
        }
    }

    /// Raises the panic of a handler caught during this endpoint's polls, if any
    /// (module documentation).
    #[inline(always)]
    pub(crate) fn rethrow(&mut self) {
        if self.core.panicked.is_some() {
            self.rethrow_now();
        }
    }

    #[cold]
    #[inline(never)]
    fn rethrow_now(&mut self) {
        if let Some(p) = self.core.panicked.take() {
            std::panic::resume_unwind(p);
        }
    }

    /// Waits for `ev` to complete, on every path: a handler's panic is raised only
    /// once `ev` is complete (by the caller, [`rethrow`](Self::rethrow)), and a panic
    /// from anywhere else inside the wait (a conduit, a layer's hook) waits for `ev`
    /// while it unwinds ([`wait_on_unwind`](Self::wait_on_unwind)). For operations
    /// whose event stands for a transfer into or out of a buffer the caller lent.
    pub(crate) fn wait_lent(&mut self, ev: &dyn AnyEvent) {
        if ev.done() {
            return;
        }
        struct OnUnwind<'a, C: Conduit> {
            inner: &'a mut Inner<C>,
            ev: &'a dyn AnyEvent,
        }
        impl<C: Conduit> Drop for OnUnwind<'_, C> {
            fn drop(&mut self) {
                let ev = self.ev;
                self.inner.wait_on_unwind(&mut |_| ev.done());
            }
        }
        let g = OnUnwind { inner: self, ev };
        g.inner.wait_for(None, |_| ev.done());
        std::mem::forget(g);
    }

    /// While a panic unwinds through a wait for a transfer that uses a borrowed
    /// buffer: polls until `done()` holds, and aborts the process if it does not within
    /// [`UNWIND_WAIT`](crate::layer::UNWIND_WAIT) (the buffer cannot be handed back
    /// while the transfer may still write or read it). A panic while polling here is a
    /// panic during unwinding, which aborts too. Does nothing when not unwinding.
    #[cold]
    pub(crate) fn wait_on_unwind(&mut self, done: &mut dyn FnMut(&Inner<C>) -> bool) {
        if !std::thread::panicking() || done(self) {
            return;
        }
        let give_up = Instant::now() + crate::layer::UNWIND_WAIT;
        let mut spins = 0u32;
        loop {
            self.poll();
            if done(self) {
                // A handler's panic caught meanwhile: the panic unwinding now wins.
                self.core.panicked = None;
                return;
            }
            if Instant::now() >= give_up {
                eprintln!(
                    "gex: {}: a panic is unwinding through a wait for a transfer that uses \
                     a borrowed buffer, and the transfer did not complete within {:?}; \
                     aborting (the buffer cannot be handed back while it may still be \
                     written)",
                    self.core.me,
                    crate::layer::UNWIND_WAIT
                );
                std::process::abort();
            }
            self.idle(&mut spins);
        }
    }

    /// Polls until `cond(self)` holds or `deadline` passes; true if it held. A wait
    /// that makes no progress for `GEX_STALL_REPORT` prints the endpoint's report (and
    /// again at that interval), as does a report signal (`SIGUSR1`). A handler's
    /// panic caught meanwhile is kept (the caller raises it).
    pub(crate) fn wait_for(
        &mut self,
        deadline: Option<Instant>,
        mut cond: impl FnMut(&mut Inner<C>) -> bool,
    ) -> bool {
        let mut spins: u32 = 0;
        let mut checks: u32 = 0;
        let mut last_progress: Option<Instant> = None;
        loop {
            let handled = self.poll();
            if cond(self) {
                return true;
            }
            if handled > 0 {
                last_progress = None;
            }
            checks = checks.wrapping_add(1);
            if checks & 0x3ff == 0 || deadline.is_some() {
                let now = Instant::now();
                if deadline.is_some_and(|d| now >= d) {
                    return cond(self);
                }
                self.check_stall(now, &mut last_progress);
            }
            self.idle(&mut spins);
        }
    }

    /// Prints the report on a report signal, or when the wait has made no progress
    /// for the stall interval (then restarts the interval).
    #[cold]
    fn check_stall(&mut self, now: Instant, last_progress: &mut Option<Instant>) {
        let g = gex_sync::signal::report_generation();
        if g != self.core.seen_reports {
            self.core.seen_reports = g;
            eprint!("{}", self.report());
        }
        let Some(stall) = self.core.shared.stall_report else {
            return;
        };
        let t0 = *last_progress.get_or_insert(now);
        if now - t0 >= stall {
            eprint!(
                "gex: {} has waited {:?} without progress\n{}",
                self.core.me,
                now - t0,
                self.report()
            );
            *last_progress = Some(now);
        }
    }

    /// Waits for `ev` and takes its outcome; `lent`: the operation uses a buffer the
    /// caller lent ([`wait_lent`](Self::wait_lent)). A handler's panic caught
    /// meanwhile is raised once the event is complete.
    pub(crate) fn wait_event<T: Send + 'static, E: EventErr>(
        &mut self,
        ev: Event<T, E>,
        lent: bool,
    ) -> Result<T, E> {
        self.core.check_bound(&ev).map_err(E::from)?;
        if !ev.is_done() {
            if lent {
                self.wait_lent(&ev);
            } else {
                self.wait_for(None, |_| ev.is_done());
            }
        }
        let pool = &mut self.core.events;
        let r = ev.take(&mut |w| pool.recycle(w));
        self.rethrow();
        r
    }

    /// Tracks `ev` as an implicit event under `tag` (an event of another endpoint is
    /// recorded as failed: this endpoint's progress cannot complete it).
    pub(crate) fn track<T: Send + 'static, E: EventErr>(&mut self, tag: u32, ev: Event<T, E>) {
        self.core.track(tag, ev)
    }

    /// Runs every layer's [`end_scope`](crate::layer::Layer::end_scope) hook for the
    /// scope `tag` (before its events are waited for).
    pub(crate) fn end_scope(&mut self, tag: u32) {
        for i in 0..self.layers.len() {
            self.in_slot(i, |slot, cx| slot.run_end_scope(cx, tag));
        }
    }

    /// True once every implicit event with `tag` (all if `None`) is complete.
    fn implicit_done(&self, tag: Option<u32>) -> bool {
        self.core.implicit.iter().all(|i| match i {
            Implicit::Pending(t, w, _) => tag.is_some_and(|x| x != *t) || w.is_done(),
            Implicit::Failed(..) => true,
        })
    }

    /// Waits for every implicit event with `tag` (all if `None`), also while a panic
    /// unwinds through the wait (their buffers may be lent: a scope's); the first
    /// failure is returned (after all have completed). A handler's panic caught
    /// meanwhile is left for the caller to raise.
    pub(crate) fn sync_implicit<E: EventErr>(&mut self, tag: Option<u32>) -> Result<(), E> {
        let matches = move |t: u32| tag.is_none_or(|x| x == t);
        if !self.implicit_done(tag) {
            struct OnUnwind<'a, C: Conduit>(&'a mut Inner<C>, Option<u32>);
            impl<C: Conduit> Drop for OnUnwind<'_, C> {
                fn drop(&mut self) {
                    let tag = self.1;
                    self.0.wait_on_unwind(&mut |inner| inner.implicit_done(tag));
                }
            }
            let g = OnUnwind(self, tag);
            g.0.wait_for(None, |inner| inner.implicit_done(tag));
            std::mem::forget(g);
        }
        let mut first: Option<E> = None;
        let mut keep = Vec::with_capacity(self.core.implicit.len());
        for i in std::mem::take(&mut self.core.implicit) {
            if !matches(i.tag()) {
                keep.push(i);
                continue;
            }
            let err = match i {
                Implicit::Failed(_, msg) => Some(E::from(EventError::Failed(msg))),
                Implicit::Pending(_, mut w, kept) => {
                    let e = match w.take() {
                        Taken::Done(Ok(_)) => None,
                        Taken::Done(Err(e)) => Some(match e.downcast::<E>() {
                            Ok(e) => *e,
                            Err(e) => E::from(EventError::Failed(e.to_string())),
                        }),
                        Taken::Abandoned | Taken::Pending => Some(E::from(EventError::Abandoned)),
                    };
                    drop(kept);
                    self.core.events.recycle(w);
                    e
                }
            };
            if first.is_none() {
                first = err;
            }
        }
        self.core.implicit = keep;
        first.map_or(Ok(()), Err)
    }
}

impl<C: Conduit> Core<C> {
    /// See [`layer::track_implicit`](crate::layer::track_implicit).
    pub(crate) fn track<T: Send + 'static, E: EventErr>(&mut self, tag: u32, ev: Event<T, E>) {
        if let Err(e) = self.check_bound(&ev) {
            // Keep whatever the event holds alive until its own endpoint completes it.
            drop(ev);
            self.implicit.push(Implicit::Failed(tag, e.to_string()));
            return;
        }
        if let Some(imp) = ev.into_implicit(tag) {
            self.implicit.push(imp);
        }
    }
}

impl<T: Send + 'static, E: EventErr> Event<T, E> {
    /// The implicit-event form of this event (`None` if it completed successfully).
    pub(crate) fn into_implicit(self, tag: u32) -> Option<Implicit> {
        match self.into_parts() {
            Parts::Ready(Err(e)) => Some(Implicit::Failed(tag, e.to_string())),
            Parts::Ready(Ok(_)) | Parts::Gone => None,
            Parts::Pending(w, hold) => Some(Implicit::Pending(
                tag,
                w,
                hold.map(|h| Box::new(h) as Box<dyn std::any::Any + Send>),
            )),
        }
    }
}

impl<C: Conduit> Endpoint<C> {
    /// Runs handlers for incoming messages on this endpoint and advances every busy
    /// layer. Returns how many messages were handled.
    ///
    /// # Panics
    /// With the panic of a handler that panicked during this poll (caught where it
    /// ran, so the conduit's receive loop did not unwind; the other messages of the
    /// poll were handled).
    #[inline]
    pub fn poll(&mut self) -> usize {
        let mut g = self.inner();
        let n = g.poll();
        g.rethrow();
        n
    }

    /// Polls until `cond` returns true, following this endpoint's wait policy: spin,
    /// block in the kernel, or spin then block. `cond` is evaluated after each poll, so
    /// it should depend on state that handlers change.
    ///
    /// # Panics
    /// With the panic of a handler run meanwhile, at once.
    pub fn wait_until(&mut self, mut cond: impl FnMut() -> bool) {
        let mut g = self.inner();
        g.wait_for(None, |i| i.core.panicked.is_some() || cond());
        g.rethrow();
    }

    /// As [`wait_until`](Self::wait_until), giving up after `timeout`; returns whether
    /// `cond` became true. A timeout too long to represent as an instant (such as
    /// [`Duration::MAX`]) waits without a deadline.
    ///
    /// # Panics
    /// With the panic of a handler run meanwhile, at once.
    pub fn wait_until_timeout(
        &mut self,
        mut cond: impl FnMut() -> bool,
        timeout: Duration,
    ) -> bool {
        let deadline = Instant::now().checked_add(timeout);
        let mut g = self.inner();
        let held = g.wait_for(deadline, |i| i.core.panicked.is_some() || cond());
        g.rethrow();
        held
    }

    /// Waits for `ev` (driving every layer's progress meanwhile) and returns its
    /// output.
    ///
    /// # Errors
    /// The operation's error; [`EventError::WrongEndpoint`] (as `E`) if `ev` was
    /// started on another endpoint (its buffer, if any, stays alive until the
    /// operation completes).
    ///
    /// # Panics
    /// With the panic of a handler run meanwhile, once `ev` is complete.
    pub fn wait<T: Send + 'static, E: EventErr>(&mut self, ev: Event<T, E>) -> Result<T, E> {
        self.inner().wait_event(ev, false)
    }

    /// Polls once and reports whether `ev` is complete (then [`wait`](Self::wait)
    /// returns at once).
    ///
    /// # Errors
    /// [`EventError::WrongEndpoint`] if `ev` was started on another endpoint.
    ///
    /// # Panics
    /// With the panic of a handler run by the poll.
    pub fn test<T: Send + 'static, E: EventErr>(
        &mut self,
        ev: &Event<T, E>,
    ) -> Result<bool, EventError> {
        let mut g = self.inner();
        g.core.check_bound(ev)?;
        if !ev.is_done() {
            g.poll();
            g.rethrow();
        }
        Ok(ev.is_done())
    }

    /// Waits until every event in `evs` is complete (their outputs are then taken with
    /// [`wait`](Self::wait), which returns at once).
    ///
    /// # Errors
    /// [`EventError::WrongEndpoint`] if one was started on another endpoint (nothing
    /// is waited for then).
    ///
    /// # Panics
    /// With the panic of a handler run meanwhile, once they are complete.
    pub fn wait_all(&mut self, evs: &[&dyn AnyEvent]) -> Result<(), EventError> {
        let mut g = self.inner();
        for e in evs {
            g.core.check_bound(*e)?;
        }
        g.wait_for(None, |_| evs.iter().all(|e| e.done()));
        g.rethrow();
        Ok(())
    }

    /// Waits until at least one event in `evs` is complete and returns the index of
    /// the first complete one.
    ///
    /// # Errors
    /// [`EventError::WrongEndpoint`] as [`wait_all`](Self::wait_all);
    /// [`EventError::Abandoned`] for an empty list.
    ///
    /// # Panics
    /// With the panic of a handler run meanwhile, once one is complete.
    pub fn wait_any(&mut self, evs: &[&dyn AnyEvent]) -> Result<usize, EventError> {
        if evs.is_empty() {
            return Err(EventError::Abandoned);
        }
        let mut g = self.inner();
        for e in evs {
            g.core.check_bound(*e)?;
        }
        g.wait_for(None, |_| evs.iter().any(|e| e.done()));
        g.rethrow();
        Ok(evs.iter().position(|e| e.done()).unwrap_or(0))
    }

    /// Waits until at least one event in `evs` is complete and returns the indices of
    /// every complete one.
    ///
    /// # Errors
    /// As [`wait_any`](Self::wait_any).
    ///
    /// # Panics
    /// As [`wait_any`](Self::wait_any).
    pub fn wait_some(&mut self, evs: &[&dyn AnyEvent]) -> Result<Vec<usize>, EventError> {
        self.wait_any(evs)?;
        Ok((0..evs.len()).filter(|&i| evs[i].done()).collect())
    }

    /// Waits for every implicit event tracked under `tag` (every one if `None`), e.g.
    /// the owned AM payloads sent in mode [`Nbi`](crate::Nbi) (tag 0). Layers offer
    /// their own syncs by category on top.
    ///
    /// # Errors
    /// The first failure among them (reported once every one has completed).
    ///
    /// # Panics
    /// With the panic of a handler run meanwhile, once they are complete.
    pub fn sync_implicit<E: EventErr>(&mut self, tag: Option<u32>) -> Result<(), E> {
        let mut g = self.inner();
        let r = g.sync_implicit(tag);
        g.rethrow();
        r
    }

    /// Runs `f` with a [`Scope`]: operations that write into buffers borrowed for
    /// `'env` may be started in it without waiting (layers offer them on `Scope`), and
    /// every one of them has completed when `scope` returns, on success, on error and
    /// on panic (a panic in a handler is raised once they have; any other panic
    /// waits for them while it unwinds). So a borrowed destination can never be handed
    /// back while a transfer still writes it, even if the scope's events are leaked.
    ///
    /// # Errors
    /// `f`'s error, else the first failure among the scope's operations.
    pub fn scope<'env, E: EventErr, R>(
        &mut self,
        f: impl for<'s> FnOnce(&mut Scope<'s, 'env, C>) -> Result<R, E>,
    ) -> Result<R, E> {
        let tag = {
            let mut g = self.inner();
            let t = g.core.next_scope_tag;
            g.core.next_scope_tag = g.core.next_scope_tag.wrapping_add(1) | SCOPE_TAG_BIT;
            t
        };
        let mut s = Scope {
            ep: self,
            tag,
            _env: PhantomData,
        };
        let r = f(&mut s);
        let synced = {
            let mut g = s.ep.inner();
            g.end_scope(tag);
            let synced = g.sync_implicit::<E>(Some(tag));
            // Everything of the scope is complete: a handler's panic may end it now
            // (the drop of `s` during that unwinding finds nothing left to wait for).
            g.rethrow();
            synced
        };
        std::mem::forget(s);
        let r = r?;
        synced.map(|()| r)
    }
}

/// The state of one retried operation for [`layer::retry`](crate::layer::retry): its spin count and
/// when it last saw progress.
#[derive(Debug, Default)]
pub struct Retry {
    spins: u32,
    checks: u32,
    last_progress: Option<Instant>,
}

/// Tags of scopes have this bit set (layers' and the core's tags do not).
pub(crate) const SCOPE_TAG_BIT: u32 = 1 << 31;

/// A region in which operations may write into buffers borrowed for `'env`; see
/// [`Endpoint::scope`]. Dereferences to the [`Endpoint`] (which is unsized: the scope's
/// endpoint cannot be swapped for another), so every other operation works inside it
/// too. Two scopes cannot be swapped either: each has its own lifetime `'s`.
pub struct Scope<'s, 'env, C: Conduit> {
    ep: &'s mut Endpoint<C>,
    tag: u32,
    _env: PhantomData<&'env mut &'env ()>,
}

impl<C: Conduit> std::fmt::Debug for Scope<'_, '_, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scope").field("tag", &self.tag).finish()
    }
}

impl<'env, C: Conduit> Scope<'_, 'env, C> {
    /// The implicit-event tag of this scope (layers track their scoped operations
    /// under it with [`layer::track_implicit`](crate::layer::track_implicit)).
    pub fn tag(&self) -> u32 {
        self.tag
    }
    /// Waits for every operation started in the scope so far.
    ///
    /// # Errors
    /// The first failure among them.
    pub fn sync<E: EventErr>(&mut self) -> Result<(), E> {
        let mut g = self.ep.inner();
        g.end_scope(self.tag);
        let r = g.sync_implicit(Some(self.tag));
        g.rethrow();
        r
    }
}

impl<C: Conduit> std::ops::Deref for Scope<'_, '_, C> {
    type Target = Endpoint<C>;
    fn deref(&self) -> &Endpoint<C> {
        self.ep
    }
}

impl<C: Conduit> std::ops::DerefMut for Scope<'_, '_, C> {
    fn deref_mut(&mut self) -> &mut Endpoint<C> {
        self.ep
    }
}

impl<C: Conduit> Drop for Scope<'_, '_, C> {
    /// Runs only when `f` panicked: the scope's operations still complete before the
    /// borrowed buffers are released.
    fn drop(&mut self) {
        let tag = Some(self.tag);
        let mut g = self.ep.inner();
        // Bounded: a panic other than a handler's may have left them unable to
        // complete (see `wait_on_unwind`).
        g.wait_on_unwind(&mut |i| i.implicit_done(tag));
        let _ = g.sync_implicit::<EventError>(tag);
    }
}

#[cfg(test)]
mod tests {
    use super::{SHARE_EVERY, Share};
    use gex_sync::wait::WaitPolicy;
    use std::time::Duration;

    #[test]
    fn sharing_is_only_for_spin_then_block() {
        let every = Some(Duration::from_micros(20));
        for p in [WaitPolicy::Spin, WaitPolicy::Block] {
            let mut s = Share::new(p, every);
            for _ in 0..10 * SHARE_EVERY {
                s.sent();
            }
            assert!(s.interval.is_none() && s.since.is_none(), "{p:?}");
        }
        // GEX_SHARE_INTERVAL=0 (None) turns it off too.
        assert!(
            Share::new(WaitPolicy::SpinThenBlock { spins: 1 }, None)
                .interval
                .is_none()
        );
    }

    #[test]
    fn the_clock_is_read_every_share_every_injections_and_a_wait_restarts_it() {
        let mut s = Share::new(
            WaitPolicy::SpinThenBlock { spins: 1 },
            Some(Duration::from_secs(3600)),
        );
        for _ in 0..SHARE_EVERY - 1 {
            s.sent();
        }
        assert!(s.since.is_none(), "read the clock early");
        s.sent();
        let t = s.since.expect("the interval starts at the first check");
        for _ in 0..SHARE_EVERY {
            s.sent();
        }
        // Within the interval: no yield, the interval keeps its start.
        assert_eq!(s.since, Some(t));
        s.rest();
        assert!(s.since.is_none());
        // An interval of zero length yields at every check and restarts it.
        let mut s = Share::new(
            WaitPolicy::SpinThenBlock { spins: 1 },
            Some(Duration::from_nanos(1)),
        );
        for _ in 0..2 * SHARE_EVERY {
            s.sent();
        }
        let t = s.since.expect("restarted after the yield");
        assert!(t.elapsed() < Duration::from_secs(60));
    }
}
