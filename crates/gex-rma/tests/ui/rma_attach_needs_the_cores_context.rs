//! Through today's door a layer's context cannot make a second, detached RMA state:
//! `Layer::attach` takes an `Attach` for that layer, which only the core makes.
use gex_core::layer::{self, Layer};
use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder};
use gex_rma::Rma;

fn main() {
    let client = ClientBuilder::new().layer::<Rma>().init::<Loopback>(Box::new(Singleton::new())).unwrap();
    let mut ep = client.endpoint(0).unwrap();
    let detached = layer::with::<Rma, _, _>(&mut ep, |_, cx| Rma::attach(cx));
    drop(client);
    drop(detached);
}
