//! One shared-memory collective in flight on one member ([`ShmOp`]): its rounds of
//! publications and reads over the channel's slots, by value, by reference or across
//! address spaces, and the owned form the layer's table keeps ([`OwnedShm`]).

#[allow(clippy::wildcard_imports)]
use super::*;
/// Which members a reader takes pieces from, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Apply {
    /// Synchronisation only.
    Nothing,
    /// Copy into the output.
    Copy,
    /// Combine in rank order into the output.
    Combine,
}

/// One shared-memory collective in flight on one member.
#[derive(Clone)]
pub(crate) struct ShmOp {
    op: OpKind,
    p: u32,
    me: u32,
    root: u32,
    /// Bytes per block.
    n: usize,
    /// Bytes per chunk of a block per round.
    chunk: usize,
    /// Data rounds.
    data_rounds: usize,
    /// One round in a small slot.
    small: bool,
    /// Its publications go inline ([`INLINE_CAP`]).
    inline: bool,
    /// The digest of the team's generation, its id and the belief, which every tag of
    /// the collective starts from (0: not yet; [`set_belief`](Self::set_belief)).
    tag_pre: u64,
    pre: bool,
    post: bool,
    tid: u64,
    seq: u32,
    /// The member's belief ([`crate::rootcheck`]): part of every publication's tag,
    /// so a reader never takes the publication of a member that runs another
    /// collective (it stalls instead, and its stall checks tell why).
    pub(crate) belief: u32,
    /// Publishes by reference: 1 + the segment offset of this member's input, or
    /// [`CMA_FLAG`] | its virtual address.
    byref: u64,
    /// Slots this member published by reference (bit per slot): it completes only
    /// once their readers acknowledged.
    byref_slots: u64,
    /// Current round (pre-barrier included).
    g: usize,
    published: bool,
    /// Next contributor to read in the current round.
    k: u32,
    /// What [`step`](Self::step) waited for when it last returned false.
    pub(crate) wait: Option<WaitOn>,
    /// Members to wake after this member stored flags (bit = team rank).
    pub(crate) wake: u64,
    /// Members that may wait for a publication this member stored (a plain store)
    /// since it last woke members (bit = team rank): [`ShmOp::wake_members`] wakes
    /// them through the publications' sleep protocol (module docs, *Sleeping*).
    wake_post: u64,
}

impl std::fmt::Debug for ShmOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmOp")
            .field("op", &self.op)
            .field("round", &self.g)
            .finish()
    }
}

/// The buffers a [`ShmOp`] works on: the member's input (its blocks, as
/// [`OpKind::shape`] says), its output, and the reduction of the reducing operations.
///
/// The layer's table passes the vectors it keeps; the direct path passes the
/// caller's slices directly (no copy in or out). A broadcast root passes an empty
/// output: its data are already where the output would be.
pub(crate) struct Io<'a> {
    pub(crate) input: &'a [u8],
    pub(crate) out: &'a mut [u8],
    pub(crate) reduce: Option<&'a ReduceFn>,
}

/// Where a reader finds a publisher's piece.
#[derive(Clone, Copy, Debug)]
enum Src {
    /// In the publisher's slot (inline).
    Slot(*mut u8),
    /// In the publisher's input, at this address (by reference).
    Segment(*const u8),
    /// In the publisher's input in another address space: (pid, address there).
    Process(u64, usize),
}

/// How a member publishes its input in a direct call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Publish {
    /// Through the slots (copied in by the publisher, out by the readers).
    Slots,
    /// By reference into its mapped segment.
    Segment,
    /// By virtual address, read with `process_vm_readv` (CMA).
    Process,
}

/// The digest every tag of a collective of team `tid` on `team`'s channel under
/// `belief` starts from.
fn tag_prefix(team: &ShmTeam, tid: u64, belief: u32) -> u64 {
    mix_all(&[team.generation, tid, u64::from(belief)])
}

/// The tag of round `g` of collective `seq` under digest `prefix` (module docs,
/// *Tags*): one-to-one in (`seq` mod 2³¹, `g` mod 2³²) for a given digest, and odd.
#[inline]
pub(crate) fn round_tag(prefix: u64, seq: u32, g: usize) -> u64 {
    let x = ((u64::from(seq) << 32) | (g as u64 & 0xffff_ffff)) << 1;
    (prefix | 1) ^ x.wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// True for operations whose input holds one block per member.
fn per_dest(op: OpKind) -> bool {
    matches!(
        op,
        OpKind::Scatter | OpKind::Exchange | OpKind::ReduceScatter
    )
}

/// Position of reader `r`'s piece in publisher `q`'s slot (publishers skip themselves).
fn compact(r: u32, q: u32) -> usize {
    (r - u32::from(r > q)) as usize
}

impl ShmOp {
    /// Bytes of a block per round on channel `ch` (0: an element does not fit, the
    /// caller then uses a message algorithm, the same on every member).
    fn chunk_of(op: OpKind, p: u32, elem: usize, ch: usize) -> usize {
        Self::chunk_in(op, p, elem, slot_cap(ch))
    }

    /// Bytes of a block per round in a slot of `cap` data bytes.
    fn chunk_in(op: OpKind, p: u32, elem: usize, cap: usize) -> usize {
        let per = if per_dest(op) {
            cap / (p.max(2) as usize - 1)
        } else {
            cap
        };
        let unit = if op.reduces() { elem.max(1) } else { 1 };
        per / unit * unit
    }

    /// True if `op` on `p` members with `elem`-byte elements can run on channel `ch`.
    pub(crate) fn fits(op: OpKind, p: u32, elem: usize, ch: usize) -> bool {
        Self::chunk_of(op, p, elem, ch) > 0
    }

    /// A shared-memory collective of member `me` of `p` (root `root`) with blocks of
    /// `n` bytes; [`fits`](Self::fits) must hold. The buffers come with every
    /// [`step`](Self::step); [`keep_own`](Self::keep_own) places the pieces that stay
    /// on this member.
    pub(crate) fn new(
        op: OpKind,
        (p, me, root): (u32, u32, u32),
        elem: usize,
        n: usize,
        sync: crate::op::SyncModes,
        team: (u64, u32),
        ch: usize,
    ) -> ShmOp {
        let (pre, post) = (
            sync.input == crate::op::SyncMode::All,
            sync.output == crate::op::SyncMode::All,
        );
        // One round that fits a small slot: take the small slots in turn.
        let small_chunk = Self::chunk_in(op, p, elem, small_cap(ch));
        let small =
            !pre && !post && (op == OpKind::Barrier || (small_chunk > 0 && n <= small_chunk));
        let chunk = if small {
            small_chunk.max(1)
        } else {
            Self::chunk_of(op, p, elem, ch).max(1)
        };
        let data_rounds = if op == OpKind::Barrier {
            1
        } else {
            n.div_ceil(chunk).max(1)
        };
        let inline = small && !per_dest(op) && n <= INLINE_CAP;
        ShmOp {
            op,
            p,
            me,
            root,
            n,
            chunk,
            data_rounds,
            pre,
            post,
            small,
            inline,
            tag_pre: 0,
            tid: team.0,
            seq: team.1,
            belief: 0,
            byref: 0,
            byref_slots: 0,
            g: 0,
            published: false,
            k: 0,
            wait: None,
            wake: 0,
            wake_post: 0,
        }
    }

    /// Wakes the members this collective stored flags for since it last did, that
    /// announced they may sleep (module docs, *Sleeping*): the readers of its
    /// publications through the publications' rule (`Fencing::after_store`: a fence
    /// and their `SLEEPY` words only once this member fences, which it starts when it
    /// sees a reader's `MAYSLEEP`), the publishers it acknowledged as
    /// [`ShmTeam::wake_fenced`] (an acknowledgement is a sequentially consistent
    /// read-modify-write, itself a full barrier on x86).
    ///
    /// While this member does not fence its publications, members none of which set
    /// `MAYSLEEP` need nothing: one load per member (a word that stays in this
    /// member's cache), instead of the two checks. A member sets `SLEEPY` only under
    /// a wait policy that may sleep, after its `MAYSLEEP`
    /// ([`ShmPath::note_policy`](crate::shmpath::ShmPath::note_policy)), so an
    /// acknowledged member that reads no acknowledgement after its fence has its
    /// `MAYSLEEP` seen here as surely as its `SLEEPY`.
    #[inline]
    pub(crate) fn wake_members(
        &mut self,
        team: &ShmTeam,
        fencing: &mut crate::ring::Fencing,
        wake: &mut impl FnMut(EpAddr),
    ) {
        let post = std::mem::take(&mut self.wake_post);
        let acked = self.wake;
        if post | acked == 0 {
            return;
        }
        if !fencing.on {
            // (Ordered after the acknowledgements as `wake_fenced`'s loads are.)
            #[cfg(any(gex_loom, not(any(target_arch = "x86", target_arch = "x86_64"))))]
            if acked != 0 {
                gex_sync::atomic::fence(Ordering::SeqCst);
            }
            if !team.may_sleep_any(post | acked) {
                self.wake = 0;
                return;
            }
        }
        if post != 0 {
            let own = team.areas[team.me as usize];
            let sleepers = fencing.after_store(own, &team.areas, post);
            team.wake_listed(sleepers, wake);
        }
        team.wake_fenced(std::mem::take(&mut self.wake), wake);
    }

    /// Where this collective stands (its round and the member it reads next, or
    /// publishes for): changes whenever a step gets past a wait.
    #[inline]
    pub(crate) fn position(&self) -> (usize, u32) {
        (self.g, self.k)
    }

    /// True if this collective's wait is worth looking at a while before its caller
    /// leaves the layer: a publication, or the readers' acknowledgements of a
    /// publication by reference at the end (they copy from this member's segment or
    /// process, so the wait is about one copy: 2 ranks, broadcast 64 KiB, the root
    /// took 0.72 µs leaving at once and 0.68 looking, the build before issue 12
    /// 0.67). Not the acknowledgements of a slot about to be used again: its readers
    /// are a collective behind, and spinning on the `ACK` line they are about to
    /// increment slowed the rank that bounds a reduce (2 ranks, 8-512 B: 0.92-1.00
    /// of the old build's time instead of 0.86-0.91).
    #[inline]
    pub(crate) fn worth_looking(&self) -> bool {
        match self.wait {
            Some(WaitOn::Post { .. }) => true,
            Some(WaitOn::Acks { slot, .. }) => {
                self.g >= self.total() && self.byref_slots & (1 << slot) != 0
            }
            _ => false,
        }
    }

    /// True if this collective stored a flag since it last woke members.
    #[inline]
    pub(crate) fn stored(&self) -> bool {
        self.wake | self.wake_post != 0
    }

    /// Makes this collective, whatever its state, collective `seq` of its team, not
    /// yet started: a replayed call's operation ([`crate::shmpath::Replay`]), reset
    /// in place; its fixed fields, belief and tag digest stay.
    #[inline]
    pub(crate) fn restart(&mut self, seq: u32) {
        self.seq = seq;
        self.byref = 0;
        self.byref_slots = 0;
        self.g = 0;
        self.published = false;
        self.k = 0;
        self.wait = None;
        self.wake = 0;
        self.wake_post = 0;
    }

    /// Publishes this member's data by reference when `input` lies inside its mapped
    /// segment, every member's segment is mapped, the blocks are at least
    /// [`BYREF_MIN`] bytes and the operation has readers of this member's data; the
    /// caller must then keep `input` unchanged until [`step`](Self::step) returned
    /// true (it does: the blocking calls borrow it for the call). Returns whether it
    /// does.
    ///
    /// Otherwise, for an operation that only copies, publishes the input's virtual
    /// address for CMA reads when every member of the team takes part
    /// ([`Area::set_cma`]); on an `oversubscribed` team (more members than the host's
    /// CPUs) only for exchange.
    pub(crate) fn publish_by_reference(
        &mut self,
        team: &ShmTeam,
        input: &[u8],
        oversubscribed: bool,
    ) -> Publish {
        if self.n < BYREF_MIN
            || self.op == OpKind::Barrier
            || self.readers() == 0
            || input.is_empty()
        {
            return Publish::Slots;
        }
        if let Some(&(base, len)) = team.segs.get(self.me as usize) {
            let at = (input.as_ptr() as usize).wrapping_sub(base);
            if (input.as_ptr() as usize) >= base
                && at.checked_add(input.len()).is_some_and(|e| e <= len)
            {
                self.byref = at as u64 + 1;
                return Publish::Segment;
            }
        }
        let copies = matches!(
            self.op,
            OpKind::Broadcast
                | OpKind::Scatter
                | OpKind::Gather
                | OpKind::GatherAll
                | OpKind::Exchange
        );
        let addr = input.as_ptr() as u64;
        // With more members than CPUs, readers of one source queue for the CPUs
        // while the publisher waits for all of them: measured (8 ranks on 2 CPUs,
        // 64 KiB, private buffers) CMA lost for broadcast (48-51 against 39 µs
        // through the slots) and gather_all (224-240 against 176 µs) and won for
        // exchange (375-379 against 600-603 µs), whose readers each take their own
        // piece.
        let copies = copies && (!oversubscribed || self.op == OpKind::Exchange);
        if copies && addr & CMA_FLAG == 0 && {
            let ns = pid_namespace();
            team.areas.iter().all(|a| a.cma_in(ns))
        } {
            self.byref = CMA_FLAG | addr;
            return Publish::Process;
        }
        Publish::Slots
    }

    /// Copies the pieces of `input` that stay on this member into `out` (nothing if
    /// `out` is empty: a broadcast root whose output is its input).
    pub(crate) fn keep_own(&self, input: &[u8], out: &mut [u8]) {
        if out.is_empty() {
            return;
        }
        let (me, root, nn) = (self.me as usize, self.root, self.n);
        let mine = me * nn..(me + 1) * nn;
        match self.op {
            OpKind::Broadcast if self.me == root => out.copy_from_slice(&input[..nn]),
            OpKind::Scatter if self.me == root => out.copy_from_slice(&input[mine]),
            OpKind::Gather if self.me == root => out[mine].copy_from_slice(&input[..nn]),
            OpKind::GatherAll => out[mine].copy_from_slice(&input[..nn]),
            OpKind::Exchange => out[mine.clone()].copy_from_slice(&input[mine]),
            _ => {}
        }
    }

    /// One line for a hang report: the round and what it waits for.
    pub(crate) fn describe(&self) -> String {
        let mut s = format!(
            "shared memory, member {} of {}, round {}/{}",
            self.me,
            self.p,
            self.g,
            self.total()
        );
        if self.data_round(self.g).is_some() && self.k < self.p {
            s += &format!(", reading member {}", self.k);
        }
        if let Some(w) = &self.wait {
            s += &format!(", waits for {w}");
        }
        s
    }

    fn total(&self) -> usize {
        self.data_rounds + usize::from(self.pre) + usize::from(self.post)
    }

    /// Data round index of round `g`, `None` for a synchronisation round.
    fn data_round(&self, g: usize) -> Option<usize> {
        let i = g.checked_sub(usize::from(self.pre))?;
        (i < self.data_rounds && self.op != OpKind::Barrier).then_some(i)
    }

    /// Readers of this member's publication in data rounds (0: it publishes nothing).
    fn readers(&self) -> u64 {
        let (p, me, root) = (u64::from(self.p), self.me, self.root);
        match self.op {
            OpKind::Barrier => p - 1,
            OpKind::Broadcast | OpKind::Scatter => {
                if me == root {
                    p - 1
                } else {
                    0
                }
            }
            OpKind::Gather | OpKind::Reduce => u64::from(me != root),
            OpKind::GatherAll | OpKind::Exchange | OpKind::Allreduce | OpKind::ReduceScatter => {
                p - 1
            }
            OpKind::Scan | OpKind::Exscan => p - 1 - u64::from(me),
        }
    }

    /// Contributors this member reads in data rounds, and how.
    fn contributors(&self) -> (std::ops::Range<u32>, Apply) {
        let (p, me, root) = (self.p, self.me, self.root);
        match self.op {
            OpKind::Barrier => (0..p, Apply::Nothing),
            OpKind::Broadcast | OpKind::Scatter if me != root => (root..root + 1, Apply::Copy),
            OpKind::Gather if me == root => (0..p, Apply::Copy),
            OpKind::GatherAll | OpKind::Exchange => (0..p, Apply::Copy),
            OpKind::Reduce if me == root => (0..p, Apply::Combine),
            OpKind::Allreduce | OpKind::ReduceScatter => (0..p, Apply::Combine),
            OpKind::Scan => (0..me + 1, Apply::Combine),
            OpKind::Exscan => (0..me, Apply::Combine),
            _ => (0..0, Apply::Nothing),
        }
    }

    /// Where the data of this collective's publications in slot `s` of `a` lie.
    fn slot_data(&self, a: Area, ch: usize, s: usize) -> *mut u8 {
        if self.inline {
            a.inline_data(ch, s)
        } else {
            a.data(ch, s)
        }
    }

    /// Byte range of chunk `i` inside a block.
    fn piece(&self, i: usize) -> std::ops::Range<usize> {
        let a = (i * self.chunk).min(self.n);
        a..(a + self.chunk).min(self.n)
    }

    /// The tag of round `g` (module docs, *Tags*).
    #[inline]
    fn tag(&mut self, team: &ShmTeam, g: usize) -> u64 {
        if self.tag_pre == 0 {
            // Fixed for the collective (its belief is set before the first step), and
            // kept by a replayed call's operation (crate::shmdrive).
            self.tag_pre = tag_prefix(team, self.tid, self.belief);
        }
        round_tag(self.tag_pre, self.seq, g)
    }

    /// Sets the belief this member publishes under (before the first step), and the
    /// digest its tags start from.
    #[inline]
    pub(crate) fn set_belief(&mut self, team: &ShmTeam, belief: u32) {
        if self.belief != belief || self.tag_pre == 0 {
            self.belief = belief;
            self.tag_pre = tag_prefix(team, self.tid, belief);
        }
    }

    /// Whether the readers of slot `s` of channel `ch` of this member's area `own`
    /// acknowledged it as `expected` says; if not, waits on them (and false).
    #[inline]
    fn acked(&mut self, own: Area, ch: usize, s: usize, expected: &Expected) -> bool {
        if own.acks(ch, s) < expected.n[ch][s] {
            self.wait = Some(WaitOn::Acks {
                area: own,
                ch,
                slot: s,
                n: expected.n[ch][s],
                seq: expected.seq[ch][s],
            });
            return false;
        }
        true
    }

    /// Publishes this member's part of the current round in slot `s` with `tag` (data
    /// round `data`, or an empty synchronisation round) once the slot's previous
    /// readers acknowledged; false if it has to wait for them.
    fn publish(
        &mut self,
        team: &ShmTeam,
        expected: &mut Expected,
        io: &Io<'_>,
        (s, tag, data): (usize, u64, Option<usize>),
    ) -> bool {
        let ch = team.ch;
        let own = team.areas[self.me as usize];
        let readers = if data.is_some() {
            self.readers()
        } else {
            u64::from(self.p) - 1
        };
        if readers > 0 {
            if !self.acked(own, ch, s, expected) {
                return false;
            }
            match data {
                Some(_) if self.byref != 0 => {
                    own.reference(ch, s).store(self.byref, Ordering::Relaxed);
                    self.byref_slots |= 1 << s;
                }
                Some(i) => {
                    own.reference(ch, s).store(0, Ordering::Relaxed);
                    self.write(self.slot_data(own, ch, s), i, io.input);
                }
                None => {}
            }
            own.post(ch, s).store(tag, Ordering::Release);
            self.wake_post |= team.others();
            expected.n[ch][s] += readers;
            expected.seq[ch][s] = self.seq;
        }
        self.published = true;
        self.k = match data {
            Some(_) => self.contributors().0.start,
            None => 0,
        };
        true
    }

    /// Advances as far as possible without waiting; true once complete.
    pub(crate) fn step(
        &mut self,
        team: &ShmTeam,
        expected: &mut Expected,
        io: &mut Io<'_>,
    ) -> bool {
        let ch = team.ch;
        let own = team.areas[self.me as usize];
        while self.g < self.total() {
            let g = self.g;
            // Consecutive collectives alternate too (the sequence number is the
            // team's), so a root may run one collective ahead of its readers.
            let s = if self.small {
                2 + self.seq as usize % NSMALL
            } else {
                (self.seq as usize + g) % 2
            };
            let tag = self.tag(team, g);
            let data = self.data_round(g);
            if !self.published && !self.publish(team, expected, io, (s, tag, data)) {
                return false;
            }
            let (range, apply) = match data {
                Some(_) => self.contributors(),
                None => (0..self.p, Apply::Nothing),
            };
            while self.k < range.end {
                let q = self.k;
                let first = q == range.start;
                if q == self.me {
                    if apply == Apply::Combine {
                        let i = data.expect("combining happens in data rounds");
                        let pc = self.piece(i);
                        let src = if per_dest(self.op) {
                            self.me as usize * self.n + pc.start
                        } else {
                            pc.start
                        };
                        let len = pc.len();
                        let (inp, out) = (&io.input[src..src + len], &mut io.out[pc]);
                        if first {
                            out.copy_from_slice(inp);
                        } else if let Some(f) = io.reduce {
                            f(out, inp, false);
                        }
                    }
                    self.k += 1;
                    continue;
                }
                let a = team.areas[q as usize];
                if a.post(ch, s).load(Ordering::Acquire) != tag {
                    self.wait = Some(WaitOn::Post {
                        q,
                        area: a,
                        ch,
                        slot: s,
                        tag,
                    });
                    return false;
                }
                if let Some(i) = data {
                    let src = match a.reference(ch, s).load(Ordering::Relaxed) {
                        0 => Src::Slot(self.slot_data(a, ch, s)),
                        r if r & CMA_FLAG != 0 => Src::Process(
                            a.cma_pid().expect(
                                "gex-coll shm: a CMA publication from a member without a pid",
                            ),
                            (r & !CMA_FLAG) as usize,
                        ),
                        r => Src::Segment(self.by_reference(team, q, r - 1)),
                    };
                    self.read(src, q, i, (apply, first), io);
                }
                // Sequentially consistent: a locked instruction on x86, so waking
                // after it needs no fence there (`wake_members`).
                a.ack(ch, s).fetch_add(1, Ordering::SeqCst);
                self.wake |= 1 << q;
                self.k += 1;
            }
            self.g += 1;
            self.published = false;
        }
        // Readers copy by-reference publications straight from this member's input:
        // it completes once they all acknowledged.
        while self.byref_slots != 0 {
            let s = self.byref_slots.trailing_zeros() as usize;
            if !self.acked(own, ch, s, expected) {
                return false;
            }
            self.byref_slots &= !(1 << s);
        }
        self.wait = None;
        true
    }

    /// The address, in this process, of byte `off` of member `q`'s segment (where
    /// `q` published its input by reference).
    ///
    /// # Panics
    /// If `q`'s segment is not mapped here or `off` lies outside it: a member
    /// publishes by reference only when every segment is mapped, and only input
    /// inside its own segment (a conduit breaking that contract is a bug).
    fn by_reference(&self, team: &ShmTeam, q: u32, off: u64) -> *const u8 {
        let (base, len) = *team
            .segs
            .get(q as usize)
            .expect("gex-coll shm: a member published by reference to an unmapped segment");
        let off = usize::try_from(off).unwrap_or(usize::MAX);
        let need = if per_dest(self.op) {
            self.p as usize * self.n
        } else {
            self.n
        };
        assert!(
            off.checked_add(need).is_some_and(|e| e <= len),
            "gex-coll shm: member {q} published a reference outside its segment"
        );
        (base + off) as *const u8
    }

    /// Writes this member's pieces of data round `i` into its slot at `dst`.
    fn write(&self, dst: *mut u8, i: usize, input: &[u8]) {
        let pc = self.piece(i);
        let len = pc.len();
        if per_dest(self.op) {
            for d in (0..self.p).filter(|&d| d != self.me) {
                let src = &input[d as usize * self.n + pc.start..][..len];
                // SAFETY: the slot has `cap` data bytes (large or small, the one
                // `chunk` was computed for) and compact(d) < p - 1 pieces of `chunk` ≥
                // len bytes fit it (chunk ≤ cap / (p - 1)); this member
                // owns the slot until the readers acknowledge (module `# Safety`).
                // Plain copy, race-free: no reader touches the slot until the `POST`
                // release that follows (happens-before, not atomicity).
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        src.as_ptr(),
                        dst.add(compact(d, self.me) * self.chunk),
                        len,
                    );
                }
            }
        } else {
            // SAFETY: len ≤ chunk ≤ the slot's capacity (inline: len ≤ n ≤
            // INLINE_CAP, the inline bytes); owned as above (plain copy, ordered
            // before every reader by the `POST` release).
            unsafe { std::ptr::copy_nonoverlapping(input[pc].as_ptr(), dst, len) };
        }
        // Loom models: the slot's bytes were written (race detection on plain bytes).
        #[cfg(gex_loom)]
        super::shadow::touch(dst, 1, true);
    }

    /// Applies member `q`'s piece of data round `i` from its slot or its input.
    fn read(&self, src: Src, q: u32, i: usize, (apply, first): (Apply, bool), io: &mut Io<'_>) {
        let pc = self.piece(i);
        let len = pc.len();
        let inc = match src {
            Src::Slot(slot) => {
                let at = if per_dest(self.op) {
                    compact(self.me, q) * self.chunk
                } else {
                    0
                };
                // SAFETY: inside the slot or its inline bytes (as in `write`); the
                // publisher does not touch them until this member acknowledges
                // (module `# Safety`): a plain read, ordered after the publisher's
                // writes by the `POST` acquire and before its next ones by the `ACK`.
                Ok(unsafe { std::slice::from_raw_parts(slot.add(at), len) })
            }
            Src::Process(pid, addr) => {
                let at = if per_dest(self.op) {
                    self.me as usize * self.n + pc.start
                } else {
                    pc.start
                };
                Err((pid, addr + at))
            }
            Src::Segment(input) => {
                let at = if per_dest(self.op) {
                    self.me as usize * self.n + pc.start
                } else {
                    pc.start
                };
                // SAFETY: `input` is the publisher's whole input inside its mapped
                // segment (bounds checked by `by_reference`: `at + len` ≤ its
                // length); the publisher keeps it unchanged until this member
                // acknowledges (module `# Safety`), and nobody else writes it: the
                // input came from `unsafe` `Segment::as_slice`, whose contract rules
                // that out (so a slice, not a byte-wise atomic copy, is sound here).
                Ok(unsafe { std::slice::from_raw_parts(input.add(at), len) })
            }
        };
        // Loom models: the publication's bytes are read (race detection on plain bytes).
        #[cfg(gex_loom)]
        if let Ok(inc) = inc {
            super::shadow::touch(inc.as_ptr(), inc.len(), false);
        }
        let dst = match self.op {
            OpKind::Gather | OpKind::GatherAll | OpKind::Exchange => q as usize * self.n + pc.start,
            _ => pc.start,
        };
        let out = &mut io.out[dst..dst + len];
        let inc = match inc {
            Ok(inc) => inc,
            Err((pid, at)) => {
                // Only copying operations publish this way (`publish_by_reference`).
                debug_assert_eq!(apply, Apply::Copy);
                if let Err(e) = cma_read(pid, at, out) {
                    panic!(
                        "gex-coll shm: process_vm_readv of {len} bytes from member {q} \
                         (pid {pid}) failed: {e}"
                    );
                }
                return;
            }
        };
        match apply {
            Apply::Nothing => {}
            Apply::Copy => out.copy_from_slice(inc),
            Apply::Combine if first => out.copy_from_slice(inc),
            Apply::Combine => {
                if let Some(f) = io.reduce {
                    f(out, inc, false);
                }
            }
        }
    }
}

/// A [`ShmOp`] with buffers of its own (the nonblocking calls).
pub(crate) struct OwnedShm {
    op: ShmOp,
    input: Vec<u8>,
    out: Vec<u8>,
    reduce: Option<ReduceFn>,
}

impl OwnedShm {
    /// What its last step waited for.
    pub(crate) fn wait(&self) -> Option<WaitOn> {
        self.op.wait
    }

    /// One line for a hang report ([`ShmOp::describe`]).
    pub(crate) fn describe(&self) -> String {
        self.op.describe()
    }

    /// `op` over `input` into a new `out_len`-byte output.
    pub(crate) fn new(op: ShmOp, input: Vec<u8>, out_len: usize, reduce: Option<ReduceFn>) -> Self {
        let mut out = vec![0u8; out_len];
        op.keep_own(&input, &mut out);
        OwnedShm {
            op,
            input,
            out,
            reduce,
        }
    }

    /// [`ShmOp::step`] over the owned buffers.
    pub(crate) fn step(&mut self, team: &ShmTeam, expected: &mut Expected) -> bool {
        let mut io = Io {
            input: &self.input,
            out: &mut self.out,
            reduce: self.reduce.as_ref(),
        };
        self.op.step(team, expected, &mut io)
    }

    /// The collective inside.
    pub(crate) fn op(&mut self) -> &mut ShmOp {
        &mut self.op
    }

    /// The output (after [`step`](Self::step) returned true).
    pub(crate) fn take_output(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::{Area, ShmOp, WaitOn, round_tag};
    use crate::op::{OpKind, SyncModes};
    use std::collections::HashSet;
    use std::ptr::NonNull;

    /// A direct step looks a while at a publication and at the readers of a
    /// publication by reference at the end, never at the readers of a slot it is about
    /// to use again (they are a collective behind: spinning on their `ACK` line slowed
    /// reduce).
    #[test]
    fn worth_looking_at_publications_and_readers_of_references_only() {
        // Never dereferenced: the decision reads the wait's kind and slot only.
        let area = Area(NonNull::dangling());
        let mut op = ShmOp::new(
            OpKind::Broadcast,
            (2, 0, 0),
            1,
            64 << 10,
            SyncModes::default(),
            (0, 1),
            0,
        );
        assert!(!op.worth_looking(), "no wait");
        op.wait = Some(WaitOn::Post {
            q: 1,
            area,
            ch: 0,
            slot: 3,
            tag: 1,
        });
        assert!(op.worth_looking(), "a publication");
        let acks = |slot| {
            Some(WaitOn::Acks {
                area,
                ch: 0,
                slot,
                n: 1,
                seq: 1,
            })
        };
        // Before the end: a slot about to be used again.
        op.wait = acks(1);
        assert!(!op.worth_looking(), "a slot's readers before the end");
        // At the end, waiting for the readers of slot 1's reference.
        op.g = op.total();
        op.byref_slots = 1 << 1;
        assert!(op.worth_looking(), "the readers of a reference");
        op.wait = acks(0);
        assert!(
            !op.worth_looking(),
            "the readers of a slot not published by reference"
        );
        op.wait = Some(WaitOn::Release {
            area,
            ch: 0,
            tag: 1,
            k: 1,
        });
        assert!(!op.worth_looking(), "a barrier's release");
    }

    /// The tags of one digest are odd (never the 0 of an empty slot) and differ for
    /// every (sequence number, round) a slot can hold, across the sequence's wrap.
    #[test]
    fn round_tags_are_odd_and_distinct_across_sequences_and_rounds() {
        // 8 instead of 64 sequences and rounds at each end under Miri (42 000 tags take
        // minutes there).
        let k = if cfg!(miri) { 8 } else { 64 };
        for prefix in [0, 1, 1 << 63, 0x1234_5678_9abc_def1, u64::MAX] {
            let mut seen = HashSet::new();
            for seq in (0..k).chain(u32::MAX - (k - 1)..=u32::MAX) {
                for g in (0..k as usize).chain([1 << 20, u32::MAX as usize]) {
                    let t = round_tag(prefix, seq, g);
                    assert_eq!(t & 1, 1, "tag of ({seq}, {g}) under {prefix:#x}");
                    assert!(
                        seen.insert(t),
                        "({seq}, {g}) under {prefix:#x}: a tag twice"
                    );
                }
            }
        }
    }
}
