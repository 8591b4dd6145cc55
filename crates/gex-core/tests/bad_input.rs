//! Bad input to gex-core's public calls (docs/testing.md, "Bad input"): the documented
//! error variants no other test triggers, and the undocumented failure modes a runtime
//! author meets with bad arguments (out-of-range ranks and endpoints, reserved or
//! missing handlers, oversized or misplaced payloads, events of another endpoint, bad
//! `GEX_*` values, a failing bootstrap). Each must be the documented error, never a
//! panic, a hang or a message sent. One rank on the loopback conduit.

use gex_core::boot::{BootError, Singleton};
use gex_core::layer::Layer;
use gex_core::loopback::Loopback;
use gex_core::spi::Conduit;
use gex_core::{
    AmError, Blocking, Body, Client, ClientBuilder, Config, Endpoint, EpAddr, EpError, EventError,
    HandlerId, InitError, Mode, Nb, Nbi, OwnedEndpoint, Team,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

mod common;

use common::{SEG, TestBoot, counting, owned_to_1, two_counting_eps};

/// A loopback client of `eps` endpoints and no room for endpoints made at run time
/// (`GEX_MAX_ENDPOINTS=0`: the capacity is `eps`), so the indices from `eps` on are the
/// core's `AmError::BadEndpoint`.
fn client(eps: u16) -> Client<Loopback> {
    common::loopback(eps, Config::from_pairs([("GEX_MAX_ENDPOINTS", "0")]))
}

/// A one-endpoint client ([`client`]), its endpoint with a [`counting`] handler, the
/// handler and its count.
fn counting_client() -> (
    Client<Loopback>,
    OwnedEndpoint<Loopback>,
    HandlerId,
    Arc<AtomicU32>,
) {
    let c = client(1);
    let mut ep = c.endpoint(0).unwrap();
    let (h, handled) = counting(&mut ep);
    (c, ep, h, handled)
}

/// The error of `len` bytes at `offset` of `dst`'s segment (of [`SEG`] bytes).
fn out_of_segment(dst: EpAddr, offset: usize, len: usize) -> AmError {
    AmError::OutOfSegment {
        dst,
        offset,
        len,
        seg_len: SEG,
    }
}

/// Nothing was sent and nothing arrives.
fn nothing_sent(ep: &mut Endpoint<Loopback>, handled: &AtomicU32) {
    for _ in 0..3 {
        ep.poll();
    }
    assert_eq!(ep.stats().sent.iter().sum::<u64>(), 0, "a failed call sent");
    assert_eq!(
        handled.load(Ordering::Relaxed),
        0,
        "a failed call delivered"
    );
}

// ---------------------------------------------------------------- AM injection

/// Every validation error of the owned-payload requests, in `mode`.
fn owned_errors<M: Mode>(ep: &mut Endpoint<Loopback>, h: HandlerId, mode: M) {
    let me = ep.addr();
    let med = |ep: &mut Endpoint<Loopback>, dst, h, args: &[u32], len| {
        ep.request_owned(dst, h, Body::medium(args, vec![7u8; len]), mode)
            .map(|_| ())
    };
    let long = |ep: &mut Endpoint<Loopback>, dst, h, args: &[u32], len, off| {
        ep.request_owned(dst, h, Body::long(args, vec![7u8; len], off), mode)
            .map(|_| ())
    };
    let kind = std::any::type_name::<M>();
    // What both forms refuse alike: bad ranks and endpoints, too many arguments,
    // missing and reserved handlers.
    let max = ep.max_args();
    let (none, too_many): (&[u32], &[u32]) = (&[], &vec![0; max + 1]);
    let mut cases = vec![
        (
            EpAddr::rank(1),
            h,
            none,
            AmError::BadRank { rank: 1, size: 1 },
        ),
        (
            EpAddr::rank(u32::MAX),
            h,
            none,
            AmError::BadRank {
                rank: u32::MAX,
                size: 1,
            },
        ),
        (
            EpAddr::new(0, 2),
            h,
            none,
            AmError::BadEndpoint {
                dst: EpAddr::new(0, 2),
                eps: 2,
            },
        ),
        (
            EpAddr::new(0, u16::MAX),
            h,
            none,
            AmError::BadEndpoint {
                dst: EpAddr::new(0, u16::MAX),
                eps: 2,
            },
        ),
        (
            me,
            h,
            too_many,
            AmError::TooManyArgs {
                given: max + 1,
                max,
            },
        ),
    ];
    for idx in [0u8, 200] {
        cases.push((
            me,
            HandlerId::at_any(idx),
            none,
            AmError::UnregisteredHandler(idx),
        ));
    }
    for idx in [1u8, 5, 127] {
        cases.push((
            me,
            HandlerId::at_any(idx),
            none,
            AmError::ReservedHandler(idx),
        ));
    }
    for (dst, h, args, want) in cases {
        assert_eq!(
            med(ep, dst, h, args, 1),
            Err(want.clone()),
            "{kind}: Medium"
        );
        assert_eq!(long(ep, dst, h, args, 1, 0), Err(want), "{kind}: Long");
    }
    let maxm = ep.max_medium(me);
    assert_eq!(
        med(ep, me, h, &[], maxm + 1),
        Err(AmError::PayloadTooLarge {
            len: maxm + 1,
            max: maxm
        }),
        "{kind}"
    );
    for (off, len) in [
        (SEG - 3, 4),
        (SEG + 1, 0),
        (usize::MAX, 1),
        (usize::MAX - 1, 4),
    ] {
        assert_eq!(
            long(ep, me, h, &[], len, off),
            Err(out_of_segment(me, off, len)),
            "{kind}: {len} bytes at {off}"
        );
    }
}

#[test]
fn owned_requests_are_validated_in_every_mode() {
    let c = client(2);
    let mut ep = c.endpoint(0).unwrap();
    let (h, handled) = counting(&mut ep);
    owned_errors(&mut ep, h, Blocking);
    owned_errors(&mut ep, h, Nb);
    owned_errors(&mut ep, h, Nbi);
    // Nothing was tracked either: the implicit sync has nothing to report.
    ep.sync_implicit::<AmError>(None).unwrap();
    nothing_sent(&mut ep, &handled);
}

#[test]
fn reserved_and_missing_handlers_are_refused_by_every_form() {
    let (_c, mut ep, h, handled) = counting_client();
    let me = ep.addr();
    // Index 1 is the core's own (registered) exchange handler: reserved all the same.
    for idx in [1u8, 5, 16, 127] {
        let r = AmError::ReservedHandler(idx);
        let hid = HandlerId::at_any(idx);
        for body in [
            Body::short(&[]),
            Body::medium(&[], &[1]),
            Body::long(&[], &[1], 0),
        ] {
            assert_eq!(ep.request(me, hid, body), Err(r.clone()));
            assert_eq!(ep.try_request(me, hid, body), Err(r.clone()));
        }
        for body in [Body::medium(&[], 8), Body::long(&[], 8, 0)] {
            assert_eq!(ep.request_with(me, hid, body, |_| 1), Err(r.clone()));
            assert_eq!(ep.try_request_with(me, hid, body, |_| 1), Err(r.clone()));
        }
    }
    for idx in [0u8, 129, 255] {
        let u = AmError::UnregisteredHandler(idx);
        let hid = HandlerId::at_any(idx);
        assert_eq!(ep.request(me, hid, Body::short(&[])), Err(u.clone()));
        assert_eq!(
            ep.try_request(me, hid, Body::long(&[], &[1], 0)),
            Err(u.clone())
        );
        assert_eq!(
            ep.try_request_with(me, hid, Body::medium(&[], 8), |_| 1),
            Err(u.clone())
        );
        assert_eq!(
            ep.request_with(me, hid, Body::medium(&[], 8), |_| 0),
            Err(u)
        );
    }
    // The other send-time errors, on both kinds of buffer.
    assert_eq!(
        ep.request_with(me, h, Body::long(&[], 8, SEG - 8), |_| 9),
        Err(AmError::CommitTooLarge {
            len: 9,
            prepared: 8
        })
    );
    assert!(matches!(
        ep.request_with(me, h, Body::medium(&[0; 17], 8), |_| 8),
        Err(AmError::TooManyArgs { given: 17, .. })
    ));
    nothing_sent(&mut ep, &handled);
}

#[test]
fn prepare_time_errors_are_reported_before_any_buffer_is_lent() {
    let (_c, mut ep, h, handled) = counting_client();
    let me = ep.addr();
    let maxm = ep.max_medium(me);
    assert_eq!(
        ep.request_with(EpAddr::rank(1), h, Body::medium(&[], 8), |_| 0),
        Err(AmError::BadRank { rank: 1, size: 1 })
    );
    assert_eq!(
        ep.request_with(EpAddr::new(0, 1), h, Body::long(&[], 8, 0), |_| 0),
        Err(AmError::BadEndpoint {
            dst: EpAddr::new(0, 1),
            eps: 1
        })
    );
    assert_eq!(
        ep.request_with(me, h, Body::medium(&[], maxm + 1), |_| 0),
        Err(AmError::PayloadTooLarge {
            len: maxm + 1,
            max: maxm
        })
    );
    assert_eq!(
        ep.request_with(me, h, Body::long(&[], 2, usize::MAX), |_| 0),
        Err(out_of_segment(me, usize::MAX, 2))
    );
    // `fill` is not called when the prepare fails.
    let called = std::cell::Cell::new(false);
    assert_eq!(
        ep.try_request_with(me, h, Body::long(&[], 16, SEG - 8), |_| {
            called.set(true);
            0
        }),
        Err(out_of_segment(me, SEG - 8, 16))
    );
    assert!(!called.get());
    nothing_sent(&mut ep, &handled);
}

/// Zero-length payloads: a Long of 0 bytes at the very end of the segment is valid,
/// one byte further is not; the same for segment reads and writes.
#[test]
fn zero_lengths_at_the_segment_end() {
    let (_c, mut ep, h, handled) = counting_client();
    let me = ep.addr();
    ep.request(me, h, Body::long(&[], &[], SEG)).unwrap();
    ep.wait_until(|| handled.load(Ordering::Relaxed) == 1);
    assert_eq!(
        ep.request(me, h, Body::long(&[], &[], SEG + 1)),
        Err(out_of_segment(me, SEG + 1, 0))
    );
    let seg = ep.segment();
    seg.read(SEG, &mut []).unwrap();
    seg.write(SEG, &[]).unwrap();
    assert_eq!(
        seg.read(SEG + 1, &mut []),
        Err(out_of_segment(me, SEG + 1, 0))
    );
    assert_eq!(
        seg.write(usize::MAX, &[]),
        Err(out_of_segment(me, usize::MAX, 0))
    );
    assert_eq!(seg.write(1, &[0; SEG]), Err(out_of_segment(me, 1, SEG)));
}

/// The queries that take a rank or an address answer for ranks outside the job
/// instead of panicking.
#[test]
fn queries_about_missing_ranks_do_not_panic() {
    let c = client(1);
    let ep = c.endpoint(0).unwrap();
    for r in [1, u32::MAX] {
        assert_eq!(ep.segment_len_of(r), None);
        assert_eq!(ep.host_of(r), None);
        assert_eq!(ep.endpoints_of(r), None);
        assert_eq!(ep.max_long(EpAddr::rank(r)), 0);
        assert!(!ep.shares_memory_with(EpAddr::rank(r)));
        let _ = ep.max_medium(EpAddr::rank(r));
    }
    assert!(!ep.shares_memory_with(EpAddr::new(0, u16::MAX)));
    assert!(!ep.is_registered(0) && !ep.is_registered(255));
}

// ---------------------------------------------------------------- events

#[test]
fn waiting_on_no_event_is_abandoned_not_a_hang() {
    let c = client(1);
    let mut ep = c.endpoint(0).unwrap();
    assert_eq!(ep.wait_any(&[]), Err(EventError::Abandoned));
    assert_eq!(ep.wait_some(&[]), Err(EventError::Abandoned));
    ep.wait_all(&[]).unwrap();
}

#[test]
fn every_wait_refuses_another_endpoints_event() {
    let c = client(2);
    let (mut a, mut b, h) = two_counting_eps(&c);
    let mine = b
        .request_owned(EpAddr::new(0, 0), h, Body::medium(&[], vec![1u8; 8]), Nb)
        .unwrap();
    let theirs = owned_to_1(&mut a, h);
    let wrong = EventError::WrongEndpoint {
        started_on: EpAddr::new(0, 0),
        waited_on: EpAddr::new(0, 1),
    };
    assert_eq!(b.test(&theirs), Err(wrong.clone()));
    assert_eq!(b.wait_any(&[&mine, &theirs]), Err(wrong.clone()));
    assert_eq!(b.wait_some(&[&theirs]), Err(wrong.clone()));
    // Nothing is waited for when one event is foreign.
    assert_eq!(b.wait_all(&[&mine, &theirs]), Err(wrong.clone()));
    // The events are still good on their own endpoints (loopback completes an owned
    // payload when the target has polled it in).
    a.poll();
    assert_eq!(b.wait(mine).unwrap().len(), 8);
    b.poll();
    assert_eq!(a.wait(theirs).unwrap().len(), 100);
}

/// An event tracked as implicit on another endpoint cannot complete there: the sync
/// reports it (as `EventError::Failed`) instead of hanging or returning early; a
/// scope does the same.
#[test]
fn an_event_tracked_on_another_endpoint_fails_the_sync() {
    let c = client(2);
    let (mut a, mut b, h) = two_counting_eps(&c);
    let ev = owned_to_1(&mut a, h);
    gex_core::layer::track_implicit(&mut *b, 7, ev);
    match b.sync_implicit::<AmError>(Some(7)) {
        Err(AmError::Event(EventError::Failed(m))) => {
            assert!(m.contains("another endpoint"), "{m}")
        }
        other => panic!("sync of a foreign implicit event: {other:?}"),
    }
    let ev = owned_to_1(&mut a, h);
    let r = b.scope(|s| {
        let tag = s.tag();
        gex_core::layer::track_implicit(&mut *s, tag, ev);
        Ok::<(), AmError>(())
    });
    assert!(
        matches!(r, Err(AmError::Event(EventError::Failed(_)))),
        "{r:?}"
    );
    // A scope returns its body's error (after waiting for what it started).
    assert_eq!(
        b.scope(|s| s.request(EpAddr::rank(9), h, Body::short(&[]))),
        Err(AmError::BadRank { rank: 9, size: 1 })
    );
    b.poll();
    a.poll();
    b.poll();
}

// ---------------------------------------------------------------- waits

/// Regression: `wait_until_timeout` added the timeout to `Instant::now()`, which
/// panics ("overflow when adding duration to instant") for a timeout too long to
/// represent, such as `Duration::MAX` ("wait forever").
#[test]
fn a_timeout_too_long_to_represent_waits_without_panicking() {
    let c = client(1);
    let mut ep = c.endpoint(0).unwrap();
    let mut polls = 0;
    assert!(ep.wait_until_timeout(
        || {
            polls += 1;
            polls > 3
        },
        Duration::MAX
    ));
    assert!(ep.wait_until_timeout(|| true, Duration::from_secs(u64::MAX)));
    assert!(!ep.wait_until_timeout(|| false, Duration::ZERO));
}

/// Regression: the progress thread slept a whole `GEX_PROGRESS_INTERVAL` when it found
/// the rank inside gex, and dropping the endpoint joined it, so a long interval (an
/// hour here) made dropping an endpoint hang for that long.
#[test]
fn a_long_progress_interval_does_not_hold_up_dropping_the_endpoint() {
    let c = ClientBuilder::new()
        .segment_size(SEG)
        .progress_thread(true)
        .config(Config::from_pairs([("GEX_PROGRESS_INTERVAL", "3600s")]))
        .init::<Loopback>(Box::new(Singleton::new()))
        .unwrap();
    let mut ep = c.endpoint(0).unwrap();
    assert!(ep.has_progress_thread());
    // Hold the endpoint (inside gex) long enough for the thread to find it taken.
    assert!(!ep.wait_until_timeout(|| false, Duration::from_millis(200)));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(ep);
        let _ = tx.send(());
    });
    // Generous: the point is "not an hour", not a latency.
    rx.recv_timeout(Duration::from_secs(120))
        .expect("dropping the endpoint waited for the progress thread's nap");
}

// ---------------------------------------------------------------- exchange

#[test]
fn an_exchange_over_a_team_naming_missing_endpoints_is_an_error() {
    let c = client(1);
    let mut ep = c.endpoint(0).unwrap();
    let me = ep.addr();
    let t = Team::new(5, vec![me, EpAddr::rank(7)], 0);
    assert_eq!(
        ep.exchange(&t, b"x"),
        Err(AmError::BadRank { rank: 7, size: 1 })
    );
    let t = Team::new(6, vec![EpAddr::new(0, 3), me], 1);
    assert_eq!(
        ep.exchange_tagged(&t, 9, b"x"),
        Err(AmError::BadEndpoint {
            dst: EpAddr::new(0, 3),
            eps: 1
        })
    );
    // A team in which this endpoint is not the calling member.
    let t = Team::new(8, vec![me, EpAddr::new(0, 1)], 1);
    assert_eq!(ep.exchange(&t, b"x"), Err(AmError::NotMember(me)));
    // The endpoint still works.
    let w = ep.world();
    assert_eq!(ep.exchange(&w, b"ok").unwrap(), vec![b"ok".to_vec()]);
}

// ---------------------------------------------------------------- configuration

/// Every core `GEX_*` setting with a malformed, out-of-range or unknown value fails
/// `ClientBuilder::init` with `InitError::Config` naming the variable.
#[test]
fn every_bad_core_setting_is_a_config_error_naming_it() {
    let bad = [
        ("GEX_ENDPOINTS", "two"),
        ("GEX_ENDPOINTS", "-1"),
        ("GEX_ENDPOINTS", "0"),
        ("GEX_ENDPOINTS", "65536"),
        ("GEX_ENDPOINTS", "99999999999999999999"),
        ("GEX_MAX_ENDPOINTS", "many"),
        ("GEX_MAX_ENDPOINTS", "-1"),
        ("GEX_MAX_ENDPOINTS", "65536"),
        ("GEX_SEGMENT_SIZE", "huge"),
        ("GEX_SEGMENT_SIZE", "16Q"),
        ("GEX_SEGMENT_SIZE", "-4K"),
        ("GEX_SEGMENT_SIZE", "99999999999999999999G"),
        ("GEX_SEGMENT_SIZE", "17179869184G"),
        ("GEX_WAIT", "nap"),
        ("GEX_SPIN", "lots"),
        ("GEX_SPIN", "4294967296"),
        ("GEX_YIELDS", "some"),
        ("GEX_YIELDS", "4294967296"),
        ("GEX_STALL_REPORT", "soon"),
        ("GEX_STALL_REPORT", "-5"),
        ("GEX_REPORT_SIGNAL", "maybe"),
        ("GEX_PROGRESS_THREAD", "2"),
        ("GEX_VERBOSEENV", "loud"),
        ("GEX_PROGRESS_INTERVAL", "soon"),
        ("GEX_PROGRESS_INTERVAL", "5 fortnights"),
        ("GEX_PROGRESS_INTERVAL", "99999999999999999999us"),
        ("GEX_PROGRESS_INTERVAL", "-1ms"),
        ("GEX_SHARE_INTERVAL", "often"),
        ("GEX_SHARE_INTERVAL", "-20us"),
        // The launcher asked for thread ranks, but this process made one rank.
        ("GEX_THREADS", "2"),
    ];
    for (var, val) in bad {
        let r = ClientBuilder::new()
            .segment_size(SEG)
            .config(Config::from_pairs([(var, val)]))
            .init::<Loopback>(Box::new(Singleton::new()));
        match r {
            Err(InitError::Config(m)) => assert!(m.contains(var), "{var}={val:?}: {m}"),
            Err(e) => panic!("{var}={val:?}: another error: {e}"),
            Ok(_) => panic!("{var}={val:?} was accepted"),
        }
    }
    // One thread rank per process, or a value gex-boot rejects itself, is no error here.
    for val in ["1", ""] {
        ClientBuilder::new()
            .segment_size(SEG)
            .config(Config::from_pairs([("GEX_THREADS", val)]))
            .init::<Loopback>(Box::new(Singleton::new()))
            .unwrap_or_else(|e| panic!("GEX_THREADS={val:?}: {e}"))
            .finalize()
            .unwrap();
    }
    // The builder's own values are checked the same way.
    let r = ClientBuilder::new()
        .endpoints(0)
        .config(Config::default())
        .init::<Loopback>(Box::new(Singleton::new()));
    assert!(
        matches!(&r, Err(InitError::Config(m)) if m.contains("endpoints")),
        "{r:?}"
    );
}

/// The typed getters of `Config` (which layers and conduits use for their own
/// settings) report `InitError::Config` naming the variable.
#[test]
fn config_getters_name_the_variable() {
    let c = Config::from_pairs([
        ("TEST_X_SIZE", "12 bytes"),
        ("TEST_X_N", "1.5"),
        ("TEST_X_FLAG", "perhaps"),
        ("TEST_X_TIME", "3 weeks"),
        ("GEX_WAIT", "snooze"),
    ]);
    let is_config = |r: Result<(), InitError>, var: &str| match r {
        Err(InitError::Config(m)) => assert!(m.contains(var), "{m}"),
        other => panic!("{var}: {other:?}"),
    };
    is_config(c.size("TEST_X_SIZE", 1).map(drop), "TEST_X_SIZE");
    is_config(c.u64("TEST_X_N", 1).map(drop), "TEST_X_N");
    is_config(c.bool("TEST_X_FLAG", false).map(drop), "TEST_X_FLAG");
    is_config(
        c.duration("TEST_X_TIME", Duration::ZERO).map(drop),
        "TEST_X_TIME",
    );
    is_config(c.wait_mode().map(drop), "GEX_WAIT");
    // Unset: the default, no error.
    assert_eq!(c.u64("TEST_X_UNSET", 7).unwrap(), 7);
}

/// Regression: `GEX_SEGMENT_SIZE` beyond what the process can allocate made the
/// loopback conduit abort the process (allocation failure) or panic (capacity
/// overflow) inside `init`.
#[test]
#[cfg_attr(
    miri,
    ignore = "Miri stops at an allocation larger than it can hold (resource exhaustion) instead of failing it"
)]
fn a_segment_too_large_to_allocate_is_a_conduit_error() {
    // Sizes no address space holds (allocation fails everywhere, whatever the
    // overcommit policy): just under 8 EiB, and 8 EiB (more than `isize::MAX`).
    for size in ["8589934591G", "8589934592G"] {
        let r = ClientBuilder::new()
            .config(Config::from_pairs([("GEX_SEGMENT_SIZE", size)]))
            .init::<Loopback>(Box::new(Singleton::new()));
        match r {
            Err(InitError::Conduit { conduit, msg }) => {
                assert_eq!(conduit, "loopback");
                assert!(msg.contains("segment"), "{msg}");
            }
            Err(e) => panic!("{size}: another error: {e}"),
            Ok(_) => panic!("a {size} segment was allocated"),
        }
    }
}

// ---------------------------------------------------------------- layers

/// A layer `$ty` named `$name` with one associated constant set, which attaches.
macro_rules! layer_with {
    ($(#[$m:meta])* $ty:ident, $name:literal, $c:ident: $t:ty = $v:expr) => {
        $(#[$m])*
        #[derive(Debug)]
        struct $ty;

        impl Layer for $ty {
            const NAME: &'static str = $name;
            const $c: $t = $v;
            fn attach<C: Conduit>(
                _cx: &mut gex_core::layer::Attach<'_, C, Self>,
            ) -> Result<Self, InitError> {
                Ok($ty)
            }
        }
    };
}

layer_with!(
    /// A layer asking for more handler indices than the reserved range has.
    Greedy, "greedy", HANDLERS: u8 = 113
);
layer_with!(
    /// A layer asking for an auxiliary area no address space has.
    Vast, "vast", AUX_BYTES: usize = usize::MAX
);

/// `init` of a loopback client with the layer `L`.
fn with_layer<L: Layer>() -> Result<Client<Loopback>, InitError> {
    common::try_build(ClientBuilder::new().layer::<L>(), Config::default())
}

/// A layer that refuses to attach.
#[derive(Debug)]
struct Refuses;

impl Layer for Refuses {
    const NAME: &'static str = "refuses";
    fn attach<C: Conduit>(
        _cx: &mut gex_core::layer::Attach<'_, C, Self>,
    ) -> Result<Self, InitError> {
        Err(InitError::Layer {
            layer: Self::NAME,
            msg: "not today".into(),
        })
    }
}

/// `init` with the layer `L` is an `InitError::Config` naming the layer and `what`.
fn a_config_error_with<L: Layer>(what: &str) {
    let r = with_layer::<L>();
    assert!(
        matches!(&r, Err(InitError::Config(m)) if m.contains(L::NAME) && m.contains(what)),
        "{r:?}"
    );
}

#[test]
fn layers_that_do_not_fit_the_handler_range_are_config_errors() {
    a_config_error_with::<Greedy>("handler");
}

/// Regression: rounding a layer's `AUX_BYTES` up to 64 overflowed (a panic in
/// `ClientBuilder::init`), and the layers' total was not checked.
#[test]
fn an_auxiliary_area_no_address_space_holds_is_a_config_error() {
    a_config_error_with::<Vast>("auxiliary");
}

#[test]
fn a_layer_that_refuses_to_attach_is_an_endpoint_layer_error() {
    let c = with_layer::<Refuses>().unwrap();
    match c.endpoint(0) {
        Err(EpError::Layer(m)) => assert!(m.contains("refuses") && m.contains("not today")),
        other => panic!("{other:?}"),
    }
}

// ---------------------------------------------------------------- bootstrap

#[test]
fn a_conduit_that_cannot_run_the_job_is_a_conduit_error() {
    match TestBoot::new(2).init() {
        Err(InitError::Conduit { conduit, msg }) => {
            assert_eq!(conduit, "loopback");
            assert!(msg.contains("one rank"), "{msg}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_bootstrap_with_too_few_host_ids_is_a_config_error() {
    let mut b = TestBoot::new(2);
    b.hosts.pop();
    match b.init() {
        Err(InitError::Config(m)) => assert!(m.contains("host ids"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn bootstrap_failures_are_boot_errors() {
    let mut b = TestBoot::new(1);
    b.fail_exchange = true;
    assert!(matches!(b.init(), Err(InitError::Boot(BootError::Lost(_)))));
    let mut b = TestBoot::new(1);
    b.fail_barrier = true;
    let c = b.init().unwrap();
    assert!(matches!(
        c.boot_barrier(),
        Err(InitError::Boot(BootError::Lost(_)))
    ));
    assert!(matches!(
        c.finalize(),
        Err(InitError::Boot(BootError::Lost(_)))
    ));
}

/// `Client::create_endpoint` on the loopback conduit: the first index past init, then
/// `EpError::Full` past the capacity; a send to an index not created yet, or to an
/// endpoint made at run time and dropped, is `ConduitError::NoEndpoint`; above the
/// capacity the core's `AmError::BadEndpoint`.
#[test]
fn create_endpoint_errors_on_loopback() {
    use gex_core::spi::ConduitError;
    let c = ClientBuilder::new()
        .segment_size(SEG)
        .endpoints(2)
        .config(Config::from_pairs([("GEX_MAX_ENDPOINTS", "4")]))
        .init::<Loopback>(Box::new(Singleton::new()))
        .unwrap();
    assert!(c.runtime_endpoints());
    assert_eq!(c.endpoint_capacity(0), Some(4));
    let mut ep = c.endpoint(0).unwrap();
    let h = ep
        .register(|_: &mut gex_core::Token<'_>, _: gex_core::Am<'_>| {})
        .unwrap();
    let (two, three) = (gex_core::EpAddr::new(0, 2), gex_core::EpAddr::new(0, 3));
    assert_eq!(
        ep.request(two, h, Body::short(&[])),
        Err(gex_core::AmError::Conduit(ConduitError::NoEndpoint {
            dst: two,
            state: "not created yet"
        }))
    );
    let mut e2 = c.create_endpoint().unwrap();
    assert_eq!(e2.addr(), two);
    let got = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let g = got.clone();
    e2.register_at(
        h.index(),
        move |_: &mut gex_core::Token<'_>, _: gex_core::Am<'_>| {
            g.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        },
    )
    .unwrap();
    ep.request(two, h, Body::medium(&[], &[5; 40])).unwrap();
    e2.wait_until(|| got.load(std::sync::atomic::Ordering::Relaxed) == 1);
    let e3 = c.create_endpoint().unwrap();
    assert_eq!(e3.addr(), three);
    assert_eq!(
        c.create_endpoint().map(|_| ()),
        Err(gex_core::EpError::Full {
            capacity: 4,
            init: 2
        })
    );
    drop(e2);
    assert_eq!(
        ep.request(two, h, Body::long(&[], &[1; 8], 0)),
        Err(gex_core::AmError::Conduit(ConduitError::NoEndpoint {
            dst: two,
            state: "closed"
        }))
    );
    let four = gex_core::EpAddr::new(0, 4);
    assert_eq!(
        ep.request(four, h, Body::short(&[])),
        Err(gex_core::AmError::BadEndpoint { dst: four, eps: 4 })
    );
}
