//! Reading a buffer lent to a scoped get while the get may be in flight (inside the
//! scope) does not compile; after the scope it does.
use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder};
use gex_rma::{GlobalPtr, Rma, RmaError, ScopeRmaExt};

fn main() {
    let client = ClientBuilder::new().layer::<Rma>().init::<Loopback>(Box::new(Singleton::new())).unwrap();
    let mut ep = client.endpoint(0).unwrap();
    let p = GlobalPtr::<u32>::new(ep.addr(), 0);
    let mut buf = [0u32; 4];
    ep.scope(|s| {
        s.get_into(&mut buf, p)?;
        println!("{}", buf[0]);
        Ok::<(), RmaError>(())
    })
    .unwrap();
    println!("{}", buf[0]);
}
