//! The report ([`OfiReport`]): what `open` chose for every operation and why, built
//! from the settings, the provider's offer and the plan of `open`; shown by
//! `gex-info ofi` and logged at `debug` level when the conduit opens.

use crate::config::{MULTI_BUFS, RECV_BUFS, RMA_SLOTS, SEND_BUFS, Settings};
use crate::fabric::flags;
use crate::open::Plan;
use crate::select::{Chosen, mr_mode_names};
use std::fmt;

/// How one operation is carried out, and why (see [`OfiReport`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathChoice {
    /// The operation (e.g. `"AM receive"`, `"RMA put/get"`).
    pub operation: &'static str,
    /// The path used.
    pub path: String,
    /// Why this path.
    pub reason: String,
}

/// What the ofi conduit opened and which path each operation uses, with the reason
/// (for `gex-info` and diagnostics). `Display` prints it as a table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OfiReport {
    provider: String,
    fabric: String,
    domain: String,
    threading: String,
    progress: String,
    mr_mode: Vec<&'static str>,
    paths: Vec<PathChoice>,
}

impl OfiReport {
    /// The libfabric provider opened, as libfabric names it (e.g. `tcp;ofi_rxm`, `shm`).
    pub fn provider(&self) -> &str {
        &self.provider
    }
    /// The fabric name (e.g. `127.0.0.1/32`).
    pub fn fabric(&self) -> &str {
        &self.fabric
    }
    /// The domain name (e.g. `lo`).
    pub fn domain(&self) -> &str {
        &self.domain
    }
    /// The memory-registration modes the provider requires (`FI_MR_*` names).
    pub fn mr_mode(&self) -> &[&'static str] {
        &self.mr_mode
    }
    /// Which path each operation uses, and why.
    pub fn paths(&self) -> &[PathChoice] {
        &self.paths
    }
    /// The path chosen for `operation`, if listed.
    pub fn path(&self, operation: &str) -> Option<&PathChoice> {
        self.paths.iter().find(|p| p.operation == operation)
    }
}

impl fmt::Display for OfiReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "ofi: provider {} (fabric {}, domain {}), provider threading {}, data progress {}, mr_mode [{}]",
            self.provider,
            self.fabric,
            self.domain,
            self.threading,
            self.progress,
            self.mr_mode.join(", ")
        )?;
        for p in &self.paths {
            writeln!(f, "  {}: {} -- {}", p.operation, p.path, p.reason)?;
        }
        Ok(())
    }
}

/// What the report is built from.
pub(crate) struct ReportIn<'a> {
    /// The settings.
    pub(crate) s: &'a Settings,
    /// The provider's offer and what it lacks.
    pub(crate) chosen: &'a Chosen,
    /// What `open` made of them.
    pub(crate) plan: &'a Plan,
    /// Whether every CQ got a wait object.
    pub(crate) waitable: bool,
    /// As the far part of a hybrid conduit: the ranks its near part serves.
    pub(crate) near: Option<&'a [u32]>,
}

/// The report of an opened conduit.
pub(crate) fn build(r: &ReportIn<'_>) -> OfiReport {
    let a = &r.chosen.attrs;
    let mut paths = am_paths(r);
    paths.extend(rma_paths(r));
    paths.extend(job_paths(r));
    OfiReport {
        provider: a.provider.clone(),
        fabric: a.fabric.clone(),
        domain: a.domain.clone(),
        threading: a.threading.to_string(),
        progress: a.data_progress.to_string(),
        mr_mode: mr_mode_names(a.mr_mode),
        paths,
    }
}

/// AM injection, receive and Long.
fn am_paths(r: &ReportIn<'_>) -> Vec<PathChoice> {
    let (s, chosen, a) = (r.s, r.chosen, &r.chosen.attrs);
    let (multi, rx_stride) = (r.plan.multi, r.plan.rx_stride);
    vec![
        PathChoice {
            operation: "AM injection",
            path: format!(
                "FI_MSG: fi_inject up to {} bytes, else fi_send from {SEND_BUFS} bounce buffers",
                a.inject_size
            ),
            reason: format!(
                "RDM endpoint per gex EP; {} request credits per endpoint pair",
                s.credits
            ),
        },
        PathChoice {
            operation: "AM receive",
            path: if multi {
                format!(
                    "FI_MULTI_RECV: {MULTI_BUFS} buffers of {} KiB",
                    rx_stride >> 10
                )
            } else {
                format!("{RECV_BUFS} pre-posted buffers of {rx_stride} bytes")
            },
            reason: match &chosen.multi_recv {
                Ok(()) => "provider offers FI_MULTI_RECV".into(),
                Err(why) => why.clone(),
            },
        },
        PathChoice {
            operation: "AM Long",
            path: "payload inside the FI_MSG message, copied into the segment by the receiver"
                .into(),
            reason: "Long over native RMA is not done yet, so max Long = max Medium".into(),
        },
    ]
}

/// RMA, relaxed puts, atomics and local buffers of RMA.
fn rma_paths(r: &ReportIn<'_>) -> Vec<PathChoice> {
    let (s, chosen, a) = (r.s, r.chosen, &r.chosen.attrs);
    let p = r.plan;
    let (rma, atomics, virt_addr, mr_local, relaxed) =
        (p.rma, p.atomics, p.virt_addr, p.mr_local, &p.relaxed);
    vec![
        PathChoice {
            operation: "RMA put/get",
            path: if rma {
                format!(
                    "native FI_RMA: fi_writemsg(FI_DELIVERY_COMPLETE) / fi_read, {RMA_SLOTS} in flight per EP, remote address = {}",
                    if virt_addr { "segment base + offset (FI_MR_VIRT_ADDR)" } else { "offset" }
                )
            } else {
                "reference: AM-based, in gex-rma".into()
            },
            reason: match &chosen.rma {
                Ok(()) => "provider offers FI_RMA; segments registered in every EP's domain, keys exchanged".into(),
                Err(why) => why.clone(),
            },
        },
        PathChoice {
            operation: "implicit-event puts",
            path: match relaxed {
                Ok(_) => "relaxed: fi_writemsg (transmit-complete), then at the sync one fi_read of 1 byte per destination, which the provider orders after the writes".into(),
                Err(_) if rma => "as RMA put: fi_writemsg(FI_DELIVERY_COMPLETE) each".into(),
                Err(_) => "reference: AM-based, in gex-rma".into(),
            },
            reason: match relaxed {
                Ok(_) if a.max_order_raw == 0 => "tcp: FI_ORDER_RMA_RAW, and one byte stream per peer in which each write's bytes are placed before the next request is read: one acknowledgement per sync and destination instead of one per put".into(),
                Ok(m) if *m == usize::MAX => "provider orders reads after writes of any size (FI_ORDER_RAW, max_order_raw_size): one acknowledgement per sync and destination instead of one per put".into(),
                Ok(m) => format!("provider orders reads after writes of up to {m} bytes (larger puts ask for FI_DELIVERY_COMPLETE)"),
                Err(why) => why.clone(),
            },
        },
        PathChoice {
            operation: "atomics",
            path: if atomics {
                "native FI_ATOMIC (fi_atomic / fi_fetch_atomic / fi_compare_atomic) for atomic domains whose every operation fi_*atomicvalid accepts; others AM-based".into()
            } else {
                "reference: AM-based".into()
            },
            reason: match &chosen.atomics {
                Ok(()) if mr_local => "provider offers FI_ATOMIC; FI_MR_LOCAL: operands and fetched values live in each EP's slot words, registered at open".into(),
                Ok(()) => "provider offers FI_ATOMIC".into(),
                Err(why) => why.clone(),
            },
        },
        PathChoice {
            operation: "RMA local buffers",
            path: if !rma {
                "none (no native RMA)".into()
            } else if mr_local {
                format!(
                    "descriptors: segments, bounce/receive buffers and atomic words registered at open; client regions (Ofi::register) registered per EP at first use and cached (LRU, at most {} registrations / {} bytes per EP); any other buffer registered for its operation (shared by operations on it in flight) and closed at completion",
                    s.mr_cache_entries, s.mr_cache_bytes
                )
            } else {
                "no registration needed (segment descriptors passed where the buffer lies in a segment)".into()
            },
            reason: if !rma {
                "native RMA is off".into()
            } else if a.mr_mode & flags::MR_LOCAL != 0 {
                "the provider requires FI_MR_LOCAL: every local buffer needs a registration's descriptor; a registration is kept only while its memory is provably unchanged (a live client region, or an operation in flight)".into()
            } else if mr_local {
                "GEX_OFI_MR_LOCAL=1 (testing aid): acting as if the provider required FI_MR_LOCAL, which it does not".into()
            } else {
                "the provider does not require FI_MR_LOCAL".into()
            },
        },
    ]
}

/// Ordering, waiting, neighbours and threading.
fn job_paths(r: &ReportIn<'_>) -> Vec<PathChoice> {
    let (chosen, waitable) = (r.chosen, r.waitable);
    let (far, wait_obj) = (r.plan.far, r.plan.wait_obj);
    vec![
        PathChoice {
            operation: "ordering",
            path: if chosen.ordered {
                "FI_ORDER_SAS".into()
            } else {
                "none".into()
            },
            reason: if chosen.ordered {
                "per-sender delivery order from the provider".into()
            } else {
                "provider does not offer FI_ORDER_SAS: messages from one sender may be delivered out of order".into()
            },
        },
        PathChoice {
            operation: "waiting",
            path: if waitable {
                "fi_cq_sread on the CQ's wait object".into()
            } else {
                "yield, no wait object".into()
            },
            reason: if far {
                "far part of a hybrid job: the hybrid conduit never sleeps in the CQ (it naps on the near part, watching both)"
                    .into()
            } else if !wait_obj {
                "wait policy is spin, and a wait object would cost every completion a signal".into()
            } else if waitable {
                "wait policy may block".into()
            } else {
                "provider offers no file-descriptor wait object for CQs".into()
            },
        },
        PathChoice {
            operation: "neighbours",
            path: match r.near {
                Some(near) => format!(
                    "the hybrid conduit's near part (shared memory) for AMs to ranks {near:?}; libfabric for AMs to the others, and for native RMA and atomics to every rank"
                ),
                None => "libfabric, like every other peer".into(),
            },
            reason: match r.near {
                Some(_) => "opened as the far part of a hybrid conduit (gex-conduit-hybrid; its reason() says why the job is hybrid)".into(),
                None => "not the far part of a hybrid job (GEX_CONDUIT=ofi runs the hybrid conduit, which decides: GEX_HYBRID)".into(),
            },
        },
        PathChoice {
            operation: "threading",
            path: "one domain, endpoint, CQ and AV per gex EP; FI_THREAD_DOMAIN".into(),
            reason:
                "endpoints driven by different threads share no libfabric object, as in seed 002"
                    .into(),
        },
    ]
}
