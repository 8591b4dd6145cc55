//! Soundness probes: no slice that safe code receives covers memory another rank,
//! endpoint or thread may write meanwhile (issue 24, point 4). Every test here is safe
//! code; each shows a write or read outside what the API allows if a safe view of
//! shared bytes comes back.

use gex_conduit_smp::Smp;
use gex_core::boot::Singleton;
use gex_core::{Am, Body, ClientBuilder, EpAddr, HandlerId, Token};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The buffer a Long request is built in (`request_with`'s `fill` for a Long body) is the
/// caller's exclusively (`&mut [u8]`) until it is sent. On smp it used to be the destination's segment itself, which the
/// destination (and every other rank, by RMA or Long AMs) may write at any time: here
/// endpoint 1 writes its own segment through [`gex_core::Segment::write`] while
/// endpoint 0 holds the `&mut [u8]` over the same bytes, and endpoint 0's exclusive
/// buffer changed under it (and endpoint 1 saw endpoint 0's uncommitted bytes).
#[test]
fn prepared_long_buffer_is_not_the_destination_segment() {
    let c = ClientBuilder::new()
        .segment_size(1 << 16)
        .endpoints(2)
        .init::<Smp>(Box::new(Singleton::new()))
        .unwrap();
    let mut e0 = c.endpoint(0).unwrap();
    let mut e1 = c.endpoint(1).unwrap();
    let got = Arc::new(AtomicU64::new(0));
    let g = got.clone();
    const H: HandlerId = HandlerId::at(200);
    e0.register_at(H.index(), |_t: &mut Token<'_>, _am: Am<'_>| {})
        .unwrap();
    e1.register_at(H.index(), move |_t: &mut Token<'_>, am: Am<'_>| {
        let l = am.long().expect("a Long");
        g.store(
            l.to_vec().iter().map(|&b| u64::from(b)).sum(),
            Ordering::Release,
        );
    })
    .unwrap();
    const OFF: usize = 4096;
    const LEN: usize = 64;
    let dst = EpAddr::new(0, 1);
    let seg1 = e1.segment();
    e0.request_with(dst, H, Body::long(&[], LEN, OFF), |buf| {
        buf.fill(0xaa);
        // Endpoint 1 owns its segment and may write it whenever it likes (safe).
        seg1.write(OFF, &[0x55; LEN]).unwrap();
        let mut seen = [0u8; LEN];
        seg1.read(OFF, &mut seen).unwrap();
        assert_eq!(
            seen, [0x55; LEN],
            "endpoint 1 reads back what it wrote into its own segment"
        );
        assert!(
            buf.iter().all(|&b| b == 0xaa),
            "the buffer being filled (a `&mut [u8]` the caller holds exclusively) \
             changed under it: it covers the destination's segment, which its owner wrote"
        );
        LEN
    })
    .unwrap();
    e1.wait_until(|| got.load(Ordering::Acquire) != 0);
    assert_eq!(got.load(Ordering::Acquire), 0xaa * LEN as u64);
}
