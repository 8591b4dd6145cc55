//! A nonblocking get into a borrowed buffer outside a scope: the transfer could outlive
//! the borrow, so it does not compile (lend it inside `Endpoint::scope`, or give an
//! owned `Vec`).
use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder, Nb};
use gex_rma::{GlobalPtr, Rma, RmaExt};

fn main() {
    let client = ClientBuilder::new().layer::<Rma>().init::<Loopback>(Box::new(Singleton::new())).unwrap();
    let mut ep = client.endpoint(0).unwrap();
    let p = GlobalPtr::<u32>::new(ep.addr(), 0);
    let mut buf = [0u32; 4];
    let ev = ep.get(&mut buf[..], p, Nb).unwrap();
    drop(buf);
    let _ = ep.wait(ev);
}
