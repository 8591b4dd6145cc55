//! Multi-rank jobs through the facade: the conduit chosen at run time, either
//! monomorphised ([`gex::Job`]) or enum-dispatched ([`gex::AnyConduit`]).

use gex::prelude::*;
use gex::spi::Conduit;
use gex::{ClientBuilder, Job};
use gex_testkit::procs::Procs;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// Each rank asks every other rank for its rank number (Short request, Short reply),
/// checks the sum, then puts, gets, adds atomically and allreduces: every layer of the
/// default set through one endpoint and one progress engine.
fn all_layers<C: Conduit>(client: gex::core::Client<C>) -> Result<(), String> {
    let rank = client.rank();
    let e = |e: &dyn std::fmt::Display| format!("rank {rank}: {e}");
    let mut ep = client.endpoint(0).map_err(|x| e(&x))?;
    let world = ep.world();
    let (me, n) = (world.rank(), world.size());
    let sum = Arc::new(AtomicU32::new(0));
    let replies = Arc::new(AtomicU32::new(0));
    let (s, r) = (sum.clone(), replies.clone());
    let pong = ep
        .register(move |_t: &mut Token<'_>, am: Am<'_>| {
            s.fetch_add(am.args()[0], Ordering::Relaxed);
            r.fetch_add(1, Ordering::Relaxed);
        })
        .map_err(|x| e(&x))?;
    let ping = ep
        .register(move |t: &mut Token<'_>, _am: Am<'_>| {
            t.reply(pong, Body::short(&[me])).expect("reply");
        })
        .map_err(|x| e(&x))?;
    for peer in (0..n).filter(|&p| p != me) {
        ep.request(EpAddr::rank(peer), ping, Body::short(&[]))
            .map_err(|x| e(&x))?;
    }
    ep.wait_until(|| replies.load(Ordering::Relaxed) == n - 1);
    let want: u32 = (0..n).filter(|&p| p != me).sum();
    let got = sum.load(Ordering::Relaxed);
    if got != want {
        return Err(format!("rank {me}: sum {got}, expected {want}"));
    }

    // RMA into the next rank's segment and an atomic count on rank 0.
    let next = EpAddr::rank((me + 1) % n);
    let slot = GlobalPtr::<u32>::new(next, 4 * me as usize);
    ep.put(slot, &[me + 100], Blocking).map_err(|x| e(&x))?;
    let back = ep.get(vec![0u32], slot, Nb).map_err(|x| e(&x))?;
    let ad = ep
        .atomic_domain::<u64>(&world, AtomicOps::ADD | AtomicOps::GET)
        .map_err(|x| e(&x))?;
    let counter = GlobalPtr::<u64>::new(EpAddr::rank(0), 1024);
    let f = AtomicFlags::empty();
    let added = ep
        .atomic(&ad, counter, AtomicOp::Add(1), f, Nb)
        .map_err(|x| e(&x))?;
    if ep.wait(back).map_err(|x| e(&x))? != [me + 100] {
        return Err(format!("rank {me}: get returned another value"));
    }
    ep.wait(added).map_err(|x| e(&x))?;
    let total = ep
        .collective(
            &world,
            Allreduce::new(vec![u64::from(me)], BuiltinOp::Sum),
            Blocking,
        )
        .map_err(|x| e(&x))?;
    if total[0] != u64::from(n * (n - 1) / 2) {
        return Err(format!("rank {me}: allreduce gave {}", total[0]));
    }
    ep.barrier(&world).map_err(|x| e(&x))?;
    let count = ep
        .fetch_atomic(&ad, counter, AtomicOp::Get, f, Blocking)
        .map_err(|x| e(&x))?;
    if count != u64::from(n) {
        return Err(format!("rank {me}: counter {count}, expected {n}"));
    }
    ep.barrier(&world).map_err(|x| e(&x))?;
    drop(ep);
    client.finalize().map_err(|x| e(&x))
}

/// [`all_layers`] as a monomorphised job.
struct AllLayers;

impl Job for AllLayers {
    type Output = Result<(), String>;
    fn run<C: Conduit>(self, client: gex::core::Client<C>) -> Self::Output {
        all_layers(client)
    }
}

#[test]
fn four_ranks_monomorphised_job() {
    Procs::new(4)
        .run(|boot| {
            let r =
                gex::init_with_boot(gex::builder().segment_size(1 << 16), boot, None, AllLayers);
            match r {
                Ok(Ok(())) => {}
                Ok(Err(e)) => panic!("{e}"),
                Err(e) => panic!("init: {e}"),
            }
        })
        .assert_success();
}

#[test]
fn four_ranks_enum_dispatched_client() {
    Procs::new(4)
        .run(|boot| {
            // No generics in user code: `gex::Client` is the enum-dispatched client.
            let client: gex::Client = gex::builder()
                .segment_size(1 << 16)
                .init::<gex::AnyConduit>(boot)
                .expect("init");
            assert_eq!(client.conduit_name(), "smp");
            all_layers(client).expect("job");
        })
        .assert_success();
}

#[test]
fn the_layers_are_the_builders_choice() {
    // A client of the core alone: the RMA and collective calls report the missing
    // layer instead of misbehaving.
    Procs::new(2)
        .run(|boot| {
            let client = ClientBuilder::new()
                .segment_size(4096)
                .init::<gex::AnyConduit>(boot)
                .expect("init");
            let mut ep = client.endpoint(0).expect("endpoint");
            let names: Vec<&str> = client.layers().iter().map(|l| l.name).collect();
            assert!(names.is_empty(), "{names:?}");
            let p = GlobalPtr::<u8>::new(ep.addr(), 0);
            let err = ep.put(p, &[1], Blocking).expect_err("no RMA layer");
            assert!(matches!(err, gex::rma::RmaError::NoLayer), "{err}");
            let world = ep.world();
            let err = ep.barrier(&world).expect_err("no collectives layer");
            assert!(matches!(err, gex::coll::CollError::Layer(_)), "{err}");
        })
        .assert_success();
}

#[test]
fn loopback_refuses_a_multi_rank_job() {
    // `-> ()`: every rank ends its process itself.
    let r = Procs::new(2).run(|boot| -> () {
        let r = gex::init_with_boot(
            gex::builder().segment_size(4096),
            boot,
            Some("loopback"),
            AllLayers,
        );
        let e = r.expect_err("loopback is one rank only");
        eprintln!("expected failure: {e}");
        std::process::exit(3);
    });
    // Every rank fails to initialise: the job must end with an error, not hang.
    assert!(r.code().is_some_and(|c| c != 0), "{r}");
    r.assert_clean();
}
