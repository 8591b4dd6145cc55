//! RMA between endpoints made at run time and endpoints made at init, written once
//! for every conduit that makes endpoints at run time (`Capabilities::RUNTIME_ENDPOINTS`):
//! smp's `tests/runtime_rma.rs` and ofi's `tests/runtime_endpoints.rs` call
//! [`across_kinds`].

use crate::exchange_barrier;
use gex_core::spi::Conduit;
use gex_core::{Blocking, Client, Endpoint, EpAddr, Nbi, OwnedEndpoint};
use gex_rma::{GlobalPtr, NbiCategories, RmaExt};
use std::sync::atomic::{AtomicBool, Ordering};

/// The word at `offset` of `ep`'s own segment.
pub fn read_u64<C: Conduit>(ep: &Endpoint<C>, offset: usize) -> u64 {
    let mut b = [0u8; 8];
    ep.segment().read(offset, &mut b).unwrap();
    u64::from_ne_bytes(b)
}

/// One thread's part of [`across_kinds`]: puts to and gets from the next rank's
/// endpoint of the other kind, then keeps polling its own endpoint until the other
/// thread of its rank is done too, then a barrier over its own endpoint's team, then
/// polls again until the other thread's barrier is over too (on ofi a run-time
/// endpoint's first message to a peer's run-time endpoint asks that rank's endpoint 0,
/// which must be polled meanwhile).
fn cross<C: Conduit>(
    ep: &mut Endpoint<C>,
    next: u32,
    mine: &[AtomicBool; 2],
    other: &[AtomicBool; 2],
) {
    let me = ep.addr();
    let target = EpAddr::new(next, 1 - me.ep);
    let word = |a: EpAddr| u64::from(a.rank) << 8 | u64::from(a.ep);
    let at = GlobalPtr::<u64>::new(target, 256 + 8 * usize::from(me.ep));
    for i in 0..50u64 {
        ep.put_val(at, word(me) + (i << 16), Blocking).unwrap();
        assert_eq!(ep.get_val(at, Blocking).unwrap(), word(me) + (i << 16));
    }
    ep.put_val(at, word(me), Nbi).unwrap();
    ep.sync_nbi(NbiCategories::PUTS).unwrap();
    // Serve the peers' operations on this endpoint until the other thread is done
    // (on conduits that discover run-time endpoints through endpoint 0, such as ofi,
    // this also answers the peers' lookups), twice: around the barrier.
    for phase in 0..2 {
        mine[phase].store(true, Ordering::Release);
        ep.wait_until(|| other[phase].load(Ordering::Acquire));
        if phase == 0 {
            exchange_barrier(ep).unwrap();
        }
    }
}

/// Two threads per rank, one driving endpoint 0 (made at init) and one driving
/// endpoint 1 (made at run time here): each puts to and gets from the next rank's
/// endpoint of the other kind (blocking and NBI), and each thread keeps polling its
/// own endpoint until both are done, so the AM path's handlers run on the target
/// endpoint's thread. Then every rank checks what the previous rank's threads left in
/// its two segments (each endpoint has its own), and drops endpoint 1. `ep0` is the
/// client's endpoint 0. The client must carry the RMA layer, have a segment of at least
/// 512 bytes, and allow 2 endpoints per rank; at least 2 ranks.
pub fn across_kinds<C: Conduit>(c: &Client<C>, mut ep0: OwnedEndpoint<C>) {
    let (me, n) = (c.rank(), c.size());
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    let mut ep1 = c.create_endpoint().unwrap();
    assert_eq!(ep1.index(), 1);
    exchange_barrier(&mut ep0).unwrap();
    let flags = || [AtomicBool::new(false), AtomicBool::new(false)];
    let (a, b) = (flags(), flags());
    std::thread::scope(|s| {
        let (a, b) = (&a, &b);
        let ep0 = &mut ep0;
        let ep1 = &mut ep1;
        s.spawn(move || cross(ep0, next, a, b));
        s.spawn(move || cross(ep1, next, b, a));
    });
    // What the previous rank's two threads left here: its endpoint 0's word in this
    // rank's endpoint 1, its endpoint 1's in endpoint 0.
    let word = |r: u32, e: u64| u64::from(r) << 8 | e;
    assert_eq!(read_u64(&ep1, 256), word(prev, 0));
    assert_eq!(read_u64(&ep0, 264), word(prev, 1));
    exchange_barrier(&mut ep0).unwrap();
    drop(ep1);
    exchange_barrier(&mut ep0).unwrap();
}
