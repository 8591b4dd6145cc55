//! The small-broadcast ring as the layer drives it ([`crate::ring`]): the ring's base
//! sequence per (team, descriptor), a blocking broadcast's begin and steps.

#[allow(clippy::wildcard_imports)]
use super::*;

impl Coll {
    /// The digest of the ring publications of broadcasts with descriptor `desc` (its
    /// root included) on `team` ([`crate::rootcheck`]), and their belief. The last
    /// one is kept ([`RingKey`]): calls in a loop skip the hashing.
    #[inline]
    pub(crate) fn ring_base(&mut self, team: &Team, desc: &Desc) -> (u64, u32) {
        match desc.ring_key_of() {
            Some(key) => self.ring_cached(team, key, || *desc),
            None => (ring_digest(team, desc.belief()), desc.belief()),
        }
    }

    /// The digest and belief of the ring's cache entry of broadcasts with key `key`
    /// ([`Desc::ring_key`]) on `team`, made with `desc` (the descriptor of that key)
    /// when it is not the last one.
    #[inline(always)]
    pub(crate) fn ring_cached(
        &mut self,
        team: &Team,
        key: u64,
        desc: impl FnOnce() -> Desc,
    ) -> (u64, u32) {
        match &self.fast.ring_key {
            Some(k) if k.team == team.id() && k.key == key => (k.base, k.belief),
            _ => self.ring_cache_new(team, key, desc()),
        }
    }

    #[cold]
    #[inline(never)]
    pub(super) fn ring_cache_new(&mut self, team: &Team, key: u64, desc: Desc) -> (u64, u32) {
        let belief = desc.belief();
        let k = RingKey {
            team: team.id(),
            key,
            desc,
            base: ring_digest(team, belief),
            belief,
            shm_gen: None,
        };
        self.fast.ring_key = Some(k);
        (k.base, k.belief)
    }

    /// Starts a blocking in-place broadcast of `buf` from `root` on `team` through
    /// the small-broadcast ring directly ([`crate::ring`]), if that applies: the
    /// team has a channel, nothing else is in flight on the endpoint, the call is
    /// small, and the tuned (or forced) algorithm is `shm`. The leanest direct call:
    /// one call into the layer begins and takes the first step (a root publishes, a
    /// reader whose root published copies), no operation record but the ring's.
    /// Otherwise [`RingBegin::Declined`], nothing consumed (the general path then
    /// decides, and reports a bad root).
    ///
    /// The error is boxed so that the result comes back in registers: returned
    /// through memory (a `CollError` is 64 bytes), its tag was stored with one byte
    /// and loaded back with 16-byte loads right after the call, a load that cannot
    /// take its bytes from the store still in flight and waits until the store
    /// buffer has drained, so until the root's slot stores (each a cache line the
    /// readers hold) had left: half of a root's time in a run of 8-byte broadcasts
    /// (`perf annotate`, 2026-12-01). Errors are rare and may allocate.
    ///
    /// It needs nothing of the endpoint but a way to `wake` members, so that without
    /// a progress thread it runs on the layer's state alone ([`crate::layer::lent`]:
    /// no endpoint context built); a pending call records its wait, and the caller
    /// asks for the progress hook if it runs in the endpoint's context.
    #[inline(always)]
    pub(crate) fn ring_begin(
        &mut self,
        team: &Team,
        root: u32,
        (buf, ty, elem): (&mut [u8], u8, usize),
        opts: &Opts<'_>,
        call: &mut Option<RingCall>,
        wake: &mut impl FnMut(EpAddr),
    ) -> Result<RingBegin, Box<CollError>> {
        let x = ext(team);
        let Some(sh) = x.shm.as_ref() else {
            return Ok(RingBegin::Declined);
        };
        let (p, me, n) = (team.size(), team.rank(), buf.len());
        if !self.ops.is_empty()
            || root >= p
            || elem > 0xff
            || self.team_failed(team.id())
            || !ring_eligible(OpKind::Broadcast, n, opts.sync)
        {
            return Ok(RingBegin::Declined);
        }
        // The last small broadcast's descriptor and decision (`shm`, tuned in this
        // tuner generation) hold for a call of the same key: no tuner's key.
        let key = Desc::ring_key(root, n, (ty, elem), opts.sync);
        let generation = self.fast.tuner_gen;
        let decided = opts.algorithm.is_none()
            && matches!(&self.fast.ring_key, Some(k) if k.team == team.id() && k.key == key && k.shm_gen == Some(generation));
        let mut fixed = false;
        if !decided {
            let req = DirectReq {
                kind: OpKind::Broadcast,
                root,
                elem: 1,
                count: n,
                commutative: true,
                opts,
                entry: Entry::default(),
                trial: false,
                replay: None,
                codes: (ty, 0),
            };
            match self.direct_takes_shm(team, &req)? {
                Some((true, f)) => fixed = f,
                _ => return Ok(RingBegin::Declined),
            }
        }
        // A wait left by a call that unwound (a panicking handler) is stale.
        self.shm.set_wait(None);
        let seq = x.next_seq();
        let (base, belief) = self.ring_cached(team, key, || {
            Desc::new(OpKind::Broadcast, root, (ty, elem), n, 0, opts.sync)
        });
        if fixed {
            if let Some(k) = self.fast.ring_key.as_mut() {
                k.shm_gen = Some(generation);
            }
        }
        let cached = &self.fast.ring_key;
        self.shm.announce(sh, seq, belief, || {
            cached.map(|k| k.desc).unwrap_or_default()
        });
        let mut b = ring::Bcast::new(seq, base, root, n, self.tuning.ring_packs(p));
        let (input, out): (&[u8], &mut [u8]) = if me == root {
            (buf, &mut [])
        } else {
            (&[], buf)
        };
        let (local, fencing) = self.shm.ring_parts(sh.ch);
        let done = b.step(&sh.view(), local, fencing, input, out);
        // Already fenced (crate::ring).
        sh.wake_fenced(std::mem::take(&mut b.wake), wake);
        self.tuning.counters.direct_calls += 1;
        self.tuning.counters.ring_calls += 1;
        if done {
            self.calm();
            return Ok(RingBegin::Done);
        }
        let wait = WaitOn::Ring(b.wait.expect("a pending step records its wait"));
        self.record_flag_wait(wait, Stall::default(), (team.id(), me, seq, belief));
        *call = Some(RingCall {
            own: sh.areas[me as usize],
            fencing: self.shm.fencing_on(),
            b,
            seq,
            belief,
        });
        Ok(RingBegin::Pending)
    }

    /// Steps a small broadcast begun by [`ring_begin`](Self::ring_begin) (as
    /// [`direct_step`](Self::direct_step) does a direct call): true once done.
    ///
    /// # Errors
    /// [`CollError::Mismatch`] when the stall checks find one, or the team failed
    /// (boxed: see [`ring_begin`](Self::ring_begin)).
    pub(crate) fn ring_step<C: Conduit>(
        &mut self,
        cx: &mut Cx<'_, C>,
        team: &Team,
        call: &mut RingCall,
        buf: &mut [u8],
    ) -> Result<bool, Box<CollError>> {
        let x = ext(team);
        let t = x.shm.as_ref().expect("ring calls need a channel");
        let stall = take_wait(&mut self.shm, t, team.id(), (call.seq, call.belief))?;
        let (input, out): (&[u8], &mut [u8]) = if t.me == call.b.root() {
            (buf, &mut [])
        } else {
            (&[], buf)
        };
        let (local, fencing) = self.shm.ring_parts(t.ch);
        let done = call.b.step(&t.view(), local, fencing, input, out);
        call.fencing = self.shm.fencing_on();
        t.wake_fenced(std::mem::take(&mut call.b.wake), &mut |a| cx.wake(a));
        if done {
            self.calm();
            self.shm.unwatch();
            return Ok(true);
        }
        let wait = WaitOn::Ring(call.b.wait.expect("a pending step records its wait"));
        self.await_flag(cx, wait, stall, (team.id(), t.me, call.seq, call.belief));
        Ok(false)
    }
}
