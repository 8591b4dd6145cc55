//! The RMA cases (see the module table in [`super`]).
//!
//! # Safety
//!
//! The cases call gex-rma's `unsafe` raw and NBI gets; each call site keeps its
//! destination buffer alive and untouched until the matching wait or sync returns.
#![allow(unsafe_code)]

use crate::conformance::CASE_WAIT;
use crate::rng::SplitMix64;
use gex_core::spi::Conduit;
use gex_core::{Client, EpAddr};
use gex_rma::{Event, GlobalPtr, Pod, RmaEp, RmaError, Strided, Vis};
use std::collections::HashSet;
use std::time::Instant;

type R<T = ()> = Result<T, String>;

pub(super) fn e2s<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> String + '_ {
    move |e| format!("{what}: {e}")
}

pub(super) fn setup<C: Conduit>(client: &Client<C>) -> R<RmaEp<C>> {
    let ep = client.endpoint(0).map_err(e2s("endpoint 0"))?;
    let mut r = RmaEp::new(ep).map_err(e2s("RmaEp::new"))?;
    r.barrier().map_err(e2s("barrier"))?;
    Ok(r)
}

/// Slot length (bytes, multiple of 64) each rank owns in every segment.
pub(super) fn slot_len<C: Conduit>(r: &RmaEp<C>) -> usize {
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

pub(super) fn finish<C: Conduit>(r: &mut RmaEp<C>) -> R {
    r.barrier().map_err(e2s("final barrier"))?;
    let d = r.dropped_messages();
    if d != 0 {
        return Err(format!("{d} RMA protocol messages were dropped"));
    }
    Ok(())
}

fn read_local<C: Conduit>(r: &RmaEp<C>, off: usize, n: usize) -> R<Vec<u8>> {
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
            let p = r.global_ptr::<u8>(EpAddr::rank(d), me as usize * slot + off);
            let data = bytes(seed(me, d, k as u64), size);
            r.put(p, &data).map_err(e2s("put"))?;
            let mut back = vec![0u8; size];
            r.get(&mut back, p).map_err(e2s("get"))?;
            check_eq(&back, &data, &format!("get back {size} bytes from {d}"))?;
        }
        r.barrier().map_err(e2s("barrier"))?;
        for s in 0..n {
            let got = read_local(&r, s as usize * slot + off, size)?;
            let want = bytes(seed(s, me, k as u64), size);
            check_eq(
                &got,
                &want,
                &format!("{size} bytes from rank {s} at the target"),
            )?;
        }
        r.barrier().map_err(e2s("barrier"))?;
    }
    // Typed, unaligned u64s.
    for d in 0..n {
        let p = r.global_ptr::<u64>(EpAddr::rank(d), me as usize * slot + 5);
        let vals: Vec<u64> = (0..100).map(|i| seed(me, d, 1000 + i)).collect();
        r.put(p, &vals).map_err(e2s("typed put"))?;
        let mut back = vec![0u64; 100];
        r.get(&mut back, p).map_err(e2s("typed get"))?;
        check_eq(&back, &vals, "typed u64 round trip")?;
        // A sub-range through add().
        let mut mid = [0u64; 10];
        r.get(&mut mid, p.add(45)).map_err(e2s("get at add(45)"))?;
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
                let p = r.global_ptr::<u8>(EpAddr::rank(t), off);
                let data = bytes(seed(0, t, 77 + k as u64), size);
                let what = format!("{size} bytes at offset {off} of rank {t}");
                let back = match k % 4 {
                    0 => {
                        r.put(p, &data).map_err(e2s("large put"))?;
                        let ev = r.get_nb(vec![0u8; size], p).map_err(e2s("large get_nb"))?;
                        r.wait(ev)
                    }
                    1 => {
                        r.put_nbi(p, &data).map_err(e2s("large put_nbi"))?;
                        r.wait_syncnbi_puts();
                        let mut back = vec![0u8; size];
                        r.get(&mut back, p).map_err(e2s("large get"))?;
                        back
                    }
                    2 => {
                        // SAFETY: `data` is neither dropped nor written before the sync.
                        unsafe { r.put_nbi_deferred(p, &data) }
                            .map_err(e2s("large put_nbi_deferred"))?;
                        r.wait_syncnbi_puts();
                        let mut back = vec![0u8; size];
                        r.get(&mut back, p).map_err(e2s("large get"))?;
                        back
                    }
                    _ => {
                        let ev = r.put_nb(p, data.clone()).map_err(e2s("large put_nb"))?;
                        let _ = r.wait(ev);
                        let mut back = vec![0u8; size];
                        // SAFETY: `back` is untouched until the sync returns.
                        unsafe { r.get_nbi(&mut back, p) }.map_err(e2s("large get_nbi"))?;
                        r.wait_syncnbi_gets();
                        back
                    }
                };
                check_eq(&back, &data, &format!("{what}: read back"))?;
            }
        }
        r.barrier().map_err(e2s("barrier"))?;
        if me == 0 || me == right {
            let got = read_local(&r, off, size)?;
            let want = bytes(seed(0, me, 77 + k as u64), size);
            check_eq(&got, &want, &format!("{size}-byte put at the target {me}"))?;
        }
        r.barrier().map_err(e2s("barrier"))?;
    }
    finish(&mut r)
}

fn val_round<C: Conduit, T: Pod + PartialEq + std::fmt::Debug>(
    r: &mut RmaEp<C>,
    p: GlobalPtr<T>,
    v: T,
) -> R {
    r.put_val(p, v).map_err(e2s("put_val"))?;
    let got = r.get_val(p).map_err(e2s("get_val"))?;
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
        let p = r.global_ptr::<u8>(a, base);
        r.put(p, &bytes(seed(me, d, 9), region))
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
            r.memset(p.add(off), b, len).map_err(e2s("memset"))?;
            model[off..off + len].fill(b);
            let mut back = vec![0u8; region];
            r.get(&mut back, p).map_err(e2s("get"))?;
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
fn test_until<C: Conduit, E: gex_rma::Completion>(r: &mut RmaEp<C>, ev: &mut E, what: &str) -> R {
    let t0 = Instant::now();
    while !r.test(ev) {
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
        let p = r.global_ptr::<u8>(a, me as usize * slot);
        // put_nb with the buffer back at LC.
        let data = bytes(seed(me, d, 1), len);
        let mut ev = r.put_nb(p, data.clone()).map_err(e2s("put_nb"))?;
        let buf = ev.lc().ok_or("put_nb: no buffer at local completion")?;
        check_eq(&buf, &data, "put_nb buffer handed back")?;
        if r.wait(ev).is_some() {
            return Err("put_nb: buffer returned twice".into());
        }
        // get_nb tested to completion, then waited.
        let mut gev = r.get_nb(vec![0u8; len], p).map_err(e2s("get_nb"))?;
        test_until(&mut r, &mut gev, "get_nb")?;
        check_eq(&r.wait(gev), &data, "get_nb after test")?;
        // put_nb_copy x 8 + wait_all.
        let mut evs: Vec<Event> = Vec::new();
        for i in 0..8 {
            let piece = bytes(seed(me, d, 10 + i), len / 8);
            evs.push(
                r.put_nb_copy(p.add(i as usize * (len / 8)), &piece)
                    .map_err(e2s("put_nb_copy"))?,
            );
        }
        r.wait_all(&mut evs);
        if !evs.iter().all(Event::is_done) {
            return Err("wait_all returned with pending events".into());
        }
        let mut want = Vec::new();
        for i in 0..8 {
            want.extend(bytes(seed(me, d, 10 + i), len / 8));
        }
        let mut back = vec![0u8; want.len()];
        // SAFETY: `back` is neither touched nor dropped until the event completes.
        let ev = unsafe { r.get_nb_raw(&mut back, p) }.map_err(e2s("get_nb_raw"))?;
        r.wait(ev);
        check_eq(&back, &want, "put_nb_copy pieces")?;
        // wait_some until every event is seen complete.
        let mut evs: Vec<Event> = Vec::new();
        for i in 0..6 {
            evs.push(
                r.memset_nb(p.add(i * 10), i as u8, 10)
                    .map_err(e2s("memset_nb"))?,
            );
        }
        let mut seen = HashSet::new();
        let t0 = Instant::now();
        while seen.len() < evs.len() {
            let done = r.wait_some(&mut evs);
            if done.is_empty() || done.iter().any(|&i| i >= evs.len() || !evs[i].is_done()) {
                return Err(format!("wait_some returned {done:?}"));
            }
            seen.extend(done);
            if t0.elapsed() > CASE_WAIT {
                return Err("wait_some never covered every event".into());
            }
        }
        let gev = r.get_nb(vec![0u8; 60], p).map_err(e2s("get_nb"))?;
        let g: Vec<u8> = r.wait(gev);
        let want: Vec<u8> = (0..60).map(|i| (i / 10) as u8).collect();
        check_eq(&g, &want, "memset_nb pieces")?;
        // A forgotten get event: its buffer is leaked, nothing breaks.
        let gev = r.get_nb(vec![0u8; 64], p).map_err(e2s("get_nb"))?;
        std::mem::forget(gev);
        // A dropped one likewise.
        drop(r.get_nb(vec![0u8; 64], p).map_err(e2s("get_nb"))?);
    }
    // Let the abandoned gets finish before checking the table stays bounded.
    let t0 = Instant::now();
    while r.pending_ops() > 2 * n as usize && t0.elapsed() < CASE_WAIT {
        r.poll();
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
        let p = r.global_ptr::<u8>(a, me as usize * slot);
        let data = bytes(seed(me, d, 21), piece * 32);
        for (i, c) in data.chunks(piece).enumerate() {
            r.put_nbi(p.add(i * piece), c).map_err(e2s("put_nbi"))?;
        }
        r.wait_syncnbi_puts();
        let mut back = vec![0u8; data.len()];
        for (i, c) in back.chunks_mut(piece).enumerate() {
            // SAFETY: `back` is untouched until wait_syncnbi_gets returns.
            unsafe { r.get_nbi(c, p.add(i * piece)) }.map_err(e2s("get_nbi"))?;
        }
        r.wait_syncnbi_gets();
        check_eq(&back, &data, "NBI puts then NBI gets")?;
        // test_syncnbi_*
        r.memset_nbi(p, 7, piece).map_err(e2s("memset_nbi"))?;
        let t0 = Instant::now();
        while !r.test_syncnbi_all() {
            if t0.elapsed() > CASE_WAIT {
                return Err("test_syncnbi_all never true".into());
            }
        }
        if !r.test_syncnbi_puts() || !r.test_syncnbi_gets() {
            return Err("test_syncnbi_puts/gets false after test_syncnbi_all".into());
        }
        if r.get_val(r.global_ptr::<u8>(a, p.offset + piece - 1))
            .map_err(e2s("get_val"))?
            != 7
        {
            return Err("memset_nbi not visible after sync".into());
        }
        // Access region.
        expect_err(
            r.end_nbi_accessregion().map(|_| ()),
            &RmaError::NoAccessRegion,
            "end without begin",
        )?;
        r.begin_nbi_accessregion().map_err(e2s("begin"))?;
        expect_err(
            r.begin_nbi_accessregion(),
            &RmaError::NestedAccessRegion,
            "nested begin",
        )?;
        let data2 = bytes(seed(me, d, 22), piece * 8);
        for (i, c) in data2.chunks(piece).enumerate() {
            r.put_nbi(p.add(i * piece), c)
                .map_err(e2s("put_nbi in region"))?;
        }
        let mut back2 = vec![0u8; piece];
        // SAFETY: `back2` is untouched until the region's event completes.
        unsafe { r.get_nbi(&mut back2, p.add(piece * 20)) }.map_err(e2s("get_nbi in region"))?;
        let ev = r.end_nbi_accessregion().map_err(e2s("end"))?;
        // The syncs do not cover the region (they return at once).
        r.wait_syncnbi_all();
        r.wait(ev);
        check_eq(&back2, &data[piece * 20..piece * 21], "get in region")?;
        let mut back3 = vec![0u8; data2.len()];
        r.get(&mut back3, p).map_err(e2s("get"))?;
        check_eq(&back3, &data2, "puts in region")?;
        // Overlapping NBI puts, each synced: the last synced value is visible.
        let q = r.global_ptr::<u64>(a, me as usize * slot + 8 * piece);
        for v in 1..=20u64 {
            r.put_nbi(q, &[v]).map_err(e2s("put_nbi"))?;
            r.wait_syncnbi_puts();
            let got = r.get_val(q).map_err(e2s("get_val"))?;
            if got != v {
                return Err(format!("after sync of put {v}, get_val saw {got}"));
            }
        }
        // Unsynced overlapping puts: after the sync, one of the values is there.
        for v in 100..110u64 {
            r.put_nbi(q, &[v]).map_err(e2s("put_nbi"))?;
        }
        r.wait_syncnbi_puts();
        let got = r.get_val(q).map_err(e2s("get_val"))?;
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

pub(super) fn vis_shapes<C: Conduit>(client: &Client<C>) -> R {
    let mut r = setup(client)?;
    let (me, n) = (r.rank(), r.size());
    let slot = slot_len(&r);
    let m = (slot / 4).min(2048);
    let mut g = SplitMix64::new(seed(me, 0, 31));
    for d in 0..n {
        let a = EpAddr::rank(d);
        let region = r.global_ptr::<u32>(a, me as usize * slot);
        let mut model = vec![0u32; m];
        r.put(region, &model).map_err(e2s("zero region"))?;
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
                    0 => r.put_strided(p, &src, sh).map_err(e2s(&what))?,
                    1 => {
                        let ev = r
                            .put_vis_nb(Vis::Strided { ptr: p, shape: sh }, &src)
                            .map_err(e2s(&what))?;
                        r.wait(ev);
                    }
                    _ => {
                        r.put_vis_nbi(Vis::Strided { ptr: p, shape: sh }, &src)
                            .map_err(e2s(&what))?;
                        r.wait_syncnbi_puts();
                    }
                }
                let mut back = vec![0u32; m];
                r.get(&mut back, region).map_err(e2s("get region"))?;
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
                        r.get_strided(&mut v, p, sh).map_err(e2s(&what))?;
                        v
                    }
                    1 => {
                        let ev = r
                            .get_vis_nb(
                                vec![sentinel; sb.local_len],
                                Vis::Strided { ptr: p, shape: sh },
                            )
                            .map_err(e2s(&what))?;
                        r.wait(ev)
                    }
                    _ => {
                        let mut v = vec![sentinel; sb.local_len];
                        // SAFETY: `v` is untouched until wait_syncnbi_gets returns.
                        unsafe { r.get_vis_nbi(&mut v, Vis::Strided { ptr: p, shape: sh }) }
                            .map_err(e2s(&what))?;
                        r.wait_syncnbi_gets();
                        v
                    }
                };
                check_eq(&got, &want, &format!("strided get, {what}"))?;
            }
        }
        // Vector and indexed: random disjoint pieces on a grid of 16 elements.
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
                r.put_vector(&list, &src).map_err(e2s("put_vector"))?;
                let mut back = vec![0u32; total];
                r.get_vector(&mut back, &list).map_err(e2s("get_vector"))?;
                check_eq(&back, &src, "vector round trip")?;
            } else {
                r.put_vis_nbi(Vis::Vector(&list), &src)
                    .map_err(e2s("put_vis_nbi vector"))?;
                r.wait_syncnbi_puts();
                let ev = r
                    .get_vis_nb(vec![0u32; total], Vis::Vector(&list))
                    .map_err(e2s("get_vis_nb vector"))?;
                check_eq(&r.wait(ev), &src, "vector NB round trip")?;
            }
            let each = g.up_to(16) as usize;
            let ptrs: Vec<GlobalPtr<u32>> = picked.iter().map(|c| region.add(c * 16)).collect();
            let src: Vec<u32> = (0..ptrs.len() * each)
                .map(|_| g.next_u64() as u32)
                .collect();
            for (i, c) in picked.iter().enumerate() {
                model[c * 16..c * 16 + each].copy_from_slice(&src[i * each..(i + 1) * each]);
            }
            r.put_indexed(&ptrs, each, &src)
                .map_err(e2s("put_indexed"))?;
            let mut back = vec![0u32; src.len()];
            r.get_indexed(&mut back, &ptrs, each)
                .map_err(e2s("get_indexed"))?;
            check_eq(&back, &src, "indexed round trip")?;
            let mut whole = vec![0u32; m];
            r.get(&mut whole, region).map_err(e2s("get region"))?;
            check_eq(&whole, &model, "region after vector/indexed puts")?;
        }
    }
    finish(&mut r)
}

pub(super) fn errors<C: Conduit>(client: &Client<C>) -> R {
    let mut r = setup(client)?;
    let (me, n) = (r.rank(), r.size());
    let seg = r.segment().len();
    let slot = slot_len(&r);
    let eps = client.endpoint_count();
    let mine = me as usize * slot;
    let right = EpAddr::rank((me + 1) % n);
    // Known contents in my slot on the right neighbour, to prove nothing is written.
    let fill = bytes(seed(me, 0, 41), 256);
    let p = r.global_ptr::<u8>(right, mine);
    r.put(p, &fill).map_err(e2s("fill"))?;

    let bad_rank = r.global_ptr::<u8>(EpAddr::rank(n), 0);
    let want = RmaError::BadRank { rank: n, size: n };
    expect_err(r.put(bad_rank, &[1]), &want, "put to a bad rank")?;
    expect_err(r.get(&mut [0u8], bad_rank), &want, "get from a bad rank")?;
    expect_err(r.put_val(bad_rank, 1), &want, "put_val to a bad rank")?;
    expect_err(r.memset(bad_rank, 1, 1), &want, "memset on a bad rank")?;
    expect_err(
        r.get_nb(vec![0u8; 4], bad_rank).map(|_| ()),
        &want,
        "get_nb from a bad rank",
    )?;
    expect_err(r.put_nbi(bad_rank, &[1]), &want, "put_nbi to a bad rank")?;

    let bad_ep = EpAddr::new(right.rank, eps);
    expect_err(
        r.put(r.global_ptr::<u8>(bad_ep, 0), &[1]),
        &RmaError::BadEndpoint { dst: bad_ep },
        "put to a bad endpoint",
    )?;
    expect_err(
        r.get_val(r.global_ptr::<u32>(bad_ep, 0)),
        &RmaError::BadEndpoint { dst: bad_ep },
        "get_val from a bad endpoint",
    )?;

    let oos = |offset, len| RmaError::OutOfSegment {
        dst: right,
        offset,
        len,
        seg_len: seg,
    };
    expect_err(
        r.put(r.global_ptr::<u8>(right, seg - 3), &[0u8; 4]),
        &oos(seg - 3, 4),
        "put past the end",
    )?;
    expect_err(
        r.get(&mut [0u8; 1], r.global_ptr::<u8>(right, seg)),
        &oos(seg, 1),
        "get at the end",
    )?;
    expect_err(
        r.put_val(r.global_ptr::<u64>(right, seg - 7), 1),
        &oos(seg - 7, 8),
        "put_val past the end",
    )?;
    expect_err(
        r.put(r.global_ptr::<u8>(right, usize::MAX - 1), &[0u8; 4]),
        &oos(usize::MAX - 1, 4),
        "offset overflow",
    )?;
    expect_err(
        r.memset(r.global_ptr::<u8>(right, 1), 0, usize::MAX),
        &oos(1, usize::MAX),
        "memset length overflow",
    )?;
    let far = r.global_ptr::<u64>(right, 0).add(usize::MAX / 4);
    if r.get_val(far).is_ok() {
        return Err("get_val at a saturated pointer succeeded".into());
    }
    // Exactly at the end is fine; zero bytes at the end too.
    r.put(r.global_ptr::<u8>(right, seg - 1), &[9u8])
        .map_err(e2s("last byte"))?;
    r.put::<u8>(r.global_ptr(right, seg), &[])
        .map_err(e2s("zero bytes at the end"))?;

    // VIS errors, each with a valid first piece that must not be written.
    let q = r.global_ptr::<u8>(right, mine);
    let junk = [0xeeu8; 64];
    expect_err(
        r.put_vector(&[(q, 8), (r.global_ptr(right, seg - 4), 8)], &junk[..16]),
        &oos(seg - 4, 8),
        "vector with a piece past the end",
    )?;
    expect_err(
        r.put_vector(&[(q, 8)], &junk[..9]),
        &RmaError::ShapeMismatch("vector pieces hold 8 elements, the local buffer 9".into()),
        "vector length mismatch",
    )?;
    let other = EpAddr::new(me, 1);
    expect_err(
        r.put_vector(&[(q, 1), (r.global_ptr(other, 0), 1)], &junk[..2]),
        &RmaError::MixedTargets {
            first: right,
            other,
        },
        "vector with two targets",
    )?;
    match r.put_indexed(&[q, q.add(8)], 4, &junk[..7]) {
        Err(RmaError::ShapeMismatch(_)) => {}
        other => return Err(format!("indexed length mismatch: {other:?}")),
    }
    // Strided: reflection running below offset 0.
    let low = r.global_ptr::<u8>(right, 2);
    let sh = Strided {
        counts: &[4],
        remote_strides: &[-1],
        local_start: 0,
        local_strides: &[1],
    };
    match r.put_strided(low, &junk[..4], sh) {
        Err(RmaError::OutOfSegment { .. }) => {}
        other => return Err(format!("strided below offset 0: {other:?}")),
    }
    let sh = Strided {
        counts: &[4, 2],
        remote_strides: &[1, 4],
        local_start: 0,
        local_strides: &[1, 4],
    };
    match r.put_strided(q, &junk[..7], sh) {
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
    ) {
        Err(RmaError::ShapeMismatch(_)) => {}
        other => return Err(format!("strides/counts mismatch: {other:?}")),
    }
    // A failed get writes nothing locally.
    let mut local = [0x11u8; 16];
    let _ = r.get_vector(&mut local, &[(q, 8), (r.global_ptr(right, seg), 8)]);
    if local != [0x11u8; 16] {
        return Err("a failed get_vector wrote the local buffer".into());
    }
    let mut back = vec![0u8; fill.len()];
    r.get(&mut back, p).map_err(e2s("get"))?;
    check_eq(&back, &fill, "target slot after failed operations")?;
    finish(&mut r)
}

/// Work of the thread driving endpoint `k` (0 or 1) in `multi_ep`: RMA into the other
/// endpoint of every rank, then a check of what every rank's thread `k` wrote there.
fn multi_ep_work<C: Conduit>(r: &mut RmaEp<C>, k: u16) -> R {
    let (me, n) = (r.rank(), r.size());
    let slot = slot_len(r).min(4096);
    let other = 1 - k;
    let len = slot - 8;
    for d in 0..n {
        let p = r.global_ptr::<u8>(EpAddr::new(d, other), me as usize * slot + 3);
        let data = bytes(seed(me, d, 500 + u64::from(k)), len);
        r.put(p, &data).map_err(e2s("put to the other endpoint"))?;
        let ev = r.get_nb(vec![0u8; len], p).map_err(e2s("get_nb"))?;
        check_eq(&r.wait(ev), &data, "round trip through the other endpoint")?;
    }
    r.barrier().map_err(e2s("barrier"))?;
    // Every thread k has written; read everybody's slot on our right neighbour.
    let d = (me + 1) % n;
    for s in 0..n {
        let p = r.global_ptr::<u8>(EpAddr::new(d, other), s as usize * slot + 3);
        let mut got = vec![0u8; len];
        r.get(&mut got, p).map_err(e2s("get"))?;
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
        let ep = client.endpoint(k).map_err(e2s("endpoint"))?;
        eps.push(RmaEp::new(ep).map_err(e2s("RmaEp::new"))?);
    }
    let results: Vec<R> = std::thread::scope(|sc| {
        let hs: Vec<_> = eps
            .into_iter()
            .enumerate()
            .map(|(k, mut r)| {
                let done = &done;
                sc.spawn(move || -> R {
                    r.barrier().map_err(e2s("barrier"))?;
                    let res = multi_ep_work(&mut r, k as u16);
                    done[k].store(true, Ordering::Release);
                    // Serve the other local endpoint's peers until it is done too,
                    // then wait (polling) for every rank's thread k.
                    let t0 = Instant::now();
                    r.wait_until(|| {
                        done[1 - k].load(Ordering::Acquire) || t0.elapsed() > CASE_WAIT
                    });
                    res?;
                    r.barrier().map_err(e2s("final barrier"))?;
                    if r.dropped_messages() != 0 {
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
