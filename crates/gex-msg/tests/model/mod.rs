//! The layer on real ranks against a sequential model of MPI matching (the model of
//! `matching_model.rs`, which checks the engine alone): rank 0 draws random scripts
//! of arrivals, receives (specific and wildcard) and probes with proptest's
//! generators, and plays them on the job. An arrival is a message rank 0 asks a peer
//! to send (a command in context 1); rank 0 waits until it has arrived (its layer's
//! arrival counters) before the next step, so the model knows the arrival order and
//! predicts every match: which receive completes with which message (bytes, source,
//! tag, length), what a probe sees, and that nothing else completes. Sizes are eager
//! and rendezvous, so both protocols (and, on thread ranks or a host's processes, the
//! single-copy rendezvous) are matched and delivered through the same checks. Each
//! script ends with the model's queues empty (pending receives are satisfied, then the
//! unexpected messages received), so the next one starts clean.
#![allow(dead_code)]

use gex_core::Endpoint;
use gex_core::spi::Conduit;
use gex_msg::engine::{Envelope, Pattern};
use gex_msg::{Comm, Msg, MsgError, MsgExt, Received};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config as PtConfig, RngAlgorithm, TestRng, TestRunner};
use std::collections::BTreeMap;

const DATA: Comm = Comm::WORLD;
const CMD: Comm = Comm::new(1);
const TAGS: u32 = 3;

#[derive(Clone, Debug)]
enum Op {
    /// Peer `src` (1..n) sends a message with `tag`, of size class `size`.
    Arrive { src: u32, tag: u32, size: u8 },
    /// Rank 0 posts a receive.
    Post { src: Option<u32>, tag: Option<u32> },
    /// Rank 0 probes.
    Probe { src: Option<u32>, tag: Option<u32> },
}

fn op(peers: u32) -> impl Strategy<Value = Op> {
    let src = 1..=peers;
    prop_oneof![
        (src.clone(), 0..TAGS, 0u8..4).prop_map(|(src, tag, size)| Op::Arrive { src, tag, size }),
        (
            proptest::option::of(src.clone()),
            proptest::option::of(0..TAGS)
        )
            .prop_map(|(src, tag)| Op::Post { src, tag }),
        (proptest::option::of(src), proptest::option::of(0..TAGS))
            .prop_map(|(src, tag)| Op::Probe { src, tag }),
    ]
}

/// Bytes of message `id` (its length from the size class and the eager threshold).
fn message(id: u32, size: u8, eager: usize) -> Vec<u8> {
    let len = match size {
        0 => 8,
        1 => 300,
        2 => eager + 1,
        _ => 3 * eager + 77,
    };
    let mut v: Vec<u8> = (0..len)
        .map(|k| (k as u32).wrapping_mul(13).wrapping_add(id) as u8)
        .collect();
    v[..4].copy_from_slice(&id.to_le_bytes());
    v
}

/// The sequential model of MPI matching (shared with `matching_model.rs`, which checks
/// the engine alone against it): posted receives in posting order, unexpected messages
/// in arrival order; an arrival takes the first posted receive that accepts it, a
/// receive the first unexpected message it accepts, a probe reports that message.
#[derive(Default)]
pub(crate) struct Model {
    pub(crate) posted: Vec<(Pattern, u64)>,
    pub(crate) unexpected: Vec<(Envelope, u64)>,
}

impl Model {
    pub(crate) fn arrive(&mut self, e: Envelope, id: u64) -> Option<u64> {
        match self.posted.iter().position(|(p, _)| p.accepts(&e)) {
            Some(i) => Some(self.posted.remove(i).1),
            None => {
                self.unexpected.push((e, id));
                None
            }
        }
    }
    pub(crate) fn probe(&self, p: &Pattern) -> Option<(Envelope, u64)> {
        self.unexpected.iter().find(|(e, _)| p.accepts(e)).copied()
    }
    pub(crate) fn post(&mut self, p: Pattern, id: u64) -> Option<(Envelope, u64)> {
        match self.unexpected.iter().position(|(e, _)| p.accepts(e)) {
            Some(i) => Some(self.unexpected.remove(i)),
            None => {
                self.posted.push((p, id));
                None
            }
        }
    }
}

fn arrivals<C: Conduit>(ep: &mut Endpoint<C>) -> u64 {
    gex_core::layer::with::<Msg, _, _>(ep, |m, _| {
        let s = m.stats();
        s.matched_posted + s.unexpected
    })
    .unwrap()
}

/// Rank 0's state while it plays scripts.
struct Driver<'a, C: Conduit> {
    ep: &'a mut Endpoint<C>,
    eager: usize,
    model: Model,
    /// Every message sent: its envelope and bytes.
    sent: Vec<(Envelope, Vec<u8>)>,
    /// Receives posted and not completed yet, by receive id.
    pending: BTreeMap<u64, gex_core::Event<Received, MsgError>>,
    next_recv: u64,
    arrived: u64,
}

impl<C: Conduit> Driver<'_, C> {
    fn arrive(&mut self, src: u32, tag: u32, size: u8) {
        let id = self.sent.len() as u32;
        let data = message(id, size, self.eager);
        let cmd = [
            id.to_le_bytes(),
            tag.to_le_bytes(),
            u32::from(size).to_le_bytes(),
        ]
        .concat();
        self.ep.send(CMD, src, 0, &cmd).unwrap();
        let e = Envelope {
            src,
            tag,
            ctx: DATA.id(),
        };
        self.sent.push((e, data));
        // Wait until it has arrived (matched or queued) before anything else happens.
        // A small message from a rank of this host may sit in its near-path queue,
        // which only receives and probes of its source drain (enqueue-and-probe): the
        // probe feeds it to the engine without changing what the model sees.
        self.arrived += 1;
        let want = self.arrived;
        while arrivals(self.ep) < want {
            self.ep.iprobe(DATA, Some(src), None).unwrap();
        }
        assert_eq!(arrivals(self.ep), want, "one arrival per message");
        match self.model.arrive(e, u64::from(id)) {
            Some(r) => {
                let ev = self.pending.remove(&r).expect("pending receive");
                self.check(ev, u64::from(id));
            }
            None => self.no_other_completion(),
        }
    }

    /// The receive `ev` completes with message `id`.
    fn check(&mut self, ev: gex_core::Event<Received, MsgError>, id: u64) {
        let got = self.ep.wait(ev).unwrap();
        let (e, data) = &self.sent[id as usize];
        assert_eq!(
            (got.status.source, got.status.tag, got.status.len),
            (e.src, e.tag, data.len()),
            "message {id}: status"
        );
        assert_eq!(&got.data, data, "message {id}: bytes");
        self.no_other_completion();
    }

    /// No pending receive completed (the model says none matched).
    fn no_other_completion(&mut self) {
        for _ in 0..3 {
            self.ep.poll();
        }
        for (r, ev) in &self.pending {
            assert!(
                !self.ep.test(ev).unwrap(),
                "receive {r} completed unmatched"
            );
        }
    }

    fn post(&mut self, src: Option<u32>, tag: Option<u32>) {
        let r = self.next_recv;
        self.next_recv += 1;
        let cap = 3 * self.eager + 100;
        let ev = self.ep.irecv(DATA, src, tag, vec![0; cap]).unwrap();
        let p = Pattern {
            src,
            tag,
            ctx: DATA.id(),
        };
        match self.model.post(p, r) {
            Some((_, id)) => self.check(ev, id),
            None => {
                self.pending.insert(r, ev);
                self.no_other_completion();
            }
        }
    }

    fn probe(&mut self, src: Option<u32>, tag: Option<u32>) {
        let got = self.ep.iprobe(DATA, src, tag).unwrap();
        let p = Pattern {
            src,
            tag,
            ctx: DATA.id(),
        };
        let want = self
            .model
            .probe(&p)
            .map(|(e, id)| (e.src, e.tag, self.sent[id as usize].1.len()));
        assert_eq!(got.map(|s| (s.source, s.tag, s.len)), want, "probe {p:?}");
    }

    /// Empties the model's queues: a message for every pending receive (the earliest
    /// first, so it is the one that matches), then a receive of every unexpected one.
    fn drain(&mut self, peers: u32) {
        while let Some(&(p, _)) = self.model.posted.first() {
            let src = p.src.unwrap_or(1 + self.sent.len() as u32 % peers);
            let tag = p.tag.unwrap_or(0);
            self.arrive(src, tag, (self.sent.len() % 4) as u8);
        }
        assert!(self.pending.is_empty());
        while !self.model.unexpected.is_empty() {
            self.post(None, None);
        }
    }
}

/// Plays `scripts` random scripts of up to `len` steps on the job of `ep` (every rank
/// calls it; rank 0 drives, the others send on command). `seed` fixes the scripts.
pub(crate) fn play<C: Conduit>(
    ep: &mut Endpoint<C>,
    seed: u8,
    scripts: u32,
    len: usize,
    eager: usize,
) {
    let (me, n) = (ep.addr().rank, ep.world().size());
    assert!(n >= 2);
    if me != 0 {
        let mut cmd = [0u8; 12];
        loop {
            let st = ep.recv(CMD, Some(0), None, &mut cmd).unwrap();
            if st.tag == 1 {
                break;
            }
            let w = |i: usize| u32::from_le_bytes(cmd[i..i + 4].try_into().unwrap());
            let (id, tag, size) = (w(0), w(4), w(8) as u8);
            ep.send(DATA, 0, tag, &message(id, size, eager)).unwrap();
        }
    } else {
        let peers = n - 1;
        // Fixed scripts (the same on every run): a failure is reproduced by rerunning.
        let mut runner = TestRunner::new_with_rng(
            PtConfig::default(),
            TestRng::from_seed(RngAlgorithm::ChaCha, &[seed; 32]),
        );
        let strategy = proptest::collection::vec(op(peers), 0..len);
        let mut d = Driver {
            ep,
            eager,
            model: Model::default(),
            sent: Vec::new(),
            pending: BTreeMap::new(),
            next_recv: 0,
            arrived: 0,
        };
        for _ in 0..scripts {
            let ops = strategy.new_tree(&mut runner).unwrap().current();
            for o in &ops {
                match *o {
                    Op::Arrive { src, tag, size } => d.arrive(src, tag, size),
                    Op::Post { src, tag } => d.post(src, tag),
                    Op::Probe { src, tag } => d.probe(src, tag),
                }
            }
            d.drain(peers);
        }
        let ep = d.ep;
        for r in 1..n {
            ep.send(CMD, r, 1, &[]).unwrap();
        }
    }
    gex_testkit::exchange_barrier(ep).unwrap();
    assert!(gex_core::layer::wait_until::<Msg, _>(ep, Msg::is_quiet));
    gex_testkit::exchange_barrier(ep).unwrap();
}
