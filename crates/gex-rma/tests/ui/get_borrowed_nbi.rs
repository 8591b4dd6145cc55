//! An implicit-event get into a borrowed buffer outside a scope does not compile.
use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder, Nbi};
use gex_rma::{GlobalPtr, Rma, RmaExt};

fn main() {
    let client = ClientBuilder::new().layer::<Rma>().init::<Loopback>(Box::new(Singleton::new())).unwrap();
    let mut ep = client.endpoint(0).unwrap();
    let p = GlobalPtr::<u32>::new(ep.addr(), 0);
    let mut buf = vec![0u32; 4];
    ep.get(&mut buf, p, Nbi).unwrap();
}
