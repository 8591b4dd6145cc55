//! A threaded runtime: every rank runs `WORKERS` worker threads, each driving its own
//! endpoint made at run time (`Client::create_endpoint`), and each worker exchanges
//! Short AMs with the worker of the same index on the next rank (the endpoint of the
//! same index there: ranks that create their endpoints in the same order get the same
//! indices). No lock is shared between the workers: each endpoint has its own queues and
//! polls only them (docs/threads.md, "Threading modes", mode (c)). Run alone it starts
//! itself on 2 ranks; under a launcher (`gex-run -n 3 target/release/examples/threaded_runtime`)
//! it is one rank. Needs a conduit that makes endpoints at run time (smp, the default).
use gex::Endpoint;
use gex::prelude::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Worker threads (and endpoints made at run time) per rank.
const WORKERS: u16 = 3;
/// Round trips each worker makes with its partner on the next rank.
const ROUNDS: u64 = 1000;

/// One worker: round trips from its endpoint to the endpoint of the same index on rank
/// `next`, while serving the requests of the worker of rank `prev`.
fn worker(ep: &mut Endpoint, next: u32) -> Result<u64, Box<dyn std::error::Error + Send + Sync>> {
    let me = ep.addr();
    let (pongs, served) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (p, s) = (pongs.clone(), served.clone());
    let on_pong = ep.register(move |_: &mut Token<'_>, am: Am<'_>| {
        p.fetch_add(u64::from(am.args()[0]), Ordering::Release);
    })?;
    let on_ping = ep.register(move |t: &mut Token<'_>, _: Am<'_>| {
        // Messages to this endpoint come from the partner's endpoint of the same index.
        assert_eq!(t.src().ep, me.ep, "a worker hears from its partner only");
        s.fetch_add(1, Ordering::Relaxed);
        t.reply(on_pong, Body::short(&[1]))
            .expect("a request handler may reply");
    })?;
    let partner = EpAddr::new(next, me.ep);
    for i in 1..=ROUNDS {
        ep.request(partner, on_ping, Body::short(&[]))?;
        ep.wait_until(|| pongs.load(Ordering::Acquire) == i);
    }
    // Serve the previous rank's worker to its last request before closing.
    ep.wait_until(|| served.load(Ordering::Relaxed) == ROUNDS);
    Ok(pongs.load(Ordering::Acquire))
}

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let client = gex::launch_or_start(2, gex::builder().segment_size(1 << 16))?;
    let (me, n) = (client.rank(), client.size());
    let mut ep0 = client.endpoint(0)?;
    let workers = (0..WORKERS)
        .map(|_| client.create_endpoint())
        .collect::<Result<Vec<_>, _>>()?;
    // Every rank has made its workers' endpoints before any worker sends (a send to an
    // endpoint not made yet is `ConduitError::NoEndpoint`).
    let world = ep0.world();
    ep0.barrier(&world)?;
    let next = (me + 1) % n;
    let results = std::thread::scope(|s| {
        let handles: Vec<_> = workers
            .into_iter()
            .map(|mut ep| {
                s.spawn(move || {
                    let k = ep.index();
                    let r = worker(&mut ep, next);
                    (k, r)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a worker panicked"))
            .collect::<Vec<_>>()
    });
    for (k, r) in results {
        let trips = r?;
        println!(
            "rank {me} of {n}: worker endpoint {k} made {trips} round trips with rank {next}'s endpoint {k}"
        );
    }
    ep0.barrier(&world)?;
    Ok(())
}
