//! Through today's door (`gex_core::layer::state`) the RMA state is reached pinned,
//! and it is `!Unpin`: swapping two endpoints' states does not compile.
use gex_core::{boot::Singleton, layer, loopback::Loopback, ClientBuilder};
use gex_rma::Rma;

fn main() {
    let new = || ClientBuilder::new().layer::<Rma>().init::<Loopback>(Box::new(Singleton::new())).unwrap();
    let (ca, cb) = (new(), new());
    let mut a = ca.endpoint(0).unwrap();
    let mut b = cb.endpoint(0).unwrap();
    layer::state::<Rma, _, _>(&mut a, |mut ra| {
        layer::state::<Rma, _, _>(&mut b, |mut rb| std::mem::swap(&mut *ra, &mut *rb));
    });
}
