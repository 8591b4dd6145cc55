//! Multi-rank jobs through the facade: conduit selection at run time with [`gex::Job`].

use gex::spi::Conduit;
use gex::{Am, Client, ClientBuilder, EpAddr, Flags, Job, Token};
use gex_testkit::procs::Procs;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// Each rank asks every other rank for its rank number (Short request, Short reply)
/// and checks the sum.
struct AllPing;

impl Job for AllPing {
    type Output = Result<(), String>;
    fn run<C: Conduit>(self, client: Client<C>) -> Self::Output {
        let (me, n) = (client.rank(), client.size());
        let mut ep = client.endpoint(0).map_err(|e| e.to_string())?;
        let sum = Arc::new(AtomicU32::new(0));
        let replies = Arc::new(AtomicU32::new(0));
        let (s, r) = (sum.clone(), replies.clone());
        ep.register(128, move |t: &mut Token<'_>, _am: Am<'_>| {
            t.reply_short(129, &[me]).expect("reply");
        })
        .map_err(|e| e.to_string())?;
        ep.register(129, move |_t: &mut Token<'_>, am: Am<'_>| {
            s.fetch_add(am.args()[0], Ordering::Relaxed);
            r.fetch_add(1, Ordering::Relaxed);
        })
        .map_err(|e| e.to_string())?;
        for peer in (0..n).filter(|&p| p != me) {
            let _sent = ep
                .request_short(EpAddr::rank(peer), 128, &[], Flags::empty())
                .map_err(|e| e.to_string())?;
        }
        ep.wait_until(|| replies.load(Ordering::Relaxed) == n - 1);
        let want: u32 = (0..n).filter(|&p| p != me).sum();
        let got = sum.load(Ordering::Relaxed);
        ep.barrier().map_err(|e| e.to_string())?;
        drop(ep);
        client.finalize().map_err(|e| e.to_string())?;
        if got == want {
            Ok(())
        } else {
            Err(format!("rank {me}: sum {got}, expected {want}"))
        }
    }
}

#[test]
fn four_ranks_on_the_default_conduit() {
    Procs::new(4)
        .run(|boot| {
            let r = gex::init_with_boot(
                ClientBuilder::new().segment_size(1 << 16),
                boot,
                None,
                AllPing,
            );
            match r {
                Ok(Ok(())) => {}
                Ok(Err(e)) => panic!("{e}"),
                Err(e) => panic!("init: {e}"),
            }
        })
        .assert_success();
}

#[test]
fn loopback_refuses_a_multi_rank_job() {
    // `-> ()`: every rank ends its process itself.
    let r = Procs::new(2).run(|boot| -> () {
        let r = gex::init_with_boot(
            ClientBuilder::new().segment_size(4096),
            boot,
            Some("loopback"),
            AllPing,
        );
        let e = r.expect_err("loopback is one rank only");
        eprintln!("expected failure: {e}");
        std::process::exit(3);
    });
    // Every rank fails to initialise: the job must end with an error, not hang.
    assert!(r.code().is_some_and(|c| c != 0), "{r}");
    r.assert_clean();
}
