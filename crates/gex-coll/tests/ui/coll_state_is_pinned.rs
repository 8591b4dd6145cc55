//! The collectives layer's state holds addresses of the endpoint's mappings and of
//! its own buffers (shared-memory slots, the world team's extension), so it is
//! `!Unpin` and reached pinned: swapping two endpoints' states, through the door
//! (`gex_core::layer::state`) or through a context (`Cx::layer_mut`), does not
//! compile.
use gex_coll::Coll;
use gex_core::{boot::Singleton, layer, loopback::Loopback, ClientBuilder};
use gex_rma::Rma;

fn main() {
    let new = || {
        ClientBuilder::new()
            .layer::<Rma>()
            .layer::<Coll>()
            .init::<Loopback>(Box::new(Singleton::new()))
            .unwrap()
    };
    let (ca, cb) = (new(), new());
    let mut a = ca.endpoint(0).unwrap();
    let mut b = cb.endpoint(0).unwrap();
    layer::state::<Coll, _, _>(&mut a, |sa| {
        layer::state::<Coll, _, _>(&mut b, |sb| std::mem::swap(sa.get_mut(), sb.get_mut()));
    });
    layer::with::<Rma, _, _>(&mut a, |_, cx| {
        layer::state::<Coll, _, _>(&mut b, |sb| {
            std::mem::swap(cx.layer_mut::<Coll>().unwrap().get_mut(), sb.get_mut())
        });
    });
}
