//! Two scopes (of two endpoints) cannot be swapped either: each has its own lifetime.
use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder, EventError};

fn main() {
    let client = ClientBuilder::new().endpoints(2).init::<Loopback>(Box::new(Singleton::new())).unwrap();
    let mut a = client.endpoint(0).unwrap();
    let mut b = client.endpoint(1).unwrap();
    a.scope(|sa| {
        b.scope(|sb| {
            std::mem::swap(sa, sb);
            Ok::<(), EventError>(())
        })
    })
    .unwrap();
}
