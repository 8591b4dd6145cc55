//! Delta transfers (seed 001, delta send-recv): a buffer whose transfers to a
//! destination carry only what changed since the last transfer there, sent in
//! increments as the program produces them, with the program's writes watched either
//! by the operating system (write protection) or by the program's own marks.
//!
//! This module: the buffers ([`DeltaBuf`], [`DeltaRecv`]) and their vocabulary;
//! `ext`: the [`DeltaExt`] operations; `send`: the sends of an epoch.
#![allow(unsafe_code)]

use gex_sync::atomic::{AtomicUsize, Ordering};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use gex_core::Endpoint;
use gex_core::spi::Conduit;
use gex_core::{Blocking, Event, Nb};
use gex_rma::{GlobalPtr, RmaError, RmaExt};

use crate::buf::OverlapBuf;
use crate::error::OverlapError;
use crate::layer::{self, Dir, Job, Task, Watch, backoff, with};
use crate::model::{self, Decomp};
use crate::ranges::RangeSet;
use crate::sys::{self, Prot};
use crate::table::{self, CLEAN, READY, SENT};

mod ext;
mod send;

pub use ext::*;
use send::arrivals_offset;

/// How a [`DeltaBuf`] learns which bytes the program changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tracking {
    /// The program marks the ranges it wrote ([`DeltaBuf::mark`],
    /// [`DeltaExt::delta_mark`]); byte-exact, no page faults. A write not marked is
    /// not sent (the destination keeps its old bytes there).
    Annotated,
    /// The operating system: after a transfer the buffer is read-only, the first
    /// write to a page faults and the fault handler marks the page changed and makes
    /// it writable again (one fault per page per transfer). Page-granular.
    OsTriggered,
}

/// What a delta send carried (the sends of one epoch: its flushes and its end).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeltaStats {
    /// Bytes copied to the destination.
    pub bytes: usize,
    /// Contiguous byte runs copied.
    pub runs: usize,
    /// Sends (each a group of pages moved as one, at most the delta size).
    pub sends: usize,
    /// Whether the end sent the whole rest of the buffer (the first transfer to a
    /// destination, or most of the buffer changed: `GEX_OVERLAP_DELTA_WHOLE`).
    pub whole: bool,
}

/// The open epoch of a [`DeltaBuf`] (between [`DeltaExt::delta_begin`] and
/// [`DeltaExt::delta_end`]).
#[derive(Debug)]
struct Epoch {
    dst: GlobalPtr<u8>,
    /// The address of the destination's first byte in this process (its segment is
    /// mapped here), or `None`: sent through gex-rma during the calls.
    remote: Option<usize>,
    /// The first transfer to this destination: everything is sent.
    full: bool,
    /// Flush threshold and send size (bytes, whole pages).
    delta: usize,
    /// Send the whole rest when at least this percentage of the buffer changed.
    whole_pct: u32,
    stats: DeltaStats,
    /// The first misuse seen (a byte offset), reported by `delta_end`.
    misuse: Option<usize>,
    /// A send to a receive window: its header's and its first arrival word's
    /// addresses here, and the epoch.
    window: Option<(usize, usize, u32)>,
    /// A send to a receive window in a segment not mapped here: its header's and its
    /// first arrival word's offsets in the destination's segment, and the epoch (the
    /// shadow, the arrival words and the end word written through gex-rma).
    rwindow: Option<(usize, usize, u32)>,
}

/// Where a [`DeltaBuf`] was last transferred (the destination that holds its copy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dest {
    /// A region of a segment: rank, endpoint, offset.
    Seg(u32, u16, usize),
    /// Messages on (communicator id, destination rank, tag).
    #[cfg_attr(not(feature = "msg"), allow(dead_code))]
    Msg(u32, u32, u32),
}

/// A buffer for delta transfers: an [`OverlapBuf`](crate::OverlapBuf)'s memory (two
/// views of one memory file, page-aligned, zero-filled at creation) plus the record of
/// what changed since its last transfer. It dereferences to `[u8]`.
///
/// A transfer of it ([`DeltaExt::delta_put`], or an epoch
/// [`delta_begin`](DeltaExt::delta_begin) … [`delta_end`](DeltaExt::delta_end) …
/// [`delta_wait`](DeltaExt::delta_wait)) copies it to a region of the same length in
/// a segment; the destination keeps that copy, so the next transfer *to the same
/// destination* carries only the changed bytes (a transfer to another destination
/// carries everything). Nothing else must write the destination region in between
/// (nothing can check that).
///
/// Inside an epoch, what the program has finished can be sent early
/// ([`delta_flush`](DeltaExt::delta_flush), or automatically by
/// [`delta_mark`](DeltaExt::delta_mark) once a delta's worth is marked), so the copy
/// overlaps the computation of the rest. Writing a range already sent in the epoch is
/// a misuse: `delta_end` reports it as [`OverlapError::WrittenAfterSend`] (and sends
/// the range again, so the destination ends up with the final bytes; what a receiver
/// read before is another matter, which is why it is an error).
///
/// Pages being sent are read-only; a write to one waits (in the fault handler) until
/// its send has left. In [`Tracking::OsTriggered`] mode the pages stay read-only
/// after the transfer and a write faults once per page to record the change. A
/// system call writing into such a page fails with `EFAULT` (the kernel does not
/// fault on the program's behalf): write the bytes from Rust first, or into another
/// buffer.
///
/// ```
/// use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder};
/// use gex_overlap::{DeltaBuf, DeltaExt, Overlap, Tracking};
/// use gex_rma::{GlobalPtr, Rma};
///
/// let client = ClientBuilder::new().layer::<Rma>().layer::<Overlap>()
///     .segment_size(1 << 20).init::<Loopback>(Box::new(Singleton::new()))?;
/// let mut ep = client.endpoint(0)?;
/// let dst = GlobalPtr::<u8>::new(ep.addr(), 0);
/// let mut buf = DeltaBuf::new(64 << 10, Tracking::OsTriggered)?;
/// buf.fill(1);
/// let first = ep.delta_put(dst, &mut buf)?; // the first transfer: everything
/// assert_eq!(first.bytes, 64 << 10);
/// buf[100] = 2; // faults once: the page is recorded as changed
/// let next = ep.delta_put(dst, &mut buf)?; // only that page crosses
/// assert_eq!(next.bytes, gex_overlap::page_size());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct DeltaBuf {
    buf: OverlapBuf,
    mode: Tracking,
    /// Annotated: ranges marked and not sent yet.
    marked: RangeSet,
    /// Ranges sent in the open epoch.
    sent: RangeSet,
    /// The destination of the last transfer.
    pub(crate) last: Option<Dest>,
    epoch: Option<Epoch>,
    /// Sends of this buffer not complete yet.
    inflight: Arc<AtomicUsize>,
    /// Sends of the open epoch to a window not mapped here whose bytes may not be at
    /// the target yet (their arrival words wait for them), in issue order.
    rsends: Vec<RemoteSend>,
    /// Puts of arrival words not known complete yet (the end word waits for them).
    rwords: Vec<Event<(), RmaError>>,
}

/// A send of pages `first..first + n` to a window not mapped here, in flight.
struct RemoteSend {
    puts: Vec<Event<(), RmaError>>,
    first: usize,
    n: usize,
}

impl fmt::Debug for DeltaBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeltaBuf")
            .field("buf", &self.buf)
            .field("mode", &self.mode)
            .field("epoch", &self.epoch.is_some())
            .finish()
    }
}

impl DeltaBuf {
    /// A zero-filled delta buffer of `len` bytes. Its first transfer to any
    /// destination sends everything. In [`Tracking::OsTriggered`] mode its pages are
    /// read-only from the start (the first write to each faults once), so that a
    /// flush in the first epoch sends only the pages written in it.
    ///
    /// # Errors
    /// As [`OverlapBuf::new`](crate::OverlapBuf::new).
    pub fn new(len: usize, mode: Tracking) -> Result<DeltaBuf, OverlapError> {
        let buf = OverlapBuf::new(len)?;
        if mode == Tracking::OsTriggered {
            // Watched from the start: a flush in the first epoch sends the pages
            // written in it (the end sends everything anyway).
            let n = len.div_ceil(sys::page_size());
            buf.shared
                .protect(0, len, Prot::Read)
                .map_err(OverlapError::Os)?;
            buf.shared.region.table.set(0, n, CLEAN);
        }
        Ok(DeltaBuf {
            buf,
            mode,
            marked: RangeSet::new(),
            sent: RangeSet::new(),
            last: None,
            epoch: None,
            inflight: Arc::new(AtomicUsize::new(0)),
            rsends: Vec::new(),
            rwords: Vec::new(),
        })
    }

    /// How the buffer's writes are tracked.
    pub fn mode(&self) -> Tracking {
        self.mode
    }

    /// Whether an epoch is open ([`DeltaExt::delta_begin`] without its
    /// [`delta_end`](DeltaExt::delta_end) yet).
    pub fn in_epoch(&self) -> bool {
        self.epoch.is_some()
    }

    /// Records that the program wrote `self[offset..offset+len]`: part of the next
    /// send ([`Tracking::Annotated`]; in [`Tracking::OsTriggered`] mode a mark adds
    /// the range too, with the pages the handler saw written). Marks merge into runs.
    ///
    /// # Errors
    /// [`OverlapError::OutOfBuffer`]; [`OverlapError::WrittenAfterSend`] if the range
    /// overlaps one already sent in the open epoch (the range is recorded all the
    /// same and sent again at the epoch's end, which reports the misuse too).
    ///
    /// ```
    /// let mut b = gex_overlap::DeltaBuf::new(8192, gex_overlap::Tracking::Annotated)?;
    /// b[10..20].fill(3);
    /// b.mark(10, 10)?;
    /// b.mark(20, 5)?; // merges with the first
    /// assert_eq!(b.changed_bytes(), 15);
    /// # Ok::<(), gex_overlap::OverlapError>(())
    /// ```
    pub fn mark(&mut self, offset: usize, len: usize) -> Result<(), OverlapError> {
        let end = offset.checked_add(len).filter(|&e| e <= self.len()).ok_or(
            OverlapError::OutOfBuffer {
                offset,
                len,
                buf_len: self.len(),
            },
        )?;
        self.marked.insert(offset, end);
        if let Some(e) = &mut self.epoch {
            if let Some(at) = self.sent.first_overlap(offset, end) {
                e.misuse.get_or_insert(at);
                return Err(OverlapError::WrittenAfterSend { offset: at });
            }
        }
        Ok(())
    }

    /// The bytes the next send would carry if no epoch had sent anything yet and the
    /// destination were the last one: the marked bytes ([`Tracking::Annotated`]), or
    /// the changed pages' bytes and the marked ones ([`Tracking::OsTriggered`]).
    pub fn changed_bytes(&self) -> usize {
        self.changed().bytes()
    }

    /// For a transfer of the whole buffer outside an epoch (a delta message) to
    /// `key`: the runs to send (sorted, disjoint `(start, end)`) and whether they are
    /// the whole buffer (the first transfer to `key`, or at least `whole_pct` percent
    /// changed).
    #[cfg(feature = "msg")]
    pub(crate) fn delta_runs(&self, key: Dest, whole_pct: u32) -> (Vec<(usize, usize)>, bool) {
        let len = self.len();
        let set = self.changed();
        let whole = self.last != Some(key)
            || (set.bytes() as u128) * 100 >= u128::from(whole_pct) * len as u128;
        if whole {
            (vec![(0, len)], true)
        } else {
            (set.runs().to_vec(), false)
        }
    }

    /// After a transfer outside an epoch to `key` (a delta message): nothing is
    /// changed any more (marks cleared; OS-triggered: the written pages read-only
    /// again, `CLEAN`, so the next writes are seen), and `key` holds the copy.
    #[cfg(feature = "msg")]
    pub(crate) fn sent_to(&mut self, key: Dest) -> Result<(), OverlapError> {
        self.marked.clear();
        if self.mode == Tracking::OsTriggered {
            let page = sys::page_size();
            let len = self.len();
            let shared = &self.buf.shared;
            for (first, n) in shared.region.table.runs_in(READY) {
                let off = first * page;
                // `&mut self`: no slice of the buffer lives, so nothing writes these
                // pages while they become read-only and CLEAN.
                if let Err(e) = shared.protect(off, ((first + n) * page).min(len) - off, Prot::Read)
                {
                    self.last = None;
                    return Err(OverlapError::Os(e));
                }
                shared.region.table.set(first, n, CLEAN);
            }
        }
        self.last = Some(key);
        Ok(())
    }

    /// What changed and is not sent yet.
    fn changed(&self) -> RangeSet {
        let mut set = self.marked.clone();
        if self.mode == Tracking::OsTriggered {
            let page = sys::page_size();
            for (first, n) in self.buf.shared.region.table.runs_in(READY) {
                set.insert(first * page, ((first + n) * page).min(self.len()));
            }
        }
        let sent = &self.sent;
        for &(s, e) in sent.runs() {
            set.remove(s, e);
        }
        set
    }
}

/// `Deref` of each type to the bytes of its `buf` (an [`OverlapBuf`]); their
/// `DerefMut`s differ (a written [`DeltaRecv`] copies every page next time).
macro_rules! deref_to_buf {
    ($($ty:ty),*) => {$(
        impl Deref for $ty {
            type Target = [u8];
            fn deref(&self) -> &[u8] {
                &self.buf
            }
        }
    )*};
}

deref_to_buf!(DeltaBuf, DeltaRecv);

impl DerefMut for DeltaBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.buf
    }
}

/// The receive side of seed 001's delta send-recv: a receive buffer (inaccessible
/// pages until they arrive, as a demand-driven get's destination) and its **window**
/// in this endpoint's segment: the *shadow* (the sender's [`DeltaBuf`] is copied there,
/// only what changed in each epoch) and a control block (an arrival word per page, the
/// sender's end word, the receiver's consumed word). Made by
/// [`DeltaExt::delta_recv_window`]; each [`DeltaExt::delta_recv`] receives one epoch of
/// the sender's. It dereferences to `[u8]` (the receive buffer).
///
/// Pages arrive in any order; each retires (becomes readable, its bytes final for
/// this epoch) as soon as its arrival word says so, and the pages the sender did not
/// send retire at the end of its epoch with their last bytes (copied from the shadow
/// if the program wrote the receive buffer since its last receive, or on the first;
/// otherwise they hold them already): a receive of a message of any size needs no
/// cancellation and no wait.
///
/// ```
/// use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder};
/// use gex_overlap::{DeltaBuf, DeltaExt, Overlap, Tracking};
/// use gex_rma::{GlobalPtr, Rma};
///
/// let client = ClientBuilder::new().layer::<Rma>().layer::<Overlap>()
///     .segment_size(1 << 20).init::<Loopback>(Box::new(Singleton::new()))?;
/// let mut ep = client.endpoint(0)?;
/// let len = 16 << 10;
/// let mut rx = ep.delta_recv_window(0, len)?;
/// let window = GlobalPtr::<u8>::new(ep.addr(), rx.window());
/// let mut tx = DeltaBuf::new(len, Tracking::Annotated)?;
/// ep.delta_recv(&mut rx)?; // returns at once
/// ep.delta_send_begin(&mut tx, window)?;
/// tx[..100].fill(7);
/// ep.delta_mark(&mut tx, 0, 100)?;
/// ep.delta_end(&mut tx)?;
/// assert_eq!(rx[99], 7); // waits for that page only (here: the epoch's end)
/// ep.delta_wait(&mut tx)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct DeltaRecv {
    buf: OverlapBuf,
    /// The window's offset in this endpoint's segment.
    offset: usize,
    /// The shadow's, the header's and the first arrival word's addresses here.
    shadow: usize,
    ctl: usize,
    arrivals: usize,
    /// The last epoch posted.
    epoch: u32,
    /// Receives posted and not complete (0 or 1).
    inflight: Arc<AtomicUsize>,
    /// The receive buffer may differ from the shadow outside the pages of the next
    /// epoch: first receive, or written by the program (`DerefMut`) since the last.
    written: bool,
}

impl fmt::Debug for DeltaRecv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeltaRecv")
            .field("buf", &self.buf)
            .field("window", &self.offset)
            .field("epoch", &self.epoch)
            .finish()
    }
}

impl DeltaRecv {
    /// The bytes a receive window for a `len`-byte buffer takes in the segment: a
    /// header page, the shadow (`len` rounded up to 64) and 4 bytes per page.
    pub fn window_len(len: usize) -> usize {
        arrivals_offset(len) + layer::arrival_word(len.div_ceil(sys::page_size()))
    }

    /// The window's offset in this endpoint's segment (where senders send).
    pub fn window(&self) -> usize {
        self.offset
    }

    /// The number of epochs posted so far.
    pub fn epochs(&self) -> u32 {
        self.epoch
    }

    /// Whether the posted receive is still incomplete (some page not arrived).
    pub fn is_pending(&self) -> bool {
        self.inflight.load(Ordering::Acquire) != 0
    }
}

impl DerefMut for DeltaRecv {
    fn deref_mut(&mut self) -> &mut [u8] {
        // The next receive copies every page (not only the changed ones).
        self.written = true;
        &mut self.buf
    }
}

/// The system page size (what page-granular tracking counts in).
pub fn page_size() -> usize {
    sys::page_size()
}
