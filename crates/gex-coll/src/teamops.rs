//! Making and destroying teams: split, create and destroy (collectives over the
//! parent team), a new team's scratch table, shared-memory channel and, spanning
//! hosts, its host and leader sub-teams. The teams' state is [`crate::teams`]'s.

use crate::calls::gather_all_vec;
use crate::error::CollError;
use crate::hier::Hier;
use crate::layer::{coll, resolve};
use crate::mix::mix_all;
use crate::shm::{NCH, ShmTeam};
use crate::teams::{CollTeam, Scratch, ext, host_layout, shm_areas, shm_segments, with_ext};
use gex_core::spi::Conduit;
use gex_core::{Endpoint, EpAddr, Team};
use gex_sync::atomic::Ordering;
use std::collections::HashSet;

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
        let owner = c.teams.owner().clone();
        c.teams.scratch_for(scratch).map(|(l, a)| (l, a, owner))
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
        if c.shm.generation() == 0 {
            return (None, 0);
        }
        let areas = shm_areas(cx, team.members());
        let free = !c.shm.used().load(Ordering::Relaxed) & ((1u32 << NCH) - 1);
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
        c.shm.used().fetch_or(1 << ch, Ordering::Relaxed);
        let t = ShmTeam::new(
            ch,
            areas,
            shm_segments(cx, team.members()),
            c.shm.generation(),
            c.shm.used().clone(),
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
        if t.size() < 3 || c.shm.generation() == 0 {
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
    let _ = ext(t).hier.set(Hier::new(host, leaders, layout));
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
        c.teams.check_own(&team)?;
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
        c.teams.forget(&team);
        Ok(())
    })?
}
