//! Hello world over active messages.
//!
//! Every rank registers two handlers, sends a Short request carrying its rank to the
//! next rank, and waits for the reply (sent by the request handler); then it prints a
//! greeting, and all ranks meet in a barrier.
//!
//! ```text
//! cargo run --release --example hello -p gex            # launches itself on 4 ranks
//! gex-run -n 4 target/release/examples/hello            # or under the launcher
//! GEX_CONDUIT=smp cargo run --example hello -p gex      # conduit chosen at run time
//! ```

use gex::boot::Role;
use gex::spi::Conduit;
use gex::{Am, Client, ClientBuilder, EpAddr, Flags, Job, Token};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// Ranks started when the program is run without a launcher.
const RANKS: u32 = 4;
/// Request handler: replies to the sender with the argument it got.
const H_PING: u8 = 128;
/// Reply handler: records the argument of the reply.
const H_PONG: u8 = 129;

struct Hello;

impl Job for Hello {
    type Output = Result<(), Box<dyn std::error::Error>>;

    fn run<C: Conduit>(self, client: Client<C>) -> Self::Output {
        let (me, n) = (client.rank(), client.size());
        let mut ep = client.endpoint(0)?;
        let pong = Arc::new(AtomicU32::new(u32::MAX));
        let p = pong.clone();
        ep.register(H_PING, |t: &mut Token<'_>, am: Am<'_>| {
            // A handler must not block; replying is allowed once, from a request.
            if let Err(e) = t.reply_short(H_PONG, am.args()) {
                say(&format!("reply to {} failed: {e}", t.src()));
            }
        })?;
        ep.register(H_PONG, move |_t: &mut Token<'_>, am: Am<'_>| {
            p.store(am.args()[0], Ordering::Release);
        })?;
        // Handlers run only while this endpoint polls (inside gex calls), so a
        // request that arrives early waits until both handlers are registered.
        let next = EpAddr::rank((me + 1) % n);
        let _sent = ep.request_short(next, H_PING, &[me], Flags::empty())?;
        ep.wait_until(|| pong.load(Ordering::Acquire) == me);
        println!("hello from rank {me} of {n}");

        ep.barrier()?;
        drop(ep);
        client.finalize()?;
        Ok(())
    }
}

/// One line on stderr in a single write, so lines of several ranks do not mix.
fn say(msg: &str) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("hello: {msg}\n").as_bytes());
}

fn main() -> ExitCode {
    let boot = match gex::boot::spawn_self(RANKS) {
        Ok(Role::Launcher(code)) => return ExitCode::from((code & 0xff) as u8),
        Ok(Role::Rank(boot)) => boot,
        Err(e) => {
            say(&format!("cannot launch: {e}"));
            return ExitCode::FAILURE;
        }
    };
    match gex::init_with_boot(
        ClientBuilder::new().segment_size(1 << 16),
        boot,
        None,
        Hello,
    ) {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) => {
            say(&e.to_string());
            ExitCode::FAILURE
        }
        Err(e) => {
            say(&format!("initialisation failed: {e}"));
            ExitCode::FAILURE
        }
    }
}
