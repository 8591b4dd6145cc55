//! Point-to-point synchronisation: the `wait_until` and `test` families and
//! `shmem_signal_wait_until`.

use super::*;

/// Where the `_any` waits and tests start looking: each call starts after the index the
/// previous one returned, so that a satisfied element cannot hide the others.
static ANY_CURSOR: gex_sync::atomic::AtomicUsize = gex_sync::atomic::AtomicUsize::new(0);

/// The hit of `hits` (ascending) at or after the cursor, cyclically; moves the cursor past it.
fn pick_any(hits: &[usize]) -> Option<usize> {
    use gex_sync::atomic::Ordering;
    let c = ANY_CURSOR.load(Ordering::Relaxed);
    let i = hits
        .iter()
        .copied()
        .find(|&i| i >= c)
        .or_else(|| hits.first().copied())?;
    ANY_CURSOR.store(i + 1, Ordering::Relaxed);
    Some(i)
}

/// `SHMEM_CMP_*` of shmem.h.
fn compare<T: PartialOrd>(a: T, cmp: c_int, b: T) -> Result<bool, ShmemError> {
    Ok(match cmp {
        0 => a == b,
        1 => a != b,
        2 => a > b,
        3 => a <= b,
        4 => a < b,
        5 => a >= b,
        _ => {
            return Err(ShmemError::Invalid(
                format!("comparison operator {cmp}").into(),
            ));
        }
    })
}

/// Polls until `done` (which reads local memory) is true; the lock is taken per poll.
pub(super) fn wait_for(
    mut done: impl FnMut() -> Result<bool, ShmemError>,
) -> Result<(), ShmemError> {
    let mut idle = 0u32;
    loop {
        if done()? {
            return Ok(());
        }
        if state::poll_once()? == 0 {
            idle += 1;
            if idle > 16 {
                std::thread::yield_now();
            }
        }
    }
}

/// Element `i` of the caller's array, read volatile (other PEs write it).
///
/// # Safety
/// `p` is valid for reading `i + 1` elements.
unsafe fn vread<T: Copy>(p: *const T, i: usize) -> T {
    // SAFETY: the caller's promise.
    unsafe { std::ptr::read_volatile(p.add(i)) }
}

/// Whether element `i` is excluded by `status` (NULL: none is).
///
/// # Safety
/// `status` is NULL or valid for reading `i + 1` ints.
unsafe fn excluded(status: *const c_int, i: usize) -> bool {
    // SAFETY: the caller's promise.
    !status.is_null() && unsafe { *status.add(i) } != 0
}

/// The indices of `0..n` not excluded whose element satisfies the comparison (with
/// `vals[i]` when `vals` is not NULL, else `val`).
///
/// # Safety
/// `ivars` (and `vals` if not NULL) valid for `n` elements, `status` NULL or for `n` ints.
unsafe fn matching<T: Copy + PartialOrd>(
    ivars: *const T,
    n: usize,
    status: *const c_int,
    cmp: c_int,
    val: T,
    vals: *const T,
) -> Result<(usize, Vec<usize>), ShmemError> {
    let mut live = 0;
    let mut hit = Vec::new();
    for i in 0..n {
        // SAFETY: `i < n` (the caller's promise).
        if unsafe { excluded(status, i) } {
            continue;
        }
        live += 1;
        let v = if vals.is_null() {
            val
        } else {
            // SAFETY: `i < n`.
            unsafe { *vals.add(i) }
        };
        // SAFETY: `i < n`.
        if compare(unsafe { vread(ivars, i) }, cmp, v)? {
            hit.push(i);
        }
    }
    Ok((live, hit))
}

macro_rules! p2p {
    ($($tn:ident $t:ty;)*) => { paste::paste! { $(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _wait_until>](ivar: *mut $t, cmp: c_int, value: $t) {
            // SAFETY: the caller's variable.
            entry("wait_until", || wait_for(|| compare(unsafe { vread(ivar, 0) }, cmp, value)))
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _wait>](ivar: *mut $t, value: $t) {
            // SAFETY: the caller's variable.
            entry("wait", || wait_for(|| compare(unsafe { vread(ivar, 0) }, 1, value)))
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _test>](ivar: *mut $t, cmp: c_int, value: $t) -> c_int {
            entry("test", || {
                state::poll_once()?;
                // SAFETY: the caller's variable.
                Ok(c_int::from(compare(unsafe { vread(ivar, 0) }, cmp, value)?))
            })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _wait_until_all>](ivars: *mut $t, n: usize, status: *const c_int, cmp: c_int, value: $t) {
            // SAFETY: the caller's arrays.
            entry("wait_until_all", || wait_for(|| unsafe { matching(ivars, n, status, cmp, value, std::ptr::null()) }.map(|(l, h)| l == h.len())))
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _wait_until_all_vector>](ivars: *mut $t, n: usize, status: *const c_int, cmp: c_int, values: *const $t) {
            // SAFETY: the caller's arrays.
            entry("wait_until_all_vector", || wait_for(|| unsafe { matching(ivars, n, status, cmp, Default::default(), values) }.map(|(l, h)| l == h.len())))
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _wait_until_any>](ivars: *mut $t, n: usize, status: *const c_int, cmp: c_int, value: $t) -> usize {
            // SAFETY: the caller's arrays.
            unsafe { [<shmem_ $tn _wait_until_any_vector>](ivars, n, status, cmp, std::ptr::null(), value) }
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _wait_until_any_vector>](ivars: *mut $t, n: usize, status: *const c_int, cmp: c_int, values: *const $t, value: $t) -> usize {
            let mut out = usize::MAX;
            entry("wait_until_any", || wait_for(|| {
                // SAFETY: the caller's arrays.
                let (l, h) = unsafe { matching(ivars, n, status, cmp, value, values) }?;
                if let Some(i) = pick_any(&h) {
                    out = i;
                }
                Ok(l == 0 || !h.is_empty())
            }));
            out
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _wait_until_some>](ivars: *mut $t, n: usize, indices: *mut usize, status: *const c_int, cmp: c_int, value: $t) -> usize {
            // SAFETY: the caller's arrays.
            unsafe { [<shmem_ $tn _wait_until_some_vector>](ivars, n, indices, status, cmp, std::ptr::null(), value) }
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _wait_until_some_vector>](ivars: *mut $t, n: usize, indices: *mut usize, status: *const c_int, cmp: c_int, values: *const $t, value: $t) -> usize {
            let mut found = Vec::new();
            entry("wait_until_some", || wait_for(|| {
                // SAFETY: the caller's arrays.
                let (l, h) = unsafe { matching(ivars, n, status, cmp, value, values) }?;
                found = h;
                Ok(l == 0 || !found.is_empty())
            }));
            for (k, &i) in found.iter().enumerate() {
                // SAFETY: `indices` has room for `n` >= found.len() entries.
                unsafe { indices.add(k).write(i) };
            }
            found.len()
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _test_all>](ivars: *mut $t, n: usize, status: *const c_int, cmp: c_int, value: $t) -> c_int {
            entry("test_all", || {
                state::poll_once()?;
                // SAFETY: the caller's arrays.
                let (l, h) = unsafe { matching(ivars, n, status, cmp, value, std::ptr::null()) }?;
                Ok(c_int::from(l == h.len()))
            })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _test_all_vector>](ivars: *mut $t, n: usize, status: *const c_int, cmp: c_int, values: *const $t) -> c_int {
            entry("test_all_vector", || {
                state::poll_once()?;
                // SAFETY: the caller's arrays.
                let (l, h) = unsafe { matching(ivars, n, status, cmp, Default::default(), values) }?;
                Ok(c_int::from(l == h.len()))
            })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _test_any>](ivars: *mut $t, n: usize, status: *const c_int, cmp: c_int, value: $t) -> usize {
            // SAFETY: the caller's arrays.
            unsafe { [<shmem_ $tn _test_any_vector>](ivars, n, status, cmp, std::ptr::null(), value) }
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _test_any_vector>](ivars: *mut $t, n: usize, status: *const c_int, cmp: c_int, values: *const $t, value: $t) -> usize {
            entry("test_any", || {
                state::poll_once()?;
                // SAFETY: the caller's arrays.
                let (_, h) = unsafe { matching(ivars, n, status, cmp, value, values) }?;
                Ok(pick_any(&h).unwrap_or(usize::MAX))
            })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _test_some>](ivars: *mut $t, n: usize, indices: *mut usize, status: *const c_int, cmp: c_int, value: $t) -> usize {
            // SAFETY: the caller's arrays.
            unsafe { [<shmem_ $tn _test_some_vector>](ivars, n, indices, status, cmp, std::ptr::null(), value) }
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _test_some_vector>](ivars: *mut $t, n: usize, indices: *mut usize, status: *const c_int, cmp: c_int, values: *const $t, value: $t) -> usize {
            entry("test_some", || {
                state::poll_once()?;
                // SAFETY: the caller's arrays.
                let (_, h) = unsafe { matching(ivars, n, status, cmp, value, values) }?;
                for (k, &i) in h.iter().enumerate() {
                    // SAFETY: `indices` has room for `n` >= h.len() entries.
                    unsafe { indices.add(k).write(i) };
                }
                Ok(h.len())
            })
        }
    )* } };
}

p2p!(
    short i16; int i32; long i64; longlong i64; ushort u16; uint u32; ulong u64;
    ulonglong u64; int32 i32; int64 i64; uint32 u32; uint64 u64; size usize; ptrdiff isize;
);

#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_signal_wait_until(
    sig_addr: *mut u64,
    cmp: c_int,
    value: u64,
) -> u64 {
    entry("shmem_signal_wait_until", || {
        // SAFETY: the caller's signal word.
        wait_for(|| compare(unsafe { vread(sig_addr, 0) }, cmp, value))?;
        // SAFETY: as above.
        Ok(unsafe { vread(sig_addr, 0) })
    })
}
