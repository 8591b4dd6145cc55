//! Swapping the conduit endpoints of two clients (a Long validated against one
//! client's 1 MiB segments would then be written by the other's conduit into 4 KiB)
//! does not compile: the door a layer had to it (`Endpoint::with_layer`, `Cx::conduit`
//! giving `&mut`) is gone. This is the program that did it.
use gex_core::layer::{Cx, Layer};
use gex_core::spi::Conduit;
use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder, InitError};

struct Nop;
impl Layer for Nop {
    const NAME: &'static str = "nop";
    fn attach<C: Conduit>(_: &mut Cx<'_, C>) -> Result<Self, InitError> {
        Ok(Nop)
    }
}

fn main() {
    let new = |seg| {
        ClientBuilder::new().layer::<Nop>().segment_size(seg)
            .init::<Loopback>(Box::new(Singleton::new())).unwrap()
    };
    let (big, small) = (new(1 << 20), new(4096));
    let mut a = big.endpoint(0).unwrap();
    let mut b = small.endpoint(0).unwrap();
    a.with_layer::<Nop, _>(|_, ca| {
        b.with_layer::<Nop, _>(|_, cb| std::mem::swap(ca.conduit(), cb.conduit()));
    });
}
