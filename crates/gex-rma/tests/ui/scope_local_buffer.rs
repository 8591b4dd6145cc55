//! A buffer that dies inside the scope cannot be lent to it: the scope waits for its
//! operations only when it ends.
use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder};
use gex_rma::{GlobalPtr, Rma, RmaError, ScopeRmaExt};

fn main() {
    let client = ClientBuilder::new().layer::<Rma>().init::<Loopback>(Box::new(Singleton::new())).unwrap();
    let mut ep = client.endpoint(0).unwrap();
    let p = GlobalPtr::<u32>::new(ep.addr(), 0);
    ep.scope(|s| {
        let mut local = [0u32; 4];
        s.get_into(&mut local, p)?;
        Ok::<(), RmaError>(())
    })
    .unwrap();
}
