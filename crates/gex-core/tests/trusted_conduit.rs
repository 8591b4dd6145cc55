//! Soundness probes of what the core takes on trust from a conduit's safe methods
//! (issue 24, point 3): a conduit written in safe code must not be able to make a safe
//! call of the program write outside memory it owns.
//!
//! `ShortPrepare` is the loopback conduit, except that its negotiated-payload buffer is
//! the first 8 bytes of a 64-byte block whatever the request asked for; the rest of
//! the block is a canary.
//!
//! The conduit contract is an `unsafe trait` now, and this conduit breaks one of its
//! promises (an in-place buffer holds the asked length) on purpose: the core still
//! checks that length, as a defence that costs one comparison per prepare.
#![allow(unsafe_code)]

use gex_core::boot::{Bootstrap, Singleton};
use gex_core::loopback::{Loopback, LoopbackEp};
use gex_core::spi::{
    Capabilities, Conduit, ConduitEp, ConduitError, Deliver, Limits, OpenParams, OutMsg, Prepare,
    PrepareReq,
};
use gex_core::{AmError, Body, ClientBuilder, EpAddr, EpIndex, InitError, Injected};
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

#[derive(Debug)]
struct ShortPrepare {
    _inner: Arc<Loopback>,
}

#[derive(Debug)]
struct ShortEp {
    inner: LoopbackEp,
}

/// The conduit's buffer and the canary after it (atomics: the program writes the
/// first bytes through the buffer, the test reads them all afterwards).
static BLOCK: [AtomicU8; 64] = [const { AtomicU8::new(0) }; 64];

/// Bytes of the block the conduit hands out.
const GIVEN: usize = 8;

// SAFETY: loopback's, except the in-place buffer's length, broken on purpose (module
// documentation): the test shows the core refuses it before lending anything.
unsafe impl Conduit for ShortPrepare {
    type Ep = ShortEp;
    const NAME: &'static str = "short-prepare";
    fn open(
        boot: &mut dyn Bootstrap,
        params: &OpenParams<'_>,
    ) -> Result<(Arc<Self>, Vec<ShortEp>), InitError> {
        let (c, eps) = <Loopback as Conduit>::open(boot, params)?;
        let eps = eps.into_iter().map(|inner| ShortEp { inner }).collect();
        Ok((Arc::new(ShortPrepare { _inner: c }), eps))
    }
}

// SAFETY: as for `ShortPrepare`.
unsafe impl ConduitEp for ShortEp {
    fn index(&self) -> EpIndex {
        self.inner.index()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities() | Capabilities::NP_IN_PLACE
    }
    fn limits(&self, dst: EpAddr) -> Limits {
        self.inner.limits(dst)
    }
    fn local_segment(&self) -> (NonNull<u8>, usize) {
        self.inner.local_segment()
    }
    fn peer_segment(&self, dst: EpAddr) -> Option<(NonNull<u8>, usize)> {
        self.inner.peer_segment(dst)
    }
    fn inject(&mut self, msg: &OutMsg<'_>, imm: bool) -> Result<Injected, ConduitError> {
        self.inner.inject(msg, imm)
    }
    fn poll<D: Deliver>(&mut self, d: &mut D, budget: usize) -> usize {
        self.inner.poll(d, budget)
    }
    fn has_incoming(&self) -> bool {
        self.inner.has_incoming()
    }
    fn block(&mut self, timeout: Duration) {
        self.inner.block(timeout)
    }
    /// A buffer shorter than asked (a conduit bug, in safe code).
    fn prepare(&mut self, _req: &PrepareReq, _imm: bool) -> Result<Prepare, ConduitError> {
        let p = NonNull::new(BLOCK[0].as_ptr()).expect("a static's address");
        Ok(Prepare::InPlace(NonNull::slice_from_raw_parts(p, GIVEN)))
    }
    fn commit(&mut self, _msg: &OutMsg<'_>) -> Result<(), ConduitError> {
        Ok(())
    }
}

/// The core lent the conduit's in-place buffer as a `&mut [u8]` of the length the
/// program asked for, trusting the conduit to have given at least that much (a
/// `debug_assert!` only): a program filling its buffer wrote past the 8 bytes the
/// conduit gave, over the canary. A buffer shorter than asked is now a contract error.
#[test]
fn a_short_in_place_buffer_is_a_contract_error() {
    let c = ClientBuilder::new()
        .segment_size(4096)
        .init::<ShortPrepare>(Box::new(Singleton::new()))
        .unwrap();
    let mut ep = c.endpoint(0).unwrap();
    let me = ep.addr();
    let h = ep
        .register(|_t: &mut gex_core::Token<'_>, _am: gex_core::Am<'_>| {})
        .unwrap();
    let mut filled = false;
    match ep.request_with(me, h, Body::medium(&[], 32), |buf| {
        filled = true;
        buf.fill(0xff);
        0
    }) {
        Err(AmError::Conduit(ConduitError::Contract(_))) => assert!(!filled, "lent anyway"),
        Err(e) => panic!("unexpected error {e}"),
        Ok(()) => {
            let over = BLOCK[GIVEN..]
                .iter()
                .filter(|b| b.load(Ordering::Relaxed) != 0)
                .count();
            assert_eq!(
                over, 0,
                "the program wrote {over} bytes past the conduit's {GIVEN}-byte buffer"
            );
            panic!("a 32-byte buffer from an 8-byte one");
        }
    }
}
