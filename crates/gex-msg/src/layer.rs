//! The layer's state on one endpoint, its handlers and its progress hook.
//!
//! Wire protocol (every message a request to the same endpoint index of the peer):
//!
//! | handler | category | arguments | payload |
//! |---|---|---|---|
//! | `EAGER` | Medium | ctx, tag, seq, flags, send id | the message |
//! | `RTS` (request to send) | Short | ctx, tag, seq, flags, send id, len low, len high, key low, key high | — |
//! | `CTS` (clear to send) | Short | send id, receive id, accepted | — |
//! | `DATA` | Medium | receive id, offset low, offset high | a chunk |
//! | `ACK` (a synchronous eager send matched) | Short | send id | — |
//! | `DONE` (a single-copy rendezvous read the sender's buffer) | Short | send id | — |
//! | `ADDR` (where a withdrawn cooperative loan's copy is) | Short | receive id, send id, address low, address high | — |
//!
//! An `RTS` flagged `F_SHARED` (thread ranks of one process) or `F_CMA` (processes of
//! one host) names the sender's buffer by its key (module `direct`): the receiver
//! copies the message itself and answers `DONE` instead of `CTS`; if it cannot (the
//! key is refused, CMA fails, `GEX_MSG_SINGLE_COPY=0`), it answers `CTS` and the chunks
//! come as for any other peer. A cooperative loan (`F_LOAN`, module `coop`) that the
//! receiver finds withdrawn (it came late) is answered `CTS` with `accepted` = 2: the
//! sender answers `ADDR` with the address of the copy it made on withdrawal, which the
//! receiver reads with CMA (then `DONE`; if that read fails, `CTS` for the chunks).
//!
//! `seq` numbers the matched messages (eager and RTS) from one endpoint to another:
//! the receiver feeds them to the matching engine in that order (module `engine`,
//! `Reorder`), so the network need not keep order. Handlers cannot inject (they get no
//! `Cx`): what they must send (a clear-to-send, an acknowledgement) goes to the outbox,
//! which the progress hook and the next operation flush; the progress hook also
//! streams the chunks of rendezvous sends that were cleared.

use crate::area::Area;
use crate::direct::{self, Ticket};
use crate::engine::{Envelope, Matcher, Reorder};
use crate::error::MsgError;
use crate::pair::NearPath;
use gex_core::event::Data;
use gex_core::event::OpCompleter;
use gex_core::layer::{Attach, Cx, Layer, Progress};
use gex_core::spi::Conduit;
use gex_core::{Am, Category, EpAddr, HandlerId, InitError, Injected, Token};
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;

pub(crate) mod h {
    pub(crate) const EAGER: u8 = 0;
    pub(crate) const RTS: u8 = 1;
    pub(crate) const CTS: u8 = 2;
    pub(crate) const DATA: u8 = 3;
    pub(crate) const ACK: u8 = 4;
    pub(crate) const DONE: u8 = 5;
    pub(crate) const ADDR: u8 = 6;
    pub(crate) const COUNT: u8 = 7;
}

/// Flag of an eager or RTS message: a synchronous send (acknowledge the match).
pub(crate) const F_SYNC: u32 = 1;
/// Flag of an RTS: the key is an id in the process's registry of lent buffers
/// (`direct::lend`), for a thread rank of the sender's process.
pub(crate) const F_SHARED: u32 = 2;
/// Flag of an RTS: the key is the address of the sender's buffer in its process, for a
/// process of the sender's host that may read it with CMA.
pub(crate) const F_CMA: u32 = 4;
/// Flag of an `F_CMA` RTS: a blocking send's own slice, lent for the cooperative copy
/// (module `coop`): bits 8..32 of the flags hold the loan's generation's low 24 bits,
/// bits 48..64 of the key its next 16, bits 0..48 the slice's address.
pub(crate) const F_LOAN: u32 = 8;
/// Bits of an address in the key of a lent slice.
const LOAN_ADDR_BITS: u32 = 48;

/// Where a peer is, for the rendezvous protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    /// Another host (or an unknown one): chunks only.
    Far,
    /// A thread rank of this process: the registry of lent buffers.
    Process,
    /// Another process of this host, with its process id: CMA.
    Host(u64),
}

/// How a blocking send lends the caller's slice ([`Msg::lends`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LendTo {
    /// To a thread rank of this process, through the registry (module `direct`).
    Process,
    /// To another process of this host, with its process id, for the cooperative
    /// copy (module `coop`).
    Host(u64),
}

/// Ends a cooperative loan (module `coop`) if its send unwinds: withdraws it if no
/// receiver claimed it, else helps and waits until nobody reads the slice (or the
/// receiver died), so the caller's buffer is never read after the call ended. Lives
/// within `coop_send`, which borrows the endpoint (so the area stays mapped).
pub(crate) struct CoopGuard<'a> {
    area: Area,
    generation: u64,
    pid: u64,
    data: &'a [u8],
    armed: bool,
}

impl CoopGuard<'_> {
    /// The send ended normally ([`Msg::coop_step`] ended the loan).
    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for CoopGuard<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut spins = 0u32;
        while crate::coop::sender_step(
            self.area.loan(),
            self.generation,
            self.data.len(),
            true,
            |r, to| direct::coop_write(self.pid, to, &self.data[r]),
        )
        .pending()
        {
            spins = spins.wrapping_add(1);
            if spins % 4096 == 0 {
                if !crate::coop::process_alive(self.pid) {
                    break;
                }
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

/// Default of `GEX_MSG_EAGER_MAX`.
pub(crate) const DEFAULT_EAGER_MAX: usize = 8192;

/// A plain slab: ids are indices, free slots are reused.
#[derive(Debug)]
pub(crate) struct Slab<T> {
    items: Vec<Option<T>>,
    free: Vec<u32>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            items: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Slab<T> {
    fn insert(&mut self, t: T) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.items[i as usize] = Some(t);
                i
            }
            None => {
                self.items.push(Some(t));
                (self.items.len() - 1) as u32
            }
        }
    }
    fn get_mut(&mut self, i: u32) -> Option<&mut T> {
        self.items.get_mut(i as usize)?.as_mut()
    }
    fn remove(&mut self, i: u32) -> Option<T> {
        let t = self.items.get_mut(i as usize)?.take()?;
        self.free.push(i);
        Some(t)
    }
    fn len(&self) -> usize {
        self.items.len() - self.free.len()
    }
}

/// A message the matching engine holds as unexpected.
#[derive(Debug)]
pub(crate) enum Arrival {
    /// An eager message: its bytes (copied out of the network's buffer).
    Eager {
        data: Vec<u8>,
        flags: u32,
        sreq: u32,
    },
    /// A rendezvous request: the sender holds the bytes (`key` names them for a
    /// single-copy read, see `F_SHARED` and `F_CMA`).
    Rts {
        len: usize,
        flags: u32,
        sreq: u32,
        key: u64,
    },
}

impl Arrival {
    pub(crate) fn len(&self) -> usize {
        match self {
            Arrival::Eager { data, .. } => data.len(),
            Arrival::Rts { len, .. } => *len,
        }
    }

    /// The arrival as a handler would have seen it (its bytes borrowed).
    fn as_arrival_ref(&self) -> ArrivalRef<'_> {
        match self {
            Arrival::Eager { data, flags, sreq } => ArrivalRef::Eager {
                data,
                flags: *flags,
                sreq: *sreq,
            },
            Arrival::Rts {
                len,
                flags,
                sreq,
                key,
            } => ArrivalRef::Rts {
                len: *len,
                flags: *flags,
                sreq: *sreq,
                key: *key,
            },
        }
    }
}

/// An arrival as the handler sees it: eager bytes still in the network's buffer.
pub(crate) enum ArrivalRef<'a> {
    Eager {
        data: &'a [u8],
        flags: u32,
        sreq: u32,
    },
    Rts {
        len: usize,
        flags: u32,
        sreq: u32,
        key: u64,
    },
}

impl ArrivalRef<'_> {
    fn to_owned(&self) -> Arrival {
        match *self {
            ArrivalRef::Eager { data, flags, sreq } => Arrival::Eager {
                data: data.to_vec(),
                flags,
                sreq,
            },
            ArrivalRef::Rts {
                len,
                flags,
                sreq,
                key,
            } => Arrival::Rts {
                len,
                flags,
                sreq,
                key,
            },
        }
    }
}

/// Where a single-copy rendezvous receive reads from.
pub(crate) enum Source {
    /// A buffer a thread rank of this process lent (taken from the registry).
    Lent(direct::Taken),
    /// An address in another process of this host.
    Cma { pid: u64, addr: usize },
    /// A blocking send's own slice in another process of this host, lent for the
    /// cooperative copy (module `coop`): loan `generation` of the sender's block.
    Coop {
        pid: u64,
        addr: usize,
        generation: u64,
    },
}

/// A posted receive: its buffer, the largest message it accepts and its completer.
/// The buffer is the program's (`irecv`: `cap` is its length) or the blocking
/// receive's own, empty until a message fills it (no allocation or zeroing of the
/// caller's capacity up front).
#[derive(Debug)]
pub(crate) struct PostedRecv {
    pub(crate) buf: Vec<u8>,
    pub(crate) cap: usize,
    pub(crate) done: OpCompleter,
}

/// A rendezvous receive being filled by `DATA` chunks.
#[derive(Debug)]
struct RecvOp {
    buf: Vec<u8>,
    got: usize,
    env: Envelope,
    done: OpCompleter,
}

/// A send in flight at the sender.
#[derive(Debug)]
enum SendOp {
    /// A synchronous eager send, waiting for its `ACK`.
    AwaitAck { done: OpCompleter },
    /// A rendezvous send: waiting for its `CTS` (`rreq` is `None`), then streamed;
    /// or for its `DONE` (the receiver read `data` itself). A standard send completed
    /// when the layer copied its bytes (`done` is `None`); a synchronous one completes
    /// when its `CTS` or `DONE` comes. `data` stays here until then: a receiver on
    /// another process of the host reads it by address; `lent` withdraws it from the
    /// registry when the send ends (module `direct`).
    Rndv {
        dst: EpAddr,
        /// `None` while the bytes are a caller's slice lent by a blocking send
        /// (`direct::Loan`): the chunks, if the receiver asks for them, come from the
        /// owned copy the loan leaves in the registry when withdrawn.
        data: Option<Arc<[u8]>>,
        rreq: Option<u32>,
        off: usize,
        done: Option<OpCompleter>,
        _lent: Option<Ticket>,
        /// The RTS offered `data` by address to a process of this host (CMA).
        by_address: bool,
        /// `data` is `None` while a blocking send lends its own slice for the
        /// cooperative copy (module `coop`): the send sets it when the loan ends (a
        /// copy if the receiver will ask for chunks, an empty buffer if it read
        /// everything).
        coop: bool,
        /// A receiver that found the cooperative loan withdrawn asked where the copy
        /// is (`CTS` with `accepted` = 2), with this receive id: answered `ADDR` as
        /// soon as the copy exists.
        ask_addr: Option<u32>,
    },
}

/// A message the handlers or an operation could not inject yet (back-pressure).
#[derive(Debug)]
enum Out {
    Short {
        dst: EpAddr,
        h: u8,
        args: [u32; 9],
        n: u8,
    },
    Eager {
        dst: EpAddr,
        args: [u32; 5],
        data: Vec<u8>,
        /// The completer of a standard send queued under back-pressure (it completes
        /// when the message is injected).
        done: Option<OpCompleter>,
    },
}

/// The status of a received or probed message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Status {
    /// The sending rank.
    pub source: u32,
    /// The message's tag.
    pub tag: u32,
    /// The message's length in bytes.
    pub len: usize,
}

/// Counters of one endpoint's messaging layer ([`Msg::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MsgStats {
    /// Messages sent eagerly.
    pub eager_sent: u64,
    /// Messages sent by rendezvous.
    pub rndv_sent: u64,
    /// Arrivals that found a posted receive.
    pub matched_posted: u64,
    /// Arrivals queued as unexpected.
    pub unexpected: u64,
    /// Arrivals that came before an earlier message of their source (held to restore
    /// the sender's order).
    pub reordered: u64,
    /// Messages dropped because they failed validation (unknown ids, bad lengths, a
    /// near-path slot with a length out of range).
    pub dropped: u64,
    /// Rendezvous messages this endpoint received with one copy from the sender's
    /// buffer (a thread rank of this process, or CMA from a process of this host).
    pub rndv_single_copy: u64,
    /// Rendezvous messages offered for a single copy that this endpoint received in
    /// chunks instead (the key refused, CMA refused or failed, or
    /// `GEX_MSG_SINGLE_COPY=0` here).
    pub rndv_fallback: u64,
    /// Of [`rndv_single_copy`](Self::rndv_single_copy): messages read straight from
    /// the sending caller's buffer (a blocking send from a thread rank of this process
    /// that had not withdrawn its loan: no copy at the sender either).
    pub rndv_in_place: u64,
    /// Messages sent by the near path (a queue in the peer's auxiliary area).
    pub near_sent: u64,
    /// Messages received from the near path's queues.
    pub near_received: u64,
    /// Near-path sends that found the pair's queue full and took the AM path.
    pub near_full: u64,
    /// Near-path sends refused because the queue's head word was not one the
    /// receiver could have written (they took the AM path).
    pub near_refused: u64,
    /// Eager messages copied straight into a waiting blocking receive's buffer by
    /// their handler.
    pub landed: u64,
}

/// The messaging layer (see the [crate documentation](crate)): attach it with
/// `ClientBuilder::layer::<Msg>()`; its operations are [`MsgExt`](crate::MsgExt)'s.
#[derive(Debug)]
pub struct Msg {
    hid: [HandlerId; h::COUNT as usize],
    pub(crate) me: EpAddr,
    size: u32,
    eager_max: usize,
    /// `GEX_MSG_LEND_WAIT` in nanoseconds.
    lend_wait_ns: u64,
    /// Where each rank is (`Place::Far` for every rank if `GEX_MSG_SINGLE_COPY=0`).
    place: Vec<Place>,
    /// This process can read and be read with CMA.
    cma: bool,
    pub(crate) send_seq: Vec<u32>,
    pub(crate) matcher: Matcher<Arrival, PostedRecv>,
    pub(crate) reorder: Reorder<(Envelope, Arrival)>,
    /// The near path (queues in auxiliary areas, module `pair`).
    pub(crate) near: NearPath,
    /// This endpoint's loan block (module `coop`), if the conduit maps its area and
    /// CMA works.
    my_loan: Option<Area>,
    /// The generations of this endpoint's loans.
    lender: crate::coop::Lender,
    /// Rank → its endpoint's loan block, for processes of this host (CMA).
    loans: Vec<Option<Area>>,
    /// An empty buffer: the data of a cooperative send that ended read.
    empty: Arc<[u8]>,
    outbox: VecDeque<Out>,
    sends: Slab<SendOp>,
    recvs: Slab<RecvOp>,
    /// Rendezvous sends cleared to stream, in the order their CTS came.
    streaming: VecDeque<u32>,
    pub(crate) stats: MsgStats,
    /// A waiting blocking receive's slice (module `landing`).
    pub(crate) landing: Option<crate::landing::Landing>,
}

/// Reads `GEX_MSG_EAGER_MAX`.
fn eager_max(cfg: &gex_core::Config) -> Result<usize, InitError> {
    cfg.size("GEX_MSG_EAGER_MAX", DEFAULT_EAGER_MAX)
}

impl Drop for Msg {
    /// An endpoint dropped with rendezvous sends offered by address (CMA) still in
    /// flight leaks their buffers: a receiver in another process may be reading them
    /// (it is not told), and must read the message's bytes, not whatever this process
    /// puts there next. Only sends the program abandoned are leaked (a finished job
    /// has none).
    fn drop(&mut self) {
        for op in self.sends.items.iter_mut().flatten() {
            if let SendOp::Rndv {
                data: Some(d),
                by_address: true,
                ..
            } = op
            {
                std::mem::forget(d.clone());
            }
        }
    }
}

impl Layer for Msg {
    const NAME: &'static str = "msg";
    const HANDLERS: u8 = h::COUNT;
    const ENV_VARS: &'static [gex_core::config::EnvVar] = crate::ENV_VARS;
    /// The near path's queues ([`crate::near::AREA_BYTES`]) and the loan block of
    /// the cooperative copy ([`crate::coop`]).
    const AUX_BYTES: usize = crate::area::AUX_BYTES;

    fn attach<C: Conduit>(cx: &mut Attach<'_, C, Self>) -> Result<Self, InitError> {
        let eager_max = eager_max(cx.config())?;
        let lend_wait_ns = cx
            .config()
            .u64("GEX_MSG_LEND_WAIT", 20)?
            .saturating_mul(1000);
        let single_copy = cx.config().bool("GEX_MSG_SINGLE_COPY", true)?;
        let near_send = cx.config().bool("GEX_MSG_NEAR", true)?;
        let size = cx.size();
        let me = cx.addr();
        let layout = cx.layout();
        let place: Vec<Place> = (0..size)
            .map(|r| {
                let (i, m) = (r as usize, me.rank as usize);
                if !single_copy || layout.host.get(i) != layout.host.get(m) {
                    Place::Far
                } else if layout.same_process(r, me.rank) {
                    Place::Process
                } else {
                    layout
                        .process
                        .get(i)
                        .map_or(Place::Far, |&p| Place::Host(u64::from(p)))
                }
            })
            .collect();
        let cma = single_copy && gex_sync::cma::cma_capable();
        let (my_loan, loans) = if cma {
            let loans = place
                .iter()
                .enumerate()
                .map(|(r, p)| match p {
                    Place::Host(_) => Area::of(
                        cx,
                        EpAddr {
                            rank: r as u32,
                            ep: me.ep,
                        },
                    ),
                    _ => None,
                })
                .collect();
            (Area::of(cx, me), loans)
        } else {
            (None, Vec::new())
        };
        Ok(Msg {
            hid: std::array::from_fn(|i| cx.handler(i as u8)),
            me,
            size,
            eager_max,
            lend_wait_ns,
            place,
            cma,
            send_seq: vec![0; size as usize],
            matcher: Matcher::new(size),
            reorder: Reorder::new(size),
            outbox: VecDeque::new(),
            sends: Slab::default(),
            recvs: Slab::default(),
            streaming: VecDeque::new(),
            stats: MsgStats::default(),
            near: NearPath::attach(cx, near_send),
            my_loan,
            lender: crate::coop::Lender::default(),
            loans,
            empty: Arc::from(&[][..]),
            landing: None,
        })
    }

    fn handle(self: Pin<&mut Self>, hi: u8, t: &mut Token<'_>, am: Am<'_>) {
        let m = self.get_mut();
        let src = t.src();
        if src.rank >= m.size || src.ep != m.me.ep {
            m.stats.dropped += 1;
            return;
        }
        let a = am.args();
        let arg = |i: usize| a.get(i).copied();
        match hi {
            h::EAGER => {
                let (Some(ctx), Some(tag), Some(seq), Some(flags), Some(sreq)) =
                    (arg(0), arg(1), arg(2), arg(3), arg(4))
                else {
                    m.stats.dropped += 1;
                    return;
                };
                let env = Envelope {
                    src: src.rank,
                    tag,
                    ctx,
                };
                let data = am.payload();
                m.arrive(seq, env, ArrivalRef::Eager { data, flags, sreq });
            }
            h::RTS => {
                let (Some(ctx), Some(tag), Some(seq), Some(flags), Some(sreq), Some(lo), Some(hi)) =
                    (arg(0), arg(1), arg(2), arg(3), arg(4), arg(5), arg(6))
                else {
                    m.stats.dropped += 1;
                    return;
                };
                let Ok(len) = usize::try_from(u64::from(lo) | (u64::from(hi) << 32)) else {
                    m.stats.dropped += 1;
                    return;
                };
                // No key: no single-copy offer.
                let (flags, key) = match (arg(7), arg(8)) {
                    (Some(lo), Some(hi)) => (flags, u64::from(lo) | (u64::from(hi) << 32)),
                    _ => (flags & F_SYNC, 0),
                };
                let env = Envelope {
                    src: src.rank,
                    tag,
                    ctx,
                };
                m.arrive(
                    seq,
                    env,
                    ArrivalRef::Rts {
                        len,
                        flags,
                        sreq,
                        key,
                    },
                );
            }
            h::CTS => {
                let (Some(sreq), Some(rreq), Some(ok)) = (arg(0), arg(1), arg(2)) else {
                    m.stats.dropped += 1;
                    return;
                };
                match m.sends.get_mut(sreq) {
                    Some(SendOp::Rndv {
                        dst,
                        rreq: r @ None,
                        done,
                        ..
                    }) if *dst == src => {
                        // Matched: a synchronous send is complete.
                        if let Some(d) = done.take() {
                            d.ok();
                        }
                        if ok == 2 {
                            // A cooperative loan found withdrawn: tell the receiver
                            // where the copy is (kept until its `DONE` or `CTS`).
                            // Still lent (the receiver could not claim it): the send
                            // withdraws it and answers then (`coop_step`).
                            if let Some(SendOp::Rndv {
                                data,
                                by_address,
                                ask_addr,
                                ..
                            }) = m.sends.get_mut(sreq)
                            {
                                match data {
                                    Some(d) => {
                                        *by_address = true;
                                        let a = d.as_ptr() as usize as u64;
                                        m.queue_addr(src, rreq, sreq, a);
                                    }
                                    None => *ask_addr = Some(rreq),
                                }
                            }
                        } else if ok == 1 {
                            *r = Some(rreq);
                            m.streaming.push_back(sreq);
                        } else {
                            // The receiver consumed the message as truncated: its
                            // bytes are not needed.
                            drop(m.sends.remove(sreq));
                        }
                    }
                    _ => m.stats.dropped += 1,
                }
            }
            h::DATA => {
                let (Some(rreq), Some(lo), Some(hi)) = (arg(0), arg(1), arg(2)) else {
                    m.stats.dropped += 1;
                    return;
                };
                let off = u64::from(lo) | (u64::from(hi) << 32);
                let chunk = am.payload();
                let Some(r) = m.recvs.get_mut(rreq) else {
                    m.stats.dropped += 1;
                    return;
                };
                let fits = usize::try_from(off)
                    .ok()
                    .and_then(|o| o.checked_add(chunk.len()).map(|e| (o, e)))
                    .filter(|&(_, e)| e <= r.buf.len());
                let Some((o, e)) = fits.filter(|_| r.env.src == src.rank) else {
                    m.stats.dropped += 1;
                    return;
                };
                r.buf[o..e].copy_from_slice(chunk);
                r.got += chunk.len();
                if r.got >= r.buf.len()
                    && let Some(r) = m.recvs.remove(rreq)
                {
                    complete_recv(r.buf, r.env, r.done);
                }
            }
            h::ADDR => {
                let (Some(rreq), Some(sreq), Some(lo), Some(hi)) = (arg(0), arg(1), arg(2), arg(3))
                else {
                    m.stats.dropped += 1;
                    return;
                };
                m.read_moved(src, rreq, sreq, u64::from(lo) | (u64::from(hi) << 32));
            }
            h::DONE => {
                let Some(sreq) = arg(0) else {
                    m.stats.dropped += 1;
                    return;
                };
                match m.sends.get_mut(sreq) {
                    Some(SendOp::Rndv {
                        dst, rreq: None, ..
                    }) if *dst == src => {
                        if let Some(SendOp::Rndv { done: Some(d), .. }) = m.sends.remove(sreq) {
                            d.ok();
                        }
                    }
                    _ => m.stats.dropped += 1,
                }
            }
            h::ACK => {
                let Some(sreq) = arg(0) else {
                    m.stats.dropped += 1;
                    return;
                };
                if matches!(m.sends.get_mut(sreq), Some(SendOp::AwaitAck { .. })) {
                    if let Some(SendOp::AwaitAck { done }) = m.sends.remove(sreq) {
                        done.ok();
                    }
                } else {
                    m.stats.dropped += 1;
                }
            }
            _ => m.stats.dropped += 1,
        }
    }

    fn progress<C: Conduit>(self: Pin<&mut Self>, cx: &mut Cx<'_, C>) -> Progress {
        let m = self.get_mut();
        // Arrivals on the near path run no handler: while receives are posted (or
        // messages wait for an earlier one of their source), the hook probes the
        // queues on every poll (before flushing the outbox, which what they match
        // may fill: acknowledgements, clears to send).
        let near = m.near.active() && (m.matcher.posted_len() > 0 || m.reorder.held() > 0);
        if near {
            m.near_drain(None);
        }
        let p = m.pump(cx);
        if near && (m.matcher.posted_len() > 0 || m.reorder.held() > 0) {
            return match p {
                Progress::Spinning => Progress::Spinning,
                _ => Progress::Busy,
            };
        }
        p
    }

    fn describe(&self) -> String {
        let mut s = String::new();
        if self.near.ready(None) {
            s = "msg: near-path queues hold messages no receive has probed for".into();
        }
        if self.matcher.posted_len() + self.matcher.unexpected_len() + self.sends.len() > 0
            || !self.outbox.is_empty()
            || self.recvs.len() > 0
        {
            if !s.is_empty() {
                s.push('\n');
            }
            s += &format!(
                "msg: {} posted receives, {} unexpected messages, {} sends in flight ({} streaming), {} rendezvous receives, {} queued for injection, {} held out of order",
                self.matcher.posted_len(),
                self.matcher.unexpected_len(),
                self.sends.len(),
                self.streaming.len(),
                self.recvs.len(),
                self.outbox.len(),
                self.reorder.held(),
            );
        }
        s
    }
}

/// Completes a receive of `buf` (already cut to the message's length) from `env`:
/// the status travels behind the bytes (`finish_recv` takes it off).
pub(crate) fn complete_recv(mut buf: Vec<u8>, env: Envelope, done: OpCompleter) {
    buf.extend_from_slice(&env.src.to_le_bytes());
    buf.extend_from_slice(&env.tag.to_le_bytes());
    done.done(Data::Bytes(buf));
}

/// Takes the status off the bytes a receive completed with.
pub(crate) fn split_status(d: Data) -> (Vec<u8>, Status) {
    let mut b = match d {
        Data::Bytes(b) => b,
        _ => Vec::new(),
    };
    let n = b.len().saturating_sub(8);
    let word = |i: usize| {
        b.get(n + i..n + i + 4)
            .map_or(0, |w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
    };
    let (source, tag) = (word(0), word(4));
    b.truncate(n);
    let len = b.len();
    (b, Status { source, tag, len })
}

impl Msg {
    /// This endpoint's counters.
    pub fn stats(&self) -> MsgStats {
        self.stats
    }

    /// The eager threshold (`GEX_MSG_EAGER_MAX`, bounded by the Medium limit toward
    /// each peer at send time).
    pub fn eager_max(&self) -> usize {
        self.eager_max
    }

    /// Sends whose bytes the layer still holds or must still inject: rendezvous sends
    /// not yet cleared or streamed, synchronous sends not yet acknowledged, messages
    /// queued under back-pressure. Their bytes move only while this endpoint is polled.
    pub fn sends_in_flight(&self) -> usize {
        self.sends.len() + self.outbox.len()
    }

    /// Nothing queued, in flight or unmatched on this endpoint (nor waiting in its
    /// near-path queues).
    pub fn is_quiet(&self) -> bool {
        self.matcher.posted_len() == 0
            && self.matcher.unexpected_len() == 0
            && self.sends.len() == 0
            && self.recvs.len() == 0
            && self.outbox.is_empty()
            && self.reorder.held() == 0
            && !self.near.ready(None)
    }

    pub(crate) fn size(&self) -> u32 {
        self.size
    }

    /// True if nothing waits in the outbox (a send may take a fast path without
    /// overtaking a queued message to no purpose).
    #[inline]
    pub(crate) fn outbox_empty(&self) -> bool {
        self.outbox.is_empty()
    }

    /// Flushes what matching put in the outbox (acknowledgements, clears to send) and
    /// keeps the progress hook running until it is out.
    pub(crate) fn flush<C: Conduit>(&mut self, cx: &mut Cx<'_, C>) {
        if !self.outbox.is_empty() {
            self.pump(cx);
            cx.set_busy();
        }
    }

    /// Feeds the held messages of `src` that are next in its order to the engine.
    pub(crate) fn release_held(&mut self, src: u32) {
        while let Some((env, a)) = self.reorder.pop_ready(src) {
            let r = a.as_arrival_ref();
            self.arrive_in_order(env, r);
        }
    }

    /// An arrival numbered `seq` by its source, in any order.
    pub(crate) fn arrive(&mut self, seq: u32, env: Envelope, a: ArrivalRef<'_>) {
        if !self.reorder.is_next(env.src, seq) {
            self.stats.reordered += 1;
            if self
                .reorder
                .hold(env.src, seq, (env, a.to_owned()))
                .is_err()
            {
                self.stats.dropped += 1;
            }
            return;
        }
        self.reorder.advance(env.src);
        self.arrive_in_order(env, a);
        self.release_held(env.src);
    }

    fn arrive_in_order(&mut self, env: Envelope, a: ArrivalRef<'_>) {
        // A waiting blocking receive takes an eager message no posted receive wants
        // straight into its slice (no unexpected copy, no allocation).
        if let (Some(l), ArrivalRef::Eager { data, flags, sreq }) = (&mut self.landing, &a) {
            if l.takes(&env, data.len()) && !self.matcher.has_posted_for(&env) {
                l.land(env, data);
                self.stats.landed += 1;
                let (flags, sreq) = (*flags, *sreq);
                self.ack_if_sync(env, flags, sreq);
                return;
            }
        }
        match self.matcher.arrive_with(env, || a.to_owned()) {
            Some(recv) => {
                self.stats.matched_posted += 1;
                self.deliver(env, a, recv);
            }
            None => self.stats.unexpected += 1,
        }
    }

    /// A matched pair: an arrival and a posted receive.
    fn deliver(&mut self, env: Envelope, a: ArrivalRef<'_>, recv: PostedRecv) {
        let PostedRecv { mut buf, cap, done } = recv;
        let dst = EpAddr {
            rank: env.src,
            ep: self.me.ep,
        };
        let truncated = |len: usize, capacity: usize| MsgError::Truncated {
            len,
            capacity,
            source_rank: env.src,
            tag: env.tag,
        };
        match a {
            ArrivalRef::Eager { data, flags, sreq } => {
                if flags & F_SYNC != 0 {
                    self.queue_short(dst, h::ACK, &[sreq]);
                }
                if data.len() > cap {
                    done.fail(truncated(data.len(), cap));
                    return;
                }
                // Room for the status too (`complete_recv`): one allocation at most.
                buf.clear();
                buf.reserve_exact(data.len() + 8);
                buf.extend_from_slice(data);
                complete_recv(buf, env, done);
            }
            ArrivalRef::Rts {
                len,
                sreq,
                flags,
                key,
            } => {
                if len > cap {
                    self.queue_short(dst, h::CTS, &[sreq, 0, 0]);
                    done.fail(truncated(len, cap));
                    return;
                }
                buf.clear();
                buf.reserve_exact(len + 8);
                match self.single_copy_source(env.src, len, flags, key) {
                    Some(Source::Lent(data)) => {
                        data.read(|b| buf.extend_from_slice(b));
                        self.read_done(dst, sreq);
                        complete_recv(buf, env, done);
                        return;
                    }
                    Some(Source::Cma { pid, addr }) => {
                        buf.resize(len, 0);
                        if gex_sync::cma::cma_read(pid, addr, &mut buf).is_ok() {
                            self.read_done(dst, sreq);
                            complete_recv(buf, env, done);
                            return;
                        }
                        self.note_fallback();
                    }
                    Some(Source::Coop {
                        pid,
                        addr,
                        generation,
                    }) => {
                        buf.resize(len, 0);
                        match self.coop_read(env.src, pid, addr, generation, &mut buf) {
                            crate::coop::Received::Read => {
                                self.read_done(dst, sreq);
                                complete_recv(buf, env, done);
                                return;
                            }
                            // Came late: the sender has a copy; ask where it is.
                            crate::coop::Received::NotLent => {
                                let rreq = self.recvs.insert(RecvOp {
                                    buf,
                                    got: 0,
                                    env,
                                    done,
                                });
                                self.queue_short(dst, h::CTS, &[sreq, rreq, 2]);
                                return;
                            }
                            crate::coop::Received::Failed => {}
                        }
                    }
                    None => buf.resize(len, 0),
                }
                let rreq = self.recvs.insert(RecvOp {
                    buf,
                    got: 0,
                    env,
                    done,
                });
                self.queue_short(dst, h::CTS, &[sreq, rreq, 1]);
            }
        }
    }

    /// Where the receiver may read a matched rendezvous message of `len` bytes from
    /// `src` (with the RTS's `flags` and `key`) itself; `None`: ask for the chunks.
    /// Counts the offers it refuses as fallbacks.
    pub(crate) fn single_copy_source(
        &mut self,
        src: u32,
        len: usize,
        flags: u32,
        key: u64,
    ) -> Option<Source> {
        if flags & (F_SHARED | F_CMA) == 0 {
            return None;
        }
        let place = self.place.get(src as usize).copied().unwrap_or(Place::Far);
        let got = match place {
            Place::Process if flags & F_SHARED != 0 => {
                let t = direct::take(key, src, self.me.rank, self.me.ep, len);
                if t.as_ref().is_some_and(direct::Taken::in_place) {
                    self.stats.rndv_in_place += 1;
                }
                t.map(Source::Lent)
            }
            Place::Host(pid) if flags & F_CMA != 0 && flags & F_LOAN != 0 && self.cma => {
                let generation = u64::from(flags >> 8) | ((key >> LOAN_ADDR_BITS) << 24);
                let addr = (key & ((1 << LOAN_ADDR_BITS) - 1)) as usize;
                Some(Source::Coop {
                    pid,
                    addr,
                    generation,
                })
            }
            Place::Host(pid) if flags & F_CMA != 0 && self.cma => usize::try_from(key)
                .ok()
                .map(|addr| Source::Cma { pid, addr }),
            _ => None,
        };
        if got.is_none() {
            self.stats.rndv_fallback += 1;
        }
        got
    }

    /// The receiver's side of the cooperative copy (module `coop`) of loan
    /// `generation` of `src` (process `pid`, its slice at `addr`) into `out` (exactly
    /// the message's length). True if every byte arrived; false: ask for the chunks
    /// (counted as a fallback; `out`'s content is then unspecified), or ask where the
    /// sender's copy is (`NotLent`: the loan was withdrawn before this receiver came).
    pub(crate) fn coop_read(
        &mut self,
        src: u32,
        pid: u64,
        addr: usize,
        generation: u64,
        out: &mut [u8],
    ) -> crate::coop::Received {
        let got = match self.loans.get(src as usize).and_then(Option::as_ref) {
            Some(area) => {
                let dst_addr = out.as_ptr() as usize as u64;
                crate::coop::receive(
                    area.loan(),
                    generation,
                    out,
                    dst_addr,
                    |r, o| gex_sync::cma::cma_read(pid, addr.wrapping_add(r.start), o).is_ok(),
                    || crate::coop::process_alive(pid),
                )
            }
            None => crate::coop::Received::NotLent,
        };
        match got {
            crate::coop::Received::Read => self.stats.rndv_in_place += 1,
            crate::coop::Received::Failed => self.note_fallback(),
            crate::coop::Received::NotLent => {}
        }
        got
    }

    /// `ADDR` from `src`: the copy of a withdrawn cooperative loan for receive `rreq`
    /// (send `sreq` of `src`) is at `addr` in `src`'s process: reads it with CMA and
    /// completes the receive (then `DONE`), or asks for the chunks if the read fails.
    fn read_moved(&mut self, src: EpAddr, rreq: u32, sreq: u32, addr: u64) {
        let pid = match self.place.get(src.rank as usize) {
            Some(Place::Host(pid)) => *pid,
            _ => {
                self.stats.dropped += 1;
                return;
            }
        };
        let Some(r) = self
            .recvs
            .get_mut(rreq)
            .filter(|r| r.env.src == src.rank && r.got == 0)
        else {
            self.stats.dropped += 1;
            return;
        };
        let read = usize::try_from(addr)
            .ok()
            .is_some_and(|a| gex_sync::cma::cma_read(pid, a, &mut r.buf).is_ok());
        if read {
            if let Some(r) = self.recvs.remove(rreq) {
                self.read_done(src, sreq);
                complete_recv(r.buf, r.env, r.done);
            }
        } else {
            self.note_fallback();
            self.queue_short(src, h::CTS, &[sreq, rreq, 1]);
        }
    }

    /// A single-copy offer accepted but whose read failed: the chunks come instead.
    pub(crate) fn note_fallback(&mut self) {
        self.stats.rndv_fallback += 1;
    }

    /// A single-copy read of send `sreq` of `dst` is complete: tell the sender.
    pub(crate) fn read_done(&mut self, dst: EpAddr, sreq: u32) {
        self.stats.rndv_single_copy += 1;
        self.queue_short(dst, h::DONE, &[sreq]);
    }

    /// The endpoint address of the peer `rank` (same endpoint index as this one).
    pub(crate) fn peer(&self, rank: u32) -> EpAddr {
        EpAddr {
            rank,
            ep: self.me.ep,
        }
    }

    /// Refuses a matched rendezvous message (truncated at the receiver): the sender
    /// drops its bytes.
    pub(crate) fn refuse_rts(&mut self, src: u32, sreq: u32) {
        let dst = self.peer(src);
        self.queue_short(dst, h::CTS, &[sreq, 0, 0]);
    }

    /// Delivers a matched unexpected message (taken from the engine) to `recv`.
    pub(crate) fn deliver_owned(&mut self, env: Envelope, a: Arrival, recv: PostedRecv) {
        let r = a.as_arrival_ref();
        self.deliver(env, r, recv);
    }

    /// The synchronous-send acknowledgement of an eager message taken by a receive
    /// that copied it itself (the blocking receive's fast path).
    pub(crate) fn ack_if_sync(&mut self, env: Envelope, flags: u32, sreq: u32) {
        if flags & F_SYNC != 0 {
            let dst = EpAddr {
                rank: env.src,
                ep: self.me.ep,
            };
            self.queue_short(dst, h::ACK, &[sreq]);
        }
    }

    /// Queues a request to send: `head` is (context, tag, sequence number, flags, send
    /// id), then the length and the key, each as two words.
    fn queue_rts(&mut self, dst: EpAddr, head: [u32; 5], len: u64, key: u64) {
        let [ctx, tag, seq, flags, sreq] = head;
        let args = [
            ctx,
            tag,
            seq,
            flags,
            sreq,
            len as u32,
            (len >> 32) as u32,
            key as u32,
            (key >> 32) as u32,
        ];
        self.queue_short(dst, h::RTS, &args);
    }

    /// Queues `ADDR`: the copy of send `sreq` for receive `rreq` is at `addr`.
    fn queue_addr(&mut self, dst: EpAddr, rreq: u32, sreq: u32, addr: u64) {
        self.queue_short(
            dst,
            h::ADDR,
            &[rreq, sreq, addr as u32, (addr >> 32) as u32],
        );
    }

    fn queue_short(&mut self, dst: EpAddr, h: u8, a: &[u32]) {
        let mut args = [0u32; 9];
        args[..a.len()].copy_from_slice(a);
        self.outbox.push_back(Out::Short {
            dst,
            h,
            args,
            n: a.len() as u8,
        });
    }

    /// The fast path of a standard send: if `data` goes eagerly, nothing is queued
    /// before it and the conduit takes the message now, sends it and returns `true`
    /// (the send is complete). `false`: nothing sent, take [`start_send`](Self::start_send).
    pub(crate) fn try_eager_now<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        dst: u32,
        tag: u32,
        ctx: u32,
        data: &[u8],
    ) -> Result<bool, MsgError> {
        let to = EpAddr {
            rank: dst,
            ep: self.me.ep,
        };
        if !self.outbox.is_empty() || data.len() > self.eager_max.min(cx.max_medium(to)) {
            return Ok(false);
        }
        let seq = self.send_seq[dst as usize];
        let args = [ctx, tag, seq, 0, 0];
        match cx.try_request(
            to,
            self.hid[h::EAGER as usize],
            Category::Medium,
            &args,
            data,
            0,
        )? {
            Injected::WouldBlock => Ok(false),
            _ => {
                self.send_seq[dst as usize] = seq.wrapping_add(1);
                self.stats.eager_sent += 1;
                Ok(true)
            }
        }
    }

    /// Starts a send of `data` to `dst` (checked by the caller): eager or
    /// rendezvous; `done` completes when the send does (at once for an eager send
    /// injected now). On an error nothing was sent and `done` is dropped.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start_send<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        dst: u32,
        tag: u32,
        ctx: u32,
        data: &[u8],
        sync: bool,
        done: OpCompleter,
    ) -> Result<(), MsgError> {
        let to = EpAddr {
            rank: dst,
            ep: self.me.ep,
        };
        let seq = self.send_seq[dst as usize];
        let flags = if sync { F_SYNC } else { 0 };
        // Flush what is queued first, so that a send under back-pressure keeps its
        // place behind earlier ones (the receiver restores the order anyway).
        self.pump(cx);
        if data.len() <= self.eager_max.min(cx.max_medium(to)) {
            let (sreq, done) = if sync {
                (self.sends.insert(SendOp::AwaitAck { done }), None)
            } else {
                (0, Some(done))
            };
            let args = [ctx, tag, seq, flags, sreq];
            let injected = if self.outbox.is_empty() {
                cx.try_request(
                    to,
                    self.hid[h::EAGER as usize],
                    Category::Medium,
                    &args,
                    data,
                    0,
                )
            } else {
                Ok(Injected::WouldBlock)
            };
            match injected {
                Ok(Injected::WouldBlock) => {
                    self.outbox.push_back(Out::Eager {
                        dst: to,
                        args,
                        data: data.to_vec(),
                        done,
                    });
                    cx.set_busy();
                }
                Ok(_) => {
                    if let Some(d) = done {
                        d.ok();
                    }
                }
                Err(e) => {
                    if sync {
                        drop(self.sends.remove(sreq));
                    }
                    return Err(e.into());
                }
            }
            self.stats.eager_sent += 1;
        } else {
            let len = data.len() as u64;
            // The layer owns a copy of the bytes: a standard send is complete now.
            let done = if sync {
                Some(done)
            } else {
                done.ok();
                None
            };
            let data: Arc<[u8]> = Arc::from(data);
            // A single-copy offer (module `direct`): a registry id for a thread rank of
            // this process, the buffer's address for a process of this host.
            let (flags, key, lent) = match self.place[dst as usize] {
                Place::Process => {
                    let t = direct::lend(self.me.rank, dst, self.me.ep, data.clone());
                    (flags | F_SHARED, t.key(), Some(t))
                }
                Place::Host(_) if self.cma => (flags | F_CMA, data.as_ptr() as usize as u64, None),
                _ => (flags, 0, None),
            };
            let by_address = flags & F_CMA != 0;
            let sreq = self.sends.insert(SendOp::Rndv {
                dst: to,
                data: Some(data),
                rreq: None,
                off: 0,
                done,
                _lent: lent,
                by_address,
                coop: false,
                ask_addr: None,
            });
            self.queue_rts(to, [ctx, tag, seq, flags, sreq], len, key);
            self.stats.rndv_sent += 1;
            self.pump(cx);
            cx.set_busy();
        }
        self.send_seq[dst as usize] = seq.wrapping_add(1);
        Ok(())
    }

    /// How long a blocking send of `len` bytes lends the caller's slice to a receiver
    /// that has not taken it (`GEX_MSG_LEND_WAIT`, plus about the time a copy takes).
    pub(crate) fn lend_budget(&self, len: usize) -> std::time::Duration {
        std::time::Duration::from_nanos(self.lend_wait_ns.saturating_add(len as u64 / 8))
    }

    /// How a blocking standard send of `len` bytes to `dst` lends the caller's slice,
    /// if it does: a rendezvous to another thread rank of this process (the registry,
    /// module `direct`), or to another process of this host whose loan blocks both
    /// sides map (the cooperative copy, module `coop`).
    pub(crate) fn lends<C: Conduit>(
        &self,
        cx: &Cx<'_, C>,
        dst: u32,
        data: &[u8],
    ) -> Option<LendTo> {
        if dst == self.me.rank || data.len() <= self.eager_max.min(cx.max_medium(self.peer(dst))) {
            return None;
        }
        match self.place.get(dst as usize)? {
            Place::Process => Some(LendTo::Process),
            Place::Host(pid)
                if self.cma
                    && self.my_loan.is_some()
                    && self.loans.get(dst as usize).is_some_and(Option::is_some)
                    && (data.as_ptr() as usize as u64) >> LOAN_ADDR_BITS == 0 =>
            {
                Some(LendTo::Host(*pid))
            }
            _ => None,
        }
    }

    /// Starts a rendezvous send of the caller's `data` to `dst` (checked by the
    /// caller, [`lends`](Self::lends) gave `LendTo::Host`), lent for the cooperative
    /// copy (module `coop`): the caller keeps lending `data` until
    /// [`coop_step`](Self::coop_step) says the loan ended. Returns the send's id and
    /// the loan's generation.
    pub(crate) fn start_coop_send<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        dst: u32,
        tag: u32,
        ctx: u32,
        data: &[u8],
    ) -> (u32, u64) {
        let to = self.peer(dst);
        let seq = self.send_seq[dst as usize];
        self.pump(cx);
        let generation = match &self.my_loan {
            Some(a) => self.lender.offer(a.loan()),
            None => unreachable!("lends() checked the loan block"),
        };
        let sreq = self.sends.insert(SendOp::Rndv {
            dst: to,
            data: None,
            rreq: None,
            off: 0,
            done: None,
            _lent: None,
            by_address: false,
            coop: true,
            ask_addr: None,
        });
        let len = data.len() as u64;
        let key = (data.as_ptr() as usize as u64) | ((generation >> 24) << LOAN_ADDR_BITS);
        self.queue_rts(
            to,
            [
                ctx,
                tag,
                seq,
                F_CMA | F_LOAN | (((generation & 0xff_ffff) as u32) << 8),
                sreq,
            ],
            len,
            key,
        );
        self.stats.rndv_sent += 1;
        self.send_seq[dst as usize] = seq.wrapping_add(1);
        self.pump(cx);
        cx.set_busy();
        (sreq, generation)
    }

    /// A guard that ends loan `generation` of `data` (to process `pid`) if the
    /// cooperative send unwinds before it ended (`None` without a loan block).
    pub(crate) fn coop_guard<'a>(
        &self,
        generation: u64,
        pid: u64,
        data: &'a [u8],
    ) -> Option<CoopGuard<'a>> {
        Some(CoopGuard {
            area: self.my_loan.as_ref()?.dup(),
            generation,
            pid,
            data,
            armed: true,
        })
    }

    /// One step of the sender of cooperative send `sreq` (loan `generation` of
    /// `data`, to process `pid`; module `coop`): helps copy while the receiver
    /// copies; withdraws the loan if its receiver asked for chunks or refused the
    /// message, or if `expired`. When the loan ends, the send gets the bytes it may
    /// still have to stream: a copy of `data` (withdrawn, failed) or nothing (read).
    pub(crate) fn coop_step(
        &mut self,
        sreq: u32,
        generation: u64,
        pid: u64,
        data: &[u8],
        expired: bool,
    ) -> crate::coop::Step {
        use crate::coop::Step;
        let Some(area) = &self.my_loan else {
            return Step::Failed;
        };
        // The receiver asked for chunks (its CTS came) or refused the message (the
        // send is gone): it will not read the slice.
        let withdraw = expired
            || !matches!(
                self.sends.get_mut(sreq),
                Some(SendOp::Rndv {
                    rreq: None,
                    coop: true,
                    ask_addr: None,
                    ..
                })
            );
        let step =
            crate::coop::sender_step(area.loan(), generation, data.len(), withdraw, |r, to| {
                direct::coop_write(pid, to, &data[r])
            });
        let end = match step {
            Step::Ready | Step::Reading => return step,
            Step::Done => self.empty.clone(),
            Step::Withdrawn | Step::Failed => Arc::from(data),
        };
        if let Some(SendOp::Rndv {
            dst,
            data: d @ None,
            coop: true,
            by_address,
            ask_addr,
            ..
        }) = self.sends.get_mut(sreq)
        {
            let a = end.as_ptr() as usize as u64;
            *d = Some(end);
            if let Some(rreq) = ask_addr.take() {
                *by_address = true;
                let dst = *dst;
                self.queue_addr(dst, rreq, sreq, a);
            }
        }
        step
    }

    /// Starts a rendezvous send of the caller's `data` to `dst` (checked by the
    /// caller, [`lends`](Self::lends) true), lent in place: the caller keeps the
    /// returned loan (and so its borrow of `data`) until the receiver is done or the
    /// loan is withdrawn. Returns the send's id and the loan.
    pub(crate) fn start_lent_send<'a, C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        dst: u32,
        tag: u32,
        ctx: u32,
        data: &'a [u8],
    ) -> (u32, direct::Loan<'a>) {
        let to = self.peer(dst);
        let seq = self.send_seq[dst as usize];
        self.pump(cx);
        let (loan, ticket) = direct::Loan::new(self.me.rank, dst, self.me.ep, data);
        let key = ticket.key();
        let sreq = self.sends.insert(SendOp::Rndv {
            dst: to,
            data: None,
            rreq: None,
            off: 0,
            done: None,
            _lent: Some(ticket),
            by_address: false,
            coop: false,
            ask_addr: None,
        });
        let len = data.len() as u64;
        self.queue_rts(to, [ctx, tag, seq, F_SHARED, sreq], len, key);
        self.stats.rndv_sent += 1;
        self.send_seq[dst as usize] = seq.wrapping_add(1);
        self.pump(cx);
        cx.set_busy();
        (sreq, loan)
    }

    /// True if the receiver of send `sreq` asked for chunks (its CTS came).
    pub(crate) fn cleared(&self, sreq: u32) -> bool {
        matches!(
            self.sends.items.get(sreq as usize),
            Some(Some(SendOp::Rndv { rreq: Some(_), .. }))
        )
    }

    /// Flushes the outbox and streams cleared rendezvous sends until back-pressure.
    pub(crate) fn pump<C: Conduit>(&mut self, cx: &mut Cx<'_, C>) -> Progress {
        while let Some(o) = self.outbox.front() {
            let r = match o {
                Out::Short { dst, h, args, n } => cx.try_request(
                    *dst,
                    self.hid[*h as usize],
                    Category::Short,
                    &args[..*n as usize],
                    &[],
                    0,
                ),
                Out::Eager {
                    dst, args, data, ..
                } => cx.try_request(
                    *dst,
                    self.hid[h::EAGER as usize],
                    Category::Medium,
                    args,
                    data,
                    0,
                ),
            };
            match r {
                Ok(Injected::WouldBlock) => return Progress::Spinning,
                // A failed injection (a peer gone) drops the message and fails the
                // send queued with it, if any.
                r => {
                    if let Some(Out::Eager { done: Some(d), .. }) = self.outbox.pop_front() {
                        match r {
                            Ok(_) => d.ok(),
                            Err(e) => d.fail(MsgError::Am(e)),
                        }
                    }
                }
            }
        }
        while let Some(&sreq) = self.streaming.front() {
            let Some(SendOp::Rndv {
                dst,
                data,
                rreq: Some(rreq),
                off,
                _lent: lent,
                ..
            }) = self.sends.get_mut(sreq)
            else {
                self.streaming.pop_front();
                continue;
            };
            if data.is_none() {
                // A lent slice: its sender withdraws it (into an owned copy) when it
                // sees the CTS; until then nothing can be streamed.
                match lent.as_ref().and_then(|t| direct::owned(t.key())) {
                    Some(d) => *data = Some(d),
                    None => return Progress::Spinning,
                }
            }
            let Some(data) = data.as_deref() else {
                return Progress::Spinning;
            };
            let chunk = cx.max_medium(*dst).max(1);
            while *off < data.len() {
                let end = (*off + chunk).min(data.len());
                let o = *off as u64;
                match cx.try_request(
                    *dst,
                    self.hid[h::DATA as usize],
                    Category::Medium,
                    &[*rreq, o as u32, (o >> 32) as u32],
                    &data[*off..end],
                    0,
                ) {
                    Ok(Injected::WouldBlock) => return Progress::Spinning,
                    Ok(_) => *off = end,
                    Err(_) => {
                        // A peer gone: the rest of the message is dropped (the send
                        // completed when it was matched or copied).
                        self.stats.dropped += 1;
                        break;
                    }
                }
            }
            self.streaming.pop_front();
            drop(self.sends.remove(sreq));
        }
        Progress::Idle
    }
}
