//! Teams: the layer's state per team (an extension of gex-core's [`Team`]), and team
//! management: split, create, destroy, the world team and the sub-teams of teams
//! that span hosts.
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

use crate::api::gather_all_vec;
use crate::error::CollError;
use crate::hier::{Hier, Layout};
use crate::layer::{Coll, ShmLocal};
use crate::mix::mix_all;
use crate::shm::{Area, NCH, ShmTeam};
use gex_core::layer::Cx;
use gex_core::spi::Conduit;
use gex_core::{Capabilities, Endpoint, EpAddr, Team};
use gex_sync::atomic::{AtomicU32, Ordering};
use std::collections::{HashMap, HashSet};
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

/// The layer instance (one endpoint's [`Coll`]) that made a team's extension. Every
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
    seq: AtomicU32,
    bar_k: AtomicU32,
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
/// [`Coll::resolve`].
#[inline]
pub(crate) fn ext(team: &Team) -> &CollTeam {
    team.ext::<CollTeam>()
        .expect("gex-coll: a team the layer resolved carries its extension")
}

fn with_ext(id: u64, members: Vec<EpAddr>, me: u32, x: CollTeam) -> Team {
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
fn shm_areas<C: Conduit>(cx: &Cx<'_, C>, members: &[EpAddr]) -> Option<Vec<Area>> {
    if cfg!(gex_force_am_rma) || !cx.capabilities().contains(Capabilities::SHARED_MEMORY) {
        return None;
    }
    members.iter().map(|&a| cx.aux(a).map(Area::new)).collect()
}

/// Every member's segment as mapped here (base address, length), or empty if one is
/// not mapped (see [`ShmTeam::segs`]).
fn shm_segments<C: Conduit>(cx: &Cx<'_, C>, members: &[EpAddr]) -> Vec<(usize, usize)> {
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
/// every other's area).
pub(crate) fn world_team<C: Conduit>(cx: &Cx<'_, C>, shm: &mut ShmLocal, owner: &Owner) -> Team {
    let me = cx.addr();
    let size = cx.size();
    let members: Vec<EpAddr> = (0..size).map(|r| EpAddr::new(r, me.ep)).collect();
    let world_shm = (shm.generation > 0 && size > 1)
        .then(|| shm_areas(cx, &members))
        .flatten()
        .map(|areas| {
            ShmTeam::new(
                0,
                areas,
                shm_segments(cx, &members),
                shm.generation,
                shm.used.clone(),
                members.clone(),
                me.rank,
                0,
            )
        });
    if let Some(t) = &world_shm {
        shm.join(t);
    }
    with_ext(
        0,
        members,
        me.rank,
        CollTeam::new(owner, Vec::new(), None, world_shm),
    )
}

/// A team that stands in for the world team while the layer lends it out
/// ([`Coll::with_resolved`]).
pub(crate) fn placeholder(me: EpAddr) -> Team {
    Team::new(u64::MAX, vec![me], 0)
}

/// The hosts of `members` from the job layout (a rank of unknown host counts as a
/// host of its own), if they span hosts and share one.
fn host_layout<C: Conduit>(cx: &Cx<'_, C>, members: &[EpAddr]) -> Option<Layout> {
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
/// every rank, the ids follow [`setup_hier`]'s rule, the host team takes channel 0
/// (the world's, unused by a world that spans hosts) when its members map each
/// other's areas, and the leaders (one per host) never share memory.
pub(crate) fn setup_world_hier<C: Conduit>(c: &mut Coll, cx: &Cx<'_, C>) {
    let w = c.world.clone();
    if w.size() < 3 || c.shm.generation == 0 || ext(&w).shm.is_some() {
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
    let shm = (addrs.len() > 1)
        .then(|| shm_areas(cx, &addrs))
        .flatten()
        .map(|areas| {
            ShmTeam::new(
                0,
                areas,
                shm_segments(cx, &addrs),
                c.shm.generation,
                c.shm.used.clone(),
                addrs.clone(),
                host_rank,
                hid,
            )
        });
    if let Some(t) = &shm {
        c.shm.join(t);
    }
    let host = with_ext(
        hid,
        addrs,
        host_rank,
        CollTeam::new(&c.owner, Vec::new(), None, shm),
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
            CollTeam::new(&c.owner, Vec::new(), None, None),
        )
    });
    let ranges = layout.ranges();
    let _ = ext(&w).hier.set(Hier {
        host,
        leaders,
        layout,
        ranges,
    });
}

/// Runs `f` with the collectives layer of `ep`.
///
/// # Errors
/// [`CollError::Layer`] if the endpoint does not carry it.
#[inline]
pub(crate) fn coll<C: Conduit, R>(
    ep: &mut Endpoint<C>,
    f: impl FnOnce(&mut Coll, &mut Cx<'_, C>) -> R,
) -> Result<R, CollError> {
    // (The error is made only when returned: one built eagerly for `ok_or` was
    // dropped on every call.)
    match gex_core::layer::with::<Coll, C, R>(ep, |p, cx| f(Coll::unpin(p), cx)) {
        Some(r) => Ok(r),
        None => Err(CollError::Layer(
            "the endpoint does not carry the collectives layer",
        )),
    }
}

/// `team` resolved for `ep` (see [`Coll::resolve`]).
pub(crate) fn resolve<C: Conduit>(ep: &mut Endpoint<C>, team: &Team) -> Result<Team, CollError> {
    coll(ep, |c, _| c.resolve(team))?
}

/// Splits `parent` by `color` (see [`CollExt::split`](crate::CollExt::split)).
pub(crate) fn split<C: Conduit>(
    ep: &mut Endpoint<C>,
    parent: &Team,
    color: Option<u32>,
    key: u32,
    scratch: Scratch,
) -> Result<Option<Team>, CollError> {
    let parent = resolve(ep, parent)?;
    let mine = [u32::from(color.is_some()), color.unwrap_or(0), key];
    let all: Vec<u32> = gather_all_vec(ep, &parent, mine.to_vec())?;
    let idx = ext(&parent).splits.fetch_add(1, Ordering::Relaxed);
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
    form(ep, &parent, &members, id, scratch).map(Some)
}

/// Creates a team of the parent-team ranks `members` (see
/// [`CollExt::create_team`](crate::CollExt::create_team)).
pub(crate) fn create_team<C: Conduit>(
    ep: &mut Endpoint<C>,
    parent: &Team,
    members: &[u32],
    scratch: Scratch,
) -> Result<Team, CollError> {
    let parent = resolve(ep, parent)?;
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
        let mut c = ext(&parent)
            .creates
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let e = c.entry(lh).or_insert(0);
        *e += 1;
        *e
    };
    let id = mix_all(&[parent.id(), lh, u64::from(n), 0xc4ea]);
    form(ep, &parent, members, id, scratch)
}

/// Makes team `id` of the parent-team ranks `members` (collective over them): its
/// scratch table, its shared-memory channel and, spanning hosts, its sub-teams.
fn form<C: Conduit>(
    ep: &mut Endpoint<C>,
    parent: &Team,
    members: &[u32],
    id: u64,
    scratch: Scratch,
) -> Result<Team, CollError> {
    let addrs: Vec<EpAddr> = members
        .iter()
        .map(|&m| parent.members()[m as usize])
        .collect();
    let me = members
        .iter()
        .position(|&m| m == parent.rank())
        .ok_or(CollError::NotMember { team: id })? as u32;
    let (local, allocated, owner) = coll(ep, |c, _| {
        c.scratch_for(scratch).map(|(l, a)| (l, a, c.owner.clone()))
    })??;
    let provisional = with_ext(
        id,
        addrs.clone(),
        me,
        CollTeam::new(&owner, Vec::new(), None, None),
    );
    let table = match local {
        None => Vec::new(),
        Some((off, len)) => {
            let v: Vec<u64> = gather_all_vec(ep, &provisional, vec![off as u64, len as u64])?;
            v.chunks_exact(2)
                .map(|c| (c[0] as usize, c[1] as usize))
                .collect()
        }
    };
    let shm = agree_channel(ep, &provisional)?;
    let t = with_ext(id, addrs, me, CollTeam::new(&owner, table, allocated, shm));
    setup_hier(ep, &t)?;
    // Continue the provisional team's sequence numbers.
    let (p, x) = (ext(&provisional), ext(&t));
    x.seq
        .store(p.seq.load(Ordering::Relaxed), Ordering::Relaxed);
    x.bar_k
        .store(p.bar_k.load(Ordering::Relaxed), Ordering::Relaxed);
    Ok(t)
}

/// Agrees with the members of a new team on a shared-memory channel free on all of
/// them (collective over the provisional team).
fn agree_channel<C: Conduit>(
    ep: &mut Endpoint<C>,
    team: &Team,
) -> Result<Option<ShmTeam>, CollError> {
    if team.size() < 2 {
        return Ok(None);
    }
    let (areas, free) = coll(ep, |c, cx| {
        if c.shm.generation == 0 {
            return (None, 0);
        }
        let areas = shm_areas(cx, team.members());
        let free = !c.shm.used.load(Ordering::Relaxed) & ((1u32 << NCH) - 1);
        let mine = if areas.is_some() { free } else { 0 };
        (areas, mine)
    })?;
    let all: Vec<u32> = gather_all_vec(ep, team, vec![free])?;
    let common = all.iter().fold(u32::MAX, |a, &b| a & b);
    let (Some(areas), true) = (areas, common != 0) else {
        return Ok(None);
    };
    let ch = common.trailing_zeros() as usize;
    coll(ep, |c, cx| {
        c.shm.used.fetch_or(1 << ch, Ordering::Relaxed);
        let t = ShmTeam::new(
            ch,
            areas,
            shm_segments(cx, team.members()),
            c.shm.generation,
            c.shm.used.clone(),
            team.members().to_vec(),
            team.rank(),
            team.id(),
        );
        c.shm.join(&t);
        Some(t)
    })
}

/// Gives a team that spans hosts its host and leader sub-teams (collective over the
/// team: every member forms its host team, leaders the leaders team).
fn setup_hier<C: Conduit>(ep: &mut Endpoint<C>, t: &Team) -> Result<(), CollError> {
    let layout = coll(ep, |c, cx| {
        if t.size() < 3 || c.shm.generation == 0 {
            return None;
        }
        host_layout(cx, t.members())
    })?;
    let Some(layout) = layout else {
        return Ok(());
    };
    let me = t.rank();
    let my_host = layout.place[me as usize].0;
    let members = layout.hosts[my_host as usize].clone();
    let hid = mix_all(&[t.id(), 0x4057, u64::from(my_host)]);
    let host = form(ep, t, &members, hid, Scratch::None)?;
    let leaders = if members[0] == me {
        let lid = mix_all(&[t.id(), 0x1ead]);
        Some(form(ep, t, &layout.leaders(), lid, Scratch::None)?)
    } else {
        None
    };
    let ranges = layout.ranges();
    let _ = ext(t).hier.set(Hier {
        host,
        leaders,
        layout,
        ranges,
    });
    Ok(())
}

/// Destroys a team (see [`CollExt::destroy_team`](crate::CollExt::destroy_team)).
pub(crate) fn destroy_team<C: Conduit>(ep: &mut Endpoint<C>, team: Team) -> Result<(), CollError> {
    if team.id() == 0 {
        return Err(CollError::BadMembers(
            "the world team cannot be destroyed".into(),
        ));
    }
    gex_core::layer::poll(ep);
    coll(ep, |c, _| {
        // Another endpoint's team (or another layer instance's: another job's, an
        // earlier client's): its scratch is not this endpoint's to free.
        let foreign = team.ext::<CollTeam>().is_some_and(|x| !c.owner.made(x));
        if team.me() != c.me || foreign {
            return Err(CollError::NotMember { team: team.id() });
        }
        // A later team may take the id: forget the decision kept for this one.
        c.fast.forget();
        let pending = c
            .ops
            .values()
            .filter(|o| o.team.id() == team.id() && !o.taken)
            .count();
        if pending > 0 {
            return Err(CollError::TeamBusy {
                team: team.id(),
                pending,
            });
        }
        c.notified.remove(&team.id());
        if let Some(r) = c.owner.ext_of(&team).and_then(|x| x.allocated.clone()) {
            c.alloc.release(r);
        }
        Ok(())
    })?
}

impl Coll {
    /// This member's scratch range for a new team, allocated if asked.
    #[allow(clippy::type_complexity)]
    fn scratch_for(
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
