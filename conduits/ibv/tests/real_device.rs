//! The conformance suites (core and RMA) on the ibv conduit over a real RDMA device
//! (`GEX_IBV_PROVIDER=verbs`, libibverbs through rdma-sys; build with
//! `--features verbs`). Every case first asks `ibv_get_device_list` for a device with
//! an active port; without one the case fails with "skipped, not passed: no RDMA
//! device", so a machine without a device can never count these as passes. `ci/test`
//! builds this target everywhere and runs it only where a device is present.
//!
//! Settings for the device come from the environment of the test run
//! (`GEX_IBV_DEVICE`, `GEX_IBV_PORT`, `GEX_IBV_GID_INDEX`).
//!
//! Exclusions: none.

use gex_conduit_ibv::Ibv;
use gex_core::{ClientBuilder, Config};
use gex_rma::Rma;
use gex_testkit::conformance::{Case, Job, Runner};
use gex_testkit::procs::ProcRunner;

/// Why there is no usable device, or `None` when there is one.
fn no_device() -> Option<String> {
    match gex_conduit_ibv::real_devices() {
        Err(e) => Some(format!(
            "skipped, not passed: listing RDMA devices failed: {e}"
        )),
        Ok(d) if d.is_empty() => {
            Some("skipped, not passed: no RDMA device (ibv_get_device_list found none)".into())
        }
        Ok(d) if !d.iter().any(|d| d.ports.iter().any(|p| p.active)) => Some(format!(
            "skipped, not passed: no RDMA device with an active port ({})",
            d.iter()
                .map(|d| d.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
        Ok(_) => None,
    }
}

/// A runner that refuses to run (and so fails the case) without a device.
struct Device<R>(R);

impl<R: Runner<Ibv>> Runner<Ibv> for Device<R> {
    fn run(&self, job: &Job<'_>, case: &Case<Ibv>) -> Result<(), String> {
        if let Some(why) = no_device() {
            eprintln!("real_device: {}: {why}", job.test_path);
            return Err(why);
        }
        self.0.run(job, case)
    }
}

fn env_config() -> Config {
    let mut c = Config::from_env();
    c.set("GEX_IBV_PROVIDER", "verbs");
    c
}

fn core_runner() -> Device<ProcRunner<Ibv>> {
    Device(ProcRunner::new().builder(|| {
        gex_testkit::conformance::builder()
            .config(env_config())
            .segment_size(256 << 10)
    }))
}

fn rma_runner() -> Device<ProcRunner<Ibv, ((), Rma)>> {
    Device(ProcRunner::new().builder(|| -> ClientBuilder<((), Rma)> {
        gex_testkit::rma::client_builder()
            .config(env_config())
            .segment_size(2 << 20)
    }))
}

gex_testkit::suite_modules! {
    suite: core,
    conduit: Ibv;

    /// The core suite, two ranks.
    core_two_ranks: core_runner(), ranks 2;
}

gex_testkit::suite_modules! {
    suite: rma,
    conduit: Ibv;

    /// The RMA suite, three ranks.
    rma_three_ranks: rma_runner(), ranks 3;
}

#[test]
fn the_provider_sees_a_device() {
    if let Some(why) = no_device() {
        panic!("{why}");
    }
    for d in gex_conduit_ibv::real_devices().expect("listed above") {
        eprintln!("real_device: {} with ports {:?}", d.name, d.ports);
    }
}
