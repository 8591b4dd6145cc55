//! The public API: [`CollExt`], the collectives layer's operations as methods of the
//! endpoint. The paths a collective call takes are [`crate::calls`]'s; teams are
//! made by [`crate::teamops`].

use crate::algo::{Algorithm, Query};
use crate::barrier::{BarrierFlags, Entry, Notified};
pub use crate::calls::COLL_TAG;
use crate::calls::{barrier_blocking, barrier_event};
use crate::desc::Collective;
use crate::error::CollError;
use crate::layer::{coll, resolve};
use crate::op::{OpKind, Opts};
use crate::teamops;
use crate::teams::{Scratch, ext};
use crate::tune::{Choice, Tuner};
use gex_core::event::Mode;
use gex_core::spi::Conduit;
use gex_core::{Endpoint, Team};
use std::ops::Range;
use std::sync::Arc;

/// Counters of the collectives layer on one endpoint ([`CollExt::coll_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CollStats {
    /// Collectives in flight (including completed ones still finishing in the
    /// background, and stages of hierarchical ones).
    pub in_flight: usize,
    /// Blocking calls that ran directly through shared memory over the caller's
    /// buffers (the others went through the layer's table: another collective was in
    /// flight here, or the algorithm was not `shm`).
    pub direct_calls: u64,
    /// Of those, the ones in which this member published its input by reference: it
    /// lay in its segment and the blocks were at least 16 KiB, so the readers copied
    /// straight from it (docs/coll.md 4.1).
    pub by_reference_calls: u64,
    /// Of those, the ones in which this member's private input was read by the others
    /// with `process_vm_readv` (CMA; docs/coll.md 4.1).
    pub cma_calls: u64,
    /// Of those, the ones that replayed the checks and decisions of the previous
    /// direct call of the same shape (same team, operation, root, element type size,
    /// slice lengths and reduction kind, default options; docs/coll.md 4.1,
    /// *Replayed calls*), and the blocking barriers under default options that
    /// replayed the previous one's.
    pub replayed_calls: u64,
    /// Broadcasts of at most 56 bytes that went through the small-broadcast ring
    /// (directly or in the layer's table; docs/coll.md 4.1, *Small broadcasts*).
    pub ring_calls: u64,
    /// Cells timed online so far (`GEX_COLL_TUNE=online`).
    pub online_trials: u64,
    /// Messages the layer's handlers dropped as malformed (0 in a healthy job).
    pub dropped_messages: u64,
    /// Polls after which the layer let the endpoint sleep while it waited for flags
    /// in shared memory: it had announced the sleep and every flag it waits for will
    /// wake it (docs/coll.md 2.1; under spin-then-block only after the spin part).
    pub sleep_polls: u64,
}

/// The operations of the collectives layer ([`Coll`](crate::Coll)), as methods of every endpoint
/// that carries it.
///
/// Every collective goes through one entry, [`collective`](Self::collective), with a
/// *descriptor* of the operation ([`Allreduce::new`](crate::Allreduce::new),
/// [`Broadcast::in_place`](crate::Broadcast::in_place), ...; see [`crate::desc`]) and
/// a completion *mode*: [`Blocking`](gex_core::Blocking) returns the output,
/// [`Nb`](gex_core::Nb) an [`Event`](gex_core::event::Event) to wait on with the endpoint
/// ([`Endpoint::wait`], `test`, `wait_all` over mixed events), [`Nbi`](gex_core::Nbi)
/// nothing (a [`sync_collectives`](Self::sync_collectives) waits). Descriptors over
/// borrowed slices exist in blocking mode only (the borrow must outlive the
/// transfer). Waiting on any event, or [`Endpoint::poll`], advances every collective
/// in flight: there is one progress engine.
///
/// ```
/// use gex_coll::{Allreduce, Barrier, Broadcast, BuiltinOp, Coll, CollExt, GatherAll};
/// use gex_core::{Blocking, ClientBuilder, Nb};
/// use gex_testkit::sim::{run_sim, SimConfig};
///
/// let builder = || ClientBuilder::new().layer::<gex_rma::Rma>().layer::<Coll>().segment_size(1 << 16);
/// let out = run_sim(3, SimConfig::default(), builder, |client| {
///     let mut ep = client.endpoint(0).unwrap();
///     let world = ep.world();
///     let me = world.rank() as u64;
///     // Two nonblocking collectives in flight, one event type.
///     let sum = ep.collective(&world, Allreduce::new(vec![me, 10 * me], BuiltinOp::Sum), Nb).unwrap();
///     let all = ep.collective(&world, GatherAll::new(vec![me as u8]), Nb).unwrap();
///     let all = ep.wait(all).unwrap();
///     let sum = ep.wait(sum).unwrap();
///     // Split into even and odd ranks; broadcast in place on each.
///     let sub = ep.split(&world, Some(me as u32 % 2), 0, Default::default()).unwrap().unwrap();
///     let mut b = [me as u32];
///     ep.collective(&sub, Broadcast::in_place(0, &mut b), Blocking).unwrap();
///     ep.barrier(&world).unwrap();
///     // A named nonblocking barrier.
///     let ev = ep.collective(&world, Barrier::named(7), Nb).unwrap();
///     ep.wait(ev).unwrap();
///     (sum, all, b[0])
/// });
/// assert_eq!(out[0].0, vec![3, 30]);
/// assert_eq!(out[2].1, vec![0, 1, 2]);
/// assert_eq!(out.iter().map(|x| x.2).collect::<Vec<_>>(), vec![0, 1, 0]);
/// ```
pub trait CollExt<C: Conduit> {
    /// Runs collective `op` on `team` in mode `mode`.
    ///
    /// # Collective
    /// Over every member of `team`, in the same order as the team's other
    /// collectives, with the same operation, root, counts and options everywhere.
    ///
    /// # Errors
    /// Argument errors before anything moves ([`CollError::BadLength`],
    /// [`CollError::BadRank`], [`CollError::NotMember`], a bad data root ([`Root`](crate::Root)), an
    /// algorithm that cannot run the call, [`CollError::ScratchTooSmall`]);
    /// [`CollError::Mismatch`] at once on a team whose members disagreed on an
    /// earlier collective; in blocking mode (else from the event) the collective's
    /// errors: [`CollError::Mismatch`] (members passed different descriptors),
    /// [`CollError::BarrierMismatch`], communication errors.
    fn collective<D: Collective<M>, M: Mode>(
        &mut self,
        team: &Team,
        op: D,
        mode: M,
    ) -> Result<M::Out<D::Output, CollError>, CollError>;

    /// Blocking anonymous barrier over `team`.
    ///
    /// # Collective
    /// Over `team`.
    ///
    /// # Errors
    /// [`CollError::BarrierMismatch`] if members entered the same barrier with
    /// different names (a named nonblocking or split-phase entry elsewhere).
    fn barrier(&mut self, team: &Team) -> Result<(), CollError>;

    /// Notifies this member's split-phase barrier of `team` with `id` (ignored with
    /// [`BarrierFlags::ANONYMOUS`]); must be followed by
    /// [`barrier_wait`](Self::barrier_wait) (or a successful
    /// [`barrier_try`](Self::barrier_try)) before the next notify on the team. Other
    /// collectives of the team may run in between (they are ordered like any other).
    ///
    /// # Collective
    /// Over `team`: a barrier like any other in the team's sequence.
    ///
    /// # Errors
    /// [`CollError::BarrierAlreadyNotified`]; errors of starting a collective.
    fn barrier_notify(
        &mut self,
        team: &Team,
        id: u64,
        flags: BarrierFlags,
    ) -> Result<(), CollError>;

    /// Waits for the split-phase barrier notified on `team`; `id` and `flags` must be
    /// those of the notify.
    ///
    /// # Errors
    /// [`CollError::BarrierMismatch`], on every member, if two members notified
    /// different named ids; on this member, if `id`/`flags` differ from its notify.
    /// [`CollError::BarrierNotNotified`] without a notify.
    fn barrier_wait(&mut self, team: &Team, id: u64, flags: BarrierFlags) -> Result<(), CollError>;

    /// Polls once; `Ok(true)` once the split-phase barrier of `team` is complete (it
    /// is then over), `Ok(false)` while it is not.
    ///
    /// # Errors
    /// As [`barrier_wait`](Self::barrier_wait) (an error also ends the barrier).
    fn barrier_try(&mut self, team: &Team, id: u64, flags: BarrierFlags)
    -> Result<bool, CollError>;

    /// Splits `parent` by `color`: members with the same `Some(color)` form a new team,
    /// ordered by (`key`, parent rank); `None` joins no team (returns `Ok(None)`).
    ///
    /// # Collective
    /// Over every member of `parent`, in the same order as its other collectives.
    ///
    /// # Errors
    /// [`CollError::NotMember`], [`CollError::Scratch`], or a communication error.
    fn split(
        &mut self,
        parent: &Team,
        color: Option<u32>,
        key: u32,
        scratch: Scratch,
    ) -> Result<Option<Team>, CollError>;

    /// Creates a team of the parent-team ranks `members` (in that order).
    ///
    /// # Collective
    /// Over the listed members only; they must create teams from one parent with the
    /// same list in the same order.
    ///
    /// # Errors
    /// [`CollError::BadMembers`], [`CollError::BadRank`], [`CollError::NotMember`] (the
    /// caller is not listed), [`CollError::Scratch`].
    fn create_team(
        &mut self,
        parent: &Team,
        members: &[u32],
        scratch: Scratch,
    ) -> Result<Team, CollError>;

    /// Destroys a team: frees scratch this endpoint allocated for it (once: destroying
    /// it again through a clone frees nothing). Not collective.
    ///
    /// # Errors
    /// [`CollError::TeamBusy`] if collectives of the team are in flight here;
    /// [`CollError::BadMembers`] for the world team; [`CollError::NotMember`] for a
    /// team of another endpoint.
    fn destroy_team(&mut self, team: Team) -> Result<(), CollError>;

    /// Explains which algorithm a call would use and why.
    ///
    /// # Errors
    /// As [`Tuner::select`]; [`CollError::Layer`] without the layer.
    fn explain(&mut self, q: &Query) -> Result<Choice, CollError>;

    /// Names of every registered algorithm that implements `op`.
    fn algorithms(&mut self, op: OpKind) -> Vec<String>;

    /// Runs `f` with the autotuner (cost model, algorithms, cached choices).
    ///
    /// # Errors
    /// [`CollError::Layer`] if the endpoint does not carry the layer.
    fn tuner<R>(&mut self, f: impl FnOnce(&mut Tuner) -> R) -> Result<R, CollError>;

    /// Adds an algorithm (for example a NIC collective) for the tuner to consider and
    /// for [`Opts::algorithm`] to name. Every rank must register the same algorithms.
    ///
    /// ```
    /// use gex_coll::{sched::Schedule, Algorithm, Broadcast, Builtin, Coll, CollExt, Kind, LogGP, OpKind, PlanCtx, Query, Transport};
    /// use gex_core::{Blocking, ClientBuilder};
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
    /// let builder = || ClientBuilder::new().layer::<gex_rma::Rma>().layer::<Coll>().segment_size(1 << 16);
    /// let out = run_sim(3, SimConfig::default(), builder, |client| {
    ///     let mut ep = client.endpoint(0).unwrap();
    ///     ep.register_algorithm(Arc::new(Nic(Builtin::new(Kind::Knomial, 2, 0, Transport::Eager)))).unwrap();
    ///     let w = ep.world();
    ///     let q = Query::plain(OpKind::Broadcast, 3, 8);
    ///     assert_eq!(ep.explain(&q).unwrap().algorithm, "nic");
    ///     let mut v = [w.rank(); 2];
    ///     ep.collective(&w, Broadcast::in_place(1, &mut v), Blocking).unwrap();
    ///     ep.barrier(&w).unwrap();
    ///     v
    /// });
    /// assert_eq!(out, vec![[1, 1]; 3]);
    /// ```
    ///
    /// # Errors
    /// [`CollError::Layer`] if the endpoint does not carry the layer.
    fn register_algorithm(&mut self, a: Arc<dyn Algorithm>) -> Result<(), CollError>;

    /// Lets [`Scratch::Alloc`] allocate from `region` (bytes of this endpoint's
    /// segment that the program leaves to the layer).
    ///
    /// # Errors
    /// [`CollError::Scratch`] if the region is outside the segment.
    fn set_scratch_region(&mut self, region: Range<usize>) -> Result<(), CollError>;

    /// True if `team` runs the `shm` algorithm: every member maps every other
    /// member's auxiliary area and the team holds one of the endpoint's shared-memory
    /// channels (the value of [`Query::shm`] for the team).
    fn shared_memory(&mut self, team: &Team) -> bool;

    /// True if `team` can run the `hier` algorithm: it spans several hosts, one of
    /// them with two or more members, and has host and leader sub-teams (the value of
    /// [`Query::hier`] for the team). Teams get them at creation; the primordial team
    /// when the layer attaches, without communication, from the job layout.
    fn hierarchical(&mut self, team: &Team) -> bool;

    /// The layer's counters on this endpoint.
    fn coll_stats(&mut self) -> CollStats;

    /// Waits for every collective started in mode [`Nbi`](gex_core::Nbi).
    ///
    /// # Errors
    /// The first failure among them.
    fn sync_collectives(&mut self) -> Result<(), CollError>;
}

impl<C: Conduit> CollExt<C> for Endpoint<C> {
    fn collective<D: Collective<M>, M: Mode>(
        &mut self,
        team: &Team,
        op: D,
        mode: M,
    ) -> Result<M::Out<D::Output, CollError>, CollError> {
        op.run(self, team, mode)
    }

    fn barrier(&mut self, team: &Team) -> Result<(), CollError> {
        barrier_blocking(self, team, Entry::default(), &Opts::default())
    }

    fn barrier_notify(
        &mut self,
        team: &Team,
        id: u64,
        flags: BarrierFlags,
    ) -> Result<(), CollError> {
        let team = resolve(self, team)?;
        if coll(self, |c, _| c.teams.is_notified(team.id()))? {
            return Err(CollError::BarrierAlreadyNotified);
        }
        let entry = Entry::new(id, flags);
        let ev = barrier_event(self, &team, entry, &Opts::default())?;
        coll(self, |c, _| {
            c.teams.keep_notified(
                team.id(),
                Notified {
                    ev,
                    named: entry.named,
                },
            )
        })?;
        Ok(())
    }

    fn barrier_wait(&mut self, team: &Team, id: u64, flags: BarrierFlags) -> Result<(), CollError> {
        let team = resolve(self, team)?;
        let n = coll(self, |c, _| c.teams.take_notified(team.id()))?
            .ok_or(CollError::BarrierNotNotified)?;
        let r = self.wait(n.ev);
        r?;
        if Entry::new(id, flags).named != n.named {
            return Err(CollError::BarrierMismatch);
        }
        Ok(())
    }

    fn barrier_try(
        &mut self,
        team: &Team,
        id: u64,
        flags: BarrierFlags,
    ) -> Result<bool, CollError> {
        let team = resolve(self, team)?;
        let n = coll(self, |c, _| c.teams.take_notified(team.id()))?
            .ok_or(CollError::BarrierNotNotified)?;
        if !self.test(&n.ev)? {
            coll(self, |c, _| c.teams.keep_notified(team.id(), n))?;
            return Ok(false);
        }
        self.wait(n.ev)?;
        if Entry::new(id, flags).named != n.named {
            return Err(CollError::BarrierMismatch);
        }
        Ok(true)
    }

    fn split(
        &mut self,
        parent: &Team,
        color: Option<u32>,
        key: u32,
        scratch: Scratch,
    ) -> Result<Option<Team>, CollError> {
        teamops::split(self, parent, color, key, scratch)
    }

    fn create_team(
        &mut self,
        parent: &Team,
        members: &[u32],
        scratch: Scratch,
    ) -> Result<Team, CollError> {
        teamops::create_team(self, parent, members, scratch)
    }

    fn destroy_team(&mut self, team: Team) -> Result<(), CollError> {
        teamops::destroy_team(self, team)
    }

    fn explain(&mut self, q: &Query) -> Result<Choice, CollError> {
        coll(self, |c, _| c.tuning.tuner_mut().explain(q))?
    }

    fn algorithms(&mut self, op: OpKind) -> Vec<String> {
        coll(self, |c, _| {
            c.tuning
                .tuner()
                .algorithms()
                .iter()
                .filter(|a| a.ops().contains(&op))
                .map(|a| a.name().to_string())
                .collect()
        })
        .unwrap_or_default()
    }

    fn tuner<R>(&mut self, f: impl FnOnce(&mut Tuner) -> R) -> Result<R, CollError> {
        coll(self, |c, _| {
            c.fast.tuner_changed();
            f(c.tuning.tuner_mut())
        })
    }

    fn register_algorithm(&mut self, a: Arc<dyn Algorithm>) -> Result<(), CollError> {
        coll(self, |c, _| {
            c.fast.tuner_changed();
            c.tuning.tuner_mut().register(a)
        })
    }

    fn set_scratch_region(&mut self, region: Range<usize>) -> Result<(), CollError> {
        coll(self, |c, _| c.teams.set_scratch_region(region))?
    }

    fn shared_memory(&mut self, team: &Team) -> bool {
        resolve(self, team).is_ok_and(|t| ext(&t).shm.is_some())
    }

    fn hierarchical(&mut self, team: &Team) -> bool {
        resolve(self, team).is_ok_and(|t| ext(&t).hier.get().is_some())
    }

    fn coll_stats(&mut self) -> CollStats {
        coll(self, |c, _| CollStats {
            in_flight: c.ops.len(),
            direct_calls: c.tuning.counters.direct_calls,
            replayed_calls: c.tuning.counters.replayed_calls,
            by_reference_calls: c.tuning.counters.by_reference_calls,
            cma_calls: c.tuning.counters.cma_calls,
            ring_calls: c.tuning.counters.ring_calls,
            online_trials: c.tuning.counters.online_trials,
            dropped_messages: c.dropped(),
            sleep_polls: c.tuning.counters.sleep_polls,
        })
        .unwrap_or_default()
    }

    fn sync_collectives(&mut self) -> Result<(), CollError> {
        self.sync_implicit::<CollError>(Some(COLL_TAG))
    }
}
