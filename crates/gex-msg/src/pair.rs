//! The near path (see [`crate::near`] for the queues): the layer's state for it and
//! the operations that use it.
//!
//! - **Which pairs.** At attach, an endpoint looks at the ranks of its host
//!   (`JobLayout::neighbours`, rank order, itself included). Rank `s`'s host-local
//!   index is its position there; a receiver's area holds one queue per index below
//!   [`QUEUES`]. A sender uses queue `index(s)` of the peer's area when the conduit
//!   maps that area ([`Area::of`]) and its own index is below [`QUEUES`]; every other
//!   pair uses the AM path only.
//! - **Send.** A standard send of at most [`PAYLOAD_MAX`] bytes, with nothing of the
//!   layer waiting for injection, is pushed into the pair's queue with the pair's next
//!   sequence number (the one the AM path numbers with too), and the peer is woken
//!   (`Cx::wake`: a doorbell rung only if the peer sleeps). A full queue (or one whose
//!   head word is refused) sends by the AM path instead.
//! - **Receive.** The queues are probed by the operations that could match what they
//!   hold (enqueue-and-probe): a blocking receive takes the first message of the queues
//!   of the sources it accepts straight into its buffer (no event, no allocation) when
//!   no receive posted before it wants the message and the message is next in its
//!   source's order; `irecv`, `probe` and `iprobe` drain the queues they can match
//!   into the engine first; the progress hook drains every queue while receives are
//!   posted or messages are held for their order.
//! - **Order.** Messages of a pair are numbered across both paths and pass through
//!   the same `Reorder` as AM arrivals, so a message that went by AM because the queue
//!   was full, and one that went by the queue after it, still match in sending order.

use crate::area::Area;
use crate::engine::{Envelope, Pattern};
use crate::error::MsgError;
use crate::ext::copy_out;
use crate::layer::{ArrivalRef, Msg, Status};
use crate::near::{Consumer, Header, PAYLOAD_MAX, Popped, Producer, Pushed, QUEUES};
use gex_core::EpAddr;
use gex_core::layer::Cx;
use gex_core::spi::Conduit;

/// No queue of this source in our area.
const NONE: u16 = u16::MAX;

/// A queue of our area that a source may fill.
#[derive(Debug)]
struct In {
    src: u32,
    q: u16,
    rx: Consumer,
}

/// Our queue in a peer's area.
#[derive(Debug)]
struct Out {
    area: Area,
    q: u16,
    tx: Producer,
}

/// The near path's state of one endpoint.
#[derive(Debug, Default)]
pub(crate) struct NearPath {
    /// This endpoint's own area (the queues of its sources).
    mine: Option<Area>,
    ins: Vec<In>,
    /// Rank → index into `ins` (or `NONE`).
    by_src: Vec<u16>,
    /// Rank → our queue in its area.
    outs: Vec<Option<Out>>,
    /// Where an any-source receive starts looking (rotates, so no source starves).
    next: usize,
}

/// What [`Msg::near_take`] did.
pub(crate) enum Took {
    /// It received a message into the buffer (or found it too long: truncation).
    Msg(Result<Status, MsgError>),
    /// It fed messages to the engine, which may now hold one the receive matches.
    Engine,
    /// Nothing in the queues it looked at.
    Nothing,
}

impl NearPath {
    /// The queues of this endpoint and of its neighbours, as the conduit maps them
    /// (without `send`, `GEX_MSG_NEAR=0`: only this endpoint's own, which it keeps
    /// probing, so that ranks with different settings still agree).
    pub(crate) fn attach<C: Conduit>(cx: &Cx<'_, C>, send: bool) -> NearPath {
        let me = cx.addr();
        let size = cx.size() as usize;
        let Some(mine) = Area::of(cx, me) else {
            return NearPath::default();
        };
        let host = cx.layout().neighbours(me.rank);
        let mut p = NearPath {
            mine: Some(mine),
            ins: Vec::new(),
            by_src: vec![NONE; size],
            outs: (0..size).map(|_| None).collect(),
            next: 0,
        };
        for (i, &s) in host.iter().enumerate().take(QUEUES) {
            if let Some(b) = p.by_src.get_mut(s as usize) {
                *b = p.ins.len() as u16;
                p.ins.push(In {
                    src: s,
                    q: i as u16,
                    rx: Consumer::default(),
                });
            }
        }
        let Some(my_q) = host
            .iter()
            .position(|&r| r == me.rank)
            .filter(|&i| send && i < QUEUES)
        else {
            return p;
        };
        for &d in &host {
            let to = EpAddr { rank: d, ep: me.ep };
            if let (Some(area), Some(o)) = (Area::of(cx, to), p.outs.get_mut(d as usize)) {
                *o = Some(Out {
                    area,
                    q: my_q as u16,
                    tx: Producer::default(),
                });
            }
        }
        p
    }

    /// True if some source can reach this endpoint by the near path.
    #[inline]
    pub(crate) fn active(&self) -> bool {
        !self.ins.is_empty()
    }

    /// True if a receive from `src` (any source: `None`) should watch the queues.
    #[inline]
    pub(crate) fn covers(&self, src: Option<u32>) -> bool {
        match src {
            Some(s) => self.by_src.get(s as usize).is_some_and(|&i| i != NONE),
            None => self.active(),
        }
    }

    /// True if a message waits in a queue of `src` (any source: `None`).
    pub(crate) fn ready(&self, src: Option<u32>) -> bool {
        let Some(mine) = &self.mine else {
            return false;
        };
        let ready = |i: &In| mine.queue(i.q as usize).is_some_and(|q| i.rx.ready(q));
        match src {
            Some(s) => match self.by_src.get(s as usize) {
                Some(&i) if i != NONE => self.ins.get(i as usize).is_some_and(ready),
                _ => false,
            },
            None => self.ins.iter().any(ready),
        }
    }

    /// Takes the next message of queue `k` of `ins` into `buf`.
    #[inline]
    fn pop(&mut self, k: usize, buf: &mut [u8; PAYLOAD_MAX]) -> (u32, Popped) {
        let (Some(mine), Some(i)) = (&self.mine, self.ins.get_mut(k)) else {
            return (0, Popped::Empty);
        };
        match mine.queue(i.q as usize) {
            Some(q) => (i.src, i.rx.pop(q, buf)),
            None => (i.src, Popped::Empty),
        }
    }

    /// The `ins` indices a receive from `src` looks at, starting at the rotation point.
    fn scope(&self, src: Option<u32>) -> (usize, usize) {
        match src {
            Some(s) => match self.by_src.get(s as usize) {
                Some(&i) if i != NONE => (i as usize, 1),
                _ => (0, 0),
            },
            None => (self.next, self.ins.len()),
        }
    }
}

impl Msg {
    /// The near path of a standard send: `true` if `data` went into the pair's queue
    /// (the send is complete). `false`: nothing sent, take the AM path.
    #[inline]
    pub(crate) fn try_near<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        dst: u32,
        tag: u32,
        ctx: u32,
        data: &[u8],
    ) -> bool {
        if data.len() > PAYLOAD_MAX || !self.outbox_empty() {
            return false;
        }
        let Some(Some(o)) = self.near.outs.get_mut(dst as usize) else {
            return false;
        };
        let Some(seq) = self.send_seq.get(dst as usize).copied() else {
            return false;
        };
        let Some(q) = o.area.queue(o.q as usize) else {
            return false;
        };
        match o.tx.push(q, Header { tag, ctx, seq }, data) {
            Pushed::Sent => {
                self.send_seq[dst as usize] = seq.wrapping_add(1);
                self.stats.near_sent += 1;
                let me = self.me;
                if dst != me.rank {
                    cx.wake(EpAddr {
                        rank: dst,
                        ep: me.ep,
                    });
                }
                true
            }
            Pushed::Full => {
                self.stats.near_full += 1;
                false
            }
            Pushed::BadHead => {
                self.stats.near_refused += 1;
                false
            }
            Pushed::TooLong => false,
        }
    }

    /// Feeds the messages of the queues of `src` (every queue: `None`) to the engine;
    /// returns how many.
    pub(crate) fn near_drain(&mut self, src: Option<u32>) -> usize {
        let (start, n) = self.near.scope(src);
        let len = self.near.ins.len();
        let mut got = 0;
        let mut buf = [0u8; PAYLOAD_MAX];
        for j in 0..n {
            let k = (start + j) % len.max(1);
            loop {
                match self.near.pop(k, &mut buf) {
                    (_, Popped::Empty) => break,
                    (src, Popped::Corrupt(h)) => self.near_refuse(src, h),
                    (src, Popped::Msg(h, l)) => {
                        got += 1;
                        self.near_arrive(src, h, &buf[..l]);
                    }
                }
            }
        }
        got
    }

    /// A refused slot: dropped; if its sequence number is the one its source's next
    /// message needs, the number is skipped, so that the pair's later messages (on
    /// either path) are not held forever behind it.
    fn near_refuse(&mut self, src: u32, h: Header) {
        self.stats.dropped += 1;
        if self.reorder.is_next(src, h.seq) {
            self.reorder.advance(src);
            self.release_held(src);
        }
    }

    fn near_arrive(&mut self, src: u32, h: Header, data: &[u8]) {
        self.stats.near_received += 1;
        let env = Envelope {
            src,
            tag: h.tag,
            ctx: h.ctx,
        };
        self.arrive(
            h.seq,
            env,
            ArrivalRef::Eager {
                data,
                flags: 0,
                sreq: 0,
            },
        );
    }

    /// The blocking receive's near path: looks at the queues `pat` can match, in
    /// order, and copies the first message that `pat` accepts, that is next in its
    /// source's order and that no receive posted earlier wants, straight into `buf`.
    /// Messages before it go to the engine (matched or unexpected).
    pub(crate) fn near_take(&mut self, pat: &Pattern, buf: &mut [u8]) -> Took {
        let (start, n) = self.near.scope(pat.src);
        let len = self.near.ins.len();
        let mut fed = false;
        let mut tmp = [0u8; PAYLOAD_MAX];
        for j in 0..n {
            let k = (start + j) % len.max(1);
            loop {
                match self.near.pop(k, &mut tmp) {
                    (_, Popped::Empty) => break,
                    (src, Popped::Corrupt(h)) => {
                        self.near_refuse(src, h);
                        fed = true;
                        if self.matcher.unexpected_len() > 0 && self.matcher.probe(pat).is_some() {
                            return Took::Engine;
                        }
                    }
                    (src, Popped::Msg(h, l)) => {
                        let env = Envelope {
                            src,
                            tag: h.tag,
                            ctx: h.ctx,
                        };
                        if pat.accepts(&env)
                            && self.reorder.is_next(src, h.seq)
                            && !self.matcher.has_posted_for(&env)
                        {
                            self.stats.near_received += 1;
                            self.reorder.advance(src);
                            self.release_held(src);
                            if pat.src.is_none() {
                                self.near.next = (k + 1) % len.max(1);
                            }
                            return Took::Msg(copy_out(env, &tmp[..l], buf));
                        }
                        self.near_arrive(src, h, &tmp[..l]);
                        fed = true;
                        if self.matcher.unexpected_len() > 0 && self.matcher.probe(pat).is_some() {
                            return Took::Engine;
                        }
                    }
                }
            }
        }
        if fed { Took::Engine } else { Took::Nothing }
    }
}
