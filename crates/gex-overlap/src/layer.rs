//! The overlap layer's state, its mover thread, and the extension trait.
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
        doc: "gex-overlap: how scheduled puts (`SchedExt::sched_put`) travel: `auto` (per destination, from statistics), `plain` (each an NBI put), `train` (small puts coalesced, sent on the next poll) or `piggyback` (small puts wait for the next signal).",
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
            let thread = std::thread::Builder::new()
                .name("gex-overlap-mover".into())
                .spawn(move || mover(rx, inflight))
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

fn mover(rx: Receiver<Task>, inflight: Arc<AtomicUsize>) {
    use std::sync::mpsc::TryRecvError;
    let mut watches: Vec<Watch> = Vec::new();
    let mut idle = 0u32;
    loop {
        let task = if watches.is_empty() {
            match rx.recv() {
                Ok(t) => Some(t),
                Err(_) => break,
            }
        } else {
            match rx.try_recv() {
                Ok(t) => Some(t),
                Err(TryRecvError::Empty) => None,
                // The layer is dropping: receives still posted never complete (their
                // memory stays alive through the `Arc`s dropped here only if unused).
                Err(TryRecvError::Disconnected) => break,
            }
        };
        let got = task.is_some();
        match task {
            Some(Task::Job(job)) => {
                if job.pieces.is_empty() {
                    run(&job);
                } else {
                    run_delta(&job);
                }
                let done = job.done.clone();
                drop(job);
                if let Some(d) = done {
                    d.fetch_sub(1, Ordering::AcqRel);
                }
                inflight.fetch_sub(1, Ordering::AcqRel);
            }
            Some(Task::Watch(w)) => watches.push(w),
            None => {}
        }
        let mut moved = false;
        watches.retain_mut(|w| {
            let (progress, finished) = poll_watch(w);
            moved |= progress;
            if finished {
                w.done.fetch_sub(1, Ordering::AcqRel);
                inflight.fetch_sub(1, Ordering::AcqRel);
            }
            !finished
        });
        if got || moved {
            idle = 0;
        } else {
            // Nothing arrived: spin, then yield, then sleep 20 µs at a time.
            idle = idle.saturating_add(1);
            if idle < 64 {
                std::hint::spin_loop();
            } else if idle < 256 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(20));
            }
        }
    }
}

/// Retires the pages of a posted receive that have arrived; at the epoch's end (the
/// sender's end word) the rest too, copied from the shadow, which holds the last
/// bytes of every page. Returns (whether a page retired, whether the receive is done).
fn poll_watch(w: &mut Watch) -> (bool, bool) {
    let page = sys::page_size();
    let xfer = w.shared.map.xfer() as usize;
    let copy_page = |p: usize| {
        let off = p * page;
        let n = page.min(w.len - off);
        // SAFETY: the shadow page lies in this process's own segment (the window was
        // checked against its length when the receive was made; mapped while the
        // endpoint lives, which joins this thread first), the destination in the
        // transfer view of a page this receive claimed (no access through the user
        // view until it retires). Byte-wise atomic (the sender's mover may write other
        // pages of the shadow meanwhile; this page it finished before its arrival
        // word said so).
        unsafe {
            gex_sync::copy::atomic_copy((w.shadow + off) as *const u8, (xfer + off) as *mut u8, n)
        };
    };
    // Pages ready in this pass retire in runs (one `mprotect` per run).
    let mut run: Option<(usize, usize)> = None;
    let flush = |run: &mut Option<(usize, usize)>| {
        if let Some((first, end)) = run.take() {
            let off = first * page;
            retire_strip(&w.shared, off, (end * page).min(w.len) - off, page);
        }
    };
    // The end word first: once it holds the epoch (`Acquire`), every arrival word of
    // the epoch is visible (the sender stores them before it, `Release`), so a page
    // whose word does not hold the epoch was not sent in it.
    // SAFETY: a word of the window's control block, in this process's own segment
    // (checked at `delta_recv_window`), accessed only through `gex_sync::word`.
    let end = unsafe { gex_sync::word::load32(w.ctl as *const u8, Ordering::Acquire) };
    let ended = end == w.epoch;
    let mut moved = false;
    for p in 0..w.left.len() {
        if !w.left[p] {
            flush(&mut run);
            continue;
        }
        // SAFETY: as above.
        let a = unsafe {
            gex_sync::word::load32(
                (w.arrivals + arrival_word(p)) as *const u8,
                Ordering::Acquire,
            )
        };
        if a == w.epoch || (ended && w.copy_rest) {
            copy_page(p);
        } else if !ended {
            flush(&mut run);
            continue;
        }
        // Else not sent in this epoch: unchanged, and the receive buffer holds the
        // shadow's bytes already (the program did not write it since).
        run = match run {
            Some((first, e)) if e == p => Some((first, p + 1)),
            other => {
                let mut other = other;
                flush(&mut other);
                Some((p, p + 1))
            }
        };
        w.left[p] = false;
        moved = true;
    }
    flush(&mut run);
    if !ended {
        return (moved, false);
    }
    // SAFETY: as above.
    unsafe {
        gex_sync::word::store32(
            (w.ctl + CONSUMED_WORD) as *mut u8,
            w.epoch,
            Ordering::Release,
        )
    };
    (true, true)
}

/// Moves one job strip by strip, the strip a faulting thread waits for first.
fn run(j: &Job) {
    let page = sys::page_size();
    let region = &j.shared.region;
    let n = j.plan.count();
    let first_page = j.off / page;
    let mut done = vec![false; n];
    let mut next = 0;
    for _ in 0..n {
        let w = region.wanted.swap(usize::MAX, Ordering::AcqRel);
        let mut pick = None;
        if w != usize::MAX && w >= first_page && (w - first_page) * page < j.len {
            let i = j.plan.index_of((w - first_page) * page);
            if !done[i] {
                pick = Some(i);
            }
        }
        let i = pick.unwrap_or_else(|| {
            while done[next] {
                next += 1;
            }
            next
        });
        done[i] = true;
        let (rel, s_len) = j.plan.strip(i);
        let s_off = j.off + rel;
        let remote = j.remote + rel;
        let local = j.shared.map.xfer() as usize + s_off;
        // SAFETY: `remote..+s_len` lies in a peer's segment, mapped while the endpoint
        // lives (checked against its length at issue; the endpoint drops its layers,
        // which join this thread, before its conduit endpoint); `local..+s_len` lies in
        // the transfer view, kept mapped by `j.shared`, and its pages are claimed by
        // this job (nobody else writes them, the user view cannot access them). Both
        // sides are copied byte-wise atomically (the peer may access its segment).
        unsafe {
            match j.dir {
                Dir::Get => {
                    gex_sync::copy::atomic_copy(remote as *const u8, local as *mut u8, s_len)
                }
                Dir::Put => {
                    gex_sync::copy::atomic_copy(local as *const u8, remote as *mut u8, s_len)
                }
            }
        }
        if j.lazy {
            sys::lazy_retire(region, s_off / page, s_len.div_ceil(page));
        } else {
            retire_strip(&j.shared, s_off, s_len, page);
        }
    }
    if j.lazy {
        sys::lazy_settle(region);
    }
}

/// Stores the message's length, then `epoch` in the end word, of the receive window
/// whose header is at `ctl` (a delta send's epoch is complete).
pub(crate) fn store_end(ctl: usize, epoch: u32, msg_len: usize) {
    // SAFETY: `ctl` is the page-aligned header of a receive window in a peer's segment
    // mapped in this process (checked when the epoch opened, against the window's
    // whole length; mapped while the endpoint lives, and the caller holds it); its
    // words are accessed only through `gex_sync::word`.
    unsafe {
        gex_sync::word::store64(
            (ctl + MSG_LEN_WORD) as *mut u8,
            msg_len as u64,
            Ordering::Relaxed,
        );
        gex_sync::word::store32(ctl as *mut u8, epoch, Ordering::Release);
    }
}

/// Copies the pieces of a delta send on the calling thread, which holds the buffer's
/// `&mut` (so nobody reads or writes it meanwhile: nothing is claimed), stores the
/// arrival words of a receive window, and moves the pages to `after` (read-only when
/// it is not [`table::READY`]). `base`: the target address of the buffer's byte 0.
pub(crate) fn copy_inline(
    shared: &Shared,
    base: usize,
    pieces: &[(usize, usize)],
    off: usize,
    len: usize,
    after: u32,
    notify: Option<(usize, u32)>,
) -> std::io::Result<()> {
    let page = sys::page_size();
    for &(o, l) in pieces {
        // SAFETY: the remote range lies in the target's mapped segment (the buffer's
        // whole image was checked at `delta_begin`/`delta_send_begin`); the local one
        // in the transfer view, which `shared` keeps mapped, of a buffer whose `&mut`
        // the caller holds and with no send in flight: nobody writes these bytes.
        unsafe {
            gex_sync::copy::atomic_copy(
                (shared.map.xfer() as usize + o) as *const u8,
                (base + o) as *mut u8,
                l,
            )
        };
    }
    if let Some((ctl, epoch)) = notify {
        for p in off / page..(off + len).div_ceil(page) {
            // SAFETY: as in `run_delta`: a word of the window's control block.
            unsafe {
                gex_sync::word::store32(
                    (ctl + arrival_word(p)) as *mut u8,
                    epoch,
                    Ordering::Release,
                )
            };
        }
    }
    if after != table::READY {
        shared.protect(off, len, Prot::Read)?;
        shared
            .region
            .table
            .set(off / page, len.div_ceil(page), after);
    }
    Ok(())
}

/// Copies a delta send's pieces to the target, then moves its pages to their state
/// after the send.
fn run_delta(j: &Job) {
    let page = sys::page_size();
    debug_assert_eq!(j.dir, Dir::Put);
    for &(off, len) in &j.pieces {
        let remote = j.remote + (off - j.off);
        let local = j.shared.map.xfer() as usize + off;
        // SAFETY: as in `run`: the remote range lies in the target's mapped segment
        // (the whole buffer's image was checked against its length when the epoch
        // opened), the local one in pages of the transfer view this job claimed
        // (read-only in the user view: nobody writes them); byte-wise atomic copy.
        unsafe { gex_sync::copy::atomic_copy(local as *const u8, remote as *mut u8, len) };
    }
    if let Some((ctl, epoch)) = j.notify {
        for p in j.off / page..(j.off + j.len).div_ceil(page) {
            // SAFETY: `ctl` is the control block of a receive window in the target's
            // mapped segment, sized for every page of the buffer (checked when the
            // epoch opened); a 4-aligned word accessed only through `gex_sync::word`.
            unsafe {
                gex_sync::word::store32(
                    (ctl + arrival_word(p)) as *mut u8,
                    epoch,
                    Ordering::Release,
                )
            };
        }
    }
    finish_delta(&j.shared, j.off, j.len, page, j.after);
}

/// Moves the pages of `[off, off+len)` of a delta send to `after`: unprotected first
/// when it is [`table::READY`]; [`table::CLEAN`] and [`table::SENT`] stay read-only.
pub(crate) fn finish_delta(shared: &Shared, off: usize, len: usize, page: usize, after: u32) {
    if after == table::READY {
        retire_strip(shared, off, len, page);
    } else {
        shared
            .region
            .table
            .set(off / page, len.div_ceil(page), after);
    }
}

/// Unprotects a strip's pages, then marks them retired.
pub(crate) fn retire_strip(shared: &Shared, off: usize, len: usize, page: usize) {
    if let Err(e) = shared.protect(off, len, Prot::ReadWrite) {
        // A page left protected and pending would make its readers wait forever.
        eprintln!("gex-overlap: mprotect failed: {e}");
        std::process::abort();
    }
    shared.region.table.retire(off / page, len.div_ceil(page));
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

/// The operations of gex-overlap on an endpoint.
pub trait OverlapExt {
    /// Starts a get of `len` bytes at `src` into `buf[offset..offset+len]` and returns
    /// at once. The destination's pages are protected: the first access to one waits
    /// for the strip holding it only. `offset` must be page-aligned.
    ///
    /// To a peer whose segment this process maps (smp, and the ranks of this host in a
    /// hybrid ofi job) the strips are moved by the layer's mover thread. Otherwise the
    /// get is done during the call (gex-rma, blocking) and nothing stays pending.
    ///
    /// # Errors
    /// [`OverlapError::Unaligned`], [`OverlapError::OutOfBuffer`],
    /// [`OverlapError::OutOfSegment`], [`OverlapError::Overlapping`] (a page of the
    /// range is still pending), [`OverlapError::NotAttached`], [`OverlapError::Os`],
    /// [`OverlapError::Rma`] (fallback path).
    fn get_demand(
        &mut self,
        buf: &mut OverlapBuf,
        offset: usize,
        src: GlobalPtr<u8>,
        len: usize,
    ) -> Result<Issued, OverlapError>;

    /// [`get_demand`](Self::get_demand) with **lazy protection** (seed 000): of the
    /// destination's pages only two are protected, the first page of the lowest strip
    /// not landed (the *guard*, which a reader going up the range reaches next) and
    /// the first page of the next strip not landed (the *tripwire*). A fault on the
    /// guard waits for its strip, then moves both on; strips that land before the
    /// reader gets there cost no `mprotect` at all (eager protection: one per strip).
    /// A fault on the tripwire (a jump ahead) falls back to protecting every pending
    /// page, as `get_demand` ([`OverlapBuf::stats`] counts the fallbacks and the
    /// calls saved). A second lazy get into a buffer whose first is pending is
    /// protected eagerly; to a peer whose segment is not mapped here the transfer is
    /// as `get_demand`'s.
    ///
    /// # Safety
    /// Until the range has retired ([`wait_range`](Self::wait_range) of it returned,
    /// or [`retire_all`](Self::retire_all)), every thread accesses the range's pages
    /// **in ascending order from its first page, without skipping one**: a thread
    /// accesses a page only after it accessed every page of the range before it
    /// (accessing again a page it has accessed is fine). The pages of a strip not
    /// landed are accessible except their first: a jump past the guard that misses
    /// the tripwire reads bytes that change afterwards under the program's `&[u8]`
    /// (undefined behaviour). A system call given the range also waits for it first
    /// (`wait_range`), as with `get_demand`.
    ///
    /// # Errors
    /// As [`get_demand`](Self::get_demand).
    unsafe fn get_lazy(
        &mut self,
        buf: &mut OverlapBuf,
        offset: usize,
        src: GlobalPtr<u8>,
        len: usize,
    ) -> Result<Issued, OverlapError>;

    /// Starts a put of `buf[offset..offset+len]` to `dst` and returns at once. The
    /// source's pages are read-only until their strip has left: a write to one waits
    /// for that strip only. Complete at the target after
    /// [`retire_all`](Self::retire_all) (or [`wait_range`](Self::wait_range) of the range).
    ///
    /// # Errors
    /// As [`get_demand`](Self::get_demand).
    fn put_demand(
        &mut self,
        dst: GlobalPtr<u8>,
        buf: &OverlapBuf,
        offset: usize,
        len: usize,
    ) -> Result<Issued, OverlapError>;

    /// Waits until no page holding `buf[offset..offset+len]` is pending: call it before
    /// handing the range to a system call (which gets `EFAULT` on a pending page).
    ///
    /// # Errors
    /// [`OverlapError::OutOfBuffer`].
    fn wait_range(
        &mut self,
        buf: &OverlapBuf,
        offset: usize,
        len: usize,
    ) -> Result<(), OverlapError>;

    /// Waits until every demand-driven transfer this endpoint started is complete
    /// (puts at their targets), and every scheduled put and signal
    /// ([`SchedExt::sched_flush`](crate::SchedExt::sched_flush)): call it at
    /// synchronisation points (before a barrier that publishes a put, before `fork`).
    ///
    /// # Errors
    /// [`OverlapError::NotAttached`]; as `sched_flush`.
    fn retire_all(&mut self) -> Result<(), OverlapError>;

    /// Sets how later transfers are split (overrides the model and
    /// `GEX_OVERLAP_STRIP`); `min_split` is the threshold of [`Decomp::Auto`].
    ///
    /// # Errors
    /// [`OverlapError::NotAttached`].
    fn set_decomp(&mut self, d: Decomp, min_split: usize) -> Result<(), OverlapError>;

    /// The length of the first strip a transfer of `len` bytes would get now.
    ///
    /// # Errors
    /// [`OverlapError::NotAttached`].
    fn strip_for(&mut self, len: usize) -> Result<usize, OverlapError>;

    /// The strips a transfer of `len` bytes would get now.
    ///
    /// # Errors
    /// [`OverlapError::NotAttached`].
    fn plan_for(&mut self, len: usize) -> Result<StripPlan, OverlapError>;

    /// Tells the strip model how long the program works on each byte of the data of
    /// a get after it arrives (ns per byte; seed 000's `C(size)/size`), or forgets it
    /// (`None`: the layer's statistics decide, [`model::slower_than_data`]). With a
    /// consumer slower than the data the model may choose variable strips ([`model`]).
    ///
    /// # Errors
    /// [`OverlapError::NotAttached`].
    fn set_consume_cost(&mut self, ns_per_byte: Option<f64>) -> Result<(), OverlapError>;
}

pub(crate) fn with<C: Conduit, R>(
    ep: &mut Endpoint<C>,
    f: impl FnOnce(&mut Overlap, &mut Cx<'_, C>) -> R,
) -> Result<R, OverlapError> {
    layer::with::<Overlap, C, R>(ep, |l, cx| f(l.get_mut(), cx)).ok_or(OverlapError::NotAttached)
}

impl<C: Conduit> OverlapExt for Endpoint<C> {
    fn get_demand(
        &mut self,
        buf: &mut OverlapBuf,
        offset: usize,
        src: GlobalPtr<u8>,
        len: usize,
    ) -> Result<Issued, OverlapError> {
        transfer(self, Dir::Get, buf, offset, src, len, false)
    }

    unsafe fn get_lazy(
        &mut self,
        buf: &mut OverlapBuf,
        offset: usize,
        src: GlobalPtr<u8>,
        len: usize,
    ) -> Result<Issued, OverlapError> {
        transfer(self, Dir::Get, buf, offset, src, len, true)
    }

    fn put_demand(
        &mut self,
        dst: GlobalPtr<u8>,
        buf: &OverlapBuf,
        offset: usize,
        len: usize,
    ) -> Result<Issued, OverlapError> {
        transfer(self, Dir::Put, buf, offset, dst, len, false)
    }

    fn wait_range(
        &mut self,
        buf: &OverlapBuf,
        offset: usize,
        len: usize,
    ) -> Result<(), OverlapError> {
        let mut spins = 0u32;
        while buf.is_pending(offset, len)? {
            backoff(self, &mut spins);
        }
        // A lazy transfer that has landed: its guard and tripwire unprotected now
        // (not only when the mover gets there), so that a system call may follow.
        sys::lazy_settle(&buf.shared.region);
        Ok(())
    }

    fn retire_all(&mut self) -> Result<(), OverlapError> {
        self.sched_flush()?;
        let inflight = with(self, |l, _| l.inflight.clone())?;
        let mut spins = 0u32;
        while inflight.load(Ordering::Acquire) != 0 {
            backoff(self, &mut spins);
        }
        Ok(())
    }

    fn set_decomp(&mut self, d: Decomp, min_split: usize) -> Result<(), OverlapError> {
        with(self, |l, _| {
            l.decomp = d;
            l.min_split = min_split;
        })
    }

    fn strip_for(&mut self, len: usize) -> Result<usize, OverlapError> {
        with(self, |l, _| {
            let p = l.plan_for(len);
            if p.count() == 0 {
                len.max(sys::page_size())
            } else {
                p.strip(0).1
            }
        })
    }

    fn plan_for(&mut self, len: usize) -> Result<StripPlan, OverlapError> {
        with(self, |l, _| l.plan_for(len))
    }

    fn set_consume_cost(&mut self, ns_per_byte: Option<f64>) -> Result<(), OverlapError> {
        with(self, |l, _| {
            l.consume = ns_per_byte.filter(|c| c.is_finite() && *c >= 0.0);
        })
    }
}

pub(crate) fn backoff<C: Conduit>(ep: &mut Endpoint<C>, spins: &mut u32) {
    layer::poll(ep);
    if *spins < 64 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
    *spins = spins.saturating_add(1);
}

fn transfer<C: Conduit>(
    ep: &mut Endpoint<C>,
    dir: Dir,
    buf: &OverlapBuf,
    offset: usize,
    remote: GlobalPtr<u8>,
    len: usize,
    lazy: bool,
) -> Result<Issued, OverlapError> {
    let page = sys::page_size();
    let (first, n) = table::pages_of(offset, len, buf.len_bytes(), page, true)
        .map_err(|e| range_err(e, offset, len, buf.len_bytes()))?;
    let threaded = ep.has_progress_thread();
    let (peer, plan, now, native) = with(ep, |l, cx| {
        if dir == Dir::Get {
            l.learn();
        }
        let now = l.decomp == Decomp::Auto && len < l.min_split;
        let native = threaded && cx.capabilities().contains(Capabilities::NATIVE_RMA);
        (cx.peer_segment(remote.addr()), l.plan_for(len), now, native)
    })?;
    let done = Issued {
        strips: usize::from(len > 0),
        strip_len: len,
        variable: false,
        demand: false,
    };
    let region = &buf.shared.region;
    if peer.is_none() && native && !now && len > 0 {
        if let Some(issued) = native_transfer(ep, dir, buf, offset, remote, len, &plan)? {
            return Ok(issued);
        }
    }
    let Some((base, seg_len)) = peer else {
        // Fallback: gex-rma, blocking, through the transfer view of claimed pages.
        region
            .table
            .claim(first, n, PENDING)
            .map_err(|page| OverlapError::Overlapping { page })?;
        // SAFETY: the pages holding `offset..offset+len` are claimed by this call
        // (nobody else reads or writes them through the transfer view) and lie in the
        // mapping, which `buf` keeps alive for the call; the user view of them is not
        // written meanwhile (a get holds `&mut OverlapBuf`; a put only reads).
        let view = unsafe { std::slice::from_raw_parts_mut(buf.xfer().add(offset), len) };
        let r = match dir {
            Dir::Get => ep.get(&mut *view, remote, Blocking).map(|_| ()),
            Dir::Put => ep.put(remote, &*view, Blocking),
        };
        region.table.retire(first, n);
        r?;
        return Ok(done);
    };
    let end = remote.offset.checked_add(len);
    if end.is_none_or(|e| e > seg_len) {
        return Err(OverlapError::OutOfSegment {
            offset: remote.offset,
            len,
            seg_len,
        });
    }
    if len == 0 {
        return Ok(done);
    }
    region
        .table
        .claim(first, n, PENDING)
        .map_err(|page| OverlapError::Overlapping { page })?;
    region.generation.fetch_add(1, Ordering::AcqRel);
    let remote_addr = base.as_ptr() as usize + remote.offset;
    if now {
        // Below the threshold: copy now, protect nothing.
        let local = buf.xfer() as usize + offset;
        // SAFETY: as the mover's copy: the remote range lies in the peer's mapped
        // segment (checked above), the local one in the claimed pages of the transfer
        // view; byte-wise atomic on both sides.
        unsafe {
            match dir {
                Dir::Get => {
                    gex_sync::copy::atomic_copy(remote_addr as *const u8, local as *mut u8, len)
                }
                Dir::Put => {
                    gex_sync::copy::atomic_copy(local as *const u8, remote_addr as *mut u8, len)
                }
            }
        }
        region.table.retire(first, n);
        return Ok(done);
    }
    let prot = match dir {
        Dir::Get => Prot::None,
        Dir::Put => Prot::Read,
    };
    let lazy = lazy
        && dir == Dir::Get
        && sys::lazy_begin(
            region,
            first,
            n,
            plan.iter().map(|(o, _)| first + o / page),
            plan.count(),
        );
    if !lazy {
        if let Err(e) = buf.shared.protect(offset, len, prot) {
            region.table.retire(first, n);
            return Err(OverlapError::Os(e));
        }
    }
    let job = Job {
        shared: buf.shared.clone(),
        dir,
        remote: remote_addr,
        off: offset,
        len,
        plan: plan.clone(),
        lazy,
        pieces: Vec::new(),
        after: table::READY,
        done: None,
        notify: None,
    };
    let sent = with(ep, |l, _| {
        if dir == Dir::Get && plan.count() >= 4 {
            let waits = buf.shared.region.waits.load(Ordering::Relaxed);
            l.watch = Some((Arc::downgrade(&buf.shared), waits, plan.count()));
        }
        let inflight = l.inflight.clone();
        let tx = l.sender()?;
        inflight.fetch_add(1, Ordering::AcqRel);
        tx.send(Task::Job(job)).map_err(|_| {
            inflight.fetch_sub(1, Ordering::AcqRel);
            OverlapError::MoverGone
        })
    })?;
    if let Err(e) = sent {
        // Nothing will move the strips: unprotect and release them.
        let _ = buf.shared.protect(offset, len, Prot::ReadWrite);
        region.table.retire(first, n);
        sys::lazy_settle(region);
        return Err(e);
    }
    Ok(issued(&plan))
}

/// A demand-driven transfer to a peer whose segment is not mapped here, through the
/// conduit's native RMA, when the endpoint has a progress thread (which runs the
/// progress hook that retires the strips: the fault handler only waits). `None`: the
/// conduit does not offer it for this peer (nothing claimed; the caller falls back).
fn native_transfer<C: Conduit>(
    ep: &mut Endpoint<C>,
    dir: Dir,
    buf: &OverlapBuf,
    offset: usize,
    remote: GlobalPtr<u8>,
    len: usize,
    plan: &StripPlan,
) -> Result<Option<Issued>, OverlapError> {
    let page = sys::page_size();
    let target = remote.addr();
    let (open, seg_len) = with(ep, |_, cx| {
        let open = remote.rank < cx.size()
            && cx
                .endpoint_capacity(remote.rank)
                .is_some_and(|cap| remote.ep < cap)
            && cx.peer_open(target).is_ok();
        (open, cx.layout().seg_len.get(remote.rank as usize).copied())
    })?;
    if !open {
        // gex-rma's path names the error (a rank or endpoint that does not exist).
        return Ok(None);
    }
    match (seg_len, remote.offset.checked_add(len)) {
        (Some(s), Some(e)) if e <= s => {}
        (s, _) => {
            return Err(OverlapError::OutOfSegment {
                offset: remote.offset,
                len,
                seg_len: s.unwrap_or(0),
            });
        }
    }
    let (first, n) = table::pages_of(offset, len, buf.len_bytes(), page, true)
        .map_err(|e| range_err(e, offset, len, buf.len_bytes()))?;
    let region = &buf.shared.region;
    region
        .table
        .claim(first, n, PENDING)
        .map_err(|page| OverlapError::Overlapping { page })?;
    region.generation.fetch_add(1, Ordering::AcqRel);
    let prot = match dir {
        Dir::Get => Prot::None,
        Dir::Put => Prot::Read,
    };
    if let Err(e) = buf.shared.protect(offset, len, prot) {
        region.table.retire(first, n);
        return Err(OverlapError::Os(e));
    }
    let strips = plan.count();
    let mut retry = layer::Retry::default();
    let mut i = 0;
    while i < strips {
        let (rel, s_len) = plan.strip(i);
        let s_off = offset + rel;
        let local = buf.xfer() as usize + s_off;
        let shared = &buf.shared;
        let range = SegRange::new(remote.addr(), remote.offset + rel, s_len);
        let started = with(ep, |l, cx| {
            // SAFETY: the strip's pages are claimed by this transfer and protected in the
            // user view (no access for a get, read-only for a put), so nobody else reads
            // or writes them through the transfer view and nobody modifies them until
            // the progress hook retires them after `native_test`; the mapping stays
            // alive while the strip's `Arc<Shared>` is held, and is leaked if the layer
            // drops first. The remote range lies in the target's segment (checked above
            // against the job layout's segment length).
            let r = unsafe {
                match dir {
                    Dir::Get => cx.native_get(range, local as *mut u8),
                    Dir::Put => cx.native_put(range, local as *const u8),
                }
            };
            match r {
                Ok(Native::Pending(ticket)) => {
                    l.inflight.fetch_add(1, Ordering::AcqRel);
                    l.native.push(NativeStrip {
                        shared: shared.clone(),
                        ticket,
                        off: s_off,
                        len: s_len,
                    });
                    cx.set_busy();
                    Ok(Some(true))
                }
                Ok(Native::Done) => {
                    retire_strip(shared, s_off, s_len, page);
                    Ok(Some(true))
                }
                Ok(Native::WouldBlock) => Ok(Some(false)),
                Ok(Native::Unsupported) => Ok(None),
                Err(e) => Err(e),
            }
        })?;
        match started {
            Ok(Some(true)) => i += 1,
            Ok(Some(false)) => layer::retry(ep, &mut retry),
            Ok(None) if i == 0 => {
                // Not offered for this peer: release everything, the caller falls back.
                let _ = buf.shared.protect(offset, len, Prot::ReadWrite);
                region.table.retire(first, n);
                return Ok(None);
            }
            Ok(None) | Err(_) => {
                // Strips from `i` on were never started: release them; the ones
                // started retire as they complete.
                let rest = offset + plan.strip(i).0;
                retire_strip(&buf.shared, rest, offset + len - rest, page);
                return Err(match started {
                    Err(e) => OverlapError::Conduit(e),
                    _ => OverlapError::Conduit(ConduitError::Contract(
                        "native RMA refused a strip after accepting the first".into(),
                    )),
                });
            }
        }
    }
    Ok(Some(issued(plan)))
}

/// What a demand-driven transfer in strips `plan` reports.
fn issued(plan: &StripPlan) -> Issued {
    Issued {
        strips: plan.count(),
        strip_len: plan.iter().next().map_or(0, |s| s.1),
        variable: !plan.is_equal(),
        demand: true,
    }
}
