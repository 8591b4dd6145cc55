//! The conduit object ([`Ofi`]): what every endpoint of a rank shares (segments, the
//! peers' published segments, counters, the fabric, the graves of closed endpoints),
//! its public queries, and the [`Conduit`] implementation, whose `open` is the sequence
//! of steps in `crate::open` and whose `finalize` serves the graves around the final
//! barrier (`crate::close`); and [`FarConduit`], which opens it on a hybrid conduit's
//! shared segments.
//!
//! # Safety
//! `unsafe impl Conduit` and `FarConduit`: the segments its endpoints describe live in
//! the conduit (or in the `SharedSegments` it keeps), registered with the provider for
//! as long as it lives; what peers publish (addresses, keys, lengths) is checked
//! against the job layout in `crate::open` before use.
#![allow(unsafe_code)]

use crate::close::Grave;
use crate::ep::OfiEp;
use crate::fabric::{Fabric, Info};
use crate::mem::Mem;
use crate::mr::{MemRegion, MrCounters, Registry};
use crate::report::OfiReport;
use crate::runtime::Runtime;
use crate::stats::EpCounters;
use gex_core::EpIndex;
use gex_core::InitError;
use gex_core::boot::{BootError, Bootstrap};
use gex_core::spi::{Conduit, ConduitError, FarConduit, OpenParams, SharedSegments};
use std::sync::{Arc, Mutex};

/// A peer endpoint's segment as published at open: the address its offset 0 has in RMA
/// operations (its virtual address under `FI_MR_VIRT_ADDR`, else 0), length and the key
/// of its registration in its own domain (the domain of the endpoint RMA targets).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RemoteSeg {
    pub(crate) base: u64,
    /// Its length (published by its rank and checked against the job layout at open);
    /// native operations check their range against it.
    pub(crate) len: usize,
    pub(crate) key: u64,
}

/// The libfabric conduit. See the [crate documentation](crate).
#[derive(Debug)]
pub struct Ofi {
    pub(crate) report: OfiReport,
    pub(crate) segs: Vec<Mem>,
    pub(crate) seg_len: usize,
    pub(crate) remote: Vec<Option<RemoteSeg>>,
    pub(crate) counters: Vec<EpCounters>,
    /// Per endpoint: counters of its registrations of local buffers (shared with its
    /// cache, which outlives the endpoint in a grave).
    pub(crate) mr_counters: Vec<Arc<MrCounters>>,
    /// Client regions ([`Ofi::register`]).
    pub(crate) regions: Arc<Registry>,
    // Closed last: every domain (one per endpoint) is closed by then. Endpoints made at
    // run time open their domains from them.
    pub(crate) fabric: Fabric,
    pub(crate) info: Info,
    /// As the far part of a hybrid conduit: the near part's segments, which are this
    /// conduit's segments (kept mapped until every endpoint, and so every registration
    /// of them, is closed: see the `Drop` of [`Ofi`]).
    pub(crate) shared: Option<SharedSegments>,
    /// Network resources of dropped endpoints, served by `finalize` and closed after
    /// its barrier (or when the conduit is dropped without it). Declared last but
    /// emptied by `finalize`; see the `Drop` of [`Ofi`] for the case without it.
    pub(crate) graves: Mutex<Vec<Grave>>,
    /// What endpoints made at run time need: the job, the plan and settings of `open`,
    /// the directory of this rank's endpoints and their segments (freed with the
    /// conduit, after the graves: see `Drop`).
    pub(crate) rt: Runtime,
}

impl Drop for Ofi {
    fn drop(&mut self) {
        // Close the endpoints before the segments they registered are freed.
        self.graves
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

impl Ofi {
    /// What was opened and which path each operation uses, with reasons.
    pub fn report(&self) -> &OfiReport {
        &self.report
    }

    /// Makes `buf` a *client region* (see [`MemRegion`]), registered for native RMA and
    /// atomics for as long as the region lives: the region owns the buffer and derefs
    /// to its slice, the local buffer of puts, gets and VIS transfers;
    /// [`MemRegion::into_vec`] gives it back. Where the provider requires
    /// `FI_MR_LOCAL`, each endpoint registers the region in its own domain at its first
    /// operation from it and keeps the registration in its cache, so later transfers
    /// from the region need no registration (a buffer outside the segments and every
    /// region is registered for each operation instead). Elsewhere it costs nothing.
    /// Regions of one conduit never overlap (each owns its memory), and a region that
    /// is leaked keeps its memory, so its registration stays right (a region that
    /// borrowed its buffer would not: docs/ofi.md, section 2b).
    ///
    /// Registration itself is lazy (a libfabric domain belongs to the thread driving
    /// its endpoint): a failure shows at the first transfer, which then takes gex-rma's
    /// AM path and is counted in [`OfiStats::mr_failures`](crate::OfiStats::mr_failures).
    pub fn register<T>(&self, buf: Vec<T>) -> MemRegion<T> {
        self.regions.add(buf)
    }

    /// Whether the conduit was opened as the far part of a hybrid conduit
    /// (gex-conduit-hybrid), on the near part's segments.
    pub fn is_far_part(&self) -> bool {
        self.shared.is_some()
    }
}

// SAFETY: the module's `# Safety`.
unsafe impl Conduit for Ofi {
    type Ep = OfiEp;
    const NAME: &'static str = "ofi";
    const ENV_VARS: &'static [gex_core::config::EnvVar] = crate::config::ENV_VARS;

    /// Serves the libfabric objects of the dropped endpoints from a thread while this
    /// rank first waits for its own operations to complete (at most 30 s) and then
    /// runs the job-wide `barrier`; closes them once it has returned (docs/ofi.md,
    /// "Closing").
    fn finalize(
        &self,
        barrier: &mut dyn FnMut() -> Result<(), BootError>,
    ) -> Result<(), BootError> {
        self.serve_graves_around(barrier)
    }

    /// Opens this rank's endpoints: see the steps in the module `open`.
    fn open(
        boot: &mut dyn Bootstrap,
        params: &OpenParams<'_>,
    ) -> Result<(Arc<Ofi>, Vec<OfiEp>), InitError> {
        crate::open::open(boot, params, None)
    }

    /// An endpoint made at run time: its own domain, CQ, AV and RDM endpoint, its own
    /// segment registered in its domain (with the segments of the endpoints made at
    /// init: redundant registration), published in this rank's directory, which
    /// endpoint 0 serves to peers on first contact (docs/ofi.md, "Endpoints made at
    /// run time"). `Unsupported` as the far part of a hybrid conduit.
    fn open_endpoint(self: &Arc<Self>, index: EpIndex) -> Result<OfiEp, ConduitError> {
        crate::runtime::open_endpoint(self, index)
    }
}

/// The far (network) part of a hybrid conduit (gex-conduit-hybrid's `Hybrid<Near,
/// Ofi>`): ranks of other hosts through libfabric, ranks of this host through the near
/// part. Opened on the near part's segments, which every endpoint registers in its
/// domain like its own (redundant registration, keys exchanged), so native RMA from
/// other hosts lands in memory the neighbours map; connections to the neighbours are
/// made too (native atomic domains use the NIC for every peer). No CQ wait object is
/// opened: the hybrid conduit never calls `block` on these endpoints.
// SAFETY: the module's `# Safety`; `open_far` uses and keeps `segments`.
unsafe impl FarConduit for Ofi {
    fn open_far(
        boot: &mut dyn Bootstrap,
        params: &OpenParams<'_>,
        segments: SharedSegments,
    ) -> Result<(Arc<Ofi>, Vec<OfiEp>), InitError> {
        crate::open::open(boot, params, Some(segments))
    }
}
