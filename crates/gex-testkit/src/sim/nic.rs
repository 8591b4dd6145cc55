//! The simulated NIC of the sim conduit: native RMA and NIC atomics
//! ([`SimConfig::native_rma`](super::SimConfig::native_rma),
//! [`SimConfig::native_atomics`](super::SimConfig::native_atomics)).
//!
//! An operation is queued when started (answer `Pending(ticket)`) and performed by the
//! *initiator's* thread in a later [`poll`](gex_core::spi::ConduitEp::poll) of the
//! initiating endpoint, once its delay has passed: `latency.polls` polls (at least one)
//! and `latency.nanos` of wall-clock time. The target's CPU takes no part, as with a
//! real NIC. Completion is reported once by `native_test`. A relaxed put
//! (`native_put_relaxed`, with [`SimConfig::relaxed_puts`](super::SimConfig::relaxed_puts))
//! completes once the NIC has copied the source, but its bytes are held "on the wire"
//! and land in the target's segment only when a later `native_flush` of that target is
//! performed: the least the SPI promises, so a layer that forgets to flush loses the
//! bytes and its tests fail. Atomics are CPU atomics
//! (`SeqCst`, compare-and-swap loops for the arithmetic a processor lacks) on the
//! target's segment memory: coherent among themselves, which is all the SPI promises
//! (NIC atomics are not coherent with the layers' CPU atomics; a real NIC's would not
//! be either).
//!
//! # Safety
//! Queued operations hold raw pointers: the initiator's buffer (put source, get
//! destination, atomic result) and the target's segment. The SPI's contract for the
//! `unsafe` native methods keeps the initiator's buffer valid and untouched by others
//! until completion; segments live as long as the fabric, which the endpoint keeps
//! alive. Ranges were checked against the segment length and atomics' alignment at
//! start. The pointers are dereferenced only by the endpoint that queued them (on the
//! thread driving it), which is why sending the queue with the endpoint is sound.
#![allow(unsafe_code)]

use super::seg::SegMem;
use gex_core::spi::{AtomicBase, AtomicKind, NativeAtomic};
use std::collections::HashSet;
use std::sync::atomic::Ordering;

/// Native operations an endpoint's simulated NIC has performed (counted at execution).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NativeCounts {
    /// Native puts performed.
    pub puts: u64,
    /// Native gets performed.
    pub gets: u64,
    /// NIC atomics performed.
    pub atomics: u64,
    /// Bytes moved by puts and gets.
    pub bytes: u64,
    /// Relaxed puts performed (their bytes held until a flush; also counted in `puts`).
    pub relaxed_puts: u64,
    /// Flushes performed.
    pub flushes: u64,
}

#[derive(Debug)]
pub(super) enum Work {
    Put {
        src: *const u8,
        dst: *mut u8,
        len: usize,
    },
    Get {
        src: *const u8,
        dst: *mut u8,
        len: usize,
    },
    /// A relaxed put to the target with global index `gid`.
    PutRelaxed {
        gid: usize,
        src: *const u8,
        dst: *mut u8,
        len: usize,
    },
    /// Lands every relaxed put to `gid` performed before it.
    Flush { gid: usize },
    Atomic {
        word: *mut u8,
        op: NativeAtomic,
        result: *mut u64,
    },
}

#[derive(Debug)]
struct Queued {
    ticket: u64,
    due_poll: u64,
    due_ns: u64,
    work: Work,
}

/// One endpoint's NIC: queued operations and completed tickets.
#[derive(Debug, Default)]
pub(super) struct Nic {
    clock: u64,
    next: u64,
    queue: Vec<Queued>,
    done: HashSet<u64>,
    /// Relaxed puts performed and not yet flushed: target, destination, bytes.
    staged: Vec<(usize, *mut u8, Vec<u8>)>,
    pub(super) counts: NativeCounts,
}

// SAFETY: the raw pointers in the queue are dereferenced only by the endpoint owning
// this NIC, on whichever single thread drives it (module docs); moving the endpoint to
// another thread moves the queue with it.
unsafe impl Send for Nic {}

impl Nic {
    /// Queues `work`, due after `polls` polls (at least one) and at `due_ns`.
    pub(super) fn issue(&mut self, work: Work, polls: u64, due_ns: u64) -> u64 {
        self.next += 1;
        self.queue.push(Queued {
            ticket: self.next,
            due_poll: self.clock + polls.max(1),
            due_ns,
            work,
        });
        self.next
    }

    /// Operations issued and not performed yet.
    pub(super) fn queued(&self) -> usize {
        self.queue.len()
    }

    pub(super) fn busy(&self) -> bool {
        !self.queue.is_empty()
    }

    /// One poll: performs every due operation, in issue order. Returns how many ran.
    pub(super) fn progress(&mut self, now_ns: u64) -> usize {
        self.clock += 1;
        if self.queue.is_empty() {
            return 0;
        }
        let (clock, mut n) = (self.clock, 0);
        let mut i = 0;
        while i < self.queue.len() {
            let q = &self.queue[i];
            if q.due_poll > clock || q.due_ns > now_ns {
                i += 1;
                continue;
            }
            let q = self.queue.remove(i);
            // SAFETY: see the module docs: valid, checked pointers until completion,
            // which is now.
            unsafe { perform(&q.work, &mut self.counts, &mut self.staged) };
            self.done.insert(q.ticket);
            n += 1;
        }
        n
    }

    /// True once `ticket` completed (reported once).
    pub(super) fn test(&mut self, ticket: u64) -> bool {
        self.done.remove(&ticket)
    }
}

/// Whether the NIC offers `base` on `kind` (`bases`: the configured subset).
pub(super) fn offers(bases: Option<&[AtomicBase]>, kind: AtomicKind, base: AtomicBase) -> bool {
    let float = matches!(kind, AtomicKind::F32 | AtomicKind::F64);
    let bitwise = matches!(base, AtomicBase::And | AtomicBase::Or | AtomicBase::Xor);
    !(float && bitwise) && bases.is_none_or(|b| b.contains(&base))
}

/// The address of `off..off+len` in `seg`, if in range.
pub(super) fn at(seg: &SegMem, off: usize, len: usize) -> Option<*mut u8> {
    if off.checked_add(len).is_some_and(|e| e <= seg.len()) {
        // SAFETY: in range of the allocation (checked).
        Some(unsafe { seg.base().as_ptr().add(off) })
    } else {
        None
    }
}

/// # Safety
/// The pointers of `w` are valid as the module docs say; the destinations held in
/// `staged` lie in segments that outlive the endpoint.
unsafe fn perform(w: &Work, c: &mut NativeCounts, staged: &mut Vec<(usize, *mut u8, Vec<u8>)>) {
    match *w {
        Work::PutRelaxed { gid, src, dst, len } => {
            // SAFETY: the source is valid until this completion (contract).
            let bytes = unsafe { std::slice::from_raw_parts(src, len) }.to_vec();
            staged.push((gid, dst, bytes));
            c.puts += 1;
            c.relaxed_puts += 1;
            c.bytes += len as u64;
        }
        Work::Flush { gid } => {
            staged.retain(|(g, dst, bytes)| {
                if *g != gid {
                    return true;
                }
                // SAFETY: a checked range of a live segment (taken at start); the
                // staged copy is ours. Race-free: byte-wise atomic stores into the
                // segment.
                unsafe { gex_sync::copy::atomic_write(*dst, bytes) };
                false
            });
            c.flushes += 1;
        }
        Work::Put { src, dst, len } => {
            // SAFETY: both ranges valid (contract); the initiator's buffer is untouched
            // by others until completion (contract), so a shared borrow of it for the
            // copy is sound. Race-free: byte-wise atomic stores into the segment.
            unsafe { gex_sync::copy::atomic_write(dst, std::slice::from_raw_parts(src, len)) };
            c.puts += 1;
            c.bytes += len as u64;
        }
        Work::Get { src, dst, len } => {
            // SAFETY: both ranges valid (contract); the destination is the initiator's,
            // written by nobody else until completion. Race-free: byte-wise atomic loads
            // from the segment (a `memmove` should a self-targeted get overlap).
            unsafe { gex_sync::copy::atomic_copy(src, dst, len) };
            c.gets += 1;
            c.bytes += len as u64;
        }
        Work::Atomic { word, op, result } => {
            // SAFETY: aligned word inside a live segment (checked at start), accessed
            // atomically by every NIC operation.
            let old = unsafe { atomic(word, &op) };
            if op.fetch && !result.is_null() {
                // SAFETY: the result location is valid until completion (contract).
                unsafe { result.write(old) };
            }
            c.atomics += 1;
        }
    }
}

/// New value of the word for `op` from `old`, or `None` to leave it (the same rules as
/// gex-rma: integers wrap, float min/max keep the old value unless the operand
/// compares smaller/larger, cswap compares bit patterns).
fn compute(op: &NativeAtomic, old: u64) -> Option<u64> {
    let (a, b) = (op.a, op.b);
    match op.base {
        AtomicBase::Get => return None,
        AtomicBase::Set | AtomicBase::Swap => return Some(a),
        AtomicBase::Cswap => return (old == a).then_some(b),
        _ => {}
    }
    macro_rules! int {
        ($t:ty, $u:ty) => {{
            let (o, x) = (old as $u as $t, a as $u as $t);
            (match op.base {
                AtomicBase::Add => o.wrapping_add(x),
                AtomicBase::Sub => o.wrapping_sub(x),
                AtomicBase::Mult => o.wrapping_mul(x),
                AtomicBase::Inc => o.wrapping_add(1),
                AtomicBase::Dec => o.wrapping_sub(1),
                AtomicBase::Min => o.min(x),
                AtomicBase::Max => o.max(x),
                AtomicBase::And => o & x,
                AtomicBase::Or => o | x,
                AtomicBase::Xor => o ^ x,
                _ => return None,
            }) as $u as u64
        }};
    }
    macro_rules! float {
        ($t:ty, $to:expr, $from:expr) => {{
            let to: fn(u64) -> $t = $to;
            let from: fn($t) -> u64 = $from;
            let (o, x) = (to(old), to(a));
            from(match op.base {
                AtomicBase::Add => o + x,
                AtomicBase::Sub => o - x,
                AtomicBase::Mult => o * x,
                AtomicBase::Inc => o + 1.0,
                AtomicBase::Dec => o - 1.0,
                AtomicBase::Min => {
                    if x < o {
                        x
                    } else {
                        o
                    }
                }
                AtomicBase::Max => {
                    if x > o {
                        x
                    } else {
                        o
                    }
                }
                _ => return None,
            })
        }};
    }
    Some(match op.kind {
        AtomicKind::I32 => int!(i32, u32),
        AtomicKind::U32 => int!(u32, u32),
        AtomicKind::I64 => int!(i64, u64),
        AtomicKind::U64 => int!(u64, u64),
        AtomicKind::F32 => float!(f32, |b| f32::from_bits(b as u32), |v| u64::from(
            v.to_bits()
        )),
        AtomicKind::F64 => float!(f64, f64::from_bits, f64::to_bits),
    })
}

/// Performs `op` on the word at `p`; returns the old bit pattern (zero-extended). The
/// operations of [`gex_sync::word`], as the CPU atomics of gex-rma: loads and stores
/// sequentially consistent, read-modify-writes atomic with respect to each other, and a
/// put or get racing with them (byte-wise copies) is never a mixed-size race.
///
/// # Safety
/// `p` is naturally aligned for the kind's width, inside a live segment, and every
/// concurrent access to the word is a word operation or a byte-wise copy.
unsafe fn atomic(p: *mut u8, op: &NativeAtomic) -> u64 {
    use gex_sync::word;
    const SC: Ordering = Ordering::SeqCst;
    // SAFETY: aligned and valid, accessed only by word operations and byte-wise copies
    // (contract).
    unsafe {
        if op.kind.size() == 4 {
            match op.base {
                AtomicBase::Get => u64::from(word::load32(p, SC)),
                AtomicBase::Set => {
                    word::store32(p, op.a as u32, SC);
                    0
                }
                _ => u64::from(word::update32(p, |o| {
                    compute(op, u64::from(o)).map(|n| n as u32)
                })),
            }
        } else {
            match op.base {
                AtomicBase::Get => word::load64(p, SC),
                AtomicBase::Set => {
                    word::store64(p, op.a, SC);
                    0
                }
                _ => word::update64(p, |o| compute(op, o)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(kind: AtomicKind, base: AtomicBase, a: u64, b: u64) -> NativeAtomic {
        NativeAtomic {
            dst: gex_core::EpAddr::new(0, 0),
            offset: 0,
            kind,
            base,
            fetch: true,
            a,
            b,
            acquire: false,
            release: false,
        }
    }

    #[test]
    fn nic_performs_at_a_later_poll_only() {
        let seg = SegMem::new(64);
        let src = [1u8, 2, 3];
        let mut nic = Nic::default();
        let dst = at(&seg, 8, 3).unwrap();
        let t = nic.issue(
            Work::Put {
                src: src.as_ptr(),
                dst,
                len: 3,
            },
            2,
            0,
        );
        assert!(!nic.test(t));
        assert_eq!(nic.progress(0), 0);
        assert_eq!(seg.slice(8, 3), &[0, 0, 0]);
        assert_eq!(nic.progress(0), 1);
        assert_eq!(seg.slice(8, 3), &[1, 2, 3]);
        assert!(nic.test(t) && !nic.test(t));
        assert_eq!(nic.counts.puts, 1);
        assert!(at(&seg, 62, 3).is_none());

        let mut res = 0u64;
        let word = at(&seg, 16, 8).unwrap();
        let t = nic.issue(
            Work::Atomic {
                word,
                op: op(AtomicKind::U64, AtomicBase::Add, 5, 0),
                result: &mut res,
            },
            0,
            0,
        );
        nic.progress(0);
        assert!(nic.test(t));
        assert_eq!((res, seg.slice(16, 8)[0]), (0, 5));
    }

    #[test]
    fn compute_rules() {
        let c = |k, b, o, a| compute(&op(k, b, a, 0), o);
        assert_eq!(
            c(AtomicKind::U32, AtomicBase::Dec, 0, 0),
            Some(u64::from(u32::MAX))
        );
        assert_eq!(
            c(AtomicKind::I32, AtomicBase::Min, u64::from(-3i32 as u32), 5),
            Some(u64::from(-3i32 as u32))
        );
        let nan = f64::NAN.to_bits();
        assert_eq!(
            c(AtomicKind::F64, AtomicBase::Max, 1f64.to_bits(), nan),
            Some(1f64.to_bits())
        );
        assert_eq!(
            compute(&op(AtomicKind::U64, AtomicBase::Cswap, 3, 7), 3),
            Some(7)
        );
        assert_eq!(
            compute(&op(AtomicKind::U64, AtomicBase::Cswap, 4, 7), 3),
            None
        );
        assert!(!offers(None, AtomicKind::F32, AtomicBase::Xor));
        assert!(offers(None, AtomicKind::U32, AtomicBase::Xor));
        assert!(!offers(
            Some(&[AtomicBase::Add]),
            AtomicKind::U64,
            AtomicBase::Get
        ));
    }
}
