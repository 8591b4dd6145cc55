//! Swapping the RMA states of two clients' endpoints (then dropping one client, so
//! the other's state points into freed segments) does not compile: the door that
//! handed out `&mut Rma` is gone, and `gex_core::layer` hands out `Pin<&mut Rma>`.
use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder};
use gex_rma::Rma;

fn main() {
    let new = || ClientBuilder::new().layer::<Rma>().init::<Loopback>(Box::new(Singleton::new())).unwrap();
    let (ca, cb) = (new(), new());
    let mut a = ca.endpoint(0).unwrap();
    let mut b = cb.endpoint(0).unwrap();
    let ra = a.layer_state_mut::<Rma>().unwrap();
    let rb = b.layer_state_mut::<Rma>().unwrap();
    std::mem::swap(ra, rb);
}
