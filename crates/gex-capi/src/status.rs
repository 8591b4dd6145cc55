//! Return codes ([`gex_status_t`]), the error of an entry point ([`Error`]), the
//! per-thread last error message, and [`entry`], the wrapper every entry point runs in
//! (panics caught).
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};

c_enum! {
    DECLS;
    /// What an entry point returns (as an `int`). `GEX_OK` and `GEX_PENDING` are not
    /// errors; every error is negative.
    pub enum gex_status_t {
        /// Success.
        GEX_OK = 0 => c"success",
        /// The operation has not completed yet (`gex_event_test`): not an error.
        GEX_PENDING = 1 => c"the operation has not completed yet",
        /// A required pointer argument was NULL.
        GEX_ERR_NULL = -1 => c"a required pointer argument was NULL",
        /// An argument is invalid: a handle that is not (or no longer) one of gex's, a
        /// length whose byte count overflows, an unknown operator, too many AM arguments, a
        /// rank out of range, an unregistered handler index.
        GEX_ERR_INVALID = -2 => c"an argument is invalid",
        /// The client could not be initialised or finalised (bootstrap, configuration,
        /// conduit); the last error says why.
        GEX_ERR_INIT = -3 => c"the client could not be initialised or finalised",
        /// An active-message operation failed (payload too large, reply from a reply, a
        /// second reply, the conduit failed).
        GEX_ERR_AM = -4 => c"an active-message operation failed",
        /// A put, get or atomic failed (outside the target's segment, misaligned, an
        /// operation not in the atomic domain, the conduit failed).
        GEX_ERR_RMA = -5 => c"a put, get or atomic operation failed",
        /// A collective failed.
        GEX_ERR_COLL = -6 => c"a collective operation failed",
        /// An event failed: it belongs to another endpoint, or its operation was abandoned.
        GEX_ERR_EVENT = -7 => c"the event failed (another endpoint's, or abandoned)",
        /// Another thread is inside a call on this endpoint (an endpoint is used by one
        /// thread at a time).
        GEX_ERR_BUSY = -8 => c"another thread is inside a call on this endpoint",
        /// Called from inside an AM handler, where only the token functions are allowed.
        GEX_ERR_IN_HANDLER = -9 => c"not allowed inside an active-message handler",
        /// Not allowed in the current state (e.g. finalising a client whose endpoints are
        /// still open).
        GEX_ERR_STATE = -10 => c"not allowed in the current state",
        /// gex panicked inside the call (a bug in gex): the panic's message is the last
        /// error; the endpoint involved may be unusable (its later calls return this too).
        GEX_ERR_PANIC = -11 => c"gex panicked inside the call (a bug in gex)",
    }
    /// A static, NUL-terminated description.
    fn message(self) -> &'static CStr;
}

impl gex_status_t {
    /// The status as the `int` the entry points return.
    pub fn code(self) -> c_int {
        self as c_int
    }
}

/// The error of an entry point: a status and the message stored as the thread's last
/// error.
#[derive(Debug)]
pub struct Error {
    /// The code returned.
    pub status: gex_status_t,
    /// What went wrong.
    pub msg: String,
}

impl Error {
    /// An error with `status` and `msg`.
    pub fn new(status: gex_status_t, msg: impl Into<String>) -> Self {
        Error {
            status,
            msg: msg.into(),
        }
    }

    /// `GEX_ERR_NULL` naming the argument.
    pub fn null(arg: &str) -> Self {
        Error::new(gex_status_t::GEX_ERR_NULL, format!("{arg} is NULL"))
    }

    /// `GEX_ERR_INVALID` with `msg`.
    pub fn invalid(msg: impl Into<String>) -> Self {
        Error::new(gex_status_t::GEX_ERR_INVALID, msg)
    }
}

impl From<gex_facade::AmError> for Error {
    fn from(e: gex_facade::AmError) -> Self {
        use gex_facade::AmError;
        let s = match e {
            AmError::BadRank { .. }
            | AmError::BadEndpoint { .. }
            | AmError::TooManyArgs { .. }
            | AmError::UnregisteredHandler(_)
            | AmError::ReservedHandler(_) => gex_status_t::GEX_ERR_INVALID,
            AmError::Event(_) => gex_status_t::GEX_ERR_EVENT,
            _ => gex_status_t::GEX_ERR_AM,
        };
        Error::new(s, e.to_string())
    }
}

impl From<gex_facade::rma::RmaError> for Error {
    fn from(e: gex_facade::rma::RmaError) -> Self {
        use gex_facade::rma::RmaError;
        let s = match e {
            RmaError::BadRank { .. } | RmaError::BadEndpoint { .. } => {
                gex_status_t::GEX_ERR_INVALID
            }
            RmaError::Event(_) => gex_status_t::GEX_ERR_EVENT,
            _ => gex_status_t::GEX_ERR_RMA,
        };
        Error::new(s, e.to_string())
    }
}

impl From<gex_facade::coll::CollError> for Error {
    fn from(e: gex_facade::coll::CollError) -> Self {
        Error::new(gex_status_t::GEX_ERR_COLL, e.to_string())
    }
}

impl From<gex_facade::EventError> for Error {
    fn from(e: gex_facade::EventError) -> Self {
        Error::new(gex_status_t::GEX_ERR_EVENT, e.to_string())
    }
}

impl From<gex_facade::InitError> for Error {
    fn from(e: gex_facade::InitError) -> Self {
        Error::new(gex_status_t::GEX_ERR_INIT, e.to_string())
    }
}

impl From<gex_facade::EpError> for Error {
    fn from(e: gex_facade::EpError) -> Self {
        use gex_facade::EpError;
        let s = match e {
            EpError::NoSuchEndpoint { .. } | EpError::Taken(_) => gex_status_t::GEX_ERR_INVALID,
            EpError::Full { .. } => gex_status_t::GEX_ERR_STATE,
            _ => gex_status_t::GEX_ERR_INIT,
        };
        Error::new(s, e.to_string())
    }
}

impl From<gex_facade::RegisterError> for Error {
    fn from(e: gex_facade::RegisterError) -> Self {
        Error::new(gex_status_t::GEX_ERR_INVALID, e.to_string())
    }
}

thread_local! {
    /// The message of the last failed call on this thread.
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

/// Stores `msg` as this thread's last error (interior NULs become spaces).
fn set_last(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    // A thread being torn down has no last error any more: nothing to keep.
    let _ = LAST.try_with(|l| *l.borrow_mut() = c);
}

/// Runs the body of an entry point: its result as a code, its error's message stored
/// as the thread's last error, a panic caught and turned into `GEX_ERR_PANIC`.
pub fn entry(f: impl FnOnce() -> Result<gex_status_t, Error>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(s)) => s.code(),
        Ok(Err(e)) => {
            set_last(&e.msg);
            e.status.code()
        }
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            set_last(&format!("gex panicked: {what}"));
            gex_status_t::GEX_ERR_PANIC.code()
        }
    }
}

/// The description of the status `code` (a static, NUL-terminated string; never
/// NULL). Unknown codes get "unknown gex status code".
#[unsafe(no_mangle)]
pub extern "C" fn gex_error_message(code: c_int) -> *const c_char {
    match gex_status_t::from_code(code) {
        Some(s) => s.message().as_ptr(),
        None => c"unknown gex status code".as_ptr(),
    }
}

/// The message of the last call that failed on the calling thread (empty if none
/// did). Never NULL.
///
/// # Safety
/// The string is the thread's own and stays valid until the next call on this thread
/// that fails; copy it to keep it. It is not to be freed or written.
#[unsafe(no_mangle)]
pub extern "C" fn gex_last_error() -> *const c_char {
    // The CString lives in the thread-local until the next failure replaces it: the
    // pointer stays valid that long (the heap buffer does not move with the RefCell).
    LAST.try_with(|l| l.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_and_has_a_message() {
        for c in -11..=1 {
            let s = gex_status_t::from_code(c).expect("a code");
            assert_eq!(s.code(), c);
            assert!(!s.message().to_bytes().is_empty());
        }
        assert_eq!(gex_status_t::from_code(-12), None);
        assert_eq!(gex_status_t::from_code(2), None);
    }

    #[test]
    fn a_panic_is_an_error_code_with_its_message() {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let c = entry(|| panic!("boom"));
        std::panic::set_hook(prev);
        assert_eq!(c, gex_status_t::GEX_ERR_PANIC.code());
        let m = LAST.with(|l| l.borrow().to_string_lossy().into_owned());
        assert!(m.contains("boom"), "{m}");
    }

    #[test]
    fn an_error_sets_the_last_message_and_success_keeps_it() {
        let c = entry(|| Err(Error::null("out")));
        assert_eq!(c, gex_status_t::GEX_ERR_NULL.code());
        assert_eq!(entry(|| Ok(gex_status_t::GEX_OK)), 0);
        let m = LAST.with(|l| l.borrow().to_string_lossy().into_owned());
        assert_eq!(m, "out is NULL");
    }
}
