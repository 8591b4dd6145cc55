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

gex_testkit::suite_modules! {
    suite: core,
    conduit: Smp;

    /// AM suite, two thread ranks with two endpoints each.
    core_two_ranks: ThreadRunner::new().builder(|| conformance::builder().segment_size(1 << 20)),
        ranks 2, endpoints 2;

    /// AM suite, four thread ranks, automatic wait policy (spin then block when ranks
    /// outnumber cores).
    core_four_ranks: ThreadRunner::new().builder(|| conformance::builder().segment_size(1 << 20)),
        ranks 4;
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

/// The clients of `rma_four_ranks`.
fn rma_four_ranks_clients() -> ClientBuilder<impl LayerSet> {
    gex_testkit::rma::client_builder().segment_size(4 << 20)
}

gex_testkit::suite_modules! {
    suite: rma,
    conduit: Smp;

    /// RMA suite (puts, gets, VIS, atomics, barrier visibility), two thread ranks, 17 MiB
    /// segments (the 16 MiB case runs).
    rma_two_ranks: ThreadRunner::new()
        .builder(|| gex_testkit::rma::client_builder().segment_size(17 << 20)),
        ranks 2;

    /// RMA suite, four thread ranks, automatic wait policy (spin then block when ranks
    /// outnumber cores).
    rma_four_ranks: ThreadRunner::new().builder(rma_four_ranks_clients), ranks 4;
}

/// Four thread ranks of this process: the job layout says they are one process, every
/// rank maps every other's region (all are neighbours, so their segments are reached
/// by a plain copy), the automatic wait policy spins then blocks when the ranks
/// outnumber the cores, and nothing is left in `/dev/shm`.
#[test]
fn thread_ranks_share_one_process_and_leave_nothing() {
    let before = gex_testkit::procs::shm_names();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let job = gex_testkit::boot::ThreadJob::new(4);
    let out = job
        .run(|boot| {
            let client = ClientBuilder::new()
                .segment_size(1 << 16)
                .init::<Smp>(Box::new(boot))
                .unwrap();
            let layout = client.layout().clone();
            let neighbours = client.conduit().neighbours().to_vec();
            let wait = client.wait_policy();
            client.finalize().unwrap();
            (layout, neighbours, wait)
        })
        .unwrap();
    for (layout, neighbours, wait) in &out {
        assert!(layout.one_process(), "{layout:?}");
        assert_eq!(layout.process, vec![std::process::id(); 4]);
        assert_eq!(layout.process_peers(2), vec![0, 1, 2, 3]);
        assert_eq!(neighbours, &vec![0, 1, 2, 3]);
        if cores < 4 {
            assert!(
                matches!(wait, WaitPolicy::SpinThenBlock { .. }),
                "4 thread ranks on {cores} cores wait with {wait:?}"
            );
        }
    }
    assert_eq!(job.finalized(), vec![Some(0); 4]);
    let after = gex_testkit::procs::shm_names();
    assert!(
        after.iter().all(|n| before.contains(n)),
        "left in /dev/shm: {after:?}"
    );
}

/// A thread rank that panics while the others wait for it inside the conduit (an
/// all-gather over the rings that can never complete): the process ends promptly with
/// exit code 1 and a message naming the rank, rather than hanging. Run in a child
/// process (gex-testkit's process runner, one process), since the thread launcher ends
/// the process it runs in.
#[test]
fn a_panicking_thread_rank_ends_the_process_naming_it() {
    let r = gex_testkit::procs::Procs::new(1).run(|_boot| {
        let out = gex_testkit::boot::ThreadJob::new(3).run(|boot| {
            let client = ClientBuilder::new()
                .segment_size(1 << 16)
                .init::<Smp>(Box::new(boot))
                .unwrap();
            let mut ep = client.endpoint(0).unwrap();
            if client.rank() == 1 {
                panic!("rank one gives up");
            }
            gex_testkit::exchange_barrier(&mut ep).unwrap();
        });
        // Not reached: ranks 0 and 2 wait for rank 1 forever, so the thread launcher
        // ends the process after its grace period (the code checked below says so).
        eprintln!("the thread job returned: {out:?}");
    });
    assert_eq!(r.code, Some(1), "{r}");
    let log = &r.ranks[0].log;
    assert!(
        log.contains("gex: thread rank 1 panicked: rank one gives up")
            && log.contains("still running"),
        "{log}"
    );
    assert!(r.took < std::time::Duration::from_secs(30), "{r}");
}
