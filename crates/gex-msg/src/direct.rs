//! The single-copy rendezvous between ranks of one host: where the receiver reads a
//! rendezvous message from, and why that is sound whatever a peer sends.
//!
//! A rendezvous send copies the caller's bytes into a buffer of the layer, an
//! `Arc<[u8]>` held by the send (`SendOp::Rndv`) until the receiver says it is done
//! (`DONE`), the send fails, or the sending endpoint is dropped. Its request to send
//! (`RTS`) names the buffer by a 64-bit **key**:
//!
//! - **Thread ranks of one process** ([`JobLayout::same_process`](gex_core::spi::JobLayout::same_process)):
//!   the key is an id in this process's [`Registry`] of lent buffers, never an
//!   address. The sender registers its `Arc` under a fresh id ([`lend`]) with who lent
//!   it to whom and its length; the receiver, after matching the `RTS`, takes it out
//!   ([`take`]) only if the id exists and the owner, destination and length are the
//!   ones of the `RTS`, then copies from the `Arc` into the receive buffer. A peer that
//!   lies or has a bug (a wrong id, a stale one, another rank's) gets nothing taken and
//!   the receiver falls back to the chunked protocol: it cannot make the receiver read
//!   memory that was not lent to it. The `Arc` keeps the bytes alive as long as either
//!   side holds it, so the sender may drop its send (endpoint dropped, panic) while the
//!   receiver copies: no lifetime depends on a message arriving. All of it is safe
//!   code (no raw pointer crosses a thread).
//! - **Processes of one host**: the key is the address of the sender's buffer in its
//!   process, read by the receiver with `process_vm_readv(2)` (CMA,
//!   [`gex_sync::cma::cma_read`]) from the sender's process id in the job layout. The
//!   kernel checks the range against the sender's mappings: a wrong address is
//!   `EFAULT` (then the receiver falls back to the chunked protocol) or bytes of the
//!   sender's own memory, never undefined behaviour in the receiver. The sender keeps
//!   the buffer owned until `DONE`; an endpoint dropped before then leaks the buffers
//!   of such sends (`Msg`'s `drop`), so a late read still gets the message's bytes (or
//!   `ESRCH`/`EFAULT` once the process is gone, and the chunks are asked for).
//!
//! **Lent caller buffers** (the blocking standard [`send`](crate::MsgExt::send) to a
//! thread rank of the process, the only true single copy): the registry entry holds
//! the address of the caller's `&[u8]` instead of an `Arc`, with a state (`Ready`,
//! `Reading`, `Done`) changed only under the registry's lock. The receiver moves it
//! from `Ready` to `Reading` when it takes it, copies outside the lock, and sets `Done`
//! ([`BorrowedRead`], also on drop). The sender's [`Loan`] borrows the slice for its
//! own lifetime and never ends (returns, unwinds, or is dropped) while the state is
//! `Reading`: [`Loan::withdraw`] replaces a `Ready` entry by an owned copy (then the
//! receiver reads the copy), waits out a `Reading` one, and `Loan`'s `drop` withdraws.
//! No message changes that: a send that ends (its `DONE` or a refusal handled, even
//! early from a buggy or lying receiver) leaves an entry being read in place, and the
//! read's end removes it. So the receiver reads the caller's bytes only while the
//! caller's shared borrow is alive (nobody can write them), and never through an
//! address that came from the wire. The sender withdraws after a bounded wait (`send`'s budget), so two ranks
//! sending each other large messages before receiving still do not deadlock.
//!
//! The registry is a mutex-protected map taken three times per rendezvous message
//! (lend, take, and the sender's clean-up): the rendezvous path moves at least
//! `GEX_MSG_EAGER_MAX` bytes per message, which costs far more than an uncontended
//! lock; the eager path never touches it.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// Who lent a buffer to whom (world ranks and the endpoint index), and the buffer.
#[derive(Debug)]
struct Lent {
    src: u32,
    dst: u32,
    ep: u16,
    len: usize,
    held: Held,
    /// Its send ended while it was being read (`Ticket`'s drop): the read's end
    /// removes it.
    orphan: bool,
}

/// What a registry entry holds.
#[derive(Debug)]
enum Held {
    /// A buffer of the layer's.
    Owned(Arc<[u8]>),
    /// The address of a caller's slice of `len` bytes, borrowed by a [`Loan`].
    Borrowed { addr: LentPtr, state: Read },
}

/// The address of a caller's lent slice (a pointer, so it keeps its provenance).
#[derive(Clone, Copy, Debug)]
struct LentPtr(*const u8);

// SAFETY: the pointer is only dereferenced by `BorrowedRead::read`, under the
// registry's `Ready`/`Reading`/`Done` protocol (module docs), which keeps the slice
// alive and unwritten while it is read; moving the address between threads (inside
// the registry's mutex) does nothing by itself.
unsafe impl Send for LentPtr {}

/// The state of a borrowed entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Read {
    /// Not taken yet: the sender may still withdraw it.
    Ready,
    /// A receiver is copying from the caller's slice.
    Reading,
    /// The receiver is done with it.
    Done,
    /// Withdrawn into a copy, or no longer in the registry (the send ended: done, or
    /// refused as truncated).
    Gone,
}

/// This process's lent rendezvous buffers, by id.
#[derive(Debug, Default)]
struct Registry {
    next: u64,
    lent: HashMap<u64, Lent>,
}

impl Registry {
    /// Registers `len` bytes `held` for rank `src`'s send to rank `dst` (endpoint
    /// `ep`) under a new id, which it returns. Ids are never reused within a process
    /// (2^64 of them), so a stale id finds nothing.
    fn insert(&mut self, src: u32, dst: u32, ep: u16, len: usize, held: Held) -> u64 {
        let id = self.next;
        self.next += 1;
        self.lent.insert(
            id,
            Lent {
                src,
                dst,
                ep,
                len,
                held,
                orphan: false,
            },
        );
        id
    }
}

fn registry() -> MutexGuard<'static, Registry> {
    static REG: OnceLock<Mutex<Registry>> = OnceLock::new();
    // A panic while the lock is held cannot leave the map inconsistent (each operation
    // is one insert or remove): a poisoned lock is used as is.
    REG.get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A buffer lent to a thread rank of this process: removed from the registry when
/// dropped (if the receiver did not take it).
#[derive(Debug)]
pub(crate) struct Ticket(u64);

impl Ticket {
    /// The id the `RTS` carries.
    pub(crate) fn key(&self) -> u64 {
        self.0
    }
}

impl Drop for Ticket {
    /// Removes the entry, except one being read (whatever messages said: a `DONE` or a
    /// refusal that came early, from a buggy or lying receiver): that one stays
    /// `Reading`, so its `Loan` keeps waiting, and the read's end removes it.
    fn drop(&mut self) {
        let mut r = registry();
        match r.lent.get_mut(&self.0) {
            Some(Lent {
                held:
                    Held::Borrowed {
                        state: Read::Reading,
                        ..
                    },
                orphan,
                ..
            }) => *orphan = true,
            Some(_) => {
                r.lent.remove(&self.0);
            }
            None => {}
        }
    }
}

/// Lends `data` from rank `src` to rank `dst` (endpoint `ep`): its id goes in the RTS.
pub(crate) fn lend(src: u32, dst: u32, ep: u16, data: Arc<[u8]>) -> Ticket {
    let len = data.len();
    Ticket(registry().insert(src, dst, ep, len, Held::Owned(data)))
}

/// What a receiver took from the registry.
#[derive(Debug)]
pub(crate) enum Taken {
    /// A buffer of the sender's layer.
    Owned(Arc<[u8]>),
    /// A caller's slice, being read.
    Borrowed(BorrowedRead),
}

impl Taken {
    /// True if the bytes are read from the sender's caller's slice (no copy at the
    /// sender).
    pub(crate) fn in_place(&self) -> bool {
        matches!(self, Taken::Borrowed(_))
    }

    /// Copies the message into `out` (exactly its length).
    pub(crate) fn copy_to(self, out: &mut [u8]) {
        self.read(|b| out.copy_from_slice(b));
    }

    /// Calls `f` with the message's bytes (then the read is done).
    pub(crate) fn read(self, f: impl FnOnce(&[u8])) {
        match self {
            Taken::Owned(d) => f(&d),
            Taken::Borrowed(b) => b.read(f),
        }
    }
}

/// A receiver's read of a caller's lent slice: the entry is `Reading` until this is
/// dropped (then `Done`).
#[derive(Debug)]
pub(crate) struct BorrowedRead {
    key: u64,
    addr: LentPtr,
    len: usize,
}

impl BorrowedRead {
    fn read(self, f: impl FnOnce(&[u8])) {
        // SAFETY: `addr`/`len` were registered by `Loan::new` from a live `&[u8]` of
        // this process (never from the wire), and this read moved the entry from
        // `Ready` to `Reading` under the registry's lock. The `Loan` holding that
        // borrow does not end (return, unwind, drop) while the entry is `Reading`
        // (`Loan::withdraw`, called by its `drop`, waits for `Done`, which only this
        // value's `drop` sets), so the slice is alive and, being shared-borrowed, not
        // written while `f` runs (`self` is dropped, setting `Done`, only after `f`
        // returns, and the slice does not escape `f`).
        let src = unsafe { std::slice::from_raw_parts(self.addr.0, self.len) };
        f(src);
    }
}

impl Drop for BorrowedRead {
    fn drop(&mut self) {
        let mut r = registry();
        if let Some(Lent {
            held: Held::Borrowed { state, .. },
            orphan,
            ..
        }) = r.lent.get_mut(&self.key)
        {
            *state = Read::Done;
            if *orphan {
                r.lent.remove(&self.key);
            }
        }
    }
}

/// A caller's slice lent to a thread rank of this process for the duration of a
/// blocking send (module docs). Withdrawn when dropped.
#[derive(Debug)]
pub(crate) struct Loan<'a> {
    key: u64,
    data: &'a [u8],
}

impl<'a> Loan<'a> {
    /// Lends `data` from `src` to `dst` (endpoint `ep`); the [`Ticket`] (for the send)
    /// removes the entry once the send ends.
    pub(crate) fn new(src: u32, dst: u32, ep: u16, data: &'a [u8]) -> (Loan<'a>, Ticket) {
        let held = Held::Borrowed {
            addr: LentPtr(data.as_ptr()),
            state: Read::Ready,
        };
        let id = registry().insert(src, dst, ep, data.len(), held);
        (Loan { key: id, data }, Ticket(id))
    }

    /// The state of the lent slice.
    pub(crate) fn state(&self) -> Read {
        match registry().lent.get(&self.key) {
            Some(Lent {
                held: Held::Borrowed { state, .. },
                ..
            }) => *state,
            _ => Read::Gone,
        }
    }

    /// Ends the loan: a slice not taken yet is replaced by an owned copy (a receiver
    /// then reads the copy), a slice being read is waited for (the reader is copying,
    /// which needs nothing from this thread). Afterwards nobody reads the caller's slice.
    pub(crate) fn withdraw(&mut self) {
        let mut copy: Option<Arc<[u8]>> = None;
        loop {
            {
                let mut r = registry();
                match r.lent.get_mut(&self.key) {
                    Some(l) => match l.held {
                        Held::Borrowed {
                            state: Read::Ready, ..
                        } => {
                            if let Some(c) = copy.take() {
                                l.held = Held::Owned(c);
                                return;
                            }
                        }
                        Held::Borrowed {
                            state: Read::Reading,
                            ..
                        } => {}
                        _ => return,
                    },
                    None => return,
                }
            }
            // Outside the lock: copy (a `Ready` slice), or let the reader finish.
            if copy.is_none() && self.state() == Read::Ready {
                copy = Some(Arc::from(self.data));
            } else {
                std::thread::yield_now();
            }
        }
    }
}

impl Drop for Loan<'_> {
    fn drop(&mut self) {
        self.withdraw();
    }
}

/// A clone of the owned buffer lent under `key` (`None` while it is a borrowed
/// slice or after it was taken), for the chunks of a send whose receiver refused the
/// single copy.
pub(crate) fn owned(key: u64) -> Option<Arc<[u8]>> {
    match registry().lent.get(&key)?.held {
        Held::Owned(ref d) => Some(d.clone()),
        Held::Borrowed { .. } => None,
    }
}

/// Takes the buffer lent under `key` if it was lent by `src` to `dst` on endpoint
/// `ep` and holds `len` bytes; `None` (and nothing taken) otherwise.
pub(crate) fn take(key: u64, src: u32, dst: u32, ep: u16, len: usize) -> Option<Taken> {
    let mut r = registry();
    let l = r.lent.get_mut(&key)?;
    if l.src != src || l.dst != dst || l.ep != ep || l.len != len {
        return None;
    }
    match l.held {
        Held::Borrowed {
            addr,
            ref mut state,
        } => {
            if *state != Read::Ready {
                return None;
            }
            *state = Read::Reading;
            Some(Taken::Borrowed(BorrowedRead { key, addr, len }))
        }
        Held::Owned(_) => match r.lent.remove(&key)?.held {
            Held::Owned(d) => Some(Taken::Owned(d)),
            Held::Borrowed { .. } => None,
        },
    }
}

/// The sender's share of a cooperative copy (module `coop`): writes `bytes` (of the
/// caller's lent slice) at `to` in the receiver's process `pid`; false if the kernel
/// refused (the receiver then asks for the chunks).
pub(crate) fn coop_write(pid: u64, to: u64, bytes: &[u8]) -> bool {
    let Ok(to) = usize::try_from(to) else {
        return false;
    };
    // SAFETY: `to` comes from the loan block, where the receiver of this loan
    // published its buffer (`coop::receive`) and claimed this chunk's range for us
    // through `next`; it does not touch the range until `done` counts it, which
    // happens after this call. A lying process can make this write only into its
    // own memory (the kernel checks the range against `pid`'s mappings), never into
    // this process's.
    unsafe { gex_sync::cma::cma_write(pid, to, bytes) }.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_checks_owner_destination_endpoint_and_length() {
        let data: Arc<[u8]> = Arc::from(vec![3u8; 10]);
        let t = lend(1, 2, 0, data.clone());
        let k = t.key();
        assert!(take(k, 2, 2, 0, 10).is_none()); // not lent by 2
        assert!(take(k, 1, 3, 0, 10).is_none()); // not lent to 3
        assert!(take(k, 1, 2, 1, 10).is_none()); // other endpoint
        assert!(take(k, 1, 2, 0, 11).is_none()); // other length
        assert!(take(k + 1_000_000, 1, 2, 0, 10).is_none()); // no such id
        let mut got = [0u8; 10];
        take(k, 1, 2, 0, 10).expect("lent").copy_to(&mut got);
        assert_eq!(&got[..], &data[..]);
        assert!(take(k, 1, 2, 0, 10).is_none()); // taken once
        drop(t);
    }

    #[test]
    fn a_loan_is_read_in_place_or_withdrawn_into_a_copy() {
        let data = vec![9u8; 16];
        // Read in place.
        let (loan, t) = Loan::new(0, 1, 0, &data);
        assert_eq!(loan.state(), Read::Ready);
        let taken = take(t.key(), 0, 1, 0, 16).expect("lent");
        assert_eq!(loan.state(), Read::Reading);
        assert!(take(t.key(), 0, 1, 0, 16).is_none()); // taken once
        let mut out = [0u8; 16];
        taken.copy_to(&mut out);
        assert_eq!(out, [9; 16]);
        assert_eq!(loan.state(), Read::Done);
        drop(loan);
        drop(t);
        // Withdrawn before a receiver came: the receiver reads an owned copy.
        let (mut loan, t) = Loan::new(0, 1, 0, &data);
        loan.withdraw();
        assert_eq!(loan.state(), Read::Gone);
        assert!(owned(t.key()).is_some());
        drop(loan);
        let mut out = [0u8; 16];
        take(t.key(), 0, 1, 0, 16)
            .expect("copied")
            .copy_to(&mut out);
        assert_eq!(out, [9; 16]);
        // A loan dropped while a reader reads waits for it.
        let (loan, t) = Loan::new(0, 1, 0, &data);
        let taken = take(t.key(), 0, 1, 0, 16).expect("lent");
        std::thread::scope(|s| {
            s.spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(20));
                let mut out = [0u8; 16];
                taken.copy_to(&mut out);
                assert_eq!(out, [9; 16]);
            });
            drop(loan); // returns only once the reader is done
        });
    }

    #[test]
    fn a_slice_being_read_outlives_its_ticket() {
        // The send ended early (a lying `DONE`) while a receiver reads: the loan still
        // waits for the read.
        let data = vec![5u8; 8];
        let (loan, t) = Loan::new(0, 1, 0, &data);
        let taken = take(t.key(), 0, 1, 0, 8).expect("lent");
        let key = t.key();
        drop(t);
        assert_eq!(loan.state(), Read::Reading);
        let mut out = [0u8; 8];
        taken.copy_to(&mut out);
        assert_eq!(out, [5; 8]);
        assert_eq!(loan.state(), Read::Gone); // removed by the read's end
        assert!(!registry().lent.contains_key(&key));
        drop(loan);
    }

    #[test]
    fn a_dropped_ticket_withdraws_the_buffer() {
        let t = lend(0, 1, 0, Arc::from(vec![1u8; 4]));
        let k = t.key();
        drop(t);
        assert!(take(k, 0, 1, 0, 4).is_none());
    }
}
