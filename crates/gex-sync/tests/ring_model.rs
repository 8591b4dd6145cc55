//! Random operation sequences on small rings, checked against a `VecDeque` model that
//! implements the placement rules of the ring protocol (see `gex_sync::ring`).
#![cfg(not(gex_loom))]

use std::collections::VecDeque;

use gex_sync::ring::{self, Consumer, Producer, max_body, record_size};
use proptest::prelude::*;

/// The spec of the ring's space accounting, written independently of the implementation.
struct Model {
    cap: u64,
    /// Producer position.
    tail: u64,
    /// Consumer's published position (what the producer may reuse up to).
    head: u64,
    /// Consumer's released position (published lazily: a quarter ring at a time, or
    /// when a peek finds the ring empty).
    consumed: u64,
    /// Published, unreleased records: (user, body, position just past the record).
    q: VecDeque<(u32, Vec<u8>, u64)>,
}

impl Model {
    fn new(cap: usize) -> Self {
        Model {
            cap: cap as u64,
            tail: 0,
            head: 0,
            consumed: 0,
            q: VecDeque::new(),
        }
    }

    /// Where a record with `len` body bytes goes: `Some(position)` if it fits now.
    fn place(&self, len: usize) -> Option<u64> {
        let size = record_size(len) as u64;
        let off = self.tail % self.cap;
        let pos = if off + size <= self.cap {
            self.tail
        } else {
            self.tail + (self.cap - off)
        };
        // The record and the next record's 8-byte tag word must lie in free space.
        (pos + size + 8 <= self.head + self.cap).then_some(pos)
    }

    fn publish(&mut self, user: u32, body: Vec<u8>, pos: u64) {
        let end = pos + record_size(body.len()) as u64;
        self.q.push_back((user, body, end));
        self.tail = end;
    }
}

#[derive(Clone, Debug)]
enum Fill {
    /// Pseudo-random bytes from a seed.
    Random(u8),
    /// Every word equals a tag that would be valid at its own position `laps` laps later
    /// (0 = the current lap): stale data the consumer must never take for a record.
    TagLike(u64),
}

#[derive(Clone, Debug)]
enum Op {
    /// Reserve `len`, fill, then commit the first `commit` bytes or cancel (`None`).
    Reserve {
        len: usize,
        fill: Fill,
        commit: Option<(u32, usize)>,
    },
    /// Gather-push `len` bytes split at `split`.
    Push {
        user: u32,
        len: usize,
        split: usize,
        seed: u8,
    },
    Peek,
    PeekPop,
    ProducerIsEmpty,
}

fn len_strategy(max: usize) -> impl Strategy<Value = usize> {
    prop_oneof![
        3 => 0..=max,
        1 => Just(max),
        1 => Just(0usize),
        1 => 0..=24usize,
    ]
}

fn op_strategy(max: usize) -> impl Strategy<Value = Op> {
    let fill = prop_oneof![
        any::<u8>().prop_map(Fill::Random),
        (0u64..3).prop_map(Fill::TagLike)
    ];
    prop_oneof![
        3 => (len_strategy(max), fill, proptest::option::weighted(0.8, (any::<u32>(), any::<prop::sample::Index>())))
            .prop_map(|(len, fill, c)| Op::Reserve {
                len,
                fill,
                commit: c.map(|(u, i)| (u, if len == 0 { 0 } else { i.index(len + 1) })),
            }),
        3 => (any::<u32>(), len_strategy(max), any::<prop::sample::Index>(), any::<u8>())
            .prop_map(|(user, len, i, seed)| Op::Push { user, len, split: i.index(len + 1), seed }),
        1 => Just(Op::Peek),
        4 => Just(Op::PeekPop),
        1 => Just(Op::ProducerIsEmpty),
    ]
}

fn random_bytes(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

fn check_consumer(rx: &mut Consumer, m: &mut Model) {
    assert_eq!(rx.has_data(), !m.q.is_empty());
    let got = rx.peek().map(|(u, b)| (u, b.to_vec()));
    let want = m.q.front().map(|(u, b, _)| (*u, b.clone()));
    assert_eq!(got, want);
    if m.q.is_empty() {
        // An empty peek publishes everything consumed.
        m.head = m.consumed;
    }
}

fn run(cap: usize, ops: Vec<Op>) {
    let (mut tx, mut rx): (Producer, Consumer) = ring::channel(cap);
    let mut m = Model::new(cap);
    assert_eq!(tx.max_body(), max_body(cap));
    for op in ops {
        match op {
            Op::Reserve { len, fill, commit } => {
                let want = m.place(len);
                let r = tx.reserve(len);
                assert_eq!(r.is_some(), want.is_some(), "reserve({len}) vs model");
                let (Some(mut r), Some(pos)) = (r, want) else {
                    continue;
                };
                let body = r.body();
                assert_eq!(body.len(), len);
                match fill {
                    Fill::Random(seed) => body.copy_from_slice(&random_bytes(seed, len)),
                    Fill::TagLike(laps) => {
                        let body_pos = pos + ring::RECORD_HEADER as u64;
                        for (i, w) in body.chunks_mut(8).enumerate() {
                            let tag = body_pos + 8 * i as u64 + 1 + laps * m.cap;
                            w.copy_from_slice(&tag.to_le_bytes()[..w.len()]);
                        }
                    }
                }
                let content = body.to_vec();
                assert_eq!(r.body_ptr() as usize % 8, 0);
                match commit {
                    Some((user, n)) => {
                        r.commit(user, n);
                        m.publish(user, content[..n].to_vec(), pos);
                    }
                    None => drop(r),
                }
            }
            Op::Push {
                user,
                len,
                split,
                seed,
            } => {
                let body = random_bytes(seed, len);
                let want = m.place(len);
                let ok = tx.push(user, &[&body[..split], &body[split..]]);
                assert_eq!(ok, want.is_some(), "push({len}) vs model");
                if let Some(pos) = want {
                    m.publish(user, body, pos);
                }
            }
            Op::Peek => check_consumer(&mut rx, &mut m),
            Op::PeekPop => {
                check_consumer(&mut rx, &mut m);
                if let Some((_, _, end)) = m.q.pop_front() {
                    rx.pop();
                    m.consumed = end;
                    if m.consumed - m.head >= m.cap / 4 {
                        m.head = m.consumed;
                    }
                }
            }
            Op::ProducerIsEmpty => assert_eq!(tx.is_empty(), m.head == m.tail),
        }
        // Back-pressure only when really full: an empty, fully published ring takes any
        // legal record.
        if m.q.is_empty() && m.head == m.consumed {
            assert!(m.place(max_body(cap)).is_some());
        }
    }
    // Drain and compare everything that is left.
    while let Some((user, body, end)) = m.q.pop_front() {
        assert_eq!(rx.peek().map(|(u, b)| (u, b.to_vec())), Some((user, body)));
        rx.pop();
        m.consumed = end;
    }
    assert_eq!(rx.peek(), None);
    assert!(tx.is_empty());
    assert!(
        tx.push(0, &[&vec![1u8; max_body(cap)]]),
        "empty ring rejects max_body"
    );
}

proptest! {
    // 8 cases under Miri, where one takes seconds.
    #![proptest_config(ProptestConfig { cases: if cfg!(miri) { 8 } else { 512 }, ..ProptestConfig::default() })]

    #[test]
    fn ring_256_matches_model(ops in proptest::collection::vec(op_strategy(max_body(256)), 1..300)) {
        run(256, ops);
    }

    #[test]
    fn ring_4096_matches_model(ops in proptest::collection::vec(op_strategy(max_body(4096)), 1..300)) {
        run(4096, ops);
    }
}

/// The model's accounting itself: a ring is never declared full while it has room for the
/// record, the pad and the slack word.
#[test]
fn model_sanity() {
    let m = Model::new(256);
    assert_eq!(m.place(112), Some(0));
    let mut m = Model::new(256);
    m.tail = 136;
    m.head = 136;
    assert_eq!(m.place(112), Some(256), "wraps with a 120-byte pad");
    m.tail = 128;
    m.head = 128;
    assert_eq!(m.place(112), Some(128), "fits exactly before the end");
}
