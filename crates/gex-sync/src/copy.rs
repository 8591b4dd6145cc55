//! Copies to and from memory that other threads or processes may access at the same
//! time (segments, auxiliary areas, collective slots), without a data race, as fast as
//! `memcpy`.
//!
//! A plain `memcpy` over bytes another thread writes concurrently is a data race in
//! Rust's memory model (undefined behaviour), even through raw pointers. These copies
//! have the semantics of the byte-wise atomic `memcpy` proposed for C++ (P1478,
//! `atomic_load_per_byte_memcpy` / `atomic_store_per_byte_memcpy`): **every byte is read
//! and written as a relaxed atomic byte access**. Concurrent conflicting accesses then
//! give unspecified bytes (each byte is one that some write stored, bytes may come from
//! different writes), never undefined behaviour. Ordering with the writer comes from
//! whatever synchronises the two sides (a message, a flag read with `Acquire`).
//!
//! | function | shared side | the other side |
//! |---|---|---|
//! | [`atomic_read`] | the source (raw) | `&mut [u8]`, private |
//! | [`atomic_write`] | the destination (raw) | `&[u8]`, private |
//! | [`atomic_copy`] | both (raw), may overlap (`memmove`) | |
//! | [`atomic_fill`] | the destination (raw) | |
//!
//! # Implementations
//!
//! - **x86-64** (not under Miri): up to 128 bytes, inline assembly with ordinary loads
//!   and stores, inlined at the call site (a constant length compiles to a few moves,
//!   and no call means no value of the caller's loop saved across one): up to 16 bytes
//!   two overlapping general-register moves, up to 64 bytes two overlapping groups of
//!   SSE2 `movdqu`, up to 128 bytes eight (the first and the last 64 bytes); beyond, a
//!   call of the C library's `memmove` straight from the caller after one comparison,
//!   through a pointer the compiler cannot see through (below, "Why `memmove` is
//!   too"): glibc's `memmove-vec-unaligned-erms` in the widest vectors the CPU has,
//!   with `rep movsb` for large copies. Fills: the same shapes up to 64 bytes, a
//!   64-byte-aligned SSE2 loop, `rep stosb` from 2 KiB.
//!
//!   Why not assembly of our own beyond 128 bytes: until 2026-11-29 it was (SSE2, AVX
//!   or AVX-512 vectors in glibc's shapes, `rep movsb` from 128 vectors), out of line.
//!   In the blocking put of `gex-perf` it cost about 1-2 ns more than calling `memmove`
//!   from 128 bytes to 1 KiB with the same instructions (medians over eight stack
//!   offsets, 2026-11-29: 5.0-5.3 against 4.2-4.4 ns at 128 bytes, 6.4 against
//!   5.2-5.5 ns at 512 bytes, 10.4-11.0 against 8.5-9.6 ns at 1 KiB;
//!   docs/performance.md). glibc's code is tuned per CPU family; ours was not, and is
//!   gone. Up to 128 bytes the inlined blocks win (no call, no dispatch): the blocking
//!   put of 128 bytes took 3.1 ns against 3.4 through `memmove` (medians over ten heap
//!   layouts, 2026-11-29), and an out-of-line dispatcher in front of `memmove` had
//!   cost gets of 64-128 bytes 0.5-1.5 ns.
//! - **Everything else, and x86-64 under Miri** (which cannot run assembly): one relaxed
//!   `AtomicU8` access per byte, unrolled by eight. Byte-sized on purpose: a wider atomic
//!   meeting a byte access of another copy at a different alignment would be a
//!   *mixed-size* race, undefined behaviour in Rust's model (the old word-wise loop had
//!   that flaw). It is slower than `memcpy`; an assembly version for AArch64 would follow
//!   the same argument as below.
//!
//! # Why the assembly is a byte-wise atomic copy
//!
//! The Rust reference, *Inline assembly*, *Rules for inline assembly*:
//! `asm.rules.black-box` says "the compiler must treat the assembly code as a black box
//! and only take the interface specification into account, not the instructions
//! themselves", and `asm.rules.mem-same-as-ffi` that the assembly may read and write the
//! same memory an FFI function could. So an `asm!` block is sound when what it does to
//! memory is something Rust code with the same inputs could have done: the compiler
//! assumes nothing more (the block is not `pure`, `nomem` or `readonly`, so it is never
//! removed, duplicated as a read, or moved across other memory accesses), and the program
//! behaves as if that Rust code had run. The Rust code here is: for each byte of the
//! range, a relaxed `AtomicU8` load from the source, and later a relaxed `AtomicU8` store
//! of the loaded value to the destination. That code has no data race whatever other
//! threads do with the same bytes through byte-sized atomics or other copies of this
//! module, and other processes are outside Rust's model altogether. It matches the
//! hardware because:
//!
//! - every x86 load or store is single-copy atomic for each byte it covers (Intel SDM
//!   vol. 3A, "Guaranteed atomic operations": byte accesses are always atomic; a wider
//!   access that is not atomic as a whole, an unaligned or 16-byte `movdqu`, a string
//!   instruction, is made of accesses of whole bytes), so each byte read is the value of
//!   one store, exactly what a relaxed byte load returns;
//! - relaxed atomic loads and stores compile to those same plain `mov`s on x86-64, and
//!   x86-TSO orders them more strongly than relaxed requires (coherence per location,
//!   also between the two overlapping loads of a short copy); fast-string stores may
//!   become visible out of order (SDM "Fast-string operation"), which relaxed stores to
//!   distinct bytes allow.
//!
//! A byte touched twice (the overlapping halves of a short copy, the head and tail of
//! the loop) is loaded twice and stored twice with the same value, which the same Rust
//! code may do.

//! # Why `memmove` is too
//!
//! Calling a foreign function is, for the compiler, the same black box as an `asm!`
//! block (`asm.rules.mem-same-as-ffi` above is that rule read the other way): it may
//! read and write the memory it is given, and the program behaves as if some Rust code
//! with those effects had run. The compiler must not know *which* function it calls:
//! a call it recognises as `memmove` is its own non-atomic copy intrinsic, which it may
//! split, merge, inline or reason about as racy. So the copy calls `memmove` through a
//! pointer that went through an empty `asm!` block (the compiler cannot tell where it
//! points). What runs is then the C library's machine code, and the argument above
//! applies to it unchanged: glibc's x86-64 `memmove` variants are hand-written assembly
//! (`sysdeps/x86_64/multiarch/memmove-vec-unaligned-erms.S` and its siblings) made of
//! ordinary vector loads and stores and `rep movsb`, which read each source byte and
//! write each destination byte as single-copy-atomic byte accesses, and store only
//! values they loaded. Any `memmove` that only loads from its source and stores loaded
//! bytes to its destination (every C library's; musl's is `rep movsq` and moves)
//! qualifies; under Valgrind, its own replacement `memmove`, a byte loop, does too.
//!
//! # Limits
//!
//! - The guarantee is against byte-sized accesses and other copies of this module. A
//!   copy that meets a *wider* atomic on the same bytes (an `AtomicU64` RMA atomic on a
//!   word being put or read at the same time) is a mixed-size race, undefined in Rust's
//!   model as for any byte access: a word that atomics use must not be copied
//!   concurrently (docs/rma.md, *Data races*).
//! - Nothing is atomic beyond a byte: a concurrent reader may see a torn `u64`.
//!
//! # Overlap
//!
//! [`atomic_copy`] has `memmove` semantics: every byte is loaded before it is
//! overwritten. No sound program needs them (a private side cannot overlap a shared one,
//! and a shared borrow cannot be written while it lives), but they cost nothing here and
//! keep the behaviour of the `ptr::copy`s this replaced for self-targeted transfers; the
//! other functions are implemented the same way. Use [`atomic_write`] when the source is
//! a `&[u8]`, even one inside a segment: its bytes are read as plain loads, which is
//! what a shared borrow allows (the portable fallback's atomic loads would need write
//! permission under Stacked Borrows), and [`atomic_copy`] when both sides are raw
//! (a segment into a caller's raw destination).
//!
//! # Why written here
//!
//! The `atomic-memcpy` crate offers the same semantics for one value of a type `T`
//! (not a run-time length of bytes), in Rust code with word-sized atomics: slower than
//! `memcpy` at these sizes, and mixed-size against byte accesses. Nothing in the
//! standard library does it yet.
//!
//! These always use the standard atomics or the assembly (also under `--cfg gex_loom`):
//! raw memory shared with other processes is outside what loom models.
//!
//! # Safety
//! Every function is `unsafe`: the caller guarantees the ranges are valid for the
//! access (mapped, in bounds) for the duration of the call, and that the private side
//! of [`atomic_read`] and [`atomic_write`] is theirs (a `&mut [u8]` / `&[u8]`). Within
//! that, every access to the shared side is a relaxed byte-wise atomic access (the
//! assembly by the argument above, the fallback literally): race-free.
#![allow(unsafe_code)]

#[cfg(not(all(target_arch = "x86_64", not(miri))))]
mod portable;
#[cfg(all(target_arch = "x86_64", not(miri)))]
mod x86_64;

/// Copies `len` bytes from `src` to `dst`, every byte a relaxed atomic load from `src`
/// and a relaxed atomic store to `dst`. The ranges may overlap (`memmove` semantics).
///
/// # Safety
/// `src..src + len` must be valid for reads and `dst..dst + len` for writes for the
/// duration of the call. Other threads or processes may access either concurrently
/// (through byte-sized atomics, other copies of this module, or from another process):
/// then the bytes copied or left are unspecified, and nothing is undefined.
///
/// ```
/// let mut v = [1u8, 2, 3, 4, 5, 6, 7, 8, 9, 10];
/// let p = v.as_mut_ptr();
/// // SAFETY: both ranges are inside `v`; overlap is allowed.
/// unsafe { gex_sync::copy::atomic_copy(p, p.add(2), 8) };
/// assert_eq!(v, [1, 2, 1, 2, 3, 4, 5, 6, 7, 8]);
/// ```
#[inline(always)]
pub unsafe fn atomic_copy(src: *const u8, dst: *mut u8, len: usize) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: contract of this function.
    unsafe {
        x86_64::copy(src, dst, len)
    };
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    // SAFETY: contract of this function; both sides atomic.
    unsafe {
        portable::copy::<true, true>(src, dst, len)
    };
}

/// Copies `out.len()` bytes from `src` into `out`, every byte of `src` read with a
/// relaxed atomic load.
///
/// # Safety
/// `src..src + out.len()` must be valid for reads for the duration of the call; other
/// threads or processes may write it concurrently (only through byte-sized atomics,
/// other copies of this module, or from another process).
///
/// ```
/// let v = [1u8, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11];
/// let mut out = [0u8; 9];
/// // SAFETY: `v` is valid for 11 bytes.
/// unsafe { gex_sync::copy::atomic_read(v.as_ptr().add(1), &mut out) };
/// assert_eq!(out, [2, 3, 4, 5, 6, 7, 8, 9, 10]);
/// ```
#[inline(always)]
pub unsafe fn atomic_read(src: *const u8, out: &mut [u8]) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: `src` as the contract says; `out` is exclusively ours (so it cannot
    // overlap memory others access).
    unsafe {
        x86_64::copy(src, out.as_mut_ptr(), out.len())
    };
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    // SAFETY: as above; `out` is private, so plain stores.
    unsafe {
        portable::copy::<true, false>(src, out.as_mut_ptr(), out.len())
    };
}

/// Copies `data` to `dst`, every byte of `dst` written with a relaxed atomic store.
///
/// # Safety
/// `dst..dst + data.len()` must be valid for writes for the duration of the call;
/// others may access it concurrently as for [`atomic_read`]. (`data` is a shared
/// borrow, so it cannot be memory written during the call, `dst` included.)
///
/// ```
/// let mut v = [0u8; 12];
/// // SAFETY: `v` is valid for 12 bytes and distinct from the source.
/// unsafe { gex_sync::copy::atomic_write(v.as_mut_ptr().add(3), &[9; 9]) };
/// assert_eq!(v, [0, 0, 0, 9, 9, 9, 9, 9, 9, 9, 9, 9]);
/// ```
#[inline(always)]
pub unsafe fn atomic_write(dst: *mut u8, data: &[u8]) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: `dst` as the contract says; `data` is valid for reads.
    unsafe {
        x86_64::copy(data.as_ptr(), dst, data.len())
    };
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    // SAFETY: as above; nobody writes `data` during the call, so plain loads.
    unsafe {
        portable::copy::<false, true>(data.as_ptr(), dst, data.len())
    };
}

/// Sets `len` bytes at `dst` to `byte`, every byte a relaxed atomic store.
///
/// # Safety
/// `dst..dst + len` must be valid for writes for the duration of the call; others may
/// access it concurrently as for [`atomic_read`].
///
/// ```
/// let mut v = [0u8; 6];
/// // SAFETY: `v` is valid for 6 bytes.
/// unsafe { gex_sync::copy::atomic_fill(v.as_mut_ptr().add(1), 7, 4) };
/// assert_eq!(v, [0, 7, 7, 7, 7, 0]);
/// ```
#[inline(always)]
pub unsafe fn atomic_fill(dst: *mut u8, byte: u8, len: usize) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: contract of this function.
    unsafe {
        x86_64::fill(dst, byte, len)
    };
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    // SAFETY: contract of this function.
    unsafe {
        portable::fill(dst, byte, len)
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lengths around every size class boundary of both implementations (up to the
    /// vector loops and `rep movsb`); fewer under Miri.
    fn lengths() -> Vec<usize> {
        if cfg!(miri) {
            return (0..=40).chain([63, 64, 65, 127, 129, 200]).collect();
        }
        let mut v: Vec<usize> = (0..=300).collect();
        for b in [512, 1024, 2048, 4096, 8192, 16384] {
            v.extend([b - 65, b - 1, b, b + 1, b + 63]);
        }
        v
    }

    fn offsets() -> std::ops::Range<usize> {
        if cfg!(miri) { 0..9 } else { 0..65 }
    }

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 251) as u8 | 1).collect()
    }

    #[test]
    fn every_alignment_and_length_round_trips() {
        let max = *lengths().iter().max().unwrap() + 64 + 64;
        let src = pattern(max);
        let mut out = vec![0u8; max];
        let mut dst = vec![0u8; max];
        for len in lengths() {
            for so in offsets() {
                let doff = (so * 5 + len) % 64;
                // read: shared source at every offset
                out[..len].fill(0);
                // SAFETY: so + len <= max.
                unsafe { atomic_read(src.as_ptr().add(so), &mut out[..len]) };
                assert_eq!(&out[..len], &src[so..so + len], "read len {len} at {so}");
                // write and copy: destination at another offset, canaries around it
                for way in 0..2 {
                    dst.fill(0);
                    // SAFETY: doff + len < max; distinct buffers.
                    unsafe {
                        if way == 0 {
                            atomic_write(dst.as_mut_ptr().add(doff), &src[so..so + len])
                        } else {
                            atomic_copy(src.as_ptr().add(so), dst.as_mut_ptr().add(doff), len)
                        }
                    };
                    assert_eq!(
                        &dst[doff..doff + len],
                        &src[so..so + len],
                        "way {way} len {len}"
                    );
                    assert!(dst[..doff].iter().all(|&b| b == 0), "before, len {len}");
                    assert!(
                        dst[doff + len..].iter().all(|&b| b == 0),
                        "after, len {len}"
                    );
                }
            }
        }
    }

    #[test]
    fn overlapping_copies_are_memmove() {
        let lens: Vec<usize> = if cfg!(miri) {
            vec![0, 1, 7, 8, 9, 17, 33, 64, 65, 130]
        } else {
            (0..=300)
                .chain([511, 1024, 1025, 3000, 5000, 9000, 20000])
                .collect()
        };
        let shifts: &[isize] = if cfg!(miri) {
            &[-9, -8, -1, 1, 3, 8, 16, 64]
        } else {
            &[
                -1000, -129, -64, -63, -33, -17, -16, -9, -8, -1, 0, 1, 3, 8, 15, 16, 31, 64, 65,
                200, 1000,
            ]
        };
        let pad = if cfg!(miri) { 80 } else { 1100 };
        for &len in &lens {
            for &shift in shifts {
                let base = pattern(len + 2 * pad);
                let mut buf = base.clone();
                let mut model = base.clone();
                let s = pad;
                let d = (pad as isize + shift) as usize;
                model.copy_within(s..s + len, d);
                let p = buf.as_mut_ptr();
                // SAFETY: both ranges are inside `buf` (|shift| <= pad).
                unsafe { atomic_copy(p.add(s), p.add(d), len) };
                assert!(buf == model, "len {len} shift {shift}");
            }
        }
    }

    #[test]
    fn fills_every_alignment_and_length() {
        let max = *lengths().iter().max().unwrap() + 64 + 64;
        let mut dst = vec![0u8; max];
        for len in lengths() {
            for off in offsets() {
                dst.fill(0);
                // SAFETY: off + len < max.
                unsafe { atomic_fill(dst.as_mut_ptr().add(off), 0xa5, len) };
                assert!(dst[off..off + len].iter().all(|&b| b == 0xa5), "len {len}");
                assert!(dst[..off].iter().all(|&b| b == 0), "before, len {len}");
                assert!(dst[off + len..].iter().all(|&b| b == 0), "after, len {len}");
            }
        }
    }

    /// A raw address to share between the threads of a test.
    #[derive(Clone, Copy)]
    struct Shared(*mut u8);
    // SAFETY: the tests only pass it to the copies of this module, which are race-free.
    unsafe impl Send for Shared {}
    // SAFETY: as above.
    unsafe impl Sync for Shared {}

    /// Concurrent conflicting copies: unspecified bytes, never undefined behaviour. Under
    /// Miri this is the proof (its race detector checks every byte access of the
    /// fallback); natively it checks that every byte read is one some writer stored.
    #[test]
    fn racing_copies_give_bytes_some_writer_wrote() {
        let n = if cfg!(miri) { 24 } else { 4096 };
        let rounds = if cfg!(miri) { 3 } else { 2000 };
        let mut mem = vec![0u8; n + 16];
        let at = Shared(mem.as_mut_ptr());
        std::thread::scope(|sc| {
            for v in [0x11u8, 0x22] {
                sc.spawn(move || {
                    let at = at;
                    let data = vec![v; n];
                    for k in 0..rounds {
                        // SAFETY: k % 3 + n <= n + 16; `mem` outlives the scope.
                        unsafe {
                            let p = at.0.add(k % 3);
                            if k % 2 == 0 {
                                atomic_write(p, &data)
                            } else {
                                atomic_fill(p, v, n)
                            }
                        };
                    }
                });
            }
            sc.spawn(move || {
                let at = at;
                let mut out = vec![0u8; n];
                let mut other = vec![0u8; n + 16];
                for k in 0..rounds {
                    // SAFETY: in bounds; `mem` outlives the scope.
                    unsafe { atomic_read(at.0.add(k % 5), &mut out) };
                    assert!(out.iter().all(|b| [0, 0x11, 0x22].contains(b)));
                    // SAFETY: as above; `other` is ours.
                    unsafe { atomic_copy(at.0, other.as_mut_ptr(), n + 16) };
                    // SAFETY: as above (a copy within the shared memory).
                    unsafe { atomic_copy(at.0.add(1), at.0.add(8), n / 2) };
                }
            });
        });
        assert!(mem.iter().all(|b| [0, 0x11, 0x22].contains(b)));
    }
}
