//! The hybrid conduit object ([`Hybrid`]): opening (decide the mode, open the near
//! part for this host, open the far part on the near part's segments), finalising
//! (the far part's finalisation around the near part's around the job-wide barrier),
//! and its queries (mode, near ranks, the parts, counters).
//!
//! # Safety
//! `unsafe impl Conduit`: the hybrid conduit's memory is its parts' (the near part's
//! segments and areas, the far part's native operations), whose promises
//! (`NearConduit`, `FarConduit`, `unsafe trait`s) it passes on unchanged; it routes by
//! the near part's `is_near`.
#![allow(unsafe_code)]

use crate::ep::HybridEp;
use crate::mode;
use crate::stats::{HybridStats, PathCounters};
use gex_core::boot::{BootError, Bootstrap};
use gex_core::spi::{
    Capabilities, Conduit, ConduitEp, ConduitError, FarConduit, NearConduit, OpenParams,
    SharedSegments,
};
use gex_core::{EpIndex, InitError};
use std::fmt;
use std::sync::Arc;

/// A conduit composed of a near part `N` (shared memory between the ranks of one host)
/// and a far part `F` (a network between hosts). See the [crate documentation](crate).
///
/// Its name is the far conduit's (`Hybrid<Smp, Ofi>` is the conduit `ofi`): a job asks
/// for a network, and gets shared memory inside its hosts on top.
pub struct Hybrid<N: NearConduit, F: FarConduit> {
    // Declared first, dropped first: the far part releases its use of the near part's
    // segments (it also keeps them mapped itself, through `SharedSegments`).
    far: Arc<F>,
    /// The near part, in a hybrid job.
    near: Option<Arc<N>>,
    /// AMs per path, per endpoint.
    pub(crate) counters: Vec<PathCounters>,
    /// Why the job is hybrid or not.
    reason: String,
}

impl<N: NearConduit, F: FarConduit> fmt::Debug for Hybrid<N, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hybrid")
            .field("near", &N::NAME)
            .field("far", &F::NAME)
            .field("near_ranks", &self.shared_memory_peers())
            .field("reason", &self.reason)
            .finish_non_exhaustive()
    }
}

impl<N: NearConduit, F: FarConduit> Hybrid<N, F> {
    /// Whether this is a hybrid job: the ranks of this host talk through the near part.
    pub fn is_hybrid(&self) -> bool {
        self.near.is_some()
    }

    /// The ranks this rank reaches through the near part (this rank included): the
    /// ranks of its host in a hybrid job, else none.
    pub fn shared_memory_peers(&self) -> &[u32] {
        self.near.as_ref().map_or(&[], |n| n.near_ranks())
    }

    /// Why the job is hybrid or not (the setting and the layout), e.g. `the job spans
    /// several hosts and a host has several ranks (GEX_HYBRID=auto)`.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// The far part (its own report and counters, e.g. the ofi conduit's native RMA).
    pub fn far(&self) -> &F {
        &self.far
    }

    /// The near part, in a hybrid job.
    pub fn near(&self) -> Option<&N> {
        self.near.as_deref()
    }

    /// AMs this rank's endpoints sent and delivered so far, per path (summed).
    pub fn stats(&self) -> HybridStats {
        let mut s = HybridStats::default();
        for c in &self.counters {
            c.add_to(&mut s);
        }
        s
    }

    /// Whether `rank` is reached through the near part.
    #[inline(always)]
    pub(crate) fn is_near(&self, rank: u32) -> bool {
        self.near.as_ref().is_some_and(|n| n.is_near(rank))
    }
}

/// Decides the mode (identically on every rank, checked with one bootstrap exchange).
/// Errors name the far conduit `F`, the conduit the job asked for.
fn decide_mode<F: Conduit>(
    boot: &mut dyn Bootstrap,
    params: &OpenParams<'_>,
) -> Result<(bool, String), InitError> {
    let read = mode::read(params.config, F::NAME)?;
    let (hybrid, reason) = mode::decide(&read, mode::Shape::of(params.layout));
    let votes = boot.exchange(&[u8::from(hybrid)])?;
    // One vote per rank: the bootstrap (a safe trait) is checked, not trusted (a
    // missing vote would otherwise count as agreement).
    let size = params.layout.eps.len();
    if votes.len() != size {
        return Err(InitError::Conduit {
            conduit: F::NAME,
            msg: format!(
                "the bootstrap exchange of the hybrid mode returned {} votes for {size} ranks",
                votes.len()
            ),
        });
    }
    if let Some(r) = votes
        .iter()
        .position(|v| v.as_slice() != [u8::from(hybrid)])
    {
        return Err(InitError::Conduit {
            conduit: F::NAME,
            msg: format!(
                "rank {r} and rank {} disagree on the hybrid mode ({} must be the same on every rank)",
                params.rank, read.var
            ),
        });
    }
    Ok((hybrid, reason))
}

// SAFETY: the module's `# Safety`.
unsafe impl<N: NearConduit, F: FarConduit> Conduit for Hybrid<N, F> {
    type Ep = HybridEp<N, F>;
    const NAME: &'static str = F::NAME;
    const ENV_VARS: &'static [gex_core::config::EnvVar] = crate::ENV_VARS;

    fn env_registries() -> Vec<&'static [gex_core::config::EnvVar]> {
        let mut v = vec![crate::ENV_VARS];
        v.extend(N::env_registries());
        v.extend(F::env_registries());
        v
    }

    /// Decides the mode, then opens the near part for this host and the far part on
    /// its segments (hybrid), or the far part alone.
    fn open(
        boot: &mut dyn Bootstrap,
        params: &OpenParams<'_>,
    ) -> Result<(Arc<Self>, Vec<Self::Ep>), InitError> {
        let (hybrid, reason) = decide_mode::<F>(boot, params)?;
        let (near, near_eps, far, far_eps) = if hybrid {
            let (near, near_eps) = N::open_near(boot, params)?;
            let shared = SharedSegments::of(&near, &near_eps);
            let (far, far_eps) = F::open_far(boot, params, shared)?;
            (Some(near), near_eps, far, far_eps)
        } else {
            let (far, far_eps) = F::open(boot, params)?;
            (None, Vec::new(), far, far_eps)
        };
        tracing::debug!(
            rank = params.rank,
            near = N::NAME,
            far = F::NAME,
            hybrid,
            %reason,
            "hybrid conduit open"
        );
        // One set per endpoint index; outside a hybrid job, of the capacity: endpoints
        // made at run time (`open_endpoint`, far part alone) count too.
        let cap = params.layout.max_eps.get(params.rank as usize).copied();
        let slots = if hybrid {
            far_eps.len()
        } else {
            far_eps.len().max(usize::from(cap.unwrap_or(0)))
        };
        let conduit = Arc::new(Hybrid {
            counters: (0..slots).map(|_| PathCounters::default()).collect(),
            far,
            near,
            reason,
        });
        let mut near_eps = near_eps.into_iter();
        let eps = far_eps
            .into_iter()
            .map(|far| {
                let near = near_eps.next();
                let caps = capabilities(far.capabilities(), near.is_some());
                HybridEp::new(far, near, caps, conduit.clone())
            })
            .collect();
        Ok((conduit, eps))
    }

    /// An endpoint made at run time: the far part's, when the job is not hybrid (the
    /// conduit is then the far conduit alone, through this one). A hybrid job's near
    /// part cannot make endpoints at run time: `Unsupported`.
    fn open_endpoint(self: &Arc<Self>, index: EpIndex) -> Result<Self::Ep, ConduitError> {
        if self.near.is_some() {
            return Err(ConduitError::Unsupported {
                conduit: self.name(),
                what: "endpoints made at run time in a hybrid job",
            });
        }
        let far = F::open_endpoint(&self.far, index)?;
        let caps = capabilities(far.capabilities(), false);
        Ok(HybridEp::new(far, None, caps, self.clone()))
    }

    /// The far part's finalisation around the near part's around `barrier` (one
    /// barrier in all).
    fn finalize(
        &self,
        barrier: &mut dyn FnMut() -> Result<(), BootError>,
    ) -> Result<(), BootError> {
        match &self.near {
            Some(near) => self.far.finalize(&mut || near.finalize(barrier)),
            None => self.far.finalize(barrier),
        }
    }
}

/// The capabilities of a hybrid endpoint: the far part's, with `SHARED_MEMORY` (the
/// near part maps the neighbours), without `BLOCKING_WAIT` (`block` naps, it cannot
/// sleep on both parts at once) and without `NP_IN_PLACE` (it would have to hold for
/// far peers too). Without the near part, the far part's own.
fn capabilities(far: Capabilities, hybrid: bool) -> Capabilities {
    if !hybrid {
        return far;
    }
    (far - Capabilities::BLOCKING_WAIT - Capabilities::NP_IN_PLACE) | Capabilities::SHARED_MEMORY
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hybrid_capabilities_map_neighbours_and_nap() {
        let far = Capabilities::NATIVE_RMA | Capabilities::NATIVE_ATOMICS;
        assert_eq!(capabilities(far, false), far);
        assert_eq!(
            capabilities(
                far | Capabilities::BLOCKING_WAIT | Capabilities::NP_IN_PLACE,
                true
            ),
            far | Capabilities::SHARED_MEMORY
        );
        let waits = Capabilities::BLOCKING_WAIT;
        assert_eq!(
            capabilities(waits, false),
            waits,
            "alone, the far part waits"
        );
    }
}
