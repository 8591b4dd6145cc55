//! The matching engine against a sequential model of MPI matching.
//!
//! The model keeps one list of posted receives in posting order and one list of
//! unexpected messages in arrival order: an arrival takes the first posted receive
//! that accepts it, a receive the first unexpected message it accepts, a probe
//! reports that message without taking it. The engine (per-source queues, an
//! any-source queue, post and arrival numbers) must give exactly the same pairs on
//! every random sequence of arrivals, receives (specific and wildcard) and probes.
//! From that equality: no message is matched twice, none is lost (at the end, every
//! message is matched or still unexpected, every receive matched or still posted),
//! and no message overtakes an earlier one of the same (source, tag, context).
//! `Reorder` is checked to release every source's messages in the sender's order
//! from any arrival order.

mod model;

use gex_msg::engine::{Envelope, Matcher, Pattern, Reorder};
use model::Model;
use proptest::prelude::*;
use std::collections::HashSet;

const SOURCES: u32 = 3;

#[derive(Clone, Debug)]
enum Op {
    Arrive {
        src: u32,
        tag: u32,
        ctx: u32,
    },
    Post {
        src: Option<u32>,
        tag: Option<u32>,
        ctx: u32,
    },
    Probe {
        src: Option<u32>,
        tag: Option<u32>,
        ctx: u32,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let tag = 0u32..3;
    let ctx = 0u32..2;
    prop_oneof![
        (0..SOURCES, tag.clone(), ctx.clone()).prop_map(|(src, tag, ctx)| Op::Arrive {
            src,
            tag,
            ctx
        }),
        (
            proptest::option::of(0..SOURCES),
            proptest::option::of(tag.clone()),
            ctx.clone()
        )
            .prop_map(|(src, tag, ctx)| Op::Post { src, tag, ctx }),
        (
            proptest::option::of(0..SOURCES),
            proptest::option::of(tag),
            ctx
        )
            .prop_map(|(src, tag, ctx)| Op::Probe { src, tag, ctx }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn engine_matches_the_sequential_model(ops in proptest::collection::vec(op(), 0..200)) {
        let mut eng: Matcher<(Envelope, u64), u64> = Matcher::new(SOURCES);
        let mut model = Model::default();
        let (mut msgs, mut recvs) = (0u64, 0u64);
        let mut matched_msgs = HashSet::new();
        let mut matched_recvs = HashSet::new();
        // Per (source, tag, ctx): the message ids in the order they were matched.
        let mut delivered: Vec<(Envelope, u64)> = Vec::new();
        for op in ops {
            match op {
                Op::Arrive { src, tag, ctx } => {
                    let e = Envelope { src, tag, ctx };
                    let id = msgs;
                    msgs += 1;
                    let got = eng.arrive(e, (e, id));
                    let want = model.arrive(e, id);
                    prop_assert_eq!(got.map(|(r, _)| r), want);
                    if let Some((r, (e2, m))) = got {
                        prop_assert_eq!((e2, m), (e, id));
                        prop_assert!(matched_msgs.insert(m), "message {} matched twice", m);
                        prop_assert!(matched_recvs.insert(r), "receive {} matched twice", r);
                        delivered.push((e, m));
                    }
                }
                Op::Post { src, tag, ctx } => {
                    let p = Pattern { src, tag, ctx };
                    let id = recvs;
                    recvs += 1;
                    let got = eng.post(p, id);
                    let want = model.post(p, id);
                    prop_assert_eq!(got.as_ref().map(|(_, e, (_, m))| (*e, *m)), want);
                    if let Some((r, e, (e2, m))) = got {
                        prop_assert_eq!(r, id);
                        prop_assert_eq!(e, e2);
                        prop_assert!(p.accepts(&e));
                        prop_assert!(matched_msgs.insert(m), "message {} matched twice", m);
                        prop_assert!(matched_recvs.insert(r), "receive {} matched twice", r);
                        delivered.push((e, m));
                    }
                }
                Op::Probe { src, tag, ctx } => {
                    let p = Pattern { src, tag, ctx };
                    let got = eng.probe(&p).map(|(e, (_, m))| (e, *m));
                    prop_assert_eq!(got, model.probe(&p));
                }
            }
            prop_assert_eq!(eng.unexpected_len(), model.unexpected.len());
            prop_assert_eq!(eng.posted_len(), model.posted.len());
        }
        // None lost: every message matched or still unexpected.
        prop_assert_eq!(matched_msgs.len() + eng.unexpected_len(), msgs as usize);
        prop_assert_eq!(matched_recvs.len() + eng.posted_len(), recvs as usize);
        // No overtaking: within one (source, tag, ctx), ids are matched in arrival order.
        for (i, (e, m)) in delivered.iter().enumerate() {
            for (e2, m2) in &delivered[i + 1..] {
                if e == e2 {
                    prop_assert!(m < m2, "{:?}: message {} matched after {}", e, m, m2);
                }
            }
        }
    }

    #[test]
    fn reorder_releases_in_sending_order(
        perm in Just((0u32..40).collect::<Vec<_>>()).prop_shuffle(),
        srcs in proptest::collection::vec(0..SOURCES, 40),
    ) {
        // Message i goes from srcs[i]; its number is its index among that source's.
        let mut seqs = vec![0u32; SOURCES as usize];
        let numbered: Vec<(u32, u32, u32)> = srcs
            .iter()
            .enumerate()
            .map(|(i, &s)| {
                let n = seqs[s as usize];
                seqs[s as usize] += 1;
                (s, n, i as u32)
            })
            .collect();
        let mut r = Reorder::new(SOURCES);
        let mut out: Vec<Vec<u32>> = vec![Vec::new(); SOURCES as usize];
        for &k in &perm {
            let (s, n, i) = numbered[k as usize];
            if r.is_next(s, n) {
                r.advance(s);
                out[s as usize].push(i);
                while let Some(j) = r.pop_ready(s) {
                    out[s as usize].push(j);
                }
            } else {
                prop_assert!(r.hold(s, n, i).is_ok());
            }
        }
        prop_assert_eq!(r.held(), 0);
        for s in 0..SOURCES {
            let want: Vec<u32> = numbered.iter().filter(|x| x.0 == s).map(|x| x.2).collect();
            prop_assert_eq!(&out[s as usize], &want);
        }
    }
}
