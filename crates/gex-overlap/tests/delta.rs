//! Delta transfers in one process (loopback: the endpoint's own segment is mapped, so
//! the mover copies the sends): only the changed bytes cross, in both tracking modes;
//! several threads writing an OS-triggered buffer; sends early in an epoch (flushes,
//! marks reaching the delta size); misuse (a write after a send in the epoch)
//! reported; the adaptive whole send; bad input.

mod common;

use gex_core::loopback::Loopback;
use gex_core::{Blocking, Client, Endpoint};
use gex_overlap::{DeltaBuf, DeltaExt, OverlapError, Tracking, page_size};
use gex_rma::{GlobalPtr, RmaExt};

const SEG: usize = 8 << 20;

fn client_env(delta: Option<&str>) -> Client<Loopback> {
    let mut cfg = gex_core::config::Config::default();
    if let Some(d) = delta {
        cfg.set("GEX_OVERLAP_DELTA", d);
    }
    common::loopback_client(cfg, SEG)
}

fn client() -> Client<Loopback> {
    client_env(None)
}

/// The destination region's bytes.
fn dest(ep: &mut Endpoint<Loopback>, off: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    ep.get(&mut v[..], GlobalPtr::new(ep.addr(), off), Blocking)
        .unwrap();
    v
}

/// Scribbles over the destination region, so that a test sees what a send rewrote.
fn scribble(ep: &mut Endpoint<Loopback>, off: usize, len: usize) {
    let p = GlobalPtr::<u8>::new(ep.addr(), off);
    ep.put(p, &vec![0xEE; len], Blocking).unwrap();
}

/// An epoch: the first part is sent (marks reaching the delta size) while the rest is
/// computed; then `delta_end`, `delta_wait`.
#[test]
fn marks_send_early_inside_an_epoch() {
    let pg = page_size();
    let client = client_env(Some(&(4 * pg).to_string()));
    let mut ep = client.endpoint(0).unwrap();
    let len = 64 * pg;
    let dst = GlobalPtr::<u8>::new(ep.addr(), 0);
    let mut buf = DeltaBuf::new(len, Tracking::Annotated).unwrap();
    ep.delta_put(dst, &mut buf).unwrap();
    for round in 1..4u8 {
        ep.delta_begin(&mut buf, dst).unwrap();
        assert!(buf.in_epoch());
        // 24 pages of 64 (less than half: no whole send), page by page, marked as
        // produced.
        for p in 0..24 {
            buf[p * pg..(p + 1) * pg].fill(round.wrapping_mul(p as u8 + 1));
            ep.delta_mark(&mut buf, p * pg, pg).unwrap();
        }
        let s = ep.delta_end(&mut buf).unwrap();
        assert!(!buf.in_epoch());
        assert_eq!(s.bytes, 24 * pg);
        // One send per delta (4 pages), all of them by the marks, before the end.
        assert_eq!(s.sends, 6, "{s:?}");
        ep.delta_wait(&mut buf).unwrap();
        assert_eq!(dest(&mut ep, 0, len), buf.to_vec(), "round {round}");
    }
}

/// The cases (each marked `#[test]`), under their names: `ep` is endpoint 0 of a fresh
/// [`client`] and `pg` the page size; with more arguments, `buf` is a [`DeltaBuf`] of
/// `len` bytes (that many pages) in that tracking mode and `dst` the destination at
/// that offset of the endpoint's own segment.
macro_rules! delta_tests {
    () => {};
    ($(#[$m:meta])* fn $name:ident($ep:ident, $pg:ident) $body:block $($rest:tt)*) => {
        $(#[$m])*
        fn $name() {
            let client = client();
            let mut $ep = client.endpoint(0).unwrap();
            let $pg = page_size();
            $body
        }
        delta_tests! { $($rest)* }
    };
    (
        $(#[$m:meta])*
        fn $name:ident(
            $ep:ident, $pg:ident, $len:ident = $pages:literal pages,
            $buf:ident: $tracking:ident, $dst:ident at $off:expr
        ) $body:block
        $($rest:tt)*
    ) => {
        delta_tests! {
            $(#[$m])*
            fn $name($ep, $pg) {
                let $len = $pages * $pg;
                let $dst = GlobalPtr::<u8>::new($ep.addr(), $off);
                let mut $buf = DeltaBuf::new($len, Tracking::$tracking).unwrap();
                $body
            }
            $($rest)*
        }
    };
}

delta_tests! {
#[test]
fn os_triggered_sends_only_the_pages_written(ep, pg, len = 64 pages, buf: OsTriggered, dst at 0) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    let s = ep.delta_put(dst, &mut buf).unwrap();
    assert_eq!((s.bytes, s.whole), (len, true));
    assert_eq!(dest(&mut ep, 0, len), buf.to_vec());
    // Nothing changed: nothing crosses.
    assert_eq!(buf.changed_bytes(), 0);
    let s = ep.delta_put(dst, &mut buf).unwrap();
    assert_eq!(s.bytes, 0);
    // Pages 3, 4 and 40 written: two runs.
    scribble(&mut ep, 0, len);
    let mut model = buf.to_vec();
    for at in [3 * pg + 5, 4 * pg + 1, 40 * pg + pg - 1] {
        buf[at] = 7;
        model[at] = 7;
    }
    assert_eq!(buf.changed_bytes(), 3 * pg);
    let s = ep.delta_put(dst, &mut buf).unwrap();
    assert_eq!((s.bytes, s.runs, s.whole), (3 * pg, 2, false));
    // Only those pages were rewritten over the scribble.
    let d = dest(&mut ep, 0, len);
    for p in 0..64 {
        let want: &[u8] = if [3, 4, 40].contains(&p) {
            &model[p * pg..(p + 1) * pg]
        } else {
            &[0xEE; 1][..]
        };
        if want.len() == 1 {
            assert!(
                d[p * pg..(p + 1) * pg].iter().all(|&b| b == 0xEE),
                "page {p}"
            );
        } else {
            assert_eq!(&d[p * pg..(p + 1) * pg], want, "page {p}");
        }
    }
}

#[test]
fn os_triggered_with_four_threads_writing(ep, pg, len = 256 pages, buf: OsTriggered, dst at 1 << 20) {
    ep.delta_put(dst, &mut buf).unwrap();
    for round in 0..6u8 {
        // Four threads, each writing every fourth page of its quarter (and some
        // pages twice, from two threads at once on different bytes).
        let quarter = len / 4;
        std::thread::scope(|s| {
            for (t, part) in buf.chunks_mut(quarter).enumerate() {
                s.spawn(move || {
                    for p in (0..quarter / pg).step_by(4) {
                        part[p * pg + t + usize::from(round)] = round ^ (t as u8) ^ (p as u8);
                    }
                });
            }
        });
        let s = ep.delta_put(dst, &mut buf).unwrap();
        assert_eq!(s.bytes, len / 4, "round {round}");
        assert_eq!(dest(&mut ep, 1 << 20, len), buf.to_vec(), "round {round}");
    }
}

#[test]
fn annotated_sends_the_marked_bytes_only(ep, pg, len = 32 pages, buf: Annotated, dst at 0) {
    buf.fill(1);
    let s = ep.delta_put(dst, &mut buf).unwrap();
    assert_eq!(s.bytes, len);
    scribble(&mut ep, 0, len);
    buf[10..20].fill(2);
    buf.mark(10, 10).unwrap();
    buf[5 * pg..5 * pg + 100].fill(3);
    buf.mark(5 * pg, 100).unwrap();
    // Written but not marked: not sent (the annotation is the program's promise).
    buf[9 * pg] = 4;
    let s = ep.delta_put(dst, &mut buf).unwrap();
    assert_eq!((s.bytes, s.runs, s.whole), (110, 2, false));
    let d = dest(&mut ep, 0, len);
    assert_eq!(&d[10..20], &[2; 10]);
    assert_eq!(&d[5 * pg..5 * pg + 100], &[3; 100][..]);
    assert_eq!(d[9], 0xEE);
    assert_eq!(d[9 * pg], 0xEE);
    assert_eq!(d.iter().filter(|&&b| b != 0xEE).count(), 110);
}

#[test]
fn another_destination_gets_everything(ep, pg, len = 8 pages, buf: OsTriggered, a at 0) {
    buf.fill(9);
    let b = GlobalPtr::<u8>::new(ep.addr(), 2 << 20);
    assert_eq!(ep.delta_put(a, &mut buf).unwrap().bytes, len);
    buf[0] = 1;
    assert_eq!(ep.delta_put(b, &mut buf).unwrap().bytes, len);
    assert_eq!(dest(&mut ep, 2 << 20, len), buf.to_vec());
    buf[0] = 2;
    // Back to `a`: its copy is older than the last transfer, so everything again.
    assert_eq!(ep.delta_put(a, &mut buf).unwrap().bytes, len);
    assert_eq!(dest(&mut ep, 0, len), buf.to_vec());
}

#[test]
fn most_of_the_buffer_changed_sends_it_whole(ep, pg, len = 10 pages, buf: Annotated, dst at 0) {
    ep.delta_put(dst, &mut buf).unwrap();
    // Six pages of ten, in pieces: whole (the rest of the buffer in delta-sized runs).
    for p in [0, 2, 4, 6, 8, 9] {
        buf[p * pg..(p + 1) * pg].fill(p as u8 + 1);
        buf.mark(p * pg, pg).unwrap();
    }
    let s = ep.delta_put(dst, &mut buf).unwrap();
    assert!(s.whole);
    assert_eq!(s.bytes, len);
    assert_eq!(dest(&mut ep, 0, len), buf.to_vec());
    // Two of ten: pieces.
    buf[pg] = 1;
    buf.mark(pg, 1).unwrap();
    buf[7 * pg] = 1;
    buf.mark(7 * pg, 1).unwrap();
    let s = ep.delta_put(dst, &mut buf).unwrap();
    assert_eq!((s.bytes, s.whole), (2, false));
}

#[test]
fn os_triggered_flush_then_write_again_is_reported(ep, pg, len = 16 pages, buf: OsTriggered, dst at 0) {
    ep.delta_put(dst, &mut buf).unwrap();
    ep.delta_begin(&mut buf, dst).unwrap();
    buf[2 * pg] = 1;
    buf[3 * pg] = 1;
    ep.delta_flush(&mut buf).unwrap();
    buf[5 * pg] = 5; // not sent yet: fine
    buf[3 * pg + 8] = 2; // already sent in this epoch: misuse
    match ep.delta_end(&mut buf) {
        Err(OverlapError::WrittenAfterSend { offset }) => assert_eq!(offset, 3 * pg),
        r => panic!("{r:?}"),
    }
    assert!(!buf.in_epoch());
    ep.delta_wait(&mut buf).unwrap();
    // The final bytes arrived all the same.
    assert_eq!(dest(&mut ep, 0, len), buf.to_vec());
    // The next epoch is clean again.
    buf[3 * pg] = 3;
    let s = ep.delta_put(dst, &mut buf).unwrap();
    assert_eq!(s.bytes, pg);
    assert_eq!(dest(&mut ep, 0, len), buf.to_vec());
}

#[test]
fn annotated_misuse_is_reported_by_mark_and_by_end(ep, pg, len = 16 pages, buf: Annotated, dst at 0) {
    ep.delta_put(dst, &mut buf).unwrap();
    // Marked again after the flush: the mark says so at once.
    ep.delta_begin(&mut buf, dst).unwrap();
    buf[..pg].fill(1);
    buf.mark(0, pg).unwrap();
    ep.delta_flush(&mut buf).unwrap();
    buf[100] = 2;
    assert!(matches!(
        buf.mark(100, 1),
        Err(OverlapError::WrittenAfterSend { offset: 100 })
    ));
    assert!(matches!(
        ep.delta_end(&mut buf),
        Err(OverlapError::WrittenAfterSend { offset: 100 })
    ));
    ep.delta_wait(&mut buf).unwrap();
    assert_eq!(dest(&mut ep, 0, len), buf.to_vec());
    // Written after the flush without a mark: the page is read-only, the write
    // faults and is recorded; the end reports it and sends the page again.
    ep.delta_begin(&mut buf, dst).unwrap();
    buf[pg..2 * pg].fill(3);
    buf.mark(pg, pg).unwrap();
    ep.delta_flush(&mut buf).unwrap();
    buf[pg + 7] = 4;
    assert!(matches!(
        ep.delta_end(&mut buf),
        Err(OverlapError::WrittenAfterSend { offset }) if offset == pg
    ));
    ep.delta_wait(&mut buf).unwrap();
    assert_eq!(dest(&mut ep, 0, len), buf.to_vec());
}

#[test]
fn bad_input_gives_documented_errors(ep, pg) {
    let mut buf = DeltaBuf::new(4 * pg, Tracking::Annotated).unwrap();
    let dst = GlobalPtr::<u8>::new(ep.addr(), 0);
    assert!(matches!(
        buf.mark(4 * pg - 1, 2),
        Err(OverlapError::OutOfBuffer { .. })
    ));
    assert!(matches!(
        buf.mark(usize::MAX, 2),
        Err(OverlapError::OutOfBuffer { .. })
    ));
    assert!(matches!(ep.delta_end(&mut buf), Err(OverlapError::NoEpoch)));
    assert!(matches!(
        ep.delta_flush(&mut buf),
        Err(OverlapError::NoEpoch)
    ));
    assert!(matches!(
        ep.delta_begin(&mut buf, GlobalPtr::new(ep.addr(), SEG - pg)),
        Err(OverlapError::OutOfSegment { .. })
    ));
    assert!(matches!(
        ep.delta_put(GlobalPtr::new(ep.addr(), usize::MAX), &mut buf),
        Err(OverlapError::OutOfSegment { .. })
    ));
    ep.delta_begin(&mut buf, dst).unwrap();
    assert!(matches!(
        ep.delta_begin(&mut buf, dst),
        Err(OverlapError::EpochOpen)
    ));
    assert!(matches!(
        ep.delta_put(dst, &mut buf),
        Err(OverlapError::EpochOpen)
    ));
    ep.delta_end(&mut buf).unwrap();
    ep.delta_wait(&mut buf).unwrap();
    // No overlap layer.
    let plain = common::rma_only_client(1 << 20);
    let mut ep2 = plain.endpoint(0).unwrap();
    assert!(matches!(
        ep2.delta_put(GlobalPtr::new(ep2.addr(), 0), &mut buf),
        Err(OverlapError::NotAttached)
    ));
    // Bad settings.
    common::assert_bad_settings(&[
        ("GEX_OVERLAP_DELTA", "0"),
        ("GEX_OVERLAP_DELTA", "lots"),
        ("GEX_OVERLAP_DELTA_WHOLE", "101"),
        ("GEX_OVERLAP_DELTA_WHOLE", "-1"),
    ]);
}

/// Delta send-recv on one endpoint (loopback: the mover both sends and retires the
/// receive's pages): pages sent in reverse order arrive out of order; each epoch
/// carries only the changed pages, and the receive buffer ends equal to the sent one
/// (pages not sent come from the shadow, even after the program wrote its copy).
#[test]
fn send_recv_out_of_order_and_unchanged_pages(ep, pg) {
    let len = 24 * pg + 100;
    let mut rx = ep.delta_recv_window(pg, len).unwrap();
    assert_eq!(rx.window(), pg);
    let window = GlobalPtr::<u8>::new(ep.addr(), rx.window());
    let mut tx = DeltaBuf::new(len, Tracking::Annotated).unwrap();
    for round in 1..5u8 {
        ep.delta_recv(&mut rx).unwrap();
        assert_eq!(rx.epochs(), u32::from(round));
        ep.delta_send_begin(&mut tx, window).unwrap();
        // Round 1 writes every page; later rounds every third, from the end.
        let step = if round == 1 { 1 } else { 3 };
        for p in (0..25).rev().step_by(step) {
            let end = ((p + 1) * pg).min(len);
            for (i, b) in tx[p * pg..end].iter_mut().enumerate() {
                *b = round.wrapping_mul(7) ^ (i as u8) ^ (p as u8);
            }
            ep.delta_mark(&mut tx, p * pg, end - p * pg).unwrap();
            ep.delta_flush(&mut tx).unwrap();
        }
        let s = ep.delta_end(&mut tx).unwrap();
        if round > 1 {
            assert_eq!(s.sends, 9, "{s:?}");
            assert!(!s.whole);
        }
        // No wait on the receive: reading it waits for each page.
        assert_eq!(&rx[..], &tx[..], "round {round}");
        assert_eq!(ep.delta_recv_wait(&mut rx).unwrap(), len);
        assert!(!rx.is_pending());
        ep.delta_wait(&mut tx).unwrap();
        // The program scribbles over its received copy: the next epoch brings the
        // sender's bytes back for every page, sent or not.
        rx.fill(0xAB);
    }
}

#[test]
fn send_recv_bad_input_gives_documented_errors(ep, pg) {
    assert!(matches!(
        ep.delta_recv_window(100, pg),
        Err(OverlapError::Unaligned { offset: 100, .. })
    ));
    assert!(matches!(
        ep.delta_recv_window(SEG - pg, pg),
        Err(OverlapError::OutOfSegment { .. })
    ));
    assert!(matches!(
        ep.delta_recv_window(usize::MAX / pg * pg, pg),
        Err(OverlapError::OutOfSegment { .. })
    ));
    let mut tx = DeltaBuf::new(2 * pg, Tracking::OsTriggered).unwrap();
    assert!(matches!(
        ep.delta_send_begin(&mut tx, GlobalPtr::new(ep.addr(), 64)),
        Err(OverlapError::Unaligned { offset: 64, .. })
    ));
    // Not even the window's header fits.
    assert!(matches!(
        ep.delta_send_begin(&mut tx, GlobalPtr::new(ep.addr(), SEG)),
        Err(OverlapError::OutOfSegment { .. })
    ));
    // No window made there (its header is zero).
    assert!(matches!(
        ep.delta_send_begin(&mut tx, GlobalPtr::new(ep.addr(), 2 << 20)),
        Err(OverlapError::OutOfBuffer { buf_len: 0, .. })
    ));
    // A window for a shorter buffer.
    let _rx = ep.delta_recv_window(1 << 20, pg).unwrap();
    assert!(matches!(
        ep.delta_send_begin(&mut tx, GlobalPtr::new(ep.addr(), 1 << 20)),
        Err(OverlapError::OutOfBuffer { buf_len, .. }) if buf_len == pg
    ));
    assert!(!tx.in_epoch());
}

#[test]
fn relay_bad_input_gives_documented_errors(ep, pg) {
    let rx = ep.delta_recv_window(0, pg).unwrap();
    let mut out = DeltaBuf::new(2 * pg, Tracking::Annotated).unwrap();
    let mut calls = 0;
    assert!(matches!(
        ep.delta_relay(&[&rx], &mut out, 0, |_, _, _| calls += 1),
        Err(OverlapError::NoEpoch)
    ));
    ep.delta_begin(&mut out, GlobalPtr::new(ep.addr(), 1 << 20))
        .unwrap();
    assert!(matches!(
        ep.delta_relay(&[&rx], &mut out, 0, |_, _, _| calls += 1),
        Err(OverlapError::OutOfBuffer { buf_len, .. }) if buf_len == pg
    ));
    assert_eq!(calls, 0);
    // No input: a source of the cascade, in chunks of one page.
    ep.delta_relay(&[], &mut out, 1, |at, ins, o| {
        assert!(ins.is_empty());
        o.fill((at / pg) as u8 + 1);
        calls += 1;
    })
    .unwrap();
    assert_eq!(calls, 2);
    let s = ep.delta_end(&mut out).unwrap();
    assert_eq!(s.bytes, 2 * pg);
    ep.delta_wait(&mut out).unwrap();
    let d = dest(&mut ep, 1 << 20, 2 * pg);
    assert!(d[..pg].iter().all(|&b| b == 1) && d[pg..].iter().all(|&b| b == 2));
}

/// Variable-size messages: a receive window for 16 pages gets messages of 16, 5 and
/// 9 pages (plus some bytes) from three senders in turn; the receiver learns each
/// length from `delta_recv_wait` and finds the message's bytes.
#[test]
fn send_recv_variable_size_messages(ep, pg) {
    let mut rx = ep.delta_recv_window(0, 16 * pg).unwrap();
    let window = GlobalPtr::<u8>::new(ep.addr(), 0);
    for (k, n) in [16 * pg, 5 * pg + 7, 9 * pg + 100].into_iter().enumerate() {
        let mut tx = DeltaBuf::new(n, Tracking::Annotated).unwrap();
        ep.delta_recv(&mut rx).unwrap();
        ep.delta_send_begin(&mut tx, window).unwrap();
        for (i, b) in tx.iter_mut().enumerate() {
            *b = (i % 241) as u8 ^ (k as u8 + 1);
        }
        let s = ep.delta_end(&mut tx).unwrap();
        assert_eq!((s.bytes, s.whole), (n, true));
        assert_eq!(&rx[..n], &tx[..], "message {k}");
        assert_eq!(ep.delta_recv_wait(&mut rx).unwrap(), n);
    }
}
}

mod model {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        /// Write `len` bytes of `val` at `off` (and mark them, in annotated mode).
        Write(usize, usize, u8),
        /// A flush inside the epoch.
        Flush,
    }

    fn op(len: usize) -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..len, 1usize..3000, any::<u8>())
                .prop_map(move |(o, l, v)| Op::Write(o, l.min(len - o), v)),
            1 => Just(Op::Flush),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
        /// Epochs of random writes and flushes against a model (which pages a flush
        /// sends, so which later writes are misuses): after every epoch the destination
        /// equals the buffer, what crossed covers what changed, and `delta_end` reports
        /// a misuse exactly when the model has one.
        #[test]
        fn delta_puts_match_the_model(
            os in any::<bool>(),
            epochs in proptest::collection::vec(
                proptest::collection::vec(op(8 * 4096), 0..8), 1..5),
        ) {
            let pg = page_size();
            prop_assume!(pg == 4096);
            let len = 8 * pg;
            let client = client();
            let mut ep = client.endpoint(0).unwrap();
            let dst = GlobalPtr::<u8>::new(ep.addr(), 0);
            let mode = if os { Tracking::OsTriggered } else { Tracking::Annotated };
            let mut buf = DeltaBuf::new(len, mode).unwrap();
            ep.delta_put(dst, &mut buf).unwrap();
            for ops in epochs {
                let before = buf.to_vec();
                ep.delta_begin(&mut buf, dst).unwrap();
                // The model: bytes written (and marked) in the epoch, pages flushed.
                let mut written = vec![false; len];
                let mut flushed = [false; 8];
                let mut misuse = false;
                for op in ops {
                    match op {
                        Op::Write(off, n, v) => {
                            if n == 0 {
                                continue;
                            }
                            let again = (off / pg..(off + n).div_ceil(pg)).any(|p| flushed[p]);
                            misuse |= again;
                            buf[off..off + n].fill(v);
                            written[off..off + n].fill(true);
                            if !os {
                                let r = buf.mark(off, n);
                                if again {
                                    let is_misuse =
                                        matches!(r, Err(OverlapError::WrittenAfterSend { .. }));
                                    prop_assert!(is_misuse, "{:?}", r);
                                } else {
                                    prop_assert!(r.is_ok(), "{:?}", r);
                                }
                            }
                        }
                        Op::Flush => {
                            ep.delta_flush(&mut buf).unwrap();
                            // A flush sends the pages written (OS) or entirely marked
                            // (annotated) so far.
                            for (p, f) in flushed.iter_mut().enumerate() {
                                let w = &written[p * pg..(p + 1) * pg];
                                if (os && w.contains(&true)) || (!os && !w.contains(&false)) {
                                    *f = true;
                                }
                            }
                        }
                    }
                }
                let r = ep.delta_end(&mut buf);
                ep.delta_wait(&mut buf).unwrap();
                match r {
                    Ok(s) => {
                        prop_assert!(!misuse, "a write after a flush went unreported");
                        let changed = buf.iter().zip(&before).filter(|(a, b)| a != b).count();
                        prop_assert!(s.bytes >= changed, "{:?} < {}", s, changed);
                    }
                    Err(OverlapError::WrittenAfterSend { .. }) => prop_assert!(misuse),
                    Err(e) => prop_assert!(false, "{}", e),
                }
                let mut d = vec![0u8; len];
                ep.get(&mut d[..], dst, Blocking).unwrap();
                prop_assert_eq!(&d[..], &buf[..]);
            }
        }
    }
}
