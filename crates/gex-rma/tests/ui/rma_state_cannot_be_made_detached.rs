//! A second, detached `Rma` state bound to an endpoint's memory cannot be made: only
//! the core calls `Layer::attach` (it takes an `Attach` only the core makes).
use gex_core::layer::Layer;
use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder};
use gex_rma::Rma;

fn main() {
    let client = ClientBuilder::new().layer::<Rma>().init::<Loopback>(Box::new(Singleton::new())).unwrap();
    let mut ep = client.endpoint(0).unwrap();
    let detached = ep.with_layer::<Rma, _>(|_, cx| Rma::attach(cx)).unwrap().unwrap();
    drop(client);
    drop(detached);
}
