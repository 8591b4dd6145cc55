//! Teams: the layer's state per team (an extension of gex-core's [`Team`]), the
//! world team and the sub-teams of a world that spans hosts, and the layer's team
//! registry ([`Teams`], a component of [`Coll`](crate::Coll)). Making and destroying
//! teams (collectives over a parent) is [`crate::teamops`]'s.
//!
//! A team's extension ([`CollTeam`]) holds its sequence counter (every collective of
//! the team takes the next number; with the team id it keys every message, so any
//! number of collectives of one or many teams may be in flight as long as every
//! member starts the collectives of one team in the same order), its barrier counter,
//! its scratch space, its shared-memory channel and its host and leader sub-teams.
//! The primordial team of an endpoint ([`Endpoint::world`](gex_core::Endpoint::world))
//! is made by the core without one: the layer keeps the world's extension itself and
//! uses it whenever it is given the endpoint's primordial team.
//!
//! A [`Team`] is plain data: safe code may keep it past its client, clone it and hand
//! it to any thread, another job's included (`Send + Sync`). Its extension holds the
//! addresses of its job's shared-memory areas and segments, so the layer uses only the
//! extensions it made itself ([`Owner`]): a team another layer instance made (another
//! job in the same process, or an earlier client whose memory is unmapped) is not a
//! team of this endpoint's ([`CollError::NotMember`]).

use crate::barrier::Notified;
use crate::error::CollError;
use crate::hier::{Hier, Layout};
use crate::mix::mix_all;
use crate::shm::{Area, ShmTeam};
use gex_core::layer::Cx;
use gex_core::spi::Conduit;
use gex_core::{Capabilities, EpAddr, Team};
use gex_sync::atomic::{AtomicU32, Ordering};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock};

/// Where a new team's scratch space comes from (per member, in its segment).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Scratch {
    /// No scratch space.
    #[default]
    None,
    /// This client-given range of the member's segment: `(offset, len)` in bytes.
    Given(usize, usize),
    /// Allocate this many bytes from the scratch region configured with
    /// [`CollExt::set_scratch_region`](crate::CollExt::set_scratch_region); freed by
    /// [`CollExt::destroy_team`](crate::CollExt::destroy_team).
    Alloc(usize),
}

/// The layer instance (one endpoint's [`Coll`](crate::Coll)) that made a team's extension. Every
/// extension holds its maker's allocation, so no later layer gets the same address:
/// [`made`](Self::made) is one pointer comparison on the hot path of every call.
#[derive(Clone, Debug)]
pub(crate) struct Owner(Arc<()>);

impl Owner {
    /// A new layer instance's.
    pub(crate) fn new() -> Owner {
        Owner(Arc::new(()))
    }

    /// Whether this layer made `x`.
    #[inline]
    pub(crate) fn made(&self, x: &CollTeam) -> bool {
        Arc::ptr_eq(&self.0, &x.owner.0)
    }

    /// `team`'s extension if this layer made it (`None`: no extension, or another
    /// layer instance's, whose memory is not this endpoint's to use).
    #[inline]
    pub(crate) fn ext_of<'t>(&self, team: &'t Team) -> Option<&'t CollTeam> {
        team.ext::<CollTeam>().filter(|x| self.made(x))
    }
}

/// The layer's state of one team (the extension of a [`Team`] it made).
pub(crate) struct CollTeam {
    pub(crate) seq: AtomicU32,
    pub(crate) bar_k: AtomicU32,
    pub(crate) splits: AtomicU32,
    pub(crate) creates: Mutex<HashMap<u64, u32>>,
    /// Per member: (offset, len) of its scratch space.
    pub(crate) scratch: Vec<(usize, usize)>,
    /// The range this endpoint allocated for the team (freed on destroy).
    pub(crate) allocated: Option<Range<usize>>,
    /// The team's shared-memory channel, if it has one.
    pub(crate) shm: Option<ShmTeam>,
    /// Sub-teams of a team spanning hosts (set once, at creation).
    pub(crate) hier: OnceLock<Hier>,
    /// The layer instance that made it (the only one that uses it).
    owner: Owner,
}

impl CollTeam {
    pub(crate) fn new(
        owner: &Owner,
        scratch: Vec<(usize, usize)>,
        allocated: Option<Range<usize>>,
        shm: Option<ShmTeam>,
    ) -> CollTeam {
        CollTeam {
            owner: owner.clone(),
            seq: AtomicU32::new(0),
            bar_k: AtomicU32::new(0),
            splits: AtomicU32::new(0),
            creates: Mutex::new(HashMap::new()),
            scratch,
            allocated,
            shm,
            hier: OnceLock::new(),
        }
    }

    /// The sequence number the team's next collective will take.
    pub(crate) fn peek_seq(&self) -> u32 {
        self.seq.load(Ordering::Relaxed)
    }

    /// The sequence number of the team's next collective. Only the team's own
    /// endpoint counts (the layer refuses a team whose `me` is another endpoint, and an
    /// endpoint is driven by one thread at a time): a load and a store, no locked
    /// read-modify-write on the hot path.
    #[inline]
    pub(crate) fn next_seq(&self) -> u32 {
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store(s.wrapping_add(1), Ordering::Relaxed);
        s
    }

    /// The number of the team's next barrier (from 1); counted as
    /// [`next_seq`](Self::next_seq).
    pub(crate) fn next_barrier(&self) -> u32 {
        let k = self.bar_k.load(Ordering::Relaxed).wrapping_add(1);
        self.bar_k.store(k, Ordering::Relaxed);
        k
    }
}

/// The extension of a team made (or resolved) by the layer.
///
/// # Panics
/// If `team` has none: every team the engine holds was resolved by
/// [`Coll::resolve`](crate::Coll::resolve).
#[inline]
pub(crate) fn ext(team: &Team) -> &CollTeam {
    team.ext::<CollTeam>()
        .expect("gex-coll: a team the layer resolved carries its extension")
}

pub(crate) fn with_ext(id: u64, members: Vec<EpAddr>, me: u32, x: CollTeam) -> Team {
    Team::with_ext(id, members, me, Arc::new(x))
}

/// What the collectives layer adds to a [`Team`].
pub trait TeamExt {
    /// Scratch space of every member: `(offset, len)` in its segment (empty if the
    /// team has none, as the primordial team).
    fn scratch(&self) -> &[(usize, usize)];
}

impl TeamExt for Team {
    fn scratch(&self) -> &[(usize, usize)] {
        self.ext::<CollTeam>().map_or(&[], |x| &x.scratch)
    }
}

/// The layer's slices of the auxiliary areas of `members`, if the conduit maps all of
/// them and this endpoint runs shared-memory collectives.
pub(crate) fn shm_areas<C: Conduit>(cx: &Cx<'_, C>, members: &[EpAddr]) -> Option<Vec<Area>> {
    if cfg!(gex_force_am_rma) || !cx.capabilities().contains(Capabilities::SHARED_MEMORY) {
        return None;
    }
    members.iter().map(|&a| cx.aux(a).map(Area::new)).collect()
}

/// Every member's segment as mapped here (base address, length), or empty if one is
/// not mapped (see [`ShmTeam::segs`]).
pub(crate) fn shm_segments<C: Conduit>(cx: &Cx<'_, C>, members: &[EpAddr]) -> Vec<(usize, usize)> {
    members
        .iter()
        .map(|&a| {
            cx.peer_segment(a)
                .map(|(p, len)| (p.as_ptr() as usize, len))
        })
        .collect::<Option<Vec<_>>>()
        .unwrap_or_default()
}

/// The primordial team with the layer's extension (channel 0 when every rank maps
/// every other's area), for an endpoint whose layer generation is `generation` (0:
/// no shared-memory collectives) and channels in use `used`. The caller joins its
/// channel ([`ShmPath::join`](crate::shmpath::ShmPath::join)).
pub(crate) fn world_team<C: Conduit>(
    cx: &Cx<'_, C>,
    (generation, used): (u64, &Arc<AtomicU32>),
    owner: &Owner,
) -> Team {
    let me = cx.addr();
    let size = cx.size();
    let members: Vec<EpAddr> = (0..size).map(|r| EpAddr::new(r, me.ep)).collect();
    let world_shm = (generation > 0)
        .then(|| channel_0(cx, &members, (generation, used), (me.rank, 0)))
        .flatten();
    with_ext(
        0,
        members,
        me.rank,
        CollTeam::new(owner, Vec::new(), None, world_shm),
    )
}

/// The shared-memory extension on channel 0 of a team of more than one member
/// (`members`; this member's team rank and the team's id `(me, id)`) whose areas
/// every member maps, for layer generation `generation` and channels in use `used`.
fn channel_0<C: Conduit>(
    cx: &Cx<'_, C>,
    members: &[EpAddr],
    (generation, used): (u64, &Arc<AtomicU32>),
    (me, id): (u32, u64),
) -> Option<ShmTeam> {
    let areas = (members.len() > 1)
        .then(|| shm_areas(cx, members))
        .flatten()?;
    let segs = shm_segments(cx, members);
    let used = used.clone();
    Some(ShmTeam::new(
        0,
        areas,
        segs,
        generation,
        used,
        members.to_vec(),
        me,
        id,
    ))
}

/// A team that stands in for the world team while the layer lends it out
/// ([`Coll::with_resolved`](crate::Coll::with_resolved)).
pub(crate) fn placeholder(me: EpAddr) -> Team {
    Team::new(u64::MAX, vec![me], 0)
}

/// The hosts of `members` from the job layout (a rank of unknown host counts as a
/// host of its own), if they span hosts and share one.
pub(crate) fn host_layout<C: Conduit>(cx: &Cx<'_, C>, members: &[EpAddr]) -> Option<Layout> {
    let hosts: Vec<u32> = members
        .iter()
        .map(|a| {
            cx.layout()
                .host
                .get(a.rank as usize)
                .copied()
                .unwrap_or(u32::MAX - a.rank)
        })
        .collect();
    Layout::new(&hosts)
}

/// Gives the world team host and leader sub-teams when the job spans hosts and one of
/// them holds two or more ranks, without communication: the layout is the same on
/// every rank, the ids follow [`setup_hier`](crate::teamops)'s rule, the host team takes channel 0
/// (the world's, unused by a world that spans hosts) when its members map each
/// other's areas, and the leaders (one per host) never share memory. `generation`
/// and `used` as for [`world_team`]; the caller joins the host team's channel.
pub(crate) fn setup_world_hier<C: Conduit>(
    w: &Team,
    cx: &Cx<'_, C>,
    (generation, used): (u64, &Arc<AtomicU32>),
    owner: &Owner,
) {
    if w.size() < 3 || generation == 0 || ext(w).shm.is_some() {
        return;
    }
    let Some(layout) = host_layout(cx, w.members()) else {
        return;
    };
    let me = w.rank();
    let my_host = layout.place[me as usize].0;
    let ranks = &layout.hosts[my_host as usize];
    let addrs: Vec<EpAddr> = ranks.iter().map(|&r| w.members()[r as usize]).collect();
    let host_rank = layout.place[me as usize].1;
    let hid = mix_all(&[w.id(), 0x4057, u64::from(my_host)]);
    let shm = channel_0(cx, &addrs, (generation, used), (host_rank, hid));
    let host = with_ext(
        hid,
        addrs,
        host_rank,
        CollTeam::new(owner, Vec::new(), None, shm),
    );
    let leaders = (host_rank == 0).then(|| {
        let addrs: Vec<EpAddr> = layout
            .leaders()
            .iter()
            .map(|&r| w.members()[r as usize])
            .collect();
        let lid = mix_all(&[w.id(), 0x1ead]);
        with_ext(
            lid,
            addrs,
            my_host,
            CollTeam::new(owner, Vec::new(), None, None),
        )
    });
    let _ = ext(w).hier.set(Hier::new(host, leaders, layout));
}

/// The layer's team registry (a component of [`Coll`](crate::Coll)): this endpoint's
/// address, the world team (the primordial team with the layer's extension, lent to
/// blocking calls without touching its reference count), the layer instance that
/// makes extensions ([`Owner`]), the teams that failed and the split-phase barriers
/// notified, and the scratch allocator over the segment.
pub(crate) struct Teams {
    me: EpAddr,
    /// The primordial team with the layer's extension.
    world: Team,
    /// A stand-in for `world` while [`lend_world`](Self::lend_world) lends it.
    hole: Option<Team>,
    /// This layer instance, the maker of the team extensions it uses.
    owner: Owner,
    /// Teams whose members disagreed on a collective, by id, with the error: every
    /// later collective of them fails with it ([`crate::rootcheck`]).
    failed: HashMap<u64, CollError>,
    /// Split-phase barriers notified and not yet waited for, by team id.
    notified: HashMap<u64, Notified>,
    alloc: SegAlloc,
    seg_len: usize,
}

/// How [`Teams::lookup`] found a team of this endpoint's.
pub(crate) enum Found {
    /// The team carries this layer's extension: use it as it is.
    Own,
    /// The endpoint's primordial team: use the registry's world team.
    World,
}

impl Teams {
    /// The registry of endpoint `me` whose world team is `world`, made by `owner`, on
    /// a segment of `seg_len` bytes (no scratch region yet).
    pub(crate) fn new(me: EpAddr, world: Team, owner: Owner, seg_len: usize) -> Teams {
        Teams {
            me,
            world,
            hole: Some(placeholder(me)),
            owner,
            failed: HashMap::new(),
            notified: HashMap::new(),
            alloc: SegAlloc::default(),
            seg_len,
        }
    }

    /// This endpoint's address.
    #[inline(always)]
    pub(crate) fn me(&self) -> EpAddr {
        self.me
    }

    /// The layer instance that makes this endpoint's team extensions.
    #[inline]
    pub(crate) fn owner(&self) -> &Owner {
        &self.owner
    }

    /// The length of this endpoint's segment.
    #[inline]
    pub(crate) fn seg_len(&self) -> usize {
        self.seg_len
    }

    /// Where `team`'s extension is: its own, or (the endpoint's primordial team) the
    /// world's.
    ///
    /// # Errors
    /// [`CollError::NotMember`] if this endpoint is not `team.me()` (or the team was
    /// not made by this layer).
    #[inline(always)]
    pub(crate) fn lookup(&self, team: &Team) -> Result<Found, CollError> {
        if team.me() != self.me {
            return Err(CollError::NotMember { team: team.id() });
        }
        if self.owner.ext_of(team).is_some() {
            return Ok(Found::Own);
        }
        // `me` matched: the primordial team of this endpoint's index (a team with
        // another layer instance's extension is no team of this endpoint's, but for
        // this rule, which ignores its members as for a team without one).
        if team.id() != 0 || team.size() != self.world.size() {
            return Err(CollError::NotMember { team: team.id() });
        }
        Ok(Found::World)
    }

    /// `team` with the layer's extension: itself, or the world team for the
    /// endpoint's primordial team.
    ///
    /// # Errors
    /// As [`lookup`](Self::lookup).
    pub(crate) fn resolve(&self, team: &Team) -> Result<Team, CollError> {
        match self.lookup(team)? {
            Found::Own => Ok(team.clone()),
            Found::World => Ok(self.world.clone()),
        }
    }

    /// `team`'s extension, resolved as [`lookup`](Self::lookup) does, by reference;
    /// `None` for a team that is not this endpoint's.
    #[inline(always)]
    pub(crate) fn borrowed_ext<'a>(&'a self, team: &'a Team) -> Option<&'a CollTeam> {
        if team.me() != self.me {
            return None;
        }
        self.owner.ext_of(team).or_else(|| {
            (team.id() == 0 && team.size() == self.world.size()).then(|| ext(&self.world))
        })
    }

    /// Lends the world team out (no reference count touched: a stand-in takes its
    /// place until [`give_back`](Self::give_back)); `None` if it is lent already.
    #[inline(always)]
    pub(crate) fn lend_world(&mut self) -> Option<Team> {
        let hole = self.hole.take()?;
        Some(std::mem::replace(&mut self.world, hole))
    }

    /// Takes back the world team [`lend_world`](Self::lend_world) lent.
    #[inline(always)]
    pub(crate) fn give_back(&mut self, world: Team) {
        self.hole = Some(std::mem::replace(&mut self.world, world));
    }

    /// True if some team failed.
    #[inline(always)]
    pub(crate) fn any_failed(&self) -> bool {
        !self.failed.is_empty()
    }

    /// The error team `id` failed with, if it did.
    #[inline]
    pub(crate) fn failed(&self, id: u64) -> Option<&CollError> {
        self.failed.get(&id)
    }

    /// Records that team `id` failed with `e` unless it failed with an earlier
    /// collective already (`earlier(e, known)`: `e` is earlier than `known`); true if
    /// recorded.
    pub(crate) fn record_failure(
        &mut self,
        id: u64,
        e: &CollError,
        earlier: impl Fn(&CollError, &CollError) -> bool,
    ) -> bool {
        if self.failed.get(&id).is_none_or(|k| earlier(e, k)) {
            self.failed.insert(id, e.clone());
            return true;
        }
        false
    }

    /// True if a split-phase barrier of team `id` was notified and not waited for.
    pub(crate) fn is_notified(&self, id: u64) -> bool {
        self.notified.contains_key(&id)
    }

    /// Keeps the split-phase barrier `n` of team `id` until it is waited for.
    pub(crate) fn keep_notified(&mut self, id: u64, n: Notified) {
        self.notified.insert(id, n);
    }

    /// Takes the split-phase barrier of team `id` notified.
    pub(crate) fn take_notified(&mut self, id: u64) -> Option<Notified> {
        self.notified.remove(&id)
    }

    /// Sets the segment range scratch space is allocated from.
    ///
    /// # Errors
    /// [`CollError::Scratch`] if it is not inside the segment.
    pub(crate) fn set_scratch_region(&mut self, region: Range<usize>) -> Result<(), CollError> {
        if region.end > self.seg_len || region.start > region.end {
            return Err(CollError::Scratch(format!(
                "region {region:?} is outside the {}-byte segment",
                self.seg_len
            )));
        }
        self.alloc = SegAlloc::new(region);
        Ok(())
    }

    /// This member's scratch range for a new team, allocated if asked.
    #[allow(clippy::type_complexity)]
    pub(crate) fn scratch_for(
        &mut self,
        scratch: Scratch,
    ) -> Result<(Option<(usize, usize)>, Option<Range<usize>>), CollError> {
        match scratch {
            Scratch::None => Ok((None, None)),
            Scratch::Given(off, len) => {
                if off.checked_add(len).is_none_or(|e| e > self.seg_len) {
                    return Err(CollError::Scratch(format!(
                        "[{off}, +{len}) is outside the segment"
                    )));
                }
                Ok((Some((off, len)), None))
            }
            Scratch::Alloc(len) => {
                let r = self.alloc.alloc(len).ok_or_else(|| {
                    CollError::Scratch(format!("cannot allocate {len} bytes (set_scratch_region)"))
                })?;
                Ok((Some((r.start, len)), Some(r)))
            }
        }
    }

    /// Checks that `team` is this endpoint's to destroy.
    ///
    /// # Errors
    /// [`CollError::NotMember`] for another endpoint's team, or another layer
    /// instance's (another job's, an earlier client's: its scratch is not this
    /// endpoint's to free).
    pub(crate) fn check_own(&self, team: &Team) -> Result<(), CollError> {
        let foreign = team.ext::<CollTeam>().is_some_and(|x| !self.owner.made(x));
        if team.me() != self.me || foreign {
            return Err(CollError::NotMember { team: team.id() });
        }
        Ok(())
    }

    /// Forgets destroyed team `team` (checked by [`check_own`](Self::check_own)):
    /// its notified barrier and its allocated scratch range.
    pub(crate) fn forget(&mut self, team: &Team) {
        self.notified.remove(&team.id());
        if let Some(r) = self.owner.ext_of(team).and_then(|x| x.allocated.clone()) {
            self.alloc.release(r);
        }
    }
}

/// First-fit allocator over the scratch region of the segment.
#[derive(Debug, Default)]
pub(crate) struct SegAlloc {
    free: Vec<Range<usize>>,
    /// Ranges handed out and not released: only these can be released (a team
    /// destroyed twice, or one allocated from a previous region, frees nothing).
    used: Vec<Range<usize>>,
}

impl SegAlloc {
    pub(crate) fn new(region: Range<usize>) -> SegAlloc {
        SegAlloc {
            free: if region.is_empty() {
                vec![]
            } else {
                vec![region]
            },
            used: Vec::new(),
        }
    }

    pub(crate) fn alloc(&mut self, len: usize) -> Option<Range<usize>> {
        let len = len.max(1).div_ceil(64).checked_mul(64)?;
        let i = self.free.iter().position(|r| r.len() >= len)?;
        let r = self.free[i].clone();
        let out = r.start..r.start + len;
        if r.len() == len {
            self.free.remove(i);
        } else {
            self.free[i] = out.end..r.end;
        }
        self.used.push(out.clone());
        Some(out)
    }

    pub(crate) fn release(&mut self, r: Range<usize>) {
        let Some(i) = self.used.iter().position(|u| *u == r) else {
            return;
        };
        self.used.swap_remove(i);
        self.free.push(r);
        self.free.sort_by_key(|r| r.start);
        let mut merged: Vec<Range<usize>> = Vec::with_capacity(self.free.len());
        for r in self.free.drain(..) {
            match merged.last_mut() {
                Some(l) if l.end == r.start => l.end = r.end,
                _ => merged.push(r),
            }
        }
        self.free = merged;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_release_merge() {
        let mut a = SegAlloc::new(0..1024);
        let x = a.alloc(100).unwrap();
        let y = a.alloc(500).unwrap();
        assert_eq!(x, 0..128);
        assert_eq!(y, 128..640);
        assert!(a.alloc(600).is_none());
        a.release(x);
        a.release(y);
        assert_eq!(a.alloc(1024), Some(0..1024));
    }

    #[test]
    fn ids_differ() {
        assert_ne!(mix_all(&[0, 0, 1]), mix_all(&[0, 0, 2]));
        assert_ne!(mix_all(&[0, 1, 1]), 0);
    }
}
