//! The conduit's endpoint (whose `inject` trusts its message) is not reachable from
//! user code through the core's endpoint.
use gex_core::loopback::Loopback;
use gex_core::Endpoint;

fn internals(ep: &mut Endpoint<Loopback>) {
    let _ = ep.conduit_ep();
}

fn main() {
    let _ = internals;
}
