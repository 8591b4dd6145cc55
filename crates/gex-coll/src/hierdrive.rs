//! Driving hierarchical collectives (the `hier` algorithm, [`crate::hier`]): a
//! collective of a team spanning hosts runs as stages, each a collective of the
//! team's host team or leaders team, started by the engine when the previous stage
//! finished on this member. Stages are collectives of the layer's table without an
//! event: the parent takes their output.
//!
//! Collectives of one team start their stages one collective at a time, in sequence
//! order, so the sub-teams see their collectives in the same order on every member.
//! A stage's descriptor ([`crate::rootcheck`]) is its parent's with the parent's
//! team, sequence number and stage as context, so members that disagree on the
//! parent's descriptor disagree on every stage, are caught there, and name the
//! parent's field and values (the ranks translated to the parent team's).

use crate::engine::{Input, Start};
use crate::error::CollError;
use crate::layer::Coll;
use crate::mix::mix_all;
use crate::op::Opts;
use crate::optable::{Body, OpState};
use crate::rootcheck::mismatch;
use crate::teams::ext;
use gex_core::layer::Cx;
use gex_core::spi::Conduit;

impl Coll {
    /// Advances hierarchical collective `id`: takes the output of its stage in
    /// flight and starts the next; true if it did something.
    pub(crate) fn advance_hier<C: Conduit>(&mut self, cx: &mut Cx<'_, C>, id: u64) -> bool {
        let st = &self.ops[&id];
        if !st.started && self.ops.earlier_unfinished(st, OpState::is_hier) {
            return false;
        }
        let mut progressed = false;
        loop {
            let st = self.ops.get_mut(&id).expect("present");
            progressed |= !st.started;
            st.started = true;
            let Body::Hier(h) = &mut st.body else {
                return progressed;
            };
            if let Some(sub) = h.sub {
                let sub_team = self.ops.get(&sub).map(|o| o.team.clone());
                let Some(res) = self.take_stage(sub) else {
                    return progressed;
                };
                progressed = true;
                if !self.absorb_stage(id, res, sub_team.as_ref()) {
                    return true;
                }
            }
            match self.next_stage(cx, id) {
                Some(true) => progressed = true,
                Some(false) => continue,
                None => return true,
            }
        }
    }

    /// The outcome of stage `sub`, once complete (the stage is then done with).
    fn take_stage(&mut self, sub: u64) -> Option<Result<Vec<u8>, CollError>> {
        match self.ops.get_mut(&sub) {
            None => Some(Err(CollError::Layer(
                "a stage of a hierarchical collective vanished",
            ))),
            Some(o) => {
                let r = o.result.take()?;
                o.result = Some(Ok(Vec::new()));
                o.taken = true;
                Some(r)
            }
        }
    }

    /// Takes a finished stage's outcome (a collective of `sub_team`) into collective
    /// `id`; false if it failed.
    fn absorb_stage(
        &mut self,
        id: u64,
        res: Result<Vec<u8>, CollError>,
        sub_team: Option<&gex_core::Team>,
    ) -> bool {
        let st = self.ops.get_mut(&id).expect("present");
        let (team, seq) = (st.team.clone(), st.seq);
        let me = team.rank();
        let Body::Hier(h) = &mut st.body else {
            return false;
        };
        h.sub = None;
        match (res, ext(&team).hier.get()) {
            (Ok(bytes), Some(sub_teams)) => {
                h.absorb(sub_teams, me, bytes);
                true
            }
            (Ok(_), None) => {
                st.result = Some(Err(CollError::NotMember { team: team.id() }));
                false
            }
            (Err(CollError::Mismatch { found, .. }), _) => {
                // Reported for this collective, the members named by their rank in
                // its team (members of other hosts learn it from the abort sent).
                let rank = |r: u32| {
                    sub_team
                        .and_then(|t| t.members().get(r as usize).copied())
                        .and_then(|a| team.rank_of(a))
                        .unwrap_or(r)
                };
                let found = found.map(|mut d| {
                    (d.member, d.other) = (rank(d.member), rank(d.other));
                    d
                });
                let e = mismatch(team.id(), seq, found);
                st.result = Some(Err(e.clone()));
                self.agree.pending_aborts.push((team.clone(), seq, found));
                self.agree.history.failed(team.id(), seq, &e);
                self.fail_team(team.id(), &e);
                false
            }
            (Err(e), _) => {
                st.result = Some(Err(e));
                false
            }
        }
    }

    /// Starts the next stage of `id`: `Some(true)` if one started, `Some(false)` if
    /// this member sits the stage out, `None` if the collective is over (done or
    /// failed).
    fn next_stage<C: Conduit>(&mut self, cx: &mut Cx<'_, C>, id: u64) -> Option<bool> {
        let st = self.ops.get_mut(&id).expect("present");
        let (team, seq) = (st.team.clone(), st.seq);
        let me = team.rank();
        let Body::Hier(h) = &mut st.body else {
            return None;
        };
        if h.stage >= crate::hier::STAGES {
            st.result = Some(Ok(h.output(me)));
            return None;
        }
        let x = ext(&team);
        let Some(sub_teams) = x.hier.get() else {
            st.result = Some(Err(CollError::NotMember { team: team.id() }));
            return None;
        };
        let stage = h.stage;
        let Some(call) = h.next_call(sub_teams, me) else {
            return Some(false);
        };
        let reduce = h.reduce.clone().filter(|_| call.reduces);
        let elem = h.elem;
        let ctx = mix_all(&[team.id(), u64::from(seq), u64::from(stage)]);
        let desc = st.desc.stage(ctx);
        // Stages are never timed online: a trial is a collective of the sub-team
        // that would run inside this stage.
        let in_trial = self.tuning.set_trial(true);
        self.tuning.set_stage(true);
        let sub_team = self.resolve(&call.team).ok();
        let started = sub_team
            .ok_or(CollError::NotMember {
                team: call.team.id(),
            })
            .and_then(|t| {
                self.start_op(
                    cx,
                    &t,
                    Start {
                        kind: call.op,
                        root: call.root,
                        elem,
                        count: call.count,
                        input: Input::Owned(call.input),
                        reduce,
                        opts: Opts::default(),
                        codes: (0, 0),
                        desc: Some(desc),
                    },
                    None,
                )
            });
        self.tuning.set_trial(in_trial);
        self.tuning.set_stage(false);
        let st = self.ops.get_mut(&id).expect("present");
        let Body::Hier(h) = &mut st.body else {
            return None;
        };
        match started {
            Ok(sub) => {
                h.sub = Some(sub);
                Some(true)
            }
            Err(e) => {
                st.result = Some(Err(e));
                None
            }
        }
    }
}
