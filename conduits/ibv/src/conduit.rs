//! The conduit object ([`Ibv`]), its settings, `open` (device selection, registration,
//! queue pairs, the address exchange and its checks) and the endpoint type ([`IbvEp`]),
//! which dispatches to the endpoint of the provider chosen at run time.
//!
//! # Safety
//! `unsafe impl Conduit for Ibv` / `ConduitEp for IbvEp`: endpoints are returned in index
//! order, each with a zero-filled segment of the layout's length owned by the conduit
//! (freed after every endpoint's resources: `Drop` empties the graves first); what peers
//! publish (endpoint counts, segment lengths, settings, addresses) is checked against the
//! layout and this rank's settings before any queue pair is connected; segments are
//! reached by peers only through their registration (remote key and range checked by
//! the NIC), so `peer_segment` and `aux` answer `None`; Long payloads are written by
//! the sender's RDMA WRITE before its SEND, which an RC queue pair delivers after it;
//! native operations go through bounce buffers (see `crate::ep`).
#![allow(unsafe_code)]

use crate::emu::EmuVerbs;
use crate::ep::{Counters, Ep, PeerInfo, Shape, Unconnected};
use crate::mem::Mem;
use crate::verbs::{ConnectParams, QpAddr, Verbs, VerbsError};
use gex_core::boot::{BootError, Bootstrap};
use gex_core::config::EnvVar;
use gex_core::spi::{
    AtomicBase, AtomicKind, Capabilities, Conduit, ConduitEp, ConduitError, Deliver, FarConduit,
    FarEp, FarPoll, JobLayout, Limits, NativeAtomic, NativeResult, OpenParams, OutMsg, SegRange,
    SharedSegments,
};
use gex_core::{EpAddr, EpIndex, InitError, Injected};
use std::any::Any;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The `GEX_IBV_*` settings.
pub const ENV_VARS: &[EnvVar] = &[
    EnvVar {
        name: "GEX_IBV_PROVIDER",
        default: "auto",
        doc: "ibv conduit: verbs provider: verbs (libibverbs; needs the crate feature `verbs`), emu (the software RC emulation across the processes of one host), auto (verbs when built with it and a device is found, else an error naming both).",
    },
    EnvVar {
        name: "GEX_IBV_DEVICE",
        default: "",
        doc: "ibv conduit: RDMA device name (mlx5_0, rxe0, ...); unset: the first device with an active port.",
    },
    EnvVar {
        name: "GEX_IBV_PORT",
        default: "1",
        doc: "ibv conduit: port number of the device (from 1).",
    },
    EnvVar {
        name: "GEX_IBV_GID_INDEX",
        default: "0",
        doc: "ibv conduit: GID table index used to address queue pairs (RoCE; e.g. the RoCE v2 IPv4 entry); ignored on InfiniBand.",
    },
    EnvVar {
        name: "GEX_IBV_MAX_MEDIUM",
        default: "8192",
        doc: "ibv conduit: largest Medium and Long payload of one AM, 512..=1048576 (the size of every receive buffer, less the header); must be equal on every rank.",
    },
    EnvVar {
        name: "GEX_IBV_CREDITS",
        default: "16",
        doc: "ibv conduit: request (and reply) credits per ordered endpoint pair, 2..=1024; the shared receive queue holds 2 x credits buffers per peer endpoint; must be equal on every rank.",
    },
    EnvVar {
        name: "GEX_IBV_CONNECT",
        default: "lazy",
        doc: "ibv conduit: lazy (each endpoint's RC queue pair to a peer endpoint is made on first contact, through a UD connection channel served by a thread per endpoint) or eager (one per peer endpoint, all made and connected at open); must be equal on every rank.",
    },
    EnvVar {
        name: "GEX_IBV_CONNECT_TIMEOUT",
        default: "60s",
        doc: "ibv conduit, lazy wire-up: how long a connection may take before operations to that peer fail with an error naming it (e.g. 500ms, 60s).",
    },
    EnvVar {
        name: "GEX_IBV_REG_CACHE",
        default: "16",
        doc: "ibv conduit: registrations of buffers the application registered (Ibv::register) each endpoint keeps for large native puts and gets, least recently used evicted first; 0: none kept (each transfer registers its buffer).",
    },
    EnvVar {
        name: "GEX_IBV_RMA",
        default: "1",
        doc: "ibv conduit: 0 leaves native RMA (RDMA WRITE/READ) and NIC atomics off, so gex-rma uses its AM reference path.",
    },
    EnvVar {
        name: "GEX_IBV_ATOMICS",
        default: "1",
        doc: "ibv conduit: 0 leaves NIC atomics (fetch-add, compare-swap on 64-bit words) off while native RMA stays on.",
    },
];

/// Which verbs provider the conduit runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Provider {
    /// The software RC emulation ([`crate::emu`]).
    Emu,
    /// libibverbs (the crate feature `verbs`).
    Verbs,
}

/// The ibverbs conduit. See the [crate documentation](crate).
pub struct Ibv {
    provider: Provider,
    device: String,
    /// Resources of dropped endpoints, kept until `finalize`'s barrier has returned
    /// (peers' operations on them complete meanwhile); emptied before the segments go.
    graves: Mutex<Vec<Box<dyn Any + Send>>>,
    stats: Arc<Counters>,
    /// Per endpoint made at open, over the emulation: its device's fault injector.
    faults: Vec<crate::emu::FaultHandle>,
    /// The segments (own allocations), or none when the segments are a hybrid
    /// conduit's near part's (`shared`, kept alive as long as this conduit).
    #[expect(
        dead_code,
        reason = "owns the segments' memory until the conduit is dropped"
    )]
    segs: Vec<Mem>,
    shared: Option<SharedSegments>,
}

/// Native operations an [`Ibv`] conduit's endpoints started ([`Ibv::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct IbvStats {
    /// RDMA WRITEs of native puts.
    pub native_puts: u64,
    /// RDMA READs of native gets.
    pub native_gets: u64,
    /// NIC atomics (fetch-add, compare-swap).
    pub native_atomics: u64,
    /// Large transfers that used a cached registration of a registered buffer.
    pub reg_cache_hits: u64,
    /// Registrations made for the cache (a registered buffer's first large transfer
    /// on an endpoint, or after its eviction).
    pub reg_cache_misses: u64,
    /// Cached registrations evicted to make room.
    pub reg_cache_evictions: u64,
}

/// A buffer registered for large native transfers ([`Ibv::register`]); unregistered
/// when dropped. Dereferences to the buffer.
pub struct Registered<'a> {
    buf: &'a mut [u8],
    id: u64,
    stats: Arc<Counters>,
}

impl std::fmt::Debug for Registered<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registered")
            .field("addr", &self.buf.as_ptr())
            .field("len", &self.buf.len())
            .finish()
    }
}

impl std::ops::Deref for Registered<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.buf
    }
}

impl std::ops::DerefMut for Registered<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.buf
    }
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        use gex_sync::atomic::Ordering;
        let reg = &self.stats.registry;
        let mut entries = reg.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|e| e.id != self.id);
        reg.count.store(entries.len() as u64, Ordering::Relaxed);
        // Endpoints see the change before starting their next transfer through the
        // cache (Acquire there), and look the entry up under this lock.
        reg.generation.fetch_add(1, Ordering::Release);
    }
}

impl std::fmt::Debug for Ibv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ibv")
            .field("provider", &self.provider)
            .field("device", &self.device)
            .finish_non_exhaustive()
    }
}

impl Drop for Ibv {
    fn drop(&mut self) {
        // Deregister and destroy every endpoint's resources before the segments go.
        self.graves
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

impl Ibv {
    /// The provider this conduit runs on.
    pub fn provider(&self) -> Provider {
        self.provider
    }
    /// The device opened.
    pub fn device(&self) -> &str {
        &self.device
    }
    /// Injects `fault` into the emulated device of endpoint `ep` (tests of error
    /// completions: a wrong remote key, a network gone); false when the conduit does
    /// not run on the emulation or the endpoint is not there.
    pub fn emu_inject(&self, ep: EpIndex, fault: crate::emu::Fault) -> bool {
        self.faults
            .get(ep as usize)
            .is_some_and(|f| f.inject(fault))
    }

    /// What the emulated device of endpoint `ep` made so far (queue pairs, memory
    /// registrations, datagrams); `None` when the conduit does not run on the
    /// emulation or the endpoint's device is gone.
    pub fn emu_counts(&self, ep: EpIndex) -> Option<crate::emu::EmuCounts> {
        self.faults.get(ep as usize)?.counts()
    }

    /// Whether the conduit was opened as the far part of a hybrid conduit, on the near
    /// part's segments.
    pub fn is_far_part(&self) -> bool {
        self.shared.is_some()
    }

    /// Native operations started so far by this conduit's endpoints.
    pub fn stats(&self) -> IbvStats {
        use gex_sync::atomic::Ordering::Relaxed;
        IbvStats {
            native_puts: self.stats.puts.load(Relaxed),
            native_gets: self.stats.gets.load(Relaxed),
            native_atomics: self.stats.atomics.load(Relaxed),
            reg_cache_hits: self.stats.reg_hits.load(Relaxed),
            reg_cache_misses: self.stats.reg_misses.load(Relaxed),
            reg_cache_evictions: self.stats.reg_evictions.load(Relaxed),
        }
    }

    /// Registers `buf` for large native puts and gets (above 64 KiB, which go without
    /// a bounce buffer): while the returned guard lives, a transfer from or into a
    /// range of it uses a registration each endpoint makes on first use and keeps
    /// (`GEX_IBV_REG_CACHE` of them, least recently used evicted), instead of
    /// registering the buffer for every transfer. The guard borrows the buffer, so it
    /// cannot be freed meanwhile; dropping it unregisters it: no transfer started
    /// after that uses the registrations, which endpoints drop once the transfers
    /// using them completed. Transfers from memory that is not registered this way
    /// register it for the transfer alone, as without the cache (nothing is cached on
    /// its address: freed and reused memory is never served a stale registration).
    pub fn register<'a>(&self, buf: &'a mut [u8]) -> Registered<'a> {
        use gex_sync::atomic::Ordering::Relaxed;
        let reg = &self.stats.registry;
        let id = reg.next_id.fetch_add(1, Relaxed) + 1;
        let mut entries = reg.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.push(crate::ep::RegEntry {
            id,
            addr: buf.as_mut_ptr() as usize,
            len: buf.len(),
        });
        reg.count.store(entries.len() as u64, Relaxed);
        drop(entries);
        Registered {
            buf,
            id,
            stats: self.stats.clone(),
        }
    }
}

enum AnyEp {
    Emu(Ep<EmuVerbs>),
    #[cfg(feature = "verbs")]
    Verbs(Ep<crate::real::RdmaVerbs>),
}

/// An endpoint of the ibv conduit.
pub struct IbvEp {
    ep: Option<AnyEp>,
    conduit: Arc<Ibv>,
}

impl std::fmt::Debug for IbvEp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IbvEp")
            .field("index", &self.index())
            .finish_non_exhaustive()
    }
}

/// `$body` on the provider's endpoint `$e` of `$ep` (an `Option<&AnyEp>` or
/// `Option<&mut AnyEp>`, `None` once closed).
macro_rules! dispatch_on {
    ($ep:expr, $e:ident => $body:expr) => {
        match $ep.expect("endpoint alive") {
            AnyEp::Emu($e) => $body,
            #[cfg(feature = "verbs")]
            AnyEp::Verbs($e) => $body,
        }
    };
}
macro_rules! dispatch {
    ($self:expr, $e:ident => $body:expr) => {
        dispatch_on!($self.ep.as_mut(), $e => $body)
    };
}
macro_rules! dispatch_ref {
    ($self:expr, $e:ident => $body:expr) => {
        dispatch_on!($self.ep.as_ref(), $e => $body)
    };
}

impl Drop for IbvEp {
    fn drop(&mut self) {
        if let Some(ep) = self.ep.take() {
            let b: Box<dyn Any + Send> = match ep {
                AnyEp::Emu(e) => Box::new(e),
                #[cfg(feature = "verbs")]
                AnyEp::Verbs(e) => Box::new(e),
            };
            self.conduit
                .graves
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(b);
        }
    }
}

impl IbvEp {
    /// Whether work requests of this endpoint are in flight (hybrid: `FarEp::in_flight`).
    pub fn in_flight(&self) -> bool {
        dispatch_ref!(self, e => e.in_flight())
    }
}

fn conduit_err(msg: impl Into<String>) -> InitError {
    InitError::Conduit {
        conduit: Ibv::NAME,
        msg: msg.into(),
    }
}

const MAGIC: u32 = 0x6962_7631; // "ibv1"

/// Reads the settings shared by the job.
fn shape(params: &OpenParams<'_>) -> Result<Shape, InitError> {
    let c = params.config;
    let max_medium = c.size("GEX_IBV_MAX_MEDIUM", 8192)?;
    if !(512..=1 << 20).contains(&max_medium) {
        return Err(InitError::Config(format!(
            "GEX_IBV_MAX_MEDIUM={max_medium}: must be within 512..=1048576"
        )));
    }
    let credits = c.size("GEX_IBV_CREDITS", 16)?;
    if !(2..=1024).contains(&credits) {
        return Err(InitError::Config(format!(
            "GEX_IBV_CREDITS={credits}: must be within 2..=1024"
        )));
    }
    let rma = c.bool("GEX_IBV_RMA", true)?;
    let atomics = c.bool("GEX_IBV_ATOMICS", true)?;
    let reg_cache = c.size("GEX_IBV_REG_CACHE", 16)?;
    let lazy = match c.get("GEX_IBV_CONNECT").unwrap_or("lazy") {
        "lazy" | "" => true,
        "eager" => false,
        other => {
            return Err(InitError::Config(format!(
                "GEX_IBV_CONNECT={other}: expected lazy or eager"
            )));
        }
    };
    let connect_timeout = c.duration("GEX_IBV_CONNECT_TIMEOUT", Duration::from_secs(60))?;
    if connect_timeout.is_zero() {
        return Err(InitError::Config(
            "GEX_IBV_CONNECT_TIMEOUT=0: must be positive".into(),
        ));
    }
    let gid_index = c.size("GEX_IBV_GID_INDEX", 0)?;
    let gid_index = u8::try_from(gid_index).map_err(|_| {
        InitError::Config(format!(
            "GEX_IBV_GID_INDEX={gid_index}: must be within 0..=255"
        ))
    })?;
    Ok(Shape {
        lazy,
        connect_timeout,
        gid_index,
        max_medium,
        credits: credits as u32,
        send_slots: 64,
        native_rma: rma,
        native_atomics: rma && atomics,
        reg_cache,
    })
}

/// What the conduit sees and would choose with `config` (`gex-info ibv`): the devices
/// libibverbs lists (or why there are none), the emulation, and the provider, device
/// and port `GEX_IBV_*` select.
pub fn probe(config: &gex_core::config::Config) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let port_line = |s: &mut String, p: &crate::verbs::PortInfo| {
        let _ = writeln!(
            s,
            "    port {}: {}, link layer {}, lid {}, mtu {}, {} GIDs",
            p.port,
            if p.active { "ACTIVE" } else { "not active" },
            p.link_layer,
            p.lid,
            p.mtu,
            p.gid_table_len
        );
    };
    #[cfg(feature = "verbs")]
    {
        let _ = writeln!(s, "libibverbs provider (verbs): built in");
        match crate::real::RdmaVerbs::devices() {
            Ok(d) if d.is_empty() => {
                let _ = writeln!(s, "  no RDMA device (ibv_get_device_list found none)");
            }
            Ok(d) => {
                for dev in d {
                    let _ = writeln!(s, "  device {}", dev.name);
                    for p in &dev.ports {
                        port_line(&mut s, p);
                    }
                }
            }
            Err(e) => {
                let _ = writeln!(s, "  no RDMA device: {e}");
            }
        }
    }
    #[cfg(not(feature = "verbs"))]
    {
        let _ = writeln!(
            s,
            "libibverbs provider (verbs): not built (cargo feature gex-conduit-ibv/verbs, gex/ibv-verbs)
  no RDMA device can be used by this build"
        );
    }
    let _ = writeln!(
        s,
        "software emulation (emu): device {}",
        crate::emu::DEVICE_NAME
    );
    for d in EmuVerbs::devices().unwrap_or_default() {
        for p in &d.ports {
            port_line(&mut s, p);
        }
    }
    let setting = |n: &str, d: &str| {
        config
            .get(n)
            .filter(|v| !v.is_empty())
            .unwrap_or(d)
            .to_string()
    };
    let _ = write!(
        s,
        "settings: GEX_IBV_PROVIDER={} GEX_IBV_DEVICE={} GEX_IBV_PORT={} GEX_IBV_GID_INDEX={}
would choose: ",
        setting("GEX_IBV_PROVIDER", "auto"),
        setting("GEX_IBV_DEVICE", "(first)"),
        setting("GEX_IBV_PORT", "1"),
        setting("GEX_IBV_GID_INDEX", "0"),
    );
    match choose_provider(config.get("GEX_IBV_PROVIDER")) {
        Ok(Provider::Emu) => {
            let _ = writeln!(
                s,
                "the software emulation ({}, port 1; ranks of one host only)",
                crate::emu::DEVICE_NAME
            );
        }
        Ok(Provider::Verbs) => {
            let _ = writeln!(
                s,
                "libibverbs, device {}",
                setting("GEX_IBV_DEVICE", "(the first)")
            );
        }
        Err(e) => {
            let _ = writeln!(s, "nothing: {e}");
        }
    }
    s
}

/// Chooses the provider from `GEX_IBV_PROVIDER`.
pub(crate) fn choose_provider(params_provider: Option<&str>) -> Result<Provider, InitError> {
    match params_provider.unwrap_or("auto") {
        "emu" => Ok(Provider::Emu),
        "verbs" => {
            if cfg!(feature = "verbs") {
                Ok(Provider::Verbs)
            } else {
                Err(InitError::Config(
                    "GEX_IBV_PROVIDER=verbs: this build has no libibverbs provider (cargo feature gex-conduit-ibv/verbs)".into(),
                ))
            }
        }
        "auto" => {
            #[cfg(feature = "verbs")]
            {
                match crate::real::RdmaVerbs::devices() {
                    Ok(d) if !d.is_empty() => return Ok(Provider::Verbs),
                    _ => {}
                }
            }
            Err(conduit_err(format!(
                "no RDMA device{}; GEX_IBV_PROVIDER=emu runs the software emulation (one host)",
                if cfg!(feature = "verbs") {
                    " found by ibv_get_device_list"
                } else {
                    " (built without the `verbs` feature)"
                }
            )))
        }
        other => Err(InitError::Config(format!(
            "GEX_IBV_PROVIDER={other}: expected auto, verbs or emu"
        ))),
    }
}

// SAFETY: the module's `# Safety`.
unsafe impl Conduit for Ibv {
    type Ep = IbvEp;
    const NAME: &'static str = "ibv";
    const ENV_VARS: &'static [EnvVar] = ENV_VARS;

    fn open(
        boot: &mut dyn Bootstrap,
        params: &OpenParams<'_>,
    ) -> Result<(Arc<Ibv>, Vec<IbvEp>), InitError> {
        open(boot, params, None)
    }

    /// Runs the barrier; the dropped endpoints' resources (in the graves) stay alive
    /// meanwhile, so peers' operations on them complete: the NIC (or the emulation's
    /// threads) serves RDMA without this rank's help, and their receive queues stay
    /// posted.
    fn finalize(
        &self,
        barrier: &mut dyn FnMut() -> Result<(), BootError>,
    ) -> Result<(), BootError> {
        let r = barrier();
        self.graves
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        r
    }
}

/// The far (network) part of a hybrid conduit (`Hybrid<Smp, Ibv>`): ranks of other
/// hosts through the device, ranks of this host through the near part. Opened on the
/// near part's segments, which every endpoint registers like its own, so RDMA from
/// other hosts lands in memory the neighbours map; queue pairs to the neighbours exist
/// too (NIC atomic domains use the NIC for every peer).
// SAFETY: the module's `# Safety`; `open_far` registers and keeps `segments`.
unsafe impl FarConduit for Ibv {
    fn open_far(
        boot: &mut dyn Bootstrap,
        params: &OpenParams<'_>,
        segments: SharedSegments,
    ) -> Result<(Arc<Ibv>, Vec<IbvEp>), InitError> {
        open(boot, params, Some(segments))
    }
}

// SAFETY: the module's `# Safety`.
unsafe impl FarEp for IbvEp {
    fn in_flight(&self) -> bool {
        dispatch_ref!(self, e => e.in_flight() || !e.idle() || e.connecting())
    }
    fn wants_progress(&self) -> bool {
        dispatch_ref!(self, e => e.in_flight() || !e.idle() || e.has_incoming() || e.connecting())
    }
    fn poll_far<D: Deliver>(&mut self, d: &mut D, budget: usize) -> FarPoll {
        let (delivered, active) = dispatch!(self, e => e.poll_active(d, budget));
        FarPoll { delivered, active }
    }
}

fn open(
    boot: &mut dyn Bootstrap,
    params: &OpenParams<'_>,
    shared: Option<SharedSegments>,
) -> Result<(Arc<Ibv>, Vec<IbvEp>), InitError> {
    let provider = choose_provider(params.config.get("GEX_IBV_PROVIDER"))?;
    match provider {
        Provider::Emu => open_with::<EmuVerbs>(
            boot,
            params,
            provider,
            AnyEp::Emu,
            |v| Some(v.fault_handle()),
            shared,
        ),
        #[cfg(feature = "verbs")]
        Provider::Verbs => open_with::<crate::real::RdmaVerbs>(
            boot,
            params,
            provider,
            AnyEp::Verbs,
            |_| None,
            shared,
        ),
        #[cfg(not(feature = "verbs"))]
        Provider::Verbs => unreachable!("refused by choose_provider"),
    }
}

/// Opens one device context per endpoint (`GEX_IBV_DEVICE`, or the first; port
/// `port`), checks that its port is active, and makes the endpoint's registrations and
/// queue pairs over its segment in `segs` (`npeers` peer endpoints): the endpoints
/// before the address exchange, and the device's name.
fn open_endpoints<V: Verbs>(
    device: Option<&str>,
    port: u8,
    gid_index: u8,
    segs: &[(NonNull<u8>, usize)],
    shape: &Shape,
    npeers: usize,
) -> Result<(Vec<Unconnected<V>>, String), InitError> {
    let mut uncon = Vec::with_capacity(segs.len());
    let mut device_name = String::new();
    for (i, s) in segs.iter().enumerate() {
        let v = V::open(device, port, gid_index as u32).map_err(|e| match e {
            VerbsError::NoDevice(_) => conduit_err(format!(
                "{e}: GEX_IBV_DEVICE={}",
                device.unwrap_or("(first)")
            )),
            e => conduit_err(format!(
                "opening the device (GEX_IBV_DEVICE, GEX_IBV_PORT={port}): {e}"
            )),
        })?;
        device_name = v.device_name().to_owned();
        if !v.port().active {
            return Err(conduit_err(format!(
                "port {port} of {device_name} is not active (GEX_IBV_PORT)"
            )));
        }
        let u = Unconnected::new(v, *s, shape, npeers)
            .map_err(|e| conduit_err(format!("endpoint {i}: {e}")))?;
        uncon.push(u);
    }
    Ok((uncon, device_name))
}

/// Bytes of an address blob's head: magic, provider, largest Medium, credits, endpoint
/// count, wire-up mode.
const BLOB_HEAD: usize = 4 + 1 + 4 + 4 + 2 + 1;
/// Bytes per endpoint in an address blob before its queue pair addresses: segment
/// (address, length, key) and credit words (address, key).
const BLOB_PER_EP: usize = 8 + 8 + 4 + 8 + 4;

/// This rank's address blob: magic, provider, settings, endpoint count; per endpoint
/// its segment, credit words and one queue pair address per peer endpoint (lazy
/// wire-up: the address of its UD queue pair).
fn encode_blob<V: Verbs>(provider: Provider, shape: &Shape, uncon: &[Unconnected<V>]) -> Vec<u8> {
    let neps = uncon.len();
    let mut blob = Vec::new();
    blob.extend_from_slice(&MAGIC.to_le_bytes());
    blob.push(provider as u8);
    blob.extend_from_slice(&(shape.max_medium as u32).to_le_bytes());
    blob.extend_from_slice(&shape.credits.to_le_bytes());
    blob.extend_from_slice(&(neps as u16).to_le_bytes());
    blob.push(u8::from(shape.lazy));
    for u in uncon {
        let (sa, sl, sk, ca, ck) = u.published();
        blob.extend_from_slice(&sa.to_le_bytes());
        blob.extend_from_slice(&sl.to_le_bytes());
        blob.extend_from_slice(&sk.to_le_bytes());
        blob.extend_from_slice(&ca.to_le_bytes());
        blob.extend_from_slice(&ck.to_le_bytes());
        // Lazy: the UD queue pair's address; eager: one RC address per peer endpoint.
        match u.ud_addr() {
            Some(a) => a.encode(&mut blob),
            None => {
                for qp in &u.qps {
                    u.res.v.qp_addr(qp).encode(&mut blob);
                }
            }
        }
    }
    blob
}

/// Decodes rank `r`'s address blob `b`, checked against the layout and this rank's
/// settings (`shape`, `provider`) before anything is used: its endpoints' segments and
/// credit words, and their queue pair addresses (one per peer endpoint of `npeers`,
/// or one UD address with lazy wire-up).
fn decode_blob(
    r: usize,
    b: &[u8],
    layout: &JobLayout,
    shape: &Shape,
    provider: Provider,
    npeers: usize,
) -> Result<(Vec<PeerInfo>, Vec<Vec<QpAddr>>), InitError> {
    let addrs_per_ep = if shape.lazy { 1 } else { npeers };
    let mut infos = Vec::new();
    let mut qpaddrs = Vec::new();
    let bad = |what: String| conduit_err(format!("rank {r} published {what}"));
    let eps = layout.eps[r] as usize;
    let want = BLOB_HEAD + eps * (BLOB_PER_EP + addrs_per_ep * QpAddr::LEN);
    if b.len() >= BLOB_HEAD && b[15] != u8::from(shape.lazy) {
        return Err(bad(format!(
            "GEX_IBV_CONNECT={}; this rank has {} (it must be equal)",
            if b[15] == 0 { "eager" } else { "lazy" },
            if shape.lazy { "lazy" } else { "eager" }
        )));
    }
    if b.len() != want {
        return Err(bad(format!(
            "{} bytes of addresses, {want} expected for {eps} endpoints and {npeers} peers",
            b.len()
        )));
    }
    if u32::from_le_bytes(b[0..4].try_into().expect("4")) != MAGIC {
        return Err(bad("a blob that is not the ibv conduit's".into()));
    }
    if b[4] != provider as u8 {
        return Err(bad(
            "another verbs provider (GEX_IBV_PROVIDER differs between ranks)".into(),
        ));
    }
    let mm = u32::from_le_bytes(b[5..9].try_into().expect("4")) as usize;
    let cr = u32::from_le_bytes(b[9..13].try_into().expect("4"));
    if mm != shape.max_medium || cr != shape.credits {
        return Err(bad(format!(
            "GEX_IBV_MAX_MEDIUM={mm}, GEX_IBV_CREDITS={cr}; this rank has {} and {} (they must be equal)",
            shape.max_medium, shape.credits
        )));
    }
    let ne = u16::from_le_bytes(b[13..15].try_into().expect("2")) as usize;
    if ne != eps {
        return Err(bad(format!("{ne} endpoints, the layout says {eps}")));
    }
    let mut at = BLOB_HEAD;
    for e in 0..eps {
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8"));
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4"));
        let sl = u64_at(at + 8);
        if sl != layout.seg_len[r] as u64 {
            return Err(bad(format!(
                "a segment of {sl} bytes for endpoint {e}, the layout says {}",
                layout.seg_len[r]
            )));
        }
        infos.push(PeerInfo {
            addr: EpAddr::new(r as u32, e as u16),
            seg_addr: u64_at(at),
            seg_len: sl as usize,
            seg_rkey: u32_at(at + 16),
            credit_addr: u64_at(at + 20),
            credit_rkey: u32_at(at + 28),
        });
        at += BLOB_PER_EP;
        let addrs = (0..addrs_per_ep)
            .map(|k| {
                QpAddr::decode(&b[at + k * QpAddr::LEN..at + (k + 1) * QpAddr::LEN])
                    .expect("checked length")
            })
            .collect();
        at += addrs_per_ep * QpAddr::LEN;
        qpaddrs.push(addrs);
    }
    Ok((infos, qpaddrs))
}

/// `GEX_IBV_DEVICE` (none: the first device) and `GEX_IBV_PORT` (1..=255).
fn device_and_port(c: &gex_core::config::Config) -> Result<(Option<String>, u8), InitError> {
    let device = c
        .get("GEX_IBV_DEVICE")
        .filter(|d| !d.is_empty())
        .map(str::to_owned);
    let port = c.size("GEX_IBV_PORT", 1)?;
    let port = u8::try_from(port)
        .ok()
        .filter(|p| *p >= 1)
        .ok_or_else(|| InitError::Config(format!("GEX_IBV_PORT={port}: must be within 1..=255")))?;
    Ok((device, port))
}

/// An endpoint's segment: its start and length.
type SegPtr = (NonNull<u8>, usize);

/// This rank's `neps` segments of `seg_len` bytes: allocated here (owned: the first
/// vector), or, as the far part of a hybrid conduit, the near part's segments
/// (zero-filled, mapped by the neighbours), checked against the layout.
fn segments(
    shared: Option<&SharedSegments>,
    neps: usize,
    seg_len: usize,
) -> Result<(Vec<Mem>, Vec<SegPtr>), InitError> {
    let segs = match shared {
        Some(_) => Vec::new(),
        None => (0..neps)
            .map(|_| {
                Mem::new(seg_len).ok_or_else(|| {
                    conduit_err(format!("cannot allocate a segment of {seg_len} bytes"))
                })
            })
            .collect::<Result<Vec<_>, _>>()?,
    };
    let seg_ptrs: Vec<SegPtr> = match shared {
        Some(sh) => (0..neps)
            .map(|i| {
                let (p, len) = sh.segment(i);
                if len < seg_len {
                    return Err(conduit_err(format!(
                        "the near part's segment of endpoint {i} has {len} bytes, the layout says {seg_len}"
                    )));
                }
                Ok((p, seg_len))
            })
            .collect::<Result<Vec<_>, _>>()?,
        None => segs.iter().map(|m| (m.ptr(), seg_len)).collect(),
    };
    Ok((segs, seg_ptrs))
}

fn open_with<V: Verbs>(
    boot: &mut dyn Bootstrap,
    params: &OpenParams<'_>,
    provider: Provider,
    wrap: impl Fn(Ep<V>) -> AnyEp,
    fault_handle: impl Fn(&V) -> Option<crate::emu::FaultHandle>,
    shared: Option<SharedSegments>,
) -> Result<(Arc<Ibv>, Vec<IbvEp>), InitError> {
    let layout = params.layout;
    let rank = params.rank;
    let size = layout.size() as usize;
    let shape = shape(params)?;
    let (device, port) = device_and_port(params.config)?;
    let gid_index = shape.gid_index;

    let mut base = Vec::with_capacity(size);
    let mut total = 0u32;
    for r in 0..size {
        base.push(total);
        total += layout.eps[r] as u32;
    }
    if total > 0xff_ffff {
        return Err(conduit_err(format!(
            "{total} endpoints in the job, at most {}",
            0xff_ffff
        )));
    }
    let npeers = total as usize;
    let neps = layout.eps[rank as usize] as usize;
    let seg_len = layout.seg_len[rank as usize];

    // Segments, then per endpoint the device, registrations and queue pairs.
    let (segs, seg_ptrs) = segments(shared.as_ref(), neps, seg_len)?;
    let (uncon, device_name) = open_endpoints::<V>(
        device.as_deref(),
        port,
        gid_index,
        &seg_ptrs,
        &shape,
        npeers,
    )?;

    let blob = encode_blob(provider, &shape, &uncon);
    let blobs = boot.exchange(&blob)?;
    if blobs.len() != size {
        return Err(conduit_err(format!(
            "the address exchange returned {} blobs for {size} ranks",
            blobs.len()
        )));
    }
    // Decode and check every peer's blob against the layout before anything is used.
    let mut infos = Vec::with_capacity(npeers);
    let mut qpaddrs: Vec<Vec<QpAddr>> = Vec::with_capacity(npeers);
    for (r, b) in blobs.iter().enumerate() {
        let (i, q) = decode_blob(r, b, layout, &shape, provider, npeers)?;
        infos.extend(i);
        qpaddrs.extend(q);
    }

    // Connect: endpoint i's queue pair to peer g meets peer g's queue pair to i.
    let params_c = ConnectParams {
        retry_cnt: 7,
        rnr_retry: 7,
        gid_index,
    };
    for (i, u) in uncon.iter().enumerate() {
        let me = (base[rank as usize] as usize) + i;
        for (g, qp) in u.qps.iter().enumerate() {
            let remote = qpaddrs[g][me];
            u.res.v.connect(qp, &remote, &params_c).map_err(|e| {
                conduit_err(format!(
                    "endpoint {i}: connecting to rank {} endpoint {}: {e}",
                    infos[g].addr.rank, infos[g].addr.ep
                ))
            })?;
        }
    }
    // Eager: every queue pair is ready to receive before anyone sends. (Lazy: the UD
    // queue pairs posted their receives before the exchange.)
    if !shape.lazy {
        boot.barrier()?;
    }
    let ud_peers: Vec<QpAddr> = if shape.lazy {
        qpaddrs.iter().map(|a| a[0]).collect()
    } else {
        Vec::new()
    };

    let conduit = Arc::new(Ibv {
        provider,
        device: device_name,
        graves: Mutex::new(Vec::new()),
        stats: Arc::new(Counters::default()),
        faults: uncon
            .iter()
            .filter_map(|u| fault_handle(&u.res.v))
            .collect(),
        segs,
        shared,
    });
    let eps = uncon
        .into_iter()
        .enumerate()
        .map(|(i, u)| {
            let ep = u
                .into_ep(
                    i as EpIndex,
                    rank,
                    base.clone(),
                    infos.clone(),
                    ud_peers.clone(),
                    shape,
                    conduit.stats.clone(),
                )
                .map_err(|e| conduit_err(format!("endpoint {i}: {e}")))?;
            Ok(IbvEp {
                ep: Some(wrap(ep)),
                conduit: conduit.clone(),
            })
        })
        .collect::<Result<Vec<_>, InitError>>()?;
    Ok((conduit, eps))
}

// SAFETY: the module's `# Safety`.
unsafe impl ConduitEp for IbvEp {
    fn index(&self) -> EpIndex {
        dispatch_ref!(self, e => e.index())
    }
    fn capabilities(&self) -> Capabilities {
        dispatch_ref!(self, e => e.capabilities())
    }
    fn limits(&self, _dst: EpAddr) -> Limits {
        dispatch_ref!(self, e => e.limits())
    }
    fn local_segment(&self) -> (NonNull<u8>, usize) {
        dispatch_ref!(self, e => e.local_segment())
    }
    fn peer_segment(&self, _dst: EpAddr) -> Option<(NonNull<u8>, usize)> {
        None
    }
    fn inject(&mut self, msg: &OutMsg<'_>, _imm: bool) -> Result<Injected, ConduitError> {
        dispatch!(self, e => e.inject(msg))
    }
    fn poll<D: Deliver>(&mut self, d: &mut D, budget: usize) -> usize {
        dispatch!(self, e => e.poll(d, budget))
    }
    fn has_incoming(&self) -> bool {
        dispatch_ref!(self, e => e.has_incoming())
    }
    /// Replies queued for want of a credit, a send buffer or a send queue entry, and
    /// credit words not yet written: only this endpoint's polls send them, so the core
    /// polls a dropped endpoint until they are gone. Without this, an endpoint dropped
    /// with a full reply window (its last replies queued) went to its grave unpolled and
    /// their requesters waited forever (the intermittent `multi_ep` hang).
    fn has_outgoing(&self) -> bool {
        dispatch_ref!(self, e => !e.idle())
    }
    fn block(&mut self, timeout: Duration) {
        dispatch!(self, e => e.block(timeout))
    }
    unsafe fn native_put(&mut self, to: SegRange, src: *const u8) -> NativeResult {
        // SAFETY: forwarded contract.
        dispatch!(self, e => unsafe { e.native_put(to, src) })
    }
    unsafe fn native_get(&mut self, from: SegRange, out: *mut u8) -> NativeResult {
        // SAFETY: forwarded contract.
        dispatch!(self, e => unsafe { e.native_get(from, out) })
    }
    fn native_atomic_supported(&self, kind: AtomicKind, base: AtomicBase, fetch: bool) -> bool {
        dispatch_ref!(self, e => e.native_atomic_supported(kind, base, fetch))
    }
    unsafe fn native_atomic(&mut self, op: &NativeAtomic, result: *mut u64) -> NativeResult {
        // SAFETY: forwarded contract.
        dispatch!(self, e => unsafe { e.native_atomic(op, result) })
    }
    fn native_test(&mut self, ticket: u64) -> bool {
        dispatch!(self, e => e.native_test(ticket))
    }
    fn describe(&self) -> String {
        dispatch_ref!(self, e => e.describe())
    }
}
