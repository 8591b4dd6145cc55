//! Checks shared by the hybrid tests (`hybrid.rs` on one machine, `netns.rs` across
//! network namespaces under gex-run and mpiexec): which path each peer's traffic took.
//! Both run the conduit the facade runs for `GEX_CONDUIT=ofi`: [`OfiHybrid`], this
//! conduit as the far part of gex-conduit-hybrid's `Hybrid<Smp, Ofi>`.

use gex_coll::{Coll, CollExt};
use gex_conduit_hybrid::Hybrid;
use gex_conduit_ofi::Ofi;
use gex_conduit_smp::Smp;
use gex_core::spi::ConduitEp;
use gex_core::{Am, Blocking, Body, Client, ClientBuilder, EpAddr, HandlerId, Token};
use gex_rma::{GlobalPtr, Rma, RmaExt};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The ofi conduit with shared memory inside each host (what `GEX_CONDUIT=ofi` runs).
pub(crate) type OfiHybrid = Hybrid<Smp, Ofi>;

/// The layers of the jobs that run [`check_paths`] (and collectives): RMA and
/// collectives, as the facade's default builder has them.
pub(crate) type Layers = (((), Rma), Coll);

/// A client builder with [`Layers`].
pub(crate) fn builder() -> ClientBuilder<Layers> {
    ClientBuilder::new().layer::<Rma>().layer::<Coll>()
}

/// Requests each rank sends to every rank in [`check_paths`].
pub(crate) const PINGS: u64 = 200;

/// On every rank: checks that the conduit is hybrid exactly when `hybrid`, that the
/// ranks reached through shared memory are exactly `neighbours` (empty when not
/// hybrid), then sends [`PINGS`] Short requests (each answered by a reply) to every
/// rank and a 64 KiB put to every other rank, and checks `Ofi::stats()`: requests to
/// neighbours (self included) went through the rings and those to other hosts through
/// libfabric, every reply came back by the same path, and a put to another host was a
/// native `FI_RMA` put while a put to a neighbour was a plain copy (no native put).
/// AMs are counted per path by the hybrid conduit (`Hybrid::stats`), native puts by
/// the ofi conduit (`Ofi::stats`). The client must carry [`Layers`] (see [`builder`]):
/// the puts are gex-rma's, the barriers gex-coll's.
pub(crate) fn check_paths(
    client: &Client<OfiHybrid>,
    hybrid: bool,
    neighbours: &[u32],
) -> Result<(), String> {
    let me = client.rank();
    let n = client.size();
    let ofi = client.conduit().clone();
    if ofi.is_hybrid() != hybrid {
        return Err(format!(
            "rank {me}: is_hybrid() = {}, want {hybrid}; report:\n{}",
            ofi.is_hybrid(),
            ofi.far().report()
        ));
    }
    let want: &[u32] = if hybrid { neighbours } else { &[] };
    if ofi.shared_memory_peers() != want {
        return Err(format!(
            "rank {me}: shared-memory peers {:?}, want {want:?}",
            ofi.shared_memory_peers()
        ));
    }
    // The layers attach with the endpoint, and the handlers are registered on every
    // rank before the first barrier, so that no message reaches a rank that has not
    // registered them yet.
    let mut ep = client.endpoint(0).map_err(|e| e.to_string())?;
    let world = ep.world();
    let barrier =
        |ep: &mut gex_core::Endpoint<OfiHybrid>| ep.barrier(&world).map_err(|e| e.to_string());
    let replies = Arc::new(AtomicU64::new(0));
    let r2 = replies.clone();
    ep.register_at(200, |t: &mut Token<'_>, _am: Am<'_>| {
        t.reply(HandlerId::at(201), Body::short(&[7]))
            .expect("reply");
    })
    .map_err(|e| e.to_string())?;
    ep.register_at(201, move |_t: &mut Token<'_>, am: Am<'_>| {
        assert_eq!(am.args(), &[7]);
        r2.fetch_add(1, Ordering::Relaxed);
    })
    .map_err(|e| e.to_string())?;
    // Before the barrier: a peer that leaves it first may send to us while we are in it.
    let s0 = ofi.stats();
    barrier(&mut ep)?;
    for _ in 0..PINGS {
        for r in 0..n {
            ep.request(EpAddr::rank(r), HandlerId::at(200), Body::short(&[1]))
                .map_err(|e| e.to_string())?;
        }
    }
    let total = PINGS * u64::from(n);
    ep.wait_until(|| replies.load(Ordering::Relaxed) == total);
    barrier(&mut ep)?;
    let s1 = ofi.stats();
    let near = if hybrid { neighbours.len() as u64 } else { 0 };
    let far = u64::from(n) - near;
    let shm_req = s1.near_am_requests - s0.near_am_requests;
    let net_req = s1.far_am_requests - s0.far_am_requests;
    let shm_del = s1.near_am_delivered - s0.near_am_delivered;
    let net_del = s1.far_am_delivered - s0.far_am_delivered;
    eprintln!(
        "rank {me}: requests shm {shm_req} net {net_req}, delivered shm {shm_del} net {net_del} (neighbours {neighbours:?})"
    );
    if hybrid {
        // Requests: exactly ours. Deliveries: our requests' replies plus the neighbours'
        // (or far ranks') requests to us; the barriers add messages of their own, so
        // the delivered counts are lower bounds.
        // (The two barriers add a few requests of their own on either path.)
        let exact = |got: u64, want: u64| got >= want && got <= want + 64;
        if !exact(shm_req, PINGS * near) || !exact(net_req, PINGS * far) {
            return Err(format!(
                "rank {me}: {shm_req} requests through shared memory and {net_req} through libfabric, want {} and {}",
                PINGS * near,
                PINGS * far
            ));
        }
        if shm_del < 2 * PINGS * near || net_del < 2 * PINGS * far {
            return Err(format!(
                "rank {me}: delivered {shm_del} from shared memory and {net_del} from libfabric, want at least {} and {}",
                2 * PINGS * near,
                2 * PINGS * far
            ));
        }
    } else if shm_req != 0 || shm_del != 0 || net_req < PINGS * u64::from(n) {
        return Err(format!(
            "rank {me}: not hybrid, yet {shm_req} requests and {shm_del} deliveries through shared memory ({net_req} through libfabric)"
        ));
    }

    // RMA: a neighbour's segment is mapped (direct copy), another host's is not (the
    // conduit endpoint reached through the RMA layer).
    for d in 0..n {
        let mapped = gex_core::layer::with::<Rma, _, _>(&mut *ep, |_, cx| {
            cx.conduit().peer_segment(EpAddr::rank(d)).is_some()
        })
        .ok_or("the client does not carry the RMA layer")?;
        if mapped != (hybrid && neighbours.contains(&d)) {
            return Err(format!("rank {me}: segment of rank {d} mapped = {mapped}"));
        }
    }
    barrier(&mut ep)?;
    const LEN: usize = 64 << 10;
    let data: Vec<u8> = (0..LEN).map(|i| (i as u32 * 31 + me) as u8).collect();
    for d in 0..n {
        if d == me {
            continue;
        }
        let before = ofi.far().stats().native_puts;
        let p = GlobalPtr::<u8>::new(EpAddr::rank(d), LEN * me as usize);
        ep.put(p, &data, Blocking).map_err(|e| e.to_string())?;
        let native = ofi.far().stats().native_puts - before;
        let near = hybrid && neighbours.contains(&d);
        if near && native != 0 {
            return Err(format!(
                "rank {me}: a put to neighbour {d} was a native put"
            ));
        }
        if !near && native == 0 {
            return Err(format!(
                "rank {me}: a put to rank {d} on another host was not a native put"
            ));
        }
    }
    barrier(&mut ep)?;
    for s in 0..n {
        if s == me {
            continue;
        }
        let mut got = vec![0u8; LEN];
        ep.segment()
            .read(LEN * s as usize, &mut got)
            .map_err(|e| e.to_string())?;
        if got
            .iter()
            .enumerate()
            .any(|(i, &b)| b != (i as u32 * 31 + s) as u8)
        {
            return Err(format!(
                "rank {me}: the put of rank {s} did not arrive intact"
            ));
        }
    }
    barrier(&mut ep)?;
    Ok(())
}
