use super::*;

/// Takes the next record like a polling consumer does: peek, pop, and peek again (an
/// empty peek publishes the head, handing the space back to the producer).
fn next(rx: &mut Consumer) -> Option<(u32, Vec<u8>)> {
    let r = rx.peek().map(|(u, b)| (u, b.to_vec()));
    if r.is_some() {
        rx.pop();
        let _ = rx.peek();
    }
    r
}

#[test]
fn head_is_published_in_batches_and_when_empty() {
    let (mut tx, mut rx) = channel(4096);
    for i in 0..8u32 {
        assert!(tx.push(i, &[&[0u8; 48]]));
    }
    // Popping without reaching the end publishes nothing until a quarter ring (1024
    // bytes = 16 records of 64) has been released.
    for _ in 0..4 {
        assert!(rx.peek().is_some());
        rx.pop();
    }
    assert!(!tx.is_empty());
    assert_eq!(rx.peek().map(|(u, _)| u), Some(4));
    for _ in 4..8 {
        assert!(rx.peek().is_some());
        rx.pop();
    }
    // Caught up: the empty peek publishes.
    assert!(rx.peek().is_none());
    assert!(tx.is_empty());
    // A quarter ring of pops publishes without an empty peek.
    for i in 0..17u32 {
        assert!(tx.push(i, &[&[0u8; 48]]));
    }
    for _ in 0..16 {
        assert!(rx.peek().is_some());
        rx.pop();
    }
    assert!(!tx.is_empty(), "one record is still unconsumed");
    let free_now = tx.reserve(2000).is_some();
    assert!(free_now, "the 1024 published bytes plus the rest make room");
}

#[test]
fn constants() {
    assert_eq!(record_size(0), 16);
    assert_eq!(record_size(1), 24);
    assert_eq!(record_size(8), 24);
    assert_eq!(max_body(256), 112);
    assert_eq!(record_size(max_body(256)), 128);
    assert!(is_valid_capacity(MIN_CAPACITY) && is_valid_capacity(MAX_CAPACITY));
    assert!(!is_valid_capacity(128) && !is_valid_capacity(257) && !is_valid_capacity(1 << 32));
}

#[test]
fn empty_ring() {
    let (mut tx, mut rx) = channel(256);
    assert!(tx.is_empty());
    assert!(!rx.has_data());
    assert_eq!(rx.peek(), None);
    assert_eq!(rx.capacity(), 256);
}

#[test]
fn push_peek_pop_in_order() {
    let (mut tx, mut rx) = channel(4096);
    for i in 0..10u32 {
        let body = vec![i as u8; i as usize * 3];
        assert!(tx.push(i, &[&body[..]]));
    }
    assert!(!tx.is_empty());
    for i in 0..10u32 {
        assert!(rx.has_data());
        // A second peek returns the same record.
        let first = rx.peek().map(|(u, b)| (u, b.to_vec()));
        assert_eq!(first, next(&mut rx));
        assert_eq!(first, Some((i, vec![i as u8; i as usize * 3])));
    }
    assert_eq!(rx.peek(), None);
    assert!(tx.is_empty());
}

#[test]
fn gather_push_concatenates() {
    let (mut tx, mut rx) = channel(256);
    assert!(tx.push(u32::MAX, &[b"ab", b"", b"cde"]));
    assert_eq!(next(&mut rx), Some((u32::MAX, b"abcde".to_vec())));
}

#[test]
fn max_body_fits_at_every_offset() {
    // Under Miri the 4096-byte ring alone takes minutes (1024 maximal records); the two
    // small ones walk every offset the same way.
    let caps: &[usize] = if cfg!(miri) {
        &[256, 512]
    } else {
        &[256, 512, 4096]
    };
    for &cap in caps {
        let (mut tx, mut rx) = channel(cap);
        let max = tx.max_body();
        // Walk the tail through every 8-byte offset with small records, and check that a
        // maximal record always fits into the then-empty ring.
        for step in 0..(2 * cap / 8) {
            assert!(tx.push(step as u32, &[]), "small record at step {step}");
            assert_eq!(next(&mut rx), Some((step as u32, vec![])));
            assert!(tx.is_empty());
            let body: Vec<u8> = (0..max).map(|i| (i + step) as u8).collect();
            assert!(tx.push(7, &[&body[..]]), "cap {cap} step {step}");
            assert_eq!(next(&mut rx), Some((7, body)));
        }
    }
}

#[test]
fn back_pressure_and_release() {
    let (mut tx, mut rx) = channel(256);
    // 128 + 120 = 248 bytes of records + 8 slack = 256: full.
    assert!(tx.push(1, &[&[1u8; 112]]));
    assert!(tx.push(2, &[&[2u8; 104]]));
    assert!(tx.reserve(0).is_none());
    assert!(!tx.push(3, &[]));
    // Releasing the first record frees room; the next one wraps with a pad.
    assert_eq!(next(&mut rx), Some((1, vec![1u8; 112])));
    assert!(tx.push(3, &[&[3u8; 100]]));
    assert_eq!(next(&mut rx), Some((2, vec![2u8; 104])));
    assert_eq!(next(&mut rx), Some((3, vec![3u8; 100])));
    assert_eq!(next(&mut rx), None);
    assert!(tx.is_empty());
}

#[test]
fn cancel_publishes_nothing_and_space_is_reused() {
    let (mut tx, mut rx) = channel(256);
    for _ in 0..100 {
        let mut r = tx.reserve(112).unwrap();
        r.body().fill(0xAB);
        drop(r);
    }
    assert!(!rx.has_data());
    assert!(tx.is_empty());
    assert!(tx.push(5, &[b"x"]));
    assert_eq!(next(&mut rx), Some((5, b"x".to_vec())));
}

#[test]
fn commit_shorter_than_reserved() {
    let (mut tx, mut rx) = channel(256);
    let mut r = tx.reserve(100).unwrap();
    assert_eq!(r.body().len(), 100);
    assert_eq!(r.body_ptr() as usize % 8, 0);
    r.body()[..3].copy_from_slice(b"abc");
    r.commit(1, 3);
    assert!(tx.push(2, &[b"d"]));
    assert_eq!(next(&mut rx), Some((1, b"abc".to_vec())));
    assert_eq!(next(&mut rx), Some((2, b"d".to_vec())));
}

/// Fills reserved bodies (committed and cancelled) with words equal to the tags that would be
/// valid at their positions in this and the next laps; the consumer must never take one for a
/// record.
#[test]
fn stale_bytes_that_look_like_tags_are_ignored() {
    let cap = 256usize;
    let (mut tx, mut rx) = channel(cap);
    let mut expect = Vec::new();
    for round in 0..400u64 {
        let len = (round as usize * 37) % (max_body(cap) + 1);
        let mut r = tx.reserve(len).unwrap();
        let body_pos = r.pos + RECORD_HEADER as u64;
        for (i, w) in r.body().chunks_exact_mut(8).enumerate() {
            let pos = body_pos + 8 * i as u64;
            let tag = pos + 1 + (i as u64 % 3) * cap as u64;
            w.copy_from_slice(&tag.to_le_bytes());
        }
        if round % 3 == 0 {
            drop(r);
        } else {
            let commit_len = len / 2;
            let body = r.body()[..commit_len].to_vec();
            r.commit(round as u32, commit_len);
            expect.push((round as u32, body));
            assert_eq!(next(&mut rx), expect.pop());
        }
        assert_eq!(rx.peek(), None, "round {round}");
        assert!(!rx.has_data());
    }
}

#[test]
fn attach_to_existing_memory() {
    #[repr(C, align(64))]
    struct Mem {
        ctl: RingCtl,
        data: [u8; 512],
    }
    let mut mem = Box::new(Mem {
        ctl: RingCtl::new(),
        data: [0; 512],
    });
    // SAFETY: `mem` outlives both endpoints, is aligned, zeroed, and these are the only ones.
    let (mut tx, mut rx) = unsafe {
        RingCtl::init_in_place(&mut mem.ctl);
        let data = mem.data.as_mut_ptr();
        (
            Producer::new(&mem.ctl, data, 512),
            Consumer::new(&mem.ctl, data, 512),
        )
    };
    for i in 0..1000u32 {
        assert!(tx.push(i, &[&i.to_le_bytes()[..(i % 5) as usize]]));
        assert_eq!(
            next(&mut rx),
            Some((i, i.to_le_bytes()[..(i % 5) as usize].to_vec()))
        );
    }
    let bytes: u64 = (0..1000).map(|i| record_size(i % 5) as u64).sum();
    // The head covers all records plus the pads at the lap ends (at most one per lap).
    let head = mem.ctl.head();
    assert_eq!(head, tx.tail);
    assert!(
        head >= bytes && head < bytes + 24 * (bytes / 512 + 1),
        "{head} vs {bytes}"
    );
    drop((tx, rx));
    // SAFETY: as above; the ring is empty and the old endpoints are gone.
    let (mut tx, mut rx) = unsafe {
        let data = mem.data.as_mut_ptr();
        (
            Producer::new(&mem.ctl, data, 512),
            Consumer::new(&mem.ctl, data, 512),
        )
    };
    assert!(!rx.has_data());
    assert!(tx.push(9, &[b"again"]));
    assert_eq!(next(&mut rx), Some((9, b"again".to_vec())));
}

#[repr(C, align(64))]
struct Mem512 {
    ctl: RingCtl,
    data: [u8; 512],
}

/// A ring of 512 bytes in memory the test can scribble on, as another process could.
///
/// The memory is reached only through the raw pointer of the leaked box: the endpoints'
/// pointers and the scribbles derive from it, and no reference to the data area is ever
/// made, so a scribble does not invalidate the endpoints' pointers (as writing through
/// the `Box`, or moving it, would under Miri's aliasing models).
struct Scribble(*mut Mem512);

impl Scribble {
    fn new() -> Self {
        Scribble(Box::into_raw(Box::new(Mem512 {
            ctl: RingCtl::new(),
            data: [0; 512],
        })))
    }

    /// A producer and a consumer on the ring, starting at its published head.
    ///
    /// # Safety
    ///
    /// No other endpoint of the ring is alive.
    unsafe fn endpoints(&self) -> (Producer, Consumer) {
        // SAFETY: the memory lives until `self` is dropped, which the tests do after the
        // endpoints; it is aligned and was zeroed; the caller guarantees these are the only
        // endpoints.
        unsafe {
            let data = (&raw mut (*self.0).data).cast::<u8>();
            let ctl = &raw const (*self.0).ctl;
            (Producer::new(ctl, data, 512), Consumer::new(ctl, data, 512))
        }
    }

    fn ctl(&self) -> &RingCtl {
        // SAFETY: the box is alive while `self` is; a `RingCtl` is atomics only, so a shared
        // reference to it coexists with the endpoints' accesses.
        unsafe { &(*self.0).ctl }
    }

    /// Writes `bytes` at offset `off` of the data area with plain stores, as a corrupt
    /// peer could.
    fn write(&self, off: usize, bytes: &[u8]) {
        assert!(off + bytes.len() <= 512);
        // SAFETY: inside the data area (checked); the tests are single-threaded, so nothing
        // accesses the ring concurrently, and no reference to the data area exists.
        unsafe {
            let data = (&raw mut (*self.0).data).cast::<u8>();
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), data.add(off), bytes.len());
        }
    }
}

impl Drop for Scribble {
    fn drop(&mut self) {
        // SAFETY: from `Box::into_raw` in `new`; the endpoints are gone (dropped first).
        drop(unsafe { Box::from_raw(self.0) });
    }
}

fn scribble_ring() -> (Scribble, Producer, Consumer) {
    let mem = Scribble::new();
    // SAFETY: the first endpoints of this ring.
    let (tx, rx) = unsafe { mem.endpoints() };
    (mem, tx, rx)
}

/// Regression (found while writing the `ring` fuzz target): a corrupt record length
/// could only panic, in a message that did not say who wrote the ring.
#[test]
fn corrupt_length_is_an_error_from_try_peek() {
    let (mem, mut tx, mut rx) = scribble_ring();
    assert!(tx.push(5, &[b"abc"]));
    assert!(tx.push(6, &[b"def"]));
    rx.peek().unwrap();
    rx.pop();
    // The second record starts at 24; its length word is at 32.
    mem.write(32, &1000u32.to_ne_bytes());
    let e = rx.try_peek().unwrap_err();
    assert_eq!(
        e,
        CorruptRecord {
            pos: 24,
            len: Some(1000),
            room: 512 - 24
        }
    );
    assert_eq!(
        rx.try_peek().unwrap_err(),
        e,
        "the consumer stays at the record"
    );
    // The largest length that fits is accepted.
    mem.write(32, &472u32.to_ne_bytes());
    assert_eq!(rx.try_peek().unwrap().unwrap().1.len(), 472);
    drop((tx, rx));
}

/// Regression (found by `corrupt_head_does_not_overflow` below, written for the `ring`
/// fuzz target): a record tag in the last word of the data area, where only a pad
/// fits, made the consumer read the record's length and user word from the 8 bytes
/// after the data area.
#[test]
fn record_tag_in_the_last_word_is_an_error() {
    let (mem, mut tx, mut rx) = scribble_ring();
    // Consume records up to position 504 (= 512 - 8): 21 records of 24 bytes.
    for i in 0..21u32 {
        assert!(tx.push(i, &[&[1u8; 8]]));
        rx.peek().unwrap();
        rx.pop();
    }
    assert_eq!(tx.tail, 504);
    mem.write(504, &505u64.to_ne_bytes());
    assert_eq!(
        rx.try_peek(),
        Err(CorruptRecord {
            pos: 504,
            len: None,
            room: 8
        })
    );
    drop((tx, rx));
}

#[test]
#[should_panic(expected = "corrupt ring: the record at position 0 claims")]
fn corrupt_length_panics_in_peek() {
    let (mem, mut tx, mut rx) = scribble_ring();
    assert!(tx.push(5, &[b"abc"]));
    mem.write(8, &u32::MAX.to_ne_bytes());
    let _ = rx.peek();
}

/// Regression (found while writing the `ring` fuzz target): the producer added the
/// consumer's head (read from shared memory) to the capacity, which overflowed (a panic
/// in debug builds) for a corrupt head near `u64::MAX`; and an endpoint attaching to a
/// ring whose head had bit 63 set started at positions whose arithmetic overflowed.
#[test]
fn corrupt_head_does_not_overflow() {
    let (mem, mut tx, mut rx) = scribble_ring();
    // Fill the ring so that the next reserve re-reads the head.
    while tx.push(1, &[&[0u8; 40]]) {}
    mem.ctl().head.store(u64::MAX, Ordering::Release);
    // Whatever it decides, it stays inside the data area and does not panic.
    for _ in 0..100 {
        let _ = tx.push(2, &[&[7u8; 40]]);
        if let Ok(Some(_)) = rx.try_peek() {
            rx.pop();
        }
    }
    drop((tx, rx));
    // SAFETY: the old endpoints are gone.
    let (mut tx, mut rx) = unsafe { mem.endpoints() };
    // The endpoints start at the head without its top bit and its low three bits: tag
    // words at an offset of 511 would reach past the data area (found by Miri).
    assert_eq!(tx.tail, (u64::MAX >> 1) & !7);
    assert_eq!(rx.head, tx.tail);
    for _ in 0..100 {
        let _ = tx.push(3, &[&[1u8; 100]]);
        if let Ok(Some(_)) = rx.try_peek() {
            rx.pop();
        }
    }
    drop((tx, rx));
}

/// Regression (found by valgrind's memcheck in `corrupt_head_does_not_overflow`): an
/// endpoint attaching to a ring whose published head is not a multiple of 8 started at
/// that position, so its tag offsets were misaligned and the last one overlapped the 8
/// bytes after the data area (debug builds now assert every tag offset). Such a head now
/// attaches at a multiple of 8, and the ring works from there; near `2^63` positions
/// soon reach the pad bit, so there the ring only has to stay inside its memory.
#[test]
fn misaligned_head_attaches_at_a_multiple_of_8() {
    for head in [
        1,
        7,
        13,
        511,
        512 + 5,
        (1 << 40) + 3,
        (1 << 63) - 1,
        u64::MAX,
    ] {
        let (mem, tx, rx) = scribble_ring();
        drop((tx, rx));
        mem.ctl().head.store(head, Ordering::Release);
        // SAFETY: the old endpoints are gone; these are dropped before `mem`.
        let (mut tx, mut rx) = unsafe { mem.endpoints() };
        let start = head & !(1 << 63) & !7;
        assert_eq!((tx.tail, rx.head), (start, start), "head {head:#x}");
        for i in 0..40u32 {
            if start < 1 << 62 {
                assert!(
                    tx.push(i, &[&i.to_ne_bytes()]),
                    "head {head:#x}, record {i}"
                );
                assert_eq!(next(&mut rx), Some((i, i.to_ne_bytes().to_vec())));
            } else {
                let _ = tx.push(i, &[&i.to_ne_bytes()]);
                if let Ok(Some(_)) = rx.try_peek() {
                    rx.pop();
                }
            }
        }
        drop((tx, rx));
    }
}

#[test]
#[should_panic(expected = "pop without a record")]
fn pop_without_peek_panics() {
    let (_tx, mut rx) = channel(256);
    rx.pop();
}

#[test]
#[should_panic(expected = "power of two")]
fn bad_capacity_panics() {
    let _ = channel(300);
}

#[test]
#[should_panic(expected = "max_body")]
#[cfg(debug_assertions)]
fn oversized_reserve_panics_in_debug() {
    let (mut tx, _rx) = channel(256);
    let _ = tx.reserve(113);
}

#[test]
#[should_panic(expected = "commit length")]
fn overlong_commit_panics() {
    let (mut tx, _rx) = channel(256);
    tx.reserve(8).unwrap().commit(0, 9);
}

#[test]
fn endpoints_are_send() {
    fn is_send<T: Send>() {}
    is_send::<Producer>();
    is_send::<Consumer>();
}
