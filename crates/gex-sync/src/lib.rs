//! Synchronisation building blocks for gex: the leaf crate every other gex crate builds on.
//!
//! # What this crate does
//!
//! - [`atomic`], [`hint`], [`thread`]: a shim that names the standard atomics (or loom's under
//!   `--cfg gex_loom`). It is the only place in the workspace that names `std` atomics, so
//!   every lock-free algorithm in gex can be model-checked by loom.
//! - [`CachePadded`]: keeps hot shared words (ring heads, counters) on their own cache lines.
//! - [`ring`]: single-producer single-consumer rings of variable-length records that work
//!   between threads and between processes sharing memory (`MAP_SHARED`), tuned for latency:
//!   the consumer polls the next record's tag, not a shared tail index.
//! - [`wait`]: spin, block, or spin-then-block waiting on a [`wait::Doorbell`] backed by a
//!   shared (cross-process) futex, free of lost wake-ups.
//! - [`counter`]: cache-padded statistics counters.
//! - [`copy`]: race-free copies to and from memory others access concurrently (byte-wise
//!   atomic, P1478 semantics, as fast as `memcpy`).
//! - [`word`]: atomic operations on 4- and 8-byte words of that memory, defined over
//!   bytes too, so that a copy racing with them is never a mixed-size race.
//! - [`cma`]: reading another process's memory (`process_vm_readv`) for single-copy
//!   transfers between processes of one host, and whether the host allows it.
//! - [`signal`]: the report signal (`SIGUSR1`: print every endpoint's state).
//! - [`slot`]: one-shot completion slots (completer/waiter pairs) with recycling: the
//!   completion half of every nonblocking operation.
//!
//! # What it does not do
//!
//! - It does not allocate or map shared memory (except [`ring::channel`], an in-process
//!   convenience), name files, or pass file descriptors: callers place [`ring::RingCtl`],
//!   ring data areas and doorbells in memory they own and manage.
//! - It has no multi-producer or multi-consumer queues, no locks (but the lock table
//!   that defines [`word`]'s read-modify-writes, taken only under Miri), and no hidden
//!   threads.
//! - It does not know about ranks, messages or networks; it moves opaque bytes.
//! - Hot paths (push, peek, pop, ring with a non-blocking waiter) never allocate, take
//!   locks or make system calls.
//!
//! # Words
//!
//! - **ring**: a fixed-size circular data area of `cap` bytes (a power of two) plus a small
//!   control block, written by one *producer* and read by one *consumer*.
//! - **position**: a monotonically increasing `u64` byte counter into a ring; its physical
//!   offset is `position & (cap - 1)`.
//! - **record**: one message in a ring: a 16-byte header (tag, length, *user word*) and a
//!   body of up to [`ring::max_body`] bytes. The *user word* is a `u32` the caller chooses
//!   (e.g. a handler index); every value is allowed.
//! - **tag**: the first word of a record, `position + 1` when published; the consumer polls
//!   it. A **pad** is a tag that says "skip to the next lap".
//! - **back-pressure**: a full ring; `reserve`/`push` return `None`/`false` and the caller
//!   retries later. It is a normal outcome, not an error.
//! - **doorbell**: a small shared object a waiter may sleep on and a producer rings after
//!   publishing work.
//! - **policy** ([`wait::WaitPolicy`]): how a waiter waits: spin, block, or spin then block.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use gex_sync::ring;
//! use gex_sync::wait::{Doorbell, WaitPolicy};
//!
//! let (mut tx, mut rx) = ring::channel(4096);
//! let bell = Arc::new(Doorbell::new());
//! bell.set_may_block(true);
//!
//! let b = bell.clone();
//! let consumer = std::thread::spawn(move || {
//!     b.wait_until(WaitPolicy::SpinThenBlock { spins: 100 }, || rx.has_data());
//!     let (user, body) = rx.peek().unwrap();
//!     assert_eq!((user, body), (1, &b"ping"[..]));
//!     rx.pop();
//! });
//! assert!(tx.push(1, &[b"ping"]));
//! bell.ring();
//! consumer.join().unwrap();
//! ```

pub mod atomic;
pub mod cma;
pub mod copy;
pub mod counter;
pub mod hint;
pub mod ring;
pub mod signal;
pub mod slot;
pub mod thread;
pub mod wait;
pub mod word;

/// Pads and aligns a value to the length of a cache line (re-export of
/// [`crossbeam_utils::CachePadded`]).
///
/// # Example
///
/// ```
/// use gex_sync::CachePadded;
/// use gex_sync::atomic::AtomicU64;
///
/// let head = CachePadded::new(AtomicU64::new(0));
/// assert!(std::mem::align_of_val(&head) >= 64);
/// ```
pub use crossbeam_utils::CachePadded;

#[cfg(all(test, not(gex_loom)))]
mod layout {
    use crate::ring::RingCtl;
    use crate::wait::Doorbell;
    use std::mem::{align_of, size_of};

    const _: () = assert!(size_of::<RingCtl>() % 64 == 0);
    const _: () = assert!(align_of::<RingCtl>() >= 64);
    // Exactly one padded line: the consumer's head and nothing else.
    const _: () =
        assert!(size_of::<RingCtl>() == size_of::<crate::CachePadded<crate::atomic::AtomicU64>>());
    const _: () = assert!(crate::ring::DATA_OFFSET == size_of::<RingCtl>());
    const _: () = assert!(size_of::<Doorbell>() == 64);
    const _: () = assert!(align_of::<Doorbell>() == 64);
    const _: () = assert!(size_of::<crate::counter::Counter>() % 64 == 0);
}
