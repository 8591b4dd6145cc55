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
//!   the buffer owned until `DONE` (or its endpoint is dropped, after which a late
//!   read gets `EFAULT` or unrelated bytes of the sender: the message is then as lost
//!   as any message of a dropped endpoint).
//!
//! The registry is a mutex-protected map taken three times per rendezvous message
//! (lend, take, and the sender's clean-up): the rendezvous path moves at least
//! `GEX_MSG_EAGER_MAX` bytes per message, which costs far more than an uncontended
//! lock; the eager path never touches it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// Who lent a buffer to whom (world ranks and the endpoint index), and the buffer.
#[derive(Debug)]
struct Lent {
    src: u32,
    dst: u32,
    ep: u16,
    data: Arc<[u8]>,
}

/// This process's lent rendezvous buffers, by id.
#[derive(Debug, Default)]
struct Registry {
    next: u64,
    lent: HashMap<u64, Lent>,
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
    fn drop(&mut self) {
        registry().lent.remove(&self.0);
    }
}

/// Lends `data` from rank `src` to rank `dst` (endpoint `ep`): its id goes in the RTS.
pub(crate) fn lend(src: u32, dst: u32, ep: u16, data: Arc<[u8]>) -> Ticket {
    let mut r = registry();
    // Ids are never reused within a process (2^64 of them), so a stale id finds nothing.
    let id = r.next;
    r.next += 1;
    r.lent.insert(id, Lent { src, dst, ep, data });
    Ticket(id)
}

/// Takes the buffer lent under `key` if it was lent by `src` to `dst` on endpoint
/// `ep` and holds `len` bytes; `None` (and nothing taken) otherwise.
pub(crate) fn take(key: u64, src: u32, dst: u32, ep: u16, len: usize) -> Option<Arc<[u8]>> {
    let mut r = registry();
    let l = r.lent.get(&key)?;
    if l.src != src || l.dst != dst || l.ep != ep || l.data.len() != len {
        return None;
    }
    r.lent.remove(&key).map(|l| l.data)
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
        let got = take(k, 1, 2, 0, 10).expect("lent");
        assert_eq!(&got[..], &data[..]);
        assert!(take(k, 1, 2, 0, 10).is_none()); // taken once
        drop(t);
    }

    #[test]
    fn a_dropped_ticket_withdraws_the_buffer() {
        let t = lend(0, 1, 0, Arc::from(vec![1u8; 4]));
        let k = t.key();
        drop(t);
        assert!(take(k, 0, 1, 0, 4).is_none());
    }
}
