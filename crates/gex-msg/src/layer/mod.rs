//! The layer's state on one endpoint, its handlers and its progress hook; the
//! receiving side (`recv`) and the sending side (`send`) in submodules.
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

mod recv;
mod send;

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

/// Default of `GEX_MSG_NB_EAGER_MAX` (the smp conduit's Medium limit).
pub(crate) const DEFAULT_NB_EAGER_MAX: usize = 65536;

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

/// A message the matching engine holds as unexpected (`D = Vec<u8>`: its eager bytes
/// copied out of the network's buffer), or as the handler sees it ([`ArrivalRef`]:
/// eager bytes still in the network's buffer).
#[derive(Debug)]
pub(crate) enum Arrival<D = Vec<u8>> {
    /// An eager message: its bytes.
    Eager { data: D, flags: u32, sreq: u32 },
    /// A rendezvous request: the sender holds the bytes (`key` names them for a
    /// single-copy read, see `F_SHARED` and `F_CMA`).
    Rts {
        len: usize,
        flags: u32,
        sreq: u32,
        key: u64,
    },
}

/// An arrival as the handler sees it: eager bytes still in the network's buffer.
pub(crate) type ArrivalRef<'a> = Arrival<&'a [u8]>;

impl Arrival {
    pub(crate) fn len(&self) -> usize {
        match self {
            Arrival::Eager { data, .. } => data.len(),
            Arrival::Rts { len, .. } => *len,
        }
    }

    /// The arrival as a handler would have seen it (its bytes borrowed).
    fn as_arrival_ref(&self) -> ArrivalRef<'_> {
        self.map_data(Vec::as_slice)
    }
}

impl<D> Arrival<D> {
    /// The same arrival with eager bytes `f(data)`.
    fn map_data<'s, E>(&'s self, f: impl FnOnce(&'s D) -> E) -> Arrival<E> {
        match *self {
            Arrival::Eager {
                ref data,
                flags,
                sreq,
            } => Arrival::Eager {
                data: f(data),
                flags,
                sreq,
            },
            Arrival::Rts {
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

impl ArrivalRef<'_> {
    fn to_owned(&self) -> Arrival {
        self.map_data(|d| d.to_vec())
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
    /// `GEX_MSG_NB_EAGER_MAX`.
    nb_eager_max: usize,
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
    /// Rendezvous messages matched when their receive was posted (`irecv`), read
    /// by the next progress of the endpoint rather than inside the `irecv` call: see
    /// `Msg::deliver_posted`.
    deferred: VecDeque<(Envelope, Arrival, PostedRecv)>,
    /// Rendezvous sends' copies kept for reuse (module `stage`).
    stage: crate::stage::Stage,
    pub(crate) stats: MsgStats,
    /// A waiting blocking receive's slice (module `landing`).
    pub(crate) landing: Option<crate::landing::Landing>,
}

/// Reads `GEX_MSG_EAGER_MAX`.
fn eager_max(cfg: &gex_core::Config) -> Result<usize, InitError> {
    cfg.size("GEX_MSG_EAGER_MAX", DEFAULT_EAGER_MAX)
}

/// Reads `GEX_MSG_NB_EAGER_MAX`.
fn nb_eager_max(cfg: &gex_core::Config) -> Result<usize, InitError> {
    cfg.size("GEX_MSG_NB_EAGER_MAX", DEFAULT_NB_EAGER_MAX)
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
        let nb_eager_max = nb_eager_max(cx.config())?;
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
            nb_eager_max,
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
            deferred: VecDeque::new(),
            stage: crate::stage::Stage::default(),
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
                m.on_cts(src, sreq, rreq, ok);
            }
            h::DATA => {
                let (Some(rreq), Some(lo), Some(hi)) = (arg(0), arg(1), arg(2)) else {
                    m.stats.dropped += 1;
                    return;
                };
                m.on_data(
                    src,
                    rreq,
                    u64::from(lo) | (u64::from(hi) << 32),
                    am.payload(),
                );
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
                        if let Some(op) = m.sends.remove(sreq) {
                            m.end_send(op);
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
        m.run_deferred();
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
            || !self.deferred.is_empty()
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
            && self.deferred.is_empty()
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
}
