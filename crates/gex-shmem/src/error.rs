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
    Config(Detail),
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
    Invalid(Detail),
    /// The symmetric heap is exhausted (a result of the allocation calls, not fatal).
    NoMemory,
    /// A target refused an access to its static data (out of range).
    RemoteFault,
    /// gex failed (the message is gex's).
    Gex(Detail),
    /// A call the thread level does not allow (the state is another thread's), or one
    /// made from inside a call of this library.
    Thread(ThreadMisuse),
}

/// What [`ShmemError::Thread`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThreadMisuse {
    /// A call that needs the PE's state from a thread other than the one that called
    /// `shmem_init`, at this thread level (`SHMEM_THREAD_SINGLE` or
    /// `SHMEM_THREAD_FUNNELED`: only that thread may call).
    NotInitThread(i32),
    /// A call made while a call of this library was running on the same thread (from
    /// a signal handler, say).
    Reentered,
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
            ShmemError::Thread(ThreadMisuse::NotInitThread(level)) => write!(
                f,
                "called from a thread other than the one that called shmem_init, at thread level {} (only that thread may call; ask for SHMEM_THREAD_SERIALIZED or SHMEM_THREAD_MULTIPLE with shmem_init_thread)",
                match level {
                    0 => "SHMEM_THREAD_SINGLE",
                    _ => "SHMEM_THREAD_FUNNELED",
                }
            ),
            ShmemError::Thread(ThreadMisuse::Reentered) => write!(
                f,
                "called while another call of this library runs on the same thread"
            ),
        }
    }
}

impl std::error::Error for ShmemError {}

/// The message of a [`ShmemError`]: one pointer wide, so that the error, and every
/// result carrying it, is two words and comes back from a call in registers. With
/// `String` messages a result was four words, returned through memory: two stores at
/// every level of a call, which on a 2-PE `shmem_broadcastmem` of 8 bytes waited behind
/// the store that published the data to the other PE (2026-12-01).
#[derive(Debug)]
pub struct Detail(
    // A thin pointer is the point (`Box<str>` is two words).
    #[allow(clippy::box_collection)] Box<String>,
);

impl<T: Into<String>> From<T> for Detail {
    fn from(m: T) -> Self {
        Detail(Box::new(m.into()))
    }
}

impl fmt::Display for Detail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

macro_rules! from_gex {
    ($($t:ty),*) => {$(
        impl From<$t> for ShmemError {
            fn from(e: $t) -> Self {
                ShmemError::Gex(e.to_string().into())
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
