//! # gex-overlap
//!
//! Demand-driven synchronisation for gex (after HUNT, seed 000): a get that returns
//! at once and lets the program use each page of the destination as soon as the part
//! of the transfer holding it has landed, and a put whose source pages may be written
//! again as soon as they have left. A [layer](gex_core::layer) like gex-rma and
//! gex-coll, with an extension trait on the endpoint ([`OverlapExt`]).
//!
//! ```
//! use gex_core::{boot::Singleton, loopback::Loopback, Blocking, ClientBuilder};
//! use gex_overlap::{Overlap, OverlapBuf, OverlapExt};
//! use gex_rma::{GlobalPtr, Rma, RmaExt};
//!
//! let client = ClientBuilder::new().layer::<Rma>().layer::<Overlap>()
//!     .segment_size(1 << 20).init::<Loopback>(Box::new(Singleton::new()))?;
//! let mut ep = client.endpoint(0)?;
//! let p = GlobalPtr::<u8>::new(ep.addr(), 0);
//! ep.put(p, &vec![3u8; 1 << 19], Blocking)?;
//! let mut buf = OverlapBuf::new(1 << 19)?;
//! let issued = ep.get_demand(&mut buf, 0, p, 1 << 19)?; // returns at once
//! // Each page is waited for on its first touch, strip by strip.
//! let sum: u64 = buf.iter().map(|&b| u64::from(b)).sum();
//! assert_eq!(sum, 3 << 19);
//! assert!(issued.strips >= 1);
//! ep.retire_all()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## How it works
//! - Buffers are [`OverlapBuf`]s: memory of a file mapped twice, a *user view* (the
//!   `[u8]` the program sees) and a *transfer view* that only the transfers use, so
//!   that a destination can be inaccessible to the program while the data is written
//!   into it.
//! - A transfer claims its pages in the buffer's page table (one atomic state per
//!   page; overlapping pending ranges are refused), protects them in the user view
//!   (`PROT_NONE` for a get's destination, `PROT_READ` for a put's source), and hands
//!   the job to the layer's **mover thread**, which copies it strip by strip (from or
//!   to the peer's segment, mapped in this process), and after each strip unprotects
//!   its pages and marks them retired.
//! - The SIGSEGV/SIGBUS handler, on a fault in a pending page, tells the mover which
//!   page is wanted (it moves that strip next) and waits for the page to retire, then
//!   returns and the access is done again. It never polls the endpoint; docs/overlap.md
//!   has the signal-safety argument.
//! - Strips (equal, or growing from a small first one: [`StripPlan`]) come from a
//!   cost model ([`model`]) fed by parameters measured once per process ([`params`]:
//!   fault and `mprotect` costs, the copy's time per byte) or per conduit by
//!   `gex-tune overlap` ([`calibrate`]) into the profile `GEX_OVERLAP_PROFILE` names
//!   ([`OverlapProfile`]).
//!
//! ## What it does not do
//! - Demand-driven transfers to peers whose segment this process maps (smp, thread
//!   ranks, the same-host ranks of a hybrid ofi job), and to other peers through the
//!   conduit's native RMA only when the endpoint has a progress thread (which retires
//!   the strips); otherwise the transfer is done during the call through gex-rma
//!   (correct, no overlap).
//! - With a progress thread, touching a pending page inside another gex call on the
//!   same endpoint deadlocks (the handler waits while that call holds the endpoint):
//!   [`OverlapExt::wait_range`] first, as before a system call.
//! - Lazy protection (only the next strip's first page protected, seed 000) is
//!   `unsafe` ([`OverlapExt::get_lazy`]: the program promises sequential access); the
//!   safe operations protect every page of the range at once.
//! - No retirement hooked into gex-coll's barrier: call [`OverlapExt::retire_all`]
//!   before a synchronisation point that must see a put complete.
//! - A system call given a pending page fails with `EFAULT`: use
//!   [`OverlapExt::wait_range`] first.
//! - Delta transfers: OS-triggered tracking sends early only at
//!   [`DeltaExt::delta_flush`] (not from the fault handler, which would copy pages
//!   other threads may still be writing); delta send-recv to a receiver whose segment
//!   is not mapped here (over the network) sends during the calls and needs a
//!   progress thread at the receiver ([`OverlapError::NeedsProgressThread`]); the
//!   delta sent as an
//!   ordinary gex-msg message (feature `msg`) works over any conduit but costs a copy
//!   on each side and has no early sends. docs/overlap.md lists the limits.
//!
//! ## Delta transfers (seed 001)
//! A [`DeltaBuf`] sent to a destination ([`DeltaExt`]) carries only what changed since
//! its last transfer there, tracked by the program's marks ([`Tracking::Annotated`]) or
//! by page faults ([`Tracking::OsTriggered`]); inside an epoch
//! ([`DeltaExt::delta_begin`] … [`DeltaExt::delta_end`]) finished parts are sent early,
//! and writing a part already sent is reported ([`OverlapError::WrittenAfterSend`]).
//! A [`DeltaRecv`] is the receive side: its buffer's pages become readable one by one
//! as the sender's deltas arrive in its window, with no wait call.
//!
//! With the feature `msg`, `DeltaMsgExt` sends a [`DeltaBuf`]'s changes as one
//! ordinary gex-msg message (ordered with the program's other messages, over any
//! conduit) and applies them at the receiver; [`apply_delta`] decodes such a message
//! received with a plain receive.
//!
//! ## Words
//! - **strip**: a piece of a transfer moved (and retired) as one.
//! - **pending** page: claimed by a transfer not yet moved; **retired**: moved and
//!   unprotected.
//!
//! ## Settings
//! [`ENV_VARS`]: `GEX_OVERLAP_STRIP`, `GEX_OVERLAP_PROFILE`, `GEX_OVERLAP_MIN_SPLIT`, `GEX_OVERLAP_DELTA`,
//! `GEX_OVERLAP_DELTA_WHOLE`, `GEX_OVERLAP_MOVER_CPUS`, `GEX_OVERLAP_TRACE`.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod buf;
mod calibrate;
mod delta;
mod error;
mod layer;
pub mod model;
#[cfg(feature = "msg")]
mod msg;
mod profile;
mod ranges;
mod sched;
mod sys;
mod table;
mod wire;

pub use buf::{BufStats, OverlapBuf};
pub use calibrate::calibrate;
pub use delta::{DeltaBuf, DeltaExt, DeltaRecv, DeltaStats, Tracking, page_size};
pub use error::OverlapError;
pub use layer::{
    ENV_VARS, Issued, Overlap, OverlapExt, PageFault, fault_count, overlap_trace, params,
    trace_enabled,
};
pub use model::{CostParams, Decomp, StripPlan};
#[cfg(feature = "msg")]
pub use msg::DeltaMsgExt;
pub use profile::OverlapProfile;
pub use sched::{SchedExt, SchedMode, SchedStats};
pub use wire::{DELTA_HEADER, DELTA_MAGIC, DELTA_RUN_HEADER, DeltaStatus, apply_delta};

/// At most this many [`OverlapBuf`]s are alive at once in a process.
pub const MAX_BUFFERS: usize = sys::SLOTS;
