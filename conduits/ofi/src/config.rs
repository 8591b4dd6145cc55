//! Settings: the `GEX_OFI_*` variables of one rank (read once at open, checked, with
//! errors naming the variable), the public defaults, and the fixed sizes of an
//! endpoint's resources.

use gex_core::InitError;
use gex_core::spi::OpenParams;
use std::time::Duration;

use crate::mr::{DEFAULT_MR_CACHE_BYTES, DEFAULT_MR_CACHE_ENTRIES};
use gex_core::config::EnvVar;

/// Default provider (`GEX_OFI_PROVIDER`): libfabric's `tcp`, which offers RDM endpoints
/// through the `ofi_rxm` utility provider (`tcp;ofi_rxm`).
pub const DEFAULT_PROVIDER: &str = "tcp";
/// Default largest Medium (and Long) payload (`GEX_OFI_MAX_MEDIUM`).
pub const DEFAULT_MAX_MEDIUM: usize = 8192;
/// Default request credits per ordered endpoint pair (`GEX_OFI_CREDITS`).
pub const DEFAULT_CREDITS: u16 = 64;

/// Most AM arguments (the wire format carries up to 32; gex asks for at least 16).
pub(crate) const MAX_ARGS: usize = 16;
/// Send bounce buffers per endpoint.
pub(crate) const SEND_BUFS: usize = 64;
/// Receive buffers per endpoint without multi-receive.
pub(crate) const RECV_BUFS: usize = 128;
/// Multi-receive buffers per endpoint.
pub(crate) const MULTI_BUFS: usize = 4;
/// Completion queue entries.
pub(crate) const CQ_SIZE: usize = 4096;
/// Native RMA slots per endpoint: operations in flight, or complete and not yet
/// reported by `native_test`.
pub(crate) const RMA_SLOTS: usize = 1024;
/// Progress passes in a row without a completion after which an endpoint probes the
/// peers it waits on (`Tx::probe`); `block` counts a fruitless sleep as
/// `PROBE_AFTER / 64` passes. About 0.1-0.3 s of tcp polling, or 64 sleeps.
pub(crate) const PROBE_AFTER: u32 = 1 << 18;
/// A liveness probe still pending after this long means its peer is gone.
pub(crate) const PROBE_DEADLINE: Duration = Duration::from_secs(5);
/// Longest the wire-up in `open` may take before it reports which peers are silent.
pub(crate) const WIREUP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `finalize` waits for a closed endpoint's own operations (sends, native RMA)
/// to complete before it joins the job-wide barrier anyway.
pub(crate) const DRAIN_LIMIT: Duration = Duration::from_secs(30);

/// An `InitError` of this conduit.
pub(crate) fn conduit_err(msg: impl Into<String>) -> InitError {
    InitError::Conduit {
        conduit: "ofi",
        msg: msg.into(),
    }
}

/// The `GEX_OFI_*` settings of one rank, read and checked at open.
#[derive(Debug)]
pub(crate) struct Settings {
    pub(crate) provider: Option<String>,
    pub(crate) provider_shown: String,
    pub(crate) domain: Option<String>,
    pub(crate) max_medium: usize,
    pub(crate) credits: u16,
    pub(crate) multi_recv: bool,
    pub(crate) rma: bool,
    pub(crate) atomics: bool,
    /// `GEX_OFI_MR_LOCAL=1`: act as if the provider required `FI_MR_LOCAL` (testing aid).
    pub(crate) force_mr_local: bool,
    /// `GEX_OFI_RELAXED_PUTS` (default on): implicit-event puts are transmit-complete
    /// writes flushed by an ordered read, where the provider orders reads after writes.
    pub(crate) relaxed_puts: bool,
    /// `GEX_OFI_MR_CACHE_ENTRIES`, `GEX_OFI_MR_CACHE_BYTES`.
    pub(crate) mr_cache_entries: usize,
    pub(crate) mr_cache_bytes: usize,
}

/// Reads and checks this rank's `GEX_OFI_*` settings.
pub(crate) fn settings(params: &OpenParams<'_>) -> Result<Settings, InitError> {
    let c = params.config;
    let (provider, provider_shown) = match c.get("GEX_OFI_PROVIDER").map(str::trim) {
        Some("") | Some("auto") => (None, "any (libfabric's choice; FI_PROVIDER applies)".into()),
        Some(p) => (Some(p.to_string()), p.to_string()),
        None => match std::env::var("FI_PROVIDER") {
            // libfabric's own selection: let it filter.
            Ok(p) if !p.trim().is_empty() => (None, format!("FI_PROVIDER={p}")),
            _ => (
                Some(DEFAULT_PROVIDER.to_string()),
                DEFAULT_PROVIDER.to_string(),
            ),
        },
    };
    let domain = c
        .get("GEX_OFI_DOMAIN")
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(String::from);
    let max_medium = c.size("GEX_OFI_MAX_MEDIUM", DEFAULT_MAX_MEDIUM)?;
    if !(512..=(1 << 20)).contains(&max_medium) {
        return Err(InitError::Config(format!(
            "GEX_OFI_MAX_MEDIUM={max_medium}: must be between 512 and 1048576"
        )));
    }
    let mr_cache_entries = c.u64("GEX_OFI_MR_CACHE_ENTRIES", DEFAULT_MR_CACHE_ENTRIES as u64)?;
    if mr_cache_entries > 1 << 16 {
        return Err(InitError::Config(format!(
            "GEX_OFI_MR_CACHE_ENTRIES={mr_cache_entries}: must be at most 65536"
        )));
    }
    let credits = c.u64("GEX_OFI_CREDITS", u64::from(DEFAULT_CREDITS))?;
    if !(2..=4096).contains(&credits) {
        return Err(InitError::Config(format!(
            "GEX_OFI_CREDITS={credits}: must be between 2 and 4096"
        )));
    }
    Ok(Settings {
        provider,
        provider_shown,
        domain,
        max_medium,
        credits: credits as u16,
        multi_recv: c.bool("GEX_OFI_MULTI_RECV", true)?,
        rma: c.bool("GEX_OFI_RMA", true)?,
        atomics: c.bool("GEX_OFI_ATOMICS", true)?,
        force_mr_local: c.bool("GEX_OFI_MR_LOCAL", false)?,
        relaxed_puts: c.bool("GEX_OFI_RELAXED_PUTS", true)?,
        mr_cache_entries: mr_cache_entries as usize,
        mr_cache_bytes: c.size("GEX_OFI_MR_CACHE_BYTES", DEFAULT_MR_CACHE_BYTES)?,
    })
}

/// The `GEX_*` settings of the ofi conduit (hybrid jobs are the hybrid conduit's:
/// `GEX_HYBRID`).
pub const ENV_VARS: &[EnvVar] = &[
    EnvVar {
        name: "GEX_OFI_PROVIDER",
        default: "tcp",
        doc: "ofi conduit: libfabric provider for RDM endpoints (tcp = tcp;ofi_rxm, shm, verbs, ...); auto lets libfabric choose (its FI_PROVIDER applies, and is used when this is unset).",
    },
    EnvVar {
        name: "GEX_OFI_DOMAIN",
        default: "",
        doc: "ofi conduit: libfabric domain or fabric name (lo, eth0, shm, ...); unset: lo when all ranks share a host, else the provider's first offer.",
    },
    EnvVar {
        name: "GEX_OFI_MAX_MEDIUM",
        default: "8192",
        doc: "ofi conduit: largest Medium (and, until native RMA, Long) payload, 512..=1048576; the job uses the smallest value of all ranks.",
    },
    EnvVar {
        name: "GEX_OFI_CREDITS",
        default: "64",
        doc: "ofi conduit: request credits per ordered endpoint pair (2..=4096); bounds unprocessed requests at a receiver and queued replies at a sender.",
    },
    EnvVar {
        name: "GEX_OFI_MULTI_RECV",
        default: "1",
        doc: "ofi conduit: 0 posts single receive buffers even when the provider offers FI_MULTI_RECV.",
    },
    EnvVar {
        name: "GEX_OFI_RMA",
        default: "1",
        doc: "ofi conduit: 0 leaves native RMA (fi_writemsg/fi_read) and atomics (fi_atomic) off, so gex-rma uses its AM reference path even when the provider offers FI_RMA/FI_ATOMIC.",
    },
    EnvVar {
        name: "GEX_OFI_ATOMICS",
        default: "1",
        doc: "ofi conduit: 0 leaves native atomics (fi_atomic) off while native RMA stays on, so gex-rma's atomic domains use AMs.",
    },
    EnvVar {
        name: "GEX_OFI_RELAXED_PUTS",
        default: "1",
        doc: "ofi conduit: 0 makes implicit-event puts ask for FI_DELIVERY_COMPLETE one by one, instead of transmit-complete writes flushed by one ordered read per destination at the sync (used only where the provider orders reads after writes).",
    },
    EnvVar {
        name: "GEX_OFI_MR_LOCAL",
        default: "0",
        doc: "ofi conduit, testing aid: 1 acts as if the provider required FI_MR_LOCAL (descriptors passed, local RMA buffers outside the segments registered on demand and cached) although it does not, so tcp and shm exercise that path.",
    },
    EnvVar {
        name: "GEX_OFI_MR_CACHE_ENTRIES",
        default: "256",
        doc: "ofi conduit, under FI_MR_LOCAL: registrations of local RMA buffers an endpoint keeps (0 to 65536); beyond it the least recently used idle client-region registrations are closed. 0 keeps none once idle.",
    },
    EnvVar {
        name: "GEX_OFI_MR_CACHE_BYTES",
        default: "1G",
        doc: "ofi conduit, under FI_MR_LOCAL: bytes of local RMA buffers an endpoint keeps registered (LRU eviction beyond it); a client region larger than this is not cached.",
    },
];
