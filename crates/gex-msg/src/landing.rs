//! The blocking receive's landing (with `area` and `direct`, one of the `unsafe`
//! modules of the crate): while a blocking [`recv`](crate::MsgExt::recv) waits, the
//! caller's slice is where the first eager message it matches is copied, straight out
//! of the network's buffer in the handler (one copy at the receiver, no allocation),
//! instead of into an unexpected message of its own that the receive then copies again.
//!
//! The landing is armed by the receive right before it polls, only when nothing the
//! receive matches is queued (so the message that lands is the one a receive posted
//! then would match) and an eager message can land (not for a receive of one source
//! on the near path into at most a queue slot's payload: those come through the
//! queue, and arming, then disarming, on every wait cost a 64-byte ping-pong 15 %),
//! and taken back by a guard when the wait ends, on every path
//! (unwinding too): the slice is borrowed by the receive for the whole time, and the
//! address is written only by the handler of a poll of that receive's wait.
#![allow(unsafe_code)]

use crate::MsgError;
use crate::engine::{Envelope, Pattern};
use crate::layer::Status;
use std::ptr::NonNull;

/// A blocking receive's slice while it waits (see the module documentation).
#[derive(Debug)]
pub(crate) struct Landing {
    /// What the receive matches.
    pub(crate) pat: Pattern,
    addr: NonNull<u8>,
    cap: usize,
    /// What landed: the receive is complete.
    pub(crate) got: Option<Result<Status, MsgError>>,
}

// SAFETY: the address is the blocking receive's slice, written only by `Landing::land`
// in a handler of a poll of the endpoint while the receive waits (by the receive's
// thread, or a progress thread under the endpoint's lock word, which the receive takes
// to disarm the landing before it reads the slice: the write happens before).
unsafe impl Send for Landing {}

impl Landing {
    /// A landing for `buf`, which the caller keeps borrowed, unused, while the
    /// landing is in the layer state and takes it out before it uses `buf` again
    /// (`ext::Armed`, whose drop does, unwinding too).
    pub(crate) fn new(pat: Pattern, buf: &mut [u8]) -> Landing {
        Landing {
            pat,
            addr: NonNull::new(buf.as_mut_ptr()).unwrap_or(NonNull::dangling()),
            cap: buf.len(),
            got: None,
        }
    }

    /// True if an eager message with envelope `env` and `len` bytes lands here (the
    /// caller has checked that no posted receive takes it first).
    #[inline]
    pub(crate) fn takes(&self, env: &Envelope, len: usize) -> bool {
        self.got.is_none() && len <= self.cap && self.pat.accepts(env)
    }

    /// Copies `data` (which [`takes`](Self::takes) accepted) into the slice and
    /// completes the receive.
    #[inline]
    pub(crate) fn land(&mut self, env: Envelope, data: &[u8]) {
        debug_assert!(self.takes(&env, data.len()));
        let len = data.len().min(self.cap);
        // SAFETY: `addr` and `cap` are the slice of `new`, which the blocking receive
        // keeps borrowed and unused while the landing is in the layer state (its guard
        // takes the landing out before the slice is used again or freed, on unwind too),
        // and `len <= cap`; `data` is the network's buffer or an unexpected message,
        // which cannot overlap the caller's exclusively borrowed slice.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.addr.as_ptr(), len) };
        self.got = Some(Ok(Status {
            source: env.src,
            tag: env.tag,
            len,
        }));
    }
}
