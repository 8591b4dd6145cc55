//! Issuing and ending an operation: [`drive`] runs an operation's steps under
//! back-pressure (cancelling it if a panic unwinds out), [`fin`]/[`raw`] turn a step
//! into the caller's answer inside the layer's closure, and [`end`]/[`end_scoped`] wait
//! for it as the mode asks (or track it under a scope's tag). The API modules
//! ([`crate::ext`], [`crate::scope`]) call these; they call the state's steps
//! ([`crate::engine`], [`crate::atomic`]) through the closure they are given.

use crate::RmaError;
use crate::atomic::AtomicIssue;
use crate::engine::{Fail, Job, Step};
use crate::nbi::TAG;
use crate::state::Rma;
use gex_core::layer::{self, Cx};
use gex_core::spi::Conduit;
use gex_core::{Blocking, Endpoint, Event, Mode};

/// Runs `step` with the layer's state until it gives an answer, polling the endpoint
/// between tries (back-pressure). `state` is the operation's issuing state (its job),
/// which `step` advances.
///
/// Every exit path waits: until `step` gives its answer (which hands the operation's
/// units in flight to an event, or to a failure that waits for them), the operation
/// lives only here; if a panic unwinds out of the loop (a layer's progress hook or a
/// conduit panicking in [`layer::retry`]'s poll, or a panic in the step itself), the
/// guard cancels it: its entry is abandoned, so late replies are dropped, and the
/// guard waits for the native operations the network still holds of it (they may read
/// or write the caller's buffer) before the unwinding goes on
/// ([`layer::wait_unwinding`]).
#[inline(always)]
pub(crate) fn drive<C: Conduit, S: Issuing, R>(
    ep: &mut Endpoint<C>,
    state: S,
    mut step: impl FnMut(&mut Rma, &mut Cx<'_, C>, &mut S) -> Option<R>,
) -> Result<R, RmaError> {
    let mut g = IssueGuard {
        ep,
        state,
        answered: false,
    };
    let mut retry = layer::Retry::default();
    loop {
        let IssueGuard { ep, state, .. } = &mut g;
        match crate::state::with(ep, |r, cx| step(r, cx, state)) {
            None => {
                g.answered = true;
                return Err(RmaError::NoLayer);
            }
            Some(Some(r)) => {
                g.answered = true;
                return Ok(r);
            }
            Some(None) => {}
        }
        layer::retry(g.ep, &mut retry);
    }
}

/// What [`drive`]'s guard needs of an operation being issued.
pub(crate) trait Issuing {
    /// The operation's entry in the op table, once a step has made one.
    fn entry(&self) -> Option<u32>;
}

impl Issuing for Option<Job> {
    #[inline(always)]
    fn entry(&self) -> Option<u32> {
        self.as_ref().and_then(Job::entry)
    }
}

/// An atomic's entry.
impl<O: Send + 'static> Issuing for AtomicIssue<O> {
    #[inline(always)]
    fn entry(&self) -> Option<u32> {
        self.id
    }
}

/// Nothing in the op table (a flush).
impl Issuing for () {
    #[inline(always)]
    fn entry(&self) -> Option<u32> {
        None
    }
}

/// [`drive`]'s guard: cancels the operation if the loop is left without an answer,
/// which only a panic does.
pub(crate) struct IssueGuard<'a, C: Conduit, S: Issuing> {
    ep: &'a mut Endpoint<C>,
    state: S,
    answered: bool,
}

impl<C: Conduit, S: Issuing> Drop for IssueGuard<'_, C, S> {
    #[inline(always)]
    fn drop(&mut self) {
        if !self.answered {
            if let Some(id) = self.state.entry() {
                cancel_on_unwind(self.ep, id);
            }
        }
    }
}

/// Cancels operation `id` while a panic unwinds out of [`drive`]: abandons its entry
/// (replies still to come are dropped, as for an operation that failed while it was
/// issued) and waits, bounded, for its native operations in flight.
#[cold]
#[inline(never)]
pub(crate) fn cancel_on_unwind<C: Conduit>(ep: &mut Endpoint<C>, id: u32) {
    let cancelled = RmaError::Event(gex_core::EventError::Abandoned);
    let in_flight = crate::state::with(ep, |r, _| r.abandon(id, cancelled)).unwrap_or(false);
    if in_flight {
        layer::wait_unwinding::<Rma, C>(ep, |r| !r.ops.contains_key(&id));
    }
}

/// How an operation ends, decided inside the layer's closure (where the output of an
/// operation complete during the call becomes `M::Out` without an event).
pub(crate) enum Fin<O: Send + 'static, M: Mode> {
    /// Complete: the output as mode `M` returns it.
    Out(M::Out<O, RmaError>),
    /// Complete when this event is.
    Ev(Event<O, RmaError>),
    /// A small blocking AM put: complete when the fast acknowledgements reach the count.
    Fast(u64, M::Out<O, RmaError>),
}

/// Converts a step for [`end`] (in the layer's closure): `None` under back-pressure.
#[inline(always)]
pub(crate) fn fin<C: Conduit, O: Send + 'static, M: Mode>(
    cx: &Cx<'_, C>,
    r: Result<Step<O>, Fail<O>>,
) -> Option<Result<Fin<O, M>, Fail<O>>> {
    match r {
        Ok(Step::Blocked) => None,
        Ok(Step::Now(v)) => Some(Ok(Fin::Out(cx.done::<O, RmaError, M>(v)))),
        Ok(Step::Done(e)) => Some(Ok(Fin::Ev(e))),
        Ok(Step::Fast(w, v)) => Some(Ok(Fin::Fast(w, cx.done::<O, RmaError, M>(v)))),
        Err(f) => Some(Err(f)),
    }
}

/// A step as it is, for scoped operations: `None` under back-pressure.
#[inline(always)]
pub(crate) fn raw<C: Conduit, O: Send + 'static>(
    _cx: &Cx<'_, C>,
    r: Result<Step<O>, Fail<O>>,
) -> Option<Result<Step<O>, Fail<O>>> {
    match r {
        Ok(Step::Blocked) => None,
        other => Some(other),
    }
}

/// Ends an operation as mode `M` asks. `lent`: a buffer the caller lends for the call
/// (a borrowed source or destination) may still be in use by units in flight after a
/// failure: wait for them before returning the error.
#[inline(always)]
pub(crate) fn end<C: Conduit, O: Send + 'static, M: Mode>(
    ep: &mut Endpoint<C>,
    r: Result<Fin<O, M>, Fail<O>>,
    lent: bool,
) -> Result<M::Out<O, RmaError>, RmaError> {
    match r {
        Ok(Fin::Out(o)) => Ok(o),
        Ok(Fin::Ev(ev)) => layer::finish::<O, RmaError, M, C>(ep, ev, TAG),
        Ok(Fin::Fast(want, o)) => {
            layer::wait_until::<Rma, C>(ep, |r| r.fast_acks >= want);
            Ok(o)
        }
        Err(f) => Err(failed(ep, f, lent)),
    }
}

/// After a failure: waits for units in flight that may use a lent buffer.
#[cold]
pub(crate) fn failed<C: Conduit, O: Send + 'static>(
    ep: &mut Endpoint<C>,
    f: Fail<O>,
    lent: bool,
) -> RmaError {
    if let (true, Some(ev)) = (lent, f.ev) {
        // On every path, as a blocking operation's wait (`layer::finish`).
        let _ = layer::finish::<O, RmaError, Blocking, C>(ep, ev, TAG);
    }
    f.err
}

/// As [`end`] for a scoped operation: its event is tracked under the scope's tag (the
/// scope waits for it before the borrow ends), also after a failure.
pub(crate) fn end_scoped<C: Conduit>(
    ep: &mut Endpoint<C>,
    tag: u32,
    r: Result<Step<()>, Fail<()>>,
) -> Result<(), RmaError> {
    match r {
        Ok(Step::Done(ev)) => {
            layer::track_implicit(ep, tag, ev);
            Ok(())
        }
        Ok(Step::Now(()) | Step::Fast(..)) => Ok(()),
        Ok(Step::Blocked) => Err(RmaError::Event(gex_core::EventError::Abandoned)),
        Err(Fail { err, ev }) => {
            if let Some(ev) = ev {
                layer::track_implicit(ep, tag, ev);
            }
            Err(err)
        }
    }
}
