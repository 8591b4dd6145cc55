//! Schedules: the pure, I/O-free description of what one rank does in one collective.
//!
//! An algorithm turns (operation, team size, rank, root, block sizes) into a
//! [`Schedule`] for each rank: a work buffer, where the rank's input goes in it, a list
//! of [`Round`]s of sends, receives and local combinations, and where the output is
//! taken from. The layer's engine ([`Coll`](crate::Coll)) executes schedules over any
//! conduit; `model::run` (feature `internals`) executes the schedules of every rank of
//! a team in one thread (a sequential reference used by tests), and
//! `model::loggp_time` predicts their running time under LogGP parameters (used for
//! simulations at scale).
//!
//! ## Round semantics
//! Round `i` of a rank: (1) every send of the round takes a snapshot of its ranges of
//! the work buffer (as it is after round `i - 1`) and leaves; (2) the receives of the
//! round are applied in list order as their messages arrive (a receive is applied only
//! after all receives listed before it), each copying or combining the message into its
//! ranges; (3) the `post` steps run in order. A message is identified by (sender,
//! receiver, tag); an algorithm gives both sides the same tag, and never sends two
//! messages with the same tag between the same two ranks in one collective.

use std::ops::Range;

/// How a received message is applied to its ranges of the work buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Overwrite.
    Copy,
    /// `work = incoming ⊕ work` (the sender's contribution comes from lower ranks).
    ReduceLeft,
    /// `work = work ⊕ incoming` (the sender's contribution comes from higher ranks).
    ReduceRight,
}

/// One message sent: the concatenation of `ranges` of the work buffer goes to team
/// rank `peer` with `tag`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendStep {
    /// Destination team rank.
    pub peer: u32,
    /// Message tag (agreed with the receiver).
    pub tag: u32,
    /// Byte ranges of the work buffer, concatenated.
    pub ranges: Vec<Range<usize>>,
}

/// One message received from team rank `peer` with `tag`, spread over `ranges`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecvStep {
    /// Source team rank.
    pub peer: u32,
    /// Message tag.
    pub tag: u32,
    /// Byte ranges of the work buffer that receive the message, in order.
    pub ranges: Vec<Range<usize>>,
    /// How the bytes are applied.
    pub action: Action,
}

/// A local step after the receives of a round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Local {
    /// `work[dst..dst+len] = work[src]`.
    Copy {
        /// Source range.
        src: Range<usize>,
        /// Destination offset.
        dst: usize,
    },
    /// `work[dst..] = work[src] ⊕ work[dst..]`.
    ReduceLeft {
        /// Left operand range.
        src: Range<usize>,
        /// Offset of the right operand and of the result.
        dst: usize,
    },
    /// `work[dst..] = work[dst..] ⊕ work[src]`.
    ReduceRight {
        /// Right operand range.
        src: Range<usize>,
        /// Offset of the left operand and of the result.
        dst: usize,
    },
}

/// Sends, then receives, then local steps (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Round {
    /// Messages sent at the start of the round.
    pub sends: Vec<SendStep>,
    /// Messages received and applied in order.
    pub recvs: Vec<RecvStep>,
    /// Local steps after every receive.
    pub post: Vec<Local>,
}

impl Round {
    /// Adds a send of `ranges` of the work buffer to `peer` with `tag`.
    #[inline]
    pub(crate) fn send(&mut self, peer: u32, tag: u32, ranges: Vec<Range<usize>>) {
        self.sends.push(SendStep { peer, tag, ranges });
    }

    /// Adds a receive from `peer` with `tag` into `ranges`, applied by `action`.
    #[inline]
    pub(crate) fn recv(&mut self, peer: u32, tag: u32, ranges: Vec<Range<usize>>, action: Action) {
        self.recvs.push(RecvStep {
            peer,
            tag,
            ranges,
            action,
        });
    }
}

/// What one rank does in one collective.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Schedule {
    /// Bytes of the work buffer (zero-filled at start).
    pub work_len: usize,
    /// Copies of the rank's input into the work buffer: (input range, work offset).
    pub input: Vec<(Range<usize>, usize)>,
    /// The rounds.
    pub rounds: Vec<Round>,
    /// Pieces of the output: (work range, output offset).
    pub output: Vec<(Range<usize>, usize)>,
    /// Bytes of the output.
    pub out_len: usize,
    /// Every message lands at the same work range at the receiver as it was sent from,
    /// and each message is one range (so a signaling put or a rendezvous get can move
    /// it between mirrored segment regions).
    pub symmetric: bool,
}

impl Schedule {
    /// The output this schedule assembles from its final work buffer `work`.
    #[cfg(feature = "internals")]
    pub(crate) fn output_of(&self, work: &[u8]) -> Vec<u8> {
        let mut out = vec![0u8; self.out_len];
        for (src, dst) in &self.output {
            out[*dst..*dst + src.len()].copy_from_slice(&work[src.clone()]);
        }
        out
    }

    /// A schedule with the given buffer sizes and no rounds.
    pub fn new(work_len: usize, out_len: usize) -> Schedule {
        Schedule {
            work_len,
            out_len,
            ..Schedule::default()
        }
    }

    /// A new round at the end, returned for filling.
    pub fn round(&mut self) -> &mut Round {
        self.rounds.push(Round::default());
        self.rounds.last_mut().expect("just pushed")
    }

    /// Appends `other`'s rounds after this schedule's, shifting its tags by
    /// `tag_shift`; `other`'s input and output placements are ignored (the caller
    /// designs both schedules over one work buffer layout). The work buffer grows to
    /// the larger of the two; the result is symmetric only if both are.
    pub fn then(mut self, other: Schedule, tag_shift: u32) -> Schedule {
        self.work_len = self.work_len.max(other.work_len);
        for mut r in other.rounds {
            for s in &mut r.sends {
                s.tag += tag_shift;
            }
            for v in &mut r.recvs {
                v.tag += tag_shift;
            }
            self.rounds.push(r);
        }
        self.symmetric &= other.symmetric;
        self
    }

    /// Number of messages this rank sends.
    pub fn sends(&self) -> usize {
        self.rounds.iter().map(|r| r.sends.len()).sum()
    }

    /// Largest tag used (0 if none).
    pub fn max_tag(&self) -> u32 {
        self.rounds
            .iter()
            .flat_map(|r| {
                r.sends
                    .iter()
                    .map(|s| s.tag)
                    .chain(r.recvs.iter().map(|v| v.tag))
            })
            .max()
            .unwrap_or(0)
    }
}

/// Total bytes of a list of ranges.
pub(crate) fn span(ranges: &[Range<usize>]) -> usize {
    ranges.iter().map(|r| r.len()).sum()
}

pub use crate::op::ReduceFn;

/// Applies local step `l` to `work`.
pub(crate) fn apply_local(work: &mut [u8], l: &Local, reduce: Option<&ReduceFn>) {
    match l {
        Local::Copy { src, dst } => work.copy_within(src.clone(), *dst),
        Local::ReduceLeft { src, dst } | Local::ReduceRight { src, dst } => {
            let f = reduce.expect("a schedule with reductions needs a reduction operator");
            let tmp = work[src.clone()].to_vec();
            let n = tmp.len();
            f(
                &mut work[*dst..*dst + n],
                &tmp,
                matches!(l, Local::ReduceLeft { .. }),
            );
        }
    }
}

/// Applies a received message to its ranges.
pub(crate) fn apply_recv(work: &mut [u8], v: &RecvStep, msg: &[u8], reduce: Option<&ReduceFn>) {
    let mut at = 0;
    for r in &v.ranges {
        let piece = &msg[at..at + r.len()];
        at += r.len();
        match v.action {
            Action::Copy => work[r.clone()].copy_from_slice(piece),
            a => {
                let f = reduce.expect("a schedule with reductions needs a reduction operator");
                f(&mut work[r.clone()], piece, a == Action::ReduceLeft);
            }
        }
    }
}

/// Gathers the bytes of a send.
pub(crate) fn pack(work: &[u8], ranges: &[Range<usize>]) -> Vec<u8> {
    let mut v = Vec::with_capacity(span(ranges));
    for r in ranges {
        v.extend_from_slice(&work[r.clone()]);
    }
    v
}

#[cfg(feature = "internals")]
pub mod model {
    //! Sequential execution and LogGP timing of the schedules of a whole team, in one
    //! thread and without any conduit (feature `internals`: the tests' reference).
    use super::*;
    use crate::loggp::LogGP;
    use std::collections::HashMap;

    /// Why a set of schedules could not run to completion.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub enum ModelError {
        /// No rank could make progress; names the first blocked rank, its round and
        /// the receive it waits for (peer, tag).
        Deadlock {
            /// Blocked rank.
            rank: u32,
            /// Its round.
            round: usize,
            /// (peer, tag) awaited.
            waiting: (u32, u32),
        },
        /// A message arrived with a length its receive does not expect.
        LengthMismatch {
            /// (sender, receiver, tag).
            msg: (u32, u32, u32),
            /// Bytes sent.
            sent: usize,
            /// Bytes expected.
            expected: usize,
        },
        /// Messages were sent and never received: (sender, receiver, tag).
        Unreceived(Vec<(u32, u32, u32)>),
        /// Two messages with one (sender, receiver, tag).
        DuplicateTag((u32, u32, u32)),
    }

    /// Runs the schedules of every rank of a team (`scheds[r]` for team rank `r`) on
    /// the given inputs and returns each rank's output. Ranks advance round by round
    /// in a fixed interleaving; a message is available as soon as its round started.
    ///
    /// # Errors
    /// [`ModelError`] if the schedules are inconsistent.
    pub fn run(
        scheds: &[Schedule],
        inputs: &[Vec<u8>],
        reduce: Option<&ReduceFn>,
    ) -> Result<Vec<Vec<u8>>, ModelError> {
        let p = scheds.len();
        let mut work: Vec<Vec<u8>> = scheds.iter().map(|s| vec![0u8; s.work_len]).collect();
        for r in 0..p {
            for (src, dst) in &scheds[r].input {
                work[r][*dst..*dst + src.len()].copy_from_slice(&inputs[r][src.clone()]);
            }
        }
        // (src, dst, tag) -> bytes
        let mut inflight: HashMap<(u32, u32, u32), Vec<u8>> = HashMap::new();
        let mut round = vec![0usize; p];
        let mut sent = vec![false; p];
        let mut applied = vec![0usize; p];
        loop {
            let mut progress = false;
            let mut all_done = true;
            for r in 0..p {
                while round[r] < scheds[r].rounds.len() {
                    all_done = false;
                    let rd = &scheds[r].rounds[round[r]];
                    if !sent[r] {
                        for s in &rd.sends {
                            let key = (r as u32, s.peer, s.tag);
                            if inflight.insert(key, pack(&work[r], &s.ranges)).is_some() {
                                return Err(ModelError::DuplicateTag(key));
                            }
                        }
                        sent[r] = true;
                        progress = true;
                    }
                    while applied[r] < rd.recvs.len() {
                        let v = &rd.recvs[applied[r]];
                        let key = (v.peer, r as u32, v.tag);
                        let Some(msg) = inflight.remove(&key) else {
                            break;
                        };
                        if msg.len() != span(&v.ranges) {
                            return Err(ModelError::LengthMismatch {
                                msg: key,
                                sent: msg.len(),
                                expected: span(&v.ranges),
                            });
                        }
                        apply_recv(&mut work[r], v, &msg, reduce);
                        applied[r] += 1;
                        progress = true;
                    }
                    if applied[r] < rd.recvs.len() {
                        break;
                    }
                    for l in &rd.post {
                        apply_local(&mut work[r], l, reduce);
                    }
                    round[r] += 1;
                    sent[r] = false;
                    applied[r] = 0;
                    progress = true;
                }
            }
            if all_done && (0..p).all(|r| round[r] == scheds[r].rounds.len()) {
                break;
            }
            if !progress {
                let r = (0..p)
                    .find(|&r| round[r] < scheds[r].rounds.len())
                    .expect("some rank is not done");
                let v = &scheds[r].rounds[round[r]].recvs[applied[r]];
                return Err(ModelError::Deadlock {
                    rank: r as u32,
                    round: round[r],
                    waiting: (v.peer, v.tag),
                });
            }
        }
        if !inflight.is_empty() {
            let mut k: Vec<_> = inflight.into_keys().collect();
            k.sort_unstable();
            return Err(ModelError::Unreceived(k));
        }
        Ok((0..p).map(|r| scheds[r].output_of(&work[r])).collect())
    }

    /// Predicted completion time (µs, the slowest rank) of a set of consistent
    /// schedules under LogGP: a send costs the sender `o` and occupies its injection
    /// for `max(g, o + (k - 1)·G)` for `k` bytes; the message arrives `L + (k - 1)·G`
    /// after injection, but a receiver's link absorbs at most one byte per `G` (so
    /// messages converging on one rank serialise); a receive costs the receiver `o`
    /// after arrival (receives are serialised). Local steps are free. Every rank
    /// enters at time 0.
    ///
    /// # Errors
    /// [`ModelError::Deadlock`] if the schedules are inconsistent.
    pub fn loggp_time(scheds: &[Schedule], m: &LogGP) -> Result<f64, ModelError> {
        let p = scheds.len();
        let mut clock = vec![0f64; p];
        let mut round = vec![0usize; p];
        // (src, dst, tag) -> arrival time at dst
        let mut arrivals: HashMap<(u32, u32, u32), f64> = HashMap::new();
        let mut sent = vec![false; p];
        let mut rx_free = vec![0f64; p];
        let mut done = scheds.iter().filter(|s| s.rounds.is_empty()).count();
        // Process ranks in a work list; a rank blocks when a receive has not been sent.
        let mut stuck_passes = 0;
        while done < p {
            let mut progress = false;
            for r in 0..p {
                while round[r] < scheds[r].rounds.len() {
                    let rd = &scheds[r].rounds[round[r]];
                    if !sent[r] {
                        let mut t = clock[r];
                        for s in &rd.sends {
                            let k = span(&s.ranges) as f64;
                            let inj = m.o + (k - 1.0).max(0.0) * m.big_g;
                            let arrive = t + m.o + m.l + (k - 1.0).max(0.0) * m.big_g;
                            arrivals.insert((r as u32, s.peer, s.tag), arrive);
                            t += inj.max(m.g);
                        }
                        clock[r] = t;
                        sent[r] = true;
                        progress = true;
                    }
                    let ready = rd
                        .recvs
                        .iter()
                        .all(|v| arrivals.contains_key(&(v.peer, r as u32, v.tag)));
                    if !ready {
                        break;
                    }
                    let mut t = clock[r];
                    for v in &rd.recvs {
                        let a = arrivals
                            .remove(&(v.peer, r as u32, v.tag))
                            .expect("checked above");
                        // The receiving link absorbs one byte per G: messages from
                        // several senders to one receiver serialise.
                        let k = span(&v.ranges) as f64;
                        let a = a.max(rx_free[r] + (k - 1.0).max(0.0) * m.big_g);
                        rx_free[r] = a;
                        t = t.max(a) + m.o;
                    }
                    clock[r] = t;
                    round[r] += 1;
                    sent[r] = false;
                    progress = true;
                    if round[r] == scheds[r].rounds.len() {
                        done += 1;
                    }
                }
            }
            if !progress {
                stuck_passes += 1;
                if stuck_passes > 1 {
                    let r = (0..p)
                        .find(|&r| round[r] < scheds[r].rounds.len())
                        .expect("some rank is not done");
                    let v = scheds[r].rounds[round[r]]
                        .recvs
                        .iter()
                        .find(|v| !arrivals.contains_key(&(v.peer, r as u32, v.tag)))
                        .expect("a missing receive");
                    return Err(ModelError::Deadlock {
                        rank: r as u32,
                        round: round[r],
                        waiting: (v.peer, v.tag),
                    });
                }
            } else {
                stuck_passes = 0;
            }
        }
        Ok(clock.into_iter().fold(0.0, f64::max))
    }
}
