//! Members that call one collective with different descriptors (issue 24, point 5):
//! block lengths (4096 against 8 elements, 16 against 8, sizes of one class), element
//! types, operators, sync modes, operations. Every member gets an error, from the call
//! or, when its part completed before anyone could tell (a broadcast root), from its
//! next collective on the team: never a hang (the simulator's watchdog and the process
//! runner's turn one into a failure) and never wrong values without an error.
//!
//! Thread ranks on the simulator: shared memory (the direct path, the small-broadcast
//! ring, replayed calls, the layer's table in mode `Nb`), messages (one rank per host)
//! and hierarchical teams (two hosts of two); processes on smp. Also: a collective
//! that waits for a member that never calls it is covered by `GEX_STALL_REPORT`.

#[macro_use]
mod common;

use common::{layers, on_sim};
use gex::spi::Conduit;
use gex_coll::{
    Barrier, Broadcast, BuiltinOp, ByKind, CollError, CollExt, Elem, Field, OpKind, Opts, ReduceOp,
    Scratch, SyncMode, SyncModes, Team,
};
use gex_core::{Blocking, Endpoint, Nb};
use gex_testkit::procs::Procs;
use gex_testkit::sim::SimConfig;
use std::time::Duration;

const SEG: usize = 1 << 20;

/// How a member makes the call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    /// Blocking over borrowed slices (the direct path; a replayed call when the
    /// previous call had the same shape).
    Slices,
    /// Blocking in place (broadcast: the ring's leanest path for small blocks).
    InPlace,
    /// Blocking with owned data (the direct path over owned buffers).
    Owned,
    /// Nonblocking (the layer's table), waited for.
    Nb,
}

/// One member's side of a call.
#[derive(Clone, Copy, Debug)]
struct Side {
    count: usize,
    op: OpKind,
    root: u32,
    red: BuiltinOp,
    sync: SyncModes,
}

impl Side {
    fn new(op: OpKind, count: usize) -> Side {
        Side {
            count,
            op,
            root: 0,
            red: BuiltinOp::Sum,
            sync: SyncModes::default(),
        }
    }
}

/// Runs `s` on `team` as `form`: the output bytes, or the error.
fn call<C: Conduit, T: Elem>(
    c: &mut Endpoint<C>,
    team: &Team,
    s: Side,
    form: Form,
) -> Result<Vec<u8>, CollError> {
    let (p, me) = (team.size(), team.rank());
    let (i, o) = s.op.shape(p, me, s.root);
    let src: Vec<T> = common::to_vec(&common::bytes(
        me as usize,
        7,
        i.max(1) * s.count * size_of::<T>(),
    ));
    let opts = Opts::sync(s.sync.input, s.sync.output);
    let red = ReduceOp::<T>::builtin(s.red);
    match form {
        Form::Slices => {
            let mut dst = vec![src[0]; o.max(1) * s.count];
            let d = ByKind::slices(s.op, &src, &mut dst)
                .root(s.root)
                .reduce(&red)
                .opts(opts);
            c.collective(team, d, Blocking)?;
            Ok(bytemuck::cast_slice(&dst).to_vec())
        }
        Form::InPlace => {
            assert_eq!(s.op, OpKind::Broadcast);
            let mut buf = src[..s.count].to_vec();
            c.collective(
                team,
                Broadcast::in_place(s.root, &mut buf).opts(opts),
                Blocking,
            )?;
            Ok(bytemuck::cast_slice(&buf).to_vec())
        }
        Form::Owned | Form::Nb => {
            let d = ByKind::new(s.op, src)
                .root(s.root)
                .count(s.count)
                .reduce(&red)
                .opts(opts);
            let v = if form == Form::Nb {
                let ev = c.collective(team, d, Nb)?;
                c.wait(ev)?
            } else {
                c.collective(team, d, Blocking)?
            };
            Ok(bytemuck::cast_slice(&v).to_vec())
        }
    }
}

/// A case: member 0's side, the other members' side, the element type of each (by
/// size: 1, 4 = u32, 8 = u64; 0 = f32), the form, and the field that differs.
#[derive(Clone, Copy, Debug)]
struct Case {
    first: Side,
    others: Side,
    types: (u8, u8),
    form: Form,
    field: Field,
}

fn run_side<C: Conduit>(
    c: &mut Endpoint<C>,
    team: &Team,
    s: Side,
    ty: u8,
    form: Form,
) -> Result<Vec<u8>, CollError> {
    match ty {
        1 => call::<C, u8>(c, team, s, form),
        4 => call::<C, u32>(c, team, s, form),
        8 => call::<C, u64>(c, team, s, form),
        _ => call::<C, f32>(c, team, s, form),
    }
}

/// What a member saw: the call's outcome and that of a barrier of the team after it.
type Seen = (Result<Vec<u8>, CollError>, Result<(), CollError>);

/// Runs `case` on a team of every member of `w` made for it (a team whose members
/// disagreed is left to itself: destroyed here), then a barrier of the team.
fn run_case<C: Conduit>(c: &mut Endpoint<C>, w: &Team, case: &Case) -> Seen {
    let all: Vec<u32> = (0..w.size()).collect();
    let t = c.create_team(w, &all, Scratch::None).unwrap();
    let me = t.rank();
    let (s, ty) = if me == 0 {
        (case.first, case.types.0)
    } else {
        (case.others, case.types.1)
    };
    let r = run_side(c, &t, s, ty, case.form);
    let b = c.collective(&t, Barrier::new(), Blocking);
    c.destroy_team(t).unwrap();
    (r, b)
}

/// Checks what member `me` saw in `case`: [`CollError::Mismatch`] from the call or
/// from the barrier after it (a member whose part completed), never a silent success;
/// when it names the field, the case's, with member 0's value on one side and
/// another member's on the other. Returns whether the field was named.
fn check(me: u32, case: &Case, seen: &Seen) -> bool {
    let (r, b) = seen;
    let e = match (r, b) {
        (Err(e), _) | (Ok(_), Err(e)) => e,
        (Ok(v), Ok(())) => panic!(
            "member {me}, {case:?}: no error (call Ok with {} bytes, barrier after it Ok)",
            v.len()
        ),
    };
    // A member whose call failed finds the team failed too.
    if r.is_err() {
        assert!(
            matches!(b, Err(CollError::Mismatch { .. })),
            "member {me}, {case:?}: barrier after the failed call: {b:?}"
        );
    }
    let CollError::Mismatch { found, .. } = e else {
        panic!("member {me}, {case:?}: {e:?} instead of a mismatch");
    };
    let Some(d) = found else {
        return false;
    };
    assert_eq!(d.field, case.field, "member {me}, {case:?}: {e}");
    assert!(
        (d.member == 0) != (d.other == 0),
        "member {me}, {case:?}: {e} (member 0 differs from the others)"
    );
    // Every member's message names both values.
    let text = e.to_string();
    assert!(text.contains(case.field.name()), "{text}");
    true
}

/// The cases: block lengths for every operation (4096 against 8, 16 against 8, and
/// two sizes of one size class), in every form, then the other fields.
fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    let forms = [Form::Slices, Form::Nb, Form::Owned];
    let mut k = 0;
    for op in OpKind::ALL.into_iter().filter(|&o| o != OpKind::Barrier) {
        for (a, b) in [(4096usize, 8usize), (16, 8), (6, 5)] {
            v.push(Case {
                first: Side::new(op, a),
                others: Side::new(op, b),
                types: (8, 8),
                form: forms[k % forms.len()],
                field: Field::BlockBytes,
            });
            k += 1;
        }
    }
    // Small broadcasts in place: the ring's packed slots (<= 8 bytes), its slots
    // (9-56), across the classes, and the slot protocol.
    for (a, b) in [(5usize, 3usize), (40, 24), (16, 8), (4096, 8), (200, 100)] {
        v.push(Case {
            first: Side::new(OpKind::Broadcast, a),
            others: Side::new(OpKind::Broadcast, b),
            types: (1, 1),
            form: Form::InPlace,
            field: Field::BlockBytes,
        });
    }
    // Element types of one size, and of two sizes with the same bytes.
    let ar = |n| Side::new(OpKind::Allreduce, n);
    v.push(Case {
        first: ar(4),
        others: ar(4),
        types: (4, 0),
        form: Form::Slices,
        field: Field::ElementType,
    });
    v.push(Case {
        first: ar(4),
        others: ar(2),
        types: (4, 8),
        form: Form::Nb,
        field: Field::ElementType,
    });
    // Reduction operators.
    v.push(Case {
        first: ar(4),
        others: Side {
            red: BuiltinOp::Max,
            ..ar(4)
        },
        types: (8, 8),
        form: Form::Slices,
        field: Field::Reduction,
    });
    // Sync modes.
    v.push(Case {
        first: Side {
            sync: SyncModes::new(SyncMode::All, SyncMode::All),
            ..ar(4)
        },
        others: ar(4),
        types: (8, 8),
        form: Form::Nb,
        field: Field::Sync,
    });
    // Operations.
    v.push(Case {
        first: ar(4),
        others: Side::new(OpKind::GatherAll, 4),
        types: (8, 8),
        form: Form::Slices,
        field: Field::Operation,
    });
    // Roots.
    v.push(Case {
        first: Side::new(OpKind::Reduce, 4),
        others: Side {
            root: 1,
            ..Side::new(OpKind::Reduce, 4)
        },
        types: (8, 8),
        form: Form::Nb,
        field: Field::Root,
    });
    v
}

/// Every case on the world of `p` thread ranks placed `per_host` to a host.
fn sim_job(p: u32, per_host: u32) {
    let cfg = SimConfig::default()
        .seed(53)
        .ranks_per_host(per_host)
        .timeout(Duration::from_secs(90));
    let named = on_sim(p, cfg, SEG, |mut c, w| {
        let me = w.rank();
        let mut named = 0;
        let all = cases();
        for case in &all {
            let seen = run_case(&mut c, &w, case);
            named += usize::from(check(me, case, &seen));
            c.barrier(&w).unwrap();
        }
        (named, all.len())
    });
    // Every member named the field in every case (the cases are built so that the
    // member that detects it still finds the other's descriptor).
    for (me, (n, all)) in named.into_iter().enumerate() {
        assert_eq!(n, all, "member {me} named the field in {n} of {all} cases");
    }
}

#[test]
fn mismatched_descriptors_shared_memory() {
    sim_job(2, 2);
}

#[test]
fn mismatched_descriptors_messages() {
    sim_job(3, 1);
}

#[test]
fn mismatched_descriptors_hierarchical() {
    sim_job(4, 2);
}

/// A replayed call (the same shape as the last direct call) against a member whose
/// shape changed: the first call agrees, the second differs only in length.
#[test]
fn a_replayed_call_against_another_length() {
    let cfg = SimConfig::default()
        .seed(59)
        .ranks_per_host(2)
        .timeout(Duration::from_secs(60));
    on_sim(2, cfg, SEG, |mut c, w| {
        let me = w.rank();
        for op in [OpKind::Allreduce, OpKind::Broadcast, OpKind::GatherAll] {
            let t = c.create_team(&w, &[0, 1], Scratch::None).unwrap();
            let s = Side::new(op, 8);
            run_side(&mut c, &t, s, 8, Form::Slices).unwrap();
            let replays = c.coll_stats().replayed_calls;
            let second = Side::new(op, if me == 0 { 16 } else { 8 });
            let r = run_side(&mut c, &t, second, 8, Form::Slices);
            if me == 1 && c.shared_memory(&t) {
                assert_eq!(c.coll_stats().replayed_calls, replays + 1, "{op}");
            }
            let b = c.collective(&t, Barrier::new(), Blocking);
            let case = Case {
                first: second,
                others: second,
                types: (8, 8),
                form: Form::Slices,
                field: Field::BlockBytes,
            };
            check(me, &case, &(r, b));
            c.destroy_team(t).unwrap();
            c.barrier(&w).unwrap();
        }
    });
}

endpoint_jobs! {
    /// Processes on smp: the cases (4096 against 8 elements, 16 against 8) and a
    /// small broadcast through the ring, with the runner's watchdog.
    struct Procs2 |c| {
        let w = c.world();
        let me = w.rank();
        let mut v: Vec<Case> = Vec::new();
        for op in [OpKind::Allreduce, OpKind::Broadcast, OpKind::GatherAll] {
            for (a, b) in [(4096usize, 8usize), (16, 8)] {
                for form in [Form::Slices, Form::Nb] {
                    v.push(Case {
                        first: Side::new(op, a),
                        others: Side::new(op, b),
                        types: (8, 8),
                        form,
                        field: Field::BlockBytes,
                    });
                }
            }
        }
        v.push(Case {
            first: Side::new(OpKind::Broadcast, 5),
            others: Side::new(OpKind::Broadcast, 3),
            types: (1, 1),
            form: Form::InPlace,
            field: Field::BlockBytes,
        });
        for case in &v {
            let seen = run_case(&mut c, &w, case);
            check(me, case, &seen);
            c.barrier(&w).unwrap();
        }
    }
}

#[test]
fn procs_mismatched_lengths_2() {
    Procs::new(2)
        .timeout(Duration::from_secs(60))
        .run(|boot| gex::init_with_boot(layers().segment_size(SEG), boot, None, Procs2).unwrap())
        .assert_success();
}

endpoint_jobs! {
    /// A collective waiting for a member that calls it only 2.5 s later: rank 0's wait
    /// prints the endpoint's report under `GEX_STALL_REPORT=1` (direct path, replayed
    /// call, the small-broadcast ring, the barrier, the layer's table).
    struct Late |c| {
        let w = c.world();
        let me = w.rank();
        gex_testkit::procs::note("shm", if c.shared_memory(&w) { "1" } else { "0" });
        let late = || std::thread::sleep(Duration::from_millis(2500));
        let mut src = [1u64; 4];
        let mut dst = [0u64; 4];
        for round in 0..2 {
            // Round 0: the direct path; round 1: the replayed call.
            if me == 1 {
                late();
            }
            eprintln!("mismatch-test: allreduce round {round}");
            c.collective(
                &w,
                gex_coll::Allreduce::slices(&src, &mut dst, BuiltinOp::Sum),
                Blocking,
            )
            .unwrap();
            assert_eq!(dst, [2; 4]);
        }
        if me == 1 {
            late();
        }
        eprintln!("mismatch-test: ring");
        let mut b = [me as u8; 8];
        c.collective(&w, Broadcast::in_place(1, &mut b), Blocking)
            .unwrap();
        assert_eq!(b, [1; 8]);
        if me == 1 {
            late();
        }
        eprintln!("mismatch-test: barrier");
        c.barrier(&w).unwrap();
        if me == 1 {
            late();
        }
        eprintln!("mismatch-test: nb");
        src = [3; 4];
        let ev = c
            .collective(
                &w,
                gex_coll::Allreduce::new(src.to_vec(), BuiltinOp::Sum),
                Nb,
            )
            .unwrap();
        assert_eq!(c.wait(ev).unwrap(), vec![6; 4]);
    }
}

#[test]
fn a_waiting_collective_prints_the_stall_report() {
    let report = Procs::new(2)
        .timeout(Duration::from_secs(60))
        .env("GEX_STALL_REPORT", "1")
        .run(|boot| gex::init_with_boot(layers().segment_size(SEG), boot, None, Late).unwrap());
    report.assert_success();
    let log = &report.rank(0).expect("rank 0").log;
    // Every wait of rank 0 printed the report, naming what the collective waits
    // for, before the next one started.
    let parts: Vec<&str> = log.split("mismatch-test: ").collect();
    assert_eq!(parts.len(), 6, "{log}");
    let shm = [
        "a blocking call (team 0x0 seq 0) waits for member 1's publication",
        "a blocking call (team 0x0 seq 1) waits for member 1's publication",
        "a blocking call (team 0x0 seq 2) waits for member 1's small-broadcast publication",
        "a blocking call (team 0x0 seq 3) waits for member 1 to enter barrier",
        "allreduce on team 0x0 seq 4",
    ];
    // Without shared memory (`--cfg gex_force_am_rma`) every call goes through the
    // layer's table.
    let msgs = [
        "allreduce on team 0x0 seq 0",
        "allreduce on team 0x0 seq 1",
        "broadcast on team 0x0 seq 2",
        "barrier on team 0x0 seq 3",
        "allreduce on team 0x0 seq 4",
    ];
    let want = if report.notes("shm") == ["1", "1"] {
        shm
    } else {
        msgs
    };
    for (part, want) in parts[1..].iter().zip(want) {
        assert!(
            part.contains("without progress") && part.contains(want),
            "no stall report naming {want:?} in this wait:\n{part}\n(whole log:\n{log})"
        );
    }
}
