//! The primitives of the entry points on the published [`Pe`]: the lock-free put, get
//! and atomic to a mapped heap (the fast paths), the checked paths through the
//! endpoint or to static data, and quiet.

use super::*;

/// The published PE and where its conduit maps the `len` bytes at symmetric address
/// `addr` of PE `pe`, for a direct copy (inlined into [`put_direct`] and
/// [`get_direct`]); `None` (take the checked path) before publication, for a null
/// local buffer (`local_null`) or a range not mapped here. An empty range inside a
/// mapped heap is a copy of nothing here (no test of `len` on the path of the others).
#[inline(always)]
fn direct_range(
    addr: usize,
    len: usize,
    local_null: bool,
    pe: c_int,
) -> Option<(&'static Pe, *mut u8)> {
    let p = published()?;
    if local_null {
        return None;
    }
    Some((p, p.direct(addr, len, pe as usize)?))
}

/// The lock-free put (issue 27 point 4: the entry points' fast path, inlined into
/// them): `len` bytes from `src` to symmetric address `dst` of PE `pe` when the
/// conduit maps its heap here; `false` (nothing done) otherwise, for the checked path.
///
/// # Safety
/// `src` is valid for reads of `len` bytes (or null: `false`).
#[inline(always)]
pub(crate) unsafe fn put_direct(dst: usize, src: *const u8, len: usize, pe: c_int) -> bool {
    let Some((_, at)) = direct_range(dst, len, src.is_null(), pe) else {
        return false;
    };
    if overlap(src as usize, at as usize, len) {
        // SAFETY: as below.
        unsafe { put_overlapping(at, src, len) };
        return true;
    }
    // SAFETY: `at .. at + len` is inside the mapping of `pe`'s segment (checked against
    // the reachable length), mapped for the life of the process (module documentation);
    // `src` the caller's, not written during the copy (it does not overlap `at ..`,
    // checked); byte-wise atomic stores on the shared side.
    unsafe { gex_sync::copy::atomic_write(at, std::slice::from_raw_parts(src, len)) };
    true
}

/// Whether the local buffer at `local` shares a byte with the `len` bytes at symmetric
/// address `addr` of PE `pe` as this process sees them: through the mapping of `pe`'s
/// heap, or, on this PE, at `addr` itself (also when the heap is reached through the
/// endpoint, `GEX_RMA_PATH=am`). The checked paths then copy through a buffer
/// (`api::rma`'s `put_n` and `get_n`).
pub(crate) fn overlaps_target(addr: usize, len: usize, pe: c_int, local: usize) -> bool {
    let Some(p) = published() else {
        return false;
    };
    if pe as u32 == p.me && overlap(local, addr, len) {
        return true;
    }
    p.direct(addr, len, pe as usize)
        .is_some_and(|at| overlap(local, at as usize, len))
}

/// Whether `[a, a + len)` and `[b, b + len)` may share a byte: a put within this PE's
/// heap, or a local buffer that is a mapping from `shmem_ptr`. The atomic copies need
/// their local side apart from the shared side ([`gex_sync::copy::atomic_write`]'s
/// `data` is a shared borrow, written by nobody during the call), so such copies go
/// through a buffer, as `memmove` would.
///
/// One test, `-len <= a - b <= len` as `a - b + len <= 2 len` in wrapping arithmetic
/// (`len` is at most a heap's length, far below `usize::MAX / 2`): true also for
/// ranges that only touch (`a - b == ±len`) and for equal addresses of length 0, which
/// then take the buffered copy, correct and rare. Its cost on the library's 8-byte
/// get and put (`-DGEXSHMEM_NO_INLINE`; shmem.h's inline calls do not reach them),
/// 6 alternated runs on 2026-12-02: get 2.03-2.17 → 2.18-2.30 ns, put 1.91-2.03 →
/// 2.22-2.33 ns (two separate tests, `a - b < len || b - a < len`, cost the get
/// 2.26-2.54 ns).
#[inline(always)]
fn overlap(a: usize, b: usize, len: usize) -> bool {
    a.wrapping_sub(b).wrapping_add(len) <= len.wrapping_mul(2)
}

/// [`put_direct`] of a source overlapping its destination: the source copied aside
/// first (an allocation: a rare case, off the fast path).
///
/// # Safety
/// `src` valid for reads of `len` bytes; `at .. at + len` inside a mapped heap.
#[cold]
#[inline(never)]
unsafe fn put_overlapping(at: *mut u8, src: *const u8, len: usize) {
    let mut aside = vec![0u8; len];
    // SAFETY: the caller's `src`; `aside` is this function's, apart from it.
    unsafe { std::ptr::copy_nonoverlapping(src, aside.as_mut_ptr(), len) };
    // SAFETY: the caller's `at`; `aside` is not written during the copy.
    unsafe { gex_sync::copy::atomic_write(at, &aside) };
}

/// [`get_direct`] (or [`get_own`]) into a destination overlapping its source, as
/// [`put_overlapping`].
///
/// # Safety
/// `dst` valid for writes of `len` bytes; `at .. at + len` inside a mapped heap.
#[cold]
#[inline(never)]
unsafe fn get_overlapping(dst: *mut u8, at: *const u8, len: usize) {
    let mut aside = vec![0u8; len];
    // SAFETY: the caller's `at`; `aside` is this function's.
    unsafe { gex_sync::copy::atomic_read(at, &mut aside) };
    // SAFETY: the caller's `dst`; `aside` is apart from it.
    unsafe { std::ptr::copy_nonoverlapping(aside.as_ptr(), dst, len) };
}

/// The lock-free get, as [`put_direct`].
///
/// # Safety
/// `dst` is valid for writes of `len` bytes and not otherwise accessed meanwhile (or
/// null: `false`).
#[inline(always)]
pub(crate) unsafe fn get_direct(dst: *mut u8, src: usize, len: usize, pe: c_int) -> bool {
    let Some((p, at)) = direct_range(src, len, dst.is_null(), pe) else {
        return false;
    };
    if pe as u32 == p.me || overlap(dst as usize, at as usize, len) {
        // SAFETY: as below.
        unsafe { get_own(dst, at, len) };
        return true;
    }
    // SAFETY: inside the mapping of `pe`'s segment (checked), mapped for the life of the
    // process; byte-wise atomic loads; `dst` is the caller's, apart from `at ..`
    // (checked).
    unsafe { gex_sync::copy::atomic_read(at, std::slice::from_raw_parts_mut(dst, len)) };
    true
}

/// [`get_direct`] from this PE's own heap: programs spin on gets of their own data, so
/// it serves the others first. Out of line, so that the common path (another PE)
/// calls nothing and saves no register (the 8-byte get's cell, issue 27 point 4).
/// Also a get into a destination that overlaps its source ([`overlap`]), from any PE.
///
/// # Safety
/// As the copy in [`get_direct`]: `at..at + len` inside a mapped heap, `dst` valid for
/// writes of `len` bytes.
#[inline(never)]
unsafe fn get_own(dst: *mut u8, at: *const u8, len: usize) {
    serve();
    if overlap(dst as usize, at as usize, len) {
        // SAFETY: the caller's promise.
        unsafe { get_overlapping(dst, at, len) };
        return;
    }
    // SAFETY: the caller's promise; `dst` apart from `at ..` (checked).
    unsafe { gex_sync::copy::atomic_read(at, std::slice::from_raw_parts_mut(dst, len)) };
}

/// The lock-free atomic, as [`put_direct`]: `Some(old value)` when done (CPU atomic
/// domains, mapped heap, aligned word), `None` for the checked path.
#[inline(always)]
pub(crate) fn amo_direct(
    addr: usize,
    pe: c_int,
    width: u32,
    op: Amo,
    a: u64,
    b: u64,
) -> Option<u64> {
    let p = published()?;
    let w = width as usize;
    let mask = w.wrapping_sub(1);
    if !p.cpu_atomics || !w.is_power_of_two() || addr & mask != 0 {
        return None;
    }
    let at = p.direct(addr, w, pe as usize)?;
    if at as usize & mask != 0 {
        return None;
    }
    if pe as u32 == p.me {
        // Programs spin on atomics of their own PE's words: serve the others.
        serve();
    }
    // SAFETY: inside the mapping of `pe`'s segment (checked), mapped for the life of
    // the process, aligned to its width (checked); every other access to the word is a
    // `gex_sync::word` operation or a byte-wise copy (gex-rma's rule).
    Some(unsafe { word_amo(at, width, op, a, b) })
}

/// `shmem_quiet`'s fast path: a full barrier, done when nothing went through the
/// endpoint since the last quiet; `false`: take [`quiet`].
#[inline(always)]
pub(crate) fn quiet_direct() -> bool {
    if published().is_none() {
        return false;
    }
    gex_sync::word::full_fence();
    !EP_NBI.load(Ordering::Acquire) && OUTSTANDING.load(Ordering::Acquire) == 0
}

/// Polls the endpoint once if no other thread holds the state (that one polls): calls
/// that may be spun on serve the others' active messages.
pub(super) fn serve() {
    try_with(|s| s.ep.poll());
}

/// The published PE, PE number `pe` checked (its world PE), and where this process
/// maps the `len` bytes at symmetric address `addr` of it (`None`: not mapped here);
/// the start of [`put_on`] and [`get_on`].
///
/// # Errors
/// [`ShmemError::NotInitialized`], [`ShmemError::BadPe`].
#[inline(always)]
fn checked_range(
    addr: usize,
    len: usize,
    pe: i32,
) -> Result<(&'static Pe, u32, Option<*mut u8>), ShmemError> {
    let p = self::pe()?;
    let pe = p.pe(pe)?;
    Ok((p, pe, p.direct(addr, len, pe as usize)))
}

/// Puts `src` at symmetric address `dst` of `pe` (a PE number, checked) on context
/// index `ctx` (`None`: the default context). `nbi`: the put may complete later (at the
/// next quiet); else it is complete at its target on return. What does not take the
/// direct path goes through the context's own endpoint when it has one ([`ctx_put`]).
///
/// # Errors
/// As [`State::put`].
#[inline]
pub(crate) fn put_on(
    ctx: Option<usize>,
    dst: usize,
    src: &[u8],
    pe: i32,
    nbi: bool,
) -> Result<(), ShmemError> {
    let (_, pe, mapped) = checked_range(dst, src.len(), pe)?;
    if let Some(at) = mapped {
        // SAFETY: `at .. at + len` is inside the mapping of `pe`'s segment (checked
        // against the mapped length), which stays mapped for the life of the process
        // (module documentation); byte-wise atomic stores, so other PEs' and threads'
        // concurrent accesses give unspecified bytes, not a data race.
        unsafe { gex_sync::copy::atomic_write(at, src) };
        return Ok(());
    }
    if let Some(r) = ctx.and_then(|i| ctx_put(i, dst, src, pe, nbi)) {
        return r;
    }
    with(|s| s.put(dst, src, pe, nbi))
}

/// Gets `dst.len()` bytes from symmetric address `src` of `pe` (checked) on context
/// index `ctx`, as [`put_on`].
///
/// # Errors
/// As [`State::get`].
#[inline]
pub(crate) fn get_on(
    ctx: Option<usize>,
    dst: &mut [u8],
    src: usize,
    pe: i32,
) -> Result<(), ShmemError> {
    let (p, pe, mapped) = checked_range(src, dst.len(), pe)?;
    if let Some(at) = mapped {
        if pe == p.me {
            // Programs spin on gets of their own PE's data: serve the others.
            serve();
        }
        // SAFETY: inside the mapping of `pe`'s segment (checked), mapped for the life of
        // the process; byte-wise atomic loads; `dst` is the caller's own slice.
        unsafe { gex_sync::copy::atomic_read(at, dst) };
        return Ok(());
    }
    if !dst.is_empty() {
        if let Some(r) = ctx.and_then(|i| ctx_get(i, &mut *dst, src, pe)) {
            return r;
        }
    }
    with(|s| s.get(dst, src, pe))
}

/// Atomic `op` on the `width`-byte word at symmetric address `addr` of `pe` (checked);
/// returns the old value (0 for a non-fetching op on the heap, where `fetch` is false).
///
/// # Errors
/// As [`State::amo`].
#[inline]
pub(crate) fn amo(
    addr: usize,
    pe: i32,
    width: u32,
    op: Amo,
    a: u64,
    b: u64,
    fetch: bool,
) -> Result<u64, ShmemError> {
    let p = self::pe()?;
    let pe = p.pe(pe)?;
    // 4 or 8: alignment by mask (a `%` by a run-time width is a division, which was
    // half of the time of a fetch-inc).
    let w = width as usize;
    let mask = w.wrapping_sub(1);
    if p.cpu_atomics && w.is_power_of_two() && addr & mask == 0 {
        if let Some(at) = p
            .direct(addr, w, pe as usize)
            .filter(|&at| at as usize & mask == 0)
        {
            if pe == p.me {
                // Programs spin on atomics of their own PE's words: serve the others.
                serve();
            }
            // SAFETY: inside the mapping of `pe`'s segment (checked), mapped for the life
            // of the process, aligned to its width (checked); every other access to the
            // word is a `gex_sync::word` operation or a byte-wise copy (gex-rma's rule).
            return Ok(unsafe { word_amo(at, width, op, a, b) });
        }
    }
    with(|s| s.amo(addr, pe, width, op, a, b, fetch))
}

/// Performs `op` on the `width`-byte (4 or 8) word at `at` with [`gex_sync::word`]
/// (as gex-rma's CPU atomic domains do) and returns the old value, zero-extended.
///
/// # Safety
/// `at` is valid for reads and writes of `width` bytes for the call and aligned to it;
/// every concurrent access to it is a `gex_sync::word` operation or a `gex_sync::copy`.
#[inline(always)]
unsafe fn word_amo(at: *mut u8, width: u32, op: Amo, a: u64, b: u64) -> u64 {
    use gex_sync::word;
    macro_rules! run {
        ($t:ty, $load:ident, $store:ident, $swap:ident, $cas:ident, $add:ident, $update:ident) => {{
            let (x, y) = (a as $t, b as $t);
            // SAFETY: the caller's promise.
            u64::from(unsafe {
                match op {
                    Amo::Fetch => word::$load(at, Ordering::Acquire),
                    Amo::Set => {
                        word::$store(at, x, Ordering::Release);
                        0
                    }
                    Amo::Swap => word::$swap(at, x),
                    Amo::Cswap => word::$cas(at, x, y),
                    Amo::Add => word::$add(at, x),
                    Amo::And => word::$update(at, |o| Some(o & x)),
                    Amo::Or => word::$update(at, |o| Some(o | x)),
                    Amo::Xor => word::$update(at, |o| Some(o ^ x)),
                }
            })
        }};
    }
    if width == 4 {
        run!(u32, load32, store32, swap32, cas32, fetch_add32, update32)
    } else {
        run!(u64, load64, store64, swap64, cas64, fetch_add64, update64)
    }
}

/// Completes every put, get and atomic issued so far: the direct ones are complete
/// already (a fence orders them before what follows); the endpoint is synced only when
/// an operation went through it.
///
/// # Errors
/// [`ShmemError::NotInitialized`], or as [`State::quiet`].
#[inline]
pub(crate) fn quiet() -> Result<(), ShmemError> {
    self::pe()?;
    gex_sync::word::full_fence();
    if EP_NBI.load(Ordering::Acquire) || OUTSTANDING.load(Ordering::Acquire) != 0 {
        return with(|s| s.quiet());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::overlap;

    /// The one-test overlap agrees with the two-sided definition on every range that
    /// shares a byte, and is true otherwise only for ranges that touch (or empty
    /// ranges at one address): never a missed overlap.
    #[test]
    fn the_overlap_test_misses_no_overlap() {
        let bases = [0usize, 1, 7, 8, 64, 4096, 1 << 40, usize::MAX - 4096];
        let deltas = [
            0isize, 1, -1, 7, -7, 8, -8, 9, -9, 63, -63, 64, -64, 65, -65, 4096,
        ];
        let lens = [0usize, 1, 7, 8, 9, 63, 64, 65, 4096, 1 << 30];
        for &b in &bases {
            for &d in &deltas {
                let a = b.wrapping_add_signed(d);
                for &len in &lens {
                    let shares = len > 0 && (a.wrapping_sub(b) < len || b.wrapping_sub(a) < len);
                    let touches = a.wrapping_sub(b) == len || b.wrapping_sub(a) == len;
                    let got = overlap(a, b, len);
                    if shares {
                        assert!(got, "a {a} b {b} len {len}: an overlap missed");
                    } else {
                        assert_eq!(got, touches || a == b, "a {a} b {b} len {len}");
                    }
                }
            }
        }
    }
}
