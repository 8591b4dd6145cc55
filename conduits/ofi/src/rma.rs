//! Native RMA and atomics: a fixed table of slots per endpoint, each with the
//! `fi_context2` of one operation in flight and three operand words; puts
//! (`fi_writemsg`, with `FI_DELIVERY_COMPLETE` or relaxed), gets (`fi_read`), flushes of
//! relaxed puts (a 1-byte ordered `fi_read`), atomics (`fi_atomic`, `fi_fetch_atomic`,
//! `fi_compare_atomic`) and their completion (`native_test`, with tickets
//! `generation << 32 | slot`).
//!
//! # Safety
//! A slot's context and words live in [`Mem`] allocations that the endpoint's grave
//! keeps until after the libfabric endpoint is closed. A slot is taken when an
//! operation is posted and freed only after its completion has been read and reported
//! by `native_test`, so libfabric never shares a context or a word between two
//! operations. The user buffers of puts and gets are the caller's to keep valid until
//! completion (`ConduitEp::native_put`'s contract), and so is an atomic's result word,
//! which `native_test` writes (from the slot's result word) just before it reports the
//! completion. Remote addresses are the peer's published segment base (or 0) plus an
//! offset the caller checked against the segment. Registrations of local buffers are
//! `crate::mr`'s (its Safety section); a slot keeps its registration's tag until its
//! completion is read.
#![allow(unsafe_code)]

use crate::config::RMA_SLOTS;
use crate::ep::OfiEp;
use crate::fabric::{AtomicCall, Desc, Errno, flags};
use crate::mem::Mem;
use crate::stats::EpCounters;
use gex_core::EpAddr;
use gex_core::InitError;
use gex_core::spi::{
    AtomicBase, AtomicKind, ConduitError, Native, NativeAtomic, NativeResult, SegRange,
};

/// Native RMA state of one endpoint: a fixed table of slots, each with an
/// `fi_context2` handed to libfabric; a ticket is `generation << 32 | slot`.
#[derive(Debug)]
pub(crate) struct Rma {
    /// `FI_RMA` granted and wired (and not disabled by `GEX_OFI_RMA=0`).
    pub(crate) on: bool,
    pub(crate) ctx: Mem,
    /// Per slot: generation (bumped when the slot is freed) and state.
    pub(crate) epoch: Vec<u32>,
    pub(crate) state: Vec<u8>,
    pub(crate) free: Vec<u32>,
    /// Per slot: the tag of the registration its local buffer uses (see
    /// `MrCache::acquire`; 0: none to release).
    pub(crate) tag: Vec<u32>,
    /// Per slot: where a fetching atomic's old value goes (copied from the slot's
    /// result word by `native_test`), or null.
    pub(crate) res: Vec<*mut u64>,
    /// `FI_ATOMIC` granted.
    pub(crate) atomics: bool,
    /// Relaxed puts (`native_put_relaxed`) of up to this many bytes are posted
    /// transmit-complete and completed at the target by a flush; 0: never (every put
    /// asks for `FI_DELIVERY_COMPLETE`).
    pub(crate) relaxed_max: usize,
    /// Per peer endpoint (global index): relaxed puts posted since its last flush.
    pub(crate) unflushed: Vec<bool>,
    /// Per slot: an atomic's words: operand, compare value, and the result the provider
    /// writes (registered under `FI_MR_LOCAL`, descriptor `words_desc`).
    pub(crate) words: Mem,
    pub(crate) words_desc: Desc,
}

/// A slot no operation uses.
pub(crate) const SLOT_FREE: u8 = 0;
/// A slot whose operation is in flight.
pub(crate) const SLOT_PENDING: u8 = 1;
/// A slot whose operation completed and has not been reported by `native_test` yet.
pub(crate) const SLOT_DONE: u8 = 2;

impl Rma {
    /// The slot table: `RMA_SLOTS` slots if native RMA is `on`, none otherwise.
    pub(crate) fn new(
        on: bool,
        atomics: bool,
        relaxed_max: usize,
        peers: usize,
    ) -> Result<Rma, InitError> {
        let n = if on { RMA_SLOTS } else { 0 };
        Ok(Rma {
            atomics: on && atomics,
            relaxed_max: if on { relaxed_max } else { 0 },
            unflushed: vec![false; if on { peers } else { 0 }],
            words: Mem::new(n * 24)?,
            words_desc: Desc::NONE,
            on,
            ctx: Mem::new(n * flags::CONTEXT_BYTES)?,
            epoch: vec![0; n],
            state: vec![SLOT_FREE; n],
            free: (0..n as u32).rev().collect(),
            tag: vec![0; n],
            res: vec![std::ptr::null_mut(); n],
        })
    }
    /// The libfabric context of slot `i`.
    #[inline(always)]
    pub(crate) fn ctx(&self, i: usize) -> *mut std::ffi::c_void {
        debug_assert!(i < self.state.len());
        // SAFETY: i < slots: inside the context array.
        unsafe { self.ctx.base().add(i * flags::CONTEXT_BYTES) }.cast()
    }
    /// The slot of a context pointer, if it is one of the table's.
    #[inline(always)]
    pub(crate) fn index_of(&self, ctx: *mut std::ffi::c_void) -> Option<usize> {
        let off = (ctx as usize).checked_sub(self.ctx.base() as usize)?;
        (off < self.state.len() * flags::CONTEXT_BYTES && off % flags::CONTEXT_BYTES == 0)
            .then_some(off / flags::CONTEXT_BYTES)
    }
    /// Bytes of the slot words (24 per slot).
    pub(crate) fn words_len(&self) -> usize {
        self.state.len() * 24
    }
    /// Slot `i`'s words: operand, compare value, discarded result.
    #[inline(always)]
    pub(crate) fn words(&self, i: usize) -> *mut u64 {
        debug_assert!(i < self.state.len());
        // SAFETY: i < slots: inside the 24-byte-per-slot array (8-byte aligned: page
        // aligned base).
        unsafe { self.words.base().add(i * 24) }.cast()
    }
    /// Marks the operation of slot `i` complete; returns the tag of the registration
    /// it used, for `MrCache::release`.
    #[inline]
    pub(crate) fn completed(&mut self, i: usize) -> u32 {
        self.state[i] = SLOT_DONE;
        std::mem::take(&mut self.tag[i])
    }
}

/// Direction of a native RMA transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dir {
    /// Put: local buffer to the peer's segment.
    Write,
    /// Get: the peer's segment to a local buffer.
    Read,
}

impl OfiEp {
    /// The shared body of `native_put` (`Dir::Write`: `fi_writemsg` from `buf`) and
    /// `native_get` (`Dir::Read`: `fi_read` into `buf`): slot, remote address and key,
    /// the call, counters, and the answers documented on `native_put`.
    ///
    /// # Safety
    /// As `ConduitEp::native_put` (write: `buf..buf+range.len` readable and unmodified
    /// until completion) or `native_get` (read: writable and untouched by others until
    /// completion).
    #[inline]
    pub(crate) unsafe fn native_rma(
        &mut self,
        range: SegRange,
        buf: *mut u8,
        dir: Dir,
        delivery: bool,
    ) -> NativeResult {
        let SegRange { dst, offset, len } = range;
        if !self.rma.on {
            return Ok(Native::Unsupported);
        }
        if let Some(f) = &self.tx.fatal {
            return Err(ConduitError::Network(f.clone()));
        }
        if len == 0 {
            return Ok(Native::Done);
        }
        let g = self.tx.g(dst);
        let Some(Some(r)) = self.conduit.remote.get(g) else {
            return Ok(Native::Unsupported);
        };
        out_of_segment(dst, offset, len, r.len)?;
        let (addr, key) = (r.base + offset as u64, r.key);
        let Some(slot) = self.rma.free.pop() else {
            return Ok(Native::WouldBlock);
        };
        // The local descriptor: registered at open, cached, or registered now (under
        // FI_MR_LOCAL); a registration that fails leaves the transfer to the AM path.
        let o = &mut *self.objs;
        let Some((desc, tag)) = o.cache.acquire(&o.domain, &o.ep, buf, len) else {
            self.rma.free.push(slot);
            return Ok(Native::Unsupported);
        };
        let i = slot as usize;
        let ctx = self.rma.ctx(i);
        let peer = self.tx.addrs[g];
        // SAFETY: `buf` stays valid (and, for a write, unmodified; for a read, untouched
        // by others) until completion (caller's contract); the context is slot `i`'s,
        // not reused before its completion is read and reported by `native_test`; the
        // remote range lies in `dst`'s registered segment (checked by the caller).
        let r = unsafe {
            match dir {
                Dir::Write => self
                    .tx
                    .h
                    .write(buf, len, desc, peer, addr, key, ctx, delivery),
                Dir::Read => self.tx.h.read(buf, len, desc, peer, addr, key, ctx),
            }
        };
        if r.is_ok() {
            self.rma.tag[i] = tag;
            let c = self.counters();
            match dir {
                Dir::Write => EpCounters::add(&c.puts, &c.put_bytes, len),
                Dir::Read => EpCounters::add(&c.gets, &c.get_bytes, len),
            }
            if !delivery {
                EpCounters::bump(&c.relaxed_puts, 1);
                self.rma.unflushed[g] = true;
            }
        } else {
            self.objs.cache.release(tag);
        }
        self.slot_posted(slot, r, || {
            let what = match dir {
                Dir::Write => "fi_writemsg to",
                Dir::Read => "fi_read from",
            };
            format!("{what} rank {} EP {} ({len} bytes)", dst.rank, dst.ep)
        })
    }

    /// This endpoint's counters of native operations (read by `Ofi::stats`).
    #[inline]
    fn counters(&self) -> &EpCounters {
        &self.conduit.counters[self.index as usize]
    }

    /// The answer for the operation just posted in `slot` (result `r`): `Pending` with
    /// the slot's ticket, `WouldBlock` on `-FI_EAGAIN` (slot freed), else the fatal
    /// error naming `what()` (slot freed).
    #[inline]
    fn slot_posted(
        &mut self,
        slot: u32,
        r: Result<(), Errno>,
        what: impl FnOnce() -> String,
    ) -> Result<Native, ConduitError> {
        let i = slot as usize;
        match r {
            Ok(()) => {
                self.rma.state[i] = SLOT_PENDING;
                Ok(Native::Pending(
                    u64::from(self.rma.epoch[i]) << 32 | u64::from(slot),
                ))
            }
            Err(Errno::AGAIN) => {
                self.rma.free.push(slot);
                Ok(Native::WouldBlock)
            }
            Err(e) => {
                self.rma.free.push(slot);
                Err(self.tx.fail(what(), e))
            }
        }
    }

    /// The completion of native operation `i` was read: its slot is done and its
    /// registration released.
    #[inline]
    pub(crate) fn rma_completed(&mut self, i: usize) {
        let tag = self.rma.completed(i);
        self.objs.cache.release(tag);
    }

    /// Where relaxed puts to `dst` were posted since its last flush: one `fi_read` of
    /// one byte from the start of `dst`'s segment into the slot's result word. The
    /// provider orders it after those writes at the target (`FI_ORDER_RAW`), so its
    /// completion means their bytes are in place. Otherwise `Done`.
    pub(crate) fn flush_puts(&mut self, dst: EpAddr) -> Result<Native, ConduitError> {
        if self.rma.relaxed_max == 0 {
            return Ok(Native::Done);
        }
        if let Some(f) = &self.tx.fatal {
            return Err(ConduitError::Network(f.clone()));
        }
        let g = self.tx.g(dst);
        if !self.rma.unflushed.get(g).copied().unwrap_or(false) {
            return Ok(Native::Done);
        }
        let Some(Some(r)) = self.conduit.remote.get(g) else {
            return Ok(Native::Done);
        };
        let (addr, key) = (r.base, r.key);
        let Some(slot) = self.rma.free.pop() else {
            return Ok(Native::WouldBlock);
        };
        let i = slot as usize;
        let ctx = self.rma.ctx(i);
        // SAFETY: slot i's words lie in the slot array (i < slots).
        let land = unsafe { self.rma.words(i).add(2) }.cast::<u8>();
        let peer = self.tx.addrs[g];
        // SAFETY: the landing word belongs to slot i, which nobody else uses until its
        // completion is reported (`res[i]` is null: `native_test` does not read it);
        // the context is slot i's; offset 0 of `dst`'s segment is registered and, as
        // relaxed puts went there, at least one byte long.
        let r = unsafe {
            self.tx
                .h
                .read(land, 1, self.rma.words_desc, peer, addr, key, ctx)
        };
        if r.is_ok() {
            self.rma.unflushed[g] = false;
            EpCounters::bump(&self.counters().flushes, 1);
        }
        self.slot_posted(slot, r, || {
            format!(
                "fi_read (flush of puts) from rank {} EP {}",
                dst.rank, dst.ep
            )
        })
    }

    /// Whether native atomics perform `base` on `kind` (fetching as `fetch` says).
    pub(crate) fn atomic_supported(&self, kind: AtomicKind, base: AtomicBase, fetch: bool) -> bool {
        self.rma.atomics
            && fi_atomic_of(kind, base, fetch)
                .is_some_and(|(call, dt, op)| self.tx.h.atomic_valid(call, dt, op))
    }

    /// One `fi_atomic`/`fi_fetch_atomic`/`fi_compare_atomic` on `dst`'s registered
    /// segment; operands live in the slot until completion, and the provider writes
    /// the old value into the slot's result word, which `native_test` copies to
    /// `result` (so every local word of the operation lies in memory registered at
    /// open, which `FI_MR_LOCAL` needs).
    #[inline]
    ///
    /// # Safety
    /// As `ConduitEp::native_atomic`: `result` valid for a `u64` write, untouched by
    /// others, until completion (or null when the operation does not fetch).
    pub(crate) unsafe fn post_atomic(
        &mut self,
        op: &NativeAtomic,
        result: *mut u64,
    ) -> NativeResult {
        let (dst, offset) = (op.dst, op.offset);
        if !self.rma.atomics {
            return Ok(Native::Unsupported);
        }
        if let Some(f) = &self.tx.fatal {
            return Err(ConduitError::Network(f.clone()));
        }
        let g = self.tx.g(dst);
        let (Some(Some(r)), Some((call, dt, fop))) = (
            self.conduit.remote.get(g),
            fi_atomic_of(op.kind, op.base, op.fetch),
        ) else {
            return Ok(Native::Unsupported);
        };
        out_of_segment(dst, offset, op.kind.size(), r.len)?;
        let (addr, key) = (r.base + offset as u64, r.key);
        let Some(slot) = self.rma.free.pop() else {
            return Ok(Native::WouldBlock);
        };
        let i = slot as usize;
        let ctx = self.rma.ctx(i);
        let w = self.rma.words(i);
        // SAFETY: slot i's three words, owned by this free slot.
        let (buf, compare, land) = unsafe { (w, w.add(1), w.add(2)) };
        let (operand, cmp) = match op.base {
            // fi_compare_atomic: `buf` is stored if the word equals `compare`.
            AtomicBase::Cswap => (op.b, op.a),
            _ => (atomic_operand(op.kind, op.base, op.a), 0),
        };
        // SAFETY: slot i's words (above), not in use by any operation.
        unsafe {
            buf.write(operand);
            compare.write(cmp);
        }
        // SAFETY: operands and the result word belong to slot i until its completion is
        // read (the result is copied out by `native_test`); the target word is aligned
        // and inside `dst`'s registered segment (checked by the caller).
        let rc = unsafe {
            self.tx.h.atomic(
                call,
                buf,
                compare,
                land,
                self.rma.words_desc,
                self.tx.addrs[g],
                addr,
                key,
                dt,
                fop,
                ctx,
            )
        };
        if rc.is_ok() {
            self.rma.res[i] = result;
            EpCounters::bump(&self.counters().atomics, 1);
        }
        self.slot_posted(slot, rc, || {
            format!(
                "native atomic {:?} on {:?} to rank {} EP {}",
                op.base, op.kind, dst.rank, dst.ep
            )
        })
    }

    /// True once the completion of `ticket` has been read from the CQ (by `poll` or
    /// `block`); stores a fetching atomic's old value into its `result` and frees the
    /// slot, so a ticket reports true once.
    #[inline]
    pub(crate) fn test_ticket(&mut self, ticket: u64) -> bool {
        let i = (ticket & u64::from(u32::MAX)) as usize;
        let epoch = (ticket >> 32) as u32;
        if i >= self.rma.state.len() || self.rma.epoch[i] != epoch || self.rma.state[i] != SLOT_DONE
        {
            return false;
        }
        let res = std::mem::replace(&mut self.rma.res[i], std::ptr::null_mut());
        if !res.is_null() {
            // SAFETY: the provider wrote slot i's result word before the completion
            // that made the slot done; `res` is valid for a u64 write until this
            // operation completes, which is now (`native_atomic`'s contract).
            unsafe { res.write(self.rma.words(i).add(2).read()) };
        }
        self.rma.state[i] = SLOT_FREE;
        self.rma.epoch[i] = epoch.wrapping_add(1);
        self.rma.free.push(i as u32);
        true
    }
}

/// The libfabric call, datatype and operation that perform `base` on `kind` (fetching
/// as `fetch` says), or `None` where there is none (bitwise operations on floats).
/// `Sub`, `Inc` and `Dec` are `FI_SUM` of a transformed operand ([`atomic_operand`]).
fn fi_atomic_of(
    kind: AtomicKind,
    base: AtomicBase,
    fetch: bool,
) -> Option<(AtomicCall, libfabric_sys::fi_datatype, libfabric_sys::fi_op)> {
    use libfabric_sys as fi;
    let float = matches!(kind, AtomicKind::F32 | AtomicKind::F64);
    let dt = match kind {
        AtomicKind::I32 => fi::FI_INT32,
        AtomicKind::U32 => fi::FI_UINT32,
        AtomicKind::I64 => fi::FI_INT64,
        AtomicKind::U64 => fi::FI_UINT64,
        AtomicKind::F32 => fi::FI_FLOAT,
        AtomicKind::F64 => fi::FI_DOUBLE,
    };
    let op = match base {
        AtomicBase::Cswap => return Some((AtomicCall::Compare, dt, fi::FI_CSWAP)),
        AtomicBase::Set | AtomicBase::Swap => fi::FI_ATOMIC_WRITE,
        AtomicBase::Get => fi::FI_ATOMIC_READ,
        AtomicBase::Add | AtomicBase::Sub | AtomicBase::Inc | AtomicBase::Dec => fi::FI_SUM,
        AtomicBase::Mult => fi::FI_PROD,
        AtomicBase::Min => fi::FI_MIN,
        AtomicBase::Max => fi::FI_MAX,
        AtomicBase::And | AtomicBase::Or | AtomicBase::Xor if float => return None,
        AtomicBase::And => fi::FI_BAND,
        AtomicBase::Or => fi::FI_BOR,
        AtomicBase::Xor => fi::FI_BXOR,
    };
    let call = if fetch || matches!(base, AtomicBase::Get | AtomicBase::Swap) {
        AtomicCall::Fetch
    } else {
        AtomicCall::Plain
    };
    Some((call, dt, op))
}

/// The operand libfabric gets for `base` with gex operand `a` (bit pattern, low bits):
/// `Sub` adds the negation (exact for floats, wrapping for integers), `Inc`/`Dec` add
/// plus or minus one.
fn atomic_operand(kind: AtomicKind, base: AtomicBase, a: u64) -> u64 {
    let neg = |x: u64| match kind {
        AtomicKind::I32 | AtomicKind::U32 => u64::from((x as u32).wrapping_neg()),
        AtomicKind::I64 | AtomicKind::U64 => x.wrapping_neg(),
        AtomicKind::F32 => x ^ 0x8000_0000,
        AtomicKind::F64 => x ^ (1 << 63),
    };
    let one = match kind {
        AtomicKind::F32 => u64::from(1f32.to_bits()),
        AtomicKind::F64 => 1f64.to_bits(),
        _ => 1,
    };
    match base {
        AtomicBase::Sub => neg(a),
        AtomicBase::Inc => one,
        AtomicBase::Dec => neg(one),
        _ => a,
    }
}

/// `Err(ConduitError::Contract)` unless `[offset, offset + len)` lies in `dst`'s
/// segment of `seg_len` bytes (what it published at open, checked against the job
/// layout there). gex-rma checks every range against the layout first; this keeps a
/// caller that did not from sending the provider a range outside `dst`'s registration.
#[inline(always)]
fn out_of_segment(
    dst: EpAddr,
    offset: usize,
    len: usize,
    seg_len: usize,
) -> Result<(), ConduitError> {
    if offset.checked_add(len).is_some_and(|e| e <= seg_len) {
        return Ok(());
    }
    Err(ConduitError::Contract(format!(
        "ofi: native operation on [{offset}, +{len}) of {dst}'s {seg_len}-byte segment"
    )))
}
