//! With the `trace-am` feature, every AM sent, replied and delivered emits a `tracing`
//! event under the target `gex::am`; without it the macro expands to nothing (this file
//! then has no tests). Run: `cargo test -p gex-core --features trace-am --test trace_am`.
#![cfg(feature = "trace-am")]

mod common;

use gex_core::{Am, Body, ClientBuilder, EpAddr, Token};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Counts events whose target is `gex::am`.
struct Counter(Arc<AtomicUsize>);

impl Subscriber for Counter {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, e: &Event<'_>) {
        if e.metadata().target() == "gex::am" {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn am_path_emits_events() {
    let n = Arc::new(AtomicUsize::new(0));
    let _guard = tracing::subscriber::set_default(Counter(n.clone()));
    let c = common::loopback(1, gex_core::Config::default());
    let mut ep = c.endpoint(0).unwrap();
    let (pong, done) = common::counting(&mut ep);
    let ping = ep
        .register(move |t: &mut Token<'_>, _am: Am<'_>| t.reply(pong, Body::short(&[])).unwrap())
        .unwrap();
    ep.request(EpAddr::rank(0), ping, Body::short(&[])).unwrap();
    ep.wait_until(|| done.load(Ordering::Relaxed) == 1);
    // request + delivery of the request + reply + delivery of the reply.
    assert_eq!(n.load(Ordering::Relaxed), 4);
}

/// A layer that sends a request to its own handler when asked.
#[derive(Debug, Default)]
struct Echo {
    h: Option<gex_core::HandlerId>,
    got: u32,
}

impl gex_core::layer::Layer for Echo {
    const NAME: &'static str = "echo";
    const HANDLERS: u8 = 1;
    fn attach<C: gex_core::spi::Conduit>(
        cx: &mut gex_core::layer::Attach<'_, C, Self>,
    ) -> Result<Self, gex_core::InitError> {
        Ok(Echo {
            h: Some(cx.handler(0)),
            got: 0,
        })
    }
    fn handle(mut self: std::pin::Pin<&mut Self>, _h: u8, _t: &mut Token<'_>, _am: Am<'_>) {
        self.got += 1;
    }
}

/// A layer's injection (`Cx::try_request`) goes through the same validate-then-inject
/// as the program's, so it is traced like every other request.
#[test]
fn a_layers_requests_are_traced_too() {
    let n = Arc::new(AtomicUsize::new(0));
    let _guard = tracing::subscriber::set_default(Counter(n.clone()));
    let c = common::build(
        ClientBuilder::new().layer::<Echo>(),
        gex_core::Config::default(),
    );
    let mut ep = c.endpoint(0).unwrap();
    let me = ep.addr();
    let r = gex_core::layer::with::<Echo, _, _>(&mut *ep, |p, cx| {
        cx.try_request(me, p.h.unwrap(), gex_core::Category::Short, &[], &[], 0)
    })
    .unwrap()
    .unwrap();
    assert_eq!(r, gex_core::Injected::Sent);
    assert!(gex_core::layer::wait_until::<Echo, _>(&mut *ep, |p| p.got == 1));
    // The layer's request + its delivery.
    assert_eq!(n.load(Ordering::Relaxed), 2);
}
