//! The atomic-domain cases of the RMA suite (see the table in [`super`]). No `unsafe`:
//! fetched values in NBI-like use land in destinations lent to a scope.

use super::cases::{Ep, barrier, e2s, finish, setup, slot_len, wait};
use crate::conformance::CASE_WAIT;
use crate::rng::SplitMix64;
use gex_core::spi::Conduit;
use gex_core::{Blocking, Client, EpAddr, Nb, Nbi};
use gex_rma::{
    AtomicDomain, AtomicFlags, AtomicOp, AtomicOps, AtomicType, GlobalPtr, NbiCategories, RmaError,
    RmaExt, ScopeRmaExt,
};
use std::time::Instant;

type R<T = ()> = Result<T, String>;

const NONE: AtomicFlags = AtomicFlags::empty();

/// A sequential model of one element type (written independently of gex-rma).
pub(crate) trait Model: AtomicType + Copy {
    const FLOAT: bool;
    /// The word's value after `op` (with its operands) on `o`.
    fn apply(op: AtomicOp<Self>, o: Self) -> Self {
        use AtomicOp::*;
        match op {
            Get => o,
            Set(a) | Swap(a) => a,
            CompareSwap { expected, new } => {
                if same(o, expected) {
                    new
                } else {
                    o
                }
            }
            _ => Self::arith(op, o),
        }
    }
    /// [`Model::apply`] of the arithmetic and bitwise operations (`Add` to `Xor`).
    fn arith(op: AtomicOp<Self>, o: Self) -> Self;
    fn sample(g: &mut SplitMix64) -> Self;
    fn bits(self) -> u64;
}

macro_rules! int_model {
    ($t:ty) => {
        impl Model for $t {
            const FLOAT: bool = false;
            fn arith(op: AtomicOp<$t>, o: $t) -> $t {
                use AtomicOp::*;
                match op {
                    Get | Set(_) | Swap(_) | CompareSwap { .. } => unreachable!("in apply"),
                    Add(a) => o.wrapping_add(a),
                    Sub(a) => o.wrapping_sub(a),
                    Mult(a) => o.wrapping_mul(a),
                    Min(a) => o.min(a),
                    Max(a) => o.max(a),
                    Inc => o.wrapping_add(1),
                    Dec => o.wrapping_sub(1),
                    And(a) => o & a,
                    Or(a) => o | a,
                    Xor(a) => o ^ a,
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
            fn arith(op: AtomicOp<$t>, o: $t) -> $t {
                use AtomicOp::*;
                match op {
                    Get | Set(_) | Swap(_) | CompareSwap { .. } => unreachable!("in apply"),
                    Add(a) => o + a,
                    Sub(a) => o - a,
                    Mult(a) => o * a,
                    Min(a) => {
                        if a < o {
                            a
                        } else {
                            o
                        }
                    }
                    Max(a) => {
                        if a > o {
                            a
                        } else {
                            o
                        }
                    }
                    Inc => o + 1.0,
                    Dec => o - 1.0,
                    And(_) | Or(_) | Xor(_) => o,
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

/// Cases of [`op_case`]: every variant of [`AtomicOp`] through both methods. That
/// is GASNet-EX's 25 operations and the three pairs only the typed API spells:
/// `atomic` of `Get` and `Swap` (performed, old value discarded) and `fetch_atomic`
/// of `Set` (a swap).
const CASES: usize = 28;

/// Case `i` with operands `a`, `b`: (fetching form, operation).
fn op_case<T: Copy>(i: usize, a: T, b: T) -> (bool, AtomicOp<T>) {
    use AtomicOp::*;
    let cs = CompareSwap {
        expected: a,
        new: b,
    };
    #[rustfmt::skip]
    let variants = [
        Get, Set(a), Swap(a), cs, Add(a), Sub(a), Mult(a), Min(a), Max(a), Inc, Dec,
        And(a), Or(a), Xor(a),
    ];
    (i % 2 == 1, variants[i / 2])
}

/// The op-set bit of `op` in its fetching form or not.
fn bit<T: Copy>(fetch: bool, op: AtomicOp<T>) -> AtomicOps {
    if fetch { op.fetch_flag() } else { op.flag() }
}

fn domain_for<C: Conduit, T: Model>(r: &mut Ep<C>) -> R<AtomicDomain<T>> {
    let ops = if T::FLOAT {
        AtomicOps::all() - AtomicOps::BITWISE
    } else {
        AtomicOps::all()
    };
    let world = r.world();
    r.atomic_domain::<T>(&world, ops)
        .map_err(e2s("atomic_domain"))
}

/// Every op of `T` in every completion mode on a private word at every rank, checked
/// against the model.
fn ops_one_type<C: Conduit, T: Model>(r: &mut Ep<C>, word: usize, name: &str) -> R {
    let (me, n) = (r.rank(), r.size());
    let slot = slot_len(r);
    let ad = domain_for::<C, T>(r)?;
    let mut g = SplitMix64::new(crate::rng::hash_words(&[u64::from(me), word as u64]));
    for d in 0..n {
        let p = GlobalPtr::<T>::new(EpAddr::rank(d), me as usize * slot + word);
        let mut model = T::sample(&mut g);
        r.atomic(&ad, p, AtomicOp::Set(model), NONE, Blocking)
            .map_err(e2s("set"))?;
        for round in 0..2 {
            for case in 0..CASES {
                let (fetch, op) = op_case(case, model, model);
                if T::FLOAT && bit(fetch, op).intersects(AtomicOps::BITWISE) {
                    continue;
                }
                for mode in 0..5 {
                    let (mut a, b) = (T::sample(&mut g), T::sample(&mut g));
                    let cs = matches!(op_case(case, a, b).1, AtomicOp::CompareSwap { .. });
                    if cs && g.up_to(1) == 0 {
                        a = model;
                    }
                    let (fetch, op) = op_case(case, a, b);
                    let what = format!(
                        "{name} {op:?} (fetch {fetch}) mode {mode} round {round} on rank {d}"
                    );
                    let f = AtomicFlags::from_bits_truncate(g.up_to(3) as u32);
                    let want_old = model;
                    model = T::apply(op, model);
                    let got: Option<T> = match (mode, fetch) {
                        (0, true) => Some(
                            r.fetch_atomic(&ad, p, op, f, Blocking)
                                .map_err(e2s(&what))?,
                        ),
                        (0, false) => {
                            r.atomic(&ad, p, op, f, Blocking).map_err(e2s(&what))?;
                            None
                        }
                        (1, true) => {
                            let ev = r.fetch_atomic(&ad, p, op, f, Nb).map_err(e2s(&what))?;
                            Some(wait(r, ev, &what)?)
                        }
                        (2, true) => {
                            // Into a destination lent to a scope, synced inside it.
                            let mut out = T::zeroed();
                            r.scope(|s| {
                                s.fetch_into(&ad, p, op, f, &mut out)?;
                                s.sync::<RmaError>()
                            })
                            .map_err(e2s(&what))?;
                            Some(out)
                        }
                        (3, true) => {
                            // Completed by the end of the scope (GASNet-EX's access region).
                            let mut out = T::zeroed();
                            r.scope(|s| s.fetch_into(&ad, p, op, f, &mut out))
                                .map_err(e2s(&what))?;
                            Some(out)
                        }
                        (4, true) => {
                            // Implicit event: the value is discarded, the word changes.
                            r.fetch_atomic(&ad, p, op, f, Nbi).map_err(e2s(&what))?;
                            r.sync_nbi(NbiCategories::ATOMICS).map_err(e2s(&what))?;
                            None
                        }
                        (1, false) => {
                            let ev = r.atomic(&ad, p, op, f, Nb).map_err(e2s(&what))?;
                            wait(r, ev, &what)?;
                            None
                        }
                        _ => {
                            r.atomic(&ad, p, op, f, Nbi).map_err(e2s(&what))?;
                            if mode == 2 {
                                r.sync_nbi(NbiCategories::ALL).map_err(e2s(&what))?;
                            } else if mode == 4 {
                                r.sync_nbi(NbiCategories::ATOMICS).map_err(e2s(&what))?;
                            } else {
                                let deadline = Instant::now() + CASE_WAIT;
                                while !r.test_nbi(NbiCategories::ATOMICS).map_err(e2s(&what))? {
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
                    let now = r
                        .fetch_atomic(&ad, p, AtomicOp::Get, NONE, Blocking)
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
        let plain: T = r.get_val(p, Blocking).map_err(e2s("plain get"))?;
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
    let d = Words::new(&mut r)?;
    if me == 0 {
        init_words(&mut r, &d)?;
    }
    barrier(&mut r)?;
    hammer(&mut r, &d, k)?;
    cas_lock(&mut r, &d, iters)?;
    mixed_ops(&mut r, &d, k)?;
    barrier(&mut r)?;
    check_all(&mut r, &d, k, iters)?;
    finish(&mut r)
}

/// The atomic domains of [`atomic_concurrency`] over the world, and the rank whose
/// segment holds the words (the last).
struct Words {
    t: EpAddr,
    u64d: AtomicDomain<u64>,
    i32d: AtomicDomain<i32>,
    u32d: AtomicDomain<u32>,
    i64d: AtomicDomain<i64>,
    f64d: AtomicDomain<f64>,
    f32d: AtomicDomain<f32>,
}

impl Words {
    fn new<C: Conduit>(r: &mut Ep<C>) -> R<Words> {
        let t = EpAddr::rank(r.size() - 1);
        let all = AtomicOps::all();
        let w = r.world();
        let u64d = r.atomic_domain::<u64>(&w, all).map_err(e2s("domain"))?;
        let i32d = r.atomic_domain::<i32>(&w, all).map_err(e2s("domain"))?;
        let u32d = r.atomic_domain::<u32>(&w, all).map_err(e2s("domain"))?;
        let i64d = r
            .atomic_domain::<i64>(&w, AtomicOps::MIN | AtomicOps::SET | AtomicOps::GET)
            .map_err(e2s("domain"))?;
        let fl = AtomicOps::all() - AtomicOps::BITWISE;
        let f64d = r.atomic_domain::<f64>(&w, fl).map_err(e2s("domain"))?;
        let f32d = r.atomic_domain::<f32>(&w, fl).map_err(e2s("domain"))?;
        Ok(Words {
            t,
            u64d,
            i32d,
            u32d,
            i64d,
            f64d,
            f32d,
        })
    }

    /// The word at offset `o` of the target's segment.
    fn at<T: AtomicType>(&self, o: usize) -> GlobalPtr<T> {
        GlobalPtr::new(self.t, o)
    }
}

/// A blocking, unflagged atomic `op` on `p` of domain `ad`; an error is named `what`.
fn blocking<C: Conduit, T: AtomicType>(
    r: &mut Ep<C>,
    ad: &AtomicDomain<T>,
    p: GlobalPtr<T>,
    op: AtomicOp<T>,
    what: &str,
) -> R {
    r.atomic(ad, p, op, NONE, Blocking).map_err(e2s(what))
}

/// The value of the word `p` of domain `ad`, by a blocking fetching get.
fn get_word<C: Conduit, T: AtomicType>(
    r: &mut Ep<C>,
    ad: &AtomicDomain<T>,
    p: GlobalPtr<T>,
) -> R<T> {
    r.fetch_atomic(ad, p, AtomicOp::Get, NONE, Blocking)
        .map_err(e2s("get"))
}

/// Rank 0 sets every word to its starting value.
fn init_words<C: Conduit>(r: &mut Ep<C>, d: &Words) -> R {
    let u64s = [
        (W_COUNT, 0),
        (W_LOCK, 0),
        (W_PLAIN, 0),
        (W_MULT, 1),
        (W_AND, u64::MAX),
    ];
    for (w, v) in u64s {
        blocking(r, &d.u64d, d.at(w), AtomicOp::Set(v), "init u64")?;
    }
    blocking(r, &d.i32d, d.at(W_DEC), AtomicOp::Set(0), "init i32")?;
    for w in [W_OR, W_XOR] {
        blocking(r, &d.u32d, d.at(w), AtomicOp::Set(0), "init u32")?;
    }
    blocking(r, &d.i64d, d.at(W_MIN), AtomicOp::Set(i64::MAX), "init i64")?;
    for (w, v) in [(W_MAX, f64::NEG_INFINITY), (W_FSUM, 0.0), (W_FMULT, 1.0)] {
        blocking(r, &d.f64d, d.at(w), AtomicOp::Set(v), "init f64")?;
    }
    blocking(r, &d.f32d, d.at(W_F32SUM), AtomicOp::Set(0.0), "init f32")
}

/// Phase 1: everyone hammers one counter with fetch-add (blocking and NB) and fetch-dec, and
/// puts the values it fetched on rank 0.
fn hammer<C: Conduit>(r: &mut Ep<C>, d: &Words, k: usize) -> R {
    let me = r.rank();
    let mut fetched: Vec<u64> = Vec::with_capacity(k);
    let mut pending = Vec::new();
    let count = d.at::<u64>(W_COUNT);
    for i in 0..k {
        if i % 2 == 0 {
            fetched.push(
                r.fetch_atomic(&d.u64d, count, AtomicOp::Add(1), NONE, Blocking)
                    .map_err(e2s("fadd"))?,
            );
        } else {
            pending.push(
                r.fetch_atomic(&d.u64d, count, AtomicOp::Add(1), NONE, Nb)
                    .map_err(e2s("fadd nb"))?,
            );
        }
        r.atomic(&d.i32d, d.at(W_DEC), AtomicOp::Dec, NONE, Nbi)
            .map_err(e2s("dec nbi"))?;
    }
    for ev in pending {
        fetched.push(wait(r, ev, "fadd Nb")?);
    }
    r.sync_nbi(NbiCategories::ALL).map_err(e2s("sync"))?;
    r.put(
        GlobalPtr::<u64>::new(EpAddr::rank(0), FETCHED + me as usize * k * 8),
        &fetched,
        Blocking,
    )
    .map_err(e2s("put fetched"))?;
    Ok(())
}

/// Phase 2: a CAS lock protecting a plain counter, taken `iters` times.
fn cas_lock<C: Conduit>(r: &mut Ep<C>, d: &Words, iters: u64) -> R {
    let (me, n) = (r.rank(), r.size());
    let deadline = Instant::now() + CASE_WAIT;
    let (lock, plain) = (d.at::<u64>(W_LOCK), d.at::<u64>(W_PLAIN));
    let take = AtomicOp::CompareSwap {
        expected: 0,
        new: u64::from(me) + 1,
    };
    for _ in 0..iters {
        loop {
            let old = r
                .fetch_atomic(&d.u64d, lock, take, AtomicFlags::ACQUIRE, Blocking)
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
        let v: u64 = r.get_val(plain, Blocking).map_err(e2s("get plain"))?;
        r.put_val(plain, v + 1, Blocking)
            .map_err(e2s("put plain"))?;
        r.atomic(
            &d.u64d,
            lock,
            AtomicOp::Set(0),
            AtomicFlags::RELEASE,
            Blocking,
        )
        .map_err(e2s("unlock"))?;
    }
    Ok(())
}

/// Phase 3: min/max, float sums and products, bitwise.
fn mixed_ops<C: Conduit>(r: &mut Ep<C>, d: &Words, k: usize) -> R {
    let me = r.rank();
    let mut g = SplitMix64::new(u64::from(me) + 99);
    for _ in 0..20 {
        let v = g.next_u64() as i64 >> 4;
        let min = AtomicOp::Min(v.min(i64::from(me) * -1000));
        blocking(r, &d.i64d, d.at(W_MIN), min, "min")?;
        let fv = f64::from(me) * 1.5 - (g.up_to(10) as f64);
        blocking(r, &d.f64d, d.at(W_MAX), AtomicOp::Max(fv), "fmax")?;
    }
    for _ in 0..k {
        r.atomic(&d.f64d, d.at(W_FSUM), AtomicOp::Add(0.5), NONE, Nbi)
            .map_err(e2s("fadd f64"))?;
        blocking(r, &d.f32d, d.at(W_F32SUM), AtomicOp::Add(0.25), "fadd f32")?;
    }
    r.sync_nbi(NbiCategories::ATOMICS)
        .map_err(e2s("sync atomics"))?;
    let bit = 1u32 << (me % 32);
    blocking(r, &d.u32d, d.at(W_OR), AtomicOp::Or(bit), "or")?;
    for _ in 0..3 {
        blocking(r, &d.u32d, d.at(W_XOR), AtomicOp::Xor(bit), "xor")?;
    }
    let and = AtomicOp::And(!(1u64 << me));
    blocking(r, &d.u64d, d.at(W_AND), and, "and")?;
    blocking(r, &d.u64d, d.at(W_MULT), AtomicOp::Mult(2), "mult")?;
    blocking(r, &d.f64d, d.at(W_FMULT), AtomicOp::Mult(3.0), "fmult")
}

/// The end: every rank checks everything.
fn check_all<C: Conduit>(r: &mut Ep<C>, d: &Words, k: usize, iters: u64) -> R {
    let n = r.size();
    let nk = n as usize * k;
    let mut allf = vec![0u64; nk];
    r.get(
        &mut allf,
        GlobalPtr::<u64>::new(EpAddr::rank(0), FETCHED),
        Blocking,
    )
    .map_err(e2s("get fetched"))?;
    allf.sort_unstable();
    if let Some(i) = (0..nk).find(|&i| allf[i] != i as u64) {
        return Err(format!(
            "fetched counter values are not a permutation of 0..{nk}: sorted[{i}] = {}",
            allf[i]
        ));
    }
    let checks: Vec<(&str, u64, u64)> = vec![
        ("counter", get_word(r, &d.u64d, d.at(W_COUNT))?, nk as u64),
        ("lock", get_word(r, &d.u64d, d.at(W_LOCK))?, 0),
        (
            "and",
            get_word(r, &d.u64d, d.at(W_AND))?,
            !((1u64 << n) - 1),
        ),
        ("mult", get_word(r, &d.u64d, d.at(W_MULT))?, 1u64 << n),
        (
            "locked plain counter",
            r.get_val(d.at(W_PLAIN), Blocking).map_err(e2s("get"))?,
            u64::from(n) * iters,
        ),
    ];
    for (what, got, want) in checks {
        if got != want {
            return Err(format!("{what}: {got} != {want}"));
        }
    }
    let dec = get_word(r, &d.i32d, d.at(W_DEC))?;
    if dec != -(nk as i32) {
        return Err(format!("dec counter {dec} != -{nk}"));
    }
    let mask = (0..n).fold(0u32, |m, i| m | 1 << (i % 32));
    let or = get_word(r, &d.u32d, d.at(W_OR))?;
    let xor = get_word(r, &d.u32d, d.at(W_XOR))?;
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
    let min = get_word(r, &d.i64d, d.at(W_MIN))?;
    let max = get_word(r, &d.f64d, d.at(W_MAX))?;
    let fsum = get_word(r, &d.f64d, d.at(W_FSUM))?;
    let fmult = get_word(r, &d.f64d, d.at(W_FMULT))?;
    let f32sum = get_word(r, &d.f32d, d.at(W_F32SUM))?;
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
    Ok(())
}

/// A blocking fetch-add of 1 on `p` of domain `ad` (the probe of the refusal cases).
fn fadd1<C: Conduit>(
    r: &mut Ep<C>,
    ad: &AtomicDomain<u64>,
    p: GlobalPtr<u64>,
) -> Result<u64, RmaError> {
    r.fetch_atomic(ad, p, AtomicOp::Add(1), NONE, Blocking)
}

fn expect<T: std::fmt::Debug>(r: Result<T, RmaError>, want: &RmaError, what: &str) -> R {
    match r {
        Err(e) if &e == want => Ok(()),
        other => Err(format!("{what}: expected Err({want:?}), got {other:?}")),
    }
}

/// Atomic domains refused: a float domain with a bitwise operation, and (collective)
/// members asking for different operation sets or element types.
fn domain_errors<C: Conduit>(r: &mut Ep<C>) -> R {
    let (me, n) = (r.rank(), r.size());
    let w = r.world();
    expect(
        r.atomic_domain::<f64>(&w, AtomicOps::ADD | AtomicOps::XOR),
        &RmaError::BadOpSet {
            ops: AtomicOps::XOR,
        },
        "float domain with xor",
    )?;
    // Domains are collective with an agreed op set: members asking for different sets
    // all get an error naming the ranks that differ from rank 0 (none with one rank).
    let ops = if me == 0 {
        AtomicOps::FADD
    } else {
        AtomicOps::FADD | AtomicOps::GET
    };
    let mixed = r.atomic_domain::<u64>(&w, ops).map(|_| ());
    if n == 1 {
        mixed.map_err(e2s("one-rank domain"))?;
    } else {
        expect(
            mixed,
            &RmaError::DomainMismatch {
                ranks: (1..n).collect(),
            },
            "members asking for different op sets",
        )?;
    }
    // Different types are a mismatch too.
    let typed = if me == n - 1 {
        r.atomic_domain::<i64>(&w, AtomicOps::FADD).map(|_| ())
    } else {
        r.atomic_domain::<u64>(&w, AtomicOps::FADD).map(|_| ())
    };
    if n > 1 {
        expect(
            typed,
            &RmaError::DomainMismatch { ranks: vec![n - 1] },
            "members asking for different types",
        )?;
    }
    Ok(())
}

/// Operations on the word at `base` of `dst`'s segment (it holds 77) refused by the
/// domains `ad` (u64: fetch-add, set, get) and `ad32` (u32: add): operations outside
/// the domain in every mode, misaligned words, words out of the segment.
fn word_errors<C: Conduit>(
    r: &mut Ep<C>,
    ad: &AtomicDomain<u64>,
    ad32: &AtomicDomain<u32>,
    dst: EpAddr,
    base: usize,
) -> R {
    let p = GlobalPtr::<u64>::new(dst, base);
    let nd = RmaError::OpNotInDomain { op: AtomicOps::MAX };
    expect(
        r.atomic(ad, p, AtomicOp::Max(1000), NONE, Blocking),
        &nd,
        "op",
    )?;
    expect(r.atomic(ad, p, AtomicOp::Max(1000), NONE, Nb), &nd, "op_nb")?;
    expect(
        r.atomic(ad, p, AtomicOp::Max(1000), NONE, Nbi),
        &nd,
        "op_nbi",
    )?;
    expect(
        r.fetch_atomic(
            ad,
            p,
            AtomicOp::CompareSwap {
                expected: 77,
                new: 1,
            },
            NONE,
            Blocking,
        ),
        &RmaError::OpNotInDomain {
            op: AtomicOps::FCSWAP,
        },
        "fetch",
    )?;
    // A fetching set is a swap: the domain has the set, not the swap.
    let swap = RmaError::OpNotInDomain {
        op: AtomicOps::SWAP,
    };
    expect(
        r.fetch_atomic(ad, p, AtomicOp::Set(1), NONE, Blocking),
        &swap,
        "fetch of set",
    )?;
    expect(
        r.fetch_atomic(ad, p, AtomicOp::Set(1), NONE, Nb),
        &swap,
        "fetch_nb of set",
    )?;
    expect(
        r.atomic(ad, p, AtomicOp::Add(1), NONE, Blocking),
        &RmaError::OpNotInDomain { op: AtomicOps::ADD },
        "the non-fetching add (the fetching one is in the domain)",
    )?;
    for off in [base + 4, base + 1] {
        expect(
            fadd1(r, ad, GlobalPtr::new(dst, off)),
            &RmaError::Misaligned {
                dst,
                offset: off,
                align: 8,
            },
            "misaligned u64",
        )?;
    }
    expect(
        r.atomic(
            ad32,
            GlobalPtr::new(dst, base + 2),
            AtomicOp::Add(1),
            NONE,
            Blocking,
        ),
        &RmaError::Misaligned {
            dst,
            offset: base + 2,
            align: 4,
        },
        "misaligned u32",
    )?;
    let seg_len = r.segment_len_of(dst.rank).unwrap_or(0);
    for off in [seg_len, seg_len - 4, usize::MAX - 3] {
        expect(
            fadd1(r, ad, GlobalPtr::new(dst, off)),
            &RmaError::OutOfSegment {
                dst,
                offset: off,
                len: 8,
                seg_len,
            },
            "out of segment",
        )?;
    }
    Ok(())
}

pub(super) fn atomic_errors<C: Conduit>(client: &Client<C>) -> R {
    let mut r = setup(client)?;
    let (me, n) = (r.rank(), r.size());
    let slot = slot_len(&r);
    let w = r.world();
    domain_errors(&mut r)?;
    let ad = r
        .atomic_domain::<u64>(&w, AtomicOps::FADD | AtomicOps::SET | AtomicOps::GET)
        .map_err(e2s("domain"))?;
    let ad32 = r
        .atomic_domain::<u32>(&w, AtomicOps::ADD)
        .map_err(e2s("domain"))?;
    if r.endpoints_of(me).unwrap_or(1) > 1 {
        // The world team of endpoint 0 has no endpoint 1.
        let other = GlobalPtr::<u64>::new(EpAddr::new(me, 1), 0);
        expect(
            fadd1(&mut r, &ad, other),
            &RmaError::NotInTeam { dst: other.addr() },
            "a word outside the domain's team",
        )?;
    }
    for d in 0..n {
        let dst = EpAddr::rank(d);
        let base = me as usize * slot;
        let p = GlobalPtr::<u64>::new(dst, base);
        blocking(&mut r, &ad, p, AtomicOp::Set(77), "set")?;
        word_errors(&mut r, &ad, &ad32, dst, base)?;
        let v = get_word(&mut r, &ad, p)?;
        if v != 77 {
            return Err(format!("failed atomics changed the word on rank {d}: {v}"));
        }
    }
    expect(
        fadd1(&mut r, &ad, GlobalPtr::new(EpAddr::rank(n), 0)),
        &RmaError::BadRank { rank: n, size: n },
        "bad rank",
    )?;
    finish(&mut r)
}

/// RMA completion around barriers: implicit-event puts synced before a barrier are
/// visible to every rank after it, and atomics issued between two barriers are all
/// counted. (The barrier itself, with its split-phase, named, anonymous and mismatch
/// forms, belongs to the collectives layer and is tested there.)
pub(super) fn barrier_visibility<C: Conduit>(client: &Client<C>) -> R {
    let mut r = setup(client)?;
    let (me, n) = (r.rank(), r.size());
    let slot = slot_len(&r);
    let w = r.world();
    let ad = r
        .atomic_domain::<u64>(&w, AtomicOps::FADD | AtomicOps::GET)
        .map_err(e2s("domain"))?;
    let counter = GlobalPtr::<u64>::new(EpAddr::rank(0), 0);
    for k in 1..=20u64 {
        for d in 0..n {
            let p = GlobalPtr::<u64>::new(EpAddr::rank(d), me as usize * slot + 64);
            r.put(p, &[k * 100 + u64::from(me); 4], Nbi)
                .map_err(e2s("put Nbi"))?;
        }
        r.sync_nbi(NbiCategories::ALL).map_err(e2s("sync"))?;
        for _ in 0..3 {
            let _ = r
                .fetch_atomic(&ad, counter, AtomicOp::Add(1), NONE, Blocking)
                .map_err(e2s("fadd"))?;
        }
        barrier(&mut r)?;
        for s in 0..n {
            let mut got = [0u64; 4];
            r.get(
                &mut got,
                GlobalPtr::new(r.addr(), s as usize * slot + 64),
                Blocking,
            )
            .map_err(e2s("get"))?;
            if got != [k * 100 + u64::from(s); 4] {
                return Err(format!("round {k}: rank {s}'s put not visible: {got:?}"));
            }
        }
        barrier(&mut r)?;
    }
    let c = r
        .fetch_atomic(&ad, counter, AtomicOp::Get, NONE, Blocking)
        .map_err(e2s("get"))?;
    // Rank 0's word 0 is in rank 0's slot; only this case's atomics touch it.
    if c != 60 * u64::from(n) {
        return Err(format!("counter {c} != {}", 60 * n));
    }
    finish(&mut r)
}
