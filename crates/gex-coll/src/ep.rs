//! The collective endpoint: the engine that executes schedules over a conduit, teams
//! and the public operations.

use crate::algo::{Algorithm, PlanCtx, Query};
use crate::error::CollError;
use crate::hier::{Hier, HierOp, Layout};
use crate::op::{AddrMode, Elem, OpKind, Opts, ReduceOp, SyncMode, Transport};
use crate::root::Root;
use crate::sched::{self, Action, ReduceFn, Schedule, span};
use crate::shm::{Area, Expected, Io, NCH, NSLOT, OwnedShm, Publish, ShmOp, ShmTeam};
use crate::team::{Scratch, SegAlloc, Team, mix_all};
use crate::tune::{Choice, LogGP, TuneMode, Tuner};
use bytemuck::Pod;
use gex_core::spi::Conduit;
use gex_core::spi::ConduitEp;
use gex_core::{
    Am, Capabilities, Category, Config, Endpoint, EpAddr, Flags, HandlerIndex, Token, WaitPolicy,
};
use gex_rma::{GetEvent, GlobalPtr, RmaEp, RmaError};
use gex_sync::atomic::AtomicU32;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::marker::PhantomData;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};

/// First handler index gex-coll registers (it owns `48..=127`).
pub const FIRST_COLL_HANDLER: HandlerIndex = 48;
/// Last handler index reserved for gex-coll.
pub const LAST_COLL_HANDLER: HandlerIndex = 127;

const H_EAGER: HandlerIndex = 48;
const H_LONG: HandlerIndex = 49;
const H_READY: HandlerIndex = 50;
const H_RDV: HandlerIndex = 51;
const H_ACK: HandlerIndex = 52;

/// Tags of the entry barrier (in-all) and of the exit barrier (out-all).
const TAG_PRE: u32 = 0x4000_0000;
const TAG_POST: u32 = 0x6000_0000;

/// Polls before a waiter under the spin policy yields now and then.
const SPIN_YIELD_AFTER: u32 = 1 << 14;

/// The gex-coll parts of the auxiliary areas of `members`, if the conduit maps all of
/// them (never under `gex_force_am_rma`, which keeps the message paths tested).
fn shm_areas<C: Conduit>(ep: &mut Endpoint<C>, members: &[EpAddr]) -> Option<Vec<Area>> {
    if cfg!(gex_force_am_rma)
        || !ep
            .conduit_ep()
            .capabilities()
            .contains(Capabilities::SHARED_MEMORY)
    {
        return None;
    }
    members
        .iter()
        .map(|&a| ep.conduit_ep().aux(a).map(Area::new))
        .collect()
}

/// Every member's segment as mapped here (base address, length), or empty if one
/// is not mapped (see [`ShmTeam::segs`]).
fn shm_segments<C: Conduit>(ep: &mut Endpoint<C>, members: &[EpAddr]) -> Vec<(usize, usize)> {
    let me = ep.addr();
    let cep = ep.conduit_ep();
    members
        .iter()
        .map(|&a| {
            if a == me {
                let (p, len) = cep.local_segment();
                Some((p.as_ptr() as usize, len))
            } else {
                cep.peer_segment(a)
                    .map(|(p, len)| (p.as_ptr() as usize, len))
            }
        })
        .collect::<Option<Vec<_>>>()
        .unwrap_or_default()
}

/// (team id, sequence number, source team rank, tag).
type MsgKey = (u64, u32, u32, u32);

#[derive(Debug)]
struct Partial {
    buf: Vec<u8>,
    got: usize,
}

/// What the handlers share with the engine.
#[derive(Debug, Default)]
struct Mailbox {
    eager: HashMap<MsgKey, Partial>,
    /// Bytes landed by signaling puts.
    long: HashMap<MsgKey, usize>,
    /// (team, seq, receiver, tag): the receiver entered and may be written.
    ready: HashSet<MsgKey>,
    /// Rendezvous announcements: (offset, len) in the sender's segment.
    rdv: HashMap<MsgKey, (usize, usize)>,
    /// Acknowledgements of rendezvous gets per (team, seq).
    acks: HashMap<(u64, u32), u32>,
    /// Malformed messages dropped.
    dropped: u64,
}

type Shared = Arc<Mutex<Mailbox>>;

fn lock(m: &Shared) -> MutexGuard<'_, Mailbox> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn split64(x: u64) -> (u32, u32) {
    (x as u32, (x >> 32) as u32)
}

fn join64(lo: u32, hi: u32) -> u64 {
    u64::from(lo) | (u64::from(hi) << 32)
}

fn key_of(a: &[u32]) -> Option<MsgKey> {
    (a.len() >= 5).then(|| (join64(a[0], a[1]), a[2], a[3], a[4]))
}

/// Output types of collective handles (sealed).
pub trait Output: sealed::Sealed + Sized {
    #[doc(hidden)]
    fn from_bytes(b: Vec<u8>) -> Self;
}
mod sealed {
    pub trait Sealed {}
}
impl sealed::Sealed for () {}
impl Output for () {
    fn from_bytes(_: Vec<u8>) -> Self {}
}
impl<T: Pod> sealed::Sealed for Vec<T> {}
impl<T: Pod> Output for Vec<T> {
    fn from_bytes(b: Vec<u8>) -> Self {
        // Byte-aligned element types take the buffer as it is (no copy).
        let b = match bytemuck::allocation::try_cast_vec::<u8, T>(b) {
            Ok(v) => return v,
            Err((_, b)) => b,
        };
        let mut v: Vec<T> = vec![bytemuck::Zeroable::zeroed(); b.len() / size_of::<T>().max(1)];
        let n = v.len() * size_of::<T>();
        bytemuck::cast_slice_mut::<T, u8>(&mut v).copy_from_slice(&b[..n]);
        v
    }
}

/// A collective in flight: test it with [`CollEp::test`], complete it with
/// [`CollEp::wait`]. Dropping a handle does not cancel the collective: it keeps
/// progressing inside later calls (other members may depend on it), but its state
/// is released only by `wait`, so always wait for every handle.
#[must_use = "a collective completes only through CollEp::wait or CollEp::test"]
#[derive(Debug)]
pub struct Handle<T> {
    id: u64,
    _t: PhantomData<fn() -> T>,
}

/// Segment offsets of a single-address-mode collective, per team rank (bytes, in the
/// segment of the member's team endpoint).
///
/// `src: None` is the in-place variant: each member's input is read from its
/// destination (at block `rank` for gather and gather_all, at the start otherwise).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Single {
    /// Source offset of every member (`None`: in place).
    pub src: Option<Vec<usize>>,
    /// Destination offset of every member.
    pub dst: Vec<usize>,
}

impl Single {
    /// The same source and destination offsets on every member of a team of `size`.
    pub fn uniform(size: u32, src: usize, dst: usize) -> Single {
        Single {
            src: Some(vec![src; size as usize]),
            dst: vec![dst; size as usize],
        }
    }

    /// In place, the same destination offset on every member.
    pub fn in_place(size: u32, dst: usize) -> Single {
        Single {
            src: None,
            dst: vec![dst; size as usize],
        }
    }

    /// These offsets with the root's buffer at `offset` (a root given by data): the
    /// source of a broadcast or scatter (an in-place list gets explicit sources, the
    /// others' unchanged), the destination of a gather or reduce. Lists of the wrong
    /// length are left for `start` to refuse.
    fn with_root_buffer(&self, op: OpKind, root: u32, offset: usize) -> Single {
        let mut s = self.clone();
        let list = match op {
            OpKind::Broadcast | OpKind::Scatter => s.src.get_or_insert_with(|| self.dst.clone()),
            OpKind::Gather | OpKind::Reduce => &mut s.dst,
            _ => return s,
        };
        if let Some(x) = list.get_mut(root as usize) {
            *x = offset;
        }
        s
    }
}

#[derive(Debug)]
enum Out {
    Local,
    /// Write the output at this offset of our segment (unless mirrored).
    Seg(usize),
}

struct OpState {
    team: Team,
    seq: u32,
    sched: Schedule,
    work: Vec<u8>,
    reduce: Option<ReduceFn>,
    transport: Transport,
    /// Signaling put / rendezvous: the segment offset every member's work buffer
    /// mirrors.
    mirror: Option<Vec<usize>>,
    need_ready: bool,
    /// Mirrors the team's scratch space (local mode with put/rendezvous): starts
    /// only once earlier such collectives of the team finished here.
    uses_scratch: bool,
    started: bool,
    round: usize,
    /// Sends of the current round not yet issued.
    pending_sends: Vec<usize>,
    round_open: bool,
    applied: usize,
    gets: HashMap<usize, GetEvent<u8>>,
    fetched: HashMap<usize, Vec<u8>>,
    acks_expected: u32,
    out: Out,
    out_no: bool,
    finished_rounds: bool,
    result: Option<Result<Vec<u8>, CollError>>,
    taken: bool,
    /// A shared-memory collective (the `shm` algorithm) instead of the schedule.
    shm: Option<OwnedShm>,
    /// A hierarchical collective (the `hier` algorithm) instead of the schedule.
    hier: Option<HierOp>,
}

impl std::fmt::Debug for OpState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpState")
            .field("team", &self.team)
            .field("seq", &self.seq)
            .field("round", &self.round)
            .field("rounds", &self.sched.rounds.len())
            .finish()
    }
}

impl OpState {
    fn user_done(&self) -> bool {
        self.result.is_some()
    }
}

/// A collective endpoint: wraps an [`RmaEp`] (and so an [`Endpoint`]), registers
/// gex-coll's handlers on it, owns the world team, the autotuner and every collective
/// in flight.
///
/// Like the endpoint it is `Send` but not `Sync`; several thread-ranks in one process
/// each own theirs (there is no process-global state).
pub struct CollEp<C: Conduit> {
    rma: RmaEp<C>,
    mb: Shared,
    ops: BTreeMap<u64, OpState>,
    next_op: u64,
    tuner: Tuner,
    world: Team,
    alloc: SegAlloc,
    seg_len: usize,
    /// Shared-memory channels in use on this endpoint (bit 0: the world team).
    shm_used: Arc<AtomicU32>,
    /// Acknowledgements expected per channel and slot of this endpoint's area.
    shm_expected: Expected,
    /// Generation of this `CollEp` on its endpoint (0: no shared-memory collectives).
    shm_gen: u64,
    /// An online trial is running (its calls are not tuned online themselves).
    in_trial: bool,
    /// A hierarchical stage is starting its sub-collective: an override that cannot
    /// run it gives way to the tuner ([`Tuner::select_within`]).
    in_stage: bool,
    /// Cells timed online so far.
    online_trials: u64,
    /// A copy of the input of an in-place blocking call (reused).
    tmp: Vec<u8>,
    /// Blocking calls run directly through shared memory.
    direct_calls: u64,
    /// Of those, the ones whose input this member published by reference.
    by_reference_calls: u64,
    /// Of those, the ones whose input this member published for CMA reads.
    cma_calls: u64,
}

/// Timed calls per candidate in an online trial (after one warm-up call).
const TRIAL_CALLS: u32 = 8;
/// Candidates an online trial times at most.
const TRIAL_CANDIDATES: usize = 4;

impl<C: Conduit> std::fmt::Debug for CollEp<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CollEp")
            .field("addr", &self.rma.addr())
            .field("in_flight", &self.ops.len())
            .field("tuner", &self.tuner)
            .finish()
    }
}

impl<C: Conduit> CollEp<C> {
    /// Wraps `rma`, registering handlers `48..=52`, with the default cost model and
    /// no environment overrides. Every rank must wrap the same endpoint index.
    ///
    /// # Errors
    /// [`CollError::Register`] if an index is taken.
    pub fn new(rma: RmaEp<C>) -> Result<CollEp<C>, CollError> {
        let mut t = Tuner::new(crate::algo::catalog(), LogGP::default());
        t.set_host_cpus(host_cpus());
        Self::build(rma, t)
    }

    /// As [`new`](Self::new), then applies the client's configuration snapshot:
    /// `GEX_COLL_<OP>` algorithm overrides, `GEX_COLL_LOGGP`, `GEX_COLL_PROFILE` (a
    /// [`Profile`](crate::Profile) written by `gex-tune`) and `GEX_COLL_TUNE`.
    ///
    /// # Errors
    /// As [`new`](Self::new), plus [`CollError::UnknownAlgorithm`],
    /// [`CollError::Config`] and [`CollError::Profile`] for bad variables or files.
    pub fn with_config(rma: RmaEp<C>, cfg: &Config) -> Result<CollEp<C>, CollError> {
        let mut t = Tuner::new(crate::algo::catalog(), LogGP::default());
        t.configure(|k| cfg.get(k).map(str::to_string))?;
        t.set_host_cpus(host_cpus());
        Self::build(rma, t)
    }

    fn build(mut rma: RmaEp<C>, tuner: Tuner) -> Result<CollEp<C>, CollError> {
        let mb: Shared = Arc::default();
        let ep = rma.endpoint();
        let m = mb.clone();
        ep.register_reserved(H_EAGER, move |_t: &mut Token<'_>, am: Am<'_>| {
            let a = am.args();
            let mut mb = lock(&m);
            let Some(k) = key_of(a).filter(|_| a.len() >= 7) else {
                mb.dropped += 1;
                return;
            };
            let (off, total) = (a[5] as usize, a[6] as usize);
            let p = am.payload();
            let e = mb.eager.entry(k).or_insert_with(|| Partial {
                buf: vec![0; total],
                got: 0,
            });
            if e.buf.len() != total || off.checked_add(p.len()).is_none_or(|x| x > total) {
                mb.dropped += 1;
                return;
            }
            e.buf[off..off + p.len()].copy_from_slice(p);
            e.got += p.len();
        })?;
        let m = mb.clone();
        ep.register_reserved(H_LONG, move |_t: &mut Token<'_>, am: Am<'_>| {
            let mut mb = lock(&m);
            match key_of(am.args()) {
                Some(k) => *mb.long.entry(k).or_insert(0) += am.payload().len(),
                None => mb.dropped += 1,
            }
        })?;
        let m = mb.clone();
        ep.register_reserved(H_READY, move |_t: &mut Token<'_>, am: Am<'_>| {
            let mut mb = lock(&m);
            match key_of(am.args()) {
                Some(k) => {
                    mb.ready.insert(k);
                }
                None => mb.dropped += 1,
            }
        })?;
        let m = mb.clone();
        ep.register_reserved(H_RDV, move |_t: &mut Token<'_>, am: Am<'_>| {
            let a = am.args();
            let mut mb = lock(&m);
            match key_of(a).filter(|_| a.len() >= 9) {
                Some(k) => {
                    mb.rdv.insert(
                        k,
                        (join64(a[5], a[6]) as usize, join64(a[7], a[8]) as usize),
                    );
                }
                None => mb.dropped += 1,
            }
        })?;
        let m = mb.clone();
        ep.register_reserved(H_ACK, move |_t: &mut Token<'_>, am: Am<'_>| {
            let a = am.args();
            let mut mb = lock(&m);
            if a.len() >= 3 {
                *mb.acks.entry((join64(a[0], a[1]), a[2])).or_insert(0) += 1;
            } else {
                mb.dropped += 1;
            }
        })?;
        let me = ep.addr();
        let size = ep.size();
        let members: Vec<EpAddr> = (0..size).map(|r| EpAddr::new(r, me.ep)).collect();
        let seg_len = ep.segment().len();
        let shm_used = Arc::new(AtomicU32::new(1));
        let mut shm_expected: Expected = [[0; NSLOT]; NCH];
        let mut shm_gen = 0;
        if let Some(own) = shm_areas(ep, &[me]).map(|v| v[0]) {
            own.set_cma(crate::shm::cma_capable());
            shm_gen = own.next_generation();
            for (c, e) in shm_expected.iter_mut().enumerate() {
                for (s, x) in e.iter_mut().enumerate() {
                    *x = own.acks(c, s);
                }
            }
        }
        let world_shm = (shm_gen > 0 && size > 1)
            .then(|| shm_areas(ep, &members))
            .flatten()
            .map(|areas| ShmTeam {
                ch: 0,
                areas,
                segs: shm_segments(ep, &members),
                generation: shm_gen,
                used: shm_used.clone(),
            });
        let world = Team::new(0, members, me.rank, Vec::new(), None, world_shm);
        let mut c = CollEp {
            rma,
            mb,
            ops: BTreeMap::new(),
            next_op: 1,
            tuner,
            world,
            alloc: SegAlloc::default(),
            seg_len,
            shm_used,
            shm_expected,
            shm_gen,
            in_trial: false,
            in_stage: false,
            online_trials: 0,
            tmp: Vec::new(),
            direct_calls: 0,
            by_reference_calls: 0,
            cma_calls: 0,
        };
        c.setup_world_hier();
        Ok(c)
    }

    /// True if `team` runs the `shm` algorithm: every member maps every other
    /// member's auxiliary area and the team holds one of the endpoint's
    /// shared-memory channels (the value of [`Query::shm`] for the team).
    pub fn shared_memory(&self, team: &Team) -> bool {
        team.inner.shm.is_some()
    }

    /// True if `team` can run the `hier` algorithm: it spans several hosts, one of
    /// them with two or more members, and has host and leader sub-teams (the value of
    /// [`Query::hier`] for the team). Teams get them at creation; the world team when
    /// the `CollEp` is built, without communication, from the job layout.
    pub fn hierarchical(&self, team: &Team) -> bool {
        team.inner.hier.get().is_some()
    }

    /// The team of this endpoint index on every rank, in rank order (team rank = job
    /// rank).
    pub fn world(&self) -> &Team {
        &self.world
    }

    /// The wrapped RMA endpoint.
    pub fn rma(&mut self) -> &mut RmaEp<C> {
        &mut self.rma
    }

    /// The wrapped endpoint.
    pub fn endpoint(&mut self) -> &mut Endpoint<C> {
        self.rma.endpoint()
    }

    /// The autotuner (cost model, algorithms, cached choices).
    pub fn tuner(&mut self) -> &mut Tuner {
        &mut self.tuner
    }

    /// Names of every registered algorithm that implements `op`.
    pub fn algorithms(&self, op: OpKind) -> Vec<String> {
        self.tuner
            .algorithms()
            .iter()
            .filter(|a| a.ops().contains(&op))
            .map(|a| a.name().to_string())
            .collect()
    }

    /// Adds an algorithm (for example a NIC collective) for the tuner to consider and
    /// for [`Opts::algorithm`] to name. Every rank must register the same algorithms.
    ///
    /// ```
    /// use gex_coll::{sched::Schedule, Algorithm, Builtin, CollEp, Kind, LogGP, OpKind, PlanCtx, Query, Transport};
    /// use gex_core::ClientBuilder;
    /// use gex_rma::RmaEp;
    /// use gex_testkit::sim::{run_sim, SimConfig};
    /// use std::sync::Arc;
    ///
    /// /// A "hardware" broadcast: plans like a binomial tree here, claims to be free.
    /// #[derive(Debug)]
    /// struct Nic(Builtin);
    /// impl Algorithm for Nic {
    ///     fn name(&self) -> &str { "nic" }
    ///     fn ops(&self) -> &[OpKind] { &[OpKind::Broadcast] }
    ///     fn supports(&self, q: &Query) -> bool { q.op == OpKind::Broadcast }
    ///     fn cost(&self, _: &Query, _: &LogGP) -> f64 { 0.0 }
    ///     fn plan(&self, c: &PlanCtx) -> Schedule { self.0.plan(c) }
    /// }
    ///
    /// let out = run_sim(3, SimConfig::default(), || ClientBuilder::new().segment_size(1 << 16), |client| {
    ///     let mut coll = CollEp::new(RmaEp::new(client.endpoint(0).unwrap()).unwrap()).unwrap();
    ///     coll.register_algorithm(Arc::new(Nic(Builtin::new(Kind::Knomial, 2, 0, Transport::Eager))));
    ///     let w = coll.world().clone();
    ///     let q = Query { op: OpKind::Broadcast, size: 3, bytes: 8, addr: gex_coll::AddrMode::Local,
    ///                     sync: Default::default(), commutative: true, scratch: false, shm: false, hier: false, hosts: 0, host_ranges: false };
    ///     assert_eq!(coll.explain(&q).unwrap().algorithm, "nic");
    ///     let mut v = [w.rank(); 2];
    ///     coll.broadcast(&w, 1, &mut v).unwrap();
    ///     coll.barrier(&w).unwrap();
    ///     v
    /// });
    /// assert_eq!(out, vec![[1, 1]; 3]);
    /// ```
    pub fn register_algorithm(&mut self, a: Arc<dyn Algorithm>) {
        self.tuner.register(a);
    }

    /// Explains which algorithm a call would use and why.
    ///
    /// # Errors
    /// As [`Tuner::select`].
    pub fn explain(&mut self, q: &Query) -> Result<Choice, CollError> {
        self.tuner.explain(q)
    }

    /// Lets [`Scratch::Alloc`] allocate from `region` (bytes of this endpoint's
    /// segment that the client leaves to gex-coll).
    ///
    /// # Errors
    /// [`CollError::Scratch`] if the region is outside the segment.
    pub fn set_scratch_region(&mut self, region: Range<usize>) -> Result<(), CollError> {
        if region.end > self.seg_len || region.start > region.end {
            return Err(CollError::Scratch(format!(
                "region {region:?} is outside the {}-byte segment",
                self.seg_len
            )));
        }
        self.alloc = SegAlloc::new(region);
        Ok(())
    }

    /// Messages that gex-coll's handlers dropped as malformed (0 in a healthy job).
    pub fn dropped_messages(&self) -> u64 {
        lock(&self.mb).dropped
    }

    /// Blocking calls this endpoint ran directly through shared memory, over the
    /// caller's buffers (the others went through the nonblocking path: another
    /// collective was in flight here, or the algorithm was not `shm`).
    pub fn direct_calls(&self) -> u64 {
        self.direct_calls
    }

    /// Direct blocking calls ([`direct_calls`](Self::direct_calls)) in which this
    /// member published its input by reference: the input lay in its segment and the
    /// blocks were at least 16 KiB, so the readers copied straight from it (one copy
    /// instead of two) and the call returned once they had (docs/coll.md 4.1).
    pub fn by_reference_calls(&self) -> u64 {
        self.by_reference_calls
    }

    /// Direct blocking calls in which this member's private (non-segment) input of
    /// blocks of at least 16 KiB was read by the others straight from its process
    /// with `process_vm_readv` (broadcast, scatter, gather, gather_all and exchange,
    /// when every member can: [`cma_capable`](crate::cma_capable); docs/coll.md 4.1).
    pub fn cma_calls(&self) -> u64 {
        self.cma_calls
    }

    /// Collectives in flight on this endpoint (including completed-but-not-waited and
    /// out-no collectives still finishing in the background).
    pub fn in_flight(&self) -> usize {
        self.ops.len()
    }

    // ---------------------------------------------------------------- teams

    /// Splits `parent` by `color`: members with the same `Some(color)` form a new team,
    /// ordered by (`key`, parent rank); `None` joins no team (returns `Ok(None)`).
    ///
    /// # Collective
    /// Over every member of `parent`, in the same order as its other collectives.
    ///
    /// # Errors
    /// [`CollError::NotMember`], [`CollError::Scratch`], or a communication error.
    pub fn split(
        &mut self,
        parent: &Team,
        color: Option<u32>,
        key: u32,
        scratch: Scratch,
    ) -> Result<Option<Team>, CollError> {
        let mine = [u32::from(color.is_some()), color.unwrap_or(0), key];
        let all: Vec<u32> = self.gather_all_v(parent, mine.to_vec())?;
        let idx = parent
            .inner
            .splits
            .fetch_add(1, gex_sync::atomic::Ordering::Relaxed);
        let Some(c) = color else {
            return Ok(None);
        };
        let mut m: Vec<(u32, u32)> = (0..parent.size())
            .filter(|&i| {
                let e = &all[i as usize * 3..i as usize * 3 + 3];
                e[0] == 1 && e[1] == c
            })
            .map(|i| (all[i as usize * 3 + 2], i))
            .collect();
        m.sort_unstable();
        let members: Vec<u32> = m.iter().map(|x| x.1).collect();
        let id = mix_all(&[parent.id(), u64::from(idx), u64::from(c), 0x5311]);
        self.form(parent, &members, id, scratch).map(Some)
    }

    /// Creates a team of the parent-team ranks `members` (in that order).
    ///
    /// # Collective
    /// Over the listed members only; they must create teams from one parent with the
    /// same list in the same order.
    ///
    /// # Errors
    /// [`CollError::BadMembers`], [`CollError::BadRank`], [`CollError::NotMember`] (the
    /// caller is not listed), [`CollError::Scratch`].
    pub fn create_team(
        &mut self,
        parent: &Team,
        members: &[u32],
        scratch: Scratch,
    ) -> Result<Team, CollError> {
        if members.is_empty() {
            return Err(CollError::BadMembers("empty".into()));
        }
        let mut seen = HashSet::new();
        for &m in members {
            if m >= parent.size() {
                return Err(CollError::BadRank {
                    rank: m,
                    size: parent.size(),
                });
            }
            if !seen.insert(m) {
                return Err(CollError::BadMembers(format!("rank {m} listed twice")));
            }
        }
        if !members.contains(&parent.rank()) {
            return Err(CollError::NotMember { team: 0 });
        }
        let lh = mix_all(&members.iter().map(|&m| u64::from(m)).collect::<Vec<_>>());
        let n = {
            let mut c = parent
                .inner
                .creates
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let e = c.entry(lh).or_insert(0);
            *e += 1;
            *e
        };
        let id = mix_all(&[parent.id(), lh, u64::from(n), 0xc4ea]);
        self.form(parent, members, id, scratch)
    }

    fn form(
        &mut self,
        parent: &Team,
        members: &[u32],
        id: u64,
        scratch: Scratch,
    ) -> Result<Team, CollError> {
        let addrs: Vec<EpAddr> = members
            .iter()
            .map(|&m| parent.inner.members[m as usize])
            .collect();
        let me = members
            .iter()
            .position(|&m| m == parent.rank())
            .ok_or(CollError::NotMember { team: id })? as u32;
        let (local, allocated) = match scratch {
            Scratch::None => (None, None),
            Scratch::Given(off, len) => {
                if off.checked_add(len).is_none_or(|e| e > self.seg_len) {
                    return Err(CollError::Scratch(format!(
                        "[{off}, +{len}) is outside the segment"
                    )));
                }
                (Some((off, len)), None)
            }
            Scratch::Alloc(len) => {
                let r = self.alloc.alloc(len).ok_or_else(|| {
                    CollError::Scratch(format!("cannot allocate {len} bytes (set_scratch_region)"))
                })?;
                (Some((r.start, len)), Some(r))
            }
        };
        let provisional = Team::new(id, addrs.clone(), me, Vec::new(), None, None);
        let table = match local {
            None => Vec::new(),
            Some((off, len)) => {
                let v: Vec<u64> = self.gather_all_v(&provisional, vec![off as u64, len as u64])?;
                v.chunks_exact(2)
                    .map(|c| (c[0] as usize, c[1] as usize))
                    .collect()
            }
        };
        let shm = self.agree_channel(&provisional)?;
        let t = Team::new(id, addrs, me, table, allocated, shm);
        self.setup_hier(&t)?;
        // Continue the provisional team's sequence numbers.
        t.inner.seq.store(
            provisional
                .inner
                .seq
                .load(gex_sync::atomic::Ordering::Relaxed),
            gex_sync::atomic::Ordering::Relaxed,
        );
        Ok(t)
    }

    /// Agrees with the members of a new team on a shared-memory channel free on all
    /// of them (collective over the provisional team).
    fn agree_channel(&mut self, team: &Team) -> Result<Option<ShmTeam>, CollError> {
        if team.size() < 2 || self.shm_gen == 0 {
            return Ok(None);
        }
        let areas = shm_areas(self.rma.endpoint(), &team.inner.members);
        let free = !self.shm_used.load(gex_sync::atomic::Ordering::Relaxed) & ((1u32 << NCH) - 1);
        let mine = if areas.is_some() { free } else { 0 };
        let all: Vec<u32> = self.gather_all_v(team, vec![mine])?;
        let common = all.iter().fold(u32::MAX, |a, &b| a & b);
        let (Some(areas), true) = (areas, common != 0) else {
            return Ok(None);
        };
        let ch = common.trailing_zeros() as usize;
        self.shm_used
            .fetch_or(1 << ch, gex_sync::atomic::Ordering::Relaxed);
        Ok(Some(ShmTeam {
            ch,
            areas,
            segs: shm_segments(self.rma.endpoint(), &team.inner.members),
            generation: self.shm_gen,
            used: self.shm_used.clone(),
        }))
    }

    /// Gives a team that spans hosts its host and leader sub-teams (collective over
    /// the team: every member forms its host team, leaders the leaders team).
    fn setup_hier(&mut self, t: &Team) -> Result<(), CollError> {
        if t.size() < 3 || self.shm_gen == 0 {
            return Ok(());
        }
        let Some(layout) = self.host_layout(t.members()) else {
            return Ok(());
        };
        let me = t.rank();
        let my_host = layout.place[me as usize].0;
        let members = layout.hosts[my_host as usize].clone();
        let hid = mix_all(&[t.id(), 0x4057, u64::from(my_host)]);
        let host = self.form(t, &members, hid, Scratch::None)?;
        let leaders = if members[0] == me {
            let lid = mix_all(&[t.id(), 0x1ead]);
            Some(self.form(t, &layout.leaders(), lid, Scratch::None)?)
        } else {
            None
        };
        let ranges = layout.ranges();
        let _ = t.inner.hier.set(Hier {
            host,
            leaders,
            layout,
            ranges,
        });
        Ok(())
    }

    /// The hosts of `members` from the job layout (a rank of unknown host counts as a
    /// host of its own), if they span hosts and share one.
    fn host_layout(&mut self, members: &[EpAddr]) -> Option<Layout> {
        let ep = self.rma.endpoint();
        let hosts: Vec<u32> = members
            .iter()
            .map(|a| ep.host_of(a.rank).unwrap_or(u32::MAX - a.rank))
            .collect();
        Layout::new(&hosts)
    }

    /// Gives the world team host and leader sub-teams when the job spans hosts and
    /// one of them holds two or more ranks, without communication: the layout is the
    /// same on every rank, the ids follow [`setup_hier`](Self::setup_hier)'s rule, the
    /// host team takes channel 0 (the world's, unused by a world that spans hosts)
    /// when its members map each other's areas, and the leaders (one per host) never
    /// share memory.
    fn setup_world_hier(&mut self) {
        let w = self.world.clone();
        if w.size() < 3 || self.shm_gen == 0 || w.inner.shm.is_some() {
            return;
        }
        let Some(layout) = self.host_layout(w.members()) else {
            return;
        };
        let me = w.rank();
        let my_host = layout.place[me as usize].0;
        let ranks = &layout.hosts[my_host as usize];
        let addrs: Vec<EpAddr> = ranks.iter().map(|&r| w.inner.members[r as usize]).collect();
        let segs = shm_segments(self.rma.endpoint(), &addrs);
        let shm = (addrs.len() > 1)
            .then(|| shm_areas(self.rma.endpoint(), &addrs))
            .flatten()
            .map(|areas| ShmTeam {
                ch: 0,
                areas,
                segs,
                generation: self.shm_gen,
                used: self.shm_used.clone(),
            });
        let host_rank = layout.place[me as usize].1;
        let hid = mix_all(&[w.id(), 0x4057, u64::from(my_host)]);
        let host = Team::new(hid, addrs, host_rank, Vec::new(), None, shm);
        let leaders = (host_rank == 0).then(|| {
            let addrs: Vec<EpAddr> = layout
                .leaders()
                .iter()
                .map(|&r| w.inner.members[r as usize])
                .collect();
            Team::new(
                mix_all(&[w.id(), 0x1ead]),
                addrs,
                my_host,
                Vec::new(),
                None,
                None,
            )
        });
        let ranges = layout.ranges();
        let _ = w.inner.hier.set(Hier {
            host,
            leaders,
            layout,
            ranges,
        });
    }

    /// Destroys a team: frees scratch this endpoint allocated for it. Not collective.
    ///
    /// # Errors
    /// [`CollError::TeamBusy`] if collectives of the team are in flight here;
    /// [`CollError::BadMembers`] for the world team.
    pub fn destroy_team(&mut self, team: Team) -> Result<(), CollError> {
        if team.id() == 0 {
            return Err(CollError::BadMembers(
                "the world team cannot be destroyed".into(),
            ));
        }
        self.progress()?;
        let pending = self
            .ops
            .values()
            .filter(|o| o.team.id() == team.id())
            .count();
        if pending > 0 {
            return Err(CollError::TeamBusy {
                team: team.id(),
                pending,
            });
        }
        if let Some(r) = team.inner.allocated.clone() {
            self.alloc.release(r);
        }
        Ok(())
    }

    fn gather_all_v<T: Elem>(&mut self, team: &Team, v: Vec<T>) -> Result<Vec<T>, CollError> {
        let h = self.gather_all_nb(team, v, &Opts::default())?;
        self.wait(h)
    }

    // ---------------------------------------------------------------- online tuning

    /// Cells timed online so far on this endpoint (`GEX_COLL_TUNE=online`).
    pub fn online_trials(&self) -> u64 {
        self.online_trials
    }

    /// Times the surviving candidates of `q` on `team` (every member does the same
    /// calls in the same order, so this is collective), agrees on the slowest
    /// member's time per candidate and records the fastest.
    #[allow(clippy::too_many_arguments)]
    fn online_trial(
        &mut self,
        team: &Team,
        q: &Query,
        root: u32,
        elem: usize,
        count: usize,
        reduce: &Option<(ReduceFn, bool)>,
        opts: &Opts<'_>,
    ) -> Result<usize, CollError> {
        let cands = self.tuner.online_candidates(q, TRIAL_CANDIDATES);
        let winner = if cands.len() <= 1 {
            *cands.first().ok_or(CollError::NoAlgorithm {
                op: q.op,
                size: q.size,
            })?
        } else {
            self.in_trial = true;
            let r = self.time_candidates(team, q, &cands, root, elem, count, reduce, opts);
            self.in_trial = false;
            r?
        };
        self.tuner.record_online(team.id(), q, winner);
        self.online_trials += 1;
        Ok(winner)
    }

    #[allow(clippy::too_many_arguments)]
    fn time_candidates(
        &mut self,
        team: &Team,
        q: &Query,
        cands: &[usize],
        root: u32,
        elem: usize,
        count: usize,
        reduce: &Option<(ReduceFn, bool)>,
        opts: &Opts<'_>,
    ) -> Result<usize, CollError> {
        let in_len = q.op.shape(q.size, root, root).0.max(1) * elem * count;
        let names: Vec<String> = cands
            .iter()
            .map(|&i| self.tuner.algorithms()[i].name().to_string())
            .collect();
        let mut times = Vec::with_capacity(names.len());
        for name in &names {
            let o = Opts {
                sync: opts.sync,
                algorithm: Some(name),
            };
            let mut t0 = std::time::Instant::now();
            for rep in 0..=TRIAL_CALLS {
                if rep == 1 {
                    t0 = std::time::Instant::now();
                }
                let id = self.start(
                    team,
                    q.op,
                    root,
                    elem,
                    count,
                    Ok(vec![0u8; in_len]),
                    reduce.clone(),
                    &o,
                );
                let h: Handle<Vec<u8>> = self.handle(id)?;
                self.wait(h)?;
            }
            times.push(t0.elapsed().as_secs_f64() * 1e6 / f64::from(TRIAL_CALLS));
        }
        let max = ReduceOp::<f64>::builtin(crate::op::BuiltinOp::Max)?;
        let h = self.allreduce_nb(team, times, &max, &Opts::default())?;
        let agreed: Vec<f64> = self.wait(h)?;
        let best = agreed
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.total_cmp(b.1))
            .map_or(0, |x| x.0);
        Ok(cands[best])
    }

    // ---------------------------------------------------------------- engine

    /// Checks that `root` is a member of `team` and that this endpoint is one.
    fn check_call(&self, team: &Team, root: u32) -> Result<(), CollError> {
        let p = team.size();
        if root >= p {
            return Err(CollError::BadRank {
                rank: root,
                size: p,
            });
        }
        if team.member(team.rank()) != Some(self.rma.addr()) {
            return Err(CollError::NotMember { team: team.id() });
        }
        Ok(())
    }

    /// The team rank of `root` for a call of `op` with blocks of `block` bytes and,
    /// for a root given by data, the offset of the root's buffer. Every member checks
    /// a data root alike (its owner is a member, the root's buffer fits in the owner's
    /// segment), so they all fail or all proceed.
    fn resolve_root(
        &mut self,
        team: &Team,
        op: OpKind,
        root: Root,
        block: usize,
    ) -> Result<(u32, Option<usize>), CollError> {
        let ptr = match root {
            Root::Rank(r) => return Ok((r, None)),
            Root::Data(ptr) => ptr,
        };
        let owner = ptr.addr();
        let rank = team.rank_of(owner).ok_or(CollError::RootNotMember {
            owner,
            team: team.id(),
        })?;
        let len = crate::root::root_blocks(op, team.size()).saturating_mul(block);
        let seg_len = self.rma.endpoint().segment_len_of(owner.rank).unwrap_or(0);
        if ptr.offset.checked_add(len).is_none_or(|e| e > seg_len) {
            return Err(RmaError::OutOfSegment {
                dst: owner,
                offset: ptr.offset,
                len,
                seg_len,
            }
            .into());
        }
        Ok((rank, Some(ptr.offset)))
    }

    /// [`resolve_root`](Self::resolve_root)'s team rank.
    fn root_rank(
        &mut self,
        team: &Team,
        op: OpKind,
        root: impl Into<Root>,
        block: usize,
    ) -> Result<u32, CollError> {
        self.resolve_root(team, op, root.into(), block).map(|x| x.0)
    }

    /// The tuner's query for a call of `op` with `n`-byte blocks on `team`.
    fn query(
        team: &Team,
        op: OpKind,
        n: usize,
        addr: AddrMode,
        opts: &Opts<'_>,
        commutative: bool,
    ) -> Query {
        let p = team.size();
        let hier = team.inner.hier.get();
        // Local mode can use signaling put / rendezvous through the team's scratch
        // space when every member's can hold the whole output.
        let scratch = addr == AddrMode::Local
            && n > 0
            && team.scratch().len() == p as usize
            && team.scratch().iter().all(|x| x.1 >= p as usize * n);
        Query {
            op,
            size: p,
            bytes: n,
            addr,
            sync: opts.sync,
            commutative,
            scratch,
            shm: team.inner.shm.is_some(),
            hier: hier.is_some(),
            hosts: hier.map_or(0, |h| h.hosts()),
            host_ranges: hier.is_some_and(|h| h.ranges),
        }
    }

    /// True if the online tuner decides `q` (no forced algorithm, no override or
    /// profile cell, local mode, not inside a trial).
    fn online_applies(&self, q: &Query, opts: &Opts<'_>) -> bool {
        opts.algorithm.is_none()
            && !self.in_trial
            && q.addr == AddrMode::Local
            && self.tuner.mode() == TuneMode::Online
            && !self.tuner.fixed_by_config(q)
    }

    /// Polls between two shared-memory steps of a blocking call (the endpoint still
    /// serves AMs while the caller waits).
    const POLL_EVERY: u32 = 16;

    /// Runs a blocking call directly through shared memory over the caller's
    /// buffers, when nothing else is in flight on this endpoint and the algorithm
    /// chosen for the call (the tuner's, or `opts`') is `shm`: no operation table,
    /// no copy in or out, no allocation. Ok(false): not taken (nothing consumed; the
    /// caller uses the nonblocking path). `io` must hold this member's input and
    /// output blocks ([`OpKind::shape`]; an empty output for a broadcast root).
    #[allow(clippy::too_many_arguments)]
    fn direct(
        &mut self,
        team: &Team,
        op: OpKind,
        root: u32,
        elem: usize,
        count: usize,
        mut io: Io<'_>,
        commutative: bool,
        opts: &Opts<'_>,
    ) -> Result<bool, CollError> {
        let Some(sh) = team.inner.shm.as_ref() else {
            return Ok(false);
        };
        if !self.ops.is_empty() {
            return Ok(false);
        }
        self.check_call(team, root)?;
        let (p, r, n) = (team.size(), team.rank(), elem * count);
        let q = Self::query(team, op, n, AddrMode::Local, opts, commutative);
        let shm = if self.online_applies(&q, opts) {
            self.tuner
                .online_choice(team.id(), &q)
                .is_some_and(|a| a.is_shared_memory())
        } else {
            self.tuner.select(&q, opts.algorithm)?.is_shared_memory()
        };
        if !shm || !ShmOp::fits(op, p, elem, sh.ch) {
            return Ok(false);
        }
        let (in_blocks, out_blocks) = op.shape(p, r, root);
        debug_assert!(io.input.len() >= in_blocks * n);
        debug_assert!(
            io.out.len() == out_blocks * n || (op == OpKind::Broadcast && io.out.is_empty())
        );
        let mut shm = ShmOp::new(
            op,
            (p, r, root),
            elem,
            n,
            opts.sync,
            (team.id(), team.next_seq()),
            sh.ch,
        );
        shm.keep_own(io.input, io.out);
        let cpus = self.tuner.host_cpus();
        let oversubscribed = cpus > 0 && team.size() > cpus;
        match shm.publish_by_reference(sh, io.input, oversubscribed) {
            Publish::Segment => self.by_reference_calls += 1,
            Publish::Process => self.cma_calls += 1,
            Publish::Slots => {}
        }
        let spin_limit = self.spin_limit();
        let mut spins = 0u32;
        while !shm.step(sh, &mut self.shm_expected, &mut io) {
            spins = spins.saturating_add(1);
            if spins % Self::POLL_EVERY == 0 {
                self.rma.endpoint().poll();
            }
            Self::pause(spins, spin_limit);
        }
        self.direct_calls += 1;
        Ok(true)
    }

    /// Polls a waiter makes before it yields now and then: under spin-then-block
    /// ranks often outnumber cores, and the members it waits for may need its core,
    /// so it yields at once (as gex-rma's barrier).
    fn spin_limit(&mut self) -> u32 {
        match self.rma.endpoint().wait_policy() {
            WaitPolicy::Spin => SPIN_YIELD_AFTER,
            // Yield after the first fruitless poll. Measured with 8 ranks on 2 CPUs
            // (gex-perf coll, same minutes): limits 0 / 4 / 16 / 64 / 256 gave
            // broadcast 8 B 1.17 / 1.17 / 1.25 / 1.53 / 2.45 µs and barrier 7.6 / 8.3 /
            // 9.2 / 15.4 / 38 µs; 0 was also 5-20 % ahead of 16 in the other cells.
            _ => 0,
        }
    }

    /// One pause of a waiter after `spins` fruitless polls.
    fn pause(spins: u32, spin_limit: u32) {
        if spins > spin_limit && (spin_limit < SPIN_YIELD_AFTER || spins % 256 == 0) {
            std::thread::yield_now();
        } else {
            gex_sync::hint::spin_loop();
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn start(
        &mut self,
        team: &Team,
        op: OpKind,
        root: u32,
        elem: usize,
        count: usize,
        input: Result<Vec<u8>, &Single>,
        reduce: Option<(ReduceFn, bool)>,
        opts: &Opts<'_>,
    ) -> Result<u64, CollError> {
        let p = team.size();
        self.check_call(team, root)?;
        let r = team.rank();
        let n = elem * count;
        let addr = if input.is_ok() {
            AddrMode::Local
        } else {
            AddrMode::Single
        };
        let commutative = reduce.as_ref().is_none_or(|x| x.1);
        let q = Self::query(team, op, n, addr, opts, commutative);
        let scratch_ok = q.scratch;
        let online = self.online_applies(&q, opts);
        let mut algo = match online.then(|| self.tuner.online_choice(team.id(), &q).cloned()) {
            Some(Some(a)) => a,
            Some(None) => {
                let i = self.online_trial(team, &q, root, elem, count, &reduce, opts)?;
                self.tuner.algorithms()[i].clone()
            }
            None if self.in_stage => self.tuner.select_within(&q)?.clone(),
            None => self.tuner.select(&q, opts.algorithm)?.clone(),
        };
        if algo.is_hierarchical() {
            if let Ok(bytes) = input {
                let seq = team.next_seq();
                let h = HierOp::new(op, root, (elem, count), bytes, reduce);
                return Ok(self.start_composite(team, seq, None, Some(h)));
            }
            return Err(CollError::Unsupported {
                algorithm: algo.name().to_string(),
                op,
                size: p,
            });
        }
        if algo.is_shared_memory() {
            let ch = team.inner.shm.as_ref().map_or(0, |t| t.ch);
            let (_, out_blocks) = op.shape(p, r, root);
            // Only local mode reaches here (`Shm::supports`).
            if input.is_ok() && ShmOp::fits(op, p, elem, ch) {
                let bytes = input.unwrap_or_default();
                let seq = team.next_seq();
                let shm = OwnedShm::new(
                    ShmOp::new(op, (p, r, root), elem, n, opts.sync, (team.id(), seq), ch),
                    bytes,
                    out_blocks * n,
                    reduce.map(|x| x.0),
                );
                return Ok(self.start_composite(team, seq, Some(shm), None));
            }
            // An element larger than a chunk: a message algorithm, chosen alike on
            // every member.
            algo = self.tuner.select(&Query { shm: false, ..q }, None)?.clone();
        }
        let ctx = PlanCtx {
            op,
            size: p,
            rank: r,
            root,
            block: n,
            elem,
            commutative,
        };
        let mut s = algo.plan(&ctx);
        let transport = if s.symmetric && (addr == AddrMode::Single || scratch_ok) {
            algo.transport()
        } else {
            Transport::Eager
        };
        if opts.sync.input == SyncMode::All || opts.sync.output == SyncMode::All {
            let b =
                crate::algo::Builtin::new(crate::algo::Kind::Dissemination, 2, 0, Transport::Eager)
                    .plan(&PlanCtx {
                        op: OpKind::Barrier,
                        ..ctx
                    });
            let mut rounds = Vec::new();
            if opts.sync.input == SyncMode::All {
                let mut pre = b.clone();
                shift_tags(&mut pre, TAG_PRE);
                rounds.extend(pre.rounds);
            }
            rounds.append(&mut s.rounds);
            if opts.sync.output == SyncMode::All {
                let mut post = b;
                shift_tags(&mut post, TAG_POST);
                rounds.extend(post.rounds);
            }
            s.rounds = rounds;
        }
        let (in_blocks, out_blocks) = op.shape(p, r, root);
        let mut work = vec![0u8; s.work_len];
        let (out, mirror) = match input {
            Ok(bytes) => {
                place_input(&s, &mut work, &bytes)?;
                let mirror = (transport != Transport::Eager)
                    .then(|| team.scratch().iter().map(|x| x.0).collect::<Vec<_>>());
                (Out::Local, mirror)
            }
            Err(single) => {
                let pl = p as usize;
                if single.dst.len() != pl || single.src.as_ref().is_some_and(|v| v.len() != pl) {
                    return Err(CollError::BadAddress(format!(
                        "offset lists must have {pl} entries"
                    )));
                }
                let dst = single.dst[r as usize];
                let in_len = in_blocks * n;
                let src = match &single.src {
                    Some(v) => v[r as usize],
                    None if matches!(op, OpKind::Gather | OpKind::GatherAll) => {
                        dst + r as usize * n
                    }
                    None => dst,
                };
                for (o, l) in [(src, in_len), (dst, out_blocks * n)] {
                    if o.checked_add(l).is_none_or(|e| e > self.seg_len) {
                        return Err(CollError::BadAddress(format!(
                            "[{o}, +{l}) is outside the {}-byte segment",
                            self.seg_len
                        )));
                    }
                }
                let mut bytes = vec![0u8; in_len];
                self.rma.endpoint().segment().read(src, &mut bytes)?;
                place_input(&s, &mut work, &bytes)?;
                let mirror = (transport != Transport::Eager).then(|| single.dst.clone());
                if mirror.is_some() && s.work_len != out_blocks * n {
                    return Err(CollError::BadAddress(
                        "mirrored schedule does not match the output".into(),
                    ));
                }
                (Out::Seg(dst), mirror)
            }
        };
        let out_no = opts.sync.output == SyncMode::No && addr == AddrMode::Single;
        let uses_scratch = addr == AddrMode::Local && transport != Transport::Eager;
        // Through scratch, a put may land only once the receiver started this
        // collective (and so finished the previous one using the scratch).
        let need_ready =
            transport == Transport::Put && (opts.sync.input == SyncMode::My || uses_scratch);
        let id = self.next_op;
        self.next_op += 1;
        let mut st = OpState {
            seq: team.next_seq(),
            team: team.clone(),
            sched: s,
            work,
            reduce: reduce.map(|x| x.0),
            transport,
            mirror,
            need_ready,
            uses_scratch,
            started: false,
            round: 0,
            pending_sends: Vec::new(),
            round_open: false,
            applied: 0,
            gets: HashMap::new(),
            fetched: HashMap::new(),
            acks_expected: 0,
            out,
            out_no,
            finished_rounds: false,
            result: None,
            taken: false,
            shm: None,
            hier: None,
        };
        if let Err(e) = self.advance(&mut st) {
            st.result = Some(Err(e));
        }
        self.ops.insert(id, st);
        Ok(id)
    }

    /// Starts a shared-memory or hierarchical collective (sequence number `seq` of
    /// `team`).
    fn start_composite(
        &mut self,
        team: &Team,
        seq: u32,
        shm: Option<OwnedShm>,
        hier: Option<HierOp>,
    ) -> u64 {
        let id = self.next_op;
        self.next_op += 1;
        let st = OpState {
            seq,
            team: team.clone(),
            sched: Schedule::default(),
            work: Vec::new(),
            reduce: None,
            transport: Transport::Eager,
            mirror: None,
            need_ready: false,
            uses_scratch: false,
            started: false,
            round: 0,
            pending_sends: Vec::new(),
            round_open: false,
            applied: 0,
            gets: HashMap::new(),
            fetched: HashMap::new(),
            acks_expected: 0,
            out: Out::Local,
            out_no: false,
            finished_rounds: false,
            result: None,
            taken: false,
            shm,
            hier,
        };
        self.ops.insert(id, st);
        self.advance_special(id);
        id
    }

    /// Advances a shared-memory or hierarchical collective.
    fn advance_special(&mut self, id: u64) {
        if self.ops.get(&id).is_some_and(|o| o.hier.is_some()) {
            self.advance_hier(id);
        } else {
            self.advance_shm(id);
        }
    }

    /// True if a collective of `st`'s team started before it (lower sequence number)
    /// and of the kind `kind` selects has not finished here: `st` must wait its turn.
    fn earlier_unfinished(&self, st: &OpState, kind: impl Fn(&OpState) -> bool) -> bool {
        let (tid, seq) = (st.team.id(), st.seq);
        self.ops
            .values()
            .any(|o| kind(o) && o.team.id() == tid && o.seq < seq && o.result.is_none())
    }

    /// Advances hierarchical collective `id`: starts its stages on the sub-teams one
    /// after the other; it starts once the earlier ones of its team finished here.
    fn advance_hier(&mut self, id: u64) {
        let Some(st) = self.ops.get(&id) else {
            return;
        };
        if st.result.is_some() {
            return;
        }
        if !st.started && self.earlier_unfinished(st, |o| o.hier.is_some()) {
            return;
        }
        loop {
            let Some(st) = self.ops.get_mut(&id) else {
                return;
            };
            st.started = true;
            let team = st.team.clone();
            let me = team.rank();
            let Some(h) = st.hier.as_mut() else {
                return;
            };
            if let Some(sub) = h.sub {
                let done = match self.ops.get_mut(&sub) {
                    None => Some(Err(CollError::BadHandle(sub))),
                    Some(o) => match o.result.take() {
                        None => None,
                        Some(r) => {
                            o.result = Some(Ok(Vec::new()));
                            o.taken = true;
                            Some(r)
                        }
                    },
                };
                let Some(res) = done else {
                    return;
                };
                let st = self.ops.get_mut(&id).expect("present");
                let h = st.hier.as_mut().expect("hierarchical");
                h.sub = None;
                match (res, team.inner.hier.get()) {
                    (Ok(bytes), Some(sub_teams)) => h.absorb(sub_teams, me, bytes),
                    (Ok(_), None) => {
                        st.result = Some(Err(CollError::NotMember { team: team.id() }));
                        return;
                    }
                    (Err(e), _) => {
                        st.result = Some(Err(e));
                        return;
                    }
                }
            }
            let st = self.ops.get_mut(&id).expect("present");
            let h = st.hier.as_mut().expect("hierarchical");
            if h.stage >= crate::hier::STAGES {
                st.result = Some(Ok(h.output(me)));
                return;
            }
            let Some(sub_teams) = team.inner.hier.get() else {
                st.result = Some(Err(CollError::NotMember { team: team.id() }));
                return;
            };
            let Some(call) = h.next_call(sub_teams, me) else {
                continue;
            };
            let reduce = h.reduce.clone().filter(|_| call.reduces);
            let elem = h.elem;
            // Sub-collectives are never timed online: a trial is a collective of the
            // sub-team that would run inside this stage.
            let in_trial = std::mem::replace(&mut self.in_trial, true);
            self.in_stage = true;
            let started = self.start(
                &call.team,
                call.op,
                call.root,
                elem,
                call.count,
                Ok(call.input),
                reduce,
                &Opts::default(),
            );
            self.in_trial = in_trial;
            self.in_stage = false;
            match started {
                Ok(sub) => {
                    let st = self.ops.get_mut(&id).expect("present");
                    st.hier.as_mut().expect("hierarchical").sub = Some(sub);
                }
                Err(e) => {
                    let st = self.ops.get_mut(&id).expect("present");
                    st.result = Some(Err(e));
                    return;
                }
            }
        }
    }

    /// Advances shared-memory collective `id`: it starts once the earlier ones of its
    /// team finished here (they share the team's channel). Works in place (no
    /// removal from the map: no allocation on the polling path).
    fn advance_shm(&mut self, id: u64) {
        let Some(st) = self.ops.get(&id) else {
            return;
        };
        if st.result.is_some() {
            return;
        }
        if !st.started && self.earlier_unfinished(st, |o| o.shm.is_some()) {
            return;
        }
        let Some(st) = self.ops.get_mut(&id) else {
            return;
        };
        st.started = true;
        let (Some(op), Some(t)) = (st.shm.as_mut(), st.team.inner.shm.as_ref()) else {
            return;
        };
        if op.step(t, &mut self.shm_expected) {
            st.result = Some(Ok(op.take_output()));
        }
    }

    /// Polls the endpoint and advances every collective in flight.
    ///
    /// # Errors
    /// Never for communication problems of one collective (those complete that
    /// collective with the error); reserved for future use.
    pub fn progress(&mut self) -> Result<(), CollError> {
        self.rma.endpoint().poll();
        let mut next = self.ops.keys().next().copied();
        while let Some(id) = next {
            next = self.ops.range(id + 1..).next().map(|(&k, _)| k);
            if self
                .ops
                .get(&id)
                .is_some_and(|o| o.shm.is_some() || o.hier.is_some())
            {
                self.advance_special(id);
                if self.ops.get(&id).is_some_and(|o| o.taken) {
                    self.ops.remove(&id);
                }
                continue;
            }
            let Some(mut st) = self.ops.remove(&id) else {
                continue;
            };
            if st.result.as_ref().is_none_or(|r| r.is_ok()) {
                if let Err(e) = self.advance(&mut st) {
                    st.result = Some(Err(e));
                }
            }
            let acked = self.acks_done(&st);
            let gone = st.taken && (acked || st.result.as_ref().is_some_and(|r| r.is_err()));
            if !gone {
                self.ops.insert(id, st);
            } else {
                lock(&self.mb).acks.remove(&(st.team.id(), st.seq));
            }
        }
        Ok(())
    }

    /// An earlier collective of `st`'s team still uses the scratch space here.
    fn scratch_busy(&self, st: &OpState) -> bool {
        self.ops.values().any(|o| {
            o.uses_scratch
                && o.team.id() == st.team.id()
                && o.seq < st.seq
                && !(o.result.is_some() && self.acks_done(o))
        })
    }

    fn acks_done(&self, st: &OpState) -> bool {
        st.acks_expected == 0
            || lock(&self.mb)
                .acks
                .get(&(st.team.id(), st.seq))
                .copied()
                .unwrap_or(0)
                >= st.acks_expected
    }

    fn uses_transport(st: &OpState, ranges: &[Range<usize>], tag: u32) -> bool {
        st.transport != Transport::Eager
            && tag < TAG_PRE
            && ranges.len() == 1
            && !ranges[0].is_empty()
    }

    fn advance(&mut self, st: &mut OpState) -> Result<(), CollError> {
        let (tid, seq) = (st.team.id(), st.seq);
        let (tlo, thi) = split64(tid);
        let me = st.team.rank();
        if !st.started {
            if st.uses_scratch && self.scratch_busy(st) {
                return Ok(());
            }
            st.started = true;
            // Write the placed input through to the mirrored region.
            if let Some(m) = &st.mirror {
                for (src, at) in &st.sched.input {
                    let piece = &st.work[*at..*at + src.len()];
                    self.rma
                        .endpoint()
                        .segment()
                        .write(m[me as usize] + at, piece)?;
                }
            }
            if st.need_ready {
                let mut readies = Vec::new();
                for rd in &st.sched.rounds {
                    for v in &rd.recvs {
                        if v.action == Action::Copy && Self::uses_transport(st, &v.ranges, v.tag) {
                            readies.push((v.peer, v.tag));
                        }
                    }
                }
                for (peer, tag) in readies {
                    let dst = st.team.inner.members[peer as usize];
                    self.rma.endpoint().request_reserved(
                        dst,
                        Category::Short,
                        H_READY,
                        &[tlo, thi, seq, me, tag],
                        &[],
                        0,
                        Flags::empty(),
                    )?;
                }
            }
        }
        while st.round < st.sched.rounds.len() {
            if !st.round_open {
                st.round_open = true;
                st.pending_sends = (0..st.sched.rounds[st.round].sends.len()).collect();
                st.applied = 0;
            }
            // Sends (eager snapshots leave now; puts may wait for readiness).
            let mut still = Vec::new();
            for i in std::mem::take(&mut st.pending_sends) {
                if !self.try_send(st, i)? {
                    still.push(i);
                }
            }
            st.pending_sends = still;
            // Receives, applied in order.
            let nrecv = st.sched.rounds[st.round].recvs.len();
            while st.applied < nrecv {
                let i = st.applied;
                let Some(msg) = self.take_recv(st, i)? else {
                    break;
                };
                let v = &st.sched.rounds[st.round].recvs[i];
                if msg.len() != span(&v.ranges) {
                    return Err(CollError::BadLength {
                        what: "message",
                        expected: span(&v.ranges),
                        got: msg.len(),
                    });
                }
                sched::apply_recv(&mut st.work, v, &msg, st.reduce.as_ref());
                if let Some(m) = &st.mirror {
                    let base = m[me as usize];
                    for r in v.ranges.clone() {
                        self.rma
                            .endpoint()
                            .segment()
                            .write(base + r.start, &st.work[r])?;
                    }
                }
                st.applied += 1;
            }
            if st.applied < nrecv || !st.pending_sends.is_empty() {
                return Ok(());
            }
            let post = std::mem::take(&mut st.sched.rounds[st.round].post);
            for l in &post {
                sched::apply_local(&mut st.work, l, st.reduce.as_ref());
            }
            st.round += 1;
            st.round_open = false;
        }
        if !st.finished_rounds {
            st.finished_rounds = true;
        }
        if st.result.is_none() && (st.out_no || self.acks_done(st)) {
            let mut out = vec![0u8; st.sched.out_len];
            for (src, dst) in &st.sched.output {
                out[*dst..*dst + src.len()].copy_from_slice(&st.work[src.clone()]);
            }
            match st.out {
                Out::Local => st.result = Some(Ok(out)),
                Out::Seg(off) => {
                    if st.mirror.is_none() {
                        self.rma.endpoint().segment().write(off, &out)?;
                    }
                    st.result = Some(Ok(Vec::new()));
                }
            }
        }
        Ok(())
    }

    /// Issues send `i` of the current round; false if it must wait (readiness).
    fn try_send(&mut self, st: &mut OpState, i: usize) -> Result<bool, CollError> {
        let (tid, seq) = (st.team.id(), st.seq);
        let (tlo, thi) = split64(tid);
        let me = st.team.rank();
        let s = &st.sched.rounds[st.round].sends[i];
        let dst = st.team.inner.members[s.peer as usize];
        if Self::uses_transport(st, &s.ranges, s.tag) {
            let r = s.ranges[0].clone();
            let m = st.mirror.as_ref().expect("transports need mirrors");
            match st.transport {
                Transport::Put => {
                    if st.need_ready && !lock(&self.mb).ready.remove(&(tid, seq, s.peer, s.tag)) {
                        return Ok(false);
                    }
                    let total = r.len();
                    let base = m[s.peer as usize] + r.start;
                    let chunk = self.rma.endpoint().max_long(dst).max(1);
                    let mut off = 0;
                    while off < total {
                        let len = chunk.min(total - off);
                        let args = [tlo, thi, seq, me, s.tag, off as u32, total as u32];
                        let payload = &st.work[r.start + off..r.start + off + len];
                        self.rma.endpoint().request_reserved(
                            dst,
                            Category::Long,
                            H_LONG,
                            &args,
                            payload,
                            base + off,
                            Flags::empty(),
                        )?;
                        off += len;
                    }
                }
                _ => {
                    let (olo, ohi) = split64((m[me as usize] + r.start) as u64);
                    let (llo, lhi) = split64(r.len() as u64);
                    let args = [tlo, thi, seq, me, s.tag, olo, ohi, llo, lhi];
                    self.rma.endpoint().request_reserved(
                        dst,
                        Category::Short,
                        H_RDV,
                        &args,
                        &[],
                        0,
                        Flags::empty(),
                    )?;
                    st.acks_expected += 1;
                }
            }
            return Ok(true);
        }
        let data = sched::pack(&st.work, &s.ranges);
        let total = data.len();
        let chunk = self.rma.endpoint().max_medium(dst).max(1);
        let mut off = 0;
        loop {
            let len = chunk.min(total - off);
            let args = [tlo, thi, seq, me, s.tag, off as u32, total as u32];
            self.rma.endpoint().request_reserved(
                dst,
                Category::Medium,
                H_EAGER,
                &args,
                &data[off..off + len],
                0,
                Flags::empty(),
            )?;
            off += len;
            if off >= total {
                break;
            }
        }
        Ok(true)
    }

    /// The bytes of receive `i` of the current round, if they are here.
    fn take_recv(&mut self, st: &mut OpState, i: usize) -> Result<Option<Vec<u8>>, CollError> {
        let (tid, seq) = (st.team.id(), st.seq);
        let v = &st.sched.rounds[st.round].recvs[i];
        let key = (tid, seq, v.peer, v.tag);
        if Self::uses_transport(st, &v.ranges, v.tag) && v.action == Action::Copy {
            let r = v.ranges[0].clone();
            let me = st.team.rank() as usize;
            let base = st.mirror.as_ref().expect("transports need mirrors")[me];
            match st.transport {
                Transport::Put => {
                    let mut mb = lock(&self.mb);
                    if mb.long.get(&key).copied().unwrap_or(0) < r.len() {
                        return Ok(None);
                    }
                    mb.long.remove(&key);
                    drop(mb);
                    let mut buf = vec![0u8; r.len()];
                    self.rma
                        .endpoint()
                        .segment()
                        .read(base + r.start, &mut buf)?;
                    return Ok(Some(buf));
                }
                _ => {
                    // Rendezvous: get once announced, acknowledge when complete.
                    if let Some(b) = st.fetched.remove(&i) {
                        return Ok(Some(b));
                    }
                    if let Some(ev) = st.gets.get_mut(&i) {
                        if !self.rma.test(ev) {
                            return Ok(None);
                        }
                        let ev = st.gets.remove(&i).expect("present");
                        let buf = self.rma.wait(ev);
                        let (tlo, thi) = split64(tid);
                        let src = st.team.inner.members[v.peer as usize];
                        self.rma.endpoint().request_reserved(
                            src,
                            Category::Short,
                            H_ACK,
                            &[tlo, thi, seq],
                            &[],
                            0,
                            Flags::empty(),
                        )?;
                        return Ok(Some(buf));
                    }
                    let note = lock(&self.mb).rdv.remove(&key);
                    let Some((off, len)) = note else {
                        return Ok(None);
                    };
                    let src = st.team.inner.members[v.peer as usize];
                    let ev = self
                        .rma
                        .get_nb(vec![0u8; len], GlobalPtr::<u8>::new(src, off))?;
                    st.gets.insert(i, ev);
                    return Ok(None);
                }
            }
        }
        let mut mb = lock(&self.mb);
        match mb.eager.get(&key) {
            Some(p) if p.got == p.buf.len() => Ok(mb.eager.remove(&key).map(|p| p.buf)),
            _ => Ok(None),
        }
    }

    // ---------------------------------------------------------------- handles

    /// Advances everything once and reports whether `h` is complete (then
    /// [`wait`](Self::wait) returns at once).
    ///
    /// # Errors
    /// [`CollError::BadHandle`] if the handle is not in flight here.
    pub fn test<T: Output>(&mut self, h: &mut Handle<T>) -> Result<bool, CollError> {
        self.progress()?;
        self.ops
            .get(&h.id)
            .map(OpState::user_done)
            .ok_or(CollError::BadHandle(h.id))
    }

    /// Waits for `h` (advancing every collective in flight meanwhile) and returns its
    /// output: the received elements for local-mode operations, `()` otherwise.
    ///
    /// # Errors
    /// The collective's error, or [`CollError::BadHandle`].
    pub fn wait<T: Output>(&mut self, h: Handle<T>) -> Result<T, CollError> {
        let mut spins = 0u32;
        let spin_limit = self.spin_limit();
        loop {
            match self.ops.get(&h.id) {
                None => return Err(CollError::BadHandle(h.id)),
                Some(st) if st.user_done() => break,
                Some(_) => {}
            }
            self.progress()?;
            spins = spins.saturating_add(1);
            Self::pause(spins, spin_limit);
        }
        let st = self.ops.get_mut(&h.id).expect("present");
        let res = st.result.take().expect("done");
        if res.is_err() {
            // A failed collective is abandoned: nothing more will complete it.
            self.ops.remove(&h.id);
            return res.map(T::from_bytes);
        }
        st.result = Some(Ok(Vec::new()));
        st.taken = true;
        // Remove now if nothing remains to finish in the background.
        self.progress()?;
        res.map(T::from_bytes)
    }

    /// Waits for every handle, in order.
    ///
    /// # Errors
    /// The first error.
    pub fn wait_all<T: Output>(&mut self, hs: Vec<Handle<T>>) -> Result<Vec<T>, CollError> {
        hs.into_iter().map(|h| self.wait(h)).collect()
    }

    /// Starts `kind` over an owned input of blocks of `count` elements, with the
    /// reduction `op` for the reducing operations: the body of every `*_nb` call
    /// with owned buffers.
    #[allow(clippy::too_many_arguments)]
    fn start_owned<T: Elem>(
        &mut self,
        team: &Team,
        kind: OpKind,
        root: u32,
        count: usize,
        data: Vec<T>,
        op: Option<&ReduceOp<T>>,
        opts: &Opts<'_>,
    ) -> Result<Handle<Vec<T>>, CollError> {
        let red = op.map(|o| (o.func().clone(), o.is_commutative()));
        let id = self.start(
            team,
            kind,
            root,
            size_of::<T>(),
            count,
            Ok(into_bytes(data)),
            red,
            opts,
        );
        self.handle(id)
    }

    fn handle<T>(&mut self, id: Result<u64, CollError>) -> Result<Handle<T>, CollError> {
        id.map(|id| Handle {
            id,
            _t: PhantomData,
        })
    }

    // ---------------------------------------------------------------- operations

    /// Starts a barrier.
    ///
    /// # Collective
    /// Over `team`.
    ///
    /// # Errors
    /// See [`CollError`].
    pub fn barrier_nb(&mut self, team: &Team, opts: &Opts<'_>) -> Result<Handle<()>, CollError> {
        let id = self.start(team, OpKind::Barrier, 0, 1, 0, Ok(Vec::new()), None, opts);
        self.handle(id)
    }

    /// Starts a broadcast of the root's `data` (every member passes a buffer of the
    /// same length; non-roots' contents are ignored). The output is the root's data.
    /// `root`: a team rank (`u32`) or where the root's data lives (a
    /// [`GlobalPtr`], see [`Root`]).
    ///
    /// # Collective
    /// Over `team`, with the same `root` and length everywhere.
    ///
    /// # Errors
    /// [`CollError::RootNotMember`] or [`CollError::Rma`] for a bad data root
    /// ([`Root`]); see [`CollError`].
    pub fn broadcast_nb<T: Elem>(
        &mut self,
        team: &Team,
        root: impl Into<Root>,
        data: Vec<T>,
        opts: &Opts<'_>,
    ) -> Result<Handle<Vec<T>>, CollError> {
        let count = data.len();
        let root = self.root_rank(team, OpKind::Broadcast, root, count * size_of::<T>())?;
        self.start_owned(team, OpKind::Broadcast, root, count, data, None, opts)
    }

    /// Starts a scatter of `count` elements per member from the root's `data`
    /// (`P × count` elements at the root; ignored elsewhere). `root`: a team rank or
    /// where the root's data lives ([`Root`]).
    ///
    /// # Errors
    /// [`CollError::BadLength`] at the root; [`CollError::RootNotMember`] or
    /// [`CollError::Rma`] for a bad data root ([`Root`]); see [`CollError`].
    pub fn scatter_nb<T: Elem>(
        &mut self,
        team: &Team,
        root: impl Into<Root>,
        data: Vec<T>,
        count: usize,
        opts: &Opts<'_>,
    ) -> Result<Handle<Vec<T>>, CollError> {
        let root = self.root_rank(team, OpKind::Scatter, root, count * size_of::<T>())?;
        if team.rank() == root {
            check_len("scatter input", team.size() as usize * count, data.len())?;
        }
        self.start_owned(team, OpKind::Scatter, root, count, data, None, opts)
    }

    /// Starts a gather of every member's `data` (same length everywhere) to the root,
    /// which gets `P × count` elements in team-rank order (others get none). `root`:
    /// a team rank or where the root's output lives ([`Root`]).
    ///
    /// # Errors
    /// [`CollError::RootNotMember`] or [`CollError::Rma`] for a bad data root
    /// ([`Root`]); see [`CollError`].
    pub fn gather_nb<T: Elem>(
        &mut self,
        team: &Team,
        root: impl Into<Root>,
        data: Vec<T>,
        opts: &Opts<'_>,
    ) -> Result<Handle<Vec<T>>, CollError> {
        let count = data.len();
        let root = self.root_rank(team, OpKind::Gather, root, count * size_of::<T>())?;
        self.start_owned(team, OpKind::Gather, root, count, data, None, opts)
    }

    /// Starts a gather_all: every member gets every member's `data` in team-rank
    /// order.
    ///
    /// # Errors
    /// See [`CollError`].
    pub fn gather_all_nb<T: Elem>(
        &mut self,
        team: &Team,
        data: Vec<T>,
        opts: &Opts<'_>,
    ) -> Result<Handle<Vec<T>>, CollError> {
        let count = data.len();
        self.start_owned(team, OpKind::GatherAll, 0, count, data, None, opts)
    }

    /// Starts an exchange (all-to-all) of `P` blocks of `data.len() / P` elements.
    ///
    /// # Errors
    /// [`CollError::BadLength`] if the length is not a multiple of `P`.
    pub fn exchange_nb<T: Elem>(
        &mut self,
        team: &Team,
        data: Vec<T>,
        opts: &Opts<'_>,
    ) -> Result<Handle<Vec<T>>, CollError> {
        let p = team.size() as usize;
        check_len("exchange input", data.len().div_ceil(p) * p, data.len())?;
        self.start_owned(team, OpKind::Exchange, 0, data.len() / p, data, None, opts)
    }

    /// Starts a reduction of every member's `data` to the root (the others get an
    /// empty vector). `root`: a team rank or where the root's output lives
    /// ([`Root`]).
    ///
    /// # Errors
    /// [`CollError::RootNotMember`] or [`CollError::Rma`] for a bad data root
    /// ([`Root`]); see [`CollError`].
    pub fn reduce_nb<T: Elem>(
        &mut self,
        team: &Team,
        root: impl Into<Root>,
        data: Vec<T>,
        op: &ReduceOp<T>,
        opts: &Opts<'_>,
    ) -> Result<Handle<Vec<T>>, CollError> {
        let count = data.len();
        let root = self.root_rank(team, OpKind::Reduce, root, count * size_of::<T>())?;
        self.start_owned(team, OpKind::Reduce, root, count, data, Some(op), opts)
    }

    /// Starts an allreduce.
    ///
    /// # Errors
    /// See [`CollError`].
    pub fn allreduce_nb<T: Elem>(
        &mut self,
        team: &Team,
        data: Vec<T>,
        op: &ReduceOp<T>,
        opts: &Opts<'_>,
    ) -> Result<Handle<Vec<T>>, CollError> {
        let count = data.len();
        self.start_owned(team, OpKind::Allreduce, 0, count, data, Some(op), opts)
    }

    /// Starts a reduce_scatter of `P` blocks of `data.len() / P` elements: member `i`
    /// gets block `i` of the reduction.
    ///
    /// # Errors
    /// [`CollError::BadLength`] if the length is not a multiple of `P`.
    pub fn reduce_scatter_nb<T: Elem>(
        &mut self,
        team: &Team,
        data: Vec<T>,
        op: &ReduceOp<T>,
        opts: &Opts<'_>,
    ) -> Result<Handle<Vec<T>>, CollError> {
        let p = team.size() as usize;
        check_len(
            "reduce_scatter input",
            data.len().div_ceil(p) * p,
            data.len(),
        )?;
        self.start_owned(
            team,
            OpKind::ReduceScatter,
            0,
            data.len() / p,
            data,
            Some(op),
            opts,
        )
    }

    /// Starts an inclusive scan (prefix reduction in team-rank order).
    ///
    /// # Errors
    /// See [`CollError`].
    pub fn scan_nb<T: Elem>(
        &mut self,
        team: &Team,
        data: Vec<T>,
        op: &ReduceOp<T>,
        opts: &Opts<'_>,
    ) -> Result<Handle<Vec<T>>, CollError> {
        let count = data.len();
        self.start_owned(team, OpKind::Scan, 0, count, data, Some(op), opts)
    }

    /// Starts an exclusive scan; team rank 0 gets an empty vector.
    ///
    /// # Errors
    /// See [`CollError`].
    pub fn exscan_nb<T: Elem>(
        &mut self,
        team: &Team,
        data: Vec<T>,
        op: &ReduceOp<T>,
        opts: &Opts<'_>,
    ) -> Result<Handle<Vec<T>>, CollError> {
        let count = data.len();
        self.start_owned(team, OpKind::Exscan, 0, count, data, Some(op), opts)
    }

    /// Starts any operation in single address mode: inputs and outputs live in the
    /// members' segments at the offsets of `addrs`, `count` elements of `T` per
    /// block; `reduce` is required by reducing operations and `root` is used by
    /// rooted ones. Broadcasts and gather_alls can then move data by signaling put or
    /// rendezvous (algorithms `…+put`, `…+rdv`).
    ///
    /// A root given by data ([`Root::Data`], any [`GlobalPtr`]) is the member owning
    /// the pointer's segment, and the pointer's offset is the root's buffer: it
    /// replaces the root's entry of `addrs.src` (broadcast, scatter; with `src: None`
    /// the other members keep reading in place) or of `addrs.dst` (gather, reduce).
    ///
    /// ```
    /// use gex_coll::{CollEp, OpKind, Opts, Single, SyncMode};
    /// use gex_core::ClientBuilder;
    /// use gex_rma::RmaEp;
    /// use gex_testkit::sim::{run_sim, SimConfig};
    ///
    /// let ok = run_sim(2, SimConfig::default(), || ClientBuilder::new().segment_size(1 << 16), |client| {
    ///     let mut coll = CollEp::new(RmaEp::new(client.endpoint(0).unwrap()).unwrap()).unwrap();
    ///     let w = coll.world().clone();
    ///     // The root's source is at offset 0 of its segment; destinations at 1024.
    ///     if w.rank() == 0 {
    ///         coll.endpoint().segment().write(0, &[42u8; 64]).unwrap();
    ///     }
    ///     coll.barrier(&w).unwrap();
    ///     // Signaling put straight into the destinations, after each receiver entered.
    ///     let opts = Opts::sync(SyncMode::My, SyncMode::My).with_algorithm("flat+put");
    ///     let h = coll.start_single::<u8>(&w, OpKind::Broadcast, 0, 64, &Single::uniform(2, 0, 1024), None, &opts).unwrap();
    ///     coll.wait(h).unwrap();
    ///     let mut got = [0u8; 64];
    ///     coll.endpoint().segment().read(1024, &mut got).unwrap();
    ///     coll.barrier(&w).unwrap();
    ///     got == [42u8; 64]
    /// });
    /// assert_eq!(ok, vec![true, true]);
    /// ```
    ///
    /// # Errors
    /// [`CollError::BadAddress`] for a wrong offset list or a range outside the
    /// segment; [`CollError::RootNotMember`] or [`CollError::Rma`] for a bad data root
    /// ([`Root`]); see [`CollError`].
    #[allow(clippy::too_many_arguments)]
    pub fn start_single<T: Elem>(
        &mut self,
        team: &Team,
        op: OpKind,
        root: impl Into<Root>,
        count: usize,
        addrs: &Single,
        reduce: Option<&ReduceOp<T>>,
        opts: &Opts<'_>,
    ) -> Result<Handle<()>, CollError> {
        if op.reduces() && reduce.is_none() {
            return Err(CollError::UnsupportedOp {
                op: "none".into(),
                ty: std::any::type_name::<T>(),
            });
        }
        let (root, at) = self.resolve_root(team, op, root.into(), count * size_of::<T>())?;
        let with_root;
        let addrs = match at {
            Some(offset) => {
                with_root = addrs.with_root_buffer(op, root, offset);
                &with_root
            }
            None => addrs,
        };
        let red = reduce.map(|o| (o.func().clone(), o.is_commutative()));
        let id = self.start(team, op, root, size_of::<T>(), count, Err(addrs), red, opts);
        self.handle(id)
    }

    // ---------------------------------------------------------------- blocking
    //
    // Every blocking call has a `*_with` form taking [`Opts`]. When nothing else is
    // in flight on this endpoint and the chosen algorithm is `shm`, it runs directly
    // over the caller's slices (`direct`); otherwise through the nonblocking call
    // (copying in and out).

    /// Barrier (blocking).
    ///
    /// # Errors
    /// See [`CollError`].
    pub fn barrier(&mut self, team: &Team) -> Result<(), CollError> {
        self.barrier_with(team, &Opts::default())
    }

    /// [`barrier`](Self::barrier) with options.
    ///
    /// # Errors
    /// See [`CollError`].
    pub fn barrier_with(&mut self, team: &Team, opts: &Opts<'_>) -> Result<(), CollError> {
        let io = Io {
            input: &[],
            out: &mut [],
            reduce: None,
        };
        if self.direct(team, OpKind::Barrier, 0, 1, 0, io, true, opts)? {
            return Ok(());
        }
        let h = self.barrier_nb(team, opts)?;
        self.wait(h)
    }

    /// Broadcast in place (blocking): non-roots' `buf` is overwritten with the root's.
    /// `root`: a team rank or where the root's data lives ([`Root`]).
    ///
    /// # Errors
    /// [`CollError::RootNotMember`] or [`CollError::Rma`] for a bad data root
    /// ([`Root`]); see [`CollError`].
    pub fn broadcast<T: Elem>(
        &mut self,
        team: &Team,
        root: impl Into<Root>,
        buf: &mut [T],
    ) -> Result<(), CollError> {
        self.broadcast_with(team, root, buf, &Opts::default())
    }

    /// [`broadcast`](Self::broadcast) with options.
    ///
    /// # Errors
    /// As [`broadcast`](Self::broadcast).
    pub fn broadcast_with<T: Elem>(
        &mut self,
        team: &Team,
        root: impl Into<Root>,
        buf: &mut [T],
        opts: &Opts<'_>,
    ) -> Result<(), CollError> {
        let count = buf.len();
        let root = self.root_rank(team, OpKind::Broadcast, root, size_of_val(buf))?;
        let io = if team.rank() == root {
            // The root's output is its input: nothing to copy.
            Io {
                input: bytemuck::cast_slice(buf),
                out: &mut [],
                reduce: None,
            }
        } else {
            Io {
                input: &[],
                out: bytemuck::cast_slice_mut(buf),
                reduce: None,
            }
        };
        if self.direct(
            team,
            OpKind::Broadcast,
            root,
            size_of::<T>(),
            count,
            io,
            true,
            opts,
        )? {
            return Ok(());
        }
        let h = self.broadcast_nb(team, root, buf.to_vec(), opts)?;
        buf.copy_from_slice(&self.wait(h)?);
        Ok(())
    }

    /// Scatter (blocking): `dst` receives this member's block of the root's `src`.
    /// `root`: a team rank or where the root's data lives ([`Root`]).
    ///
    /// # Errors
    /// [`CollError::BadLength`] at the root if `src` does not hold `P × dst.len()`
    /// elements; [`CollError::RootNotMember`] or [`CollError::Rma`] for a bad data root
    /// ([`Root`]); see [`CollError`].
    pub fn scatter<T: Elem>(
        &mut self,
        team: &Team,
        root: impl Into<Root>,
        src: &[T],
        dst: &mut [T],
    ) -> Result<(), CollError> {
        self.scatter_with(team, root, src, dst, &Opts::default())
    }

    /// [`scatter`](Self::scatter) with options.
    ///
    /// # Errors
    /// As [`scatter`](Self::scatter).
    pub fn scatter_with<T: Elem>(
        &mut self,
        team: &Team,
        root: impl Into<Root>,
        src: &[T],
        dst: &mut [T],
        opts: &Opts<'_>,
    ) -> Result<(), CollError> {
        let count = dst.len();
        let root = self.root_rank(team, OpKind::Scatter, root, size_of_val(dst))?;
        let input: &[T] = if team.rank() == root {
            check_len("scatter input", team.size() as usize * count, src.len())?;
            src
        } else {
            &[]
        };
        let io = Io {
            input: bytemuck::cast_slice(input),
            out: bytemuck::cast_slice_mut(dst),
            reduce: None,
        };
        if self.direct(
            team,
            OpKind::Scatter,
            root,
            size_of::<T>(),
            count,
            io,
            true,
            opts,
        )? {
            return Ok(());
        }
        let h = self.scatter_nb(team, root, input.to_vec(), count, opts)?;
        dst.copy_from_slice(&self.wait(h)?);
        Ok(())
    }

    /// Gather (blocking): at the root `dst` (`P × src.len()`) receives every block;
    /// elsewhere `dst` is untouched (may be empty). `root`: a team rank or where the
    /// root's output lives ([`Root`]).
    ///
    /// # Errors
    /// [`CollError::BadLength`] for a root `dst` of the wrong length;
    /// [`CollError::RootNotMember`] or [`CollError::Rma`] for a bad data root
    /// ([`Root`]); see [`CollError`].
    pub fn gather<T: Elem>(
        &mut self,
        team: &Team,
        root: impl Into<Root>,
        src: &[T],
        dst: &mut [T],
    ) -> Result<(), CollError> {
        self.gather_with(team, root, src, dst, &Opts::default())
    }

    /// [`gather`](Self::gather) with options.
    ///
    /// # Errors
    /// As [`gather`](Self::gather).
    pub fn gather_with<T: Elem>(
        &mut self,
        team: &Team,
        root: impl Into<Root>,
        src: &[T],
        dst: &mut [T],
        opts: &Opts<'_>,
    ) -> Result<(), CollError> {
        let root = self.root_rank(team, OpKind::Gather, root, size_of_val(src))?;
        let is_root = team.rank() == root;
        let out: &mut [T] = if is_root {
            check_len("gather output", src.len() * team.size() as usize, dst.len())?;
            dst
        } else {
            &mut []
        };
        let io = Io {
            input: bytemuck::cast_slice(src),
            out: bytemuck::cast_slice_mut(out),
            reduce: None,
        };
        if self.direct(
            team,
            OpKind::Gather,
            root,
            size_of::<T>(),
            src.len(),
            io,
            true,
            opts,
        )? {
            return Ok(());
        }
        let h = self.gather_nb(team, root, src.to_vec(), opts)?;
        let v = self.wait(h)?;
        if is_root {
            out.copy_from_slice(&v);
        }
        Ok(())
    }

    /// gather_all (blocking); `dst` has `P × src.len()` elements.
    ///
    /// # Errors
    /// [`CollError::BadLength`].
    pub fn gather_all<T: Elem>(
        &mut self,
        team: &Team,
        src: &[T],
        dst: &mut [T],
    ) -> Result<(), CollError> {
        self.gather_all_with(team, src, dst, &Opts::default())
    }

    /// [`gather_all`](Self::gather_all) with options.
    ///
    /// # Errors
    /// [`CollError::BadLength`].
    pub fn gather_all_with<T: Elem>(
        &mut self,
        team: &Team,
        src: &[T],
        dst: &mut [T],
        opts: &Opts<'_>,
    ) -> Result<(), CollError> {
        let p = team.size() as usize;
        check_len("gather_all output", src.len() * p, dst.len())?;
        self.symmetric(team, OpKind::GatherAll, src.len(), src, dst, None, opts)
    }

    /// Exchange (blocking); `src` and `dst` have `P` blocks.
    ///
    /// # Errors
    /// [`CollError::BadLength`].
    pub fn exchange<T: Elem>(
        &mut self,
        team: &Team,
        src: &[T],
        dst: &mut [T],
    ) -> Result<(), CollError> {
        self.exchange_with(team, src, dst, &Opts::default())
    }

    /// [`exchange`](Self::exchange) with options.
    ///
    /// # Errors
    /// [`CollError::BadLength`].
    pub fn exchange_with<T: Elem>(
        &mut self,
        team: &Team,
        src: &[T],
        dst: &mut [T],
        opts: &Opts<'_>,
    ) -> Result<(), CollError> {
        let p = team.size() as usize;
        check_len("exchange input", src.len().div_ceil(p) * p, src.len())?;
        check_len("exchange output", src.len(), dst.len())?;
        self.symmetric(team, OpKind::Exchange, src.len() / p, src, dst, None, opts)
    }

    /// Reduce (blocking): the root's `dst` gets the reduction; elsewhere untouched.
    /// `root`: a team rank or where the root's output lives ([`Root`]).
    ///
    /// # Errors
    /// [`CollError::BadLength`]; [`CollError::RootNotMember`] or [`CollError::Rma`] for
    /// a bad data root ([`Root`]); see [`CollError`].
    pub fn reduce<T: Elem>(
        &mut self,
        team: &Team,
        root: impl Into<Root>,
        src: &[T],
        dst: &mut [T],
        op: &ReduceOp<T>,
    ) -> Result<(), CollError> {
        self.reduce_with(team, root, src, dst, op, &Opts::default())
    }

    /// [`reduce`](Self::reduce) with options.
    ///
    /// # Errors
    /// As [`reduce`](Self::reduce).
    pub fn reduce_with<T: Elem>(
        &mut self,
        team: &Team,
        root: impl Into<Root>,
        src: &[T],
        dst: &mut [T],
        op: &ReduceOp<T>,
        opts: &Opts<'_>,
    ) -> Result<(), CollError> {
        let root = self.root_rank(team, OpKind::Reduce, root, size_of_val(src))?;
        let is_root = team.rank() == root;
        let out: &mut [T] = if is_root {
            check_len("reduce output", src.len(), dst.len())?;
            dst
        } else {
            &mut []
        };
        let io = Io {
            input: bytemuck::cast_slice(src),
            out: bytemuck::cast_slice_mut(out),
            reduce: Some(op.func()),
        };
        let (elem, comm) = (size_of::<T>(), op.is_commutative());
        if self.direct(team, OpKind::Reduce, root, elem, src.len(), io, comm, opts)? {
            return Ok(());
        }
        let h = self.reduce_nb(team, root, src.to_vec(), op, opts)?;
        let v = self.wait(h)?;
        if is_root {
            out.copy_from_slice(&v);
        }
        Ok(())
    }

    /// Allreduce (blocking).
    ///
    /// # Errors
    /// [`CollError::BadLength`].
    pub fn allreduce<T: Elem>(
        &mut self,
        team: &Team,
        src: &[T],
        dst: &mut [T],
        op: &ReduceOp<T>,
    ) -> Result<(), CollError> {
        self.allreduce_with(team, src, dst, op, &Opts::default())
    }

    /// [`allreduce`](Self::allreduce) with options.
    ///
    /// # Errors
    /// [`CollError::BadLength`].
    pub fn allreduce_with<T: Elem>(
        &mut self,
        team: &Team,
        src: &[T],
        dst: &mut [T],
        op: &ReduceOp<T>,
        opts: &Opts<'_>,
    ) -> Result<(), CollError> {
        check_len("allreduce output", src.len(), dst.len())?;
        self.symmetric(team, OpKind::Allreduce, src.len(), src, dst, Some(op), opts)
    }

    /// Allreduce in place (blocking).
    ///
    /// # Errors
    /// See [`CollError`].
    pub fn allreduce_in_place<T: Elem>(
        &mut self,
        team: &Team,
        buf: &mut [T],
        op: &ReduceOp<T>,
    ) -> Result<(), CollError> {
        self.allreduce_in_place_with(team, buf, op, &Opts::default())
    }

    /// [`allreduce_in_place`](Self::allreduce_in_place) with options.
    ///
    /// # Errors
    /// See [`CollError`].
    pub fn allreduce_in_place_with<T: Elem>(
        &mut self,
        team: &Team,
        buf: &mut [T],
        op: &ReduceOp<T>,
        opts: &Opts<'_>,
    ) -> Result<(), CollError> {
        // This member's own contribution is combined after earlier members' (rank
        // order), so the input is kept apart in a buffer the endpoint reuses.
        let count = buf.len();
        let mut tmp = std::mem::take(&mut self.tmp);
        tmp.clear();
        tmp.extend_from_slice(bytemuck::cast_slice(buf));
        let io = Io {
            input: &tmp,
            out: bytemuck::cast_slice_mut(buf),
            reduce: Some(op.func()),
        };
        let (elem, comm) = (size_of::<T>(), op.is_commutative());
        let res = self.direct(team, OpKind::Allreduce, 0, elem, count, io, comm, opts);
        self.tmp = tmp;
        if res? {
            return Ok(());
        }
        let h = self.allreduce_nb(team, buf.to_vec(), op, opts)?;
        buf.copy_from_slice(&self.wait(h)?);
        Ok(())
    }

    /// reduce_scatter (blocking); `src` has `P × dst.len()` elements.
    ///
    /// # Errors
    /// [`CollError::BadLength`].
    pub fn reduce_scatter<T: Elem>(
        &mut self,
        team: &Team,
        src: &[T],
        dst: &mut [T],
        op: &ReduceOp<T>,
    ) -> Result<(), CollError> {
        self.reduce_scatter_with(team, src, dst, op, &Opts::default())
    }

    /// [`reduce_scatter`](Self::reduce_scatter) with options.
    ///
    /// # Errors
    /// [`CollError::BadLength`].
    pub fn reduce_scatter_with<T: Elem>(
        &mut self,
        team: &Team,
        src: &[T],
        dst: &mut [T],
        op: &ReduceOp<T>,
        opts: &Opts<'_>,
    ) -> Result<(), CollError> {
        let p = team.size() as usize;
        check_len("reduce_scatter input", dst.len() * p, src.len())?;
        let kind = OpKind::ReduceScatter;
        self.symmetric(team, kind, dst.len(), src, dst, Some(op), opts)
    }

    /// Inclusive scan (blocking).
    ///
    /// # Errors
    /// [`CollError::BadLength`].
    pub fn scan<T: Elem>(
        &mut self,
        team: &Team,
        src: &[T],
        dst: &mut [T],
        op: &ReduceOp<T>,
    ) -> Result<(), CollError> {
        self.scan_with(team, src, dst, op, &Opts::default())
    }

    /// [`scan`](Self::scan) with options.
    ///
    /// # Errors
    /// [`CollError::BadLength`].
    pub fn scan_with<T: Elem>(
        &mut self,
        team: &Team,
        src: &[T],
        dst: &mut [T],
        op: &ReduceOp<T>,
        opts: &Opts<'_>,
    ) -> Result<(), CollError> {
        check_len("scan output", src.len(), dst.len())?;
        self.symmetric(team, OpKind::Scan, src.len(), src, dst, Some(op), opts)
    }

    /// Exclusive scan (blocking); team rank 0's `dst` is untouched.
    ///
    /// # Errors
    /// [`CollError::BadLength`].
    pub fn exscan<T: Elem>(
        &mut self,
        team: &Team,
        src: &[T],
        dst: &mut [T],
        op: &ReduceOp<T>,
    ) -> Result<(), CollError> {
        self.exscan_with(team, src, dst, op, &Opts::default())
    }

    /// [`exscan`](Self::exscan) with options.
    ///
    /// # Errors
    /// [`CollError::BadLength`].
    pub fn exscan_with<T: Elem>(
        &mut self,
        team: &Team,
        src: &[T],
        dst: &mut [T],
        op: &ReduceOp<T>,
        opts: &Opts<'_>,
    ) -> Result<(), CollError> {
        check_len("exscan output", src.len(), dst.len())?;
        let out: &mut [T] = if team.rank() > 0 { dst } else { &mut [] };
        self.symmetric(team, OpKind::Exscan, src.len(), src, out, Some(op), opts)
    }

    /// The body of the blocking calls whose output has the length [`OpKind::shape`]
    /// gives (checked by the caller): `direct`, else the nonblocking call and a copy
    /// of its output into `dst`.
    #[allow(clippy::too_many_arguments)]
    fn symmetric<T: Elem>(
        &mut self,
        team: &Team,
        kind: OpKind,
        count: usize,
        src: &[T],
        dst: &mut [T],
        op: Option<&ReduceOp<T>>,
        opts: &Opts<'_>,
    ) -> Result<(), CollError> {
        let io = Io {
            input: bytemuck::cast_slice(src),
            out: bytemuck::cast_slice_mut(dst),
            reduce: op.map(ReduceOp::func),
        };
        let comm = op.is_none_or(ReduceOp::is_commutative);
        if self.direct(team, kind, 0, size_of::<T>(), count, io, comm, opts)? {
            return Ok(());
        }
        let h = self.start_owned(team, kind, 0, count, src.to_vec(), op, opts)?;
        let v = self.wait(h)?;
        dst.copy_from_slice(&v);
        Ok(())
    }
}

/// The bytes of `v`: its own allocation when `T` has the alignment of a byte (no
/// copy), else a copy.
fn into_bytes<T: Pod>(v: Vec<T>) -> Vec<u8> {
    bytemuck::allocation::try_cast_vec::<T, u8>(v)
        .unwrap_or_else(|(_, v)| bytemuck::cast_slice::<T, u8>(&v).to_vec())
}

fn check_len(what: &'static str, expected: usize, got: usize) -> Result<(), CollError> {
    if expected == got {
        Ok(())
    } else {
        Err(CollError::BadLength {
            what,
            expected,
            got,
        })
    }
}

fn place_input(s: &Schedule, work: &mut [u8], bytes: &[u8]) -> Result<(), CollError> {
    for (src, dst) in &s.input {
        if src.end > bytes.len() {
            return Err(CollError::BadLength {
                what: "input (bytes)",
                expected: src.end,
                got: bytes.len(),
            });
        }
        work[*dst..*dst + src.len()].copy_from_slice(&bytes[src.clone()]);
    }
    Ok(())
}

fn shift_tags(s: &mut Schedule, by: u32) {
    for r in &mut s.rounds {
        for x in &mut r.sends {
            x.tag += by;
        }
        for x in &mut r.recvs {
            x.tag += by;
        }
    }
}

/// CPUs of this host: the count in `/sys/devices/system/cpu/online` (the same for
/// every process on the host, whatever its affinity; a pinned rank still sees them
/// all), else `std::thread::available_parallelism`, else 0 (unknown). Read once per
/// `CollEp` ([`Tuner::set_host_cpus`]).
fn host_cpus() -> u32 {
    let listed = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| count_cpu_list(s.trim()));
    listed
        .or_else(|| {
            std::thread::available_parallelism()
                .ok()
                .map(|n| n.get() as u32)
        })
        .unwrap_or(0)
}

/// Counts a kernel CPU list such as `0-3,8-11` or `0` (`None` if malformed).
fn count_cpu_list(s: &str) -> Option<u32> {
    let mut n = 0u32;
    for part in s.split(',') {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?),
            None => {
                let a = part.parse::<u32>().ok()?;
                (a, a)
            }
        };
        n += b.checked_sub(a)? + 1;
    }
    (n > 0).then_some(n)
}

#[cfg(test)]
mod cpu_list_tests {
    use super::count_cpu_list;

    #[test]
    fn cpu_lists() {
        assert_eq!(count_cpu_list("0"), Some(1));
        assert_eq!(count_cpu_list("0-1"), Some(2));
        assert_eq!(count_cpu_list("0-3,8-11"), Some(8));
        assert_eq!(count_cpu_list("0,2,4-5"), Some(4));
        assert_eq!(count_cpu_list(""), None);
        assert_eq!(count_cpu_list("3-1"), None);
        assert_eq!(count_cpu_list("x"), None);
    }
}
