//! Reading the destination of a scoped fetching atomic inside the scope does not
//! compile.
use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder};
use gex_rma::{AtomicFlags, AtomicOp, AtomicOps, GlobalPtr, Rma, RmaError, RmaExt, ScopeRmaExt};

fn main() {
    let client = ClientBuilder::new().layer::<Rma>().init::<Loopback>(Box::new(Singleton::new())).unwrap();
    let mut ep = client.endpoint(0).unwrap();
    let world = ep.world();
    let ad = ep.atomic_domain::<u64>(&world, AtomicOps::FADD).unwrap();
    let p = GlobalPtr::<u64>::new(ep.addr(), 0);
    let mut old = 0u64;
    ep.scope(|s| {
        s.fetch_into(&ad, p, AtomicOp::Add(1), AtomicFlags::empty(), &mut old)?;
        assert_eq!(old, 0);
        Ok::<(), RmaError>(())
    })
    .unwrap();
}
