//! The gex conformance suite (gex-testkit) on the ibv conduit over the software RC
//! emulation (`GEX_IBV_PROVIDER=emu`): every case runs as a real multi-process job
//! started by gex-testkit's process runner, the ranks' emulated devices talking over
//! abstract Unix sockets.
//!
//! Exclusions: none.

use gex_conduit_ibv::Ibv;
use gex_core::{Config, WaitPolicy};
use gex_testkit::conformance::{self, Builder};
use gex_testkit::procs::ProcRunner;

/// Longest one case may run (they take a few seconds here).
const CASE_LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

fn runner(builder: impl Fn() -> Builder + 'static) -> ProcRunner<Ibv> {
    ProcRunner::new()
        .sized(builder, 256 << 10)
        .timeout(CASE_LIMIT)
}

fn emu() -> Builder {
    conformance::builder().config(Config::from_pairs([("GEX_IBV_PROVIDER", "emu")]))
}

/// The clients of `emu_two_ranks_eager`.
fn emu_two_ranks_eager_clients() -> Builder {
    conformance::builder().config(Config::from_pairs([
        ("GEX_IBV_PROVIDER", "emu"),
        ("GEX_IBV_CONNECT", "eager"),
    ]))
}

/// The clients of `emu_three_ranks_two_eps_small_window_blocking`.
fn emu_three_ranks_two_eps_small_window_blocking_clients() -> Builder {
    conformance::builder()
        .config(Config::from_pairs([
            ("GEX_IBV_PROVIDER", "emu"),
            ("GEX_IBV_CREDITS", "2"),
            ("GEX_IBV_MAX_MEDIUM", "1024"),
        ]))
        .wait_policy(WaitPolicy::Block)
}

gex_testkit::suite_modules! {
    suite: core,
    conduit: Ibv;

    /// Two ranks, default settings (queue pairs made on first contact).
    emu_two_ranks: runner(emu), ranks 2;

    /// Two ranks, every queue pair made and connected at open (`GEX_IBV_CONNECT=eager`).
    emu_two_ranks_eager: runner(emu_two_ranks_eager_clients), ranks 2;

    /// Three ranks with two endpoints each, a credit window of 2 and 1 KiB Mediums (flow
    /// control and reply queueing happen constantly), blocking waits on the completion
    /// channel.
    emu_three_ranks_two_eps_small_window_blocking:
        runner(emu_three_ranks_two_eps_small_window_blocking_clients),
        ranks 3, endpoints 2;
}
