//! The atomic-domain cases of the RMA suite (see the table in [`super`]).
//!
//! # Safety
//!
//! `fetch_nbi` is `unsafe`: each call site keeps its result location alive and
//! untouched until the matching sync returns.
#![allow(unsafe_code)]

use super::cases::{e2s, finish, setup, slot_len};
use crate::conformance::CASE_WAIT;
use crate::rng::SplitMix64;
use gex_core::spi::Conduit;
use gex_core::{Client, EpAddr};
use gex_rma::{
    AtomicDomain, AtomicFlags, AtomicOp, AtomicOps, AtomicType, BarrierFlags, GlobalPtr, RmaEp,
    RmaError,
};
use std::time::Instant;

type R<T = ()> = Result<T, String>;

const NONE: AtomicFlags = AtomicFlags::empty();

/// A sequential model of one element type (written independently of gex-rma).
pub(crate) trait Model: AtomicType + Copy {
    const FLOAT: bool;
    /// The word's value after `op` with operands `a`, `b` on `o`.
    fn apply(op: AtomicOp, o: Self, a: Self, b: Self) -> Self;
    fn sample(g: &mut SplitMix64) -> Self;
    fn bits(self) -> u64;
}

macro_rules! int_model {
    ($t:ty) => {
        impl Model for $t {
            const FLOAT: bool = false;
            fn apply(op: AtomicOp, o: $t, a: $t, b: $t) -> $t {
                use AtomicOp::*;
                match op {
                    Get => o,
                    Set | Swap => a,
                    Cswap | Fcswap => {
                        if o == a {
                            b
                        } else {
                            o
                        }
                    }
                    Add | Fadd => o.wrapping_add(a),
                    Sub | Fsub => o.wrapping_sub(a),
                    Mult | Fmult => o.wrapping_mul(a),
                    Min | Fmin => o.min(a),
                    Max | Fmax => o.max(a),
                    Inc | Finc => o.wrapping_add(1),
                    Dec | Fdec => o.wrapping_sub(1),
                    And | Fand => o & a,
                    Or | For => o | a,
                    Xor | Fxor => o ^ a,
                }
            }
            fn sample(g: &mut SplitMix64) -> $t {
                let x = g.next_u64();
                match x % 5 {
                    0 => <$t>::MAX,
                    1 => <$t>::MIN,
                    2 => ((x >> 8) % 9) as $t,
                    _ => (x >> 3) as $t,
                }
            }
            fn bits(self) -> u64 {
                self as u64
            }
        }
    };
}
int_model!(i32);
int_model!(u32);
int_model!(i64);
int_model!(u64);

macro_rules! float_model {
    ($t:ty) => {
        impl Model for $t {
            const FLOAT: bool = true;
            fn apply(op: AtomicOp, o: $t, a: $t, b: $t) -> $t {
                use AtomicOp::*;
                match op {
                    Get => o,
                    Set | Swap => a,
                    Cswap | Fcswap => {
                        if o.to_bits() == a.to_bits() {
                            b
                        } else {
                            o
                        }
                    }
                    Add | Fadd => o + a,
                    Sub | Fsub => o - a,
                    Mult | Fmult => o * a,
                    Min | Fmin => {
                        if a < o {
                            a
                        } else {
                            o
                        }
                    }
                    Max | Fmax => {
                        if a > o {
                            a
                        } else {
                            o
                        }
                    }
                    Inc | Finc => o + 1.0,
                    Dec | Fdec => o - 1.0,
                    And | Fand | Or | For | Xor | Fxor => o,
                }
            }
            fn sample(g: &mut SplitMix64) -> $t {
                let x = g.next_u64();
                match x % 6 {
                    0 => -0.0,
                    1 => <$t>::INFINITY,
                    _ => ((x >> 8) % 64) as $t / 4.0 - 8.0,
                }
            }
            fn bits(self) -> u64 {
                u64::from(self.to_bits())
            }
        }
    };
}
float_model!(f32);
float_model!(f64);

fn same<T: Model>(a: T, b: T) -> bool {
    a.bits() == b.bits()
}

fn ops_for<T: Model>() -> impl Iterator<Item = AtomicOp> {
    AtomicOp::ALL
        .into_iter()
        .filter(|op| !T::FLOAT || !op.flag().intersects(AtomicOps::BITWISE))
}

fn domain_for<C: Conduit, T: Model>(r: &mut RmaEp<C>) -> R<AtomicDomain<T>> {
    let ops = if T::FLOAT {
        AtomicOps::all() - AtomicOps::BITWISE
    } else {
        AtomicOps::all()
    };
    r.atomic_domain::<T>(ops).map_err(e2s("atomic_domain"))
}

/// Every op of `T` in every completion mode on a private word at every rank, checked
/// against the model.
fn ops_one_type<C: Conduit, T: Model>(r: &mut RmaEp<C>, word: usize, name: &str) -> R {
    let (me, n) = (r.rank(), r.size());
    let slot = slot_len(r);
    let ad = domain_for::<C, T>(r)?;
    let mut g = SplitMix64::new(crate::rng::hash_words(&[u64::from(me), word as u64]));
    for d in 0..n {
        let p = r.global_ptr::<T>(EpAddr::rank(d), me as usize * slot + word);
        let mut model = T::sample(&mut g);
        ad.op(r, AtomicOp::Set, p, model, model, NONE)
            .map_err(e2s("set"))?;
        for round in 0..2 {
            for op in ops_for::<T>() {
                for mode in 0..4 {
                    let what = format!("{name} {op:?} mode {mode} round {round} on rank {d}");
                    let a = if matches!(op, AtomicOp::Cswap | AtomicOp::Fcswap) && g.up_to(1) == 0 {
                        model
                    } else {
                        T::sample(&mut g)
                    };
                    let b = T::sample(&mut g);
                    let f = AtomicFlags::from_bits_truncate(g.up_to(3) as u32);
                    let want_old = model;
                    model = T::apply(op, model, a, b);
                    let got: Option<T> = match (mode, op.is_fetching()) {
                        (0, true) => Some(ad.fetch(r, op, p, a, b, f).map_err(e2s(&what))?),
                        (0, false) => {
                            ad.op(r, op, p, a, b, f).map_err(e2s(&what))?;
                            None
                        }
                        (1, true) => {
                            let ev = ad.fetch_nb(r, op, p, a, b, f).map_err(e2s(&what))?;
                            Some(r.wait(ev))
                        }
                        (2, true) => {
                            let mut out = T::zeroed();
                            // SAFETY: `out` lives until the sync below.
                            unsafe { ad.fetch_nbi(r, op, p, a, b, f, &mut out) }
                                .map_err(e2s(&what))?;
                            r.wait_syncnbi_atomics();
                            Some(out)
                        }
                        (3, true) => {
                            let mut out = T::zeroed();
                            r.begin_nbi_accessregion().map_err(e2s(&what))?;
                            // SAFETY: `out` lives until the region's event is waited.
                            let res = unsafe { ad.fetch_nbi(r, op, p, a, b, f, &mut out) };
                            let ev = r.end_nbi_accessregion().map_err(e2s(&what))?;
                            res.map_err(e2s(&what))?;
                            r.wait(ev);
                            Some(out)
                        }
                        (1, false) => {
                            let ev = ad.op_nb(r, op, p, a, b, f).map_err(e2s(&what))?;
                            r.wait(ev);
                            None
                        }
                        _ => {
                            ad.op_nbi(r, op, p, a, b, f).map_err(e2s(&what))?;
                            if mode == 2 {
                                r.wait_syncnbi_all();
                            } else {
                                let deadline = Instant::now() + CASE_WAIT;
                                while !r.test_syncnbi_atomics() {
                                    if Instant::now() > deadline {
                                        return Err(format!("{what}: NBI atomic never completed"));
                                    }
                                }
                            }
                            None
                        }
                    };
                    if let Some(got) = got {
                        if !same(got, want_old) {
                            return Err(format!("{what}: fetched {got:?}, model {want_old:?}"));
                        }
                    }
                    let now = ad
                        .fetch(r, AtomicOp::Get, p, model, model, NONE)
                        .map_err(e2s("get"))?;
                    if !same(now, model) {
                        return Err(format!(
                            "{what} (a={a:?}, b={b:?}): word is {now:?}, model {model:?}"
                        ));
                    }
                }
            }
        }
        // A plain get (no concurrent atomics on this word) sees the same bits.
        let plain: T = r.get_val(p).map_err(e2s("plain get"))?;
        if !same(plain, model) {
            return Err(format!("{name}: plain get {plain:?} != model {model:?}"));
        }
    }
    Ok(())
}

pub(super) fn atomic_ops<C: Conduit>(client: &Client<C>) -> R {
    let mut r = setup(client)?;
    ops_one_type::<C, i32>(&mut r, 0, "i32")?;
    ops_one_type::<C, u32>(&mut r, 4, "u32")?;
    ops_one_type::<C, i64>(&mut r, 8, "i64")?;
    ops_one_type::<C, u64>(&mut r, 16, "u64")?;
    ops_one_type::<C, f32>(&mut r, 24, "f32")?;
    ops_one_type::<C, f64>(&mut r, 32, "f64")?;
    finish(&mut r)
}

// Word offsets (bytes) on the target of the concurrency case.
const W_COUNT: usize = 0; // u64 fetch-add counter
const W_DEC: usize = 8; // i32 fetch-dec counter
const W_LOCK: usize = 64; // u64 lock word
const W_PLAIN: usize = 72; // u64 protected by the lock (plain put/get)
const W_MIN: usize = 128; // i64
const W_MAX: usize = 136; // f64
const W_FSUM: usize = 144; // f64
const W_F32SUM: usize = 152; // f32
const W_OR: usize = 160; // u32
const W_AND: usize = 168; // u64
const W_XOR: usize = 176; // u32
const W_MULT: usize = 184; // u64
const W_FMULT: usize = 192; // f64
/// Fetched values of every rank, on rank 0.
const FETCHED: usize = 4096;

pub(super) fn atomic_concurrency<C: Conduit>(client: &Client<C>) -> R {
    let mut r = setup(client)?;
    let (me, n) = (r.rank(), r.size());
    let k: usize = 200;
    let iters = 40u64;
    if FETCHED + n as usize * k * 8 > r.segment().len() {
        return Err("segment too small for rma_atomic_concurrency".into());
    }
    let t = EpAddr::rank(n - 1);
    let all = AtomicOps::all();
    let u64d = r.atomic_domain::<u64>(all).map_err(e2s("domain"))?;
    let i32d = r.atomic_domain::<i32>(all).map_err(e2s("domain"))?;
    let u32d = r.atomic_domain::<u32>(all).map_err(e2s("domain"))?;
    let i64d = r
        .atomic_domain::<i64>(AtomicOps::MIN | AtomicOps::SET | AtomicOps::GET)
        .map_err(e2s("domain"))?;
    let fl = AtomicOps::all() - AtomicOps::BITWISE;
    let f64d = r.atomic_domain::<f64>(fl).map_err(e2s("domain"))?;
    let f32d = r.atomic_domain::<f32>(fl).map_err(e2s("domain"))?;
    let pu = |o: usize| GlobalPtr::<u64>::new(t, o);
    if me == 0 {
        for w in [W_COUNT, W_LOCK, W_PLAIN, W_MULT] {
            u64d.op(&mut r, AtomicOp::Set, pu(w), 0, 0, NONE)
                .map_err(e2s("init"))?;
        }
        u64d.op(&mut r, AtomicOp::Set, pu(W_MULT), 1, 0, NONE)
            .map_err(e2s("init"))?;
        u64d.op(&mut r, AtomicOp::Set, pu(W_AND), u64::MAX, 0, NONE)
            .map_err(e2s("init"))?;
        i32d.op(&mut r, AtomicOp::Set, GlobalPtr::new(t, W_DEC), 0, 0, NONE)
            .map_err(e2s("init"))?;
        u32d.op(&mut r, AtomicOp::Set, GlobalPtr::new(t, W_OR), 0, 0, NONE)
            .map_err(e2s("init"))?;
        u32d.op(&mut r, AtomicOp::Set, GlobalPtr::new(t, W_XOR), 0, 0, NONE)
            .map_err(e2s("init"))?;
        i64d.op(
            &mut r,
            AtomicOp::Set,
            GlobalPtr::new(t, W_MIN),
            i64::MAX,
            0,
            NONE,
        )
        .map_err(e2s("init"))?;
        for (w, v) in [(W_MAX, f64::NEG_INFINITY), (W_FSUM, 0.0), (W_FMULT, 1.0)] {
            f64d.op(&mut r, AtomicOp::Set, GlobalPtr::new(t, w), v, 0.0, NONE)
                .map_err(e2s("init"))?;
        }
        f32d.op(
            &mut r,
            AtomicOp::Set,
            GlobalPtr::new(t, W_F32SUM),
            0.0,
            0.0,
            NONE,
        )
        .map_err(e2s("init"))?;
    }
    r.barrier().map_err(e2s("barrier"))?;

    // 1. Everyone hammers one counter with fetch-add (blocking and NB) and fetch-dec.
    let mut fetched: Vec<u64> = Vec::with_capacity(k);
    let mut pending = Vec::new();
    for i in 0..k {
        if i % 2 == 0 {
            fetched.push(
                u64d.fetch(&mut r, AtomicOp::Fadd, pu(W_COUNT), 1, 0, NONE)
                    .map_err(e2s("fadd"))?,
            );
        } else {
            pending.push(
                u64d.fetch_nb(&mut r, AtomicOp::Fadd, pu(W_COUNT), 1, 0, NONE)
                    .map_err(e2s("fadd nb"))?,
            );
        }
        i32d.op_nbi(&mut r, AtomicOp::Dec, GlobalPtr::new(t, W_DEC), 0, 0, NONE)
            .map_err(e2s("dec nbi"))?;
    }
    for ev in pending {
        fetched.push(r.wait(ev));
    }
    r.wait_syncnbi_all();
    r.put(
        r.global_ptr::<u64>(EpAddr::rank(0), FETCHED + me as usize * k * 8),
        &fetched,
    )
    .map_err(e2s("put fetched"))?;

    // 2. A CAS lock protecting a plain counter.
    let deadline = Instant::now() + CASE_WAIT;
    for _ in 0..iters {
        loop {
            let old = u64d
                .fetch(
                    &mut r,
                    AtomicOp::Fcswap,
                    pu(W_LOCK),
                    0,
                    u64::from(me) + 1,
                    AtomicFlags::ACQUIRE,
                )
                .map_err(e2s("lock"))?;
            if old == 0 {
                break;
            }
            if old > u64::from(n) {
                return Err(format!("lock word holds {old}"));
            }
            if Instant::now() > deadline {
                return Err("could not take the CAS lock".into());
            }
            r.poll();
        }
        let v: u64 = r.get_val(pu(W_PLAIN)).map_err(e2s("get plain"))?;
        r.put_val(pu(W_PLAIN), v + 1).map_err(e2s("put plain"))?;
        u64d.op(
            &mut r,
            AtomicOp::Set,
            pu(W_LOCK),
            0,
            0,
            AtomicFlags::RELEASE,
        )
        .map_err(e2s("unlock"))?;
    }

    // 3. min/max, float sums and products, bitwise.
    let mut g = SplitMix64::new(u64::from(me) + 99);
    for _ in 0..20 {
        let v = g.next_u64() as i64 >> 4;
        i64d.op(
            &mut r,
            AtomicOp::Min,
            GlobalPtr::new(t, W_MIN),
            v.min(i64::from(me) * -1000),
            0,
            NONE,
        )
        .map_err(e2s("min"))?;
        let fv = f64::from(me) * 1.5 - (g.up_to(10) as f64);
        f64d.op(
            &mut r,
            AtomicOp::Fmax,
            GlobalPtr::new(t, W_MAX),
            fv,
            0.0,
            NONE,
        )
        .map_err(e2s("fmax"))?;
    }
    for _ in 0..k {
        f64d.op_nbi(
            &mut r,
            AtomicOp::Add,
            GlobalPtr::new(t, W_FSUM),
            0.5,
            0.0,
            NONE,
        )
        .map_err(e2s("fadd f64"))?;
        f32d.op(
            &mut r,
            AtomicOp::Fadd,
            GlobalPtr::new(t, W_F32SUM),
            0.25,
            0.0,
            NONE,
        )
        .map_err(e2s("fadd f32"))?;
    }
    r.wait_syncnbi_atomics();
    let bit = 1u32 << (me % 32);
    u32d.op(&mut r, AtomicOp::For, GlobalPtr::new(t, W_OR), bit, 0, NONE)
        .map_err(e2s("or"))?;
    for _ in 0..3 {
        u32d.op(
            &mut r,
            AtomicOp::Xor,
            GlobalPtr::new(t, W_XOR),
            bit,
            0,
            NONE,
        )
        .map_err(e2s("xor"))?;
    }
    u64d.op(&mut r, AtomicOp::Fand, pu(W_AND), !(1u64 << me), 0, NONE)
        .map_err(e2s("and"))?;
    u64d.op(&mut r, AtomicOp::Mult, pu(W_MULT), 2, 0, NONE)
        .map_err(e2s("mult"))?;
    f64d.op(
        &mut r,
        AtomicOp::Fmult,
        GlobalPtr::new(t, W_FMULT),
        3.0,
        0.0,
        NONE,
    )
    .map_err(e2s("fmult"))?;
    r.barrier().map_err(e2s("barrier"))?;

    // Every rank checks everything.
    let nk = n as usize * k;
    let mut allf = vec![0u64; nk];
    r.get(&mut allf, r.global_ptr::<u64>(EpAddr::rank(0), FETCHED))
        .map_err(e2s("get fetched"))?;
    allf.sort_unstable();
    if let Some(i) = (0..nk).find(|&i| allf[i] != i as u64) {
        return Err(format!(
            "fetched counter values are not a permutation of 0..{nk}: sorted[{i}] = {}",
            allf[i]
        ));
    }
    let get_u64 = |r: &mut RmaEp<C>, w| u64d.fetch(r, AtomicOp::Get, pu(w), 0, 0, NONE);
    let checks: Vec<(&str, u64, u64)> = vec![
        (
            "counter",
            get_u64(&mut r, W_COUNT).map_err(e2s("get"))?,
            nk as u64,
        ),
        ("lock", get_u64(&mut r, W_LOCK).map_err(e2s("get"))?, 0),
        (
            "and",
            get_u64(&mut r, W_AND).map_err(e2s("get"))?,
            !((1u64 << n) - 1),
        ),
        (
            "mult",
            get_u64(&mut r, W_MULT).map_err(e2s("get"))?,
            1u64 << n,
        ),
        (
            "locked plain counter",
            r.get_val(pu(W_PLAIN)).map_err(e2s("get"))?,
            u64::from(n) * iters,
        ),
    ];
    for (what, got, want) in checks {
        if got != want {
            return Err(format!("{what}: {got} != {want}"));
        }
    }
    let dec = i32d
        .fetch(&mut r, AtomicOp::Get, GlobalPtr::new(t, W_DEC), 0, 0, NONE)
        .map_err(e2s("get"))?;
    if dec != -(nk as i32) {
        return Err(format!("dec counter {dec} != -{nk}"));
    }
    let mask = (0..n).fold(0u32, |m, i| m | 1 << (i % 32));
    let or = u32d
        .fetch(&mut r, AtomicOp::Get, GlobalPtr::new(t, W_OR), 0, 0, NONE)
        .map_err(e2s("get"))?;
    let xor = u32d
        .fetch(&mut r, AtomicOp::Get, GlobalPtr::new(t, W_XOR), 0, 0, NONE)
        .map_err(e2s("get"))?;
    if or != mask || xor != mask {
        return Err(format!("or {or:#x} / xor {xor:#x} != {mask:#x}"));
    }
    // Min/max: recompute every rank's operands.
    let (mut want_min, mut want_max) = (i64::MAX, f64::NEG_INFINITY);
    for s in 0..n {
        let mut g = SplitMix64::new(u64::from(s) + 99);
        for _ in 0..20 {
            let v = g.next_u64() as i64 >> 4;
            want_min = want_min.min(v.min(i64::from(s) * -1000));
            want_max = want_max.max(f64::from(s) * 1.5 - (g.up_to(10) as f64));
        }
    }
    let min = i64d
        .fetch(&mut r, AtomicOp::Get, GlobalPtr::new(t, W_MIN), 0, 0, NONE)
        .map_err(e2s("get"))?;
    let get_f =
        |r: &mut RmaEp<C>, w| f64d.fetch(r, AtomicOp::Get, GlobalPtr::new(t, w), 0.0, 0.0, NONE);
    let max = get_f(&mut r, W_MAX).map_err(e2s("get"))?;
    let fsum = get_f(&mut r, W_FSUM).map_err(e2s("get"))?;
    let fmult = get_f(&mut r, W_FMULT).map_err(e2s("get"))?;
    let f32sum = f32d
        .fetch(
            &mut r,
            AtomicOp::Get,
            GlobalPtr::new(t, W_F32SUM),
            0.0,
            0.0,
            NONE,
        )
        .map_err(e2s("get"))?;
    if min != want_min || max != want_max {
        return Err(format!(
            "min {min} / max {max}, want {want_min} / {want_max}"
        ));
    }
    let three_n = (0..n).fold(1.0f64, |a, _| a * 3.0);
    if fsum != nk as f64 * 0.5 || f32sum != nk as f32 * 0.25 || fmult != three_n {
        return Err(format!(
            "float sums/product {fsum} {f32sum} {fmult}, want {} {} {three_n}",
            nk as f64 * 0.5,
            nk as f32 * 0.25
        ));
    }
    finish(&mut r)
}

fn expect<T: std::fmt::Debug>(r: Result<T, RmaError>, want: &RmaError, what: &str) -> R {
    match r {
        Err(e) if &e == want => Ok(()),
        other => Err(format!("{what}: expected Err({want:?}), got {other:?}")),
    }
}

pub(super) fn atomic_errors<C: Conduit>(client: &Client<C>) -> R {
    let mut r = setup(client)?;
    let (me, n) = (r.rank(), r.size());
    let slot = slot_len(&r);
    expect(
        r.atomic_domain::<f64>(AtomicOps::ADD | AtomicOps::XOR),
        &RmaError::BadOpSet {
            ops: AtomicOps::XOR,
        },
        "float domain with xor",
    )?;
    let ad = r
        .atomic_domain::<u64>(AtomicOps::FADD | AtomicOps::SET | AtomicOps::GET)
        .map_err(e2s("domain"))?;
    let ad32 = r
        .atomic_domain::<u32>(AtomicOps::ADD)
        .map_err(e2s("domain"))?;
    for d in 0..n {
        let dst = EpAddr::rank(d);
        let base = me as usize * slot;
        let p = r.global_ptr::<u64>(dst, base);
        ad.op(&mut r, AtomicOp::Set, p, 77, 0, NONE)
            .map_err(e2s("set"))?;
        let nd = RmaError::OpNotInDomain { op: AtomicOp::Max };
        expect(ad.op(&mut r, AtomicOp::Max, p, 1000, 0, NONE), &nd, "op")?;
        expect(
            ad.op_nb(&mut r, AtomicOp::Max, p, 1000, 0, NONE),
            &nd,
            "op_nb",
        )?;
        expect(
            ad.op_nbi(&mut r, AtomicOp::Max, p, 1000, 0, NONE),
            &nd,
            "op_nbi",
        )?;
        expect(
            ad.fetch(&mut r, AtomicOp::Fcswap, p, 77, 1, NONE),
            &RmaError::OpNotInDomain {
                op: AtomicOp::Fcswap,
            },
            "fetch",
        )?;
        expect(
            ad.fetch(&mut r, AtomicOp::Set, p, 1, 1, NONE),
            &RmaError::NotFetching { op: AtomicOp::Set },
            "fetch of set",
        )?;
        expect(
            ad.fetch_nb(&mut r, AtomicOp::Set, p, 1, 1, NONE),
            &RmaError::NotFetching { op: AtomicOp::Set },
            "fetch_nb of set",
        )?;
        for off in [base + 4, base + 1] {
            expect(
                ad.op(&mut r, AtomicOp::Fadd, GlobalPtr::new(dst, off), 1, 0, NONE),
                &RmaError::Misaligned {
                    dst,
                    offset: off,
                    align: 8,
                },
                "misaligned u64",
            )?;
        }
        expect(
            ad32.op(
                &mut r,
                AtomicOp::Add,
                GlobalPtr::new(dst, base + 2),
                1,
                0,
                NONE,
            ),
            &RmaError::Misaligned {
                dst,
                offset: base + 2,
                align: 4,
            },
            "misaligned u32",
        )?;
        let seg_len = r.segment_len_of(d).unwrap_or(0);
        for off in [seg_len, seg_len - 4, usize::MAX - 3] {
            expect(
                ad.op(&mut r, AtomicOp::Fadd, GlobalPtr::new(dst, off), 1, 0, NONE),
                &RmaError::OutOfSegment {
                    dst,
                    offset: off,
                    len: 8,
                    seg_len,
                },
                "out of segment",
            )?;
        }
        let v = ad
            .fetch(&mut r, AtomicOp::Get, p, 0, 0, NONE)
            .map_err(e2s("get"))?;
        if v != 77 {
            return Err(format!("failed atomics changed the word on rank {d}: {v}"));
        }
    }
    expect(
        ad.op(
            &mut r,
            AtomicOp::Fadd,
            GlobalPtr::new(EpAddr::rank(n), 0),
            1,
            0,
            NONE,
        ),
        &RmaError::BadRank { rank: n, size: n },
        "bad rank",
    )?;
    finish(&mut r)
}

/// Waits with `barrier_try` (bounded by [`CASE_WAIT`]).
fn try_until<C: Conduit>(r: &mut RmaEp<C>, id: u64, f: BarrierFlags) -> Result<(), RmaError> {
    let t0 = Instant::now();
    loop {
        if r.barrier_try(id, f)? {
            return Ok(());
        }
        if t0.elapsed() > CASE_WAIT {
            return Err(RmaError::ShapeMismatch(
                "barrier_try never completed".into(),
            ));
        }
    }
}

pub(super) fn barrier<C: Conduit>(client: &Client<C>) -> R {
    let mut r = setup(client)?;
    let (me, n) = (r.rank(), r.size());
    let anon = BarrierFlags::ANONYMOUS;
    let named = BarrierFlags::empty();
    // Errors of the split-phase protocol.
    expect(
        r.barrier_wait(0, anon),
        &RmaError::BarrierNotNotified,
        "wait without notify",
    )?;
    expect(
        r.barrier_try(0, anon),
        &RmaError::BarrierNotNotified,
        "try without notify",
    )?;
    r.barrier_notify(5, named).map_err(e2s("notify"))?;
    expect(
        r.barrier_notify(5, named),
        &RmaError::BarrierAlreadyNotified,
        "double notify",
    )?;
    r.barrier_wait(5, named).map_err(e2s("wait"))?;
    // Many barriers in a row, every flavour; ids vary, anonymous entries mixed in.
    for k in 0..60u64 {
        let what = format!("barrier {k}");
        match k % 5 {
            0 => r.barrier().map_err(e2s(&what))?,
            1 => {
                let ev = r.barrier_nb().map_err(e2s(&what))?;
                r.wait(ev);
            }
            2 => {
                r.barrier_notify(k, named).map_err(e2s(&what))?;
                r.barrier_wait(k, named).map_err(e2s(&what))?;
            }
            3 => {
                // Half the ranks anonymous, half named with the same id.
                let f = if me % 2 == 0 { named } else { anon };
                r.barrier_notify(k * 1000, f).map_err(e2s(&what))?;
                try_until(&mut r, k * 1000, f).map_err(e2s(&what))?;
            }
            _ => {
                r.barrier_notify(0, anon).map_err(e2s(&what))?;
                r.barrier_wait(0, anon).map_err(e2s(&what))?;
            }
        }
    }
    // Mismatch: rank 0 and the last rank name different ids (one rank: wait names
    // another id than notify); every rank must see it, with wait and with try.
    for use_try in [false, true] {
        let (nid, wid, f) = if n == 1 {
            (1, 2, named)
        } else if me == 0 {
            (1, 1, named)
        } else if me == n - 1 {
            (2, 2, named)
        } else {
            (0, 0, anon)
        };
        r.barrier_notify(nid, f).map_err(e2s("notify"))?;
        let res = if use_try {
            try_until(&mut r, wid, f)
        } else {
            r.barrier_wait(wid, f)
        };
        expect(res, &RmaError::BarrierMismatch, "mismatched ids")?;
        // The next barrier is clean again.
        r.barrier().map_err(e2s("barrier after mismatch"))?;
    }
    // Barriers with concurrent RMA traffic: puts (NBI, synced before notify) land
    // before anyone leaves the barrier; atomics between notify and wait.
    let slot = slot_len(&r);
    let ad = r
        .atomic_domain::<u64>(AtomicOps::FADD | AtomicOps::GET)
        .map_err(e2s("domain"))?;
    let counter = GlobalPtr::<u64>::new(EpAddr::rank(0), 0);
    for k in 1..=20u64 {
        for d in 0..n {
            let p = r.global_ptr::<u64>(EpAddr::rank(d), me as usize * slot + 64);
            r.put_nbi(p, &[k * 100 + u64::from(me); 4])
                .map_err(e2s("put_nbi"))?;
        }
        r.wait_syncnbi_all();
        r.barrier_notify(k, named).map_err(e2s("notify"))?;
        for _ in 0..3 {
            let _ = ad
                .fetch(&mut r, AtomicOp::Fadd, counter, 1, 0, NONE)
                .map_err(e2s("fadd"))?;
        }
        r.barrier_wait(k, named).map_err(e2s("wait"))?;
        for s in 0..n {
            let mut got = [0u64; 4];
            r.get(&mut got, r.global_ptr(r.addr(), s as usize * slot + 64))
                .map_err(e2s("get"))?;
            if got != [k * 100 + u64::from(s); 4] {
                return Err(format!("round {k}: rank {s}'s put not visible: {got:?}"));
            }
        }
        r.barrier().map_err(e2s("barrier"))?;
    }
    let c = ad
        .fetch(&mut r, AtomicOp::Get, counter, 0, 0, NONE)
        .map_err(e2s("get"))?;
    // Rank 0's word 0 is in rank 0's slot; only this case's atomics touch it.
    if c != 60 * u64::from(n) {
        return Err(format!("counter {c} != {}", 60 * n));
    }
    finish(&mut r)
}
