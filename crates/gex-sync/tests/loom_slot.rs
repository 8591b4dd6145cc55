//! Loom model of the one-shot completion slot: run with
//! `RUSTFLAGS="--cfg gex_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p gex-sync --release --test loom_slot`.
#![cfg(gex_loom)]

use gex_sync::atomic::{AtomicU32, Ordering};
use gex_sync::slot::{SlotPool, Taken, pair};
use loom::sync::Arc;
use loom::thread;

/// A value completed on one thread is seen whole by a waiter polling on another, and
/// data written before completion is visible after it.
#[test]
fn loom_slot_complete_then_take() {
    loom::model(|| {
        let data = Arc::new(AtomicU32::new(0));
        let (c, mut w) = pair::<u32>();
        let d = data.clone();
        let t = thread::spawn(move || {
            d.store(5, Ordering::Relaxed);
            c.complete(7);
        });
        loop {
            match w.take() {
                Taken::Done(v) => {
                    assert_eq!(v, 7);
                    assert_eq!(data.load(Ordering::Relaxed), 5);
                    break;
                }
                Taken::Pending => thread::yield_now(),
                Taken::Abandoned => panic!("abandoned"),
            }
        }
        t.join().unwrap();
    });
}

/// A completer dropped on another thread abandons: the waiter ends.
#[test]
fn loom_slot_abandoned() {
    loom::model(|| {
        let (c, mut w) = pair::<u32>();
        let t = thread::spawn(move || drop(c));
        loop {
            match w.take() {
                Taken::Abandoned => break,
                Taken::Pending => thread::yield_now(),
                Taken::Done(_) => panic!("nothing was completed"),
            }
        }
        t.join().unwrap();
    });
}

struct Count(Arc<AtomicU32>);
impl Drop for Count {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// A value kept by an abandoning waiter is dropped exactly once, after the completer
/// is done, whichever thread drops last.
#[test]
fn loom_slot_kept_value_outlives_waiter() {
    loom::model(|| {
        let drops = Arc::new(AtomicU32::new(0));
        let (c, w) = pair::<u32>();
        let t = thread::spawn(move || c.complete(1));
        w.abandon_keeping(Box::new(Count(drops.clone())));
        t.join().unwrap();
        assert_eq!(drops.load(Ordering::Relaxed), 1);
    });
}

/// The pool recycles a slot only once both handles are gone, and a recycled slot
/// starts pending.
#[test]
fn loom_slot_pool_recycles_only_free_slots() {
    loom::model(|| {
        let mut pool = SlotPool::<u32>::default();
        let (c, mut w) = pool.pair();
        let t = thread::spawn(move || c.complete(2));
        t.join().unwrap();
        assert_eq!(w.take(), Taken::Done(2));
        pool.recycle(w);
        assert_eq!(pool.free(), 1);
        let (c2, w2) = pool.pair();
        assert!(!w2.is_done());
        drop(c2);
        assert!(w2.is_done());
    });
}
