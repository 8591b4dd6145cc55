//! The gex conformance suite (gex-testkit) on the smp conduit: every case runs as a
//! real multi-process job started by gex-testkit's process runner.
//!
//! Exclusions: none. Every case of the suite passes on smp.

use gex_conduit_smp::Smp;
use gex_core::{Config, WaitPolicy};
use gex_testkit::conformance::{self, Builder};
use gex_testkit::procs::ProcRunner;

/// The runner of every shape: each rank builds its client with `builder`, 1 MiB
/// segments.
fn runner(builder: fn() -> Builder) -> ProcRunner<Smp> {
    ProcRunner::new().sized(builder, 1 << 20)
}

/// The clients of `small_rings`.
fn small_rings_clients() -> Builder {
    conformance::builder().config(Config::from_pairs([
        ("GEX_SMP_RING_SIZE", "4096"),
        ("GEX_SMP_MAX_MEDIUM", "1024"),
    ]))
}

/// The clients of `blocking_waits`.
fn blocking_waits_clients() -> Builder {
    conformance::builder().wait_policy(WaitPolicy::Block)
}

gex_testkit::suite_modules! {
    suite: core,
    conduit: Smp;

    /// Three ranks with two endpoints each, default rings.
    three_ranks_two_eps: runner(conformance::builder), ranks 3, endpoints 2;

    /// Two ranks on 4 KiB rings, so back-pressure and reply deferral happen constantly.
    small_rings: runner(small_rings_clients), ranks 2;

    /// Four ranks that always sleep in the kernel while waiting (doorbell wake-ups).
    blocking_waits: runner(blocking_waits_clients), ranks 4;
}
