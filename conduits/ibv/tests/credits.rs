//! Credit flow control over the emulation: replies queued for want of reply credits
//! leave even when the endpoint that queued them is dropped right after (the core
//! drains an endpoint whose conduit still holds messages, `ConduitEp::has_outgoing`).
//! Thread ranks of one process (gex-testkit's `ThreadJob`), each with its own emulated
//! device.

use gex_core::boot::Bootstrap;
use gex_core::{Am, Body, ClientBuilder, EpAddr, HandlerId, Injected, Token};
use gex_testkit::boot::ThreadJob;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

mod common;

const REQ: HandlerId = HandlerId::at(200);
const REP: HandlerId = HandlerId::at(201);

/// The `multi_ep` hang: an endpoint answers requests faster than their sender consumes
/// the replies, so its reply window fills and the last replies wait in its queue; then
/// it has nothing left to do and is dropped. Before the fix the ibv endpoint went to its
/// grave without a poll, the queued replies never left, and the requester waited for
/// them forever.
///
/// Deterministic: rank 0 sends 4 requests without polling (`try_request`: request
/// credits come back by RDMA WRITE, no poll needed), so it consumes no reply and returns
/// no reply credit; rank 1 (a window of 2) sends 2 replies and queues 2, checks its
/// report says so, and drops its endpoint. Rank 0 then waits for all 4 replies.
#[test]
fn replies_queued_at_a_dropped_endpoint_still_leave() {
    let job = ThreadJob::new(2);
    let registered = Barrier::new(2);
    let handled = Barrier::new(2);
    job.run(|boot| {
        let rank = boot.rank();
        let client = common::emu_client(
            ClientBuilder::new(),
            boot,
            &[("GEX_IBV_CONNECT", "eager"), ("GEX_IBV_CREDITS", "2")],
            64 << 10,
        );
        let mut ep = client.endpoint(0).expect("ep");
        let count = Arc::new(AtomicU64::new(0));
        // Handler tables are the same on every rank: rank 1 counts requests (and
        // replies to each), rank 0 counts replies.
        let c = count.clone();
        ep.register_at(REQ.index(), move |t: &mut Token<'_>, am: Am<'_>| {
            t.reply(REP, Body::short(am.args())).expect("reply");
            c.fetch_add(1, Ordering::Relaxed);
        })
        .expect("register");
        let c = count.clone();
        ep.register_at(REP.index(), move |_t: &mut Token<'_>, _am: Am<'_>| {
            c.fetch_add(1, Ordering::Relaxed);
        })
        .expect("register");
        registered.wait();
        if rank == 0 {
            let deadline = Instant::now() + Duration::from_secs(30);
            for i in 0..4 {
                while ep
                    .try_request(EpAddr::rank(1), REQ, Body::short(&[i]))
                    .expect("request")
                    == Injected::WouldBlock
                {
                    assert!(Instant::now() < deadline, "request {i} found no credit");
                    std::thread::yield_now();
                }
            }
            handled.wait();
            common::wait_for_count(
                &mut ep,
                &count,
                4,
                Duration::from_secs(20),
                "replies (the replies queued at the dropped endpoint never left?)",
            );
        } else {
            common::wait_for_count(&mut ep, &count, 4, Duration::from_secs(30), "requests");
            let report = ep.report();
            assert!(
                report.contains("2 replies queued"),
                "the reply window did not fill as planned:\n{report}"
            );
            handled.wait();
        }
        // Rank 1: the endpoint goes with 2 replies queued.
        gex_testkit::finalize(ep, client).expect("finalize");
    })
    .expect("job");
}
