//! The engine's transports: sends (eager, signaling put, rendezvous announcements and
//! ready messages), receives from the mailbox and rendezvous gets.

#[allow(clippy::wildcard_imports)]
use super::*;

/// The collective a transport step serves: its team, its sequence number and this
/// member's belief (the digest of its descriptor), which every message carries.
#[derive(Clone, Copy)]
pub(super) struct OpCtx<'a> {
    pub(super) team: &'a Team,
    pub(super) seq: u32,
    pub(super) belief: u32,
}

impl Coll {
    /// Records `peer` as the member whose descriptor digest disagreed with this
    /// member's, and gives the mismatch error of collective `seq` of team `tid`.
    #[cold]
    fn disagree(&mut self, peer: u32, tid: u64, seq: u32) -> CollError {
        self.agree.disagreeing = Some(peer);
        mismatch(tid, seq, None)
    }

    /// Sends the READY messages of a starting schedule; false while some met
    /// back-pressure.
    pub(super) fn send_readies<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        st: &mut OpState,
    ) -> Result<bool, CollError> {
        let (tlo, thi) = split64(st.team.id());
        let me = st.team.rank();
        let h = self.wire.hid(H_READY);
        let Body::Sched(s) = &mut st.body else {
            return Ok(true);
        };
        while let Some(&(peer, tag)) = s.readies.last() {
            let dst = st.team.members()[peer as usize];
            let args = [tlo, thi, st.seq, me, tag, st.belief];
            if !try_send(cx, dst, h, CTL, &args, &[], 0)? {
                return Ok(false);
            }
            s.readies.pop();
        }
        Ok(true)
    }

    /// Issues what it can of the current round's sends; true if it issued some.
    pub(super) fn issue_sends<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        op: OpCtx<'_>,
        s: &mut SchedOp,
    ) -> Result<bool, CollError> {
        let mut progressed = false;
        let mut i = 0;
        while i < s.pending.len() {
            match self.send_one(cx, op, s, i)? {
                Some(true) => {
                    s.pending.swap_remove(i);
                    progressed = true;
                }
                Some(false) => {
                    progressed = true;
                    i += 1;
                }
                None => i += 1,
            }
        }
        Ok(progressed)
    }

    /// Issues pending send `i`: `Some(true)` if it is complete, `Some(false)` if part
    /// of it left, `None` if nothing could (readiness, back-pressure).
    pub(super) fn send_one<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        op: OpCtx<'_>,
        s: &mut SchedOp,
        i: usize,
    ) -> Result<Option<bool>, CollError> {
        let OpCtx { team, seq, belief } = op;
        let (tid, me) = (team.id(), team.rank());
        let (tlo, thi) = split64(tid);
        let step = &s.sched.rounds[s.round].sends[s.pending[i].idx];
        let (peer, tag) = (step.peer, step.tag);
        let dst = team.members()[peer as usize];
        if uses_transport(s, &step.ranges, tag) {
            let r = step.ranges[0].clone();
            return self.send_transport(cx, op, s, i, (peer, tag), r);
        }
        let total = s.pending[i].data.as_ref().map_or(0, Vec::len);
        let chunk = cx.max_medium(dst).max(1);
        let h = self.wire.hid(H_EAGER);
        let start = s.pending[i].off;
        loop {
            let off = s.pending[i].off;
            let len = chunk.min(total - off);
            let args = [tlo, thi, seq, me, tag, off as u32, total as u32, belief];
            let data = s.pending[i].data.as_deref().unwrap_or_default();
            if !try_send(
                cx,
                dst,
                h,
                Category::Medium,
                &args,
                &data[off..off + len],
                0,
            )? {
                return Ok((s.pending[i].off > start).then_some(false));
            }
            s.pending[i].off += len;
            if s.pending[i].off >= total {
                return Ok(Some(true));
            }
        }
    }

    /// A send by signaling put or rendezvous announcement (mirrored work buffers).
    pub(super) fn send_transport<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        OpCtx { team, seq, belief }: OpCtx<'_>,
        s: &mut SchedOp,
        i: usize,
        (peer, tag): (u32, u32),
        r: Range<usize>,
    ) -> Result<Option<bool>, CollError> {
        let (tid, me) = (team.id(), team.rank());
        let (tlo, thi) = split64(tid);
        let dst = team.members()[peer as usize];
        let m = s.mirror.as_ref().expect("transports need mirrors");
        if s.transport == Transport::Put {
            let start = s.pending[i].off;
            if s.need_ready && !s.pending[i].ready {
                match self.wire.mb.ready.remove(&(tid, seq, peer, tag)) {
                    None => return Ok(None),
                    Some(b) if b != belief => {
                        return Err(self.disagree(peer, tid, seq));
                    }
                    Some(_) => s.pending[i].ready = true,
                }
            }
            let total = r.len();
            let base = m[peer as usize] + r.start;
            let chunk = cx.max_long(dst).max(1);
            let h = self.wire.hid(H_LONG);
            while s.pending[i].off < total {
                let off = s.pending[i].off;
                let len = chunk.min(total - off);
                let args = [tlo, thi, seq, me, tag, off as u32, total as u32, belief];
                let payload = &s.work[r.start + off..r.start + off + len];
                if !try_send(cx, dst, h, Category::Long, &args, payload, base + off)? {
                    return Ok(Some(false).filter(|_| off > start));
                }
                s.pending[i].off += len;
            }
            return Ok(Some(true));
        }
        let (olo, ohi) = split64((m[me as usize] + r.start) as u64);
        let (llo, lhi) = split64(r.len() as u64);
        let args = [tlo, thi, seq, me, tag, olo, ohi, llo, lhi, belief];
        if !try_send(cx, dst, self.wire.hid(H_RDV), CTL, &args, &[], 0)? {
            return Ok(None);
        }
        s.acks_expected += 1;
        Ok(Some(true))
    }

    /// The bytes of the current receive of the current round, if they are here.
    pub(super) fn take_recv<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        op: OpCtx<'_>,
        s: &mut SchedOp,
    ) -> Result<Option<Vec<u8>>, CollError> {
        let OpCtx { team, seq, belief } = op;
        let i = s.applied;
        let v = &s.sched.rounds[s.round].recvs[i];
        let key = (team.id(), seq, v.peer, v.tag);
        let peer = v.peer;
        if uses_transport(s, &v.ranges, v.tag) && v.action == Action::Copy {
            let r = v.ranges[0].clone();
            let base = s.mirror.as_ref().expect("transports need mirrors")[team.rank() as usize];
            if s.transport == Transport::Put {
                match self.wire.mb.long.get(&key) {
                    Some(&(got, b)) if got >= r.len() => {
                        if b != belief {
                            return Err(self.disagree(peer, team.id(), seq));
                        }
                    }
                    _ => return Ok(None),
                }
                self.wire.mb.long.remove(&key);
                let mut buf = vec![0u8; r.len()];
                cx.segment().read(base + r.start, &mut buf)?;
                return Ok(Some(buf));
            }
            return self.rendezvous(cx, op, s, key);
        }
        match self.wire.mb.eager.get(&key) {
            Some(p) if p.got == p.buf.len() => {
                if p.belief != belief {
                    return Err(self.disagree(peer, team.id(), seq));
                }
                Ok(self.wire.mb.eager.remove(&key).map(|p| p.buf))
            }
            _ => Ok(None),
        }
    }

    /// Rendezvous: gets the bytes once announced, acknowledges when complete.
    pub(super) fn rendezvous<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        OpCtx { team, seq, belief }: OpCtx<'_>,
        s: &mut SchedOp,
        key: (u64, u32, u32, u32),
    ) -> Result<Option<Vec<u8>>, CollError> {
        let i = s.applied;
        let peer = key.2;
        if let Some(b) = s.fetched.remove(&i) {
            return Ok(Some(b));
        }
        if let Some(ev) = s.gets.remove(&i) {
            let buf = match cx.try_take(ev) {
                Err(ev) => {
                    s.gets.insert(i, ev);
                    return Ok(None);
                }
                Ok(r) => r?,
            };
            let (tlo, thi) = split64(team.id());
            let src = team.members()[peer as usize];
            self.ctl(cx, src, H_ACK, &[tlo, thi, seq])?;
            return Ok(Some(buf));
        }
        let Some((off, len, b)) = self.wire.mb.rdv.remove(&key) else {
            return Ok(None);
        };
        if b != belief {
            return Err(self.disagree(peer, team.id(), seq));
        }
        let src = GlobalPtr::<u8>::new(team.members()[peer as usize], off);
        let got = crate::rma::try_get_owned(cx, vec![0u8; len], src)?;
        match got {
            crate::rma::OwnedGet::Started(ev) => {
                s.gets.insert(i, ev);
            }
            // Back-pressure: the announcement stays for the next advance.
            crate::rma::OwnedGet::Busy(_buf) => {
                self.wire.mb.rdv.insert(key, (off, len, b));
            }
        }
        Ok(None)
    }
}
