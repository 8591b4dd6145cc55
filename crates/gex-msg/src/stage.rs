//! The copies a rendezvous send keeps of the caller's bytes (`SendOp::Rndv`'s
//! `data`), kept for reuse once the send ends.
//!
//! A nonblocking or synchronous rendezvous send copies the caller's slice into a
//! buffer of the layer, which the receiver reads (by address with CMA, through the
//! registry between thread ranks) or which is streamed in chunks. Allocated afresh for
//! every send, a buffer of 64 KiB or more comes from pages the allocator had given
//! back to the system: every page faults again on the copy (`gex-perf msg`'s 64 KiB
//! bidirectional bandwidth spent most of its time faulting, 5.5 GB/s against 10.8 with
//! the buffers kept). So a send that ended gives its buffer back here, and the next
//! send of the same length takes it.
//!
//! Kept: buffers nobody else holds (a receiver's handle or a registry entry keeps a
//! buffer out), at most [`MAX_BUFFERS`] of them and [`MAX_BYTES`] in all per
//! endpoint, the oldest given back first to make room; a send takes the newest kept
//! buffer of exactly its length (a program sends the same sizes again and again; a
//! best-fit pool would need the length stored beside the buffer in every send). No
//! allocator crate does this: the buffers are shared (`Arc<[u8]>`) with the registry
//! of module `direct` while lent.

use std::collections::VecDeque;
use std::sync::Arc;

/// At most this many bytes are kept per endpoint.
pub(crate) const MAX_BYTES: usize = 8 << 20;
/// At most this many buffers are kept per endpoint (the search is linear).
pub(crate) const MAX_BUFFERS: usize = 64;

/// The kept buffers of one endpoint.
#[derive(Debug, Default)]
pub(crate) struct Stage {
    /// Oldest first.
    spare: VecDeque<Arc<[u8]>>,
    bytes: usize,
}

impl Stage {
    /// A buffer holding a copy of `data`: a kept one of its length, or a new one.
    pub(crate) fn copy_of(&mut self, data: &[u8]) -> Arc<[u8]> {
        if let Some(i) = self.spare.iter().rposition(|b| b.len() == data.len()) {
            let mut b = self.spare.remove(i).expect("found");
            self.bytes -= b.len();
            // Kept buffers are unique (`keep`), and nothing clones them here.
            if let Some(m) = Arc::get_mut(&mut b) {
                m.copy_from_slice(data);
                return b;
            }
        }
        Arc::from(data)
    }

    /// Keeps `b` for a later send if nobody else holds it, giving back the oldest
    /// kept buffers to make room.
    pub(crate) fn keep(&mut self, mut b: Arc<[u8]>) {
        if b.is_empty() || b.len() > MAX_BYTES || Arc::get_mut(&mut b).is_none() {
            return;
        }
        while self.spare.len() >= MAX_BUFFERS || self.bytes + b.len() > MAX_BYTES {
            let old = self.spare.pop_front().expect("over a limit, so not empty");
            self.bytes -= old.len();
        }
        self.bytes += b.len();
        self.spare.push_back(b);
    }

    /// Bytes kept.
    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_buffer_is_reused_for_the_same_length_only() {
        let mut s = Stage::default();
        let a = s.copy_of(&[1, 2, 3]);
        let at = a.as_ptr();
        s.keep(a);
        assert_eq!(s.bytes(), 3);
        let other = s.copy_of(&[9; 4]);
        assert_ne!(other.as_ptr(), at, "another length gets a new buffer");
        let b = s.copy_of(&[4, 5, 6]);
        assert_eq!(b.as_ptr(), at, "the same length takes the kept buffer");
        assert_eq!(&b[..], &[4, 5, 6], "with the new bytes");
        assert_eq!(s.bytes(), 0);
    }

    #[test]
    fn a_shared_buffer_is_not_kept() {
        let mut s = Stage::default();
        let a = s.copy_of(&[1; 16]);
        let held = a.clone();
        s.keep(a);
        assert_eq!(s.bytes(), 0, "someone else still holds it");
        let b = s.copy_of(&[2; 16]);
        assert_ne!(b.as_ptr(), held.as_ptr());
        assert_eq!(&held[..], &[1; 16], "the holder's bytes are untouched");
    }

    #[test]
    fn the_limits_hold_and_the_newest_stay() {
        let mut s = Stage::default();
        for _ in 0..MAX_BUFFERS + 3 {
            s.keep(Arc::from(vec![0u8; 8]));
        }
        assert_eq!(s.bytes(), 8 * MAX_BUFFERS);
        // A new size pushes the oldest out, so a program that moves on to
        // another size is served again.
        let big = Arc::<[u8]>::from(vec![0u8; 64]);
        let at = big.as_ptr();
        s.keep(big);
        assert_eq!(s.bytes(), 8 * (MAX_BUFFERS - 1) + 64);
        assert_eq!(s.copy_of(&[1; 64]).as_ptr(), at);
        let mut s = Stage::default();
        s.keep(Arc::from(vec![0u8; MAX_BYTES]));
        s.keep(Arc::from(vec![0u8; 1]));
        assert_eq!(s.bytes(), 1, "the big one made room");
        s.keep(Arc::from(vec![0u8; MAX_BYTES + 1]));
        assert_eq!(s.bytes(), 1, "larger than the whole cache: not kept");
    }
}
