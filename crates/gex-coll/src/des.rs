//! Discrete-event LogGP simulation of gex-coll's schedules at scale (thousands of
//! ranks in one thread), with the transports and, optionally, the data.
//!
//! The simulated-fabric conduit of gex-testkit runs ranks as OS threads, which does
//! not scale to 1024+ ranks on a small machine, and it measures the host, not a
//! modelled network. This simulator executes the *same* [`Schedule`](crate::sched::Schedule)s the engine
//! executes (each algorithm's `plan` for every rank), event by event in time order, so
//! a simulated ordering or crossover is a property of the algorithms gex-coll runs, not
//! of a separate formula. It lives in gex-coll (not gex-testkit) because it needs the
//! schedules and transports, and gex-testkit sits below gex-coll; it has no I/O and no
//! dependency, and tools (`gex-tune plots`) use it as well as tests.
//!
//! ## Model
//! Times in µs, every rank enters at 0, parameters [`LogGP`] `(L, o, g, G, copy)`.
//! - **Send** (round start, in list order): the CPU pays `o`; the NIC injects one
//!   message at a time, `max(g, (k − 1)·G)` apart; the message reaches the receiver
//!   `o + L + (k − 1)·G` after it left. A receiver's link absorbs one byte per `G`, so
//!   converging messages serialise (handled when the arrival event is processed, in
//!   time order).
//! - **Receive** (in list order, as the engine applies them): waits for the arrival,
//!   then the CPU pays `o` plus, by transport: *eager* `k·copy` (out of the mailbox);
//!   *put* nothing more (the bytes landed in place); *rendezvous* the message was an
//!   announcement: a get request (`o`, `L`), the reply from the sender's NIC
//!   (`L + (k − 1)·G`, serialised on both NICs), `o` for the completion and `o` for the
//!   acknowledgement, which reaches the sender `L` later — the sender's exit waits for
//!   every acknowledgement. Combining receives and local steps cost `copy` per byte.
//! - **Entry synchronisation** in-my with put: the receiver sends a *ready* message to
//!   each of its put senders when it enters (CPU `o` each); a put waits for it.
//!
//! With `data`, every message carries its bytes and the outputs are returned, so
//! tests compare them with a sequential reference.

use crate::loggp::LogGP;
use crate::op::Transport;
use crate::sched::model::ModelError;
use crate::sched::{ReduceFn, Schedule, apply_local, apply_recv, pack, span};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

/// What a simulation produced.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// Completion time of the slowest rank (µs).
    pub time: f64,
    /// Completion time of every rank (µs).
    pub finish: Vec<f64>,
    /// Data messages sent (announcements count for rendezvous).
    pub messages: u64,
    /// Every rank's output, when the simulation carried data.
    pub outputs: Option<Vec<Vec<u8>>>,
}

/// Options of a simulation.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// How messages move (put and rendezvous apply to symmetric schedules only; others
    /// move eagerly, as in the engine).
    pub transport: Transport,
    /// In-my entry synchronisation (a put waits for the receiver's ready message).
    pub in_my: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            transport: Transport::Eager,
            in_my: true,
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
struct Ev {
    t: f64,
    seq: u64,
    /// Index into the message table.
    msg: usize,
    /// The receive link was already accounted for.
    linked: bool,
}

impl Eq for Ev {}
impl Ord for Ev {
    fn cmp(&self, o: &Self) -> Ordering {
        // Min-heap on (time, seq).
        o.t.total_cmp(&self.t).then(o.seq.cmp(&self.seq))
    }
}
impl PartialOrd for Ev {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

struct Msg {
    src: u32,
    dst: u32,
    tag: u32,
    bytes: usize,
    data: Option<Vec<u8>>,
    /// Delivery time (set when delivered).
    at: Option<f64>,
}

#[derive(Clone, Default)]
struct Rank {
    cpu: f64,
    nic: f64,
    rx: f64,
    round: usize,
    sent: bool,
    next_recv: usize,
    acks_pending: u32,
    last_ack: f64,
    done: Option<f64>,
}

/// Simulates the schedules of a whole team (`scheds[r]` for team rank `r`) under `m`;
/// with `data = Some((inputs, reduce))` the messages carry bytes and the outputs are
/// returned.
///
/// # Errors
/// [`ModelError`] if the schedules are inconsistent (a receive never matched, a length
/// mismatch, a duplicate tag).
pub fn simulate(
    scheds: &[Schedule],
    m: &LogGP,
    opts: Options,
    data: Option<(&[Vec<u8>], Option<&ReduceFn>)>,
) -> Result<Outcome, ModelError> {
    let mut sim = Sim::new(scheds, m, opts, data);
    loop {
        // Advance every runnable rank as far as it goes.
        while let Some(r) = sim.runnable.pop() {
            sim.advance(r)?;
        }
        if sim.finished == scheds.len() {
            break;
        }
        sim.deliver()?;
    }
    sim.outcome()
}

/// The state of one simulation.
struct Sim<'a> {
    scheds: &'a [Schedule],
    m: &'a LogGP,
    transport: Transport,
    /// Every rank's work buffer, when the simulation carries data.
    work: Option<Vec<Vec<u8>>>,
    reduce: Option<&'a ReduceFn>,
    ranks: Vec<Rank>,
    /// Ready messages (in-my put): the time the ready of receiver -> sender arrives.
    ready: HashMap<(u32, u32), f64>,
    msgs: Vec<Msg>,
    index: HashMap<(u32, u32, u32), usize>,
    heap: BinaryHeap<Ev>,
    seq: u64,
    waiting: Vec<Option<usize>>,
    runnable: Vec<usize>,
    finished: usize,
}

impl<'a> Sim<'a> {
    fn new(
        scheds: &'a [Schedule],
        m: &'a LogGP,
        opts: Options,
        data: Option<(&[Vec<u8>], Option<&'a ReduceFn>)>,
    ) -> Sim<'a> {
        let p = scheds.len();
        let symmetric = scheds.iter().all(|s| s.symmetric);
        let transport = if symmetric {
            opts.transport
        } else {
            Transport::Eager
        };
        let work = data.map(|(inputs, _)| {
            (0..p)
                .map(|r| {
                    let mut w = vec![0u8; scheds[r].work_len];
                    for (src, dst) in &scheds[r].input {
                        w[*dst..*dst + src.len()].copy_from_slice(&inputs[r][src.clone()]);
                    }
                    w
                })
                .collect()
        });
        let mut ranks = vec![Rank::default(); p];
        let mut ready = HashMap::new();
        if transport == Transport::Put && opts.in_my {
            for (r, s) in scheds.iter().enumerate() {
                let mut peers: Vec<u32> = s
                    .rounds
                    .iter()
                    .flat_map(|x| x.recvs.iter().map(|v| v.peer))
                    .collect();
                peers.sort_unstable();
                peers.dedup();
                for peer in peers {
                    ranks[r].cpu += m.o;
                    ready.insert((r as u32, peer), ranks[r].cpu + m.l);
                }
            }
        }
        Sim {
            scheds,
            m,
            transport,
            work,
            reduce: data.and_then(|d| d.1),
            ranks,
            ready,
            msgs: Vec::new(),
            index: HashMap::new(),
            heap: BinaryHeap::new(),
            seq: 0,
            waiting: vec![None; p],
            runnable: (0..p).collect(),
            finished: 0,
        }
    }

    /// The transfer time of the bytes beyond the first of a `k`-byte message.
    fn gb(&self, k: usize) -> f64 {
        (k.max(1) - 1) as f64 * self.m.big_g
    }

    /// Runs rank `r` until it finishes or waits for a message.
    fn advance(&mut self, r: usize) -> Result<(), ModelError> {
        let scheds = self.scheds;
        let s = &scheds[r];
        loop {
            let st = &mut self.ranks[r];
            if st.done.is_some() {
                return Ok(());
            }
            if st.round == s.rounds.len() {
                if st.acks_pending == 0 {
                    st.done = Some(st.cpu.max(st.last_ack));
                    self.finished += 1;
                }
                return Ok(());
            }
            if !st.sent {
                self.send_round(r)?;
            }
            if !self.receive_round(r)? {
                return Ok(());
            }
            let rd = &s.rounds[self.ranks[r].round];
            let st = &mut self.ranks[r];
            for l in &rd.post {
                let len = match l {
                    crate::sched::Local::Copy { src, .. }
                    | crate::sched::Local::ReduceLeft { src, .. }
                    | crate::sched::Local::ReduceRight { src, .. } => src.len(),
                };
                st.cpu += len as f64 * self.m.copy;
                if let Some(w) = self.work.as_mut() {
                    apply_local(&mut w[r], l, self.reduce);
                }
            }
            st.round += 1;
            st.sent = false;
            st.next_recv = 0;
        }
    }

    /// The sends of rank `r`'s current round.
    fn send_round(&mut self, r: usize) -> Result<(), ModelError> {
        let (m, scheds) = (self.m, self.scheds);
        let rd = &scheds[r].rounds[self.ranks[r].round];
        for snd in &rd.sends {
            let k = span(&snd.ranges);
            let key = (r as u32, snd.peer, snd.tag);
            if self.index.contains_key(&key) {
                return Err(ModelError::DuplicateTag(key));
            }
            let (gk, transport) = (self.gb(k), self.transport);
            let st = &mut self.ranks[r];
            let mut start = st.cpu.max(st.nic);
            if transport == Transport::Put {
                if let Some(&t) = self.ready.get(&(snd.peer, r as u32)) {
                    start = start.max(t + m.o);
                }
            }
            st.cpu = start + m.o;
            let (wire, arrive) = match transport {
                Transport::Rendezvous => {
                    st.acks_pending += 1;
                    (0, start + m.o + m.l)
                }
                _ => (k, start + m.o + m.l + gk),
            };
            st.nic = start + m.g.max((wire.max(1) - 1) as f64 * m.big_g);
            let bytes = self.work.as_ref().map(|w| pack(&w[r], &snd.ranges));
            self.index.insert(key, self.msgs.len());
            self.heap.push(Ev {
                t: arrive,
                seq: self.seq,
                msg: self.msgs.len(),
                linked: false,
            });
            self.seq += 1;
            self.msgs.push(Msg {
                src: r as u32,
                dst: snd.peer,
                tag: snd.tag,
                bytes: k,
                data: bytes,
                at: None,
            });
        }
        self.ranks[r].sent = true;
        Ok(())
    }

    /// The receives of rank `r`'s current round, in list order: true when all were
    /// applied, false when it waits for one.
    fn receive_round(&mut self, r: usize) -> Result<bool, ModelError> {
        let (m, scheds) = (self.m, self.scheds);
        let rd = &scheds[r].rounds[self.ranks[r].round];
        while self.ranks[r].next_recv < rd.recvs.len() {
            let v = &rd.recvs[self.ranks[r].next_recv];
            let key = (v.peer, r as u32, v.tag);
            let Some(&mi) = self.index.get(&key) else {
                self.waiting[r] = None;
                return Ok(false);
            };
            let Some(at) = self.msgs[mi].at else {
                self.waiting[r] = Some(mi);
                return Ok(false);
            };
            let k = self.msgs[mi].bytes;
            if k != span(&v.ranges) {
                return Err(ModelError::LengthMismatch {
                    msg: key,
                    sent: k,
                    expected: span(&v.ranges),
                });
            }
            let combine = if v.action == crate::sched::Action::Copy {
                0.0
            } else {
                k as f64 * m.copy
            };
            self.ranks[r].cpu = self.ranks[r].cpu.max(at) + m.o + combine;
            match self.transport {
                Transport::Eager => self.ranks[r].cpu += k as f64 * m.copy,
                Transport::Put => {}
                Transport::Rendezvous => self.get(r, v.peer as usize, k),
            }
            if let Some(w) = self.work.as_mut() {
                let d = self.msgs[mi].data.take().unwrap_or_default();
                apply_recv(&mut w[r], v, &d, self.reduce);
            }
            self.ranks[r].next_recv += 1;
            self.waiting[r] = None;
        }
        Ok(true)
    }

    /// Rank `r`'s rendezvous get of `k` bytes from `src`: request, reply from the
    /// sender's NIC, completion, acknowledgement.
    fn get(&mut self, r: usize, src: usize, k: usize) {
        let (m, gk) = (self.m, self.gb(k));
        let req = self.ranks[r].cpu + m.l;
        let sn = self.ranks[src].nic.max(req);
        self.ranks[src].nic = sn + m.g.max(gk);
        let data_at = (sn + m.l + gk).max(self.ranks[r].rx + gk);
        self.ranks[r].rx = data_at;
        self.ranks[r].cpu = self.ranks[r].cpu.max(data_at) + 2.0 * m.o;
        let ack = self.ranks[r].cpu + m.l;
        let ss = &mut self.ranks[src];
        ss.acks_pending -= 1;
        ss.last_ack = ss.last_ack.max(ack + m.o);
        if ss.acks_pending == 0 && ss.round == self.scheds[src].rounds.len() {
            self.runnable.push(src);
        }
    }

    /// Delivers the next arrival (a deadlock if there is none).
    fn deliver(&mut self) -> Result<(), ModelError> {
        let Some(ev) = self.heap.pop() else {
            let ranks = &self.ranks;
            let r = (0..ranks.len())
                .find(|&r| ranks[r].done.is_none())
                .unwrap_or(0);
            let st = &ranks[r];
            let waiting = self.scheds[r]
                .rounds
                .get(st.round)
                .and_then(|rd| rd.recvs.get(st.next_recv))
                .map_or((u32::MAX, 0), |v| (v.peer, v.tag));
            return Err(ModelError::Deadlock {
                rank: r as u32,
                round: st.round,
                waiting,
            });
        };
        let (dst, k) = (self.msgs[ev.msg].dst as usize, self.msgs[ev.msg].bytes);
        let wire = if self.transport == Transport::Rendezvous {
            0
        } else {
            k
        };
        if !ev.linked {
            let t = ev.t.max(self.ranks[dst].rx + self.gb(wire));
            self.ranks[dst].rx = t;
            if t > ev.t {
                self.heap.push(Ev {
                    t,
                    linked: true,
                    ..ev
                });
                return Ok(());
            }
        }
        self.msgs[ev.msg].at = Some(ev.t);
        // Wake the receiver if it waits for this message (or for one not yet sent).
        if self.ranks[dst].done.is_none() {
            match self.waiting[dst] {
                Some(mi) if mi != ev.msg => {}
                _ => self.runnable.push(dst),
            }
        }
        Ok(())
    }

    /// The result, once every rank finished.
    fn outcome(self) -> Result<Outcome, ModelError> {
        // With data, a message whose bytes were never taken was never received.
        let mut unreceived: Vec<(u32, u32, u32)> = self
            .msgs
            .iter()
            .filter(|x| x.data.is_some())
            .map(|x| (x.src, x.dst, x.tag))
            .collect();
        if !unreceived.is_empty() {
            unreceived.sort_unstable();
            return Err(ModelError::Unreceived(unreceived));
        }
        let finish: Vec<f64> = self.ranks.iter().map(|x| x.done.unwrap_or(0.0)).collect();
        let scheds = self.scheds;
        let outputs = self.work.map(|w| {
            (0..scheds.len())
                .map(|r| scheds[r].output_of(&w[r]))
                .collect()
        });
        Ok(Outcome {
            time: finish.iter().copied().fold(0.0, f64::max),
            finish,
            messages: self.msgs.len() as u64,
            outputs,
        })
    }
}
