//! The gex conformance suite (gex-testkit) on the ofi conduit: every case runs as a real
//! multi-process job started by gex-testkit's process runner, over libfabric's `tcp;ofi_rxm`
//! and `shm` providers on this host.
//!
//! Exclusions: none. Every case passes on both providers.

use gex_conduit_ofi::Ofi;
use gex_core::{Config, WaitPolicy};
use gex_testkit::conformance::{self, Builder};
use gex_testkit::procs::ProcRunner;

/// Longest one case may run (they take well under a few seconds here).
const CASE_LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

/// The runner of every shape: each rank builds its client with `builder` (the
/// suite's probe layer) and 256 KiB segments; a job still running after
/// [`CASE_LIMIT`] is ended and fails.
fn runner(builder: impl Fn() -> Builder + 'static) -> ProcRunner<Ofi> {
    ProcRunner::new()
        .sized(builder, 256 << 10)
        .timeout(CASE_LIMIT)
}

fn provider(p: &'static str) -> impl Fn() -> Builder {
    move || conformance::builder().config(Config::from_pairs([("GEX_OFI_PROVIDER", p)]))
}

/// The clients of `tcp_small_window_blocking`.
fn tcp_small_window_blocking_clients() -> Builder {
    conformance::builder()
        .config(Config::from_pairs([
            ("GEX_OFI_PROVIDER", "tcp"),
            ("GEX_OFI_MULTI_RECV", "0"),
            ("GEX_OFI_CREDITS", "4"),
            ("GEX_OFI_MAX_MEDIUM", "1024"),
        ]))
        .wait_policy(WaitPolicy::Block)
}

/// The clients of `shm_three_ranks_two_eps_blocking`.
fn shm_three_ranks_two_eps_blocking_clients() -> Builder {
    provider("shm")().wait_policy(WaitPolicy::Block)
}

gex_testkit::suite_modules! {
    suite: core,
    conduit: Ofi;

    /// tcp;ofi_rxm, two ranks.
    tcp: runner(provider("tcp")), ranks 2;

    /// tcp;ofi_rxm, three ranks with two endpoints each (one libfabric domain per endpoint).
    tcp_three_ranks_two_eps: runner(provider("tcp")), ranks 3, endpoints 2;

    /// shm, two ranks.
    shm: runner(provider("shm")), ranks 2;

    /// tcp;ofi_rxm without multi-receive (the pre-posted buffer pool), a credit window of 4
    /// and 1 KiB Mediums, so flow control and reply queueing happen constantly; blocking
    /// waits (the CQ wait object).
    tcp_small_window_blocking: runner(tcp_small_window_blocking_clients), ranks 2;

    /// shm, three ranks with two endpoints each, always sleeping in the CQ's wait object.
    shm_three_ranks_two_eps_blocking: runner(shm_three_ranks_two_eps_blocking_clients),
        ranks 3, endpoints 2;
}
