//! Atomic operations on 4- and 8-byte words of shared memory that [`copy`](crate::copy)
//! may read or write at the same time: the remote atomics of gex-rma (CPU domains) and
//! the simulated NIC's.
//!
//! # Why not `AtomicU64`
//!
//! A copy of this crate moves bytes, each a relaxed byte-sized atomic access. An
//! `AtomicU64` operation on a word that such a copy touches at the same time (a put
//! over a word another rank fetch-adds) is a *mixed-size* race: undefined behaviour in
//! Rust's model even though every access is atomic, and Miri reports it. Nothing in a
//! safe program can stop a rank from putting to a word another rank uses atomically
//! (GASNet-EX and OpenSHMEM make the values unspecified; Rust must not make it
//! undefined), so the word operations here are defined in terms of bytes too:
//!
//! - [`load`](load64) reads the word's bytes, each an atomic byte load with the ordering
//!   asked for;
//! - [`store`](store64) writes them, each an atomic byte store with the ordering asked
//!   for;
//! - the read-modify-write operations ([`swap`](swap64), [`cas`](cas64),
//!   [`fetch_add`](fetch_add64), [`update`](update64)) take a lock that only they use
//!   (one of a table of locks, chosen by the word's 8-byte-aligned address, so a 4-byte
//!   and an 8-byte operation on the same bytes take the same one), read the bytes,
//!   write the new ones and release the lock. They are atomic with respect to each
//!   other; a copy or a [`store`](store64) racing with them is byte against byte.
//!
//! Every access is then byte-sized, so no race is mixed-size, and no conflict is
//! undefined: a concurrent copy may see or leave a word with bytes of two values, which
//! is what "unspecified" means here.
//!
//! # Implementations
//!
//! - **x86-64** (not under Miri): inline assembly, the instructions the standard
//!   atomics compile to: `mov` for loads and stores, `xchg`, `lock cmpxchg` and `lock
//!   xadd` for the read-modify-writes (no lock table). By the Rust reference's rules for
//!   inline assembly (`asm.rules.black-box`, `asm.rules.mem-same-as-ffi`; the argument
//!   is in [`copy`](crate::copy)'s documentation) an assembly block is sound when what
//!   it does is something Rust code could do, and each block here behaves as the byte
//!   code above: every x86 access is single-copy atomic per byte, an aligned 4- or
//!   8-byte `mov` is one access (Intel SDM vol. 3A, "Guaranteed atomic operations"), so
//!   a load returns bytes some stores wrote, and with acquire (TSO) ordering; a store
//!   has release ordering; a locked instruction is atomic as a whole and a full
//!   barrier, stronger than the lock it is described by (which orders it only with the
//!   other read-modify-writes of the same lock). The hardware's behaviours are a subset
//!   of the byte code's.
//! - **Under Miri**: that byte code, literally (`AtomicU8` accesses and a table of 64
//!   spin locks), so Miri checks the claim that nothing races mixed-size.
//! - **Other architectures**: the standard `AtomicU32`/`AtomicU64`. There a word used
//!   by atomics and copied at the same time is still a mixed-size race in Rust's model
//!   (the lock table would not be shared with other processes, so it cannot stand in
//!   for the hardware's atomicity there); an AArch64 assembly version would follow the
//!   x86 argument.
//!
//! # Safety
//! Every function is `unsafe`: `p` must be valid for reads and writes of the word's
//! size for the duration of the call and naturally aligned for it; other threads and
//! processes may access it concurrently through this module or
//! [`copy`](crate::copy).
#![allow(unsafe_code)]

use std::sync::atomic::Ordering;

macro_rules! word_ops {
    (
        $t:ty, $n:literal, $load:ident, $store:ident, $swap:ident, $cas:ident,
        $fetch_add:ident, $update:ident, $A:ident, $ptr:literal, $r:literal
    ) => {
        #[doc = concat!("Loads the ", $n, "-byte word at `p` (`order`: `Relaxed`, `Acquire` or `SeqCst`).")]
        ///
        /// # Safety
        /// As the [module](self) says.
        ///
        /// ```
        #[doc = concat!("let w: ", stringify!($t), " = 7;")]
        /// // SAFETY: a local, aligned word.
        #[doc = concat!("let v = unsafe { gex_sync::word::", stringify!($load), "((&raw const w).cast(), std::sync::atomic::Ordering::Acquire) };")]
        /// assert_eq!(v, 7);
        /// ```
        #[inline(always)]
        pub unsafe fn $load(p: *const u8, order: Ordering) -> $t {
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            {
                let _ = order;
                let v: $t;
                // SAFETY: valid and aligned (contract); a plain aligned load, one
                // single-copy atomic access (module documentation).
                unsafe {
                    std::arch::asm!(
                        concat!("mov {v", $r, "}, ", $ptr, " ptr [{p}]"),
                        p = in(reg) p,
                        v = out(reg) v,
                        options(nostack, preserves_flags),
                    )
                };
                v
            }
            #[cfg(miri)]
            {
                let mut b = [0u8; $n];
                for (i, b) in b.iter_mut().enumerate() {
                    // SAFETY: inside the word (contract).
                    *b = unsafe { bytes::load(p.add(i), order) };
                }
                <$t>::from_ne_bytes(b)
            }
            #[cfg(all(not(target_arch = "x86_64"), not(miri)))]
            {
                // SAFETY: valid and aligned (contract).
                unsafe { std::sync::atomic::$A::from_ptr(p.cast_mut().cast()) }.load(order)
            }
        }

        #[doc = concat!("Stores `v` in the ", $n, "-byte word at `p` (`order`: `Relaxed`, `Release` or `SeqCst`).")]
        ///
        /// # Safety
        /// As the [module](self) says.
        ///
        /// ```
        #[doc = concat!("let mut w: ", stringify!($t), " = 0;")]
        /// // SAFETY: a local, aligned word.
        #[doc = concat!("unsafe { gex_sync::word::", stringify!($store), "((&raw mut w).cast(), 9, std::sync::atomic::Ordering::Release) };")]
        /// assert_eq!(w, 9);
        /// ```
        #[inline(always)]
        pub unsafe fn $store(p: *mut u8, v: $t, order: Ordering) {
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            {
                // `SeqCst` needs the store ordered before later loads: `xchg`.
                if order == Ordering::SeqCst {
                    // SAFETY: as in the load; `xchg` is a locked read-modify-write.
                    let _ = unsafe { $swap(p, v) };
                    return;
                }
                // SAFETY: valid and aligned (contract); a plain aligned store.
                unsafe {
                    std::arch::asm!(
                        concat!("mov ", $ptr, " ptr [{p}], {v", $r, "}"),
                        p = in(reg) p,
                        v = in(reg) v,
                        options(nostack, preserves_flags),
                    )
                };
            }
            #[cfg(miri)]
            {
                for (i, b) in v.to_ne_bytes().into_iter().enumerate() {
                    // SAFETY: inside the word (contract).
                    unsafe { bytes::store(p.add(i), b, order) };
                }
            }
            #[cfg(all(not(target_arch = "x86_64"), not(miri)))]
            {
                // SAFETY: valid and aligned (contract).
                unsafe { std::sync::atomic::$A::from_ptr(p.cast()) }.store(v, order)
            }
        }

        #[doc = concat!("Replaces the ", $n, "-byte word at `p` with `v`; returns the old value (sequentially consistent).")]
        ///
        /// # Safety
        /// As the [module](self) says.
        #[inline(always)]
        pub unsafe fn $swap(p: *mut u8, v: $t) -> $t {
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            {
                let mut v = v;
                // SAFETY: valid and aligned (contract); `xchg` with memory is locked.
                unsafe {
                    std::arch::asm!(
                        concat!("xchg ", $ptr, " ptr [{p}], {v", $r, "}"),
                        p = in(reg) p,
                        v = inout(reg) v,
                        options(nostack, preserves_flags),
                    )
                };
                v
            }
            #[cfg(miri)]
            {
                // SAFETY: contract.
                unsafe { $update(p, |_| Some(v)) }
            }
            #[cfg(all(not(target_arch = "x86_64"), not(miri)))]
            {
                // SAFETY: valid and aligned (contract).
                unsafe { std::sync::atomic::$A::from_ptr(p.cast()) }.swap(v, Ordering::SeqCst)
            }
        }

        #[doc = concat!("If the ", $n, "-byte word at `p` is `old`, replaces it with `new`; returns the value found (sequentially consistent).")]
        ///
        /// # Safety
        /// As the [module](self) says.
        ///
        /// ```
        #[doc = concat!("let mut w: ", stringify!($t), " = 3;")]
        /// let p = (&raw mut w).cast();
        /// // SAFETY: a local, aligned word.
        #[doc = concat!("assert_eq!(unsafe { gex_sync::word::", stringify!($cas), "(p, 4, 5) }, 3);")]
        #[doc = concat!("assert_eq!(unsafe { gex_sync::word::", stringify!($cas), "(p, 3, 5) }, 3);")]
        /// assert_eq!(w, 5);
        /// ```
        #[inline(always)]
        pub unsafe fn $cas(p: *mut u8, old: $t, new: $t) -> $t {
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            {
                let found: $t;
                // SAFETY: valid and aligned (contract); `lock cmpxchg`.
                unsafe {
                    std::arch::asm!(
                        concat!("lock cmpxchg ", $ptr, " ptr [{p}], {new", $r, "}"),
                        p = in(reg) p,
                        new = in(reg) new,
                        inout("rax") old => found,
                        options(nostack),
                    )
                };
                found
            }
            #[cfg(miri)]
            {
                // SAFETY: contract.
                unsafe { $update(p, |o| (o == old).then_some(new)) }
            }
            #[cfg(all(not(target_arch = "x86_64"), not(miri)))]
            {
                // SAFETY: valid and aligned (contract).
                match unsafe { std::sync::atomic::$A::from_ptr(p.cast()) }.compare_exchange(
                    old,
                    new,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                ) {
                    Ok(v) | Err(v) => v,
                }
            }
        }

        #[doc = concat!("Adds `v` to the ", $n, "-byte word at `p` (wrapping); returns the old value (sequentially consistent).")]
        ///
        /// # Safety
        /// As the [module](self) says.
        #[inline(always)]
        pub unsafe fn $fetch_add(p: *mut u8, v: $t) -> $t {
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            {
                let mut v = v;
                // SAFETY: valid and aligned (contract); `lock xadd`.
                unsafe {
                    std::arch::asm!(
                        concat!("lock xadd ", $ptr, " ptr [{p}], {v", $r, "}"),
                        p = in(reg) p,
                        v = inout(reg) v,
                        options(nostack),
                    )
                };
                v
            }
            #[cfg(miri)]
            {
                // SAFETY: contract.
                unsafe { $update(p, |o| Some(o.wrapping_add(v))) }
            }
            #[cfg(all(not(target_arch = "x86_64"), not(miri)))]
            {
                // SAFETY: valid and aligned (contract).
                unsafe { std::sync::atomic::$A::from_ptr(p.cast()) }.fetch_add(v, Ordering::SeqCst)
            }
        }

        #[doc = concat!("Replaces the ", $n, "-byte word at `p` with `f(old)` atomically unless `f` returns `None`; returns the old value (sequentially consistent). `f` may run more than once.")]
        ///
        /// # Safety
        /// As the [module](self) says.
        ///
        /// ```
        #[doc = concat!("let mut w: ", stringify!($t), " = 6;")]
        /// // SAFETY: a local, aligned word.
        #[doc = concat!("let old = unsafe { gex_sync::word::", stringify!($update), "((&raw mut w).cast(), |o| Some(o * 7)) };")]
        /// assert_eq!((old, w), (6, 42));
        /// ```
        #[inline]
        pub unsafe fn $update<F: FnMut($t) -> Option<$t>>(p: *mut u8, mut f: F) -> $t {
            #[cfg(miri)]
            {
                let _g = bytes::Lock::take(p);
                let mut b = [0u8; $n];
                for (i, b) in b.iter_mut().enumerate() {
                    // SAFETY: inside the word (contract).
                    *b = unsafe { bytes::load(p.add(i), Ordering::Relaxed) };
                }
                let old = <$t>::from_ne_bytes(b);
                if let Some(new) = f(old) {
                    for (i, b) in new.to_ne_bytes().into_iter().enumerate() {
                        // SAFETY: inside the word (contract).
                        unsafe { bytes::store(p.add(i), b, Ordering::Relaxed) };
                    }
                }
                old
            }
            #[cfg(not(miri))]
            {
                // SAFETY: contract.
                let mut cur = unsafe { $load(p, Ordering::Relaxed) };
                loop {
                    let Some(new) = f(cur) else {
                        return cur;
                    };
                    // SAFETY: contract.
                    let found = unsafe { $cas(p, cur, new) };
                    if found == cur {
                        return cur;
                    }
                    cur = found;
                }
            }
        }
    };
}

word_ops!(
    u32,
    4,
    load32,
    store32,
    swap32,
    cas32,
    fetch_add32,
    update32,
    AtomicU32,
    "dword",
    ":e"
);
word_ops!(
    u64,
    8,
    load64,
    store64,
    swap64,
    cas64,
    fetch_add64,
    update64,
    AtomicU64,
    "qword",
    ""
);

/// A full memory barrier: what `fence(Ordering::SeqCst)` promises, at about half the
/// cost on x86-64, where it is a locked read-modify-write (`lock or` of 0) of a word on
/// the caller's stack instead of `mfence` (Linux's `smp_mb` on x86-64 is the same).
///
/// Why that is a full barrier: in the x86 memory model (Intel SDM vol. 3A, 9.2.2
/// "Memory Ordering in P6 and More Recent Processor Families") reads and writes are not
/// reordered with locked instructions, and locked instructions have a total order; so
/// every load and store before the block is globally visible before any load after it
/// is performed: the store→load order (Dekker: put, quiet, then read a flag another
/// process sets) that only a full barrier gives. `mfence` also orders non-temporal
/// stores and write-combining memory, which no caller has pending here: the copies of
/// [`copy`](crate::copy) use ordinary stores up to 128 bytes and `memmove` beyond
/// (whose non-temporal path ends with its own `sfence`). The block has no `nomem`
/// option, so it is also a compiler barrier for every memory access; by the Rust
/// reference's rules for inline assembly it stands for Rust code with the same effect,
/// `fence(SeqCst)`. Elsewhere (and under Miri) it is that fence.
///
/// Measured on the 2-core VM of docs/performance.md: `mfence` 41-48 ns, the locked
/// `or` 20-22 ns, between a store and a load of other lines.
///
/// ```
/// let flag = std::sync::atomic::AtomicU64::new(0);
/// flag.store(1, std::sync::atomic::Ordering::Relaxed);
/// gex_sync::word::full_fence();
/// assert_eq!(flag.load(std::sync::atomic::Ordering::Relaxed), 1);
/// ```
#[inline(always)]
pub fn full_fence() {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        let mut w = 0u32;
        // SAFETY: a locked `or` of 0 into `w`, a local of this frame that nothing else
        // references (its value is unchanged); what it orders is the module's argument
        // above. No `nomem`: the compiler keeps every memory access on its side.
        unsafe {
            std::arch::asm!(
                "lock or dword ptr [{w}], 0",
                w = in(reg) &raw mut w,
                options(nostack),
            )
        };
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    std::sync::atomic::fence(Ordering::SeqCst);
}
/// The byte code the operations are defined by (run literally under Miri).
#[cfg(miri)]
mod bytes {
    use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

    /// The byte at `p`, loaded with `order` (`Relaxed`, `Acquire` or `SeqCst`).
    ///
    /// # Safety
    /// `p` is valid for reads.
    pub(super) unsafe fn load(p: *const u8, order: Ordering) -> u8 {
        // SAFETY: valid (contract), a byte is always aligned.
        unsafe { AtomicU8::from_ptr(p.cast_mut()) }.load(order)
    }

    /// Stores `v` at `p` with `order` (`Relaxed`, `Release` or `SeqCst`).
    ///
    /// # Safety
    /// `p` is valid for writes.
    pub(super) unsafe fn store(p: *mut u8, v: u8, order: Ordering) {
        // SAFETY: as `load`.
        unsafe { AtomicU8::from_ptr(p) }.store(v, order)
    }

    /// The read-modify-writes' locks, chosen by 8-byte-aligned address.
    static LOCKS: [AtomicBool; 64] = [const { AtomicBool::new(false) }; 64];

    /// One of [`LOCKS`], held until dropped.
    pub(super) struct Lock(&'static AtomicBool);

    impl Lock {
        /// Takes the lock of the word at `p`.
        pub(super) fn take(p: *const u8) -> Lock {
            let l = &LOCKS[(p as usize >> 3) % LOCKS.len()];
            while l
                .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                std::thread::yield_now();
            }
            Lock(l)
        }
    }

    impl Drop for Lock {
        fn drop(&mut self) {
            self.0.store(false, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

    #[test]
    fn every_operation_of_both_widths() {
        let mut w = [0u64; 2];
        let p = w.as_mut_ptr().cast::<u8>();
        // SAFETY: `p` is an aligned word of `w` (and its halves aligned 4-byte words).
        unsafe {
            store64(p, 5, Release);
            assert_eq!(load64(p, Acquire), 5);
            assert_eq!(swap64(p, 9), 5);
            assert_eq!(cas64(p, 1, 2), 9);
            assert_eq!(cas64(p, 9, 2), 9);
            assert_eq!(fetch_add64(p, u64::MAX), 2);
            assert_eq!(update64(p, |o| o.checked_mul(3)), 1);
            assert_eq!(update64(p, |_| None), 3);
            assert_eq!(load64(p, Relaxed), 3);
            store64(p, 0, std::sync::atomic::Ordering::SeqCst);
            let q = p.add(8);
            store32(q.add(4), 7, Relaxed);
            assert_eq!(fetch_add32(q.add(4), 1), 7);
            assert_eq!(swap32(q, 4), 0);
            assert_eq!(cas32(q, 4, 6), 4);
            assert_eq!(update32(q, |o| Some(o + 1)), 6);
            assert_eq!(load32(q, Acquire), 7);
        }
        assert_eq!(w[0], 0);
        assert_eq!(
            w[1],
            u64::from_ne_bytes({
                let mut b = [0u8; 8];
                b[..4].copy_from_slice(&7u32.to_ne_bytes());
                b[4..].copy_from_slice(&8u32.to_ne_bytes());
                b
            })
        );
    }

    /// Read-modify-writes of both widths on the same word from several threads are
    /// atomic with respect to each other (no update lost), while another thread copies
    /// over the neighbouring word with this crate's byte-wise copies.
    #[test]
    fn concurrent_updates_lose_nothing() {
        let n = if cfg!(miri) { 20 } else { 20_000 };
        let mut words = Box::new([0u64; 2]);
        let base = words.as_mut_ptr() as usize;
        std::thread::scope(|s| {
            for t in 0..3u64 {
                s.spawn(move || {
                    let p = base as *mut u8;
                    for _ in 0..n {
                        // SAFETY: an aligned word of `words`, which outlives the scope;
                        // every concurrent access to it is an operation of this module.
                        unsafe {
                            match t {
                                0 => {
                                    let _ = fetch_add64(p, 1);
                                }
                                1 => {
                                    let _ = update64(p, |o| Some(o + 1));
                                }
                                // the low half of the word (little-endian; no carry
                                // reaches the high half below 2^32)
                                _ => {
                                    let lo = if cfg!(target_endian = "little") { 0 } else { 4 };
                                    let _ = fetch_add32(p.add(lo), 1);
                                }
                            }
                        }
                    }
                });
            }
            s.spawn(move || {
                let q = (base + 8) as *mut u8;
                for i in 0..n {
                    // SAFETY: the other word of `words`; only copies touch it.
                    unsafe { crate::copy::atomic_write(q, &(i as u64).to_ne_bytes()) };
                }
            });
        });
        assert_eq!(words[0], 3 * n as u64);
    }
}
