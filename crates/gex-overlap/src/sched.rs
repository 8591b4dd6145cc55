//! Message scheduling (seed 000's trains and piggybacking): small puts to one
//! destination endpoint are coalesced into a *train* (one Medium active message
//! carrying many puts) or held for the next *signal* to that destination, or the next
//! active message of the program's own sent with [`SchedExt::sched_request`], which
//! then carries them; which of the two, or neither, is chosen per destination from
//! what the program did between its earlier synchronisation points. Everything scheduled is
//! complete at its target after [`SchedExt::sched_flush`] (and
//! [`OverlapExt::retire_all`](crate::OverlapExt::retire_all), which calls it).
//!
//! Written by hand: coalescing is a protocol over gex's own active messages, which no
//! crate provides.
//!
//! ## Paths of a scheduled put (per destination endpoint)
//! | path | when ([`SchedMode::Auto`]) | what it costs |
//! |---|---|---|
//! | direct | the destination's segment is mapped here (smp, thread ranks, same-host ranks of a hybrid job) | one copy, now |
//! | plain | the put is larger than the train threshold, or puts to this destination came alone (fewer than 2 per interval on average) and not before a signal | one gex-rma NBI put |
//! | train | at least 2 puts per interval on average | one copy into the train; the train leaves when full, on the endpoint's next poll, at a signal or at a flush |
//! | piggyback | most intervals to this destination ended with a signal or a program's request | as train, but the train waits for the signal or the request (or a flush, or being full) |
//!
//! An *interval* of a destination ends at a signal or a program's request
//! ([`SchedExt::sched_request`]) to it, or at a flush. The statistics
//! are exponential averages over intervals (weight ½): puts per interval and the share of
//! intervals ended by a signal.
//!
//! ## Wire
//! A train is a Medium request to the layer's handler 0: arguments `[flags, signal
//! offset (low, high), signal addend (low, high)]`, payload records `offset u64 LE, len
//! u32 LE, bytes`. The target copies each record into its segment (byte-wise atomic
//! stores), then adds the addend to the 64-bit word at the signal offset (release) when
//! `flags & 1`, and acknowledges with a Short reply to handler 1. A record or signal
//! outside the target's segment is dropped there and counted (the sender checks first,
//! so only a sender that lied about the layout gets there).
//!
//! A program's request that carries a train ([`SchedExt::sched_request`]) is a Medium
//! request to the layer's handler 2: arguments `[program handler index | 0x100 if the
//! program's body is a Medium, length of the records, the program's arguments...]`,
//! payload the train's records followed by the program's payload. The target applies
//! the records as above, then runs the program's handler on the program's arguments
//! and payload as if its message had arrived by itself
//! ([`Token::deliver_client`](gex_core::Token::deliver_client): same source, and the
//! reply right, so the program's handler may reply to the sender). It acknowledges
//! with a Short reply to handler 1 unless the program's handler replied; then with a
//! Short request to handler 1 from its progress hook. When the records and the
//! program's message do not fit one message (the conduit's Medium, its argument
//! count) the train leaves first as above, and the program's message follows at once,
//! to the program's handler; with no train waiting it goes there at once. Nothing
//! waits for an acknowledgement first: a conduit delivers one sender's messages in
//! the order they were sent (the conduit contract, `gex_core::spi::Deliver`), so a
//! train that left earlier is applied before a later request or signal runs.
//!
//! # Safety
//! The unsafe blocks copy records into this endpoint's segment (an incoming train) or
//! into a mapped peer's segment (the direct path), and read or add to signal words in
//! them. Each range is checked against the segment's length first; segments stay
//! mapped while the endpoint lives (the layer drops before the conduit endpoint); the
//! copies are `gex_sync::copy` (byte-wise atomic) and the signal words are
//! `gex_sync::word` operations (byte-sized in Rust's model), so a put racing with them
//! gives unspecified bytes, never a data race. docs/soundness.md has the ledger.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::pin::Pin;

use gex_core::layer::{Cx, Progress};
use gex_core::spi::Conduit;
use gex_core::{Am, Body, Category, EpAddr, HandlerId, Injected, Nbi, Token};
use gex_rma::{GlobalPtr, NbiCategories, RmaExt};

use crate::error::OverlapError;
use crate::layer::{Overlap, backoff, with};

/// Handler of a train (local index in the layer's block).
pub(crate) const H_TRAIN: u8 = 0;
/// Handler of a train's acknowledgement.
pub(crate) const H_ACK: u8 = 1;
/// Handler of a program's request carrying a train.
pub(crate) const H_CARRY: u8 = 2;
/// Handlers the scheduler uses.
pub(crate) const HANDLERS: u8 = 3;
/// Flag in a carrier's first argument: the program's body is a Medium.
const CARRY_MEDIUM: u32 = 0x100;
/// Arguments a carrier adds to the program's.
const CARRY_ARGS: usize = 2;
/// The most arguments of a carrier built on the stack (conduits offer 16).
const MAX_CARRIER_ARGS: usize = 64;
/// A record's header: offset (u64 LE) and length (u32 LE).
const REC_HDR: usize = 12;
/// Flag of a train that ends with a signal.
const HAS_SIGNAL: u32 = 1;

/// How scheduled puts travel ([`SchedExt::set_sched`], `GEX_OVERLAP_SCHED`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SchedMode {
    /// Per destination, from statistics (module documentation's table).
    #[default]
    Auto,
    /// Every put leaves at once as a gex-rma NBI put (a direct copy to a mapped peer).
    Plain,
    /// Small puts are coalesced into trains, also to mapped peers; a train leaves when
    /// full, on the endpoint's next poll, at a signal or at a flush.
    Train,
    /// Small puts wait for the next signal or program request
    /// ([`SchedExt::sched_request`]) to their destination (or a flush, or a full
    /// train), also to mapped peers.
    Piggyback,
}

impl SchedMode {
    /// Parses a `GEX_OVERLAP_SCHED` value.
    pub(crate) fn parse(v: &str) -> Option<SchedMode> {
        match v.trim() {
            "" | "auto" => Some(SchedMode::Auto),
            "plain" => Some(SchedMode::Plain),
            "train" => Some(SchedMode::Train),
            "piggyback" => Some(SchedMode::Piggyback),
            _ => None,
        }
    }
}

/// What the scheduler did on this endpoint so far ([`SchedExt::sched_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SchedStats {
    /// Puts copied at once into a mapped peer's segment.
    pub direct: u64,
    /// Puts sent at once as gex-rma NBI puts.
    pub plain: u64,
    /// Puts carried by trains (including those that rode a signal).
    pub coalesced: u64,
    /// Train messages sent (with or without a signal, or carried by a program's
    /// request).
    pub trains: u64,
    /// Signals sent.
    pub signals: u64,
    /// Signals that carried puts.
    pub piggybacked: u64,
    /// Records and signals this endpoint received outside its segment and dropped
    /// (and carried program messages whose handler is not registered here).
    pub dropped: u64,
    /// Program requests sent with [`SchedExt::sched_request`].
    pub requests: u64,
    /// Program requests that carried puts (a train rode them).
    pub carried: u64,
}

/// Where a put goes now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    Direct,
    Plain,
    /// Into the train; `hold`: wait for a signal.
    Train {
        hold: bool,
    },
}

/// The scheduler's state for one destination endpoint.
#[derive(Debug)]
struct Dest {
    /// Records of the train being built.
    train: Vec<u8>,
    /// Records in `train`.
    recs: u32,
    /// The train waits for a signal (not sent by the progress hook).
    hold: bool,
    /// Puts in the current interval.
    puts: u32,
    /// Exponential average of puts per interval.
    avg_puts: f32,
    /// Exponential average of the intervals that ended with a signal or a program's
    /// request (0..1).
    by_signal: f32,
}

impl Dest {
    fn new() -> Dest {
        // Optimistic start: trains until the statistics say otherwise.
        Dest {
            train: Vec::new(),
            recs: 0,
            hold: false,
            puts: 0,
            avg_puts: 2.0,
            by_signal: 0.0,
        }
    }

    fn end_interval(&mut self, by_signal: bool) {
        self.avg_puts = 0.5 * self.avg_puts + 0.5 * self.puts as f32;
        self.by_signal = 0.5 * self.by_signal + if by_signal { 0.5 } else { 0.0 };
        self.puts = 0;
    }
}

/// The scheduler (a component of the overlap layer's state).
#[derive(Debug)]
pub(crate) struct Sched {
    pub(crate) mode: SchedMode,
    /// Train capacity in bytes (`GEX_OVERLAP_TRAIN`, bounded by the conduit's Medium).
    cap: usize,
    /// Largest put that rides a train (`GEX_OVERLAP_TRAIN_PUT`).
    small: usize,
    dests: HashMap<EpAddr, Dest>,
    /// Trains and signals sent as messages and not acknowledged yet.
    outstanding: u64,
    /// Plain puts issued since the last gex-rma NBI sync.
    plain_out: bool,
    /// This endpoint's segment (address, length), for incoming trains.
    seg: (usize, usize),
    h_train: HandlerId,
    h_ack: HandlerId,
    h_carry: HandlerId,
    /// Senders of carriers whose program handler replied: their acknowledgement is a
    /// request, sent by the progress hook.
    acks: Vec<EpAddr>,
    stats: SchedStats,
}

impl Sched {
    pub(crate) fn new(
        mode: SchedMode,
        cap: usize,
        small: usize,
        seg: (usize, usize),
        handlers: (HandlerId, HandlerId, HandlerId),
    ) -> Sched {
        Sched {
            mode,
            cap,
            small,
            dests: HashMap::new(),
            outstanding: 0,
            plain_out: false,
            seg,
            h_train: handlers.0,
            h_ack: handlers.1,
            h_carry: handlers.2,
            acks: Vec::new(),
            stats: SchedStats::default(),
        }
    }

    fn route<C: Conduit>(&mut self, cx: &Cx<'_, C>, dst: EpAddr, len: usize) -> Route {
        let cap = self.cap.min(cx.max_medium(dst));
        let fits = len <= self.small && REC_HDR + len <= cap;
        let d = self.dests.entry(dst).or_insert_with(Dest::new);
        match self.mode {
            SchedMode::Plain => Route::Plain,
            SchedMode::Train if fits => Route::Train { hold: false },
            SchedMode::Piggyback if fits => Route::Train { hold: true },
            SchedMode::Train | SchedMode::Piggyback => Route::Plain,
            SchedMode::Auto if cx.peer_segment(dst).is_some() => Route::Direct,
            SchedMode::Auto if !fits => Route::Plain,
            SchedMode::Auto if d.by_signal >= 0.5 => Route::Train { hold: true },
            SchedMode::Auto if d.avg_puts >= 2.0 => Route::Train { hold: false },
            SchedMode::Auto => Route::Plain,
        }
    }

    /// Appends a record to `dst`'s train; `false` if the train must leave first.
    fn append<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        dst: EpAddr,
        off: usize,
        data: &[u8],
        hold: bool,
    ) -> bool {
        let cap = self.cap.min(cx.max_medium(dst));
        let d = self.dests.entry(dst).or_insert_with(Dest::new);
        if d.train.len() + REC_HDR + data.len() > cap {
            return false;
        }
        if d.train.capacity() == 0 {
            d.train.reserve_exact(cap);
        }
        d.train.extend_from_slice(&(off as u64).to_le_bytes());
        d.train
            .extend_from_slice(&(data.len() as u32).to_le_bytes());
        d.train.extend_from_slice(data);
        d.recs += 1;
        d.hold = hold;
        d.puts += 1;
        self.stats.coalesced += 1;
        if !hold {
            // The progress hook sends it on the endpoint's next poll.
            cx.set_busy();
        }
        true
    }

    /// Sends `dst`'s train, with a signal when `sig` is given. `Ok(false)`:
    /// back-pressure, nothing sent (try again after a poll).
    fn send<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        dst: EpAddr,
        sig: Option<(usize, u64)>,
    ) -> Result<bool, OverlapError> {
        let empty = Vec::new();
        let (payload, recs) = match self.dests.get(&dst) {
            Some(d) => (&d.train, d.recs),
            None => (&empty, 0),
        };
        if recs == 0 && sig.is_none() {
            return Ok(true);
        }
        let (flags, off, add) = match sig {
            Some((o, a)) => (HAS_SIGNAL, o as u64, a),
            None => (0, 0, 0),
        };
        let args = [
            flags,
            off as u32,
            (off >> 32) as u32,
            add as u32,
            (add >> 32) as u32,
        ];
        match cx.try_request(dst, self.h_train, Category::Medium, &args, payload, 0) {
            Ok(Injected::Sent) => {}
            Ok(_) => return Ok(false),
            Err(e) => return Err(OverlapError::Am(e)),
        }
        self.outstanding += 1;
        self.stats.trains += u64::from(recs > 0);
        if sig.is_some() {
            self.stats.signals += 1;
            self.stats.piggybacked += u64::from(recs > 0);
        }
        let d = self.dests.entry(dst).or_insert_with(Dest::new);
        d.train.clear();
        d.recs = 0;
        d.hold = false;
        Ok(true)
    }

    /// Sends the program's request (`handler`, Short or Medium `body`) to `dst`
    /// carrying `dst`'s train (module documentation, "Wire"; the caller checked that
    /// both fit one message). `Ok(false)`: back-pressure, nothing sent.
    fn carry<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        dst: EpAddr,
        handler: HandlerId,
        body: &Body<'_>,
    ) -> Result<bool, OverlapError> {
        let Some(d) = self.dests.get_mut(&dst) else {
            return Ok(false);
        };
        let split = d.train.len();
        let n = body.args().len() + CARRY_ARGS;
        let mut args = [0u32; MAX_CARRIER_ARGS];
        let medium = if body.category() == Category::Medium {
            CARRY_MEDIUM
        } else {
            0
        };
        args[0] = u32::from(handler.index()) | medium;
        args[1] = split as u32;
        args[CARRY_ARGS..n].copy_from_slice(body.args());
        // The program's payload after the records: the train's buffer keeps its
        // capacity across trains, so this allocates only the first time it grows.
        d.train.extend_from_slice(body.payload());
        let r = cx.try_request(dst, self.h_carry, Category::Medium, &args[..n], &d.train, 0);
        match r {
            Ok(Injected::Sent) => {}
            Ok(_) => {
                d.train.truncate(split);
                return Ok(false);
            }
            Err(e) => {
                d.train.truncate(split);
                return Err(OverlapError::Am(e));
            }
        }
        d.train.clear();
        d.recs = 0;
        d.hold = false;
        self.outstanding += 1;
        self.stats.trains += 1;
        self.stats.requests += 1;
        self.stats.carried += 1;
        Ok(true)
    }

    /// Sends the acknowledgements of carriers whose program handler replied; true if
    /// one is left (back-pressure).
    fn send_acks<C: Conduit>(&mut self, cx: &mut Cx<'_, C>) -> bool {
        while let Some(&src) = self.acks.last() {
            match cx.try_request(src, self.h_ack, Category::Short, &[], &[], 0) {
                Ok(Injected::WouldBlock) => return true,
                // Sent, or the requester is gone (its flush then fails on its side).
                _ => _ = self.acks.pop(),
            }
        }
        false
    }

    /// Sends every train the progress hook may send (not held); true if one is left.
    fn send_ready<C: Conduit>(&mut self, cx: &mut Cx<'_, C>) -> bool {
        let ready: Vec<EpAddr> = self
            .dests
            .iter()
            .filter(|(_, d)| d.recs > 0 && !d.hold)
            .map(|(a, _)| *a)
            .collect();
        let mut left = false;
        for dst in ready {
            left |= !matches!(self.send(cx, dst, None), Ok(true));
        }
        left
    }

    /// Copies a train's records into this endpoint's segment.
    fn apply(&mut self, records: &[u8]) {
        let (base, seg_len) = self.seg;
        for (off, bytes) in Records(records) {
            if off.checked_add(bytes.len()).is_none_or(|e| e > seg_len) {
                self.stats.dropped += 1;
                continue;
            }
            // SAFETY: [off, off+len) lies in this endpoint's segment (checked above),
            // mapped for the endpoint's life; byte-wise atomic stores are race-free
            // against other ranks' accesses to the same bytes.
            unsafe { gex_sync::copy::atomic_write((base + off) as *mut u8, bytes) };
        }
    }

    /// An incoming train: its records, then its signal; acknowledged.
    fn on_train(&mut self, t: &mut Token<'_>, am: Am<'_>) {
        let (base, seg_len) = self.seg;
        self.apply(am.payload());
        let a = am.args();
        if a.len() >= 5 && a[0] & HAS_SIGNAL != 0 {
            let off = (u64::from(a[1]) | u64::from(a[2]) << 32) as usize;
            let add = u64::from(a[3]) | u64::from(a[4]) << 32;
            match signal_word(base, seg_len, off) {
                // SAFETY: an aligned word inside this endpoint's segment (checked), mapped
                // while it lives; `gex_sync::word` (byte-sized against copies).
                Some(w) => _ = unsafe { gex_sync::word::fetch_add64(w, add) },
                None => self.stats.dropped += 1,
            }
        }
        // A reply fails only if the requester is gone; its flush then fails on its side.
        let _ = t.reply(self.h_ack, Body::short(&[]));
    }

    /// An incoming program request carrying a train: the records, then the program's
    /// handler (which sees them in place); acknowledged.
    fn on_carry(&mut self, t: &mut Token<'_>, am: Am<'_>) {
        let a = am.args();
        let parts = a.get(..CARRY_ARGS).and_then(|h| {
            let (recs, payload) = am.payload().split_at_checked(h[1] as usize)?;
            let handler = HandlerId::try_at((h[0] & 0xff) as u8).ok()?;
            Some((handler, h[0] & CARRY_MEDIUM != 0, recs, payload))
        });
        match parts {
            Some((handler, medium, recs, payload)) => {
                self.apply(recs);
                let args = &a[CARRY_ARGS..];
                let body = if medium {
                    Body::medium(args, payload)
                } else {
                    Body::short(args)
                };
                // An error: the program's table here differs from the sender's.
                if t.deliver_client(handler, body).is_err() {
                    self.stats.dropped += 1;
                }
            }
            None => self.stats.dropped += 1,
        }
        if t.has_replied() {
            // The program's handler used the reply: acknowledge by a request.
            self.acks.push(t.src());
        } else {
            let _ = t.reply(self.h_ack, Body::short(&[]));
        }
    }

    /// An acknowledgement.
    fn on_ack(&mut self) {
        self.outstanding = self.outstanding.saturating_sub(1);
    }
}

/// The address of the signal word at `off` of the memory at `base` (`len` bytes), if
/// 8-aligned and inside. Signal words are read and changed only through
/// `gex_sync::word` operations, defined over bytes like the copies of puts, so a put
/// racing with a signal is byte against byte, never a mixed-size race.
fn signal_word(base: usize, len: usize, off: usize) -> Option<*mut u8> {
    let addr = base.checked_add(off)?;
    if addr % 8 != 0 || off.checked_add(8).is_none_or(|e| e > len) {
        return None;
    }
    Some(addr as *mut u8)
}

/// The records of a train's payload: `(offset, bytes)`; stops at a truncated record.
struct Records<'a>(&'a [u8]);

impl<'a> Iterator for Records<'a> {
    type Item = (usize, &'a [u8]);
    fn next(&mut self) -> Option<Self::Item> {
        let (hdr, rest) = self.0.split_at_checked(REC_HDR)?;
        let off = u64::from_le_bytes(hdr[..8].try_into().ok()?) as usize;
        let len = u32::from_le_bytes(hdr[8..].try_into().ok()?) as usize;
        let (bytes, rest) = rest.split_at_checked(len)?;
        self.0 = rest;
        Some((off, bytes))
    }
}

impl Overlap {
    /// Runs handler `h` of the scheduler.
    pub(crate) fn sched_handle(self: Pin<&mut Self>, h: u8, t: &mut Token<'_>, am: Am<'_>) {
        let me = self.get_mut();
        match h {
            H_TRAIN => me.sched.on_train(t, am),
            H_CARRY => me.sched.on_carry(t, am),
            _ => me.sched.on_ack(),
        }
    }

    /// The progress hook's part: trains not held leave on the next poll.
    pub(crate) fn sched_progress<C: Conduit>(&mut self, cx: &mut Cx<'_, C>) -> Progress {
        let acks_left = self.sched.send_acks(cx);
        if self.sched.send_ready(cx) | acks_left {
            Progress::Spinning
        } else if self.sched.outstanding > 0 {
            Progress::Busy
        } else {
            Progress::Idle
        }
    }

    /// Trains and signals not acknowledged yet (for `describe`).
    pub(crate) fn sched_outstanding(&self) -> u64 {
        self.sched.outstanding
    }
}

/// Message scheduling on an endpoint carrying the overlap layer (module
/// documentation).
///
/// ```
/// use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder};
/// use gex_overlap::{Overlap, SchedExt, SchedMode};
/// use gex_rma::{GlobalPtr, Rma};
///
/// let client = ClientBuilder::new().layer::<Rma>().layer::<Overlap>()
///     .segment_size(1 << 16).init::<Loopback>(Box::new(Singleton::new()))?;
/// let mut ep = client.endpoint(0)?;
/// let me = ep.addr();
/// ep.set_sched(SchedMode::Train)?;
/// for i in 0..16u8 {
///     ep.sched_put(GlobalPtr::new(me, 64 + 8 * i as usize), &[i; 8])?;
/// }
/// ep.sched_signal(GlobalPtr::new(me, 0), 1)?; // the 16 puts ride this signal
/// assert_eq!(ep.signal_wait(0, 1)?, 1);
/// ep.sched_flush()?;
/// let mut last = [0u8; 8];
/// ep.segment().read(64 + 8 * 15, &mut last)?;
/// assert_eq!(last, [15; 8]);
/// let s = ep.sched_stats()?;
/// assert_eq!((s.coalesced, s.piggybacked), (16, 1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait SchedExt {
    /// Schedules a put of `data` to `dst`: `data` is copied (or sent) before this
    /// returns, so it may be reused at once; the put is complete at the target after
    /// [`sched_flush`](Self::sched_flush), and ordered before a later
    /// [`sched_signal`](Self::sched_signal) to the same endpoint.
    ///
    /// # Errors
    /// [`OverlapError::OutOfSegment`] (nothing is sent), [`OverlapError::NotAttached`],
    /// [`OverlapError::Rma`] (plain path), [`OverlapError::Am`] (a train could not be
    /// sent).
    fn sched_put(&mut self, dst: GlobalPtr<u8>, data: &[u8]) -> Result<(), OverlapError>;

    /// Adds `add` to the 64-bit word at `sig` once every put scheduled to `sig`'s
    /// endpoint before this call is complete there (a put-with-signal): the puts
    /// waiting for it ride the same message. The target reads the word with
    /// [`signal_wait`](Self::signal_wait). A put racing with the signal's addition to
    /// the same word leaves it unspecified (never undefined behaviour).
    ///
    /// # Errors
    /// [`OverlapError::OutOfSegment`] (the word is not an aligned 8 bytes inside the
    /// target's segment), as [`sched_put`](Self::sched_put) otherwise.
    fn sched_signal(&mut self, sig: GlobalPtr<u64>, add: u64) -> Result<(), OverlapError>;

    /// Sends the program's active message (`handler`, a Short or Medium `body`) to
    /// `dst` as a request, after every put scheduled to `dst` before this call: when
    /// `dst`'s handler runs, those puts are in place in its segment. The puts waiting
    /// in `dst`'s train ride the same message (the target applies them, then runs the
    /// handler); plain puts are completed first, and trains to `dst` that left
    /// earlier are applied before it (a conduit delivers one sender's messages in
    /// order). The handler runs as for [`Endpoint::request`](gex_core::Endpoint::request): its
    /// token's source is this endpoint and it may reply. The body is copied before
    /// this returns. When the train and the body do not fit one message (the
    /// conduit's Medium, two arguments more than the program's), the train leaves
    /// first and the request follows it; with nothing waiting the request goes as
    /// is.
    ///
    /// For the statistics of [`SchedMode::Auto`] a request ends an interval of `dst`
    /// as a signal does, and in [`SchedMode::Piggyback`] puts wait for the next signal
    /// or request.
    ///
    /// ```
    /// use gex_core::{boot::Singleton, loopback::Loopback, Am, Body, ClientBuilder, Token};
    /// use gex_overlap::{Overlap, SchedExt, SchedMode};
    /// use gex_rma::{GlobalPtr, Rma};
    /// use std::sync::{Arc, atomic::{AtomicU32, Ordering}};
    ///
    /// let client = ClientBuilder::new().layer::<Rma>().layer::<Overlap>()
    ///     .segment_size(1 << 16).init::<Loopback>(Box::new(Singleton::new()))?;
    /// let mut ep = client.endpoint(0)?;
    /// let me = ep.addr();
    /// let got = Arc::new(AtomicU32::new(0));
    /// let g = got.clone();
    /// let h = ep.register(move |_t: &mut Token<'_>, am: Am<'_>| {
    ///     g.store(am.args()[0], Ordering::Release);
    /// })?;
    /// ep.set_sched(SchedMode::Piggyback)?;
    /// for i in 0..4u8 {
    ///     ep.sched_put(GlobalPtr::new(me, 64 + 8 * i as usize), &[i; 8])?;
    /// }
    /// ep.sched_request(me, h, Body::medium(&[7], b"and the program's bytes"))?;
    /// ep.wait_until(|| got.load(Ordering::Acquire) == 7);
    /// ep.sched_flush()?;
    /// let s = ep.sched_stats()?;
    /// assert_eq!((s.coalesced, s.requests, s.carried), (4, 1, 1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`OverlapError::LongRequest`] (a Long body), [`OverlapError::Am`] with the
    /// error [`Endpoint::request`](gex_core::Endpoint::request) gives a bad request
    /// (`ReservedHandler`, `UnregisteredHandler`: not a handler the program
    /// registered, `TooManyArgs`, `PayloadTooLarge`, `BadRank`, `BadEndpoint`;
    /// nothing is sent), or what the sending of a train or the
    /// request met; [`OverlapError::NotAttached`], [`OverlapError::Rma`] (completing
    /// plain puts first).
    fn sched_request(
        &mut self,
        dst: EpAddr,
        handler: HandlerId,
        body: Body<'_>,
    ) -> Result<(), OverlapError>;

    /// Sends every train and waits until every scheduled put and signal is complete at
    /// its target: a synchronisation point ([`OverlapExt::retire_all`] calls it).
    ///
    /// [`OverlapExt::retire_all`]: crate::OverlapExt::retire_all
    ///
    /// # Errors
    /// [`OverlapError::NotAttached`], [`OverlapError::Rma`], [`OverlapError::Am`].
    fn sched_flush(&mut self) -> Result<(), OverlapError>;

    /// Polls the endpoint until the 64-bit word at `offset` of its own segment is at
    /// least `at_least`; returns its value.
    ///
    /// # Errors
    /// [`OverlapError::OutOfSegment`] (not an aligned word inside the segment),
    /// [`OverlapError::NotAttached`].
    fn signal_wait(&mut self, offset: usize, at_least: u64) -> Result<u64, OverlapError>;

    /// Sets how later scheduled puts travel (overrides `GEX_OVERLAP_SCHED`).
    ///
    /// # Errors
    /// [`OverlapError::NotAttached`].
    fn set_sched(&mut self, mode: SchedMode) -> Result<(), OverlapError>;

    /// What the scheduler did so far.
    ///
    /// # Errors
    /// [`OverlapError::NotAttached`].
    fn sched_stats(&mut self) -> Result<SchedStats, OverlapError>;
}

/// Checks `[off, off+len)` against the destination rank's segment length.
fn check_dst<C: Conduit>(
    cx: &Cx<'_, C>,
    dst: EpAddr,
    off: usize,
    len: usize,
) -> Result<(), OverlapError> {
    let seg_len = match cx.peer_segment(dst) {
        Some((_, l)) => l,
        None => cx
            .layout()
            .seg_len
            .get(dst.rank as usize)
            .copied()
            .unwrap_or(0),
    };
    if off.checked_add(len).is_none_or(|e| e > seg_len) {
        return Err(OverlapError::OutOfSegment {
            offset: off,
            len,
            seg_len,
        });
    }
    Ok(())
}

/// Sends `dst`'s train (with `sig`), polling through back-pressure.
fn send_blocking<C: Conduit>(
    ep: &mut gex_core::Endpoint<C>,
    dst: EpAddr,
    sig: Option<(usize, u64)>,
) -> Result<(), OverlapError> {
    let mut spins = 0u32;
    while !with(ep, |l, cx| l.sched.send(cx, dst, sig))?? {
        backoff(ep, &mut spins);
    }
    Ok(())
}

impl<C: Conduit> SchedExt for gex_core::Endpoint<C> {
    fn sched_put(&mut self, dst: GlobalPtr<u8>, data: &[u8]) -> Result<(), OverlapError> {
        let (a, off) = (dst.addr(), dst.byte_offset());
        let route = with(self, |l, cx| -> Result<Option<Route>, OverlapError> {
            check_dst(cx, a, off, data.len())?;
            let route = l.sched.route(cx, a, data.len());
            if let Route::Direct = route
                && let Some((p, _)) = cx.peer_segment(a)
            {
                // SAFETY: inside the peer's mapped segment (checked by `check_dst`
                // against the mapping's length); byte-wise atomic stores.
                unsafe { gex_sync::copy::atomic_write(p.as_ptr().add(off), data) };
                l.sched.stats.direct += 1;
                l.sched.dests.entry(a).or_insert_with(Dest::new).puts += 1;
                return Ok(None);
            }
            if let Route::Train { hold } = route {
                if l.sched.append(cx, a, off, data, hold) {
                    return Ok(None);
                }
                return Ok(Some(Route::Train { hold }));
            }
            Ok(Some(route))
        })??;
        match route {
            None => Ok(()),
            Some(Route::Train { hold }) => {
                // The train is full: it leaves, and the put starts the next one.
                send_blocking(self, a, None)?;
                let ok = with(self, |l, cx| l.sched.append(cx, a, off, data, hold))?;
                debug_assert!(ok, "a put that fits a train fits an empty one");
                Ok(())
            }
            Some(_) => {
                self.put(dst, data, Nbi)?;
                with(self, |l, _| {
                    l.sched.plain_out = true;
                    l.sched.stats.plain += 1;
                    l.sched.dests.entry(a).or_insert_with(Dest::new).puts += 1;
                })?;
                Ok(())
            }
        }
    }

    fn sched_signal(&mut self, sig: GlobalPtr<u64>, add: u64) -> Result<(), OverlapError> {
        let (a, off) = (sig.addr(), sig.byte_offset());
        type Seen = (Option<(std::ptr::NonNull<u8>, usize)>, bool, bool);
        let (mapped, plain_out, has_train) = with(self, |l, cx| -> Result<Seen, OverlapError> {
            check_dst(cx, a, off, 8)?;
            if off % 8 != 0 {
                return Err(OverlapError::OutOfSegment {
                    offset: off,
                    len: 8,
                    seg_len: 0,
                });
            }
            let has_train = l.sched.dests.get(&a).is_some_and(|d| d.recs > 0);
            if let Some(d) = l.sched.dests.get_mut(&a) {
                d.end_interval(true);
            }
            Ok((cx.peer_segment(a), l.sched.plain_out, has_train))
        })??;
        if plain_out {
            // Plain puts travel apart from the signal's message: complete them first.
            self.sync_nbi(NbiCategories::PUTS)?;
            with(self, |l, _| l.sched.plain_out = false)?;
        }
        if let (Some((p, len)), false) = (mapped, has_train) {
            // Direct puts are in place: the signal is one atomic add.
            let w =
                signal_word(p.as_ptr() as usize, len, off).ok_or(OverlapError::OutOfSegment {
                    offset: off,
                    len: 8,
                    seg_len: len,
                })?;
            // SAFETY: an aligned word inside the peer's segment (checked), mapped while
            // the endpoint lives; `gex_sync::word` (byte-sized against copies), sequentially
            // consistent, so after the direct puts' copies.
            unsafe { gex_sync::word::fetch_add64(w, add) };
            with(self, |l, _| l.sched.stats.signals += 1)?;
            return Ok(());
        }
        send_blocking(self, a, Some((off, add)))
    }

    fn sched_request(
        &mut self,
        dst: EpAddr,
        handler: HandlerId,
        body: Body<'_>,
    ) -> Result<(), OverlapError> {
        if body.category() == Category::Long {
            return Err(OverlapError::LongRequest);
        }
        // (a train waits, it fits one message with the body, plain puts are out)
        type Plan = (bool, bool, bool);
        let (has_train, fits, plain_out) = with(self, |l, cx| -> Result<Plan, OverlapError> {
            // The program's own request, checked as the core checks it.
            cx.check_client_request(dst, handler, &body)
                .map_err(OverlapError::Am)?;
            let (nargs, len) = (body.args().len(), body.payload().len());
            let (max_args, max_medium) = (cx.max_args(), cx.max_medium(dst));
            let (has_train, fits) = match l.sched.dests.get_mut(&dst) {
                Some(d) => {
                    d.end_interval(true);
                    let fits = nargs + CARRY_ARGS <= max_args.min(MAX_CARRIER_ARGS)
                        && d.train.len() + len <= max_medium;
                    // Held until it leaves with the request (the polls below must not
                    // send it apart).
                    d.hold |= d.recs > 0 && fits;
                    (d.recs > 0, fits)
                }
                None => (false, true),
            };
            Ok((has_train, fits, l.sched.plain_out))
        })??;
        if plain_out {
            // Plain puts travel apart from the request: complete them first.
            self.sync_nbi(NbiCategories::PUTS)?;
            with(self, |l, _| l.sched.plain_out = false)?;
        }
        if has_train && !fits {
            send_blocking(self, dst, None)?;
        }
        // Trains that left earlier (and the one just sent) are applied before the
        // request runs: a conduit delivers one sender's messages in order.
        if has_train && fits {
            let mut spins = 0u32;
            while !with(self, |l, cx| l.sched.carry(cx, dst, handler, &body))?? {
                backoff(self, &mut spins);
            }
            return Ok(());
        }
        self.request(dst, handler, body).map_err(OverlapError::Am)?;
        with(self, |l, _| l.sched.stats.requests += 1)?;
        Ok(())
    }

    fn sched_flush(&mut self) -> Result<(), OverlapError> {
        let (dests, plain_out) = with(self, |l, _| {
            for d in l.sched.dests.values_mut() {
                d.end_interval(false);
            }
            let v: Vec<EpAddr> = l
                .sched
                .dests
                .iter()
                .filter(|(_, d)| d.recs > 0)
                .map(|(a, _)| *a)
                .collect();
            (v, std::mem::take(&mut l.sched.plain_out))
        })?;
        for dst in dests {
            send_blocking(self, dst, None)?;
        }
        if plain_out {
            self.sync_nbi(NbiCategories::PUTS)?;
        }
        let mut spins = 0u32;
        while with(self, |l, _| l.sched.outstanding)? > 0 {
            backoff(self, &mut spins);
        }
        Ok(())
    }

    fn signal_wait(&mut self, offset: usize, at_least: u64) -> Result<u64, OverlapError> {
        let (base, len) = with(self, |l, _| l.sched.seg)?;
        let w = signal_word(base, len, offset).ok_or(OverlapError::OutOfSegment {
            offset,
            len: 8,
            seg_len: len,
        })?;
        let mut spins = 0u32;
        loop {
            // SAFETY: an aligned word inside this endpoint's segment (checked), mapped
            // while it lives; `gex_sync::word` (byte-sized against copies).
            let v = unsafe { gex_sync::word::load64(w, gex_sync::atomic::Ordering::Acquire) };
            if v >= at_least {
                return Ok(v);
            }
            backoff(self, &mut spins);
        }
    }

    fn set_sched(&mut self, mode: SchedMode) -> Result<(), OverlapError> {
        with(self, |l, _| l.sched.mode = mode)
    }

    fn sched_stats(&mut self) -> Result<SchedStats, OverlapError> {
        with(self, |l, _| l.sched.stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(off: u64, b: &[u8]) -> Vec<u8> {
        let mut v = off.to_le_bytes().to_vec();
        v.extend_from_slice(&(b.len() as u32).to_le_bytes());
        v.extend_from_slice(b);
        v
    }

    #[test]
    fn records_decode_in_order_and_stop_at_a_truncated_one() {
        let mut p = rec(8, b"abc");
        p.extend(rec(1 << 40, b""));
        p.extend(rec(3, b"xy"));
        let got: Vec<_> = Records(&p).collect();
        assert_eq!(
            got,
            vec![(8, &b"abc"[..]), (1 << 40, &b""[..]), (3, &b"xy"[..])]
        );
        p.truncate(p.len() - 1);
        assert_eq!(Records(&p).count(), 2);
    }

    #[test]
    fn statistics_pick_plain_for_lone_puts_and_hold_before_signals() {
        let mut d = Dest::new();
        for _ in 0..4 {
            d.puts = 1;
            d.end_interval(false);
        }
        assert!(d.avg_puts < 2.0 && d.by_signal < 0.5);
        for _ in 0..2 {
            d.puts = 1;
            d.end_interval(true);
        }
        assert!(d.by_signal >= 0.5);
    }

    #[test]
    fn signal_words_must_be_aligned_and_inside() {
        let base = 4096usize;
        let w = |off| signal_word(base, 32, off).is_some();
        assert!(w(0) && w(24));
        assert!(!w(28) && !w(4) && !w(32) && !w(usize::MAX - 3));
    }
}
