//! Shared memory: gex-sync's rings (whose memory the peer process writes), the smp
//! conduit's ring records and the header of a peer's shared region.
//!
//! # Safety
//! The `ring` target builds a producer and a consumer over a heap block it owns
//! (`Box::into_raw`, freed after both are dropped) and writes into that block through
//! the same raw pointer, between calls of the endpoints, as a peer process would: the
//! endpoints' safety contract (valid, aligned memory of `cap` bytes that outlives
//! them, one producer, one consumer) holds; the extra writes break only the ring
//! protocol, which is what is under test.
#![allow(unsafe_code)]

use crate::engine::outcome;
use arbitrary::Unstructured;
use gex_conduit_smp::fuzz_api as smp;
use gex_core::{Category, Kind};
use gex_sync::ring::{self, Consumer, Producer, RingCtl};
use std::collections::VecDeque;

// ---- ring ----------------------------------------------------------------------------

#[repr(C, align(64))]
struct Mem {
    ctl: RingCtl,
    data: [u8; 1024],
}

pub(crate) fn ring_seeds() -> Vec<Vec<u8>> {
    vec![
        vec![0, 0, 0, 10, 0, 0, 0, 3, 1, 1, 0, 0, 2, 0, 1],
        vec![1, 3, 0, 40, 0, 2, 1, 4, 0, 9, 1, 5, 3, 0, 0, 1, 2],
    ]
}

/// Operations on a ring of 256, 512 or 1024 bytes: pushes and pops checked against a
/// queue model while nobody scribbles, and scribbles on the data area and the head
/// (what a faulty peer process can do). The consumer must report corruption as an
/// error or deliver bodies inside the data area; nothing may panic.
pub(crate) fn ring(d: &[u8]) -> u64 {
    let mut u = Unstructured::new(d);
    let cap = 256usize << u.int_in_range(0u8..=2).unwrap_or(0);
    let mem = Box::into_raw(Box::new(Mem {
        ctl: RingCtl::new(),
        data: [0; 1024],
    }));
    // SAFETY: `mem` is a live, 64-byte aligned allocation: `data` (at offset 64) is
    // aligned and at least `cap` bytes; both endpoints are dropped before it is freed.
    let (mut tx, mut rx): (Producer, Consumer) = unsafe {
        let data = std::ptr::addr_of_mut!((*mem).data).cast::<u8>();
        let ctl = std::ptr::addr_of!((*mem).ctl);
        (Producer::new(ctl, data, cap), Consumer::new(ctl, data, cap))
    };
    // SAFETY: as above.
    let data = unsafe { std::ptr::addr_of_mut!((*mem).data).cast::<u8>() };
    let lo = data as usize;
    let hi = lo + cap;
    let mut model: VecDeque<(u32, Vec<u8>)> = VecDeque::new();
    let mut clean = true;
    let mut corrupt = 0u32;
    let mut delivered = 0u32;
    let mut pushed = 0u32;
    for _ in 0..200 {
        if u.is_empty() {
            break;
        }
        match u.int_in_range(0u8..=9).unwrap_or(0) {
            0..=3 => {
                let len = usize::from(u.arbitrary::<u8>().unwrap_or(0)) % (ring::max_body(cap) + 1);
                let user: u32 = u.arbitrary().unwrap_or(0);
                let fill: u8 = u.arbitrary().unwrap_or(0);
                let body = vec![fill; len];
                if tx.push(user, &[&body]) {
                    pushed += 1;
                    if clean {
                        model.push_back((user, body));
                    }
                }
            }
            4..=6 => match rx.try_peek() {
                Ok(Some((user, body))) => {
                    let (s, e) = (body.as_ptr() as usize, body.as_ptr() as usize + body.len());
                    assert!(s >= lo && e <= hi, "a body outside the data area");
                    if clean {
                        let want = model.pop_front().expect("a record the producer never sent");
                        assert_eq!((user, body), (want.0, &want.1[..]), "record out of order");
                    }
                    rx.pop();
                    delivered += 1;
                }
                Ok(None) => {
                    if clean {
                        assert!(model.is_empty(), "a published record was not seen");
                    }
                }
                Err(e) => {
                    assert!(!clean, "a clean ring reported corruption: {e}");
                    corrupt += 1;
                }
            },
            7 | 8 => {
                // A scribble on one word of the data area, often a plausible tag.
                let word = usize::from(u.arbitrary::<u16>().unwrap_or(0)) % (cap / 8);
                let v: u64 = match u.int_in_range(0u8..=3).unwrap_or(0) {
                    0 => u.arbitrary().unwrap_or(0),
                    1 => (word * 8) as u64 + 1,
                    2 => ((word * 8) as u64 + 1) | (1 << 63),
                    _ => u64::from(u.arbitrary::<u32>().unwrap_or(0)) << 32 | 0xffff,
                };
                // SAFETY: inside the data area, 8-byte aligned; no endpoint call runs
                // concurrently (see the module's Safety section).
                unsafe { data.add(word * 8).cast::<u64>().write(v) };
                clean = false;
            }
            _ => {
                let v: u64 = match u.int_in_range(0u8..=2).unwrap_or(0) {
                    0 => u64::MAX,
                    1 => 1 << 63,
                    _ => u.arbitrary().unwrap_or(0),
                };
                // SAFETY: the control block is inside the allocation; its head is an
                // atomic, written the way a consumer in another process writes it.
                unsafe { (*mem).ctl_head_store(v) };
                // SAFETY: as above.
                assert_eq!(unsafe { (*mem).ctl.head() }, v, "RingCtl's layout changed");
                clean = false;
            }
        }
    }
    drop((tx, rx));
    // SAFETY: from `Box::into_raw` above; both endpoints are gone.
    drop(unsafe { Box::from_raw(mem) });
    // Letters, not digits: `outcome` ignores words with digits.
    let n = |x: u32| ["none", "one", "some", "many"][x.min(3) as usize];
    outcome(&format!(
        "cap{} clean={clean} corrupt={} delivered={} pushed={} model={}",
        ["small", "mid", "large"][cap.trailing_zeros() as usize - 8],
        n(corrupt),
        n(delivered),
        n(pushed),
        n(model.len() as u32)
    ))
}

impl Mem {
    /// Stores `v` as the ring's published head (as a consumer does).
    ///
    /// # Safety
    /// `self` is a live `Mem`.
    unsafe fn ctl_head_store(&self, v: u64) {
        // SAFETY: `RingCtl` is `#[repr(C)]` and starts with its head, an `AtomicU64`
        // padded to a cache line (gex-sync's layout); an atomic store needs only `&`.
        let head =
            unsafe { &*std::ptr::from_ref(&self.ctl).cast::<std::sync::atomic::AtomicU64>() };
        head.store(v, std::sync::atomic::Ordering::Release);
    }
}

// ---- smp-record ------------------------------------------------------------------------

/// Input: user word (4 bytes LE), ring kind (1 byte: even request, odd reply),
/// segment length (4 bytes LE), then the body.
fn record_input(user: u32, reply: bool, seg: u32, body: &[u8]) -> Vec<u8> {
    let mut v = user.to_le_bytes().to_vec();
    v.push(u8::from(reply));
    v.extend_from_slice(&seg.to_le_bytes());
    v.extend_from_slice(body);
    v
}

pub(crate) fn smp_record_seeds() -> Vec<Vec<u8>> {
    let args: Vec<u8> = (1u32..=3).flat_map(|a| a.to_ne_bytes()).collect();
    let mut padded = args.clone();
    padded.extend([0; 4]);
    let mut long = padded.clone();
    long.extend(100u64.to_ne_bytes());
    long.extend(28u64.to_ne_bytes());
    let mut np = vec![0u8; smp::NP_ARGS_AREA];
    np.extend(b"payload");
    vec![
        record_input(
            smp::user_word(7, Category::Short, Kind::Request, 3),
            false,
            4096,
            &padded,
        ),
        record_input(
            smp::user_word(8, Category::Medium, Kind::Reply, 0),
            true,
            4096,
            b"medium payload",
        ),
        record_input(
            smp::user_word(9, Category::Long, Kind::Request, 3),
            false,
            4096,
            &long,
        ),
        record_input(
            smp::user_word(10, Category::Medium, Kind::Request, 2) | smp::U_FIXED_ARGS,
            false,
            0,
            &np,
        ),
    ]
}

/// One ring record as the receiving endpoint decodes it: what it accepts is exactly
/// what the sender's encoding of the decoded message gives.
pub(crate) fn smp_record(d: &[u8]) -> u64 {
    if d.len() < 9 {
        return outcome("short");
    }
    let user = u32::from_le_bytes(d[..4].try_into().unwrap());
    let kind = if d[4] & 1 == 1 {
        Kind::Reply
    } else {
        Kind::Request
    };
    let seg_len = u32::from_le_bytes(d[5..9].try_into().unwrap()) as usize;
    // Ring bodies are 8-byte aligned: copy into a u64 buffer.
    let raw = &d[9..];
    let mut buf = vec![0u64; raw.len().div_ceil(8)];
    // SAFETY: `buf` has at least `raw.len()` bytes; a u64 buffer viewed as bytes.
    let body = unsafe {
        let p = buf.as_mut_ptr().cast::<u8>();
        std::ptr::copy_nonoverlapping(raw.as_ptr(), p, raw.len());
        std::slice::from_raw_parts(p, raw.len())
    };
    match smp::decode_record(user, body, kind, seg_len) {
        Ok(r) => {
            let nargs = r.args.len();
            assert!(nargs <= smp::MAX_ARGS);
            let fixed = user & smp::U_FIXED_ARGS != 0;
            let want = smp::user_word(r.handler, r.category, kind, nargs)
                | if fixed { smp::U_FIXED_ARGS } else { 0 };
            assert_eq!(
                user, want,
                "accepted user word {user:#x} is not what a sender writes"
            );
            let area = if fixed {
                smp::NP_ARGS_AREA
            } else {
                smp::args_area(nargs)
            };
            let words: Vec<u32> = body[..nargs * 4]
                .chunks(4)
                .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
                .collect();
            assert_eq!(r.args, words);
            match r.category {
                Category::Short => assert_eq!(body.len(), area),
                Category::Medium => assert_eq!(r.payload, &body[area..]),
                Category::Long => {
                    assert_eq!(body.len(), area + 16);
                    let (o, l) = r.long.expect("Long descriptor");
                    assert!(o.checked_add(l).is_some_and(|e| e <= seg_len));
                }
            }
            outcome(&format!("ok {:?} {kind:?} {fixed}", r.category))
        }
        Err(e) => outcome(&e),
    }
}

// ---- smp-header -----------------------------------------------------------------------

fn header_bytes(h: &smp::Header, rank: u32, eps: u16, total: u16, seg_len: u64) -> Vec<u8> {
    let mut v = Vec::new();
    for x in [
        h.magic,
        h.rank,
        h.eps,
        h.total_eps,
        h.ring_cap,
        h.max_medium,
        h.seg_len,
        h.len,
    ] {
        v.extend(x.to_le_bytes());
    }
    v.extend(rank.to_le_bytes());
    v.extend(eps.to_le_bytes());
    v.extend(total.to_le_bytes());
    v.extend(seg_len.to_le_bytes());
    v
}

pub(crate) fn smp_header_seeds() -> Vec<Vec<u8>> {
    [
        (1u32, 1usize, 2usize, 4096usize, 1 << 16),
        (0, 2, 5, 1 << 18, 0),
    ]
    .iter()
    .map(|&(rank, eps, total, cap, seg)| {
        let h = smp::header_for(rank, eps, total, cap, seg, 65536).unwrap();
        header_bytes(&h, rank, eps as u16, total as u16, seg as u64)
    })
    .collect()
}

/// A peer's region header (eight u64) and what the job layout says (rank, its
/// endpoints, the host's endpoints, its segment length): accepted only if it is what
/// that peer would have written for that layout.
pub(crate) fn smp_header(d: &[u8]) -> u64 {
    if d.len() < 80 {
        return outcome("short");
    }
    let w = |i: usize| u64::from_le_bytes(d[8 * i..8 * i + 8].try_into().unwrap());
    let h = smp::Header {
        magic: w(0),
        rank: w(1),
        eps: w(2),
        total_eps: w(3),
        ring_cap: w(4),
        max_medium: w(5),
        seg_len: w(6),
        len: w(7),
    };
    let rank = u32::from_le_bytes(d[64..68].try_into().unwrap());
    let eps = usize::from(u16::from_le_bytes([d[68], d[69]]));
    let total = usize::from(u16::from_le_bytes([d[70], d[71]]));
    let seg_len = u64::from_le_bytes(d[72..80].try_into().unwrap());
    let Ok(seg_len) = usize::try_from(seg_len) else {
        return outcome("segment length too large");
    };
    match smp::check_header(h, rank, eps, total, seg_len) {
        Ok((len, max_medium)) => {
            assert_eq!(len as u64, h.len);
            assert!(max_medium as u64 <= h.max_medium);
            let mine = smp::header_for(
                rank,
                eps,
                total,
                h.ring_cap as usize,
                seg_len,
                h.max_medium as usize,
            );
            assert_eq!(mine, Some(h), "accepted a header its owner would not write");
            assert!(ring::is_valid_capacity(h.ring_cap as usize) && h.ring_cap >= 4096);
            outcome("ok")
        }
        Err(e) => outcome(&e),
    }
}
