//! The auxiliary-area case: [`ConduitEp::aux`] and [`ConduitEp::wake`], through the
//! probe layer's slice of the areas ([`Cx::aux`](gex_core::layer::Cx::aux)).

use super::probe::{self, with_conduit};
use super::raw;
use super::util::{CASE_WAIT, barrier};
use gex_core::spi::{Conduit, ConduitEp};
use gex_core::{Capabilities, Client, EpAddr};
use gex_sync::atomic::Ordering;
use std::time::{Duration, Instant};

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The auxiliary area of every endpoint:
/// - `aux(dst)` is offered exactly for the endpoints whose segment `peer_segment` maps
///   (and for this endpoint itself when the conduit has `SHARED_MEMORY`), 64-byte
///   aligned, zero-filled at open;
/// - a word stored by its owner is read by every neighbour through its own mapping
///   (and a word a neighbour stores is read by the owner);
/// - `wake(dst)` makes a neighbour sleeping in `block` (10 s timeout) return promptly
///   (checked when the conduit has `BLOCKING_WAIT`: ranks 0 and 1, if neighbours).
pub(crate) fn aux_area<C: Conduit>(client: &Client<C>) -> Result<(), String> {
    let (me, n) = (client.rank(), client.size());
    let mut ep = client.endpoint(0).map_err(err)?;
    let caps = ep.capabilities();
    let mine = EpAddr::rank(me);
    let (own, alen) = with_conduit(&mut ep, |cx| (cx.aux(mine), cx.aux_len()));
    let aux_word = |a, off| raw::aux_word(a, alen, off);
    if caps.contains(Capabilities::SHARED_MEMORY) != own.is_some() {
        return Err(format!(
            "aux(self) is {own:?} but SHARED_MEMORY is {}",
            caps.contains(Capabilities::SHARED_MEMORY)
        ));
    }
    let mut neighbours = Vec::new();
    for r in (0..n).filter(|&r| r != me) {
        let (seg, aux) = with_conduit(&mut ep, |cx| {
            (
                cx.conduit().peer_segment(EpAddr::rank(r)),
                cx.aux(EpAddr::rank(r)),
            )
        });
        match (seg.is_some(), aux) {
            (true, Some(a)) => neighbours.push((r, a)),
            (false, None) => {}
            (s, a) => {
                return Err(format!(
                    "rank {r}: peer_segment offered: {s}, aux offered: {}",
                    a.is_some()
                ));
            }
        }
    }
    let Some(own) = own else {
        return barrier(&mut ep);
    };
    // Zero-filled at open (before anyone writes: the first barrier orders it).
    for off in (0..alen).step_by(8) {
        let v = aux_word(own, off)?.load(Ordering::Relaxed);
        if v != 0 {
            return Err(format!("own aux area not zero at {off}: {v:#x}"));
        }
    }
    barrier(&mut ep)?;
    // Word `me` of the owner's area: written by the owner. Word `n + me` of every
    // neighbour's area: written by this rank.
    let tag = |r: u32| 0xa0c5_0000_0000 | u64::from(r + 1);
    aux_word(own, 8 * me as usize)?.store(tag(me), Ordering::Release);
    for &(_, a) in &neighbours {
        aux_word(a, 8 * (n + me) as usize)?.store(tag(me), Ordering::Release);
    }
    barrier(&mut ep)?;
    for &(r, a) in &neighbours {
        let v = aux_word(a, 8 * r as usize)?.load(Ordering::Acquire);
        if v != tag(r) {
            return Err(format!(
                "rank {r}'s aux word reads {v:#x}, not {:#x}",
                tag(r)
            ));
        }
        let v = aux_word(own, 8 * (n + r) as usize)?.load(Ordering::Acquire);
        if v != tag(r) {
            return Err(format!(
                "the word rank {r} stored in this rank's aux area reads {v:#x}"
            ));
        }
    }
    // wake: rank 1 sleeps in `block(10 s)`, rank 0 stores a flag in rank 1's area and
    // wakes it, 7 times. `block` returns only for a message, a wake or its timeout, so
    // a lost wake-up costs 10 s: the median delay must be far below that (2 s leaves
    // room for a heavily loaded machine).
    let peer = if me == 0 { 1 } else { 0 };
    let pair = n >= 2 && neighbours.iter().any(|&(r, _)| r == peer);
    if caps.contains(Capabilities::BLOCKING_WAIT) && pair && me < 2 {
        const ROUNDS: u64 = 7;
        let (iter_off, time_off, ack_off) = (
            8 * 2 * n as usize,
            8 * (2 * n as usize + 1),
            8 * (2 * n as usize + 2),
        );
        let theirs = neighbours
            .iter()
            .find(|&&(r, _)| r == peer)
            .map(|&(_, a)| a)
            .expect("neighbour");
        // Wall-clock nanoseconds (ranks may be processes). Miri has no wall clock under
        // isolation and runs thread ranks only: nanoseconds since a process-wide instant.
        let now_ns = || {
            if cfg!(miri) {
                static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
                return START.get_or_init(Instant::now).elapsed().as_nanos() as u64;
            }
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        };
        let t0 = Instant::now();
        let mut delays = Vec::new();
        for i in 1..=ROUNDS {
            if me == 1 {
                let it = aux_word(own, iter_off)?;
                while it.load(Ordering::Acquire) != i {
                    if t0.elapsed() > CASE_WAIT {
                        return Err(format!("wake round {i}: rank 0's flag never arrived"));
                    }
                    probe::block(&mut ep, Duration::from_secs(10));
                }
                let sent = aux_word(own, time_off)?.load(Ordering::Relaxed);
                delays.push(Duration::from_nanos(now_ns().saturating_sub(sent)));
                aux_word(theirs, ack_off)?.store(i, Ordering::Release);
            } else {
                std::thread::sleep(Duration::from_millis(40));
                aux_word(theirs, time_off)?.store(now_ns(), Ordering::Relaxed);
                aux_word(theirs, iter_off)?.store(i, Ordering::Release);
                with_conduit(&mut ep, |cx| cx.conduit().wake(EpAddr::rank(1)));
                while aux_word(own, ack_off)?.load(Ordering::Acquire) != i {
                    if t0.elapsed() > CASE_WAIT {
                        return Err(format!("wake round {i}: rank 1 never acknowledged"));
                    }
                    std::thread::yield_now();
                }
            }
        }
        if me == 1 {
            delays.sort();
            let median = delays[delays.len() / 2];
            if median > Duration::from_secs(2) {
                return Err(format!(
                    "wake-ups took {delays:?} (median {median:?}): wake does not end block"
                ));
            }
        }
    }
    barrier(&mut ep)
}
