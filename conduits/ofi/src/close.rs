//! Closing: a dropped endpoint's libfabric objects, buffers and RMA slots move into a
//! *grave* owned by the conduit, which `Conduit::finalize` serves (reading completion
//! queues, reposting receive buffers) until the job-wide barrier has passed, so a rank
//! that finishes first does not cancel what its peers still have in flight to it
//! (docs/ofi.md, "Closing"). Graves are closed after the barrier, or when the conduit
//! is dropped.
//!
//! # Safety
//! A grave declares the libfabric objects (endpoint first) before the buffers and
//! slots they may still reference, so dropping it closes the endpoint before freeing
//! them. Its raw pointers (libfabric handles, receive buffers, the segment pointer) are
//! owned by the grave or by the conduit that owns the grave, and one thread at a time
//! serves it.
#![allow(unsafe_code)]

use crate::Ofi;
use crate::config::DRAIN_LIMIT;
use crate::ep::{Objects, OfiEp};
use crate::fabric::{CQ_BATCH, Errno, flags};
use crate::rma::{Rma, SLOT_PENDING};
use crate::rx::Rx;
use crate::tx::Tx;
use gex_core::boot::BootError;
use std::mem::ManuallyDrop;
use std::time::Duration;

/// The network resources of a dropped endpoint. Peers may still be completing
/// operations on it (a get from its segment, an AM to it, the last message of a
/// barrier) and its own sends and native RMA may still be in flight: closing it at
/// once would cancel them (with tcp;ofi_rxm the peer sees `Operation canceled` on a
/// reset connection). So `OfiEp::drop` moves them here, `Ofi::finalize` serves them
/// (a thread reads their completion queues and reposts receive buffers) until the
/// job-wide barrier has passed, and only then are they closed. Messages that arrive
/// here are dropped: their endpoint is gone.
#[derive(Debug)]
pub(crate) struct Grave {
    // Field order is drop order: libfabric objects (endpoint first) before the
    // buffers they may still reference.
    pub(crate) objs: Objects,
    pub(crate) tx: Tx,
    pub(crate) rx: Rx,
    pub(crate) rma: Rma,
}

// SAFETY: the raw pointers inside (libfabric handles, receive buffers, the segment
// pointer of `rx`) are owned by the grave or by the conduit that owns the grave; one
// thread at a time serves a grave (the endpoint's, then `finalize`'s).
unsafe impl Send for Grave {}

impl Grave {
    /// Whether this endpoint's own sends or native operations are still in flight.
    fn busy(&self) -> bool {
        !self.tx.all_sent() || self.rma.state.contains(&SLOT_PENDING)
    }

    /// One pass over the completion queue: completions are recorded, messages
    /// dropped, receive buffers reposted, errors (peers that closed first) ignored.
    /// Returns the completions seen.
    pub(crate) fn serve(&mut self) -> usize {
        let _ = self.rx.repost_pending();
        let mut seen = 0;
        loop {
            let k = match self.objs.cq.read(&mut self.rx.comps) {
                Ok(k) => k,
                Err(Errno::AVAIL) => {
                    if let Ok(e) = self.objs.cq.read_error() {
                        self.complete(e.ctx, e.flags, true);
                    }
                    seen += 1;
                    continue;
                }
                Err(_) => 0,
            };
            for j in 0..k {
                let c = self.rx.comps[j];
                self.complete(c.ctx, c.flags, false);
            }
            seen += k;
            if k < CQ_BATCH {
                return seen;
            }
        }
    }

    fn complete(&mut self, ctx: *mut std::ffi::c_void, fl: u64, error: bool) {
        if let Some(i) = self.tx.pool.index_of(ctx) {
            self.tx.sent(i);
        } else if let Some(i) = self.rma.index_of(ctx) {
            let tag = self.rma.completed(i);
            self.objs.cache.release(tag);
        } else if let Some(i) = self.rx.pool.index_of(ctx) {
            // A canceled receive is not reposted: its endpoint is being torn down.
            if !error && (!self.rx.multi || fl & flags::MULTI_RECV != 0) {
                match self.rx.post(i) {
                    Ok(true) => {}
                    _ => self.rx.repost.push(i as u32),
                }
            }
        }
    }
}

impl Drop for OfiEp {
    fn drop(&mut self) {
        // SAFETY: each field is taken exactly once, here, and never used again: the
        // endpoint is being dropped and no other code runs on it after `drop`.
        let mut grave = unsafe {
            Grave {
                objs: ManuallyDrop::take(&mut self.objs),
                tx: ManuallyDrop::take(&mut self.tx),
                rx: ManuallyDrop::take(&mut self.rx),
                rma: ManuallyDrop::take(&mut self.rma),
            }
        };
        if self.index as usize >= self.conduit.rt.job.my_eps {
            // Made at run time: closed for good (docs/ofi.md, "Endpoints made at run
            // time"); the endpoints that looked it up are told.
            self.conduit.close_runtime(self.index as usize, &mut grave);
        }
        self.conduit
            .graves
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(grave);
    }
}

impl Ofi {
    /// `Conduit::finalize`: serves the graves from a thread while this rank waits for
    /// its own operations to complete (at most [`DRAIN_LIMIT`]) and runs `barrier`;
    /// closes them once it has returned.
    pub(crate) fn serve_graves_around(
        &self,
        barrier: &mut dyn FnMut() -> Result<(), BootError>,
    ) -> Result<(), BootError> {
        let mut graves =
            std::mem::take(&mut *self.graves.lock().unwrap_or_else(|e| e.into_inner()));
        if graves.is_empty() {
            return barrier();
        }
        let who = graves[0].tx.who.clone();
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let (drained, is_drained) = std::sync::mpsc::channel::<()>();
        let r = std::thread::scope(|s| {
            let graves = &mut graves;
            s.spawn(move || {
                let mut drained = Some(drained);
                while let Err(std::sync::mpsc::TryRecvError::Empty) = stopped.try_recv() {
                    let seen: usize = graves.iter_mut().map(Grave::serve).sum();
                    if drained.is_some() && !graves.iter().any(Grave::busy) {
                        drained.take();
                    }
                    if seen == 0 {
                        std::thread::sleep(Duration::from_micros(50));
                    }
                }
            });
            // The sender is dropped (and `recv_timeout` returns) once nothing of this
            // rank's is in flight.
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                is_drained.recv_timeout(DRAIN_LIMIT)
            {
                eprintln!(
                    "gex {who}: operations of closed endpoints still in flight after {DRAIN_LIMIT:?}; finalising anyway"
                );
            }
            let r = barrier();
            drop(stop);
            r
        });
        drop(graves);
        r
    }
}
