//! The RMA conformance suite (gex-testkit's `rma` module, exercising gex-rma) on the
//! smp conduit: every case runs as a real multi-process job started by gex-testkit's
//! process runner. Neighbours share memory, so this runs the direct path; build with
//! `RUSTFLAGS="--cfg gex_force_am_rma"` to run the AM reference path over the rings.
//!
//! Exclusions: none.

use gex_conduit_smp::Smp;
use gex_core::layer::LayerSet;
use gex_core::{ClientBuilder, Config};
use gex_testkit::procs::ProcRunner;

/// The clients of `four_ranks_small_rings`.
fn four_ranks_small_rings_clients() -> ClientBuilder<impl LayerSet> {
    gex_testkit::rma::client_builder()
        .segment_size(4 << 20)
        .config(Config::from_pairs([
            ("GEX_SMP_RING_SIZE", "16384"),
            ("GEX_SMP_MAX_MEDIUM", "2048"),
        ]))
}

/// The clients of `five_ranks_blocking`.
fn five_ranks_blocking_clients() -> ClientBuilder<impl LayerSet> {
    gex_testkit::rma::client_builder()
        .segment_size(2 << 20)
        .wait_policy(gex_core::WaitPolicy::Block)
}

gex_testkit::suite_modules! {
    suite: rma,
    conduit: Smp;

    /// Two ranks, 17 MiB segments (the 16 MiB case runs).
    two_ranks: ProcRunner::new()
        .builder(|| gex_testkit::rma::client_builder().segment_size(17 << 20)),
        ranks 2;

    /// Four ranks, 4 MiB segments, small rings and Medium payloads (AM path under
    /// back-pressure when forced).
    four_ranks_small_rings: ProcRunner::new().builder(four_ranks_small_rings_clients),
        ranks 4;

    /// Five ranks that sleep when they wait (`WaitPolicy::Block`): the shared-memory
    /// barrier's releases must wake them (a lost wake-up costs a 10 ms sleep per barrier,
    /// and the runner's watchdog ends a hang).
    five_ranks_blocking: ProcRunner::new().builder(five_ranks_blocking_clients),
        ranks 5;
}
