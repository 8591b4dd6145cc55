//! [`OverlapBuf`]: memory whose pages a transfer can protect and retire one by one.
#![allow(unsafe_code)]

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use gex_sync::atomic::Ordering;

use crate::error::OverlapError;
use crate::sys::{self, Mapping, Region};

/// The shared part of a buffer: its mapping and its registered region. Pending
/// transfers hold it too, so the memory outlives them.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) map: Mapping,
    pub(crate) region: Region,
    slot: usize,
}

impl Shared {
    /// Sets the protection of the user view's bytes `[off, off+len)` (whole pages),
    /// counting the call ([`OverlapBuf::stats`]).
    pub(crate) fn protect(&self, off: usize, len: usize, prot: sys::Prot) -> std::io::Result<()> {
        self.region.mprotects.fetch_add(1, Ordering::Relaxed);
        self.map.protect(off, len, prot)
    }
}

/// What a buffer's transfers cost in page protection ([`OverlapBuf::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BufStats {
    /// `mprotect` calls made on the buffer so far (at issue, by the mover, by the
    /// fault handler).
    pub mprotect_calls: u64,
    /// Lazy transfers into it ([`OverlapExt::get_lazy`](crate::OverlapExt::get_lazy)).
    pub lazy_transfers: u64,
    /// Lazy transfers that fell back to protecting every pending page (a fault off
    /// the expected page: a jump ahead).
    pub lazy_fallbacks: u64,
    /// `mprotect` calls the finished lazy transfers made fewer than eager protection
    /// would have (one at issue and one per strip).
    pub mprotects_saved: u64,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Withdraw from the handler before the mapping goes.
        sys::unregister(self.slot);
    }
}

/// A buffer for demand-driven transfers: private memory of the process (a file
/// mapping of its own, mapped twice: the program uses one view, the transfers the
/// other), page-aligned, zero-filled at creation. It dereferences to `[u8]`.
///
/// While a get into it is pending, its destination pages are inaccessible
/// (`PROT_NONE`): the first access to one waits (in the fault handler) for the strip
/// that covers it, then goes on. While a put from it is pending, its source pages are
/// read-only: a write waits for the strip to have left. See the crate documentation.
///
/// A system call given a pending page fails with `EFAULT` (the kernel does not fault
/// on the program's behalf): call
/// [`OverlapExt::wait_range`](crate::OverlapExt::wait_range) first.
///
/// After `fork`, the child shares the buffer's memory with the parent (a shared file
/// mapping), and pages still pending at the fork never retire in the child: an access
/// there crashes with SIGSEGV. Retire everything before forking.
///
/// ```
/// let mut b = gex_overlap::OverlapBuf::new(10_000)?;
/// b[9_999] = 7;
/// assert_eq!(b.len(), 10_000);
/// assert_eq!(b.iter().map(|&x| x as u32).sum::<u32>(), 7);
/// # Ok::<(), gex_overlap::OverlapError>(())
/// ```
pub struct OverlapBuf {
    pub(crate) shared: Arc<Shared>,
    len: usize,
}

impl OverlapBuf {
    /// A zero-filled buffer of `len` bytes (at least one page is mapped).
    ///
    /// # Errors
    /// [`OverlapError::Os`] if the memory cannot be mapped or the fault handler
    /// installed; [`OverlapError::TooManyBuffers`] past
    /// [`MAX_BUFFERS`](crate::MAX_BUFFERS) live buffers.
    pub fn new(len: usize) -> Result<OverlapBuf, OverlapError> {
        sys::install().map_err(OverlapError::Os)?;
        let page = sys::page_size();
        let map_len = len.div_ceil(page).max(1) * page;
        let map = Mapping::new(map_len).map_err(OverlapError::Os)?;
        let region = Region::new(map.user() as usize, map_len);
        // The region gets its final address inside the Arc before it is published.
        let mut shared = Arc::new(Shared {
            map,
            region,
            slot: usize::MAX,
        });
        let slot = sys::register(&shared.region).ok_or(OverlapError::TooManyBuffers)?;
        match Arc::get_mut(&mut shared) {
            Some(s) => s.slot = slot,
            None => unreachable!("a new Arc has one owner"),
        }
        Ok(OverlapBuf { shared, len })
    }

    /// The transfer view's base address (same bytes as the user view).
    pub(crate) fn xfer(&self) -> *mut u8 {
        self.shared.map.xfer()
    }

    /// Whether any page holding bytes `[offset, offset+len)` is still pending.
    ///
    /// # Errors
    /// [`OverlapError::OutOfBuffer`] if the range does not lie in the buffer.
    pub fn is_pending(&self, offset: usize, len: usize) -> Result<bool, OverlapError> {
        let (first, n) = crate::table::pages_of(offset, len, self.len, sys::page_size(), false)
            .map_err(|_| OverlapError::OutOfBuffer {
                offset,
                len,
                buf_len: self.len,
            })?;
        Ok(self.shared.region.table.any_pending(first, n))
    }

    /// What its transfers cost in page protection so far.
    pub fn stats(&self) -> BufStats {
        let r = &self.shared.region;
        BufStats {
            mprotect_calls: r.mprotects.load(Ordering::Relaxed),
            lazy_transfers: r.lazy.transfers.load(Ordering::Relaxed),
            lazy_fallbacks: r.lazy.fallbacks.load(Ordering::Relaxed),
            mprotects_saved: r.lazy.saved.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn len_bytes(&self) -> usize {
        self.len
    }
}

impl fmt::Debug for OverlapBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OverlapBuf")
            .field("addr", &self.shared.map.user())
            .field("len", &self.len)
            .finish()
    }
}

impl Deref for OverlapBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the user view is mapped for at least `len` bytes while `shared`
        // lives, and initialised (zero-filled file). Pending pages are not accessible,
        // but every access to one waits in the fault handler for its final bytes, so a
        // read through this slice only ever sees the bytes of the last transfer that
        // completed before it (and no write happens to them while the slice lives:
        // gets take `&mut OverlapBuf`). A page written through the transfer view is
        // pending, hence not read through this view, until it retires (`Release` /
        // `Acquire` on its page state).
        unsafe { std::slice::from_raw_parts(self.shared.map.user(), self.len) }
    }
}

impl DerefMut for OverlapBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as `deref`; `&mut self` makes this the only slice of the user view.
        // The transfer view is read (put) or written (get) only on pending pages, which
        // this slice cannot access before they retire.
        unsafe { std::slice::from_raw_parts_mut(self.shared.map.user(), self.len) }
    }
}
