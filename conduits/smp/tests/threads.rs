//! The conformance suites (gex-testkit's core AM suite and its RMA suite, which covers
//! gex-rma's puts, gets and remote atomics) on the smp conduit with **thread ranks**:
//! every case runs as a job of gex-boot's thread ranks in this test process
//! ([`gex_boot::threads`] through gex-testkit's `ThreadRunner`), each rank mapping every
//! rank's region, its own process's included. The 4-rank shapes run on more ranks than
//! the machine's 2 cores in CI: the automatic wait policy (spin then block) and the
//! `Block` policy must still make progress.
//!
//! Exclusions: none.

use gex_conduit_smp::Smp;
use gex_core::layer::LayerSet;
use gex_core::{ClientBuilder, WaitPolicy};
use gex_testkit::conformance;
use gex_testkit::threads::ThreadRunner;

/// AM suite, two thread ranks with two endpoints each.
mod core_two_ranks {
    use super::*;
    gex_testkit::suite_tests! {
        suite: core,
        conduit: Smp,
        runner: ThreadRunner::new().builder(|| conformance::builder().segment_size(1 << 20)),
        ranks: 2,
        endpoints: 2,
    }
}

/// AM suite, four thread ranks, automatic wait policy (spin then block when ranks
/// outnumber cores).
mod core_four_ranks {
    use super::*;
    gex_testkit::suite_tests! {
        suite: core,
        conduit: Smp,
        runner: ThreadRunner::new().builder(|| conformance::builder().segment_size(1 << 20)),
        ranks: 4,
    }
}

/// AM suite, four thread ranks that always sleep in the kernel while waiting: the
/// doorbells' futex wake-ups between threads of one process.
mod core_four_ranks_blocking {
    use super::*;
    gex_testkit::suite_tests! {
        suite: core,
        conduit: Smp,
        runner: ThreadRunner::new().builder(|| {
            conformance::builder()
                .segment_size(1 << 20)
                .wait_policy(WaitPolicy::Block)
        }),
        ranks: 4,
    }
}

/// RMA suite (puts, gets, VIS, atomics, barrier visibility), two thread ranks, 17 MiB
/// segments (the 16 MiB case runs).
mod rma_two_ranks {
    use super::*;
    gex_testkit::suite_tests! {
        suite: rma,
        conduit: Smp,
        runner: ThreadRunner::new().builder(|| gex_testkit::rma::client_builder().segment_size(17 << 20)),
        ranks: 2,
    }
}

/// RMA suite, four thread ranks, automatic wait policy (spin then block when ranks
/// outnumber cores).
mod rma_four_ranks {
    use super::*;
    fn builder() -> ClientBuilder<impl LayerSet> {
        gex_testkit::rma::client_builder().segment_size(4 << 20)
    }
    gex_testkit::suite_tests! {
        suite: rma,
        conduit: Smp,
        runner: ThreadRunner::new().builder(builder),
        ranks: 4,
    }
}
