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
//!
//! The `..._is_issued_...` probes panic earlier: in the back-pressure retry of an
//! operation still being issued (a 64 KiB transfer through lanes that hold one
//! request, or through a NIC that queues one operation), when some units are in flight
//! and no event exists yet. The call must cancel the operation (late replies dropped)
//! and wait for what the network still holds of it before the borrow ends.
#![cfg(feature = "rma")]

use gex_core::layer::{self, Attach, Cx, Layer, Progress};
use gex_core::spi::Conduit;
use gex_core::{Am, Blocking, Body, ClientBuilder, Endpoint, EpAddr, HandlerId, InitError, Token};
use gex_rma::{GlobalPtr, Rma, RmaError, RmaExt, ScopeRmaExt};
use gex_testkit::exchange_barrier;
use gex_testkit::sim::{Sim, SimConfig, run_sim};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const LEN: usize = 4096;
/// The transfer of the probes that block while issuing.
const BIG: usize = 64 << 10;
const CANARY: u8 = 0xee;
/// Where rank 1's data lies in its segment.
const AT: usize = 1024;

/// A layer whose progress hook panics once when armed (a panic that is not a
/// handler's: it unwinds through whatever polls the endpoint, a wait or the
/// back-pressure retry of an operation being issued).
#[derive(Debug, Default)]
struct Hook {
    armed: bool,
}

impl Layer for Hook {
    const NAME: &'static str = "unwind-hook";
    fn attach<C: Conduit>(_cx: &mut Attach<'_, C, Self>) -> Result<Self, InitError> {
        Ok(Hook::default())
    }
    fn progress<C: Conduit>(mut self: std::pin::Pin<&mut Self>, _cx: &mut Cx<'_, C>) -> Progress {
        if std::mem::take(&mut self.armed) {
            panic!("a layer's progress hook panics on purpose");
        }
        Progress::Idle
    }
}

/// Arms `ep`'s hook: it panics on the next poll.
fn arm_hook(ep: &mut Endpoint<Sim>) {
    layer::with::<Hook, _, _>(ep, |mut h, cx| {
        h.armed = true;
        cx.set_busy();
    })
    .expect("the hook layer");
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

/// A probe's job: the fabric, the bytes moved, and whether the probed transfer must
/// have landed by the time the call unwound (a transfer cancelled while it was being
/// issued need not have).
struct Setup {
    cfg: SimConfig,
    len: usize,
    must_land: bool,
}

impl Setup {
    /// The probes of a panic inside a wait: a 4 KiB get, issued at once.
    fn waiting(shared_memory: bool) -> Self {
        Setup {
            cfg: cfg(shared_memory),
            len: LEN,
            must_land: true,
        }
    }
    /// The probes of a panic while an operation is being issued: a 64 KiB transfer
    /// over AMs (four Medium replies) through lanes that hold one request, so the
    /// operation is blocked by back-pressure with units in flight.
    fn issuing() -> Self {
        Setup {
            cfg: SimConfig {
                ring_capacity: 1,
                // Replies are delivered a few polls after they are queued: the first
                // one cannot land before the panic.
                latency: gex_testkit::sim::Delay::polls(4),
                ..cfg(false)
            },
            len: BIG,
            must_land: false,
        }
    }
}

/// Rank 1's part of every probe: fills its source, serves rank 0 until told to stop.
fn serve(ep: &mut Endpoint<Sim>, len: usize, stop: &AtomicBool) {
    ep.segment().write(AT, &vec![7u8; len]).unwrap();
    exchange_barrier(ep).unwrap();
    ep.wait_until(|| stop.load(Ordering::Acquire));
    exchange_barrier(ep).unwrap();
}

/// Polls `ep` for a while (a late reply or a queued native operation would run).
fn serve_a_while(ep: &mut Endpoint<Sim>) {
    let t = std::time::Instant::now();
    while t.elapsed() < Duration::from_millis(200) {
        let _ = catch_unwind(AssertUnwindSafe(|| ep.poll()));
    }
}

/// After the probed call unwound on rank 0: the buffer holds the data the get moved
/// (if it waited: `must_land`), then nothing writes it any more.
fn check_no_late_write(
    ep: &mut Endpoint<Sim>,
    buf: &mut [u8],
    must_land: bool,
) -> Result<(), String> {
    let landed = buf.iter().all(|&b| b == 7);
    buf.fill(CANARY);
    serve_a_while(ep);
    match (landed, buf.iter().position(|&b| b != CANARY)) {
        (_, Some(i)) => Err(format!(
            "byte {i} of the destination was written after the call unwound \
             (the get had {}landed when it did)",
            if landed { "" } else { "not " }
        )),
        (false, None) if must_land => Err("the call unwound before its get completed".into()),
        (_, None) => Ok(()),
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
            t.reply(boom, Body::short(&[])).unwrap();
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

/// The verdict on `r`, the outcome of a probed call that should have panicked with a
/// message containing `needle`: `Ok(found)` if it did; otherwise an error naming the
/// other panic, or `lost` and the call's result if the call returned.
fn expect_panic<R: std::fmt::Debug>(
    r: std::thread::Result<R>,
    needle: &str,
    found: &str,
    lost: &str,
) -> Result<String, String> {
    match r {
        Err(p) if text(&*p).contains(needle) => Ok(found.into()),
        Err(p) => Err(format!("another panic: {}", text(&*p))),
        Ok(r) => Err(format!("{lost} ({r:?})")),
    }
}

fn run_probe(
    shared_memory: bool,
    probe: impl Fn(&mut Endpoint<Sim>, HandlerId, &mut [u8]) -> Result<String, String> + Sync,
) {
    run_job(Setup::waiting(shared_memory), probe);
}

fn run_job(
    setup: Setup,
    probe: impl Fn(&mut Endpoint<Sim>, HandlerId, &mut [u8]) -> Result<String, String> + Sync,
) {
    let stop = AtomicBool::new(false);
    let (len, must_land) = (setup.len, setup.must_land);
    let out = run_sim(
        2,
        setup.cfg,
        || {
            ClientBuilder::new()
                .layer::<Rma>()
                .layer::<Hook>()
                .segment_size(1 << 18)
        },
        |client| {
            let mut ep = client.endpoint(0).unwrap();
            let armed = Arc::new(AtomicBool::new(false));
            let (_boom, go) = handlers(&mut ep, armed.clone());
            if client.rank() == 1 {
                serve(&mut ep, len, &stop);
                return Ok(String::new());
            }
            exchange_barrier(&mut ep).unwrap();
            let mut buf = vec![0u8; len];
            armed.store(true, Ordering::SeqCst);
            let r = probe(&mut ep, go, &mut buf);
            let r =
                r.and_then(|what| check_no_late_write(&mut ep, &mut buf, must_land).map(|()| what));
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
    run_probe(false, get_as_a_handler_panics);
}

/// Has rank 1 send the reply that runs rank 0's panicking handler (`go`), then makes a
/// blocking get into `buf` over AMs: the handler's panic must end the get.
fn get_as_a_handler_panics(
    ep: &mut Endpoint<Sim>,
    go: HandlerId,
    buf: &mut [u8],
) -> Result<String, String> {
    ep.request(EpAddr::rank(1), go, Body::short(&[]))
        .map_err(|e| e.to_string())?;
    let r = catch_unwind(AssertUnwindSafe(|| ep.get(&mut *buf, src(), Blocking)));
    expect_panic(
        r,
        "a handler panics on purpose",
        "the handler's panic came out",
        "the handler's panic was lost",
    )
}

/// The same on the direct path (shared memory): the get is a copy, complete before
/// any handler runs; the panic comes out of the next call that polls.
#[test]
fn a_handlers_panic_and_a_direct_get() {
    run_probe(true, |ep, go, buf| {
        ep.request(EpAddr::rank(1), go, Body::short(&[]))
            .map_err(|e| e.to_string())?;
        ep.get(&mut *buf, src(), Blocking)
            .map_err(|e| e.to_string())?;
        let raised = catch_unwind(AssertUnwindSafe(|| {
            let t = std::time::Instant::now();
            while t.elapsed() < Duration::from_secs(10) {
                ep.poll();
            }
        }));
        expect_panic(
            raised,
            "on purpose",
            "",
            "the handler's panic did not come out of a poll",
        )
    });
}

/// A panic that is not a handler's (a layer's progress hook) unwinds through the
/// wait of a blocking get over AMs: the unwinding waits for the get to land.
#[test]
fn a_panic_inside_the_wait_waits_for_the_get_while_it_unwinds() {
    run_probe(false, |ep, _go, buf| {
        // The hook runs on the polls of the get's wait.
        arm_hook(ep);
        let r = catch_unwind(AssertUnwindSafe(|| ep.get(&mut *buf, src(), Blocking)));
        expect_panic(r, "on purpose", "", "the hook did not panic")
    });
}

/// A scoped get over AMs whose scope body is ended by a handler's panic (raised by a
/// poll inside the scope): the scope waits for the get before the panic leaves it.
#[test]
fn a_handlers_panic_inside_a_scope_waits_for_its_gets() {
    run_probe(false, |ep, go, buf| {
        ep.request(EpAddr::rank(1), go, Body::short(&[]))
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
        expect_panic(
            r,
            "on purpose",
            "",
            "the handler's panic did not come out of the scope",
        )
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
                    ep.request_with(EpAddr::rank(1), go, Body::long(&[], 64, 0), fill)
                } else {
                    ep.request_with(EpAddr::rank(1), go, Body::medium(&[], 64), fill)
                }
            }));
            if r.is_ok() {
                return Err("the fill's panic did not end the call".into());
            }
        }
        get_as_a_handler_panics(ep, go, buf)
    });
}

/// Runs `call` (a transfer that meets back-pressure once its first unit is in flight)
/// with rank 0's hook armed: the hook panics in the call's back-pressure retry, while
/// the operation is being issued, before anything waits for it.
fn panics_while_issuing<R: std::fmt::Debug>(
    ep: &mut Endpoint<Sim>,
    call: impl FnOnce(&mut Endpoint<Sim>) -> R,
) -> Result<String, String> {
    // A round trip first: rank 1 has then taken every earlier request of rank 0 (the
    // barrier's) off their lane, so the call's first request goes out and only the
    // next ones meet back-pressure.
    ep.get_val(src(), Blocking).map_err(|e| e.to_string())?;
    arm_hook(ep);
    let r = catch_unwind(AssertUnwindSafe(|| call(&mut *ep)));
    expect_panic(r, "on purpose", "", "the hook did not panic")
}

/// A panic inside the back-pressure retry of a blocking get into a borrowed buffer
/// (a layer's hook, run by the retry's poll): the requests already sent are cancelled
/// (their replies dropped) before the borrow ends. Failed before: the first reply
/// wrote the buffer after the call had unwound.
#[test]
fn a_panic_while_a_blocking_get_is_issued_cancels_it() {
    run_job(Setup::issuing(), |ep, _go, buf| {
        panics_while_issuing(ep, |ep| ep.get(&mut *buf, src(), Blocking))
    });
}

/// The same inside a scope: the scoped get is not tracked yet when the panic leaves
/// its call, so the scope's own wait does not cover it; the call cancels it.
#[test]
fn a_panic_while_a_scoped_get_is_issued_cancels_it() {
    run_job(Setup::issuing(), |ep, _go, buf| {
        panics_while_issuing(ep, |ep| {
            ep.scope(|s| {
                s.get_into(&mut *buf, src())?;
                Ok::<(), RmaError>(())
            })
        })
    });
}

/// The same into an owned buffer: the vector, held by the call until its event
/// exists, is freed by the unwinding; nothing may write it afterwards. Seen through
/// the op table (an entry left behind names the freed buffer as its destination) and
/// through a canary in the block the allocator hands out next.
#[test]
fn a_panic_while_an_owned_get_is_issued_cancels_it() {
    run_job(Setup::issuing(), |ep, _go, _buf| {
        let what = panics_while_issuing(ep, |ep| {
            ep.get(vec![0u8; BIG], src(), Blocking).map(|v| v.len())
        })?;
        let reused = vec![CANARY; BIG];
        serve_a_while(ep);
        let left = layer::state::<Rma, _, _>(ep, |r| r.pending_ops()).unwrap_or(0);
        match (reused.iter().position(|&b| b != CANARY), left) {
            (Some(i), _) => Err(format!(
                "byte {i} of the freed vector's block was written after the call unwound"
            )),
            (None, 0) => Ok(what),
            (None, n) => Err(format!(
                "{n} operation(s) left in the table after the call unwound, naming the \
                 freed vector as their destination"
            )),
        }
    });
}

/// A blocking put from a borrowed source over the simulated NIC (rank 1 on another
/// host), whose queue holds one operation: the second piece meets back-pressure and
/// the hook panics in the retry. The first piece, still queued, reads the source when
/// the NIC performs it, so the call waits for it before the borrow ends. Failed
/// before: the NIC read the bytes the program wrote into the source after the call
/// unwound (the canary reached rank 1's segment).
#[test]
fn a_panic_while_a_native_put_is_issued_waits_for_its_pieces() {
    const PIECE: usize = 1024;
    const TO: usize = 128 << 10;
    let setup = Setup {
        cfg: SimConfig {
            ranks_per_host: 1,
            native_rma: true,
            native_queue: Some(1),
            latency: gex_testkit::sim::Delay::polls(4),
            ..cfg(false)
        },
        len: 4 * PIECE,
        must_land: false,
    };
    run_job(setup, |ep, _go, buf| {
        buf.fill(9);
        // Pieces apart (adjacent ones would be merged into one).
        let to = |i: usize| {
            (
                GlobalPtr::<u8>::new(EpAddr::rank(1), TO + 2 * i * PIECE),
                PIECE,
            )
        };
        let pieces = [to(0), to(1), to(2), to(3)];
        let what = panics_while_issuing(ep, |ep| ep.put_vector(&pieces, &*buf, Blocking))?;
        buf.fill(CANARY);
        serve_a_while(ep);
        let mut back = vec![0u8; 8 * PIECE];
        ep.get(&mut back[..], GlobalPtr::new(EpAddr::rank(1), TO), Blocking)
            .map_err(|e| e.to_string())?;
        match back.iter().position(|&b| b == CANARY) {
            Some(i) => Err(format!(
                "byte {i} at the target came from the source after the call unwound"
            )),
            None => Ok(what),
        }
    });
}
