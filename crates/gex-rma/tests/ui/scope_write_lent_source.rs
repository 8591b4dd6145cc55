//! Writing the source of a scoped put (lent without a copy) before the scope ends does
//! not compile.
use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder};
use gex_rma::{GlobalPtr, Rma, RmaError, ScopeRmaExt};

fn main() {
    let client = ClientBuilder::new().layer::<Rma>().init::<Loopback>(Box::new(Singleton::new())).unwrap();
    let mut ep = client.endpoint(0).unwrap();
    let p = GlobalPtr::<u8>::new(ep.addr(), 0);
    let mut src = vec![1u8; 64];
    ep.scope(|s| {
        s.put_from(p, &src)?;
        src[0] = 2;
        Ok::<(), RmaError>(())
    })
    .unwrap();
}
