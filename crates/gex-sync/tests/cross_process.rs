//! Rings and doorbells between two processes sharing a `memfd` mapping.
//!
//! The test harness is multi-threaded, so the child is not forked: the test re-executes its
//! own binary with `<test name> --exact`, tells the child its role through
//! `GEXSYNC_TEST_XPROC_ROLE`, and passes the inherited memfd's number in `GEXSYNC_TEST_XPROC_FD`.
//! The memfd has no name in any file system, so nothing is left behind.
//!
//! Phase 1: the parent streams records to the child over ring A; the child checks them and
//! echoes each one, byte-reversed, over ring B; both sides sleep on their doorbell (policy
//! `Block`) whenever they cannot make progress.
//! Phase 2: the child sleeps on its doorbell while the parent waits 20 ms, then publishes a
//! record carrying a `CLOCK_MONOTONIC` time stamp and rings. The child replies with its wake
//! latency. If cross-process wake-ups did not work, every latency would be about 80 ms (the
//! remainder of the 100 ms safety-net nap); the test requires the best of five rounds to be
//! under 50 ms.
#![cfg(not(gex_loom))]
// `unsafe` is needed to map the shared memory and to attach ring endpoints to it.
#![allow(unsafe_code)]

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use gex_sync::ring::{self, Consumer, Producer, RingCtl};
use gex_sync::wait::{Doorbell, WaitPolicy};
use rustix::fs::{MemfdFlags, ftruncate, memfd_create};
use rustix::mm::{MapFlags, ProtFlags, mmap, munmap};
use rustix::time::{ClockId, clock_gettime};

const CAP: usize = 4096;
const RECORDS: u64 = 50_000;
const WAKE_ROUNDS: u64 = 5;
const STOP: u32 = u32::MAX;
const TIMESTAMP: u32 = u32::MAX - 1;
const ROLE_ENV: &str = "GEXSYNC_TEST_XPROC_ROLE";
const FD_ENV: &str = "GEXSYNC_TEST_XPROC_FD";
const TEST_NAME: &str = "cross_process_rings_and_doorbells";

/// The shared region. `#[repr(C)]` so both processes agree on the layout.
#[repr(C)]
struct Shared {
    a_ctl: RingCtl,
    a_data: Data,
    b_ctl: RingCtl,
    b_data: Data,
    /// The child waits on this one.
    child_bell: Doorbell,
    /// The parent waits on this one.
    parent_bell: Doorbell,
}

#[repr(C, align(64))]
struct Data([u8; CAP]);

struct Mapping {
    ptr: *mut Shared,
    len: usize,
}

impl Mapping {
    fn new(fd: BorrowedFd<'_>) -> Mapping {
        let len = std::mem::size_of::<Shared>().next_multiple_of(4096);
        // SAFETY: a fresh shared mapping of `len` bytes of the memfd; nothing else in this
        // process refers to that address range.
        let ptr = unsafe {
            mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                0,
            )
        }
        .expect("mmap");
        Mapping {
            ptr: ptr.cast(),
            len,
        }
    }

    fn shared(&self) -> &Shared {
        // SAFETY: the mapping is page-aligned, large enough, initialised by the parent before
        // the child starts, and lives as long as `self`.
        unsafe { &*self.ptr }
    }

    /// Ring A: parent produces, child consumes.
    fn ring_a(&self) -> (*const RingCtl, *mut u8) {
        // SAFETY: in-bounds field projections of the mapping.
        unsafe {
            (
                &raw const (*self.ptr).a_ctl,
                (&raw mut (*self.ptr).a_data).cast::<u8>(),
            )
        }
    }

    /// Ring B: child produces, parent consumes.
    fn ring_b(&self) -> (*const RingCtl, *mut u8) {
        // SAFETY: in-bounds field projections of the mapping.
        unsafe {
            (
                &raw const (*self.ptr).b_ctl,
                (&raw mut (*self.ptr).b_data).cast::<u8>(),
            )
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping; no references into it outlive `self`.
        unsafe { munmap(self.ptr.cast(), self.len) }.expect("munmap");
    }
}

fn now_ns() -> u64 {
    let t = clock_gettime(ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn pattern(seq: u64, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len)
        .map(|i| (seq as u8) ^ (i as u8).wrapping_mul(3))
        .collect();
    let n = len.min(8);
    v[..n].copy_from_slice(&seq.to_le_bytes()[..n]);
    v
}

fn len_of(seq: u64) -> usize {
    if seq % 4 == 0 {
        (seq as usize * 31) % (ring::max_body(CAP) + 1)
    } else {
        (seq as usize * 7) % 64
    }
}

const POLICY: WaitPolicy = WaitPolicy::Block;
const PATIENCE: Duration = Duration::from_secs(60);

#[test]
fn cross_process_rings_and_doorbells() {
    if std::env::var(ROLE_ENV).as_deref() == Ok("child") {
        child();
        return;
    }

    // No MFD_CLOEXEC: the child inherits the descriptor.
    let fd = memfd_create("gex-sync-xproc-test", MemfdFlags::empty()).expect("memfd_create");
    let len = std::mem::size_of::<Shared>().next_multiple_of(4096);
    ftruncate(&fd, len as u64).expect("ftruncate");
    let map = Mapping::new(fd.as_fd());
    // SAFETY: the mapping is fresh, zero-filled and aligned; nobody uses it yet.
    unsafe {
        RingCtl::init_in_place(&raw mut (*map.ptr).a_ctl);
        RingCtl::init_in_place(&raw mut (*map.ptr).b_ctl);
        Doorbell::init_in_place(&raw mut (*map.ptr).child_bell);
        Doorbell::init_in_place(&raw mut (*map.ptr).parent_bell);
    }
    // Both waiters may sleep; declared before anyone rings.
    map.shared().child_bell.set_may_block(true);
    map.shared().parent_bell.set_may_block(true);

    let mut child = Command::new(std::env::current_exe().expect("current_exe"))
        .args([TEST_NAME, "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE_ENV, "child")
        .env(FD_ENV, fd.as_raw_fd().to_string())
        .spawn()
        .expect("spawn child");

    let result =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| parent(&map, &mut child)));
    if result.is_err() {
        let _ = child.kill();
    }
    let status = wait_child(&mut child);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    assert!(status.success(), "child failed: {status}");
}

fn wait_child(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("child did not exit");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The producer of ring `tx` and the consumer of ring `rx` (each a `(ctl, data)` of
/// [`Mapping::ring_a`]/[`Mapping::ring_b`]).
///
/// # Safety
/// Both rings are initialised and outlive the endpoints; the caller's process is the
/// only producer of `tx` and the only consumer of `rx`.
unsafe fn ends(
    tx: (*const RingCtl, *mut u8),
    rx: (*const RingCtl, *mut u8),
) -> (Producer, Consumer) {
    // SAFETY: the caller's promise.
    unsafe {
        (
            Producer::new(tx.0, tx.1, CAP),
            Consumer::new(rx.0, rx.1, CAP),
        )
    }
}

fn parent(map: &Mapping, child: &mut Child) {
    let sh = map.shared();
    // SAFETY: initialised rings in the mapping, which outlives the endpoints; the parent is
    // the only producer of A and the only consumer of B.
    let (mut tx, mut rx) = unsafe { ends(map.ring_a(), map.ring_b()) };

    // Phase 1: stream, echo, verify.
    let start = Instant::now();
    let (mut sent, mut echoed) = (0u64, 0u64);
    while echoed < RECORDS {
        let mut progress = false;
        while sent < RECORDS && tx.push(sent as u32, &[&pattern(sent, len_of(sent))]) {
            sent += 1;
            progress = true;
        }
        if progress {
            sh.child_bell.ring();
        }
        while let Some((user, body)) = rx.peek() {
            assert_eq!(user, echoed as u32, "echo order");
            let mut want = pattern(echoed, len_of(echoed));
            want.reverse();
            assert_eq!(body, &want[..], "echo of record {echoed}");
            rx.pop();
            echoed += 1;
            progress = true;
        }
        // The child may be waiting for room in ring B.
        sh.child_bell.ring();
        if !progress {
            // Data in B, or room in A for the next record. The child's echo of a record
            // does not mean room in A: a consumer publishes the space it freed in
            // batches (a quarter of the ring, or when it finds the ring empty), so the
            // child may echo the last record of a full ring before the parent can see
            // the room. Waiting for B alone then deadlocked, about one run in ten: the
            // parent asleep for B, the child asleep for A. The child rings this bell when
            // it finds A empty (and so publishes its head) before it sleeps.
            let ok = sh.parent_bell.wait_until_timeout(POLICY, PATIENCE, || {
                rx.has_data() || (sent < RECORDS && tx.reserve(len_of(sent)).is_some())
            });
            assert!(ok, "parent starved: sent {sent}, echoed {echoed}");
            assert!(child.try_wait().unwrap().is_none(), "child exited early");
        }
    }

    // About a second normally; lost cross-process wake-ups turn every blocking wait into a
    // 100 ms safety-net nap, which takes this phase to many minutes.
    let took = start.elapsed();
    eprintln!("phase 1: {RECORDS} records echoed in {took:?}");
    assert!(
        took < PATIENCE,
        "phase 1 took {took:?}: wake-ups are being lost"
    );

    // Phase 2: wake-up latency across processes. The parent spins for the reply, so the
    // child starts its nap right after replying; the parent then waits 20 ms and rings. A
    // lost wake-up would show as ~80 ms (the rest of the child's 100 ms nap).
    let mut latencies = Vec::new();
    for _ in 0..WAKE_ROUNDS {
        std::thread::sleep(Duration::from_millis(20));
        assert!(tx.push(TIMESTAMP, &[&now_ns().to_le_bytes()]));
        sh.child_bell.ring();
        let ok = sh
            .parent_bell
            .wait_until_timeout(WaitPolicy::Spin, PATIENCE, || rx.has_data());
        assert!(ok, "no latency reply");
        let (user, body) = rx.peek().unwrap();
        assert_eq!(user, TIMESTAMP);
        latencies.push(Duration::from_nanos(u64::from_le_bytes(
            body.try_into().unwrap(),
        )));
        rx.pop();
    }
    assert!(tx.push(STOP, &[]));
    sh.child_bell.ring();
    let best = *latencies.iter().min().unwrap();
    eprintln!("cross-process wake latencies: {latencies:?}");
    assert!(
        best < Duration::from_millis(50),
        "no wake-up beat the safety net: {latencies:?}"
    );
}

fn child() {
    let fd: RawFd = std::env::var(FD_ENV)
        .expect("fd env")
        .parse()
        .expect("fd number");
    // SAFETY: the parent passed us this inherited, open memfd; we never close it.
    let fd = unsafe { BorrowedFd::borrow_raw(fd) };
    let map = Mapping::new(fd);
    let sh = map.shared();
    // SAFETY: rings initialised by the parent in the mapping, which outlives the endpoints;
    // the child is the only consumer of A and the only producer of B.
    let (mut tx, mut rx) = unsafe { ends(map.ring_b(), map.ring_a()) };

    let mut seq = 0u64;
    loop {
        if !rx.has_data() {
            // Ring A is empty and its head published (by `has_data`): the parent may be
            // waiting for that room (see the parent's wait).
            sh.parent_bell.ring();
        }
        let ok = sh
            .child_bell
            .wait_until_timeout(POLICY, PATIENCE, || rx.has_data());
        assert!(ok, "child starved at {seq}");
        let woke = now_ns();
        let (user, body) = rx.peek().unwrap();
        let reply: Vec<u8> = match user {
            STOP => return,
            TIMESTAMP => {
                let sent = u64::from_le_bytes(body.try_into().unwrap());
                woke.saturating_sub(sent).to_le_bytes().to_vec()
            }
            _ => {
                assert_eq!(user, seq as u32, "order");
                assert_eq!(body, &pattern(seq, len_of(seq))[..], "record {seq}");
                seq += 1;
                body.iter().rev().copied().collect()
            }
        };
        rx.pop();
        while !tx.push(user, &[&reply]) {
            let ok = sh
                .child_bell
                .wait_until_timeout(POLICY, PATIENCE, || tx.is_empty());
            assert!(ok, "parent stopped draining");
        }
        sh.parent_bell.ring();
    }
}
