//! The conformance suite on the simulated fabric, in several shapes: 2, 3 and 5 ranks;
//! FIFO and reordering delivery; poll and wall-clock latency; two endpoints per rank;
//! ranks on separate simulated hosts with the optional capabilities switched off.
//!
//! `GEX_SIM_SEED` sets the base seed of every configuration (to reproduce a schedule).

use gex_testkit::sim::{Delay, Sim, SimConfig, SimRunner};

fn base() -> SimConfig {
    SimConfig::from_env().expect("GEX_SIM_* variables")
}

gex_testkit::suite_modules! {
    suite: core,
    conduit: Sim;

    /// Two ranks, FIFO, no delays.
    fifo_r2: SimRunner::new(base()), ranks 2;

    /// Three ranks, reordering with a jitter of up to 6 polls, small request lanes.
    reorder_r3: SimRunner::new(base().reorder(true).jitter(Delay::polls(6)).ring_capacity(8 << 10)),
        ranks 3;
}

/// Five ranks, reordering, 20 µs wall-clock latency plus up to 30 µs jitter. Not
/// under Miri, for time (docs/testing.md, "Miri"): it runs the code of `reorder_r3`
/// with a wall-clock delay, which Miri's clock does not model.
#[cfg(not(miri))]
mod latency_r5 {
    use super::*;
    gex_testkit::suite_tests! {
        suite: core,
        conduit: Sim,
        runner: SimRunner::new(base().reorder(true).latency(Delay::nanos(20_000)).jitter(Delay::nanos(30_000))),
        ranks: 5,
    }
}

gex_testkit::suite_modules! {
    suite: core,
    conduit: Sim;

    /// Two ranks with two endpoints each, reordering, latency of 3 polls.
    two_eps_r2: SimRunner::new(
        base().reorder(true).latency(Delay::polls(3)).jitter(Delay::polls(3)),
    ),
        ranks 2, endpoints 2;
}

/// Three ranks on three simulated hosts (no shared memory between them), FIFO with
/// latency in polls, no in-place negotiated payloads, no blocking wait, eager local
/// completion, 24 arguments. Not under Miri, for time (docs/testing.md, "Miri"): its
/// own unsafe code, the simulated NIC's, runs there in `tests/long_race.rs` and in the
/// RMA suites' probes.
#[cfg(not(miri))]
mod hosts_r3 {
    use super::*;
    fn cfg() -> SimConfig {
        let mut c = base().ranks_per_host(1).latency(Delay::polls(2));
        c.np_in_place = false;
        c.blocking_wait = false;
        c.deferred_lc = false;
        c.max_args = 24;
        c
    }
    gex_testkit::suite_tests! {
        suite: core,
        conduit: Sim,
        runner: SimRunner::new(cfg()),
        ranks: 3,
    }
}
