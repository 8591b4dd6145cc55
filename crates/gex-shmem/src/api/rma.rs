//! RMA: the put and get families (sized, strided, bulk, scalar, with signal), the
//! signal fetch, fence and quiet.

use super::*;

/// The operands of an entry point: `n` elements of `size` bytes from `src` to `dst` on
/// context `ctx` with PE `pe` (of the context's team); the symmetric side is `dst` for a
/// put, `src` for a get.
#[derive(Clone, Copy)]
struct Xfer {
    ctx: *mut c_void,
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
    size: usize,
    pe: c_int,
}

/// Put of `x` (`nbi`: completion may wait for the next quiet).
unsafe fn put_n(x: Xfer, nbi: bool) -> Result<(), ShmemError> {
    let pe = ctx_pe(x.ctx, x.pe)?;
    let len = bytes(x.n, x.size)?;
    if state::overlaps_target(x.dst as usize, len, pe, x.src as usize) {
        // The source is (partly) the destination: copied aside first, as `memmove`
        // would, so that no borrow of it lives while it is written.
        let mut aside = vec![0u8; len];
        // SAFETY: the caller's promise for `src` (non-null: it overlaps a mapped
        // range); `aside` is this function's.
        unsafe { std::ptr::copy_nonoverlapping(x.src.cast::<u8>(), aside.as_mut_ptr(), len) };
        return state::put_on(ctx_index(x.ctx), x.dst as usize, &aside, pe, nbi);
    }
    // SAFETY: the caller's promise for `src`, apart from the destination (checked).
    let src = unsafe { rd(x.src, len) }?;
    state::put_on(ctx_index(x.ctx), x.dst as usize, src, pe, nbi)
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
unsafe fn rma_fast(get: bool, x: Xfer) -> bool {
    match x.n.checked_mul(x.size) {
        // SAFETY: the caller's promise for `src` (put) or `dst` (get).
        Some(len) if x.ctx == CTX_DEFAULT => unsafe {
            if get {
                state::get_direct(x.dst.cast(), x.src as usize, len, x.pe)
            } else {
                state::put_direct(x.dst as usize, x.src.cast(), len, x.pe)
            }
        },
        _ => false,
    }
}

/// The checked path of a contiguous put (`GET` false; `NBI`: completion may wait for
/// the next quiet) or get, under `entry`: out of line and cold, its operands passed in
/// registers, so that the entry points' fast paths store nothing for it (they stored
/// an `Xfer` on every call: issue 27 point 4's 8-byte cells).
///
/// # Safety
/// As `put_n` / `get_n`.
#[cold]
#[inline(never)]
unsafe fn contig_slow<const GET: bool, const NBI: bool>(
    ctx: *mut c_void,
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
    size: usize,
    pe: c_int,
) {
    let x = Xfer {
        ctx,
        dst,
        src,
        n,
        size,
        pe,
    };
    let what = match (GET, NBI) {
        (false, false) => "put",
        (false, true) => "put_nbi",
        (true, false) => "get",
        (true, true) => "get_nbi",
    };
    // SAFETY: the caller's promise.
    entry(what, || unsafe {
        if GET { get_n(x) } else { put_n(x, NBI) }
    })
}

/// `shmem_p`'s checked path, as [`contig_slow`]: the value is stored in this frame
/// only here.
///
/// # Safety
/// As `put_n` for one element at `dst`.
#[cold]
#[inline(never)]
unsafe fn p_slow<T: Copy>(ctx: *mut c_void, dst: *mut T, value: T, pe: c_int) {
    let v = value;
    let x = Xfer {
        ctx,
        dst: dst.cast(),
        src: (&raw const v).cast(),
        n: 1,
        size: size_of::<T>(),
        pe,
    };
    // SAFETY: `v` is a local of one element; the caller's promise for `dst`.
    entry("p", || unsafe { put_n(x, false) })
}

/// `shmem_g`'s checked path, as [`p_slow`].
///
/// # Safety
/// As `get_n` for one element at `src`.
#[cold]
#[inline(never)]
unsafe fn g_slow<T: Copy + Default>(ctx: *mut c_void, src: *const T, pe: c_int) -> T {
    let mut v = T::default();
    let x = Xfer {
        ctx,
        dst: (&raw mut v).cast(),
        src: src.cast(),
        n: 1,
        size: size_of::<T>(),
        pe,
    };
    // SAFETY: `v` is a local of one element; the caller's promise for `src`.
    entry("g", || unsafe { get_n(x) });
    v
}

/// Get of `x`.
unsafe fn get_n(x: Xfer) -> Result<(), ShmemError> {
    let pe = ctx_pe(x.ctx, x.pe)?;
    let len = bytes(x.n, x.size)?;
    if state::overlaps_target(x.src as usize, len, pe, x.dst as usize) {
        // The destination is (partly) the source: received aside first (`put_n`).
        let mut aside = vec![0u8; len];
        state::get_on(ctx_index(x.ctx), &mut aside, x.src as usize, pe)?;
        // SAFETY: the caller's promise for `dst` (non-null: it overlaps a mapped
        // range); `aside` is this function's.
        unsafe { std::ptr::copy_nonoverlapping(aside.as_ptr(), x.dst.cast::<u8>(), len) };
        return Ok(());
    }
    // SAFETY: the caller's promise for `dst`, apart from the source (checked).
    let dst = unsafe { wr(x.dst, len) }?;
    state::get_on(ctx_index(x.ctx), dst, x.src as usize, pe)
}

/// Strided put (`get` false) or get (`get` true) of `x`: element `i` of `src` (stride
/// `sst`) to element `i` of `dst` (stride `dst_s`), strides in elements.
unsafe fn strided_n(get: bool, x: Xfer, dst_s: isize, sst: isize) -> Result<(), ShmemError> {
    let (size, pe) = (x.size, ctx_pe(x.ctx, x.pe)?);
    with(|s| {
        let pe = s.pe(pe)?;
        for i in 0..x.n as isize {
            let d = strided_at(x.dst as isize, i, dst_s, size);
            let sp = strided_at(x.src as isize, i, sst, size);
            if get {
                // SAFETY: element `i` of the caller's strided destination.
                let e = unsafe { wr(d as *mut c_void, size) }?;
                s.get(e, sp as usize, pe)?;
            } else {
                // SAFETY: element `i` of the caller's strided source.
                let e = unsafe { rd(sp as *const c_void, size) }?;
                s.put(d as usize, e, pe, true)?;
            }
        }
        if get { Ok(()) } else { s.quiet() }
    })
}

/// `SHMEM_SIGNAL_SET` and `SHMEM_SIGNAL_ADD`.
const SIGNAL_SET: c_int = 0;
const SIGNAL_ADD: c_int = 1;

/// Put of `x`, then the signal update (`op` with `signal` on the word at `sig`) once the
/// data is at the target.
unsafe fn put_signal_n(x: Xfer, sig: *mut u64, signal: u64, op: c_int) -> Result<(), ShmemError> {
    let pe = ctx_pe(x.ctx, x.pe)?;
    // SAFETY: the caller's promise for `src`.
    let src = unsafe { rd(x.src, bytes(x.n, x.size)?) }?;
    let amo = match op {
        SIGNAL_SET => Amo::Set,
        SIGNAL_ADD => Amo::Add,
        _ => return Err(ShmemError::Invalid(format!("signal operator {op}").into())),
    };
    with(|s| {
        let pe = s.pe(pe)?;
        s.put(x.dst as usize, src, pe, false)?;
        s.amo(sig as usize, pe, 8, amo, signal, 0, false)?;
        Ok(())
    })
}

/// The two entry points of one operation: `$cf` on a context (its first parameter,
/// bound to `$ctx`) and `$f` on the default context, with the same body and `$ctx`
/// bound to the constant `CTX_DEFAULT` (so the default's fast path folds as if written
/// out).
macro_rules! ctx_pair {
    ($cf:ident $f:ident ($ctx:ident $(, $p:ident: $t:ty)*) $body:block) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $cf($ctx: *mut c_void $(, $p: $t)*) $body
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $f($($p: $t),*) {
            let $ctx = CTX_DEFAULT;
            $body
        }
    };
}

/// One operation in its two entry points (`ctx_pair!`): `contig` a put or get of
/// `nelems` elements of `$size` bytes (the fast path `rma_fast(is_get, ..)` first, then
/// `$slow` under `entry`), `strided` a `strided_n`, `signal` a `put_signal_n`.
macro_rules! rma_op {
    (contig $cf:ident $f:ident $size:expr, $is_get:literal, $nbi:literal) => {
        ctx_pair!($cf $f (ctx, dest: *mut c_void, source: *const c_void, nelems: usize, pe: c_int) {
            let x = Xfer { ctx, dst: dest, src: source, n: nelems, size: $size, pe };
            // SAFETY: the caller's promise (this module's).
            if unsafe { rma_fast($is_get, x) } {
                return;
            }
            // SAFETY: the caller's promise (this module's).
            unsafe { contig_slow::<$is_get, $nbi>(ctx, dest, source, nelems, $size, pe) }
        });
    };
    (strided $cf:ident $f:ident $what:literal $size:expr, $is_get:literal) => {
        ctx_pair!($cf $f (ctx, dest: *mut c_void, source: *const c_void, dst: isize, sst: isize, nelems: usize, pe: c_int) {
            let x = Xfer { ctx, dst: dest, src: source, n: nelems, size: $size, pe };
            // SAFETY: the caller's promise (this module's).
            entry($what, || unsafe { strided_n($is_get, x, dst, sst) })
        });
    };
    (signal $cf:ident $f:ident $what:literal $size:expr) => {
        ctx_pair!($cf $f (ctx, dest: *mut c_void, source: *const c_void, nelems: usize, sig_addr: *mut u64, signal: u64, sig_op: c_int, pe: c_int) {
            let x = Xfer { ctx, dst: dest, src: source, n: nelems, size: $size, pe };
            // SAFETY: the caller's promise (this module's).
            entry($what, || unsafe { put_signal_n(x, sig_addr, signal, sig_op) })
        });
    };
}

/// The contiguous family of one element size: put, get, their `_nbi` forms and the
/// puts with signal. The names are `<$c>_put<$post>` (context) and `<$d>_put<$post>`
/// (default), then `_nbi`, `_signal`, `_signal_nbi`: `shmem_ctx_putmem`,
/// `shmem_put8_nbi`, `shmem_int_put_signal`, ...
macro_rules! rma_contig {
    ($size:expr; [$($c:tt)*] [$($d:tt)*] [$($post:tt)*]) => { paste::paste! {
        rma_op!(contig [<$($c)* _put $($post)*>] [<$($d)* _put $($post)*>] $size, false, false);
        rma_op!(contig [<$($c)* _put $($post)* _nbi>] [<$($d)* _put $($post)* _nbi>] $size, false, true);
        rma_op!(contig [<$($c)* _get $($post)*>] [<$($d)* _get $($post)*>] $size, true, false);
        // A get_nbi completes before it returns (allowed: completion at the next quiet
        // at the latest).
        rma_op!(contig [<$($c)* _get $($post)* _nbi>] [<$($d)* _get $($post)* _nbi>] $size, true, true);
        rma_op!(signal [<$($c)* _put $($post)* _signal>] [<$($d)* _put $($post)* _signal>] "put_signal" $size);
        rma_op!(signal [<$($c)* _put $($post)* _signal_nbi>] [<$($d)* _put $($post)* _signal_nbi>] "put_signal_nbi" $size);
    } };
}

/// The strided family of one element size (`iput`, `iget`), named as `rma_contig!`.
macro_rules! rma_strided {
    ($size:expr; [$($c:tt)*] [$($d:tt)*] [$($post:tt)*]) => { paste::paste! {
        rma_op!(strided [<$($c)* _iput $($post)*>] [<$($d)* _iput $($post)*>] "iput" $size, false);
        rma_op!(strided [<$($c)* _iget $($post)*>] [<$($d)* _iget $($post)*>] "iget" $size, true);
    } };
}

macro_rules! rma_scalar {
    ($($tn:ident $t:ty;)*) => { paste::paste! { $(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _p>](ctx: *mut c_void, dest: *mut $t, value: $t, pe: c_int) {
            let v = value;
            let x = Xfer { ctx, dst: dest.cast(), src: (&raw const v).cast(), n: 1, size: size_of::<$t>(), pe };
            // SAFETY: `v` is a local of one element.
            if unsafe { rma_fast(false, x) } {
                return;
            }
            // SAFETY: the caller's promise (this module's).
            unsafe { p_slow(ctx, dest, value, pe) }
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _p>](dest: *mut $t, value: $t, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            unsafe { [<shmem_ctx_ $tn _p>](CTX_DEFAULT, dest, value, pe) }
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _g>](ctx: *mut c_void, source: *const $t, pe: c_int) -> $t {
            let mut v: $t = Default::default();
            let x = Xfer { ctx, dst: (&raw mut v).cast(), src: source.cast(), n: 1, size: size_of::<$t>(), pe };
            // SAFETY: `v` is a local of one element.
            if unsafe { rma_fast(true, x) } {
                return v;
            }
            // SAFETY: the caller's promise (this module's).
            unsafe { g_slow(ctx, source, pe) }
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _g>](source: *const $t, pe: c_int) -> $t {
            // SAFETY: the caller's promise (this module's).
            unsafe { [<shmem_ctx_ $tn _g>](CTX_DEFAULT, source, pe) }
        }
    )* } };
}

/// The typed families (`shmem_<type>_put`, ...): contiguous and strided.
macro_rules! rma_bulk {
    ($($tn:ident $size:expr;)*) => { $(
        rma_contig!($size; [shmem_ctx_ $tn] [shmem_ $tn] []);
        rma_strided!($size; [shmem_ctx_ $tn] [shmem_ $tn] []);
    )* };
}
/// The sized families (`shmem_put8`, `shmem_putmem`, ...).
macro_rules! rma_sized {
    ($($sz:tt $size:expr;)*) => { $( rma_contig!($size; [shmem_ctx] [shmem] [$sz]); )* };
}
/// The sized strided families (`shmem_iput8`, ...).
macro_rules! rma_sized_strided {
    ($($sz:tt $size:expr;)*) => { $( rma_strided!($size; [shmem_ctx] [shmem] [$sz]); )* };
}
rma_bulk!(
    float 4; double 8; longdouble 16; char 1; schar 1; short 2; int 4; long 8; longlong 8;
    uchar 1; ushort 2; uint 4; ulong 8; ulonglong 8; int8 1; int16 2; int32 4; int64 8;
    uint8 1; uint16 2; uint32 4; uint64 8; size 8; ptrdiff 8;
);
rma_sized!(mem 1; 8 1; 16 2; 32 4; 64 8; 128 16;);
rma_sized_strided!(8 1; 16 2; 32 4; 64 8; 128 16;);
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

/// Fence and quiet of context `ctx` (both complete its operations; nothing for
/// `SHMEM_CTX_INVALID`).
fn ctx_quiet(name: &str, ctx: *mut c_void) {
    entry(name, || {
        if !ctx_live(ctx)? {
            return Ok(());
        }
        match ctx_index(ctx) {
            Some(i) => state::ctx_quiet(i),
            None => state::quiet(),
        }
    })
}

/// `shmem_ctx_<op>` and `shmem_<op>` of fence and quiet, which both complete the
/// context's operations (`ctx_quiet`); the default context's fast path is
/// `state::quiet_direct`.
macro_rules! quiet_pair {
    ($($cf:ident $f:ident $name:literal;)*) => { $(
        #[unsafe(no_mangle)]
        pub extern "C" fn $cf(ctx: *mut c_void) {
            ctx_quiet($name, ctx)
        }
        #[unsafe(no_mangle)]
        pub extern "C" fn $f() {
            if state::quiet_direct() {
                return;
            }
            $cf(CTX_DEFAULT)
        }
    )* };
}
quiet_pair! {
    shmem_ctx_fence shmem_fence "shmem_fence";
    shmem_ctx_quiet shmem_quiet "shmem_quiet";
}
