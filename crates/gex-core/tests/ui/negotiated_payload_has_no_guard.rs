//! A negotiated-payload message is built inside one call (`request_with`), not
//! through a guard a program could leak: forgetting the old `Prepared` guard let the
//! next call reach the conduit between the reservation and its commit (the simulated
//! conduit caught it: "inject between prepare and commit/cancel").
use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder};

fn main() {
    let client = ClientBuilder::new().init::<Loopback>(Box::new(Singleton::new())).unwrap();
    let mut ep = client.endpoint(0).unwrap();
    let me = ep.addr();
    let p = ep.prepare_request_medium(me, 64).unwrap();
    std::mem::forget(p);
}
