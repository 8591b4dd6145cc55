//! The overlap layer's state and cost parameters; its mover thread (`worker`), the
//! extension trait ([`OverlapExt`], in `ext`) and the demand-driven transfers
//! (`demand`).
#![allow(unsafe_code)]

use gex_sync::atomic::{AtomicUsize, Ordering};
use std::pin::Pin;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use gex_core::config::EnvVar;
use gex_core::layer::{self, Attach, Cx, Layer, Progress};
use gex_core::spi::{Conduit, ConduitError, Native, SegRange};
use gex_core::{Am, Blocking, Capabilities, Endpoint, InitError, Token};
use gex_rma::{GlobalPtr, RmaExt};

use crate::buf::{OverlapBuf, Shared};
use crate::error::OverlapError;
use crate::model::{self, CostParams, Decomp, StripPlan};
use crate::sched::{SchedExt, SchedMode};
use crate::sys::{self, Prot};
use crate::table::{self, PENDING, RangeError};

mod cpus;
mod demand;
mod ext;
mod worker;

pub use ext::*;
pub(crate) use worker::*;

/// The `GEX_*` settings of the overlap layer.
pub const ENV_VARS: &[EnvVar] = &[
    EnvVar {
        name: "GEX_OVERLAP_STRIP",
        default: "auto",
        doc: "gex-overlap: strips of demand-driven transfers: `auto` (the cost model's choice between equal and variable strips, docs/overlap.md), `equal` (the model's equal strips), `variable` (the model's growing strips), `none` (never split) or a byte count (equal strips, rounded up to whole pages).",
    },
    EnvVar {
        name: "GEX_OVERLAP_PROFILE",
        default: "",
        doc: "gex-overlap: a profile file written by `gex-tune overlap` (the strip model's parameters per conduit); the conduit's table there replaces the parameters the process measures itself (a file without one: they are measured). Unreadable or malformed: the endpoint fails.",
    },
    EnvVar {
        name: "GEX_OVERLAP_MIN_SPLIT",
        default: "65536",
        doc: "gex-overlap: transfers shorter than this many bytes are done at once (no page protection) when the strip length is `auto`.",
    },
    EnvVar {
        name: "GEX_OVERLAP_DELTA",
        default: "auto",
        doc: "gex-overlap: delta transfers' increment: what a flush waits to have and the most one send carries: `auto` (the strip model's length for the buffer, between 4 and 16 pages) or a byte count (rounded up to whole pages).",
    },
    EnvVar {
        name: "GEX_OVERLAP_DELTA_WHOLE",
        default: "50",
        doc: "gex-overlap: a delta transfer sends the whole rest of its buffer (one run per delta) when at least this percentage (0 to 100) of the buffer changed.",
    },
    EnvVar {
        name: "GEX_OVERLAP_SCHED",
        default: "auto",
        doc: "gex-overlap: how scheduled puts (`SchedExt::sched_put`) travel: `auto` (per destination, from statistics), `plain` (each an NBI put), `train` (small puts coalesced, sent on the next poll) or `piggyback` (small puts wait for the next signal or `SchedExt::sched_request`).",
    },
    EnvVar {
        name: "GEX_OVERLAP_TRAIN",
        default: "4096",
        doc: "gex-overlap: bytes of a train of scheduled puts (records of 12 bytes plus the data), at most the conduit's largest Medium payload.",
    },
    EnvVar {
        name: "GEX_OVERLAP_TRAIN_PUT",
        default: "256",
        doc: "gex-overlap: the largest scheduled put that rides a train; larger ones are sent at once.",
    },
    EnvVar {
        name: "GEX_OVERLAP_MOVER_CPUS",
        default: "inherit",
        doc: "gex-overlap: the CPUs the mover thread runs on: `inherit` (those of the thread that starts the endpoint's first transfer, often one core its rank pinned itself to), `beside` (those the endpoint's thread could use when the layer attached, less the starting thread's if any remain) or a list such as `0-3,6` (each a CPU the process may run on).",
    },
    EnvVar {
        name: "GEX_OVERLAP_TRACE",
        default: "0",
        doc: "gex-overlap: `1` records every page fault the handler waited for (page address, nanoseconds waited; `overlap_trace()`), `0` records nothing.",
    },
];

/// The demand-driven synchronisation layer (see the crate documentation). Add it to
/// a client with `.layer::<gex_overlap::Overlap>()` after gex-rma.
#[derive(Debug)]
pub struct Overlap {
    pub(crate) decomp: Decomp,
    min_split: usize,
    /// The model's parameters from the profile (`GEX_OVERLAP_PROFILE`); `None`: the
    /// process's own measurement ([`params`]).
    cost: Option<CostParams>,
    /// The consumer's work per byte (ns) the program declared
    /// ([`OverlapExt::set_consume_cost`]).
    consume: Option<f64>,
    /// Learned from the last observed get: its consumer found most strips landed
    /// (slower than the data), so the model takes `c = 2·G` unless told `consume`.
    slow: bool,
    /// The last demand-driven get of four strips or more through the mover: its
    /// buffer, the buffer's count of waited faults at issue, its strips.
    watch: Option<(std::sync::Weak<Shared>, u64, usize)>,
    mover: Option<Mover>,
    /// Where the mover runs (`GEX_OVERLAP_MOVER_CPUS`, read at attach).
    mover_cpus: cpus::MoverCpus,
    pub(crate) inflight: Arc<AtomicUsize>,
    /// Delta transfers: the delta size (`GEX_OVERLAP_DELTA`; `None`: the model's).
    pub(crate) delta: Option<usize>,
    /// Delta transfers: send the whole rest at this percentage changed
    /// (`GEX_OVERLAP_DELTA_WHOLE`).
    pub(crate) delta_whole: u32,
    /// Strips started as native operations (peers whose segment is not mapped, with a
    /// progress thread), retired by the progress hook.
    native: Vec<NativeStrip>,
    /// Message scheduling: trains and piggybacked puts (`crate::sched`).
    pub(crate) sched: crate::sched::Sched,
}

/// A strip in the network's hands.
#[derive(Debug)]
struct NativeStrip {
    shared: Arc<Shared>,
    ticket: u64,
    off: usize,
    len: usize,
}

#[derive(Debug)]
struct Mover {
    tx: Option<Sender<Task>>,
    thread: Option<JoinHandle<()>>,
}

/// Direction of a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dir {
    /// Remote → transfer view.
    Get,
    /// Transfer view → remote.
    Put,
}

/// A transfer given to the mover: strips of `[off, off+len)` of the buffer, from or to
/// `remote` (an address in a peer's segment mapped in this process).
pub(crate) struct Job {
    pub(crate) shared: Arc<Shared>,
    pub(crate) dir: Dir,
    pub(crate) remote: usize,
    pub(crate) off: usize,
    pub(crate) len: usize,
    /// The strips of `[off, off+len)` (a delta send: one).
    pub(crate) plan: StripPlan,
    /// A lazy get (`OverlapExt::get_lazy`): strips retire through `sys::lazy_retire`
    /// and the transfer ends with `sys::lazy_settle`.
    pub(crate) lazy: bool,
    /// A delta send (empty: a demand-driven transfer): the byte ranges of
    /// `[off, off+len)` to copy (`Put` only), as one strip; the pages then go to
    /// `after` instead of being retired.
    pub(crate) pieces: Vec<(usize, usize)>,
    /// The pages' state after a delta send ([`table::READY`]: unprotected).
    pub(crate) after: u32,
    /// Decremented when the job is done (a delta buffer's count of sends in flight).
    pub(crate) done: Option<Arc<AtomicUsize>>,
    /// A delta send to a receive window: the address of the window's control block
    /// and the epoch, stored in the arrival word of each page of the job once copied.
    pub(crate) notify: Option<(usize, u32)>,
}

/// What the mover is given.
pub(crate) enum Task {
    /// Copy (demand-driven transfer or delta send).
    Job(Job),
    /// A delta receive: retire the receive buffer's pages as they arrive in its
    /// window.
    Watch(Watch),
}

/// A posted delta receive (see `crate::delta`): the pages of `shared` (all of them,
/// `pages` pages, `len` bytes) retire as the window's arrival words reach `epoch`.
pub(crate) struct Watch {
    pub(crate) shared: Arc<Shared>,
    /// The window's shadow, header and arrival words, in this process's own segment.
    pub(crate) shadow: usize,
    pub(crate) ctl: usize,
    pub(crate) arrivals: usize,
    pub(crate) epoch: u32,
    pub(crate) len: usize,
    pub(crate) left: Vec<bool>,
    /// Whether the pages not sent must be copied from the shadow at the end (the
    /// program wrote the receive buffer since the last receive, or it is the first):
    /// otherwise they hold the shadow's bytes already and only retire.
    pub(crate) copy_rest: bool,
    pub(crate) done: Arc<AtomicUsize>,
}

/// Offset of page `p`'s arrival word from a window's first arrival word.
pub(crate) const fn arrival_word(p: usize) -> usize {
    4 * p
}

/// Offsets in a window's header (its first page): the sender's end word (the last
/// epoch it completed) is at 0, the receiver's consumed word (the last epoch it
/// received) at 4, the window's buffer length (64 bits, written by the receiver) at 8,
/// the last message's length (64 bits, written by the sender before the end word) at
/// 16.
pub(crate) const CONSUMED_WORD: usize = 4;
/// See [`CONSUMED_WORD`].
pub(crate) const WINDOW_LEN_WORD: usize = 8;
/// See [`CONSUMED_WORD`].
pub(crate) const MSG_LEN_WORD: usize = 16;

impl Overlap {
    pub(crate) fn sender(&mut self) -> Result<&Sender<Task>, OverlapError> {
        if self.mover.is_none() {
            let (tx, rx) = channel::<Task>();
            let inflight = self.inflight.clone();
            let place = self.mover_cpus.for_spawn();
            let thread = std::thread::Builder::new()
                .name("gex-overlap-mover".into())
                .spawn(move || {
                    place.apply();
                    mover(rx, inflight)
                })
                .map_err(OverlapError::Os)?;
            self.mover = Some(Mover {
                tx: Some(tx),
                thread: Some(thread),
            });
        }
        match self.mover.as_ref().and_then(|m| m.tx.as_ref()) {
            Some(tx) => Ok(tx),
            None => Err(OverlapError::MoverGone),
        }
    }

    /// The model's parameters: the profile's, else the process's own.
    pub(crate) fn cost(&self) -> &CostParams {
        self.cost.as_ref().unwrap_or_else(|| params())
    }

    pub(crate) fn plan_for(&self, len: usize) -> StripPlan {
        let learned = self.slow.then(|| 2.0 * self.cost().gap_ns_per_byte);
        model::plan(
            self.cost(),
            &self.decomp,
            len,
            sys::page_size(),
            self.min_split,
            self.consume.or(learned),
        )
    }

    /// Reads the statistics of the last observed get ([`model::slower_than_data`]).
    fn learn(&mut self) {
        if let Some((weak, at_issue, strips)) = self.watch.take() {
            if let Some(shared) = weak.upgrade() {
                let waited = shared.region.waits.load(Ordering::Relaxed) - at_issue;
                self.slow = model::slower_than_data(waited, strips);
            }
        }
    }
}

impl Drop for Overlap {
    fn drop(&mut self) {
        // A native strip not seen complete may still be written (get) or read (put) by
        // the network: its buffer's memory is never unmapped (leaked, not freed).
        for n in self.native.drain(..) {
            std::mem::forget(n.shared);
        }
        // The mover finishes every job it was given (they read or write peers'
        // mappings, which outlive the layer: the endpoint drops its layers first).
        if let Some(m) = &mut self.mover {
            drop(m.tx.take());
            if let Some(t) = m.thread.take() {
                let _ = t.join();
            }
        }
    }
}

fn parse_bytes(name: &str, v: &str) -> Result<usize, InitError> {
    v.trim()
        .parse::<usize>()
        .map_err(|_| InitError::Config(format!("{name}={v}: expected a byte count")))
}

impl Layer for Overlap {
    const NAME: &'static str = "overlap";
    const HANDLERS: u8 = crate::sched::HANDLERS;
    const ENV_VARS: &'static [EnvVar] = ENV_VARS;

    fn attach<C: Conduit>(cx: &mut Attach<'_, C, Self>) -> Result<Self, InitError> {
        if cx.layer::<gex_rma::Rma>().is_none() {
            return Err(InitError::Layer {
                layer: Self::NAME,
                msg: "needs gex-rma (attach gex_rma::Rma before it)".into(),
            });
        }
        let cfg = cx.config();
        let decomp = match cfg.get("GEX_OVERLAP_STRIP").map(str::trim) {
            None | Some("") | Some("auto") => Decomp::Auto,
            Some("equal") => Decomp::Equal,
            Some("variable") => Decomp::Variable,
            Some("none") => Decomp::Unsplit,
            Some(v) => match parse_bytes("GEX_OVERLAP_STRIP", v)? {
                0 => return Err(InitError::Config("GEX_OVERLAP_STRIP=0".into())),
                b => Decomp::Bytes(b),
            },
        };
        let min_split = match cfg.get("GEX_OVERLAP_MIN_SPLIT") {
            None | Some("") => 65536,
            Some(v) => parse_bytes("GEX_OVERLAP_MIN_SPLIT", v)?,
        };
        let delta = match cfg.get("GEX_OVERLAP_DELTA").map(str::trim) {
            None | Some("") | Some("auto") => None,
            Some(v) => match parse_bytes("GEX_OVERLAP_DELTA", v)? {
                0 => return Err(InitError::Config("GEX_OVERLAP_DELTA=0".into())),
                b => Some(b),
            },
        };
        let delta_whole = match cfg.get("GEX_OVERLAP_DELTA_WHOLE").map(str::trim) {
            None | Some("") => 50,
            Some(v) => match v.parse::<u32>() {
                Ok(p) if p <= 100 => p,
                _ => {
                    return Err(InitError::Config(format!(
                        "GEX_OVERLAP_DELTA_WHOLE={v}: expected a percentage from 0 to 100"
                    )));
                }
            },
        };
        let sched_mode = match cfg.get("GEX_OVERLAP_SCHED") {
            None => SchedMode::Auto,
            Some(v) => SchedMode::parse(v).ok_or_else(|| {
                InitError::Config(format!(
                    "GEX_OVERLAP_SCHED={v}: expected auto, plain, train or piggyback"
                ))
            })?,
        };
        let train = match cfg.get("GEX_OVERLAP_TRAIN") {
            None | Some("") => 4096,
            Some(v) => parse_bytes("GEX_OVERLAP_TRAIN", v)?,
        };
        let train_put = match cfg.get("GEX_OVERLAP_TRAIN_PUT") {
            None | Some("") => 256,
            Some(v) => parse_bytes("GEX_OVERLAP_TRAIN_PUT", v)?,
        };
        let me = cx.addr();
        let seg = cx
            .peer_segment(me)
            .map(|(p, l)| (p.as_ptr() as usize, l))
            .ok_or_else(|| InitError::Layer {
                layer: Self::NAME,
                msg: "the conduit does not map this endpoint's own segment".into(),
            })?;
        let sched = crate::sched::Sched::new(
            sched_mode,
            train,
            train_put,
            seg,
            (
                cx.handler(crate::sched::H_TRAIN),
                cx.handler(crate::sched::H_ACK),
                cx.handler(crate::sched::H_CARRY),
            ),
        );
        match cfg.get("GEX_OVERLAP_TRACE").map(str::trim) {
            None | Some("") | Some("0") => {}
            Some("1") => sys::set_trace(true),
            Some(v) => {
                return Err(InitError::Config(format!(
                    "GEX_OVERLAP_TRACE={v}: expected 0 or 1"
                )));
            }
        }
        let mover_cpus = cpus::MoverCpus::from_config(cfg.get("GEX_OVERLAP_MOVER_CPUS"))?;
        let cost = match cfg.get("GEX_OVERLAP_PROFILE").map(str::trim) {
            None | Some("") => None,
            Some(path) => crate::profile::OverlapProfile::load(path)
                .map_err(|e| InitError::Config(format!("GEX_OVERLAP_PROFILE={path}: {e}")))?
                .get(cx.conduit_name())
                .copied(),
        };
        Ok(Overlap {
            decomp,
            min_split,
            cost,
            consume: None,
            slow: false,
            watch: None,
            mover: None,
            mover_cpus,
            inflight: Arc::new(AtomicUsize::new(0)),
            delta,
            delta_whole,
            native: Vec::new(),
            sched,
        })
    }

    fn handle(self: Pin<&mut Self>, h: u8, t: &mut Token<'_>, am: Am<'_>) {
        self.sched_handle(h, t, am);
    }

    fn progress<C: Conduit>(self: Pin<&mut Self>, cx: &mut Cx<'_, C>) -> Progress {
        let me = self.get_mut();
        let page = sys::page_size();
        let inflight = &me.inflight;
        me.native.retain(|n| {
            if !cx.native_test(n.ticket) {
                return true;
            }
            retire_strip(&n.shared, n.off, n.len, page);
            inflight.fetch_sub(1, Ordering::AcqRel);
            false
        });
        let sched = me.sched_progress(cx);
        if !me.native.is_empty() {
            Progress::Spinning
        } else {
            sched
        }
    }

    fn describe(&self) -> String {
        let n = self.inflight.load(Ordering::Acquire);
        let m = self.sched_outstanding();
        let mut out = Vec::new();
        if n != 0 {
            out.push(format!("overlap: {n} demand-driven transfers in flight"));
        }
        if m != 0 {
            out.push(format!("overlap: {m} trains or signals not acknowledged"));
        }
        out.join("\n")
    }
}

/// The cost model's parameters for this process: measured once, at the first
/// demand-driven transfer (about a millisecond).
pub fn params() -> &'static CostParams {
    static P: OnceLock<CostParams> = OnceLock::new();
    P.get_or_init(measure)
}

/// Measures `m`, `f` and the copy's `G` in this process (`o` and the round trip:
/// constants).
pub(crate) fn measure() -> CostParams {
    let page = sys::page_size();
    const PAGES: usize = 16;
    let fallback = CostParams {
        overhead_ns: 5000.0,
        gap_ns_per_byte: 0.1,
        round_trip_ns: 5000.0,
        fault_ns: 2000.0,
        mprotect_ns: 1000.0,
    };
    let Ok(mut b) = OverlapBuf::new(PAGES * page) else {
        return fallback;
    };
    // mprotect: one page, both ways; the median call (a shared machine's outliers
    // left out).
    let mut calls = [0u64; 2 * PAGES];
    for i in 0..PAGES {
        for (k, prot) in [Prot::Read, Prot::ReadWrite].into_iter().enumerate() {
            let t0 = sys::now_ns();
            let _ = b.shared.protect(i * page, page, prot);
            calls[2 * i + k] = sys::now_ns().wrapping_sub(t0);
        }
    }
    calls.sort_unstable();
    let mprotect_ns = calls[PAGES] as f64;
    // A fault: the handler unprotects calibration pages itself (one mprotect each);
    // the median fault, less one mprotect.
    let _ = b.shared.region.table.claim(0, PAGES, table::CALIBRATE);
    let _ = b.shared.protect(0, PAGES * page, Prot::None);
    let mut faults = [0u64; PAGES];
    let mut sum = 0u64;
    for (i, f) in faults.iter_mut().enumerate() {
        let t0 = sys::now_ns();
        sum += u64::from(std::hint::black_box(&mut b[..])[i * page]);
        *f = sys::now_ns().wrapping_sub(t0);
    }
    std::hint::black_box(sum);
    faults.sort_unstable();
    let fault_ns = (faults[PAGES / 2] as f64 - mprotect_ns).max(0.0);
    // G: copies of 1 MiB (larger than most L2 caches) between two buffers' views, the
    // second copy timed (the first faults the pages in).
    let len = 1 << 20;
    let gap = match (OverlapBuf::new(len), OverlapBuf::new(len)) {
        (Ok(x), Ok(y)) => {
            let mut t = 0;
            for _ in 0..2 {
                let t0 = sys::now_ns();
                // SAFETY: both views are mapped for `len` bytes, and nothing else
                // touches these two new buffers.
                unsafe { gex_sync::copy::atomic_copy(x.xfer(), y.xfer(), len) };
                t = sys::now_ns().wrapping_sub(t0);
            }
            t as f64 / len as f64
        }
        _ => fallback.gap_ns_per_byte,
    };
    CostParams {
        // Handing a job to the mover and waking it.
        overhead_ns: fallback.overhead_ns,
        gap_ns_per_byte: gap.max(0.01),
        round_trip_ns: fallback.round_trip_ns,
        fault_ns,
        mprotect_ns,
    }
}

/// What a demand-driven transfer was split into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Issued {
    /// Number of strips.
    pub strips: usize,
    /// Bytes of the first strip (equal strips: of every strip but the last, which may
    /// be shorter).
    pub strip_len: usize,
    /// Whether the strips grow (variable strips: [`Decomp::Variable`], or the model's
    /// choice under [`Decomp::Auto`], or [`Decomp::Sizes`] with different lengths).
    pub variable: bool,
    /// Whether pages were protected (false: done during the call, below the
    /// threshold or on the fallback path).
    pub demand: bool,
}

/// One page fault the handler waited for (`GEX_OVERLAP_TRACE=1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageFault {
    /// The page's address (user view).
    pub addr: usize,
    /// How long the faulting thread waited for its strip.
    pub waited: Duration,
}

/// Takes the page-fault trace recorded so far in this process (and the number of
/// records that did not fit), empty unless `GEX_OVERLAP_TRACE=1`.
pub fn overlap_trace() -> (Vec<PageFault>, usize) {
    let (v, lost) = sys::take_trace();
    let v = v
        .into_iter()
        .map(|(addr, w)| PageFault {
            addr,
            waited: Duration::from_nanos(w),
        })
        .collect();
    (v, lost)
}

/// Whether the trace is on (`GEX_OVERLAP_TRACE=1` at attach).
pub fn trace_enabled() -> bool {
    sys::trace_on()
}

/// Page faults the handler has waited for in this process so far.
pub fn fault_count() -> u64 {
    sys::FAULTS.load(Ordering::Relaxed)
}

pub(crate) fn range_err(e: RangeError, offset: usize, len: usize, buf_len: usize) -> OverlapError {
    match e {
        RangeError::Unaligned => OverlapError::Unaligned {
            offset,
            page: sys::page_size(),
        },
        RangeError::OutOfBuffer => OverlapError::OutOfBuffer {
            offset,
            len,
            buf_len,
        },
    }
}
