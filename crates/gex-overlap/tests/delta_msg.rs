//! Delta transfers as ordinary gex-msg messages (feature `msg`): several epochs in
//! which only the changed bytes cross (the message's size asserted), interleaved with
//! plain messages on the same (comm, tag) and received in order; a plain receive and
//! `apply_delta`; a proptest of encode/apply against a model; malformed messages; and
//! a 2-process job (smp; ofi with `GEX_CONDUIT=ofi` and `--features gex/ofi`).

use gex::Job;
use gex::spi::Conduit;
use gex_core::boot::Singleton;
use gex_core::loopback::Loopback;
use gex_core::{Client, ClientBuilder};
use gex_msg::{Comm, Msg, MsgError, MsgExt};
use gex_overlap::{
    DELTA_HEADER, DELTA_MAGIC, DELTA_RUN_HEADER, DeltaBuf, DeltaExt, DeltaMsgExt, DeltaStatus,
    Overlap, OverlapError, Tracking, apply_delta, page_size,
};
use gex_rma::{GlobalPtr, Rma};
use gex_testkit::procs::Procs;
use proptest::prelude::*;
use proptest::test_runner::{Config as PtConfig, TestRunner};

const C: Comm = Comm::new(3);
const TAG: u32 = 9;

/// A loopback client with gex-msg, gex-rma and the overlap layer (`whole`: its
/// `GEX_OVERLAP_DELTA_WHOLE`).
fn client(whole: Option<&str>) -> Client<Loopback> {
    let mut cfg = gex_core::config::Config::default();
    if let Some(w) = whole {
        cfg.set("GEX_OVERLAP_DELTA_WHOLE", w);
    }
    ClientBuilder::new()
        .layer::<Rma>()
        .layer::<Msg>()
        .layer::<Overlap>()
        .config(cfg)
        .segment_size(1 << 20)
        .init::<Loopback>(Box::new(Singleton::new()))
        .unwrap()
}

/// The length of a delta message carrying `runs` runs of `bytes` bytes in all.
fn wire(runs: usize, bytes: usize) -> usize {
    DELTA_HEADER + runs * DELTA_RUN_HEADER + bytes
}

/// Writes `v` into `buf[off..off+n]` (and marks it when annotated).
fn write(buf: &mut DeltaBuf, off: usize, n: usize, v: u8) {
    buf[off..off + n].fill(v);
    if buf.mode() == Tracking::Annotated {
        buf.mark(off, n).unwrap();
    }
}

/// Several epochs to one destination: the first carries everything, each later one
/// only the pages (OS-triggered) or bytes (annotated) written in it, and plain
/// messages sent between them on the same (comm, tag) are received in send order.
fn epochs(mode: Tracking) {
    let client = client(None);
    let mut ep = client.endpoint(0).unwrap();
    let pg = page_size();
    let len = 32 * pg;
    let mut buf = DeltaBuf::new(len, mode).unwrap();
    let mut copy = vec![0u8; len];
    for (i, b) in buf.iter_mut().enumerate() {
        *b = i as u8;
    }
    if mode == Tracking::Annotated {
        buf.mark(0, len).unwrap();
    }
    let st = ep.delta_send_msg(C, 0, TAG, &mut buf).unwrap();
    assert!(st.whole);
    assert_eq!((st.bytes, st.runs, st.sends), (len, 1, 1));
    let got = ep.delta_recv_msg(C, 0, TAG, &mut copy).unwrap();
    assert_eq!((got.wire, got.len, got.whole), (wire(1, len), len, true));
    assert_eq!(copy, &buf[..]);
    for epoch in 1..5u8 {
        // Two small writes, far apart: one in page 2*epoch, one in page 20+epoch.
        let (a, b) = (
            2 * epoch as usize * pg + 10,
            (20 + epoch as usize) * pg + 100,
        );
        write(&mut buf, a, 7, 0x80 | epoch);
        write(&mut buf, b, 3, 0x40 | epoch);
        ep.send(C, 0, TAG, &[epoch; 5]).unwrap();
        let st = ep.delta_send_msg(C, 0, TAG, &mut buf).unwrap();
        ep.send(C, 0, TAG, &[epoch; 6]).unwrap();
        let (bytes, runs) = match mode {
            Tracking::OsTriggered => (2 * pg, 2),
            Tracking::Annotated => (10, 2),
        };
        assert_eq!((st.bytes, st.runs, st.whole), (bytes, runs, false));
        let mut plain = [0u8; 8];
        let s = ep.recv(C, Some(0), Some(TAG), &mut plain).unwrap();
        assert_eq!(&plain[..s.len], &[epoch; 5]);
        let got = ep.delta_recv_msg(C, 0, TAG, &mut copy).unwrap();
        assert_eq!((got.bytes, got.runs), (bytes, runs));
        assert_eq!(
            got.wire,
            wire(runs, bytes),
            "only the changed bytes crossed"
        );
        let s = ep.recv(C, Some(0), Some(TAG), &mut plain).unwrap();
        assert_eq!(&plain[..s.len], &[epoch; 6]);
        assert_eq!(copy, &buf[..], "epoch {epoch}");
    }
    // Nothing changed: a header alone crosses.
    assert_eq!(ep.delta_send_msg(C, 0, TAG, &mut buf).unwrap().bytes, 0);
    assert_eq!(
        ep.delta_recv_msg(C, 0, TAG, &mut copy).unwrap().wire,
        DELTA_HEADER
    );
    // Another tag is another destination: everything again.
    assert!(ep.delta_send_msg(C, 0, TAG + 1, &mut buf).unwrap().whole);
    let mut other = vec![0u8; len];
    ep.delta_recv_msg(C, 0, TAG + 1, &mut other).unwrap();
    assert_eq!(other, &buf[..]);
}

#[test]
fn os_triggered_epochs_send_only_changed_pages_in_order() {
    epochs(Tracking::OsTriggered);
}

#[test]
fn annotated_epochs_send_only_marked_bytes_in_order() {
    epochs(Tracking::Annotated);
}

/// Most of the buffer changed: the whole buffer in one run; the layer's
/// `GEX_OVERLAP_DELTA_WHOLE` moves the threshold.
#[test]
fn whole_buffer_when_most_changed() {
    for (setting, whole) in [(None, true), (Some("100"), false)] {
        let client = client(setting);
        let mut ep = client.endpoint(0).unwrap();
        let pg = page_size();
        let mut buf = DeltaBuf::new(10 * pg, Tracking::OsTriggered).unwrap();
        let mut copy = vec![0u8; 10 * pg];
        ep.delta_send_msg(C, 0, TAG, &mut buf).unwrap();
        ep.delta_recv_msg(C, 0, TAG, &mut copy).unwrap();
        for p in [0, 2, 4, 5, 6, 8] {
            buf[p * pg] = 1;
        }
        let st = ep.delta_send_msg(C, 0, TAG, &mut buf).unwrap();
        assert_eq!(st.whole, whole, "{setting:?}");
        let got = ep.delta_recv_msg(C, 0, TAG, &mut copy).unwrap();
        let expect = if whole {
            wire(1, 10 * pg)
        } else {
            wire(4, 6 * pg)
        };
        assert_eq!(got.wire, expect);
        assert_eq!(copy, &buf[..]);
    }
}

/// A program receiving with a plain `MsgExt::recv` (sized by a probe) applies the
/// message itself; a shorter sender's buffer updates a prefix of a longer copy.
#[test]
fn plain_recv_and_apply_delta() {
    let client = client(None);
    let mut ep = client.endpoint(0).unwrap();
    let pg = page_size();
    let mut buf = DeltaBuf::new(3 * pg, Tracking::Annotated).unwrap();
    let mut copy = vec![7u8; 5 * pg];
    for round in 0..3u8 {
        write(&mut buf, round as usize * pg + 1, pg - 1, round + 1);
        ep.delta_send_msg(C, 0, TAG, &mut buf).unwrap();
        let st = ep.probe(C, Some(0), Some(TAG)).unwrap();
        let mut msg = vec![0u8; st.len];
        ep.recv(C, Some(0), Some(TAG), &mut msg).unwrap();
        let got: DeltaStatus = apply_delta(&msg, &mut copy).unwrap();
        assert_eq!((got.len, got.wire, got.whole), (3 * pg, st.len, round == 0));
        assert_eq!(&copy[..3 * pg], &buf[..]);
        assert!(
            copy[3 * pg..].iter().all(|&b| b == 7),
            "past the sender's length"
        );
    }
}

fn header(magic: u32, version: u8, len: u64, runs: u32) -> Vec<u8> {
    let mut m = magic.to_le_bytes().to_vec();
    m.extend_from_slice(&[version, 0, 0, 0]);
    m.extend_from_slice(&len.to_le_bytes());
    m.extend_from_slice(&runs.to_le_bytes());
    m.extend_from_slice(&[0; 4]);
    m
}

fn run(m: &mut Vec<u8>, off: u64, bytes: &[u8]) {
    m.extend_from_slice(&off.to_le_bytes());
    m.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    m.extend_from_slice(bytes);
}

/// Malformed messages give the documented errors and write nothing; misuse of the
/// send and the receive too.
#[test]
fn bad_input_gives_documented_errors() {
    let mut buf = [5u8; 64];
    let check = |m: &[u8], buf: &mut [u8; 64]| {
        let r = apply_delta(m, buf);
        assert!(buf.iter().all(|&b| b == 5), "nothing written: {r:?}");
        r
    };
    // Truncated header (a valid start), bad magic, unknown version, empty.
    let good = header(DELTA_MAGIC, 1, 64, 0);
    assert!(matches!(
        check(&good[..20], &mut buf),
        Err(OverlapError::DeltaLength { need: 24, got: 20 })
    ));
    assert!(matches!(
        check(&header(0x1234_5678, 1, 64, 0), &mut buf),
        Err(OverlapError::NotDelta {
            magic: 0x1234_5678,
            ..
        })
    ));
    assert!(matches!(
        check(&header(DELTA_MAGIC, 2, 64, 0), &mut buf),
        Err(OverlapError::NotDelta { version: 2, .. })
    ));
    assert!(matches!(
        check(&[], &mut buf),
        Err(OverlapError::NotDelta { .. })
    ));
    // A run past the sender's buffer (after a good one: nothing written at all).
    let mut m = header(DELTA_MAGIC, 1, 64, 2);
    run(&mut m, 0, &[1; 8]);
    run(&mut m, 60, &[1; 8]);
    assert!(matches!(
        check(&m, &mut buf),
        Err(OverlapError::OutOfBuffer {
            offset: 60,
            len: 8,
            buf_len: 64
        })
    ));
    // An offset near u64::MAX.
    let mut m = header(DELTA_MAGIC, 1, 64, 1);
    run(&mut m, u64::MAX - 2, &[1; 8]);
    assert!(matches!(
        check(&m, &mut buf),
        Err(OverlapError::OutOfBuffer { .. })
    ));
    // A sender's buffer longer than the receive buffer.
    assert!(matches!(
        check(&header(DELTA_MAGIC, 1, 65, 0), &mut buf),
        Err(OverlapError::OutOfBuffer {
            offset: 0,
            len: 65,
            buf_len: 64
        })
    ));
    // A run's bytes cut short; more runs announced than present; bytes after the last.
    let mut m = header(DELTA_MAGIC, 1, 64, 1);
    run(&mut m, 0, &[1; 8]);
    assert!(matches!(
        check(&m[..m.len() - 1], &mut buf),
        Err(OverlapError::DeltaLength { need: 48, got: 47 })
    ));
    let mut two = header(DELTA_MAGIC, 1, 64, 2);
    run(&mut two, 0, &[1; 8]);
    assert!(matches!(
        check(&two, &mut buf),
        Err(OverlapError::DeltaLength { need: 64, got: 48 })
    ));
    m.push(0);
    assert!(matches!(
        check(&m, &mut buf),
        Err(OverlapError::DeltaLength { need: 48, got: 49 })
    ));

    let client = client(None);
    let mut ep = client.endpoint(0).unwrap();
    // A plain message received as a delta: consumed, refused, nothing written.
    ep.send(C, 0, TAG, b"not a delta message at all").unwrap();
    assert!(matches!(
        ep.delta_recv_msg(C, 0, TAG, &mut buf),
        Err(OverlapError::NotDelta { .. })
    ));
    assert!(buf.iter().all(|&b| b == 5));
    assert!(ep.iprobe(C, Some(0), Some(TAG)).unwrap().is_none());
    // A delta longer than the receive buffer.
    let pg = page_size();
    let mut d = DeltaBuf::new(pg, Tracking::Annotated).unwrap();
    ep.delta_send_msg(C, 0, TAG, &mut d).unwrap();
    assert!(matches!(
        ep.delta_recv_msg(C, 0, TAG, &mut buf),
        Err(OverlapError::OutOfBuffer { len, buf_len: 64, .. }) if len == pg
    ));
    // The send: an open epoch, a bad rank or tag (then the next send is whole).
    ep.delta_begin(&mut d, GlobalPtr::new(ep.addr(), 0))
        .unwrap();
    assert!(matches!(
        ep.delta_send_msg(C, 0, TAG, &mut d),
        Err(OverlapError::EpochOpen)
    ));
    ep.delta_end(&mut d).unwrap();
    assert!(matches!(
        ep.delta_send_msg(C, 1, TAG, &mut d),
        Err(OverlapError::Msg(MsgError::BadRank { rank: 1, size: 1 }))
    ));
    assert!(matches!(
        ep.delta_send_msg(C, 0, u32::MAX, &mut d),
        Err(OverlapError::Msg(MsgError::TagOutOfRange { .. }))
    ));
    assert!(matches!(
        ep.delta_recv_msg(C, 1, TAG, &mut buf),
        Err(OverlapError::Msg(MsgError::BadRank { .. }))
    ));
    // An endpoint without gex-msg's layer.
    let bare = ClientBuilder::new()
        .init::<Loopback>(Box::new(Singleton::new()))
        .unwrap();
    let mut bare_ep = bare.endpoint(0).unwrap();
    assert!(matches!(
        bare_ep.delta_send_msg(C, 0, TAG, &mut d),
        Err(OverlapError::Msg(MsgError::NoLayer))
    ));
}

/// Random buffers and change sets, both modes: after each message the receiver's copy
/// equals the sender's buffer, and what crossed is exactly the changed bytes (marked
/// ranges, or whole written pages), or the whole buffer when at least half changed.
#[test]
fn proptest_encode_apply_matches_the_model() {
    let client = client(None);
    // The runner takes an `Fn`: the endpoint is borrowed mutably in each case.
    let ep = std::cell::RefCell::new(client.endpoint(0).unwrap());
    let pg = page_size();
    let writes = prop::collection::vec((any::<u32>(), 1..3 * 4096u32, any::<u8>()), 0..6);
    let strat = (
        1..6usize,
        0..4096usize,
        any::<bool>(),
        prop::collection::vec(writes, 1..5),
    );
    let mut runner = TestRunner::new(PtConfig {
        cases: 48,
        failure_persistence: None,
        ..PtConfig::default()
    });
    runner
        .run(&strat, |(pages, extra, os, epochs)| {
            let len = pages * pg + extra % pg;
            let mode = if os {
                Tracking::OsTriggered
            } else {
                Tracking::Annotated
            };
            let mut ep = ep.borrow_mut();
            let mut buf = DeltaBuf::new(len, mode).unwrap();
            let mut copy = vec![0xA5u8; len];
            for (e, ws) in epochs.iter().enumerate() {
                let mut changed = vec![false; len];
                for &(off, n, v) in ws {
                    let off = off as usize % len;
                    let n = (n as usize).min(len - off);
                    write(&mut buf, off, n, v);
                    let (s, t) = match mode {
                        Tracking::Annotated => (off, off + n),
                        Tracking::OsTriggered => {
                            (off / pg * pg, ((off + n).div_ceil(pg) * pg).min(len))
                        }
                    };
                    changed[s..t].iter_mut().for_each(|c| *c = true);
                }
                let st = ep.delta_send_msg(C, 0, TAG, &mut buf).unwrap();
                let got = ep.delta_recv_msg(C, 0, TAG, &mut copy).unwrap();
                prop_assert_eq!(&copy[..], &buf[..], "epoch {}", e);
                let n = changed.iter().filter(|&&c| c).count();
                let whole = e == 0 || n * 100 >= 50 * len;
                prop_assert_eq!(st.whole, whole);
                prop_assert_eq!(got.bytes, if whole { len } else { n });
                prop_assert_eq!(got.wire, wire(got.runs, got.bytes));
            }
            Ok(())
        })
        .unwrap();
}

/// Rank 0 sends a buffer to rank 1 in several epochs, as delta messages between plain
/// ones on the same (comm, tag); rank 1 checks every byte, the order and the sizes.
struct MsgJob;

/// Writes epoch `e`'s bytes into `buf`: everything at first, then pages
/// `[8e, 8e + 4)`; returns how many.
fn produce(buf: &mut [u8], e: u32) -> usize {
    let pg = page_size();
    let r = if e == 0 {
        0..buf.len()
    } else {
        8 * e as usize * pg..(8 * e as usize + 4) * pg
    };
    let n = r.len();
    for i in r {
        buf[i] = (i as u32).wrapping_mul(31).wrapping_add(e * 7) as u8;
    }
    n
}

impl Job for MsgJob {
    type Output = ();
    fn run<C: Conduit>(self, client: Client<C>) {
        let mut ep = client.endpoint(0).unwrap();
        let len = 64 * page_size();
        let rounds = 5u32;
        if ep.addr().rank == 0 {
            let mut buf = DeltaBuf::new(len, Tracking::OsTriggered).unwrap();
            for e in 0..rounds {
                let n = produce(&mut buf, e);
                ep.send(C, 1, TAG, &e.to_le_bytes()).unwrap();
                let st = ep.delta_send_msg(C, 1, TAG, &mut buf).unwrap();
                assert_eq!(st.bytes, n);
            }
            // Wait for rank 1's answer before leaving.
            let mut ok = [0u8; 1];
            ep.recv(C, Some(1), Some(TAG), &mut ok).unwrap();
            assert_eq!(ok, [1]);
        } else {
            let mut copy = vec![0u8; len];
            let mut model = vec![0u8; len];
            for e in 0..rounds {
                let mut w = [0u8; 4];
                ep.recv(C, Some(0), Some(TAG), &mut w).unwrap();
                assert_eq!(u32::from_le_bytes(w), e, "plain message before delta {e}");
                let n = produce(&mut model, e);
                let got = ep.delta_recv_msg(C, 0, TAG, &mut copy).unwrap();
                assert_eq!(got.wire, wire(1, n), "epoch {e}: only the changed pages");
                assert!(copy == model, "epoch {e}: the copy differs");
            }
            ep.send(C, 0, TAG, &[1]).unwrap();
        }
    }
}

#[test]
fn procs_delta_msg_2() {
    Procs::new(2)
        .timeout(std::time::Duration::from_secs(120))
        .run(|boot| {
            // gex-msg's layer alone (not `gex::builder()`, which carries it already
            // when the facade's `msg` is on, as in the workspace build).
            let b = ClientBuilder::new().layer::<Msg>().segment_size(1 << 20);
            gex::init_with_boot(b, boot, None, MsgJob).unwrap();
        })
        .assert_success();
}
