//! What the loopback tests of gex-rma share.
#![allow(dead_code)] // each test binary uses some of these

use gex_core::boot::Singleton;
use gex_core::layer::LayerSet;
use gex_core::loopback::Loopback;
use gex_core::{Client, ClientBuilder, Config, Endpoint};
use gex_rma::Rma;

/// A loopback client from builder `b` (its layers) with a segment of `seg` bytes, `eps`
/// endpoints made at init and configuration `cfg` (`None`: the builder's defaults).
pub(crate) fn loopback<L: LayerSet>(
    b: ClientBuilder<L>,
    seg: usize,
    eps: Option<u16>,
    cfg: Option<Config>,
) -> Client<Loopback> {
    let mut b = b.segment_size(seg);
    if let Some(n) = eps {
        b = b.endpoints(n);
    }
    if let Some(c) = cfg {
        b = b.config(c);
    }
    b.init::<Loopback>(Box::new(Singleton::new())).unwrap()
}

/// [`loopback`] with the Rma layer.
pub(crate) fn rma(seg: usize, eps: Option<u16>, cfg: Option<Config>) -> Client<Loopback> {
    loopback(ClientBuilder::new().layer::<Rma>(), seg, eps, cfg)
}

/// Endpoints 0 and 1 of `c`.
pub(crate) fn two_endpoints(
    c: &Client<Loopback>,
) -> (Box<Endpoint<Loopback>>, Box<Endpoint<Loopback>>) {
    (c.endpoint(0).unwrap(), c.endpoint(1).unwrap())
}
