//! The software RC emulation against the behaviour of an RC queue pair: ordered
//! delivery, completions, RNR retries, memory keys and rights, error completions and the
//! injected faults. Two emulated devices in one process (the conduit's conformance tests
//! run them across processes).
#![allow(unsafe_code)]

use gex_conduit_ibv::emu::{EmuQp, EmuVerbs, Fault};
use gex_conduit_ibv::verbs::{
    Access, ConnectParams, QpCaps, SendOp, SendWr, Sge, Verbs, VerbsError, Wc, WcOpcode, WcStatus,
};
use std::time::{Duration, Instant};

const CAPS: QpCaps = QpCaps {
    max_send_wr: 64,
    max_inline: 64,
};

struct Side {
    v: EmuVerbs,
    cq: <EmuVerbs as Verbs>::Cq,
    srq: <EmuVerbs as Verbs>::Srq,
    qp: EmuQp,
    mem: Box<[u64]>,
    mr: <EmuVerbs as Verbs>::Mr,
}

impl Side {
    fn new(cq_depth: u32, access: Access) -> Side {
        let v = EmuVerbs::open(None, 1, 0).unwrap();
        let cq = v.create_cq(cq_depth).unwrap();
        let srq = v.create_srq(64).unwrap();
        let qp = v.create_qp(&cq, &srq, CAPS).unwrap();
        let mut mem = vec![0u64; 1024].into_boxed_slice();
        // SAFETY: `mem` lives in the same struct as `mr`, dropped after it (field order).
        let mr = unsafe { v.reg_mr(mem.as_mut_ptr().cast(), 8192, access) }.unwrap();
        Side {
            v,
            cq,
            srq,
            qp,
            mem,
            mr,
        }
    }
    fn addr(&self, word: usize) -> u64 {
        self.mem.as_ptr() as u64 + 8 * word as u64
    }
    fn sge(&self, word: usize, len: u32) -> Sge {
        Sge {
            addr: self.addr(word),
            len,
            lkey: EmuVerbs::lkey(&self.mr),
        }
    }
    /// Waits for `n` completions (panics after 20 s).
    fn wait(&self, n: usize) -> Vec<Wc> {
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut buf = [Wc::EMPTY; 8];
        while got.len() < n {
            assert!(Instant::now() < deadline, "only {got:?} of {n} completions");
            let k = self.v.poll_cq(&self.cq, &mut buf).unwrap();
            got.extend_from_slice(&buf[..k]);
            if k == 0 {
                self.v.wait_cq(&self.cq, Duration::from_millis(50)).unwrap();
            }
        }
        got
    }
    /// Posts a signaled RDMA READ of the 8 bytes at `remote_addr` (under `rkey`) into
    /// word `word`.
    fn read(&self, wr_id: u64, remote_addr: u64, rkey: u32, word: usize) {
        self.post(wr_id, SendOp::Read { remote_addr, rkey }, self.sge(word, 8));
    }
    /// Posts a signaled RDMA WRITE of word `word` to `remote_addr` (under `rkey`).
    fn write(&self, wr_id: u64, remote_addr: u64, rkey: u32, word: usize) {
        self.post(
            wr_id,
            SendOp::Write { remote_addr, rkey },
            self.sge(word, 8),
        );
    }
    fn post(&self, wr_id: u64, op: SendOp, sge: Sge) {
        let wr = SendWr {
            wr_id,
            op,
            sge,
            signaled: true,
            inline: false,
        };
        // SAFETY: `sge` is in `mem`, registered, alive until the completion is polled.
        unsafe { self.v.post_send(&self.qp, &wr) }.unwrap();
    }
}

const ALL: Access = Access::all();

fn pair(params: ConnectParams) -> (Side, Side) {
    let a = Side::new(256, ALL);
    let b = Side::new(256, ALL);
    a.v.connect(&a.qp, &b.v.qp_addr(&b.qp), &params).unwrap();
    b.v.connect(&b.qp, &a.v.qp_addr(&a.qp), &params).unwrap();
    (a, b)
}

#[test]
fn sends_arrive_in_order_with_completions() {
    let (mut a, b) = pair(ConnectParams::default());
    for i in 0..16 {
        // SAFETY: words 64.. of b's registered memory, untouched until polled.
        unsafe {
            b.v.post_srq_recv(&b.srq, 100 + i, b.sge(64 + i as usize * 4, 32))
        }
        .unwrap();
    }
    for i in 0..16u64 {
        a.mem[i as usize] = 1000 + i;
        a.post(i, SendOp::Send, a.sge(i as usize, 8));
    }
    let sent = a.wait(16);
    assert!(sent.iter().enumerate().all(|(i, w)| w.wr_id == i as u64
        && w.status == WcStatus::Success
        && w.opcode == WcOpcode::Send));
    let got = b.wait(16);
    for (i, w) in got.iter().enumerate() {
        assert_eq!(
            (w.wr_id, w.status, w.opcode, w.byte_len),
            (100 + i as u64, WcStatus::Success, WcOpcode::Recv, 8)
        );
        assert_eq!(w.qp_num, b.v.qp_addr(&b.qp).qpn);
        assert_eq!(b.mem[64 + i * 4], 1000 + i as u64);
    }
}

#[test]
fn write_read_and_atomics() {
    let (mut a, b) = pair(ConnectParams::default());
    let rkey = EmuVerbs::rkey(&b.mr);
    a.mem[0] = 0xdead_beef;
    a.write(1, b.addr(10), rkey, 0);
    a.wait(1);
    assert_eq!(b.mem[10], 0xdead_beef);
    a.read(2, b.addr(10), rkey, 5);
    a.wait(1);
    assert_eq!(a.mem[5], 0xdead_beef);
    a.post(
        3,
        SendOp::FetchAdd {
            remote_addr: b.addr(10),
            rkey,
            add: 1,
        },
        a.sge(6, 8),
    );
    a.post(
        4,
        SendOp::CmpSwap {
            remote_addr: b.addr(10),
            rkey,
            compare: 0xdead_bef0,
            swap: 7,
        },
        a.sge(7, 8),
    );
    a.post(
        5,
        SendOp::CmpSwap {
            remote_addr: b.addr(10),
            rkey,
            compare: 1,
            swap: 9,
        },
        a.sge(8, 8),
    );
    let w = a.wait(3);
    assert!(w.iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(
        (a.mem[6], a.mem[7], a.mem[8], b.mem[10]),
        (0xdead_beef, 0xdead_bef0, 7, 7)
    );
    // Unsignaled requests complete silently, in order before a signaled one.
    let wr = SendWr {
        wr_id: 6,
        op: SendOp::Write {
            remote_addr: b.addr(11),
            rkey,
        },
        sge: a.sge(0, 8),
        signaled: false,
        inline: false,
    };
    // SAFETY: registered, alive until the next signaled completion is polled.
    unsafe { a.v.post_send(&a.qp, &wr) }.unwrap();
    a.read(7, b.addr(11), rkey, 9);
    let w = a.wait(1);
    assert_eq!((w[0].wr_id, a.mem[9]), (7, 0xdead_beef));
}

#[test]
fn wrong_keys_ranges_and_rights_are_remote_access_errors() {
    let a = Side::new(256, ALL);
    let b = Side::new(256, Access::LOCAL_WRITE | Access::REMOTE_READ);
    a.v.connect(&a.qp, &b.v.qp_addr(&b.qp), &ConnectParams::default())
        .unwrap();
    let rkey = EmuVerbs::rkey(&b.mr);
    // Readable, but not writable.
    a.read(1, b.addr(0), rkey, 0);
    assert_eq!(a.wait(1)[0].status, WcStatus::Success);
    a.write(2, b.addr(0), rkey, 0);
    a.read(3, b.addr(0), rkey, 0);
    let w = a.wait(2);
    assert_eq!((w[0].wr_id, w[0].status), (2, WcStatus::RemoteAccessError));
    assert_eq!((w[1].wr_id, w[1].status), (3, WcStatus::WrFlushError));
    // The queue pair is in error: later requests flush too.
    a.read(4, b.addr(0), rkey, 0);
    assert_eq!(a.wait(1)[0].status, WcStatus::WrFlushError);

    for (i, (addr, key)) in [
        (b.addr(1023), rkey),
        (b.addr(0), rkey ^ 4),
        (b.addr(0) - 8, rkey),
    ]
    .into_iter()
    .enumerate()
    {
        let c = Side::new(16, ALL);
        c.v.connect(&c.qp, &b.v.qp_addr(&b.qp), &ConnectParams::default())
            .unwrap();
        c.post(
            i as u64,
            SendOp::Read {
                remote_addr: addr,
                rkey: key,
            },
            c.sge(0, 16),
        );
        assert_eq!(c.wait(1)[0].status, WcStatus::RemoteAccessError, "case {i}");
    }
}

#[test]
fn a_local_buffer_outside_its_region_is_a_protection_error() {
    let (a, _b) = pair(ConnectParams::default());
    a.post(1, SendOp::Send, a.sge(1020, 64));
    assert_eq!(a.wait(1)[0].status, WcStatus::LocalProtectionError);
}

#[test]
fn receiver_not_ready_retries_then_fails() {
    // rnr_retry 7: waits until a receive is posted.
    let (a, b) = pair(ConnectParams::default());
    a.post(1, SendOp::Send, a.sge(0, 8));
    std::thread::sleep(Duration::from_millis(30));
    let mut buf = [Wc::EMPTY; 4];
    assert_eq!(
        a.v.poll_cq(&a.cq, &mut buf).unwrap(),
        0,
        "completed without a receive"
    );
    // SAFETY: registered memory of b, untouched until polled.
    unsafe { b.v.post_srq_recv(&b.srq, 9, b.sge(100, 8)) }.unwrap();
    assert_eq!(a.wait(1)[0].status, WcStatus::Success);
    assert_eq!(b.wait(1)[0].wr_id, 9);

    // rnr_retry 2: gives up.
    let (a, _b) = pair(ConnectParams {
        rnr_retry: 2,
        ..ConnectParams::default()
    });
    a.post(1, SendOp::Send, a.sge(0, 8));
    assert_eq!(a.wait(1)[0].status, WcStatus::RnrRetryExceeded);
}

#[test]
fn a_receive_too_short_fails_both_sides() {
    let (a, b) = pair(ConnectParams::default());
    // SAFETY: registered memory of b.
    unsafe { b.v.post_srq_recv(&b.srq, 9, b.sge(100, 4)) }.unwrap();
    a.post(1, SendOp::Send, a.sge(0, 8));
    assert_eq!(a.wait(1)[0].status, WcStatus::RemoteInvalidRequest);
    assert_eq!(b.wait(1)[0].status, WcStatus::LocalLengthError);
}

#[test]
fn a_dropped_peer_fails_outstanding_requests() {
    let (a, b) = pair(ConnectParams::default());
    // A SEND that waits for a receive, then the peer's device goes away.
    a.post(1, SendOp::Send, a.sge(0, 8));
    a.post(2, SendOp::Send, a.sge(0, 8));
    drop(b);
    let w = a.wait(2);
    assert_eq!(w[0].status, WcStatus::RetryExceeded);
    assert_eq!(w[1].status, WcStatus::WrFlushError);

    let (a, b) = pair(ConnectParams::default());
    a.v.inject(Fault::DropQp {
        qpn: a.v.qp_addr(&a.qp).qpn,
    });
    a.read(3, b.addr(0), EmuVerbs::rkey(&b.mr), 0);
    let w = a.wait(1);
    assert!(
        matches!(
            w[0].status,
            WcStatus::RetryExceeded | WcStatus::WrFlushError
        ),
        "{w:?}"
    );
}

#[test]
fn corrupted_rkeys_fault() {
    let (a, b) = pair(ConnectParams::default());
    a.v.inject(Fault::CorruptRkey { count: 1 });
    a.write(1, b.addr(0), EmuVerbs::rkey(&b.mr), 0);
    assert_eq!(a.wait(1)[0].status, WcStatus::RemoteAccessError);
}

#[test]
fn completion_queue_overrun() {
    let a = Side::new(2, ALL);
    let b = Side::new(64, ALL);
    a.v.connect(&a.qp, &b.v.qp_addr(&b.qp), &ConnectParams::default())
        .unwrap();
    for i in 0..3 {
        a.read(i, b.addr(0), EmuVerbs::rkey(&b.mr), 0);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut buf = [Wc::EMPTY; 1];
    loop {
        // Do not take completions: the third one overruns the queue.
        std::thread::sleep(Duration::from_millis(10));
        a.v.wait_cq(&a.cq, Duration::from_millis(10)).unwrap();
        if Instant::now() > deadline {
            panic!("no overrun");
        }
        let full = a.v.poll_cq(&a.cq, &mut []).is_err();
        if full {
            break;
        }
    }
    assert_eq!(a.v.poll_cq(&a.cq, &mut buf), Err(VerbsError::CqOverrun));
}

#[test]
fn full_queues_are_back_pressure() {
    let (a, b) = pair(ConnectParams::default());
    let srq = b.v.create_srq(2).unwrap();
    for i in 0..2 {
        // SAFETY: registered memory of b; never used (the queue is not attached).
        unsafe { b.v.post_srq_recv(&srq, i, b.sge(0, 8)) }.unwrap();
    }
    // SAFETY: as above.
    let r = unsafe { b.v.post_srq_recv(&srq, 3, b.sge(0, 8)) };
    assert_eq!(r, Err(VerbsError::QueueFull));
    // The send queue: 64 SENDs wait for receives, the 65th does not fit.
    for i in 0..64 {
        a.post(i, SendOp::Send, a.sge(0, 8));
    }
    let wr = SendWr {
        wr_id: 64,
        op: SendOp::Send,
        sge: a.sge(0, 8),
        signaled: true,
        inline: false,
    };
    // SAFETY: registered memory of a.
    let r = unsafe { a.v.post_send(&a.qp, &wr) };
    assert_eq!(r, Err(VerbsError::QueueFull));
    let inline = SendWr {
        inline: true,
        sge: Sge {
            len: 65,
            ..a.sge(0, 8)
        },
        ..wr
    };
    // SAFETY: as above.
    let r = unsafe { a.v.post_send(&a.qp, &inline) };
    assert!(matches!(r, Err(VerbsError::Invalid(_))));
    for i in 0..64 {
        // SAFETY: registered memory of b.
        unsafe { b.v.post_srq_recv(&b.srq, i, b.sge(i as usize, 8)) }.unwrap();
    }
    assert_eq!(a.wait(64).len(), 64);
}

#[test]
fn devices_and_selection() {
    let d = EmuVerbs::devices().unwrap();
    assert_eq!(d[0].name, "emu0");
    assert!(matches!(
        EmuVerbs::open(Some("mlx5_0"), 1, 0),
        Err(VerbsError::NoDevice(_))
    ));
    assert!(EmuVerbs::open(None, 2, 0).is_err());
}

/// Waits up to `for_` for completions (fewer than asked is no failure: UD may lose).
fn wait_some(side: &Side, for_: Duration) -> Vec<Wc> {
    let mut got = Vec::new();
    let deadline = Instant::now() + for_;
    let mut buf = [Wc::EMPTY; 8];
    while Instant::now() < deadline {
        let k = side.v.poll_cq(&side.cq, &mut buf).unwrap();
        got.extend_from_slice(&buf[..k]);
        if k == 0 {
            side.v.wait_cq(&side.cq, Duration::from_millis(20)).unwrap();
        }
    }
    got
}

#[test]
fn ud_datagrams_grh_qkey_loss_and_duplication() {
    use gex_conduit_ibv::emu::EmuCounts;
    use gex_conduit_ibv::verbs::{GRH_LEN, UdDest};
    const QKEY: u32 = 0x1234_5678;
    let a = Side::new(256, ALL);
    let b = Side::new(256, ALL);
    let ua = a.v.create_ud_qp(&a.cq, CAPS, 16, QKEY).unwrap();
    let ub = b.v.create_ud_qp(&b.cq, CAPS, 16, QKEY).unwrap();
    let bq = b.v.ud_addr(&ub);
    let ah = a.v.create_ah(&bq, 0).unwrap();
    // b posts 8 receives of 128 bytes at words 512.. (4096 bytes in).
    let post_recvs = |n: u64| {
        for i in 0..n {
            // SAFETY: inside b's registered memory, alive until the test ends.
            unsafe {
                b.v.post_ud_recv(&ub, 100 + i, b.sge(512 + 16 * i as usize, 128))
            }
            .unwrap();
        }
    };
    post_recvs(8);
    let send = |msg: &[u8], qkey: u32| {
        let sge = Sge {
            addr: msg.as_ptr() as u64,
            len: msg.len() as u32,
            lkey: 0,
        };
        let dest = UdDest { qpn: bq.qpn, qkey };
        // SAFETY: inline: read during the call.
        unsafe { a.v.post_ud_send(&ua, &ah, dest, 7, sge, true) }.unwrap();
    };
    // In the simple case a datagram lands after the GRH space.
    send(b"hello", QKEY);
    let wcs = b.wait(1);
    assert_eq!(wcs[0].status, WcStatus::Success);
    assert_eq!(wcs[0].opcode, WcOpcode::Recv);
    assert_eq!(wcs[0].wr_id, 100);
    assert_eq!(wcs[0].qp_num, bq.qpn);
    assert_eq!(wcs[0].byte_len as usize, GRH_LEN + 5);
    // SAFETY: the receive completed; nothing writes it now.
    let got =
        unsafe { std::slice::from_raw_parts((b.addr(512) as usize as *const u8).add(GRH_LEN), 5) };
    assert_eq!(got, b"hello");
    // The sender's completion is a successful SEND, whatever became of the datagram.
    let wa = a.wait(1);
    assert_eq!((wa[0].wr_id, wa[0].status), (7, WcStatus::Success));
    // A wrong Q_Key is dropped.
    send(b"wrong key", QKEY ^ 1);
    assert!(wait_some(&b, Duration::from_millis(200)).is_empty());
    // Loss: the next two datagrams vanish, the third arrives.
    a.v.inject(Fault::LoseDatagrams { count: 2 });
    for m in [&b"lost 1"[..], b"lost 2", b"kept"] {
        send(m, QKEY);
    }
    let wcs = wait_some(&b, Duration::from_millis(300));
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    assert_eq!(wcs[0].byte_len as usize, GRH_LEN + 4);
    // Duplication: one send, two arrivals.
    a.v.inject(Fault::DuplicateDatagrams { count: 1 });
    send(b"twice", QKEY);
    let wcs = wait_some(&b, Duration::from_millis(300));
    assert_eq!(wcs.len(), 2, "{wcs:?}");
    assert!(wcs.iter().all(|w| w.byte_len as usize == GRH_LEN + 5));
    // No receive posted: dropped (4 of 8 receives used so far; use up the rest).
    for _ in 0..4 {
        send(b"fill", QKEY);
    }
    assert_eq!(wait_some(&b, Duration::from_millis(300)).len(), 4);
    send(b"nowhere", QKEY);
    assert!(wait_some(&b, Duration::from_millis(200)).is_empty());
    post_recvs(1);
    send(b"again", QKEY);
    assert_eq!(b.wait(1)[0].byte_len as usize, GRH_LEN + 5);
    // A datagram to a queue pair that does not exist is lost, not an error.
    let nowhere = UdDest {
        qpn: 0xfff0,
        qkey: QKEY,
    };
    let msg = *b"x";
    let sge = Sge {
        addr: msg.as_ptr() as u64,
        len: 1,
        lkey: 0,
    };
    // SAFETY: inline.
    unsafe { a.v.post_ud_send(&ua, &ah, nowhere, 9, sge, true) }.unwrap();
    let c: EmuCounts = a.v.counts();
    assert_eq!((c.rc_qps, c.ud_qps, c.datagrams_lost), (1, 1, 2));
    assert_eq!(c.datagrams, 13);
    assert_eq!(b.v.counts().datagrams, 0);
    drop((ua, ub));
}
