//! The C entry points of OpenSHMEM 1.5 (`include/shmem.h` declares each of them).
//!
//! Every function is `unsafe extern "C"`: the caller promises what the OpenSHMEM
//! specification asks of it, which this module cannot check (pointers valid for the
//! element counts given; a symmetric address that is the same object on every PE).
//! What it can check it does (NULL with a non-zero count, PE numbers, symmetric
//! ranges, team and context handles, alignment of atomics): a failure ends the process
//! with a message (see `crate::entry`).
#![allow(unsafe_code)]
#![allow(missing_docs)] // the typed families are documented in shmem.h and docs/shmem.md
#![allow(clippy::missing_safety_doc)] // one `# Safety` for all: this module's
#![allow(clippy::too_many_arguments)]
#![allow(non_camel_case_types)] // C names

use crate::entry;
use crate::error::ShmemError;
use crate::heap::MIN_ALIGN;
use crate::state::{self, Amo, TeamEntry, with};
use gex_facade::coll::{BitOp, Scratch};
use gex_facade::prelude::*;
use std::ffi::{c_char, c_int, c_long, c_void};

/// `SHMEM_CTX_DEFAULT` of shmem.h: handle 1 (handles are table indices + 1, never
/// dereferenced).
const CTX_DEFAULT: *mut c_void = std::ptr::without_provenance_mut(1);
/// `SHMEM_CTX_PRIVATE` of shmem.h.
const SHMEM_CTX_PRIVATE: c_long = 1;

/// The library's OpenSHMEM version.
const MAJOR: c_int = 1;
const MINOR: c_int = 5;
/// `SHMEM_MAX_NAME_LEN` of shmem.h.
const NAME: &[u8] = b"gex-shmem (OpenSHMEM on gex)\0";

// ---------------------------------------------------------------------------------
// Memory helpers: the only places that make slices of the caller's memory.

/// `len` bytes at `p` (empty for `len` 0, whatever `p`).
///
/// # Safety
/// `p` is valid for reading `len` bytes for `'a`.
unsafe fn rd<'a>(p: *const c_void, len: usize) -> Result<&'a [u8], ShmemError> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(ShmemError::Invalid("NULL source".into()));
    }
    // SAFETY: the caller's promise; non-null.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
}

/// `len` writable bytes at `p`.
///
/// # Safety
/// `p` is valid for writing `len` bytes for `'a`, and not otherwise accessed meanwhile.
unsafe fn wr<'a>(p: *mut c_void, len: usize) -> Result<&'a mut [u8], ShmemError> {
    if len == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(ShmemError::Invalid("NULL destination".into()));
    }
    // SAFETY: the caller's promise; non-null.
    Ok(unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) })
}

fn bytes(n: usize, size: usize) -> Result<usize, ShmemError> {
    n.checked_mul(size)
        .ok_or_else(|| ShmemError::Invalid(format!("{n} elements of {size} bytes overflow")))
}

/// The world PE of `pe`, a PE number of context `ctx`'s team.
#[inline]
fn ctx_pe(ctx: *mut c_void, pe: c_int) -> Result<c_int, ShmemError> {
    if ctx == CTX_DEFAULT {
        return Ok(pe);
    }
    let i = (ctx as usize).wrapping_sub(1);
    match state::ctx_team(i) {
        // A context of the world team: no lock.
        Some(Some(0)) => return Ok(pe),
        Some(None) => return Err(ShmemError::BadCtx),
        _ => {}
    }
    with(|s| match s.ctxs.get(i) {
        Some(Some(0)) => Ok(pe),
        Some(Some(t)) => {
            let team = &s.team(*t)?.team;
            u32::try_from(pe)
                .ok()
                .and_then(|p| team.job_rank(p))
                .map(|r| r as c_int)
                .ok_or(ShmemError::BadPe(pe))
        }
        _ => Err(ShmemError::BadCtx),
    })
}

/// Whether `ctx` is a live context; `SHMEM_CTX_INVALID` is `Ok(false)` (quiet, fence
/// and destroy of it do nothing).
fn ctx_live(ctx: *mut c_void) -> Result<bool, ShmemError> {
    if ctx.is_null() {
        return Ok(false);
    }
    if ctx == CTX_DEFAULT {
        return Ok(true);
    }
    let i = (ctx as usize).wrapping_sub(1);
    match state::ctx_team(i) {
        Some(Some(_)) => return Ok(true),
        Some(None) => return Err(ShmemError::BadCtx),
        None => {}
    }
    with(|s| match s.ctxs.get(i) {
        Some(Some(_)) => Ok(true),
        _ => Err(ShmemError::BadCtx),
    })
}

/// The context index of a handle other than `SHMEM_CTX_DEFAULT` (whose operations go
/// through the PE's endpoint): `None` for the default context.
#[inline]
fn ctx_index(ctx: *mut c_void) -> Option<usize> {
    (ctx != CTX_DEFAULT).then(|| (ctx as usize).wrapping_sub(1))
}

fn team_index(team: *mut c_void) -> usize {
    (team as usize).wrapping_sub(1)
}

// ---------------------------------------------------------------------------------
// Library setup, exit and query.

#[unsafe(no_mangle)]
pub extern "C" fn shmem_init() {
    entry("shmem_init", || state::init(0).map(|_| ()))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_init_thread(requested: c_int, provided: *mut c_int) -> c_int {
    entry("shmem_init_thread", || {
        let p = state::init(requested)?;
        if !provided.is_null() {
            // SAFETY: the caller's pointer to an int.
            unsafe { provided.write(p) };
        }
        Ok(0)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_query_thread(provided: *mut c_int) {
    entry("shmem_query_thread", || {
        let p = state::pe()?.thread_level;
        if !provided.is_null() {
            // SAFETY: the caller's pointer to an int.
            unsafe { provided.write(p) };
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_finalize() {
    entry("shmem_finalize", state::finalize)
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_global_exit(status: c_int) {
    // Completes what this PE issued, then ends the job with `status` (gex-run ends
    // every other PE).
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    state::exit_job(status)
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_my_pe() -> c_int {
    entry("shmem_my_pe", || Ok(state::pe()?.me as c_int))
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_n_pes() -> c_int {
    entry("shmem_n_pes", || Ok(state::pe()?.npes as c_int))
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_pe_accessible(pe: c_int) -> c_int {
    entry("shmem_pe_accessible", || {
        with(|s| Ok(c_int::from(s.pe(pe).is_ok())))
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_addr_accessible(addr: *const c_void, pe: c_int) -> c_int {
    entry("shmem_addr_accessible", || {
        with(|s| {
            Ok(c_int::from(
                s.pe(pe).is_ok() && s.locate(addr as usize, 1).is_ok(),
            ))
        })
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_ptr(dest: *const c_void, pe: c_int) -> *mut c_void {
    entry("shmem_ptr", || {
        with(|s| {
            let Ok(pe) = s.pe(pe) else {
                return Ok(std::ptr::null_mut());
            };
            Ok(s.ptr(dest as usize, pe)
                .map_or(std::ptr::null_mut(), |a| a as *mut c_void))
        })
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_team_ptr(team: *mut c_void, dest: *const c_void, pe: c_int) -> *mut c_void {
    entry("shmem_team_ptr", || {
        with(|s| {
            let t = &s.team(team_index(team))?.team;
            let Some(r) = u32::try_from(pe).ok().and_then(|p| t.member(p)) else {
                return Ok(std::ptr::null_mut());
            };
            Ok(s.ptr(dest as usize, r.rank)
                .map_or(std::ptr::null_mut(), |a| a as *mut c_void))
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_info_get_version(major: *mut c_int, minor: *mut c_int) {
    if !major.is_null() {
        // SAFETY: the caller's pointer to an int.
        unsafe { major.write(MAJOR) };
    }
    if !minor.is_null() {
        // SAFETY: the caller's pointer to an int.
        unsafe { minor.write(MINOR) };
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_info_get_name(name: *mut c_char) {
    if !name.is_null() {
        // SAFETY: the caller's buffer of SHMEM_MAX_NAME_LEN (256) bytes.
        unsafe { std::ptr::copy_nonoverlapping(NAME.as_ptr().cast::<c_char>(), name, NAME.len()) };
    }
}

// ---------------------------------------------------------------------------------
// The symmetric heap.

/// Allocates `size` bytes aligned to `align` (zeroed if `zero`), collectively: the
/// block is the same on every PE, and ready (zeroed) on every PE before any returns.
fn alloc(name: &str, size: usize, align: usize, zero: bool) -> *mut c_void {
    entry(name, || {
        with(|s| {
            s.barrier_all()?;
            let r = s.heap.alloc(size, align);
            if let (Some(off), true) = (r, zero) {
                // SAFETY: a fresh block of at least `size` bytes of this PE's heap, which
                // no other PE writes before the barrier below.
                unsafe { std::ptr::write_bytes((s.heap_base + off) as *mut u8, 0, size) };
            }
            let w = s.world.clone();
            s.ep.barrier(&w)?;
            Ok(r.map_or(std::ptr::null_mut(), |off| {
                (s.heap_base + off) as *mut c_void
            }))
        })
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_malloc(size: usize) -> *mut c_void {
    if size == 0 {
        return std::ptr::null_mut();
    }
    alloc("shmem_malloc", size, MIN_ALIGN, false)
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_malloc_with_hints(size: usize, _hints: c_long) -> *mut c_void {
    if size == 0 {
        return std::ptr::null_mut();
    }
    alloc("shmem_malloc_with_hints", size, MIN_ALIGN, false)
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_align(alignment: usize, size: usize) -> *mut c_void {
    if size == 0 || !alignment.is_power_of_two() {
        return std::ptr::null_mut();
    }
    alloc("shmem_align", size, alignment, false)
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_calloc(count: usize, size: usize) -> *mut c_void {
    let Some(n) = count.checked_mul(size).filter(|&n| n > 0) else {
        return std::ptr::null_mut();
    };
    alloc("shmem_calloc", n, MIN_ALIGN, true)
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_free(ptr: *mut c_void) {
    entry("shmem_free", || {
        with(|s| {
            s.barrier_all()?;
            if !ptr.is_null() {
                let off = (ptr as usize).wrapping_sub(s.heap_base);
                if !s.heap.free(off) {
                    return Err(ShmemError::Invalid(format!(
                        "shmem_free of {ptr:p}, not a block of the symmetric heap"
                    )));
                }
            }
            Ok(())
        })
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
    entry("shmem_realloc", || {
        with(|s| {
            s.barrier_all()?;
            let old = if ptr.is_null() {
                None
            } else {
                let off = (ptr as usize).wrapping_sub(s.heap_base);
                Some((
                    off,
                    s.heap.size_of(off).ok_or_else(|| {
                        ShmemError::Invalid(format!(
                            "shmem_realloc of {ptr:p}, not a block of the symmetric heap"
                        ))
                    })?,
                ))
            };
            let out = if size == 0 {
                if let Some((off, _)) = old {
                    s.heap.free(off);
                }
                std::ptr::null_mut()
            } else {
                match s.heap.alloc(size, MIN_ALIGN) {
                    None => std::ptr::null_mut(),
                    Some(new) => {
                        if let Some((off, len)) = old {
                            // SAFETY: both blocks are inside this PE's segment; `copy`
                            // allows them to overlap.
                            unsafe {
                                std::ptr::copy(
                                    (s.heap_base + off) as *const u8,
                                    (s.heap_base + new) as *mut u8,
                                    len.min(size),
                                )
                            };
                            s.heap.free(off);
                        }
                        (s.heap_base + new) as *mut c_void
                    }
                }
            };
            let w = s.world.clone();
            s.ep.barrier(&w)?;
            Ok(out)
        })
    })
}

// ---------------------------------------------------------------------------------
// RMA.

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

// ---------------------------------------------------------------------------------
// Atomics. Every AMO type is 4 or 8 bytes: the operations run on the word's bits
// (two's complement add is the same for signed and unsigned; floats only fetch, set
// and swap).

fn amo(
    ctx: *mut c_void,
    addr: *const c_void,
    pe: c_int,
    width: u32,
    op: Amo,
    a: u64,
    b: u64,
    fetch: bool,
) -> Result<u64, ShmemError> {
    let pe = ctx_pe(ctx, pe)?;
    state::amo(addr as usize, pe, width, op, a, b, fetch)
}

/// An atomic entry point: the lock-free CPU atomic on a mapped heap word when the
/// context is the default one, else `amo` under `entry`.
#[inline(always)]
fn amo_call(
    name: &str,
    ctx: *mut c_void,
    addr: *const c_void,
    pe: c_int,
    width: u32,
    op: Amo,
    a: u64,
    b: u64,
    fetch: bool,
) -> u64 {
    if ctx == CTX_DEFAULT {
        if let Some(v) = state::amo_direct(addr as usize, pe, width, op, a, b) {
            return v;
        }
    }
    entry(name, || amo(ctx, addr, pe, width, op, a, b, fetch))
}

macro_rules! amo_ext {
    ($($tn:ident $t:ty, $u:ty;)*) => { paste::paste! { $(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _atomic_fetch>](ctx: *mut c_void, source: *const $t, pe: c_int) -> $t {
            let w = size_of::<$t>() as u32;
            <$t>::from_bits(amo_call("atomic_fetch", ctx, source.cast(), pe, w, Amo::Fetch, 0, 0, true) as $u)
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _atomic_fetch>](source: *const $t, pe: c_int) -> $t {
            // SAFETY: the caller's promise (this module's).
            unsafe { [<shmem_ctx_ $tn _atomic_fetch>](CTX_DEFAULT, source, pe) }
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _atomic_set>](ctx: *mut c_void, dest: *mut $t, value: $t, pe: c_int) {
            let w = size_of::<$t>() as u32;
            amo_call("atomic_set", ctx, dest.cast(), pe, w, Amo::Set, value.to_bits() as u64, 0, false);
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _atomic_set>](dest: *mut $t, value: $t, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            unsafe { [<shmem_ctx_ $tn _atomic_set>](CTX_DEFAULT, dest, value, pe) }
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _atomic_swap>](ctx: *mut c_void, dest: *mut $t, value: $t, pe: c_int) -> $t {
            let w = size_of::<$t>() as u32;
            <$t>::from_bits(amo_call("atomic_swap", ctx, dest.cast(), pe, w, Amo::Swap, value.to_bits() as u64, 0, true) as $u)
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _atomic_swap>](dest: *mut $t, value: $t, pe: c_int) -> $t {
            // SAFETY: the caller's promise (this module's).
            unsafe { [<shmem_ctx_ $tn _atomic_swap>](CTX_DEFAULT, dest, value, pe) }
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _atomic_fetch_nbi>](ctx: *mut c_void, fetch: *mut $t, source: *const $t, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            let v = unsafe { [<shmem_ctx_ $tn _atomic_fetch>](ctx, source, pe) };
            // SAFETY: the caller's fetch buffer of one element.
            entry("atomic_fetch_nbi", || unsafe { wr(fetch.cast(), size_of::<$t>()) }.map(|b| b.copy_from_slice(&v.to_ne_bytes())));
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _atomic_fetch_nbi>](fetch: *mut $t, source: *const $t, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            unsafe { [<shmem_ctx_ $tn _atomic_fetch_nbi>](CTX_DEFAULT, fetch, source, pe) }
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _atomic_swap_nbi>](ctx: *mut c_void, fetch: *mut $t, dest: *mut $t, value: $t, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            let v = unsafe { [<shmem_ctx_ $tn _atomic_swap>](ctx, dest, value, pe) };
            // SAFETY: the caller's fetch buffer of one element.
            entry("atomic_swap_nbi", || unsafe { wr(fetch.cast(), size_of::<$t>()) }.map(|b| b.copy_from_slice(&v.to_ne_bytes())));
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _atomic_swap_nbi>](fetch: *mut $t, dest: *mut $t, value: $t, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            unsafe { [<shmem_ctx_ $tn _atomic_swap_nbi>](CTX_DEFAULT, fetch, dest, value, pe) }
        }
    )* } };
}

/// Integer AMO types' `to_bits`/`from_bits` (the identity on their two's complement).
trait Bits: Sized {
    type U;
    fn to_bits(self) -> Self::U;
    fn from_bits(u: Self::U) -> Self;
}
macro_rules! bits {
    ($($t:ty => $u:ty;)*) => {$(
        impl Bits for $t {
            type U = $u;
            #[inline]
            fn to_bits(self) -> $u { self as $u }
            #[inline]
            fn from_bits(u: $u) -> $t { u as $t }
        }
    )*};
}
bits!(i32 => u32; i64 => u64; u32 => u32; u64 => u64; usize => u64; isize => u64;);

macro_rules! amo_std {
    ($($tn:ident $t:ty, $u:ty;)*) => {
        amo_ext!($($tn $t, $u;)*);
        paste::paste! { $(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _atomic_compare_swap>](ctx: *mut c_void, dest: *mut $t, cond: $t, value: $t, pe: c_int) -> $t {
            let w = size_of::<$t>() as u32;
            <$t>::from_bits(amo_call("atomic_compare_swap", ctx, dest.cast(), pe, w, Amo::Cswap, cond.to_bits() as u64, value.to_bits() as u64, true) as $u)
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _atomic_compare_swap>](dest: *mut $t, cond: $t, value: $t, pe: c_int) -> $t {
            // SAFETY: the caller's promise (this module's).
            unsafe { [<shmem_ctx_ $tn _atomic_compare_swap>](CTX_DEFAULT, dest, cond, value, pe) }
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _atomic_fetch_add>](ctx: *mut c_void, dest: *mut $t, value: $t, pe: c_int) -> $t {
            let w = size_of::<$t>() as u32;
            <$t>::from_bits(amo_call("atomic_fetch_add", ctx, dest.cast(), pe, w, Amo::Add, value.to_bits() as u64, 0, true) as $u)
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _atomic_fetch_add>](dest: *mut $t, value: $t, pe: c_int) -> $t {
            // SAFETY: the caller's promise (this module's).
            unsafe { [<shmem_ctx_ $tn _atomic_fetch_add>](CTX_DEFAULT, dest, value, pe) }
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _atomic_add>](ctx: *mut c_void, dest: *mut $t, value: $t, pe: c_int) {
            let w = size_of::<$t>() as u32;
            amo_call("atomic_add", ctx, dest.cast(), pe, w, Amo::Add, value.to_bits() as u64, 0, false);
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _atomic_add>](dest: *mut $t, value: $t, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            unsafe { [<shmem_ctx_ $tn _atomic_add>](CTX_DEFAULT, dest, value, pe) }
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _atomic_fetch_inc>](ctx: *mut c_void, dest: *mut $t, pe: c_int) -> $t {
            let w = size_of::<$t>() as u32;
            <$t>::from_bits(amo_call("atomic_fetch_inc", ctx, dest.cast(), pe, w, Amo::Add, 1, 0, true) as $u)
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _atomic_fetch_inc>](dest: *mut $t, pe: c_int) -> $t {
            // SAFETY: the caller's promise (this module's).
            unsafe { [<shmem_ctx_ $tn _atomic_fetch_inc>](CTX_DEFAULT, dest, pe) }
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _atomic_inc>](ctx: *mut c_void, dest: *mut $t, pe: c_int) {
            let w = size_of::<$t>() as u32;
            amo_call("atomic_inc", ctx, dest.cast(), pe, w, Amo::Add, 1, 0, false);
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _atomic_inc>](dest: *mut $t, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            unsafe { [<shmem_ctx_ $tn _atomic_inc>](CTX_DEFAULT, dest, pe) }
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _atomic_compare_swap_nbi>](ctx: *mut c_void, fetch: *mut $t, dest: *mut $t, cond: $t, value: $t, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            let v = unsafe { [<shmem_ctx_ $tn _atomic_compare_swap>](ctx, dest, cond, value, pe) };
            // SAFETY: the caller's fetch buffer of one element.
            entry("atomic_compare_swap_nbi", || unsafe { wr(fetch.cast(), size_of::<$t>()) }.map(|b| b.copy_from_slice(&v.to_ne_bytes())));
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _atomic_compare_swap_nbi>](fetch: *mut $t, dest: *mut $t, cond: $t, value: $t, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            unsafe { [<shmem_ctx_ $tn _atomic_compare_swap_nbi>](CTX_DEFAULT, fetch, dest, cond, value, pe) }
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _atomic_fetch_add_nbi>](ctx: *mut c_void, fetch: *mut $t, dest: *mut $t, value: $t, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            let v = unsafe { [<shmem_ctx_ $tn _atomic_fetch_add>](ctx, dest, value, pe) };
            // SAFETY: the caller's fetch buffer of one element.
            entry("atomic_fetch_add_nbi", || unsafe { wr(fetch.cast(), size_of::<$t>()) }.map(|b| b.copy_from_slice(&v.to_ne_bytes())));
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _atomic_fetch_add_nbi>](fetch: *mut $t, dest: *mut $t, value: $t, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            unsafe { [<shmem_ctx_ $tn _atomic_fetch_add_nbi>](CTX_DEFAULT, fetch, dest, value, pe) }
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _atomic_fetch_inc_nbi>](ctx: *mut c_void, fetch: *mut $t, dest: *mut $t, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            let v = unsafe { [<shmem_ctx_ $tn _atomic_fetch_inc>](ctx, dest, pe) };
            // SAFETY: the caller's fetch buffer of one element.
            entry("atomic_fetch_inc_nbi", || unsafe { wr(fetch.cast(), size_of::<$t>()) }.map(|b| b.copy_from_slice(&v.to_ne_bytes())));
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _atomic_fetch_inc_nbi>](fetch: *mut $t, dest: *mut $t, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            unsafe { [<shmem_ctx_ $tn _atomic_fetch_inc_nbi>](CTX_DEFAULT, fetch, dest, pe) }
        }
    )* } };
}

macro_rules! amo_bit {
    ($($tn:ident $t:ty, $u:ty;)*) => { paste::paste! { $(
        amo_bit!(@op $tn $t, $u, and And);
        amo_bit!(@op $tn $t, $u, or Or);
        amo_bit!(@op $tn $t, $u, xor Xor);
    )* } };
    (@op $tn:ident $t:ty, $u:ty, $op:ident $amo:ident) => { paste::paste! {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _atomic_fetch_ $op>](ctx: *mut c_void, dest: *mut $t, value: $t, pe: c_int) -> $t {
            let w = size_of::<$t>() as u32;
            amo_call("atomic_fetch_bitwise", ctx, dest.cast(), pe, w, Amo::$amo, value as $u as u64, 0, true) as $t
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _atomic_fetch_ $op>](dest: *mut $t, value: $t, pe: c_int) -> $t {
            // SAFETY: the caller's promise (this module's).
            unsafe { [<shmem_ctx_ $tn _atomic_fetch_ $op>](CTX_DEFAULT, dest, value, pe) }
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _atomic_ $op>](ctx: *mut c_void, dest: *mut $t, value: $t, pe: c_int) {
            let w = size_of::<$t>() as u32;
            amo_call("atomic_bitwise", ctx, dest.cast(), pe, w, Amo::$amo, value as $u as u64, 0, false);
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _atomic_ $op>](dest: *mut $t, value: $t, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            unsafe { [<shmem_ctx_ $tn _atomic_ $op>](CTX_DEFAULT, dest, value, pe) }
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ctx_ $tn _atomic_fetch_ $op _nbi>](ctx: *mut c_void, fetch: *mut $t, dest: *mut $t, value: $t, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            let v = unsafe { [<shmem_ctx_ $tn _atomic_fetch_ $op>](ctx, dest, value, pe) };
            // SAFETY: the caller's fetch buffer of one element.
            entry("atomic_fetch_bitwise_nbi", || unsafe { wr(fetch.cast(), size_of::<$t>()) }.map(|b| b.copy_from_slice(&v.to_ne_bytes())));
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _atomic_fetch_ $op _nbi>](fetch: *mut $t, dest: *mut $t, value: $t, pe: c_int) {
            // SAFETY: the caller's promise (this module's).
            unsafe { [<shmem_ctx_ $tn _atomic_fetch_ $op _nbi>](CTX_DEFAULT, fetch, dest, value, pe) }
        }
    } };
}

amo_std!(
    int i32, u32; long i64, u64; longlong i64, u64; uint u32, u32; ulong u64, u64;
    ulonglong u64, u64; int32 i32, u32; int64 i64, u64; uint32 u32, u32; uint64 u64, u64;
    size usize, u64; ptrdiff isize, u64;
);
amo_ext!(float f32, u32; double f64, u64;);
amo_bit!(
    uint u32, u32; ulong u64, u64; ulonglong u64, u64; int32 i32, u32; int64 i64, u64;
    uint32 u32, u32; uint64 u64, u64;
);

// ---------------------------------------------------------------------------------
// Point-to-point synchronisation.

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
        _ => return Err(ShmemError::Invalid(format!("comparison operator {cmp}"))),
    })
}

/// Polls until `done` (which reads local memory) is true; the lock is taken per poll.
fn wait_for(mut done: impl FnMut() -> Result<bool, ShmemError>) -> Result<(), ShmemError> {
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

// ---------------------------------------------------------------------------------
// Barriers, teams and team collectives.

#[unsafe(no_mangle)]
pub extern "C" fn shmem_barrier_all() {
    entry("shmem_barrier_all", || with(|s| s.barrier_all()))
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_sync_all() {
    entry("shmem_sync_all", || {
        with(|s| {
            let w = s.world.clone();
            s.ep.barrier(&w)?;
            Ok(())
        })
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_team_sync(team: *mut c_void) -> c_int {
    entry("shmem_team_sync", || {
        with(|s| {
            let t = s.team(team_index(team))?.team.clone();
            s.ep.barrier(&t)?;
            Ok(0)
        })
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_team_my_pe(team: *mut c_void) -> c_int {
    entry("shmem_team_my_pe", || {
        with(|s| {
            Ok(s.team(team_index(team))
                .map_or(-1, |t| t.team.rank() as c_int))
        })
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_team_n_pes(team: *mut c_void) -> c_int {
    entry("shmem_team_n_pes", || {
        with(|s| {
            Ok(s.team(team_index(team))
                .map_or(-1, |t| t.team.size() as c_int))
        })
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_team_translate_pe(
    src_team: *mut c_void,
    src_pe: c_int,
    dest_team: *mut c_void,
) -> c_int {
    entry("shmem_team_translate_pe", || {
        with(|s| {
            let (Ok(a), Ok(b)) = (s.team(team_index(src_team)), s.team(team_index(dest_team)))
            else {
                return Ok(-1);
            };
            let Some(r) = u32::try_from(src_pe).ok().and_then(|p| a.team.job_rank(p)) else {
                return Ok(-1);
            };
            Ok(b.team.rank_of_job_rank(r).map_or(-1, |x| x as c_int))
        })
    })
}

/// `shmem_team_config_t` of shmem.h.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct shmem_team_config_t {
    pub num_contexts: c_int,
}

/// `SHMEM_TEAM_NUM_CONTEXTS` of shmem.h.
const TEAM_NUM_CONTEXTS: c_long = 1;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_team_get_config(
    team: *mut c_void,
    mask: c_long,
    config: *mut shmem_team_config_t,
) -> c_int {
    entry("shmem_team_get_config", || {
        with(|s| {
            let Ok(t) = s.team(team_index(team)) else {
                return Ok(-1);
            };
            if !config.is_null() && mask & TEAM_NUM_CONTEXTS != 0 {
                // SAFETY: the caller's config struct.
                unsafe { (*config).num_contexts = t.num_contexts };
            }
            Ok(0)
        })
    })
}

/// Adds a team made by this library; returns its handle.
fn add_team(s: &mut state::State, team: Team, num_contexts: i32) -> *mut c_void {
    let e = TeamEntry {
        team,
        num_contexts,
        owned: true,
    };
    let i = match s.teams.iter().position(Option::is_none) {
        Some(i) => {
            s.teams[i] = Some(e);
            i
        }
        None => {
            s.teams.push(Some(e));
            s.teams.len() - 1
        }
    };
    (i + 1) as *mut c_void
}

unsafe fn config_contexts(config: *const shmem_team_config_t, mask: c_long) -> i32 {
    if config.is_null() || mask & TEAM_NUM_CONTEXTS == 0 {
        0
    } else {
        // SAFETY: the caller's config struct.
        unsafe { (*config).num_contexts }
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_team_split_strided(
    parent: *mut c_void,
    start: c_int,
    stride: c_int,
    size: c_int,
    config: *const shmem_team_config_t,
    config_mask: c_long,
    new_team: *mut *mut c_void,
) -> c_int {
    // SAFETY: the caller's config struct.
    let nctx = unsafe { config_contexts(config, config_mask) };
    let out = entry("shmem_team_split_strided", || {
        with(|s| {
            let Ok(p) = s.team(team_index(parent)) else {
                return Ok(None);
            };
            let p = p.team.clone();
            let n = p.size() as i64;
            let (start, stride, size) = (i64::from(start), i64::from(stride), i64::from(size));
            let valid = size > 0
                && (0..size).all(|i| (0..n).contains(&(start + i * stride)))
                && (stride != 0 || size == 1);
            let me = i64::from(p.rank());
            let key = (0..size).position(|i| start + i * stride == me);
            let color = if valid { key.map(|_| 0) } else { None };
            let t =
                s.ep.split(&p, color, key.unwrap_or(0) as u32, Scratch::None)?;
            if !valid {
                return Ok(Some(std::ptr::null_mut()));
            }
            Ok(Some(
                t.map_or(std::ptr::null_mut(), |t| add_team(s, t, nctx)),
            ))
        })
    });
    if !new_team.is_null() {
        // SAFETY: the caller's team slot.
        unsafe { new_team.write(out.unwrap_or(std::ptr::null_mut())) };
    }
    match out {
        Some(p) if p.is_null() => {
            // Invalid arguments return an error; a PE left out is not one.
            0
        }
        Some(_) => 0,
        None => -1,
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_team_split_2d(
    parent: *mut c_void,
    xrange: c_int,
    xaxis_config: *const shmem_team_config_t,
    xaxis_mask: c_long,
    xaxis_team: *mut *mut c_void,
    yaxis_config: *const shmem_team_config_t,
    yaxis_mask: c_long,
    yaxis_team: *mut *mut c_void,
) -> c_int {
    // SAFETY: the caller's config structs.
    let (xc, yc) = unsafe {
        (
            config_contexts(xaxis_config, xaxis_mask),
            config_contexts(yaxis_config, yaxis_mask),
        )
    };
    let out = entry("shmem_team_split_2d", || {
        with(|s| {
            let Ok(p) = s.team(team_index(parent)) else {
                return Ok(None);
            };
            if xrange <= 0 {
                return Ok(None);
            }
            let p = p.team.clone();
            let xr = (xrange as u32).min(p.size());
            let me = p.rank();
            let x = s.ep.split(&p, Some(me / xr), me % xr, Scratch::None)?;
            let y = s.ep.split(&p, Some(me % xr), me / xr, Scratch::None)?;
            let x = x.map_or(std::ptr::null_mut(), |t| add_team(s, t, xc));
            let y = y.map_or(std::ptr::null_mut(), |t| add_team(s, t, yc));
            Ok(Some((x, y)))
        })
    });
    let (x, y) = out.unwrap_or((std::ptr::null_mut(), std::ptr::null_mut()));
    if !xaxis_team.is_null() {
        // SAFETY: the caller's team slot.
        unsafe { xaxis_team.write(x) };
    }
    if !yaxis_team.is_null() {
        // SAFETY: the caller's team slot.
        unsafe { yaxis_team.write(y) };
    }
    if out.is_some() { 0 } else { -1 }
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_team_destroy(team: *mut c_void) {
    entry("shmem_team_destroy", || {
        with(|s| {
            let i = team_index(team);
            if i < 2 {
                return Ok(()); // the predefined teams are not destroyed
            }
            if let Some(Some(e)) = s.teams.get_mut(i).map(Option::take) {
                for c in 0..s.ctxs.len() {
                    if s.ctxs[c] == Some(i) {
                        s.set_ctx(c, None);
                    }
                }
                s.ep.destroy_team(e.team)?;
            }
            Ok(())
        })
    })
}

/// Runs a collective of `team` on bytes.
fn coll_team<R>(
    name: &str,
    team: *mut c_void,
    f: impl FnOnce(&mut state::State, &Team) -> Result<R, ShmemError>,
) -> Result<R, ShmemError> {
    let _ = name;
    with(|s| {
        let t = s.team(team_index(team))?.team.clone();
        f(s, &t)
    })
}

/// Broadcast of `n` bytes from team rank `root`'s `src` to every member's `dst`.
unsafe fn broadcast_bytes(
    team: *mut c_void,
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
    root: c_int,
) -> Result<c_int, ShmemError> {
    coll_team("broadcast", team, |s, t| {
        let root = u32::try_from(root)
            .ok()
            .filter(|&r| r < t.size())
            .ok_or(ShmemError::BadPe(root))?;
        if t.rank() == root && n > 0 {
            if src.is_null() || dst.is_null() {
                return Err(ShmemError::Invalid("NULL source or destination".into()));
            }
            // SAFETY: the caller's `n` readable bytes at `src` and writable at `dst`;
            // `copy` allows them to overlap (or be the same).
            unsafe { std::ptr::copy(src.cast::<u8>(), dst.cast::<u8>(), n) };
        }
        // In place in the caller's destination (no copy, no allocation; gex-coll's
        // shared-memory path when it is in the symmetric heap): the root's holds the data.
        // SAFETY: the caller's destination.
        let d = unsafe { wr(dst, n) }?;
        s.ep.collective(t, Broadcast::in_place(root, d), Blocking)?;
        Ok(0)
    })
}

/// Every member's `n` bytes, in team-rank order.
fn gather_all(s: &mut state::State, t: &Team, mine: Vec<u8>) -> Result<Vec<u8>, ShmemError> {
    Ok(s.ep.collective(t, GatherAll::new(mine), Blocking)?)
}

unsafe fn fcollect_bytes(
    team: *mut c_void,
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
) -> Result<c_int, ShmemError> {
    coll_team("fcollect", team, |s, t| {
        let total = bytes(n, t.size() as usize)?;
        let (a, b) = (src as usize, dst as usize);
        if n > 0 && (a.saturating_add(n) <= b || b.saturating_add(total) <= a) {
            // Disjoint: straight from the caller's source into its destination.
            // SAFETY: the caller's source and destination of `n` times the team's size
            // bytes, which do not overlap (checked).
            let (src, dst) = unsafe { (rd(src, n)?, wr(dst, total)?) };
            s.ep.collective(t, GatherAll::slices(src, dst), Blocking)?;
            return Ok(0);
        }
        // SAFETY: the caller's source.
        let mine = unsafe { rd(src, n) }?.to_vec();
        let all = gather_all(s, t, mine)?;
        // SAFETY: the caller's destination of `n` times the team's size.
        unsafe { wr(dst, all.len()) }?.copy_from_slice(&all);
        Ok(0)
    })
}

unsafe fn collect_bytes(
    team: *mut c_void,
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
) -> Result<c_int, ShmemError> {
    coll_team("collect", team, |s, t| {
        let counts = gather_all(s, t, (n as u64).to_ne_bytes().to_vec())?;
        let counts: Vec<usize> = counts
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap_or_default()) as usize)
            .collect();
        let max = counts.iter().copied().max().unwrap_or(0);
        // SAFETY: the caller's source.
        let mut mine = unsafe { rd(src, n) }?.to_vec();
        mine.resize(max, 0);
        let all = gather_all(s, t, mine)?;
        let total: usize = counts.iter().sum();
        // SAFETY: the caller's destination of the sum of the members' counts.
        let out = unsafe { wr(dst, total) }?;
        let mut at = 0;
        for (i, &c) in counts.iter().enumerate() {
            out[at..at + c].copy_from_slice(&all[i * max..i * max + c]);
            at += c;
        }
        Ok(0)
    })
}

/// Alltoall with strides in elements of `size` bytes (`dst_s`, `sst` = 1: contiguous).
unsafe fn alltoalls_bytes(
    team: *mut c_void,
    dst: *mut c_void,
    src: *const c_void,
    dst_s: isize,
    sst: isize,
    n: usize,
    size: usize,
) -> Result<c_int, ShmemError> {
    coll_team("alltoall", team, |s, t| {
        let p = t.size() as usize;
        let mut packed = Vec::with_capacity(p * n * size);
        for j in 0..p * n {
            let at = (src as isize)
                .wrapping_add((j as isize).wrapping_mul(sst).wrapping_mul(size as isize));
            // SAFETY: element `j` of the caller's strided source.
            packed.extend_from_slice(unsafe { rd(at as *const c_void, size) }?);
        }
        let out: Vec<u8> = s.ep.collective(t, Exchange::new(packed), Blocking)?;
        for j in 0..p * n {
            let at = (dst as isize)
                .wrapping_add((j as isize).wrapping_mul(dst_s).wrapping_mul(size as isize));
            // SAFETY: element `j` of the caller's strided destination.
            unsafe { wr(at as *mut c_void, size) }?.copy_from_slice(&out[j * size..(j + 1) * size]);
        }
        Ok(0)
    })
}

macro_rules! coll_family {
    ($($tn:ident $size:expr;)*) => { paste::paste! { $(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _broadcast>](team: *mut c_void, dest: *mut c_void, source: *const c_void, nelems: usize, pe_root: c_int) -> c_int {
            // SAFETY: the caller's promise (this module's).
            entry("broadcast", || unsafe { broadcast_bytes(team, dest, source, bytes(nelems, $size)?, pe_root) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _collect>](team: *mut c_void, dest: *mut c_void, source: *const c_void, nelems: usize) -> c_int {
            // SAFETY: the caller's promise (this module's).
            entry("collect", || unsafe { collect_bytes(team, dest, source, bytes(nelems, $size)?) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _fcollect>](team: *mut c_void, dest: *mut c_void, source: *const c_void, nelems: usize) -> c_int {
            // SAFETY: the caller's promise (this module's).
            entry("fcollect", || unsafe { fcollect_bytes(team, dest, source, bytes(nelems, $size)?) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _alltoall>](team: *mut c_void, dest: *mut c_void, source: *const c_void, nelems: usize) -> c_int {
            // SAFETY: the caller's promise (this module's).
            entry("alltoall", || unsafe { alltoalls_bytes(team, dest, source, 1, 1, nelems, $size) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _alltoalls>](team: *mut c_void, dest: *mut c_void, source: *const c_void, dst: isize, sst: isize, nelems: usize) -> c_int {
            // SAFETY: the caller's promise (this module's).
            entry("alltoalls", || unsafe { alltoalls_bytes(team, dest, source, dst, sst, nelems, $size) })
        }
    )* } };
}

coll_family!(
    float 4; double 8; longdouble 16; char 1; schar 1; short 2; int 4; long 8; longlong 8;
    uchar 1; ushort 2; uint 4; ulong 8; ulonglong 8; int8 1; int16 2; int32 4; int64 8;
    uint8 1; uint16 2; uint32 4; uint64 8; size 8; ptrdiff 8;
);

// The untyped (`mem`) forms count bytes.
macro_rules! coll_mem {
    () => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn shmem_broadcastmem(
            team: *mut c_void,
            dest: *mut c_void,
            source: *const c_void,
            nelems: usize,
            pe_root: c_int,
        ) -> c_int {
            // SAFETY: the caller's promise (this module's).
            entry("broadcastmem", || unsafe {
                broadcast_bytes(team, dest, source, nelems, pe_root)
            })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn shmem_collectmem(
            team: *mut c_void,
            dest: *mut c_void,
            source: *const c_void,
            nelems: usize,
        ) -> c_int {
            // SAFETY: the caller's promise (this module's).
            entry("collectmem", || unsafe {
                collect_bytes(team, dest, source, nelems)
            })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn shmem_fcollectmem(
            team: *mut c_void,
            dest: *mut c_void,
            source: *const c_void,
            nelems: usize,
        ) -> c_int {
            // SAFETY: the caller's promise (this module's).
            entry("fcollectmem", || unsafe {
                fcollect_bytes(team, dest, source, nelems)
            })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn shmem_alltoallmem(
            team: *mut c_void,
            dest: *mut c_void,
            source: *const c_void,
            nelems: usize,
        ) -> c_int {
            // SAFETY: the caller's promise (this module's).
            entry("alltoallmem", || unsafe {
                alltoalls_bytes(team, dest, source, 1, 1, nelems, 1)
            })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn shmem_alltoallsmem(
            team: *mut c_void,
            dest: *mut c_void,
            source: *const c_void,
            dst: isize,
            sst: isize,
            nelems: usize,
        ) -> c_int {
            // SAFETY: the caller's promise (this module's).
            entry("alltoallsmem", || unsafe {
                alltoalls_bytes(team, dest, source, dst, sst, nelems, 1)
            })
        }
    };
}
coll_mem!();

// Reductions: the integer and float ones are gex-coll's allreduce with its built-in
// operators (`reduce_coll`, in the caller's buffers); the complex ones and `long
// double` gather every member's `nreduce` elements, and each member folds them in
// team-rank order (the same order everywhere, so every member gets the same result).

/// A reduction's element: read from and written to native-endian bytes.
trait Elem: Copy {
    const SIZE: usize;
    fn load(b: &[u8]) -> Self;
    fn store(self, b: &mut [u8]);
}
macro_rules! elem {
    ($($t:ty)*) => {$(
        impl Elem for $t {
            const SIZE: usize = size_of::<$t>();
            fn load(b: &[u8]) -> $t { <$t>::from_ne_bytes(b.try_into().unwrap_or_default()) }
            fn store(self, b: &mut [u8]) { b.copy_from_slice(&self.to_ne_bytes()) }
        }
    )*};
}
elem!(f32 f64);

/// A complex number of shmem.h (`float _Complex`, `double _Complex`).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Cx<F>(F, F);
macro_rules! cx_elem {
    ($($f:ty)*) => {$(
        impl Elem for Cx<$f> {
            const SIZE: usize = 2 * size_of::<$f>();
            fn load(b: &[u8]) -> Self {
                let h = size_of::<$f>();
                Cx(<$f>::load(&b[..h]), <$f>::load(&b[h..]))
            }
            fn store(self, b: &mut [u8]) {
                let h = size_of::<$f>();
                self.0.store(&mut b[..h]);
                self.1.store(&mut b[h..]);
            }
        }
        impl std::ops::Add for Cx<$f> {
            type Output = Self;
            fn add(self, o: Self) -> Self { Cx(self.0 + o.0, self.1 + o.1) }
        }
        impl std::ops::Mul for Cx<$f> {
            type Output = Self;
            fn mul(self, o: Self) -> Self { Cx(self.0 * o.0 - self.1 * o.1, self.0 * o.1 + self.1 * o.0) }
        }
    )*};
}
cx_elem!(f32 f64);

/// Reduces with `f` over `team`.
unsafe fn reduce<T: Elem>(
    team: *mut c_void,
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
    f: impl Fn(T, T) -> T,
) -> Result<c_int, ShmemError> {
    let len = bytes(n, T::SIZE)?;
    coll_team("reduce", team, |s, t| {
        // SAFETY: the caller's source.
        let mine = unsafe { rd(src, len) }?.to_vec();
        let all = gather_all(s, t, mine)?;
        let mut out = all[..len].to_vec();
        for m in 1..t.size() as usize {
            let other = &all[m * len..(m + 1) * len];
            for (o, x) in out
                .chunks_exact_mut(T::SIZE)
                .zip(other.chunks_exact(T::SIZE))
            {
                f(T::load(o), T::load(x)).store(o);
            }
        }
        // SAFETY: the caller's destination (may be the source: `out` is a copy).
        unsafe { wr(dst, len) }?.copy_from_slice(&out);
        Ok(0)
    })
}

/// A reduction of a C type Rust does not have (`long double`), folded by a C function
/// of shmem.h: `combine(acc, x, n)` folds `n` elements of `x` into `acc`.
pub type gexshmem_combine_t =
    Option<unsafe extern "C" fn(acc: *mut c_void, x: *const c_void, n: usize)>;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn gexshmem_reduce_with(
    team: *mut c_void,
    dest: *mut c_void,
    source: *const c_void,
    nreduce: usize,
    size: usize,
    combine: gexshmem_combine_t,
) -> c_int {
    entry("reduce", || {
        let f = combine.ok_or_else(|| ShmemError::Invalid("NULL combine".into()))?;
        let len = bytes(nreduce, size)?;
        coll_team("reduce", team, |s, t| {
            // SAFETY: the caller's source.
            let mine = unsafe { rd(source, len) }?.to_vec();
            let all = gather_all(s, t, mine)?;
            let mut out = all[..len].to_vec();
            for m in 1..t.size() as usize {
                // SAFETY: shmem.h's combine function reads `nreduce` elements of
                // `size` bytes from each buffer and writes the first.
                unsafe {
                    f(
                        out.as_mut_ptr().cast(),
                        all[m * len..].as_ptr().cast(),
                        nreduce,
                    )
                };
            }
            // SAFETY: the caller's destination.
            unsafe { wr(dest, len) }?.copy_from_slice(&out);
            Ok(0)
        })
    })
}

/// Reduces with gex-coll's allreduce and operator `op` over `team`: in place when
/// `dst` is `src`, from `src` into `dst` when they are disjoint (no copy, no allocation),
/// else through a copy of the source.
unsafe fn reduce_coll<T: gex_facade::coll::Elem>(
    team: *mut c_void,
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
    op: &ReduceOp<T>,
) -> Result<c_int, ShmemError> {
    let len = bytes(n, size_of::<T>())?;
    coll_team("reduce", team, |s, t| {
        if n == 0 {
            return Ok(0);
        }
        if src.is_null() || dst.is_null() {
            return Err(ShmemError::Invalid("NULL source or destination".into()));
        }
        let (a, b) = (src as usize, dst as usize);
        let aligned = a % align_of::<T>() == 0 && b % align_of::<T>() == 0;
        if aligned && a == b {
            // SAFETY: the caller's `n` elements at `dst` (= `src`), aligned (checked);
            // every bit pattern is a `T` (`Elem: Pod`).
            let buf = unsafe { std::slice::from_raw_parts_mut(dst.cast::<T>(), n) };
            s.ep.collective(t, Allreduce::in_place(buf, op), Blocking)?;
        } else if aligned && (a.saturating_add(len) <= b || b.saturating_add(len) <= a) {
            // SAFETY: the caller's `n` elements at each, aligned and disjoint (checked).
            let (x, y) = unsafe {
                (
                    std::slice::from_raw_parts(src.cast::<T>(), n),
                    std::slice::from_raw_parts_mut(dst.cast::<T>(), n),
                )
            };
            s.ep.collective(t, Allreduce::slices(x, y, op), Blocking)?;
        } else {
            let mut buf = vec![T::zeroed(); n];
            // SAFETY: the caller's `len` readable bytes at `src`; `buf` is `len` bytes
            // of its own.
            unsafe {
                std::ptr::copy_nonoverlapping(src.cast::<u8>(), buf.as_mut_ptr().cast(), len)
            };
            s.ep.collective(t, Allreduce::in_place(&mut buf, op), Blocking)?;
            // SAFETY: the caller's `len` writable bytes at `dst`.
            unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr().cast::<u8>(), dst.cast(), len) };
        }
        Ok(0)
    })
}

/// The typed reductions gex-coll has operators for (every integer and float type; the
/// complex ones fold through [`reduce`]). `$make` builds the operator once per function.
macro_rules! red_coll {
    ($op:ident, $make:expr; $($tn:ident $t:ty;)*) => { paste::paste! { $(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _ $op _reduce>](team: *mut c_void, dest: *mut c_void, source: *const c_void, nreduce: usize) -> c_int {
            static OP: std::sync::OnceLock<ReduceOp<$t>> = std::sync::OnceLock::new();
            let op = OP.get_or_init(|| $make);
            // SAFETY: the caller's promise (this module's).
            entry(concat!(stringify!($op), "_reduce"), || unsafe { reduce_coll::<$t>(team, dest, source, nreduce, op) })
        }
    )* } };
}

macro_rules! red {
    ($op:ident, $f:expr; $($tn:ident $t:ty;)*) => { paste::paste! { $(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _ $op _reduce>](team: *mut c_void, dest: *mut c_void, source: *const c_void, nreduce: usize) -> c_int {
            // SAFETY: the caller's promise (this module's).
            entry(concat!(stringify!($op), "_reduce"), || unsafe { reduce::<$t>(team, dest, source, nreduce, $f) })
        }
    )* } };
}
macro_rules! bit_types {
    ($m:ident, $op:ident, $f:expr) => {
        $m!($op, $f; uchar u8; ushort u16; uint u32; ulong u64; ulonglong u64; int8 i8; int16 i16;
            int32 i32; int64 i64; uint8 u8; uint16 u16; uint32 u32; uint64 u64; size usize;);
    };
}
macro_rules! cmp_types {
    ($m:ident, $op:ident, $f:expr) => {
        $m!($op, $f; char i8; schar i8; short i16; int i32; long i64; longlong i64; ptrdiff isize;
            uchar u8; ushort u16; uint u32; ulong u64; ulonglong u64; int8 i8; int16 i16; int32 i32;
            int64 i64; uint8 u8; uint16 u16; uint32 u32; uint64 u64; size usize;);
    };
}
bit_types!(red_coll, and, ReduceOp::bitwise(BitOp::Band));
bit_types!(red_coll, or, ReduceOp::bitwise(BitOp::Bor));
bit_types!(red_coll, xor, ReduceOp::bitwise(BitOp::Bxor));
cmp_types!(red_coll, max, ReduceOp::builtin(BuiltinOp::Max));
cmp_types!(red_coll, min, ReduceOp::builtin(BuiltinOp::Min));
cmp_types!(red_coll, sum, ReduceOp::builtin(BuiltinOp::Sum));
cmp_types!(red_coll, prod, ReduceOp::builtin(BuiltinOp::Prod));
red_coll!(max, ReduceOp::builtin(BuiltinOp::Max); float f32; double f64;);
red_coll!(min, ReduceOp::builtin(BuiltinOp::Min); float f32; double f64;);
red_coll!(sum, ReduceOp::builtin(BuiltinOp::Sum); float f32; double f64;);
red_coll!(prod, ReduceOp::builtin(BuiltinOp::Prod); float f32; double f64;);
red!(sum, |a: Cx<f32>, b| a + b; complexf Cx<f32>;);
red!(sum, |a: Cx<f64>, b| a + b; complexd Cx<f64>;);
red!(prod, |a: Cx<f32>, b| a * b; complexf Cx<f32>;);
red!(prod, |a: Cx<f64>, b| a * b; complexd Cx<f64>;);

// ---------------------------------------------------------------------------------
// Contexts: each context other than the default one gets a gex endpoint of its own
// from a pool (`state::Slot`; docs/shmem.md, "Contexts"), or rides the PE's endpoint
// when gex cannot make one.

fn new_ctx(team_i: usize, options: c_long, ctx: *mut *mut c_void) -> c_int {
    let r = entry("shmem_ctx_create", || {
        with(|s| {
            let i = s.new_ctx(team_i, options & SHMEM_CTX_PRIVATE != 0)?;
            Ok((i + 1) as *mut c_void)
        })
    });
    if ctx.is_null() {
        return -1;
    }
    // SAFETY: the caller's context slot.
    unsafe { ctx.write(r) };
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_ctx_create(options: c_long, ctx: *mut *mut c_void) -> c_int {
    new_ctx(0, options, ctx)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_team_create_ctx(
    team: *mut c_void,
    options: c_long,
    ctx: *mut *mut c_void,
) -> c_int {
    let ok = entry("shmem_team_create_ctx", || {
        with(|s| Ok(s.team(team_index(team)).is_ok()))
    });
    if !ok {
        if !ctx.is_null() {
            // SAFETY: the caller's context slot.
            unsafe { ctx.write(std::ptr::null_mut()) };
        }
        return -1;
    }
    new_ctx(team_index(team), options, ctx)
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_ctx_destroy(ctx: *mut c_void) {
    entry("shmem_ctx_destroy", || {
        if !ctx_live(ctx)? {
            return Ok(());
        }
        let i = (ctx as usize).wrapping_sub(1);
        if i != 0 {
            // The context's own endpoint first, without the state lock.
            state::ctx_quiet(i)?;
        }
        with(|s| s.end_ctx(i))
    })
}

/// gex's extension (declared in shmem.h): the index of the gex endpoint that carries
/// `ctx`'s operations to PEs reached through an endpoint (0: the PE's own endpoint;
/// -1: not a live context), and in `*ops` (when not NULL) how many operations that
/// endpoint carried for the context since it was made.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gexshmem_ctx_endpoint(ctx: *mut c_void, ops: *mut u64) -> c_int {
    let r = entry("gexshmem_ctx_endpoint", || {
        if !ctx_live(ctx)? {
            return Ok(None);
        }
        Ok(Some(ctx_index(ctx).map_or((0, 0), state::ctx_endpoint)))
    });
    let Some((index, n)) = r else {
        return -1;
    };
    if !ops.is_null() {
        // SAFETY: the caller's `uint64_t` slot.
        unsafe { ops.write(n) };
    }
    c_int::from(index)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_ctx_get_team(ctx: *mut c_void, team: *mut *mut c_void) -> c_int {
    let t = entry("shmem_ctx_get_team", || {
        with(|s| {
            Ok(s.ctxs
                .get((ctx as usize).wrapping_sub(1))
                .copied()
                .flatten())
        })
    });
    if team.is_null() {
        return -1;
    }
    // SAFETY: the caller's team slot.
    unsafe { team.write(t.map_or(std::ptr::null_mut(), |i| (i + 1) as *mut c_void)) };
    if t.is_some() { 0 } else { -1 }
}

// ---------------------------------------------------------------------------------
// Distributed locks: the lock word of PE 0 holds 0 (free) or 1 + the holder's PE.

#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_set_lock(lock: *mut c_long) {
    entry("shmem_set_lock", || {
        let me = with(|s| Ok(u64::from(s.me) + 1))?;
        wait_for(|| with(|s| Ok(s.amo(lock as usize, 0, 8, Amo::Cswap, 0, me, true)? == 0)))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_test_lock(lock: *mut c_long) -> c_int {
    entry("shmem_test_lock", || {
        with(|s| {
            // Programs spin on test_lock: it polls, so that this PE serves the others.
            s.ep.poll();
            let me = u64::from(s.me) + 1;
            Ok(c_int::from(
                s.amo(lock as usize, 0, 8, Amo::Cswap, 0, me, true)? != 0,
            ))
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_clear_lock(lock: *mut c_long) {
    entry("shmem_clear_lock", || {
        with(|s| {
            s.quiet()?;
            let me = u64::from(s.me) + 1;
            let old = s.amo(lock as usize, 0, 8, Amo::Cswap, me, 0, true)?;
            if old != me {
                return Err(ShmemError::Invalid(
                    "shmem_clear_lock of a lock this PE does not hold".into(),
                ));
            }
            Ok(())
        })
    })
}

/// The default branch of shmem.h's generic selections: a program naming a generic
/// function with an unsupported type does not compile (this takes no arguments); it
/// exists so that every declaration of the header is a symbol of the library.
#[unsafe(no_mangle)]
pub extern "C" fn gexshmem_generic_type_not_supported() {
    crate::fatal(
        "shmem.h",
        "a generic function was called with an unsupported type",
    )
}

#[cfg(test)]
mod tests {
    //! One PE in this process (gex's singleton start): the direct paths from several
    //! threads at once, contexts, quiet, and finalize racing them. One test, since a
    //! process initialises OpenSHMEM once.
    use super::*;
    use gex_sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[test]
    fn threads_contexts_and_finalize_on_one_pe() {
        let mut provided = -1;
        // SAFETY: `provided` is a local int.
        assert_eq!(unsafe { shmem_init_thread(3, &raw mut provided) }, 0);
        assert_eq!(provided, 3);
        assert_eq!((shmem_my_pe(), shmem_n_pes()), (0, 1));
        const THREADS: usize = 4;
        const N: usize = 20_000;
        let counter = shmem_calloc(1, 8) as usize;
        let words = shmem_calloc(THREADS * 8, 8) as usize;
        assert!(counter != 0 && words != 0);
        let hs: Vec<_> = (0..THREADS)
            .map(|t| {
                std::thread::spawn(move || {
                    let mut ctx: *mut c_void = std::ptr::null_mut();
                    // SAFETY: `ctx` is a local slot.
                    assert_eq!(unsafe { shmem_ctx_create(0, &raw mut ctx) }, 0);
                    let mine = (words + t * 64) as *mut c_void;
                    for i in 0..N {
                        let v = [i as u64; 8];
                        // SAFETY: symmetric words of this PE's heap; `v` is a local.
                        unsafe {
                            shmem_long_atomic_fetch_inc(counter as *mut i64, 0);
                            if i % 2 == 0 {
                                shmem_putmem(mine, v.as_ptr().cast(), 64, 0);
                            } else {
                                shmem_ctx_putmem_nbi(ctx, mine, v.as_ptr().cast(), 64, 0);
                                shmem_ctx_quiet(ctx);
                            }
                        }
                        let mut back = [0u64; 8];
                        // SAFETY: as above.
                        unsafe { shmem_getmem(back.as_mut_ptr().cast(), mine, 64, 0) };
                        assert_eq!(back, v, "thread {t}, iteration {i}");
                    }
                    shmem_ctx_destroy(ctx);
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        shmem_quiet();
        // Context handles: looked up without the lock, refused once destroyed.
        let mut ctx: *mut c_void = std::ptr::null_mut();
        // SAFETY: `ctx` is a local slot.
        assert_eq!(unsafe { shmem_ctx_create(0, &raw mut ctx) }, 0);
        assert_eq!(ctx_pe(ctx, 0).unwrap(), 0);
        assert!(ctx_live(ctx).unwrap());
        shmem_ctx_destroy(ctx);
        assert!(matches!(ctx_pe(ctx, 0), Err(ShmemError::BadCtx)));
        assert!(matches!(ctx_live(ctx), Err(ShmemError::BadCtx)));
        assert!(!ctx_live(std::ptr::null_mut()).unwrap());
        // SAFETY: the symmetric counter.
        let total = unsafe { shmem_long_atomic_fetch(counter as *const i64, 0) };
        assert_eq!(total, (THREADS * N) as i64);
        // SAFETY: as above.
        let old = unsafe { shmem_long_atomic_compare_swap(counter as *mut i64, total, 7, 0) };
        assert_eq!(old, total);
        // SAFETY: as above.
        assert_eq!(unsafe { shmem_long_g(counter as *const i64, 0) }, 7);

        // Threads still putting while the PE finalises: their calls fail (not
        // initialised) once it began, and none touches unmapped memory.
        let stop = Arc::new(AtomicBool::new(false));
        let racers: Vec<_> = (0..2)
            .map(|t| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut ok = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let v = ok.to_ne_bytes();
                        if state::put_on(None, words + t * 64, &v, 0, false).is_ok()
                            && state::amo(counter, 0, 8, Amo::Add, 1, 0, true).is_ok()
                        {
                            ok += 1;
                        } else {
                            break;
                        }
                    }
                    ok
                })
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(20));
        shmem_finalize();
        let after = state::put_on(None, words, &[1], 0, false);
        assert!(
            matches!(after, Err(ShmemError::NotInitialized)),
            "{after:?}"
        );
        assert!(matches!(state::quiet(), Err(ShmemError::NotInitialized)));
        stop.store(true, Ordering::Relaxed);
        for r in racers {
            r.join().unwrap();
        }
    }
}
