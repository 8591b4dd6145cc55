//! Messages of the collectives layer: their argument layouts, what the handlers record
//! (the [`Mailbox`]), and the queue of control messages that met back-pressure.
//!
//! Every message names its collective by (team id, sequence number) and its sender by
//! team rank; data messages also carry a *tag* (agreed by both sides of a schedule)
//! and the sender's *belief*: a 32-bit digest of the operation and root it runs
//! ([`rootcheck`](crate::rootcheck)), so that a receiver that runs another one sees it.
//!
//! | handler | category | arguments | what it records |
//! |---|---|---|---|
//! | `EAGER` | Medium | team lo, team hi, seq, src, tag, offset, total, belief | a chunk of a message (reassembled in [`Mailbox::eager`]) |
//! | `LONG` | Long | same | bytes landed by a signaling put ([`Mailbox::long`]) |
//! | `READY` | Short | team lo, team hi, seq, src, tag, belief | the receiver entered and may be written |
//! | `RDV` | Short | team lo, team hi, seq, src, tag, offset lo, offset hi, len lo, len hi, belief | a rendezvous announcement |
//! | `ACK` | Short | team lo, team hi, seq | a rendezvous get completed |
//! | `PROBE` | Short | team lo, team hi, seq, src, belief, descriptor (8 words) | a stalled member (or one that received a message of another belief) asks whether the receiver runs the same collective |
//! | `ABORT` | Short | team lo, team hi, seq, src, found (field or none), member, other, value lo, value hi, other lo, other hi | the collective failed: members disagreed (and on what) |
//!
//! Handlers only record: they never send (the progress hook answers probes). A
//! receiver compares beliefs when it takes a message, not in the handler.

use crate::belief::Desc;
use crate::error::{Disagreement, FIELDS};
use gex_core::{Am, Category, EpAddr, HandlerId};
use std::collections::{HashMap, VecDeque};

/// Handler indices of the layer's block.
pub(crate) const H_EAGER: u8 = 0;
pub(crate) const H_LONG: u8 = 1;
pub(crate) const H_READY: u8 = 2;
pub(crate) const H_RDV: u8 = 3;
pub(crate) const H_ACK: u8 = 4;
pub(crate) const H_PROBE: u8 = 5;
pub(crate) const H_ABORT: u8 = 6;
/// Handlers the layer uses.
pub(crate) const HANDLERS: u8 = 7;

/// (team id, sequence number, source team rank, tag).
pub(crate) type MsgKey = (u64, u32, u32, u32);

pub(crate) fn split64(x: u64) -> (u32, u32) {
    (x as u32, (x >> 32) as u32)
}

pub(crate) fn join64(lo: u32, hi: u32) -> u64 {
    u64::from(lo) | (u64::from(hi) << 32)
}

fn key_of(a: &[u32]) -> Option<MsgKey> {
    (a.len() >= 5).then(|| (join64(a[0], a[1]), a[2], a[3], a[4]))
}

/// A message being reassembled.
#[derive(Debug)]
pub(crate) struct Partial {
    pub(crate) buf: Vec<u8>,
    pub(crate) got: usize,
    pub(crate) belief: u32,
}

/// A probe received: (team, seq) asked by `src` (team rank `rank`) with descriptor
/// `desc`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Probe {
    pub(crate) team: u64,
    pub(crate) seq: u32,
    pub(crate) src: EpAddr,
    pub(crate) rank: u32,
    pub(crate) desc: Desc,
}

impl Probe {
    /// The arguments of a probe of (team, seq) by team rank `rank` with `desc`.
    pub(crate) fn args(team: u64, seq: u32, rank: u32, desc: &Desc) -> [u32; 13] {
        let (tlo, thi) = split64(team);
        let mut a = [tlo, thi, seq, rank, desc.belief(), 0, 0, 0, 0, 0, 0, 0, 0];
        for (i, w) in desc.0.iter().enumerate() {
            (a[5 + 2 * i], a[6 + 2 * i]) = split64(*w);
        }
        a
    }
}

/// The arguments of an abort of (team, seq) sent by job rank `src`, with what was
/// found.
pub(crate) fn abort_args(team: u64, seq: u32, src: u32, found: Option<Disagreement>) -> [u32; 11] {
    let (tlo, thi) = split64(team);
    let mut a = [tlo, thi, seq, src, 0, 0, 0, 0, 0, 0, 0];
    if let Some(d) = found {
        a[4] = 0x100 | FIELDS.iter().position(|&f| f == d.field).unwrap_or(0) as u32;
        (a[5], a[6]) = (d.member, d.other);
        (a[7], a[8]) = split64(d.value);
        (a[9], a[10]) = split64(d.other_value);
    }
    a
}

/// What an abort's arguments say was found.
fn found_of(a: &[u32]) -> Option<Disagreement> {
    (a.len() >= 11 && a[4] & 0x100 != 0).then(|| Disagreement {
        field: FIELDS[(a[4] & 0xff) as usize % FIELDS.len()],
        member: a[5],
        value: join64(a[7], a[8]),
        other: a[6],
        other_value: join64(a[9], a[10]),
    })
}

/// What the handlers have received.
#[derive(Debug, Default)]
pub(crate) struct Mailbox {
    pub(crate) eager: HashMap<MsgKey, Partial>,
    /// Bytes landed by signaling puts, and the sender's belief.
    pub(crate) long: HashMap<MsgKey, (usize, u32)>,
    /// (team, seq, receiver, tag): the receiver entered and may be written.
    pub(crate) ready: HashMap<MsgKey, u32>,
    /// Rendezvous announcements: (offset, len) in the sender's segment, belief.
    pub(crate) rdv: HashMap<MsgKey, (usize, usize, u32)>,
    /// Acknowledgements of rendezvous gets per (team, seq).
    pub(crate) acks: HashMap<(u64, u32), u32>,
    /// Probes not answered yet.
    pub(crate) probes: Vec<Probe>,
    /// Collectives other members reported failed (members disagreed), as they
    /// arrive: (team, seq, what was found).
    pub(crate) aborts: Vec<(u64, u32, Option<Disagreement>)>,
    /// Set by an abort's arrival and by a team's failure
    /// ([`Coll::fail_team`](crate::layer::Coll)), never cleared: while it is clear
    /// (a healthy job) the fast paths look at this one word for both.
    pub(crate) alarm: bool,
    /// Malformed messages dropped.
    pub(crate) dropped: u64,
}

impl Mailbox {
    /// Runs handler `h` of the layer on `am`.
    pub(crate) fn deliver(&mut self, h: u8, am: &Am<'_>) {
        let a = am.args();
        match h {
            H_EAGER => self.on_eager(am),
            H_LONG => match key_of(a).filter(|_| a.len() >= 8) {
                Some(k) => {
                    let e = self.long.entry(k).or_insert((0, a[7]));
                    e.0 += am.len();
                }
                None => self.dropped += 1,
            },
            H_READY => match key_of(a).filter(|_| a.len() >= 6) {
                Some(k) => {
                    self.ready.insert(k, a[5]);
                }
                None => self.dropped += 1,
            },
            H_RDV => match key_of(a).filter(|_| a.len() >= 10) {
                Some(k) => {
                    let off = join64(a[5], a[6]) as usize;
                    let len = join64(a[7], a[8]) as usize;
                    self.rdv.insert(k, (off, len, a[9]));
                }
                None => self.dropped += 1,
            },
            H_ACK if a.len() >= 3 => {
                *self.acks.entry((join64(a[0], a[1]), a[2])).or_insert(0) += 1;
            }
            H_PROBE if a.len() >= 13 => self.probes.push(Probe {
                team: join64(a[0], a[1]),
                seq: a[2],
                src: am.src(),
                rank: a[3],
                desc: Desc(std::array::from_fn(|i| join64(a[5 + 2 * i], a[6 + 2 * i]))),
            }),
            H_ABORT if a.len() >= 4 => {
                self.alarm = true;
                self.aborts.push((join64(a[0], a[1]), a[2], found_of(a)));
            }
            _ => self.dropped += 1,
        }
    }

    fn on_eager(&mut self, am: &Am<'_>) {
        let a = am.args();
        let Some(k) = key_of(a).filter(|_| a.len() >= 8) else {
            self.dropped += 1;
            return;
        };
        let (off, total, belief) = (a[5] as usize, a[6] as usize, a[7]);
        let p = am.payload();
        let e = self.eager.entry(k).or_insert_with(|| Partial {
            buf: vec![0; total],
            got: 0,
            belief,
        });
        if e.buf.len() != total || off.checked_add(p.len()).is_none_or(|x| x > total) {
            self.dropped += 1;
            return;
        }
        e.buf[off..off + p.len()].copy_from_slice(p);
        e.got += p.len();
    }

    /// Forgets everything received for collective (team, seq) (it failed).
    pub(crate) fn forget(&mut self, team: u64, seq: u32) {
        self.eager.retain(|k, _| (k.0, k.1) != (team, seq));
        self.long.retain(|k, _| (k.0, k.1) != (team, seq));
        self.ready.retain(|k, _| (k.0, k.1) != (team, seq));
        self.rdv.retain(|k, _| (k.0, k.1) != (team, seq));
        self.acks.remove(&(team, seq));
    }
}

/// A control message that met back-pressure, sent again by the progress hook.
#[derive(Debug)]
pub(crate) struct Ctl {
    pub(crate) dst: EpAddr,
    pub(crate) handler: HandlerId,
    pub(crate) args: Vec<u32>,
}

/// Control messages waiting for send resources, in order.
pub(crate) type Outbox = VecDeque<Ctl>;

/// The category of every control message.
pub(crate) const CTL: Category = Category::Short;

/// The layer's messaging state (a component of [`Coll`](crate::Coll)): its handler
/// ids, the mailbox its handlers record into and the control messages waiting for
/// send resources.
pub(crate) struct Wire {
    hids: [HandlerId; HANDLERS as usize],
    /// What the handlers recorded, until the engine takes it.
    pub(crate) mb: Mailbox,
    /// Control messages that met back-pressure, in order.
    pub(crate) outbox: Outbox,
}

impl Wire {
    /// The messaging state of a layer whose handler block is `hids`.
    pub(crate) fn new(hids: [HandlerId; HANDLERS as usize]) -> Wire {
        Wire {
            hids,
            mb: Mailbox::default(),
            outbox: Outbox::new(),
        }
    }

    /// The id of handler `h` of the layer's block.
    #[inline]
    pub(crate) fn hid(&self, h: u8) -> HandlerId {
        self.hids[h as usize]
    }
}
