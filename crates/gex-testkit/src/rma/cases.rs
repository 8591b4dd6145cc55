//! The RMA cases (see the module table in [`super`]). No `unsafe`: buffers lent to
//! nonblocking transfers are lent for a scope ([`ScopeRmaExt`]).

use crate::conformance::CASE_WAIT;
use crate::rng::SplitMix64;
use gex_core::spi::Conduit;
use gex_core::{AnyEvent, Blocking, Client, Endpoint, EpAddr, Event, Nb, Nbi, OwnedEndpoint};
use gex_rma::{GlobalPtr, NbiCategories, Pod, Rma, RmaError, RmaExt, ScopeRmaExt, Strided, Vis};
use std::collections::HashSet;
use std::time::Instant;

type R<T = ()> = Result<T, String>;

/// An endpoint carrying the RMA layer.
pub(super) type Ep<C> = Endpoint<C>;

pub(super) fn e2s<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// A barrier of the endpoint's primordial team: the core's all-gather of nothing
/// (the collectives layer's barrier is not a dependency of the RMA suite). It polls
/// while it waits, so peers' AM-path RMA is served.
pub(super) fn barrier<C: Conduit>(r: &mut Ep<C>) -> R {
    let w = r.world();
    r.exchange_tagged(&w, crate::BARRIER_TAG, &[])
        .map(|_| ())
        .map_err(e2s("barrier"))
}

/// Waits for `ev` (an RMA event) with a readable error.
pub(super) fn wait<C: Conduit, T: Send + 'static>(
    r: &mut Ep<C>,
    ev: Event<T, RmaError>,
    what: &str,
) -> R<T> {
    r.wait(ev).map_err(e2s(what))
}

/// Messages the RMA layer of `r` had to drop.
pub(super) fn dropped<C: Conduit>(r: &mut Ep<C>) -> u64 {
    gex_core::layer::state::<Rma, C, _>(r, |l| l.dropped_messages()).unwrap_or(0)
}

/// Operations in flight in the RMA layer of `r`.
fn pending_ops<C: Conduit>(r: &mut Ep<C>) -> usize {
    gex_core::layer::state::<Rma, C, _>(r, |l| l.pending_ops()).unwrap_or(0)
}

/// Endpoint `k` of `client`, which the runner must have built with the RMA layer.
pub(super) fn rma_endpoint<C: Conduit>(client: &Client<C>, k: u16) -> R<OwnedEndpoint<C>> {
    let ep = client.endpoint(k).map_err(e2s("endpoint"))?;
    if !gex_core::layer::is_attached::<Rma, C>(&ep) {
        return Err("the runner's client does not carry the RMA layer (build it with ClientBuilder::layer::<gex_rma::Rma>())".into());
    }
    Ok(ep)
}

pub(super) fn setup<C: Conduit>(client: &Client<C>) -> R<OwnedEndpoint<C>> {
    let mut r = rma_endpoint(client, 0)?;
    barrier(&mut r)?;
    Ok(r)
}

/// Slot length (bytes, multiple of 64) each rank owns in every segment.
pub(super) fn slot_len<C: Conduit>(r: &Ep<C>) -> usize {
    (r.segment().len() / r.size() as usize) & !63
}

fn bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut g = SplitMix64::new(seed);
    let mut v = Vec::with_capacity(n + 8);
    while v.len() < n {
        v.extend_from_slice(&g.next_u64().to_le_bytes());
    }
    v.truncate(n);
    v
}

fn check_eq<T: PartialEq + std::fmt::Debug>(got: &[T], want: &[T], what: &str) -> R {
    if got.len() != want.len() {
        return Err(format!("{what}: length {} != {}", got.len(), want.len()));
    }
    match got.iter().zip(want).position(|(a, b)| a != b) {
        None => Ok(()),
        Some(i) => Err(format!(
            "{what}: first difference at element {i} of {}: got {:?}, want {:?}",
            want.len(),
            got[i],
            want[i]
        )),
    }
}

fn expect_err<T: std::fmt::Debug>(r: Result<T, RmaError>, want: &RmaError, what: &str) -> R {
    match r {
        Err(e) if &e == want => Ok(()),
        other => Err(format!("{what}: expected Err({want:?}), got {other:?}")),
    }
}

pub(super) fn finish<C: Conduit>(r: &mut Ep<C>) -> R {
    barrier(r).map_err(e2s("final barrier"))?;
    let d = dropped(r);
    if d != 0 {
        return Err(format!("{d} RMA protocol messages were dropped"));
    }
    Ok(())
}

fn read_local<C: Conduit>(r: &Ep<C>, off: usize, n: usize) -> R<Vec<u8>> {
    let mut v = vec![0u8; n];
    r.segment().read(off, &mut v).map_err(e2s("local read"))?;
    Ok(v)
}

fn seed(src: u32, dst: u32, k: u64) -> u64 {
    crate::rng::hash_words(&[u64::from(src), u64::from(dst), k])
}

pub(super) fn contiguous<C: Conduit>(client: &Client<C>) -> R {
    let mut r = setup(client)?;
    let (me, n) = (r.rank(), r.size());
    let slot = slot_len(&r);
    let sizes: Vec<usize> = [0usize, 1, 7, 8, 4096, 65537, 1 << 20]
        .into_iter()
        .filter(|&s| s + 3 <= slot)
        .collect();
    for (k, &size) in sizes.iter().enumerate() {
        let off = 3 + (k % 5); // unaligned
        for d in 0..n {
            let p = GlobalPtr::<u8>::new(EpAddr::rank(d), me as usize * slot + off);
            let data = bytes(seed(me, d, k as u64), size);
            r.put(p, &data, Blocking).map_err(e2s("put"))?;
            let mut back = vec![0u8; size];
            r.get(&mut back, p, Blocking).map_err(e2s("get"))?;
            check_eq(&back, &data, &format!("get back {size} bytes from {d}"))?;
        }
        barrier(&mut r)?;
        for s in 0..n {
            let got = read_local(&r, s as usize * slot + off, size)?;
            let want = bytes(seed(s, me, k as u64), size);
            check_eq(
                &got,
                &want,
                &format!("{size} bytes from rank {s} at the target"),
            )?;
        }
        barrier(&mut r)?;
    }
    // Typed, unaligned u64s.
    for d in 0..n {
        let p = GlobalPtr::<u64>::new(EpAddr::rank(d), me as usize * slot + 5);
        let vals: Vec<u64> = (0..100).map(|i| seed(me, d, 1000 + i)).collect();
        r.put(p, &vals, Blocking).map_err(e2s("typed put"))?;
        let mut back = vec![0u64; 100];
        r.get(&mut back, p, Blocking).map_err(e2s("typed get"))?;
        check_eq(&back, &vals, "typed u64 round trip")?;
        // A sub-range through add().
        let mut mid = [0u64; 10];
        r.get(&mut mid, p.add(45), Blocking)
            .map_err(e2s("get at add(45)"))?;
        check_eq(&mid, &vals[45..55], "typed sub-range")?;
    }
    finish(&mut r)
}

/// Sizes of `rma_large`: geometric from 0 to 16 MiB, most of them odd.
const LARGE_SIZES: [usize; 10] = [
    0,
    1,
    17,
    301,
    4099,
    65_539,
    (1 << 20) + 3,
    (4 << 20) + 1,
    (8 << 20) - 5,
    16 << 20,
];

pub(super) fn large<C: Conduit>(client: &Client<C>) -> R {
    let mut r = setup(client)?;
    let (me, n) = (r.rank(), r.size());
    let seg = r.segment().len();
    let right = (me + 1) % n;
    for (k, size) in LARGE_SIZES.into_iter().enumerate() {
        let off = 3 + k % 5; // unaligned
        if off + size > seg {
            continue;
        }
        // Rank 0 writes to its right neighbour and to itself (one target alone);
        // the completion mode rotates with the size.
        let targets: Vec<u32> = if right == 0 { vec![0] } else { vec![right, 0] };
        if me == 0 {
            for &t in &targets {
                let p = GlobalPtr::<u8>::new(EpAddr::rank(t), off);
                let data = bytes(seed(0, t, 77 + k as u64), size);
                let what = format!("{size} bytes at offset {off} of rank {t}");
                let back = match k % 4 {
                    0 => {
                        r.put(p, &data, Blocking).map_err(e2s("large put"))?;
                        let ev = r.get(vec![0u8; size], p, Nb).map_err(e2s("large get Nb"))?;
                        wait(&mut r, ev, "large get Nb")?
                    }
                    1 => {
                        r.put(p, &data, Nbi).map_err(e2s("large put Nbi"))?;
                        r.sync_nbi(NbiCategories::PUTS).map_err(e2s("sync puts"))?;
                        let mut back = vec![0u8; size];
                        r.get(&mut back, p, Blocking).map_err(e2s("large get"))?;
                        back
                    }
                    2 => {
                        // The source lent to a scope (no copy), complete at the scope's end.
                        r.scope(|s| s.put_from(p, &data))
                            .map_err(e2s("large put_from"))?;
                        let mut back = vec![0u8; size];
                        r.get(&mut back, p, Blocking).map_err(e2s("large get"))?;
                        back
                    }
                    _ => {
                        let ev = r.put(p, &data, Nb).map_err(e2s("large put Nb"))?;
                        wait(&mut r, ev, "large put Nb")?;
                        let mut back = vec![0u8; size];
                        r.scope(|s| s.get_into(&mut back, p))
                            .map_err(e2s("large scoped get"))?;
                        back
                    }
                };
                check_eq(&back, &data, &format!("{what}: read back"))?;
            }
        }
        barrier(&mut r)?;
        if me == 0 || me == right {
            let got = read_local(&r, off, size)?;
            let want = bytes(seed(0, me, 77 + k as u64), size);
            check_eq(&got, &want, &format!("{size}-byte put at the target {me}"))?;
        }
        barrier(&mut r)?;
    }
    finish(&mut r)
}

fn val_round<C: Conduit, T: Pod + Send + PartialEq + std::fmt::Debug>(
    r: &mut Ep<C>,
    p: GlobalPtr<T>,
    v: T,
) -> R {
    r.put_val(p, v, Blocking).map_err(e2s("put_val"))?;
    let got = r.get_val(p, Blocking).map_err(e2s("get_val"))?;
    if got != v {
        return Err(format!(
            "get_val after put_val at {p:?}: got {got:?}, want {v:?}"
        ));
    }
    Ok(())
}

pub(super) fn values_memset<C: Conduit>(client: &Client<C>) -> R {
    let mut r = setup(client)?;
    let (me, n) = (r.rank(), r.size());
    let slot = slot_len(&r);
    for d in 0..n {
        let base = me as usize * slot;
        let a = EpAddr::rank(d);
        val_round(&mut r, GlobalPtr::<u8>::new(a, base + 1), 0xa5u8)?;
        val_round(&mut r, GlobalPtr::<u16>::new(a, base + 3), 0xbeefu16)?;
        val_round(&mut r, GlobalPtr::<u32>::new(a, base + 7), 0xdead_beefu32)?;
        val_round(&mut r, GlobalPtr::<u64>::new(a, base + 13), seed(me, d, 5))?;
        val_round(&mut r, GlobalPtr::<f64>::new(a, base + 24), -1.5f64)?;
        val_round(&mut r, GlobalPtr::<[u8; 3]>::new(a, base + 40), [1u8, 2, 3])?;
        // memset
        let region = 3000.min(slot);
        let p = GlobalPtr::<u8>::new(a, base);
        r.put(p, &bytes(seed(me, d, 9), region), Blocking)
            .map_err(e2s("put"))?;
        let mut model = bytes(seed(me, d, 9), region);
        for (off, len, b) in [
            (0usize, 0usize, 1u8),
            (5, 1, 2),
            (17, 100, 3),
            (1, 2999, 4),
            (2000, 1000, 5),
        ] {
            if off + len > region {
                continue;
            }
            r.memset(p.add(off), b, len, Blocking)
                .map_err(e2s("memset"))?;
            model[off..off + len].fill(b);
            let mut back = vec![0u8; region];
            r.get(&mut back, p, Blocking).map_err(e2s("get"))?;
            check_eq(
                &back,
                &model,
                &format!("after memset({off}, {len}) on rank {d}"),
            )?;
        }
    }
    finish(&mut r)
}

/// Tests `ev` until it completes, at most [`CASE_WAIT`].
fn test_until<C: Conduit, T: Send + 'static>(
    r: &mut Ep<C>,
    ev: &Event<T, RmaError>,
    what: &str,
) -> R {
    let t0 = Instant::now();
    while !r.test(ev).map_err(e2s(what))? {
        if t0.elapsed() > CASE_WAIT {
            return Err(format!("{what}: not complete after {CASE_WAIT:?}"));
        }
        std::thread::yield_now();
    }
    Ok(())
}

pub(super) fn nb_events<C: Conduit>(client: &Client<C>) -> R {
    let mut r = setup(client)?;
    let (me, n) = (r.rank(), r.size());
    let slot = slot_len(&r);
    let len = 5000.min(slot / 4);
    for d in 0..n {
        let a = EpAddr::rank(d);
        let p = GlobalPtr::<u8>::new(a, me as usize * slot);
        // An NB put: the source is reusable as soon as the call returns (local
        // completion on return), the event signals remote completion.
        let data = bytes(seed(me, d, 1), len);
        let mut src = data.clone();
        let ev = r.put(p, &src, Nb).map_err(e2s("put Nb"))?;
        src.fill(0xee);
        wait(&mut r, ev, "put Nb")?;
        drop(src);
        // An NB get tested to completion, then waited.
        let gev = r.get(vec![0u8; len], p, Nb).map_err(e2s("get Nb"))?;
        test_until(&mut r, &gev, "get Nb")?;
        check_eq(&wait(&mut r, gev, "get Nb")?, &data, "get Nb after test")?;
        // 8 NB puts + wait_all.
        let mut evs: Vec<Event<(), RmaError>> = Vec::new();
        for i in 0..8 {
            let piece = bytes(seed(me, d, 10 + i), len / 8);
            evs.push(
                r.put(p.add(i as usize * (len / 8)), &piece, Nb)
                    .map_err(e2s("put Nb"))?,
            );
        }
        {
            let refs: Vec<&dyn AnyEvent> = evs.iter().map(|e| e as &dyn AnyEvent).collect();
            r.wait_all(&refs).map_err(e2s("wait_all"))?;
        }
        if !evs.iter().all(Event::is_done) {
            return Err("wait_all returned with pending events".into());
        }
        for ev in evs {
            wait(&mut r, ev, "put after wait_all")?;
        }
        let mut want = Vec::new();
        for i in 0..8 {
            want.extend(bytes(seed(me, d, 10 + i), len / 8));
        }
        // A get into a buffer lent to a scope.
        let mut back = vec![0u8; want.len()];
        r.scope(|s| s.get_into(&mut back, p))
            .map_err(e2s("scoped get"))?;
        check_eq(&back, &want, "NB put pieces")?;
        // wait_some until every event is seen complete.
        let mut evs: Vec<Event<(), RmaError>> = Vec::new();
        for i in 0..6 {
            evs.push(
                r.memset(p.add(i * 10), i as u8, 10, Nb)
                    .map_err(e2s("memset Nb"))?,
            );
        }
        let mut seen = HashSet::new();
        let t0 = Instant::now();
        while seen.len() < evs.len() {
            let refs: Vec<&dyn AnyEvent> = evs.iter().map(|e| e as &dyn AnyEvent).collect();
            let done = r.wait_some(&refs).map_err(e2s("wait_some"))?;
            if done.is_empty() || done.iter().any(|&i| i >= evs.len() || !evs[i].is_done()) {
                return Err(format!("wait_some returned {done:?}"));
            }
            seen.extend(done);
            if t0.elapsed() > CASE_WAIT {
                return Err("wait_some never covered every event".into());
            }
        }
        for ev in evs {
            wait(&mut r, ev, "memset Nb")?;
        }
        let gev = r.get(vec![0u8; 60], p, Nb).map_err(e2s("get Nb"))?;
        let g: Vec<u8> = wait(&mut r, gev, "get Nb")?;
        let want: Vec<u8> = (0..60).map(|i| (i / 10) as u8).collect();
        check_eq(&g, &want, "memset Nb pieces")?;
        // A forgotten get event: its buffer lives until the transfer is done with it.
        let gev = r.get(vec![0u8; 64], p, Nb).map_err(e2s("get Nb"))?;
        std::mem::forget(gev);
        // A dropped one likewise.
        drop(r.get(vec![0u8; 64], p, Nb).map_err(e2s("get Nb"))?);
    }
    // The abandoned gets finish: the table drains.
    let t0 = Instant::now();
    while pending_ops(&mut r) > 0 && t0.elapsed() < CASE_WAIT {
        r.poll();
    }
    if pending_ops(&mut r) > 0 {
        return Err(format!(
            "{} operations never completed",
            pending_ops(&mut r)
        ));
    }
    finish(&mut r)
}

pub(super) fn nbi_regions<C: Conduit>(client: &Client<C>) -> R {
    let mut r = setup(client)?;
    let (me, n) = (r.rank(), r.size());
    let slot = slot_len(&r);
    let piece = 256.min(slot / 64);
    for d in 0..n {
        let a = EpAddr::rank(d);
        let p = GlobalPtr::<u8>::new(a, me as usize * slot);
        let data = bytes(seed(me, d, 21), piece * 32);
        for (i, c) in data.chunks(piece).enumerate() {
            r.put(p.add(i * piece), c, Nbi).map_err(e2s("put Nbi"))?;
        }
        r.sync_nbi(NbiCategories::PUTS).map_err(e2s("sync puts"))?;
        // NBI gets into owned buffers are kept alive until their sync; gets into one
        // lent buffer go through a scope.
        for (i, _) in data.chunks(piece).enumerate() {
            r.get(vec![0u8; piece], p.add(i * piece), Nbi)
                .map_err(e2s("get Nbi"))?;
        }
        r.sync_nbi(NbiCategories::GETS).map_err(e2s("sync gets"))?;
        let mut back = vec![0u8; data.len()];
        r.scope(|s| {
            for (i, c) in back.chunks_mut(piece).enumerate() {
                s.get_into(c, p.add(i * piece))?;
            }
            Ok::<(), RmaError>(())
        })
        .map_err(e2s("scoped gets"))?;
        check_eq(&back, &data, "NBI puts then scoped gets")?;
        // test_nbi
        r.memset(p, 7, piece, Nbi).map_err(e2s("memset Nbi"))?;
        let t0 = Instant::now();
        while !r.test_nbi(NbiCategories::ALL).map_err(e2s("test_nbi"))? {
            if t0.elapsed() > CASE_WAIT {
                return Err("test_nbi(ALL) never true".into());
            }
        }
        if !r.test_nbi(NbiCategories::PUTS).map_err(e2s("test_nbi"))?
            || !r.test_nbi(NbiCategories::GETS).map_err(e2s("test_nbi"))?
        {
            return Err("test_nbi(PUTS/GETS) false after test_nbi(ALL)".into());
        }
        if r.get_val(GlobalPtr::<u8>::new(a, p.offset + piece - 1), Blocking)
            .map_err(e2s("get_val"))?
            != 7
        {
            return Err("memset Nbi not visible after sync".into());
        }
        // A scope (the access region of GASNet-EX): its operations complete when it
        // returns; the category syncs do not cover them; scopes nest.
        let data2 = bytes(seed(me, d, 22), piece * 8);
        let mut back2 = vec![0u8; piece];
        let mut back4 = vec![0u8; piece];
        r.scope(|s| {
            for (i, c) in data2.chunks(piece).enumerate() {
                s.put_from(p.add(i * piece), c)?;
            }
            s.get_into(&mut back2, p.add(piece * 20))?;
            // The syncs do not cover the scope (they return at once).
            s.sync_nbi(NbiCategories::ALL)?;
            s.scope(|inner| inner.get_into(&mut back4, p.add(piece * 21)))?;
            Ok::<(), RmaError>(())
        })
        .map_err(e2s("scope"))?;
        check_eq(&back2, &data[piece * 20..piece * 21], "get in scope")?;
        check_eq(&back4, &data[piece * 21..piece * 22], "get in nested scope")?;
        let mut back3 = vec![0u8; data2.len()];
        r.get(&mut back3, p, Blocking).map_err(e2s("get"))?;
        check_eq(&back3, &data2, "puts in scope")?;
        // Overlapping NBI puts, each synced: the last synced value is visible.
        let q = GlobalPtr::<u64>::new(a, me as usize * slot + 8 * piece);
        for v in 1..=20u64 {
            r.put(q, &[v], Nbi).map_err(e2s("put Nbi"))?;
            r.sync_nbi(NbiCategories::PUTS).map_err(e2s("sync puts"))?;
            let got = r.get_val(q, Blocking).map_err(e2s("get_val"))?;
            if got != v {
                return Err(format!("after sync of put {v}, get_val saw {got}"));
            }
        }
        // Unsynced overlapping puts: after the sync, one of the values is there.
        for v in 100..110u64 {
            r.put(q, &[v], Nbi).map_err(e2s("put Nbi"))?;
        }
        r.sync_nbi(NbiCategories::PUTS).map_err(e2s("sync puts"))?;
        let got = r.get_val(q, Blocking).map_err(e2s("get_val"))?;
        if !(100..110).contains(&got) {
            return Err(format!("overlapping NBI puts left {got}"));
        }
    }
    finish(&mut r)
}

/// The element indices a strided shape touches: (remote, local) per element, in order.
fn shape_elems(s: &Strided<'_>) -> Vec<(i64, i64)> {
    let n = s.counts.len();
    let mut out = Vec::new();
    if s.counts.contains(&0) {
        return out;
    }
    let mut idx = vec![0usize; n];
    loop {
        let (mut rr, mut l) = (0i64, s.local_start as i64);
        for (d, &i) in idx.iter().enumerate() {
            rr += i as i64 * s.remote_strides[d] as i64;
            l += i as i64 * s.local_strides[d] as i64;
        }
        out.push((rr, l));
        let mut d = 0;
        loop {
            if d == n {
                return out;
            }
            idx[d] += 1;
            if idx[d] < s.counts[d] {
                break;
            }
            idx[d] = 0;
            d += 1;
        }
    }
}

/// counts, remote strides, local strides, base.
type FixedShape = (&'static [usize], &'static [isize], &'static [isize], usize);

struct ShapeBuf {
    counts: Vec<usize>,
    rs: Vec<isize>,
    ls: Vec<isize>,
    local_start: usize,
    local_len: usize,
    /// Remote element index of element (0, .., 0) in the region.
    base: usize,
}

impl ShapeBuf {
    fn shape(&self) -> Strided<'_> {
        Strided {
            counts: &self.counts,
            remote_strides: &self.rs,
            local_start: self.local_start,
            local_strides: &self.ls,
        }
    }
}

/// A random shape fitting a region of `m` elements; `None` if it does not fit.
fn random_shape(g: &mut SplitMix64, m: usize) -> Option<ShapeBuf> {
    let dims = g.up_to(3) as usize + usize::from(g.up_to(9) > 0); // mostly 1..=3, sometimes 0
    let mut counts = Vec::new();
    let (mut rs, mut ls) = (Vec::new(), Vec::new());
    for _ in 0..dims {
        counts.push(g.up_to(5) as usize + usize::from(g.up_to(15) > 0));
        let s = |g: &mut SplitMix64| match g.up_to(3) {
            0 => 1,
            1 => -1,
            _ => g.up_to(14) as isize - 7,
        };
        rs.push(s(g));
        ls.push(s(g));
    }
    let span = |st: &[isize]| {
        let (mut lo, mut hi) = (0i64, 0i64);
        for (c, s) in counts.iter().zip(st) {
            let e = (*c as i64 - 1).max(0) * *s as i64;
            if e < 0 { lo += e } else { hi += e }
        }
        (lo, hi)
    };
    let (rlo, rhi) = span(&rs);
    let (llo, lhi) = span(&ls);
    let room = m as i64 - (rhi - rlo + 1);
    if room < 0 {
        return None;
    }
    let base = (-rlo + g.up_to(room as u64) as i64) as usize;
    let local_start = (-llo) as usize + g.up_to(3) as usize;
    let local_len = local_start + lhi as usize + 1 + g.up_to(3) as usize;
    Some(ShapeBuf {
        counts,
        rs,
        ls,
        local_start,
        local_len,
        base,
    })
}

/// The fixed shapes of [`vis_shapes`]: reflection, 2-D transpose, degenerate,
/// zero-dimensional, with their local extents.
fn fixed_shapes() -> Vec<ShapeBuf> {
    let mut shapes: Vec<ShapeBuf> = Vec::new();
    // Fixed shapes: reflection, 2-D transpose, degenerate, zero-dimensional.
    let fixed: [FixedShape; 5] = [
        (&[16], &[-1], &[1], 15),
        (&[4, 6], &[6, 1], &[1, 4], 0),
        (&[3, 0, 2], &[1, 3, 9], &[1, 3, 9], 0),
        (&[], &[], &[], 5),
        (&[5, 3], &[-1, -5], &[-1, 5], 14),
    ];
    for (c, rs, ls, base) in fixed {
        let (llo, lhi) = c.iter().zip(ls).fold((0i64, 0i64), |(lo, hi), (c, s)| {
            let e = (*c as i64 - 1).max(0) * *s as i64;
            if e < 0 { (lo + e, hi) } else { (lo, hi + e) }
        });
        shapes.push(ShapeBuf {
            counts: c.to_vec(),
            rs: rs.to_vec(),
            ls: ls.to_vec(),
            local_start: (-llo) as usize,
            local_len: (lhi - llo + 1) as usize,
            base,
        });
    }
    shapes
}

/// Vector and indexed puts and gets of [`vis_shapes`]: random disjoint pieces on a
/// grid of 16 elements of `region` (which `model` mirrors), round trips checked, then
/// the whole region against the model.
fn vector_indexed<C: Conduit>(
    r: &mut Ep<C>,
    g: &mut SplitMix64,
    region: GlobalPtr<u32>,
    model: &mut [u32],
) -> R {
    let m = model.len();
    for k in 0..20 {
        let cells = m / 16;
        let mut picked: Vec<usize> = (0..cells).filter(|_| g.up_to(3) == 0).collect();
        // Shuffle a little (order matters for the packing of local data).
        if picked.len() > 2 {
            let (i, j) = (g.up_to(picked.len() as u64 - 1) as usize, 0);
            picked.swap(i, j);
        }
        let lens: Vec<usize> = picked.iter().map(|_| g.up_to(16) as usize).collect();
        let list: Vec<(GlobalPtr<u32>, usize)> = picked
            .iter()
            .zip(&lens)
            .map(|(c, l)| (region.add(c * 16), *l))
            .collect();
        let total: usize = lens.iter().sum();
        let src: Vec<u32> = (0..total).map(|_| g.next_u64() as u32).collect();
        let mut at = 0;
        for (c, l) in picked.iter().zip(&lens) {
            model[c * 16..c * 16 + l].copy_from_slice(&src[at..at + l]);
            at += l;
        }
        if k % 2 == 0 {
            r.put_vector(&list, &src, Blocking)
                .map_err(e2s("put_vector"))?;
            let mut back = vec![0u32; total];
            r.get_vector(&mut back, &list, Blocking)
                .map_err(e2s("get_vector"))?;
            check_eq(&back, &src, "vector round trip")?;
        } else {
            r.put_vis(Vis::Vector(&list), &src, Nbi)
                .map_err(e2s("put_vis Nbi vector"))?;
            r.sync_nbi(NbiCategories::PUTS).map_err(e2s("sync puts"))?;
            let ev = r
                .get_vis(vec![0u32; total], Vis::Vector(&list), Nb)
                .map_err(e2s("get_vis Nb vector"))?;
            check_eq(&wait(r, ev, "get_vis Nb")?, &src, "vector NB round trip")?;
        }
        let each = g.up_to(16) as usize;
        let ptrs: Vec<GlobalPtr<u32>> = picked.iter().map(|c| region.add(c * 16)).collect();
        let src: Vec<u32> = (0..ptrs.len() * each)
            .map(|_| g.next_u64() as u32)
            .collect();
        for (i, c) in picked.iter().enumerate() {
            model[c * 16..c * 16 + each].copy_from_slice(&src[i * each..(i + 1) * each]);
        }
        r.put_indexed(&ptrs, each, &src, Blocking)
            .map_err(e2s("put_indexed"))?;
        let mut back = vec![0u32; src.len()];
        r.get_indexed(&mut back, &ptrs, each, Blocking)
            .map_err(e2s("get_indexed"))?;
        check_eq(&back, &src, "indexed round trip")?;
        let mut whole = vec![0u32; m];
        r.get(&mut whole, region, Blocking)
            .map_err(e2s("get region"))?;
        check_eq(&whole, model, "region after vector/indexed puts")?;
    }
    Ok(())
}

pub(super) fn vis_shapes<C: Conduit>(client: &Client<C>) -> R {
    let mut r = setup(client)?;
    let (me, n) = (r.rank(), r.size());
    let slot = slot_len(&r);
    let m = (slot / 4).min(2048);
    let mut g = SplitMix64::new(seed(me, 0, 31));
    for d in 0..n {
        let a = EpAddr::rank(d);
        let region = GlobalPtr::<u32>::new(a, me as usize * slot);
        let mut model = vec![0u32; m];
        r.put(region, &model, Blocking)
            .map_err(e2s("zero region"))?;
        let mut shapes = fixed_shapes();
        while shapes.len() < 60 {
            if let Some(s) = random_shape(&mut g, m) {
                shapes.push(s);
            }
        }
        for (k, sb) in shapes.iter().enumerate() {
            let sh = sb.shape();
            let elems = shape_elems(&sh);
            let remote: Vec<usize> = elems
                .iter()
                .map(|e| (sb.base as i64 + e.0) as usize)
                .collect();
            let local: Vec<usize> = elems.iter().map(|e| e.1 as usize).collect();
            let p = region.add(sb.base);
            let what = format!(
                "shape {k} counts {:?} rs {:?} ls {:?} start {} base {} on rank {d}",
                sb.counts, sb.rs, sb.ls, sb.local_start, sb.base
            );
            // Put (only if no remote element is written twice).
            let uniq_r = remote.iter().collect::<HashSet<_>>().len() == remote.len();
            if uniq_r {
                let src: Vec<u32> = (0..sb.local_len).map(|_| g.next_u64() as u32).collect();
                for (ri, li) in remote.iter().zip(&local) {
                    model[*ri] = src[*li];
                }
                match k % 3 {
                    0 => r.put_strided(p, &src, sh, Blocking).map_err(e2s(&what))?,
                    1 => {
                        let ev = r
                            .put_vis(Vis::Strided { ptr: p, shape: sh }, &src, Nb)
                            .map_err(e2s(&what))?;
                        wait(&mut r, ev, &what)?;
                    }
                    _ => {
                        r.put_vis(Vis::Strided { ptr: p, shape: sh }, &src, Nbi)
                            .map_err(e2s(&what))?;
                        r.sync_nbi(NbiCategories::PUTS).map_err(e2s(&what))?;
                    }
                }
                let mut back = vec![0u32; m];
                r.get(&mut back, region, Blocking)
                    .map_err(e2s("get region"))?;
                check_eq(&back, &model, &format!("region after strided put, {what}"))?;
            }
            // Get (only if no local element is written twice).
            if local.iter().collect::<HashSet<_>>().len() == local.len() {
                let sentinel = 0x5a5a_5a5a;
                let mut want = vec![sentinel; sb.local_len];
                for (ri, li) in remote.iter().zip(&local) {
                    want[*li] = model[*ri];
                }
                let got = match k % 3 {
                    0 => {
                        let mut v = vec![sentinel; sb.local_len];
                        r.get_strided(&mut v, p, sh, Blocking).map_err(e2s(&what))?;
                        v
                    }
                    1 => {
                        let ev = r
                            .get_vis(
                                vec![sentinel; sb.local_len],
                                Vis::Strided { ptr: p, shape: sh },
                                Nb,
                            )
                            .map_err(e2s(&what))?;
                        wait(&mut r, ev, &what)?
                    }
                    _ => {
                        let mut v = vec![sentinel; sb.local_len];
                        r.scope(|s| s.get_vis_into(&mut v, Vis::Strided { ptr: p, shape: sh }))
                            .map_err(e2s(&what))?;
                        v
                    }
                };
                check_eq(&got, &want, &format!("strided get, {what}"))?;
            }
        }
        vector_indexed(&mut r, &mut g, region, &mut model)?;
    }
    finish(&mut r)
}

/// RMA to destinations that do not exist refused, in every mode: a rank past the job,
/// an endpoint past the right neighbour's capacity, and (where endpoints are made at
/// run time) one below it that nobody created.
fn destination_errors<C: Conduit>(client: &Client<C>, r: &mut Ep<C>) -> R {
    let (me, n) = (r.rank(), r.size());
    let right = EpAddr::rank((me + 1) % n);
    let bad_rank = GlobalPtr::<u8>::new(EpAddr::rank(n), 0);
    let want = RmaError::BadRank { rank: n, size: n };
    expect_err(r.put(bad_rank, &[1], Blocking), &want, "put to a bad rank")?;
    expect_err(
        r.get(&mut [0u8], bad_rank, Blocking),
        &want,
        "get from a bad rank",
    )?;
    expect_err(
        r.put_val(bad_rank, 1, Blocking),
        &want,
        "put_val to a bad rank",
    )?;
    expect_err(
        r.memset(bad_rank, 1, 1, Blocking),
        &want,
        "memset on a bad rank",
    )?;
    expect_err(
        r.get(vec![0u8; 4], bad_rank, Nb).map(|_| ()),
        &want,
        "get Nb from a bad rank",
    )?;
    expect_err(r.put(bad_rank, &[1], Nbi), &want, "put Nbi to a bad rank")?;
    let mut two = [0u8; 2];
    expect_err(
        r.scope(|s| s.get_into(&mut two, bad_rank)),
        &want,
        "scoped get from a bad rank",
    )?;

    // The first index the right neighbour cannot have: its capacity (the endpoints
    // made at init, or more where the conduit makes endpoints at run time).
    let cap = client
        .endpoint_capacity(right.rank)
        .ok_or_else(|| format!("no endpoint capacity for rank {}", right.rank))?;
    let bad_ep = EpAddr::new(right.rank, cap);
    expect_err(
        r.put(GlobalPtr::<u8>::new(bad_ep, 0), &[1], Blocking),
        &RmaError::BadEndpoint { dst: bad_ep },
        "put to a bad endpoint",
    )?;
    expect_err(
        r.get_val(GlobalPtr::<u32>::new(bad_ep, 0), Blocking),
        &RmaError::BadEndpoint { dst: bad_ep },
        "get_val from a bad endpoint",
    )?;
    // Below the capacity, above the endpoints made at init: an endpoint made at run
    // time that nobody created (each case has a client of its own).
    let init = client.layout().eps[right.rank as usize];
    if cap > init {
        let absent = EpAddr::new(right.rank, init);
        let want = RmaError::NoEndpoint {
            dst: absent,
            state: "not created yet",
        };
        expect_err(
            r.put(GlobalPtr::<u8>::new(absent, 0), &[1], Blocking),
            &want,
            "put to an endpoint not created yet",
        )?;
        expect_err(
            r.get(vec![0u8; 4], GlobalPtr::<u8>::new(absent, 0), Nb)
                .map(|_| ()),
            &want,
            "get Nb from an endpoint not created yet",
        )?;
        expect_err(
            r.memset(GlobalPtr::<u8>::new(absent, 0), 1, 8, Nbi),
            &want,
            "memset Nbi to an endpoint not created yet",
        )?;
    }
    Ok(())
}

/// VIS errors to `right` (the slot at `mine` of its segment), each with a valid first
/// piece that must not be written: a vector piece past the end, lengths that do not
/// match, two targets, indexed and strided shapes that do not fit.
fn vis_errors<C: Conduit>(r: &mut Ep<C>, right: EpAddr, mine: usize) -> R {
    let me = r.rank();
    let seg = r.segment().len();
    let oos = |offset, len| RmaError::OutOfSegment {
        dst: right,
        offset,
        len,
        seg_len: seg,
    };
    let q = GlobalPtr::<u8>::new(right, mine);
    let junk = [0xeeu8; 64];
    expect_err(
        r.put_vector(
            &[(q, 8), (GlobalPtr::new(right, seg - 4), 8)],
            &junk[..16],
            Blocking,
        ),
        &oos(seg - 4, 8),
        "vector with a piece past the end",
    )?;
    expect_err(
        r.put_vector(&[(q, 8)], &junk[..9], Blocking),
        &RmaError::ShapeMismatch("vector pieces hold 8 elements, the local buffer 9".into()),
        "vector length mismatch",
    )?;
    let other = EpAddr::new(me, 1);
    expect_err(
        r.put_vector(
            &[(q, 1), (GlobalPtr::new(other, 0), 1)],
            &junk[..2],
            Blocking,
        ),
        &RmaError::MixedTargets {
            first: right,
            other,
        },
        "vector with two targets",
    )?;
    match r.put_indexed(&[q, q.add(8)], 4, &junk[..7], Blocking) {
        Err(RmaError::ShapeMismatch(_)) => {}
        other => return Err(format!("indexed length mismatch: {other:?}")),
    }
    // Strided: reflection running below offset 0.
    let low = GlobalPtr::<u8>::new(right, 2);
    let sh = Strided {
        counts: &[4],
        remote_strides: &[-1],
        local_start: 0,
        local_strides: &[1],
    };
    match r.put_strided(low, &junk[..4], sh, Blocking) {
        Err(RmaError::OutOfSegment { .. }) => {}
        other => return Err(format!("strided below offset 0: {other:?}")),
    }
    let sh = Strided {
        counts: &[4, 2],
        remote_strides: &[1, 4],
        local_start: 0,
        local_strides: &[1, 4],
    };
    match r.put_strided(q, &junk[..7], sh, Blocking) {
        Err(RmaError::LocalOutOfBounds { slice_len: 7, .. }) => {}
        other => return Err(format!("strided beyond the local buffer: {other:?}")),
    }
    match r.put_strided(
        q,
        &junk[..8],
        Strided {
            counts: &[4, 2],
            remote_strides: &[1],
            local_start: 0,
            local_strides: &[1, 4],
        },
        Blocking,
    ) {
        Err(RmaError::ShapeMismatch(_)) => {}
        other => return Err(format!("strides/counts mismatch: {other:?}")),
    }
    Ok(())
}

pub(super) fn errors<C: Conduit>(client: &Client<C>) -> R {
    let mut r = setup(client)?;
    let (me, n) = (r.rank(), r.size());
    let seg = r.segment().len();
    let slot = slot_len(&r);
    let mine = me as usize * slot;
    let right = EpAddr::rank((me + 1) % n);
    // Known contents in my slot on the right neighbour, to prove nothing is written.
    let fill = bytes(seed(me, 0, 41), 256);
    let p = GlobalPtr::<u8>::new(right, mine);
    r.put(p, &fill, Blocking).map_err(e2s("fill"))?;

    destination_errors(client, &mut r)?;

    let oos = |offset, len| RmaError::OutOfSegment {
        dst: right,
        offset,
        len,
        seg_len: seg,
    };
    expect_err(
        r.put(GlobalPtr::<u8>::new(right, seg - 3), &[0u8; 4], Blocking),
        &oos(seg - 3, 4),
        "put past the end",
    )?;
    expect_err(
        r.get(&mut [0u8; 1], GlobalPtr::<u8>::new(right, seg), Blocking),
        &oos(seg, 1),
        "get at the end",
    )?;
    expect_err(
        r.put_val(GlobalPtr::<u64>::new(right, seg - 7), 1, Blocking),
        &oos(seg - 7, 8),
        "put_val past the end",
    )?;
    expect_err(
        r.put(
            GlobalPtr::<u8>::new(right, usize::MAX - 1),
            &[0u8; 4],
            Blocking,
        ),
        &oos(usize::MAX - 1, 4),
        "offset overflow",
    )?;
    expect_err(
        r.memset(GlobalPtr::<u8>::new(right, 1), 0, usize::MAX, Blocking),
        &oos(1, usize::MAX),
        "memset length overflow",
    )?;
    let far = GlobalPtr::<u64>::new(right, 0).add(usize::MAX / 4);
    if r.get_val(far, Blocking).is_ok() {
        return Err("get_val at a saturated pointer succeeded".into());
    }
    // Exactly at the end is fine; zero bytes at the end too.
    r.put(GlobalPtr::<u8>::new(right, seg - 1), &[9u8], Blocking)
        .map_err(e2s("last byte"))?;
    r.put::<u8, _>(GlobalPtr::new(right, seg), &[], Blocking)
        .map_err(e2s("zero bytes at the end"))?;

    vis_errors(&mut r, right, mine)?;
    // A failed get writes nothing locally.
    let q = GlobalPtr::<u8>::new(right, mine);
    let mut local = [0x11u8; 16];
    let _ = r.get_vector(
        &mut local,
        &[(q, 8), (GlobalPtr::new(right, seg), 8)],
        Blocking,
    );
    if local != [0x11u8; 16] {
        return Err("a failed get_vector wrote the local buffer".into());
    }
    let mut back = vec![0u8; fill.len()];
    r.get(&mut back, p, Blocking).map_err(e2s("get"))?;
    check_eq(&back, &fill, "target slot after failed operations")?;
    finish(&mut r)
}

/// Work of the thread driving endpoint `k` (0 or 1) in `multi_ep`: RMA into the other
/// endpoint of every rank, then a check of what every rank's thread `k` wrote there.
fn multi_ep_work<C: Conduit>(r: &mut Ep<C>, k: u16) -> R {
    let (me, n) = (r.rank(), r.size());
    let slot = slot_len(r).min(4096);
    let other = 1 - k;
    let len = slot - 8;
    for d in 0..n {
        let p = GlobalPtr::<u8>::new(EpAddr::new(d, other), me as usize * slot + 3);
        let data = bytes(seed(me, d, 500 + u64::from(k)), len);
        r.put(p, &data, Blocking)
            .map_err(e2s("put to the other endpoint"))?;
        let ev = r.get(vec![0u8; len], p, Nb).map_err(e2s("get Nb"))?;
        check_eq(
            &wait(r, ev, "get Nb")?,
            &data,
            "round trip through the other endpoint",
        )?;
    }
    barrier(r)?;
    // Every thread k has written; read everybody's slot on our right neighbour.
    let d = (me + 1) % n;
    for s in 0..n {
        let p = GlobalPtr::<u8>::new(EpAddr::new(d, other), s as usize * slot + 3);
        let mut got = vec![0u8; len];
        r.get(&mut got, p, Blocking).map_err(e2s("get"))?;
        check_eq(
            &got,
            &bytes(seed(s, d, 500 + u64::from(k)), len),
            "slot written by another rank",
        )?;
    }
    Ok(())
}

pub(super) fn multi_ep<C: Conduit>(client: &Client<C>) -> R {
    use std::sync::atomic::{AtomicBool, Ordering};
    let done = [AtomicBool::new(false), AtomicBool::new(false)];
    let mut eps = Vec::new();
    for k in 0..2u16 {
        eps.push(rma_endpoint(client, k)?);
    }
    let results: Vec<R> = std::thread::scope(|sc| {
        let hs: Vec<_> = eps
            .into_iter()
            .enumerate()
            .map(|(k, mut r)| {
                let done = &done;
                sc.spawn(move || -> R {
                    barrier(&mut r)?;
                    let res = multi_ep_work(&mut r, k as u16);
                    done[k].store(true, Ordering::Release);
                    // Serve the other local endpoint's peers until it is done too,
                    // then wait (polling) for every rank's thread k.
                    let t0 = Instant::now();
                    r.wait_until(|| {
                        done[1 - k].load(Ordering::Acquire) || t0.elapsed() > CASE_WAIT
                    });
                    res?;
                    barrier(&mut r).map_err(e2s("final barrier"))?;
                    if dropped(&mut r) != 0 {
                        return Err("RMA messages were dropped".into());
                    }
                    Ok(())
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_else(|p| Err(crate::panic_text(&*p))))
            .collect()
    });
    results.into_iter().collect()
}
