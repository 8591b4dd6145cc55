//! RMA: the put and get families (sized, strided, bulk, scalar, with signal), the
//! signal fetch, fence and quiet.

use super::*;

/// Put of `n` elements of `size` bytes.
unsafe fn put_n(
    ctx: *mut c_void,
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
    size: usize,
    pe: c_int,
    nbi: bool,
) -> Result<(), ShmemError> {
    let pe = ctx_pe(ctx, pe)?;
    // SAFETY: the caller's promise for `src`.
    let src = unsafe { rd(src, bytes(n, size)?) }?;
    state::put_on(ctx_index(ctx), dst as usize, src, pe, nbi)
}

/// The fast path of a put (`get` false: `src` to symmetric `dst`) or a get (`get`
/// true: symmetric `src` to `dst`) on the default context, inlined into the entry
/// points: a copy through the mapping of a mapped PE's heap, without `catch_unwind`,
/// the lock or a call; `false`: nothing done, take the checked path (`put_n`/`get_n`
/// under `entry`).
///
/// # Safety
/// As `put_n` / `get_n`.
#[inline(always)]
unsafe fn rma_fast(
    get: bool,
    ctx: *mut c_void,
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
    size: usize,
    pe: c_int,
) -> bool {
    match n.checked_mul(size) {
        // SAFETY: the caller's promise for `src` (put) or `dst` (get).
        Some(len) if ctx == CTX_DEFAULT => unsafe {
            if get {
                state::get_direct(dst.cast(), src as usize, len, pe)
            } else {
                state::put_direct(dst as usize, src.cast(), len, pe)
            }
        },
        _ => false,
    }
}

/// Get of `n` elements of `size` bytes.
unsafe fn get_n(
    ctx: *mut c_void,
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
    size: usize,
    pe: c_int,
) -> Result<(), ShmemError> {
    let pe = ctx_pe(ctx, pe)?;
    // SAFETY: the caller's promise for `dst`.
    let dst = unsafe { wr(dst, bytes(n, size)?) }?;
    state::get_on(ctx_index(ctx), dst, src as usize, pe)
}

/// Strided put: element `i` of `src` (stride `sst`) to element `i` of `dst` (stride `dst_s`).
unsafe fn iput_n(
    ctx: *mut c_void,
    dst: *mut c_void,
    src: *const c_void,
    dst_s: isize,
    sst: isize,
    n: usize,
    size: usize,
    pe: c_int,
) -> Result<(), ShmemError> {
    let pe = ctx_pe(ctx, pe)?;
    with(|s| {
        let pe = s.pe(pe)?;
        for i in 0..n as isize {
            let d = (dst as isize).wrapping_add(i.wrapping_mul(dst_s).wrapping_mul(size as isize));
            let sp = (src as isize).wrapping_add(i.wrapping_mul(sst).wrapping_mul(size as isize));
            // SAFETY: element `i` of the caller's strided source.
            let e = unsafe { rd(sp as *const c_void, size) }?;
            s.put(d as usize, e, pe, true)?;
        }
        s.quiet()
    })
}

/// Strided get.
unsafe fn iget_n(
    ctx: *mut c_void,
    dst: *mut c_void,
    src: *const c_void,
    dst_s: isize,
    sst: isize,
    n: usize,
    size: usize,
    pe: c_int,
) -> Result<(), ShmemError> {
    let pe = ctx_pe(ctx, pe)?;
    with(|s| {
        let pe = s.pe(pe)?;
        for i in 0..n as isize {
            let d = (dst as isize).wrapping_add(i.wrapping_mul(dst_s).wrapping_mul(size as isize));
            let sp = (src as isize).wrapping_add(i.wrapping_mul(sst).wrapping_mul(size as isize));
            // SAFETY: element `i` of the caller's strided destination.
            let e = unsafe { wr(d as *mut c_void, size) }?;
            s.get(e, sp as usize, pe)?;
        }
        Ok(())
    })
}

/// `SHMEM_SIGNAL_SET` and `SHMEM_SIGNAL_ADD`.
const SIGNAL_SET: c_int = 0;
const SIGNAL_ADD: c_int = 1;

/// Put, then the signal update once the data is at the target.
unsafe fn put_signal_n(
    ctx: *mut c_void,
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
    size: usize,
    sig: *mut u64,
    signal: u64,
    op: c_int,
    pe: c_int,
) -> Result<(), ShmemError> {
    let pe = ctx_pe(ctx, pe)?;
    // SAFETY: the caller's promise for `src`.
    let src = unsafe { rd(src, bytes(n, size)?) }?;
    let amo = match op {
        SIGNAL_SET => Amo::Set,
        SIGNAL_ADD => Amo::Add,
        _ => return Err(ShmemError::Invalid(format!("signal operator {op}"))),
    };
    with(|s| {
        let pe = s.pe(pe)?;
        s.put(dst as usize, src, pe, false)?;
        s.amo(sig as usize, pe, 8, amo, signal, 0, false)?;
        Ok(())
    })
}

macro_rules! rma_sized {
    ($($sz:tt $size:expr;)*) => { paste::paste! { $(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_put $sz>](ctx: *mut c_void, dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            if unsafe { rma_fast(false, ctx, dest, source, nelems, $size, pe) } {
                return;
            }
            // SAFETY: the caller's promise (this module's).
            entry("put", || unsafe { put_n(ctx, dest, source, nelems, $size, pe, false) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_put $sz>](dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            if unsafe { rma_fast(false, CTX_DEFAULT, dest, source, nelems, $size, pe) } {
                return;
            }
            // SAFETY: the caller's promise (this module's).
            entry("put", || unsafe { put_n(CTX_DEFAULT, dest, source, nelems, $size, pe, false) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_put $sz _nbi>](ctx: *mut c_void, dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            if unsafe { rma_fast(false, ctx, dest, source, nelems, $size, pe) } {
                return;
            }
            // SAFETY: the caller's promise (this module's).
            entry("put_nbi", || unsafe { put_n(ctx, dest, source, nelems, $size, pe, true) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_put $sz _nbi>](dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            if unsafe { rma_fast(false, CTX_DEFAULT, dest, source, nelems, $size, pe) } {
                return;
            }
            // SAFETY: the caller's promise (this module's).
            entry("put_nbi", || unsafe { put_n(CTX_DEFAULT, dest, source, nelems, $size, pe, true) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_get $sz>](ctx: *mut c_void, dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            if unsafe { rma_fast(true, ctx, dest, source, nelems, $size, pe) } {
                return;
            }
            // SAFETY: the caller's promise (this module's).
            entry("get", || unsafe { get_n(ctx, dest, source, nelems, $size, pe) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_get $sz>](dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            if unsafe { rma_fast(true, CTX_DEFAULT, dest, source, nelems, $size, pe) } {
                return;
            }
            // SAFETY: the caller's promise (this module's).
            entry("get", || unsafe { get_n(CTX_DEFAULT, dest, source, nelems, $size, pe) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_get $sz _nbi>](ctx: *mut c_void, dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            if unsafe { rma_fast(true, ctx, dest, source, nelems, $size, pe) } {
                return;
            }
            // SAFETY: the caller's promise (this module's).
            entry("get_nbi", || unsafe { get_n(ctx, dest, source, nelems, $size, pe) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_get $sz _nbi>](dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            if unsafe { rma_fast(true, CTX_DEFAULT, dest, source, nelems, $size, pe) } {
                return;
            }
            // SAFETY: the caller's promise (this module's).
            entry("get_nbi", || unsafe { get_n(CTX_DEFAULT, dest, source, nelems, $size, pe) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_put $sz _signal>](ctx: *mut c_void, dest: *mut c_void, source: *const c_void, nelems: usize, sig_addr: *mut u64, signal: u64, sig_op: c_int, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            entry("put_signal", || unsafe { put_signal_n(ctx, dest, source, nelems, $size, sig_addr, signal, sig_op, pe) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_put $sz _signal>](dest: *mut c_void, source: *const c_void, nelems: usize, sig_addr: *mut u64, signal: u64, sig_op: c_int, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            entry("put_signal", || unsafe { put_signal_n(CTX_DEFAULT, dest, source, nelems, $size, sig_addr, signal, sig_op, pe) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_put $sz _signal_nbi>](ctx: *mut c_void, dest: *mut c_void, source: *const c_void, nelems: usize, sig_addr: *mut u64, signal: u64, sig_op: c_int, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            entry("put_signal_nbi", || unsafe { put_signal_n(ctx, dest, source, nelems, $size, sig_addr, signal, sig_op, pe) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_put $sz _signal_nbi>](dest: *mut c_void, source: *const c_void, nelems: usize, sig_addr: *mut u64, signal: u64, sig_op: c_int, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            entry("put_signal_nbi", || unsafe { put_signal_n(CTX_DEFAULT, dest, source, nelems, $size, sig_addr, signal, sig_op, pe) })
        }
    )* } };
}

macro_rules! rma_strided {
    ($($sz:tt $size:expr;)*) => { paste::paste! { $(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_iput $sz>](ctx: *mut c_void, dest: *mut c_void, source: *const c_void, dst: isize, sst: isize, nelems: usize, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            entry("iput", || unsafe { iput_n(ctx, dest, source, dst, sst, nelems, $size, pe) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_iput $sz>](dest: *mut c_void, source: *const c_void, dst: isize, sst: isize, nelems: usize, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            entry("iput", || unsafe { iput_n(CTX_DEFAULT, dest, source, dst, sst, nelems, $size, pe) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_iget $sz>](ctx: *mut c_void, dest: *mut c_void, source: *const c_void, dst: isize, sst: isize, nelems: usize, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            entry("iget", || unsafe { iget_n(ctx, dest, source, dst, sst, nelems, $size, pe) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_iget $sz>](dest: *mut c_void, source: *const c_void, dst: isize, sst: isize, nelems: usize, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            entry("iget", || unsafe { iget_n(CTX_DEFAULT, dest, source, dst, sst, nelems, $size, pe) })
        }
    )* } };
}

macro_rules! rma_bulk {
    ($($tn:ident $size:expr;)*) => { paste::paste! { $(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _put>](ctx: *mut c_void, dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            if unsafe { rma_fast(false, ctx, dest, source, nelems, $size, pe) } {
                return;
            }
            // SAFETY: the caller's promise (this module's).
            entry("put", || unsafe { put_n(ctx, dest, source, nelems, $size, pe, false) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _put>](dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            if unsafe { rma_fast(false, CTX_DEFAULT, dest, source, nelems, $size, pe) } {
                return;
            }
            // SAFETY: the caller's promise (this module's).
            entry("put", || unsafe { put_n(CTX_DEFAULT, dest, source, nelems, $size, pe, false) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _put_nbi>](ctx: *mut c_void, dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            if unsafe { rma_fast(false, ctx, dest, source, nelems, $size, pe) } {
                return;
            }
            // SAFETY: the caller's promise (this module's).
            entry("put_nbi", || unsafe { put_n(ctx, dest, source, nelems, $size, pe, true) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _put_nbi>](dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            if unsafe { rma_fast(false, CTX_DEFAULT, dest, source, nelems, $size, pe) } {
                return;
            }
            // SAFETY: the caller's promise (this module's).
            entry("put_nbi", || unsafe { put_n(CTX_DEFAULT, dest, source, nelems, $size, pe, true) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _get>](ctx: *mut c_void, dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            if unsafe { rma_fast(true, ctx, dest, source, nelems, $size, pe) } {
                return;
            }
            // SAFETY: the caller's promise (this module's).
            entry("get", || unsafe { get_n(ctx, dest, source, nelems, $size, pe) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _get>](dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            if unsafe { rma_fast(true, CTX_DEFAULT, dest, source, nelems, $size, pe) } {
                return;
            }
            // SAFETY: the caller's promise (this module's).
            entry("get", || unsafe { get_n(CTX_DEFAULT, dest, source, nelems, $size, pe) })
        }
        // A get_nbi completes before it returns (allowed: completion at the next quiet
        // at the latest).
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _get_nbi>](ctx: *mut c_void, dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            if unsafe { rma_fast(true, ctx, dest, source, nelems, $size, pe) } {
                return;
            }
            // SAFETY: the caller's promise (this module's).
            entry("get_nbi", || unsafe { get_n(ctx, dest, source, nelems, $size, pe) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _get_nbi>](dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            if unsafe { rma_fast(true, CTX_DEFAULT, dest, source, nelems, $size, pe) } {
                return;
            }
            // SAFETY: the caller's promise (this module's).
            entry("get_nbi", || unsafe { get_n(CTX_DEFAULT, dest, source, nelems, $size, pe) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _iput>](ctx: *mut c_void, dest: *mut c_void, source: *const c_void, dst: isize, sst: isize, nelems: usize, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            entry("iput", || unsafe { iput_n(ctx, dest, source, dst, sst, nelems, $size, pe) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _iput>](dest: *mut c_void, source: *const c_void, dst: isize, sst: isize, nelems: usize, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            entry("iput", || unsafe { iput_n(CTX_DEFAULT, dest, source, dst, sst, nelems, $size, pe) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _iget>](ctx: *mut c_void, dest: *mut c_void, source: *const c_void, dst: isize, sst: isize, nelems: usize, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            entry("iget", || unsafe { iget_n(ctx, dest, source, dst, sst, nelems, $size, pe) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _iget>](dest: *mut c_void, source: *const c_void, dst: isize, sst: isize, nelems: usize, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            entry("iget", || unsafe { iget_n(CTX_DEFAULT, dest, source, dst, sst, nelems, $size, pe) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _put_signal>](ctx: *mut c_void, dest: *mut c_void, source: *const c_void, nelems: usize, sig_addr: *mut u64, signal: u64, sig_op: c_int, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            entry("put_signal", || unsafe { put_signal_n(ctx, dest, source, nelems, $size, sig_addr, signal, sig_op, pe) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _put_signal>](dest: *mut c_void, source: *const c_void, nelems: usize, sig_addr: *mut u64, signal: u64, sig_op: c_int, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            entry("put_signal", || unsafe { put_signal_n(CTX_DEFAULT, dest, source, nelems, $size, sig_addr, signal, sig_op, pe) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _put_signal_nbi>](ctx: *mut c_void, dest: *mut c_void, source: *const c_void, nelems: usize, sig_addr: *mut u64, signal: u64, sig_op: c_int, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            entry("put_signal_nbi", || unsafe { put_signal_n(ctx, dest, source, nelems, $size, sig_addr, signal, sig_op, pe) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _put_signal_nbi>](dest: *mut c_void, source: *const c_void, nelems: usize, sig_addr: *mut u64, signal: u64, sig_op: c_int, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            entry("put_signal_nbi", || unsafe { put_signal_n(CTX_DEFAULT, dest, source, nelems, $size, sig_addr, signal, sig_op, pe) })
        }
    )* } };
}

macro_rules! rma_scalar {
    ($($tn:ident $t:ty;)*) => { paste::paste! { $(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _p>](ctx: *mut c_void, dest: *mut $t, value: $t, pe: c_int) {
            let v = value;
            // SAFETY: `v` is a local of one element.
            if unsafe { rma_fast(false, ctx, dest.cast(), (&raw const v).cast(), 1, size_of::<$t>(), pe) } {
                return;
            }
            // SAFETY: `v` is a local of one element.
            entry("p", || unsafe { put_n(ctx, dest.cast(), (&raw const v).cast(), 1, size_of::<$t>(), pe, false) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _p>](dest: *mut $t, value: $t, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            unsafe { [<shmem_ctx_ $tn _p>](CTX_DEFAULT, dest, value, pe) }
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _g>](ctx: *mut c_void, source: *const $t, pe: c_int) -> $t {
            let mut v: $t = Default::default();
            // SAFETY: `v` is a local of one element.
            if unsafe { rma_fast(true, ctx, (&raw mut v).cast(), source.cast(), 1, size_of::<$t>(), pe) } {
                return v;
            }
            // SAFETY: `v` is a local of one element.
            entry("g", || unsafe { get_n(ctx, (&raw mut v).cast(), source.cast(), 1, size_of::<$t>(), pe) });
            v
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _g>](source: *const $t, pe: c_int) -> $t {
            // SAFETY: the caller's promise (this module's).
            unsafe { [<shmem_ctx_ $tn _g>](CTX_DEFAULT, source, pe) }
        }
    )* } };
}

rma_bulk!(
    float 4; double 8; longdouble 16; char 1; schar 1; short 2; int 4; long 8; longlong 8;
    uchar 1; ushort 2; uint 4; ulong 8; ulonglong 8; int8 1; int16 2; int32 4; int64 8;
    uint8 1; uint16 2; uint32 4; uint64 8; size 8; ptrdiff 8;
);
rma_sized!(mem 1; 8 1; 16 2; 32 4; 64 8; 128 16;);
rma_strided!(8 1; 16 2; 32 4; 64 8; 128 16;);
rma_scalar!(
    float f32; double f64; char i8; schar i8; short i16; int i32; long i64; longlong i64;
    uchar u8; ushort u16; uint u32; ulong u64; ulonglong u64; int8 i8; int16 i16;
    int32 i32; int64 i64; uint8 u8; uint16 u16; uint32 u32; uint64 u64; size usize;
    ptrdiff isize;
);

#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_signal_fetch(sig_addr: *const u64) -> u64 {
    entry("shmem_signal_fetch", || {
        if sig_addr.is_null() {
            return Err(ShmemError::Invalid("NULL sig_addr".into()));
        }
        // Programs spin on it: it polls, so that signals to static data arrive.
        state::poll_once()?;
        // SAFETY: the caller's signal word, read atomically (remote updates are atomics).
        Ok(
            unsafe { gex_sync::atomic::AtomicU64::from_ptr(sig_addr.cast_mut()) }
                .load(gex_sync::atomic::Ordering::Acquire),
        )
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_ctx_fence(ctx: *mut c_void) {
    entry("shmem_fence", || {
        if !ctx_live(ctx)? {
            return Ok(());
        }
        match ctx_index(ctx) {
            Some(i) => state::ctx_quiet(i),
            None => state::quiet(),
        }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_fence() {
    if state::quiet_direct() {
        return;
    }
    shmem_ctx_fence(CTX_DEFAULT)
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_ctx_quiet(ctx: *mut c_void) {
    entry("shmem_quiet", || {
        if !ctx_live(ctx)? {
            return Ok(());
        }
        match ctx_index(ctx) {
            Some(i) => state::ctx_quiet(i),
            None => state::quiet(),
        }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_quiet() {
    if state::quiet_direct() {
        return;
    }
    shmem_ctx_quiet(CTX_DEFAULT)
}
