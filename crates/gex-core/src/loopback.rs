//! `Loopback`: the smallest complete conduit — a job of one rank whose endpoints talk to
//! each other inside the process. It is the conduit of singleton programs and doc
//! examples, and the reference for conduit authors: it implements only AM injection,
//! polling and segments, which is all the SPI requires.
//!
//! Owned Medium payloads ([`ConduitEp::inject_owned`]) travel with the message without a
//! copy and are handed back when the message has been delivered, so loopback exercises
//! deferred local completion for real.
//!
//! Each endpoint's inbox is a mutex-protected queue (endpoints may live on different
//! threads); that is acceptable here because loopback is never a performance path.
//! Polling an endpoint locks its own inbox only.
//!
//! Endpoints made at run time ([`Capabilities::RUNTIME_ENDPOINTS`]): the conduit keeps an
//! inbox per index of the capacity (`JobLayout::max_eps`); [`Conduit::open_endpoint`]
//! allocates the segment and auxiliary area of its index (which marks it open), and
//! dropping the endpoint marks it closed. A send to an index not open is
//! [`ConduitError::NoEndpoint`]; a reply to one is dropped.
//!
//! # Safety
//! The conduit contract ([`Conduit`], [`ConduitEp`], `unsafe trait`s) holds: segments
//! and auxiliary areas are zero-filled heap blocks of the asked lengths owned by the
//! conduit (so valid as long as it lives), reached only through raw pointers; a Long
//! is copied into the destination segment at an offset the core checked; delivered
//! payloads are the message's own `Vec`; there are no native operations and no
//! in-place buffers.
#![allow(unsafe_code)]

use crate::boot::Bootstrap;
use crate::error::InitError;
use crate::spi::{
    Capabilities, Conduit, ConduitEp, ConduitError, Deliver, JobLayout, Limits, OpenParams, OutMsg,
    OwnedInjected, OwnedMsg, QueuedMsg, ReplyTx,
};
use crate::types::{Category, EpAddr, EpIndex, Injected};
use gex_sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::collections::HashMap;
use std::collections::VecDeque;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

const LIMITS: Limits = Limits {
    max_args: 16,
    max_medium: 65536,
    max_long: usize::MAX,
};

#[derive(Debug)]
struct Msg {
    m: QueuedMsg,
    /// Deferred local completion: hand `m.payload` back under this ticket once delivered.
    ticket: Option<u64>,
}

/// Segment memory, 64-byte aligned, owned by the conduit.
#[derive(Debug)]
struct SegMem {
    mem: Box<[Line]>,
    len: usize,
}

/// One cache line of segment memory.
#[derive(Debug)]
#[repr(C, align(64))]
struct Line(std::cell::UnsafeCell<[u64; 8]>);

// Segments are raw shared memory by contract: every access goes through raw pointers;
// the `UnsafeCell` wrapper makes writes through shared references legal.
// SAFETY: see above — no reference to the bytes is handed out, and every access that
// may meet another thread's is atomic: Long deliveries (`push`) and `Segment::read`/
// `write` copy with `gex_sync::copy` (byte-wise atomic), RMA atomics are atomics. What
// concurrent conflicting accesses leave in the bytes is unspecified, not undefined
// (but for a copy against an RMA atomic on the same word: docs/soundness.md, class 4).
unsafe impl Sync for SegMem {}

impl SegMem {
    /// `len` zeroed bytes; an error (not an abort) if they cannot be allocated.
    fn new(len: usize, what: &str) -> Result<Self, InitError> {
        let lines = len.div_ceil(64).max(1);
        let mut mem = Vec::new();
        mem.try_reserve_exact(lines)
            .map_err(|e| InitError::Conduit {
                conduit: Loopback::NAME,
                msg: format!("cannot allocate a {what} of {len} bytes: {e}"),
            })?;
        mem.extend((0..lines).map(|_| Line(std::cell::UnsafeCell::new([0; 8]))));
        Ok(SegMem {
            mem: mem.into_boxed_slice(),
            len,
        })
    }
    /// The segment's first byte, as a pointer valid for the whole segment: derived from
    /// the slice of lines, not from its first line (a pointer from `&self.mem[0]` may
    /// only reach that line's 64 bytes, which Miri's Stacked Borrows enforces).
    fn base(&self) -> NonNull<u8> {
        NonNull::new(self.mem.as_ptr().cast_mut().cast::<u8>()).expect("non-null")
    }
}

/// The loopback conduit (one rank). See the [module documentation](self).
#[derive(Debug)]
pub struct Loopback {
    /// One inbox per index of the capacity.
    inboxes: Vec<Arc<Mutex<VecDeque<Msg>>>>,
    /// Segment of every index; set once the endpoint is open (at `open` for the
    /// endpoints made at init, `open_endpoint` for the others).
    segs: Vec<OnceLock<SegMem>>,
    aux: Vec<OnceLock<SegMem>>,
    /// Set when an endpoint made at run time is dropped (never reopened).
    closed: Vec<AtomicBool>,
    /// Endpoints made at init.
    eps: usize,
    seg_len: usize,
    aux_len: usize,
    next_ticket: AtomicU64,
    completed: Mutex<HashMap<u64, Vec<u8>>>,
}

/// A loopback endpoint.
#[derive(Debug)]
pub struct LoopbackEp {
    index: EpIndex,
    conduit: Arc<Loopback>,
}

// SAFETY: the module's `# Safety`.
unsafe impl Conduit for Loopback {
    type Ep = LoopbackEp;
    const NAME: &'static str = "loopback";

    fn open(
        boot: &mut dyn Bootstrap,
        params: &OpenParams<'_>,
    ) -> Result<(Arc<Self>, Vec<LoopbackEp>), InitError> {
        let JobLayout { eps, seg_len, .. } = params.layout;
        if boot.size() != 1 {
            return Err(InitError::Conduit {
                conduit: Self::NAME,
                msg: format!("supports one rank, job has {}", boot.size()),
            });
        }
        let n = eps[0] as usize;
        let slots = (params.layout.max_eps[0] as usize).max(n);
        let lazy = |i: usize, len: usize, what: &str| -> Result<OnceLock<SegMem>, InitError> {
            Ok(if i < n {
                OnceLock::from(SegMem::new(len, what)?)
            } else {
                OnceLock::new()
            })
        };
        let c = Arc::new(Loopback {
            inboxes: (0..slots)
                .map(|_| Arc::new(Mutex::new(VecDeque::new())))
                .collect(),
            segs: (0..slots)
                .map(|i| lazy(i, seg_len[0], "segment"))
                .collect::<Result<_, _>>()?,
            aux: (0..slots)
                .map(|i| lazy(i, params.aux_len, "auxiliary area"))
                .collect::<Result<_, _>>()?,
            closed: (0..slots).map(|_| AtomicBool::new(false)).collect(),
            eps: n,
            seg_len: seg_len[0],
            aux_len: params.aux_len,
            next_ticket: AtomicU64::new(1),
            completed: Mutex::new(HashMap::new()),
        });
        let v = (0..n as u16)
            .map(|index| LoopbackEp {
                index,
                conduit: c.clone(),
            })
            .collect();
        Ok((c, v))
    }

    /// Allocates the segment and auxiliary area of index `index` (`eps..max_eps`),
    /// which opens it.
    fn open_endpoint(self: &Arc<Self>, index: EpIndex) -> Result<LoopbackEp, ConduitError> {
        let i = index as usize;
        if i < self.eps || i >= self.segs.len() {
            return Err(ConduitError::Contract(format!(
                "loopback: open_endpoint({index}) outside the runtime indices {}..{}",
                self.eps,
                self.segs.len()
            )));
        }
        let alloc =
            |len, what| SegMem::new(len, what).map_err(|e| ConduitError::Network(e.to_string()));
        let (seg, aux) = (
            alloc(self.seg_len, "segment")?,
            alloc(self.aux_len, "auxiliary area")?,
        );
        // The auxiliary area first: the segment marks the index open.
        if self.segs[i].get().is_some() || self.aux[i].set(aux).is_err() {
            return Err(ConduitError::Contract(format!(
                "loopback: endpoint {index} was opened before"
            )));
        }
        let _ = self.segs[i].set(seg);
        Ok(LoopbackEp {
            index,
            conduit: self.clone(),
        })
    }
}

impl Loopback {
    /// The segment of `dst` if it is open.
    ///
    /// # Errors
    /// [`ConduitError::NoEndpoint`] naming its state.
    fn open_seg(&self, dst: EpAddr) -> Result<&SegMem, ConduitError> {
        let i = dst.ep as usize;
        match self.segs.get(i).and_then(OnceLock::get) {
            Some(_) if self.closed[i].load(Ordering::Acquire) => Err(ConduitError::NoEndpoint {
                dst,
                state: "closed",
            }),
            Some(s) => Ok(s),
            None => Err(ConduitError::NoEndpoint {
                dst,
                state: "not created yet",
            }),
        }
    }
}

impl Drop for LoopbackEp {
    fn drop(&mut self) {
        let i = self.index as usize;
        if i >= self.conduit.eps {
            self.conduit.closed[i].store(true, Ordering::Release);
        }
    }
}

impl LoopbackEp {
    fn push(
        &self,
        msg: &OutMsg<'_>,
        owned: Option<Vec<u8>>,
        ticket: Option<u64>,
    ) -> Result<(), ConduitError> {
        let dst = msg.dst();
        let target = self.conduit.open_seg(dst)?;
        let (payload, len) = if msg.category() == Category::Long {
            // SAFETY: the core checked offset+len against the segment length. Race-free:
            // byte-wise atomic stores into the destination segment, which every endpoint
            // and thread may access meanwhile; the source is a shared borrow that
            // nothing writes during the call (inside a segment, `Segment::as_slice`'s
            // contract says so), read with plain loads.
            unsafe {
                gex_sync::copy::atomic_write(
                    target.base().as_ptr().add(msg.offset()),
                    msg.payload(),
                )
            };
            (Vec::new(), msg.payload().len())
        } else if let Some(buf) = owned {
            let len = buf.len();
            (buf, len)
        } else {
            (msg.payload().to_vec(), msg.payload().len())
        };
        let m = Msg {
            m: QueuedMsg::new(EpAddr::new(0, self.index), msg, payload, len),
            ticket,
        };
        self.conduit.inboxes[dst.ep as usize]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(m);
        Ok(())
    }
}

impl ReplyTx for LoopbackEp {
    fn reply(&mut self, msg: &OutMsg<'_>) -> Result<(), ConduitError> {
        // A reply to an endpoint made at run time that has closed since is dropped.
        let _ = self.push(msg, None, None);
        Ok(())
    }
}

// SAFETY: the module's `# Safety`.
unsafe impl ConduitEp for LoopbackEp {
    fn index(&self) -> EpIndex {
        self.index
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::SHARED_MEMORY | Capabilities::RUNTIME_ENDPOINTS
    }
    fn limits(&self, _dst: EpAddr) -> Limits {
        LIMITS
    }
    fn local_segment(&self) -> (NonNull<u8>, usize) {
        let s = self.conduit.segs[self.index as usize]
            .get()
            .expect("an endpoint's own segment exists while it lives");
        (s.base(), s.len)
    }
    fn peer_segment(&self, dst: EpAddr) -> Option<(NonNull<u8>, usize)> {
        self.conduit
            .segs
            .get(dst.ep as usize)
            .and_then(OnceLock::get)
            .filter(|_| dst.rank == 0)
            .map(|s| (s.base(), s.len))
    }
    fn peer_open(&self, dst: EpAddr) -> Result<(), ConduitError> {
        self.conduit.open_seg(dst).map(|_| ())
    }
    fn aux(&self, dst: EpAddr) -> Option<NonNull<u8>> {
        self.conduit
            .aux
            .get(dst.ep as usize)
            .and_then(OnceLock::get)
            .filter(|a| dst.rank == 0 && a.len > 0)
            .map(SegMem::base)
    }
    fn inject(&mut self, msg: &OutMsg<'_>, _imm: bool) -> Result<Injected, ConduitError> {
        self.push(msg, None, None)?;
        Ok(Injected::Sent)
    }
    fn inject_owned(
        &mut self,
        msg: OwnedMsg<'_>,
        _imm: bool,
    ) -> Result<OwnedInjected, ConduitError> {
        if msg.msg().category() != Category::Medium {
            self.push(&msg.msg(), None, None)?;
            return Ok(OwnedInjected::Done(msg.into_payload()));
        }
        self.conduit.open_seg(msg.msg().dst())?;
        let ticket = self.conduit.next_ticket.fetch_add(1, Ordering::Relaxed);
        // The buffer itself travels with the message: no copy.
        let (dst, mut m) = {
            let out = msg.msg();
            let len = out.payload().len();
            (
                out.dst(),
                QueuedMsg::new(EpAddr::new(0, self.index), &out, Vec::new(), len),
            )
        };
        m.payload = msg.into_payload();
        let m = Msg {
            m,
            ticket: Some(ticket),
        };
        self.conduit.inboxes[dst.ep as usize]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(m);
        Ok(OwnedInjected::Pending(ticket))
    }

    fn lc_test(&mut self, ticket: u64) -> Option<Vec<u8>> {
        self.conduit
            .completed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&ticket)
    }

    fn poll<D: Deliver>(&mut self, d: &mut D, budget: usize) -> usize {
        let inbox = self.conduit.inboxes[self.index as usize].clone();
        let mut n = 0;
        while n < budget {
            let Some(m) = inbox.lock().unwrap_or_else(|e| e.into_inner()).pop_front() else {
                break;
            };
            let Msg { m, ticket } = m;
            d.deliver(&m.incoming(&m.payload), self);
            if let Some(t) = ticket {
                self.conduit
                    .completed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(t, m.payload);
            }
            n += 1;
        }
        n
    }
    fn has_incoming(&self) -> bool {
        !self.conduit.inboxes[self.index as usize]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }
    fn block(&mut self, _timeout: Duration) {
        std::thread::yield_now();
    }
}
