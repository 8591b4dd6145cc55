//! Team collectives: broadcast, collect, fcollect, alltoall(s) and the reductions.

use super::*;

/// A collective's team handle and the caller's destination and source.
#[derive(Clone, Copy)]
struct Buffers {
    team: *mut c_void,
    dst: *mut c_void,
    src: *const c_void,
}

/// Runs a collective of `team` on bytes (the broadcast inlines the same two steps:
/// [`broadcast_bytes`]).
fn coll_team<R>(
    team: *mut c_void,
    f: impl FnOnce(&mut gex_facade::OwnedEndpoint, &Team) -> Result<R, ShmemError>,
) -> Result<R, ShmemError> {
    let mut g = state::state()?;
    let (ep, t) = ep_and_team(&mut g, team)?;
    f(ep, t)
}

/// The endpoint and the team of handle `team`, borrowed apart.
///
/// The team is lent by reference next to the endpoint, not cloned: a clone of its
/// handle was two atomic read-modify-writes of a reference count on every call, a
/// third of what `shmem_broadcastmem` of 8 bytes added to gex-coll's broadcast on 2
/// PEs (2026-12-01).
///
/// # Errors
/// [`ShmemError::BadTeam`].
#[inline(always)]
fn ep_and_team(
    s: &mut state::State,
    team: *mut c_void,
) -> Result<(&mut gex_facade::OwnedEndpoint, &Team), ShmemError> {
    let state::State { ep, teams, .. } = s;
    let t = teams
        .get(team_index(team))
        .and_then(Option::as_ref)
        .ok_or(ShmemError::BadTeam)?;
    Ok((ep, &t.team))
}

/// Broadcast of `n` bytes from team rank `root`'s `src` to every member's `dst`.
///
/// Straight-line (the state held by a guard, no closure): the 8-byte broadcast on 2
/// PEs is paced by the stores of a call (docs/coll.md, *Met on 2026-12-01 by storing
/// less*), and a closure's captures and result went through the stack.
#[inline(always)]
unsafe fn broadcast_bytes(b: Buffers, n: usize, root: c_int) -> Result<c_int, ShmemError> {
    let Buffers { team, dst, src } = b;
    let mut g = state::state()?;
    let (ep, t) = ep_and_team(&mut g, team)?;
    let root = u32::try_from(root)
        .ok()
        .filter(|&r| r < t.size())
        .ok_or(ShmemError::BadPe(root))?;
    if t.rank() == root && n > 0 {
        if src.is_null() || dst.is_null() {
            return Err(ShmemError::Invalid("NULL source or destination".into()));
        }
        // SAFETY: the caller's `n` readable bytes at `src` and writable at `dst`;
        // `copy` allows them to overlap (or be the same).
        unsafe { std::ptr::copy(src.cast::<u8>(), dst.cast::<u8>(), n) };
    }
    // In place in the caller's destination (no copy, no allocation; gex-coll's
    // shared-memory path when it is in the symmetric heap): the root's holds the data.
    // SAFETY: the caller's destination.
    let d = unsafe { wr(dst, n) }?;
    ep.collective(t, Broadcast::in_place(root, d), Blocking)?;
    Ok(0)
}

/// Every member's `n` bytes, in team-rank order.
fn gather_all(
    ep: &mut gex_facade::OwnedEndpoint,
    t: &Team,
    mine: Vec<u8>,
) -> Result<Vec<u8>, ShmemError> {
    Ok(ep.collective(t, GatherAll::new(mine), Blocking)?)
}

unsafe fn fcollect_bytes(b: Buffers, n: usize) -> Result<c_int, ShmemError> {
    let Buffers { team, dst, src } = b;
    coll_team(team, |ep, t| {
        let total = bytes(n, t.size() as usize)?;
        let (a, b) = (src as usize, dst as usize);
        if n > 0 && (a.saturating_add(n) <= b || b.saturating_add(total) <= a) {
            // Disjoint: straight from the caller's source into its destination.
            // SAFETY: the caller's source and destination of `n` times the team's size
            // bytes, which do not overlap (checked).
            let (src, dst) = unsafe { (rd(src, n)?, wr(dst, total)?) };
            ep.collective(t, GatherAll::slices(src, dst), Blocking)?;
            return Ok(0);
        }
        // SAFETY: the caller's source.
        let mine = unsafe { rd(src, n) }?.to_vec();
        let all = gather_all(ep, t, mine)?;
        // SAFETY: the caller's destination of `n` times the team's size.
        unsafe { wr(dst, all.len()) }?.copy_from_slice(&all);
        Ok(0)
    })
}

unsafe fn collect_bytes(b: Buffers, n: usize) -> Result<c_int, ShmemError> {
    let Buffers { team, dst, src } = b;
    coll_team(team, |ep, t| {
        let counts = gather_all(ep, t, (n as u64).to_ne_bytes().to_vec())?;
        let counts: Vec<usize> = counts
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap_or_default()) as usize)
            .collect();
        let max = counts.iter().copied().max().unwrap_or(0);
        // SAFETY: the caller's source.
        let mut mine = unsafe { rd(src, n) }?.to_vec();
        mine.resize(max, 0);
        let all = gather_all(ep, t, mine)?;
        let total: usize = counts.iter().sum();
        // SAFETY: the caller's destination of the sum of the members' counts.
        let out = unsafe { wr(dst, total) }?;
        let mut at = 0;
        for (i, &c) in counts.iter().enumerate() {
            out[at..at + c].copy_from_slice(&all[i * max..i * max + c]);
            at += c;
        }
        Ok(0)
    })
}

/// Alltoall with strides in elements of `size` bytes (`dst_s`, `sst` = 1: contiguous).
unsafe fn alltoalls_bytes(
    b: Buffers,
    dst_s: isize,
    sst: isize,
    n: usize,
    size: usize,
) -> Result<c_int, ShmemError> {
    let Buffers { team, dst, src } = b;
    coll_team(team, |ep, t| {
        let p = t.size() as usize;
        let mut packed = Vec::with_capacity(p * n * size);
        for j in 0..p * n {
            let at = strided_at(src as isize, j as isize, sst, size);
            // SAFETY: element `j` of the caller's strided source.
            packed.extend_from_slice(unsafe { rd(at as *const c_void, size) }?);
        }
        let out: Vec<u8> = ep.collective(t, Exchange::new(packed), Blocking)?;
        for j in 0..p * n {
            let at = strided_at(dst as isize, j as isize, dst_s, size);
            // SAFETY: element `j` of the caller's strided destination.
            unsafe { wr(at as *mut c_void, size) }?.copy_from_slice(&out[j * size..(j + 1) * size]);
        }
        Ok(0)
    })
}

macro_rules! coll_family {
    ($($tn:ident $size:expr;)*) => { paste::paste! { $(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _broadcast>](team: *mut c_void, dest: *mut c_void, source: *const c_void, nelems: usize, pe_root: c_int) -> c_int {
            // SAFETY: the caller's promise (this module's).
            entry("broadcast", || unsafe { broadcast_bytes(Buffers { team, dst: dest, src: source }, bytes(nelems, $size)?, pe_root) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _collect>](team: *mut c_void, dest: *mut c_void, source: *const c_void, nelems: usize) -> c_int {
            // SAFETY: the caller's promise (this module's).
            entry("collect", || unsafe { collect_bytes(Buffers { team, dst: dest, src: source }, bytes(nelems, $size)?) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _fcollect>](team: *mut c_void, dest: *mut c_void, source: *const c_void, nelems: usize) -> c_int {
            // SAFETY: the caller's promise (this module's).
            entry("fcollect", || unsafe { fcollect_bytes(Buffers { team, dst: dest, src: source }, bytes(nelems, $size)?) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _alltoall>](team: *mut c_void, dest: *mut c_void, source: *const c_void, nelems: usize) -> c_int {
            // SAFETY: the caller's promise (this module's).
            entry("alltoall", || unsafe { alltoalls_bytes(Buffers { team, dst: dest, src: source }, 1, 1, nelems, $size) })
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _alltoalls>](team: *mut c_void, dest: *mut c_void, source: *const c_void, dst: isize, sst: isize, nelems: usize) -> c_int {
            // SAFETY: the caller's promise (this module's).
            entry("alltoalls", || unsafe { alltoalls_bytes(Buffers { team, dst: dest, src: source }, dst, sst, nelems, $size) })
        }
    )* } };
}

coll_family!(
    float 4; double 8; longdouble 16; char 1; schar 1; short 2; int 4; long 8; longlong 8;
    uchar 1; ushort 2; uint 4; ulong 8; ulonglong 8; int8 1; int16 2; int32 4; int64 8;
    uint8 1; uint16 2; uint32 4; uint64 8; size 8; ptrdiff 8;
);

/// The untyped (`mem`) forms, which count bytes: `$f(team, dest, source, $p..)` is
/// `$call(team, dest, source, $a..)` under `entry`.
macro_rules! coll_mem {
    ($($f:ident $what:literal ($($p:ident: $t:ty),*) => $call:ident($($a:expr),*);)*) => { $(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $f(team: *mut c_void, dest: *mut c_void, source: *const c_void, $($p: $t),*) -> c_int {
            // SAFETY: the caller's promise (this module's).
            entry($what, move || unsafe { $call(Buffers { team, dst: dest, src: source }, $($a),*) })
        }
    )* };
}
coll_mem! {
    shmem_broadcastmem "broadcastmem" (nelems: usize, pe_root: c_int) => broadcast_bytes(nelems, pe_root);
    shmem_collectmem "collectmem" (nelems: usize) => collect_bytes(nelems);
    shmem_fcollectmem "fcollectmem" (nelems: usize) => fcollect_bytes(nelems);
    shmem_alltoallmem "alltoallmem" (nelems: usize) => alltoalls_bytes(1, 1, nelems, 1);
    shmem_alltoallsmem "alltoallsmem" (dst: isize, sst: isize, nelems: usize) => alltoalls_bytes(dst, sst, nelems, 1);
}

// Reductions: the integer and float ones are gex-coll's allreduce with its built-in
// operators (`reduce_coll`, in the caller's buffers); the complex ones and `long
// double` gather every member's `nreduce` elements, and each member folds them in
// team-rank order (the same order everywhere, so every member gets the same result).

/// A reduction's element: read from and written to native-endian bytes.
trait Elem: Copy {
    const SIZE: usize;
    fn load(b: &[u8]) -> Self;
    fn store(self, b: &mut [u8]);
}
macro_rules! elem {
    ($($t:ty)*) => {$(
        impl Elem for $t {
            const SIZE: usize = size_of::<$t>();
            fn load(b: &[u8]) -> $t { <$t>::from_ne_bytes(b.try_into().unwrap_or_default()) }
            fn store(self, b: &mut [u8]) { b.copy_from_slice(&self.to_ne_bytes()) }
        }
    )*};
}
elem!(f32 f64);

/// A complex number of shmem.h (`float _Complex`, `double _Complex`).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Cx<F>(F, F);
macro_rules! cx_elem {
    ($($f:ty)*) => {$(
        impl Elem for Cx<$f> {
            const SIZE: usize = 2 * size_of::<$f>();
            fn load(b: &[u8]) -> Self {
                let h = size_of::<$f>();
                Cx(<$f>::load(&b[..h]), <$f>::load(&b[h..]))
            }
            fn store(self, b: &mut [u8]) {
                let h = size_of::<$f>();
                self.0.store(&mut b[..h]);
                self.1.store(&mut b[h..]);
            }
        }
        impl std::ops::Add for Cx<$f> {
            type Output = Self;
            fn add(self, o: Self) -> Self { Cx(self.0 + o.0, self.1 + o.1) }
        }
        impl std::ops::Mul for Cx<$f> {
            type Output = Self;
            fn mul(self, o: Self) -> Self { Cx(self.0 * o.0 - self.1 * o.1, self.0 * o.1 + self.1 * o.0) }
        }
    )*};
}
cx_elem!(f32 f64);

/// Reduces with `f` over `team`.
unsafe fn reduce<T: Elem>(
    team: *mut c_void,
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
    f: impl Fn(T, T) -> T,
) -> Result<c_int, ShmemError> {
    let len = bytes(n, T::SIZE)?;
    coll_team(team, |ep, t| {
        // SAFETY: the caller's source.
        let mine = unsafe { rd(src, len) }?.to_vec();
        let all = gather_all(ep, t, mine)?;
        let mut out = all[..len].to_vec();
        for m in 1..t.size() as usize {
            let other = &all[m * len..(m + 1) * len];
            for (o, x) in out
                .chunks_exact_mut(T::SIZE)
                .zip(other.chunks_exact(T::SIZE))
            {
                f(T::load(o), T::load(x)).store(o);
            }
        }
        // SAFETY: the caller's destination (may be the source: `out` is a copy).
        unsafe { wr(dst, len) }?.copy_from_slice(&out);
        Ok(0)
    })
}

/// A reduction of a C type Rust does not have (`long double`), folded by a C function
/// of shmem.h: `combine(acc, x, n)` folds `n` elements of `x` into `acc`.
pub type gexshmem_combine_t =
    Option<unsafe extern "C" fn(acc: *mut c_void, x: *const c_void, n: usize)>;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn gexshmem_reduce_with(
    team: *mut c_void,
    dest: *mut c_void,
    source: *const c_void,
    nreduce: usize,
    size: usize,
    combine: gexshmem_combine_t,
) -> c_int {
    entry("reduce", || {
        let f = combine.ok_or_else(|| ShmemError::Invalid("NULL combine".into()))?;
        let len = bytes(nreduce, size)?;
        coll_team(team, |ep, t| {
            // SAFETY: the caller's source.
            let mine = unsafe { rd(source, len) }?.to_vec();
            let all = gather_all(ep, t, mine)?;
            let mut out = all[..len].to_vec();
            for m in 1..t.size() as usize {
                // SAFETY: shmem.h's combine function reads `nreduce` elements of
                // `size` bytes from each buffer and writes the first.
                unsafe {
                    f(
                        out.as_mut_ptr().cast(),
                        all[m * len..].as_ptr().cast(),
                        nreduce,
                    )
                };
            }
            // SAFETY: the caller's destination.
            unsafe { wr(dest, len) }?.copy_from_slice(&out);
            Ok(0)
        })
    })
}

/// Reduces with gex-coll's allreduce and operator `op` over `team`: in place when
/// `dst` is `src`, from `src` into `dst` when they are disjoint (no copy, no allocation),
/// else through a copy of the source.
unsafe fn reduce_coll<T: gex_facade::coll::Elem>(
    team: *mut c_void,
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
    op: &ReduceOp<T>,
) -> Result<c_int, ShmemError> {
    let len = bytes(n, size_of::<T>())?;
    coll_team(team, |ep, t| {
        if n == 0 {
            return Ok(0);
        }
        if src.is_null() || dst.is_null() {
            return Err(ShmemError::Invalid("NULL source or destination".into()));
        }
        let (a, b) = (src as usize, dst as usize);
        let aligned = a % align_of::<T>() == 0 && b % align_of::<T>() == 0;
        if aligned && a == b {
            // SAFETY: the caller's `n` elements at `dst` (= `src`), aligned (checked);
            // every bit pattern is a `T` (`Elem: Pod`).
            let buf = unsafe { std::slice::from_raw_parts_mut(dst.cast::<T>(), n) };
            ep.collective(t, Allreduce::in_place(buf, op), Blocking)?;
        } else if aligned && (a.saturating_add(len) <= b || b.saturating_add(len) <= a) {
            // SAFETY: the caller's `n` elements at each, aligned and disjoint (checked).
            let (x, y) = unsafe {
                (
                    std::slice::from_raw_parts(src.cast::<T>(), n),
                    std::slice::from_raw_parts_mut(dst.cast::<T>(), n),
                )
            };
            ep.collective(t, Allreduce::slices(x, y, op), Blocking)?;
        } else {
            let mut buf = vec![T::zeroed(); n];
            // SAFETY: the caller's `len` readable bytes at `src`; `buf` is `len` bytes
            // of its own.
            unsafe {
                std::ptr::copy_nonoverlapping(src.cast::<u8>(), buf.as_mut_ptr().cast(), len)
            };
            ep.collective(t, Allreduce::in_place(&mut buf, op), Blocking)?;
            // SAFETY: the caller's `len` writable bytes at `dst`.
            unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr().cast::<u8>(), dst.cast(), len) };
        }
        Ok(0)
    })
}

/// The typed reductions gex-coll has operators for (every integer and float type; the
/// complex ones fold through [`reduce`]). `$make` builds the operator once per function.
macro_rules! red_coll {
    ($op:ident, $make:expr; $($tn:ident $t:ty;)*) => { paste::paste! { $(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _ $op _reduce>](team: *mut c_void, dest: *mut c_void, source: *const c_void, nreduce: usize) -> c_int {
            static OP: std::sync::OnceLock<ReduceOp<$t>> = std::sync::OnceLock::new();
            let op = OP.get_or_init(|| $make);
            // SAFETY: the caller's promise (this module's).
            entry(concat!(stringify!($op), "_reduce"), || unsafe { reduce_coll::<$t>(team, dest, source, nreduce, op) })
        }
    )* } };
}

macro_rules! red {
    ($op:ident, $f:expr; $($tn:ident $t:ty;)*) => { paste::paste! { $(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn [<shmem_ $tn _ $op _reduce>](team: *mut c_void, dest: *mut c_void, source: *const c_void, nreduce: usize) -> c_int {
            // SAFETY: the caller's promise (this module's).
            entry(concat!(stringify!($op), "_reduce"), || unsafe { reduce::<$t>(team, dest, source, nreduce, $f) })
        }
    )* } };
}
macro_rules! bit_types {
    ($m:ident, $op:ident, $f:expr) => {
        $m!($op, $f; uchar u8; ushort u16; uint u32; ulong u64; ulonglong u64; int8 i8; int16 i16;
            int32 i32; int64 i64; uint8 u8; uint16 u16; uint32 u32; uint64 u64; size usize;);
    };
}
macro_rules! cmp_types {
    ($m:ident, $op:ident, $f:expr) => {
        $m!($op, $f; char i8; schar i8; short i16; int i32; long i64; longlong i64; ptrdiff isize;
            uchar u8; ushort u16; uint u32; ulong u64; ulonglong u64; int8 i8; int16 i16; int32 i32;
            int64 i64; uint8 u8; uint16 u16; uint32 u32; uint64 u64; size usize;);
    };
}
bit_types!(red_coll, and, ReduceOp::bitwise(BitOp::Band));
bit_types!(red_coll, or, ReduceOp::bitwise(BitOp::Bor));
bit_types!(red_coll, xor, ReduceOp::bitwise(BitOp::Bxor));
cmp_types!(red_coll, max, ReduceOp::builtin(BuiltinOp::Max));
cmp_types!(red_coll, min, ReduceOp::builtin(BuiltinOp::Min));
cmp_types!(red_coll, sum, ReduceOp::builtin(BuiltinOp::Sum));
cmp_types!(red_coll, prod, ReduceOp::builtin(BuiltinOp::Prod));
red_coll!(max, ReduceOp::builtin(BuiltinOp::Max); float f32; double f64;);
red_coll!(min, ReduceOp::builtin(BuiltinOp::Min); float f32; double f64;);
red_coll!(sum, ReduceOp::builtin(BuiltinOp::Sum); float f32; double f64;);
red_coll!(prod, ReduceOp::builtin(BuiltinOp::Prod); float f32; double f64;);
red!(sum, |a: Cx<f32>, b| a + b; complexf Cx<f32>;);
red!(sum, |a: Cx<f64>, b| a + b; complexd Cx<f64>;);
red!(prod, |a: Cx<f32>, b| a * b; complexf Cx<f32>;);
red!(prod, |a: Cx<f64>, b| a * b; complexd Cx<f64>;);
