//! Spin-then-block waiting on a process-shareable doorbell.
//!
//! A waiter checks a condition ("is there a record in my ring?") and, depending on its
//! [`WaitPolicy`], spins, sleeps on a futex, or spins for a while and then sleeps. Whoever
//! makes the condition true calls [`Doorbell::ring`] afterwards. The [`Doorbell`] is
//! `#[repr(C)]`, 64 bytes, 64-byte aligned and pointer-free, so it can live in a
//! `MAP_SHARED` page: the futex is a *shared* futex (no `FUTEX_PRIVATE_FLAG`), which the
//! kernel keys by the physical page, so waiter and ringer may be different processes.
//!
//! # Protocol (lost-wakeup free)
//!
//! Waiter, after the spin budget is used up:
//!
//! 1. `seen = word` (`Acquire`);
//! 2. `sleepers += 1` (`Release`, so step 1 happens before any ringer that sees step 2);
//! 3. `fence(SeqCst)`;
//! 4. if `ready()`: `sleepers -= 1`, done;
//! 5. `FUTEX_WAIT(word, seen, 100 ms)`; `sleepers -= 1`; check `ready()`; if still not
//!    ready, start over (including the policy's spin budget).
//!
//! Ringer, after publishing the work (e.g. the ring's `Release` tag store):
//!
//! 1. `fence(SeqCst)`;
//! 2. if `sleepers != 0` (`Acquire`): `word += 1`, `FUTEX_WAKE(word, all)`.
//!
//! The two `SeqCst` fences order "publish work; read sleepers" against "announce sleeper;
//! read work" (Dekker): either the waiter's `ready()` sees the work, or the ringer sees the
//! sleeper. In the second case the ringer's increment comes after the waiter's read of
//! `seen`, so the kernel either finds `word != seen` at `FUTEX_WAIT` time (the wait returns
//! at once) or the waiter is already queued and receives the wake. The 100 ms timeout is only
//! a safety net; correctness does not depend on it.
//!
//! **`may_block`.** A ringer whose waiter never sleeps should pay nothing: [`Doorbell::ring`]
//! first does one `Relaxed` load of the `may_block` flag and returns if it is false. The
//! waiter side declares with [`Doorbell::set_may_block`] whether it may ever sleep, once, at
//! setup, before the ringers start ringing (e.g. before the start-up handshake). A waiter
//! whose doorbell says `may_block == false` never sleeps even with a blocking policy: it
//! spins and yields the CPU (`sched_yield`) instead, so no wake-up can be lost. If
//! `may_block` is switched on while ringers are already active, a ringer may miss the first
//! sleeper; the waiter then wakes by the 100 ms safety net.
//!
//! # Model checking
//!
//! Under `--cfg gex_loom` the futex is emulated by a loom `Mutex` + `Condvar` inside the
//! doorbell: the wait locks, compares the word with `seen` and only then waits on the
//! condvar; the wake locks and notifies all. That is the futex's atomic compare-and-queue,
//! without spurious wake-ups and without the timeout, so a lost wake-up shows up in loom as a
//! deadlock. Timeouts are not modelled under loom.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use gex_sync::atomic::{AtomicBool, Ordering};
//! use gex_sync::wait::{Doorbell, WaitPolicy};
//!
//! let bell = Arc::new(Doorbell::new());
//! bell.set_may_block(true);
//! let flag = Arc::new(AtomicBool::new(false));
//!
//! let (b, f) = (bell.clone(), flag.clone());
//! let waiter = std::thread::spawn(move || {
//!     b.wait_until(WaitPolicy::Block, || f.load(Ordering::Acquire));
//! });
//! flag.store(true, Ordering::Release); // publish the work...
//! bell.ring(); // ...then ring
//! waiter.join().unwrap();
//! ```
//!
//! # Safety
//!
//! `unsafe` is used for [`Doorbell::init_in_place`], a plain write of a new value through a
//! caller-provided pointer (the caller guarantees validity and alignment), and, in Miri
//! builds only, for the futex system calls made through `libc::syscall` with the doorbell's
//! own word and a local timespec.

#![allow(unsafe_code)]

use std::fmt;
use std::time::{Duration, Instant};

use crate::atomic::{AtomicBool, AtomicU32, Ordering, fence};
use crate::hint::spin_loop;

/// How a waiter waits.
///
/// # Example
///
/// ```
/// use gex_sync::wait::{WaitPolicy, auto_policy};
///
/// assert_eq!(auto_policy(2, 4), WaitPolicy::Spin);
/// assert!(matches!(auto_policy(8, 2), WaitPolicy::SpinThenBlock { .. }));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitPolicy {
    /// Busy-poll until ready; never sleep. Lowest latency when every waiter has a core.
    Spin,
    /// Sleep on the doorbell as soon as the condition is false (no spinning).
    Block,
    /// Poll up to `spins` times, then sleep on the doorbell.
    SpinThenBlock {
        /// Number of polls (each with a spin-loop hint) before sleeping.
        spins: u32,
    },
}

/// Returns the default spin budget for [`WaitPolicy::SpinThenBlock`]: 1000 polls.
///
/// One poll with a spin-loop hint takes about 25 ns on the development machine (AMD EPYC),
/// so the budget is about 25 µs plus the cost of the condition, a little more than the
/// ~10 µs a futex sleep/wake round trip costs there.
///
/// # Example
///
/// ```
/// assert!(gex_sync::wait::default_spins() > 0);
/// ```
pub fn default_spins() -> u32 {
    1_000
}

/// Chooses a policy from the number of ranks on the host and the number of cores:
/// [`WaitPolicy::Spin`] when every rank can have a core, otherwise
/// [`WaitPolicy::SpinThenBlock`] with [`default_spins`].
///
/// # Example
///
/// ```
/// use gex_sync::wait::{WaitPolicy, auto_policy, default_spins};
///
/// assert_eq!(auto_policy(2, 2), WaitPolicy::Spin);
/// assert_eq!(
///     auto_policy(8, 2),
///     WaitPolicy::SpinThenBlock { spins: default_spins() }
/// );
/// ```
pub fn auto_policy(ranks_on_host: usize, cores: usize) -> WaitPolicy {
    if ranks_on_host <= cores.max(1) {
        WaitPolicy::Spin
    } else {
        WaitPolicy::SpinThenBlock {
            spins: default_spins(),
        }
    }
}

/// Longest single futex sleep; a safety net, not part of the protocol.
const SAFETY_NET: Duration = Duration::from_millis(100);

/// Polls between deadline checks while spinning.
const CLOCK_EVERY: u32 = 256;

/// A doorbell a waiter can sleep on and a producer can ring, within or across processes.
///
/// See the [module documentation](self) for the protocol. One doorbell usually belongs to
/// one waiter (e.g. the consumer side of one or more rings); any number of ringers may ring
/// it.
///
/// # Example
///
/// ```
/// use gex_sync::wait::{Doorbell, WaitPolicy};
/// use std::time::Duration;
///
/// let bell = Doorbell::new();
/// bell.set_may_block(true);
/// // Nothing rings and the condition stays false: times out.
/// assert!(!bell.wait_until_timeout(WaitPolicy::Block, Duration::from_millis(5), || false));
/// // Already-true conditions return at once.
/// bell.wait_until(WaitPolicy::Spin, || true);
/// ```
#[repr(C, align(64))]
pub struct Doorbell {
    /// The futex word; incremented by every ring that finds a sleeper.
    word: AtomicU32,
    /// Number of waiters that announced they are about to sleep.
    sleepers: AtomicU32,
    /// Whether the waiter side may ever sleep (set at setup).
    may_block: AtomicBool,
    /// Unit tests only: futex waits that ended by a `FUTEX_WAKE` (not a timeout).
    #[cfg(test)]
    woken: AtomicU32,
    /// Unit tests only: futex waits that ended by the safety-net timeout.
    #[cfg(test)]
    timed_out: AtomicU32,
    /// Loom-only futex emulation.
    #[cfg(gex_loom)]
    emu: FutexEmu,
}

#[cfg(gex_loom)]
#[derive(Debug, Default)]
struct FutexEmu {
    lock: loom::sync::Mutex<()>,
    cv: loom::sync::Condvar,
}

impl Doorbell {
    /// Creates a doorbell with no sleepers and `may_block == false`.
    pub fn new() -> Self {
        Self {
            word: AtomicU32::new(0),
            sleepers: AtomicU32::new(0),
            may_block: AtomicBool::new(false),
            #[cfg(test)]
            woken: AtomicU32::new(0),
            #[cfg(test)]
            timed_out: AtomicU32::new(0),
            #[cfg(gex_loom)]
            emu: FutexEmu::default(),
        }
    }

    /// Initialises a doorbell in place, e.g. in freshly mapped shared memory.
    ///
    /// # Safety
    ///
    /// `p` must be valid for writes of `size_of::<Doorbell>()` bytes and 64-byte aligned. Any
    /// previous value is overwritten without being dropped, and nobody may be using it.
    pub unsafe fn init_in_place(p: *mut Doorbell) {
        // SAFETY: the caller guarantees `p` is valid and aligned for a write of a `Doorbell`.
        unsafe { p.write(Doorbell::new()) }
    }

    /// Declares whether the waiter side may ever sleep on this doorbell.
    ///
    /// Call it from the waiter side at setup, before ringers start ringing. With `false`
    /// (the default) [`ring`](Self::ring) costs one `Relaxed` load and waits never sleep.
    pub fn set_may_block(&self, yes: bool) {
        self.may_block.store(yes, Ordering::SeqCst);
    }

    /// Returns the current `may_block` setting.
    pub fn may_block(&self) -> bool {
        self.may_block.load(Ordering::Relaxed)
    }

    /// Wakes the waiter if it sleeps or is about to. Call it after publishing the work the
    /// waiter's condition checks.
    ///
    /// If the waiter never blocks this is a single `Relaxed` load. Otherwise it is a
    /// `SeqCst` fence and a load, plus an increment and a `FUTEX_WAKE` system call only when
    /// a sleeper is announced.
    #[inline]
    pub fn ring(&self) {
        if self.may_block.load(Ordering::Relaxed) {
            self.ring_blocking();
        }
    }

    /// Like [`ring`](Self::ring), but also advances the [`epoch`](Self::epoch) when no
    /// sleeper is announced, so a waiter that compares epochs across its own checks
    /// cannot miss it (for conditions that the doorbell's waiters do not check
    /// themselves, such as a flag in other shared memory).
    ///
    /// The epoch advances even when the waiter never sleeps (`may_block == false`):
    /// such a waiter may still wait with a condition that compares epochs, yielding.
    pub fn wake(&self) {
        self.word.fetch_add(1, Ordering::Release);
        fence(Ordering::SeqCst);
        if self.sleepers.load(Ordering::Acquire) != 0 {
            self.futex_wake_all();
        }
    }

    /// The wake-up counter: it advances on every [`wake`](Self::wake) (and on a
    /// [`ring`](Self::ring) that finds a sleeper). `Acquire`: what the waker wrote before
    /// waking is visible once the new value is seen.
    pub fn epoch(&self) -> u32 {
        self.word.load(Ordering::Acquire)
    }

    #[inline(never)]
    fn ring_blocking(&self) {
        fence(Ordering::SeqCst);
        if self.sleepers.load(Ordering::Acquire) != 0 {
            self.word.fetch_add(1, Ordering::Release);
            self.futex_wake_all();
        }
    }

    /// Waits until `ready()` returns true, following `policy`.
    ///
    /// `ready` is called repeatedly (first before any waiting) and must be cheap and free of
    /// side effects that matter when repeated. It must observe the work with `Acquire` loads
    /// (or stronger) so that what it sees is ordered as the protocol needs.
    pub fn wait_until<F: FnMut() -> bool>(&self, policy: WaitPolicy, ready: F) {
        self.wait_impl(policy, None, ready);
    }

    /// Like [`wait_until`](Self::wait_until), but gives up after `timeout`. Returns whether
    /// `ready()` became true (it is checked once more at the deadline).
    ///
    /// Under `--cfg gex_loom` a sleeping waiter only wakes when rung.
    pub fn wait_until_timeout<F: FnMut() -> bool>(
        &self,
        policy: WaitPolicy,
        timeout: Duration,
        ready: F,
    ) -> bool {
        let deadline = Instant::now().checked_add(timeout);
        // A timeout too large for `Instant` is no timeout.
        self.wait_impl(policy, deadline, ready)
    }

    fn wait_impl<F: FnMut() -> bool>(
        &self,
        policy: WaitPolicy,
        deadline: Option<Instant>,
        mut ready: F,
    ) -> bool {
        if ready() {
            return true;
        }
        let expired = |d: Option<Instant>| d.is_some_and(|d| Instant::now() >= d);
        let spins = match policy {
            WaitPolicy::Spin => loop {
                for _ in 0..CLOCK_EVERY {
                    spin_loop();
                    if ready() {
                        return true;
                    }
                }
                if expired(deadline) {
                    return ready();
                }
            },
            WaitPolicy::Block => 0,
            WaitPolicy::SpinThenBlock { spins } => spins,
        };
        loop {
            for i in 1..=spins {
                spin_loop();
                if ready() {
                    return true;
                }
                if i % CLOCK_EVERY == 0 && expired(deadline) {
                    return ready();
                }
            }
            if !self.may_block.load(Ordering::Relaxed) {
                // Ringers skip the wake-up; sleeping could miss it. Yield instead.
                crate::thread::yield_now();
                if ready() {
                    return true;
                }
                if expired(deadline) {
                    return ready();
                }
                continue;
            }
            let nap = match deadline {
                None => SAFETY_NET,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => left.min(SAFETY_NET),
                    _ => return ready(),
                },
            };
            let seen = self.word.load(Ordering::Acquire);
            self.sleepers.fetch_add(1, Ordering::Release);
            fence(Ordering::SeqCst);
            if ready() {
                self.sleepers.fetch_sub(1, Ordering::Relaxed);
                return true;
            }
            self.futex_wait(seen, nap);
            self.sleepers.fetch_sub(1, Ordering::Relaxed);
            if ready() {
                return true;
            }
            if expired(deadline) {
                return ready();
            }
        }
    }

    /// Sleeps while `word == seen`, for at most `nap` (shared futex).
    #[cfg(not(any(gex_loom, miri)))]
    fn futex_wait(&self, seen: u32, nap: Duration) {
        use rustix::thread::futex;
        let ts = futex::Timespec {
            tv_sec: nap.as_secs() as futex::Secs,
            tv_nsec: nap.subsec_nanos() as futex::Nsecs,
        };
        // EAGAIN (word changed), EINTR and ETIMEDOUT all just mean "check again".
        let _r = futex::wait(&self.word, futex::Flags::empty(), seen, Some(&ts));
        #[cfg(test)]
        match _r {
            Ok(()) => self.woken.fetch_add(1, Ordering::Relaxed),
            Err(rustix::io::Errno::TIMEDOUT) => self.timed_out.fetch_add(1, Ordering::Relaxed),
            Err(_) => 0,
        };
    }

    /// Wakes every sleeper (shared futex).
    #[cfg(not(any(gex_loom, miri)))]
    fn futex_wake_all(&self) {
        use rustix::thread::futex;
        // Cannot fail for a valid address; nothing to do if it did.
        let _ = futex::wake(&self.word, futex::Flags::empty(), i32::MAX as u32);
    }

    /// Under Miri: the same `FUTEX_WAIT` through `libc::syscall`, with the argument types
    /// Miri's futex shim checks. rustix 1.1 passes the word as `*const AtomicU32`, which
    /// Miri (since its c-variadic type checks, August 2026) rejects as undefined behaviour
    /// where it expects `*mut u32` (docs/testing.md, "Miri").
    #[cfg(all(miri, not(gex_loom)))]
    fn futex_wait(&self, seen: u32, nap: Duration) {
        let ts = libc::timespec {
            tv_sec: nap.as_secs() as libc::time_t,
            tv_nsec: nap.subsec_nanos().into(),
        };
        // SAFETY: FUTEX_WAIT reads the aligned futex word and the timespec, both valid for
        // the whole call.
        let r = unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.word.as_ptr(),
                libc::FUTEX_WAIT,
                seen,
                &raw const ts,
            )
        };
        #[cfg(test)]
        if r == 0 {
            self.woken.fetch_add(1, Ordering::Relaxed);
        } else if std::io::Error::last_os_error().raw_os_error() == Some(libc::ETIMEDOUT) {
            self.timed_out.fetch_add(1, Ordering::Relaxed);
        }
        let _ = r;
    }

    /// Under Miri: `FUTEX_WAKE` through `libc::syscall` (see `futex_wait`).
    #[cfg(all(miri, not(gex_loom)))]
    fn futex_wake_all(&self) {
        // SAFETY: FUTEX_WAKE only uses the word's address.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.word.as_ptr(),
                libc::FUTEX_WAKE,
                i32::MAX,
            )
        };
    }

    /// Loom emulation: compare and wait atomically under the lock; no timeout.
    #[cfg(gex_loom)]
    fn futex_wait(&self, seen: u32, _nap: Duration) {
        let guard = self.emu.lock.lock().unwrap();
        if self.word.load(Ordering::Acquire) == seen {
            drop(self.emu.cv.wait(guard).unwrap());
        }
    }

    /// Loom emulation of `FUTEX_WAKE(all)`.
    #[cfg(gex_loom)]
    fn futex_wake_all(&self) {
        let _guard = self.emu.lock.lock().unwrap();
        self.emu.cv.notify_all();
    }
}

impl Default for Doorbell {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Doorbell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Doorbell")
            .field("word", &self.word.load(Ordering::Relaxed))
            .field("sleepers", &self.sleepers.load(Ordering::Relaxed))
            .field("may_block", &self.may_block.load(Ordering::Relaxed))
            .finish()
    }
}

#[cfg(all(test, not(gex_loom)))]
mod tests;
