//! Through today's door a layer's context gives the conduit endpoint shared only:
//! swapping two clients' conduit endpoints does not compile.
use gex_core::layer::{self, Attach, Layer};
use gex_core::spi::Conduit;
use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder, InitError};

struct Nop;
impl Layer for Nop {
    const NAME: &'static str = "nop";
    fn attach<C: Conduit>(_: &mut Attach<'_, C, Self>) -> Result<Self, InitError> {
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
    layer::with::<Nop, _, _>(&mut a, |_, ca| {
        layer::with::<Nop, _, _>(&mut b, |_, cb| std::mem::swap(ca.conduit(), cb.conduit()));
    });
}
