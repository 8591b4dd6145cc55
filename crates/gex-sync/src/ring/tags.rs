//! Access to the ring's tag words: the only cfg-specific code of the ring.
//!
//! In a normal build a tag is the 8-byte word at its offset in the data area, accessed as an
//! [`AtomicU64`] overlaid on the (shared) memory. Under `--cfg gex_loom` loom atomics cannot
//! overlay raw bytes, so the control block carries a side table of loom `AtomicU64`s, one per
//! 8-byte word of the data area, created on first attach; [`TagStore::mirror`] copies the
//! plain header/body words of a record into that table so loom sees them overlap later tags,
//! exactly as the real memory does.
//!
//! # Safety
//!
//! `TagStore::new` requires the caller's guarantees of `Producer::new`/`Consumer::new`
//! (valid, aligned control block and data area of `cap` bytes that outlive the store). The
//! accessors require `off` to be a multiple of 8 below `cap`, so that every overlaid atomic
//! is aligned and inside the data area; the ring only passes `position & (cap - 1)` offsets.
//! A tag word is only ever accessed atomically while the other party may access it (see the
//! ring protocol in the parent module).

#![allow(unsafe_code)]

use super::RingCtl;
use crate::atomic::{AtomicU64, Ordering};

#[cfg(not(gex_loom))]
pub(super) use real::{CtlTags, TagStore};

#[cfg(gex_loom)]
pub(super) use model::{CtlTags, TagStore};

#[cfg(not(gex_loom))]
mod real {
    use super::{AtomicU64, Ordering, RingCtl};

    /// Nothing extra in the control block.
    #[repr(C)]
    #[derive(Debug)]
    pub(crate) struct CtlTags;

    impl CtlTags {
        pub(crate) fn new() -> Self {
            CtlTags
        }
    }

    /// Tags are the words of the data area itself.
    pub(crate) struct TagStore {
        data: *mut u8,
        /// Checked in debug builds: every tag word lies inside the data area.
        cap: usize,
    }

    impl TagStore {
        /// # Safety
        ///
        /// `data` is valid for `cap` bytes, 8-byte aligned, for the life of the store.
        #[inline]
        pub(crate) unsafe fn new(_ctl: *const RingCtl, data: *mut u8, cap: usize) -> Self {
            TagStore { data, cap }
        }

        /// # Safety
        ///
        /// `off` is a multiple of 8 below `cap`.
        #[inline(always)]
        unsafe fn word(&self, off: usize) -> &AtomicU64 {
            debug_assert!(
                off % 8 == 0 && off < self.cap,
                "ring tag offset {off} is not a multiple of 8 below {}",
                self.cap
            );
            // SAFETY: `data + off` is inside the data area and 8-byte aligned (caller), and
            // the word is accessed only atomically while shared (ring protocol).
            unsafe { AtomicU64::from_ptr(self.data.add(off).cast::<u64>()) }
        }

        /// # Safety
        ///
        /// `off` is a multiple of 8 below `cap`.
        #[inline(always)]
        pub(crate) unsafe fn load(&self, off: usize, order: Ordering) -> u64 {
            // SAFETY: forwarded from the caller.
            unsafe { self.word(off) }.load(order)
        }

        /// # Safety
        ///
        /// `off` is a multiple of 8 below `cap`.
        #[inline(always)]
        pub(crate) unsafe fn store(&self, off: usize, val: u64, order: Ordering) {
            // SAFETY: forwarded from the caller.
            unsafe { self.word(off) }.store(val, order)
        }

        /// No-op: the real memory already holds the bytes.
        ///
        /// # Safety
        ///
        /// None beyond the loom version's; kept `unsafe` for one signature.
        #[inline(always)]
        pub(crate) unsafe fn mirror(&self, _data: *const u8, _off: usize, _size: usize) {}
    }
}

#[cfg(gex_loom)]
mod model {
    use super::{AtomicU64, Ordering, RingCtl};
    use std::sync::OnceLock;

    /// The loom side table, one atomic per 8-byte word, created by the first endpoint.
    #[derive(Debug)]
    pub(crate) struct CtlTags {
        table: OnceLock<Box<[AtomicU64]>>,
    }

    impl CtlTags {
        pub(crate) fn new() -> Self {
            CtlTags {
                table: OnceLock::new(),
            }
        }
    }

    pub(crate) struct TagStore {
        table: *const [AtomicU64],
    }

    impl TagStore {
        /// # Safety
        ///
        /// `ctl` is valid and initialised for the life of the store.
        pub(crate) unsafe fn new(ctl: *const RingCtl, _data: *mut u8, cap: usize) -> Self {
            // SAFETY: caller guarantee.
            let ctl = unsafe { &*ctl };
            let table = ctl
                .tags
                .table
                .get_or_init(|| (0..cap / 8).map(|_| AtomicU64::new(0)).collect());
            assert_eq!(table.len(), cap / 8, "both endpoints must use the same cap");
            TagStore {
                table: &**table as *const [AtomicU64],
            }
        }

        fn word(&self, off: usize) -> &AtomicU64 {
            // SAFETY: the table lives in the control block, which outlives the store.
            unsafe { &(*self.table)[off / 8] }
        }

        /// # Safety
        ///
        /// `off` is a multiple of 8 below `cap`.
        pub(crate) unsafe fn load(&self, off: usize, order: Ordering) -> u64 {
            self.word(off).load(order)
        }

        /// # Safety
        ///
        /// `off` is a multiple of 8 below `cap`.
        pub(crate) unsafe fn store(&self, off: usize, val: u64, order: Ordering) {
            self.word(off).store(val, order)
        }

        /// Copies the plain words `[off + 8, off + size)` (header after the tag, and body) of
        /// a record into the table with `Relaxed` stores.
        ///
        /// # Safety
        ///
        /// `[off, off + size)` is inside the data area at `data`, `off` a multiple of 8.
        pub(crate) unsafe fn mirror(&self, data: *const u8, off: usize, size: usize) {
            for w in (off + 8..off + size).step_by(8) {
                // SAFETY: inside the data area (caller), aligned.
                let v = unsafe { data.add(w).cast::<u64>().read() };
                self.word(w).store(v, Ordering::Relaxed);
            }
        }
    }
}
