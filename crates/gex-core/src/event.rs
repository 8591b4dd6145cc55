//! One completion type for every operation: [`Event<T, E>`], and the three modes an
//! operation runs in ([`Blocking`], [`Nb`], [`Nbi`]).
//!
//! Every operation of every layer (AM local completion, put/get, atomics,
//! collectives, later messages) completes through an `Event`: `T` is what the
//! operation gives back (`()` for a put, the filled buffer of a get, the old value of a
//! fetching atomic, the output of a collective), `E` the error type of its family.
//! Blocking, nonblocking and implicit are *modes of the same operation*: an operation
//! takes a mode value and returns [`Mode::Out`]: the output itself (blocking), an
//! `Event` (nonblocking), or nothing (implicit: tracked by the endpoint and completed
//! by a sync of its category or at the end of a [scope](crate::Endpoint::scope)).
//!
//! An event is bound to the endpoint that started its operation: waiting on it with
//! another endpoint is an error ([`EventError::WrongEndpoint`]), never a premature
//! return. An event that owns a buffer the operation still writes (a get into an
//! owned `Vec`) keeps it alive when dropped or forgotten before completion: the buffer
//! is freed only after the operation has finished with it.
//!
//! Waiting happens on the endpoint ([`Endpoint::wait`](crate::Endpoint::wait),
//! [`test`](crate::Endpoint::test), [`wait_all`](crate::Endpoint::wait_all),
//! [`wait_any`](crate::Endpoint::wait_any), [`wait_some`](crate::Endpoint::wait_some)),
//! which drives every layer's progress while it waits. Events of different output and
//! error types mix in one `wait_all`/`wait_any`/`wait_some` through [`AnyEvent`].
//!
//! ```
//! use gex_core::{boot::Singleton, loopback::Loopback, Am, Body, ClientBuilder, EpAddr, Nb, Token};
//! let client = ClientBuilder::new().segment_size(4096).init::<Loopback>(Box::new(Singleton::new()))?;
//! let mut ep = client.endpoint(0)?;
//! let h = ep.register(|_t: &mut Token<'_>, _am: Am<'_>| {})?;
//! // A Medium request from an owned buffer, nonblocking: the event gives the buffer
//! // back once the conduit no longer reads it (loopback: once delivered).
//! let ev = ep.request_owned(EpAddr::rank(0), h, Body::medium(&[], vec![1u8; 64]), Nb)?;
//! let buf = ep.wait(ev)?;
//! assert_eq!(buf.len(), 64);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::Endpoint;
use crate::error::EventError;
use crate::spi::Conduit;
use crate::types::EpAddr;
use gex_sync::slot::{Completer, Taken, Waiter};

/// The raw result a layer completes an operation with; the event's `finish` function
/// turns it (and any buffer the event holds) into `T`.
#[derive(Debug, Default)]
#[non_exhaustive]
pub enum Data {
    /// Nothing beyond completion.
    #[default]
    Unit,
    /// One word (e.g. the bit pattern of a fetched value).
    Word(u64),
    /// Bytes (e.g. a collective's output, a payload buffer handed back).
    Bytes(Vec<u8>),
}

/// What a completer stores: the data, or the error of the operation's family.
pub(crate) type Outcome = Result<Data, Box<dyn std::error::Error + Send + Sync>>;

/// Turns the completion data and the buffer an event held into the output.
pub type Finish<T> = fn(Data, Option<T>) -> T;

/// Error types events can fail with: every operation family's error converts from
/// [`EventError`].
pub trait EventErr: std::error::Error + From<EventError> + Send + Sync + 'static {}
impl<E: std::error::Error + From<EventError> + Send + Sync + 'static> EventErr for E {}

/// Completion of one operation (see the [module documentation](self)).
///
/// `#[must_use]`: an event that is dropped does not cancel its operation; drop it only
/// when its outcome does not matter.
#[must_use = "an event does nothing unless waited on or tested; dropping it ignores the outcome"]
pub struct Event<T: Send + 'static, E: EventErr> {
    ep: EpAddr,
    uid: u64,
    st: St<T, E>,
}

/// The state of an event taken apart.
pub(crate) enum Parts<T, E> {
    Ready(Result<T, E>),
    Pending(Waiter<Outcome>, Option<T>),
    Gone,
}

enum St<T, E> {
    Ready(Result<T, E>),
    Pending {
        w: Waiter<Outcome>,
        hold: Option<T>,
        finish: Finish<T>,
    },
    Gone,
}

impl<T: Send + 'static, E: EventErr> std::fmt::Debug for Event<T, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = match &self.st {
            St::Ready(Ok(_)) => "complete",
            St::Ready(Err(_)) => "failed",
            St::Pending { w, .. } if w.is_done() => "complete (not taken)",
            St::Pending { .. } => "pending",
            St::Gone => "taken",
        };
        f.debug_struct("Event")
            .field("endpoint", &self.ep)
            .field("state", &st)
            .finish()
    }
}

impl<T: Send + 'static, E: EventErr> Event<T, E> {
    pub(crate) fn ready(ep: EpAddr, uid: u64, r: Result<T, E>) -> Self {
        Event {
            ep,
            uid,
            st: St::Ready(r),
        }
    }

    pub(crate) fn pending(
        ep: EpAddr,
        uid: u64,
        w: Waiter<Outcome>,
        hold: Option<T>,
        finish: Finish<T>,
    ) -> Self {
        Event {
            ep,
            uid,
            st: St::Pending { w, hold, finish },
        }
    }

    /// True once the operation has completed (or failed), as far as this thread has
    /// seen; does not drive progress (use [`Endpoint::test`](crate::Endpoint::test)).
    pub fn is_done(&self) -> bool {
        match &self.st {
            St::Ready(_) | St::Gone => true,
            St::Pending { w, .. } => w.is_done(),
        }
    }

    /// The endpoint that started the operation.
    pub fn endpoint(&self) -> EpAddr {
        self.ep
    }

    /// Splits the event into its state (the event is gone afterwards; nothing is
    /// dropped that the operation may still write).
    pub(crate) fn into_parts(mut self) -> Parts<T, E> {
        match std::mem::replace(&mut self.st, St::Gone) {
            St::Ready(r) => Parts::Ready(r),
            St::Pending { w, hold, .. } => Parts::Pending(w, hold),
            St::Gone => Parts::Gone,
        }
    }

    /// Takes the outcome once [`is_done`](Self::is_done); the slot goes back to
    /// `recycle`.
    pub(crate) fn take(mut self, recycle: &mut impl FnMut(Waiter<Outcome>)) -> Result<T, E> {
        match std::mem::replace(&mut self.st, St::Gone) {
            St::Ready(r) => r,
            St::Pending {
                mut w,
                hold,
                finish,
                ..
            } => {
                let r = match w.take() {
                    Taken::Done(Ok(d)) => Ok(finish(d, hold)),
                    Taken::Done(Err(e)) => Err(match e.downcast::<E>() {
                        Ok(e) => *e,
                        Err(e) => E::from(EventError::Failed(e.to_string())),
                    }),
                    Taken::Abandoned => Err(E::from(EventError::Abandoned)),
                    Taken::Pending => {
                        // Callers only take completed events; keep the buffer alive.
                        let st = St::Pending { w, hold, finish };
                        self.st = st;
                        return Err(E::from(EventError::Failed(
                            "internal: an event was taken before completion".into(),
                        )));
                    }
                };
                recycle(w);
                r
            }
            St::Gone => Err(E::from(EventError::Abandoned)),
        }
    }
}

impl<T: Send + 'static, E: EventErr> Drop for Event<T, E> {
    fn drop(&mut self) {
        if let St::Pending { w, hold, .. } = std::mem::replace(&mut self.st, St::Gone) {
            match hold {
                // The operation may still write the held buffer: keep it alive until
                // the completer is done (freed with the slot).
                Some(h) if !w.is_done() => w.abandon_keeping(Box::new(h)),
                _ => drop(w),
            }
        }
    }
}

/// An event of any output and error type, for [`Endpoint::wait_all`](crate::Endpoint::wait_all),
/// [`wait_any`](crate::Endpoint::wait_any) and [`wait_some`](crate::Endpoint::wait_some).
/// Sealed: implemented by [`Event`] only.
pub trait AnyEvent: sealed::Sealed {
    /// True once complete (no progress is driven).
    fn done(&self) -> bool;
    #[doc(hidden)]
    fn bound_to(&self) -> (EpAddr, u64);
}

impl<T: Send + 'static, E: EventErr> AnyEvent for Event<T, E> {
    fn done(&self) -> bool {
        self.is_done()
    }
    fn bound_to(&self) -> (EpAddr, u64) {
        (self.ep, self.uid)
    }
}

mod sealed {
    pub trait Sealed {}
    impl<T: Send + 'static, E: super::EventErr> Sealed for super::Event<T, E> {}
    impl Sealed for super::Blocking {}
    impl Sealed for super::Nb {}
    impl Sealed for super::Nbi {}
}

/// The completion half of a pending operation, held by the layer that runs it.
/// Consumed by one of its methods; dropping it abandons the operation (its waiter gets
/// [`EventError::Abandoned`]).
#[derive(Debug)]
#[must_use = "dropping a completer abandons its operation"]
pub struct OpCompleter {
    c: Completer<Outcome>,
}

impl OpCompleter {
    pub(crate) fn new(c: Completer<Outcome>) -> Self {
        OpCompleter { c }
    }
    /// Completes with nothing beyond completion. Everything this thread wrote before
    /// (the bytes of a get) is visible to the waiter that sees it.
    pub fn ok(self) {
        self.c.complete(Ok(Data::Unit));
    }
    /// Completes with `data`.
    pub fn done(self, data: Data) {
        self.c.complete(Ok(data));
    }
    /// Fails the operation with `e` (the waiter receives it as its family's error
    /// when the types match, else as [`EventError::Failed`]).
    pub fn fail<X: std::error::Error + Send + Sync + 'static>(self, e: X) {
        self.c.complete(Err(Box::new(e)));
    }
    /// True if the event was dropped (nobody will look at the result).
    pub fn is_orphaned(&self) -> bool {
        self.c.is_orphaned()
    }
}

/// What kind of mode a [`Mode`] value is (layers branch on it at compile time).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ModeKind {
    /// Complete before returning.
    Blocking,
    /// Return an [`Event`].
    Nb,
    /// Return nothing; the endpoint tracks completion (implicit event).
    Nbi,
}

/// Blocking mode: the operation completes before the call returns, which gives its
/// output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Blocking;
/// Nonblocking mode with an explicit event: the call returns an [`Event`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Nb;
/// Nonblocking mode with an implicit event: the call returns nothing; completion is
/// awaited by a sync of the operation's category (or the end of a scope).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Nbi;

/// A completion mode: [`Blocking`], [`Nb`] or [`Nbi`]. Sealed.
pub trait Mode: sealed::Sealed + Copy + Send + 'static {
    /// Which mode this is.
    const KIND: ModeKind;
    /// What an operation with output `T` and error `E` returns in this mode.
    type Out<T: Send + 'static, E: EventErr>;
    /// Disposes of an operation's event as this mode asks: waits for it (blocking),
    /// returns it (nonblocking) or tracks it on the endpoint under `tag` (implicit).
    /// Layers call it through [`layer::finish`](crate::layer::finish).
    ///
    /// # Errors
    /// In blocking mode, the operation's error.
    #[doc(hidden)]
    fn finish<C: Conduit, T: Send + 'static, E: EventErr>(
        ep: &mut Endpoint<C>,
        ev: Event<T, E>,
        tag: u32,
    ) -> Result<Self::Out<T, E>, E>;
    /// The output, in this mode, of an operation that completed during the call with
    /// output `v`: `v` itself (blocking), a complete event of endpoint `(ep, uid)`
    /// (nonblocking), nothing (implicit). Layers call it through
    /// [`Cx::done`](crate::layer::Cx::done).
    #[doc(hidden)]
    fn ready<T: Send + 'static, E: EventErr>(ep: EpAddr, uid: u64, v: T) -> Self::Out<T, E>;
}

impl Mode for Blocking {
    const KIND: ModeKind = ModeKind::Blocking;
    type Out<T: Send + 'static, E: EventErr> = T;
    #[inline]
    fn finish<C: Conduit, T: Send + 'static, E: EventErr>(
        ep: &mut Endpoint<C>,
        ev: Event<T, E>,
        _tag: u32,
    ) -> Result<T, E> {
        // The operation may use a buffer its caller lent for the call: wait for it on
        // every path (`Inner::wait_lent`).
        ep.inner().wait_event(ev, true)
    }
    #[inline(always)]
    fn ready<T: Send + 'static, E: EventErr>(_ep: EpAddr, _uid: u64, v: T) -> T {
        v
    }
}

impl Mode for Nb {
    const KIND: ModeKind = ModeKind::Nb;
    type Out<T: Send + 'static, E: EventErr> = Event<T, E>;
    #[inline]
    fn finish<C: Conduit, T: Send + 'static, E: EventErr>(
        _ep: &mut Endpoint<C>,
        ev: Event<T, E>,
        _tag: u32,
    ) -> Result<Event<T, E>, E> {
        Ok(ev)
    }
    #[inline(always)]
    fn ready<T: Send + 'static, E: EventErr>(ep: EpAddr, uid: u64, v: T) -> Event<T, E> {
        Event::ready(ep, uid, Ok(v))
    }
}

impl Mode for Nbi {
    const KIND: ModeKind = ModeKind::Nbi;
    type Out<T: Send + 'static, E: EventErr> = ();
    #[inline]
    fn finish<C: Conduit, T: Send + 'static, E: EventErr>(
        ep: &mut Endpoint<C>,
        ev: Event<T, E>,
        tag: u32,
    ) -> Result<(), E> {
        ep.inner().track(tag, ev);
        Ok(())
    }
    #[inline(always)]
    fn ready<T: Send + 'static, E: EventErr>(_ep: EpAddr, _uid: u64, _v: T) {}
}

/// The `finish` of events whose output is `()`.
pub fn finish_unit(_: Data, _: Option<()>) {}

/// The `finish` of events that give back the buffer they held (gets into owned
/// buffers).
pub fn finish_held<T: Default>(_: Data, hold: Option<T>) -> T {
    hold.unwrap_or_default()
}

/// The `finish` of events whose output is the bytes they completed with.
pub fn finish_bytes(d: Data, _: Option<Vec<u8>>) -> Vec<u8> {
    match d {
        Data::Bytes(b) => b,
        _ => Vec::new(),
    }
}
