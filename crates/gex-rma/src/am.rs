//! The AM reference protocol: RMA on nothing but active messages, so a conduit that
//! only moves AMs runs all of gex-rma (and `--cfg gex_force_am_rma` or
//! `GEX_RMA_PATH=am` keep it tested everywhere).
//!
//! | message | handler | args | answer |
//! |---|---|---|---|
//! | Long put piece | `put_long` | `[op]` | `ack [op]` |
//! | packed put (VIS pieces) | `put_packed` | `[op]`, payload `(offset u64, len u32, bytes)*` | `ack [op]` |
//! | small put, nonblocking | `put_short` | `[op, off lo, off hi (24 bits) \| len << 24, data words…]` | `ack [op]` |
//! | small put, blocking | `put_short_b` | `[off lo, off hi \| len << 24, data words…]` | `ack_fast` (counted) |
//! | get | `get` | `[op, off lo, off hi, len, local lo, local hi]` | Medium `get_reply [op, local lo, local hi]` |
//! | packed get | `get_packed` | `[op, local lo, local hi]`, payload `(offset u64, len u32)*` | one Medium `get_reply` |
//! | memset | `memset` | `[op, off lo, off hi, len lo, len hi, byte]` | `ack [op]` |
//! | atomic | `atomic` | `[op, code, off lo, off hi, a lo, a hi, b lo, b hi]` | `atomic_reply [op, old lo, old hi]` or `ack [op]` |
//!
//! The initiator side issues a transfer's messages in order from a cursor
//! ([`AmCursor`]), stopping at the first back-pressure (the caller polls and resumes);
//! each message sent adds its units to the operation's entry (one acknowledgement, or
//! the bytes a get reply will bring), which handlers credit.
//!
//! The AM path assumes Medium limits are symmetric between two peers (a get is chunked
//! by the initiator's `max_medium` toward the target and answered with replies of that
//! size).
//!
//! # Safety
//! [`short_put_write`] writes the target's own segment (mapped for the life of the
//! conduit) within the range it checks against the segment's length, through raw
//! pointers (segment bytes are never referenced). The initiator's side (the pumps and
//! the get replies) is in `crate::engine`.
#![allow(unsafe_code)]

use crate::RmaError;
use crate::vis::Chunk;
use gex_core::layer::Cx;
use gex_core::spi::Conduit;
use gex_core::{Category, EpAddr, HandlerId, Injected};

/// The handlers of the AM reference protocol (the layer's block, in this order).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Handlers {
    pub(crate) put_long: HandlerId,
    pub(crate) put_packed: HandlerId,
    pub(crate) ack: HandlerId,
    pub(crate) get: HandlerId,
    pub(crate) get_packed: HandlerId,
    pub(crate) get_reply: HandlerId,
    pub(crate) memset: HandlerId,
    pub(crate) put_short: HandlerId,
    pub(crate) ack_fast: HandlerId,
    pub(crate) put_short_b: HandlerId,
    pub(crate) atomic: HandlerId,
    pub(crate) atomic_reply: HandlerId,
}

/// Local handler indices (see [`Handlers`]).
pub(crate) mod h {
    pub(crate) const PUT_LONG: u8 = 0;
    pub(crate) const PUT_PACKED: u8 = 1;
    pub(crate) const ACK: u8 = 2;
    pub(crate) const GET: u8 = 3;
    pub(crate) const GET_PACKED: u8 = 4;
    pub(crate) const GET_REPLY: u8 = 5;
    pub(crate) const MEMSET: u8 = 6;
    pub(crate) const PUT_SHORT: u8 = 7;
    pub(crate) const ACK_FAST: u8 = 8;
    pub(crate) const PUT_SHORT_B: u8 = 9;
    pub(crate) const ATOMIC: u8 = 10;
    pub(crate) const ATOMIC_REPLY: u8 = 11;
    pub(crate) const COUNT: u8 = 12;
}

/// Bytes of one packed-piece header: offset (u64 LE) and length (u32 LE).
pub(crate) const PIECE_HDR: usize = 12;

pub(crate) fn lo(x: usize) -> u32 {
    x as u64 as u32
}
pub(crate) fn hi(x: usize) -> u32 {
    ((x as u64) >> 32) as u32
}
pub(crate) fn join(l: u32, h: u32) -> usize {
    (((h as u64) << 32) | l as u64) as usize
}

/// Offset and length from the two offset words of a small put.
pub(crate) fn short_put_range(lo: u32, hi_len: u32) -> (usize, usize) {
    (join(lo, hi_len & 0x00ff_ffff), (hi_len >> 24) as usize)
}

/// The arguments of a small put of `bytes` at `off` (header slot 0 left for the op
/// id), and how many are used.
pub(crate) fn short_put_args(
    off: usize,
    bytes: &[u8],
) -> ([u32; gex_core::spi::MIN_MAX_ARGS], usize) {
    let mut args = [0u32; gex_core::spi::MIN_MAX_ARGS];
    debug_assert!(bytes.len() <= crate::path::SHORT_PUT_MAX);
    for (i, c) in bytes.chunks(4).enumerate() {
        let mut w = [0u8; 4];
        w[..c.len()].copy_from_slice(c);
        args[3 + i] = u32::from_le_bytes(w);
    }
    (args[1], args[2]) = (lo(off), hi(off) | (bytes.len() as u32) << 24);
    (args, 3 + bytes.len().div_ceil(4))
}

/// Where an AM transfer stands.
#[derive(Debug, Default)]
pub(crate) struct AmCursor {
    /// Next chunk, and bytes of it already sent.
    pub(crate) ci: usize,
    pub(crate) off: usize,
    /// Packed message being built (puts: pieces with bytes; gets: entries).
    pub(crate) pkt: Vec<u8>,
    /// `pkt` is complete and must be sent before anything else.
    pub(crate) pkt_ready: bool,
    /// Gets: local offset of the packed message's first byte, and its reply bytes.
    pub(crate) start: usize,
    pub(crate) acc: usize,
}

/// The remote offset and length of a piece header ([`AmCursor::push_piece_header`])
/// at the start of `h` (at least [`PIECE_HDR`] bytes).
#[inline]
pub(crate) fn piece_header(h: &[u8]) -> (usize, usize) {
    let off = u64::from_le_bytes(h[..8].try_into().unwrap_or_default()) as usize;
    let len = u32::from_le_bytes(h[8..12].try_into().unwrap_or_default()) as usize;
    (off, len)
}

/// What an AM pump does next with its cursor ([`AmCursor::next_chunk`]).
pub(crate) enum Next {
    /// Work on this chunk (`ci`, from `off`).
    Chunk(Chunk),
    /// Loop again: an empty chunk was skipped, or the last packet was marked ready.
    Again,
    /// Every message is sent.
    Done,
}

impl AmCursor {
    /// The chunk of `chunks` to work on next: past the last one the packet being built
    /// is marked ready (or the transfer is done when there is none); empty chunks are
    /// skipped.
    #[inline(always)]
    pub(crate) fn next_chunk(&mut self, chunks: &[Chunk]) -> Next {
        let Some(c) = chunks.get(self.ci).copied() else {
            if self.pkt.is_empty() {
                return Next::Done;
            }
            self.pkt_ready = true;
            return Next::Again;
        };
        if c.len == 0 {
            self.ci += 1;
            return Next::Again;
        }
        Next::Chunk(c)
    }

    /// The ready packet was sent: start the next one.
    #[inline(always)]
    pub(crate) fn packet_sent(&mut self) {
        self.pkt.clear();
        self.pkt_ready = false;
    }

    /// Appends the piece header of chunk `c` (remote offset, length) to the packet.
    #[inline(always)]
    pub(crate) fn push_piece_header(&mut self, c: Chunk) {
        self.pkt.extend_from_slice(&(c.remote as u64).to_le_bytes());
        self.pkt.extend_from_slice(&(c.len as u32).to_le_bytes());
    }

    /// `n` more bytes of chunk `c` were sent: on to the next chunk after its last.
    #[inline(always)]
    pub(crate) fn advance(&mut self, n: usize, c: Chunk) {
        self.off += n;
        if self.off == c.len {
            self.ci += 1;
            self.off = 0;
        }
    }

    /// A cursor at chunk `ci`.
    pub(crate) fn at(ci: usize) -> Self {
        AmCursor {
            ci,
            ..AmCursor::default()
        }
    }
}

/// A request's payload: its category, its bytes and (Long) their offset in the
/// target's segment.
type Payload<'a> = (Category, &'a [u8], usize);

/// Sends one request (handler `h`, arguments `args`) without waiting: false under
/// back-pressure (nothing sent).
#[inline]
pub(crate) fn send<C: Conduit>(
    cx: &mut Cx<'_, C>,
    dst: EpAddr,
    (h, args): (HandlerId, &[u32]),
    (cat, payload, offset): Payload<'_>,
) -> Result<bool, RmaError> {
    Ok(cx.try_request(dst, h, cat, args, payload, offset)? == Injected::Sent)
}

/// Sends one Short request without waiting, as [`send`].
#[inline]
pub(crate) fn send_short<C: Conduit>(
    cx: &mut Cx<'_, C>,
    dst: EpAddr,
    h: HandlerId,
    args: &[u32],
) -> Result<bool, RmaError> {
    send(cx, dst, (h, args), (Category::Short, &[], 0))
}

/// Writes the bytes of a small put at `off` of the segment `seg` of `seg_len` bytes;
/// false if the message is malformed (nothing written).
pub(crate) fn short_put_write(
    seg: *mut u8,
    seg_len: usize,
    off: usize,
    len: usize,
    words: &[u32],
) -> bool {
    let max = crate::path::SHORT_PUT_MAX;
    let ok = len <= 4 * words.len() && len <= max && crate::target::in_bounds(off, len, seg_len);
    if ok {
        let mut bytes = [0u8; crate::path::SHORT_PUT_MAX];
        for (i, w) in words.iter().take(max / 4).enumerate() {
            bytes[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
        }
        // SAFETY: [off, off+len) is inside the segment (checked). Race-free: byte-wise
        // atomic stores into the segment.
        unsafe { gex_sync::copy::atomic_write(seg.add(off), &bytes[..len]) };
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::{SHORT_PUT_MAX, SHORT_PUT_OFF_LIMIT};

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
                let (args, n) = short_put_args(off, &vec![7u8; len]);
                assert_eq!(
                    short_put_range(args[1], args[2]),
                    (off, len),
                    "{off:#x} {len}"
                );
                assert_eq!(n, 3 + len.div_ceil(4));
            }
        }
    }

    #[test]
    fn small_put_write_checks_the_segment() {
        let mut seg = [0u8; 16];
        let p = seg.as_mut_ptr();
        let words = [u32::from_le_bytes(*b"abcd"), u32::from_le_bytes(*b"efgh")];
        assert!(short_put_write(p, 16, 3, 6, &words));
        assert_eq!(&seg[3..9], b"abcdef");
        assert_eq!(seg[9], 0);
        let p = seg.as_mut_ptr();
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
