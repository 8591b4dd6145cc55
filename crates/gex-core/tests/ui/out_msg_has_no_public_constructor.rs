//! Nor does its constructor, which only the core's validation reaches.
use gex_core::spi::OutMsg;
use gex_core::{Body, EpAddr, Kind};

fn main() {
    let _ = OutMsg::new(EpAddr::rank(0), 128, Kind::Request, Body::long(&[], &[0; 8], 0));
}
