//! A software RC verbs provider: [`EmuVerbs`], the emulation the conduit's tests run on
//! (`GEX_IBV_PROVIDER=emu`), across the processes of a job.
//!
//! # Model
//! - **Devices** are identified by a 16-byte GID (process id, a counter, a nonce). Each
//!   device listens on a Unix stream socket in Linux's *abstract* namespace, named after
//!   its GID: nothing appears in the file system, so nothing is left behind, not even
//!   after `kill -9` (why sockets rather than a shared file in /dev/shm: an RDMA NIC
//!   works without the target's CPU, and a thread per connection reading a socket does
//!   the same here, with the kernel ordering bytes and reporting a peer's death as
//!   end-of-stream, which is what an RC transport's retry exhaustion reports).
//! - **Queue pairs**: [`Verbs::connect`] opens one stream from the queue pair to the
//!   peer's device and names the peer's queue pair; requests (SEND, WRITE, READ,
//!   atomics) go over it in posting order, and the peer's device answers each in order
//!   (acknowledgement, read data, atomic result, or a negative acknowledgement). So
//!   delivery is in order and completions are in posting order, as on an RC queue pair.
//! - **Target side**: a thread of the peer's device per connection executes requests
//!   against its memory regions, checking the remote key, the range and the access
//!   rights (a violation answers *remote access error*; the initiator's work request
//!   completes with [`WcStatus::RemoteAccessError`] and its queue pair enters the error
//!   state, flushing the rest). A SEND takes a receive from the queue pair's shared
//!   receive queue; with none posted it waits (*receiver not ready*) and retries every
//!   [`RNR_TIMER`], up to the queue pair's `rnr_retry` times (7: forever), then answers
//!   RNR exhaustion ([`WcStatus::RnrRetryExceeded`]).
//! - **Initiator side**: a thread per connection reads the answers, writes READ data and
//!   atomic results into the local buffer (checking its local key) and queues
//!   completions. End of stream (the peer's process or device is gone) completes every
//!   outstanding request with [`WcStatus::RetryExceeded`] and puts the queue pair in
//!   error.
//! - **Completion queues** hold at most their depth: one more completion is an overrun,
//!   after which [`Verbs::poll_cq`] answers [`VerbsError::CqOverrun`].
//! - **Memory**: regions are (address, length, rights) under a key (lkey = rkey);
//!   the emulated NIC reads and writes them with gex-sync's atomic copies (aligned
//!   8-byte words whole), and atomics are gex-sync word operations, so the owner's
//!   concurrent accesses are not data races.
//! - **Unreliable datagrams**: a UD queue pair binds a Unix *datagram* socket in the
//!   abstract namespace, named after its device's GID and its number; a UD SEND is one
//!   datagram (Q_Key, source QPN, payload) to the socket its address handle and QPN
//!   name, completed at once (as a NIC completes a UD send when it leaves: nothing
//!   tells the sender whether it arrived). A thread per UD queue pair receives: a
//!   datagram with a wrong Q_Key, or that finds no receive posted, is dropped; one
//!   taken lands after the 40-byte GRH space ([`GRH_LEN`]), as on a real port.
//! - **Fault injection** ([`EmuVerbs::inject`]): drop the connection of a queue pair
//!   (a dead peer), corrupt the remote keys of the next RDMA requests, lose or
//!   duplicate the next datagrams a device sends, and small completion queues for
//!   overruns.
//! - **Counters** ([`EmuVerbs::counts`]): queue pairs created and memory regions
//!   registered, for tests that check what the conduit made.
#![allow(unsafe_code)]

use crate::verbs::{
    Access, ConnectParams, DeviceInfo, GRH_LEN, LinkLayer, PortInfo, QpAddr, QpCaps, SendOp,
    SendWr, Sge, UdDest, Verbs, VerbsError, Wc, WcOpcode, WcStatus,
};
use gex_sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram, UnixListener, UnixStream};
use std::sync::{Arc, Condvar, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

/// How long a SEND that finds no receive waits before its next retry (one RNR retry).
pub const RNR_TIMER: Duration = Duration::from_millis(2);
/// Largest payload of one emulated request.
pub const MAX_MSG: u32 = 1 << 30;
/// The emulated device's name.
pub const DEVICE_NAME: &str = "emu0";

static DEVICE_COUNTER: AtomicU32 = AtomicU32::new(0);

/// A fault to inject into an emulated device ([`EmuVerbs::inject`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// Sever the connection of the local queue pair `qpn`, as if the peer died:
    /// its outstanding and later requests fail.
    DropQp {
        /// The local queue pair.
        qpn: u32,
    },
    /// Flip a bit of the remote key of the next `count` RDMA and atomic requests.
    CorruptRkey {
        /// How many requests.
        count: u32,
    },
    /// Sever every connection of the device, as if the network to every peer died.
    DropAll,
    /// Lose the next `count` datagrams the device's UD queue pairs send (`u32::MAX`:
    /// every one from now on): their sends complete, nothing arrives.
    LoseDatagrams {
        /// How many.
        count: u32,
    },
    /// Deliver each of the next `count` datagrams the device sends twice.
    DuplicateDatagrams {
        /// How many.
        count: u32,
    },
}

/// What an emulated device made so far ([`EmuVerbs::counts`], [`FaultHandle::counts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EmuCounts {
    /// RC queue pairs created.
    pub rc_qps: u64,
    /// UD queue pairs created.
    pub ud_qps: u64,
    /// Memory regions registered (`reg_mr` calls that succeeded).
    pub reg_mrs: u64,
    /// Memory regions registered now (not yet deregistered).
    pub live_mrs: u64,
    /// Datagrams sent (each one counted once, lost or duplicated ones included).
    pub datagrams: u64,
    /// Datagrams lost by the fault [`Fault::LoseDatagrams`].
    pub datagrams_lost: u64,
}

/// A handle to inject faults into an emulated device from elsewhere (the conduit's
/// [`Ibv::emu_inject`](crate::Ibv::emu_inject)); does nothing once the device is gone.
#[derive(Clone)]
pub struct FaultHandle(Weak<Dev>);

impl std::fmt::Debug for FaultHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FaultHandle")
    }
}

impl FaultHandle {
    /// Injects `fault`; false if the device is gone.
    pub fn inject(&self, fault: Fault) -> bool {
        match self.0.upgrade() {
            Some(d) => {
                d.inject(fault);
                true
            }
            None => false,
        }
    }

    /// What the device made so far; `None` once it is gone.
    pub fn counts(&self) -> Option<EmuCounts> {
        self.0.upgrade().map(|d| d.counts())
    }
}

#[derive(Clone, Copy)]
struct MrEntry {
    addr: usize,
    len: usize,
    access: Access,
}

/// The shared state of one emulated device.
struct Dev {
    gid: [u8; 16],
    port: PortInfo,
    mrs: RwLock<HashMap<u32, MrEntry>>,
    next_key: AtomicU32,
    qps: Mutex<HashMap<u32, Arc<QpInner>>>,
    next_qpn: AtomicU32,
    corrupt_rkeys: AtomicU32,
    closing: AtomicBool,
    /// Every stream of the device (both sides), shut down when it closes.
    streams: Mutex<Vec<UnixStream>>,
    lose_datagrams: AtomicU32,
    duplicate_datagrams: AtomicU32,
    rc_qps: AtomicU64,
    ud_qps: AtomicU64,
    reg_mrs: AtomicU64,
    datagrams: AtomicU64,
    datagrams_lost: AtomicU64,
}

impl Dev {
    /// Checks `[addr, addr+len)` against region `key` with `need`; runs `f` on the
    /// address under the table's read lock (a region cannot be deregistered meanwhile).
    fn with_region<R>(
        &self,
        key: u32,
        addr: u64,
        len: usize,
        need: Access,
        f: impl FnOnce(*mut u8) -> R,
    ) -> Option<R> {
        let mrs = self.mrs.read().unwrap_or_else(|e| e.into_inner());
        let e = mrs.get(&key)?;
        let addr = usize::try_from(addr).ok()?;
        let end = addr.checked_add(len)?;
        if addr < e.addr || end > e.addr + e.len || !e.access.contains(need) {
            return None;
        }
        Some(f(addr as *mut u8))
    }
}

fn socket_name(gid: &[u8; 16]) -> Vec<u8> {
    let mut name = b"gex-ibv-emu-".to_vec();
    for b in gid {
        name.extend_from_slice(format!("{b:02x}").as_bytes());
    }
    name
}

/// The abstract name of UD queue pair `qpn` of the device `gid`.
fn ud_socket_name(gid: &[u8; 16], qpn: u32) -> Vec<u8> {
    let mut name = socket_name(gid);
    name.extend_from_slice(format!("-ud-{qpn:06x}").as_bytes());
    name
}

struct CqState {
    entries: VecDeque<Wc>,
    depth: usize,
    overrun: bool,
}

/// An emulated completion queue.
pub struct EmuCq {
    inner: Arc<CqInner>,
}

struct CqInner {
    state: Mutex<CqState>,
    cv: Condvar,
}

impl CqInner {
    fn push(&self, wc: Wc) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.entries.len() >= s.depth {
            s.overrun = true;
        } else {
            s.entries.push_back(wc);
        }
        drop(s);
        self.cv.notify_all();
    }
}

impl std::fmt::Debug for EmuCq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EmuCq")
    }
}

struct Recv {
    wr_id: u64,
    sge: Sge,
}

struct SrqInner {
    q: Mutex<VecDeque<Recv>>,
    depth: usize,
    cv: Condvar,
}

/// An emulated shared receive queue.
pub struct EmuSrq {
    inner: Arc<SrqInner>,
}

impl std::fmt::Debug for EmuSrq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EmuSrq")
    }
}

/// What an outstanding request needs at its answer.
#[derive(Clone, Copy)]
struct Outstanding {
    wr_id: u64,
    opcode: WcOpcode,
    signaled: bool,
    sge: Sge,
}

struct Conn {
    stream: UnixStream,
}

struct QpInner {
    qpn: u32,
    cq: Arc<CqInner>,
    srq: Arc<SrqInner>,
    max_send_wr: usize,
    max_inline: u32,
    rnr_retry: AtomicU32,
    /// Error state (requests flush).
    error: AtomicBool,
    /// The status the next posted request completes with when the queue pair failed
    /// with nothing outstanding (a connection lost while idle: the next request finds
    /// out, as a NIC's retries would), as `status_code`; 0 for none.
    pending_error: AtomicU32,
    /// The outbound connection (after `connect`), written under this lock.
    conn: Mutex<Option<Conn>>,
    /// Requests sent, in order, awaiting their answer.
    outstanding: Mutex<VecDeque<Outstanding>>,
}

impl QpInner {
    /// Error state: every outstanding request completes with `first` (the oldest) and
    /// flush errors.
    fn fail(&self, first: WcStatus) {
        self.error.store(true, Ordering::Release);
        let mut out = self.outstanding.lock().unwrap_or_else(|e| e.into_inner());
        if out.is_empty() {
            self.pending_error
                .store(status_code(first), Ordering::Release);
        }
        let mut status = first;
        while let Some(o) = out.pop_front() {
            self.cq.push(Wc {
                wr_id: o.wr_id,
                status,
                opcode: o.opcode,
                byte_len: 0,
                qp_num: self.qpn,
            });
            status = WcStatus::WrFlushError;
        }
    }
}

/// An emulated RC queue pair.
pub struct EmuQp {
    inner: Arc<QpInner>,
    dev: Arc<Dev>,
}

impl std::fmt::Debug for EmuQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EmuQp({})", self.inner.qpn)
    }
}

impl Drop for EmuQp {
    fn drop(&mut self) {
        self.dev
            .qps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.inner.qpn);
        if let Some(c) = self
            .inner
            .conn
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            let _ = c.stream.shutdown(std::net::Shutdown::Both);
        }
    }
}

struct UdInner {
    qpn: u32,
    qkey: u32,
    cq: Arc<CqInner>,
    /// Receives posted, in order.
    rq: Mutex<VecDeque<Recv>>,
    depth: usize,
    max_inline: u32,
    /// Bound to the queue pair's abstract name; sends go out of it too.
    sock: UnixDatagram,
}

/// An emulated UD queue pair: a datagram socket and a thread receiving from it.
pub struct EmuUdQp {
    inner: Arc<UdInner>,
    /// The device outlives its queue pairs.
    _dev: Arc<Dev>,
}

impl std::fmt::Debug for EmuUdQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EmuUdQp({})", self.inner.qpn)
    }
}

/// An emulated address handle: the remote device's GID.
#[derive(Debug)]
pub struct EmuAh {
    gid: [u8; 16],
}

/// Datagram header: Q_Key, source QPN.
const DGRAM_HDR: usize = 8;
/// How often a UD receiving thread looks whether its queue pair is gone.
const UD_WAKE: Duration = Duration::from_millis(50);

/// The receiving side of a UD queue pair: places datagrams into posted receives.
fn ud_receive(dev: Weak<Dev>, qp: Weak<UdInner>, sock: UnixDatagram) {
    let mut buf = vec![0u8; DGRAM_HDR + MAX_DGRAM];
    loop {
        let got = sock.recv(&mut buf);
        let (Some(d), Some(q)) = (dev.upgrade(), qp.upgrade()) else {
            return;
        };
        if d.closing.load(Ordering::Acquire) {
            return;
        }
        let n = match got {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                continue;
            }
            Err(_) => return,
        };
        if n < DGRAM_HDR || u32_at(&buf, 0) != Some(q.qkey) {
            continue; // not for this queue key: dropped, as a port does
        }
        let data = &buf[DGRAM_HDR..n];
        let Some(r) = q.rq.lock().unwrap_or_else(|e| e.into_inner()).pop_front() else {
            continue; // no receive posted: a UD datagram is dropped
        };
        let len = GRH_LEN + data.len();
        let status = if len > r.sge.len as usize {
            WcStatus::LocalLengthError
        } else {
            let mut grh = [0u8; GRH_LEN];
            // Byte 0: IP version 6, as a real GRH; bytes 8..24: the source GID
            // (unknown here, left zero).
            grh[0] = 0x60;
            let wrote = d.with_region(r.sge.lkey, r.sge.addr, len, Access::LOCAL_WRITE, |p| {
                // SAFETY: inside a registered region (checked for `len` bytes), under
                // the table's read lock.
                unsafe {
                    nic_write(p, &grh);
                    nic_write(p.add(GRH_LEN), data);
                }
            });
            if wrote.is_some() {
                WcStatus::Success
            } else {
                WcStatus::LocalProtectionError
            }
        };
        q.cq.push(Wc {
            wr_id: r.wr_id,
            status,
            opcode: WcOpcode::Recv,
            byte_len: len as u32,
            qp_num: q.qpn,
        });
    }
}

/// Largest emulated datagram payload (a port's MTU).
pub const MAX_DGRAM: usize = 4096;

/// An emulated memory region; deregistered when dropped.
pub struct EmuMr {
    key: u32,
    dev: Arc<Dev>,
}

impl std::fmt::Debug for EmuMr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EmuMr({})", self.key)
    }
}

impl Drop for EmuMr {
    fn drop(&mut self) {
        // The write lock waits for every access in progress.
        self.dev
            .mrs
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.key);
    }
}

/// The emulated device (see the [module documentation](self)).
pub struct EmuVerbs {
    dev: Arc<Dev>,
}

impl std::fmt::Debug for EmuVerbs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmuVerbs")
            .field("gid", &self.dev.gid)
            .finish()
    }
}

impl Drop for EmuVerbs {
    fn drop(&mut self) {
        self.dev.closing.store(true, Ordering::Release);
        for s in self
            .dev
            .streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        // Wake the accepting thread, which then sees `closing` and ends.
        if let Ok(addr) = SocketAddr::from_abstract_name(socket_name(&self.dev.gid)) {
            let _ = UnixStream::connect_addr(&addr);
        }
    }
}

// Wire: [len u32][kind u8][body]. Requests: HELLO qpn; SEND data; WRITE addr rkey data;
// READ addr rkey len; FADD addr rkey add; CSWAP addr rkey compare swap.
// Answers: ACK; NAK status; DATA bytes; OLD value.
const HELLO: u8 = 1;
const SEND: u8 = 2;
const WRITE: u8 = 3;
const READ: u8 = 4;
const FADD: u8 = 5;
const CSWAP: u8 = 6;
const ACK: u8 = 10;
const NAK: u8 = 11;
const DATA: u8 = 12;
const OLD: u8 = 13;

fn frame(kind: u8, body: &[&[u8]]) -> Vec<u8> {
    let len: usize = 1 + body.iter().map(|b| b.len()).sum::<usize>();
    let mut v = Vec::with_capacity(4 + len);
    v.extend_from_slice(&(len as u32).to_le_bytes());
    v.push(kind);
    for b in body {
        v.extend_from_slice(b);
    }
    v
}

fn read_frame(s: &mut UnixStream) -> Option<(u8, Vec<u8>)> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).ok()?;
    let len = u32::from_le_bytes(len) as usize;
    if len == 0 || len > MAX_MSG as usize + 64 {
        return None;
    }
    let mut buf = vec![0u8; len];
    s.read_exact(&mut buf).ok()?;
    let kind = buf[0];
    buf.remove(0);
    Some((kind, buf))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn status_code(s: WcStatus) -> u32 {
    match s {
        WcStatus::RemoteAccessError => 1,
        WcStatus::RemoteInvalidRequest => 2,
        WcStatus::RnrRetryExceeded => 3,
        _ => 4,
    }
}
fn code_status(c: u32) -> WcStatus {
    match c {
        1 => WcStatus::RemoteAccessError,
        2 => WcStatus::RemoteInvalidRequest,
        3 => WcStatus::RnrRetryExceeded,
        _ => WcStatus::RetryExceeded,
    }
}

/// Writes `data` at `dst` as the emulated NIC does: an aligned 8-byte word whole.
///
/// # Safety
/// `dst..dst+data.len()` must be valid for writes (a registered region, under the
/// region table's read lock).
unsafe fn nic_write(dst: *mut u8, data: &[u8]) {
    if data.len() == 8 && (dst as usize) % 8 == 0 {
        let v = u64::from_ne_bytes(data.try_into().expect("8 bytes"));
        // SAFETY: aligned and valid for 8 bytes (caller); others access it through
        // gex-sync's words and copies.
        unsafe { gex_sync::word::store64(dst, v, Ordering::Release) };
    } else {
        // SAFETY: valid for writes of data.len() bytes (caller).
        unsafe { gex_sync::copy::atomic_write(dst, data) };
    }
}

/// Reads `len` bytes at `src` as the emulated NIC does.
///
/// # Safety
/// `src..src+len` must be valid for reads (a registered region, under the table's lock).
unsafe fn nic_read(src: *const u8, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    if len == 8 && (src as usize) % 8 == 0 {
        // SAFETY: aligned and valid for 8 bytes (caller).
        let v = unsafe { gex_sync::word::load64(src, Ordering::Acquire) };
        out.copy_from_slice(&v.to_ne_bytes());
    } else {
        // SAFETY: valid for reads of len bytes (caller).
        unsafe { gex_sync::copy::atomic_read(src, &mut out) };
    }
    out
}

/// The target side of one connection: executes requests for queue pair `qpn`.
fn serve(dev: Weak<Dev>, mut s: UnixStream) {
    let Some((HELLO, body)) = read_frame(&mut s) else {
        return;
    };
    let Some(qpn) = u32_at(&body, 0) else { return };
    let qp = match dev.upgrade() {
        Some(d) => d
            .qps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&qpn)
            .cloned(),
        None => return,
    };
    let Some(qp) = qp else {
        let _ = s.write_all(&frame(
            NAK,
            &[&status_code(WcStatus::RetryExceeded).to_le_bytes()],
        ));
        return;
    };
    while let Some((kind, body)) = read_frame(&mut s) {
        let Some(d) = dev.upgrade() else { return };
        if d.closing.load(Ordering::Acquire) {
            return;
        }
        let answer = execute(&d, &qp, kind, &body);
        drop(d);
        let answer = match answer {
            Ok(a) => a,
            Err(st) => frame(NAK, &[&status_code(st).to_le_bytes()]),
        };
        if s.write_all(&answer).is_err() {
            return;
        }
    }
}

fn execute(d: &Dev, qp: &QpInner, kind: u8, b: &[u8]) -> Result<Vec<u8>, WcStatus> {
    let bad = WcStatus::RemoteInvalidRequest;
    let acc = WcStatus::RemoteAccessError;
    match kind {
        SEND => {
            let recv = take_recv(d, qp)?;
            let len = b.len();
            let done = if len > recv.sge.len as usize {
                None
            } else {
                d.with_region(
                    recv.sge.lkey,
                    recv.sge.addr,
                    len,
                    Access::LOCAL_WRITE,
                    |p| {
                        // SAFETY: inside a registered region, under the table's read lock.
                        unsafe { nic_write(p, b) }
                    },
                )
            };
            let (status, rc) = match done {
                Some(()) => (WcStatus::Success, Ok(frame(ACK, &[]))),
                None if len > recv.sge.len as usize => (WcStatus::LocalLengthError, Err(bad)),
                None => (WcStatus::LocalProtectionError, Err(bad)),
            };
            qp.cq.push(Wc {
                wr_id: recv.wr_id,
                status,
                opcode: WcOpcode::Recv,
                byte_len: len as u32,
                qp_num: qp.qpn,
            });
            rc
        }
        WRITE => {
            let addr = u64_at(b, 0).ok_or(bad)?;
            let rkey = u32_at(b, 8).ok_or(bad)?;
            let data = &b[12..];
            d.with_region(rkey, addr, data.len(), Access::REMOTE_WRITE, |p| {
                // SAFETY: inside a registered region, under the table's read lock.
                unsafe { nic_write(p, data) }
            })
            .ok_or(acc)?;
            Ok(frame(ACK, &[]))
        }
        READ => {
            let addr = u64_at(b, 0).ok_or(bad)?;
            let rkey = u32_at(b, 8).ok_or(bad)?;
            let len = u32_at(b, 12).ok_or(bad)? as usize;
            let data = d
                .with_region(rkey, addr, len, Access::REMOTE_READ, |p| {
                    // SAFETY: inside a registered region, under the table's read lock.
                    unsafe { nic_read(p, len) }
                })
                .ok_or(acc)?;
            Ok(frame(DATA, &[&data]))
        }
        FADD | CSWAP => {
            let addr = u64_at(b, 0).ok_or(bad)?;
            let rkey = u32_at(b, 8).ok_or(bad)?;
            let a = u64_at(b, 12).ok_or(bad)?;
            let c = u64_at(b, 20).ok_or(bad)?;
            if addr % 8 != 0 {
                return Err(bad);
            }
            let old = d
                .with_region(rkey, addr, 8, Access::REMOTE_ATOMIC, |p| {
                    // SAFETY: aligned, inside a registered region, under the read lock;
                    // gex-sync's word operations are atomic against each other and
                    // never a mixed-size race with copies of the same bytes.
                    unsafe {
                        if kind == FADD {
                            gex_sync::word::fetch_add64(p, a)
                        } else {
                            gex_sync::word::cas64(p, a, c)
                        }
                    }
                })
                .ok_or(acc)?;
            Ok(frame(OLD, &[&old.to_le_bytes()]))
        }
        _ => Err(bad),
    }
}

/// Takes a receive from the queue pair's SRQ, waiting (RNR retries) while none is there.
fn take_recv(d: &Dev, qp: &QpInner) -> Result<Recv, WcStatus> {
    let mut q = qp.srq.q.lock().unwrap_or_else(|e| e.into_inner());
    let mut tries = 0u32;
    loop {
        if let Some(r) = q.pop_front() {
            return Ok(r);
        }
        let limit = qp.rnr_retry.load(Ordering::Relaxed);
        if (limit < 7 && tries >= limit) || d.closing.load(Ordering::Acquire) {
            return Err(WcStatus::RnrRetryExceeded);
        }
        tries = tries.saturating_add(1);
        q = qp
            .srq
            .cv
            .wait_timeout(q, RNR_TIMER)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

/// The initiator side of one connection: reads answers in order and completes requests.
fn answers(dev: Weak<Dev>, qp: Weak<QpInner>, mut s: UnixStream) {
    loop {
        let f = read_frame(&mut s);
        let Some(qp) = qp.upgrade() else { return };
        let Some((kind, body)) = f else {
            qp.fail(WcStatus::RetryExceeded);
            return;
        };
        let Some(o) = qp
            .outstanding
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front()
        else {
            // An answer to nothing: a broken peer.
            qp.fail(WcStatus::RetryExceeded);
            return;
        };
        let mut status = WcStatus::Success;
        match kind {
            ACK => {}
            NAK => status = code_status(u32_at(&body, 0).unwrap_or(0)),
            DATA | OLD => {
                let wrote = dev.upgrade().and_then(|d| {
                    let n = body.len().min(o.sge.len as usize);
                    d.with_region(o.sge.lkey, o.sge.addr, n, Access::LOCAL_WRITE, |p| {
                        // SAFETY: inside a registered region, under the read lock.
                        unsafe { nic_write(p, &body[..n]) }
                    })
                });
                if wrote.is_none() {
                    status = WcStatus::LocalProtectionError;
                }
            }
            _ => status = WcStatus::RetryExceeded,
        }
        if status != WcStatus::Success {
            // Put it back first so that `fail` completes it with its status.
            qp.outstanding
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push_front(o);
            qp.fail(status);
            if let Some(c) = qp.conn.lock().unwrap_or_else(|e| e.into_inner()).take() {
                let _ = c.stream.shutdown(std::net::Shutdown::Both);
            }
            return;
        }
        if o.signaled {
            qp.cq.push(Wc {
                wr_id: o.wr_id,
                status,
                opcode: o.opcode,
                byte_len: o.sge.len,
                qp_num: qp.qpn,
            });
        }
    }
}

fn call(call: &'static str, e: impl std::fmt::Display) -> VerbsError {
    VerbsError::Call {
        call,
        reason: e.to_string(),
    }
}

impl EmuVerbs {
    /// Injects `fault` (see [`Fault`]).
    pub fn inject(&self, fault: Fault) {
        self.dev.inject(fault);
    }

    /// A handle that injects faults into this device.
    pub fn fault_handle(&self) -> FaultHandle {
        FaultHandle(Arc::downgrade(&self.dev))
    }

    /// What the device made so far.
    pub fn counts(&self) -> EmuCounts {
        self.dev.counts()
    }

    fn rkey_of(&self, rkey: u32) -> u32 {
        let c = &self.dev.corrupt_rkeys;
        if c.load(Ordering::Relaxed) > 0
            && c.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
        {
            rkey ^ 0x8000_0000
        } else {
            rkey
        }
    }
}

impl Dev {
    fn inject(&self, fault: Fault) {
        match fault {
            Fault::DropAll => {
                for s in self
                    .streams
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                {
                    let _ = s.shutdown(std::net::Shutdown::Both);
                }
            }
            Fault::DropQp { qpn } => {
                let qp = self
                    .qps
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(&qpn)
                    .cloned();
                if let Some(qp) = qp
                    && let Some(c) = qp.conn.lock().unwrap_or_else(|e| e.into_inner()).as_ref()
                {
                    let _ = c.stream.shutdown(std::net::Shutdown::Both);
                }
            }
            Fault::CorruptRkey { count } => {
                self.corrupt_rkeys.fetch_add(count, Ordering::Relaxed);
            }
            Fault::LoseDatagrams { count } => {
                self.lose_datagrams.store(count, Ordering::Relaxed);
            }
            Fault::DuplicateDatagrams { count } => {
                self.duplicate_datagrams.store(count, Ordering::Relaxed);
            }
        }
    }

    fn counts(&self) -> EmuCounts {
        EmuCounts {
            rc_qps: self.rc_qps.load(Ordering::Relaxed),
            ud_qps: self.ud_qps.load(Ordering::Relaxed),
            reg_mrs: self.reg_mrs.load(Ordering::Relaxed),
            live_mrs: self.mrs.read().unwrap_or_else(|e| e.into_inner()).len() as u64,
            datagrams: self.datagrams.load(Ordering::Relaxed),
            datagrams_lost: self.datagrams_lost.load(Ordering::Relaxed),
        }
    }

    /// Takes one from a fault counter (`u32::MAX` never runs out); true if it was set.
    fn take_fault(c: &AtomicU32) -> bool {
        c.load(Ordering::Relaxed) > 0
            && c.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| match n {
                0 => None,
                u32::MAX => Some(u32::MAX),
                n => Some(n - 1),
            })
            .is_ok()
    }
}

fn new_key(dev: &Dev) -> u32 {
    // Keys look arbitrary (as a NIC's do), so a stale or guessed one rarely matches.
    let n = dev.next_key.fetch_add(1, Ordering::Relaxed);
    n.wrapping_mul(0x9E37_79B9) | 1
}

impl Verbs for EmuVerbs {
    type Mr = EmuMr;
    type Cq = EmuCq;
    type Srq = EmuSrq;
    type Qp = EmuQp;
    type UdQp = EmuUdQp;
    type Ah = EmuAh;
    const PROVIDER: &'static str = "emu";

    fn devices() -> Result<Vec<DeviceInfo>, VerbsError> {
        Ok(vec![DeviceInfo {
            name: DEVICE_NAME.into(),
            ports: vec![emu_port()],
        }])
    }

    fn open(device: Option<&str>, port: u8, _gid_index: u32) -> Result<Self, VerbsError> {
        if let Some(d) = device
            && d != DEVICE_NAME
        {
            return Err(VerbsError::NoDevice(format!(
                " named {d} (the emulation has {DEVICE_NAME})"
            )));
        }
        if port != 1 {
            return Err(VerbsError::Invalid(format!(
                "{DEVICE_NAME} has port 1 only, not {port}"
            )));
        }
        let mut gid = [0u8; 16];
        gid[..4].copy_from_slice(&std::process::id().to_le_bytes());
        gid[4..8].copy_from_slice(&DEVICE_COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
        let nonce = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        gid[8..].copy_from_slice(&nonce.to_le_bytes());
        let addr =
            SocketAddr::from_abstract_name(socket_name(&gid)).map_err(|e| call("bind", e))?;
        let listener = UnixListener::bind_addr(&addr).map_err(|e| call("bind", e))?;
        let dev = Arc::new(Dev {
            gid,
            port: emu_port(),
            mrs: RwLock::new(HashMap::new()),
            next_key: AtomicU32::new(1),
            qps: Mutex::new(HashMap::new()),
            next_qpn: AtomicU32::new(0x100),
            corrupt_rkeys: AtomicU32::new(0),
            closing: AtomicBool::new(false),
            streams: Mutex::new(Vec::new()),
            lose_datagrams: AtomicU32::new(0),
            duplicate_datagrams: AtomicU32::new(0),
            rc_qps: AtomicU64::new(0),
            ud_qps: AtomicU64::new(0),
            reg_mrs: AtomicU64::new(0),
            datagrams: AtomicU64::new(0),
            datagrams_lost: AtomicU64::new(0),
        });
        let weak = Arc::downgrade(&dev);
        std::thread::Builder::new()
            .name("gex-ibv-emu".into())
            .spawn(move || {
                for s in listener.incoming() {
                    let Some(d) = weak.upgrade() else { return };
                    if d.closing.load(Ordering::Acquire) {
                        return;
                    }
                    let Ok(s) = s else { continue };
                    if let Ok(c) = s.try_clone() {
                        d.streams.lock().unwrap_or_else(|e| e.into_inner()).push(c);
                    }
                    drop(d);
                    let w = weak.clone();
                    let _ = std::thread::Builder::new()
                        .name("gex-ibv-emu-t".into())
                        .spawn(move || serve(w, s));
                }
            })
            .map_err(|e| call("thread", e))?;
        Ok(EmuVerbs { dev })
    }

    fn device_name(&self) -> &str {
        DEVICE_NAME
    }
    fn port(&self) -> &PortInfo {
        &self.dev.port
    }
    fn gid(&self) -> [u8; 16] {
        self.dev.gid
    }

    unsafe fn reg_mr(
        &self,
        addr: *mut u8,
        len: usize,
        access: Access,
    ) -> Result<Self::Mr, VerbsError> {
        if (addr as usize).checked_add(len).is_none() {
            return Err(VerbsError::Invalid("region wraps the address space".into()));
        }
        let mut mrs = self.dev.mrs.write().unwrap_or_else(|e| e.into_inner());
        let mut key = new_key(&self.dev);
        while mrs.contains_key(&key) {
            key = new_key(&self.dev);
        }
        mrs.insert(
            key,
            MrEntry {
                addr: addr as usize,
                len,
                access,
            },
        );
        self.dev.reg_mrs.fetch_add(1, Ordering::Relaxed);
        Ok(EmuMr {
            key,
            dev: self.dev.clone(),
        })
    }
    fn lkey(mr: &Self::Mr) -> u32 {
        mr.key
    }
    fn rkey(mr: &Self::Mr) -> u32 {
        mr.key
    }

    fn create_cq(&self, depth: u32) -> Result<Self::Cq, VerbsError> {
        Ok(EmuCq {
            inner: Arc::new(CqInner {
                state: Mutex::new(CqState {
                    entries: VecDeque::new(),
                    depth: depth.max(1) as usize,
                    overrun: false,
                }),
                cv: Condvar::new(),
            }),
        })
    }

    fn create_srq(&self, depth: u32) -> Result<Self::Srq, VerbsError> {
        Ok(EmuSrq {
            inner: Arc::new(SrqInner {
                q: Mutex::new(VecDeque::new()),
                depth: depth.max(1) as usize,
                cv: Condvar::new(),
            }),
        })
    }

    fn create_qp(
        &self,
        cq: &Self::Cq,
        srq: &Self::Srq,
        caps: QpCaps,
    ) -> Result<Self::Qp, VerbsError> {
        let qpn = self.dev.next_qpn.fetch_add(1, Ordering::Relaxed) & 0x00ff_ffff;
        let inner = Arc::new(QpInner {
            qpn,
            cq: cq.inner.clone(),
            srq: srq.inner.clone(),
            max_send_wr: caps.max_send_wr.max(1) as usize,
            max_inline: caps.max_inline,
            rnr_retry: AtomicU32::new(7),
            error: AtomicBool::new(false),
            pending_error: AtomicU32::new(0),
            conn: Mutex::new(None),
            outstanding: Mutex::new(VecDeque::new()),
        });
        self.dev
            .qps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(qpn, inner.clone());
        self.dev.rc_qps.fetch_add(1, Ordering::Relaxed);
        Ok(EmuQp {
            inner,
            dev: self.dev.clone(),
        })
    }

    fn qp_addr(&self, qp: &Self::Qp) -> QpAddr {
        QpAddr {
            lid: 0,
            gid: self.dev.gid,
            qpn: qp.inner.qpn,
            psn: 0,
        }
    }

    fn connect(
        &self,
        qp: &Self::Qp,
        remote: &QpAddr,
        params: &ConnectParams,
    ) -> Result<(), VerbsError> {
        let mut conn = qp.inner.conn.lock().unwrap_or_else(|e| e.into_inner());
        if conn.is_some() {
            return Err(VerbsError::Invalid("queue pair already connected".into()));
        }
        qp.inner
            .rnr_retry
            .store(params.rnr_retry.min(7) as u32, Ordering::Relaxed);
        let addr = SocketAddr::from_abstract_name(socket_name(&remote.gid))
            .map_err(|e| call("connect", e))?;
        let mut stream = UnixStream::connect_addr(&addr).map_err(|e| {
            call(
                "ibv_modify_qp(RTR)",
                format!("peer device unreachable: {e}"),
            )
        })?;
        stream
            .write_all(&frame(HELLO, &[&remote.qpn.to_le_bytes()]))
            .map_err(|e| call("ibv_modify_qp(RTR)", e))?;
        let reader = stream.try_clone().map_err(|e| call("connect", e))?;
        if let Ok(c) = stream.try_clone() {
            self.dev
                .streams
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(c);
        }
        let (w, q) = (Arc::downgrade(&self.dev), Arc::downgrade(&qp.inner));
        std::thread::Builder::new()
            .name("gex-ibv-emu-i".into())
            .spawn(move || answers(w, q, reader))
            .map_err(|e| call("thread", e))?;
        *conn = Some(Conn { stream });
        Ok(())
    }

    unsafe fn post_send(&self, qp: &Self::Qp, wr: &SendWr) -> Result<(), VerbsError> {
        let q = &qp.inner;
        let mut conn = q.conn.lock().unwrap_or_else(|e| e.into_inner());
        let opcode = match wr.op {
            SendOp::Send => WcOpcode::Send,
            SendOp::Write { .. } => WcOpcode::Write,
            SendOp::Read { .. } => WcOpcode::Read,
            SendOp::FetchAdd { .. } => WcOpcode::FetchAdd,
            SendOp::CmpSwap { .. } => WcOpcode::CmpSwap,
        };
        let o = Outstanding {
            wr_id: wr.wr_id,
            opcode,
            signaled: wr.signaled,
            sge: wr.sge,
        };
        if q.error.load(Ordering::Acquire) || conn.is_none() {
            if conn.is_none() && !q.error.load(Ordering::Acquire) {
                return Err(VerbsError::Invalid("queue pair not connected".into()));
            }
            // A queue pair in error flushes what is posted (the first request after an
            // idle failure reports it).
            let status = match q.pending_error.swap(0, Ordering::AcqRel) {
                0 => WcStatus::WrFlushError,
                c => code_status(c),
            };
            q.cq.push(Wc {
                wr_id: wr.wr_id,
                status,
                opcode,
                byte_len: 0,
                qp_num: q.qpn,
            });
            return Ok(());
        }
        if wr.inline && wr.sge.len > q.max_inline {
            return Err(VerbsError::Invalid(format!(
                "{} inline bytes, at most {}",
                wr.sge.len, q.max_inline
            )));
        }
        let mut outstanding = q.outstanding.lock().unwrap_or_else(|e| e.into_inner());
        if outstanding.len() >= q.max_send_wr {
            return Err(VerbsError::QueueFull);
        }
        // The source of SEND and WRITE is read now (a NIC reads it later: reading at once
        // is one of the behaviours the caller's contract allows).
        let src = |d: &Dev| -> Option<Vec<u8>> {
            let len = wr.sge.len as usize;
            if wr.inline {
                // SAFETY: the caller's buffer is valid for reads of its length (inline
                // data is read at post time).
                return Some(unsafe { nic_read(wr.sge.addr as usize as *const u8, len) });
            }
            d.with_region(wr.sge.lkey, wr.sge.addr, len, Access::empty(), |p| {
                // SAFETY: inside a registered region, under the read lock.
                unsafe { nic_read(p, len) }
            })
        };
        let f = match wr.op {
            SendOp::Send => src(&self.dev).map(|data| frame(SEND, &[&data])),
            SendOp::Write { remote_addr, rkey } => src(&self.dev).map(|data| {
                frame(
                    WRITE,
                    &[
                        &remote_addr.to_le_bytes(),
                        &self.rkey_of(rkey).to_le_bytes(),
                        &data,
                    ],
                )
            }),
            SendOp::Read { remote_addr, rkey } => Some(frame(
                READ,
                &[
                    &remote_addr.to_le_bytes(),
                    &self.rkey_of(rkey).to_le_bytes(),
                    &wr.sge.len.to_le_bytes(),
                ],
            )),
            SendOp::FetchAdd {
                remote_addr,
                rkey,
                add,
            } => Some(frame(
                FADD,
                &[
                    &remote_addr.to_le_bytes(),
                    &self.rkey_of(rkey).to_le_bytes(),
                    &add.to_le_bytes(),
                    &[0; 8],
                ],
            )),
            SendOp::CmpSwap {
                remote_addr,
                rkey,
                compare,
                swap,
            } => Some(frame(
                CSWAP,
                &[
                    &remote_addr.to_le_bytes(),
                    &self.rkey_of(rkey).to_le_bytes(),
                    &compare.to_le_bytes(),
                    &swap.to_le_bytes(),
                ],
            )),
        };
        let Some(f) = f else {
            // A local protection error completes the request and the queue pair fails.
            drop(outstanding);
            drop(conn);
            q.outstanding
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push_back(o);
            q.fail(WcStatus::LocalProtectionError);
            return Ok(());
        };
        outstanding.push_back(o);
        drop(outstanding);
        let c = conn.as_mut().expect("connected");
        if c.stream.write_all(&f).is_err() {
            // The answers thread sees the end of the stream and fails the queue pair.
            let _ = c.stream.shutdown(std::net::Shutdown::Both);
        }
        Ok(())
    }

    unsafe fn post_srq_recv(
        &self,
        srq: &Self::Srq,
        wr_id: u64,
        sge: Sge,
    ) -> Result<(), VerbsError> {
        let mut q = srq.inner.q.lock().unwrap_or_else(|e| e.into_inner());
        if q.len() >= srq.inner.depth {
            return Err(VerbsError::QueueFull);
        }
        q.push_back(Recv { wr_id, sge });
        drop(q);
        srq.inner.cv.notify_all();
        Ok(())
    }

    fn poll_cq(&self, cq: &Self::Cq, out: &mut [Wc]) -> Result<usize, VerbsError> {
        let mut s = cq.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.overrun {
            return Err(VerbsError::CqOverrun);
        }
        let mut n = 0;
        while n < out.len() {
            match s.entries.pop_front() {
                Some(wc) => {
                    out[n] = wc;
                    n += 1;
                }
                None => break,
            }
        }
        Ok(n)
    }

    fn arm_cq(&self, _cq: &Self::Cq) -> Result<(), VerbsError> {
        // The emulated channel is the queue's condition variable, signalled by every
        // completion: nothing to arm.
        Ok(())
    }

    fn wait_cq(&self, cq: &Self::Cq, timeout: Duration) -> Result<bool, VerbsError> {
        let deadline = Instant::now() + timeout;
        let mut s = cq.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if !s.entries.is_empty() || s.overrun {
                return Ok(true);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(false);
            }
            s = cq
                .inner
                .cv
                .wait_timeout(s, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
    fn create_ud_qp(
        &self,
        cq: &Self::Cq,
        caps: QpCaps,
        recv_depth: u32,
        qkey: u32,
    ) -> Result<Self::UdQp, VerbsError> {
        let qpn = self.dev.next_qpn.fetch_add(1, Ordering::Relaxed) & 0x00ff_ffff;
        let addr = SocketAddr::from_abstract_name(ud_socket_name(&self.dev.gid, qpn))
            .map_err(|e| call("ibv_create_qp(UD)", e))?;
        let sock = UnixDatagram::bind_addr(&addr).map_err(|e| call("ibv_create_qp(UD)", e))?;
        let reader = sock.try_clone().map_err(|e| call("ibv_create_qp(UD)", e))?;
        reader
            .set_read_timeout(Some(UD_WAKE))
            .map_err(|e| call("ibv_create_qp(UD)", e))?;
        let inner = Arc::new(UdInner {
            qpn,
            qkey,
            cq: cq.inner.clone(),
            rq: Mutex::new(VecDeque::new()),
            depth: recv_depth.max(1) as usize,
            max_inline: caps.max_inline,
            sock,
        });
        let (w, q) = (Arc::downgrade(&self.dev), Arc::downgrade(&inner));
        std::thread::Builder::new()
            .name("gex-ibv-emu-ud".into())
            .spawn(move || ud_receive(w, q, reader))
            .map_err(|e| call("thread", e))?;
        self.dev.ud_qps.fetch_add(1, Ordering::Relaxed);
        Ok(EmuUdQp {
            inner,
            _dev: self.dev.clone(),
        })
    }

    fn ud_addr(&self, qp: &Self::UdQp) -> QpAddr {
        QpAddr {
            lid: 0,
            gid: self.dev.gid,
            qpn: qp.inner.qpn,
            psn: 0,
        }
    }

    fn create_ah(&self, remote: &QpAddr, _gid_index: u8) -> Result<Self::Ah, VerbsError> {
        Ok(EmuAh { gid: remote.gid })
    }

    unsafe fn post_ud_send(
        &self,
        qp: &Self::UdQp,
        ah: &Self::Ah,
        dest: UdDest,
        wr_id: u64,
        sge: Sge,
        inline: bool,
    ) -> Result<(), VerbsError> {
        let q = &qp.inner;
        let len = sge.len as usize;
        if len > MAX_DGRAM {
            return Err(VerbsError::Invalid(format!(
                "a datagram of {len} bytes, at most {MAX_DGRAM}"
            )));
        }
        if inline && sge.len > q.max_inline {
            return Err(VerbsError::Invalid(format!(
                "{len} inline bytes, at most {}",
                q.max_inline
            )));
        }
        let data = if inline {
            // SAFETY: the caller's buffer is valid for reads of its length (inline data
            // is read at post time).
            Some(unsafe { nic_read(sge.addr as usize as *const u8, len) })
        } else {
            self.dev
                .with_region(sge.lkey, sge.addr, len, Access::empty(), |p| {
                    // SAFETY: inside a registered region, under the read lock.
                    unsafe { nic_read(p, len) }
                })
        };
        let status = match data {
            None => WcStatus::LocalProtectionError,
            Some(data) => {
                let mut dgram = Vec::with_capacity(DGRAM_HDR + len);
                dgram.extend_from_slice(&dest.qkey.to_le_bytes());
                dgram.extend_from_slice(&q.qpn.to_le_bytes());
                dgram.extend_from_slice(&data);
                self.dev.datagrams.fetch_add(1, Ordering::Relaxed);
                if Dev::take_fault(&self.dev.lose_datagrams) {
                    self.dev.datagrams_lost.fetch_add(1, Ordering::Relaxed);
                } else {
                    let copies = if Dev::take_fault(&self.dev.duplicate_datagrams) {
                        2
                    } else {
                        1
                    };
                    if let Ok(to) =
                        SocketAddr::from_abstract_name(ud_socket_name(&ah.gid, dest.qpn))
                    {
                        for _ in 0..copies {
                            // A datagram nobody receives (no such queue pair, a full
                            // socket buffer) is lost, as on a fabric.
                            let _ = q.sock.send_to_addr(&dgram, &to);
                        }
                    }
                }
                WcStatus::Success
            }
        };
        q.cq.push(Wc {
            wr_id,
            status,
            opcode: WcOpcode::Send,
            byte_len: sge.len,
            qp_num: q.qpn,
        });
        Ok(())
    }

    unsafe fn post_ud_recv(&self, qp: &Self::UdQp, wr_id: u64, sge: Sge) -> Result<(), VerbsError> {
        let mut q = qp.inner.rq.lock().unwrap_or_else(|e| e.into_inner());
        if q.len() >= qp.inner.depth {
            return Err(VerbsError::QueueFull);
        }
        q.push_back(Recv { wr_id, sge });
        Ok(())
    }
}

fn emu_port() -> PortInfo {
    PortInfo {
        port: 1,
        active: true,
        link_layer: LinkLayer::Emulated,
        lid: 0,
        mtu: 4096,
        gid_table_len: 1,
    }
}

impl EmuSrq {
    /// Receives posted and not yet consumed.
    pub fn posted(&self) -> usize {
        self.inner.q.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}
