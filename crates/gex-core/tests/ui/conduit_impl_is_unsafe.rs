//! Implementing the conduit contract is an `unsafe impl`: the core builds views and
//! copies over the memory a conduit describes, so a safe implementation that lied (a
//! segment of the wrong length) would let safe code write foreign memory.
use gex_core::boot::Bootstrap;
use gex_core::spi::{Conduit, OpenParams};
use gex_core::InitError;
use std::sync::Arc;

struct Lying;

impl Conduit for Lying {
    type Ep = <gex_core::loopback::Loopback as Conduit>::Ep;
    const NAME: &'static str = "lying";
    fn open(_: &mut dyn Bootstrap, _: &OpenParams<'_>) -> Result<(Arc<Self>, Vec<Self::Ep>), InitError> {
        unimplemented!()
    }
}

fn main() {}
