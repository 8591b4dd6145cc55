//! The RMA layer on the one-rank loopback conduit: the AM reference path forced by
//! `GEX_RMA_PATH=am`, every mode, scopes, events bound to their endpoint, owned
//! destinations kept alive by their events, and atomic domains agreed between the
//! members of a team (two endpoints of one rank on two threads).

use gex_core::loopback::Loopback;
use gex_core::{Blocking, ClientBuilder, Config, Endpoint, EpAddr, EventError, Nb, Nbi, Team};
use gex_rma::{
    AtomicFlags, AtomicOp, AtomicOps, GlobalPtr, NbiCategories, Rma, RmaError, RmaExt, ScopeRmaExt,
    Strided, Vis,
};

mod common;

fn client(eps: u16, path: &str) -> gex_core::Client<Loopback> {
    let cfg = Config::from_pairs([("GEX_RMA_PATH", path)]);
    common::rma(1 << 16, Some(eps), Some(cfg))
}

fn pending(ep: &mut Endpoint<Loopback>) -> usize {
    gex_core::layer::with::<Rma, _, _>(&mut *ep, |r, _| r.pending_ops()).unwrap()
}

fn dropped(ep: &mut Endpoint<Loopback>) -> u64 {
    gex_core::layer::with::<Rma, _, _>(&mut *ep, |r, _| r.dropped_messages()).unwrap()
}

/// Every operation in every mode, on the path `path` selects.
fn every_mode(path: &str) {
    let c = client(1, path);
    let mut ep = c.endpoint(0).unwrap();
    assert_eq!(
        gex_core::layer::with::<Rma, _, _>(&mut *ep, |r, _| r.forces_am()),
        Some(path == "am" || cfg!(gex_force_am_rma))
    );
    let me = ep.addr();
    let p = GlobalPtr::<u32>::new(me, 256);
    let data: Vec<u32> = (0..1000).collect();
    ep.put(p, &data, Blocking).unwrap();
    let mut back = vec![0u32; 1000];
    ep.get(&mut back, p, Blocking).unwrap();
    assert_eq!(back, data);
    // Nb: events.
    let ev = ep.put(p, &data[..10], Nb).unwrap();
    ep.wait(ev).unwrap();
    let ev = ep.get(vec![0u32; 10], p.add(5), Nb).unwrap();
    assert_eq!(ep.wait(ev).unwrap(), &data[5..15]);
    let ev = ep.get_val(p.add(7), Nb).unwrap();
    assert_eq!(ep.wait(ev).unwrap(), 7);
    // Nbi: counted, synced by category.
    for i in 0..20u32 {
        ep.put_val(p.add(i as usize), 1000 + i, Nbi).unwrap();
    }
    ep.memset(p.add(100).cast::<u8>(), 0xab, 8, Nbi).unwrap();
    ep.get(vec![0u32; 4], p, Nbi).unwrap();
    ep.sync_nbi(NbiCategories::PUTS | NbiCategories::GETS)
        .unwrap();
    assert!(ep.test_nbi(NbiCategories::ALL).unwrap());
    assert_eq!(ep.get_val(p.add(19), Blocking).unwrap(), 1019);
    assert_eq!(ep.get_val(p.add(100), Blocking).unwrap(), 0xabab_abab);
    // Small and large puts (the AM path's short and Long forms).
    for n in [1usize, 3, 13, 14, 100, 5000] {
        let src: Vec<u8> = (0..n).map(|i| (i * 7 + n) as u8).collect();
        let q = GlobalPtr::<u8>::new(me, 30_001);
        ep.put(q, &src, Blocking).unwrap();
        assert_eq!(ep.get(vec![0u8; n], q, Blocking).unwrap(), src, "{n} bytes");
    }
    // VIS: a transpose of a 3x2 block, packed on the AM path.
    let m = GlobalPtr::<u16>::new(me, 40_000);
    ep.put(m, &[1u16, 2, 3, 4, 5, 6], Blocking).unwrap();
    let t = Strided {
        counts: &[3, 2],
        remote_strides: &[2, 1],
        local_start: 0,
        local_strides: &[1, 3],
    };
    let got = ep.get_strided(vec![0u16; 6], m, t, Blocking).unwrap();
    assert_eq!(got, [1, 3, 5, 2, 4, 6]);
    let ev = ep
        .put_vis(
            Vis::Indexed {
                ptrs: &[m, m.add(4)],
                each: 2,
            },
            &[9u16, 9, 8, 8],
            Nb,
        )
        .unwrap();
    ep.wait(ev).unwrap();
    let ev = ep
        .get_vector(vec![0u16; 6], &[(m, 2), (m.add(2), 2), (m.add(4), 2)], Nb)
        .unwrap();
    assert_eq!(ep.wait(ev).unwrap(), [9, 9, 3, 4, 8, 8]);
    // Atomics in every mode.
    let world = ep.world();
    let ad = ep
        .atomic_domain::<u64>(&world, AtomicOps::FADD | AtomicOps::ADD | AtomicOps::GET)
        .unwrap();
    let w = GlobalPtr::<u64>::new(me, 8);
    let f = AtomicFlags::empty();
    assert_eq!(
        ep.fetch_atomic(&ad, w, AtomicOp::Add(5), f, Blocking)
            .unwrap(),
        0
    );
    let ev = ep.fetch_atomic(&ad, w, AtomicOp::Add(5), f, Nb).unwrap();
    assert_eq!(ep.wait(ev).unwrap(), 5);
    ep.atomic(&ad, w, AtomicOp::Add(1), f, Nbi).unwrap();
    ep.fetch_atomic(&ad, w, AtomicOp::Add(1), f, Nbi).unwrap();
    ep.sync_nbi(NbiCategories::ATOMICS).unwrap();
    assert_eq!(
        ep.fetch_atomic(&ad, w, AtomicOp::Get, f, Blocking).unwrap(),
        12
    );
    // Scopes: borrowed destinations and sources.
    let (mut a, mut b, mut old) = ([0u32; 3], [0u32; 2], 0u64);
    let src = [5u32; 4];
    ep.scope(|s| {
        s.get_into(&mut a, p)?;
        s.get_vis_into(&mut b, Vis::Vector(&[(p.add(10), 1), (p.add(12), 1)]))?;
        s.put_from(p.add(500), &src)?;
        s.fetch_into(&ad, w, AtomicOp::Add(100), f, &mut old)?;
        Ok::<(), RmaError>(())
    })
    .unwrap();
    assert_eq!(a, [1000, 1001, 1002]);
    assert_eq!(b, [1010, 1012]);
    assert_eq!(old, 12);
    assert_eq!(ep.get(vec![0u32; 4], p.add(500), Blocking).unwrap(), src);
    // Nothing left behind.
    while pending(&mut ep) > 0 {
        ep.poll();
    }
    assert_eq!(dropped(&mut ep), 0);
}

#[test]
fn every_mode_on_the_automatic_path() {
    every_mode("auto");
}

#[test]
fn every_mode_on_the_am_path_forced_per_job() {
    every_mode("am");
}

#[test]
fn a_bad_path_setting_fails_the_endpoint() {
    let c = client(1, "fast");
    let e = c.endpoint(0).unwrap_err().to_string();
    assert!(e.contains("GEX_RMA_PATH"), "{e}");
}

#[test]
fn an_endpoint_without_the_layer_says_so() {
    let c = common::loopback(ClientBuilder::new(), 4096, None, None);
    let mut ep = c.endpoint(0).unwrap();
    let p = GlobalPtr::<u8>::new(ep.addr(), 0);
    assert_eq!(ep.put(p, &[1], Blocking), Err(RmaError::NoLayer));
    assert_eq!(ep.sync_nbi(NbiCategories::ALL), Err(RmaError::NoLayer));
}

/// Hole (b) of the "One endpoint" issue: waiting on a get's event with another
/// endpoint than the one that started it returned the buffer at once while the
/// transfer could still write it. It is an error now, and the buffer stays alive
/// until the transfer is done.
#[test]
fn an_event_of_another_endpoint_is_an_error() {
    let c = client(2, "am");
    let (mut a, mut b) = common::two_endpoints(&c);
    let p = GlobalPtr::<u8>::new(a.addr(), 0);
    a.put(p, &[7u8; 64], Blocking).unwrap();
    let ev = a.get(vec![0u8; 64], p, Nb).unwrap();
    assert!(!ev.is_done(), "the AM get waits for its reply");
    assert_eq!(
        b.wait(ev).unwrap_err(),
        RmaError::Event(EventError::WrongEndpoint {
            started_on: EpAddr::new(0, 0),
            waited_on: EpAddr::new(0, 1)
        })
    );
    let world = a.world();
    let ad = a.atomic_domain::<u32>(&world, AtomicOps::FINC).unwrap();
    let ev = a
        .fetch_atomic(
            &ad,
            p.cast::<u32>(),
            AtomicOp::Inc,
            AtomicFlags::empty(),
            Nb,
        )
        .unwrap();
    assert!(matches!(b.test(&ev), Err(EventError::WrongEndpoint { .. })));
    assert_eq!(a.wait(ev).unwrap(), 0x0707_0707);
    // The first get completes into its (dropped) event's buffer.
    while pending(&mut a) > 0 {
        a.poll();
    }
    assert_eq!(dropped(&mut a), 0);
}

/// An owned destination whose event is dropped or leaked before completion is kept
/// alive until the transfer has written it (no use after free, nothing dropped).
#[test]
fn dropped_and_leaked_get_events_keep_their_buffers() {
    let c = client(1, "am");
    let mut ep = c.endpoint(0).unwrap();
    let p = GlobalPtr::<u64>::new(ep.addr(), 0);
    ep.put(p, &[3u64; 512], Blocking).unwrap();
    // Under Miri, whose leak check would report the forgotten events, they are kept
    // until the end instead: to the library that is the same (never dropped while
    // the transfer runs).
    let mut kept = Vec::new();
    for i in 0..50 {
        let ev = ep.get(vec![0u64; 512], p, Nb).unwrap();
        if i % 2 == 0 {
            drop(ev);
        } else if cfg!(miri) {
            kept.push(ev);
        } else {
            std::mem::forget(ev);
        }
    }
    assert!(pending(&mut ep) > 0);
    while pending(&mut ep) > 0 {
        ep.poll();
    }
    assert_eq!(dropped(&mut ep), 0);
    drop(kept);
}

/// Runs `f(endpoint, team)` on two endpoints of one rank, on two threads, with a team
/// of both.
fn pair<R: Send>(f: impl Fn(&mut Endpoint<Loopback>, &Team) -> R + Sync) -> Vec<R> {
    let c = client(2, "auto");
    let eps: Vec<_> = (0..2).map(|i| c.endpoint(i).unwrap()).collect();
    let members = vec![EpAddr::new(0, 0), EpAddr::new(0, 1)];
    std::thread::scope(|s| {
        let hs: Vec<_> = eps
            .into_iter()
            .enumerate()
            .map(|(i, mut ep)| {
                let (f, team) = (&f, Team::new(9, members.clone(), i as u32));
                s.spawn(move || {
                    let r = f(&mut ep, &team);
                    // Serve the other endpoint until it is done too.
                    let _ = ep.exchange(&team, &[]);
                    r
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Hole (d): atomic domains were decided per rank, so ranks asking for different op
/// sets silently mixed implementations. Creation is collective now, and a mismatch is
/// an error on every member.
#[test]
fn members_asking_for_different_op_sets_get_an_error() {
    let out = pair(|ep, team| {
        let ops = if team.rank() == 0 {
            AtomicOps::FADD
        } else {
            AtomicOps::FADD | AtomicOps::FMULT
        };
        ep.atomic_domain::<u64>(team, ops).map(|_| ())
    });
    for r in out {
        assert_eq!(r, Err(RmaError::DomainMismatch { ranks: vec![0] }));
    }
    // Types must agree too; an op set the type cannot do is reported by its member and
    // seen as a mismatch by the others.
    let out = pair(|ep, team| {
        if team.rank() == 0 {
            ep.atomic_domain::<f64>(team, AtomicOps::ADD | AtomicOps::XOR)
                .map(|_| ())
        } else {
            ep.atomic_domain::<u64>(team, AtomicOps::ADD | AtomicOps::XOR)
                .map(|_| ())
        }
    });
    assert_eq!(
        out[0],
        Err(RmaError::BadOpSet {
            ops: AtomicOps::XOR
        })
    );
    assert!(matches!(out[1], Err(RmaError::DomainMismatch { .. })));
    // Agreement: both get a working domain on the team's words, and none on others.
    let out = pair(|ep, team| -> Result<u64, RmaError> {
        let ad = ep.atomic_domain::<u64>(team, AtomicOps::FADD | AtomicOps::GET)?;
        assert!(!ad.is_native(), "loopback has no NIC atomics");
        let w = GlobalPtr::<u64>::new(team.member(0).unwrap(), 0);
        for _ in 0..100 {
            ep.fetch_atomic(&ad, w, AtomicOp::Add(1), AtomicFlags::empty(), Blocking)?;
        }
        let stranger = GlobalPtr::<u64>::new(EpAddr::new(0, 7), 0);
        assert_eq!(
            ep.fetch_atomic(
                &ad,
                stranger,
                AtomicOp::Add(1),
                AtomicFlags::empty(),
                Blocking,
            ),
            Err(RmaError::NotInTeam {
                dst: stranger.addr()
            })
        );
        Ok(ad.ops().bits().into())
    });
    assert!(out.iter().all(Result::is_ok), "{out:?}");
}

#[test]
fn the_hang_report_lists_operations_in_flight_by_peer() {
    let c = client(2, "am");
    let (mut a, mut b) = common::two_endpoints(&c);
    let peer = b.addr();
    let p = GlobalPtr::<u64>::new(peer, 64);
    // On the AM path, a get and a put wait for `b`, which does not poll yet.
    let get = a.get(vec![0u64; 4], p, Nb).unwrap();
    let put = a.put(p.add(8), &[7u64; 2], Nb).unwrap();
    a.put(p.add(16), &[1u64], Nbi).unwrap();
    let report = a.report();
    let line = |n: u32, what: &str| format!("{n} {what} operation(s) to rank 0 ep 1 in flight");
    assert!(report.contains(&line(1, "get")), "{report}");
    // The NB put and the NBI one (counted with the puts).
    assert!(report.contains(&line(2, "put")), "{report}");
    assert!(
        report.contains("implicit-event operations not synced: 1 puts"),
        "{report}"
    );
    b.poll();
    a.wait(get).unwrap();
    a.wait(put).unwrap();
    a.sync_nbi(NbiCategories::ALL).unwrap();
    b.poll();
    let report = a.report();
    assert!(!report.contains("in flight ("), "{report}");
}

/// A layer of the test's own, attached after gex-rma: its context starts gex-rma's
/// non-waiting get.
#[derive(Debug)]
struct Other;

impl gex_core::layer::Layer for Other {
    const NAME: &'static str = "other";
    fn attach<C: gex_core::spi::Conduit>(
        _: &mut gex_core::layer::Attach<'_, C, Self>,
    ) -> Result<Self, gex_core::InitError> {
        Ok(Other)
    }
}

/// `try_get_owned` takes only a context: the RMA state it runs on is always the same
/// endpoint's (reached through the core), on every path, also for an endpoint whose
/// segment is not the largest of the process (the state used to cache whatever
/// mapping the context it was handed reported). From the RMA layer's own context it
/// is `NoLayer` (that state is the caller's).
#[test]
fn try_get_owned_runs_on_the_contexts_own_endpoint() {
    for path in ["auto", "am"] {
        let new = |seg: usize| {
            let b = ClientBuilder::new().layer::<Rma>().layer::<Other>();
            common::loopback(
                b,
                seg,
                None,
                Some(Config::from_pairs([("GEX_RMA_PATH", path)])),
            )
        };
        let (big, small) = (new(1 << 20), new(4096));
        let mut a = big.endpoint(0).unwrap();
        let mut b = small.endpoint(0).unwrap();
        let p = GlobalPtr::<u8>::new(EpAddr::rank(0), 0);
        a.put(p, &[1u8; 64], Blocking).unwrap();
        b.put(p, &[2u8; 64], Blocking).unwrap();
        // b's context: b's segment, b's bounds (8 KiB is past its 4 KiB).
        let r = gex_core::layer::with::<Other, _, _>(&mut b, |_, cx| {
            gex_rma::try_get_owned(cx, vec![0u8; 8192], p)
        })
        .unwrap();
        assert!(
            matches!(r, Err(RmaError::OutOfSegment { seg_len: 4096, .. })),
            "{r:?}"
        );
        let started = gex_core::layer::with::<Other, _, _>(&mut b, |_, cx| {
            gex_rma::try_get_owned(cx, vec![0u8; 64], p)
        })
        .unwrap()
        .unwrap();
        let gex_rma::OwnedGet::Started(ev) = started else {
            panic!("back-pressure on loopback: {started:?}")
        };
        assert_eq!(b.wait(ev).unwrap(), [2u8; 64]);
        let r = gex_core::layer::with::<Rma, _, _>(&mut b, |_, cx| {
            gex_rma::try_get_owned(cx, vec![0u8; 64], p)
        })
        .unwrap();
        assert!(matches!(r, Err(RmaError::NoLayer)), "{r:?}");
        drop(b);
        drop(small);
        // a's state was never handed b's context: a's own put and get still work.
        a.put(p, &[3u8; 8], Blocking).unwrap();
        assert_eq!(a.get(vec![0u8; 8], p, Blocking).unwrap(), [3u8; 8]);
    }
}
