//! The paths every collective call takes: lowering a descriptor's call (checks,
//! root, shape), the direct shared-memory path of blocking calls (driven by the
//! caller, [`direct`](mod@direct)), and the layer's table with an event. [`crate::desc`]'s
//! descriptors run through here; [`crate::api`] is the endpoint's side.

use crate::barrier::{ENTRY_LEN, Entry};
use crate::engine::{Input, Start};
use crate::error::CollError;
use crate::layer::{Coll, coll, lent, resolve};
use crate::op::{AddrMode, Elem, OpKind, Opts, ReduceArg, ReduceOp, elem_code};
use crate::rma::RmaError;
use crate::root::{Root, root_blocks};
use crate::shm::Io;
use crate::shmdrive::{Begin, DirectReq, Replayed, RingBegin};
use crate::shmpath::{DirectOp, ReplayKey, Stepped};
use crate::spec::{Spec, SpecData};
use crate::tuning::query;
use bytemuck::Pod;
use gex_core::event::{Data, Event, Finish, Mode, ModeKind};
use gex_core::layer;
use gex_core::spi::Conduit;
use gex_core::{Endpoint, Team, WaitPolicy};
use gex_sync::atomic::Ordering;

mod direct;
mod online;
#[allow(clippy::wildcard_imports)]
use direct::*;

/// The implicit-event tag of collectives started in mode [`Nbi`](gex_core::Nbi)
/// ([`CollExt::sync_collectives`](crate::CollExt::sync_collectives) waits for them).
pub const COLL_TAG: u32 = 0x00c0_11ec;

/// The output of a collective over `T`s from its bytes (no copy when `T` has the
/// alignment of a byte).
pub(crate) fn vec_from_bytes<T: Pod>(b: Vec<u8>) -> Vec<T> {
    let b = match bytemuck::allocation::try_cast_vec::<u8, T>(b) {
        Ok(v) => return v,
        Err((_, b)) => b,
    };
    let mut v: Vec<T> = vec![bytemuck::Zeroable::zeroed(); b.len() / size_of::<T>().max(1)];
    let n = v.len() * size_of::<T>();
    bytemuck::cast_slice_mut::<T, u8>(&mut v).copy_from_slice(&b[..n]);
    v
}

/// The bytes of `v`: its own allocation when `T` has the alignment of a byte (no
/// copy), else a copy.
pub(crate) fn into_bytes<T: Pod>(v: Vec<T>) -> Vec<u8> {
    bytemuck::allocation::try_cast_vec::<T, u8>(v)
        .unwrap_or_else(|(_, v)| bytemuck::cast_slice::<T, u8>(&v).to_vec())
}

/// The `finish` of events whose output is a `Vec<T>`.
fn finish_vec<T: Pod + Send>(d: Data, _: Option<Vec<T>>) -> Vec<T> {
    match d {
        Data::Bytes(b) => vec_from_bytes(b),
        _ => Vec::new(),
    }
}

/// Starts collective `s` on `team` with an event whose output `finish` makes.
pub(crate) fn start_event<C: Conduit, T: Send + 'static>(
    ep: &mut Endpoint<C>,
    team: &Team,
    s: Start<'_>,
    finish: Finish<T>,
) -> Result<Event<T, CollError>, CollError> {
    coll(ep, |c, cx| {
        let team = c.resolve(team)?;
        let (ev, done) = cx.pending::<T, CollError>(None, finish);
        c.start_op(cx, &team, s, Some(done))?;
        Ok(ev)
    })?
}

/// The start of an internal call of `kind` over the owned elements `v` (root 0, the
/// default options), reducing with `red` if given.
pub(crate) fn owned_start<T: Elem>(
    kind: OpKind,
    v: Vec<T>,
    red: Option<&ReduceOp<T>>,
) -> Start<'static> {
    Start {
        kind,
        root: 0,
        elem: size_of::<T>(),
        count: v.len(),
        input: Input::Owned(into_bytes(v)),
        reduce: red.map(|r| (r.func().clone(), r.is_commutative())),
        opts: Opts::default(),
        codes: (elem_code::<T>(), red.map_or(0, ReduceOp::code)),
        desc: None,
    }
}

/// A gather_all of `v` on `team`, waited for (team setup).
pub(crate) fn gather_all_vec<C: Conduit, T: Elem>(
    ep: &mut Endpoint<C>,
    team: &Team,
    v: Vec<T>,
) -> Result<Vec<T>, CollError> {
    let s = owned_start(OpKind::GatherAll, v, None);
    let ev = start_event(ep, team, s, finish_vec::<T>)?;
    ep.wait(ev)
}

/// The team rank of `root` for a call of `op` with blocks of `block` bytes and, for a
/// root given by data, the offset of the root's buffer. Every member checks a data
/// root alike (its owner is a member, the root's buffer fits in the owner's segment),
/// so they all fail or all proceed.
#[inline]
pub(crate) fn resolve_root<C: Conduit>(
    ep: &Endpoint<C>,
    team: &Team,
    op: OpKind,
    root: Root,
    block: usize,
) -> Result<(u32, Option<usize>), CollError> {
    let ptr = match root {
        Root::Rank(r) => return Ok((r, None)),
        Root::Data(ptr) => ptr,
    };
    let owner = ptr.addr();
    let rank = team
        .rank_of(owner)
        .ok_or_else(|| CollError::RootNotMember {
            owner,
            team: team.id(),
        })?;
    let len = root_blocks(op, team.size()).saturating_mul(block);
    let seg_len = ep.segment_len_of(owner.rank).unwrap_or(0);
    if ptr.offset.checked_add(len).is_none_or(|e| e > seg_len) {
        return Err(RmaError::OutOfSegment {
            dst: owner,
            offset: ptr.offset,
            len,
            seg_len,
        }
        .into());
    }
    Ok((rank, Some(ptr.offset)))
}

/// A checked, lowered call: what every path needs.
struct Lowered<'a> {
    kind: OpKind,
    root: u32,
    elem: usize,
    count: usize,
    /// The reduction is commutative (true without one).
    commutative: bool,
    opts: Opts<'a>,
    /// The element type's code and the reduction's ([`Start::codes`]).
    codes: (u8, u8),
}

/// The most elements of `T` per block for which `p` blocks fit in an allocation
/// (every buffer of a collective holds at most `p` blocks).
#[inline]
fn max_count<T>(p: usize) -> usize {
    isize::MAX as usize / p.max(1) / size_of::<T>().max(1)
}

/// Bytes of a block of `count` elements of `T`, if `p` such blocks fit in memory.
#[inline]
fn block_bytes<T>(p: usize, count: usize) -> Option<usize> {
    (count <= max_count::<T>(p)).then(|| count * size_of::<T>())
}

/// Checks `spec`'s lengths and root on `team`; returns the lowered call.
#[inline]
fn lower<'a, C: Conduit, T: Elem>(
    ep: &Endpoint<C>,
    team: &Team,
    spec: &Spec<'a, T>,
) -> Result<(Lowered<'a>, Option<usize>), CollError> {
    let p = team.size() as usize;
    let kind = spec.kind;
    let count = spec.data.count(kind, p, spec.count);
    let block = block_bytes::<T>(p, count).ok_or_else(|| CollError::BadLength {
        what: "count (at most the expected elements: P blocks must fit in memory)",
        expected: max_count::<T>(p),
        got: count,
    })?;
    let (root, at) = resolve_root(ep, team, kind, spec.root, block)?;
    if kind.rooted() && root >= team.size() {
        return Err(CollError::BadRank {
            rank: root,
            size: team.size(),
        });
    }
    spec.check(p, team.rank(), root, count)?;
    if kind.reduces() && spec.reduce.is_none() {
        return Err(CollError::UnsupportedOp {
            op: "none".into(),
            ty: std::any::type_name::<T>(),
        });
    }
    // The reduction stays borrowed from the descriptor (no reference count on the hot
    // path); the paths that keep it clone it ([`owned_reduce`]).
    let commutative = spec.reduce.as_deref().is_none_or(ReduceOp::is_commutative);
    // A barrier carries its entry (anonymous for a barrier by kind).
    let (elem, count) = if kind == OpKind::Barrier {
        (ENTRY_LEN, 1)
    } else {
        (size_of::<T>(), count)
    };
    let red = spec.reduce.as_deref().map_or(0, ReduceOp::code);
    let l = Lowered {
        kind,
        root,
        elem,
        count,
        commutative,
        opts: spec.opts,
        codes: (elem_code::<T>(), red),
    };
    Ok((l, at))
}

/// The shape of a call over borrowed slices (or an in-place broadcast) with a rank
/// root and default options, whose decisions a later call may replay
/// ([`crate::shmdrive`], *Replay*).
#[inline]
fn replay_key<T: Elem>(team: &Team, spec: &Spec<'_, T>) -> Option<ReplayKey> {
    let Root::Rank(root) = spec.root else {
        return None;
    };
    // Slices, or an in-place broadcast (its buffer is the input or the output as is;
    // other in-place calls copy their input aside).
    let (lens, in_place) = match &spec.data {
        SpecData::Slices(s, d) => ((s.len(), d.len()), false),
        SpecData::InPlace(b) if spec.kind == OpKind::Broadcast => ((b.len(), b.len()), true),
        _ => return None,
    };
    if spec.opts != Opts::default() {
        return None;
    }
    Some(ReplayKey {
        team: team.id(),
        kind: spec.kind,
        root,
        elem: size_of::<T>(),
        lens,
        in_place,
        count: spec.count,
        reduce: spec.reduce.as_deref().map(ReduceOp::is_commutative),
        codes: (
            elem_code::<T>(),
            spec.reduce.as_deref().map_or(0, ReduceOp::code),
        ),
    })
}

/// The descriptor's reduction, owned (for the layer's table and online trials).
#[cold]
fn owned_reduce<T: Elem>(r: Option<&ReduceOp<T>>) -> Option<(crate::sched::ReduceFn, bool)> {
    r.map(|o| (o.func().clone(), o.is_commutative()))
}

/// The owned form of a collective: starts it with an event and disposes of the event
/// as mode `M` asks (blocking calls try the direct path first).
pub(crate) fn run_owned<C: Conduit, T: Elem, M: Mode>(
    ep: &mut Endpoint<C>,
    team: &Team,
    spec: Spec<'_, T>,
) -> Result<M::Out<Vec<T>, CollError>, CollError> {
    let (l, _) = lower(ep, team, &spec)?;
    let SpecData::Owned(data) = spec.data else {
        return Err(CollError::Layer("an owned descriptor without owned data"));
    };
    let input = if l.kind == OpKind::Barrier {
        Entry::default().encode()
    } else {
        into_bytes(data)
    };
    if M::KIND == ModeKind::Blocking {
        let (_, out_blocks) = l.kind.shape(team.size(), team.rank(), l.root);
        let mut out = vec![0u8; out_blocks * l.elem * l.count];
        let mut trial = true;
        loop {
            let io = Io {
                input: &input,
                out: &mut out,
                reduce: spec.reduce.as_deref().map(ReduceOp::func),
            };
            match direct(ep, team, &l, io, Entry::default(), (trial, None))? {
                Direct::Done(_) => {
                    let ev = coll(ep, |_, cx| cx.ready(Ok(vec_from_bytes::<T>(out))))?;
                    return layer::finish::<Vec<T>, CollError, M, C>(ep, ev, COLL_TAG);
                }
                Direct::Trial => {
                    trial = false;
                    online_trial(ep, team, &l, spec.reduce.as_deref())?;
                }
                Direct::Declined => break,
            }
        }
    }
    let team = online_trial(ep, team, &l, spec.reduce.as_deref())?;
    let s = Start {
        kind: l.kind,
        root: l.root,
        elem: l.elem,
        count: l.count,
        input: Input::Owned(input),
        reduce: owned_reduce(spec.reduce.as_deref()),
        opts: l.opts,
        codes: l.codes,
        desc: None,
    };
    let ev = start_event(ep, &team, s, finish_vec::<T>)?;
    layer::finish::<Vec<T>, CollError, M, C>(ep, ev, COLL_TAG)
}

/// The borrowed form of a collective (blocking): the direct path over the caller's
/// slices, else the owned path and a copy of the output. Inline: the small in-place
/// broadcast's ring and a replayed call ([`replay`]); the rest out of line.
#[inline]
pub(crate) fn run_borrowed<C: Conduit, T: Elem>(
    ep: &mut Endpoint<C>,
    team: &Team,
    mut spec: Spec<'_, T>,
) -> Result<(), CollError> {
    // A small in-place broadcast from a team rank: the ring, directly (nothing to
    // lower: an in-place buffer has no length to check, a bad root is declined).
    if let (OpKind::Broadcast, Root::Rank(root), SpecData::InPlace(buf)) =
        (spec.kind, spec.root, &mut spec.data)
    {
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
        let elem = (elem_code::<T>(), size_of::<T>());
        if bytes.len() <= crate::ring::CAP
            && ring_in_place(ep, team, root, (bytes, elem), &spec.opts)?
        {
            dispose(spec);
            return Ok(());
        }
    }
    let key = replay_key(team, &spec);
    if let Some(key) = &key {
        // The last direct call's shape: its checks and decisions stand. (A replayed
        // call's input is never a copy: `tmp` stays empty.)
        let mut tmp = Vec::new();
        let (input, out) = spec
            .data
            .io(key.kind, team.size(), team.rank(), key.root, &mut tmp);
        let io = Io {
            input: bytemuck::cast_slice(input),
            out: bytemuck::cast_slice_mut(out),
            reduce: spec.reduce.as_deref().map(ReduceOp::func),
        };
        if let Direct::Done(_) = replay(ep, team, key, io)? {
            dispose(spec);
            return Ok(());
        }
    }
    run_borrowed_slow(ep, team, spec, key)
}

/// Drops a descriptor, without a call into its drop glue when it holds nothing to
/// drop (borrowed slices and a borrowed or no reduction: the blocking calls in a
/// loop).
#[inline(always)]
fn dispose<T>(spec: Spec<'_, T>) {
    let spec = std::mem::ManuallyDrop::new(spec);
    // Every field named (by reference: nothing is moved), so that one added later is
    // considered here; those ignored never own anything (checked).
    let Spec {
        kind: _,
        root: _,
        count: _,
        opts: _,
        data,
        reduce,
    } = &*spec;
    const _: () = assert!(
        !std::mem::needs_drop::<OpKind>()
            && !std::mem::needs_drop::<Root>()
            && !std::mem::needs_drop::<Option<usize>>()
            && !std::mem::needs_drop::<Opts<'static>>()
    );
    // Borrowed data and a borrowed (or no) reduction are references only: leaving
    // them undropped releases nothing. Otherwise everything is dropped as usual.
    let borrowed = matches!(data, SpecData::Slices(..) | SpecData::InPlace(..))
        && !matches!(reduce, Some(ReduceArg::Owned(_)));
    if !borrowed {
        drop(std::mem::ManuallyDrop::into_inner(spec));
    }
}

/// [`run_borrowed`] past the ring and the replay: lowers the call, then the direct
/// path, else the layer's table.
#[inline(never)]
fn run_borrowed_slow<C: Conduit, T: Elem>(
    ep: &mut Endpoint<C>,
    team: &Team,
    mut spec: Spec<'_, T>,
    key: Option<ReplayKey>,
) -> Result<(), CollError> {
    let (p, me) = (team.size(), team.rank());
    let mut tmp = Vec::new();
    let (l, _) = lower(ep, team, &spec)?;
    if p == 1 && l.opts.algorithm.is_none() {
        // A team of one: the output is this member's own contribution (nothing to
        // exchange, no algorithm to run; a forced one still runs, as asked).
        coll(ep, |c, _| c.with_resolved(team, |_, _| Ok(())))??;
        let (input, out) = spec.data.io(l.kind, p, me, l.root, &mut tmp);
        let n = out.len();
        out.copy_from_slice(&input[..n]);
        return Ok(());
    }
    let mut trial = true;
    loop {
        let (input, out) = spec.data.io(l.kind, p, me, l.root, &mut tmp);
        let io = Io {
            input: bytemuck::cast_slice(input),
            out: bytemuck::cast_slice_mut(out),
            reduce: spec.reduce.as_deref().map(ReduceOp::func),
        };
        match direct(ep, team, &l, io, Entry::default(), (trial, key))? {
            Direct::Done(_) => return Ok(()),
            Direct::Trial => {
                trial = false;
                online_trial(ep, team, &l, spec.reduce.as_deref())?;
            }
            Direct::Declined => break,
        }
    }
    let team = online_trial(ep, team, &l, spec.reduce.as_deref())?;
    let (input, _) = spec.data.io(l.kind, p, me, l.root, &mut tmp);
    let s = Start {
        kind: l.kind,
        root: l.root,
        elem: l.elem,
        count: l.count,
        input: Input::Owned(if l.kind == OpKind::Barrier {
            Entry::default().encode()
        } else {
            bytemuck::cast_slice::<T, u8>(input).to_vec()
        }),
        reduce: owned_reduce(spec.reduce.as_deref()),
        opts: l.opts,
        codes: l.codes,
        desc: None,
    };
    let ev = start_event(ep, &team, s, finish_vec::<T>)?;
    let v = ep.wait(ev)?;
    let (_, out) = spec.data.io(l.kind, p, me, l.root, &mut tmp);
    if !out.is_empty() {
        out.copy_from_slice(&v[..out.len()]);
    }
    Ok(())
}

/// A barrier with `entry` on `team` in mode `M` (blocking: the direct flag barrier
/// when it applies).
pub(crate) fn run_barrier<C: Conduit, M: Mode>(
    ep: &mut Endpoint<C>,
    team: &Team,
    entry: Entry,
    opts: &Opts<'_>,
) -> Result<M::Out<(), CollError>, CollError> {
    if M::KIND == ModeKind::Blocking {
        barrier_blocking(ep, team, entry, opts)?;
        let ev = coll(ep, |_, cx| cx.ready(Ok(())))?;
        return layer::finish::<(), CollError, M, C>(ep, ev, COLL_TAG);
    }
    let ev = barrier_event(ep, team, entry, opts)?;
    layer::finish::<(), CollError, M, C>(ep, ev, COLL_TAG)
}

/// A blocking barrier with `entry`: the direct flag barrier when it applies, else a
/// barrier in the layer's table, waited for.
pub(crate) fn barrier_blocking<C: Conduit>(
    ep: &mut Endpoint<C>,
    team: &Team,
    entry: Entry,
    opts: &Opts<'_>,
) -> Result<(), CollError> {
    if team.size() == 1 && opts.algorithm.is_none() {
        // A team of one: nobody to wait for.
        coll(ep, |c, _| c.with_resolved(team, |_, _| Ok(())))??;
        return entry.outcome();
    }
    if *opts == Opts::default() {
        if let Some(merged) = barrier_replay(ep, team, entry)? {
            return merged.outcome();
        }
    }
    let l = Lowered {
        kind: OpKind::Barrier,
        root: 0,
        elem: ENTRY_LEN,
        count: 1,
        commutative: true,
        opts: *opts,
        codes: (0, 0),
    };
    let io = Io {
        input: &[],
        out: &mut [],
        reduce: None,
    };
    if let Direct::Done(merged) = direct(ep, team, &l, io, entry, (false, None))? {
        return merged.outcome();
    }
    let ev = barrier_event(ep, team, entry, opts)?;
    ep.wait(ev)
}

/// After a step taken on the layer's state alone ([`replay`], [`barrier_replay`],
/// [`step_direct`]): wakes the sleepers of `team` if the step asked to (`wakes`), in
/// one entry into the layer (none if not). The step recorded its wait, if any, in
/// the layer's state; the progress hook is asked for only before the endpoint's
/// wait loop ([`wait_direct`]).
#[inline(always)]
fn after_borrowed_step<C: Conduit>(
    ep: &mut Endpoint<C>,
    team: &Team,
    wakes: bool,
) -> Result<(), CollError> {
    if !wakes {
        return Ok(());
    }
    wake_after_borrowed_step(ep, team)
}

/// [`after_borrowed_step`] with members to wake (out of line: a call that wakes
/// nobody sets up no frame for it).
#[cold]
#[inline(never)]
fn wake_after_borrowed_step<C: Conduit>(
    ep: &mut Endpoint<C>,
    team: &Team,
) -> Result<(), CollError> {
    coll(ep, |c, cx| {
        c.with_resolved(team, |c, team| {
            c.wake_team(cx, team);
            Ok(())
        })
    })?
}

/// A blocking barrier under default options as the last one ran
/// ([`Coll::barrier_replay`]): its merged entry, or `None` (nothing consumed) when
/// that decision does not hold. Like [`replay`], without a progress thread the
/// layer's state is borrowed directly, and the endpoint's context is entered only to
/// wake members or before the endpoint's wait loop.
#[inline]
fn barrier_replay<C: Conduit>(
    ep: &mut Endpoint<C>,
    team: &Team,
    entry: Entry,
) -> Result<Option<Entry>, CollError> {
    let mut slot = None;
    let mut wakes = false;
    let Some(r) = lent(ep, |c| {
        c.barrier_replay(team, entry, &mut slot, &mut |_| wakes = true)
    }) else {
        return Ok(None);
    };
    let pending = matches!(r, Replayed::Pending);
    after_borrowed_step(ep, team, wakes)?;
    let Some(d) = slot.as_mut() else {
        return Ok(None);
    };
    if !pending {
        return Ok(Some(merged_entry(d)));
    }
    let mut io = Io {
        input: &[],
        out: &mut [],
        reduce: None,
    };
    match wait_direct(ep, team, d, &mut io)? {
        Direct::Done(merged) => Ok(Some(merged)),
        Direct::Declined | Direct::Trial => {
            unreachable!("a direct barrier under way runs to its end")
        }
    }
}

/// Starts a barrier with `entry` in the layer's table.
pub(crate) fn barrier_event<C: Conduit>(
    ep: &mut Endpoint<C>,
    team: &Team,
    entry: Entry,
    opts: &Opts<'_>,
) -> Result<Event<(), CollError>, CollError> {
    let s = Start {
        kind: OpKind::Barrier,
        root: 0,
        elem: ENTRY_LEN,
        count: 1,
        input: Input::Owned(entry.encode()),
        reduce: None,
        opts: *opts,
        codes: (0, 0),
        desc: None,
    };
    start_event(ep, team, s, gex_core::event::finish_unit)
}

/// A collective in single address mode.
pub(crate) fn run_single<C: Conduit, T: Elem, M: Mode>(
    ep: &mut Endpoint<C>,
    team: &Team,
    spec: Spec<'_, T>,
) -> Result<M::Out<(), CollError>, CollError> {
    if spec.kind == OpKind::Barrier {
        return run_barrier::<C, M>(ep, team, Entry::default(), &spec.opts);
    }
    let team = resolve(ep, team)?;
    let SpecData::Segments(single) = &spec.data else {
        return Err(CollError::Layer("a single-mode descriptor without offsets"));
    };
    let count = spec.count.unwrap_or(0);
    let block = block_bytes::<T>(team.size() as usize, count).ok_or_else(|| {
        CollError::BadAddress(format!(
            "{count} elements of {} bytes per block: {} blocks do not fit in memory",
            size_of::<T>(),
            team.size()
        ))
    })?;
    let (root, at) = resolve_root(ep, &team, spec.kind, spec.root, block)?;
    if spec.kind.reduces() && spec.reduce.is_none() {
        return Err(CollError::UnsupportedOp {
            op: "none".into(),
            ty: std::any::type_name::<T>(),
        });
    }
    let with_root;
    let single = match at {
        Some(offset) => {
            with_root = single.with_root_buffer(spec.kind, root, offset);
            &with_root
        }
        None => single,
    };
    let s = Start {
        kind: spec.kind,
        root,
        elem: size_of::<T>(),
        count,
        input: Input::Single(single),
        reduce: spec
            .reduce
            .as_ref()
            .map(|o| (o.func().clone(), o.is_commutative())),
        opts: spec.opts,
        codes: (
            elem_code::<T>(),
            spec.reduce.as_deref().map_or(0, ReduceOp::code),
        ),
        desc: None,
    };
    let ev = start_event(ep, &team, s, gex_core::event::finish_unit)?;
    layer::finish::<(), CollError, M, C>(ep, ev, COLL_TAG)
}

/// Resolves `team` ([`resolve`]), then times the surviving candidates of a call's
/// cell on it if the online tuner decides it and has not yet (every member does the
/// same calls in the same order, so this is collective), agrees on the slowest
/// member's time per candidate and records the fastest. Returns the resolved team.
fn online_trial<C: Conduit, T: Elem>(
    ep: &mut Endpoint<C>,
    team: &Team,
    l: &Lowered<'_>,
    reduce: Option<&ReduceOp<T>>,
) -> Result<Team, CollError> {
    let team = resolve(ep, team)?;
    let n = l.elem * l.count;
    let q = query(&team, l.kind, n, AddrMode::Local, &l.opts, l.commutative);
    let need = coll(ep, |c, _| {
        c.tuning.online_applies(&q, &l.opts)
            && c.tuning.tuner().online_choice(team.id(), &q).is_none()
    })?;
    if need {
        let reduce = owned_reduce(reduce);
        online::trial(ep, &team, &q, l.root, l.elem, l.count, &reduce, &l.opts)?;
    }
    Ok(team)
}
