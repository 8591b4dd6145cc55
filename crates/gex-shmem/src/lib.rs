//! # gex-shmem
//!
//! OpenSHMEM 1.5 for C on gex: `libgexshmem.so` / `libgexshmem.a` and
//! `include/shmem.h`. docs/shmem.md is the user's guide (what is supported, building
//! and launching a C program, the Sandia test suite and its exclusion list); this is
//! the implementer's view.
//!
//! - `state`: the PE's state behind one lock: the gex client and its primordial
//!   endpoint (with gex-rma and gex-coll), the symmetric heap (the gex segment, carved by
//!   the deterministic allocator of `heap`), static data reached by active messages,
//!   teams and contexts (each context with a gex endpoint of its own from a pool).
//! - [`api`]: the C entry points. The typed families (`shmem_<type>_put`, atomics,
//!   reductions, ...) are one `macro_rules!` line per type.
//!
//! ## The rules at the boundary
//! OpenSHMEM functions return no errors: a call that fails (a PE out of range, an
//! address that is not symmetric, a call before `shmem_init`, a gex failure) prints
//! the reason on stderr and ends the process with status 1, which gex-run reports as a
//! failed rank and turns into the end of the job
//! (`Client::abort`). Panics never cross the ABI: every
//! entry point runs inside [`std::panic::catch_unwind`], and a panic is such a failure.
//!
//! ## Unsafe code
//! Denied at the root; allowed in `state` (the static-data region from
//! `dl_iterate_phdr`, the active-message handlers that write it, local atomics) and in
//! [`api`] (the `unsafe extern "C"` entry points reading and writing the caller's
//! memory), each block with its `// SAFETY:`.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod api;
mod error;
mod heap;
mod state;

pub use error::{Detail, ShmemError, ThreadMisuse};

/// The `GEX_*` settings gex-shmem reads (at `shmem_init`), beside every setting of gex
/// (docs/env.md), and the one its test-suite runner reads. `SHMEM_SYMMETRIC_SIZE`, the name other OpenSHMEM libraries read, is
/// honoured when `GEX_SHMEM_HEAP` is unset.
pub const ENV_VARS: &[EnvVar] = &[
    EnvVar {
        name: "GEX_SHMEM_HEAP",
        default: "64M",
        doc: "gex-shmem: bytes of symmetric heap per PE (K/M/G suffixes); SHMEM_SYMMETRIC_SIZE when unset.",
    },
    EnvVar {
        name: "GEX_SOS_TESTS",
        default: "/work/shared/suites/sos-tests",
        doc: "crates/gex-shmem/sos/run (not the library): where Sandia OpenSHMEM's test suite is.",
    },
];

use gex_facade::config::EnvVar;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Reports a failed call and ends the process (OpenSHMEM calls have no error results).
pub(crate) fn fatal(name: &str, msg: &str) -> ! {
    state::abort_job(&format!("gex-shmem: {name}: {msg}"))
}

/// Runs an entry point's body: its error or panic ends the process with a message
/// (out of line, so that the common path stays small).
///
/// Not forced inline: inlined into every entry point it grew the frames of the put and
/// `p` fast paths (which call it only when they do not apply), and their 8-byte cells
/// went from 6.4 to 10.6 ns (2026-12-01).
pub(crate) fn entry<R>(name: &str, f: impl FnOnce() -> Result<R, ShmemError>) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => failed(name, e),
        Err(p) => panicked(name, p),
    }
}

/// An entry point's error: ends the process with its message.
#[cold]
#[inline(never)]
fn failed(name: &str, e: ShmemError) -> ! {
    fatal(name, &e.to_string())
}

/// An entry point's panic: ends the process with its message.
#[cold]
#[inline(never)]
fn panicked(name: &str, p: Box<dyn std::any::Any + Send>) -> ! {
    let m = p
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into());
    fatal(name, &format!("panicked: {m}"))
}
