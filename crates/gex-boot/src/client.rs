//! What the bootstrap clients (fork, PMI-1, PMI-2, PMIx) have in common: the
//! identity half of their [`Bootstrap`](gex_core::boot::Bootstrap) impls, the
//! collective sequence number and the "after finalize" check, and the words of an
//! abort. Each client struct has `rank`, `size`, `hosts` and `seq` fields (and,
//! for [`collective_seq!`]`(finalized)`, a `finalized` one).

use std::os::fd::AsFd;

use gex_core::boot::BootError;
use rustix::io::Errno;
use rustix::net::SendFlags;

/// `name`, `rank`, `size` and `host_ids` of a
/// [`Bootstrap`](gex_core::boot::Bootstrap) impl, read from the implementing struct's
/// `rank: u32`, `size: u32` and `hosts: Vec<u32>` fields; `name` returns the
/// literal given. Used by this crate's clients and by test bootstraps (the test
/// kit's scripted one): exported for that reason only, hidden from the docs and
/// not part of gex-boot's API.
#[doc(hidden)]
#[macro_export]
macro_rules! bootstrap_identity {
    ($name:literal) => {
        fn name(&self) -> &'static str {
            $name
        }
        fn rank(&self) -> u32 {
            self.rank
        }
        fn size(&self) -> u32 {
            self.size
        }
        fn host_ids(&self) -> &[u32] {
            &self.hosts
        }
    };
}

/// Inherent `next_seq` (the number of the next bootstrap collective, from the
/// `seq` field) and, with `finalized`, `check_open` (a protocol error once the
/// `finalized` field is set).
macro_rules! collective_seq {
    () => {
        fn next_seq(&mut self) -> u64 {
            let s = self.seq;
            self.seq += 1;
            s
        }
    };
    (finalized) => {
        collective_seq!();

        fn check_open(&self, what: &str) -> Result<(), BootError> {
            if self.finalized {
                Err(BootError::Protocol(format!(
                    "bootstrap {what} called after finalize"
                )))
            } else {
                Ok(())
            }
        }
    };
}

/// `exchange`, `barrier` and `broadcast` of a `Bootstrap` impl for a PMI client:
/// each checks the client is open, takes the next sequence number and runs the
/// collective over the key-value space ([`Kvs`](crate::pmi) provided methods).
macro_rules! kvs_collectives {
    () => {
        fn exchange(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, BootError> {
            self.check_open("exchange")?;
            let seq = self.next_seq();
            self.kvs_exchange(seq, mine)
        }
        fn barrier(&mut self) -> Result<(), BootError> {
            self.check_open("barrier")?;
            self.next_seq();
            self.fence()
        }
        fn broadcast(&mut self, root: u32, data: &[u8]) -> Result<Vec<u8>, BootError> {
            self.check_open("broadcast")?;
            let seq = self.next_seq();
            self.kvs_broadcast(seq, root, data)
        }
    };
}

/// `abort` and `request_exit` of a `Bootstrap` impl for a process-manager client
/// (PMI-1, PMI-2, PMIx), over its inherent `send_abort(code, reason)`: `abort`
/// prints the message itself (no process manager does), asks the manager to end the
/// job and exits with the code; `request_exit` asks the same with the
/// [`exit_reason`]. A request that cannot be delivered is logged (`$what` names the
/// protocol) and otherwise ignored. With `finalize`, also a `finalize` that sends the
/// inherent `send_finalize()` once (the `finalized` field), until it succeeds.
macro_rules! abort_by_request {
    ($what:literal) => {
        fn abort(&mut self, code: i32, msg: &str) -> ! {
            let code = $crate::client::abort_code(code);
            $crate::client::print_abort(self.rank, code, msg);
            let why = $crate::client::abort_reason(self.rank, code, msg);
            if let Err(e) = self.send_abort(code, &why) {
                tracing::debug!(rank = self.rank, code, error = %e, concat!($what, " abort not delivered"));
            }
            std::process::exit(code)
        }
        fn request_exit(&mut self, code: i32) {
            let why = $crate::client::exit_reason(self.rank, code);
            if let Err(e) = self.send_abort(code, &why) {
                tracing::debug!(rank = self.rank, code, error = %e, "exit request not delivered");
            }
        }
    };
    ($what:literal, finalize) => {
        abort_by_request!($what);

        fn finalize(&mut self, _code: i32) -> Result<(), BootError> {
            if self.finalized {
                return Ok(());
            }
            self.send_finalize()?;
            self.finalized = true;
            Ok(())
        }
    };
}

/// Sends all of `bytes` on `sock` (retrying on `EINTR`, without `SIGPIPE`); a
/// failure is told by `lost_or_io(errno, "send")`.
pub(crate) fn send_all(
    sock: impl AsFd,
    bytes: &[u8],
    lost_or_io: fn(Errno, &str) -> BootError,
) -> Result<(), BootError> {
    let mut rest = bytes;
    while !rest.is_empty() {
        match rustix::net::send(&sock, rest, SendFlags::NOSIGNAL) {
            Ok(n) => rest = &rest[n..],
            Err(Errno::INTR) => {}
            Err(e) => return Err(lost_or_io(e, "send")),
        }
    }
    Ok(())
}

/// The exit code of an abort with `code`: 0 would read as success, so it is 1.
pub(crate) fn abort_code(code: i32) -> i32 {
    if code == 0 { 1 } else { code }
}

/// Prints `gex: rank R aborted the job (code C): MSG` on standard error, for when
/// the launcher does not print the message itself.
pub(crate) fn print_abort(rank: u32, code: i32, msg: &str) {
    eprintln!("gex: rank {rank} aborted the job (code {code}): {msg}");
}

/// The reason handed to a process manager's abort call.
pub(crate) fn abort_reason(rank: u32, code: i32, msg: &str) -> String {
    format!("gex rank {rank} aborted the job (code {code}): {msg}")
}

/// The reason handed to a process manager's abort call by `request_exit`.
pub(crate) fn exit_reason(rank: u32, code: i32) -> String {
    format!("gex rank {rank} ended the job with exit code {code}")
}
