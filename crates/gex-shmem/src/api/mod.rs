//! The C entry points of OpenSHMEM 1.5 (`include/shmem.h` declares each of them).
//!
//! Every function is `unsafe extern "C"`: the caller promises what the OpenSHMEM
//! specification asks of it, which this module cannot check (pointers valid for the
//! element counts given; a symmetric address that is the same object on every PE).
//! What it can check it does (NULL with a non-zero count, PE numbers, symmetric
//! ranges, team and context handles, alignment of atomics): a failure ends the process
//! with a message (see `crate::entry`).
//!
//! One file per family: `setup` (init, finalize, queries), `alloc` (the symmetric
//! heap), `rma` (puts, gets, signals, fence, quiet), `amo` (atomics), `sync`
//! (point-to-point waits and tests), `teams` (barriers and teams), `coll` (team
//! collectives and reductions), `ctx` (contexts) and `lock` (distributed locks);
//! this module holds the helpers they share (the caller's memory as slices, context
//! and team handles). Every entry point is re-exported here.
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
#[inline(always)]
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
        .ok_or_else(|| ShmemError::Invalid(format!("{n} elements of {size} bytes overflow").into()))
}

/// The address of element `i` of the strided array at `base` (a stride of `stride`
/// elements of `size` bytes), wrapping: the caller's promise makes it valid, or the
/// access refuses it.
#[inline]
fn strided_at(base: isize, i: isize, stride: isize, size: usize) -> isize {
    base.wrapping_add(i.wrapping_mul(stride).wrapping_mul(size as isize))
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

mod alloc;
mod amo;
mod coll;
mod ctx;
mod lock;
mod rma;
mod setup;
mod sync;
mod teams;
#[cfg(test)]
mod tests;

pub use alloc::*;
pub use amo::*;
pub use coll::*;
pub use ctx::*;
pub use lock::*;
pub use rma::*;
pub use setup::*;
pub use sync::*;
pub use teams::*;
