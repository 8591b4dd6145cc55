//! The receiving half of an endpoint: receive buffers (multi-receive or one message
//! each) posted to libfabric and reposted once their messages are delivered, and the
//! processing of one completion: a send or RMA completion frees its resource, a
//! received message is decoded (`wire`), its credits returned, a Long payload copied
//! into the segment after a bounds check, and the message delivered in place.
//!
//! # Safety
//! A receive buffer is posted only while libfabric does not hold it (never posted, or
//! its message delivered), and only by an `Rx` that is part of an [`OfiEp`] or of a
//! `Grave` (`OfiEp::post_receives` at open, reposts after delivery, a grave's serving):
//! those close the libfabric endpoint before they free the pool, on every path
//! (`OfiEp`'s drop moves its parts into a `Grave`, whose fields drop the endpoint
//! first), so a posted buffer is never freed while the provider may still write it. A
//! received message is read through a slice of the buffer it
//! landed in, of the length the completion reports, checked against the buffer's
//! bounds. A Long payload is copied into this endpoint's segment (owned by the
//! conduit, which the endpoint keeps alive) only after its range was checked against
//! the segment's length.
#![allow(unsafe_code)]

use crate::config::MAX_ARGS;
use crate::ep::OfiEp;
use crate::fabric::{CQ_BATCH, Completion, EpHandle, Errno, NOT_AVAIL, flags};
use crate::mem::Pool;
use crate::tx::LocalHub;
use crate::wire;
use gex_core::spi::{Deliver, Incoming};
use gex_core::{Category, EpAddr, Kind};
use gex_sync::atomic::Ordering;
use gex_sync::ring;
use std::collections::VecDeque;
use std::sync::Arc;

/// Receiving half of an endpoint.
#[derive(Debug)]
pub(crate) struct Rx {
    pub(crate) h: EpHandle,
    pub(crate) pool: Pool,
    pub(crate) multi: bool,
    pub(crate) repost: Vec<u32>,
    pub(crate) seg: *mut u8,
    pub(crate) seg_len: usize,
    pub(crate) g_base: Vec<usize>,
    pub(crate) eps: Vec<u16>,
    /// Completions read by `block` and not processed yet.
    pub(crate) stash: VecDeque<Completion>,
    /// Where `poll` reads completions (kept here: not re-initialised on every poll).
    pub(crate) comps: [Completion; CQ_BATCH],
    pub(crate) hellos: usize,
    /// The in-process path: the rank's hub and this endpoint's index in it, the rings
    /// from this rank's endpoints taken from it (and how many).
    pub(crate) hub: Option<Arc<LocalHub>>,
    pub(crate) index: usize,
    pub(crate) local: Vec<ring::Consumer>,
    pub(crate) taken: usize,
}

impl Rx {
    /// The receiving half of an endpoint whose segment is `seg` (`seg_len` bytes):
    /// `pool` holds its receive buffers (multi-receive ones if `multi`), `eps` the
    /// number of addressable endpoints of every rank (`Job::cap`) and `g_base` their
    /// global numbering.
    pub(crate) fn new(
        h: EpHandle,
        pool: Pool,
        multi: bool,
        seg: *mut u8,
        seg_len: usize,
        g_base: Vec<usize>,
        eps: Vec<u16>,
    ) -> Rx {
        Rx {
            h,
            pool,
            multi,
            repost: Vec::new(),
            seg,
            seg_len,
            g_base,
            eps,
            stash: VecDeque::new(),
            comps: [Completion::EMPTY; CQ_BATCH],
            hellos: 0,
            hub: None,
            index: 0,
            local: Vec::new(),
            taken: 0,
        }
    }

    /// Whether rings from this rank's endpoints may deliver here.
    #[inline(always)]
    pub(crate) fn has_local(&self) -> bool {
        !self.local.is_empty()
            || self
                .hub
                .as_ref()
                .is_some_and(|h| h.offered[self.index].load(Ordering::Acquire) != self.taken)
    }

    /// Posts receive buffer `i`; `Ok(false)` if the provider has no room now
    /// (`-FI_EAGAIN`, or `-FI_ENOMEM`, which libfabric 1.17's shm returns while its pool
    /// of receive entries is used up by unexpected messages): `poll` retries it.
    ///
    /// Called only on the `Rx` of an [`OfiEp`] or of a `Grave` (module Safety section):
    /// both close the libfabric endpoint before they free the pool.
    pub(crate) fn post(&mut self, i: usize) -> Result<bool, Errno> {
        #[cfg(test)]
        if crate::test_hooks::post_fails() {
            return Err(Errno(libfabric_sys::FI_EIO as i32));
        }
        // SAFETY: buffer i is not held by libfabric (never posted, or its message was
        // delivered). Buffer and context live until the endpoint is closed: this `Rx`
        // is part of an `OfiEp` or a `Grave` (the only callers), and both close the
        // libfabric endpoint before freeing the pool on every path, errors and unwinding
        // included (`OfiEp`'s drop moves its parts into a `Grave`, whose first field,
        // dropped first, holds the endpoint).
        let r = unsafe {
            self.h.recv(
                self.pool.buf(i),
                self.pool.stride,
                self.pool.desc,
                self.pool.ctx(i),
                self.multi,
            )
        };
        #[cfg(test)]
        if r.is_ok() {
            crate::test_hooks::note(crate::test_hooks::Event::Posted {
                ep: self.h.addr(),
                buf: self.pool.buf(i) as usize,
            });
        }
        match r {
            Ok(()) => Ok(true),
            Err(Errno::AGAIN | Errno::NOMEM) => Ok(false),
            Err(e) => Err(e),
        }
    }

    pub(crate) fn repost_pending(&mut self) -> Result<(), Errno> {
        while let Some(&i) = self.repost.last() {
            if !self.post(i as usize)? {
                break;
            }
            self.repost.pop();
        }
        Ok(())
    }

    #[inline(always)]
    pub(crate) fn g_of(&self, rank: u32, ep: u16) -> Option<usize> {
        let r = rank as usize;
        (r < self.eps.len() && ep < self.eps[r]).then(|| self.g_base[r] + ep as usize)
    }
}

/// What a processed completion was.
pub(crate) enum Done {
    /// Nothing delivered (a send or RMA completion, a credit-only message).
    Nothing,
    /// One message delivered.
    Delivered,
}

impl OfiEp {
    /// Posts every receive buffer (those the provider has no room for wait in
    /// `repost`, for `poll`). Only an assembled endpoint posts: see [`Rx::post`].
    pub(crate) fn post_receives(&mut self) -> Result<(), Errno> {
        for i in 0..self.rx.pool.count {
            if !self.rx.post(i)? {
                self.rx.repost.push(i as u32);
            }
        }
        Ok(())
    }

    /// Delivers up to `budget` messages from the rings of this rank's endpoints (taking
    /// the rings newly handed over first). Returns the number delivered.
    pub(crate) fn drain_local<D: Deliver>(&mut self, d: &mut D, budget: usize) -> usize {
        let rx = &mut *self.rx;
        if let Some(hub) = &rx.hub {
            let i = rx.index;
            if hub.offered[i].load(Ordering::Acquire) != rx.taken {
                let mut v = hub.handoff[i].lock().unwrap_or_else(|e| e.into_inner());
                rx.taken += v.len();
                rx.local.append(&mut v);
            }
        }
        let mut rings = std::mem::take(&mut self.rx.local);
        let mut n = 0;
        'rings: for c in &mut rings {
            while n < budget {
                let Some((_, msg)) = c.peek() else {
                    continue 'rings;
                };
                if let Done::Delivered = self.deliver(msg, d) {
                    n += 1;
                }
                c.pop();
            }
            break;
        }
        self.rx.local = rings;
        n
    }

    /// Processes one completion.
    #[inline]
    pub(crate) fn complete<D: Deliver>(&mut self, c: Completion, d: &mut D) -> Done {
        if let Some(i) = self.tx.pool.index_of(c.ctx) {
            self.tx.sent(i);
            return Done::Nothing;
        }
        if let Some(i) = self.rma.index_of(c.ctx) {
            self.rma_completed(i);
            return Done::Nothing;
        }
        let Some(i) = self.rx.pool.index_of(c.ctx) else {
            self.die(format!("completion with an unknown context {:p}", c.ctx));
        };
        let mut done = Done::Nothing;
        if c.flags & flags::RECV != 0 && c.len > 0 {
            let start = if self.rx.multi {
                c.buf.cast::<u8>()
            } else {
                self.rx.pool.buf(i)
            };
            let (lo, hi) = (
                self.rx.pool.buf(i) as usize,
                self.rx.pool.buf(i) as usize + self.rx.pool.stride,
            );
            if (start as usize) < lo || start as usize + c.len > hi {
                self.die(format!(
                    "a {}-byte message at {start:p} lies outside its receive buffer",
                    c.len
                ));
            }
            // SAFETY: inside receive buffer i (checked above), written by libfabric before
            // it reported the completion; not reposted until after delivery.
            let msg = unsafe { std::slice::from_raw_parts(start, c.len) };
            done = self.deliver(msg, d);
        }
        if !self.rx.multi || c.flags & flags::MULTI_RECV != 0 {
            match self.rx.post(i) {
                Ok(true) => {}
                Ok(false) => self.rx.repost.push(i as u32),
                Err(e) => self.die(format!("fi_recvmsg (repost): {e}")),
            }
        }
        done
    }

    #[inline]
    /// Decodes one message, returns its credits, copies a Long payload into the
    /// segment and delivers it.
    pub(crate) fn deliver<D: Deliver>(&mut self, msg: &[u8], d: &mut D) -> Done {
        let h = match wire::decode(msg, MAX_ARGS) {
            Ok(h) => h,
            Err(e) => {
                let from = match wire::claimed_source(msg) {
                    Some((r, ep)) => format!(" (claiming to come from rank {r} EP {ep})"),
                    None => String::new(),
                };
                self.die(format!("malformed message{from}: {e}"))
            }
        };
        let Some(g) = self.rx.g_of(h.src_rank, h.src_ep) else {
            self.die(format!(
                "message from a nonexistent endpoint (rank {}, EP {})",
                h.src_rank, h.src_ep
            ));
        };
        if h.credits > 0 {
            self.tx.credits.returned(g, h.credits);
        }
        let Some(category) = h.category else {
            if h.ctl != 0 {
                self.control(g, &h, &msg[h.payload_at()..]);
            } else if h.hello {
                self.rx.hellos += 1;
            }
            return Done::Nothing;
        };
        if self.tx.addrs[g] == NOT_AVAIL {
            // The first message from an endpoint made at run time: a reply or a
            // credit may have to go back to it.
            self.learn(g, h.src_rank, h.src_ep);
        }
        let mut argbuf = [0u32; 32];
        let args = wire::args(msg, &h, &mut argbuf);
        let body = &msg[h.payload_at()..];
        let payload: &[u8] = match category {
            Category::Short => &[],
            Category::Medium => body,
            Category::Long => {
                if h.offset
                    .checked_add(h.len)
                    .is_none_or(|e| e > self.rx.seg_len)
                {
                    self.die(format!(
                        "Long from rank {} EP {} outside the segment ([{}, +{}) of {})",
                        h.src_rank, h.src_ep, h.offset, h.len, self.rx.seg_len
                    ));
                }
                // SAFETY: in bounds of this endpoint's segment (checked); the source is a
                // receive buffer, distinct from segment memory. Race-free: byte-wise
                // atomic stores into the segment, which other endpoints and threads of
                // this process (and neighbours mapping it) may access meanwhile.
                unsafe {
                    let dst = self.rx.seg.add(h.offset);
                    gex_sync::copy::atomic_write(dst, &body[..h.len]);
                }
                &[]
            }
        };
        if h.kind == Kind::Request {
            self.tx.credits.delivered(g);
            self.tx.mark_due(g);
        }
        let inc = Incoming {
            src: EpAddr::new(h.src_rank, h.src_ep),
            handler: h.handler,
            kind: h.kind,
            category,
            args,
            payload,
            offset: if category == Category::Long {
                h.offset
            } else {
                0
            },
            len: if category == Category::Long { h.len } else { 0 },
        };
        d.deliver(&inc, &mut *self.tx);
        Done::Delivered
    }
}
