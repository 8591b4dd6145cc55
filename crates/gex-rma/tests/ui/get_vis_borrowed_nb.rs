//! A nonblocking VIS get into a borrowed buffer outside a scope does not compile.
use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder, Nb};
use gex_rma::{GlobalPtr, Rma, RmaExt, Vis};

fn main() {
    let client = ClientBuilder::new().layer::<Rma>().init::<Loopback>(Box::new(Singleton::new())).unwrap();
    let mut ep = client.endpoint(0).unwrap();
    let p = GlobalPtr::<u8>::new(ep.addr(), 0);
    let mut buf = [0u8; 2];
    let _ev = ep.get_vis(&mut buf, Vis::Indexed { ptrs: &[p, p.add(8)], each: 1 }, Nb);
}
