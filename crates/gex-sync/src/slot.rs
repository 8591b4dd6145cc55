//! One-shot completion slots: the completion half of every nonblocking operation.
//!
//! A [`Completer`] and a [`Waiter`] share one slot. The completer is consumed by
//! [`Completer::complete`], which stores a value once; the waiter observes completion
//! ([`Waiter::is_done`]) and takes the value ([`Waiter::take`]). A completer dropped
//! without completing marks the slot *abandoned*, so a waiter never waits forever for a
//! completer that is gone. A waiter given up before completion may leave a value in
//! the slot ([`Waiter::abandon_keeping`]) that must live until the completer is done
//! with it (a destination buffer a transfer still writes): the slot drops it only when
//! its last handle goes. [`SlotPool`] recycles slots whose both handles are gone, so a
//! steady stream of operations allocates nothing.
//!
//! Written by hand rather than taken from a one-shot channel crate because gex needs
//! two things such crates do not offer: recycling of the shared allocation (no
//! allocation per operation on the nonblocking paths) and a value kept alive past the
//! waiter (the buffer of an operation whose event was dropped). The protocol is small
//! and model-checked under loom (`tests/loom_slot.rs`).
//!
//! # Safety
//!
//! The slot's value cell is an `UnsafeCell` accessed without a lock. The protocol:
//! - the cell is written only by [`Completer::complete`], at most once (the completer
//!   is consumed), strictly *before* the `Release` store of `DONE`;
//! - it is read (taken) only by the unique [`Waiter`] after an `Acquire` load that
//!   saw `DONE`, and the completer never touches it after that store;
//! - the *kept* cell is written only by [`Waiter::abandon_keeping`], which consumes the
//!   waiter, and is otherwise touched only by the slot's `Drop` and by [`SlotPool`]
//!   when it holds the only handle (`Arc::get_mut`), i.e. with exclusive access.
//!
//! So no two threads ever access a cell at the same time: the slot is `Sync` for
//! `T: Send`.
#![allow(unsafe_code)]

use crate::atomic::{AtomicU32, Ordering};
#[cfg(gex_loom)]
use loom::cell::UnsafeCell;
#[cfg(gex_loom)]
use loom::sync::Arc;
#[cfg(not(gex_loom))]
use std::cell::UnsafeCell;
#[cfg(not(gex_loom))]
use std::sync::Arc;

const PENDING: u32 = 0;
const DONE: u32 = 1;
const ABANDONED: u32 = 2;

/// Something a waiter keeps alive past its own life (see [`Waiter::abandon_keeping`]).
type Kept = Box<dyn std::any::Any + Send>;

/// The shared part of a completer/waiter pair.
struct Slot<T> {
    state: AtomicU32,
    value: UnsafeCell<Option<T>>,
    kept: UnsafeCell<Option<Kept>>,
}

// SAFETY: see the module's `# Safety`: every access to the cells is exclusive by the
// protocol, so sharing the slot between threads is sound when the value may move
// between threads.
unsafe impl<T: Send> Sync for Slot<T> {}
// SAFETY: as above; the kept value is `Send`.
unsafe impl<T: Send> Send for Slot<T> {}

impl<T> Slot<T> {
    fn new() -> Self {
        Slot {
            state: AtomicU32::new(PENDING),
            value: UnsafeCell::new(None),
            kept: UnsafeCell::new(None),
        }
    }
}

#[cfg(not(gex_loom))]
fn with_mut<X, R>(c: &UnsafeCell<X>, f: impl FnOnce(*mut X) -> R) -> R {
    f(c.get())
}
#[cfg(gex_loom)]
fn with_mut<X, R>(c: &UnsafeCell<X>, f: impl FnOnce(*mut X) -> R) -> R {
    c.with_mut(f)
}

/// The side that finishes an operation: stores its result once.
#[must_use = "dropping a completer without completing abandons the operation"]
pub struct Completer<T> {
    slot: Option<Arc<Slot<T>>>,
}

/// The side that learns of completion and takes the result.
pub struct Waiter<T> {
    slot: Arc<Slot<T>>,
}

impl<T> std::fmt::Debug for Completer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completer").finish_non_exhaustive()
    }
}

impl<T> std::fmt::Debug for Waiter<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiter")
            .field("state", &self.slot.state.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// What a waiter finds in its slot.
#[derive(Debug, PartialEq, Eq)]
pub enum Taken<T> {
    /// Not complete yet.
    Pending,
    /// Complete: the value.
    Done(T),
    /// The completer was dropped without completing (or the value was taken before).
    Abandoned,
}

/// A new completer/waiter pair (allocates; see [`SlotPool`] to recycle).
///
/// ```
/// use gex_sync::slot::{pair, Taken};
/// let (c, mut w) = pair::<u32>();
/// assert!(!w.is_done());
/// c.complete(7);
/// assert!(w.is_done());
/// assert_eq!(w.take(), Taken::Done(7));
/// ```
pub fn pair<T>() -> (Completer<T>, Waiter<T>) {
    let slot = Arc::new(Slot::new());
    (
        Completer {
            slot: Some(slot.clone()),
        },
        Waiter { slot },
    )
}

impl<T> Completer<T> {
    /// Stores `value` and marks the slot complete (a `Release`: everything this thread
    /// wrote before, the bytes of a transfer included, is visible to the waiter that
    /// sees completion).
    pub fn complete(mut self, value: T) {
        let slot = self.slot.take().expect("a completer completes once");
        // SAFETY: the only write of the value cell, before publication (module docs).
        with_mut(&slot.value, |p| unsafe { *p = Some(value) });
        slot.state.store(DONE, Ordering::Release);
    }

    /// True if the waiter is gone (nobody will look at the result).
    pub fn is_orphaned(&self) -> bool {
        self.slot
            .as_ref()
            .is_some_and(|s| Arc::strong_count(s) == 1)
    }
}

impl<T> Drop for Completer<T> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            slot.state.store(ABANDONED, Ordering::Release);
        }
    }
}

impl<T> Waiter<T> {
    /// True once the completer has completed or been dropped (an `Acquire`).
    #[inline]
    pub fn is_done(&self) -> bool {
        self.slot.state.load(Ordering::Acquire) != PENDING
    }

    /// Takes the value if complete.
    pub fn take(&mut self) -> Taken<T> {
        match self.slot.state.load(Ordering::Acquire) {
            PENDING => Taken::Pending,
            // SAFETY: `DONE` was observed with `Acquire`: the completer's write happened
            // before, and nobody else touches the cell now (module docs).
            DONE => match with_mut(&self.slot.value, |p| unsafe { (*p).take() }) {
                Some(v) => Taken::Done(v),
                None => Taken::Abandoned,
            },
            _ => Taken::Abandoned,
        }
    }

    /// Gives up waiting, keeping `keep` alive until the completer is done with the slot
    /// (it is dropped with the slot's last handle): the way to drop the owner of a
    /// buffer that an unfinished operation still writes.
    pub fn abandon_keeping(self, keep: Kept) {
        // SAFETY: the waiter is unique and consumed here; the completer never touches
        // the kept cell; the slot's `Drop` runs only after both handles are gone.
        with_mut(&self.slot.kept, |p| unsafe { *p = Some(keep) });
    }
}

/// Recycles slots whose completer and waiter are both gone.
///
/// ```
/// use gex_sync::slot::{SlotPool, Taken};
/// let mut pool = SlotPool::<u64>::default();
/// let (c, mut w) = pool.pair();
/// c.complete(1);
/// assert_eq!(w.take(), Taken::Done(1));
/// pool.recycle(w);
/// assert_eq!(pool.free(), 1);
/// let (_c, w) = pool.pair(); // reuses the slot
/// assert!(!w.is_done());
/// assert_eq!(pool.free(), 0);
/// ```
pub struct SlotPool<T> {
    free: Vec<Arc<Slot<T>>>,
    max: usize,
}

impl<T> Default for SlotPool<T> {
    fn default() -> Self {
        SlotPool {
            free: Vec::new(),
            max: 1024,
        }
    }
}

impl<T> std::fmt::Debug for SlotPool<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotPool")
            .field("free", &self.free.len())
            .finish()
    }
}

impl<T> SlotPool<T> {
    /// A pair on a recycled slot if one is free, else on a new one.
    pub fn pair(&mut self) -> (Completer<T>, Waiter<T>) {
        let slot = self.free.pop().unwrap_or_else(|| Arc::new(Slot::new()));
        (
            Completer {
                slot: Some(slot.clone()),
            },
            Waiter { slot },
        )
    }

    /// Returns a waiter's slot to the pool if its completer is gone (else it is simply
    /// dropped). Any value left in it is dropped.
    pub fn recycle(&mut self, mut w: Waiter<T>) {
        if self.free.len() >= self.max {
            return;
        }
        if let Some(s) = Arc::get_mut(&mut w.slot) {
            // Exclusive access (the only handle): reset.
            s.state.store(PENDING, Ordering::Relaxed);
            // SAFETY: exclusive access through `get_mut`.
            with_mut(&s.value, |p| unsafe { *p = None });
            // SAFETY: as above.
            with_mut(&s.kept, |p| unsafe { *p = None });
            self.free.push(w.slot);
        }
    }

    /// Slots ready for reuse.
    pub fn free(&self) -> usize {
        self.free.len()
    }
}

#[cfg(all(test, not(gex_loom)))]
mod tests {
    use super::*;

    #[test]
    fn dropped_completer_abandons() {
        let (c, mut w) = pair::<u8>();
        drop(c);
        assert!(w.is_done());
        assert_eq!(w.take(), Taken::Abandoned);
    }

    #[test]
    fn value_is_taken_once() {
        let (c, mut w) = pair::<Vec<u8>>();
        assert_eq!(w.take(), Taken::Pending);
        c.complete(vec![1, 2]);
        assert_eq!(w.take(), Taken::Done(vec![1, 2]));
        assert_eq!(w.take(), Taken::Abandoned);
    }

    #[test]
    fn kept_value_lives_until_the_completer_is_done() {
        let dropped = std::sync::Arc::new(crate::atomic::AtomicU32::new(0));
        struct Count(std::sync::Arc<crate::atomic::AtomicU32>);
        impl Drop for Count {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
        let (c, w) = pair::<u8>();
        w.abandon_keeping(Box::new(Count(dropped.clone())));
        assert_eq!(
            dropped.load(Ordering::Relaxed),
            0,
            "kept while the completer lives"
        );
        assert!(c.is_orphaned());
        c.complete(1);
        assert_eq!(dropped.load(Ordering::Relaxed), 1, "dropped with the slot");
    }

    #[test]
    fn pool_does_not_recycle_a_slot_still_held_by_its_completer() {
        let mut pool = SlotPool::<u8>::default();
        let (c, w) = pool.pair();
        pool.recycle(w);
        assert_eq!(pool.free(), 0);
        drop(c);
        let (c, mut w) = pool.pair();
        c.complete(3);
        assert_eq!(w.take(), Taken::Done(3));
        pool.recycle(w);
        assert_eq!(pool.free(), 1);
    }

    #[test]
    fn completion_crosses_threads() {
        let (c, w) = pair::<Vec<u32>>();
        let t = std::thread::spawn(move || c.complete((0..100).collect()));
        let mut w = w;
        loop {
            match w.take() {
                Taken::Done(v) => {
                    assert_eq!(v.len(), 100);
                    break;
                }
                Taken::Pending => std::hint::spin_loop(),
                Taken::Abandoned => panic!("abandoned"),
            }
        }
        t.join().unwrap();
    }
}
