//! The layer's view of its auxiliary slices (with `direct`, one of the two `unsafe`
//! modules of the crate): an address the conduit maps for the life of the client, seen
//! as the [`QUEUES`] queues of [`crate::near`] followed by the loan block of
//! [`crate::coop`] ([`AUX_BYTES`] bytes in all).
#![allow(unsafe_code)]

use crate::coop::{Block, LOAN_WORDS};
use crate::near::{AREA_BYTES, QUEUE_WORDS, QUEUES, Queue};
use gex_core::EpAddr;
use gex_core::layer::Cx;
use gex_core::spi::Conduit;
use gex_sync::atomic::AtomicU64;
use std::ptr::NonNull;

/// Bytes of the layer's auxiliary slice (`Msg::AUX_BYTES`): the near path's queues
/// ([`AREA_BYTES`]), then the loan block (64 bytes): 67,648.
pub(crate) const AUX_BYTES: usize = AREA_BYTES + LOAN_WORDS * 8;

/// The layer's slice of one endpoint's auxiliary area ([`AUX_BYTES`] bytes, 64-byte
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
    /// from [`Cx::aux`], whose contract gives the slice of [`AUX_BYTES`] bytes that
    /// `Msg::AUX_BYTES` asked for). Never under `--cfg gex_loom`, whose atomics are
    /// not plain words: there only the queue algorithm is model-checked.
    pub(crate) fn of<C: Conduit>(cx: &Cx<'_, C>, dst: EpAddr) -> Option<Area> {
        if cfg!(gex_loom) || cx.aux_len() < AUX_BYTES {
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
        // SAFETY: the area starts with `QUEUES * QUEUE_WORDS` 8-byte words
        // (`AREA_BYTES` of the `AUX_BYTES` checked against `aux_len` in `of`) at a 64-byte aligned address, so queue
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

    /// Another handle on the same area, for a guard that lives within one operation
    /// on its endpoint (`layer::CoopGuard`): like `self`, it must not outlive the
    /// conduit, which that operation's borrow of the endpoint ensures.
    pub(crate) fn dup(&self) -> Area {
        Area(self.0)
    }

    /// The loan block (after the queues).
    #[inline(always)]
    pub(crate) fn loan(&self) -> Block<'_> {
        // SAFETY: the area holds `AUX_BYTES` = `AREA_BYTES + LOAN_WORDS * 8` bytes
        // (checked against `aux_len` in `of`) at a 64-byte aligned address, so the
        // `LOAN_WORDS` words after the queues' `AREA_BYTES` are in bounds and aligned
        // for `AtomicU64`; mapped while the conduit is open, which outlives `self`;
        // accessed only atomically, so sharing them with other threads and processes
        // is no data race.
        let words = unsafe {
            std::slice::from_raw_parts(
                self.0.as_ptr().add(AREA_BYTES).cast::<AtomicU64>(),
                LOAN_WORDS,
            )
        };
        Block::new(words).expect("LOAN_WORDS words")
    }
}
