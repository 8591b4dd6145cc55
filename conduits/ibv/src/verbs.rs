//! The narrow verbs interface: the few ibverbs operations the conduit uses, as one trait
//! ([`Verbs`]) with two implementations, the software RC emulation
//! ([`crate::emu::EmuVerbs`], always built) and libibverbs through `rdma-sys`
//! (`crate::real::RdmaVerbs`, cargo feature `verbs`).
//!
//! Every call the conduit makes to a verbs provider goes through this trait, so the
//! conduit's logic (queue pairs, credits, completions, errors) runs unchanged over the
//! emulation in the tests and over a real device.
//!
//! The operations, with their libibverbs names:
//!
//! | trait item | libibverbs |
//! |---|---|
//! | [`Verbs::devices`] | `ibv_get_device_list`, `ibv_query_device`, `ibv_query_port` |
//! | [`Verbs::open`] | `ibv_open_device`, `ibv_query_port`, `ibv_query_gid`, `ibv_alloc_pd` |
//! | [`Verbs::reg_mr`], dropping a [`Verbs::Mr`] | `ibv_reg_mr`, `ibv_dereg_mr` |
//! | [`Verbs::create_cq`] | `ibv_create_comp_channel`, `ibv_create_cq` |
//! | [`Verbs::create_srq`] | `ibv_create_srq` |
//! | [`Verbs::create_qp`], [`Verbs::connect`] | `ibv_create_qp` (RC), `ibv_modify_qp` to INIT, RTR, RTS |
//! | [`Verbs::post_send`] | `ibv_post_send`: SEND (inline or not), RDMA WRITE, RDMA READ, fetch-add, compare-swap |
//! | [`Verbs::post_srq_recv`] | `ibv_post_srq_recv` |
//! | [`Verbs::poll_cq`] | `ibv_poll_cq` |
//! | [`Verbs::arm_cq`], [`Verbs::wait_cq`] | `ibv_req_notify_cq`; `poll` on the channel, `ibv_get_cq_event`, `ibv_ack_cq_events` |
//! | [`Verbs::create_ud_qp`] | `ibv_create_qp` (UD), `ibv_modify_qp` to INIT (Q_Key), RTR, RTS |
//! | [`Verbs::create_ah`], dropping a [`Verbs::Ah`] | `ibv_create_ah`, `ibv_destroy_ah` |
//! | [`Verbs::post_ud_send`] | `ibv_post_send`: SEND with an address handle, remote QPN and Q_Key |
//! | [`Verbs::post_ud_recv`] | `ibv_post_recv` (a UD receive starts with the 40-byte GRH, [`GRH_LEN`]) |

//! # Safety
//! The trait declares the calls whose callers make promises (memory registered and
//! posted stays valid): `reg_mr`, `post_send`, `post_srq_recv`. It has no unsafe block.
#![allow(unsafe_code)]

use std::time::Duration;

/// Bytes of the Global Routing Header space at the start of every receive of an
/// unreliable-datagram (UD) queue pair: the message follows it, and the completion's
/// `byte_len` counts it.
pub const GRH_LEN: usize = 40;

/// Where a UD SEND goes, besides its address handle: the remote queue pair and the Q_Key
/// it accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdDest {
    /// Remote UD queue pair number.
    pub qpn: u32,
    /// Queue key the remote queue pair was created with (a datagram with another one is
    /// dropped).
    pub qkey: u32,
}

/// A failure of a verbs call (not a work completion: those carry a [`WcStatus`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerbsError {
    /// No RDMA device was found (`ibv_get_device_list` returned none), or the one
    /// asked for is not there.
    #[error("no RDMA device{0}")]
    NoDevice(String),
    /// A verbs call failed; the call and the errno or reason.
    #[error("{call} failed: {reason}")]
    Call {
        /// The verbs call.
        call: &'static str,
        /// errno text or reason.
        reason: String,
    },
    /// The work queue is full (`ENOMEM` from a post): back-pressure, recoverable by
    /// polling the completion queue.
    #[error("work queue full")]
    QueueFull,
    /// The completion queue overran: completions were lost, the queue is unusable.
    #[error("completion queue overrun")]
    CqOverrun,
    /// A work request the provider cannot take (too long inline data, a local range
    /// outside its memory region, a queue pair not connected).
    #[error("invalid work request: {0}")]
    Invalid(String),
}

bitflags::bitflags! {
    /// Access rights of a memory region (`IBV_ACCESS_*`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct Access: u32 {
        /// The local NIC may write it (receives, read responses, atomic results).
        const LOCAL_WRITE = 1;
        /// Peers may RDMA WRITE into it.
        const REMOTE_WRITE = 1 << 1;
        /// Peers may RDMA READ from it.
        const REMOTE_READ = 1 << 2;
        /// Peers may run atomics on it.
        const REMOTE_ATOMIC = 1 << 3;
    }
}

/// Link layer of a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkLayer {
    /// InfiniBand (addressed by LID).
    InfiniBand,
    /// Ethernet: RoCE (addressed by GID).
    Ethernet,
    /// The software emulation.
    Emulated,
    /// Something else (the provider's code).
    Other(u8),
}

impl std::fmt::Display for LinkLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LinkLayer::InfiniBand => f.write_str("InfiniBand"),
            LinkLayer::Ethernet => f.write_str("Ethernet (RoCE)"),
            LinkLayer::Emulated => f.write_str("emulated"),
            LinkLayer::Other(c) => write!(f, "unknown ({c})"),
        }
    }
}

/// One port of a device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortInfo {
    /// Port number (from 1).
    pub port: u8,
    /// Whether the port is ACTIVE.
    pub active: bool,
    /// Link layer.
    pub link_layer: LinkLayer,
    /// Local identifier (InfiniBand; 0 on Ethernet).
    pub lid: u16,
    /// Active MTU in bytes.
    pub mtu: u32,
    /// Entries of the GID table.
    pub gid_table_len: u32,
}

/// One device, as [`Verbs::devices`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Device name (`mlx5_0`, `rxe0`, `emu0`).
    pub name: String,
    /// Its ports.
    pub ports: Vec<PortInfo>,
}

/// What a queue pair is connected with: the peer's address and queue pair number
/// (exchanged out of band, through the bootstrap).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct QpAddr {
    /// The port's LID (InfiniBand).
    pub lid: u16,
    /// The port's GID at the chosen index (RoCE; the emulation's device identity).
    pub gid: [u8; 16],
    /// Queue pair number.
    pub qpn: u32,
    /// Initial packet sequence number.
    pub psn: u32,
}

impl QpAddr {
    /// Encoded length.
    pub const LEN: usize = 26;
    /// Appends the encoding to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.lid.to_le_bytes());
        out.extend_from_slice(&self.gid);
        out.extend_from_slice(&self.qpn.to_le_bytes());
        out.extend_from_slice(&self.psn.to_le_bytes());
    }
    /// Decodes one from exactly [`QpAddr::LEN`] bytes.
    pub fn decode(b: &[u8]) -> Option<QpAddr> {
        if b.len() != Self::LEN {
            return None;
        }
        let mut gid = [0; 16];
        gid.copy_from_slice(&b[2..18]);
        Some(QpAddr {
            lid: u16::from_le_bytes([b[0], b[1]]),
            gid,
            qpn: u32::from_le_bytes(b[18..22].try_into().ok()?),
            psn: u32::from_le_bytes(b[22..26].try_into().ok()?),
        })
    }
}

/// Connection parameters of an RC queue pair ([`Verbs::connect`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectParams {
    /// Retries of a transport error before the work request fails with
    /// [`WcStatus::RetryExceeded`] (`retry_cnt`, 0..=7).
    pub retry_cnt: u8,
    /// Retries when the peer has no receive posted (`rnr_retry`, 0..=7; 7 = forever).
    pub rnr_retry: u8,
    /// GID index (RoCE).
    pub gid_index: u8,
}

impl Default for ConnectParams {
    fn default() -> Self {
        ConnectParams {
            retry_cnt: 7,
            rnr_retry: 7,
            gid_index: 0,
        }
    }
}

/// Queue sizes of a queue pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpCaps {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Largest inline payload.
    pub max_inline: u32,
}

/// A local buffer of a work request: address, length and the local key of the memory
/// region it lies in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sge {
    /// Address.
    pub addr: u64,
    /// Length.
    pub len: u32,
    /// Local key.
    pub lkey: u32,
}

/// The operation of a send work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOp {
    /// SEND: the bytes land in a receive the peer posted.
    Send,
    /// RDMA WRITE to `remote_addr` under `rkey`.
    Write {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// RDMA READ from `remote_addr` under `rkey` into the local buffer.
    Read {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// 64-bit fetch-and-add at `remote_addr`; the old value lands in the local buffer.
    FetchAdd {
        /// Remote address (8-byte aligned).
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Addend.
        add: u64,
    },
    /// 64-bit compare-and-swap at `remote_addr`; the old value lands in the local buffer.
    CmpSwap {
        /// Remote address (8-byte aligned).
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Compare value.
        compare: u64,
        /// Swap value.
        swap: u64,
    },
}

/// A send work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendWr {
    /// Caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// Operation.
    pub op: SendOp,
    /// Local buffer (source of SEND and WRITE, destination of READ and atomics).
    pub sge: Sge,
    /// Generate a completion when done (errors complete whatever this says).
    pub signaled: bool,
    /// Send the bytes inline (copied at post time; `lkey` unused).
    pub inline: bool,
}

/// Status of a work completion (`ibv_wc_status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WcStatus {
    /// Done.
    Success,
    /// A receive too short for the message.
    LocalLengthError,
    /// A local buffer outside its memory region or without the access needed.
    LocalProtectionError,
    /// Flushed: the queue pair is in the error state.
    WrFlushError,
    /// The peer refused the access (wrong rkey, range or rights).
    RemoteAccessError,
    /// The peer refused the request (too long for its receive, bad opcode).
    RemoteInvalidRequest,
    /// Transport retries exhausted: the peer is unreachable or gone.
    RetryExceeded,
    /// Receiver-not-ready retries exhausted: the peer posted no receive in time.
    RnrRetryExceeded,
    /// Another status (the provider's code).
    Other(u32),
}

impl WcStatus {
    /// A short description.
    pub fn describe(self) -> String {
        match self {
            WcStatus::Success => "success".into(),
            WcStatus::LocalLengthError => "local length error".into(),
            WcStatus::LocalProtectionError => "local protection error".into(),
            WcStatus::WrFlushError => "work request flushed (queue pair in error)".into(),
            WcStatus::RemoteAccessError => "remote access error".into(),
            WcStatus::RemoteInvalidRequest => "remote invalid request".into(),
            WcStatus::RetryExceeded => "transport retry counter exceeded".into(),
            WcStatus::RnrRetryExceeded => "RNR retry counter exceeded".into(),
            WcStatus::Other(c) => format!("status {c}"),
        }
    }
}

/// What a work completion completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WcOpcode {
    /// A SEND.
    Send,
    /// An RDMA WRITE.
    Write,
    /// An RDMA READ.
    Read,
    /// A fetch-add.
    FetchAdd,
    /// A compare-swap.
    CmpSwap,
    /// A receive (from the shared receive queue).
    Recv,
}

/// One work completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wc {
    /// The work request's identifier.
    pub wr_id: u64,
    /// Status.
    pub status: WcStatus,
    /// Operation (valid for successful completions; errors may say [`WcOpcode::Send`]).
    pub opcode: WcOpcode,
    /// Bytes received (receives).
    pub byte_len: u32,
    /// The local queue pair the completion belongs to.
    pub qp_num: u32,
}

impl Wc {
    /// An empty completion (for output arrays).
    pub const EMPTY: Wc = Wc {
        wr_id: 0,
        status: WcStatus::Success,
        opcode: WcOpcode::Send,
        byte_len: 0,
        qp_num: 0,
    };
}

/// The verbs operations the conduit uses. One value is an opened device port with its
/// protection domain; the handles it creates release their resource when dropped.
///
/// Threads: a provider is `Sync`; the conduit posts to a queue pair and polls a
/// completion queue from one thread at a time, as libibverbs allows.
pub trait Verbs: Send + Sync + Sized + 'static {
    /// A memory region.
    type Mr: Send + Sync;
    /// A completion queue with its completion channel.
    type Cq: Send + Sync;
    /// A shared receive queue.
    type Srq: Send + Sync;
    /// An RC queue pair.
    type Qp: Send + Sync;
    /// An unreliable-datagram (UD) queue pair.
    type UdQp: Send + Sync;
    /// An address handle (the route to a remote port, for UD sends).
    type Ah: Send + Sync;

    /// The provider's name (`"emu"`, `"verbs"`).
    const PROVIDER: &'static str;

    /// The devices this provider sees, with their ports.
    ///
    /// # Errors
    /// [`VerbsError`] if listing fails (no device is an empty list).
    fn devices() -> Result<Vec<DeviceInfo>, VerbsError>;

    /// Opens `device` (the first one if `None`) at `port`, reads the GID at `gid_index`
    /// and allocates a protection domain.
    ///
    /// # Errors
    /// [`VerbsError::NoDevice`] when there is none, or the failing call.
    fn open(device: Option<&str>, port: u8, gid_index: u32) -> Result<Self, VerbsError>;

    /// The device's name.
    fn device_name(&self) -> &str;
    /// The port opened.
    fn port(&self) -> &PortInfo;
    /// The GID at the index opened (all zero when the port has none).
    fn gid(&self) -> [u8; 16];

    /// Registers `len` bytes at `addr` with `access`.
    ///
    /// # Safety
    /// The memory must stay valid (allocated, not unmapped) until the returned region
    /// is dropped: the provider and peers (within `access`) read and write it
    /// meanwhile, through raw pointers and atomics. Exception: a region registered
    /// without remote rights (no `REMOTE_*` in `access`) is accessed only for the work
    /// requests that name its local key, so its memory need only stay valid while such
    /// a request may be outstanding; after that the region may outlive the memory
    /// provided no new request names it (a provider never reaches it otherwise).
    ///
    /// # Errors
    /// [`VerbsError::Call`] if registration fails.
    unsafe fn reg_mr(
        &self,
        addr: *mut u8,
        len: usize,
        access: Access,
    ) -> Result<Self::Mr, VerbsError>;
    /// A region's local key.
    fn lkey(mr: &Self::Mr) -> u32;
    /// A region's remote key.
    fn rkey(mr: &Self::Mr) -> u32;

    /// Creates a completion queue of `depth` entries with a completion channel.
    ///
    /// # Errors
    /// The failing call.
    fn create_cq(&self, depth: u32) -> Result<Self::Cq, VerbsError>;
    /// Creates a shared receive queue of `depth` receives of one buffer each.
    ///
    /// # Errors
    /// The failing call.
    fn create_srq(&self, depth: u32) -> Result<Self::Srq, VerbsError>;
    /// Creates an RC queue pair in state RESET whose sends and receives complete on
    /// `cq` and whose receives come from `srq`.
    ///
    /// # Errors
    /// The failing call.
    fn create_qp(
        &self,
        cq: &Self::Cq,
        srq: &Self::Srq,
        caps: QpCaps,
    ) -> Result<Self::Qp, VerbsError>;
    /// A queue pair's address, to publish to the peer.
    fn qp_addr(&self, qp: &Self::Qp) -> QpAddr;
    /// Moves `qp` through INIT (with remote read, write and atomic access), RTR
    /// (connected to `remote`) and RTS.
    ///
    /// # Errors
    /// The failing `ibv_modify_qp`.
    fn connect(
        &self,
        qp: &Self::Qp,
        remote: &QpAddr,
        params: &ConnectParams,
    ) -> Result<(), VerbsError>;

    /// Posts one send work request on `qp`.
    ///
    /// # Safety
    /// Unless `wr.inline`, the local buffer `wr.sge` must stay valid, and (READ and
    /// atomics) unaccessed by others, until the request's completion has been polled or
    /// the queue pair is destroyed; it must lie in a region registered with `lkey`.
    ///
    /// # Errors
    /// [`VerbsError::QueueFull`] when the send queue is full (back-pressure),
    /// [`VerbsError::Invalid`] for a request the provider refuses.
    unsafe fn post_send(&self, qp: &Self::Qp, wr: &SendWr) -> Result<(), VerbsError>;

    /// Posts a receive of one buffer to `srq`.
    ///
    /// # Safety
    /// The buffer must stay valid and unaccessed until its completion has been polled or
    /// the queue is destroyed, inside a region registered with `lkey` and
    /// [`Access::LOCAL_WRITE`].
    ///
    /// # Errors
    /// [`VerbsError::QueueFull`] when the queue is full.
    unsafe fn post_srq_recv(&self, srq: &Self::Srq, wr_id: u64, sge: Sge)
    -> Result<(), VerbsError>;

    /// Takes up to `out.len()` completions from `cq`; returns how many.
    ///
    /// # Errors
    /// [`VerbsError::CqOverrun`] when completions were lost.
    fn poll_cq(&self, cq: &Self::Cq, out: &mut [Wc]) -> Result<usize, VerbsError>;

    /// Arms `cq`'s completion channel (`ibv_req_notify_cq`): the next completion
    /// signals it. Poll the queue once more after arming, then [`wait_cq`](Self::wait_cq),
    /// so that a completion that arrived before arming is not slept over.
    ///
    /// # Errors
    /// The failing call.
    fn arm_cq(&self, cq: &Self::Cq) -> Result<(), VerbsError>;

    /// Sleeps until `cq`'s channel signals (armed by [`arm_cq`](Self::arm_cq)) or
    /// `timeout` passed; true if signalled. Spurious wake-ups are allowed.
    ///
    /// # Errors
    /// The failing call.
    fn wait_cq(&self, cq: &Self::Cq, timeout: Duration) -> Result<bool, VerbsError>;

    /// Creates an unreliable-datagram queue pair in state RTS, whose sends and receives
    /// complete on `cq` (receive completions carry the queue pair's number), with its
    /// own receive queue of `recv_depth` entries, accepting datagrams sent with `qkey`.
    /// Datagrams may be lost, duplicated or reordered; one that finds no receive posted
    /// is dropped.
    ///
    /// # Errors
    /// The failing call.
    fn create_ud_qp(
        &self,
        cq: &Self::Cq,
        caps: QpCaps,
        recv_depth: u32,
        qkey: u32,
    ) -> Result<Self::UdQp, VerbsError>;
    /// A UD queue pair's address (LID, GID, QPN), to publish.
    fn ud_addr(&self, qp: &Self::UdQp) -> QpAddr;
    /// Creates an address handle to the port of `remote` (its LID, and its GID when
    /// not zero, through the local GID at `gid_index`).
    ///
    /// # Errors
    /// The failing `ibv_create_ah`.
    fn create_ah(&self, remote: &QpAddr, gid_index: u8) -> Result<Self::Ah, VerbsError>;
    /// Posts one signaled SEND of `sge` on the UD queue pair `qp` to `dest` through `ah`
    /// (inline when `inline`: copied at post time, `lkey` unused).
    ///
    /// # Safety
    /// As [`post_send`](Self::post_send): unless `inline`, the buffer stays valid until
    /// the request's completion has been polled or the queue pair is destroyed, in a
    /// region registered with `lkey`.
    ///
    /// # Errors
    /// [`VerbsError::QueueFull`] when the send queue is full, [`VerbsError::Invalid`]
    /// for a request the provider refuses.
    unsafe fn post_ud_send(
        &self,
        qp: &Self::UdQp,
        ah: &Self::Ah,
        dest: UdDest,
        wr_id: u64,
        sge: Sge,
        inline: bool,
    ) -> Result<(), VerbsError>;
    /// Posts a receive of one buffer (at least [`GRH_LEN`] bytes more than the largest
    /// datagram) to the UD queue pair's receive queue.
    ///
    /// # Safety
    /// As [`post_srq_recv`](Self::post_srq_recv).
    ///
    /// # Errors
    /// [`VerbsError::QueueFull`] when the queue is full.
    unsafe fn post_ud_recv(&self, qp: &Self::UdQp, wr_id: u64, sge: Sge) -> Result<(), VerbsError>;
}
