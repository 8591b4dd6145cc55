//! The direct path of blocking calls, as the caller drives it: begin in the layer,
//! wait in the caller (inline spins, light slices, the endpoint's wait), replay the
//! last call's decisions, and the small-broadcast ring in place.

#[allow(clippy::wildcard_imports)]
use super::*;

/// Looks at the awaited flag a direct call makes with `Spin`, per wait, before it
/// waits through the endpoint's wait loop (each look is a load; an iteration of the
/// endpoint's wait loop polls every peer's ring and runs every busy layer's hook, so
/// it notices the flag later).
pub(super) const INLINE_SPINS: u32 = 1 << 12;

/// Of those looks, every how many the call serves the endpoint (a poll: incoming
/// messages of every layer), so that a wait still advances everything.
pub(super) const INLINE_POLL_EVERY: u32 = 64;

/// Slices a direct call hands over (`sched_yield`) under `SpinThenBlock` before it
/// waits through the endpoint's wait loop (which polls every slice, then sleeps):
/// a few milliseconds with ranks outnumbering cores.
pub(super) const LIGHT_SLICES: u32 = 2000;

/// Of those slices, every how many the call serves the endpoint (a poll: messages
/// of other layers, stall checks).
pub(super) const LIGHT_POLL_EVERY: u32 = 16;

/// How a call on the direct path ended.
pub(super) enum Direct {
    /// Done; the merged barrier entry (anonymous for other operations).
    Done(Entry),
    /// The direct path does not apply (nothing consumed).
    Declined,
    /// The online tuner times the call's cell first (nothing consumed; asked with
    /// `trial`).
    Trial,
}

/// A blocking in-place broadcast of `buf` from `root` through the small-broadcast
/// ring, directly ([`Coll::ring_begin`]): `Ok(false)` if that does not apply (nothing
/// consumed). Waits as [`direct`](fn@direct) does; a reader whose root published completes
/// without entering the layer again.
#[inline]
pub(super) fn ring_in_place<C: Conduit>(
    ep: &mut Endpoint<C>,
    team: &Team,
    root: u32,
    (buf, (ty, elem)): (&mut [u8], (u8, usize)),
    opts: &Opts<'_>,
) -> Result<bool, CollError> {
    let mut call = None;
    // Without a progress thread on the layer's state alone, waking members after
    // (as `replay` does); else in the endpoint's context.
    let mut wakes = false;
    let lent_begin = lent(ep, |c| {
        c.with_resolved_boxed(team, |c, team| {
            let io = (&mut *buf, ty, elem);
            c.ring_begin(team, root, io, opts, &mut call, &mut |_| wakes = true)
        })
    });
    let first = match lent_begin {
        Some(r) => {
            let first = r.map_err(|e| *e)?;
            after_borrowed_step(ep, team, wakes)?;
            first
        }
        None => coll(ep, |c, cx| {
            c.with_resolved_boxed(team, |c, team| {
                let io = (&mut *buf, ty, elem);
                let r = c.ring_begin(team, root, io, opts, &mut call, &mut |a| cx.wake(a));
                if matches!(r, Ok(RingBegin::Pending)) {
                    // A progress thread shares the state: its hook watches the wait.
                    cx.set_busy();
                }
                r
            })
        })?
        .map_err(|e| *e)?,
    };
    match first {
        RingBegin::Declined => return Ok(false),
        RingBegin::Done => return Ok(true),
        RingBegin::Pending => {}
    }
    let d = call.as_mut().expect("a pending call");
    let mut pause = Pause::new(ep.wait_policy());
    let mut waited = false;
    loop {
        let ready = pause.inline(ep, || d.ready());
        if !waited && d.finish(buf) {
            return Ok(true);
        }
        if !ready {
            pause.spins = 0;
            waited = true;
            coll(ep, |c, cx| c.watch_direct(cx, team))?;
            let _ = layer::wait_until::<Coll, C>(ep, |c| c.shm.direct_ready());
        }
        let done = coll(ep, |c, cx| {
            c.with_resolved(team, |c, team| {
                c.ring_step(cx, team, d, &mut *buf).map_err(|e| *e)
            })
        })?
        .map_err(|e| mismatch_seen(ep, team, e))?;
        if done {
            return Ok(true);
        }
    }
}

/// How a direct call waits between its steps before the endpoint's wait loop.
pub(super) struct Pause {
    spin: bool,
    yield_first: bool,
    spins: u32,
    slices: u32,
}

impl Pause {
    pub(super) fn new(policy: WaitPolicy) -> Pause {
        Pause {
            spin: policy == WaitPolicy::Spin,
            yield_first: matches!(policy, WaitPolicy::SpinThenBlock { .. }),
            spins: 0,
            slices: 0,
        }
    }

    /// Looks at `ready` a few times under `Spin`; under `SpinThenBlock` hands the
    /// core over between looks (serving the endpoint every few slices), for a
    /// bounded number of slices over the whole call. True if it saw `ready` hold (its
    /// caller then steps without looking again).
    #[inline]
    pub(super) fn inline<C: Conduit>(
        &mut self,
        ep: &mut Endpoint<C>,
        ready: impl Fn() -> bool,
    ) -> bool {
        if ready() {
            return true;
        }
        if self.spin {
            // The flag it waits for (a budget per wait), before the endpoint's wait
            // loop, serving the endpoint now and then.
            self.spins = 0;
            while self.spins < INLINE_SPINS {
                self.spins += 1;
                if self.spins % INLINE_POLL_EVERY == 0 {
                    layer::poll(ep);
                } else {
                    gex_sync::hint::spin_loop();
                }
                if ready() {
                    return true;
                }
            }
        }
        if self.yield_first {
            // Ranks outnumber cores: the members waited for need this core. Hand it
            // over and look at the flag, serving the endpoint every few slices, before
            // the endpoint's wait loop (a poll of every peer's ring per slice, then
            // sleep); measured with 8 ranks on 2 cores (docs/coll.md, section 10).
            while self.slices < LIGHT_SLICES {
                std::thread::yield_now();
                self.slices += 1;
                if self.slices % LIGHT_POLL_EVERY == 0 {
                    layer::poll(ep);
                }
                if ready() {
                    return true;
                }
            }
        }
        false
    }
}

/// The direct path (see [`crate::shmdrive`]), with `trial`: declines with
/// [`Direct::Trial`] when an online trial is due.
pub(super) fn direct<C: Conduit>(
    ep: &mut Endpoint<C>,
    team: &Team,
    l: &Lowered<'_>,
    io: Io<'_>,
    entry: Entry,
    (trial, replay): (bool, Option<ReplayKey>),
) -> Result<Direct, CollError> {
    let req = DirectReq {
        kind: l.kind,
        root: l.root,
        elem: l.elem,
        count: l.count,
        commutative: l.commutative,
        opts: &l.opts,
        entry,
        trial,
        replay,
        codes: l.codes,
    };
    drive(ep, team, io, |c, cx, team, io, slot| {
        c.direct_begin(cx, team, &req, io, slot)
    })
}

/// A blocking call over borrowed slices of the shape `key` on the direct path if it
/// replays the last direct call's decisions ([`crate::shmdrive`], *Replay*); else
/// [`Direct::Declined`], nothing consumed.
///
/// Without a progress thread the layer's state is borrowed directly
/// ([`layer::state`]): no endpoint context is built for a call that
/// completes at once and wakes nobody; one that waits or has members to wake enters
/// the layer afterwards to record its wait or do the wakes.
#[inline]
pub(super) fn replay<C: Conduit>(
    ep: &mut Endpoint<C>,
    team: &Team,
    key: &ReplayKey,
    mut io: Io<'_>,
) -> Result<Direct, CollError> {
    let mut slot = None;
    let policy = ep.wait_policy();
    let mut wakes = false;
    let lent_run = lent(ep, |c| {
        c.replay_run(
            team,
            key,
            &mut io,
            &mut slot,
            (policy, &mut |_| wakes = true),
        )
    });
    let r = if let Some(r) = lent_run {
        after_borrowed_step(ep, team, wakes)?;
        r
    } else {
        coll(ep, |c, cx| {
            let wake = &mut |a| cx.wake(a);
            let r = c.replay_run(team, key, &mut io, &mut slot, (policy, wake));
            if matches!(r, Replayed::Pending) {
                // A progress thread shares the state: its hook watches the wait.
                cx.set_busy();
            }
            r
        })?
    };
    match r {
        Replayed::Declined => Ok(Direct::Declined),
        Replayed::Done => Ok(Direct::Done(Entry::default())),
        Replayed::Pending => {
            let d = slot.as_mut().expect("a pending call");
            wait_direct(ep, team, d, &mut io)
        }
    }
}

/// Runs a direct call that `begin` starts: begins and steps until done.
#[inline(always)]
pub(super) fn drive<C: Conduit>(
    ep: &mut Endpoint<C>,
    team: &Team,
    mut io: Io<'_>,
    begin: impl for<'s> FnOnce(
        &mut Coll,
        &mut gex_core::layer::Cx<'_, C>,
        &Team,
        &mut Io<'_>,
        &'s mut Option<DirectOp>,
    ) -> Result<Begin<'s>, CollError>,
) -> Result<Direct, CollError> {
    // One call into the layer resolves the team, begins and takes the first step
    // (a barrier whose peers arrived, a broadcast root: done at once).
    let mut slot = None;
    let first = coll(ep, |c, cx| {
        c.with_resolved(team, |c, team| {
            match begin(c, cx, team, &mut io, &mut slot)? {
                Begin::Began(d) => c.direct_step(cx, team, d, &mut io).map(Ok),
                Begin::Declined => Ok(Err(Direct::Declined)),
                Begin::Trial => Ok(Err(Direct::Trial)),
            }
        })
    })??;
    match first {
        Ok(Stepped::Done) => Ok(Direct::Done(merged_entry(
            slot.as_ref().expect("a begun call"),
        ))),
        Ok(Stepped::Pending) => {
            let d = slot.as_mut().expect("a begun call");
            wait_direct(ep, team, d, &mut io)
        }
        Err(other) => Ok(other),
    }
}

/// Waits for the direct call `d` (its last step returned `Pending`) and steps it
/// until done.
pub(super) fn wait_direct<C: Conduit>(
    ep: &mut Endpoint<C>,
    team: &Team,
    d: &mut DirectOp,
    io: &mut Io<'_>,
) -> Result<Direct, CollError> {
    let mut stepped = Stepped::Pending;
    let policy = ep.wait_policy();
    let mut pause = Pause::new(policy);
    let mut waited = false;
    while let Stepped::Pending = stepped {
        let ready = match d.post_word() {
            // A data round's wait: one load per look.
            Some((word, tag)) => pause.inline(ep, || word.load(Ordering::Acquire) == tag),
            None => pause.inline(ep, || d.wait().is_some_and(|w| w.ready())),
        };
        if !waited && d.finish(io.out) {
            // A barrier's last wait is over: done without entering the layer again
            // (it never announced sleep: nothing to withdraw).
            return Ok(Direct::Done(merged_entry(d)));
        }
        if !ready {
            pause.spins = 0;
            waited = true;
            // The step recorded the wait; the progress hook watches it from now on
            // (stall checks, the sleep protocol), with the team lent to it so that
            // the wait goes on through stall checks that find nothing (and reaches
            // `GEX_STALL_REPORT` if nothing happens).
            coll(ep, |c, cx| c.watch_direct(cx, team))?;
            let _ = layer::wait_until::<Coll, C>(ep, |c| c.shm.direct_ready());
        }
        stepped = step_direct(ep, team, d, io, policy).map_err(|e| mismatch_seen(ep, team, e))?;
    }
    Ok(Direct::Done(merged_entry(d)))
}

/// A direct call on `team` failed with `e`: if members disagreed, the layer records
/// the team's failure and tells every member ([`Coll::direct_failed`]).
#[cold]
#[inline(never)]
pub(super) fn mismatch_seen<C: Conduit>(
    ep: &mut Endpoint<C>,
    team: &Team,
    e: CollError,
) -> CollError {
    if matches!(e, CollError::Mismatch { .. }) {
        let _ = coll(ep, |c, cx| c.direct_failed(cx, team, &e));
    }
    e
}

/// Steps the direct call `d` (its wait is over): on the layer's state alone when the
/// endpoint lends it ([`Coll::step_borrowed`]; entering the layer's context only to
/// wake members), else through the endpoint's context.
#[inline]
pub(super) fn step_direct<C: Conduit>(
    ep: &mut Endpoint<C>,
    team: &Team,
    d: &mut DirectOp,
    io: &mut Io<'_>,
    policy: WaitPolicy,
) -> Result<Stepped, CollError> {
    let mut wakes = false;
    if let Some(Some(r)) = lent(ep, |c| {
        c.step_borrowed(team, d, io, (policy, &mut |_| wakes = true))
    }) {
        after_borrowed_step(ep, team, wakes)?;
        return r;
    }
    coll(ep, |c, cx| {
        c.with_resolved(team, |c, team| c.direct_step(cx, team, d, io))
    })?
}

pub(super) fn merged_entry(d: &DirectOp) -> Entry {
    match &d.body {
        crate::shmpath::DirectBody::Bar(b) => b.entry(),
        crate::shmpath::DirectBody::Shm(_) | crate::shmpath::DirectBody::Ring { .. } => {
            Entry::default()
        }
    }
}
