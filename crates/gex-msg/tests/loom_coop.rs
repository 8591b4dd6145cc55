//! Loom models of the cooperative copy's protocol (`gex_msg::coop`): run with
//! `RUSTFLAGS="--cfg gex_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p gex-msg --release --test loom_coop`
//! (ci/loom.sh runs every `tests/loom_*.rs`).
//!
//! The protocol is the real code over a block of loom atomics; the copies are modelled
//! by per-chunk counters (who copied which chunk, how often) and a flag the sender sets
//! when its call would return (the caller's slice is free again). Each model checks
//! that every chunk is copied exactly once when the receiver reports `Read`, that no
//! chunk is copied after the sender's call ended, and that both sides agree on the
//! outcome (read, withdrawn, failed). `a_failed_chunk_fails_both` once caught its own
//! model's assumption that the receiver copies chunk 0: the sender may claim it.
#![cfg(gex_loom)]

use gex_msg::coop::{
    Block, LOAN_WORDS, Lender, Received, Step, chunk_len, chunks, receive, sender_step,
};
use gex_sync::atomic::{AtomicBool, AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;

/// A message of three chunks.
const LEN: usize = 3 * 32 * 1024;

struct World {
    words: Vec<AtomicU64>,
    /// Copies of each chunk.
    copied: Vec<AtomicU64>,
    /// The sender's call ended: nobody may read its slice any more.
    released: AtomicBool,
    /// Chunks whose copy failed at the receiver.
    receiver_failed: AtomicU64,
}

impl World {
    fn new() -> Arc<World> {
        assert_eq!(chunks(LEN), 3);
        assert_eq!(chunk_len(LEN), 32 * 1024);
        Arc::new(World {
            words: (0..LOAN_WORDS).map(|_| AtomicU64::new(0)).collect(),
            copied: (0..3).map(|_| AtomicU64::new(0)).collect(),
            released: AtomicBool::new(false),
            receiver_failed: AtomicU64::new(0),
        })
    }

    fn block(&self) -> Block<'_> {
        Block::new(&self.words).unwrap()
    }

    /// One chunk copied (by either side), while the slice is still lent.
    fn copy(&self, r: std::ops::Range<usize>) {
        assert!(
            !self.released.load(Ordering::Acquire),
            "a chunk copied after the send ended"
        );
        self.copied[r.start / chunk_len(LEN)].fetch_add(1, Ordering::Relaxed);
    }

    fn each_once(&self) -> bool {
        self.copied.iter().all(|c| c.load(Ordering::Relaxed) == 1)
    }

    fn none(&self) -> bool {
        self.copied.iter().all(|c| c.load(Ordering::Relaxed) == 0)
    }
}

/// The sender: runs its steps until the loan ends (withdrawing from the start when
/// `expired`), then releases the slice. Returns how the loan ended.
fn sender(w: &World, generation: u64, expired: bool) -> Step {
    let end = loop {
        let s = sender_step(w.block(), generation, LEN, expired, |r, _dst| {
            w.copy(r);
            true
        });
        if !s.pending() {
            break s;
        }
        thread::yield_now();
    };
    w.released.store(true, Ordering::Release);
    end
}

/// The receiver: claims and copies (every copy it makes fails with `fail`).
fn receiver(w: &World, generation: u64, fail: bool) -> Received {
    let mut buf = vec![0u8; 0];
    // The model copies no bytes: an empty buffer of the message's length is not
    // needed, only the ranges (the protocol takes the length from the buffer).
    buf.resize(LEN, 0);
    receive(
        w.block(),
        generation,
        &mut buf,
        0,
        |r, _out| {
            w.copy(r);
            if fail {
                w.receiver_failed.fetch_add(1, Ordering::Relaxed);
            }
            !fail
        },
        || true,
    )
}

/// The model of a fresh lender's loan raced: a receiver thread (its copies failing if
/// `fail`) against the sender (its loan `expired` or not); `check` gets the world and
/// their outcomes in every execution.
fn race_model(
    fail: bool,
    expired: bool,
    check: impl Fn(&World, Step, Received) + Send + Sync + 'static,
) {
    loom::model(move || {
        let w = World::new();
        let g = Lender::default().offer(w.block());
        let w2 = w.clone();
        let rx = thread::spawn(move || receiver(&w2, g, fail));
        let s = sender(&w, g, expired);
        check(&w, s, rx.join().unwrap());
    });
}

#[test]
fn read_with_help() {
    race_model(false, false, |w, s, r| {
        assert_eq!((s, r), (Step::Done, Received::Read));
        assert!(w.each_once());
    });
}

#[test]
fn withdraw_races_claim() {
    race_model(false, true, |w, s, r| match (s, r) {
        (Step::Withdrawn, Received::NotLent) => assert!(w.none()),
        (Step::Done, Received::Read) => assert!(w.each_once()),
        other => panic!("disagree: {other:?}"),
    });
}

#[test]
fn a_failed_chunk_fails_both() {
    race_model(true, false, |w, s, r| {
        // Every copy the receiver makes fails: if it made one, both sides see the
        // failure; if the sender claimed every chunk first, the loan was read.
        if w.receiver_failed.load(Ordering::Relaxed) > 0 {
            assert_eq!((s, r), (Step::Failed, Received::Failed));
        } else {
            assert_eq!((s, r), (Step::Done, Received::Read));
        }
        // Every chunk was still copied once (the receiver counts them all before it
        // ends the loan), and none after the sender's call ended.
        assert!(w.each_once());
    });
}

#[test]
fn a_stale_request_claims_nothing() {
    loom::model(|| {
        let w = World::new();
        let mut lender = Lender::default();
        let old = lender.offer(w.block());
        // The old loan is withdrawn; a new one is offered; a receiver holding the old
        // request races with the new loan's receiver.
        assert_eq!(
            sender_step(w.block(), old, LEN, true, |_, _| true),
            Step::Withdrawn
        );
        let g = lender.offer(w.block());
        let w2 = w.clone();
        let stale = thread::spawn(move || receiver(&w2, old, false));
        let r = receiver(&w, g, false);
        assert_eq!(stale.join().unwrap(), Received::NotLent);
        assert_eq!(r, Received::Read);
        assert!(w.each_once());
        assert_eq!(sender(&w, g, false), Step::Done);
    });
}
