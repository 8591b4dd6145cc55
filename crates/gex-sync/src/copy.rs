//! Copies to and from memory that other threads or processes may write at the same
//! time (segments, auxiliary areas), without a data race.
//!
//! A plain `memcpy` over bytes another thread writes concurrently is a data race in
//! Rust's memory model (undefined behaviour), even through raw pointers. These copies
//! use relaxed atomic loads and stores instead (byte-wise at the unaligned edges,
//! 8 bytes at a time in between), in the spirit of the byte-wise atomic `memcpy`
//! proposed for C++ (P1478): concurrent conflicting accesses then give unspecified
//! bytes, never undefined behaviour. Ordering with the writer comes from whatever
//! synchronises the two sides (a message, a flag read with `Acquire`).
//!
//! Written by hand because it is a dozen lines over `AtomicU8`/`AtomicU64::from_ptr`;
//! the crate that offers the same (`atomic-memcpy`) adds an unsafe API surface of its
//! own for no gain here.
//!
//! These always use the standard atomics (also under `--cfg gex_loom`): raw memory
//! shared with other processes is outside what loom models.
//!
//! # Safety
//! Every function is `unsafe`: the caller guarantees the ranges are valid for the
//! access (mapped, in bounds) for the duration of the call. Within that, atomics make
//! every access race-free.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering::Relaxed};

/// Copies `out.len()` bytes from `src` into `out` with relaxed atomic loads.
///
/// # Safety
/// `src..src + out.len()` must be valid for reads for the duration of the call; other
/// threads or processes may write it concurrently (only through atomics or other
/// copies of this module, or from another process).
///
/// ```
/// let v = [1u8, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11];
/// let mut out = [0u8; 9];
/// // SAFETY: `v` is valid for 11 bytes.
/// unsafe { gex_sync::copy::atomic_read(v.as_ptr().add(1), &mut out) };
/// assert_eq!(out, [2, 3, 4, 5, 6, 7, 8, 9, 10]);
/// ```
pub unsafe fn atomic_read(src: *const u8, out: &mut [u8]) {
    let n = out.len();
    let mut i = 0;
    // Bytes up to the first 8-byte-aligned source address.
    while i < n && (src as usize + i) % 8 != 0 {
        // SAFETY: in bounds (caller); a byte is always aligned.
        out[i] = unsafe { AtomicU8::from_ptr(src.add(i).cast_mut()) }.load(Relaxed);
        i += 1;
    }
    while i + 8 <= n {
        // SAFETY: in bounds and 8-byte aligned (the loop above).
        let w = unsafe { AtomicU64::from_ptr(src.add(i).cast::<u64>().cast_mut()) }.load(Relaxed);
        out[i..i + 8].copy_from_slice(&w.to_ne_bytes());
        i += 8;
    }
    while i < n {
        // SAFETY: in bounds (caller).
        out[i] = unsafe { AtomicU8::from_ptr(src.add(i).cast_mut()) }.load(Relaxed);
        i += 1;
    }
}

/// Copies `data` to `dst` with relaxed atomic stores.
///
/// # Safety
/// `dst..dst + data.len()` must be valid for writes for the duration of the call and
/// must not overlap `data`; others may access it concurrently as for [`atomic_read`].
///
/// ```
/// let mut v = [0u8; 12];
/// // SAFETY: `v` is valid for 12 bytes and distinct from the source.
/// unsafe { gex_sync::copy::atomic_write(v.as_mut_ptr().add(3), &[9; 9]) };
/// assert_eq!(v, [0, 0, 0, 9, 9, 9, 9, 9, 9, 9, 9, 9]);
/// ```
pub unsafe fn atomic_write(dst: *mut u8, data: &[u8]) {
    let n = data.len();
    let mut i = 0;
    while i < n && (dst as usize + i) % 8 != 0 {
        // SAFETY: in bounds (caller).
        unsafe { AtomicU8::from_ptr(dst.add(i)) }.store(data[i], Relaxed);
        i += 1;
    }
    while i + 8 <= n {
        let w = u64::from_ne_bytes(data[i..i + 8].try_into().expect("8 bytes"));
        // SAFETY: in bounds and 8-byte aligned.
        unsafe { AtomicU64::from_ptr(dst.add(i).cast::<u64>()) }.store(w, Relaxed);
        i += 8;
    }
    while i < n {
        // SAFETY: in bounds (caller).
        unsafe { AtomicU8::from_ptr(dst.add(i)) }.store(data[i], Relaxed);
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_alignment_and_length_round_trips() {
        let src: Vec<u8> = (0..64u8).collect();
        for start in 0..9 {
            for len in 0..40 {
                let mut out = vec![0u8; len];
                // SAFETY: start + len <= 64.
                unsafe { atomic_read(src.as_ptr().add(start), &mut out) };
                assert_eq!(out, &src[start..start + len]);
                let mut dst = vec![0xffu8; 64];
                // SAFETY: as above, distinct buffers.
                unsafe { atomic_write(dst.as_mut_ptr().add(start), &out) };
                assert_eq!(&dst[start..start + len], &src[start..start + len]);
                assert!(dst[..start].iter().all(|&b| b == 0xff));
                assert!(dst[start + len..].iter().all(|&b| b == 0xff));
            }
        }
    }
}
