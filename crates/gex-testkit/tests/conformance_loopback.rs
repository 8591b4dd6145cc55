//! The conformance suite on gex-core's one-rank `Loopback` conduit.

use gex_core::loopback::Loopback;
use gex_testkit::conformance::SingletonRunner;

gex_testkit::suite_tests! {
    suite: core,
    conduit: Loopback,
    runner: SingletonRunner::default(),
    ranks: 1,
    exclude: {
        flood_one_rank: "needs 3 ranks; loopback runs a job of one",
        back_pressure: "loopback's queues are unbounded: non-waiting requests never report WouldBlock",
    },
}

mod two_endpoints {
    use super::*;

    gex_testkit::suite_tests! {
        suite: core,
        conduit: Loopback,
        runner: SingletonRunner::default(),
        ranks: 1,
        endpoints: 2,
        exclude: {
            flood_one_rank: "needs 3 ranks; loopback runs a job of one",
            back_pressure: "loopback's queues are unbounded: non-waiting requests never report WouldBlock",
        },
    }
}
