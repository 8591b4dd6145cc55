//! The capabilities case: every flag a conduit reports must match its behaviour.

use super::probe::{self, with_conduit};
use super::raw::{peer_read, peer_write};
use super::util::{barrier, sent, wait_for};
use crate::rng::hash_words;
use gex_core::spi::{Conduit, ConduitEp};
use gex_core::{Am, Body, Capabilities, Client, Endpoint, EpAddr, HandlerId, Token, WaitPolicy};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn bytes(a: u32, b: u32, what: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| hash_words(&[a as u64, b as u64, what, i as u64]) as u8)
        .collect()
}

/// `SHARED_MEMORY`: `peer_segment` maps exactly the neighbours (and, if anything, its
/// own segment at the local address); bytes written through a mapping are read by the
/// owner after a barrier, and bytes a Long request (to handler `long`, which answers
/// with an acknowledgement counted in `acks`) wrote are visible through the mapping.
fn shared_memory<C: Conduit>(
    client: &Client<C>,
    ep: &mut Endpoint<C>,
    caps: Capabilities,
    acks: &AtomicU64,
    long: HandlerId,
) -> Result<(), String> {
    let (me, n) = (client.rank(), client.size());
    let seg = client.layout().seg_len.clone();
    let neighbours = client.neighbours();
    let local = with_conduit(ep, |cx| cx.conduit().local_segment());
    let mut mapped = Vec::new();
    for r in 0..n {
        let m = with_conduit(ep, |cx| cx.conduit().peer_segment(EpAddr::rank(r)));
        if r == me {
            if let Some(p) = m {
                if p != local {
                    return Err("peer_segment(self) differs from local_segment".into());
                }
            }
        } else if caps.contains(Capabilities::SHARED_MEMORY) && neighbours.contains(&r) {
            match m {
                Some((_, len)) if len == seg[r as usize] => mapped.push((r, m.expect("some"))),
                Some((_, len)) => {
                    return Err(format!(
                        "mapping of rank {r}'s segment has {len} bytes, not {}",
                        seg[r as usize]
                    ));
                }
                None => {
                    return Err(format!(
                        "SHARED_MEMORY is set but neighbour rank {r}'s segment is not mapped"
                    ));
                }
            }
        } else if m.is_some() {
            let why = if caps.contains(Capabilities::SHARED_MEMORY) {
                "is not a neighbour"
            } else {
                "is mapped without SHARED_MEMORY"
            };
            return Err(format!(
                "peer_segment(rank {r}) returned a mapping, but rank {r} {why}"
            ));
        }
    }
    let slot = 64usize;
    if !mapped.is_empty() {
        if seg.iter().any(|&s| s < 2 * slot * n as usize) {
            return Err(format!(
                "segments of {seg:?} bytes are too small for this case (need {})",
                2 * slot * n as usize
            ));
        }
        for &(r, map) in &mapped {
            peer_write(map, slot * me as usize, &bytes(me, r, 1, slot))?;
        }
    }
    barrier(ep)?;
    for &(r, _) in &mapped {
        let mut got = vec![0; slot];
        ep.segment()
            .read(slot * r as usize, &mut got)
            .map_err(err)?;
        if got != bytes(r, me, 1, slot) {
            return Err(format!(
                "bytes rank {r} wrote through its mapping of this segment are not visible after a barrier"
            ));
        }
    }
    for &(r, map) in &mapped {
        let off = slot * (n + me) as usize;
        let data = bytes(me, r, 2, slot);
        let before = acks.load(Ordering::Acquire);
        sent(
            ep.request(EpAddr::rank(r), long, Body::long(&[], &data, off)),
            "Long to a neighbour",
        )?;
        wait_for(ep, "the Long handler's ack", || {
            acks.load(Ordering::Acquire) > before
        })?;
        let mut got = vec![0; slot];
        peer_read(map, off, &mut got)?;
        if got != data {
            return Err(format!(
                "a Long payload delivered to rank {r} is not visible through the mapping"
            ));
        }
    }
    barrier(ep)?;
    Ok(())
}

/// `NP_IN_PLACE`: `prepare` answers `InPlace` when resources are free; without it,
/// `Bounce`.
fn np_in_place<C: Conduit>(ep: &mut Endpoint<C>, caps: Capabilities) -> Result<(), String> {
    let me_addr = ep.addr();
    let landed = Arc::new(AtomicBool::new(false));
    let h = {
        let landed = landed.clone();
        ep.register(move |_t: &mut Token<'_>, _am: Am<'_>| landed.store(true, Ordering::Release))
            .map_err(err)?
    };
    let before = ep.stats().built_in_place;
    ep.request_with(me_addr, h, Body::medium(&[], 16), |_| 0)
        .map_err(err)?;
    let in_place = ep.stats().built_in_place > before;
    // The message to self must be delivered here: left queued, it would arrive in
    // the idle window below.
    wait_for(ep, "the in-place request to self", || {
        landed.load(Ordering::Acquire)
    })?;
    match (caps.contains(Capabilities::NP_IN_PLACE), in_place) {
        (true, true) | (false, false) => {}
        (flag, r) => {
            return Err(format!(
                "NP_IN_PLACE is {flag} but an idle prepare gave {r:?} (in place?)"
            ));
        }
    }
    barrier(ep)?;
    Ok(())
}

/// Capability flags against behaviour:
/// - `SHARED_MEMORY`: `peer_segment` maps exactly the neighbours (and, if anything, its
///   own segment at the local address); bytes written through a mapping are read by the
///   owner after a barrier, and bytes a Long request wrote are visible through the
///   mapping once its handler replied. Without the flag no peer is mapped.
/// - `NP_IN_PLACE`: `prepare` answers `InPlace` when resources are free; without it,
///   `Bounce`.
/// - `BLOCKING_WAIT`: `block` really sleeps when nothing arrives (few returns in
///   300 ms), and a sleeper is woken by an arriving message (well before its 10 s
///   timeout); then an endpoint with `WaitPolicy::Block` receives it. Without the flag,
///   `block` returns promptly.
/// - `RUNTIME_ENDPOINTS`: `create_endpoint` makes the endpoint of the first index past
///   those made at init, which receives from endpoint 0 and from itself; without the
///   flag, `create_endpoint` answers `ConduitError::Unsupported`.
pub(crate) fn capabilities<C: Conduit>(client: &Client<C>) -> Result<(), String> {
    const NOTE: HandlerId = HandlerId::at(220);
    const LONG: HandlerId = HandlerId::at(221);
    const ACK: HandlerId = HandlerId::at(222);
    let (me, n) = (client.rank(), client.size());
    let mut ep = client.endpoint(0).map_err(err)?;
    let notes = Arc::new(AtomicU64::new(0));
    let acks = Arc::new(AtomicU64::new(0));
    {
        let notes = notes.clone();
        ep.register_at(NOTE.index(), move |_t: &mut Token<'_>, _am: Am<'_>| {
            notes.fetch_add(1, Ordering::Release);
        })
        .map_err(err)?;
        ep.register_at(LONG.index(), |t: &mut Token<'_>, _am: Am<'_>| {
            t.reply(ACK, Body::short(&[])).expect("ack");
        })
        .map_err(err)?;
        let acks = acks.clone();
        ep.register_at(ACK.index(), move |_t: &mut Token<'_>, _am: Am<'_>| {
            acks.fetch_add(1, Ordering::Release);
        })
        .map_err(err)?;
    }
    barrier(&mut ep)?;
    let caps = ep.capabilities();

    shared_memory(client, &mut ep, caps, &acks, LONG)?;
    np_in_place(&mut ep, caps)?;

    // BLOCKING_WAIT
    if caps.contains(Capabilities::BLOCKING_WAIT) {
        let window = Duration::from_millis(300);
        let t0 = Instant::now();
        let mut calls = 0u32;
        while t0.elapsed() < window {
            if with_conduit(&mut ep, |cx| cx.conduit().has_incoming()) {
                // Conduit-internal traffic (e.g. credits returned late by a peer) may
                // arrive in the window: only an AM delivered here is an error.
                let before = ep.stats();
                let k = ep.poll();
                if k == 0 {
                    calls += 1;
                    continue;
                }
                return Err(format!(
                    "a message arrived while every rank was idle (polled {k}; stats {before:?} -> {:?}; notes {} acks {})",
                    ep.stats(),
                    notes.load(Ordering::Relaxed),
                    acks.load(Ordering::Relaxed)
                ));
            }
            let left = window - t0.elapsed().min(window);
            probe::block(&mut ep, left);
            calls += 1;
        }
        if calls > 100 {
            return Err(format!(
                "BLOCKING_WAIT is set but block() returned {calls} times in {window:?} with nothing to receive"
            ));
        }
        // Not an AM barrier: its messages could reach a rank still in its idle window.
        client.boot_barrier().map_err(err)?;
        let sleeper_wakes = |ep: &mut gex_core::Endpoint<C>| -> Result<(), String> {
            let t0 = Instant::now();
            while !with_conduit(ep, |cx| cx.conduit().has_incoming()) {
                if t0.elapsed() > Duration::from_secs(5) {
                    return Err(format!(
                        "a sleeper in block(10 s) was not woken by an arriving message ({:?})",
                        t0.elapsed()
                    ));
                }
                probe::block(ep, Duration::from_secs(10));
            }
            ep.set_wait_policy(WaitPolicy::Block);
            wait_for(ep, "the note", || notes.load(Ordering::Acquire) == 1)
        };
        if n >= 2 {
            match me {
                0 => sleeper_wakes(&mut ep)?,
                1 => {
                    std::thread::sleep(Duration::from_millis(100));
                    sent(ep.request(EpAddr::rank(0), NOTE, Body::short(&[])), "note")?;
                }
                _ => {}
            }
        } else if client.endpoint_count() >= 2 {
            let mut ep1 = client.endpoint(1).map_err(err)?;
            ep1.register_at(NOTE.index(), |_t: &mut Token<'_>, _am: Am<'_>| {})
                .map_err(err)?;
            std::thread::scope(|s| {
                let h = s.spawn(move || {
                    std::thread::sleep(Duration::from_millis(100));
                    sent(
                        ep1.request(EpAddr::rank(me), NOTE, Body::short(&[])),
                        "note",
                    )
                });
                let r = sleeper_wakes(&mut ep);
                h.join()
                    .map_err(|_| "sender thread panicked".to_string())?
                    .and(r)
            })?;
        } else {
            eprintln!(
                "conformance capabilities: wake-up of a sleeper not checked (needs 2 ranks or 2 endpoints)"
            );
        }
    } else {
        let t0 = Instant::now();
        probe::block(&mut ep, Duration::from_secs(1));
        if t0.elapsed() > Duration::from_millis(500) {
            return Err(format!(
                "BLOCKING_WAIT is not set but block(1 s) slept {:?}",
                t0.elapsed()
            ));
        }
    }
    runtime_endpoints(client, &mut ep, caps)?;
    barrier(&mut ep)
}

/// `RUNTIME_ENDPOINTS`: `create_endpoint` makes an endpoint at the first index past the
/// endpoints made at init, which receives from an endpoint made at init and from
/// itself; without the flag it answers `ConduitError::Unsupported`.
fn runtime_endpoints<C: Conduit>(
    client: &Client<C>,
    ep: &mut gex_core::Endpoint<C>,
    caps: Capabilities,
) -> Result<(), String> {
    const HIT: HandlerId = HandlerId::at(223);
    let me = client.rank();
    let made = client.create_endpoint();
    if !caps.contains(Capabilities::RUNTIME_ENDPOINTS) {
        return match made {
            Err(gex_core::EpError::Conduit(gex_core::spi::ConduitError::Unsupported {
                ..
            })) => Ok(()),
            Err(e) => Err(format!(
                "RUNTIME_ENDPOINTS is not set; create_endpoint failed with {e}, not Unsupported"
            )),
            Ok(_) => Err("RUNTIME_ENDPOINTS is not set but create_endpoint worked".into()),
        };
    }
    let init = client.layout().eps[me as usize];
    if client.layout().max_eps[me as usize] <= init {
        eprintln!(
            "conformance capabilities: RUNTIME_ENDPOINTS not exercised (GEX_MAX_ENDPOINTS leaves no room)"
        );
        return Ok(());
    }
    let mut rt =
        made.map_err(|e| format!("RUNTIME_ENDPOINTS is set but create_endpoint failed: {e}"))?;
    if rt.addr() != EpAddr::new(me, init) {
        return Err(format!(
            "the first endpoint made at run time is {}, not index {init}",
            rt.addr()
        ));
    }
    let hits = Arc::new(AtomicU64::new(0));
    let h = hits.clone();
    rt.register_at(HIT.index(), move |_t: &mut Token<'_>, _am: Am<'_>| {
        h.fetch_add(1, Ordering::Release);
    })
    .map_err(err)?;
    ep.register_at(HIT.index(), |_t: &mut Token<'_>, _am: Am<'_>| {})
        .map_err(err)?;
    sent(
        ep.request(rt.addr(), HIT, Body::short(&[])),
        "to the endpoint made at run time",
    )?;
    sent(
        rt.request(rt.addr(), HIT, Body::medium(&[], &[1; 8])),
        "from it to itself",
    )?;
    wait_for(&mut rt, "the endpoint made at run time receives", || {
        hits.load(Ordering::Acquire) == 2
    })
}
