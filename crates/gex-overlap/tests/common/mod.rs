//! What the single-process tests of gex-overlap share.
#![allow(dead_code)] // each test binary uses some of these

use gex_core::boot::Singleton;
use gex_core::config::Config;
use gex_core::loopback::Loopback;
use gex_core::{Client, ClientBuilder};
use gex_overlap::Overlap;
use gex_rma::Rma;

/// Each setting `k=v` alone makes opening an endpoint of an Rma+Overlap loopback
/// client fail with a layer error that names `k`.
pub(crate) fn assert_bad_settings(settings: &[(&str, &str)]) {
    for &(k, v) in settings {
        let mut cfg = gex_core::config::Config::default();
        cfg.set(k, v);
        let client = loopback_client(cfg, 1 << 16);
        match client.endpoint(0) {
            Err(gex_core::EpError::Layer(e)) => {
                assert!(e.to_string().contains(k), "{k}={v}: {e}")
            }
            other => panic!("{k}={v}: {:?}", other.map(|_| ())),
        }
    }
}

/// An Rma+Overlap loopback client with configuration `cfg` and a segment of `seg`
/// bytes.
pub(crate) fn loopback_client(cfg: Config, seg: usize) -> Client<Loopback> {
    ClientBuilder::new()
        .layer::<Rma>()
        .layer::<Overlap>()
        .config(cfg)
        .segment_size(seg)
        .init::<Loopback>(Box::new(Singleton::new()))
        .unwrap()
}

/// A loopback client with the Rma layer only (no overlap layer), a segment of `seg`
/// bytes.
pub(crate) fn rma_only_client(seg: usize) -> Client<Loopback> {
    ClientBuilder::new()
        .layer::<Rma>()
        .segment_size(seg)
        .init::<Loopback>(Box::new(Singleton::new()))
        .unwrap()
}
