//! Core API behaviour on the one-rank loopback conduit: rule enforcement that needs no
//! network, events and modes, deferred local completion, endpoints on threads, layers,
//! the progress thread, and the soundness rules of the safe API.

use gex_core::boot::Singleton;
use gex_core::layer::{self, Cx, Layer, Progress};
use gex_core::loopback::Loopback;
use gex_core::spi::Conduit;
use gex_core::{
    Am, AmError, Blocking, Body, Category, ClientBuilder, EpAddr, EpError, EventError, HandlerId,
    InitError, Injected, Nb, Nbi, RegisterError, Token,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;

fn client(eps: u16) -> gex_core::Client<Loopback> {
    common::loopback(eps, gex_core::Config::default())
}

#[test]
fn deferred_local_completion_returns_the_buffer_after_delivery() {
    let c = client(1);
    let mut ep = c.endpoint(0).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let h = ep
        .register(move |_t: &mut Token<'_>, am: Am<'_>| {
            s.lock().unwrap().extend_from_slice(am.payload())
        })
        .unwrap();
    let buf = vec![9u8; 1000];
    let ptr = buf.as_ptr();
    let ev = ep
        .request_owned(EpAddr::rank(0), h, Body::medium(&[], buf), Nb)
        .unwrap();
    // Not delivered yet: loopback still holds the buffer.
    assert!(!ev.is_done());
    let back = ep.wait(ev).unwrap();
    assert_eq!(back.as_ptr(), ptr, "the same buffer comes back, not a copy");
    assert_eq!(seen.lock().unwrap().as_slice(), &[9u8; 1000][..]);
    // Blocking mode gives the buffer back directly; implicit mode tracks it.
    let back = ep
        .request_owned(
            EpAddr::rank(0),
            h,
            Body::medium(&[], vec![1u8; 10]),
            Blocking,
        )
        .unwrap();
    assert_eq!(back.len(), 10);
    ep.request_owned(EpAddr::rank(0), h, Body::medium(&[], vec![2u8; 10]), Nbi)
        .unwrap();
    ep.sync_implicit::<AmError>(None).unwrap();
    assert_eq!(seen.lock().unwrap().len(), 1020);
}

#[test]
fn endpoints_are_taken_once_and_bounded() {
    let c = client(2);
    let _e0 = c.endpoint(0).unwrap();
    assert_eq!(c.endpoint(0).unwrap_err(), EpError::Taken(0));
    assert_eq!(
        c.endpoint(2).unwrap_err(),
        EpError::NoSuchEndpoint { index: 2, count: 2 }
    );
}

#[test]
fn registration_hands_out_distinct_ids_and_enforces_the_rules() {
    let c = client(1);
    let mut ep = c.endpoint(0).unwrap();
    let h = |_t: &mut Token<'_>, _a: Am<'_>| {};
    let a = ep.register(h).unwrap();
    let b = ep.register(h).unwrap();
    assert_ne!(a, b);
    assert_eq!((a.index(), b.index()), (128, 129));
    assert_eq!(ep.register_at(0, h), Err(RegisterError::Zero));
    assert_eq!(ep.register_at(127, h), Err(RegisterError::Reserved(127)));
    assert_eq!(
        ep.register_at(128, h),
        Err(RegisterError::AlreadyRegistered(128))
    );
    let fixed = ep.register_at(200, h).unwrap();
    assert_eq!(fixed.index(), 200);
    // Automatic ids skip what is taken, until every client index is.
    let mut n = 3;
    while ep.register(h).is_ok() {
        n += 1;
    }
    assert_eq!(n, 128);
    assert_eq!(ep.register(h), Err(RegisterError::Full));
}

#[test]
fn an_id_from_another_endpoint_is_checked_against_this_table() {
    let c = client(2);
    let mut a = c.endpoint(0).unwrap();
    let mut b = c.endpoint(1).unwrap();
    let _ = a.register(|_t: &mut Token<'_>, _a: Am<'_>| {}).unwrap();
    let second = a.register(|_t: &mut Token<'_>, _a: Am<'_>| {}).unwrap();
    // `b` registered nothing: the id names an index it does not have.
    assert_eq!(
        b.request(EpAddr::new(0, 0), second, Body::short(&[])),
        Err(AmError::UnregisteredHandler(second.index()))
    );
}

#[test]
fn try_forms_report_back_pressure_and_full_forms_validate() {
    let c = client(1);
    let mut ep = c.endpoint(0).unwrap();
    let h = ep.register(|_t: &mut Token<'_>, _a: Am<'_>| {}).unwrap();
    let me = ep.addr();
    assert_eq!(
        ep.try_request(me, h, Body::short(&[1])).unwrap(),
        Injected::Sent
    );
    assert_eq!(
        ep.try_request(me, h, Body::medium(&[], &[1; 8])).unwrap(),
        Injected::Sent
    );
    assert_eq!(
        ep.request(me, h, Body::long(&[], &[0; 8], 4090)),
        Err(AmError::OutOfSegment {
            dst: me,
            offset: 4090,
            len: 8,
            seg_len: 4096
        })
    );
    assert_eq!(
        ep.request(EpAddr::rank(3), h, Body::short(&[])),
        Err(AmError::BadRank { rank: 3, size: 1 })
    );
    assert!(matches!(
        ep.request(me, h, Body::short(&[0; 17])),
        Err(AmError::TooManyArgs { given: 17, .. })
    ));
    // The closure form never leaves a borrow behind: a retry loop compiles and works.
    let mut tries = 0;
    loop {
        tries += 1;
        match ep
            .try_request_with(me, h, Body::medium(&[], 32), |b| {
                b[..4].copy_from_slice(b"abcd");
                4
            })
            .unwrap()
        {
            Injected::Sent => break,
            Injected::WouldBlock => {
                ep.poll();
            }
        }
    }
    assert_eq!(tries, 1);
    assert!(matches!(
        ep.try_request_with(me, h, Body::medium(&[], 8), |_| 9),
        Err(AmError::CommitTooLarge {
            len: 9,
            prepared: 8
        })
    ));
    while ep.poll() > 0 {}
}

#[test]
fn token_reports_reply_limits() {
    let c = client(1);
    let mut ep = c.endpoint(0).unwrap();
    let seen = Arc::new(Mutex::new(None));
    let s = seen.clone();
    let h = ep
        .register(move |t: &mut Token<'_>, _a: Am<'_>| {
            *s.lock().unwrap() = Some((t.max_args(), t.max_reply_medium(), t.max_reply_long()));
        })
        .unwrap();
    ep.request(EpAddr::rank(0), h, Body::short(&[])).unwrap();
    ep.wait_until(|| seen.lock().unwrap().is_some());
    let got = seen.lock().unwrap().unwrap();
    assert_eq!(got, (ep.max_args(), ep.max_medium(EpAddr::rank(0)), 4096));
}

#[test]
fn wait_until_timeout_gives_up() {
    let c = client(1);
    let mut ep = c.endpoint(0).unwrap();
    let t0 = Instant::now();
    assert!(!ep.wait_until_timeout(|| false, Duration::from_millis(20)));
    assert!(t0.elapsed() >= Duration::from_millis(20));
    assert!(ep.wait_until_timeout(|| true, Duration::from_secs(10)));
}

/// Hole (b) of the "One endpoint" issue: an event waited on another endpoint must not
/// hand its buffer back while the operation may still write it.
#[test]
fn an_event_waited_on_another_endpoint_is_an_error() {
    let c = client(2);
    let (mut a, mut b, h) = common::two_counting_eps(&c);
    let ev = common::owned_to_1(&mut a, h);
    assert!(!ev.is_done(), "loopback defers the buffer until delivery");
    let err = b.wait(ev).unwrap_err();
    assert_eq!(
        err,
        AmError::Event(EventError::WrongEndpoint {
            started_on: EpAddr::new(0, 0),
            waited_on: EpAddr::new(0, 1)
        })
    );
    let ev = common::owned_to_1(&mut a, h);
    assert!(matches!(b.test(&ev), Err(EventError::WrongEndpoint { .. })));
    assert!(matches!(
        b.wait_all(&[&ev]),
        Err(EventError::WrongEndpoint { .. })
    ));
    drop(ev);
    // The delivery still happens; the dropped event's buffer lives until then.
    b.poll();
    a.poll();
}

/// Hole (c): a Long payload and the segment are read with race-free copies; the slice
/// views are `unsafe`.
#[test]
fn long_payloads_are_read_through_copies() {
    let c = client(1);
    let mut ep = c.endpoint(0).unwrap();
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    let h = ep
        .register(move |_t: &mut Token<'_>, am: Am<'_>| {
            assert_eq!(am.category(), Category::Long);
            assert!(
                am.payload().is_empty(),
                "a Long payload is not lent as a slice"
            );
            let l = am.long().expect("a Long payload");
            assert_eq!((l.offset(), l.len(), am.len()), (64, 5, 5));
            let mut first = [0u8; 2];
            assert_eq!(l.read(&mut first), 2);
            assert_eq!(&first, b"he");
            *g.lock().unwrap() = l.to_vec();
        })
        .unwrap();
    ep.request(EpAddr::rank(0), h, Body::long(&[], b"hello", 64))
        .unwrap();
    ep.wait_until(|| !got.lock().unwrap().is_empty());
    assert_eq!(got.lock().unwrap().as_slice(), b"hello");
    let mut back = [0u8; 5];
    ep.segment().read(64, &mut back).unwrap();
    assert_eq!(&back, b"hello");
    assert!(ep.segment().read(4093, &mut back).is_err());
}

#[test]
fn ams_cross_endpoints_on_threads() {
    let c = client(2);
    let mut a = c.endpoint(0).unwrap();
    let mut b = c.endpoint(1).unwrap();
    let got = Arc::new(AtomicU64::new(0));
    let g = got.clone();
    // Identical tables on both endpoints: ping (replies with the argument), pong, done.
    let a_pong = a
        .register(move |t: &mut Token<'_>, am: Am<'_>| {
            assert_eq!(t.src(), EpAddr::new(0, 1));
            g.fetch_add(am.args()[0] as u64, Ordering::Relaxed);
        })
        .unwrap();
    let a_ping = a.register(|_t: &mut Token<'_>, _a: Am<'_>| {}).unwrap();
    let a_done = a.register(|_t: &mut Token<'_>, _a: Am<'_>| {}).unwrap();
    let t = std::thread::spawn(move || {
        let pong = b.register(|_t: &mut Token<'_>, _a: Am<'_>| {}).unwrap();
        let _ping = b
            .register(move |t: &mut Token<'_>, am: Am<'_>| {
                assert_eq!(t.src(), EpAddr::new(0, 0));
                t.reply(pong, Body::short(am.args())).unwrap();
            })
            .unwrap();
        let done = Arc::new(AtomicU64::new(0));
        let d = done.clone();
        let _done = b
            .register(move |_t: &mut Token<'_>, _a: Am<'_>| d.store(1, Ordering::Relaxed))
            .unwrap();
        b.wait_until(|| done.load(Ordering::Relaxed) == 1);
    });
    // Wait until the thread has registered its handlers (its table must match).
    std::thread::sleep(Duration::from_millis(50));
    for i in 1..=100u32 {
        a.request(EpAddr::new(0, 1), a_ping, Body::short(&[i]))
            .unwrap();
    }
    a.wait_until(|| got.load(Ordering::Relaxed) == 5050);
    a.request(EpAddr::new(0, 1), a_done, Body::short(&[]))
        .unwrap();
    let _ = a_pong;
    t.join().unwrap();
}

#[test]
fn bad_configuration_is_reported() {
    let r = ClientBuilder::new()
        .config(gex_core::Config::from_pairs([("GEX_SEGMENT_SIZE", "huge")]))
        .init::<Loopback>(Box::new(Singleton::new()));
    let e = r.unwrap_err().to_string();
    assert!(e.contains("GEX_SEGMENT_SIZE"), "{e}");
    let r = ClientBuilder::new()
        .endpoints(0)
        .config(gex_core::Config::default())
        .init::<Loopback>(Box::new(Singleton::new()));
    assert!(r.unwrap_err().to_string().contains("endpoints"));
    let r = ClientBuilder::new()
        .config(gex_core::Config::from_pairs([(
            "GEX_PROGRESS_INTERVAL",
            "soon",
        )]))
        .init::<Loopback>(Box::new(Singleton::new()));
    assert!(r.unwrap_err().to_string().contains("GEX_PROGRESS_INTERVAL"));
}

#[test]
fn exchange_gathers_every_blob() {
    let c = client(2);
    let a = c.endpoint(0).unwrap();
    let mut b = c.endpoint(1).unwrap();
    // Each endpoint's primordial team is the endpoints with its index on every rank:
    // a one-member team here.
    let w = b.world();
    assert_eq!(w.members(), &[EpAddr::new(0, 1)]);
    assert_eq!(b.exchange(&w, &[7; 3]).unwrap(), vec![vec![7; 3]]);
    // Not a member: an error, not a hang.
    let aw = a.world();
    assert_eq!(
        b.exchange(&aw, b"x").unwrap_err(),
        AmError::NotMember(EpAddr::new(0, 1))
    );
}

#[test]
fn a_scope_completes_its_operations_before_returning() {
    let c = client(1);
    let mut ep = c.endpoint(0).unwrap();
    let (h, n) = common::counting(&mut ep);
    let me = ep.addr();
    ep.scope(|s| {
        for _ in 0..3 {
            let ev = s.request_owned(me, h, Body::medium(&[], vec![0; 8]), Nb)?;
            let tag = s.tag();
            layer::track_implicit(&mut *s, tag, ev);
        }
        Ok::<(), AmError>(())
    })
    .unwrap();
    assert_eq!(
        n.load(Ordering::Relaxed),
        3,
        "every scoped operation completed"
    );
}

// ---------------------------------------------------------------- layers

/// A layer that counts pings, replies with pongs, and reports busy until it has seen
/// as many pongs as it sent pings.
#[derive(Debug, Default)]
struct Pinger {
    ping: Option<HandlerId>,
    pong: Option<HandlerId>,
    sent: u32,
    pongs: u32,
    progress_calls: u32,
    aux: usize,
}

impl Layer for Pinger {
    const NAME: &'static str = "pinger";
    const HANDLERS: u8 = 2;
    const AUX_BYTES: usize = 100;
    const ENV_VARS: &'static [gex_core::config::EnvVar] = &[gex_core::config::EnvVar {
        name: "PINGER_TEST_KNOB",
        default: "0",
        doc: "a test layer's setting",
    }];
    fn attach<C: Conduit>(cx: &mut layer::Attach<'_, C, Self>) -> Result<Self, InitError> {
        if cx.config().bool("PINGER_TEST_KNOB", false)? {
            return Err(InitError::Layer {
                layer: Self::NAME,
                msg: "refused by its setting".into(),
            });
        }
        Ok(Pinger {
            ping: Some(cx.handler(0)),
            pong: Some(cx.handler(1)),
            aux: cx.aux_len(),
            ..Default::default()
        })
    }
    fn handle(mut self: std::pin::Pin<&mut Self>, h: u8, t: &mut Token<'_>, _am: Am<'_>) {
        match h {
            0 => t
                .reply(self.pong.expect("attached"), Body::short(&[]))
                .unwrap(),
            _ => self.pongs += 1,
        }
    }
    fn progress<C: Conduit>(mut self: std::pin::Pin<&mut Self>, _cx: &mut Cx<'_, C>) -> Progress {
        self.progress_calls += 1;
        if self.pongs < self.sent {
            Progress::Busy
        } else {
            Progress::Idle
        }
    }
}

/// A second layer, to check the handler blocks do not overlap.
#[derive(Debug)]
struct Second {
    first: HandlerId,
}

impl Layer for Second {
    const NAME: &'static str = "second";
    const HANDLERS: u8 = 1;
    fn attach<C: Conduit>(cx: &mut layer::Attach<'_, C, Self>) -> Result<Self, InitError> {
        assert!(
            cx.layer::<Pinger>().is_some(),
            "layers attached before are reachable"
        );
        Ok(Second {
            first: cx.handler(0),
        })
    }
}

#[test]
fn layers_get_handler_blocks_aux_slices_settings_and_progress() {
    let c = common::build(
        ClientBuilder::new().layer::<Pinger>().layer::<Second>(),
        gex_core::Config::default(),
    );
    assert_eq!(
        c.layers().iter().map(|l| l.name).collect::<Vec<_>>(),
        ["pinger", "second"]
    );
    let mut ep = c.endpoint(0).unwrap();
    assert_eq!(ep.layers(), ["pinger", "second"]);
    let me = ep.addr();
    let (ping, pong, aux) =
        layer::with::<Pinger, _, _>(&mut *ep, |p, _| (p.ping.unwrap(), p.pong.unwrap(), p.aux))
            .unwrap();
    assert_eq!((ping.index(), pong.index()), (16, 17));
    assert_eq!(aux, 128, "100 bytes rounded up to 64");
    assert_eq!(
        layer::with::<Second, _, _>(&mut *ep, |s, _| s.first.index()),
        Some(18)
    );
    // Reserved handlers are not for clients.
    assert_eq!(
        ep.request(me, ping, Body::short(&[])),
        Err(AmError::ReservedHandler(16))
    );
    // A layer sends to its own handlers without waiting; the endpoint's waits run its
    // progress hook and handlers.
    for _ in 0..3 {
        let r = layer::with::<Pinger, _, _>(&mut *ep, |mut p, cx| {
            p.sent += 1;
            cx.set_busy();
            cx.try_request(me, ping, Category::Short, &[], &[], 0)
        })
        .unwrap()
        .unwrap();
        assert_eq!(r, Injected::Sent);
    }
    assert!(layer::wait_until::<Pinger, _>(&mut *ep, |p| p.pongs == 3));
    let calls = layer::with::<Pinger, _, _>(&mut *ep, |p, _| p.progress_calls).unwrap();
    assert!(calls >= 1, "the progress hook ran");
    ep.poll();
    ep.poll();
    let idle = layer::with::<Pinger, _, _>(&mut *ep, |p, _| p.progress_calls).unwrap();
    ep.poll();
    assert_eq!(
        layer::with::<Pinger, _, _>(&mut *ep, |p, _| p.progress_calls).unwrap(),
        idle,
        "an idle layer's hook does not run"
    );
    // Every registry the client reads: core, conduit, layers.
    let regs = ClientBuilder::new()
        .layer::<Pinger>()
        .env_registries_of::<Loopback>();
    assert!(
        regs.iter()
            .flat_map(|r| r.iter())
            .any(|v| v.name == "PINGER_TEST_KNOB")
    );
    assert!(
        regs.iter()
            .flat_map(|r| r.iter())
            .any(|v| v.name == "GEX_WAIT")
    );
}

#[test]
fn a_layer_that_refuses_to_attach_fails_the_endpoint() {
    let c = common::build(
        ClientBuilder::new().layer::<Pinger>(),
        gex_core::Config::from_pairs([("PINGER_TEST_KNOB", "1")]),
    );
    let e = c.endpoint(0).unwrap_err();
    assert!(
        e.to_string().contains("pinger") && e.to_string().contains("refused"),
        "{e}"
    );
}

// ---------------------------------------------------------------- progress thread

#[test]
fn a_progress_thread_serves_requests_while_the_owner_computes() {
    let c = common::build(
        ClientBuilder::new().endpoints(2).progress_thread(true),
        gex_core::Config::default(),
    );
    let mut target = c.endpoint(0).unwrap();
    let mut peer = c.endpoint(1).unwrap();
    assert!(target.has_progress_thread());
    let got = Arc::new(AtomicU64::new(0));
    let g = got.clone();
    // Same table on both: [pong, ping].
    let pong_t = target
        .register(|_t: &mut Token<'_>, _a: Am<'_>| {})
        .unwrap();
    let _ping_t = target
        .register(move |t: &mut Token<'_>, am: Am<'_>| {
            t.reply(pong_t, Body::short(am.args())).unwrap()
        })
        .unwrap();
    let _pong_p = peer
        .register(move |_t: &mut Token<'_>, am: Am<'_>| {
            g.store(am.args()[0] as u64, Ordering::Relaxed);
        })
        .unwrap();
    let ping_p = peer.register(|_t: &mut Token<'_>, _a: Am<'_>| {}).unwrap();
    // The target's owner "computes" on another thread: it holds the endpoint but never
    // calls gex for a while. Its progress thread answers.
    let owner = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        drop(target);
    });
    let t0 = Instant::now();
    peer.request(EpAddr::new(0, 0), ping_p, Body::short(&[42]))
        .unwrap();
    assert!(peer.wait_until_timeout(|| got.load(Ordering::Relaxed) == 42, Duration::from_secs(5)));
    assert!(
        t0.elapsed() < Duration::from_millis(250),
        "answered by the progress thread, not after the owner's computation ({:?})",
        t0.elapsed()
    );
    owner.join().unwrap();
}

#[test]
fn a_layer_takes_a_completed_event_without_waiting() {
    use gex_core::event::Data;
    let c = common::build(
        ClientBuilder::new().layer::<Pinger>(),
        gex_core::Config::default(),
    );
    let mut ep = c.endpoint(0).unwrap();
    let got = layer::with::<Pinger, _, _>(&mut *ep, |_p, cx| {
        let (ev, done) = cx.pending::<u64, AmError>(None, |d, _| match d {
            Data::Word(w) => w,
            _ => 0,
        });
        let ev = cx.try_take(ev).expect_err("not complete yet");
        done.done(Data::Word(7));
        cx.try_take(ev).expect("complete")
    })
    .unwrap();
    assert_eq!(got, Ok(7));
}

#[test]
fn a_layer_whose_handler_ran_is_busy() {
    let c = common::build(
        ClientBuilder::new().layer::<Pinger>(),
        gex_core::Config::default(),
    );
    let mut ep = c.endpoint(0).unwrap();
    let me = ep.addr();
    ep.poll();
    let before = layer::with::<Pinger, _, _>(&mut *ep, |p, _| p.progress_calls).unwrap();
    ep.poll();
    assert_eq!(
        layer::with::<Pinger, _, _>(&mut *ep, |p, _| p.progress_calls).unwrap(),
        before,
        "idle"
    );
    // A ping (handled by the layer, without the layer asking to be busy) makes the
    // layer's hook run.
    let ping = layer::with::<Pinger, _, _>(&mut *ep, |p, _| p.ping.unwrap()).unwrap();
    layer::with::<Pinger, _, _>(&mut *ep, |_, cx| {
        cx.try_request(me, ping, Category::Short, &[], &[], 0)
    })
    .unwrap()
    .unwrap();
    assert!(layer::wait_until::<Pinger, _>(&mut *ep, |p| p.pongs == 1));
    ep.poll();
    assert!(layer::with::<Pinger, _, _>(&mut *ep, |p, _| p.progress_calls).unwrap() > before);
}

// ---------------------------------------------------------------- hang diagnosis

/// A layer that reports work in flight.
#[derive(Debug)]
struct Stuck;

impl Layer for Stuck {
    const NAME: &'static str = "stuck";
    fn attach<C: Conduit>(_cx: &mut layer::Attach<'_, C, Self>) -> Result<Self, InitError> {
        Ok(Stuck)
    }
    fn describe(&self) -> String {
        "3 operations pending to rank 7".into()
    }
}

fn stuck_client(cfg: gex_core::Config) -> gex_core::Client<Loopback> {
    common::build(ClientBuilder::new().layer::<Stuck>(), cfg)
}

#[test]
fn the_report_names_counters_layers_and_the_conduit() {
    let c = stuck_client(gex_core::Config::default());
    let mut ep = c.endpoint(0).unwrap();
    let h = ep.register(|_t: &mut Token<'_>, _a: Am<'_>| {}).unwrap();
    ep.request(EpAddr::rank(0), h, Body::short(&[])).unwrap();
    ep.poll();
    let r = ep.report();
    assert!(r.contains("state of rank 0 ep 0"), "{r}");
    assert!(r.contains("0: sent 1 received 1"), "{r}");
    assert!(r.contains("stuck: 3 operations pending to rank 7"), "{r}");
}

#[test]
fn members_at_different_exchanges_get_an_error_not_a_hang() {
    let c = client(2);
    let mut a = c.endpoint(0).unwrap();
    let mut b = c.endpoint(1).unwrap();
    let members = vec![EpAddr::new(0, 0), EpAddr::new(0, 1)];
    let (ta, tb) = (
        gex_core::Team::new(9, members.clone(), 0),
        gex_core::Team::new(9, members, 1),
    );
    let t = std::thread::spawn(move || b.exchange_tagged(&tb, 2, b"b").unwrap_err());
    let ea = a.exchange_tagged(&ta, 1, b"a").unwrap_err();
    let eb = t.join().unwrap();
    assert_eq!(
        ea,
        AmError::ExchangeMismatch {
            peer: EpAddr::new(0, 1),
            ours: 1,
            theirs: 2
        }
    );
    assert_eq!(
        eb,
        AmError::ExchangeMismatch {
            peer: EpAddr::new(0, 0),
            ours: 2,
            theirs: 1
        }
    );
}

/// Runs this test binary again for one `child_*` test with `env`: its exit code and
/// stderr.
fn run_child(test: &str, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args([test, "--exact", "--nocapture", "--ignored"])
        .envs(env.iter().copied())
        .env("CORE_API_TEST_CHILD", "1")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Like [`run_child`], for a child expected to succeed: its stderr.
fn child_stderr(test: &str, env: &[(&str, &str)]) -> String {
    let (code, err) = run_child(test, env);
    assert_eq!(code, Some(0), "child {test} failed: {err}");
    err
}

/// The stderr of the `child_*` test `child` run with `env`, which must hold the
/// `Stuck` layer's part of the state report.
fn stuck_report(child: &str, env: &[(&str, &str)]) -> String {
    let err = child_stderr(child, env);
    assert!(
        err.contains("stuck: 3 operations pending to rank 7"),
        "{err}"
    );
    err
}

/// A test in two halves: `$child`, ignored, which does its work only in the child
/// process [`run_child`] starts (`CORE_API_TEST_CHILD` set), and `$parent`, which
/// starts it and checks what it printed (not under Miri, which cannot start processes).
macro_rules! in_child {
    (fn $child:ident() $cbody:block fn $parent:ident() $pbody:block) => {
        #[test]
        #[ignore = concat!("run by ", stringify!($parent), " in a child process")]
        fn $child() {
            if std::env::var("CORE_API_TEST_CHILD").is_err() {
                return;
            }
            $cbody
        }

        #[test]
        #[cfg_attr(
            miri,
            ignore = "runs this test binary in a child process: Miri cannot start processes"
        )]
        fn $parent() $pbody
    };
}

in_child! {
    fn child_stalls() {
        let c = stuck_client(gex_core::Config::from_env());
        let mut ep = c.endpoint(0).unwrap();
        assert!(!ep.wait_until_timeout(|| false, Duration::from_millis(2500)));
    }
    fn stalled_waits_print_the_report() {
        let err = stuck_report("child_stalls", &[("GEX_STALL_REPORT", "1")]);
        assert!(err.contains("without progress"), "{err}");
        // Not printed at all when disabled.
        let err = child_stderr("child_stalls", &[("GEX_STALL_REPORT", "0")]);
        assert!(!err.contains("without progress"), "{err}");
    }
}

in_child! {
    fn child_signalled() {
        let c = stuck_client(gex_core::Config::from_env());
        let mut ep = c.endpoint(0).unwrap();
        let pid = std::process::id();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            std::process::Command::new("kill")
                .args(["-USR1", &pid.to_string()])
                .status()
                .unwrap();
        });
        assert!(!ep.wait_until_timeout(|| false, Duration::from_millis(1000)));
        t.join().unwrap();
    }
    fn sigusr1_prints_the_report() {
        let err = stuck_report("child_signalled", &[("GEX_STALL_REPORT", "0")]);
        assert!(err.contains("gex: state of rank 0 ep 0"), "{err}");
    }
}

in_child! {
    fn child_retries() {
        let c = stuck_client(gex_core::Config::from_env());
        let mut ep = c.endpoint(0).unwrap();
        // An operation the conduit keeps refusing (back-pressure that never clears).
        let mut r = layer::Retry::default();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_millis(2500) {
            layer::retry(&mut *ep, &mut r);
        }
    }
    fn a_retry_that_stalls_prints_the_report() {
        let err = stuck_report("child_retries", &[("GEX_STALL_REPORT", "1")]);
        assert!(err.contains("without progress"), "{err}");
    }
}

in_child! {
    fn child_thread_handler_panics() {
        let c = common::build(
            ClientBuilder::new().endpoints(2).progress_thread(true),
            gex_core::Config::default(),
        );
        let mut target = c.endpoint(0).unwrap();
        let mut peer = c.endpoint(1).unwrap();
        let boom = target
            .register(|_t: &mut Token<'_>, _a: Am<'_>| panic!("a handler panics on purpose"))
            .unwrap();
        let _ = peer.register(|_t: &mut Token<'_>, _a: Am<'_>| {}).unwrap();
        peer.request(target.addr(), boom, Body::short(&[])).unwrap();
        // The owner computes; the progress thread runs the handler, which panics.
        std::thread::sleep(Duration::from_secs(5));
        drop(target);
        unreachable!("the rank should have ended");
    }
    fn a_handler_panic_on_the_progress_thread_ends_the_rank() {
        let t0 = Instant::now();
        let (code, err) = run_child("child_thread_handler_panics", &[]);
        assert_eq!(code, Some(101), "{err}");
        assert!(err.contains("a handler panics on purpose"), "{err}");
        assert!(
            err.contains("panicked on the progress thread of rank 0 ep 0"),
            "{err}"
        );
        assert!(
            t0.elapsed() < Duration::from_secs(4),
            "took {:?}",
            t0.elapsed()
        );
    }
}

/// A layer type per `N`, to attach more layers than the handle caches.
#[derive(Debug, Default)]
struct Nth<const N: usize> {
    hits: u32,
}

impl<const N: usize> Layer for Nth<N> {
    const NAME: &'static str = ["n0", "n1", "n2", "n3", "n4", "n5"][N];
    fn attach<C: Conduit>(_: &mut layer::Attach<'_, C, Self>) -> Result<Self, InitError> {
        Ok(Nth::default())
    }
}

#[test]
fn layer_state_access_reaches_the_same_state_for_every_layer() {
    let c = common::build(
        ClientBuilder::new()
            .layer::<Nth<0>>()
            .layer::<Nth<1>>()
            .layer::<Nth<2>>()
            .layer::<Nth<3>>()
            .layer::<Nth<4>>(),
        gex_core::Config::default(),
    );
    let mut ep = c.endpoint(0).unwrap();
    fn check<const N: usize>(ep: &mut gex_core::Endpoint<Loopback>) {
        for k in 1..=3u32 {
            let hits = layer::state::<Nth<N>, _, _>(ep, |mut l| {
                l.hits += 1;
                l.hits
            });
            assert_eq!(hits, Some(k), "layer {N}");
            assert_eq!(layer::with::<Nth<N>, _, _>(ep, |l, _| l.hits), Some(k));
        }
    }
    // The first four come from the handle's cache, the fifth from the search: both
    // reach the state `layer::with` reaches.
    check::<0>(&mut ep);
    check::<1>(&mut ep);
    check::<2>(&mut ep);
    check::<3>(&mut ep);
    check::<4>(&mut ep);
    assert!(layer::state::<Nth<5>, _, _>(&mut ep, |_| ()).is_none());
    assert!(layer::state::<Pinger, _, _>(&mut ep, |_| ()).is_none());
    assert!(layer::with::<Pinger, _, _>(&mut ep, |_, _| ()).is_none());
    // The same through a progress thread's lock: `state` is not a fallback-to-`None`
    // fast path, it takes the lock and holds it while `f` runs.
    let c = common::build(
        ClientBuilder::new().layer::<Nth<0>>().progress_thread(true),
        gex_core::Config::default(),
    );
    let mut ep = c.endpoint(0).unwrap();
    for _ in 0..1000 {
        layer::state::<Nth<0>, _, _>(&mut ep, |mut l| l.hits += 1).expect("attached");
    }
    assert_eq!(
        layer::with::<Nth<0>, _, _>(&mut ep, |l, _| l.hits),
        Some(1000)
    );
}

/// A layer whose progress hook counts its runs and always has more to do.
#[derive(Debug, Default)]
struct Counting {
    /// Atomic so that a poll during the borrow (the bug this catches) would show, not
    /// be assumed away by the compiler.
    polls: std::sync::atomic::AtomicU64,
}

impl Layer for Counting {
    const NAME: &'static str = "counting";
    fn attach<C: Conduit>(_: &mut layer::Attach<'_, C, Self>) -> Result<Self, InitError> {
        Ok(Counting::default())
    }
    fn progress<C: Conduit>(self: std::pin::Pin<&mut Self>, _cx: &mut Cx<'_, C>) -> Progress {
        self.polls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Progress::Spinning
    }
}

/// A client with the [`Counting`] layer and a progress thread.
fn counting_with_thread() -> gex_core::Client<Loopback> {
    common::build(
        ClientBuilder::new()
            .layer::<Counting>()
            .progress_thread(true),
        gex_core::Config::default(),
    )
}

/// Makes `ep`'s [`Counting`] layer busy, so the thread polls it on its own (it stays
/// busy: `Spinning`).
fn set_busy(ep: &mut gex_core::Endpoint<Loopback>) {
    layer::with::<Counting, _, _>(ep, |_, cx| cx.set_busy()).expect("attached");
}

/// The progress thread's polls of [`Counting`] so far.
fn polls(ep: &mut gex_core::Endpoint<Loopback>) -> u64 {
    layer::state::<Counting, _, _>(ep, |l| l.polls.load(Ordering::Relaxed)).expect("attached")
}

/// Waits (at most 10 s, else fails with `what`) until the thread polled past `seen`.
fn wait_for_polls_past(ep: &mut gex_core::Endpoint<Loopback>, seen: u64, what: &str) {
    let t0 = Instant::now();
    while polls(ep) == seen {
        assert!(t0.elapsed() < Duration::from_secs(10), "{what}");
        std::thread::yield_now();
    }
}

/// With a progress thread, the state `layer::state` lends holds the endpoint's lock
/// word while it lives (the handle's cache of layer addresses is empty then, so the
/// borrow comes from the locked path): the thread's polls of the layer stop meanwhile
/// and resume after the borrow ends. Both forms of the locked way are checked: a
/// closure of at most four words (inlined there) and a larger one (called from an
/// out-of-line function).
#[test]
fn a_layer_state_borrowed_with_a_progress_thread_keeps_the_thread_out() {
    let c = counting_with_thread();
    let mut ep = c.endpoint(0).unwrap();
    set_busy(&mut ep);
    wait_for_polls_past(&mut ep, 0, "the thread never polled");
    let held_still = |l: std::pin::Pin<&mut Counting>| {
        let held = l.polls.load(Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(50));
        l.polls.load(Ordering::Relaxed) == held
    };
    let small = layer::state::<Counting, _, _>(&mut ep, held_still).expect("attached");
    assert!(
        small,
        "the thread polled the layer during a small closure's borrow"
    );
    let after = polls(&mut ep);
    wait_for_polls_past(&mut ep, after, "the thread stopped after the borrow");
    let pad = [7u64; 8];
    let large = layer::state::<Counting, _, _>(&mut ep, move |l| {
        held_still(l) && std::hint::black_box(pad).iter().sum::<u64>() == 56
    })
    .expect("attached");
    assert!(
        large,
        "the thread polled the layer during a large closure's borrow"
    );
    let after = polls(&mut ep);
    wait_for_polls_past(&mut ep, after, "the thread stopped after the borrow");
}

/// A panic inside `layer::state`'s closure, with a progress thread, releases the lock
/// word on the way out: the thread polls the layer again afterwards, and the next
/// borrow does not deadlock (a small closure and a large one, as above).
#[test]
fn a_panic_in_a_layer_state_borrow_releases_the_lock_word() {
    let c = counting_with_thread();
    let mut ep = c.endpoint(0).unwrap();
    set_busy(&mut ep);
    /// Runs `borrow` (which panics inside `layer::state`), then waits for the thread
    /// to poll the layer again.
    fn panics_then_polls(
        ep: &mut gex_core::Endpoint<Loopback>,
        borrow: impl FnOnce(&mut gex_core::Endpoint<Loopback>),
        what: &str,
    ) {
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| borrow(&mut *ep)));
        assert!(caught.is_err());
        let before = polls(ep);
        wait_for_polls_past(ep, before, what);
    }
    panics_then_polls(
        &mut ep,
        |ep| {
            layer::state::<Counting, _, _>(ep, |_| panic!("inside the borrow"));
        },
        "the thread never polled again after the panic",
    );
    let pad = [7u64; 8];
    panics_then_polls(
        &mut ep,
        |ep| {
            layer::state::<Counting, _, _>(ep, move |_| {
                panic!("inside the borrow: {}", std::hint::black_box(pad)[0])
            });
        },
        "the thread never polled again after the panic in a large closure",
    );
}

/// A layer that defers part of a scope's work to the scope's end: `end_scope` tracks
/// an event its progress hook completes a few polls later.
#[derive(Default)]
struct Flusher {
    ended: Vec<u32>,
    pending: Option<(gex_core::event::OpCompleter, u32)>,
    polls: u32,
}

impl Layer for Flusher {
    const NAME: &'static str = "flusher";
    fn attach<C: Conduit>(_: &mut layer::Attach<'_, C, Self>) -> Result<Self, InitError> {
        Ok(Flusher::default())
    }
    fn end_scope<C: Conduit>(mut self: std::pin::Pin<&mut Self>, cx: &mut Cx<'_, C>, tag: u32) {
        self.ended.push(tag);
        let (ev, done) = cx.pending::<(), EventError>(None, gex_core::event::finish_unit);
        cx.track_implicit(tag, ev);
        self.pending = Some((done, 0));
        cx.set_busy();
    }
    fn progress<C: Conduit>(mut self: std::pin::Pin<&mut Self>, _cx: &mut Cx<'_, C>) -> Progress {
        self.polls += 1;
        match self.pending.take() {
            Some((done, n)) if n >= 3 => {
                done.ok();
                Progress::Idle
            }
            Some((done, n)) => {
                self.pending = Some((done, n + 1));
                Progress::Spinning
            }
            None => Progress::Idle,
        }
    }
}

#[test]
fn a_scope_waits_for_what_its_layers_track_at_its_end() {
    let c = common::build(
        ClientBuilder::new().layer::<Flusher>(),
        gex_core::Config::default(),
    );
    let mut ep = c.endpoint(0).unwrap();
    let tag = ep.scope(|s| Ok::<u32, EventError>(s.tag())).unwrap();
    let (ended, pending, polls) = layer::with::<Flusher, _, _>(&mut *ep, |f, _| {
        (f.ended.clone(), f.pending.is_some(), f.polls)
    })
    .unwrap();
    assert_eq!(ended, [tag], "the hook ran once, with the scope's tag");
    assert!(
        !pending,
        "the scope returned only after the layer completed its event"
    );
    assert!(
        polls >= 4,
        "the scope's wait ran the layer's progress hook ({polls})"
    );
    // A mid-scope sync runs the hook too.
    ep.scope(|s| {
        s.sync::<EventError>()?;
        Ok::<(), EventError>(())
    })
    .unwrap();
    let ended = layer::with::<Flusher, _, _>(&mut *ep, |f, _| f.ended.len()).unwrap();
    assert_eq!(ended, 3, "sync and end of the second scope");
}

// ---------------------------------------------------------------- deliver_client

/// A layer whose handler 0 runs the client handler its message names
/// (`Token::deliver_client`): arguments `[how, client index, program arguments...]`
/// (`how`: 0 Medium, 1 Short, 2 Long), payload the program's; then it tries its own
/// reply (a pong to its handler 1) and records both results.
#[derive(Debug, Default)]
struct Forward {
    fwd: Option<HandlerId>,
    pong: Option<HandlerId>,
    /// Per message: what `deliver_client` answered, what the layer's own reply did.
    results: Vec<(Result<(), AmError>, Result<(), AmError>)>,
    pongs: u32,
}

impl Layer for Forward {
    const NAME: &'static str = "forward";
    const HANDLERS: u8 = 2;
    fn attach<C: Conduit>(cx: &mut layer::Attach<'_, C, Self>) -> Result<Self, InitError> {
        Ok(Forward {
            fwd: Some(cx.handler(0)),
            pong: Some(cx.handler(1)),
            ..Default::default()
        })
    }
    fn handle(mut self: std::pin::Pin<&mut Self>, h: u8, t: &mut Token<'_>, am: Am<'_>) {
        if h == 1 {
            self.pongs += 1;
            return;
        }
        let a = am.args();
        let to = HandlerId::at_any(a[1] as u8);
        let body = match a[0] {
            0 => Body::medium(&a[2..], am.payload()),
            1 => Body::short(&a[2..]),
            _ => Body::long(&a[2..], am.payload(), 0),
        };
        let delivered = t.deliver_client(to, body);
        let own = t.reply(self.pong.expect("attached"), Body::short(&[]));
        self.results.push((delivered, own));
    }
}

/// Sends `args`/`payload` from `from` to `to`'s `Forward` handler 0.
fn forward(from: &mut gex_core::Endpoint<Loopback>, to: EpAddr, args: &[u32], payload: &[u8]) {
    let fwd = layer::with::<Forward, _, _>(from, |f, _| f.fwd.unwrap()).unwrap();
    layer::with::<Forward, _, _>(from, |_, cx| {
        cx.try_request(to, fwd, Category::Medium, args, payload, 0)
    })
    .unwrap()
    .unwrap();
}

fn forward_results(
    ep: &mut gex_core::Endpoint<Loopback>,
) -> Vec<(Result<(), AmError>, Result<(), AmError>)> {
    layer::with::<Forward, _, _>(ep, |mut f, _| std::mem::take(&mut f.results)).unwrap()
}

type Seen = Arc<Mutex<Vec<(EpAddr, bool, Category, Vec<u32>, Vec<u8>)>>>;

#[test]
fn a_layer_handler_delivers_to_a_client_handler_whose_reply_reaches_the_sender() {
    let c = common::build(
        ClientBuilder::new().layer::<Forward>().endpoints(2),
        gex_core::Config::default(),
    );
    let (mut a, mut b) = (c.endpoint(0).unwrap(), c.endpoint(1).unwrap());
    // The same table on both: `back` first, then the forwarded handler.
    let seen: Seen = Arc::default();
    let backs = Arc::new(AtomicU64::new(0));
    let mut ids = Vec::new();
    for ep in [&mut a, &mut b] {
        let n = backs.clone();
        let back = ep
            .register(move |_t: &mut Token<'_>, am: Am<'_>| {
                assert_eq!(am.args(), [42]);
                n.fetch_add(1, Ordering::Relaxed);
            })
            .unwrap();
        let s = seen.clone();
        let h = ep
            .register(move |t: &mut Token<'_>, am: Am<'_>| {
                s.lock().unwrap().push((
                    am.src(),
                    t.is_request(),
                    am.category(),
                    am.args().to_vec(),
                    am.payload().to_vec(),
                ));
                // The client handler's reply: to the original sender.
                t.reply(back, Body::short(&[42])).unwrap();
                // Its own token cannot forward.
                assert_eq!(
                    t.deliver_client(back, Body::short(&[])),
                    Err(AmError::NotFromLayer)
                );
            })
            .unwrap();
        ids.push(h);
    }
    let h = u32::from(ids[0].index());
    let (from, to) = (b.addr(), a.addr());
    forward(&mut b, to, &[0, h, 7, 8], b"xyz");
    forward(&mut b, to, &[1, h, 9], b"ignored");
    a.poll();
    assert_eq!(
        *seen.lock().unwrap(),
        [
            (from, true, Category::Medium, vec![7, 8], b"xyz".to_vec()),
            (from, true, Category::Short, vec![9], vec![]),
        ],
        "the client handler saw the layer's message as its own"
    );
    // One reply over both tokens: the client's went, the layer's was refused.
    assert_eq!(
        forward_results(&mut a),
        [
            (Ok(()), Err(AmError::AlreadyReplied)),
            (Ok(()), Err(AmError::AlreadyReplied))
        ]
    );
    b.wait_until(|| backs.load(Ordering::Relaxed) == 2);
    assert_eq!(
        layer::with::<Forward, _, _>(&mut *b, |f, _| f.pongs),
        Some(0)
    );
}

#[test]
fn deliver_client_refuses_reserved_unregistered_and_long_and_nothing_runs() {
    let c = common::build(
        ClientBuilder::new().layer::<Forward>(),
        gex_core::Config::default(),
    );
    let mut ep = c.endpoint(0).unwrap();
    let me = ep.addr();
    let (h, n) = common::counting(&mut ep);
    let h = u32::from(h.index());
    let fwd = layer::with::<Forward, _, _>(&mut *ep, |f, _| f.fwd.unwrap()).unwrap();
    let reserved = u32::from(fwd.index());
    forward(&mut ep, me, &[0, reserved], b"");
    forward(&mut ep, me, &[0, 200], b"");
    forward(&mut ep, me, &[2, h], b"long");
    forward(&mut ep, me, &[1, h], b"");
    assert!(layer::wait_until::<Forward, _>(&mut *ep, |f| f.pongs == 4));
    assert_eq!(
        forward_results(&mut ep),
        [
            (Err(AmError::ReservedHandler(fwd.index())), Ok(())),
            (Err(AmError::UnregisteredHandler(200)), Ok(())),
            (Err(AmError::LongDelivered), Ok(())),
            // The client handler did not reply: the layer's reply goes.
            (Ok(()), Ok(())),
        ]
    );
    assert_eq!(
        n.load(std::sync::atomic::Ordering::Relaxed),
        1,
        "only the last ran"
    );
}

#[test]
fn a_panic_in_a_delivered_client_handler_is_raised_by_the_poll() {
    let c = common::build(
        ClientBuilder::new().layer::<Forward>(),
        gex_core::Config::default(),
    );
    let mut ep = c.endpoint(0).unwrap();
    let me = ep.addr();
    let h = ep
        .register(|_t: &mut Token<'_>, _a: Am<'_>| panic!("a forwarded handler panics"))
        .unwrap();
    forward(&mut ep, me, &[1, u32::from(h.index())], b"");
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ep.poll()));
    let msg = r.expect_err("the poll raises the handler's panic");
    assert_eq!(
        msg.downcast_ref::<&str>(),
        Some(&"a forwarded handler panics")
    );
    // The layer's handler went on after it: delivery answered, its own reply sent.
    assert!(layer::wait_until::<Forward, _>(&mut *ep, |f| f.pongs == 1));
    assert_eq!(forward_results(&mut ep), [(Ok(()), Ok(()))]);
    // The handler runs again for a later message (and panics again).
    forward(&mut ep, me, &[1, u32::from(h.index())], b"");
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ep.poll()));
    assert!(r.is_err());
}
