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

mod nic;
mod verbs;

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
    /// The address of this device's queue pair `qpn` (RC or UD): the device's GID, no
    /// LID, starting packet number 0.
    fn addr(&self, qpn: u32) -> QpAddr {
        QpAddr {
            lid: 0,
            gid: self.gid,
            qpn,
            psn: 0,
        }
    }

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
