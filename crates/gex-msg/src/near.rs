//! The near path's queues: one single-producer single-consumer queue of fixed slots
//! per (sender, receiver) pair of ranks that share memory, in the receiver's
//! auxiliary area (seed 004, TMPI: per-pair queues, enqueue-and-probe).
//!
//! The queue is plain words ([`AtomicU64`] of gex-sync's shim, so loom can explore it:
//! `tests/loom_near.rs`), with no pointer in it, because between processes the memory
//! is shared and mapped at different addresses. Layout of one queue
//! ([`QUEUE_WORDS`] words):
//!
//! | words | what | written by |
//! |---|---|---|
//! | `0` (own cache line) | `head`: how many messages the consumer removed | consumer |
//! | per slot `i` (`SLOTS` slots of [`SLOT_WORDS`] words, 64-byte aligned): `0` | `stamp`: `n + 1` when the slot holds message `n` of the pair | producer |
//! | slot `1` | length (low 32 bits), tag (high 32 bits) | producer |
//! | slot `2` | context (low), the pair's sequence number (high) | producer |
//! | slot `3..` | the payload, [`PAYLOAD_MAX`] bytes at most, little-endian words | producer |
//!
//! The protocol (each side keeps its own index privately, so what the other side
//! writes is only ever *read*):
//! - **enqueue** ([`Producer::push`]): message `n` (the producer's private tail) goes
//!   to slot `n % SLOTS` if `n - head < SLOTS` (the producer re-reads `head`,
//!   `Acquire`, only when its cached copy says the queue is full); payload and header
//!   words are stored `Relaxed`, then `stamp = n + 1` with `Release`.
//! - **probe** ([`Consumer::ready`], [`Consumer::pop`]): the consumer's private head
//!   `h` names the slot to look at; the message is there when its stamp (`Acquire`)
//!   is `h + 1` (a stamp of the previous lap is `h + 1 - SLOTS`).
//! - **removal**: after copying the message out, the consumer publishes `head = h + 1`
//!   (`Release`), which hands the slot back to the producer: its reads of the slot
//!   happen before the producer's next writes to it. This is the whole of TMPI's
//!   "conservative reference counting" here: a slot has one reader, and its count is
//!   the head word.
//!
//! **A lying peer.** Every rank of the host can write the area. Nothing read from it is
//! trusted: a length above [`PAYLOAD_MAX`] is refused ([`Popped::Corrupt`], the slot
//! is skipped), a `head` that says more than `SLOTS` messages are queued, or that
//! runs ahead of the producer, is refused ([`Pushed::BadHead`], the producer sends by
//! another way), and a stamp other than the expected one reads as "empty". A liar can
//! forge, drop, garble or stall messages of the queues it writes, as it could on any
//! shared-memory transport, but cannot make either side read or write out of bounds.
//!
//! ```
//! use gex_msg::near::{Consumer, Header, Popped, Producer, Pushed, Queue, PAYLOAD_MAX, QUEUE_WORDS};
//! use gex_sync::atomic::AtomicU64;
//!
//! let words: Vec<AtomicU64> = (0..QUEUE_WORDS).map(|_| AtomicU64::new(0)).collect();
//! let q = Queue::new(&words).unwrap();
//! let (mut tx, mut rx) = (Producer::default(), Consumer::default());
//! let h = Header { tag: 5, ctx: 0, seq: 0 };
//! assert_eq!(tx.push(q, h, b"hello"), Pushed::Sent);
//! let mut buf = [0u8; PAYLOAD_MAX];
//! assert_eq!(rx.pop(q, &mut buf), Popped::Msg(h, 5));
//! assert_eq!(&buf[..5], b"hello");
//! assert_eq!(rx.pop(q, &mut buf), Popped::Empty);
//! ```

use gex_sync::atomic::{AtomicU64, Ordering};

/// Words of one slot (128 bytes: two cache lines; a message of up to 40 bytes
/// touches only the first).
pub const SLOT_WORDS: usize = 16;
/// Header words of a slot (stamp, length and tag, context and sequence number).
const HDR_WORDS: usize = 3;
/// The largest message the near path carries (bytes); larger ones take the AM path.
pub const PAYLOAD_MAX: usize = (SLOT_WORDS - HDR_WORDS) * 8;
/// Slots of one queue: messages a sender may have queued to one receiver before it
/// falls back to the AM path (back-pressure).
pub const SLOTS: usize = 16;
/// Words before the first slot: the consumer's `head`, alone on its cache line.
const HEAD_WORDS: usize = 8;
/// Words of one queue.
pub const QUEUE_WORDS: usize = HEAD_WORDS + SLOTS * SLOT_WORDS;
/// Queues in an endpoint's area: senders whose host-local index (their position among
/// the ranks of the receiver's host, in rank order) is below this use the near path;
/// the others always use the AM path.
pub const QUEUES: usize = 32;
/// Bytes of the layer's auxiliary slice ([`Msg`](crate::Msg)'s `AUX_BYTES`): 67,584.
pub const AREA_BYTES: usize = QUEUES * QUEUE_WORDS * 8;

/// The envelope of a queued message (its source is the queue's sender).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Header {
    /// The message's tag.
    pub tag: u32,
    /// Its context (communicator id).
    pub ctx: u32,
    /// The pair's sequence number (shared with the AM path: the receiver restores the
    /// sender's order across both paths).
    pub seq: u32,
}

/// One queue: [`QUEUE_WORDS`] words ([`SLOTS`] slots) in a receiver's auxiliary area,
/// or fewer slots for a model ([`with_slots`](Self::with_slots)).
#[derive(Clone, Copy, Debug)]
pub struct Queue<'a> {
    words: &'a [AtomicU64],
    /// Slots minus one (a power of two minus one).
    mask: u64,
}

impl<'a> Queue<'a> {
    /// The queue in `words`; `None` unless `words` has exactly [`QUEUE_WORDS`] words.
    #[inline(always)]
    pub fn new(words: &'a [AtomicU64]) -> Option<Queue<'a>> {
        Self::with_slots(words, SLOTS)
    }

    /// A queue of `slots` slots (a power of two, at most [`SLOTS`]) in `words`, which
    /// must hold exactly that many (the loom models use 1 or 2 slots, so that they
    /// reach the full queue and slot reuse in few steps).
    #[inline(always)]
    pub fn with_slots(words: &'a [AtomicU64], slots: usize) -> Option<Queue<'a>> {
        (slots.is_power_of_two()
            && slots <= SLOTS
            && words.len() == HEAD_WORDS + slots * SLOT_WORDS)
            .then_some(Queue {
                words,
                mask: slots as u64 - 1,
            })
    }

    /// The number of words of a queue of `slots` slots.
    pub const fn words_for(slots: usize) -> usize {
        HEAD_WORDS + slots * SLOT_WORDS
    }

    #[inline(always)]
    fn slots(self) -> u64 {
        self.mask + 1
    }

    #[inline(always)]
    fn head(self) -> &'a AtomicU64 {
        &self.words[0]
    }

    /// The words of slot `n % slots`.
    #[inline(always)]
    fn slot(self, n: u64) -> &'a [AtomicU64] {
        let at = HEAD_WORDS + (n & self.mask) as usize * SLOT_WORDS;
        &self.words[at..at + SLOT_WORDS]
    }
}

/// What [`Producer::push`] did. Only [`Sent`](Pushed::Sent) queued the message; the
/// others are back-pressure or refusals: send it by another way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pushed {
    /// Queued.
    Sent,
    /// Every slot is taken (the consumer has not removed enough messages).
    Full,
    /// Longer than [`PAYLOAD_MAX`].
    TooLong,
    /// The queue's `head` word is not one a consumer could have written (more than
    /// `SLOTS` queued, or ahead of the producer): refused.
    BadHead,
}

/// The sending side of one queue: its private tail and its last view of `head`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Producer {
    tail: u64,
    head: u64,
}

impl Producer {
    /// Messages queued so far.
    pub fn sent(&self) -> u64 {
        self.tail
    }

    /// Queues `data` with header `h`, without waiting.
    #[inline]
    pub fn push(&mut self, q: Queue<'_>, h: Header, data: &[u8]) -> Pushed {
        if data.len() > PAYLOAD_MAX {
            return Pushed::TooLong;
        }
        let n = self.tail;
        let slots = q.slots();
        if n.wrapping_sub(self.head) >= slots {
            let head = q.head().load(Ordering::Acquire);
            let used = n.wrapping_sub(head);
            if used > slots {
                return Pushed::BadHead;
            }
            self.head = head;
            if used == slots {
                return Pushed::Full;
            }
        }
        let s = q.slot(n);
        let mut w = s[HDR_WORDS..].iter();
        for chunk in data.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            if let Some(word) = w.next() {
                word.store(u64::from_le_bytes(b), Ordering::Relaxed);
            }
        }
        s[1].store(
            data.len() as u64 | (u64::from(h.tag) << 32),
            Ordering::Relaxed,
        );
        s[2].store(
            u64::from(h.ctx) | (u64::from(h.seq) << 32),
            Ordering::Relaxed,
        );
        s[0].store(n.wrapping_add(1), Ordering::Release);
        self.tail = n.wrapping_add(1);
        Pushed::Sent
    }
}

/// What [`Consumer::pop`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Popped {
    /// No message.
    Empty,
    /// A message: its header and its length (its bytes are at the start of the
    /// buffer given to `pop`).
    Msg(Header, usize),
    /// A slot whose length is out of range (written by someone other than an honest
    /// producer): removed and refused. Its header as read (untrusted: the receiver
    /// uses its sequence number only to let the pair's later messages through).
    Corrupt(Header),
}

/// The receiving side of one queue: its private head.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Consumer {
    head: u64,
}

impl Consumer {
    /// Messages removed so far.
    pub fn removed(&self) -> u64 {
        self.head
    }

    /// True if the next message is in the queue (what [`pop`](Self::pop) would take,
    /// unless it is refused as corrupt).
    #[inline(always)]
    pub fn ready(&self, q: Queue<'_>) -> bool {
        q.slot(self.head)[0].load(Ordering::Acquire) == self.head.wrapping_add(1)
    }

    /// Takes the next message, if it is there, copying its bytes to the start of `out`.
    #[inline]
    pub fn pop(&mut self, q: Queue<'_>, out: &mut [u8; PAYLOAD_MAX]) -> Popped {
        let n = self.head;
        let s = q.slot(n);
        if s[0].load(Ordering::Acquire) != n.wrapping_add(1) {
            return Popped::Empty;
        }
        let w1 = s[1].load(Ordering::Relaxed);
        let w2 = s[2].load(Ordering::Relaxed);
        let len = (w1 & 0xffff_ffff) as usize;
        let h = Header {
            tag: (w1 >> 32) as u32,
            ctx: w2 as u32,
            seq: (w2 >> 32) as u32,
        };
        let got = if len > PAYLOAD_MAX {
            Popped::Corrupt(h)
        } else {
            for (chunk, word) in out[..len].chunks_mut(8).zip(&s[HDR_WORDS..]) {
                let b = word.load(Ordering::Relaxed).to_le_bytes();
                chunk.copy_from_slice(&b[..chunk.len()]);
            }
            Popped::Msg(h, len)
        };
        self.head = n.wrapping_add(1);
        q.head().store(self.head, Ordering::Release);
        got
    }
}

#[cfg(all(test, not(gex_loom)))]
mod tests {
    use super::*;

    fn words() -> Vec<AtomicU64> {
        (0..QUEUE_WORDS).map(|_| AtomicU64::new(0)).collect()
    }

    #[test]
    fn fifo_wraps_and_fills() {
        let w = words();
        let q = Queue::new(&w).unwrap();
        let (mut tx, mut rx) = (Producer::default(), Consumer::default());
        let mut buf = [0u8; PAYLOAD_MAX];
        let mut next_in = 0u32;
        for round in 0..5u32 {
            // Fill to the brim: SLOTS fit, one more is back-pressure.
            let mut queued = 0;
            loop {
                let data = vec![next_in as u8; (next_in as usize * 7) % (PAYLOAD_MAX + 1)];
                let h = Header {
                    tag: round,
                    ctx: 1,
                    seq: next_in,
                };
                match tx.push(q, h, &data) {
                    Pushed::Sent => {
                        next_in += 1;
                        queued += 1;
                    }
                    Pushed::Full => break,
                    other => panic!("{other:?}"),
                }
            }
            assert_eq!(queued, SLOTS);
            for _ in 0..SLOTS {
                let Popped::Msg(h, len) = rx.pop(q, &mut buf) else {
                    panic!("lost a message");
                };
                assert_eq!(len, (h.seq as usize * 7) % (PAYLOAD_MAX + 1));
                assert!(buf[..len].iter().all(|&b| b == h.seq as u8));
                assert_eq!((h.tag, h.ctx), (round, 1));
            }
            assert!(!rx.ready(q));
            assert_eq!(rx.pop(q, &mut buf), Popped::Empty);
        }
        assert_eq!(rx.removed(), tx.sent());
        assert_eq!(
            tx.push(
                q,
                Header {
                    tag: 0,
                    ctx: 0,
                    seq: 0
                },
                &[0; PAYLOAD_MAX + 1]
            ),
            Pushed::TooLong
        );
    }

    #[test]
    fn corrupt_length_is_refused_and_skipped() {
        let w = words();
        let q = Queue::new(&w).unwrap();
        let (mut tx, mut rx) = (Producer::default(), Consumer::default());
        let h = Header {
            tag: 1,
            ctx: 0,
            seq: 0,
        };
        assert_eq!(tx.push(q, h, b"abc"), Pushed::Sent);
        assert_eq!(tx.push(q, Header { seq: 1, ..h }, b"def"), Pushed::Sent);
        // A liar rewrites the first slot's length.
        w[HEAD_WORDS + 1].store(u64::MAX, Ordering::Relaxed);
        let mut buf = [0u8; PAYLOAD_MAX];
        assert_eq!(
            rx.pop(q, &mut buf),
            Popped::Corrupt(Header { tag: u32::MAX, ..h })
        );
        assert_eq!(rx.pop(q, &mut buf), Popped::Msg(Header { seq: 1, ..h }, 3));
        assert_eq!(&buf[..3], b"def");
        // A forged stamp of the wrong lap reads as empty.
        w[HEAD_WORDS + 2 * SLOT_WORDS].store(99, Ordering::Relaxed);
        assert_eq!(rx.pop(q, &mut buf), Popped::Empty);
    }

    #[test]
    fn lying_head_is_refused() {
        let w = words();
        let q = Queue::new(&w).unwrap();
        let mut tx = Producer::default();
        let h = Header {
            tag: 1,
            ctx: 0,
            seq: 0,
        };
        for _ in 0..SLOTS {
            assert_eq!(tx.push(q, h, b"x"), Pushed::Sent);
        }
        assert_eq!(tx.push(q, h, b"x"), Pushed::Full);
        // A head ahead of the producer (nothing could have removed that much).
        w[0].store(SLOTS as u64 + 5, Ordering::Relaxed);
        assert_eq!(tx.push(q, h, b"x"), Pushed::BadHead);
        w[0].store(u64::MAX, Ordering::Relaxed);
        assert_eq!(tx.push(q, h, b"x"), Pushed::BadHead);
        // An honest head again: room for one.
        w[0].store(1, Ordering::Relaxed);
        assert_eq!(tx.push(q, h, b"x"), Pushed::Sent);
        assert_eq!(tx.push(q, h, b"x"), Pushed::Full);
        assert!(Queue::new(&w[1..]).is_none());
        assert!(Queue::with_slots(&w[..Queue::words_for(2)], 2).is_some());
        assert!(Queue::with_slots(&w[..Queue::words_for(3)], 3).is_none());
    }
}
