//! Loom model of the doorbell protocol: run with
//! `RUSTFLAGS="--cfg gex_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p gex-sync --release --test loom_doorbell`.
//!
//! Under `gex_loom` the futex is a loom mutex + condvar that compares the word under the lock
//! and has neither spurious wake-ups nor a timeout, so a lost wake-up is a loom deadlock.
#![cfg(gex_loom)]

use gex_sync::atomic::{AtomicBool, AtomicU32, Ordering};
use gex_sync::wait::{Doorbell, WaitPolicy};
use loom::sync::Arc;
use loom::thread;

/// One waiter with `Block`, one ringer: the waiter must wake.
#[test]
fn loom_doorbell_block_no_lost_wakeup() {
    loom::model(|| {
        let bell = Arc::new(Doorbell::new());
        bell.set_may_block(true);
        let flag = Arc::new(AtomicBool::new(false));
        let ringer = {
            let (bell, flag) = (bell.clone(), flag.clone());
            thread::spawn(move || {
                flag.store(true, Ordering::Release);
                bell.ring();
            })
        };
        bell.wait_until(WaitPolicy::Block, || flag.load(Ordering::Acquire));
        assert!(flag.load(Ordering::Relaxed));
        ringer.join().unwrap();
    });
}

/// Two rings in a row with a short spin first; the waiter needs both.
#[test]
fn loom_doorbell_spin_then_block_two_rings() {
    loom::model(|| {
        let bell = Arc::new(Doorbell::new());
        bell.set_may_block(true);
        let n = Arc::new(AtomicU32::new(0));
        let ringer = {
            let (bell, n) = (bell.clone(), n.clone());
            thread::spawn(move || {
                for _ in 0..2 {
                    n.fetch_add(1, Ordering::Release);
                    bell.ring();
                }
            })
        };
        bell.wait_until(WaitPolicy::SpinThenBlock { spins: 1 }, || {
            n.load(Ordering::Acquire) == 2
        });
        ringer.join().unwrap();
    });
}
