//! Loom model of the ring protocol: run with
//! `RUSTFLAGS="--cfg gex_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p gex-sync --release --test loom_ring`.
//!
//! Tags live in a loom side table under `gex_loom` (see `gex_sync::ring`), with record bytes
//! mirrored into it, so loom explores stale tag/terminator/body words and the orderings of
//! the tag and head accesses; plain body bytes themselves are not checked by loom.
#![cfg(gex_loom)]

use gex_sync::ring::{self, record_size};
use loom::thread;

const CAP: usize = 256;

/// Three records in a 256-byte ring: the first two fill it (120 + 128 bytes + 8 slack), the
/// third needs the first one released (full condition) and wraps behind an 8-byte pad. The
/// first body's first word equals the tag that would be valid right after the third record,
/// so a consumer that polled stale bytes (a missing terminator) would see a fourth record.
fn bodies() -> [(u32, Vec<u8>); 3] {
    let end3 = (CAP + record_size(0)) as u64;
    let mut b1 = vec![0x11u8; 104];
    b1[..8].copy_from_slice(&(end3 + 1).to_le_bytes());
    [(1, b1), (2, vec![0x22u8; 112]), (3, Vec::new())]
}

#[test]
fn loom_ring_wrap_full_and_order() {
    assert_eq!(record_size(104) + record_size(112) + 8, CAP);
    loom::model(|| {
        let (mut tx, mut rx) = ring::channel(CAP);
        let producer = thread::spawn(move || {
            for (user, body) in bodies() {
                while !tx.push(user, &[&body]) {
                    thread::yield_now();
                }
            }
            tx
        });
        for (user, body) in bodies() {
            let got = loop {
                if let Some((u, b)) = rx.peek() {
                    break (u, b.to_vec());
                }
                thread::yield_now();
            };
            assert_eq!(got, (user, body));
            rx.pop();
        }
        // Nothing more is pushed; the word after the last record must read as empty even
        // before the join (it is the terminator, ordered before the last tag).
        assert!(!rx.has_data(), "stale bytes taken for a record");
        let mut tx = producer.join().unwrap();
        assert_eq!(rx.peek(), None, "stale bytes taken for a record");
        assert!(!rx.has_data());
        assert!(tx.is_empty());
    });
}

/// A cancelled reservation filled with would-be tags, then a commit shorter than reserved:
/// the consumer must see exactly the committed record and nothing after it.
#[test]
fn loom_ring_cancel_and_short_commit() {
    loom::model(|| {
        let (mut tx, mut rx) = ring::channel(CAP);
        let producer = thread::spawn(move || {
            let mut r = tx.reserve(64).unwrap();
            for (i, w) in r.body().chunks_exact_mut(8).enumerate() {
                // Tags valid at positions 16, 24, ... (where the words sit).
                w.copy_from_slice(&(16 + 8 * i as u64 + 1).to_le_bytes());
            }
            drop(r);
            let mut r = tx.reserve(64).unwrap();
            r.body()[..8].copy_from_slice(b"abcdefgh");
            r.commit(7, 8);
        });
        let got = loop {
            if let Some((u, b)) = rx.peek() {
                break (u, b.to_vec());
            }
            thread::yield_now();
        };
        assert_eq!(got, (7, b"abcdefgh".to_vec()));
        rx.pop();
        // The next word holds a would-be tag from the cancelled body unless the terminator,
        // ordered before the tag, overwrote it.
        assert!(!rx.has_data(), "stale bytes taken for a record");
        producer.join().unwrap();
        assert_eq!(rx.peek(), None);
    });
}

/// Six records of mixed sizes through two laps (two pads), the consumer checking
/// `has_data` as well as `peek`.
#[test]
fn loom_ring_two_laps() {
    const LENS: [usize; 6] = [104, 112, 0, 40, 100, 64];
    loom::model(|| {
        let (mut tx, mut rx) = ring::channel(CAP);
        let producer = thread::spawn(move || {
            for (i, &len) in LENS.iter().enumerate() {
                let body = vec![i as u8 + 1; len];
                while !tx.push(i as u32, &[&body]) {
                    thread::yield_now();
                }
            }
        });
        for (i, &len) in LENS.iter().enumerate() {
            while !rx.has_data() {
                thread::yield_now();
            }
            let (user, body) = rx.peek().expect("has_data promised a record");
            assert_eq!(user, i as u32);
            assert_eq!(body, &vec![i as u8 + 1; len][..]);
            rx.pop();
        }
        assert!(!rx.has_data());
        producer.join().unwrap();
        assert_eq!(rx.peek(), None);
    });
}
