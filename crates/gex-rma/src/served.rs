//! The target side of the AM reference protocol ([`crate::am`]): what this endpoint
//! needs to serve other ranks' RMA requests, and the handlers that serve them (puts,
//! packed puts, small puts, gets, packed gets, memsets, atomics). A component of the
//! layer record ([`Rma`](crate::state::Rma)`::served`): its own state (this endpoint's
//! segment, the get handlers' bounce buffer, the count of dropped messages) and one
//! entry per request handler. The initiator side (operations in flight, replies
//! credited to them) is [`crate::ops`] and [`crate::am`].
//!
//! # Safety
//! Handlers write and read their own endpoint's segment (mapped for the life of the
//! conduit) within ranges they check against its length, through raw pointers and
//! byte-wise atomic copies, never references (other ranks may access the segment at
//! the same time).
#![allow(unsafe_code)]

use crate::am::Handlers;
use crate::aop::KindExt;
use gex_core::{Am, Body, Token};
use std::ptr::NonNull;

/// The target side's state (module doc).
pub(crate) struct Served {
    /// The layer's handler ids (replies go to the initiator's handlers of the same
    /// block).
    pub(crate) h: Handlers,
    /// This endpoint's segment (base, length).
    seg: NonNull<u8>,
    seg_len: usize,
    /// Reply buffer of the get handlers.
    bounce: Vec<u8>,
    /// Messages handlers had to drop (late replies of abandoned operations, malformed
    /// requests), on both sides.
    pub(crate) dropped: u64,
}

impl Served {
    /// The target side of an endpoint whose segment is `seg` (`seg_len` bytes).
    pub(crate) fn new(h: Handlers, seg: NonNull<u8>, seg_len: usize) -> Served {
        Served {
            h,
            seg,
            seg_len,
            bounce: Vec::new(),
            dropped: 0,
        }
    }

    /// The arguments of `am` when it has at least `n`; `None` (the message dropped)
    /// otherwise.
    fn args<'a>(&mut self, am: &'a Am<'_>, n: usize) -> Option<&'a [u32]> {
        let a = am.args();
        if a.len() < n {
            self.dropped += 1;
            return None;
        }
        Some(a)
    }

    /// Whether `off..off + len` lies in this endpoint's segment.
    fn in_segment(&self, off: usize, len: usize) -> bool {
        crate::target::in_bounds(off, len, self.seg_len)
    }

    /// Replies to a get with the bytes in the bounce buffer (reply arguments `args`).
    fn reply_bounce(&self, t: &mut Token<'_>, args: [u32; 3]) {
        let _ = t.reply(self.h.get_reply, Body::medium(&args, &self.bounce));
    }

    /// Acknowledges the operation named by `am`'s first argument (dropped without one).
    fn ack_first(&mut self, t: &mut Token<'_>, am: &Am<'_>) {
        match am.args().first() {
            Some(&op) => self.ack(t, op),
            None => self.dropped += 1,
        }
    }

    fn ack(&mut self, t: &mut Token<'_>, op: u32) {
        let _ = t.reply(self.h.ack, Body::short(&[op]));
    }

    /// Long put piece: the core has written the payload; acknowledge.
    pub(crate) fn on_put_long(&mut self, t: &mut Token<'_>, am: &Am<'_>) {
        self.ack_first(t, am);
    }

    /// Packed put: pieces (offset, len, bytes) written into this segment.
    pub(crate) fn on_put_packed(&mut self, t: &mut Token<'_>, am: &Am<'_>) {
        let mut p = am.payload();
        while p.len() >= crate::am::PIECE_HDR {
            let (off, len) = crate::am::piece_header(p);
            p = &p[crate::am::PIECE_HDR..];
            let ok = len <= p.len() && self.in_segment(off, len);
            if !ok {
                self.dropped += 1;
                break;
            }
            // SAFETY: [off, off+len) is inside this endpoint's segment (checked); the
            // payload is the core's temporary buffer. Race-free: byte-wise atomic stores
            // into the segment, which others may access meanwhile.
            unsafe { gex_sync::copy::atomic_write(self.seg.as_ptr().add(off), &p[..len]) };
            p = &p[len..];
        }
        self.ack_first(t, am);
    }

    /// Get: copy from this segment into a Medium reply.
    pub(crate) fn on_get(&mut self, t: &mut Token<'_>, am: &Am<'_>) {
        let Some(a) = self.args(am, 6) else {
            return;
        };
        let (off, len) = (crate::am::join(a[1], a[2]), a[3] as usize);
        if !self.in_segment(off, len) {
            self.dropped += 1;
            return;
        }
        self.bounce.resize(len, 0);
        // SAFETY: the range is inside this endpoint's segment (checked); the bounce
        // buffer is the layer's own. Race-free: byte-wise atomic loads from the segment.
        unsafe { gex_sync::copy::atomic_read(self.seg.as_ptr().add(off), &mut self.bounce) };
        self.reply_bounce(t, [a[0], a[4], a[5]]);
    }

    /// Packed get: pieces (offset, len) gathered into one reply.
    pub(crate) fn on_get_packed(&mut self, t: &mut Token<'_>, am: &Am<'_>) {
        let Some(a) = self.args(am, 3) else {
            return;
        };
        self.bounce.clear();
        for e in am.payload().chunks_exact(crate::am::PIECE_HDR) {
            let (off, len) = crate::am::piece_header(e);
            if !self.in_segment(off, len) {
                self.dropped += 1;
                return;
            }
            let at = self.bounce.len();
            self.bounce.resize(at + len, 0);
            // SAFETY: the range is inside this endpoint's segment (checked); the bounce
            // buffer is the layer's own and has room (resized). Race-free: byte-wise
            // atomic loads from the segment.
            unsafe {
                gex_sync::copy::atomic_read(self.seg.as_ptr().add(off), &mut self.bounce[at..])
            };
        }
        self.reply_bounce(t, [a[0], a[1], a[2]]);
    }

    /// Memset: `[op, off lo, off hi, len lo, len hi, byte]`.
    pub(crate) fn on_memset(&mut self, t: &mut Token<'_>, am: &Am<'_>) {
        let Some(a) = self.args(am, 6) else {
            return;
        };
        let (off, len) = (crate::am::join(a[1], a[2]), crate::am::join(a[3], a[4]));
        if self.in_segment(off, len) {
            // SAFETY: the range is inside this endpoint's segment (checked). Race-free:
            // byte-wise atomic stores.
            unsafe { gex_sync::copy::atomic_fill(self.seg.as_ptr().add(off), a[5] as u8, len) };
        } else {
            self.dropped += 1;
        }
        self.ack(t, a[0]);
    }

    /// Writes the bytes of a small put whose arguments `a` are its range (two words)
    /// and then its bytes; a malformed one is dropped.
    fn short_put(&mut self, a: &[u32]) {
        let ok = a.len() >= 2 && {
            let (off, len) = crate::am::short_put_range(a[0], a[1]);
            crate::am::short_put_write(self.seg.as_ptr(), self.seg_len, off, len, &a[2..])
        };
        if !ok {
            self.dropped += 1;
        }
    }

    /// Small put, nonblocking form.
    pub(crate) fn on_put_short(&mut self, t: &mut Token<'_>, am: &Am<'_>) {
        let a = am.args();
        self.short_put(a.get(1..).unwrap_or_default());
        if let Some(&op) = a.first() {
            self.ack(t, op);
        }
    }

    /// Small put, blocking form (no op word; acknowledged by a counted reply).
    pub(crate) fn on_put_short_b(&mut self, t: &mut Token<'_>, am: &Am<'_>) {
        self.short_put(am.args());
        let _ = t.reply(self.h.ack_fast, Body::short(&[]));
    }
    /// Atomic request: performs the CPU atomic on this segment and replies.
    pub(crate) fn on_atomic(&mut self, t: &mut Token<'_>, am: &Am<'_>) {
        let Some(a) = self.args(am, 8) else {
            return;
        };
        let code = a[1];
        let off = crate::am::join(a[2], a[3]);
        let (Some(op), Some(k)) = (
            crate::aop::Code::from_code(code & 0xff),
            gex_core::spi::AtomicKind::from_code((code >> 8) & 0xff),
        ) else {
            self.dropped += 1;
            return;
        };
        if k.is_float() && op.flag().intersects(crate::AtomicOps::BITWISE) {
            self.dropped += 1;
            return;
        }
        let f = crate::AtomicFlags::from_bits_truncate((code >> 16) & 0xff);
        let size = k.size();
        let seg = self.seg.as_ptr();
        let ok = self.in_segment(off, size) && (seg as usize).wrapping_add(off) % size == 0;
        if !ok {
            self.dropped += 1;
            return;
        }
        // SAFETY: inside this endpoint's segment and aligned (checked); atomic by the
        // module rules.
        let old = unsafe {
            crate::aop::exec(
                seg.add(off),
                k,
                op.base(),
                crate::aop::join64(a[4], a[5]),
                crate::aop::join64(a[6], a[7]),
                f,
            )
        };
        if code & crate::aop::WANT != 0 {
            let _ = t.reply(
                self.h.atomic_reply,
                Body::short(&[a[0], old as u32, (old >> 32) as u32]),
            );
        } else {
            let _ = t.reply(self.h.ack, Body::short(&a[..1]));
        }
    }
}
