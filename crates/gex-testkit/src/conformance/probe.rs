//! The conformance suite's probe: a layer with no handlers that gives the cases the
//! conduit endpoint underneath ([`Cx::conduit`]), to check the conduit contract itself
//! (capabilities against behaviour, auxiliary areas, neighbours' segments). Runners
//! build their clients with [`builder`], which attaches it.

use gex_core::layer::{Cx, Layer, LayerSet};
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
    fn attach<C: Conduit>(_cx: &mut Cx<'_, C>) -> Result<Self, InitError> {
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
    ep.with_layer::<Probe, _>(|_, cx| f(cx))
        .expect("conformance clients carry the probe layer (build them with conformance::builder)")
}

/// The probe is a layer list of its own too (for `ClientBuilder<L>` bounds in runners).
#[allow(dead_code)]
fn _is_a_layer_set() -> impl LayerSet {
    ((), Probe)
}
