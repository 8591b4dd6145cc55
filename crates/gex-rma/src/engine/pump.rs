//! The AM reference protocol's initiator side ([`crate::am`]): the message pumps that
//! send a transfer's put and get messages from its cursor, and the get replies.
//!
//! # Safety
//! A get reply copies into the destination recorded in the operation's entry, whose
//! lifetime rules are those of [`crate::state`]; the copy is bounds-checked against
//! the recorded length. Segment bytes are copied through raw pointers, never
//! referenced.

use crate::RmaError;
use crate::am::*;
use crate::state::Rma;
use crate::vis::Chunk;
use gex_core::layer::Cx;
use gex_core::spi::Conduit;
use gex_core::{Am, Category, EpAddr};

impl Rma {
    /// Sends the put messages of `chunks` (from `src`) for operation `id`, resuming at
    /// `cur`; true once every message is sent, false at back-pressure.
    pub(crate) fn am_put_pump<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        id: u32,
        dst: EpAddr,
        chunks: &[Chunk],
        src: &[u8],
        cur: &mut AmCursor,
    ) -> Result<bool, RmaError> {
        let max_long = cx.max_long(dst).max(1);
        let max_med = cx.max_medium(dst);
        let pack = chunks.len() > 1 && max_med > PIECE_HDR;
        let h = self.h;
        loop {
            if cur.pkt_ready {
                if !send(
                    cx,
                    dst,
                    (h.put_packed, &[id]),
                    (Category::Medium, &cur.pkt, 0),
                )? {
                    return Ok(false);
                }
                self.ops.bump(id, 1);
                cur.packet_sent();
            }
            let c = match cur.next_chunk(chunks) {
                Next::Chunk(c) => c,
                Next::Again => continue,
                Next::Done => return Ok(true),
            };
            let bytes = &src[c.local..c.local + c.len];
            if pack && PIECE_HDR + c.len <= max_med {
                if cur.pkt.len() + PIECE_HDR + c.len > max_med {
                    cur.pkt_ready = true;
                    continue;
                }
                cur.push_piece_header(c);
                cur.pkt.extend_from_slice(bytes);
                cur.ci += 1;
                continue;
            }
            let n = (c.len - cur.off).min(max_long);
            let piece = &bytes[cur.off..cur.off + n];
            let long = (Category::Long, piece, c.remote + cur.off);
            if !send(cx, dst, (h.put_long, &[id]), long)? {
                return Ok(false);
            }
            self.ops.bump(id, 1);
            cur.advance(n, c);
        }
    }

    /// Sends the get requests of `chunks` from `src` for operation `id`, resuming at
    /// `cur`; true once every request is sent, false at back-pressure.
    pub(crate) fn am_get_pump<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        id: u32,
        src: EpAddr,
        chunks: &[Chunk],
        cur: &mut AmCursor,
    ) -> Result<bool, RmaError> {
        let max_med = cx.max_medium(src).max(1);
        let pack = chunks.len() > 1 && max_med >= PIECE_HDR;
        let h = self.h;
        loop {
            if cur.pkt_ready {
                let args = [id, lo(cur.start), hi(cur.start)];
                if !send(
                    cx,
                    src,
                    (h.get_packed, &args),
                    (Category::Medium, &cur.pkt, 0),
                )? {
                    return Ok(false);
                }
                self.ops.bump(id, cur.acc);
                cur.packet_sent();
            }
            let c = match cur.next_chunk(chunks) {
                Next::Chunk(c) => c,
                Next::Again => continue,
                Next::Done => return Ok(true),
            };
            if pack && c.len <= max_med {
                let fits = cur.pkt.len() + PIECE_HDR <= max_med
                    && cur.acc + c.len <= max_med
                    && c.local == cur.start + cur.acc;
                if !fits && !cur.pkt.is_empty() {
                    cur.pkt_ready = true;
                    continue;
                }
                if cur.pkt.is_empty() {
                    cur.start = c.local;
                    cur.acc = 0;
                }
                cur.push_piece_header(c);
                cur.acc += c.len;
                cur.ci += 1;
                continue;
            }
            let n = (c.len - cur.off).min(max_med);
            let (r, l) = (c.remote + cur.off, c.local + cur.off);
            let args = [id, lo(r), hi(r), n as u32, lo(l), hi(l)];
            if !send_short(cx, src, h.get, &args)? {
                return Ok(false);
            }
            self.ops.bump(id, n);
            cur.advance(n, c);
        }
    }

    // ------------------------------------------------------------------ handlers

    /// Credits one acknowledgement-like unit from a message (not for abandoned
    /// operations, whose remaining units are native tickets).
    fn credit_msg(&mut self, id: u32, n: usize) {
        let ok = self.ops.get(&id).is_some_and(|op| !op.abandoned) && self.ops.credit(id, n);
        if !ok {
            self.served.dropped += 1;
        }
    }

    /// Acknowledgement of a put, memset or non-fetching atomic message.
    pub(crate) fn on_ack(&mut self, am: &Am<'_>) {
        match am.args().first() {
            Some(&op) => self.credit_msg(op, 1),
            None => self.served.dropped += 1,
        }
    }

    /// Get reply: copy into the recorded destination.
    pub(crate) fn on_get_reply(&mut self, am: &Am<'_>) {
        let a = am.args();
        let p = am.payload();
        let ok = a.len() >= 3
            && match self.ops.get(&a[0]) {
                Some(op)
                    if !op.abandoned
                        && !op.dst.is_null()
                        && op.remaining >= p.len()
                        && join(a[1], a[2])
                            .checked_add(p.len())
                            .is_some_and(|e| e <= op.dst_len) =>
                {
                    // SAFETY: the destination is alive until the operation completes
                    // (`crate::state` `# Safety`) and [at, at+len) is inside it
                    // (checked). Plain: both sides are private (the caller's lent
                    // buffer, which nothing else touches until completion, and the
                    // core's copy of the payload).
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            p.as_ptr(),
                            op.dst.add(join(a[1], a[2])),
                            p.len(),
                        )
                    };
                    true
                }
                _ => false,
            };
        if ok {
            self.ops.credit(a[0], p.len());
        } else {
            self.served.dropped += 1;
        }
    }
}
