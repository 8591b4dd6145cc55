//! The schedule engine: how one collective is started and advanced on one member.
//!
//! A collective in flight is an [`OpState`] in the layer's table, keyed by a local id
//! in start order. Its body is one of four kinds: a [`Schedule`] executed over AMs
//! ([`SchedOp`], this module), a shared-memory collective or flag barrier
//! ([`crate::shmdrive`]), or a hierarchical collective whose stages are collectives of
//! sub-teams ([`crate::hierdrive`]). Nothing here waits: sends that meet back-pressure
//! stay queued in the collective and are retried by the next advance, which the
//! layer's progress hook runs on every poll of the endpoint while collectives are in
//! flight.
//!
//! A collective's output goes to its event's completer when it is complete
//! ([`Coll::settle`]); the state stays in the table while work remains in the
//! background (acknowledgements of rendezvous gets, the exit of an out-no
//! collective), and a failed collective is removed at once.

use crate::algo::{Algorithm, Builtin, Kind, PlanCtx, Query};
use crate::barrier::{ENTRY_LEN, Entry, ShmBar, entry_schedule};
use crate::error::CollError;
use crate::hier::HierOp;
use crate::layer::Coll;
use crate::msg::{CTL, Ctl, H_ACK, H_EAGER, H_LONG, H_PROBE, H_RDV, H_READY, Probe, split64};
use crate::op::{AddrMode, OpKind, Opts, SyncMode, Transport};
use crate::optable::{Body, OpState, Out, OwnedRing, PendingSend, SchedOp};
use crate::path::ring_eligible;
use crate::rma::GlobalPtr;
use crate::rootcheck::{self, Desc, STALL, Stall, mismatch};
use crate::sched::{self, Action, ReduceFn, Schedule, span};
use crate::shm::{OwnedShm, ShmOp};
use crate::single::Single;
use crate::teams::ext;
use crate::tuning::query;
use gex_core::event::{Data, OpCompleter};
use gex_core::layer::Cx;
use gex_core::spi::Conduit;
use gex_core::{Category, EpAddr, HandlerId, Injected, Team};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

mod transport;
use transport::OpCtx;

/// Tags of the entry barrier (in-all) and of the exit barrier (out-all).
pub(crate) const TAG_PRE: u32 = 0x4000_0000;
pub(crate) const TAG_POST: u32 = 0x6000_0000;

/// What a collective is started with.
pub(crate) struct Start<'a> {
    pub(crate) kind: OpKind,
    /// Root (team rank) of rooted operations, else 0.
    pub(crate) root: u32,
    /// Bytes per element.
    pub(crate) elem: usize,
    /// Elements per block.
    pub(crate) count: usize,
    /// The member's input (local address mode), or every member's offsets (single).
    pub(crate) input: Input<'a>,
    /// Reduction and commutativity (reducing operations).
    pub(crate) reduce: Option<(ReduceFn, bool)>,
    pub(crate) opts: Opts<'a>,
    /// The element type's code ([`crate::op::elem_code`]) and the reduction's
    /// ([`crate::op::reduce_name`]), for the descriptor members compare.
    pub(crate) codes: (u8, u8),
    /// The descriptor members compare, when the caller has it (a stage of a
    /// hierarchical collective: its parent's, with the stage's context); else made
    /// from the fields above ([`Start::desc`]).
    pub(crate) desc: Option<Desc>,
}

impl Start<'_> {
    /// The descriptor members compare ([`Desc`]).
    pub(crate) fn desc(&self) -> Desc {
        self.desc.unwrap_or_else(|| {
            let size = (self.elem, self.count);
            Desc::of_call(self.kind, self.root, self.codes, size, self.opts.sync)
        })
    }
}

/// The data of a collective being started.
pub(crate) enum Input<'a> {
    /// This member's input blocks (a barrier: its entry).
    Owned(Vec<u8>),
    /// Single address mode: every member's segment offsets.
    Single(&'a Single),
}

/// Sends `payload` without waiting; false on back-pressure (nothing sent).
#[allow(clippy::too_many_arguments)]
pub(crate) fn try_send<C: Conduit>(
    cx: &mut Cx<'_, C>,
    dst: EpAddr,
    h: HandlerId,
    cat: Category,
    args: &[u32],
    payload: &[u8],
    offset: usize,
) -> Result<bool, CollError> {
    Ok(cx.try_request(dst, h, cat, args, payload, offset)? == Injected::Sent)
}

impl Coll {
    /// Sends a control message now, or queues it behind earlier ones.
    pub(crate) fn ctl<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        dst: EpAddr,
        h: u8,
        args: &[u32],
    ) -> Result<(), CollError> {
        let handler = self.wire.hid(h);
        if self.wire.outbox.is_empty() && try_send(cx, dst, handler, CTL, args, &[], 0)? {
            return Ok(());
        }
        self.wire.outbox.push_back(Ctl {
            dst,
            handler,
            args: args.to_vec(),
        });
        Ok(())
    }

    /// Sends queued control messages until back-pressure.
    pub(crate) fn flush_outbox<C: Conduit>(&mut self, cx: &mut Cx<'_, C>) {
        while let Some(c) = self.wire.outbox.front() {
            match try_send(cx, c.dst, c.handler, CTL, &c.args, &[], 0) {
                Ok(false) => return,
                // A control message to a peer that is gone: nothing to retry.
                Ok(true) | Err(_) => {
                    self.wire.outbox.pop_front();
                }
            }
        }
    }

    /// Starts a collective on `team` (resolved: it carries the layer's extension);
    /// returns its id. `done` receives its outcome.
    pub(crate) fn start_op<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        team: &Team,
        s: Start<'_>,
        done: Option<OpCompleter>,
    ) -> Result<u64, CollError> {
        let p = team.size();
        if s.root >= p {
            return Err(CollError::BadRank {
                rank: s.root,
                size: p,
            });
        }
        self.check_team(cx, team)?;
        let n = s.elem * s.count;
        let addr = match s.input {
            Input::Owned(_) => AddrMode::Local,
            Input::Single(_) => AddrMode::Single,
        };
        let commutative = s.reduce.as_ref().is_none_or(|x| x.1);
        let q = query(team, s.kind, n, addr, &s.opts, commutative);
        let algo = self.tuning.choose(team, &q, &s.opts)?;
        let x = ext(team);
        let seq = x.next_seq();
        let desc = s.desc();
        let belief = desc.belief();
        let body = match self.body(cx, team, seq, &algo, q, s, &desc) {
            Ok(b) => b,
            Err(e) => {
                if let Some(d) = done {
                    d.fail(e.clone());
                }
                return Err(e);
            }
        };
        let st = OpState {
            team: team.clone(),
            seq,
            kind: q.op,
            desc,
            belief,
            body,
            started: false,
            result: None,
            done,
            taken: false,
            stall: Stall::default(),
            probers: Vec::new(),
        };
        let id = self.ops.add(st);
        cx.set_busy();
        self.agree
            .history
            .started((team.id(), seq), team.rank(), desc);
        self.early_checks(id);
        self.advance(cx, id);
        self.settle(id);
        self.reap(id);
        Ok(id)
    }

    /// The body of a new collective (with descriptor `desc`).
    #[allow(clippy::too_many_arguments)]
    fn body<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        team: &Team,
        seq: u32,
        algo: &Arc<dyn Algorithm>,
        q: Query,
        s: Start<'_>,
        desc: &Desc,
    ) -> Result<Body, CollError> {
        let (p, r) = (team.size(), team.rank());
        let n = s.elem * s.count;
        if algo.is_hierarchical() {
            let Input::Owned(bytes) = s.input else {
                return Err(CollError::Unsupported {
                    algorithm: algo.name().to_string(),
                    op: s.kind,
                    size: p,
                });
            };
            let h = HierOp::new(s.kind, s.root, (s.elem, s.count), bytes, s.reduce);
            return Ok(Body::Hier(Box::new(h)));
        }
        if algo.is_shared_memory() {
            let x = ext(team);
            let ch = x.shm.as_ref().map_or(0, |t| t.ch);
            if let Input::Owned(bytes) = &s.input {
                if s.kind == OpKind::Barrier {
                    let k = x.next_barrier();
                    return Ok(Body::Bar(ShmBar::new(p, k, Entry::decode(bytes))));
                }
                if ring_eligible(s.kind, n, s.opts.sync) {
                    let Input::Owned(input) = s.input else {
                        unreachable!("matched above")
                    };
                    let (base, _) = self.ring_base(team, desc);
                    let op =
                        crate::ring::Bcast::new(seq, base, s.root, n, self.tuning.ring_packs(p));
                    self.tuning.counters.ring_calls += 1;
                    let out = if r == s.root {
                        input.clone()
                    } else {
                        vec![0; n]
                    };
                    return Ok(Body::Ring(Box::new(OwnedRing { op, input, out })));
                }
                if ShmOp::fits(s.kind, p, s.elem, ch) {
                    let (_, out_blocks) = s.kind.shape(p, r, s.root);
                    let op = ShmOp::new(
                        s.kind,
                        (p, r, s.root),
                        s.elem,
                        n,
                        s.opts.sync,
                        (team.id(), seq),
                        ch,
                    );
                    let Input::Owned(bytes) = s.input else {
                        unreachable!("matched above")
                    };
                    let red = s.reduce.map(|x| x.0);
                    let shm = OwnedShm::new(op, bytes, out_blocks * n, red);
                    return Ok(Body::Shm(Box::new(shm)));
                }
            }
            // An element larger than a chunk: a message algorithm, chosen alike on
            // every member.
            let a = self
                .tuning
                .tuner_mut()
                .select(&Query { shm: false, ..q }, None)?
                .clone();
            return self.body(cx, team, seq, &a, Query { shm: false, ..q }, s, desc);
        }
        let sched = self.sched_body(cx, team, algo.as_ref(), &q, s)?;
        Ok(Body::Sched(Box::new(sched)))
    }

    /// The schedule of a collective that moves by messages.
    fn sched_body<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        team: &Team,
        algo: &dyn Algorithm,
        q: &Query,
        s: Start<'_>,
    ) -> Result<SchedOp, CollError> {
        let (p, r) = (team.size(), team.rank());
        let n = s.elem * s.count;
        let ctx = PlanCtx {
            op: s.kind,
            size: p,
            rank: r,
            root: s.root,
            block: n,
            elem: s.elem,
            commutative: q.commutative,
        };
        let mut sc = algo.plan(&ctx);
        let mut reduce = s.reduce.map(|x| x.0);
        if s.kind == OpKind::Barrier {
            sc = entry_schedule(sc, TAG_PRE);
            reduce = Some(crate::barrier::merge_fn());
        }
        let transport = if sc.symmetric && (q.addr == AddrMode::Single || q.scratch) {
            algo.transport()
        } else {
            Transport::Eager
        };
        with_sync_rounds(&mut sc, &s.opts, ctx);
        let (in_blocks, out_blocks) = s.kind.shape(p, r, s.root);
        let mut work = vec![0u8; sc.work_len];
        let (out, mirror) = match s.input {
            Input::Owned(bytes) => {
                place_input(&sc, &mut work, &bytes)?;
                let mirror = (transport != Transport::Eager)
                    .then(|| ext(team).scratch.iter().map(|x| x.0).collect::<Vec<_>>());
                (Out::Local, mirror)
            }
            Input::Single(single) => {
                let io = SingleIo {
                    single,
                    n,
                    in_len: in_blocks * n,
                    out_len: out_blocks * n,
                };
                self.single_input(cx, team, &sc, &mut work, transport, io, s.kind)?
            }
        };
        let single = q.addr == AddrMode::Single;
        let out_no = s.opts.sync.output == SyncMode::No && single;
        let uses_scratch = !single && transport != Transport::Eager;
        // Through scratch, a put may land only once the receiver started this
        // collective (and so finished the previous one using the scratch).
        let need_ready =
            transport == Transport::Put && (s.opts.sync.input == SyncMode::My || uses_scratch);
        Ok(SchedOp {
            sched: sc,
            work,
            reduce,
            transport,
            mirror,
            need_ready,
            uses_scratch,
            round: 0,
            pending: Vec::new(),
            readies: Vec::new(),
            round_open: false,
            applied: 0,
            gets: HashMap::new(),
            fetched: HashMap::new(),
            acks_expected: 0,
            out,
            out_no,
            probed: None,
            asked: None,
        })
    }

    /// Single address mode: checks the offsets, reads this member's input from its
    /// segment into the work buffer, and gives the output's place and the mirror.
    #[allow(clippy::too_many_arguments)]
    fn single_input<C: Conduit>(
        &self,
        cx: &mut Cx<'_, C>,
        team: &Team,
        sc: &Schedule,
        work: &mut [u8],
        transport: Transport,
        io: SingleIo<'_>,
        kind: OpKind,
    ) -> Result<(Out, Option<Vec<usize>>), CollError> {
        let (p, r) = (team.size() as usize, team.rank() as usize);
        let single = io.single;
        if single.dst.len() != p || single.src.as_ref().is_some_and(|v| v.len() != p) {
            return Err(CollError::BadAddress(format!(
                "offset lists must have {p} entries"
            )));
        }
        let dst = single.dst[r];
        let src = match &single.src {
            Some(v) => v[r],
            None if matches!(kind, OpKind::Gather | OpKind::GatherAll) => dst + r * io.n,
            None => dst,
        };
        for (o, l) in [(src, io.in_len), (dst, io.out_len)] {
            if o.checked_add(l).is_none_or(|e| e > self.teams.seg_len()) {
                return Err(CollError::BadAddress(format!(
                    "[{o}, +{l}) is outside the {}-byte segment",
                    self.teams.seg_len()
                )));
            }
        }
        let mut bytes = vec![0u8; io.in_len];
        cx.segment().read(src, &mut bytes)?;
        place_input(sc, work, &bytes)?;
        let mirror = (transport != Transport::Eager).then(|| single.dst.clone());
        if mirror.is_some() && sc.work_len != io.out_len {
            return Err(CollError::BadAddress(
                "mirrored schedule does not match the output".into(),
            ));
        }
        Ok((Out::Seg(dst), mirror))
    }

    /// Advances collective `id` as far as it can without waiting; returns (and
    /// records, for the stall checks) whether it made progress.
    pub(crate) fn advance<C: Conduit>(&mut self, cx: &mut Cx<'_, C>, id: u64) -> bool {
        let Some(st) = self.ops.get(&id) else {
            return false;
        };
        if st.result.is_some() || st.taken {
            return false;
        }
        if self.teams.any_failed() {
            // Its team failed (members disagreed on this or an earlier collective):
            // so does every later collective of it still running here.
            let e = self.teams.failed(st.team.id());
            if let Some(e) = e.filter(|e| rootcheck::covers(e, st.seq)) {
                let e = e.clone();
                self.fail_op(id, e, false);
                return true;
            }
        }
        // Over messages the endpoint may sleep until one arrives: polls are rare.
        let rare = match &st.body {
            Body::Sched(_) => self.shm.policy() != gex_core::WaitPolicy::Spin,
            _ => self.shm.polls_rare(),
        };
        let progressed = match &st.body {
            Body::Sched(_) => self.advance_sched(cx, id),
            Body::Shm(_) | Body::Ring(_) | Body::Bar(_) => self.advance_shm(cx, id),
            Body::Hier(_) => self.advance_hier(cx, id),
        };
        let due = match self.ops.get_mut(&id) {
            Some(st) if progressed || st.result.is_some() => {
                st.stall.progressed();
                false
            }
            Some(st) => st.stall.fruitless(rare),
            None => false,
        };
        if due {
            self.stall_checks(cx, id);
        }
        progressed
    }

    /// Advances a schedule; true if it made progress.
    fn advance_sched<C: Conduit>(&mut self, cx: &mut Cx<'_, C>, id: u64) -> bool {
        let busy = {
            let st = &self.ops[&id];
            !st.started && st.uses_scratch() && self.scratch_busy(st)
        };
        if busy {
            return false;
        }
        let Some(mut st) = self.ops.remove(&id) else {
            return false;
        };
        let r = self.step_sched(cx, &mut st);
        let (progressed, failed) = match r {
            Ok(p) => (p, None),
            Err(e @ CollError::Mismatch { found: None, .. }) => match self.agree.disagreeing.take()
            {
                // A message of another belief: ask its sender what differs first.
                Some(q) => (self.ask(cx, &mut st, q), None),
                None => (true, Some(e)),
            },
            Err(e @ CollError::Mismatch { .. }) => (true, Some(e)),
            Err(e) => {
                st.result = Some(Err(e));
                (true, None)
            }
        };
        self.ops.put_back(id, st);
        if let Some(e) = failed {
            self.fail_op(id, e, true);
        }
        progressed
    }

    /// Collective `st` took a message of another belief from member `q`: asks `q`
    /// (a probe with this member's descriptor) which field differs; `q` answers with
    /// an abort naming it ([`crate::rootcheck`]). True (it did something).
    #[cold]
    fn ask<C: Conduit>(&mut self, cx: &mut Cx<'_, C>, st: &mut OpState, q: u32) -> bool {
        let Body::Sched(s) = &mut st.body else {
            return true;
        };
        if s.asked.is_none() {
            s.asked = Some(std::time::Instant::now());
            let args = Probe::args(st.team.id(), st.seq, st.team.rank(), &st.desc);
            let dst = st.team.members()[q as usize];
            let _ = self.ctl(cx, dst, H_PROBE, &args);
        }
        true
    }

    /// An earlier collective of `st`'s team still uses the scratch space here.
    fn scratch_busy(&self, st: &OpState) -> bool {
        self.ops.values().any(|o| {
            o.uses_scratch()
                && o.team.id() == st.team.id()
                && o.seq < st.seq
                && !(o.result.is_some() && self.acks_done(o))
        })
    }

    /// Every rendezvous get of `st` was acknowledged (or it has none).
    pub(crate) fn acks_done(&self, st: &OpState) -> bool {
        let Body::Sched(s) = &st.body else {
            return true;
        };
        s.acks_expected == 0
            || self
                .wire
                .mb
                .acks
                .get(&(st.team.id(), st.seq))
                .copied()
                .unwrap_or(0)
                >= s.acks_expected
    }

    /// One advance of a schedule (see [`sched`] for the round semantics).
    fn step_sched<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        st: &mut OpState,
    ) -> Result<bool, CollError> {
        let mut progressed = false;
        if let Body::Sched(s) = &st.body {
            if let Some(t) = s.asked {
                // Waiting for the answer to its question (the abort fails it); none
                // within two stall intervals: fails without knowing what differs.
                if t.elapsed() < 2 * STALL {
                    return Ok(false);
                }
                return Err(mismatch(st.team.id(), st.seq, None));
            }
        }
        if !st.started {
            st.started = true;
            progressed = true;
            self.begin_sched(cx, st)?;
        }
        if !self.send_readies(cx, st)? {
            return Ok(progressed);
        }
        let Body::Sched(s) = &mut st.body else {
            return Ok(progressed);
        };
        while s.round < s.sched.rounds.len() {
            if !s.round_open {
                open_round(s);
                progressed = true;
            }
            let op = OpCtx {
                team: &st.team,
                seq: st.seq,
                belief: st.belief,
            };
            progressed |= self.issue_sends(cx, op, s)?;
            let nrecv = s.sched.rounds[s.round].recvs.len();
            while s.applied < nrecv {
                let Some(msg) = self.take_recv(cx, op, s)? else {
                    break;
                };
                apply(cx, &st.team, s, &msg)?;
                progressed = true;
            }
            if s.applied < nrecv || !s.pending.is_empty() {
                return Ok(progressed);
            }
            let post = std::mem::take(&mut s.sched.rounds[s.round].post);
            for l in &post {
                sched::apply_local(&mut s.work, l, s.reduce.as_ref());
            }
            s.round += 1;
            s.round_open = false;
        }
        let acked = self.acks_done(st);
        let Body::Sched(s) = &mut st.body else {
            return Ok(progressed);
        };
        if st.result.is_none() && (s.out_no || acked) {
            st.result = Some(finish_output(cx, s));
            progressed = true;
        }
        Ok(progressed)
    }

    /// Writes the placed input through to the mirror and lists the READY messages.
    fn begin_sched<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        st: &mut OpState,
    ) -> Result<(), CollError> {
        let me = st.team.rank();
        let Body::Sched(s) = &mut st.body else {
            return Ok(());
        };
        if let Some(m) = &s.mirror {
            for (src, at) in &s.sched.input {
                let piece = &s.work[*at..*at + src.len()];
                cx.segment().write(m[me as usize] + at, piece)?;
            }
        }
        if s.need_ready {
            for rd in &s.sched.rounds {
                for v in &rd.recvs {
                    if v.action == Action::Copy && uses_transport(s, &v.ranges, v.tag) {
                        s.readies.push((v.peer, v.tag));
                    }
                }
            }
        }
        Ok(())
    }

    /// Removes collective `id` if it is over: its outcome handed over and nothing left
    /// in the background (acknowledgements). True if it did.
    pub(crate) fn reap(&mut self, id: u64) -> bool {
        let Some(st) = self.ops.get(&id) else {
            return false;
        };
        let failed = st.result.as_ref().is_some_and(|r| r.is_err());
        if !(st.taken && (failed || self.acks_done(st))) {
            return false;
        }
        let st = self.ops.remove(&id).expect("present");
        self.wire.mb.acks.remove(&(st.team.id(), st.seq));
        true
    }

    /// Hands a complete collective's outcome to its event (a barrier's merged entry
    /// becomes `Ok(())` or [`CollError::BarrierMismatch`]).
    pub(crate) fn settle(&mut self, id: u64) {
        let Some(st) = self.ops.get_mut(&id) else {
            return;
        };
        if st.result.is_none() || st.done.is_none() {
            return;
        }
        let done = st.done.take().expect("checked");
        let res = st.result.take().expect("checked");
        st.taken = true;
        match res {
            Ok(bytes) if st.kind == OpKind::Barrier => match Entry::decode(&bytes).outcome() {
                Ok(()) => done.ok(),
                Err(e) => done.fail(e),
            },
            Ok(bytes) => done.done(Data::Bytes(bytes)),
            Err(e) => {
                st.result = Some(Err(e.clone()));
                done.fail(e);
            }
        }
    }
}

/// The bytes and lengths of a single-address-mode start.
struct SingleIo<'a> {
    single: &'a Single,
    n: usize,
    in_len: usize,
    out_len: usize,
}

/// Adds the entry (in-all) and exit (out-all) barrier rounds.
fn with_sync_rounds(s: &mut Schedule, opts: &Opts<'_>, ctx: PlanCtx) {
    if opts.sync.input != SyncMode::All && opts.sync.output != SyncMode::All {
        return;
    }
    let b = Builtin::new(Kind::Dissemination, 2, 0, Transport::Eager).plan(&PlanCtx {
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

/// Opens the current round: every send is pending, eager ones with their snapshot.
fn open_round(s: &mut SchedOp) {
    s.round_open = true;
    s.applied = 0;
    let round = &s.sched.rounds[s.round];
    s.pending = (0..round.sends.len())
        .map(|idx| {
            let step = &round.sends[idx];
            let eager = !uses_transport(s, &step.ranges, step.tag);
            PendingSend {
                idx,
                data: eager.then(|| sched::pack(&s.work, &step.ranges)),
                off: 0,
                ready: false,
            }
        })
        .collect();
}

/// Applies the current receive's bytes (and writes them through to the mirror).
fn apply<C: Conduit>(
    cx: &mut Cx<'_, C>,
    team: &Team,
    s: &mut SchedOp,
    msg: &[u8],
) -> Result<(), CollError> {
    let v = &s.sched.rounds[s.round].recvs[s.applied];
    if msg.len() != span(&v.ranges) {
        return Err(CollError::BadLength {
            what: "message",
            expected: span(&v.ranges),
            got: msg.len(),
        });
    }
    sched::apply_recv(&mut s.work, v, msg, s.reduce.as_ref());
    if let Some(m) = &s.mirror {
        let base = m[team.rank() as usize];
        for r in v.ranges.clone() {
            cx.segment().write(base + r.start, &s.work[r])?;
        }
    }
    s.applied += 1;
    Ok(())
}

/// The output of a schedule whose rounds are over.
fn finish_output<C: Conduit>(cx: &mut Cx<'_, C>, s: &SchedOp) -> Result<Vec<u8>, CollError> {
    let mut out = vec![0u8; s.sched.out_len];
    for (src, dst) in &s.sched.output {
        out[*dst..*dst + src.len()].copy_from_slice(&s.work[src.clone()]);
    }
    match s.out {
        Out::Local => Ok(out),
        Out::Seg(off) => {
            if s.mirror.is_none() {
                cx.segment().write(off, &out)?;
            }
            Ok(Vec::new())
        }
    }
}

/// True if a message of `ranges` with `tag` moves by the schedule's transport.
fn uses_transport(s: &SchedOp, ranges: &[Range<usize>], tag: u32) -> bool {
    s.transport != Transport::Eager && tag < TAG_PRE && ranges.len() == 1 && !ranges[0].is_empty()
}

pub(crate) fn place_input(s: &Schedule, work: &mut [u8], bytes: &[u8]) -> Result<(), CollError> {
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

const _: () = assert!(ENTRY_LEN == 16);
