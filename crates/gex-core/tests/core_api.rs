//! Core API behaviour on the one-rank loopback conduit: rule enforcement that needs no
//! network, deferred local completion, endpoints on threads.

use gex_core::boot::Singleton;
use gex_core::loopback::Loopback;
use gex_core::{Am, AmError, ClientBuilder, EpAddr, EpError, Flags, RegisterError, Token};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

fn client(eps: u16) -> gex_core::Client<Loopback> {
    ClientBuilder::new()
        .segment_size(4096)
        .endpoints(eps)
        .config(gex_core::Config::default())
        .init::<Loopback>(Box::new(Singleton::new()))
        .unwrap()
}

#[test]
fn deferred_local_completion_returns_the_buffer_after_delivery() {
    let c = client(1);
    let mut ep = c.endpoint(0).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    ep.register(140, move |_t: &mut Token<'_>, am: Am<'_>| {
        s.lock().unwrap().extend_from_slice(am.payload())
    })
    .unwrap();
    let buf = vec![9u8; 1000];
    let ptr = buf.as_ptr();
    let mut ev = ep
        .request_medium_lc(EpAddr::rank(0), 140, &[], buf)
        .unwrap();
    // Not delivered yet: loopback still holds the buffer.
    assert!(!ev.is_complete());
    assert!(!ep.lc_test(&mut ev));
    let back = ep.lc_wait(ev);
    assert_eq!(back.as_ptr(), ptr, "the same buffer comes back, not a copy");
    assert_eq!(seen.lock().unwrap().as_slice(), &[9u8; 1000][..]);
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
fn registration_rules() {
    let c = client(1);
    let mut ep = c.endpoint(0).unwrap();
    let h = |_t: &mut Token<'_>, _a: Am<'_>| {};
    assert_eq!(ep.register(0, h), Err(RegisterError::Zero));
    assert_eq!(ep.register(127, h), Err(RegisterError::Reserved(127)));
    ep.register(128, h).unwrap();
    assert_eq!(
        ep.register(128, h),
        Err(RegisterError::AlreadyRegistered(128))
    );
    assert_eq!(
        ep.request_short(EpAddr::rank(0), 129, &[], Flags::empty()),
        Err(AmError::UnregisteredHandler(129))
    );
}

#[test]
fn ams_cross_endpoints_on_threads() {
    let c = client(2);
    let mut a = c.endpoint(0).unwrap();
    let mut b = c.endpoint(1).unwrap();
    let got = Arc::new(AtomicU64::new(0));
    let g = got.clone();
    let t = std::thread::spawn(move || {
        b.register(150, |t: &mut Token<'_>, am: Am<'_>| {
            assert_eq!(t.src(), EpAddr::new(0, 0));
            t.reply_short(151, am.args()).unwrap();
        })
        .unwrap();
        b.register(151, |_t: &mut Token<'_>, _a: Am<'_>| {})
            .unwrap();
        let done = Arc::new(AtomicU64::new(0));
        b.register(152, {
            let d = done.clone();
            move |_t: &mut Token<'_>, _a: Am<'_>| {
                d.store(1, Ordering::Relaxed);
            }
        })
        .unwrap();
        b.wait_until(|| done.load(Ordering::Relaxed) == 1);
    });
    a.register(150, |_t: &mut Token<'_>, _a: Am<'_>| {})
        .unwrap();
    a.register(151, move |t: &mut Token<'_>, am: Am<'_>| {
        assert_eq!(t.src(), EpAddr::new(0, 1));
        g.fetch_add(am.args()[0] as u64, Ordering::Relaxed);
    })
    .unwrap();
    a.register(152, |_t: &mut Token<'_>, _a: Am<'_>| {})
        .unwrap();
    for i in 1..=100u32 {
        a.request_short(EpAddr::new(0, 1), 150, &[i], Flags::empty())
            .unwrap();
    }
    a.wait_until(|| got.load(Ordering::Relaxed) == 5050);
    a.request_short(EpAddr::new(0, 1), 152, &[], Flags::empty())
        .unwrap();
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
}
