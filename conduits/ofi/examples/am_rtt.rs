//! AM Short round trip over the ofi conduit, two ranks on this host, to compare with
//! libfabric's own `fi_pingpong` (see docs/ofi.md, "Performance").
//!
//! ```text
//! cargo run --release -p gex-conduit-ofi --example am_rtt [provider] [iterations]
//! ```
//! `provider` defaults to `tcp` (`tcp;ofi_rxm`); rank 0 prints the mean round trip.

use gex_coll::{Coll, CollExt};
use gex_conduit_ofi::Ofi;
use gex_core::{Am, Body, ClientBuilder, Config, EpAddr, Token};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let prov = args.get(1).cloned().unwrap_or_else(|| "tcp".into());
    let iters: u32 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(20_000);
    match gex_boot::spawn_self(2).expect("launch") {
        gex_boot::Role::Launcher(code) => std::process::exit(code),
        gex_boot::Role::Rank(boot) => {
            // The collectives layer for its barrier (it needs the RMA layer).
            let client = ClientBuilder::new()
                .layer::<gex_rma::Rma>()
                .layer::<Coll>()
                .config(Config::from_pairs([("GEX_OFI_PROVIDER", prov.as_str())]))
                .segment_size(64 << 10)
                .init::<Ofi>(boot)
                .expect("init");
            let me = client.rank();
            let mut ep = client.endpoint(0).expect("ep");
            let world = ep.world();
            let pongs = Arc::new(AtomicU32::new(0));
            let p = pongs.clone();
            let pong = ep
                .register(move |_t: &mut Token<'_>, _am: Am<'_>| {
                    p.fetch_add(1, Ordering::Release);
                })
                .expect("register");
            let ping = ep
                .register(move |t: &mut Token<'_>, _am: Am<'_>| {
                    t.reply(pong, Body::short(&[])).expect("reply");
                })
                .expect("register");
            ep.barrier(&world).expect("barrier");
            if me == 0 {
                let warm = iters / 10;
                let mut t0 = Instant::now();
                for i in 0..warm + iters {
                    if i == warm {
                        t0 = Instant::now();
                    }
                    ep.request(EpAddr::rank(1), ping, Body::short(&[]))
                        .expect("request");
                    ep.wait_until(|| pongs.load(Ordering::Acquire) > i);
                }
                let rtt = t0.elapsed() / iters;
                println!(
                    "ofi({}) AM Short round trip: {:.2} us over {iters} iterations",
                    client.conduit().report().provider(),
                    rtt.as_secs_f64() * 1e6
                );
            }
            ep.barrier(&world).expect("barrier");
            drop(ep);
            client.finalize().expect("finalize");
        }
    }
}
