//! [`RmaEp`]: the RMA state of one endpoint, the direct (shared-memory) path and the
//! AM reference path.
//!
//! # Safety
//!
//! Unsafe code here does three things:
//! - copies between local buffers and a peer's segment mapped by the conduit
//!   ([`ConduitEp::peer_segment`]); the conduit keeps the mapping alive for the life of
//!   the conduit, which the wrapped endpoint keeps alive; every range was checked against
//!   the published segment length before the copy. `std::ptr::copy` is used because
//!   self-targeted ranges may overlap the source.
//! - lets AM handlers write get replies into local destinations recorded as raw
//!   pointers in the pending-operation table. A destination is either borrowed by a
//!   blocking call that waits for completion before returning (and deletes the entry
//!   if it returns early with an error, so late replies are dropped), owned by a
//!   [`GetEvent`] that leaks it instead of freeing it while the operation may still be
//!   pending, or supplied by the caller of an `unsafe` function whose `# Safety`
//!   contract keeps it alive and untouched until completion.
//! - lets handlers read and write their own endpoint's segment (mapped for the life of
//!   the conduit) within ranges they bounds-check themselves.
//! - hands buffers to the conduit's native operations ([`ConduitEp::native_put`],
//!   [`ConduitEp::native_get`], [`ConduitEp::native_atomic`]), which may use them until
//!   the operation completes. A buffer passed to a pending native operation is one of:
//!   borrowed by a blocking call that waits for the ticket before returning (also on
//!   error: started operations are drained first); a copy owned by the pending entry
//!   ([`NativePend`]) for nonblocking puts whose source the caller may reuse at once; a
//!   get destination or fetch result under the same rules as the AM path (owned by an
//!   event that leaks it while pending, or promised by an `unsafe` caller).
#![allow(unsafe_code)]

use crate::RmaError;
use crate::event::{Completion, Event, GetEvent, PutEvent};
use crate::ptr::{GlobalPtr, Strided, Vis};
use bytemuck::Pod;
use gex_core::spi::{Conduit, ConduitEp, Native};
use gex_core::{Am, Category, Endpoint, EpAddr, Flags, HandlerIndex, Token};
use std::collections::{HashMap, HashSet};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard};

/// First handler index gex-rma uses. gex-rma owns `16..=47` (it uses 16..=24 and 30..=32 today);
/// `48..=127` are reserved for gex-coll; `1..=15` belong to gex-core.
pub const FIRST_RMA_HANDLER: HandlerIndex = 16;
/// Last handler index reserved for gex-rma.
pub const LAST_RMA_HANDLER: HandlerIndex = 47;

const H_PUT_LONG: HandlerIndex = 16;
const H_PUT_PACKED: HandlerIndex = 17;
const H_ACK: HandlerIndex = 18;
const H_GET: HandlerIndex = 19;
const H_GET_PACKED: HandlerIndex = 20;
const H_GET_REPLY: HandlerIndex = 21;
const H_MEMSET: HandlerIndex = 22;
/// Small put carried in the arguments, nonblocking:
/// `[op, off lo, off hi (24 bits) | len << 24, data words...]`.
const H_PUT_SHORT: HandlerIndex = 30;
/// Acknowledgement of a small put from a blocking call: counted, no table.
const H_ACK_FAST: HandlerIndex = 31;
/// Small put from a blocking call: `[off lo, off hi (24 bits) | len << 24, data
/// words...]`, acknowledged by [`H_ACK_FAST`]. Two words fewer than the request it
/// replaced keep the 8-byte put's round trip within 1.2× of a bare Short AM's.
const H_PUT_SHORT_B: HandlerIndex = 32;

/// Argument words before the data of an [`H_PUT_SHORT`] request.
const SHORT_HDR: usize = 3;
/// Largest put sent as a Short AM with its bytes in the arguments (every conduit
/// carries at least [`gex_core::spi::MIN_MAX_ARGS`] arguments).
pub(crate) const SHORT_PUT_MAX: usize = 4 * (gex_core::spi::MIN_MAX_ARGS - SHORT_HDR);
/// Offsets below this fit the 24 high bits of a small put's offset word.
const SHORT_PUT_OFF_LIMIT: usize = 1 << 56;

/// Writes the bytes of a small put (`words` after the header, `len` bytes) at `off`
/// of the segment `seg` of `seg_len` bytes; false if the message is malformed.
fn short_put_write(seg: RawPtr, seg_len: usize, off: usize, len: usize, words: &[u32]) -> bool {
    let ok = len <= 4 * words.len() && off.checked_add(len).is_some_and(|e| e <= seg_len);
    if ok {
        let mut bytes = [0u8; SHORT_PUT_MAX];
        for (i, w) in words.iter().take(SHORT_PUT_MAX / 4).enumerate() {
            bytes[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
        }
        let n = len.min(SHORT_PUT_MAX);
        // SAFETY: [off, off+len) is inside this EP's segment (checked above).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), seg.0.add(off), n) };
    }
    ok
}

/// Offset and length from the two offset words of a small put.
fn short_put_range(lo: u32, hi_len: u32) -> (usize, usize) {
    (join(lo, hi_len & 0x00ff_ffff), (hi_len >> 24) as usize)
}

/// Bytes of one packed-piece header: offset (u64 LE) and length (u32 LE).
const PIECE_HDR: usize = 12;

/// A byte range to move: `len` bytes at `remote` in the target segment and at `local`
/// from the local base pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Chunk {
    pub(crate) remote: usize,
    pub(crate) local: usize,
    pub(crate) len: usize,
}

/// A raw pointer that may cross into handler closures (see the module's `# Safety`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawPtr(pub(crate) *mut u8);
// SAFETY: the pointer is only dereferenced under the rules in the module docs, on the
// thread that drives the endpoint.
unsafe impl Send for RawPtr {}

#[derive(Debug)]
pub(crate) struct Op {
    /// Outstanding acknowledgements (puts, memset) or bytes (gets).
    pub(crate) remaining: usize,
    /// Get destination base (null for puts).
    dst: RawPtr,
    /// Bytes valid from `dst`.
    dst_len: usize,
}

#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) ops: HashMap<u32, Op>,
    next: u32,
    /// Messages handlers could not match or had to refuse (protocol errors).
    pub(crate) dropped: u64,
    /// Barrier state.
    pub(crate) bar: crate::barrier::Bar,
}

pub(crate) type Shared = Arc<Mutex<State>>;

pub(crate) fn lock(s: &Shared) -> MutexGuard<'_, State> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

/// How long the source of a put stays valid, which decides what a pending native put
/// may read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Life {
    /// Borrowed by a blocking call that waits for completion before returning.
    Blocking,
    /// Kept alive and unmodified by the caller until completion (`unsafe` contract).
    Kept,
    /// Consumed on return (local completion on return): a native put reads a copy.
    Copy,
}

/// A native operation in flight ([`Native::Pending`]), retired by [`native_progress`].
#[derive(Debug)]
pub(crate) struct NativePend {
    pub(crate) ticket: u64,
    /// The operation it counts toward (one unit of its `remaining`).
    pub(crate) id: u32,
    /// Copy of a put's source, read by the conduit (through a raw pointer) until
    /// completion: held, never read here.
    #[allow(dead_code)]
    pub(crate) src: Option<Arc<[u8]>>,
    /// Fetching atomic: the word the conduit writes (from `Box::into_raw` of a
    /// `Box<u64>`, freed at completion), where to store its value (null: discard) and
    /// the element width (4 or 8).
    pub(crate) land: Option<(RawPtr, RawPtr, usize)>,
}

/// Tests the conduit for completed native operations and retires them: fetched values
/// are stored, source copies released, and their operations' counts decremented.
pub(crate) fn native_progress<C: Conduit>(
    ep: &mut Endpoint<C>,
    st: &Shared,
    native: &mut Vec<NativePend>,
) {
    if native.is_empty() {
        return;
    }
    let cep = ep.conduit_ep();
    let mut guard: Option<MutexGuard<'_, State>> = None;
    native.retain(|p| {
        if !cep.native_test(p.ticket) {
            return true;
        }
        if let Some((w, res, size)) = p.land {
            // SAFETY: `w` came from `Box::into_raw` and the conduit no longer writes it
            // (complete); it is freed exactly once, here.
            let v = *unsafe { Box::from_raw(w.0.cast::<u64>()) };
            // SAFETY: a fetch result location stays valid until its operation
            // completes (module docs); `size` is the width of its element.
            unsafe { store_word(res.0, size, v) };
        }
        let g = guard.get_or_insert_with(|| lock(st));
        match g.ops.get_mut(&p.id) {
            Some(op) if op.remaining > 0 => op.remaining -= 1,
            _ => g.dropped += 1,
        }
        false
    });
}

/// Stores the bit pattern `v` of a `size`-byte element at `res` (nothing if null).
///
/// # Safety
/// `res` is null or valid for a write of `size` bytes.
pub(crate) unsafe fn store_word(res: *mut u8, size: usize, v: u64) {
    if res.is_null() {
        return;
    }
    // SAFETY: valid for `size` bytes (contract); unaligned writes need no alignment.
    unsafe {
        if size == 4 {
            res.cast::<u32>().write_unaligned(v as u32);
        } else {
            res.cast::<u64>().write_unaligned(v);
        }
    }
}

/// [`drive`], also retiring native operations: while any is in flight, polls (and
/// advances the barrier) in a loop without sleeping, since a native completion does
/// not wake a blocked endpoint.
pub(crate) fn drive_native<C: Conduit>(
    ep: &mut Endpoint<C>,
    st: &Shared,
    native: &mut Vec<NativePend>,
    mut cond: impl FnMut() -> bool,
) {
    // Every call polls at least once, also when `cond` already holds: callers loop on
    // `wait_some` until each event has been seen, and a wait that returned without
    // polling while a native operation was pending would starve the AM path (and the
    // target side of peers' native operations, which this rank's polls serve) for as
    // long as the loop runs.
    while !native.is_empty() {
        // One poll, plus barrier rounds if a message made one ready.
        drive(ep, st, || true);
        native_progress(ep, st, native);
        if cond() {
            return;
        }
        std::hint::spin_loop();
    }
    drive(ep, st, cond);
}

/// Waits (following the endpoint's wait policy) until `cond` holds, advancing the
/// barrier whenever a barrier message lets it (rounds are sent outside `wait_until`,
/// which only polls).
pub(crate) fn drive<C: Conduit>(ep: &mut Endpoint<C>, st: &Shared, mut cond: impl FnMut() -> bool) {
    loop {
        let mut bar = false;
        ep.wait_until(|| {
            bar = crate::barrier::ready(st);
            cond() || bar
        });
        if !bar {
            return;
        }
        crate::barrier::advance(ep, st);
    }
}

/// Retires the completed ids of `ids`; true when none is left.
fn retire(s: &Shared, ids: &mut Vec<u32>) -> bool {
    if ids.is_empty() {
        return true;
    }
    let mut st = lock(s);
    ids.retain(|id| match st.ops.get(id) {
        Some(op) if op.remaining > 0 => true,
        Some(_) => {
            st.ops.remove(id);
            false
        }
        None => false,
    });
    ids.is_empty()
}

fn lo(x: usize) -> u32 {
    x as u64 as u32
}
fn hi(x: usize) -> u32 {
    ((x as u64) >> 32) as u32
}
pub(crate) fn join(l: u32, h: u32) -> usize {
    (((h as u64) << 32) | l as u64) as usize
}

#[derive(Debug, Default)]
struct Nbi {
    puts: Vec<u32>,
    gets: Vec<u32>,
    atomics: Vec<u32>,
    region: Option<Vec<u32>>,
    /// Destinations of implicit-event native puts (relaxed: complete locally, see
    /// `ConduitEp::native_put_relaxed`) not flushed yet, outside access regions and in
    /// the open one. A sync flushes them before it waits.
    unflushed: HashSet<EpAddr>,
    region_unflushed: HashSet<EpAddr>,
    /// Scratch list of the flush in progress (kept to reuse its allocation).
    flushing: Vec<EpAddr>,
    /// The last destination recorded, and whether in the region's scope: a flood to one
    /// peer then hashes once per sync, not once per put. Cleared by that scope's flush.
    last_dirty: Option<(bool, EpAddr)>,
}

impl Nbi {
    /// Records a relaxed put to `dst` in the current scope.
    #[inline]
    fn dirty(&mut self, dst: EpAddr) {
        let key = (self.region.is_some(), dst);
        if self.last_dirty == Some(key) {
            return;
        }
        self.last_dirty = Some(key);
        let set = if key.0 {
            &mut self.region_unflushed
        } else {
            &mut self.unflushed
        };
        set.insert(dst);
    }
}

/// An endpoint with RMA: owns the [`Endpoint`] (reachable through `Deref`/`DerefMut`,
/// so AMs still work) and the state of its pending RMA operations.
///
/// Every rank must wrap the endpoint with the same index (handler tables must be
/// identical), and the endpoint must keep being polled by whoever targets it with AM
/// reference traffic: RMA to a rank that does not share memory with the initiator is
/// served by handlers that run when the *target* polls (any gex call that waits, or
/// [`Endpoint::poll`]).
///
/// Like the endpoint it is `Send` but not `Sync`:
/// ```
/// fn sent<T: Send>() {}
/// sent::<gex_rma::RmaEp<gex_core::loopback::Loopback>>();
/// ```
/// ```compile_fail
/// fn shared<T: Sync>() {}
/// shared::<gex_rma::RmaEp<gex_core::loopback::Loopback>>();
/// ```
pub struct RmaEp<C: Conduit> {
    pub(crate) ep: Endpoint<C>,
    pub(crate) st: Shared,
    size: u32,
    /// Published segment length of every rank.
    seg_lens: Vec<usize>,
    /// Per rank: the number of endpoints it has (published at initialisation).
    known_eps: Vec<u32>,
    /// Per rank: the mapping of the segment of its endpoint with our index (`None`:
    /// not asked yet; `Some(None)`: not mapped). Mappings live as long as the conduit.
    #[cfg_attr(gex_force_am_rma, allow(dead_code))]
    direct_cache: Vec<Option<Option<RawPtr>>>,
    nbi: Nbi,
    /// The conduit offers native RMA ([`Capabilities::NATIVE_RMA`](gex_core::Capabilities)),
    /// used for peers it does not map (never with `gex_force_am_rma`).
    native_rma: bool,
    /// The conduit offers NIC atomics (never with `gex_force_am_rma`); atomic domains
    /// decide at creation whether they use them.
    pub(crate) native_atomics: bool,
    /// Native operations in flight.
    pub(crate) native: Vec<NativePend>,
    /// Small blocking puts acknowledged so far ([`H_ACK_FAST`]) and sent so far.
    fast_acks: Arc<gex_sync::atomic::AtomicU64>,
    fast_sent: u64,
}

impl<C: Conduit> std::fmt::Debug for RmaEp<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = lock(&self.st);
        f.debug_struct("RmaEp")
            .field("ep", &self.ep)
            .field("pending", &st.ops.len())
            .field("dropped", &st.dropped)
            .finish()
    }
}

impl<C: Conduit> std::ops::Deref for RmaEp<C> {
    type Target = Endpoint<C>;
    fn deref(&self) -> &Endpoint<C> {
        &self.ep
    }
}
impl<C: Conduit> std::ops::DerefMut for RmaEp<C> {
    fn deref_mut(&mut self) -> &mut Endpoint<C> {
        &mut self.ep
    }
}

impl<C: Conduit> RmaEp<C> {
    /// Wraps `ep`, registering gex-rma's handlers at the reserved indices `16..=24`
    /// and `30..=31`
    /// (gex-rma owns `16..=47`). Not collective, but every rank must wrap the same
    /// endpoint index before any peer targets it with RMA.
    ///
    /// # Errors
    /// [`RmaError::Register`] if an index is taken (another layer registered in
    /// `16..=24` or `30..=31`); the endpoint is dropped with the error.
    pub fn new(mut ep: Endpoint<C>) -> Result<RmaEp<C>, RmaError> {
        let st: Shared = Arc::default();
        let (base, seg_len) = ep.conduit_ep().local_segment();
        let seg = RawPtr(base.as_ptr());

        // Long put: the core has written the payload; acknowledge.
        ep.register_reserved(H_PUT_LONG, |t: &mut Token<'_>, am: Am<'_>| {
            let _ = t.reply_short(H_ACK, &am.args()[..1]);
        })?;
        // Packed put: pieces (offset, len, bytes) written into this segment.
        let s = st.clone();
        ep.register_reserved(H_PUT_PACKED, move |t: &mut Token<'_>, am: Am<'_>| {
            let seg = seg;
            let mut p = am.payload();
            while p.len() >= PIECE_HDR {
                let off = u64::from_le_bytes(p[..8].try_into().unwrap_or_default()) as usize;
                let len = u32::from_le_bytes(p[8..12].try_into().unwrap_or_default()) as usize;
                p = &p[PIECE_HDR..];
                let ok = len <= p.len() && off.checked_add(len).is_some_and(|e| e <= seg_len);
                if !ok {
                    lock(&s).dropped += 1;
                    break;
                }
                // SAFETY: [off, off+len) is inside this EP's segment (checked); the
                // payload is a separate buffer or, if not, `copy` tolerates overlap.
                unsafe { std::ptr::copy(p.as_ptr(), seg.0.add(off), len) };
                p = &p[len..];
            }
            let _ = t.reply_short(H_ACK, &am.args()[..1]);
        })?;
        // Acknowledgement of a put or memset message.
        let s = st.clone();
        ep.register_reserved(H_ACK, move |_t: &mut Token<'_>, am: Am<'_>| {
            let mut st = lock(&s);
            match st.ops.get_mut(&am.args()[0]) {
                Some(op) if op.remaining > 0 => op.remaining -= 1,
                _ => st.dropped += 1,
            }
        })?;
        // Get: [op, off lo, off hi, len, local lo, local hi] -> Medium reply.
        let s = st.clone();
        let mut bounce = Vec::new();
        ep.register_reserved(H_GET, move |t: &mut Token<'_>, am: Am<'_>| {
            let seg = seg;
            let a = am.args();
            let (off, len) = (join(a[1], a[2]), a[3] as usize);
            if off.checked_add(len).is_none_or(|e| e > seg_len) {
                lock(&s).dropped += 1;
                return;
            }
            bounce.resize(len, 0);
            // SAFETY: the range is inside this EP's segment (checked); `bounce` is ours.
            unsafe { std::ptr::copy_nonoverlapping(seg.0.add(off), bounce.as_mut_ptr(), len) };
            let _ = t.reply_medium(H_GET_REPLY, &[a[0], a[4], a[5]], &bounce);
        })?;
        // Packed get: [op, local lo, local hi], payload pieces (offset, len) -> one reply.
        let s = st.clone();
        let mut bounce = Vec::new();
        ep.register_reserved(H_GET_PACKED, move |t: &mut Token<'_>, am: Am<'_>| {
            let seg = seg;
            let a = am.args();
            bounce.clear();
            for e in am.payload().chunks_exact(PIECE_HDR) {
                let off = u64::from_le_bytes(e[..8].try_into().unwrap_or_default()) as usize;
                let len = u32::from_le_bytes(e[8..12].try_into().unwrap_or_default()) as usize;
                if off.checked_add(len).is_none_or(|x| x > seg_len) {
                    lock(&s).dropped += 1;
                    return;
                }
                let at = bounce.len();
                bounce.resize(at + len, 0);
                // SAFETY: the range is inside this EP's segment (checked); `bounce` is ours.
                unsafe {
                    std::ptr::copy_nonoverlapping(seg.0.add(off), bounce.as_mut_ptr().add(at), len)
                };
            }
            let _ = t.reply_medium(H_GET_REPLY, &[a[0], a[1], a[2]], &bounce);
        })?;
        // Get reply: copy into the recorded destination.
        let s = st.clone();
        ep.register_reserved(H_GET_REPLY, move |_t: &mut Token<'_>, am: Am<'_>| {
            let a = am.args();
            let at = join(a[1], a[2]);
            let p = am.payload();
            let mut st = lock(&s);
            let ok = match st.ops.get_mut(&a[0]) {
                Some(op)
                    if !op.dst.0.is_null()
                        && op.remaining >= p.len()
                        && at.checked_add(p.len()).is_some_and(|e| e <= op.dst_len) =>
                {
                    // SAFETY: the destination is alive (module docs) and
                    // [at, at+len) is inside it (checked).
                    unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), op.dst.0.add(at), p.len()) };
                    op.remaining -= p.len();
                    true
                }
                _ => false,
            };
            if !ok {
                st.dropped += 1;
            }
        })?;
        // Memset: [op, off lo, off hi, len lo, len hi, byte].
        let s = st.clone();
        ep.register_reserved(H_MEMSET, move |t: &mut Token<'_>, am: Am<'_>| {
            let seg = seg;
            let a = am.args();
            let (off, len) = (join(a[1], a[2]), join(a[3], a[4]));
            if off.checked_add(len).is_some_and(|e| e <= seg_len) {
                // SAFETY: the range is inside this EP's segment (checked).
                unsafe { std::ptr::write_bytes(seg.0.add(off), a[5] as u8, len) };
            } else {
                lock(&s).dropped += 1;
            }
            let _ = t.reply_short(H_ACK, &a[..1]);
        })?;

        // Small put: bytes in the arguments, written here; acknowledged by a Short reply
        // (counted by the initiator for op 0, else through the table).
        let s = st.clone();
        ep.register_reserved(H_PUT_SHORT, move |t: &mut Token<'_>, am: Am<'_>| {
            let a = am.args();
            let ok = a.len() >= SHORT_HDR && {
                let (off, len) = short_put_range(a[1], a[2]);
                short_put_write(seg, seg_len, off, len, &a[SHORT_HDR..])
            };
            if !ok {
                lock(&s).dropped += 1;
            }
            if let Some(op) = a.first() {
                let _ = t.reply_short(H_ACK, std::slice::from_ref(op));
            }
        })?;
        let s = st.clone();
        ep.register_reserved(H_PUT_SHORT_B, move |t: &mut Token<'_>, am: Am<'_>| {
            let a = am.args();
            let ok = a.len() >= 2 && {
                let (off, len) = short_put_range(a[0], a[1]);
                short_put_write(seg, seg_len, off, len, &a[2..])
            };
            if !ok {
                lock(&s).dropped += 1;
            }
            let _ = t.reply_short(H_ACK_FAST, &[]);
        })?;
        let fast_acks: Arc<gex_sync::atomic::AtomicU64> = Arc::default();
        let f = fast_acks.clone();
        ep.register_reserved(H_ACK_FAST, move |_t: &mut Token<'_>, _am: Am<'_>| {
            f.fetch_add(1, gex_sync::atomic::Ordering::Release);
        })?;

        crate::atomic::register(&mut ep, seg, seg_len, st.clone(), H_ACK, H_GET_REPLY)?;
        crate::barrier::register(&mut ep, st.clone())?;
        crate::barrier::setup(&mut ep, &st);

        let size = ep.size();
        let seg_lens = (0..size)
            .map(|r| ep.segment_len_of(r).unwrap_or(0))
            .collect();
        let known_eps: Vec<u32> = (0..size)
            .map(|r| u32::from(ep.endpoints_of(r).unwrap_or(0)))
            .collect();
        let caps = ep.conduit_ep().capabilities();
        let native_ok = !cfg!(gex_force_am_rma);
        Ok(RmaEp {
            native_rma: native_ok && caps.contains(gex_core::Capabilities::NATIVE_RMA),
            native_atomics: native_ok && caps.contains(gex_core::Capabilities::NATIVE_ATOMICS),
            native: Vec::new(),
            fast_acks,
            fast_sent: 0,
            ep,
            st,
            size,
            seg_lens,
            known_eps,
            direct_cache: vec![None; size as usize],
            nbi: Nbi::default(),
        })
    }

    /// A typed pointer to byte `byte_offset` of the segment of `addr`. Nothing is
    /// checked until an operation uses it.
    pub fn global_ptr<T>(&self, addr: EpAddr, byte_offset: usize) -> GlobalPtr<T> {
        GlobalPtr::new(addr, byte_offset)
    }

    /// The wrapped endpoint.
    pub fn endpoint(&mut self) -> &mut Endpoint<C> {
        &mut self.ep
    }

    /// Messages of the reference protocol that handlers had to drop (replies for
    /// operations abandoned after an error, or malformed requests). Zero in a healthy
    /// job; exposed for diagnosis and tests.
    pub fn dropped_messages(&self) -> u64 {
        lock(&self.st).dropped
    }

    /// Operations still pending in this endpoint's table (including those of events
    /// that were dropped or forgotten before completion).
    pub fn pending_ops(&self) -> usize {
        lock(&self.st).ops.len()
    }

    // ------------------------------------------------------------------ checks

    /// Checks rank and endpoint; returns the target's segment length.
    #[inline]
    fn check_target(&mut self, dst: EpAddr) -> Result<usize, RmaError> {
        if dst.rank >= self.size {
            return Err(RmaError::BadRank {
                rank: dst.rank,
                size: self.size,
            });
        }
        let r = dst.rank as usize;
        if u32::from(dst.ep) >= self.known_eps[r] {
            return Err(RmaError::BadEndpoint { dst });
        }
        Ok(self.seg_lens[r])
    }

    #[inline]
    pub(crate) fn check_range(
        &mut self,
        dst: EpAddr,
        offset: usize,
        len: usize,
    ) -> Result<(), RmaError> {
        let seg_len = self.check_target(dst)?;
        match offset.checked_add(len) {
            Some(e) if e <= seg_len => Ok(()),
            _ => Err(RmaError::OutOfSegment {
                dst,
                offset,
                len,
                seg_len,
            }),
        }
    }

    /// The local mapping of `dst`'s segment, if the direct path may be used.
    #[inline]
    pub(crate) fn direct(&mut self, dst: EpAddr) -> Option<NonNull<u8>> {
        #[cfg(gex_force_am_rma)]
        {
            let _ = dst;
            None
        }
        #[cfg(not(gex_force_am_rma))]
        {
            if dst.ep != self.ep.index() {
                return self.ep.conduit_ep().peer_segment(dst).map(|(p, _)| p);
            }
            let slot = &mut self.direct_cache[dst.rank as usize];
            let m = match *slot {
                Some(m) => m,
                None => {
                    let m = self
                        .ep
                        .conduit_ep()
                        .peer_segment(dst)
                        .map(|(p, _)| RawPtr(p.as_ptr()));
                    *slot = Some(m);
                    m
                }
            };
            m.and_then(|p| NonNull::new(p.0))
        }
    }

    // ------------------------------------------------------------------ engine

    pub(crate) fn new_op(&mut self, remaining: usize, dst: *mut u8, dst_len: usize) -> u32 {
        let mut st = lock(&self.st);
        loop {
            st.next = st.next.wrapping_add(1);
            let id = st.next;
            if let std::collections::hash_map::Entry::Vacant(v) = st.ops.entry(id) {
                v.insert(Op {
                    remaining,
                    dst: RawPtr(dst),
                    dst_len,
                });
                return id;
            }
        }
    }

    fn bump(&self, id: u32) {
        if let Some(op) = lock(&self.st).ops.get_mut(&id) {
            op.remaining += 1;
        }
    }

    /// Forgets an operation after an error: late messages for it are dropped.
    pub(crate) fn abandon(&self, id: u32) {
        lock(&self.st).ops.remove(&id);
    }

    pub(crate) fn send(
        &mut self,
        dst: EpAddr,
        cat: Category,
        h: HandlerIndex,
        args: &[u32],
        payload: &[u8],
        offset: usize,
    ) -> Result<(), RmaError> {
        self.ep
            .request_reserved(dst, cat, h, args, payload, offset, Flags::empty())?;
        Ok(())
    }

    /// Starts a put of `chunks` (already validated) from `src`. Returns the pending
    /// operation, or `None` if it completed.
    ///
    /// # Safety
    /// `src + c.local .. + c.len` is readable for every chunk until this returns, and
    /// beyond as `life` says.
    #[inline]
    unsafe fn start_put(
        &mut self,
        dst: EpAddr,
        chunks: &[Chunk],
        src: *const u8,
        life: Life,
        nbi: bool,
    ) -> Result<Option<u32>, RmaError> {
        if let Some(base) = self.direct(dst) {
            for c in chunks {
                // SAFETY: the remote range is inside the mapped segment (validated by
                // the caller); the source is readable (contract); they may overlap.
                unsafe { std::ptr::copy(src.add(c.local), base.as_ptr().add(c.remote), c.len) };
            }
            return Ok(None);
        }
        if self.native_rma {
            // SAFETY: forwarded contract.
            return unsafe { self.native_put(dst, chunks, src, life, nbi) };
        }
        if let [c] = chunks {
            if c.len == 0 {
                return Ok(None);
            }
            if c.len <= SHORT_PUT_MAX && c.remote < SHORT_PUT_OFF_LIMIT {
                // SAFETY: the chunk is readable for the call (contract).
                let bytes = unsafe { std::slice::from_raw_parts(src.add(c.local), c.len) };
                return self.short_put(dst, c.remote, bytes, life == Life::Blocking);
            }
        }
        let id = self.new_op(0, std::ptr::null_mut(), 0);
        // SAFETY: forwarded contract.
        match unsafe { self.am_put(dst, id, chunks, src) } {
            Ok(()) => Ok(self.pending(id)),
            Err(e) => {
                self.abandon(id);
                Err(e)
            }
        }
    }

    /// A put of at most [`SHORT_PUT_MAX`] bytes on the AM path: one Short request with
    /// the bytes in its arguments, acknowledged by a Short reply. A blocking call waits
    /// for its acknowledgement through a counter (no operation entry, no lock, no
    /// allocation) and returns `None`.
    fn short_put(
        &mut self,
        dst: EpAddr,
        off: usize,
        bytes: &[u8],
        blocking: bool,
    ) -> Result<Option<u32>, RmaError> {
        let mut args = [0u32; gex_core::spi::MIN_MAX_ARGS];
        for (i, c) in bytes.chunks(4).enumerate() {
            let mut w = [0u8; 4];
            w[..c.len()].copy_from_slice(c);
            args[SHORT_HDR + i] = u32::from_le_bytes(w);
        }
        let nargs = SHORT_HDR + bytes.len().div_ceil(4);
        debug_assert!(bytes.len() <= SHORT_PUT_MAX && off < SHORT_PUT_OFF_LIMIT);
        (args[1], args[2]) = (lo(off), hi(off) | (bytes.len() as u32) << 24);
        if blocking {
            // The blocking form drops the op word.
            self.send(dst, Category::Short, H_PUT_SHORT_B, &args[1..nargs], &[], 0)?;
            self.fast_sent += 1;
            let (acks, want) = (&self.fast_acks, self.fast_sent);
            // Only our own acknowledgement is awaited: the barrier needs no round from
            // us for it, so plain polling suffices (rounds advance at the next drive).
            self.ep
                .wait_until(|| acks.load(gex_sync::atomic::Ordering::Acquire) >= want);
            return Ok(None);
        }
        let id = self.new_op(1, std::ptr::null_mut(), 0);
        args[0] = id;
        match self.send(dst, Category::Short, H_PUT_SHORT, &args[..nargs], &[], 0) {
            Ok(()) => Ok(self.pending(id)),
            Err(e) => {
                self.abandon(id);
                Err(e)
            }
        }
    }

    /// Polls until native operation `ticket` completes (blocking calls: no operation
    /// entry, no lock, no allocation).
    pub(crate) fn wait_ticket(&mut self, ticket: u64) {
        loop {
            self.ep.poll();
            if self.ep.conduit_ep().native_test(ticket) {
                return;
            }
            std::hint::spin_loop();
        }
    }

    /// Starts a flush ([`ConduitEp::native_flush`]) of every destination of relaxed
    /// puts in the scope (`region`: the open access region, else the syncnbi scope)
    /// and tracks them as one operation of that scope, so the sync that follows waits
    /// for the puts' bytes to be at their targets, not only for their sources to be
    /// free. `WouldBlock` polls and retries.
    ///
    /// # Panics
    /// If the conduit fails (a network error; the syncs have no error to return, and
    /// the puts' bytes cannot be known to have arrived).
    ///
    /// [`ConduitEp::native_flush`]: gex_core::spi::ConduitEp::native_flush
    fn flush_unflushed(&mut self, region: bool) {
        let set = if region {
            &mut self.nbi.region_unflushed
        } else {
            &mut self.nbi.unflushed
        };
        if set.is_empty() {
            return;
        }
        if self.nbi.last_dirty.is_some_and(|(r, _)| r == region) {
            self.nbi.last_dirty = None;
        }
        let mut dsts = std::mem::take(&mut self.nbi.flushing);
        dsts.extend(set.drain());
        let mut id: Option<u32> = None;
        for &dst in &dsts {
            loop {
                match self.ep.conduit_ep().native_flush(dst) {
                    Ok(Native::Done | Native::Unsupported) => break,
                    Ok(Native::Pending(ticket)) => {
                        let pend = NativePend {
                            ticket,
                            id: 0,
                            src: None,
                            land: None,
                        };
                        self.push_native(&mut id, std::ptr::null_mut(), 0, pend);
                        break;
                    }
                    Ok(Native::WouldBlock) => {
                        self.ep.poll();
                        native_progress(&mut self.ep, &self.st, &mut self.native);
                    }
                    Err(e) => panic!("gex-rma: flushing the puts to {dst} failed: {e}"),
                }
            }
        }
        dsts.clear();
        self.nbi.flushing = dsts;
        if let Some(op) = id.and_then(|op| self.pending(op)) {
            match (&mut self.nbi.region, region) {
                (Some(r), true) => r.push(op),
                _ => self.nbi.puts.push(op),
            }
        }
    }

    /// Records a pending native operation for `id` (created on first use).
    pub(crate) fn push_native(
        &mut self,
        id: &mut Option<u32>,
        dst: *mut u8,
        dst_len: usize,
        mut pend: NativePend,
    ) {
        let op = *id.get_or_insert_with(|| self.new_op(0, dst, dst_len));
        self.bump(op);
        pend.id = op;
        self.native.push(pend);
    }

    /// After an error: waits for the native operations of `id` already started (they
    /// may use buffers the caller is about to release), then forgets the operation.
    pub(crate) fn drain_abandon(&mut self, id: Option<u32>) {
        let Some(id) = id else { return };
        while self.native.iter().any(|p| p.id == id) {
            self.ep.poll();
            native_progress(&mut self.ep, &self.st, &mut self.native);
        }
        self.abandon(id);
    }

    /// Starts `chunks` one native operation each (`issue`), for the native put and get
    /// paths: `Done` needs nothing more, `Pending` waits inline (`inline`: a blocking
    /// single-chunk call) or is recorded under `id` with `land` (a get's destination)
    /// and `src` (a put's source copy), `WouldBlock` polls and retries. Returns
    /// `Some(i)` when the conduit answered `Unsupported` for chunk `i`: the caller
    /// carries `chunks[i..]` on the AM path. On error the operations already started
    /// are drained first.
    fn native_chunks(
        &mut self,
        id: &mut Option<u32>,
        chunks: &[Chunk],
        inline: bool,
        land: (*mut u8, usize),
        src: Option<&Arc<[u8]>>,
        mut issue: impl FnMut(&mut C::Ep, &Chunk) -> Result<Native, gex_core::spi::ConduitError>,
    ) -> Result<Option<usize>, RmaError> {
        for (i, c) in chunks.iter().enumerate() {
            if c.len == 0 {
                continue;
            }
            loop {
                match issue(self.ep.conduit_ep(), c) {
                    Ok(Native::Done) => break,
                    Ok(Native::Pending(t)) if inline => {
                        self.wait_ticket(t);
                        break;
                    }
                    Ok(Native::Pending(ticket)) => {
                        let pend = NativePend {
                            ticket,
                            id: 0,
                            src: src.cloned(),
                            land: None,
                        };
                        self.push_native(id, land.0, land.1, pend);
                        break;
                    }
                    Ok(Native::WouldBlock) => {
                        self.ep.poll();
                        native_progress(&mut self.ep, &self.st, &mut self.native);
                    }
                    Ok(Native::Unsupported) => return Ok(Some(i)),
                    Err(e) => {
                        self.drain_abandon(*id);
                        return Err(e.into());
                    }
                }
            }
        }
        Ok(None)
    }

    /// The native-RMA put path: one native put per chunk ([`native_chunks`]);
    /// `Unsupported` sends the remaining chunks through the AM path.
    ///
    /// [`native_chunks`]: Self::native_chunks
    ///
    /// # Safety
    /// As [`start_put`](Self::start_put).
    unsafe fn native_put(
        &mut self,
        dst: EpAddr,
        chunks: &[Chunk],
        src: *const u8,
        life: Life,
        nbi: bool,
    ) -> Result<Option<u32>, RmaError> {
        let inline = life == Life::Blocking && chunks.len() == 1;
        // The conduit may read the source after we return: give it a copy.
        let copy: Option<Arc<[u8]>> = (life == Life::Copy).then(|| {
            let end = chunks.iter().map(|c| c.local + c.len).max().unwrap_or(0);
            // SAFETY: every chunk lies in `src..src+end`, readable now (contract).
            Arc::from(unsafe { std::slice::from_raw_parts(src, end) })
        });
        let base = copy.as_ref().map_or(src, |c| c.as_ptr());
        let mut id: Option<u32> = None;
        let land = (std::ptr::null_mut(), 0);
        let started =
            self.native_chunks(&mut id, chunks, inline, land, copy.as_ref(), |ep, c| {
                // SAFETY: the remote range was validated; the source stays valid until
                // completion: waited for (blocking), kept by the caller, or a copy held
                // by the pending entry.
                unsafe {
                    if nbi {
                        ep.native_put_relaxed(dst, c.remote, base.add(c.local), c.len)
                    } else {
                        ep.native_put(dst, c.remote, base.add(c.local), c.len)
                    }
                }
            })?;
        if nbi {
            // Relaxed puts reach the target at the flush of the sync that completes them.
            self.nbi.dirty(dst);
        }
        if let Some(i) = started {
            let op = *id.get_or_insert_with(|| self.new_op(0, std::ptr::null_mut(), 0));
            // SAFETY: the AM path consumes the source before returning.
            return match unsafe { self.am_put(dst, op, &chunks[i..], src) } {
                Ok(()) => Ok(self.pending(op)),
                Err(e) => {
                    self.drain_abandon(id);
                    Err(e)
                }
            };
        }
        Ok(id.and_then(|op| self.pending(op)))
    }

    /// The native-RMA get path (see [`native_put`](Self::native_put)).
    ///
    /// # Safety
    /// As [`start_get`](Self::start_get).
    unsafe fn native_get(
        &mut self,
        src: EpAddr,
        chunks: &[Chunk],
        dst: *mut u8,
        dst_len: usize,
        blocking: bool,
    ) -> Result<Option<u32>, RmaError> {
        let inline = blocking && chunks.len() == 1;
        let mut id: Option<u32> = None;
        let started =
            self.native_chunks(&mut id, chunks, inline, (dst, dst_len), None, |ep, c| {
                // SAFETY: the remote range was validated and the local one lies in the
                // destination, which stays valid until completion (contract; a blocking
                // call waits, also on error).
                unsafe { ep.native_get(src, c.remote, dst.add(c.local), c.len) }
            })?;
        if let Some(i) = started {
            let rest = &chunks[i..];
            let bytes: usize = rest.iter().map(|c| c.len).sum();
            let op = *id.get_or_insert_with(|| self.new_op(0, dst, dst_len));
            if let Some(o) = lock(&self.st).ops.get_mut(&op) {
                o.remaining += bytes;
            }
            return match self.am_get(src, op, rest) {
                Ok(()) => Ok(self.pending(op)),
                Err(e) => {
                    self.drain_abandon(id);
                    Err(e)
                }
            };
        }
        Ok(id.and_then(|op| self.pending(op)))
    }

    /// `Some(id)` if the operation is still pending, else retires it.
    pub(crate) fn pending(&self, id: u32) -> Option<u32> {
        let mut ids = vec![id];
        if retire(&self.st, &mut ids) {
            None
        } else {
            Some(id)
        }
    }

    /// # Safety
    /// As [`start_put`](Self::start_put).
    unsafe fn am_put(
        &mut self,
        dst: EpAddr,
        id: u32,
        chunks: &[Chunk],
        src: *const u8,
    ) -> Result<(), RmaError> {
        let max_long = self.ep.max_long(dst).max(1);
        let max_med = self.ep.max_medium(dst);
        let pack = chunks.len() > 1 && max_med > PIECE_HDR;
        let mut pkt: Vec<u8> = Vec::new();
        for c in chunks.iter().filter(|c| c.len > 0) {
            // SAFETY: readable for the call (contract).
            let bytes = unsafe { std::slice::from_raw_parts(src.add(c.local), c.len) };
            if pack && PIECE_HDR + c.len <= max_med {
                if pkt.len() + PIECE_HDR + c.len > max_med {
                    self.bump(id);
                    self.send(dst, Category::Medium, H_PUT_PACKED, &[id], &pkt, 0)?;
                    pkt.clear();
                }
                pkt.extend_from_slice(&(c.remote as u64).to_le_bytes());
                pkt.extend_from_slice(&(c.len as u32).to_le_bytes());
                pkt.extend_from_slice(bytes);
                continue;
            }
            for (i, piece) in bytes.chunks(max_long).enumerate() {
                self.bump(id);
                let off = c.remote + i * max_long;
                self.send(dst, Category::Long, H_PUT_LONG, &[id], piece, off)?;
            }
        }
        if !pkt.is_empty() {
            self.bump(id);
            self.send(dst, Category::Medium, H_PUT_PACKED, &[id], &pkt, 0)?;
        }
        Ok(())
    }

    /// Starts a get of `chunks` (already validated) into `dst` (`dst_len` bytes);
    /// `blocking`: the caller waits for completion before returning.
    ///
    /// # Safety
    /// `dst .. dst + dst_len` is writable and untouched by anyone else until the
    /// operation completes, or it is abandoned, or (if leaked) forever.
    #[inline]
    unsafe fn start_get(
        &mut self,
        src: EpAddr,
        chunks: &[Chunk],
        dst: *mut u8,
        dst_len: usize,
        blocking: bool,
    ) -> Result<Option<u32>, RmaError> {
        if let Some(base) = self.direct(src) {
            for c in chunks {
                // SAFETY: the remote range is inside the mapped segment, the local one
                // inside the destination (validated by the caller); may overlap.
                unsafe { std::ptr::copy(base.as_ptr().add(c.remote), dst.add(c.local), c.len) };
            }
            return Ok(None);
        }
        if self.native_rma {
            // SAFETY: forwarded contract.
            return unsafe { self.native_get(src, chunks, dst, dst_len, blocking) };
        }
        let total = chunks.iter().map(|c| c.len).sum();
        let id = self.new_op(total, dst, dst_len);
        match self.am_get(src, id, chunks) {
            Ok(()) => Ok(self.pending(id)),
            Err(e) => {
                self.abandon(id);
                Err(e)
            }
        }
    }

    fn am_get(&mut self, src: EpAddr, id: u32, chunks: &[Chunk]) -> Result<(), RmaError> {
        let max_med = self.ep.max_medium(src).max(1);
        let pack = chunks.len() > 1 && max_med >= PIECE_HDR;
        // Current packet: entries, reply bytes, first local offset.
        let mut ents: Vec<u8> = Vec::new();
        let (mut acc, mut start) = (0usize, 0usize);
        for c in chunks.iter().filter(|c| c.len > 0) {
            if pack && c.len <= max_med {
                let fits = ents.len() + PIECE_HDR <= max_med
                    && acc + c.len <= max_med
                    && c.local == start + acc;
                if !fits && !ents.is_empty() {
                    self.send(
                        src,
                        Category::Medium,
                        H_GET_PACKED,
                        &[id, lo(start), hi(start)],
                        &ents,
                        0,
                    )?;
                    ents.clear();
                }
                if ents.is_empty() {
                    start = c.local;
                    acc = 0;
                }
                ents.extend_from_slice(&(c.remote as u64).to_le_bytes());
                ents.extend_from_slice(&(c.len as u32).to_le_bytes());
                acc += c.len;
                continue;
            }
            let mut done = 0;
            while done < c.len {
                let n = (c.len - done).min(max_med);
                let (r, l) = (c.remote + done, c.local + done);
                let args = [id, lo(r), hi(r), n as u32, lo(l), hi(l)];
                self.send(src, Category::Short, H_GET, &args, &[], 0)?;
                done += n;
            }
        }
        if !ents.is_empty() {
            let args = [id, lo(start), hi(start)];
            self.send(src, Category::Medium, H_GET_PACKED, &args, &ents, 0)?;
        }
        Ok(())
    }

    /// Waits for one operation (blocking calls).
    pub(crate) fn wait_id(&mut self, id: Option<u32>) {
        if let Some(id) = id {
            let mut ids = vec![id];
            let st = &self.st;
            drive_native(&mut self.ep, st, &mut self.native, || retire(st, &mut ids));
        }
    }

    pub(crate) fn ev(id: Option<u32>) -> Event {
        Event {
            ids: id.into_iter().collect(),
        }
    }

    fn track(&mut self, id: Option<u32>, get: bool) {
        if let Some(id) = id {
            match (&mut self.nbi.region, get) {
                (Some(r), _) => r.push(id),
                (None, true) => self.nbi.gets.push(id),
                (None, false) => self.nbi.puts.push(id),
            }
        }
    }

    pub(crate) fn track_atomic(&mut self, id: Option<u32>) {
        if let Some(id) = id {
            match &mut self.nbi.region {
                Some(r) => r.push(id),
                None => self.nbi.atomics.push(id),
            }
        }
    }

    // ------------------------------------------------------------------ contiguous

    /// Checks a contiguous op and starts a put from `src`.
    #[inline]
    ///
    /// `life`: see [`Life`]; with [`Life::Kept`] the caller must keep `src` alive and
    /// unmodified until completion (only `unsafe` callers pass it).
    fn put_start<T: Pod>(
        &mut self,
        dst: GlobalPtr<T>,
        src: &[T],
        life: Life,
        nbi: bool,
    ) -> Result<Option<u32>, RmaError> {
        let bytes: &[u8] = bytemuck::cast_slice(src);
        self.check_range(dst.addr(), dst.offset, bytes.len())?;
        let c = [Chunk {
            remote: dst.offset,
            local: 0,
            len: bytes.len(),
        }];
        // SAFETY: `bytes` is borrowed for this call, and beyond as `life` says (the
        // callers choose it from their own lifetime rules).
        unsafe { self.start_put(dst.addr(), &c, bytes.as_ptr(), life, nbi) }
    }

    /// # Safety
    /// As [`start_get`](Self::start_get) for `dst`.
    #[inline]
    unsafe fn get_start<T: Pod>(
        &mut self,
        dst: *mut T,
        n: usize,
        src: GlobalPtr<T>,
        blocking: bool,
    ) -> Result<Option<u32>, RmaError> {
        let len = n * std::mem::size_of::<T>();
        self.check_range(src.addr(), src.offset, len)?;
        let c = [Chunk {
            remote: src.offset,
            local: 0,
            len,
        }];
        // SAFETY: forwarded contract.
        unsafe { self.start_get(src.addr(), &c, dst.cast(), len, blocking) }
    }

    /// Blocking put: copies `src` to `dst..dst+src.len()`. Returns once the data is
    /// visible at the target (remote completion). To a neighbour that shares memory it
    /// is one `memcpy`; otherwise it sends Long AMs and polls until they are
    /// acknowledged.
    ///
    /// # Errors
    /// [`RmaError::BadRank`], [`RmaError::BadEndpoint`], [`RmaError::OutOfSegment`],
    /// [`RmaError::Am`].
    #[inline]
    pub fn put<T: Pod>(&mut self, dst: GlobalPtr<T>, src: &[T]) -> Result<(), RmaError> {
        let id = self.put_start(dst, src, Life::Blocking, false)?;
        self.wait_id(id);
        Ok(())
    }

    /// Blocking get: copies `src..src+dst.len()` into `dst`.
    ///
    /// # Errors
    /// As [`put`](Self::put).
    #[inline]
    pub fn get<T: Pod>(&mut self, dst: &mut [T], src: GlobalPtr<T>) -> Result<(), RmaError> {
        let n = dst.len();
        // SAFETY: `dst` is borrowed until we return, and we return only after the
        // operation completed or was abandoned.
        let id = unsafe { self.get_start(dst.as_mut_ptr(), n, src, true)? };
        self.wait_id(id);
        Ok(())
    }

    /// Blocking put of one value of at most 8 bytes (a larger `T` does not compile).
    ///
    /// # Errors
    /// As [`put`](Self::put).
    #[inline]
    pub fn put_val<T: Pod>(&mut self, dst: GlobalPtr<T>, v: T) -> Result<(), RmaError> {
        const {
            assert!(
                std::mem::size_of::<T>() <= 8,
                "put_val takes values of at most 8 bytes"
            )
        };
        self.put(dst, std::slice::from_ref(&v))
    }

    /// Blocking get of one value of at most 8 bytes (a larger `T` does not compile).
    ///
    /// # Errors
    /// As [`put`](Self::put).
    #[inline]
    pub fn get_val<T: Pod>(&mut self, src: GlobalPtr<T>) -> Result<T, RmaError> {
        const {
            assert!(
                std::mem::size_of::<T>() <= 8,
                "get_val takes values of at most 8 bytes"
            )
        };
        let mut v = T::zeroed();
        self.get(std::slice::from_mut(&mut v), src)?;
        Ok(v)
    }

    fn memset_start(
        &mut self,
        dst: GlobalPtr<u8>,
        byte: u8,
        len: usize,
    ) -> Result<Option<u32>, RmaError> {
        let a = dst.addr();
        self.check_range(a, dst.offset, len)?;
        if len == 0 {
            return Ok(None);
        }
        if let Some(base) = self.direct(a) {
            // SAFETY: the range is inside the mapped segment (checked).
            unsafe { std::ptr::write_bytes(base.as_ptr().add(dst.offset), byte, len) };
            return Ok(None);
        }
        let id = self.new_op(1, std::ptr::null_mut(), 0);
        let o = dst.offset;
        let args = [id, lo(o), hi(o), lo(len), hi(len), u32::from(byte)];
        match self.send(a, Category::Short, H_MEMSET, &args, &[], 0) {
            Ok(()) => Ok(self.pending(id)),
            Err(e) => {
                self.abandon(id);
                Err(e)
            }
        }
    }

    /// Blocking memset: sets `len` bytes at `dst` to `byte`.
    ///
    /// # Errors
    /// As [`put`](Self::put).
    pub fn memset(&mut self, dst: GlobalPtr<u8>, byte: u8, len: usize) -> Result<(), RmaError> {
        let id = self.memset_start(dst, byte, len)?;
        self.wait_id(id);
        Ok(())
    }

    // ------------------------------------------------------------------ NB

    /// Nonblocking put of an owned buffer. The returned event gives the buffer back at
    /// local completion ([`PutEvent::lc`]) or when waited on.
    ///
    /// # Errors
    /// As [`put`](Self::put) (nothing was sent; the buffer is dropped).
    pub fn put_nb<T: Pod>(
        &mut self,
        dst: GlobalPtr<T>,
        src: Vec<T>,
    ) -> Result<PutEvent<T>, RmaError> {
        let id = self.put_start(dst, &src, Life::Copy, false)?;
        Ok(PutEvent {
            ev: Self::ev(id),
            buf: Some(src),
        })
    }

    /// Nonblocking put that consumes `src` before returning (local completion on
    /// return); the event signals remote completion.
    ///
    /// # Errors
    /// As [`put`](Self::put).
    pub fn put_nb_copy<T: Pod>(&mut self, dst: GlobalPtr<T>, src: &[T]) -> Result<Event, RmaError> {
        Ok(Self::ev(self.put_start(dst, src, Life::Copy, false)?))
    }

    /// Nonblocking put without copying guarantees.
    ///
    /// # Safety
    /// `src` must stay alive and unmodified until the event completes (today's
    /// conduits consume it before returning, but conduits with deferred local
    /// completion may not).
    ///
    /// # Errors
    /// As [`put`](Self::put).
    pub unsafe fn put_nb_raw<T: Pod>(
        &mut self,
        dst: GlobalPtr<T>,
        src: &[T],
    ) -> Result<Event, RmaError> {
        Ok(Self::ev(self.put_start(dst, src, Life::Kept, false)?))
    }

    /// Nonblocking get into an owned buffer (its length is the number of elements);
    /// [`wait`](Self::wait) returns the filled buffer. Dropping or forgetting the event
    /// before completion leaks the buffer (it is never freed while data may arrive).
    ///
    /// # Errors
    /// As [`put`](Self::put).
    pub fn get_nb<T: Pod>(
        &mut self,
        mut dst: Vec<T>,
        src: GlobalPtr<T>,
    ) -> Result<GetEvent<T>, RmaError> {
        let n = dst.len();
        // SAFETY: the Vec's heap buffer moves into the event, which never frees it
        // while the operation may be pending (leaks it instead).
        let id = unsafe { self.get_start(dst.as_mut_ptr(), n, src, false)? };
        Ok(GetEvent {
            ev: Self::ev(id),
            buf: Some(dst),
        })
    }

    /// Nonblocking get into a borrowed buffer.
    ///
    /// # Safety
    /// `dst` must stay alive and must not be read or written until the event
    /// completes (waited or tested true). Dropping the event does not end the
    /// transfer.
    ///
    /// # Errors
    /// As [`put`](Self::put).
    pub unsafe fn get_nb_raw<T: Pod>(
        &mut self,
        dst: &mut [T],
        src: GlobalPtr<T>,
    ) -> Result<Event, RmaError> {
        // SAFETY: forwarded contract.
        Ok(Self::ev(unsafe {
            self.get_start(dst.as_mut_ptr(), dst.len(), src, false)?
        }))
    }

    /// Nonblocking memset.
    ///
    /// # Errors
    /// As [`put`](Self::put).
    pub fn memset_nb(
        &mut self,
        dst: GlobalPtr<u8>,
        byte: u8,
        len: usize,
    ) -> Result<Event, RmaError> {
        Ok(Self::ev(self.memset_start(dst, byte, len)?))
    }

    // ------------------------------------------------------------------ events

    /// Polls once and reports whether `ev` is complete (then [`wait`](Self::wait)
    /// returns at once).
    pub fn test<E: Completion>(&mut self, ev: &mut E) -> bool {
        if ev.ids().is_empty() {
            return true;
        }
        self.ep.poll();
        native_progress(&mut self.ep, &self.st, &mut self.native);
        crate::barrier::advance(&mut self.ep, &self.st);
        retire(&self.st, ev.ids())
    }

    /// Waits until `ev` is complete (polling, following the endpoint's wait policy) and
    /// returns its output: `()` for [`Event`], the buffer for [`GetEvent`] and
    /// [`PutEvent`].
    pub fn wait<E: Completion>(&mut self, mut ev: E) -> E::Output {
        let st = &self.st;
        let ids = ev.ids();
        drive_native(&mut self.ep, st, &mut self.native, || retire(st, ids));
        ev.finish()
    }

    /// Waits until every event is complete.
    pub fn wait_all(&mut self, evs: &mut [Event]) {
        let st = &self.st;
        drive_native(&mut self.ep, st, &mut self.native, || {
            // Retire every event (no short circuit), then report.
            let mut all = true;
            for e in evs.iter_mut() {
                all &= retire(st, &mut e.ids);
            }
            all
        });
    }

    /// Waits until at least one event is complete (at once if `evs` is empty) and
    /// returns the indices of all complete ones, in order.
    pub fn wait_some(&mut self, evs: &mut [Event]) -> Vec<usize> {
        if evs.is_empty() {
            return Vec::new();
        }
        let st = &self.st;
        drive_native(&mut self.ep, st, &mut self.native, || {
            let mut any = false;
            for e in evs.iter_mut() {
                any |= retire(st, &mut e.ids);
            }
            any
        });
        (0..evs.len()).filter(|&i| evs[i].ids.is_empty()).collect()
    }

    // ------------------------------------------------------------------ NBI

    /// Implicit-event put; the source is consumed before returning. Completed by
    /// [`wait_syncnbi_puts`](Self::wait_syncnbi_puts) (or the access region's event).
    ///
    /// # Errors
    /// As [`put`](Self::put).
    pub fn put_nbi<T: Pod>(&mut self, dst: GlobalPtr<T>, src: &[T]) -> Result<(), RmaError> {
        let id = self.put_start(dst, src, Life::Copy, true)?;
        self.track(id, false);
        Ok(())
    }

    /// Implicit-event put with deferred local completion (as GASNet-EX's event-defer
    /// option): the source is not copied, and it is locally complete only
    /// when the sync that completes the put returns
    /// ([`wait_syncnbi_puts`](Self::wait_syncnbi_puts), or the access region's event).
    ///
    /// This is the bulk-transfer form: where the conduit moves the bytes itself after
    /// the call returns (native RMA on a network), [`put_nbi`](Self::put_nbi) must
    /// first copy the source to keep its promise that the caller may reuse it at
    /// once; this one does not. To a mapped neighbour, or over the AM path, both
    /// consume the source before returning.
    ///
    /// # Safety
    /// `src` must stay alive and unmodified until a sync of puts (or of the access
    /// region the put was issued in) has completed.
    ///
    /// # Errors
    /// As [`put`](Self::put).
    ///
    /// # Examples
    /// ```
    /// # use gex_rma::GlobalPtr;
    /// # fn demo<C: gex_core::spi::Conduit>(r: &mut gex_rma::RmaEp<C>, dst: GlobalPtr<u8>) -> Result<(), gex_rma::RmaError> {
    /// let block = vec![7u8; 4096];
    /// // SAFETY: `block` is neither dropped nor written before the sync below.
    /// unsafe { r.put_nbi_deferred(dst, &block)? };
    /// r.wait_syncnbi_puts();
    /// drop(block);
    /// # Ok(()) }
    /// ```
    pub unsafe fn put_nbi_deferred<T: Pod>(
        &mut self,
        dst: GlobalPtr<T>,
        src: &[T],
    ) -> Result<(), RmaError> {
        let id = self.put_start(dst, src, Life::Kept, true)?;
        self.track(id, false);
        Ok(())
    }

    /// Implicit-event get.
    ///
    /// # Safety
    /// `dst` must stay alive and untouched until a sync of gets (or of the access
    /// region) completes.
    ///
    /// # Errors
    /// As [`put`](Self::put).
    pub unsafe fn get_nbi<T: Pod>(
        &mut self,
        dst: &mut [T],
        src: GlobalPtr<T>,
    ) -> Result<(), RmaError> {
        // SAFETY: forwarded contract.
        let id = unsafe { self.get_start(dst.as_mut_ptr(), dst.len(), src, false)? };
        self.track(id, true);
        Ok(())
    }

    /// Implicit-event memset (synced with the puts).
    ///
    /// # Errors
    /// As [`put`](Self::put).
    pub fn memset_nbi(&mut self, dst: GlobalPtr<u8>, byte: u8, len: usize) -> Result<(), RmaError> {
        let id = self.memset_start(dst, byte, len)?;
        self.track(id, false);
        Ok(())
    }

    /// Waits for every implicit-event put and memset issued outside access regions.
    pub fn wait_syncnbi_puts(&mut self) {
        self.flush_unflushed(false);
        let st = &self.st;
        let ids = &mut self.nbi.puts;
        drive_native(&mut self.ep, st, &mut self.native, || retire(st, ids));
    }
    /// Waits for every implicit-event get issued outside access regions.
    pub fn wait_syncnbi_gets(&mut self) {
        let st = &self.st;
        let ids = &mut self.nbi.gets;
        drive_native(&mut self.ep, st, &mut self.native, || retire(st, ids));
    }
    /// Waits for every implicit-event atomic operation (see
    /// [`AtomicDomain::op_nbi`](crate::AtomicDomain::op_nbi)) issued outside access regions.
    pub fn wait_syncnbi_atomics(&mut self) {
        let st = &self.st;
        let ids = &mut self.nbi.atomics;
        drive_native(&mut self.ep, st, &mut self.native, || retire(st, ids));
    }
    /// [`wait_syncnbi_puts`](Self::wait_syncnbi_puts),
    /// [`wait_syncnbi_gets`](Self::wait_syncnbi_gets) and
    /// [`wait_syncnbi_atomics`](Self::wait_syncnbi_atomics).
    pub fn wait_syncnbi_all(&mut self) {
        self.wait_syncnbi_puts();
        self.wait_syncnbi_gets();
        self.wait_syncnbi_atomics();
    }
    /// Polls once; true if every implicit-event atomic operation is complete.
    pub fn test_syncnbi_atomics(&mut self) -> bool {
        self.ep.poll();
        native_progress(&mut self.ep, &self.st, &mut self.native);
        crate::barrier::advance(&mut self.ep, &self.st);
        retire(&self.st, &mut self.nbi.atomics)
    }
    /// Polls once; true if every implicit-event put is complete.
    pub fn test_syncnbi_puts(&mut self) -> bool {
        self.flush_unflushed(false);
        self.ep.poll();
        native_progress(&mut self.ep, &self.st, &mut self.native);
        crate::barrier::advance(&mut self.ep, &self.st);
        retire(&self.st, &mut self.nbi.puts)
    }
    /// Polls once; true if every implicit-event get is complete.
    pub fn test_syncnbi_gets(&mut self) -> bool {
        self.ep.poll();
        native_progress(&mut self.ep, &self.st, &mut self.native);
        crate::barrier::advance(&mut self.ep, &self.st);
        retire(&self.st, &mut self.nbi.gets)
    }
    /// Polls once; true if every implicit-event operation is complete.
    pub fn test_syncnbi_all(&mut self) -> bool {
        self.flush_unflushed(false);
        self.ep.poll();
        native_progress(&mut self.ep, &self.st, &mut self.native);
        crate::barrier::advance(&mut self.ep, &self.st);
        let p = retire(&self.st, &mut self.nbi.puts);
        let a = retire(&self.st, &mut self.nbi.atomics);
        retire(&self.st, &mut self.nbi.gets) && p && a
    }

    /// Opens an access region: every implicit-event operation issued until
    /// [`end_nbi_accessregion`](Self::end_nbi_accessregion) is gathered into the event
    /// that call returns (and is not covered by the `syncnbi` calls).
    ///
    /// # Errors
    /// [`RmaError::NestedAccessRegion`] if one is open.
    pub fn begin_nbi_accessregion(&mut self) -> Result<(), RmaError> {
        if self.nbi.region.is_some() {
            return Err(RmaError::NestedAccessRegion);
        }
        self.nbi.region = Some(Vec::new());
        Ok(())
    }

    /// Closes the access region; the event completes when all its operations have.
    ///
    /// # Errors
    /// [`RmaError::NoAccessRegion`] if none is open.
    pub fn end_nbi_accessregion(&mut self) -> Result<Event, RmaError> {
        if self.nbi.region.is_some() {
            self.flush_unflushed(true);
        }
        match self.nbi.region.take() {
            Some(ids) => Ok(Event { ids }),
            None => Err(RmaError::NoAccessRegion),
        }
    }

    // ------------------------------------------------------------------ VIS

    /// Decomposes a VIS description over a local buffer of `local_len` elements into
    /// validated byte chunks (adjacent pieces merged).
    fn vis_chunks<T>(
        &mut self,
        vis: &Vis<'_, T>,
        local_len: usize,
    ) -> Result<(EpAddr, Vec<Chunk>), RmaError> {
        let es = std::mem::size_of::<T>();
        let mut out: Vec<Chunk> = Vec::new();
        // (remote element offset from base ptr, local element index, elements, base ptr)
        let mut push = |me: &mut Self,
                        p: GlobalPtr<T>,
                        rel: i128,
                        loc: i128,
                        n: usize|
         -> Result<(), RmaError> {
            let dst = p.addr();
            let seg_len = me.check_target(dst)?;
            if loc < 0 || loc as u128 + n as u128 > local_len as u128 {
                return Err(RmaError::LocalOutOfBounds {
                    start: loc.max(0).min(usize::MAX as i128) as usize,
                    len: n,
                    slice_len: local_len,
                });
            }
            let len = n * es;
            let rb = p.offset as i128 + rel * es as i128;
            if rb < 0 || rb + len as i128 > seg_len as i128 {
                return Err(RmaError::OutOfSegment {
                    dst,
                    offset: if rb < 0 {
                        usize::MAX
                    } else {
                        rb.min(usize::MAX as i128) as usize
                    },
                    len,
                    seg_len,
                });
            }
            let c = Chunk {
                remote: rb as usize,
                local: loc as usize * es,
                len,
            };
            if n == 0 {
                return Ok(());
            }
            match out.last_mut() {
                Some(l) if l.remote + l.len == c.remote && l.local + l.len == c.local => {
                    l.len += c.len
                }
                _ => out.push(c),
            }
            Ok(())
        };
        let first = match vis {
            Vis::Strided { ptr, shape } => {
                let target = ptr.addr();
                self.check_target(target)?;
                strided_walk(self, *ptr, shape, local_len, &mut push)?;
                target
            }
            Vis::Vector(list) => {
                let total = list.iter().try_fold(0usize, |a, p| a.checked_add(p.1));
                if total != Some(local_len) {
                    return Err(RmaError::ShapeMismatch(format!(
                        "vector pieces hold {} elements, the local buffer {local_len}",
                        total.map_or("more than usize::MAX".to_string(), |t| t.to_string())
                    )));
                }
                let target = list.first().map(|p| p.0.addr());
                let mut loc = 0usize;
                for &(p, n) in list.iter() {
                    let t = target.unwrap_or(p.addr());
                    if p.addr() != t {
                        return Err(RmaError::MixedTargets {
                            first: t,
                            other: p.addr(),
                        });
                    }
                    push(self, p, 0, loc as i128, n)?;
                    loc += n;
                }
                target.unwrap_or(self.ep.addr())
            }
            Vis::Indexed { ptrs, each } => {
                if ptrs.len().checked_mul(*each) != Some(local_len) {
                    return Err(RmaError::ShapeMismatch(format!(
                        "{} pieces of {each} elements do not match the local buffer of {local_len}",
                        ptrs.len()
                    )));
                }
                let target = ptrs.first().map(|p| p.addr());
                for (i, &p) in ptrs.iter().enumerate() {
                    let t = target.unwrap_or(p.addr());
                    if p.addr() != t {
                        return Err(RmaError::MixedTargets {
                            first: t,
                            other: p.addr(),
                        });
                    }
                    push(self, p, 0, (i as i128) * (*each as i128), *each)?;
                }
                target.unwrap_or(self.ep.addr())
            }
        };
        Ok((first, out))
    }

    fn vis_put_start<T: Pod>(
        &mut self,
        vis: &Vis<'_, T>,
        src: &[T],
        life: Life,
        nbi: bool,
    ) -> Result<Option<u32>, RmaError> {
        let (dst, chunks) = self.vis_chunks(vis, src.len())?;
        // SAFETY: `src` is borrowed for the call (and as `life` says); every chunk lies
        // inside it.
        unsafe { self.start_put(dst, &chunks, src.as_ptr().cast(), life, nbi) }
    }

    /// # Safety
    /// As [`start_get`](Self::start_get) for `dst..dst+n`.
    unsafe fn vis_get_start<T: Pod>(
        &mut self,
        dst: *mut T,
        n: usize,
        vis: &Vis<'_, T>,
        blocking: bool,
    ) -> Result<Option<u32>, RmaError> {
        let (src, chunks) = self.vis_chunks(vis, n)?;
        let len = n * std::mem::size_of::<T>();
        // SAFETY: forwarded contract; every chunk lies inside the destination.
        unsafe { self.start_get(src, &chunks, dst.cast(), len, blocking) }
    }

    /// Blocking VIS put: the local side is `src` (see [`Vis`]).
    ///
    /// # Errors
    /// As [`put`](Self::put), plus [`RmaError::LocalOutOfBounds`],
    /// [`RmaError::ShapeMismatch`], [`RmaError::MixedTargets`]; all checked before
    /// any byte moves.
    pub fn put_vis<T: Pod>(&mut self, dst: Vis<'_, T>, src: &[T]) -> Result<(), RmaError> {
        let id = self.vis_put_start(&dst, src, Life::Blocking, false)?;
        self.wait_id(id);
        Ok(())
    }
    /// Blocking VIS get into `dst`.
    ///
    /// # Errors
    /// As [`put_vis`](Self::put_vis).
    pub fn get_vis<T: Pod>(&mut self, dst: &mut [T], src: Vis<'_, T>) -> Result<(), RmaError> {
        // SAFETY: `dst` is borrowed until the operation completed or was abandoned.
        let id = unsafe { self.vis_get_start(dst.as_mut_ptr(), dst.len(), &src, true)? };
        self.wait_id(id);
        Ok(())
    }
    /// Nonblocking VIS put; `src` is consumed before returning.
    ///
    /// # Errors
    /// As [`put_vis`](Self::put_vis).
    pub fn put_vis_nb<T: Pod>(&mut self, dst: Vis<'_, T>, src: &[T]) -> Result<Event, RmaError> {
        Ok(Self::ev(self.vis_put_start(
            &dst,
            src,
            Life::Copy,
            false,
        )?))
    }
    /// Nonblocking VIS get into an owned buffer, returned by [`wait`](Self::wait).
    ///
    /// # Errors
    /// As [`put_vis`](Self::put_vis).
    pub fn get_vis_nb<T: Pod>(
        &mut self,
        mut dst: Vec<T>,
        src: Vis<'_, T>,
    ) -> Result<GetEvent<T>, RmaError> {
        let n = dst.len();
        // SAFETY: as in `get_nb`: the buffer moves into the event, which leaks it
        // rather than freeing it while pending.
        let id = unsafe { self.vis_get_start(dst.as_mut_ptr(), n, &src, false)? };
        Ok(GetEvent {
            ev: Self::ev(id),
            buf: Some(dst),
        })
    }
    /// Implicit-event VIS put; `src` is consumed before returning.
    ///
    /// # Errors
    /// As [`put_vis`](Self::put_vis).
    pub fn put_vis_nbi<T: Pod>(&mut self, dst: Vis<'_, T>, src: &[T]) -> Result<(), RmaError> {
        let id = self.vis_put_start(&dst, src, Life::Copy, true)?;
        self.track(id, false);
        Ok(())
    }
    /// Implicit-event VIS get.
    ///
    /// # Safety
    /// As [`get_nbi`](Self::get_nbi).
    ///
    /// # Errors
    /// As [`put_vis`](Self::put_vis).
    pub unsafe fn get_vis_nbi<T: Pod>(
        &mut self,
        dst: &mut [T],
        src: Vis<'_, T>,
    ) -> Result<(), RmaError> {
        // SAFETY: forwarded contract.
        let id = unsafe { self.vis_get_start(dst.as_mut_ptr(), dst.len(), &src, false)? };
        self.track(id, true);
        Ok(())
    }

    /// Blocking strided put (see [`Strided`]).
    ///
    /// # Errors
    /// As [`put_vis`](Self::put_vis).
    pub fn put_strided<T: Pod>(
        &mut self,
        dst: GlobalPtr<T>,
        src: &[T],
        shape: Strided<'_>,
    ) -> Result<(), RmaError> {
        self.put_vis(Vis::Strided { ptr: dst, shape }, src)
    }
    /// Blocking strided get (see [`Strided`]).
    ///
    /// # Errors
    /// As [`put_vis`](Self::put_vis).
    pub fn get_strided<T: Pod>(
        &mut self,
        dst: &mut [T],
        src: GlobalPtr<T>,
        shape: Strided<'_>,
    ) -> Result<(), RmaError> {
        self.get_vis(dst, Vis::Strided { ptr: src, shape })
    }
    /// Blocking vector put: pieces `(ptr, elements)`, taken from `src` in order.
    ///
    /// # Errors
    /// As [`put_vis`](Self::put_vis).
    pub fn put_vector<T: Pod>(
        &mut self,
        dst: &[(GlobalPtr<T>, usize)],
        src: &[T],
    ) -> Result<(), RmaError> {
        self.put_vis(Vis::Vector(dst), src)
    }
    /// Blocking vector get: pieces `(ptr, elements)`, stored into `dst` in order.
    ///
    /// # Errors
    /// As [`put_vis`](Self::put_vis).
    pub fn get_vector<T: Pod>(
        &mut self,
        dst: &mut [T],
        src: &[(GlobalPtr<T>, usize)],
    ) -> Result<(), RmaError> {
        self.get_vis(dst, Vis::Vector(src))
    }
    /// Blocking indexed put: `each` elements at every pointer, taken from `src` in order.
    ///
    /// # Errors
    /// As [`put_vis`](Self::put_vis).
    pub fn put_indexed<T: Pod>(
        &mut self,
        dst: &[GlobalPtr<T>],
        each: usize,
        src: &[T],
    ) -> Result<(), RmaError> {
        self.put_vis(Vis::Indexed { ptrs: dst, each }, src)
    }
    /// Blocking indexed get: `each` elements at every pointer, stored into `dst` in order.
    ///
    /// # Errors
    /// As [`put_vis`](Self::put_vis).
    pub fn get_indexed<T: Pod>(
        &mut self,
        dst: &mut [T],
        src: &[GlobalPtr<T>],
        each: usize,
    ) -> Result<(), RmaError> {
        self.get_vis(dst, Vis::Indexed { ptrs: src, each })
    }
}

type Push<'p, M, T> =
    dyn FnMut(&mut M, GlobalPtr<T>, i128, i128, usize) -> Result<(), RmaError> + 'p;

/// Walks a strided shape, calling `push(me, ptr, remote element offset, local element
/// index, elements)` per contiguous run (dimension 0 is a run when both strides are 1).
fn strided_walk<M, T>(
    me: &mut M,
    ptr: GlobalPtr<T>,
    s: &Strided<'_>,
    _local_len: usize,
    push: &mut Push<'_, M, T>,
) -> Result<(), RmaError> {
    let n = s.counts.len();
    if s.remote_strides.len() != n || s.local_strides.len() != n {
        return Err(RmaError::ShapeMismatch(format!(
            "{n} counts, {} remote strides, {} local strides",
            s.remote_strides.len(),
            s.local_strides.len()
        )));
    }
    if s.counts.contains(&0) {
        return Ok(());
    }
    let run = n > 0 && s.remote_strides[0] == 1 && s.local_strides[0] == 1;
    let first_dim = usize::from(run);
    let run_len = if run { s.counts[0] } else { 1 };
    let mut idx = vec![0usize; n];
    loop {
        let (mut r, mut l) = (0i128, s.local_start as i128);
        for (d, &i) in idx.iter().enumerate().skip(first_dim) {
            r += i as i128 * s.remote_strides[d] as i128;
            l += i as i128 * s.local_strides[d] as i128;
        }
        push(me, ptr, r, l, run_len)?;
        // Next multi-index over dims first_dim..n.
        let mut d = first_dim;
        loop {
            if d == n {
                return Ok(());
            }
            idx[d] += 1;
            if idx[d] < s.counts[d] {
                break;
            }
            idx[d] = 0;
            d += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_put_offset_word_round_trips() {
        for off in [
            0usize,
            1,
            4095,
            (1 << 32) - 1,
            1 << 32,
            0xab_cdef_1234_5678,
            SHORT_PUT_OFF_LIMIT - 1,
        ] {
            for len in [0usize, 1, 8, SHORT_PUT_MAX] {
                let w = hi(off) | (len as u32) << 24;
                assert_eq!(short_put_range(lo(off), w), (off, len), "{off:#x} {len}");
            }
        }
        const { assert!(SHORT_PUT_MAX < 256, "the length must fit 8 bits") };
    }

    #[test]
    fn small_put_write_checks_the_segment() {
        let mut seg = [0u8; 16];
        let p = RawPtr(seg.as_mut_ptr());
        let words = [u32::from_le_bytes(*b"abcd"), u32::from_le_bytes(*b"efgh")];
        assert!(short_put_write(p, 16, 3, 6, &words));
        assert_eq!(&seg[3..9], b"abcdef");
        assert_eq!(seg[9], 0);
        assert!(
            !short_put_write(p, 16, 11, 6, &words),
            "past the segment end"
        );
        assert!(
            !short_put_write(p, 16, 0, 9, &words),
            "more bytes than words"
        );
        assert!(
            !short_put_write(p, 16, usize::MAX, 1, &words),
            "offset overflow"
        );
    }
}
