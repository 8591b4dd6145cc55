//! Swapping the endpoint a scope lends for another one does not compile (`Endpoint`
//! is unsized). It did: the scope then synced the other endpoint at its end, returned,
//! and a get into a buffer lent to it landed after the buffer was freed.
use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder, Endpoint, EventError};

fn main() {
    let client = ClientBuilder::new().endpoints(2).init::<Loopback>(Box::new(Singleton::new())).unwrap();
    let mut a = client.endpoint(0).unwrap();
    let mut b = client.endpoint(1).unwrap();
    a.scope(|s| {
        std::mem::swap::<Endpoint<Loopback>>(&mut **s, &mut b);
        Ok::<(), EventError>(())
    })
    .unwrap();
}
