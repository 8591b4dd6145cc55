//! Explicit events of nonblocking operations.

/// Completion of one or more nonblocking operations (put, get, memset, or every
/// operation of an access region). Test it with [`RmaEp::test`](crate::RmaEp::test),
/// wait with [`RmaEp::wait`](crate::RmaEp::wait), [`RmaEp::wait_all`](crate::RmaEp::wait_all)
/// or [`RmaEp::wait_some`](crate::RmaEp::wait_some). Events of operations that finished
/// during the call (the direct path) are complete from the start.
///
/// An event belongs to the [`RmaEp`](crate::RmaEp) that created it; passing it to
/// another one is a logic error (it may then never, or wrongly, report completion).
/// Dropping an event does not cancel or finish its operations; for an event from an
/// `unsafe` call, the buffer contract holds until completion regardless.
#[derive(Debug, Default)]
#[must_use = "an RMA event must be waited on or tested to learn of completion"]
pub struct Event {
    pub(crate) ids: Vec<u32>,
}

impl Event {
    /// An event that is already complete.
    pub fn done() -> Event {
        Event::default()
    }
    /// True if completion has been observed (by the call that created it, or by a
    /// test or wait). Does not poll.
    pub fn is_done(&self) -> bool {
        self.ids.is_empty()
    }
}

/// Event of [`RmaEp::put_nb`](crate::RmaEp::put_nb): remote completion, plus the source
/// buffer handed back at local completion.
#[derive(Debug)]
#[must_use = "an RMA event must be waited on or tested to learn of completion"]
pub struct PutEvent<T> {
    pub(crate) ev: Event,
    pub(crate) buf: Option<Vec<T>>,
}

impl<T> PutEvent<T> {
    /// Local completion: the source buffer, once the put no longer reads it (`None`
    /// before that, or if already taken). With today's conduits local completion is
    /// reached before `put_nb` returns.
    pub fn lc(&mut self) -> Option<Vec<T>> {
        self.buf.take()
    }
    /// The remote-completion event (drops the buffer if not taken).
    pub fn into_event(mut self) -> Event {
        std::mem::take(&mut self.ev)
    }
}

/// Event of a nonblocking get into an owned buffer; [`RmaEp::wait`](crate::RmaEp::wait)
/// returns the filled buffer.
///
/// Dropping (or forgetting) it before completion leaks the buffer: memory that data
/// may still arrive into is never freed.
#[derive(Debug)]
#[must_use = "the buffer comes back from RmaEp::wait"]
pub struct GetEvent<T> {
    pub(crate) ev: Event,
    pub(crate) buf: Option<Vec<T>>,
}

impl<T> Drop for GetEvent<T> {
    fn drop(&mut self) {
        if !self.ev.ids.is_empty() {
            if let Some(b) = self.buf.take() {
                std::mem::forget(b);
            }
        }
    }
}

/// Event of a nonblocking fetching atomic
/// ([`AtomicDomain::fetch_nb`](crate::AtomicDomain::fetch_nb));
/// [`RmaEp::wait`](crate::RmaEp::wait) returns the old value. Dropping it before
/// completion leaks its one-element buffer (as [`GetEvent`]).
#[derive(Debug)]
#[must_use = "the fetched value comes back from RmaEp::wait"]
pub struct FetchEvent<T> {
    pub(crate) inner: GetEvent<T>,
}

impl<T: bytemuck::Pod> Completion for FetchEvent<T> {
    /// The value of the word before the operation.
    type Output = T;
    fn ids(&mut self) -> &mut Vec<u32> {
        &mut self.inner.ev.ids
    }
    fn finish(mut self) -> T {
        self.inner
            .buf
            .take()
            .and_then(|b| b.first().copied())
            .unwrap_or_else(T::zeroed)
    }
}

mod sealed {
    pub trait Sealed {}
    impl<T> Sealed for super::FetchEvent<T> {}
    impl Sealed for super::Event {}
    impl<T> Sealed for super::PutEvent<T> {}
    impl<T> Sealed for super::GetEvent<T> {}
}

/// Something [`RmaEp::wait`](crate::RmaEp::wait) and [`RmaEp::test`](crate::RmaEp::test)
/// accept: [`Event`], [`PutEvent`], [`GetEvent`]. Sealed.
pub trait Completion: sealed::Sealed {
    /// What `wait` returns.
    type Output;
    #[doc(hidden)]
    fn ids(&mut self) -> &mut Vec<u32>;
    #[doc(hidden)]
    fn finish(self) -> Self::Output;
}

impl Completion for Event {
    type Output = ();
    fn ids(&mut self) -> &mut Vec<u32> {
        &mut self.ids
    }
    fn finish(self) {}
}

impl<T> Completion for PutEvent<T> {
    /// The source buffer, unless [`PutEvent::lc`] took it.
    type Output = Option<Vec<T>>;
    fn ids(&mut self) -> &mut Vec<u32> {
        &mut self.ev.ids
    }
    fn finish(mut self) -> Option<Vec<T>> {
        self.buf.take()
    }
}

impl<T> Completion for GetEvent<T> {
    /// The filled buffer.
    type Output = Vec<T>;
    fn ids(&mut self) -> &mut Vec<u32> {
        &mut self.ev.ids
    }
    fn finish(mut self) -> Vec<T> {
        self.buf.take().unwrap_or_default()
    }
}
