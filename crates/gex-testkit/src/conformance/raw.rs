//! Raw access to a peer's segment through the local mapping a conduit hands out
//! ([`ConduitEp::peer_segment`](gex_core::spi::ConduitEp::peer_segment)).
//!
//! # Safety
//!
//! A conduit promises that a mapping `(base, len)` returned by `peer_segment` stays
//! valid for reads and writes of `len` bytes for the life of the conduit. Both helpers
//! bounds-check the range against `len` before copying, and copy with byte-wise atomic
//! copies ([`gex_sync::copy`]) between the mapping and a distinct local buffer, so
//! there is no data race whatever other ranks do (the cases that use them also make
//! every writer of a byte range distinct and order readers after writers with a
//! barrier or a reply, so the bytes are the expected ones).
#![allow(unsafe_code)]

use std::ptr::NonNull;

fn check(map: (NonNull<u8>, usize), offset: usize, len: usize) -> Result<(), String> {
    match offset.checked_add(len) {
        Some(e) if e <= map.1 => Ok(()),
        _ => Err(format!(
            "range {offset}+{len} outside a {}-byte mapping",
            map.1
        )),
    }
}

/// Copies `data` into the mapped peer segment at `offset`.
pub(crate) fn peer_write(
    map: (NonNull<u8>, usize),
    offset: usize,
    data: &[u8],
) -> Result<(), String> {
    check(map, offset, data.len())?;
    // SAFETY: in bounds of a mapping the conduit keeps valid (checked above); `data` is
    // a local buffer distinct from the mapping. Race-free: byte-wise atomic stores.
    unsafe { gex_sync::copy::atomic_write(map.0.as_ptr().add(offset), data) };
    Ok(())
}

/// Copies from the mapped peer segment at `offset` into `out`.
pub(crate) fn peer_read(
    map: (NonNull<u8>, usize),
    offset: usize,
    out: &mut [u8],
) -> Result<(), String> {
    check(map, offset, out.len())?;
    // SAFETY: as in `peer_write`, with source and destination swapped. Race-free:
    // byte-wise atomic loads.
    unsafe { gex_sync::copy::atomic_read(map.0.as_ptr().add(offset), out) };
    Ok(())
}

/// The `u64` word at `offset` of an auxiliary area (`len` bytes, 64-byte aligned), as
/// an atomic shared with the other processes that map it.
pub(crate) fn aux_word(
    area: NonNull<u8>,
    len: usize,
    offset: usize,
) -> Result<&'static gex_sync::atomic::AtomicU64, String> {
    if offset % 8 != 0 || offset + 8 > len {
        return Err(format!("aux offset {offset} is misaligned or out of range"));
    }
    if area.as_ptr() as usize % 64 != 0 {
        return Err(format!("aux area {area:p} is not 64-byte aligned"));
    }
    // SAFETY: in bounds and 8-byte aligned (checked); the conduit keeps the area mapped
    // for the life of the conduit, which outlives the case (the `'static` is not used
    // beyond it); every access to these words in the case is atomic.
    Ok(unsafe {
        &*area
            .as_ptr()
            .add(offset)
            .cast::<gex_sync::atomic::AtomicU64>()
    })
}
