//! Bad input to gex-rma's calls (docs/testing.md, "Bad input"): the documented error
//! variants the RMA conformance cases (`rma_errors`, `rma_atomic_errors`) and
//! `tests/layer.rs` do not trigger, on every form of every operation (VIS gets as
//! well as puts, scoped operations, atomics and fetches), and the failure modes a
//! runtime author meets with bad arguments. Each is the documented error, returned
//! before any byte moves; never a panic or a stray write. One rank on the loopback
//! conduit (two endpoints where a second target is needed).

mod common;

use gex_core::loopback::Loopback;
use gex_core::{
    AmError, Blocking, Client, ClientBuilder, Config, Endpoint, EpAddr, EpError, Mode, Nb, Nbi,
    Team,
};
use gex_rma::{
    AtomicDomain, AtomicFlags, AtomicOp, AtomicOps, GlobalPtr, NbiCategories, RmaError, RmaExt,
    ScopeRmaExt, Strided, Vis,
};

const SEG: usize = 1 << 12;
const NONE: AtomicFlags = AtomicFlags::empty();

fn client(eps: u16) -> Client<Loopback> {
    client_with(Some(eps), Config::default())
}

/// A loopback client with the Rma layer, configuration `cfg` and `eps` endpoints made
/// at init (`None`: the builder's default).
fn client_with(eps: Option<u16>, cfg: Config) -> Client<Loopback> {
    common::rma(SEG, eps, Some(cfg))
}

/// A client of `eps` endpoints, its endpoint 0, and the known contents written in
/// its whole segment (see [`fill`]).
fn filled(eps: u16) -> (Client<Loopback>, Box<Endpoint<Loopback>>, Vec<u8>) {
    let c = client(eps);
    let mut ep = c.endpoint(0).unwrap();
    let before = fill(&mut ep);
    (c, ep, before)
}

/// Known contents in the whole segment, to prove failed operations write nothing.
fn fill(ep: &mut Endpoint<Loopback>) -> Vec<u8> {
    let bytes: Vec<u8> = (0..SEG).map(|i| (i * 7 + 3) as u8).collect();
    ep.put(GlobalPtr::<u8>::new(ep.addr(), 0), &bytes, Blocking)
        .unwrap();
    bytes
}

fn unchanged(ep: &mut Endpoint<Loopback>, before: &[u8]) {
    let now = ep
        .get(vec![0u8; SEG], GlobalPtr::<u8>::new(ep.addr(), 0), Blocking)
        .unwrap();
    assert!(now == before, "a failed operation wrote the segment");
}

fn oos(dst: EpAddr, offset: usize, len: usize) -> RmaError {
    RmaError::OutOfSegment {
        dst,
        offset,
        len,
        seg_len: SEG,
    }
}

/// A fetching atomic `op` at `q` fails with `want`, in mode `mode` and as a scoped
/// fetch into `old` (which the caller checks stays unwritten).
fn fetches_refused<M: Mode>(
    ep: &mut Endpoint<Loopback>,
    ad: &AtomicDomain<u64>,
    q: GlobalPtr<u64>,
    op: AtomicOp<u64>,
    mode: M,
    old: &mut u64,
    want: RmaError,
) {
    assert_eq!(
        ep.fetch_atomic(ad, q, op, NONE, mode).map(drop),
        Err(want.clone()),
        "fetch_atomic"
    );
    assert_eq!(
        ep.scope(|s| s.fetch_into(ad, q, op, NONE, old)),
        Err(want),
        "fetch_into"
    );
}

/// Two elements: the remote side at stride `remote`, the local side from `local_start`
/// at stride `local`.
const fn two(
    remote: &'static [isize],
    local_start: usize,
    local: &'static [isize],
) -> Strided<'static> {
    Strided {
        counts: &[2],
        remote_strides: remote,
        local_start,
        local_strides: local,
    }
}

const fn row(counts: &'static [usize], strides: &'static [isize]) -> Strided<'static> {
    Strided {
        counts,
        remote_strides: strides,
        local_start: 0,
        local_strides: strides,
    }
}

// ---------------------------------------------------------------- without the layer

/// Every operation on an endpoint that does not carry the RMA layer is `NoLayer`.
#[test]
fn every_operation_without_the_layer_is_no_layer() {
    let with = client(1);
    let mut rma_ep = with.endpoint(0).unwrap();
    let w = rma_ep.world();
    let ad = rma_ep.atomic_domain::<u64>(&w, AtomicOps::all()).unwrap();
    let c = common::loopback(ClientBuilder::new(), SEG, None, Some(Config::default()));
    let mut ep = c.endpoint(0).unwrap();
    let p = GlobalPtr::<u32>::new(ep.addr(), 0);
    let n = RmaError::NoLayer;
    assert_eq!(ep.put(p, &[1], Blocking), Err(n.clone()));
    assert_eq!(ep.put(p, &[1], Nb).map(drop), Err(n.clone()));
    assert_eq!(ep.put(p, &[1], Nbi), Err(n.clone()));
    assert_eq!(ep.put_val(p, 1, Nbi), Err(n.clone()));
    assert_eq!(ep.get(&mut [0u32; 2], p, Blocking), Err(n.clone()));
    assert_eq!(ep.get(vec![0u32; 2], p, Nb).map(drop), Err(n.clone()));
    assert_eq!(ep.get(vec![0u32; 2], p, Nbi), Err(n.clone()));
    assert_eq!(ep.get_val(p, Blocking), Err(n.clone()));
    assert_eq!(ep.get_val(p, Nb).map(drop), Err(n.clone()));
    assert_eq!(ep.memset(p.cast(), 0, 4, Blocking), Err(n.clone()));
    assert_eq!(
        ep.put_strided(p, &[1, 2], row(&[2], &[1]), Blocking),
        Err(n.clone())
    );
    assert_eq!(
        ep.get_strided(vec![0u32; 2], p, row(&[2], &[1]), Blocking)
            .map(drop),
        Err(n.clone())
    );
    assert_eq!(ep.put_vector(&[(p, 1)], &[1], Nbi), Err(n.clone()));
    assert_eq!(
        ep.get_vector(&mut [0u32; 1], &[(p, 1)], Blocking),
        Err(n.clone())
    );
    assert_eq!(ep.put_indexed(&[p], 1, &[1], Blocking), Err(n.clone()));
    assert_eq!(
        ep.get_indexed(vec![0u32; 1], &[p], 1, Nb).map(drop),
        Err(n.clone())
    );
    let pw = GlobalPtr::<u64>::new(ep.addr(), 0);
    assert_eq!(
        ep.atomic(&ad, pw, AtomicOp::Add(1), NONE, Blocking),
        Err(n.clone())
    );
    assert_eq!(
        ep.fetch_atomic(&ad, pw, AtomicOp::Add(1), NONE, Nb)
            .map(drop),
        Err(n.clone())
    );
    let w2 = ep.world();
    assert_eq!(
        ep.atomic_domain::<u64>(&w2, AtomicOps::ADD).map(drop),
        Err(n.clone())
    );
    assert_eq!(ep.sync_nbi(NbiCategories::ALL), Err(n.clone()));
    assert_eq!(ep.test_nbi(NbiCategories::PUTS), Err(n.clone()));
    assert_eq!(ep.test_nbi(NbiCategories::GETS), Err(n.clone()));
    let (mut a, mut b, mut old) = ([0u32; 1], [0u32; 1], 0u64);
    let src = [1u32];
    assert_eq!(ep.scope(|s| s.get_into(&mut a, p)), Err(n.clone()));
    assert_eq!(
        ep.scope(|s| s.get_vis_into(&mut b, Vis::Vector(&[(p, 1)]))),
        Err(n.clone())
    );
    assert_eq!(ep.scope(|s| s.put_from(p, &src)), Err(n.clone()));
    assert_eq!(
        ep.scope(|s| s.fetch_into(&ad, pw, AtomicOp::Add(1), NONE, &mut old)),
        Err(n)
    );
}

#[test]
fn a_bad_path_setting_is_an_endpoint_layer_error() {
    let c = client_with(None, Config::from_pairs([("GEX_RMA_PATH", "fast")]));
    match c.endpoint(0) {
        Err(EpError::Layer(m)) => assert!(m.contains("GEX_RMA_PATH"), "{m}"),
        other => panic!("{other:?}"),
    }
}

// ---------------------------------------------------------------- targets and ranges

/// Target and range errors of the VIS forms (gets as well as puts) and of the scoped
/// operations; nothing is written.
#[test]
fn vis_and_scoped_operations_check_targets_and_ranges() {
    let (c, mut ep, before) = filled(1);
    let me = ep.addr();
    let bad_rank = GlobalPtr::<u32>::new(EpAddr::rank(3), 0);
    let rank_err = RmaError::BadRank { rank: 3, size: 1 };
    // Loopback makes endpoints at run time: the first index it cannot have is its
    // capacity (below it, an index not created is `NoEndpoint`: the test at the end).
    let cap = c.endpoint_capacity(0).unwrap();
    assert_eq!(cap, gex_core::DEFAULT_MAX_ENDPOINTS);
    let bad_ep = GlobalPtr::<u32>::new(EpAddr::new(0, cap), 0);
    let ep_err = RmaError::BadEndpoint {
        dst: EpAddr::new(0, cap),
    };
    assert_eq!(
        ep.put_strided(bad_rank, &[1], row(&[1], &[1]), Blocking),
        Err(rank_err.clone())
    );
    assert_eq!(
        ep.get_strided(&mut [0u32; 1], bad_ep, row(&[1], &[1]), Blocking),
        Err(ep_err.clone())
    );
    assert_eq!(
        ep.put_vector(&[(bad_ep, 1)], &[1], Nbi),
        Err(ep_err.clone())
    );
    assert_eq!(
        ep.get_vector(vec![0u32; 1], &[(bad_rank, 1)], Nb).map(drop),
        Err(rank_err.clone())
    );
    assert_eq!(
        ep.put_indexed(&[bad_rank], 1, &[1], Blocking),
        Err(rank_err.clone())
    );
    assert_eq!(
        ep.get_indexed(&mut [0u32; 2], &[bad_ep], 2, Blocking),
        Err(ep_err.clone())
    );
    assert_eq!(
        ep.get_val(GlobalPtr::<u16>::new(EpAddr::rank(3), 0), Nb)
            .map(drop),
        Err(rank_err.clone())
    );
    assert_eq!(
        ep.get_val(GlobalPtr::<u16>::new(EpAddr::new(0, u16::MAX), 0), Nbi),
        Err(RmaError::BadEndpoint {
            dst: EpAddr::new(0, u16::MAX)
        })
    );
    assert_eq!(ep.memset(bad_ep.cast(), 0, 1, Nbi), Err(ep_err.clone()));
    // Out of the segment: every VIS get, the scoped forms, memset.
    let end = GlobalPtr::<u32>::new(me, SEG - 4);
    assert_eq!(
        ep.get_strided(&mut [0u32; 2], end, row(&[2], &[1]), Blocking),
        Err(oos(me, SEG - 4, 8))
    );
    assert_eq!(
        ep.get_vector(vec![0u32; 2], &[(end, 2)], Nb).map(drop),
        Err(oos(me, SEG - 4, 8))
    );
    assert_eq!(
        ep.get_indexed(vec![0u32; 2], &[end.add(1)], 2, Nbi),
        Err(oos(me, SEG, 8))
    );
    assert_eq!(
        ep.memset(GlobalPtr::new(me, SEG - 1), 0, 2, Nb).map(drop),
        Err(oos(me, SEG - 1, 2))
    );
    assert_eq!(
        ep.memset(GlobalPtr::new(me, SEG + 1), 0, 0, Blocking),
        Err(oos(me, SEG + 1, 0))
    );
    let (mut a, mut b) = ([0u32; 2], [0u32; 2]);
    let src = [9u32; 2];
    assert_eq!(
        ep.scope(|s| s.get_into(&mut a, end)),
        Err(oos(me, SEG - 4, 8))
    );
    assert_eq!(
        ep.scope(|s| s.put_from(end, &src)),
        Err(oos(me, SEG - 4, 8))
    );
    assert_eq!(
        ep.scope(|s| s.put_from(bad_rank, &src)),
        Err(rank_err.clone())
    );
    assert_eq!(
        ep.scope(|s| s.get_vis_into(
            &mut b,
            Vis::Indexed {
                ptrs: &[end],
                each: 2
            }
        )),
        Err(oos(me, SEG - 4, 8))
    );
    assert_eq!(
        ep.scope(|s| s.get_vis_into(&mut b, Vis::Vector(&[(bad_ep, 2)]))),
        Err(ep_err)
    );
    // Zero elements are fine anywhere in the segment, including its end.
    ep.put::<u32, _>(GlobalPtr::new(me, SEG), &[], Blocking)
        .unwrap();
    ep.memset(GlobalPtr::new(me, SEG), 0, 0, Blocking).unwrap();
    ep.get_vector::<u32, _, _>(&mut [], &[], Blocking).unwrap();
    ep.put_indexed::<u32, _>(&[end, end], 0, &[], Blocking)
        .unwrap();
    ep.put_strided(end, &[0u32; 0], row(&[0, 5], &[1, 1]), Blocking)
        .unwrap();
    assert_eq!(a, [0, 0]);
    unchanged(&mut ep, &before);
}

/// The contiguous fast paths (a cached mapping: one table entry answers the whole
/// check) keep every range check: once the first put cached the mapping, ranges past
/// the end, offsets that overflow, other endpoints' segments and misaligned atomics
/// still go to the checked path and fail there with the same errors; ranges that
/// end exactly at the segment's end succeed; nothing is written by a failure.
#[test]
fn contiguous_fast_paths_keep_the_range_checks_once_the_mapping_is_cached() {
    let (_c, mut ep, before) = filled(2); // `fill`: a direct put, caches the mapping
    let me = ep.addr();
    let w = ep.world();
    let ad = ep.atomic_domain::<u64>(&w, AtomicOps::all()).unwrap();
    for _ in 0..2 {
        // Past the end, by one byte and by far; offsets whose end overflows.
        for (off, len) in [(SEG - 4, 8), (SEG, 8), (SEG - 7, 8), (usize::MAX - 3, 8)] {
            let p = GlobalPtr::<u8>::new(me, off);
            let e = oos(me, off, len);
            assert_eq!(ep.put(p, &[7u8; 8][..len], Blocking), Err(e.clone()));
            assert_eq!(ep.put(p, &[7u8; 8][..len], Nbi), Err(e.clone()));
            assert_eq!(ep.get(&mut [0u8; 8][..len], p, Blocking), Err(e.clone()));
            assert_eq!(
                ep.get_val(GlobalPtr::<u64>::new(me, off), Blocking),
                Err(e.clone())
            );
            let (mut a, src) = ([0u8; 8], [7u8; 8]);
            assert_eq!(ep.scope(|s| s.get_into(&mut a[..len], p)), Err(e.clone()));
            assert_eq!(ep.scope(|s| s.put_from(p, &src[..len])), Err(e.clone()));
            assert_eq!(a, [0; 8]);
            if off % 8 == 0 {
                assert_eq!(
                    ep.fetch_atomic(
                        &ad,
                        GlobalPtr::new(me, off),
                        AtomicOp::Add(1),
                        NONE,
                        Blocking,
                    ),
                    Err(e)
                );
            }
        }
        // A misaligned atomic is still refused (by the checked path).
        assert!(matches!(
            ep.fetch_atomic(&ad, GlobalPtr::new(me, 4), AtomicOp::Add(1), NONE, Blocking,),
            Err(RmaError::Misaligned { .. })
        ));
        unchanged(&mut ep, &before);
    }
    // Exactly up to the end: fine, and the bytes land (and come back).
    let last = GlobalPtr::<u8>::new(me, SEG - 8);
    ep.put(last, &[1, 2, 3, 4, 5, 6, 7, 8], Blocking).unwrap();
    let mut got = [0u8; 8];
    ep.get(&mut got[..], last, Blocking).unwrap();
    assert_eq!(got, [1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(
        ep.get_val(GlobalPtr::<u64>::new(me, SEG - 8), Blocking),
        Ok(u64::from_ne_bytes(got))
    );
    // The other endpoint's segment (another index: not in the cache) is reached and
    // checked too.
    let other = EpAddr::new(0, 1);
    ep.put(GlobalPtr::<u8>::new(other, 16), &[9u8; 4], Blocking)
        .unwrap();
    assert_eq!(
        ep.get_val(GlobalPtr::<u32>::new(other, 16), Blocking),
        Ok(u32::from_ne_bytes([9; 4]))
    );
    assert_eq!(
        ep.put(GlobalPtr::<u8>::new(other, SEG - 2), &[9u8; 4], Blocking),
        Err(oos(other, SEG - 2, 4))
    );
}

/// Shape errors of the VIS gets and of a scoped VIS get; a second target in one
/// vector or indexed list.
#[test]
fn vis_gets_check_shapes_and_single_targets() {
    let (_c, mut ep, before) = filled(2);
    let me = ep.addr();
    let p = GlobalPtr::<u16>::new(me, 64);
    let other = GlobalPtr::<u16>::new(EpAddr::new(0, 1), 64);
    assert!(matches!(
        ep.get_vector(&mut [0u16; 3], &[(p, 2)], Blocking),
        Err(RmaError::ShapeMismatch(_))
    ));
    assert!(matches!(
        ep.get_vector(vec![0u16; 2], &[(p, usize::MAX), (p, 3)], Nb)
            .map(drop),
        Err(RmaError::ShapeMismatch(_))
    ));
    assert!(matches!(
        ep.get_indexed(vec![0u16; 5], &[p, p.add(8)], 2, Nbi),
        Err(RmaError::ShapeMismatch(_))
    ));
    assert!(matches!(
        ep.put_indexed(&[p; 2], usize::MAX, &[1u16; 2], Blocking),
        Err(RmaError::ShapeMismatch(_))
    ));
    assert!(matches!(
        ep.get_strided(
            &mut [0u16; 4],
            p,
            Strided {
                counts: &[2, 2],
                remote_strides: &[1, 2],
                local_start: 0,
                local_strides: &[1],
            },
            Blocking
        ),
        Err(RmaError::ShapeMismatch(_))
    ));
    let mut b = [0u16; 2];
    assert!(matches!(
        ep.scope(|s| s.get_vis_into(&mut b, Vis::Vector(&[(p, 3)]))),
        Err(RmaError::ShapeMismatch(_))
    ));
    // One target per operation.
    let mixed = RmaError::MixedTargets {
        first: me,
        other: other.addr(),
    };
    assert_eq!(
        ep.get_vector(&mut [0u16; 2], &[(p, 1), (other, 1)], Blocking),
        Err(mixed.clone())
    );
    assert_eq!(
        ep.put_indexed(&[p, other], 1, &[1, 2], Nbi),
        Err(mixed.clone())
    );
    assert_eq!(
        ep.get_indexed(vec![0u16; 2], &[p, other], 1, Nb).map(drop),
        Err(mixed)
    );
    // Local side: a strided shape reaching before or after the local buffer.
    let low = two(&[1], 1, &[-2]);
    assert!(matches!(
        ep.get_strided(&mut [0u16; 2], p, low, Blocking),
        Err(RmaError::LocalOutOfBounds { slice_len: 2, .. })
    ));
    let high = two(&[1], 2, &[1]);
    assert!(matches!(
        ep.get_strided(vec![0u16; 3], p, high, Nb).map(drop),
        Err(RmaError::LocalOutOfBounds { slice_len: 3, .. })
    ));
    assert!(matches!(
        ep.put_strided(p, &[1u16; 3], high, Nbi),
        Err(RmaError::LocalOutOfBounds { slice_len: 3, .. })
    ));
    let far = two(&[1], usize::MAX, &[1]);
    assert!(matches!(
        ep.put_strided(p, &[1u16; 2], far, Blocking),
        Err(RmaError::LocalOutOfBounds { .. })
    ));
    // Huge strides are range errors, not overflows.
    let wild = two(&[isize::MAX], 0, &[1]);
    assert!(matches!(
        ep.put_strided(p, &[1u16; 2], wild, Blocking),
        Err(RmaError::OutOfSegment { .. })
    ));
    let wild = two(&[isize::MIN], 0, &[1]);
    assert!(matches!(
        ep.get_strided(&mut [0u16; 2], p, wild, Blocking),
        Err(RmaError::OutOfSegment {
            offset: usize::MAX,
            ..
        })
    ));
    unchanged(&mut ep, &before);
}

// ---------------------------------------------------------------- atomics

fn world_domain(ep: &mut Endpoint<Loopback>, ops: AtomicOps) -> AtomicDomain<u64> {
    let w = ep.world();
    ep.atomic_domain::<u64>(&w, ops).unwrap()
}

/// The fetching forms and the scoped fetch check like `atomic`: op set, team,
/// alignment, range; a fetching set is a swap; nothing is performed.
#[test]
fn fetches_check_like_atomics() {
    let c = client(2);
    let mut ep = c.endpoint(0).unwrap();
    let me = ep.addr();
    let ad = world_domain(&mut ep, AtomicOps::FADD | AtomicOps::SET | AtomicOps::GET);
    let p = GlobalPtr::<u64>::new(me, 64);
    ep.atomic(&ad, p, AtomicOp::Set(77), NONE, Blocking)
        .unwrap();
    let mut old = 0u64;
    let nd = RmaError::OpNotInDomain {
        op: AtomicOps::FXOR,
    };
    fetches_refused(&mut ep, &ad, p, AtomicOp::Xor(1), Nbi, &mut old, nd);
    // A fetching set is a swap, which the domain does not allow (it allows the set).
    let swap = RmaError::OpNotInDomain {
        op: AtomicOps::SWAP,
    };
    assert_eq!(AtomicOp::Set(1u64).fetch_flag(), AtomicOps::SWAP);
    fetches_refused(&mut ep, &ad, p, AtomicOp::Set(1), Nbi, &mut old, swap);
    // The non-fetching add is not in the domain either (the fetching one is).
    assert_eq!(
        ep.atomic(&ad, p, AtomicOp::Add(1), NONE, Blocking),
        Err(RmaError::OpNotInDomain { op: AtomicOps::ADD })
    );
    // Endpoint 1 is not in endpoint 0's world team.
    let stranger = GlobalPtr::<u64>::new(EpAddr::new(0, 1), 64);
    let not_in = RmaError::NotInTeam {
        dst: stranger.addr(),
    };
    fetches_refused(
        &mut ep,
        &ad,
        stranger,
        AtomicOp::Add(1),
        Nb,
        &mut old,
        not_in,
    );
    for off in [65, 68] {
        let q = GlobalPtr::<u64>::new(me, off);
        let mis = RmaError::Misaligned {
            dst: me,
            offset: off,
            align: 8,
        };
        fetches_refused(&mut ep, &ad, q, AtomicOp::Add(1), Blocking, &mut old, mis);
    }
    for off in [SEG, SEG - 4, usize::MAX - 7] {
        let q = GlobalPtr::<u64>::new(me, off);
        assert_eq!(
            ep.fetch_atomic(&ad, q, AtomicOp::Add(1), NONE, Nb)
                .map(drop),
            Err(oos(me, off, 8))
        );
        assert_eq!(
            ep.fetch_atomic(&ad, q, AtomicOp::Add(1), NONE, Nbi),
            Err(oos(me, off, 8))
        );
    }
    assert_eq!(
        ep.fetch_atomic(
            &ad,
            GlobalPtr::new(EpAddr::new(0, 2), 0),
            AtomicOp::Add(1),
            NONE,
            Blocking,
        ),
        Err(RmaError::NotInTeam {
            dst: EpAddr::new(0, 2)
        })
    );
    assert_eq!(old, 0, "a failed scoped fetch wrote its destination");
    ep.sync_nbi(NbiCategories::ALL).unwrap();
    assert_eq!(
        ep.fetch_atomic(&ad, p, AtomicOp::Get, NONE, Blocking),
        Ok(77),
        "a failed atomic changed the word"
    );
}

/// `atomic_domain` on a team this endpoint is not the calling member of: the
/// exchange's `NotMember`, as `RmaError::Am`.
#[test]
fn a_domain_on_a_team_without_this_endpoint_is_an_am_error() {
    let c = client(2);
    let mut ep = c.endpoint(0).unwrap();
    let t = Team::new(4, vec![EpAddr::new(0, 0), EpAddr::new(0, 1)], 1);
    assert_eq!(
        ep.atomic_domain::<u32>(&t, AtomicOps::ADD).map(drop),
        Err(RmaError::Am(AmError::NotMember(EpAddr::new(0, 0))))
    );
    let t = Team::new(5, vec![EpAddr::new(0, 0), EpAddr::rank(6)], 0);
    assert_eq!(
        ep.atomic_domain::<u32>(&t, AtomicOps::ADD).map(drop),
        Err(RmaError::Am(AmError::BadRank { rank: 6, size: 1 }))
    );
}

/// Members at different collective calls: one creates an atomic domain while the other
/// makes another exchange on the team; both get an error (`RmaError::Am` with
/// `ExchangeMismatch` on the domain's side), not a hang or a domain built from the
/// wrong blob.
#[test]
fn a_domain_against_another_exchange_is_a_mismatch() {
    let c = client(2);
    let (mut a, mut b) = common::two_endpoints(&c);
    let members = vec![EpAddr::new(0, 0), EpAddr::new(0, 1)];
    let (ta, tb) = (Team::new(9, members.clone(), 0), Team::new(9, members, 1));
    let t = std::thread::spawn(move || b.exchange_tagged(&tb, 77, b"x").map(drop));
    let ra = a.atomic_domain::<u64>(&ta, AtomicOps::FADD).map(drop);
    let rb = t.join().unwrap();
    assert!(
        matches!(
            ra,
            Err(RmaError::Am(AmError::ExchangeMismatch { theirs: 77, .. }))
        ),
        "{ra:?}"
    );
    assert!(
        matches!(rb, Err(AmError::ExchangeMismatch { ours: 77, .. })),
        "{rb:?}"
    );
}

// ---------------------------------------------------------------- endpoints made at run time

/// Endpoints made at run time on loopback (capacity 3: endpoint 0 made at init, 1 and
/// 2 at run time): an index not created yet or closed is `RmaError::NoEndpoint`
/// naming its state, for every kind of operation (an empty put included), and moves
/// nothing; an index at the capacity is `RmaError::BadEndpoint`; once created, the
/// endpoint is a target (its own segment, not endpoint 0's) and an initiator. The
/// same on smp with 3 ranks, processes and threads, and through the AM path:
/// `conduits/smp/tests/runtime_rma.rs`.
#[test]
fn runtime_endpoints_are_reached_once_open_and_refused_otherwise() {
    let c = client_with(None, Config::from_pairs([("GEX_MAX_ENDPOINTS", "3")]));
    let mut ep0 = c.endpoint(0).unwrap();
    let before = fill(&mut ep0);
    let one = EpAddr::new(0, 1);
    let not_open = |state: &'static str| RmaError::NoEndpoint { dst: one, state };
    let p = GlobalPtr::<u64>::new(one, 8);
    let absent = not_open("not created yet");
    assert_eq!(ep0.put(p, &[1, 2], Blocking), Err(absent.clone()));
    assert_eq!(ep0.put::<u64, _>(p, &[], Blocking), Err(absent.clone()));
    assert_eq!(ep0.put_val(p, 3, Nbi), Err(absent.clone()));
    assert_eq!(ep0.get_val(p, Blocking), Err(absent.clone()));
    assert_eq!(
        ep0.get(vec![0u64; 2], p, Nb).map(|_| ()),
        Err(absent.clone())
    );
    assert_eq!(
        ep0.memset(GlobalPtr::<u8>::new(one, 0), 9, 4, Blocking),
        Err(absent.clone())
    );
    let shape = row(&[2], &[1]);
    assert_eq!(
        ep0.put_strided(p, &[1, 2], shape, Blocking),
        Err(absent.clone())
    );
    ep0.sync_nbi(NbiCategories::ALL).unwrap();
    let beyond = EpAddr::new(0, 3);
    assert_eq!(
        ep0.put_val(GlobalPtr::<u64>::new(beyond, 0), 1, Blocking),
        Err(RmaError::BadEndpoint { dst: beyond })
    );
    unchanged(&mut ep0, &before);

    let mut ep1 = c.create_endpoint().unwrap();
    assert_eq!(ep1.addr(), one);
    // Its own segment, zero-filled: nothing refused landed, and endpoint 0's is apart.
    assert_eq!(ep1.get_val(p, Blocking), Ok(0));
    // Direct path only between two endpoints of one thread (the AM path would need
    // the target endpoint polled meanwhile; smp's test drives each from its thread).
    if !cfg!(gex_force_am_rma) {
        ep0.put(p, &[5, 6], Blocking).unwrap();
        assert_eq!(ep1.get_val(p.add(1), Blocking), Ok(6));
        ep1.put_val(GlobalPtr::<u64>::new(ep0.addr(), 8), 7, Blocking)
            .unwrap();
        assert_eq!(
            ep0.get_val(GlobalPtr::<u64>::new(ep0.addr(), 8), Blocking),
            Ok(7)
        );
    }
    let w = ep1.world();
    let ad = ep1
        .atomic_domain::<u64>(&w, AtomicOps::FADD | AtomicOps::GET)
        .unwrap();
    let word = GlobalPtr::<u64>::new(one, 64);
    ep1.fetch_atomic(&ad, word, AtomicOp::Add(4), NONE, Blocking)
        .unwrap();
    assert_eq!(
        ep1.fetch_atomic(&ad, word, AtomicOp::Get, NONE, Blocking),
        Ok(4)
    );
    drop(ep1);

    let closed = not_open("closed");
    assert_eq!(ep0.put_val(p, 1, Blocking), Err(closed.clone()));
    assert_eq!(ep0.put::<u64, _>(p, &[], Nbi), Err(closed.clone()));
    assert_eq!(ep0.get(vec![0u64; 1], p, Blocking), Err(closed.clone()));
    let mut ep2 = c.create_endpoint().unwrap();
    assert_eq!(ep2.index(), 2, "indices are not reused");
    assert_eq!(ep2.get_val(p, Blocking), Err(closed));
    ep0.sync_nbi(NbiCategories::ALL).unwrap();
}
