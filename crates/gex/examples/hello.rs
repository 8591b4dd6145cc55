//! Hello world: every rank sends a Short request to the next rank, whose handler
//! replies; then all ranks meet in a barrier. Run alone it starts itself on 4 ranks;
//! under a launcher (`gex-run -n 2 target/release/examples/hello`) it is one rank.
use gex::prelude::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = gex::launch_or_start(4, gex::builder().segment_size(1 << 16))?;
    let (me, n) = (client.rank(), client.size());
    let mut ep = client.endpoint(0)?;
    let pong = Arc::new(AtomicU32::new(u32::MAX));
    let p = pong.clone();
    // Handlers run inside gex calls on this endpoint; a request handler may reply once.
    let on_pong = ep
        .register(move |_t: &mut Token<'_>, am: Am<'_>| p.store(am.args()[0], Ordering::Release))?;
    let on_ping = ep.register(move |t: &mut Token<'_>, am: Am<'_>| {
        t.reply(on_pong, Body::short(am.args()))
            .expect("a request handler may reply")
    })?;
    ep.request(EpAddr::rank((me + 1) % n), on_ping, Body::short(&[me]))?;
    ep.wait_until(|| pong.load(Ordering::Acquire) == me);
    println!("hello from rank {me} of {n}");
    let world = ep.world();
    ep.barrier(&world)?;
    Ok(())
}
