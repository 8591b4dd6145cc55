//! Sequential reference of every collective, shared by the tests.
#![allow(dead_code, unreachable_pub)]

use gex_coll::{
    Allreduce, Barrier, BitOp, Broadcast, BuiltinOp, ByKind, CollError, CollExt, Elem, Exchange,
    Exscan, Gather, GatherAll, InSegments, OpKind, Opts, Reduce, ReduceFn, ReduceOp, ReduceScatter,
    Scan, Scatter, Single, SyncMode, Team,
};
use gex_core::spi::Conduit;
use gex_core::{Blocking, Endpoint, Nb};

/// Jobs (`gex::Job` with output `()`) of the multi-process and thread-rank tests, each
/// with its docs: `$body` runs with endpoint 0 of the client as `$c`, which is then
/// closed before the client is finalised.
#[allow(unused_macros)]
macro_rules! endpoint_jobs {
    ($( $(#[$m:meta])* struct $name:ident |$c:ident| $body:block )*) => {$(
        $(#[$m])*
        struct $name;

        impl gex::Job for $name {
            type Output = ();
            fn run<C: gex::spi::Conduit>(self, client: gex_core::Client<C>) {
                let mut $c = client.endpoint(0).unwrap();
                $body
                drop($c);
                client.finalize().unwrap();
            }
        }
    )*};
}

/// A client builder with the RMA and collectives layers.
pub fn layers() -> gex_core::ClientBuilder<(((), gex_rma::Rma), gex_coll::Coll)> {
    gex_core::ClientBuilder::new()
        .layer::<gex_rma::Rma>()
        .layer::<gex_coll::Coll>()
}

/// One call of `op` (a broadcast or a gather_all) in single address mode by the
/// algorithm `alg` with the entry and exit sync modes `sync`, `count` elements of `T` a
/// block from team rank `root`: every member's input (`bytes` of `salt`) at offset 0
/// of its segment, its output at `dst[rank]` (filled with 0xEE first). Checks this
/// member's output against the reference; false if the algorithm cannot run the call.
pub fn single_mode_call<C: Conduit, T: Elem>(
    c: &mut Endpoint<C>,
    w: &Team,
    (op, alg, sync): (OpKind, &str, (SyncMode, SyncMode)),
    (root, count): (u32, usize),
    dst: &[usize],
    salt: u64,
) -> bool {
    let (p, me) = (w.size() as usize, w.rank() as usize);
    let n = count * size_of::<T>();
    let inputs: Vec<Vec<u8>> = (0..p).map(|r| bytes(r, salt, n)).collect();
    c.segment().write(0, &inputs[me]).unwrap();
    c.segment().write(dst[me], &vec![0xEE; p * n]).unwrap();
    c.barrier(w).unwrap();
    let addrs = Single {
        src: Some(vec![0; p]),
        dst: dst.to_vec(),
    };
    let opts = Opts::sync(sync.0, sync.1).with_algorithm(alg);
    let d = InSegments::<T>::new(op, count, addrs).root(root).opts(opts);
    let h = match c.collective(w, d, Nb) {
        Err(CollError::Unsupported { .. }) => return false,
        r => r.unwrap(),
    };
    c.wait(h).unwrap();
    let want = reference_of(me, op, root as usize, n, &inputs, None);
    let mut got = vec![0u8; want.len()];
    c.segment().read(dst[me], &mut got).unwrap();
    assert_eq!(
        got, want,
        "{op} {alg} in={:?} out={:?} count={count}",
        sync.0, sync.1
    );
    c.barrier(w).unwrap();
    true
}

/// Runs `f` on `p` thread ranks of the simulated fabric `cfg`, a client with the
/// layers of [`layers`] and a `seg`-byte segment on each: `f` gets endpoint 0 and its
/// world team, and the results come back in rank order.
pub fn on_sim<R: Send>(
    p: u32,
    cfg: gex_testkit::sim::SimConfig,
    seg: usize,
    f: impl Fn(gex_core::OwnedEndpoint<gex_testkit::sim::Sim>, Team) -> R + Send + Sync,
) -> Vec<R> {
    gex_testkit::sim::run_sim(
        p,
        cfg,
        || layers().segment_size(seg),
        |client| {
            let c = client.endpoint(0).unwrap();
            let w = c.world().clone();
            f(c, w)
        },
    )
}

/// The schedules of every rank of a team of `p` for `op` by `a`: root 0, blocks of
/// `n` elements of `elem` bytes, a commutative reduction.
pub fn plan_all(
    a: &dyn gex_coll::Algorithm,
    op: OpKind,
    p: u32,
    n: usize,
    elem: usize,
) -> Vec<gex_coll::sched::Schedule> {
    let ctx = gex_coll::PlanCtx {
        op,
        size: p,
        rank: 0,
        root: 0,
        block: n,
        elem,
        commutative: true,
    };
    plan_each(a, ctx)
}

/// The schedules of every rank `0..ctx.size` by `a`, `ctx` but for the rank.
pub fn plan_each(
    a: &dyn gex_coll::Algorithm,
    ctx: gex_coll::PlanCtx,
) -> Vec<gex_coll::sched::Schedule> {
    (0..ctx.size)
        .map(|rank| a.plan(&gex_coll::PlanCtx { rank, ..ctx }))
        .collect()
}

/// Expected output of every rank for `op` on `inputs` (bytes per rank), blocks of `n`
/// bytes, reduction `f` combining in rank order.
pub fn reference(
    op: OpKind,
    root: usize,
    n: usize,
    inputs: &[Vec<u8>],
    f: Option<&ReduceFn>,
) -> Vec<Vec<u8>> {
    (0..inputs.len())
        .map(|i| reference_of(i, op, root, n, inputs, f))
        .collect()
}

/// [`reference`] of rank `i` alone (a rank checking its own result computes only its
/// own: the whole table costs `P` times as much, which in a debug build was most of
/// the multi-process matrices' time).
pub fn reference_of(
    i: usize,
    op: OpKind,
    root: usize,
    n: usize,
    inputs: &[Vec<u8>],
    f: Option<&ReduceFn>,
) -> Vec<u8> {
    let p = inputs.len();
    let block = |r: usize, b: usize| &inputs[r][b * n..(b + 1) * n];
    // Folds blocks `b` of ranks `rs` in rank order.
    let fold = |rs: std::ops::Range<usize>, b: usize| -> Vec<u8> {
        let mut acc: Option<Vec<u8>> = None;
        for r in rs {
            match &mut acc {
                None => acc = Some(block(r, b).to_vec()),
                Some(a) => (f.expect("reduction"))(a, block(r, b), false),
            }
        }
        acc.unwrap_or_default()
    };
    match op {
        OpKind::Barrier => vec![],
        OpKind::Broadcast => inputs[root][..n].to_vec(),
        OpKind::Scatter => block(root, i).to_vec(),
        OpKind::Gather if i == root => (0..p).flat_map(|r| block(r, 0).to_vec()).collect(),
        OpKind::Gather => vec![],
        OpKind::GatherAll => (0..p).flat_map(|r| block(r, 0).to_vec()).collect(),
        OpKind::Exchange => (0..p).flat_map(|r| block(r, i).to_vec()).collect(),
        OpKind::Reduce if i == root => fold(0..p, 0),
        OpKind::Reduce => vec![],
        OpKind::Allreduce => fold(0..p, 0),
        OpKind::ReduceScatter => fold(0..p, i),
        OpKind::Scan => fold(0..i + 1, 0),
        OpKind::Exscan if i == 0 => vec![],
        OpKind::Exscan => fold(0..i, 0),
    }
}

/// 2x2 matrix product with wrapping arithmetic: associative, not commutative.
pub fn matmul(a: &[u64; 4], b: &[u64; 4]) -> [u64; 4] {
    let m = |x: u64, y: u64| x.wrapping_mul(y);
    [
        m(a[0], b[0]).wrapping_add(m(a[1], b[2])),
        m(a[0], b[1]).wrapping_add(m(a[1], b[3])),
        m(a[2], b[0]).wrapping_add(m(a[3], b[2])),
        m(a[2], b[1]).wrapping_add(m(a[3], b[3])),
    ]
}

/// Deterministic pseudo-random bytes for (rank, salt).
pub fn bytes(rank: usize, salt: u64, len: usize) -> Vec<u8> {
    let mut x = (rank as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ salt.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    // Eight bytes per step of the generator, collected as words and cast once (a
    // byte per step, or a slice copy per step, made input generation a large share
    // of the debug-build tests' time).
    let words: Vec<u64> = (0..len.div_ceil(8))
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        })
        .collect();
    let mut v: Vec<u8> = bytemuck::cast_slice(&words).to_vec();
    v.truncate(len);
    v
}

/// Affine maps x -> m·x + c (mod 2^32) packed as (m << 32 | c); composition in rank
/// order is associative and not commutative.
pub fn affine() -> ReduceOp<u64> {
    ReduceOp::user(false, |a: &u64, b: &u64| {
        let (m1, c1) = ((a >> 32) as u32, *a as u32);
        let (m2, c2) = ((b >> 32) as u32, *b as u32);
        (u64::from(m2.wrapping_mul(m1)) << 32) | u64::from(m2.wrapping_mul(c1).wrapping_add(c2))
    })
}

pub fn to_vec<T: Elem>(b: &[u8]) -> Vec<T> {
    let mut v = vec![bytemuck::Zeroable::zeroed(); b.len() / size_of::<T>()];
    bytemuck::cast_slice_mut::<T, u8>(&mut v).copy_from_slice(b);
    v
}

/// Every member's input to `op` on `team` for `salt` (`n` bytes a block), and the
/// options forcing the algorithm `alg` (None: tuned); `root` the root's team rank.
fn inputs_and_opts<'a>(
    team: &Team,
    op: OpKind,
    (alg, root): (Option<&'a str>, u32),
    n: usize,
    salt: u64,
) -> (Vec<Vec<u8>>, Opts<'a>) {
    let p = team.size();
    let inputs = (0..p)
        .map(|r| bytes(r as usize, salt, op.shape(p, r, root).0.max(1) * n))
        .collect();
    let opts = Opts {
        algorithm: alg,
        ..Opts::default()
    };
    (inputs, opts)
}

/// The output of a call, or `None` if the algorithm cannot run it (unsupported, or
/// not enough scratch); panics on any other error.
fn ran<X>(res: Result<X, CollError>, op: OpKind, alg: Option<&str>) -> Option<X> {
    match res {
        Err(CollError::Unsupported { .. } | CollError::ScratchTooSmall { .. }) => None,
        Err(e) => panic!("{op} {alg:?}: {e}"),
        Ok(x) => Some(x),
    }
}

/// The function of the reduction operator `red`, as the reference takes it (`None`
/// for an operation that does not reduce).
fn func_of<T: Elem>(red: &ReduceOp<T>, op: OpKind) -> Option<&ReduceFn> {
    op.reduces().then_some(red.func())
}

/// One call of [`run_one`] and its kin: the operation, the algorithm (None: tuned),
/// the root's team rank, the count, the reduction operator and the inputs' salt.
struct Call<'a, T: Elem> {
    op: OpKind,
    alg: Option<&'a str>,
    root: u32,
    count: usize,
    red: &'a ReduceOp<T>,
    salt: u64,
}

/// The per-call checks, from one parameter list: each takes its own leading
/// parameters, then the endpoint `c`, the `team` and the call's `op`, `alg`, `root`,
/// `count`, `red` and `salt`, and is `$body` of those as a [`Call`].
macro_rules! runners {
    ($(
        $(#[$m:meta])*
        $vis:vis fn $name:ident($($pre:ident: $pty:ty),*) = |$c:ident, $team:ident, $call:ident| $body:expr;
    )*) => {$(
        $(#[$m])*
        #[allow(clippy::too_many_arguments)]
        $vis fn $name<C: Conduit, T: Elem>(
            $($pre: $pty,)*
            $c: &mut Endpoint<C>,
            $team: &Team,
            op: OpKind,
            alg: Option<&str>,
            root: u32,
            count: usize,
            red: &ReduceOp<T>,
            salt: u64,
        ) -> bool {
            let $call = Call { op, alg, root, count, red, salt };
            $body
        }
    )*};
}

runners! {
    /// Runs `op` with algorithm `alg` (None: tuned) on `team` and checks the result on
    /// this rank against the reference. Returns false if the algorithm cannot run it.
    pub fn run_one() = |c, team, call| check(c, team, call, false);

    /// As [`run_one`], through the blocking `*_with` calls over borrowed slices (the
    /// direct shared-memory path where it applies). Outputs start filled with a
    /// sentinel, and a member without output (a non-root of gather or reduce, rank 0 of
    /// exscan) must find its buffer untouched.
    pub fn run_one_blocking() = |c, team, call| check(c, team, call, true);

    /// [`run_one`] or [`run_one_blocking`].
    fn one(blocking: bool) = |c, team, call| check(c, team, call, blocking);
}

/// Runs `call` on `team`, blocking (through the blocking calls over borrowed slices)
/// or not (an owned [`ByKind`] descriptor), and checks this member's output against
/// the reference; false if the algorithm cannot run it.
fn check<C: Conduit, T: Elem>(
    c: &mut Endpoint<C>,
    team: &Team,
    call: Call<'_, T>,
    blocking: bool,
) -> bool {
    let Call {
        op,
        alg,
        root,
        count,
        red,
        salt,
    } = call;
    let (p, me) = (team.size(), team.rank());
    let n = count * size_of::<T>();
    let (inputs, opts) = inputs_and_opts(team, op, (alg, root), n, salt);
    let src: Vec<T> = to_vec(&inputs[me as usize]);
    let got: Vec<u8> = if blocking {
        let Some(dst) = blocking_output(c, team, &call, src, opts) else {
            return false;
        };
        bytemuck::cast_slice(&dst).to_vec()
    } else {
        let d = ByKind::new(op, src)
            .root(root)
            .count(count)
            .reduce(red.clone())
            .opts(opts);
        let Some(ev) = ran(c.collective(team, d, Nb), op, alg) else {
            return false;
        };
        bytemuck::cast_slice(&c.wait(ev).unwrap()).to_vec()
    };
    let want = reference_of(me as usize, op, root as usize, n, &inputs, func_of(red, op));
    if blocking && op == OpKind::Barrier {
        assert!(got.iter().all(|&b| b == 0xa5));
    } else if blocking && want.is_empty() {
        assert!(
            got.iter().all(|&b| b == 0xa5),
            "{op} alg={alg:?} P={p} root={root} count={count} rank {me}: output touched"
        );
    } else {
        let mode = if blocking { " (blocking)" } else { "" };
        assert_eq!(
            got, want,
            "{op}{mode} alg={alg:?} P={p} root={root} count={count} rank {me}"
        );
    }
    true
}

/// The output of `call` through the blocking calls over borrowed slices, `src` this
/// member's input: a buffer that starts filled with a sentinel (a member without
/// output must find it untouched); `None` if the algorithm cannot run it.
fn blocking_output<C: Conduit, T: Elem>(
    c: &mut Endpoint<C>,
    team: &Team,
    call: &Call<'_, T>,
    src: Vec<T>,
    opts: Opts<'_>,
) -> Option<Vec<T>> {
    let (op, root, count, red, salt) = (call.op, call.root, call.count, call.red, call.salt);
    let pn = team.size() as usize * count;
    let sentinel = |len: usize| -> Vec<T> { to_vec(&vec![0xa5u8; len * size_of::<T>()]) };
    let mut dst = sentinel(match op {
        OpKind::Gather | OpKind::GatherAll | OpKind::Exchange => pn,
        _ => count,
    });
    // The blocking call of descriptor `$d` with the options.
    macro_rules! blocking {
        ($d:expr) => {
            c.collective(team, $d.opts(opts), Blocking)
        };
    }
    let res = match op {
        OpKind::Barrier => blocking!(Barrier::new()),
        OpKind::Broadcast => {
            if team.rank() == root {
                dst.copy_from_slice(&src);
            }
            blocking!(Broadcast::in_place(root, &mut dst))
        }
        OpKind::Scatter => blocking!(Scatter::slices(root, &src, &mut dst)),
        OpKind::Gather => blocking!(Gather::slices(root, &src, &mut dst)),
        OpKind::GatherAll => {
            blocking!(GatherAll::slices(&src, &mut dst))
        }
        OpKind::Exchange => {
            blocking!(Exchange::slices(&src, &mut dst))
        }
        OpKind::Reduce => blocking!(Reduce::slices(root, &src, &mut dst, red.clone())),
        OpKind::Allreduce if salt % 2 == 0 => {
            dst.copy_from_slice(&src);
            blocking!(Allreduce::in_place(&mut dst, red.clone()))
        }
        OpKind::Allreduce => blocking!(Allreduce::slices(&src, &mut dst, red.clone())),
        OpKind::ReduceScatter => blocking!(ReduceScatter::slices(&src, &mut dst, red.clone())),
        OpKind::Scan => blocking!(Scan::slices(&src, &mut dst, red.clone())),
        OpKind::Exscan => blocking!(Exscan::slices(&src, &mut dst, red.clone())),
    };
    ran(res, op, call.alg)?;
    Some(dst)
}

/// Every registered algorithm of every op, plus the tuned choice.
pub fn matrix<C: Conduit>(c: &mut Endpoint<C>, team: &Team, counts: &[usize]) -> usize {
    matrix_mode(c, team, counts, false)
}

/// [`matrix`] through the nonblocking calls (`blocking` false) or the blocking ones.
pub fn matrix_mode<C: Conduit>(
    c: &mut Endpoint<C>,
    team: &Team,
    counts: &[usize],
    blocking: bool,
) -> usize {
    let sum32 = ReduceOp::<u32>::builtin(BuiltinOp::Sum);
    let max_f64 = ReduceOp::<f64>::builtin(BuiltinOp::Max);
    let bxor8 = ReduceOp::<i8>::bitwise(BitOp::Bxor);
    let aff = affine();
    let p = team.size();
    let mut ran = 0;
    let mut salt = 0;
    for op in OpKind::ALL {
        let mut algs: Vec<Option<String>> = c.algorithms(op).into_iter().map(Some).collect();
        algs.push(None);
        for alg in &algs {
            for &count in counts {
                salt += 1;
                let root = if op.rooted() { (salt as u32) % p } else { 0 };
                let a = alg.as_deref();
                ran += usize::from(one(blocking, c, team, op, a, root, count, &sum32, salt));
                if op.reduces() {
                    ran += usize::from(one(blocking, c, team, op, a, root, count, &aff, salt));
                }
            }
        }
        // More element types with the tuned choice.
        let root = if op.rooted() { p - 1 } else { 0 };
        // (count, operator, salt)
        macro_rules! tuned {
            ($($count:expr, $red:expr, $salt:expr;)*) => {
                $(one(blocking, c, team, op, None, root, $count, &$red, $salt);)*
            };
        }
        tuned! {
            7, max_f64, 99;
            9, bxor8, 98;
            3, ReduceOp::<u128>::builtin(BuiltinOp::Prod), 97;
            5, ReduceOp::<i16>::bitwise(BitOp::Land), 96;
        }
    }
    ran
}

/// Every operation through the blocking calls with each member's input and output
/// placed in its own segment (from offset 0), blocks of `count` `u64`s, every root
/// in turn for the rooted ones. A member scribbles over its input as soon as a call
/// returns, so a member that returned while others still read its input by
/// reference would corrupt their results. Returns the calls that ran.
///
/// The segment must hold `2 × P × count × 8` bytes plus 64, and nothing else may use
/// its first bytes meanwhile.
pub fn segment_matrix<C: Conduit>(c: &mut Endpoint<C>, team: &Team, counts: &[usize]) -> usize {
    buffer_matrix(c, team, counts, true)
}

/// As [`segment_matrix`], with the buffers in this member's segment (`in_segment`) or
/// in private heap memory (where blocks of 16 KiB and more of the copying operations
/// are read by the others with CMA, `CollStats::cma_calls`).
#[allow(unsafe_code)]
pub fn buffer_matrix<C: Conduit>(
    c: &mut Endpoint<C>,
    team: &Team,
    counts: &[usize],
    in_segment: bool,
) -> usize {
    let place = if in_segment { "segment" } else { "private" };
    let mut heap: Vec<u64> = Vec::new();
    let p = team.size();
    let me = team.rank();
    let sum = ReduceOp::<u64>::builtin(BuiltinOp::Sum);
    let noncomm = affine();
    let mut ran = 0;
    let mut salt = 1000;
    for &count in counts {
        let n = count * 8;
        let pn = p as usize * count;
        let base = if in_segment {
            let seg = c.segment();
            assert!(seg.len() >= 2 * pn * 8 + 64, "segment too small");
            seg.as_ptr()
        } else {
            heap.clear();
            heap.resize(2 * pn + 8, 0);
            heap.as_mut_ptr().cast::<u8>()
        };
        let dst_at = (pn * 8).next_multiple_of(64);
        for op in OpKind::ALL {
            for root in 0..if op.rooted() { p } else { 1 } {
                for red in [&sum, &noncomm] {
                    if !red.is_commutative() && !op.reduces() {
                        continue;
                    }
                    salt += 1;
                    let inputs: Vec<Vec<u8>> = (0..p)
                        .map(|r| bytes(r as usize, salt, op.shape(p, r, root).0.max(1) * n))
                        .collect();
                    let mine = &inputs[me as usize];
                    let out_len = match op {
                        OpKind::Gather | OpKind::GatherAll | OpKind::Exchange => pn,
                        _ => count,
                    };
                    // SAFETY: two disjoint ranges inside this member's segment (length
                    // asserted above) or inside `heap` (2·pn + 8 words, not resized
                    // while these slices live), which nothing else uses during the
                    // test; no other reference to them exists while these slices live.
                    let (src, dst) = unsafe {
                        std::ptr::copy_nonoverlapping(mine.as_ptr(), base, mine.len());
                        std::ptr::write_bytes(base.add(dst_at), 0xa5, out_len * 8);
                        (
                            std::slice::from_raw_parts_mut(base.cast::<u64>(), mine.len() / 8),
                            std::slice::from_raw_parts_mut(base.add(dst_at).cast::<u64>(), out_len),
                        )
                    };
                    let res = match op {
                        OpKind::Barrier => c.barrier(team),
                        OpKind::Broadcast => {
                            if me == root {
                                dst.copy_from_slice(&src[..count]);
                            }
                            c.collective(team, Broadcast::in_place(root, dst), Blocking)
                        }
                        OpKind::Scatter => {
                            c.collective(team, Scatter::slices(root, src, dst), Blocking)
                        }
                        OpKind::Gather => {
                            c.collective(team, Gather::slices(root, &src[..count], dst), Blocking)
                        }
                        OpKind::GatherAll => {
                            c.collective(team, GatherAll::slices(&src[..count], dst), Blocking)
                        }
                        OpKind::Exchange => {
                            c.collective(team, Exchange::slices(src, dst), Blocking)
                        }
                        OpKind::Reduce => c.collective(
                            team,
                            Reduce::slices(root, src, dst, red.clone()),
                            Blocking,
                        ),
                        OpKind::Allreduce => {
                            c.collective(team, Allreduce::slices(src, dst, red.clone()), Blocking)
                        }
                        OpKind::ReduceScatter => c.collective(
                            team,
                            ReduceScatter::slices(src, dst, red.clone()),
                            Blocking,
                        ),
                        OpKind::Scan => {
                            c.collective(team, Scan::slices(src, dst, red.clone()), Blocking)
                        }
                        OpKind::Exscan => {
                            c.collective(team, Exscan::slices(src, dst, red.clone()), Blocking)
                        }
                    };
                    res.unwrap_or_else(|e| panic!("{op} root {root} count {count}: {e}"));
                    // Reuse the input at once (a broadcast root's is its output).
                    if op != OpKind::Broadcast {
                        src.fill(0xeeee_eeee_eeee_eeee);
                    }
                    let want = &reference_of(
                        me as usize,
                        op,
                        root as usize,
                        n,
                        &inputs,
                        op.reduces().then_some(red.func()),
                    );
                    let got: &[u8] = bytemuck::cast_slice(dst);
                    if want.is_empty() {
                        assert!(
                            got.iter().all(|&b| b == 0xa5) || op == OpKind::Broadcast,
                            "{op} ({place}) P={p} root={root} count={count} rank {me}: output touched"
                        );
                    } else {
                        assert!(
                            got == &want[..],
                            "{op} ({place}) P={p} root={root} count={count} rank {me}: wrong result"
                        );
                    }
                    ran += 1;
                }
            }
        }
    }
    ran
}

/// Byte `i` of small broadcast `k` (root `root`) of a workload salted `salt`: every
/// byte of every call differs from the same byte of the calls before it (with
/// probability 255/256), so a stale ring slot or a torn word fails the comparison.
pub fn ring_byte(salt: u64, k: u32, root: u32, i: usize) -> u8 {
    let mut x = salt.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ (u64::from(k) << 24)
        ^ (u64::from(root) << 12)
        ^ i as u64;
    x = (x ^ (x >> 31)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 29)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (x >> 56) as u8
}

/// The root of small broadcast `k` of the ring workload on a team of `p`: segments
/// of 64 calls alternate between rotating roots and one fixed root (which laps its
/// 32-slot ring twice, running ahead of its readers).
fn ring_root(k: u32, p: u32, salt: u64) -> u32 {
    let s = salt as u32;
    if (k / 64) % 2 == 0 {
        (k.wrapping_add(s)) % p
    } else {
        (k / 64).wrapping_add(s) % p
    }
}

/// `rounds` small broadcasts (1..=56 bytes, what the ring carries; see [`ring_root`])
/// on `team`, through every blocking form — in place as `u8` (the ring's in-place
/// path), owned (the direct path), in place as `u64` words. Segments of rotating roots
/// also run, every 16th round, a batch of four nonblocking ones (the layer's table)
/// with a blocking one queued behind them, and interleave shared-memory allreduces and
/// barriers (they run through the same channel and advance the `DONE` words the ring's
/// acknowledgements live in). Segments of one root synchronise nothing else, and their
/// readers start 2 ms late: the root fills its ring and must wait for them before
/// reusing a slot. Readers' buffers start as a sentinel; every output is checked byte
/// by byte.
/// Returns the broadcasts run.
pub fn ring_workload<C: Conduit>(c: &mut Endpoint<C>, team: &Team, rounds: u32, salt: u64) -> u64 {
    ring_workload_upto(c, team, rounds, salt, 56)
}

/// [`ring_workload`] with blocks of 1..=`max` bytes (8: every one through the packed
/// ring).
pub fn ring_workload_upto<C: Conduit>(
    c: &mut Endpoint<C>,
    team: &Team,
    rounds: u32,
    salt: u64,
    max: usize,
) -> u64 {
    let (p, me) = (team.size(), team.rank());
    let want = |k: u32, root: u32, n: usize| -> Vec<u8> {
        (0..n).map(|i| ring_byte(salt, k, root, i)).collect()
    };
    let size = |k: u32| 1 + (k as usize * 37 + salt as usize) % max;
    let sum = ReduceOp::<u64>::builtin(BuiltinOp::Sum);
    let mut calls = 0u64;
    let mut k = 0u32;
    while k < rounds {
        let root = ring_root(k, p, salt);
        let n = size(k);
        let w = want(k, root, n);
        let ctx = format!("P={p} rank {me}: broadcast {k} (root {root}, {n} B, salt {salt})");
        let fixed = (k / 64) % 2 == 1;
        if fixed && k % 64 == 0 && me != root {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        if !fixed && k % 16 == 15 && k % 64 < 59 {
            // Nonblocking (the table), then a blocking call queued behind them.
            let mut evs = Vec::new();
            for j in 0..4 {
                let (kj, rj) = (k + j, ring_root(k + j, p, salt));
                let data = if me == rj {
                    want(kj, rj, size(kj))
                } else {
                    vec![0xa5; size(kj)]
                };
                evs.push((
                    kj,
                    rj,
                    c.collective(team, Broadcast::new(rj, data), Nb).unwrap(),
                ));
            }
            let (kb, rb) = (k + 4, ring_root(k + 4, p, salt));
            let mut buf = if me == rb {
                want(kb, rb, size(kb))
            } else {
                vec![0xa5; size(kb)]
            };
            c.collective(team, Broadcast::in_place(rb, &mut buf), Blocking)
                .unwrap();
            assert!(
                buf == want(kb, rb, size(kb)),
                "P={p} rank {me}: queued {kb}"
            );
            for (kj, rj, ev) in evs.into_iter().rev() {
                let got = c.wait(ev).unwrap();
                assert!(
                    got == want(kj, rj, size(kj)),
                    "P={p} rank {me}: nonblocking {kj}"
                );
            }
            calls += 5;
            k += 5;
            continue;
        }
        match k % 3 {
            0 => {
                let mut buf = if me == root { w.clone() } else { vec![0xa5; n] };
                c.collective(team, Broadcast::in_place(root, &mut buf), Blocking)
                    .unwrap();
                assert!(buf == w, "{ctx}: in place {buf:?}");
            }
            1 => {
                let data = if me == root { w.clone() } else { vec![0x5a; n] };
                let got = c
                    .collective(team, Broadcast::new(root, data), Blocking)
                    .unwrap();
                assert!(got == w, "{ctx}: owned {got:?}");
            }
            _ => {
                // Whole words (at most 7 of them: 56 bytes).
                let words = n.div_ceil(8);
                let w = want(k, root, words * 8);
                let mut buf: Vec<u64> = if me == root {
                    to_vec(&w)
                } else {
                    vec![0xa5a5_a5a5_a5a5_a5a5; words]
                };
                c.collective(team, Broadcast::in_place(root, &mut buf), Blocking)
                    .unwrap();
                assert!(
                    bytemuck::cast_slice::<u64, u8>(&buf) == &w[..],
                    "{ctx}: words"
                );
            }
        }
        calls += 1;
        if !fixed && k % 10 == 9 {
            let mut out = [0u64; 3];
            let v = u64::from(me) + u64::from(k);
            c.collective(
                team,
                Allreduce::slices(&[v; 3], &mut out, sum.clone()),
                Blocking,
            )
            .unwrap();
            let s: u64 = (0..p).map(|r| u64::from(r) + u64::from(k)).sum();
            assert_eq!(out, [s; 3], "{ctx}: allreduce");
        }
        if !fixed && k % 13 == 12 {
            c.barrier(team).unwrap();
        }
        k += 1;
    }
    calls
}

/// Sleepers on the ring are woken (run under `WaitPolicy::Block`, where every wait
/// sleeps in the conduit at once, for at most the endpoint's 10 ms nap: a lost wake-up
/// costs the rest of a nap instead of a hang). Phase 1: `rounds` broadcasts with
/// rotating roots, the root pausing 2 ms before publishing while its readers sleep on
/// its slot: a reader whose wake-up is lost takes a whole nap (10 ms) instead of about
/// 2 ms. Phase 2: `32 + rounds` broadcasts from rank 0 whose readers pause 4 ms
/// before each, so rank 0 runs 31 ahead, then sleeps on their `DONE` words at every
/// call: a lost wake-up makes about 4 in 10 of its calls take a nap instead of about
/// 4 ms. Returns, per phase, (calls that took 8 ms or more, calls timed): a few slow
/// calls are a loaded machine, many a lost wake-up.
pub fn ring_wakeups<C: Conduit>(c: &mut Endpoint<C>, team: &Team, rounds: u32) -> [(u32, u32); 2] {
    use std::time::{Duration, Instant};
    let (p, me) = (team.size(), team.rank());
    let slow = Duration::from_millis(8);
    let mut out = [(0, 0); 2];
    c.barrier(team).unwrap();
    for k in 0..rounds {
        let root = k % p;
        let w: Vec<u8> = (0..8).map(|i| ring_byte(7, k, root, i)).collect();
        let mut buf = if me == root { w.clone() } else { vec![0; 8] };
        if me == root {
            std::thread::sleep(Duration::from_millis(2));
        }
        let t = Instant::now();
        c.collective(team, Broadcast::in_place(root, &mut buf), Blocking)
            .unwrap();
        if me != root {
            out[0].1 += 1;
            out[0].0 += u32::from(t.elapsed() >= slow);
        }
        assert!(buf == w, "rank {me}: broadcast {k} after a sleep");
    }
    c.barrier(team).unwrap();
    for k in 0..32 + rounds {
        let w: Vec<u8> = (0..8).map(|i| ring_byte(8, k, 0, i)).collect();
        let mut buf = if me == 0 { w.clone() } else { vec![0; 8] };
        if me != 0 {
            std::thread::sleep(Duration::from_millis(4));
        }
        let t = Instant::now();
        c.collective(team, Broadcast::in_place(0, &mut buf), Blocking)
            .unwrap();
        if me == 0 && k >= 32 {
            out[1].1 += 1;
            out[1].0 += u32::from(t.elapsed() >= slow);
        }
        assert!(buf == w, "rank {me}: broadcast {k} of a full ring");
    }
    c.barrier(team).unwrap();
    out
}

/// Runs `ring_wakeups` until an attempt shows no systematic loss of the readers'
/// wake-ups on any member (at most half of their phase-1 calls took 8 ms or more;
/// about all of them do when those wake-ups are lost), three attempts at most: a
/// loaded machine delays some calls now and then, a lost wake-up delays them in every
/// attempt. The members agree on each attempt's verdict (an allreduce), so they
/// repeat together. Phase 2 (a root sleeping on its readers' `DONE` words) is checked
/// for its data only: with readers pausing a few milliseconds per call, a lost
/// wake-up there costs too little next to the scheduling delays of a loaded machine
/// (the simulator's test with 20 s naps and the loom model check that direction).
pub fn assert_woken<C: Conduit>(c: &mut Endpoint<C>, team: &Team, rounds: u32) {
    let me = team.rank();
    let mut last = [(0, 0); 2];
    for _ in 0..3 {
        last = ring_wakeups(c, team, rounds);
        let [(s1, t1), _] = last;
        if all_agree(c, team, s1 * 2 <= t1) {
            return;
        }
    }
    let [(s1, t1), _] = last;
    panic!(
        "rank {me}: in each of 3 attempts some member's reader calls took a nap (lost \
         wake-ups?); last here: {s1} of {t1}"
    );
}

/// Sleepers on the slot protocol's publications are woken by replayed calls (run
/// under `WaitPolicy::Block`, as [`ring_wakeups`]): `rounds` allreduces of 8 words
/// of one shape, so that every call after the first replays the first's decisions
/// (and runs on the layer's state alone, waking sleepers after its step), member
/// `k % p` pausing 2 ms before call `k` while the others sleep on its publication.
/// Returns (the others' calls that took 8 ms or more, calls timed, calls replayed
/// here): a lost wake-up makes nearly every timed call take a nap.
pub fn slot_wakeups<C: Conduit>(c: &mut Endpoint<C>, team: &Team, rounds: u32) -> (u32, u32, u64) {
    use std::time::{Duration, Instant};
    let (p, me) = (team.size(), team.rank());
    let sum = ReduceOp::<u64>::builtin(BuiltinOp::Sum);
    let slow = Duration::from_millis(8);
    let (mut naps, mut timed) = (0, 0);
    let replayed = c.coll_stats().replayed_calls;
    c.barrier(team).unwrap();
    for k in 0..rounds {
        let late = k % p;
        let src: Vec<u64> = (0..8)
            .map(|i| u64::from(k) * 1000 + u64::from(me) * 10 + i)
            .collect();
        let mut dst = [0u64; 8];
        if me == late {
            std::thread::sleep(Duration::from_millis(2));
        }
        let t = Instant::now();
        c.collective(team, Allreduce::slices(&src, &mut dst, &sum), Blocking)
            .unwrap();
        if me != late {
            timed += 1;
            naps += u32::from(t.elapsed() >= slow);
        }
        let want: Vec<u64> = (0..8)
            .map(|i| {
                (0..p)
                    .map(|q| u64::from(k) * 1000 + u64::from(q) * 10 + i)
                    .sum()
            })
            .collect();
        assert_eq!(dst[..], want[..], "rank {me}: allreduce {k} after a sleep");
    }
    c.barrier(team).unwrap();
    (naps, timed, c.coll_stats().replayed_calls - replayed)
}

/// Runs [`slot_wakeups`] until an attempt shows no systematic loss of wake-ups on any
/// member (at most half of its timed calls took 8 ms or more), three attempts at
/// most, as [`assert_woken`]; every attempt must have replayed its calls.
pub fn assert_slot_woken<C: Conduit>(c: &mut Endpoint<C>, team: &Team, rounds: u32) {
    let me = team.rank();
    let mut last = (0, 0, 0);
    for _ in 0..3 {
        last = slot_wakeups(c, team, rounds);
        let (naps, timed, replayed) = last;
        assert!(
            replayed + 1 >= u64::from(rounds),
            "rank {me}: {replayed} of {rounds} calls replayed"
        );
        if all_agree(c, team, naps * 2 <= timed) {
            return;
        }
    }
    let (naps, timed, _) = last;
    panic!(
        "rank {me}: in each of 3 attempts the calls waiting for a replayed call's \
         publication took a nap (lost wake-ups?); last here: {naps} of {timed}"
    );
}

/// Members under spin-then-block sleep through long waits on a slot publication
/// (they announce `MAYSLEEP` only at their first sleep; their writers start fencing
/// when they notice, and from then on a waiter may sleep): `rounds` allreduces of 8
/// words, member `k % p` pausing `pause` before call `k`. Returns the polls after
/// which the layer let the endpoint sleep (`CollStats::sleep_polls`) during the
/// calls this member waited in from round `p` on (every writer has published since
/// the first announcements).
pub fn slot_sleeps<C: Conduit>(
    c: &mut Endpoint<C>,
    team: &Team,
    rounds: u32,
    pause: std::time::Duration,
) -> u64 {
    let (p, me) = (team.size(), team.rank());
    let sum = ReduceOp::<u64>::builtin(BuiltinOp::Sum);
    let mut sleeps = 0;
    c.barrier(team).unwrap();
    for k in 0..rounds {
        let late = k % p;
        let src = [u64::from(me) + u64::from(k); 8];
        let mut dst = [0u64; 8];
        if me == late {
            std::thread::sleep(pause);
        }
        let before = c.coll_stats().sleep_polls;
        c.collective(team, Allreduce::slices(&src, &mut dst, &sum), Blocking)
            .unwrap();
        if me != late && k >= p {
            sleeps += c.coll_stats().sleep_polls - before;
        }
        let want = (0..p).map(|q| u64::from(q) + u64::from(k)).sum::<u64>();
        assert_eq!(dst, [want; 8], "rank {me}: allreduce {k}");
    }
    c.barrier(team).unwrap();
    sleeps
}

/// Runs [`slot_sleeps`] (two rounds per member, counted from the second) with pauses
/// of 0.5, 1, 2 and 4 s until every member let its endpoint sleep in one attempt
/// (the members agree on each verdict with an allreduce): a member sleeps only after
/// its spin-then-block yields (20 000 fruitless polls), which a debug build on a
/// loaded machine may not get through in half a second.
pub fn assert_slot_sleeps<C: Conduit>(c: &mut Endpoint<C>, team: &Team) {
    let me = team.rank();
    let mut pause = std::time::Duration::from_millis(500);
    for _ in 0..4 {
        let sleeps = slot_sleeps(c, team, 2 * team.size(), pause);
        if all_agree(c, team, sleeps > 0) {
            return;
        }
        pause *= 2;
    }
    panic!(
        "rank {me}: some member never let its endpoint sleep in waits of up to 4 s on a \
         slot publication"
    );
}

/// True if `ok` holds on every member of `team` (a min-allreduce: every member gets
/// the same verdict, so retry loops repeat together).
fn all_agree<C: Conduit>(c: &mut Endpoint<C>, team: &Team, ok: bool) -> bool {
    let mut all = [0u64];
    let min = ReduceOp::<u64>::builtin(BuiltinOp::Min);
    c.collective(
        team,
        Allreduce::slices(&[u64::from(ok)], &mut all, min),
        Blocking,
    )
    .unwrap();
    all[0] == 1
}
