//! One thread drives an endpoint at a time (its injection path takes no lock): two
//! threads cannot share one.
use gex_core::loopback::Loopback;
use gex_core::Endpoint;

fn two_threads(ep: &Endpoint<Loopback>) {
    std::thread::scope(|s| {
        s.spawn(|| ep.addr());
        s.spawn(|| ep.addr());
    });
}

fn main() {
    let _ = two_threads;
}
