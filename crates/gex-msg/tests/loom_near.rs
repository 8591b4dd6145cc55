//! Loom models of the near path's queues (`gex_msg::near`): run with
//! `RUSTFLAGS="--cfg gex_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p gex-msg --release --test loom_near`
//! (ci/loom.sh runs every `tests/loom_*.rs`).
//!
//! The queues are the real code; the models use queues of 1 or 2 slots so that a few
//! messages reach the full queue and the reuse of removed slots. Each model checks
//! that no message is lost, none is received twice, and every pair's messages come in
//! sending order, with their bytes and headers whole.
#![cfg(gex_loom)]

use gex_msg::near::{Consumer, Header, PAYLOAD_MAX, Popped, Producer, Pushed, Queue};
use gex_sync::atomic::AtomicU64;
use loom::sync::{Arc, Mutex};
use loom::thread;
use std::collections::{BTreeMap, VecDeque};

/// The AM path of the fallback model: (sequence number, bytes) in sending order.
type AmPath = VecDeque<(u32, [u8; 9])>;

fn queue_words(slots: usize) -> Arc<Vec<AtomicU64>> {
    Arc::new(
        (0..Queue::words_for(slots))
            .map(|_| AtomicU64::new(0))
            .collect(),
    )
}

/// Message `i` of producer `p`: 9 bytes (two payload words), all derived from both.
fn body(p: u32, i: u32) -> [u8; 9] {
    let x = (p * 16 + i) as u8;
    [x, x ^ 1, x ^ 2, x ^ 3, x ^ 4, x ^ 5, x ^ 6, x ^ 7, x ^ 8]
}

/// Pushes messages `0..n` of producer `p`, retrying (yielding) while the queue is full.
fn produce(words: &[AtomicU64], slots: usize, p: u32, n: u32) {
    let q = Queue::with_slots(words, slots).unwrap();
    let mut tx = Producer::default();
    for i in 0..n {
        let h = Header {
            tag: p,
            ctx: 7,
            seq: i,
        };
        loop {
            match tx.push(q, h, &body(p, i)) {
                Pushed::Sent => break,
                Pushed::Full => thread::yield_now(),
                other => panic!("push refused: {other:?}"),
            }
        }
    }
}

/// Checks a popped message of producer `p` and returns its sequence number.
fn check(p: u32, h: Header, len: usize, buf: &[u8; PAYLOAD_MAX]) -> u32 {
    assert_eq!((h.tag, h.ctx, len), (p, 7, 9));
    assert_eq!(buf[..9], body(p, h.seq));
    h.seq
}

/// One producer, one consumer, a queue of 2 slots, 3 messages: the producer fills
/// the queue and reuses the slot the consumer removed first; FIFO, none lost or
/// twice.
#[test]
fn loom_near_spsc_fifo_through_full_queue() {
    loom::model(|| {
        let words = queue_words(2);
        let w = words.clone();
        let t = thread::spawn(move || produce(&w, 2, 0, 3));
        let q = Queue::with_slots(&words, 2).unwrap();
        let mut rx = Consumer::default();
        let mut buf = [0u8; PAYLOAD_MAX];
        let mut next = 0;
        while next < 3 {
            match rx.pop(q, &mut buf) {
                Popped::Msg(h, len) => {
                    assert_eq!(check(0, h, len, &buf), next, "FIFO");
                    next += 1;
                }
                Popped::Empty => thread::yield_now(),
                Popped::Corrupt(_) => panic!("an honest producer's slot refused"),
            }
        }
        t.join().unwrap();
        assert_eq!(rx.pop(q, &mut buf), Popped::Empty, "a message twice");
    });
}

/// Any-source probing: two producers, each with its own 2-slot queue and 2
/// messages, and one consumer probing both queues in turn (as an any-source receive
/// does) with `ready` before `pop`, yielding only after a round that found nothing:
/// per-pair FIFO, every message exactly once. (Producers that also wait for room
/// make loom's branch count explode with three spinning threads; the full queue
/// and slot reuse are the other two models'.)
#[test]
fn loom_near_any_source_two_queues() {
    loom::model(|| {
        let qs = [queue_words(2), queue_words(2)];
        let ts: Vec<_> = (0..2u32)
            .map(|p| {
                let w = qs[p as usize].clone();
                thread::spawn(move || produce(&w, 2, p, 2))
            })
            .collect();
        let mut rx = [Consumer::default(); 2];
        let mut next = [0u32; 2];
        let mut buf = [0u8; PAYLOAD_MAX];
        while next != [2, 2] {
            let mut got = false;
            for p in 0..2 {
                let q = Queue::with_slots(&qs[p], 2).unwrap();
                if !rx[p].ready(q) {
                    continue;
                }
                match rx[p].pop(q, &mut buf) {
                    Popped::Msg(h, len) => {
                        assert_eq!(check(p as u32, h, len, &buf), next[p], "FIFO of pair {p}");
                        next[p] += 1;
                        got = true;
                    }
                    other => panic!("ready, then {other:?}"),
                }
            }
            if !got {
                thread::yield_now();
            }
        }
        for t in ts {
            t.join().unwrap();
        }
        for p in 0..2 {
            let q = Queue::with_slots(&qs[p], 2).unwrap();
            assert!(!rx[p].ready(q), "a message twice");
        }
    });
}

/// The fallback: a producer that finds its 1-slot queue full sends by another way
/// (a channel standing for the AM path) instead of waiting; the consumer takes both
/// ways and restores the order by sequence number (as the layer's `Reorder` does):
/// every message exactly once, released in sending order.
#[test]
fn loom_near_full_queue_falls_back_in_order() {
    loom::model(|| {
        let words = queue_words(1);
        let am: Arc<Mutex<AmPath>> = Arc::new(Mutex::new(VecDeque::new()));
        let (w, a) = (words.clone(), am.clone());
        let t = thread::spawn(move || {
            let q = Queue::with_slots(&w, 1).unwrap();
            let mut tx = Producer::default();
            for i in 0..3u32 {
                let h = Header {
                    tag: 0,
                    ctx: 7,
                    seq: i,
                };
                match tx.push(q, h, &body(0, i)) {
                    Pushed::Sent => {}
                    Pushed::Full => a.lock().unwrap().push_back((i, body(0, i))),
                    other => panic!("push refused: {other:?}"),
                }
            }
        });
        let q = Queue::with_slots(&words, 1).unwrap();
        let mut rx = Consumer::default();
        let mut buf = [0u8; PAYLOAD_MAX];
        let mut held = BTreeMap::new();
        let mut released = Vec::new();
        while released.len() < 3 {
            let mut got = false;
            if let Popped::Msg(h, len) = rx.pop(q, &mut buf) {
                let seq = check(0, h, len, &buf);
                assert!(held.insert(seq, ()).is_none(), "message {seq} twice");
                got = true;
            }
            if let Some((seq, b)) = am.lock().unwrap().pop_front() {
                assert_eq!(b, body(0, seq));
                assert!(held.insert(seq, ()).is_none(), "message {seq} twice");
                got = true;
            }
            while held.remove(&(released.len() as u32)).is_some() {
                released.push(released.len() as u32);
            }
            if !got {
                thread::yield_now();
            }
        }
        t.join().unwrap();
        assert_eq!(released, [0, 1, 2]);
        assert!(held.is_empty() && am.lock().unwrap().is_empty());
        assert_eq!(rx.pop(q, &mut buf), Popped::Empty, "a message twice");
    });
}
