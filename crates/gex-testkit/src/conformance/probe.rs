//! The conformance suite's probe: a layer with no handlers that gives the cases the
//! conduit endpoint underneath ([`Cx::conduit`]), to check the conduit contract itself
//! (capabilities against behaviour, auxiliary areas, neighbours' segments). Runners
//! build their clients with [`builder`], which attaches it.
//!
//! # Safety
//! [`block`] reaches `&mut` the conduit endpoint with [`Cx::conduit_mut`] to call its
//! `block`, and neither moves nor keeps it.

#![allow(unsafe_code)]

use gex_core::layer::{Attach, Cx, Layer, LayerSet};
use gex_core::spi::Conduit;
use gex_core::{ClientBuilder, Endpoint, InitError};

/// A layer with no state of its own: a door to the conduit endpoint for the cases.
#[derive(Debug)]
pub struct Probe;

impl Layer for Probe {
    const NAME: &'static str = "conformance-probe";
    /// Room for the `aux` case's pattern (the conduit sizes its areas from the layers);
    /// 8 KiB under Miri, where the case reads every word of it.
    const AUX_BYTES: usize = if cfg!(miri) { 8 << 10 } else { 1 << 16 };
    fn attach<C: Conduit>(_cx: &mut Attach<'_, C, Self>) -> Result<Self, InitError> {
        Ok(Probe)
    }
}

/// A client builder for the conformance suite: the probe layer, 1 MiB segments.
pub fn builder() -> ClientBuilder<((), Probe)> {
    ClientBuilder::new().layer::<Probe>().segment_size(1 << 20)
}

/// Runs `f` with the conduit endpoint under `ep` and a context on it.
///
/// # Panics
/// If the client was not built with the probe (see [`builder`]).
pub(crate) fn with_conduit<C: Conduit, R>(
    ep: &mut Endpoint<C>,
    f: impl FnOnce(&mut Cx<'_, C>) -> R,
) -> R {
    gex_core::layer::with::<Probe, C, R>(ep, |_, cx| f(cx))
        .expect("conformance clients carry the probe layer (build them with conformance::builder)")
}

/// The conduit endpoint's [`block`](gex_core::spi::ConduitEp::block) under `ep`.
pub(crate) fn block<C: Conduit>(ep: &mut Endpoint<C>, timeout: std::time::Duration) {
    use gex_core::spi::ConduitEp;
    with_conduit(ep, |cx| {
        // SAFETY: the endpoint is neither moved nor kept (module `# Safety`).
        unsafe { cx.conduit_mut() }.block(timeout)
    });
}

/// The probe is a layer list of its own too (for `ClientBuilder<L>` bounds in runners).
#[allow(dead_code)]
fn _is_a_layer_set() -> impl LayerSet {
    ((), Probe)
}
