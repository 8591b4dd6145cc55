//! Test-only hooks (compiled under `cfg(test)` only): a switch that makes a receive
//! buffer's post fail, to reach `open`'s error paths, and a per-thread log of what is
//! posted to, closed and freed, so a test can check the order in which an endpoint and
//! the memory it was given go away.

use std::cell::{Cell, RefCell};

/// One step in the life of an endpoint's resources, as the log records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// A receive buffer at `buf` was posted to the endpoint `ep` (its handle).
    Posted { ep: usize, buf: usize },
    /// The endpoint `ep` was closed (`fi_close`).
    Closed { ep: usize },
    /// An allocation of the conduit (`Mem`) was freed.
    Freed { base: usize, len: usize },
}

thread_local! {
    /// Successful posts left before one fails (`None`: none fails).
    static POSTS_LEFT: Cell<Option<usize>> = const { Cell::new(None) };
    /// The log, while one is kept.
    static LOG: RefCell<Option<Vec<Event>>> = const { RefCell::new(None) };
}

/// Makes the receive post after the next `n` successful ones fail, on this thread.
pub(crate) fn fail_post_after(n: usize) {
    POSTS_LEFT.with(|c| c.set(Some(n)));
}

/// Whether this post fails (counts the successful ones down).
pub(crate) fn post_fails() -> bool {
    POSTS_LEFT.with(|c| match c.get() {
        Some(0) => {
            c.set(None);
            true
        }
        Some(n) => {
            c.set(Some(n - 1));
            false
        }
        None => false,
    })
}

/// Starts a log of this thread's events.
pub(crate) fn start_log() {
    LOG.with(|l| *l.borrow_mut() = Some(Vec::new()));
}

/// Ends this thread's log and returns it.
pub(crate) fn take_log() -> Vec<Event> {
    LOG.with(|l| l.borrow_mut().take().unwrap_or_default())
}

/// Records `e` if this thread keeps a log.
pub(crate) fn note(e: Event) {
    LOG.with(|l| {
        if let Some(v) = l.borrow_mut().as_mut() {
            v.push(e);
        }
    });
}
