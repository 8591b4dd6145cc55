//! The near path's view of the layer's auxiliary slices (the one `unsafe` module of
//! the crate): an address the conduit maps for the life of the client, seen as the
//! [`QUEUES`] queues of [`crate::near`].
#![allow(unsafe_code)]

use crate::near::{AREA_BYTES, QUEUE_WORDS, QUEUES, Queue};
use gex_core::EpAddr;
use gex_core::layer::Cx;
use gex_core::spi::Conduit;
use gex_sync::atomic::AtomicU64;
use std::ptr::NonNull;

/// The layer's slice of one endpoint's auxiliary area ([`AREA_BYTES`] bytes, 64-byte
/// aligned, mapped as long as the conduit is open, only ever accessed through
/// atomics). Holds no reference: it lives in the layer's state, which lives with its
/// endpoint, inside the client that keeps the conduit open.
#[derive(Debug)]
pub(crate) struct Area(NonNull<u8>);

// SAFETY: an address of memory shared between threads and processes; every access
// is an atomic operation (`Area::queue` hands out only `AtomicU64`s).
unsafe impl Send for Area {}
// SAFETY: as above.
unsafe impl Sync for Area {}

impl Area {
    /// `dst`'s slice, if the conduit maps it and it has the layer's size (built only
    /// from [`Cx::aux`], whose contract gives the slice of [`AREA_BYTES`] bytes that
    /// `Msg::AUX_BYTES` asked for). Never under `--cfg gex_loom`, whose atomics are
    /// not plain words: there only the queue algorithm is model-checked.
    pub(crate) fn of<C: Conduit>(cx: &Cx<'_, C>, dst: EpAddr) -> Option<Area> {
        if cfg!(gex_loom) || cx.aux_len() < AREA_BYTES {
            return None;
        }
        let p = cx.aux(dst)?;
        (p.as_ptr() as usize % 64 == 0).then_some(Area(p))
    }

    /// Queue `i` of the area (`None` for `i >= QUEUES`).
    #[inline(always)]
    pub(crate) fn queue(&self, i: usize) -> Option<Queue<'_>> {
        if i >= QUEUES {
            return None;
        }
        // SAFETY: the area holds `QUEUES * QUEUE_WORDS` 8-byte words (`AREA_BYTES`,
        // checked against `aux_len` in `of`) at a 64-byte aligned address, so queue
        // `i < QUEUES` is in bounds and aligned for `AtomicU64` (8 bytes, align 8,
        // as `u64`, outside loom builds, where `of` gives no area); the memory stays
        // mapped while the conduit is open (conduit contract of `Cx::aux`), which
        // outlives the layer state holding `self`, to which the slice's lifetime is
        // tied; every access through the slice is atomic, so sharing it with other
        // threads and processes is no data race.
        let words = unsafe {
            std::slice::from_raw_parts(
                self.0.as_ptr().cast::<AtomicU64>().add(i * QUEUE_WORDS),
                QUEUE_WORDS,
            )
        };
        Queue::new(words)
    }
}
