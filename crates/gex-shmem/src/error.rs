//! The errors of the library. OpenSHMEM functions have no error results: an error
//! is reported on stderr and the job is aborted (see `crate::entry`).

use std::fmt;

/// What went wrong inside a call.
#[derive(Debug)]
pub enum ShmemError {
    /// A call before `shmem_init` (or after `shmem_finalize`).
    NotInitialized,
    /// `shmem_init` after `shmem_finalize` (OpenSHMEM allows one init per program).
    Finalized,
    /// A configuration setting is wrong (the message says which).
    Config(String),
    /// A remote address that is neither in the symmetric heap nor in static data.
    NotSymmetric(usize),
    /// A PE number out of range.
    BadPe(i32),
    /// An atomic on an address not aligned to its width.
    Misaligned(usize),
    /// A team handle that is not a live team.
    BadTeam,
    /// A context handle that is not a live context.
    BadCtx,
    /// An invalid argument (the message says which).
    Invalid(String),
    /// The symmetric heap is exhausted (a result of the allocation calls, not fatal).
    NoMemory,
    /// A target refused an access to its static data (out of range).
    RemoteFault,
    /// gex failed (the message is gex's).
    Gex(String),
}

impl fmt::Display for ShmemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShmemError::NotInitialized => {
                write!(f, "OpenSHMEM is not initialised (call shmem_init first)")
            }
            ShmemError::Finalized => write!(f, "shmem_init after shmem_finalize"),
            ShmemError::Config(m) => write!(f, "configuration: {m}"),
            ShmemError::NotSymmetric(a) => write!(
                f,
                "address {a:#x} is not symmetric (neither in the symmetric heap nor in the program's static data)"
            ),
            ShmemError::BadPe(p) => write!(f, "no such PE {p}"),
            ShmemError::Misaligned(a) => write!(f, "atomic on misaligned address {a:#x}"),
            ShmemError::BadTeam => write!(f, "invalid team handle"),
            ShmemError::BadCtx => write!(f, "invalid context handle"),
            ShmemError::Invalid(m) => write!(f, "invalid argument: {m}"),
            ShmemError::NoMemory => write!(f, "the symmetric heap is exhausted (GEX_SHMEM_HEAP)"),
            ShmemError::RemoteFault => {
                write!(f, "a remote PE refused an access outside its static data")
            }
            ShmemError::Gex(m) => write!(f, "gex: {m}"),
        }
    }
}

impl std::error::Error for ShmemError {}

macro_rules! from_gex {
    ($($t:ty),*) => {$(
        impl From<$t> for ShmemError {
            fn from(e: $t) -> Self {
                ShmemError::Gex(e.to_string())
            }
        }
    )*};
}
from_gex!(
    gex_facade::InitError,
    gex_facade::AmError,
    gex_facade::RegisterError,
    gex_facade::EpError,
    gex_facade::rma::RmaError,
    gex_facade::coll::CollError
);
