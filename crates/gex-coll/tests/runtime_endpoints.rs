//! The collectives layer on endpoints made at run time (`Client::create_endpoint`,
//! issue 25 point 1) on the smp conduit, 3 process ranks and 3 thread ranks: the layer
//! attaches to the new endpoint as to one made at init, and once every rank has made
//! the index (a barrier on endpoint 0 says so) the run-time endpoints' world team
//! (`Endpoint::world`: the endpoints of that index on every rank) runs barriers and
//! every collective with every algorithm, on the same path as endpoint 0's world
//! (shared-memory collectives over the run-time endpoints' auxiliary areas), and a
//! team split from it does too, while endpoint 0's collectives keep working alongside.

mod common;

use common::{layers, matrix};
use gex::conduit::smp::Smp;
use gex_coll::{CollExt, Scratch};
use gex_core::Config;
use gex_core::boot::Bootstrap;
use gex_testkit::procs::Procs;
use std::time::Duration;

fn body(boot: Box<dyn Bootstrap>) {
    let mut cfg = Config::from_env();
    cfg.set("GEX_MAX_ENDPOINTS", "2");
    let c = layers()
        .segment_size(1 << 20)
        .config(cfg)
        .init::<Smp>(boot)
        .unwrap();
    let mut ep0 = c.endpoint(0).unwrap();
    let w0 = ep0.world();
    ep0.barrier(&w0).unwrap();
    let mut ep1 = c.create_endpoint().unwrap();
    // Every rank has made index 1 once this barrier (on endpoint 0) is done.
    ep0.barrier(&w0).unwrap();
    let w1 = ep1.world();
    assert!(w1.members().iter().all(|a| a.ep == 1));
    ep1.barrier(&w1).unwrap();
    // The same path as endpoint 0's: shared-memory collectives over the run-time
    // endpoints' auxiliary areas (unless the AM path is forced).
    assert_eq!(ep1.shared_memory(&w1), ep0.shared_memory(&w0));
    let ran = matrix(&mut ep1, &w1, &[1, 9000]);
    assert!(ran > 50, "{ran}");
    let r = w1.rank();
    let t = ep1
        .split(&w1, Some(r % 2), r, Scratch::None)
        .unwrap()
        .unwrap();
    matrix(&mut ep1, &t, &[5]);
    ep1.barrier(&t).unwrap();
    ep1.barrier(&w1).unwrap();
    // Endpoint 0's collectives are unaffected.
    matrix(&mut ep0, &w0, &[3]);
    ep0.barrier(&w0).unwrap();
    drop(t);
    drop(ep1);
    ep0.barrier(&w0).unwrap();
}

#[test]
fn collectives_on_runtime_endpoints_on_processes() {
    Procs::new(3)
        .timeout(Duration::from_secs(300))
        .run(body)
        .assert_success();
}

#[test]
fn collectives_on_runtime_endpoints_on_thread_ranks() {
    gex_testkit::watchdog("runtime_endpoints", Duration::from_secs(300), || {
        gex_boot::threads::run(3, |boot| body(Box::new(boot))).unwrap();
    });
}
