//! Closing a job over the network: a rank that finishes first must not cancel what its
//! peers still have in flight to it. A dropped endpoint's libfabric resources are served
//! until the job-wide barrier of `Client::finalize` (docs/ofi.md, "Closing").
//!
//! The case that found it: a get whose event was dropped, from a peer that leaves the
//! final barrier first and exits. Before the fix the peer's connection was reset under
//! the get and the initiator died with "native RMA or atomic completed in error:
//! Operation canceled" (tcp;ofi_rxm).

use gex_conduit_ofi::Ofi;
use gex_core::{Am, Body, ClientBuilder, Config, EpAddr, Nb, Token};
use gex_rma::{GlobalPtr, Rma, RmaExt};
use gex_testkit::exchange_barrier;
use gex_testkit::procs::Procs;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

const SEGMENT: usize = 16 << 20;

/// Clients with the RMA layer (the gets of the first test).
fn builder() -> ClientBuilder<((), Rma)> {
    gex_testkit::rma::client_builder()
        .config(Config::from_pairs([
            // Both ranks run on this host: the ofi conduit alone (not the facade's
            // hybrid `Hybrid<Smp, Ofi>`) carries everything over the network.
            ("GEX_OFI_PROVIDER", "tcp"),
        ]))
        .segment_size(SEGMENT)
}

/// Runs `body` as a 2-rank job of this test, `rounds` times; every job must succeed.
fn jobs(test: &str, rounds: usize, body: fn(&gex_core::Client<Ofi>)) {
    for round in 0..rounds {
        let r = Procs::new(2).test(test).run(|boot| {
            let client = builder().init::<Ofi>(boot).expect("init");
            body(&client);
            client.finalize().expect("finalize");
        });
        if let Err(e) = r.result() {
            panic!("round {round}: {e}");
        }
    }
}

/// Rank 1 starts large gets from rank 0 and drops their events; rank 0 leaves the
/// barrier (which rank 1's gets need not have completed by) and closes at once.
#[test]
fn abandoned_gets_survive_the_target_closing_first() {
    jobs(
        "abandoned_gets_survive_the_target_closing_first",
        4,
        |client| {
            let mut ep = client.endpoint(0).expect("ep");
            if ep.rank() == 1 {
                let src = GlobalPtr::<u8>::new(EpAddr::rank(0), 0);
                for _ in 0..4 {
                    drop(ep.get(vec![0u8; SEGMENT / 2], src, Nb).expect("get"));
                }
            }
            exchange_barrier(&mut ep).expect("barrier");
        },
    );
}

/// Rank 0 sends its last messages and closes at once; rank 1 still receives every one.
#[test]
fn last_messages_of_a_closing_rank_arrive() {
    jobs("last_messages_of_a_closing_rank_arrive", 3, |client| {
        const N: u32 = 200;
        let mut ep = client.endpoint(0).expect("ep");
        let got = Arc::new(AtomicU32::new(0));
        let g = got.clone();
        let h = ep
            .register(move |_t: &mut Token<'_>, am: Am<'_>| {
                assert_eq!(am.payload().len(), 8 << 10);
                g.fetch_add(1, Ordering::Release);
            })
            .expect("register");
        exchange_barrier(&mut ep).expect("barrier");
        if client.rank() == 0 {
            let payload = vec![7u8; 8 << 10];
            for _ in 0..N {
                ep.request(EpAddr::rank(1), h, Body::medium(&[], &payload))
                    .expect("request");
            }
        } else {
            ep.wait_until(|| got.load(Ordering::Acquire) == N);
        }
    });
}
