//! A conduit trusts an `OutMsg`'s bounds (a Long's range lies in the destination's
//! segment): only gex-core can build one. Naming every field does not make one.
use gex_core::spi::OutMsg;
use gex_core::{Category, EpAddr, Kind};

fn forged(payload: &[u8]) -> OutMsg<'_> {
    OutMsg {
        dst: EpAddr::rank(0),
        handler: 128,
        kind: Kind::Request,
        category: Category::Long,
        args: &[],
        payload,
        offset: usize::MAX - 4,
    }
}

fn main() {
    let _ = forged(&[0; 8]);
}
