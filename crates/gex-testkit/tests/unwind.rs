//! Every exit path of an operation that borrows a buffer waits for its transfer
//! (issue 24, class "borrow ends on a path that does not wait"): two thread ranks over
//! the simulated fabric, rank 0 getting 4 KiB from rank 1 into a `Vec` it owns, while
//! something panics inside the blocking call.
//!
//! Each probe owns the destination for the whole test, so a transfer that lands after
//! the call gave the borrow back is seen, not undefined: once the call has unwound,
//! the test fills the buffer with a canary and serves the endpoint for a while; a
//! write after the call (the reply of a get the call stopped waiting for) breaks the
//! canary. On the code before issue 24 the AM-path probes fail that way (a handler's
//! panic or a layer hook's panic unwound out of the wait at once).
#![cfg(feature = "rma")]

use gex_core::layer::{self, Attach, Cx, Layer, Progress};
use gex_core::spi::Conduit;
use gex_core::{Am, Blocking, ClientBuilder, Endpoint, EpAddr, HandlerId, InitError, Token};
use gex_rma::{GlobalPtr, Rma, RmaError, RmaExt, ScopeRmaExt};
use gex_testkit::exchange_barrier;
use gex_testkit::sim::{Sim, SimConfig, run_sim};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const LEN: usize = 4096;
const CANARY: u8 = 0xee;
/// Where rank 1's data lies in its segment.
const AT: usize = 1024;

/// A layer whose progress hook panics once on rank 0 when armed (a panic that is not
/// a handler's: it unwinds through the endpoint's wait).
#[derive(Debug)]
struct Hook {
    armed: Arc<AtomicBool>,
    rank: u32,
}

/// The hook's arming switch (only the test that makes the hook busy arms it).
static HOOK_ARMED: std::sync::OnceLock<Arc<AtomicBool>> = std::sync::OnceLock::new();

impl Layer for Hook {
    const NAME: &'static str = "unwind-hook";
    fn attach<C: Conduit>(cx: &mut Attach<'_, C, Self>) -> Result<Self, InitError> {
        Ok(Hook {
            armed: HOOK_ARMED
                .get_or_init(|| Arc::new(AtomicBool::new(false)))
                .clone(),
            rank: cx.rank(),
        })
    }
    fn progress<C: Conduit>(self: std::pin::Pin<&mut Self>, _cx: &mut Cx<'_, C>) -> Progress {
        if self.rank == 0 && self.armed.swap(false, Ordering::SeqCst) {
            panic!("a layer's progress hook panics on purpose");
        }
        Progress::Idle
    }
}

fn cfg(shared_memory: bool) -> SimConfig {
    // Without shared memory the get goes through AMs (a request, a reply that rank 0's
    // handler copies into the destination).
    SimConfig {
        shared_memory,
        timeout: Duration::from_secs(60),
        ..SimConfig::default()
    }
}

/// Rank 1's part of every probe: fills its source, serves rank 0 until told to stop.
fn serve(ep: &mut Endpoint<Sim>, stop: &AtomicBool) {
    ep.segment().write(AT, &[7u8; LEN]).unwrap();
    exchange_barrier(ep).unwrap();
    ep.wait_until(|| stop.load(Ordering::Acquire));
    exchange_barrier(ep).unwrap();
}

/// After the probed call unwound on rank 0: the buffer holds the data the get moved
/// (it waited), then nothing writes it any more.
fn check_no_late_write(ep: &mut Endpoint<Sim>, buf: &mut [u8]) -> Result<(), String> {
    let landed = buf.iter().all(|&b| b == 7);
    buf.fill(CANARY);
    let t = std::time::Instant::now();
    while t.elapsed() < Duration::from_millis(200) {
        let _ = catch_unwind(AssertUnwindSafe(|| ep.poll()));
    }
    match (landed, buf.iter().position(|&b| b != CANARY)) {
        (true, None) => Ok(()),
        (_, Some(i)) => Err(format!(
            "byte {i} of the destination was written after the call unwound \
             (the get had {}landed when it did)",
            if landed { "" } else { "not " }
        )),
        (false, None) => Err("the call unwound before its get completed".into()),
    }
}

/// Registers `boom` (panics on purpose when rank 0 armed it) and `go` (rank 1: replies
/// with `boom`, so the reply carrying the panic is queued before the get's reply).
fn handlers(ep: &mut Endpoint<Sim>, armed: Arc<AtomicBool>) -> (HandlerId, HandlerId) {
    let boom = ep
        .register(move |_t: &mut Token<'_>, _am: Am<'_>| {
            if armed.swap(false, Ordering::SeqCst) {
                panic!("a handler panics on purpose");
            }
        })
        .unwrap();
    let go = ep
        .register(move |t: &mut Token<'_>, _am: Am<'_>| {
            t.reply_short(boom, &[]).unwrap();
        })
        .unwrap();
    (boom, go)
}

fn text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

fn run_probe(
    shared_memory: bool,
    probe: impl Fn(&mut Endpoint<Sim>, HandlerId, &mut [u8]) -> Result<String, String> + Sync,
) {
    let stop = AtomicBool::new(false);
    let out = run_sim(
        2,
        cfg(shared_memory),
        || {
            ClientBuilder::new()
                .layer::<Rma>()
                .layer::<Hook>()
                .segment_size(1 << 16)
        },
        |client| {
            let mut ep = client.endpoint(0).unwrap();
            let armed = Arc::new(AtomicBool::new(false));
            let (_boom, go) = handlers(&mut ep, armed.clone());
            if client.rank() == 1 {
                serve(&mut ep, &stop);
                return Ok(String::new());
            }
            exchange_barrier(&mut ep).unwrap();
            let mut buf = vec![0u8; LEN];
            armed.store(true, Ordering::SeqCst);
            let r = probe(&mut ep, go, &mut buf);
            let r = r.and_then(|what| check_no_late_write(&mut ep, &mut buf).map(|()| what));
            stop.store(true, Ordering::Release);
            exchange_barrier(&mut ep).unwrap();
            r
        },
    );
    for r in out {
        r.map(|what| {
            if !what.is_empty() {
                eprintln!("{what}");
            }
        })
        .unwrap_or_else(|e| panic!("{e}"));
    }
}

/// The source: rank 1's data.
fn src() -> GlobalPtr<u8> {
    GlobalPtr::new(EpAddr::rank(1), AT)
}

/// A blocking get into a borrowed buffer over AMs, during which a handler of rank 0
/// panics: the panic ends the call only once the get has landed.
#[test]
fn a_handlers_panic_ends_a_blocking_get_only_once_it_landed() {
    run_probe(false, |ep, go, buf| {
        ep.request_short(EpAddr::rank(1), go, &[])
            .map_err(|e| e.to_string())?;
        let r = catch_unwind(AssertUnwindSafe(|| ep.get(&mut *buf, src(), Blocking)));
        match r {
            Err(p) if text(&*p).contains("on purpose") => Ok("the handler's panic came out".into()),
            Err(p) => Err(format!("another panic: {}", text(&*p))),
            Ok(r) => Err(format!("the handler's panic was lost ({r:?})")),
        }
    });
}

/// The same on the direct path (shared memory): the get is a copy, complete before
/// any handler runs; the panic comes out of the next call that polls.
#[test]
fn a_handlers_panic_and_a_direct_get() {
    run_probe(true, |ep, go, buf| {
        ep.request_short(EpAddr::rank(1), go, &[])
            .map_err(|e| e.to_string())?;
        ep.get(&mut *buf, src(), Blocking)
            .map_err(|e| e.to_string())?;
        let raised = catch_unwind(AssertUnwindSafe(|| {
            let t = std::time::Instant::now();
            while t.elapsed() < Duration::from_secs(10) {
                ep.poll();
            }
        }));
        match raised {
            Err(p) if text(&*p).contains("on purpose") => Ok(String::new()),
            _ => Err("the handler's panic did not come out of a poll".into()),
        }
    });
}

/// A panic that is not a handler's (a layer's progress hook) unwinds through the
/// wait of a blocking get over AMs: the unwinding waits for the get to land.
#[test]
fn a_panic_inside_the_wait_waits_for_the_get_while_it_unwinds() {
    HOOK_ARMED
        .get_or_init(|| Arc::new(AtomicBool::new(false)))
        .store(true, Ordering::SeqCst);
    run_probe(false, |ep, _go, buf| {
        // The hook runs on the polls of the get's wait.
        layer::with::<Hook, _, _>(ep, |_, cx| cx.set_busy()).expect("the hook layer");
        let r = catch_unwind(AssertUnwindSafe(|| ep.get(&mut *buf, src(), Blocking)));
        match r {
            Err(p) if text(&*p).contains("on purpose") => Ok(String::new()),
            Err(p) => Err(format!("another panic: {}", text(&*p))),
            Ok(r) => Err(format!("the hook did not panic ({r:?})")),
        }
    });
}

/// A scoped get over AMs whose scope body is ended by a handler's panic (raised by a
/// poll inside the scope): the scope waits for the get before the panic leaves it.
#[test]
fn a_handlers_panic_inside_a_scope_waits_for_its_gets() {
    run_probe(false, |ep, go, buf| {
        ep.request_short(EpAddr::rank(1), go, &[])
            .map_err(|e| e.to_string())?;
        let r = catch_unwind(AssertUnwindSafe(|| {
            ep.scope(|s| {
                s.get_into(&mut *buf, src())?;
                loop {
                    s.poll();
                }
                #[allow(unreachable_code)]
                Ok::<(), RmaError>(())
            })
        }));
        match r {
            Err(p) if text(&*p).contains("on purpose") => Ok(String::new()),
            _ => Err("the handler's panic did not come out of the scope".into()),
        }
    });
}

/// A negotiated-payload message whose `fill` panics is cancelled before the panic
/// leaves the call (there is no guard a program could leak instead: see the
/// compile-fail test `gex-core/tests/ui/negotiated_payload_has_no_guard.rs`): the
/// endpoint keeps the conduit contract (the simulated conduit checks that nothing
/// runs between a prepare and its commit or cancel) and later operations work.
#[test]
fn a_panicking_fill_leaves_the_endpoint_sound() {
    run_probe(false, |ep, go, buf| {
        for long in [false, true] {
            let r = catch_unwind(AssertUnwindSafe(|| {
                let fill = |b: &mut [u8]| -> usize {
                    b.fill(1);
                    panic!("a fill that panics on purpose")
                };
                if long {
                    ep.request_long_with(EpAddr::rank(1), go, &[], 64, 0, fill)
                } else {
                    ep.request_medium_with(EpAddr::rank(1), go, &[], 64, fill)
                }
            }));
            if r.is_ok() {
                return Err("the fill's panic did not end the call".into());
            }
        }
        ep.request_short(EpAddr::rank(1), go, &[])
            .map_err(|e| e.to_string())?;
        let r = catch_unwind(AssertUnwindSafe(|| ep.get(&mut *buf, src(), Blocking)));
        match r {
            Err(p) if text(&*p).contains("a handler panics on purpose") => Ok(String::new()),
            Err(p) => Err(format!("another panic: {}", text(&*p))),
            Ok(r) => Err(format!("the handler's panic was lost ({r:?})")),
        }
    });
}
