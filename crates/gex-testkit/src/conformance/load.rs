//! Load, concurrency, back-pressure and barrier cases (the semantics of GASNet-EX's
//! `testcore*` stress tests).

use super::util::{Errs, Pattern, SeqSet, barrier, bytes_of, lock, sent, wait_for};
use crate::rng::hash_words;
use gex_core::spi::Conduit;
use gex_core::{Am, Body, Client, EpAddr, HandlerId, Injected, Token};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

type Seen = Arc<Mutex<HashMap<EpAddr, SeqSet>>>;

/// Records `seq` from `src`; reports duplicates.
fn note(seen: &Seen, errs: &Errs, src: EpAddr, seq: u32) {
    if !lock(seen).entry(src).or_default().insert(seq) {
        errs.push(format!("duplicate message {seq} from {src}"));
    }
}

fn check_seen(seen: &Seen, from: &[EpAddr], n: u32, what: &str) -> Result<(), String> {
    let g = lock(seen);
    for src in from {
        match g.get(src) {
            Some(s) if s.is_exactly(n) => {}
            Some(s) => return Err(format!("{what}: {} distinct of {n} from {src}", s.count())),
            None if n == 0 => {}
            None => return Err(format!("{what}: nothing from {src}")),
        }
    }
    if g.keys().any(|k| !from.contains(k)) {
        return Err(format!(
            "{what}: messages from unexpected sources {:?}",
            g.keys().collect::<Vec<_>>()
        ));
    }
    Ok(())
}

/// 10 000 Short requests (16 under Miri) from every rank to every other rank (to
/// itself in a job of one), all injected before waiting; every request is replied to.
/// No loss, no duplicates, in either direction.
pub(crate) fn many_in_flight<C: Conduit>(client: &Client<C>) -> Result<(), String> {
    const RQ: HandlerId = HandlerId::at(180);
    const RP: HandlerId = HandlerId::at(181);
    const N: u32 = if cfg!(miri) { 16 } else { 10_000 };
    let (me, n) = (client.rank(), client.size());
    let mut ep = client.endpoint(0).map_err(err)?;
    let errs = Errs::new();
    let (reqs, reps): (Seen, Seen) = (Arc::default(), Arc::default());
    let (nreq, nrep) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    {
        let errs2 = errs.clone();
        let (errs, reqs, nreq) = (errs.clone(), reqs.clone(), nreq.clone());
        ep.register_at(RQ.index(), move |t: &mut Token<'_>, am: Am<'_>| {
            let seq = am.args()[0];
            note(&reqs, &errs, am.src(), seq);
            if let Err(e) = t.reply(RP, Body::short(&[seq])) {
                errs.push(format!("reply: {e}"));
            }
            nreq.fetch_add(1, Ordering::Release);
        })
        .map_err(err)?;
        let (errs2, reps, nrep) = (errs2.clone(), reps.clone(), nrep.clone());
        ep.register_at(RP.index(), move |_t: &mut Token<'_>, am: Am<'_>| {
            note(&reps, &errs2, am.src(), am.args()[0]);
            nrep.fetch_add(1, Ordering::Release);
        })
        .map_err(err)?;
    }
    let peers: Vec<EpAddr> = if n == 1 {
        vec![EpAddr::rank(me)]
    } else {
        (0..n).filter(|&r| r != me).map(EpAddr::rank).collect()
    };
    barrier(&mut ep)?;
    for seq in 0..N {
        for &dst in &peers {
            sent(ep.request(dst, RQ, Body::short(&[seq])), "request")?;
        }
    }
    let want = u64::from(N) * peers.len() as u64;
    wait_for(&mut ep, "all requests and replies", || {
        nreq.load(Ordering::Acquire) >= want && nrep.load(Ordering::Acquire) >= want
    })?;
    barrier(&mut ep)?;
    errs.result()?;
    check_seen(&reqs, &peers, N, "requests")?;
    check_seen(&reps, &peers, N, "replies")
}

/// Every rank (rank 0 included) floods rank 0 with Medium requests of varying sizes at
/// the same time; rank 0 verifies every payload and that nothing was lost or duplicated.
pub(crate) fn flood_one_rank<C: Conduit>(client: &Client<C>) -> Result<(), String> {
    const H: HandlerId = HandlerId::at(185);
    const M: u32 = if cfg!(miri) { 24 } else { 2_000 };
    let (me, n) = (client.rank(), client.size());
    let mut ep = client.endpoint(0).map_err(err)?;
    let target = EpAddr::rank(0);
    let maxm = ep.max_medium(target).min(1024);
    let pat = Arc::new(Pattern::new(maxm));
    let errs = Errs::new();
    let seen: Seen = Arc::default();
    let got = Arc::new(AtomicU64::new(0));
    let len = move |seq: u32| (seq as usize * 37 % 1024 + 1).min(maxm);
    let seed = |src: u32, seq: u32| hash_words(&[src as u64, seq as u64, 5]);
    {
        let (pat, errs, seen, got) = (pat.clone(), errs.clone(), seen.clone(), got.clone());
        ep.register_at(H.index(), move |_t: &mut Token<'_>, am: Am<'_>| {
            let (src, seq) = (am.src(), am.args()[0]);
            if let Some(d) = pat.diff(seed(src.rank, seq), len(seq), &bytes_of(&am)) {
                errs.push(format!("message {seq} from {src}: {d}"));
            }
            note(&seen, &errs, src, seq);
            got.fetch_add(1, Ordering::Release);
        })
        .map_err(err)?;
    }
    barrier(&mut ep)?;
    for seq in 0..M {
        sent(
            ep.request(
                target,
                H,
                Body::medium(&[seq], pat.get(seed(me, seq), len(seq))),
            ),
            "flood request",
        )?;
    }
    if me == 0 {
        wait_for(&mut ep, "the whole flood", || {
            got.load(Ordering::Acquire) >= u64::from(M) * n as u64
        })?;
    }
    barrier(&mut ep)?;
    errs.result()?;
    if me == 0 {
        let all: Vec<EpAddr> = (0..n).map(EpAddr::rank).collect();
        check_seen(&seen, &all, M, "flood")?;
    }
    Ok(())
}

/// One thread per endpoint. EP `k` of every rank sends Medium requests to EP `k` and to
/// EP `(k + 1) % E` of every rank (itself included), so AMs target non-zero endpoints
/// and cross between endpoint indices; handlers check the source and destination
/// endpoint and reply to the requesting endpoint.
pub(crate) fn multi_ep<C: Conduit>(client: &Client<C>) -> Result<(), String> {
    const RQ: HandlerId = HandlerId::at(190);
    const RP: HandlerId = HandlerId::at(191);
    const K: u32 = if cfg!(miri) { 6 } else { 150 };
    let (me, n) = (client.rank(), client.size());
    let e = client.endpoint_count();
    let mut eps = Vec::new();
    for i in 0..e {
        eps.push(client.endpoint(i).map_err(err)?);
    }
    let local = std::sync::Barrier::new(e as usize);
    let pat = Arc::new(Pattern::new(256));
    let seed = |r: u32, ep: u16, dst: EpAddr, seq: u32| {
        hash_words(&[
            r as u64,
            ep as u64,
            dst.rank as u64,
            dst.ep as u64,
            seq as u64,
        ])
    };
    let len = |seq: u32| seq as usize % 200 + 1;
    std::thread::scope(|s| {
        let hs: Vec<_> = eps
            .into_iter()
            .map(|mut ep| {
                let (local, pat) = (&local, pat.clone());
                s.spawn(move || -> Result<(), String> {
                    let k = ep.index();
                    let errs = Errs::new();
                    let seen: Seen = Arc::default();
                    let (nreq, nrep) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
                    {
                        let errs2 = errs.clone();
                        let (errs, seen, nreq, pat) = (errs.clone(), seen.clone(), nreq.clone(), pat.clone());
                        ep.register_at(RQ.index(), move |t: &mut Token<'_>, am: Am<'_>| {
                            let a = am.args();
                            let (src, seq) = (am.src(), a[3]);
                            let claimed = EpAddr::new(a[0], a[1] as u16);
                            if src != claimed || a[2] != k as u32 {
                                errs.push(format!("request claims {claimed} -> EP {}, delivered from {src} to EP {k}", a[2]));
                            }
                            if let Some(d) = pat.diff(seed(a[0], a[1] as u16, EpAddr::new(me, k), seq), len(seq), &bytes_of(&am)) {
                                errs.push(format!("request {seq} from {src} to EP {k}: {d}"));
                            }
                            note(&seen, &errs, src, seq);
                            if let Err(e) = t.reply(RP, Body::short(&[seq, k as u32])) {
                                errs.push(format!("reply: {e}"));
                            }
                            nreq.fetch_add(1, Ordering::Release);
                        })
                        .map_err(err)?;
                        let nrep = nrep.clone();
                        ep.register_at(RP.index(), move |_t: &mut Token<'_>, am: Am<'_>| {
                            if am.src().ep as u32 != am.args()[1] {
                                errs2.push(format!("reply from {} claims EP {}", am.src(), am.args()[1]));
                            }
                            nrep.fetch_add(1, Ordering::Release);
                        })
                        .map_err(err)?;
                    }
                    local.wait(); // every local EP registered ...
                    barrier(&mut ep)?; // ... on every rank
                    let targets: Vec<EpAddr> = (0..n).flat_map(|r| [EpAddr::new(r, k), EpAddr::new(r, (k + 1) % e)]).collect();
                    for seq in 0..K {
                        for &dst in &targets {
                            let p = pat.get(seed(me, k, dst, seq), len(seq));
                            sent(ep.request(dst, RQ, Body::medium(&[me, k as u32, dst.ep as u32, seq], p)), "request")?;
                        }
                    }
                    let want_rep = u64::from(K) * targets.len() as u64;
                    let want_req = u64::from(K) * 2 * n as u64;
                    wait_for(&mut ep, &format!("EP {k}'s traffic"), || nrep.load(Ordering::Acquire) >= want_rep && nreq.load(Ordering::Acquire) >= want_req)?;
                    barrier(&mut ep)?;
                    errs.result()?;
                    let sources: Vec<EpAddr> = (0..n).flat_map(|r| [EpAddr::new(r, k), EpAddr::new(r, (k + e - 1) % e)]).collect();
                    check_seen(&seen, &sources, K, &format!("EP {k}"))
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|p| {
                    Err(format!("EP thread panicked: {}", crate::panic_text(&*p)))
                })
            })
            .collect::<Result<Vec<()>, String>>()
    })?;
    Ok(())
}

fn imm_flood<C: Conduit>(client: &Client<C>, strict: bool) -> Result<(), String> {
    const RQ: HandlerId = HandlerId::at(195);
    const DONE: HandlerId = HandlerId::at(196);
    const AFTER: u32 = if cfg!(miri) { 8 } else { 100 };
    // Under Miri a bounded conduit must still report WouldBlock within the cap: the
    // simulator's request lanes (8 KiB under Miri) fill after about 25 requests.
    let cap: u32 = match (strict, cfg!(miri)) {
        (true, false) => 100_000,
        (true, true) => 1_000,
        (false, false) => 20_000,
        (false, true) => 64,
    };
    let (me, n) = (client.rank(), client.size());
    let mut ep = client.endpoint(0).map_err(err)?;
    let target = EpAddr::rank(0);
    let plen = ep.max_medium(target).min(256);
    let payload = vec![me as u8; plen];
    // What each rank sends (compared at once: a loop over every byte is slow under Miri).
    let expected: Vec<Vec<u8>> = (0..n).map(|r| vec![r as u8; plen]).collect();
    let errs = Errs::new();
    let seen: Seen = Arc::default();
    let got = Arc::new(AtomicU64::new(0));
    let done: Arc<Mutex<HashMap<u32, (u32, bool)>>> = Arc::default();
    {
        let (errs, seen, got) = (errs.clone(), seen.clone(), got.clone());
        ep.register_at(RQ.index(), move |_t: &mut Token<'_>, am: Am<'_>| {
            if expected.get(am.src().rank as usize).map(Vec::as_slice) != Some(am.payload()) {
                errs.push(format!("corrupt flood payload from {}", am.src()));
            }
            note(&seen, &errs, am.src(), am.args()[0]);
            got.fetch_add(1, Ordering::Release);
        })
        .map_err(err)?;
        let done = done.clone();
        ep.register_at(DONE.index(), move |_t: &mut Token<'_>, am: Am<'_>| {
            lock(&done).insert(am.src().rank, (am.args()[0], am.args()[1] != 0));
        })
        .map_err(err)?;
    }
    barrier(&mut ep)?;
    // Rank 0 stops polling from here until the bootstrap barrier: its queues fill.
    let mut count = 0u32;
    let mut would_block = false;
    while count < cap {
        match ep.try_request(target, RQ, Body::medium(&[count], &payload)) {
            Ok(Injected::Sent) => count += 1,
            Ok(Injected::WouldBlock) => {
                would_block = true;
                break;
            }
            Err(e) => return Err(format!("non-waiting request {count}: {e}")),
        }
    }
    client.boot_barrier().map_err(err)?;
    // Waiting, the same requests must go through (the core polls).
    for seq in count..count + AFTER {
        sent(
            ep.request(target, RQ, Body::medium(&[seq], &payload)),
            "request after the non-waiting flood",
        )?;
    }
    let total = count + AFTER;
    sent(
        ep.request(target, DONE, Body::short(&[total, u32::from(would_block)])),
        "done",
    )?;
    if me == 0 {
        wait_for(&mut ep, "every rank's flood", || {
            let d = lock(&done);
            d.len() == n as usize
                && got.load(Ordering::Acquire)
                    >= d.values().map(|&(c, _)| u64::from(c)).sum::<u64>()
        })?;
    }
    barrier(&mut ep)?;
    errs.result()?;
    if me == 0 {
        let d = lock(&done).clone();
        let g = lock(&seen);
        for (r, (c, wb)) in d {
            match g.get(&EpAddr::rank(r)) {
                Some(s) if s.is_exactly(c) => {}
                other => {
                    return Err(format!(
                        "rank {r} sent {c} requests (non-waiting ones that reported WouldBlock excluded); received {} distinct: lost or phantom messages",
                        other.map_or(0, |s| s.count())
                    ));
                }
            }
            // Self-sends may bypass queues: rank 0 is exempt unless it is alone.
            if strict && !wb && (r != 0 || n == 1) {
                return Err(format!(
                    "rank {r} saw no WouldBlock in {cap} non-waiting requests to a rank that was not polling"
                ));
            }
        }
    }
    if strict && !would_block && (me != 0 || n == 1) {
        return Err(format!(
            "no WouldBlock in {cap} non-waiting requests of {plen} bytes to a rank that was not polling"
        ));
    }
    Ok(())
}

/// Every rank floods rank 0 with non-waiting Medium requests (`try_request`) while rank
/// 0 does not poll, stopping at the first `WouldBlock` (or after 20 000), then sends
/// more waiting ones (which must all report `Sent`). Rank 0 then drains: exactly the requests
/// reported `Sent` arrive, once each.
pub(crate) fn immediate_flood<C: Conduit>(client: &Client<C>) -> Result<(), String> {
    imm_flood(client, false)
}

/// As `immediate_flood`, but every sender must see `WouldBlock` within 100 000
/// non-waiting requests: the conduit's queues are bounded and back-pressure is reported.
/// (Rank 0's flood of itself is exempt in jobs of several ranks: self-sends may bypass
/// queues.)
/// Conduits with unbounded queues exclude this case.
pub(crate) fn back_pressure<C: Conduit>(client: &Client<C>) -> Result<(), String> {
    imm_flood(client, true)
}

/// The core barrier 60 times with AM traffic in flight: before each barrier every rank
/// sends requests to pseudo-random ranks. A request from barrier epoch `j` must never
/// reach a rank still before epoch `j - 1` (that would mean a barrier let a rank
/// through early).
pub(crate) fn barrier_with_traffic<C: Conduit>(client: &Client<C>) -> Result<(), String> {
    const RQ: HandlerId = HandlerId::at(200);
    const RP: HandlerId = HandlerId::at(201);
    const ITERS: u32 = if cfg!(miri) { 8 } else { 60 };
    const PER: u32 = 3;
    let (me, n) = (client.rank(), client.size());
    let mut ep = client.endpoint(0).map_err(err)?;
    let errs = Errs::new();
    let cur = Arc::new(AtomicU64::new(0));
    let (nreq, nrep) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let dst_of = move |s: u32, i: u32, j: u32| {
        (hash_words(&[s as u64, i as u64, j as u64, 9]) % n as u64) as u32
    };
    {
        let (errs, cur, nreq) = (errs.clone(), cur.clone(), nreq.clone());
        ep.register_at(RQ.index(), move |t: &mut Token<'_>, am: Am<'_>| {
            let (src, it) = (am.src(), am.args()[1]);
            let c = cur.load(Ordering::Acquire);
            if u64::from(it) > c + 1 {
                errs.push(format!(
                    "request of epoch {it} from {src} arrived while this rank was in epoch {c}"
                ));
            }
            if am.payload() != [src.rank as u8; 32] {
                errs.push(format!("corrupt payload from {src}"));
            }
            if let Err(e) = t.reply(RP, Body::short(&[it])) {
                errs.push(format!("reply: {e}"));
            }
            nreq.fetch_add(1, Ordering::Release);
        })
        .map_err(err)?;
        let nrep = nrep.clone();
        ep.register_at(RP.index(), move |_t: &mut Token<'_>, _am: Am<'_>| {
            nrep.fetch_add(1, Ordering::Release);
        })
        .map_err(err)?;
    }
    barrier(&mut ep)?;
    let payload = [me as u8; 32];
    for i in 1..=ITERS {
        cur.store(u64::from(i), Ordering::Release);
        for j in 0..PER {
            sent(
                ep.request(
                    EpAddr::rank(dst_of(me, i, j)),
                    RQ,
                    Body::medium(&[me, i], &payload),
                ),
                "request",
            )?;
        }
        barrier(&mut ep).map_err(|e| format!("barrier {i}: {e}"))?;
    }
    let want_req = (0..n)
        .flat_map(|s| (1..=ITERS).flat_map(move |i| (0..PER).map(move |j| (s, i, j))))
        .filter(|&(s, i, j)| dst_of(s, i, j) == me)
        .count() as u64;
    let want_rep = u64::from(ITERS * PER);
    wait_for(&mut ep, "all requests and replies", || {
        nreq.load(Ordering::Acquire) >= want_req && nrep.load(Ordering::Acquire) >= want_rep
    })?;
    barrier(&mut ep)?;
    errs.result()?;
    let (q, p) = (nreq.load(Ordering::Acquire), nrep.load(Ordering::Acquire));
    if (q, p) != (want_req, want_rep) {
        return Err(format!(
            "{q} requests and {p} replies arrived, expected {want_req} and {want_rep}"
        ));
    }
    Ok(())
}
