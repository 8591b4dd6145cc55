//! The smp conduit in a job started by MPICH's Hydra `mpiexec`: the ranks bootstrap
//! through gex-boot's PMI-1 client (`gex_boot::from_env()` finds `PMI_FD`), open a
//! real client on the smp conduit, exchange Short AMs between every pair and finalize.
//!
//! The test runs `mpiexec.hydra -n 4 <this test binary> <test name> --exact …`
//! through gex-testkit's process runner (`Procs::mpiexec`); the copies play the
//! ranks. MPICH's `mpiexec.hydra` (or `mpiexec.mpich`) must be in `PATH` (`apt-get
//! install mpich`; `ci/test` installs it); without it the test fails loudly unless
//! `GEXTEST_ALLOW_NO_MPIEXEC=1`. (This test lives here rather than in gex-boot
//! because only the facade and benchmarks may depend on a conduit.)

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use gex_conduit_smp::Smp;
use gex_core::boot::Bootstrap;
use gex_core::{Am, Body, ClientBuilder, EpAddr, HandlerId, Token};
use gex_testkit::procs::{self, Procs};

const RANKS: u32 = 4;

/// What every rank does.
fn rank_body(boot: Box<dyn Bootstrap>) {
    assert_eq!(boot.name(), "pmi");
    let c = ClientBuilder::new()
        .segment_size(1 << 20)
        .init::<Smp>(boot)
        .expect("smp client under mpiexec");
    let (me, n) = (c.rank(), c.size());
    assert_eq!(n, RANKS);
    let mut ep = c.endpoint(0).unwrap();
    let replies = Arc::new(AtomicU32::new(0));
    let seen = replies.clone();
    ep.register_at(200, move |t: &mut Token<'_>, am: Am<'_>| {
        // args: [sender, nonce]; answer with [this rank, nonce + 1].
        assert_eq!(am.args()[0], t.src().rank);
        t.reply(HandlerId::at(201), Body::short(&[me, am.args()[1] + 1]))
            .unwrap();
    })
    .unwrap();
    ep.register_at(201, move |t: &mut Token<'_>, am: Am<'_>| {
        let from = t.src().rank;
        assert_eq!(am.args(), &[from, 1000 * me + from + 1]);
        seen.fetch_add(1, Ordering::Relaxed);
    })
    .unwrap();
    for peer in 0..n {
        ep.request(
            EpAddr::rank(peer),
            HandlerId::at(200),
            Body::short(&[me, 1000 * me + peer]),
        )
        .unwrap();
    }
    ep.wait_until(|| replies.load(Ordering::Relaxed) == n);
    gex_testkit::exchange_barrier(&mut ep).unwrap();
    c.finalize().expect("finalize");
}

/// The job must end with code 0 within 30 s (the runner's watchdog), every rank must
/// reach the end of [`rank_body`], and no rank process may survive it.
#[test]
fn smp_client_under_mpiexec() {
    let mpiexec = match procs::mpiexec("smp_client_under_mpiexec") {
        Ok(Some(m)) => m,
        Ok(None) => return,
        Err(e) => panic!("{e}"),
    };
    Procs::new(RANKS)
        .mpiexec(mpiexec)
        .timeout(Duration::from_secs(30))
        .run(rank_body)
        .assert_success();
}
