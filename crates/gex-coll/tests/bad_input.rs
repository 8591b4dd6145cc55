//! Bad input to gex-coll's calls (docs/testing.md, "Bad input"): the documented error
//! variants `tests/sim.rs` does not trigger, and the failure modes a runtime author
//! meets with bad arguments (a team of another endpoint, a team the layer never
//! made, counts no memory holds, a missing operator, bad `GEX_COLL_*` values, a
//! tuner with nothing to choose). Each must be the documented error, never a panic, a
//! hang or corrupted state. One rank on the loopback conduit, or a few thread ranks
//! on the simulator where members must disagree.

mod common;

use gex_coll::{
    Allreduce, Barrier, BarrierFlags, Broadcast, BuiltinOp, ByKind, Coll, CollError, CollExt,
    Exchange, Gather, GatherAll, InSegments, LogGP, OpKind, Opts, Profile, Query, Reduce, Scatter,
    Scratch, Single, TeamExt, Tuner,
};
use gex_core::boot::Singleton;
use gex_core::loopback::Loopback;
use gex_core::{
    Blocking, Client, ClientBuilder, Config, EpAddr, EpError, EventError, Nb, Nbi, OwnedEndpoint,
    Team,
};
use gex_testkit::sim::SimConfig;
use std::sync::Arc;

const SEG: usize = 1 << 16;

fn layers() -> ClientBuilder<(((), gex_rma::Rma), Coll)> {
    ClientBuilder::new().layer::<gex_rma::Rma>().layer::<Coll>()
}

fn client(eps: u16) -> Client<Loopback> {
    layers()
        .segment_size(SEG)
        .endpoints(eps)
        .config(Config::default())
        .init::<Loopback>(Box::new(Singleton::new()))
        .unwrap()
}

/// A one-rank client of one endpoint, its endpoint 0 and that endpoint's world team.
fn one_rank() -> (Client<Loopback>, OwnedEndpoint<Loopback>, Team) {
    let c = client(1);
    let ep = c.endpoint(0).unwrap();
    let w = ep.world();
    (c, ep, w)
}

/// A one-rank client of two endpoints and its endpoints 0 and 1.
fn two_endpoints() -> (
    Client<Loopback>,
    OwnedEndpoint<Loopback>,
    OwnedEndpoint<Loopback>,
) {
    let c = client(2);
    let (a, b) = (c.endpoint(0).unwrap(), c.endpoint(1).unwrap());
    (c, a, b)
}

fn query(op: OpKind, size: u32, bytes: usize) -> Query {
    Query::plain(op, size, bytes)
}

// ---------------------------------------------------------------- without the layer

#[test]
fn every_call_without_the_layer_is_a_layer_error() {
    let c = ClientBuilder::new()
        .layer::<gex_rma::Rma>()
        .segment_size(SEG)
        .config(Config::default())
        .init::<Loopback>(Box::new(Singleton::new()))
        .unwrap();
    let mut ep = c.endpoint(0).unwrap();
    let w = ep.world();
    let layer = |r: Result<(), CollError>| {
        assert!(matches!(r, Err(CollError::Layer(_))), "{r:?}");
    };
    layer(ep.barrier(&w));
    layer(
        ep.collective(&w, Allreduce::new(vec![1u32], BuiltinOp::Sum), Nb)
            .map(drop),
    );
    layer(ep.collective(&w, Barrier::new(), Nbi));
    let mut b = [0u8; 2];
    layer(ep.collective(&w, Broadcast::in_place(0, &mut b), Blocking));
    layer(ep.barrier_notify(&w, 1, BarrierFlags::empty()));
    layer(ep.barrier_wait(&w, 1, BarrierFlags::empty()));
    layer(ep.barrier_try(&w, 1, BarrierFlags::empty()).map(drop));
    layer(ep.split(&w, Some(0), 0, Scratch::None).map(drop));
    layer(ep.create_team(&w, &[0], Scratch::None).map(drop));
    layer(ep.explain(&query(OpKind::Broadcast, 1, 8)).map(drop));
    layer(ep.tuner(|_| ()));
    layer(ep.register_algorithm(Arc::new(gex_coll::Builtin::new(
        gex_coll::Kind::Flat,
        2,
        0,
        gex_coll::Transport::Eager,
    ))));
    layer(ep.set_scratch_region(0..16));
    // The queries answer without the layer.
    assert!(ep.algorithms(OpKind::Broadcast).is_empty());
    assert!(!ep.shared_memory(&w));
    assert!(!ep.hierarchical(&w));
    assert_eq!(ep.coll_stats(), Default::default());
}

// ---------------------------------------------------------------- teams

/// Teams the calling endpoint is not the member of: another endpoint's world, a team
/// value built by hand, a team another endpoint's layer made.
#[test]
fn a_team_of_another_endpoint_is_not_member() {
    let (_c, mut a, mut b) = two_endpoints();
    let bw = b.world();
    let not_member = |r: Result<(), CollError>| {
        assert!(matches!(r, Err(CollError::NotMember { .. })), "{r:?}");
    };
    not_member(a.barrier(&bw));
    not_member(a.collective(&bw, GatherAll::new(vec![1u8]), Nb).map(drop));
    let mut buf = [1u16; 3];
    not_member(a.collective(&bw, Allreduce::in_place(&mut buf, BuiltinOp::Max), Blocking));
    not_member(a.barrier_notify(&bw, 1, BarrierFlags::empty()));
    not_member(a.split(&bw, Some(1), 0, Scratch::None).map(drop));
    not_member(a.create_team(&bw, &[0], Scratch::None).map(drop));
    // A team value the layer never made (this endpoint is its member, but the layer
    // has no state for it).
    let hand = Team::new(77, vec![a.addr()], 0);
    not_member(a.barrier(&hand));
    not_member(
        a.collective(&hand, Exchange::new(vec![1u32]), Blocking)
            .map(drop),
    );
    // A team b's layer made.
    let bt = b.split(&bw, Some(0), 0, Scratch::None).unwrap().unwrap();
    not_member(a.collective(&bt, Barrier::new(), Blocking));
    assert!(!a.shared_memory(&bt) && !a.hierarchical(&bt));
    // Everything still works on the right endpoints.
    let aw = a.world();
    a.barrier(&aw).unwrap();
    b.barrier(&bt).unwrap();
}

#[test]
fn team_lists_are_checked() {
    let (_c, mut ep, w) = one_rank();
    assert!(matches!(
        ep.create_team(&w, &[], Scratch::None),
        Err(CollError::BadMembers(_))
    ));
    assert!(matches!(
        ep.create_team(&w, &[0, 0], Scratch::None),
        Err(CollError::BadMembers(_))
    ));
    assert_eq!(
        ep.create_team(&w, &[1], Scratch::None).map(drop),
        Err(CollError::BadRank { rank: 1, size: 1 })
    );
    assert_eq!(
        ep.create_team(&w, &[0, u32::MAX], Scratch::None).map(drop),
        Err(CollError::BadRank {
            rank: u32::MAX,
            size: 1
        })
    );
    // The world team cannot be destroyed.
    assert!(matches!(
        ep.destroy_team(w.clone()),
        Err(CollError::BadMembers(_))
    ));
    ep.barrier(&w).unwrap();
}

/// The caller missing from a team list: `NotMember`, on the members that are not
/// listed (the listed ones form their team without them).
#[test]
fn a_list_without_the_caller_is_not_member() {
    common::on_sim(2, SimConfig::default(), SEG, |mut ep, w| {
        let r = ep.create_team(&w, &[1], Scratch::None).map(|t| t.size());
        if w.rank() == 0 {
            assert!(matches!(r, Err(CollError::NotMember { .. })), "{r:?}");
        } else {
            assert_eq!(r, Ok(1));
        }
        ep.barrier(&w).unwrap();
    });
}

/// Scratch space: regions outside the segment, given ranges outside it, allocations
/// without a region or larger than it.
#[test]
fn scratch_outside_the_segment_is_a_scratch_error() {
    let (_c, mut ep, w) = one_rank();
    let scratch = |r: Result<(), CollError>| {
        assert!(matches!(r, Err(CollError::Scratch(_))), "{r:?}");
    };
    scratch(ep.set_scratch_region(0..SEG + 1));
    scratch(ep.set_scratch_region(SEG..usize::MAX));
    #[allow(clippy::reversed_empty_ranges)]
    scratch(ep.set_scratch_region(100..10));
    // No region set: nothing to allocate from.
    scratch(ep.split(&w, Some(0), 0, Scratch::Alloc(64)).map(drop));
    scratch(
        ep.create_team(&w, &[0], Scratch::Given(SEG - 8, 16))
            .map(drop),
    );
    scratch(
        ep.split(&w, Some(0), 0, Scratch::Given(usize::MAX, 2))
            .map(drop),
    );
    ep.set_scratch_region(SEG / 2..SEG).unwrap();
    scratch(
        ep.split(&w, Some(0), 0, Scratch::Alloc(SEG / 2 + 1))
            .map(drop),
    );
    let t = ep.split(&w, Some(0), 0, Scratch::Alloc(SEG / 2)).unwrap();
    assert!(t.is_some());
    ep.barrier(&w).unwrap();
}

/// Regression: `destroy_team` did not check whose team it was given, so destroying a
/// team with another endpoint released that team's scratch range into this
/// endpoint's allocator (which could then hand out memory it never owned); and
/// destroying a team twice (through a clone) released its range twice, so two later
/// teams got the same scratch space.
#[test]
fn destroying_another_endpoints_team_or_a_team_twice_corrupts_nothing() {
    let (_c, mut a, mut b) = two_endpoints();
    let (aw, bw) = (a.world(), b.world());
    a.set_scratch_region(0..1024).unwrap();
    let t = a
        .split(&aw, Some(0), 0, Scratch::Alloc(512))
        .unwrap()
        .unwrap();
    assert_eq!(t.scratch(), &[(0, 512)]);
    // b has no scratch region: it must not gain a's range.
    assert!(matches!(
        b.destroy_team(t.clone()),
        Err(CollError::NotMember { .. })
    ));
    assert!(matches!(
        b.split(&bw, Some(0), 0, Scratch::Alloc(512)),
        Err(CollError::Scratch(_))
    ));
    // Twice through a clone: the range is released once.
    a.destroy_team(t.clone()).unwrap();
    a.destroy_team(t).unwrap();
    let x = a
        .split(&aw, Some(0), 0, Scratch::Alloc(512))
        .unwrap()
        .unwrap();
    let y = a
        .split(&aw, Some(0), 0, Scratch::Alloc(512))
        .unwrap()
        .unwrap();
    let (rx, ry) = (x.scratch()[0], y.scratch()[0]);
    assert!(
        rx.0 + rx.1 <= ry.0 || ry.0 + ry.1 <= rx.0,
        "two live teams share scratch: {rx:?} and {ry:?}"
    );
    assert!(matches!(
        a.split(&aw, Some(0), 0, Scratch::Alloc(1)),
        Err(CollError::Scratch(_))
    ));
}

// ---------------------------------------------------------------- descriptors

/// Reducing operations named by kind without an operator.
#[test]
fn a_reduction_without_an_operator_is_unsupported_op() {
    let (_c, mut ep, w) = one_rank();
    for kind in [
        OpKind::Reduce,
        OpKind::Allreduce,
        OpKind::ReduceScatter,
        OpKind::Scan,
        OpKind::Exscan,
    ] {
        let r = ep
            .collective(&w, ByKind::new(kind, vec![1u64; 2]), Nb)
            .map(drop);
        assert!(
            matches!(r, Err(CollError::UnsupportedOp { .. })),
            "{kind}: {r:?}"
        );
        let mut out = [0u64; 2];
        let r = ep.collective(&w, ByKind::slices(kind, &[1u64; 2], &mut out), Blocking);
        assert!(
            matches!(r, Err(CollError::UnsupportedOp { .. })),
            "{kind}: {r:?}"
        );
        let r = ep.collective(
            &w,
            InSegments::<u64>::new(kind, 1, Single::uniform(1, 0, 64)),
            Blocking,
        );
        assert!(
            matches!(r, Err(CollError::UnsupportedOp { .. })),
            "{kind}: {r:?}"
        );
    }
    ep.barrier(&w).unwrap();
}

/// Lengths that do not fit the team, and counts no memory holds: `BadLength` or
/// `BadAddress`, not an overflow.
#[test]
fn lengths_and_counts_are_checked_before_anything_moves() {
    let (_c, mut ep, w) = one_rank();
    let bad_len = |r: Result<(), CollError>| {
        assert!(matches!(r, Err(CollError::BadLength { .. })), "{r:?}");
    };
    // Borrowed forms whose output does not match the input.
    let mut out = [0u32; 3];
    bad_len(ep.collective(
        &w,
        Allreduce::slices(&[1u32; 2], &mut out, BuiltinOp::Sum),
        Blocking,
    ));
    bad_len(ep.collective(&w, Gather::slices(0, &[1u32; 2], &mut out), Blocking));
    bad_len(ep.collective(&w, Exchange::slices(&[1u32; 2], &mut out), Blocking));
    bad_len(ep.collective(&w, Scatter::slices(0, &[1u32; 2], &mut out), Blocking));
    bad_len(ep.collective(
        &w,
        Reduce::slices(0, &[1u32; 2], &mut out, BuiltinOp::Min),
        Blocking,
    ));
    // A scatter whose root buffer does not hold `count` blocks per member.
    bad_len(
        ep.collective(&w, Scatter::new(0, vec![1u8; 3], 2), Nb)
            .map(drop),
    );
    // Single address mode: offset lists of the wrong length, ranges outside the
    // segment.
    let bad_addr = |r: Result<(), CollError>| {
        assert!(matches!(r, Err(CollError::BadAddress(_))), "{r:?}");
    };
    bad_addr(ep.collective(
        &w,
        InSegments::<u8>::new(OpKind::GatherAll, 4, Single::uniform(2, 0, 64)),
        Blocking,
    ));
    bad_addr(
        ep.collective(
            &w,
            InSegments::<u8>::new(OpKind::GatherAll, 4, Single::uniform(1, SEG - 2, 0)),
            Nb,
        )
        .map(drop),
    );
    bad_addr(ep.collective(
        &w,
        InSegments::<u8>::new(OpKind::GatherAll, 4, Single::in_place(1, usize::MAX - 1)),
        Blocking,
    ));
    // Roots outside the team.
    assert_eq!(
        ep.collective(&w, Reduce::new(1, vec![1u8], BuiltinOp::Sum), Nb)
            .map(drop),
        Err(CollError::BadRank { rank: 1, size: 1 })
    );
    assert_eq!(
        ep.collective(
            &w,
            InSegments::<u8>::new(OpKind::Broadcast, 1, Single::uniform(1, 0, 8)).root(u32::MAX),
            Blocking
        ),
        Err(CollError::BadRank {
            rank: u32::MAX,
            size: 1
        })
    );
    ep.barrier(&w).unwrap();
}

/// Regression: `Scratch::Alloc(usize::MAX)` overflowed rounding the length up to 64
/// bytes (a panic in `split`/`create_team`).
#[test]
fn a_scratch_allocation_no_segment_holds_is_a_scratch_error() {
    let (_c, mut ep, w) = one_rank();
    ep.set_scratch_region(SEG / 2..SEG).unwrap();
    for len in [usize::MAX, usize::MAX - 62] {
        let r = ep.split(&w, Some(0), 0, Scratch::Alloc(len)).map(drop);
        assert!(matches!(r, Err(CollError::Scratch(_))), "{len}: {r:?}");
    }
    ep.barrier(&w).unwrap();
}

/// Regression: a count whose block (count × element size) overflows panicked
/// ("attempt to multiply with overflow") in `collective` instead of being refused;
/// now `BadLength` (owned and borrowed descriptors) or `BadAddress` (single address
/// mode).
#[test]
fn counts_that_overflow_a_block_are_errors() {
    let (_c, mut ep, w) = one_rank();
    // Counts that overflow the byte length of a block.
    let overflow = |r: Result<(), CollError>, what: &str| {
        assert!(
            matches!(
                r,
                Err(CollError::BadLength { .. } | CollError::BadAddress(_))
            ),
            "{what}: {r:?}"
        );
    };
    for count in [usize::MAX, usize::MAX / 2 + 1] {
        let r = ep.collective(&w, Scatter::new(0, vec![1u64; 2], count), Nb);
        overflow(r.map(drop), &format!("scatter count {count}"));
        let d = ByKind::new(OpKind::Broadcast, vec![1u32; 2]).count(count);
        overflow(
            ep.collective(&w, d, Nb).map(drop),
            &format!("broadcast count {count}"),
        );
        let d = InSegments::<u64>::new(OpKind::Broadcast, count, Single::uniform(1, 0, 64)).root(0);
        overflow(
            ep.collective(&w, d, Blocking),
            &format!("single-mode count {count}"),
        );
    }
    ep.barrier(&w).unwrap();
}

/// Forced algorithms: unknown names and algorithms that cannot run the call (also
/// through the layer's tuner), and one that needs more scratch space than the team
/// has.
#[test]
fn forced_algorithms_are_checked() {
    common::on_sim(3, SimConfig::default(), SEG, |mut ep, w| {
        let r = ep
            .collective(&w, Exchange::new(vec![1u8; 3]).algorithm("no-such"), Nb)
            .map(drop);
        assert!(
            matches!(r, Err(CollError::UnknownAlgorithm { .. })),
            "{r:?}"
        );
        // "ring" implements gather_all, not barrier.
        let r = ep.collective(&w, Barrier::new().algorithm("ring"), Blocking);
        assert!(
            matches!(r, Err(CollError::UnknownAlgorithm { .. })),
            "{r:?}"
        );
        // Recursive doubling needs a power of two.
        let r = ep.collective(&w, GatherAll::new(vec![1u8]).algorithm("recdbl"), Nbi);
        assert!(matches!(r, Err(CollError::Unsupported { .. })), "{r:?}");
        let r = ep.tuner(|t| {
            t.select(&query(OpKind::GatherAll, 3, 1), Some("recdbl"))
                .map(|a| a.name().to_string())
        });
        assert!(matches!(r, Ok(Err(CollError::Unsupported { .. }))), "{r:?}");
        // An algorithm moving data through the team's scratch space, on a team
        // without any: the error says how much is needed.
        let scratchy = ep
            .algorithms(OpKind::GatherAll)
            .into_iter()
            .find(|name| {
                let q = Query {
                    scratch: true,
                    ..query(OpKind::GatherAll, 3, 64)
                };
                ep.tuner(|t| t.select(&q, Some(name)).is_ok()).unwrap()
                    && ep
                        .tuner(|t| {
                            t.select(&query(OpKind::GatherAll, 3, 64), Some(name))
                                .is_err()
                        })
                        .unwrap()
            })
            .expect("an algorithm that needs scratch space");
        let r = ep
            .collective(&w, GatherAll::new(vec![1u8; 64]).algorithm(&scratchy), Nb)
            .map(drop);
        assert!(
            matches!(
                &r,
                Err(CollError::ScratchTooSmall {
                    needed: 192,
                    available: 0,
                    size: 3,
                    block: 64,
                    ..
                })
            ),
            "{scratchy}: {r:?}"
        );
        ep.barrier(&w).unwrap();
    });
}

/// Opts naming an algorithm through `Opts::with_algorithm`, and explain on queries no
/// job makes (empty teams, huge blocks): errors or answers, never panics.
#[test]
fn the_tuner_answers_odd_queries_without_panicking() {
    let (_c, mut ep, w) = one_rank();
    let r = ep.collective(
        &w,
        Broadcast::new(0, vec![1u8]).opts(Opts::default().with_algorithm("nonesuch")),
        Nb,
    );
    assert!(
        matches!(r, Err(CollError::UnknownAlgorithm { .. })),
        "{r:?}"
    );
    for op in OpKind::ALL {
        for (size, bytes) in [(0, 8), (1, usize::MAX), (u32::MAX, 8), (3, 0)] {
            let _ = ep.explain(&query(op, size, bytes));
            let _ = ep.tuner(|t| t.select(&query(op, size, bytes), None).map(drop));
        }
    }
    ep.barrier(&w).unwrap();
}

/// A tuner with no algorithm: `NoAlgorithm` from select and explain.
#[test]
fn a_tuner_without_candidates_is_no_algorithm() {
    let mut t = Tuner::new(Vec::new(), LogGP::default());
    let q = query(OpKind::Allreduce, 4, 64);
    assert!(matches!(
        t.select(&q, None).map(drop),
        Err(CollError::NoAlgorithm { .. })
    ));
    assert!(matches!(t.explain(&q), Err(CollError::NoAlgorithm { .. })));
    assert!(matches!(
        t.select_within(&q).map(drop),
        Err(CollError::NoAlgorithm { .. })
    ));
    assert!(matches!(
        t.select(&q, Some("binomial")).map(drop),
        Err(CollError::UnknownAlgorithm { .. })
    ));
}

/// `Tuner::configure` (what the layer runs on `GEX_COLL_*`), `LogGP::parse`,
/// `Builtin::fork` and `Tuner::set_profile` report their documented variants.
#[test]
fn tuner_configuration_errors_have_their_variants() {
    let conf = |k: &'static str, v: &'static str| {
        let mut t = Tuner::new(gex_coll::catalog(), LogGP::default());
        t.configure(|x| (x == k).then(|| v.to_string()))
    };
    for (k, v) in [
        ("GEX_COLL_TUNE", "sometimes"),
        ("GEX_COLL_LOGGP", "1,2"),
        ("GEX_COLL_LOGGP", "1,2,3,-4"),
        ("GEX_COLL_LOGGP", "1,2,3,NaN"),
    ] {
        let r = conf(k, v);
        assert!(matches!(r, Err(CollError::Config(_))), "{k}={v}: {r:?}");
    }
    assert!(matches!(
        conf("GEX_COLL_ALLREDUCE", "no-such"),
        Err(CollError::UnknownAlgorithm { .. })
    ));
    assert!(matches!(
        conf("GEX_COLL_PROFILE", "/nonexistent/gex-profile.toml"),
        Err(CollError::Profile { line: 0, .. })
    ));
    assert!(matches!(LogGP::parse("x,1,1,1"), Err(CollError::Config(_))));
    assert!(matches!(
        gex_coll::Builtin::fork(&[2, 0], gex_coll::Transport::Eager),
        Err(CollError::Config(_))
    ));
    assert!(matches!(
        gex_coll::Builtin::fork(&[2; 64], gex_coll::Transport::Eager),
        Err(CollError::Config(_))
    ));
    // A profile whose cell names an algorithm this tuner does not have.
    let p = Profile::parse(
        "p.toml",
        "[[cell]]\nop = \"broadcast\"\nteam = 4\nbytes = 8\nchoice = \"warp-drive\"\n",
    );
    match p {
        Ok(p) => {
            let mut t = Tuner::new(gex_coll::catalog(), LogGP::default());
            assert!(matches!(
                t.set_profile("p.toml", p),
                Err(CollError::Profile { .. })
            ));
        }
        Err(e) => assert!(matches!(e, CollError::Profile { .. }), "{e}"),
    }
}

/// Every `GEX_COLL_*` setting with a bad value fails `Client::endpoint` with
/// `EpError::Layer` naming the variable.
#[test]
fn every_bad_coll_setting_fails_the_endpoint_naming_it() {
    let mut bad: Vec<(String, &str)> = OpKind::ALL
        .iter()
        .map(|op| (op.env_var().to_string(), "no-such-algorithm"))
        .collect();
    bad.extend([
        ("GEX_COLL_LOGGP".to_string(), "fast"),
        ("GEX_COLL_LOGGP".to_string(), "1,2,3"),
        (
            "GEX_COLL_PROFILE".to_string(),
            "/nonexistent/gex-profile.toml",
        ),
        ("GEX_COLL_TUNE".to_string(), "sometimes"),
    ]);
    for (var, val) in bad {
        let c = layers()
            .segment_size(SEG)
            .config(Config::from_pairs([(var.as_str(), val)]))
            .init::<Loopback>(Box::new(Singleton::new()))
            .unwrap();
        match c.endpoint(0) {
            Err(EpError::Layer(m)) => assert!(m.contains(&var), "{var}={val:?}: {m}"),
            other => panic!("{var}={val:?}: {other:?}"),
        }
    }
}

// ---------------------------------------------------------------- events

#[test]
fn a_collective_event_waited_on_another_endpoint_is_an_event_error() {
    let (_c, mut a, mut b) = two_endpoints();
    let w = a.world();
    let ev = a
        .collective(&w, Allreduce::new(vec![1u64, 2], BuiltinOp::Sum), Nb)
        .unwrap();
    assert_eq!(
        b.test(&ev),
        Err(EventError::WrongEndpoint {
            started_on: EpAddr::new(0, 0),
            waited_on: EpAddr::new(0, 1)
        })
    );
    assert_eq!(
        b.wait(ev),
        Err(CollError::Event(EventError::WrongEndpoint {
            started_on: EpAddr::new(0, 0),
            waited_on: EpAddr::new(0, 1)
        }))
    );
    let ev = a.collective(&w, Barrier::new(), Nb).unwrap();
    assert!(matches!(
        b.wait_all(&[&ev]),
        Err(EventError::WrongEndpoint { .. })
    ));
    a.wait(ev).unwrap();
    // An Nbi collective of another endpoint tracked here fails the sync.
    let ev = a.collective(&w, Barrier::new(), Nb).unwrap();
    gex_core::layer::track_implicit(&mut *b, gex_coll::COLL_TAG, ev);
    assert!(matches!(
        b.sync_collectives(),
        Err(CollError::Event(EventError::Failed(_)))
    ));
    a.barrier(&w).unwrap();
}

/// The split-phase barrier: `barrier_try` without a notify, and a wait whose name
/// differs from the notify on a one-member team.
#[test]
fn split_phase_misuse_on_one_member() {
    let (_c, mut ep, w) = one_rank();
    let named = BarrierFlags::empty();
    let refused = |r: Result<(), CollError>, want| assert_eq!(r, Err(want));
    use CollError::{BarrierAlreadyNotified, BarrierMismatch, BarrierNotNotified};
    refused(ep.barrier_try(&w, 1, named).map(drop), BarrierNotNotified);
    refused(ep.barrier_wait(&w, 1, named), BarrierNotNotified);
    ep.barrier_notify(&w, 1, named).unwrap();
    refused(ep.barrier_notify(&w, 1, named), BarrierAlreadyNotified);
    refused(ep.barrier_wait(&w, 2, named), BarrierMismatch);
    ep.barrier_notify(&w, 3, named).unwrap();
    let mut r = ep.barrier_try(&w, 3, BarrierFlags::ANONYMOUS);
    while r == Ok(false) {
        r = ep.barrier_try(&w, 3, BarrierFlags::ANONYMOUS);
    }
    assert_eq!(r, Err(CollError::BarrierMismatch));
    ep.barrier(&w).unwrap();
}

/// A root named by a pointer into a segment of the job that is not the team's, or
/// outside the segment, on one rank (the multi-rank cases are in `tests/sim.rs`).
#[test]
fn data_roots_outside_the_team_or_segment() {
    let c = client(2);
    let mut a = c.endpoint(0).unwrap();
    let b = c.endpoint(1).unwrap();
    let w = a.world();
    let elsewhere = gex_rma::GlobalPtr::<u32>::new(b.addr(), 0);
    let r = a
        .collective(&w, Broadcast::new(elsewhere, vec![0u32; 2]), Nb)
        .map(drop);
    assert!(matches!(r, Err(CollError::RootNotMember { .. })), "{r:?}");
    let past = gex_rma::GlobalPtr::<u32>::new(a.addr(), SEG - 4);
    let r = a
        .collective(&w, Broadcast::new(past, vec![0u32; 2]), Nb)
        .map(drop);
    assert!(
        matches!(
            r,
            Err(CollError::Rma(gex_rma::RmaError::OutOfSegment { .. }))
        ),
        "{r:?}"
    );
    a.barrier(&w).unwrap();
    drop(b);
}
