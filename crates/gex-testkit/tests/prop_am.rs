//! Property test: random sequences of AM operations on the simulator (random seeds,
//! reordering, delays, lane capacities, 2–4 ranks, 1–2 endpoints) against a sequential
//! model of what every endpoint must receive.
//!
//! Each operation is one request (category, argument count, payload size, source and
//! destination endpoint, waiting or not) that may ask for a reply (category, argument
//! count, size). The model: every request reported `Sent` is delivered exactly once to
//! its destination with its exact contents, and its reply (if any) exactly once to its
//! source; a request reported `WouldBlock` is never delivered; with reordering off,
//! messages of one (source EP, destination EP, request/reply) stream arrive in the
//! order they were sent.

use gex_core::{Am, Body, Category, ClientBuilder, EpAddr, HandlerId, Injected, Kind, Token};
use gex_testkit::rng::hash_words;
use gex_testkit::sim::{Delay, SimConfig, run_sim};
use proptest::prelude::*;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const RQ: HandlerId = HandlerId::at(128);
const RP: HandlerId = HandlerId::at(129);
/// Bytes of every target segment reserved for each sending endpoint.
const AREA: usize = 2048;
const MAX_MEDIUM: usize = 1024;

#[derive(Clone, Copy, Debug)]
enum Len {
    Zero,
    One,
    Small(u16),
    Max,
}

#[derive(Clone, Debug)]
struct Msg {
    cat: u8,
    nargs: usize,
    len: Len,
}

#[derive(Clone, Debug)]
struct OpSpec {
    src: (u32, u16),
    dst: (u32, u16),
    req: Msg,
    reply: Option<Msg>,
    imm: bool,
}

#[derive(Clone, Debug)]
struct Scenario {
    ranks: u32,
    eps: u16,
    seed: u64,
    reorder: bool,
    latency: u64,
    jitter: u64,
    capacity: usize,
    ops: Vec<OpSpec>,
}

fn msg() -> impl Strategy<Value = Msg> {
    let len = prop_oneof![
        Just(Len::Zero),
        Just(Len::One),
        (2u16..300).prop_map(Len::Small),
        Just(Len::Max)
    ];
    (0u8..3, 0usize..16, len).prop_map(|(cat, nargs, len)| Msg { cat, nargs, len })
}

fn scenario() -> impl Strategy<Value = Scenario> {
    let op = (
        (any::<u32>(), any::<u16>()),
        (any::<u32>(), any::<u16>()),
        msg(),
        proptest::option::of(msg()),
        any::<bool>(),
    )
        .prop_map(|(src, dst, req, reply, imm)| OpSpec {
            src,
            dst,
            req,
            reply,
            imm,
        });
    (
        2u32..=4,
        1u16..=2,
        any::<u64>(),
        any::<bool>(),
        0u64..3,
        0u64..4,
        prop_oneof![Just(1usize << 10), Just(4 << 10), Just(1 << 20)],
        proptest::collection::vec(op, 0..200),
    )
        .prop_map(
            |(ranks, eps, seed, reorder, latency, jitter, capacity, ops)| Scenario {
                ranks,
                eps,
                seed,
                reorder,
                latency,
                jitter,
                capacity,
                ops,
            },
        )
}

/// One message as resolved by the model: everything the receiver must see.
#[derive(Clone, Debug)]
struct Wire {
    cat: Category,
    args: Vec<u32>,
    len: usize,
    seed: u64,
    /// Long: offset in the target segment.
    offset: usize,
}

#[derive(Clone, Debug)]
struct Op {
    src: EpAddr,
    dst: EpAddr,
    req: Wire,
    reply: Option<Wire>,
    imm: bool,
}

fn category(c: u8) -> Category {
    [Category::Short, Category::Medium, Category::Long][c as usize % 3]
}

fn payload(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| hash_words(&[seed, i as u64]) as u8)
        .collect()
}

/// Resolves the random choices: endpoints modulo the job's shape, lengths, and for
/// Long messages a private range of the target segment (bump-allocated per
/// (sender, target) pair, so no two messages ever overlap).
fn resolve(s: &Scenario) -> Vec<Op> {
    let gid = |a: EpAddr| a.rank as usize * s.eps as usize + a.ep as usize;
    let mut bump: HashMap<(usize, usize), usize> = HashMap::new();
    let mut wire = |id: usize, dir: u64, m: &Msg, from: EpAddr, to: EpAddr| -> Wire {
        let cat = category(m.cat);
        let mut args = vec![id as u32];
        args.extend((0..m.nargs).map(|i| hash_words(&[id as u64, dir, i as u64]) as u32));
        let want = match m.len {
            Len::Zero => 0,
            Len::One => 1,
            Len::Small(n) => n as usize,
            Len::Max => MAX_MEDIUM,
        };
        let (len, offset) = match cat {
            Category::Short => (0, 0),
            Category::Medium => (want.min(MAX_MEDIUM), 0),
            Category::Long => {
                let used = bump.entry((gid(from), gid(to))).or_insert(0);
                let len = want.min(AREA - *used);
                let offset = gid(from) * AREA + *used;
                *used += len;
                (len, offset)
            }
        };
        Wire {
            cat,
            args,
            len,
            seed: hash_words(&[s.seed, id as u64, dir]),
            offset,
        }
    };
    s.ops
        .iter()
        .enumerate()
        .map(|(id, o)| {
            let src = EpAddr::new(o.src.0 % s.ranks, o.src.1 % s.eps);
            let dst = EpAddr::new(o.dst.0 % s.ranks, o.dst.1 % s.eps);
            let req = wire(id, 0, &o.req, src, dst);
            let reply = o.reply.as_ref().map(|m| wire(id, 1, m, dst, src));
            Op {
                src,
                dst,
                req,
                reply,
                imm: o.imm,
            }
        })
        .collect()
}

const PENDING: u8 = 0;
const SENT: u8 = 1;
const BLOCKED: u8 = 2;

struct State {
    ops: Vec<Op>,
    status: Vec<AtomicU8>,
    /// Arrival log of every endpoint (by global id): (op, kind).
    logs: Vec<Mutex<Vec<(usize, Kind)>>>,
    errs: Mutex<Vec<String>>,
    done: AtomicUsize,
    eps: u16,
}

impl State {
    fn gid(&self, a: EpAddr) -> usize {
        a.rank as usize * self.eps as usize + a.ep as usize
    }
    fn err(&self, e: String) {
        self.errs.lock().unwrap().push(e);
    }
    fn check(
        &self,
        am: &Am<'_>,
        w: &Wire,
        from: EpAddr,
        kind: Kind,
        seg_base: usize,
    ) -> Option<String> {
        if am.src() != from
            || am.category() != w.cat
            || am.kind() != kind
            || am.args() != w.args.as_slice()
        {
            return Some(format!(
                "header: {:?} {:?} from {} args {:?}",
                am.kind(),
                am.category(),
                am.src(),
                am.args()
            ));
        }
        let got = match am.long() {
            Some(l) => l.to_vec(),
            None => am.payload().to_vec(),
        };
        if got != payload(w.seed, w.len) {
            return Some(format!("payload of {} bytes differs", got.len()));
        }
        let _ = seg_base;
        if w.cat == Category::Long
            && (am.offset() != w.offset || am.long().map(|l| l.len()) != Some(w.len))
        {
            return Some(format!("Long at {} (expected {})", am.offset(), w.offset));
        }
        None
    }
}

fn run(s: &Scenario) -> Result<(), String> {
    run_with(s, |_| {}, s.reorder)
}

/// Runs `s` with the simulator configuration adjusted by `tweak`, checking FIFO order
/// unless `model_reorder`.
fn run_with(
    s: &Scenario,
    tweak: impl Fn(&mut SimConfig),
    model_reorder: bool,
) -> Result<(), String> {
    let ops = resolve(s);
    let total_eps = s.ranks as usize * s.eps as usize;
    let st = Arc::new(State {
        status: ops.iter().map(|_| AtomicU8::new(PENDING)).collect(),
        ops,
        logs: (0..total_eps).map(|_| Mutex::new(Vec::new())).collect(),
        errs: Mutex::new(Vec::new()),
        done: AtomicUsize::new(0),
        eps: s.eps,
    });
    let mut cfg = SimConfig::default()
        .seed(s.seed)
        .reorder(s.reorder)
        .latency(Delay::polls(s.latency))
        .jitter(Delay::polls(s.jitter))
        .ring_capacity(s.capacity)
        .timeout(Duration::from_secs(30));
    cfg.max_medium = MAX_MEDIUM;
    tweak(&mut cfg);
    let eps = s.eps;
    let seg = total_eps * AREA;
    run_sim(
        s.ranks,
        cfg,
        || ClientBuilder::new().segment_size(seg).endpoints(eps),
        |client| {
            let local = std::sync::Barrier::new(eps as usize);
            std::thread::scope(|sc| {
                for k in 0..eps {
                    let mut ep = client.endpoint(k).unwrap();
                    let (st, local) = (st.clone(), &local);
                    sc.spawn(move || {
                        let me = ep.addr();
                        let base = ep.segment().as_ptr() as usize;
                        let s1 = st.clone();
                        ep.register_at(RQ.index(), move |t: &mut Token<'_>, am: Am<'_>| {
                            let id = am.args().first().copied().unwrap_or(u32::MAX) as usize;
                            let Some(op) = s1.ops.get(id) else {
                                return s1.err(format!("{me}: unknown op {id}"));
                            };
                            if op.dst != me {
                                s1.err(format!("{me}: op {id} for {} delivered here", op.dst));
                            } else if let Some(e) =
                                s1.check(&am, &op.req, op.src, Kind::Request, base)
                            {
                                s1.err(format!("{me}: request of op {id}: {e}"));
                            }
                            s1.logs[s1.gid(me)]
                                .lock()
                                .unwrap()
                                .push((id, Kind::Request));
                            if let Some(r) = &op.reply {
                                let p = payload(r.seed, r.len);
                                let res = match r.cat {
                                    Category::Short => t.reply(RP, Body::short(&r.args)),
                                    Category::Medium => t.reply(RP, Body::medium(&r.args, &p)),
                                    Category::Long => {
                                        t.reply(RP, Body::long(&r.args, &p, r.offset))
                                    }
                                };
                                if let Err(e) = res {
                                    s1.err(format!("{me}: reply of op {id}: {e}"));
                                }
                            }
                        })
                        .unwrap();
                        let s2 = st.clone();
                        ep.register_at(RP.index(), move |_t: &mut Token<'_>, am: Am<'_>| {
                            let id = am.args().first().copied().unwrap_or(u32::MAX) as usize;
                            let Some(op) = s2.ops.get(id) else {
                                return s2.err(format!("{me}: unknown reply {id}"));
                            };
                            match &op.reply {
                                Some(r) if op.src == me => {
                                    if let Some(e) = s2.check(&am, r, op.dst, Kind::Reply, base) {
                                        s2.err(format!("{me}: reply of op {id}: {e}"));
                                    }
                                }
                                _ => s2.err(format!("{me}: unexpected reply for op {id}")),
                            }
                            s2.logs[s2.gid(me)].lock().unwrap().push((id, Kind::Reply));
                        })
                        .unwrap();
                        local.wait();
                        gex_testkit::exchange_barrier(&mut ep).unwrap();
                        for (id, op) in st.ops.iter().enumerate().filter(|(_, o)| o.src == me) {
                            let w = &op.req;
                            let p = payload(w.seed, w.len);
                            let r = match (w.cat, op.imm) {
                                (Category::Short, true) => {
                                    ep.try_request(op.dst, RQ, Body::short(&w.args))
                                }
                                (Category::Medium, true) => {
                                    ep.try_request(op.dst, RQ, Body::medium(&w.args, &p))
                                }
                                (Category::Long, true) => {
                                    ep.try_request(op.dst, RQ, Body::long(&w.args, &p, w.offset))
                                }
                                (Category::Short, false) => ep
                                    .request(op.dst, RQ, Body::short(&w.args))
                                    .map(|()| Injected::Sent),
                                (Category::Medium, false) => ep
                                    .request(op.dst, RQ, Body::medium(&w.args, &p))
                                    .map(|()| Injected::Sent),
                                (Category::Long, false) => ep
                                    .request(op.dst, RQ, Body::long(&w.args, &p, w.offset))
                                    .map(|()| Injected::Sent),
                            };
                            let status = match r {
                                Ok(Injected::Sent) => SENT,
                                Ok(Injected::WouldBlock) if op.imm => BLOCKED,
                                other => {
                                    st.err(format!("{me}: op {id}: {other:?}"));
                                    BLOCKED
                                }
                            };
                            st.status[id].store(status, Ordering::Release);
                        }
                        st.done.fetch_add(1, Ordering::AcqRel);
                        let expected = |st: &State| -> usize {
                            st.ops
                                .iter()
                                .enumerate()
                                .filter(|(i, _)| st.status[*i].load(Ordering::Acquire) == SENT)
                                .map(|(_, o)| {
                                    usize::from(o.dst == me)
                                        + usize::from(o.src == me && o.reply.is_some())
                                })
                                .sum()
                        };
                        ep.wait_until(|| {
                            st.done.load(Ordering::Acquire) == total_eps
                                && st.logs[st.gid(me)].lock().unwrap().len() >= expected(&st)
                        });
                        gex_testkit::exchange_barrier(&mut ep).unwrap();
                    });
                }
            });
        },
    );
    // The model.
    let errs = st.errs.lock().unwrap();
    if !errs.is_empty() {
        return Err(format!(
            "{} handler errors, first: {:?}",
            errs.len(),
            &errs[..errs.len().min(3)]
        ));
    }
    for g in 0..total_eps {
        let me = EpAddr::new((g / s.eps as usize) as u32, (g % s.eps as usize) as u16);
        let log = st.logs[g].lock().unwrap().clone();
        let mut want: Vec<(usize, Kind)> = Vec::new();
        for (id, op) in st.ops.iter().enumerate() {
            if st.status[id].load(Ordering::Acquire) != SENT {
                continue;
            }
            if op.dst == me {
                want.push((id, Kind::Request));
            }
            if op.src == me && op.reply.is_some() {
                want.push((id, Kind::Reply));
            }
        }
        let key = |&(id, k): &(usize, Kind)| (id, k == Kind::Reply);
        let (mut a, mut b) = (log.clone(), want);
        a.sort_by_key(key);
        b.sort_by_key(key);
        if a != b {
            return Err(format!("{me} received {a:?}, the model says {b:?}"));
        }
        if !model_reorder {
            // Per (source EP, kind) stream: op ids increase (ops are sent in id order).
            let mut last: HashMap<(EpAddr, bool), usize> = HashMap::new();
            for &(id, k) in &log {
                let op = &st.ops[id];
                let from = if k == Kind::Request { op.src } else { op.dst };
                if let Some(prev) = last.insert((from, k == Kind::Reply), id) {
                    if prev > id {
                        return Err(format!(
                            "{me}: {k:?} of op {id} from {from} overtook op {prev}"
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

/// A fixed scenario: 3 ranks x 2 EPs, every rank's EP 0 sends 40 Medium requests with
/// Medium replies to every EP.
fn fixed() -> Scenario {
    let m = |len| Msg {
        cat: 1,
        nargs: 3,
        len,
    };
    let ops = (0..240u32)
        .map(|i| OpSpec {
            src: (i % 3, 0),
            dst: ((i / 3) % 3, ((i / 9) % 2) as u16),
            req: m(Len::Small(40)),
            reply: Some(m(Len::Small(20))),
            imm: false,
        })
        .collect();
    Scenario {
        ranks: 3,
        eps: 2,
        seed: 7,
        reorder: false,
        latency: 0,
        jitter: 3,
        capacity: 1 << 20,
        ops,
    }
}

#[test]
fn the_model_accepts_a_correct_conduit() {
    run(&fixed()).unwrap();
}

#[test]
fn the_model_catches_duplicates_and_corruption() {
    let s = fixed();
    let e = run_with(
        &s,
        |c| c.fault = gex_testkit::sim::Fault::DuplicateRequest(5),
        false,
    )
    .unwrap_err();
    assert!(e.contains("the model says"), "{e}");
    let e = run_with(
        &s,
        |c| c.fault = gex_testkit::sim::Fault::CorruptMedium,
        false,
    )
    .unwrap_err();
    assert!(e.contains("payload"), "{e}");
}

#[test]
fn the_model_catches_reordering_where_fifo_is_promised() {
    let e = run_with(&fixed(), |c| c.reorder = true, false).unwrap_err();
    assert!(e.contains("overtook"), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, max_shrink_iters: 200, ..ProptestConfig::default() })]

    #[test]
    fn am_sequences_match_the_model(s in scenario()) {
        if let Err(e) = run(&s) {
            prop_assert!(false, "{e}");
        }
    }
}
