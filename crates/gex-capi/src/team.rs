//! Teams (`gex_team_t`): the world team of an endpoint, teams split from a parent by
//! color and key or made from a list of its ranks, their ranks, the translation of a team rank to a job rank, and
//! their release.
//!
//! A team is of one endpoint: this rank's endpoint of an index and the endpoints of
//! the same index of the other members. Collectives on a team (crate::coll) are
//! called with that endpoint; another endpoint's team is refused (`GEX_ERR_INVALID`).
#![allow(unsafe_code)]

use crate::handle::{EpState, gex_ep_t, gex_team_t};
use crate::ptr;
use crate::status::{Error, entry, gex_status_t};
use gex_facade::coll::Scratch;
use gex_facade::prelude::*;
use std::ffi::c_int;

/// The color of `gex_team_split` for a member that joins no new team.
pub const GEX_COLOR_NONE: u32 = 0xFFFF_FFFF;

/// Writes a new handle of the world team of `ep` (every rank's endpoint of `ep`'s
/// index, team rank = job rank) to `*team`. Not collective; free it with
/// `gex_team_free` (which then destroys nothing).
///
/// Returns `GEX_OK`; `GEX_ERR_NULL` if `team` is NULL.
///
/// # Safety
/// `ep` is NULL or a live endpoint; `team` is NULL or valid for writing one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_team_world(ep: *const gex_ep_t, team: *mut *mut gex_team_t) -> c_int {
    entry(|| {
        // SAFETY: the caller's promise, as `ptr::handle` states it.
        let h = unsafe { ptr::handle(ep) }?;
        if team.is_null() {
            return Err(Error::null("team"));
        }
        let w = h.with(|s| Ok(s.world.clone()))?;
        let p = ptr::into_raw(Box::new(gex_team_t::new(w, true)));
        // SAFETY: `team` is non-null and writable (the caller's promise).
        unsafe { ptr::write(team, p, "team") }?;
        Ok(gex_status_t::GEX_OK)
    })
}

/// Splits `parent` by `color`: the members that pass the same color form a new team,
/// ordered by (`key`, rank in `parent`); the new team's handle is written to `*team`.
/// A member passing `GEX_COLOR_NONE` joins no team: `*team` is set to NULL.
///
/// Collective over every member of `parent`, in the same order as its other
/// collectives. The new team has no scratch space of its own (its collectives use
/// active messages and the endpoint's own buffers).
///
/// Returns `GEX_OK`; `GEX_ERR_COLL` if the exchange failed; `GEX_ERR_INVALID` if
/// `parent` is not a team of `ep`.
///
/// # Safety
/// `ep` is NULL or a live endpoint, `parent` NULL or a live team; `team` is NULL or
/// valid for writing one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_team_split(
    ep: *const gex_ep_t,
    parent: *const gex_team_t,
    color: u32,
    key: u32,
    team: *mut *mut gex_team_t,
) -> c_int {
    let color = (color != GEX_COLOR_NONE).then_some(color);
    // SAFETY: the caller's promises, passed on.
    entry(|| unsafe {
        new_team(ep, parent, team, |s, p| {
            Ok(s.ep.split(p, color, key, Scratch::None)?)
        })
    })
}

/// The body of the team constructors: the handles checked and `team` non-null, then
/// `make` on the endpoint's state and the parent team; the new team's handle (NULL for
/// `None`) written to `*team`.
///
/// # Safety
/// `ep` is NULL or a live endpoint, `parent` NULL or a live team; `team` is NULL or
/// valid for writing one pointer.
unsafe fn new_team(
    ep: *const gex_ep_t,
    parent: *const gex_team_t,
    team: *mut *mut gex_team_t,
    make: impl FnOnce(&mut EpState, &Team) -> Result<Option<Team>, Error>,
) -> Result<gex_status_t, Error> {
    // SAFETY: the caller's promises, as `ptr::handle` states them.
    let h = unsafe { ptr::handle(ep) }?;
    // SAFETY: `parent` is NULL or a live team (the caller's promise).
    let p = unsafe { ptr::handle(parent) }?;
    if team.is_null() {
        return Err(Error::null("team"));
    }
    let parent = p.of(h)?.clone();
    let out = match h.with(|s| make(s, &parent))? {
        Some(t) => ptr::into_raw(Box::new(gex_team_t::new(t, false))),
        None => std::ptr::null_mut(),
    };
    // SAFETY: `team` is non-null and writable (the caller's promise).
    unsafe { ptr::write(team, out, "team") }?;
    Ok(gex_status_t::GEX_OK)
}

/// Creates a team of the members of `parent` whose team ranks in `parent` are the `n`
/// entries of `members`, in that order (the new team's rank `i` is `members[i]`), and
/// writes its handle to `*team`.
///
/// Collective over the listed members only (the others do not call it), which pass
/// the same list in the same order, in the same order as their other collectives on
/// `parent`. The new team has no scratch space of its own.
///
/// Returns `GEX_OK`; `GEX_ERR_COLL` for a list with a repeated or out-of-range rank, a
/// caller that is not listed, or a failed exchange; `GEX_ERR_INVALID` if `parent` is
/// not a team of `ep`.
///
/// # Safety
/// `ep` is NULL or a live endpoint, `parent` NULL or a live team; `members` is valid
/// for reading `n` `uint32_t`s; `team` is NULL or valid for writing one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_team_create(
    ep: *const gex_ep_t,
    parent: *const gex_team_t,
    members: *const u32,
    n: usize,
    team: *mut *mut gex_team_t,
) -> c_int {
    entry(|| {
        // SAFETY: `members` is readable for `n` elements (this function's `# Safety`).
        let list = unsafe { ptr::slice(members, n, "members") }?;
        // SAFETY: the caller's promises, passed on.
        unsafe {
            new_team(ep, parent, team, |s, p| {
                Ok(Some(s.ep.create_team(p, list, Scratch::None)?))
            })
        }
    })
}

/// Writes this rank's rank in `team` to `*rank` and the team's size to `*size`
/// (either may be NULL when not wanted).
///
/// # Safety
/// `team` is NULL or a live team; `rank` and `size` are NULL or valid for writing one
/// `uint32_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_team_rank(
    team: *const gex_team_t,
    rank: *mut u32,
    size: *mut u32,
) -> c_int {
    entry(|| {
        // SAFETY: the caller's promise, as `ptr::handle` states it.
        let t = unsafe { ptr::handle(team) }?;
        if !rank.is_null() {
            // SAFETY: non-null and writable (this function's `# Safety`).
            unsafe { ptr::write(rank, t.team.rank(), "rank") }?;
        }
        if !size.is_null() {
            // SAFETY: non-null and writable (this function's `# Safety`).
            unsafe { ptr::write(size, t.team.size(), "size") }?;
        }
        Ok(gex_status_t::GEX_OK)
    })
}

/// Writes the job rank (the rank of `gex_put`, `gex_get`, AMs and atomics) of the
/// member of rank `team_rank` in `team` to `*rank`.
///
/// Returns `GEX_OK`; `GEX_ERR_INVALID` if `team_rank` is not below the team's size.
///
/// # Safety
/// `team` is NULL or a live team; `rank` is NULL or valid for writing one `uint32_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_team_translate(
    team: *const gex_team_t,
    team_rank: u32,
    rank: *mut u32,
) -> c_int {
    entry(|| {
        // SAFETY: the caller's promise, as `ptr::handle` states it.
        let t = unsafe { ptr::handle(team) }?;
        let r = t.team.job_rank(team_rank).ok_or_else(|| {
            Error::invalid(format!(
                "no team rank {team_rank} (the team has {} members)",
                t.team.size()
            ))
        })?;
        // SAFETY: `rank` is NULL or writable (this function's `# Safety`).
        unsafe { ptr::write(rank, r, "rank") }?;
        Ok(gex_status_t::GEX_OK)
    })
}

/// Frees a team handle and, for a team made by `gex_team_split` or `gex_team_create`,
/// destroys the team on this rank (not collective). Wait for its nonblocking
/// collectives first, and free every team of an endpoint before `gex_ep_close` (this
/// call needs the live endpoint). A NULL `team` is ignored.
///
/// Returns `GEX_OK`; `GEX_ERR_COLL` if collectives of the team are still in flight
/// here (nothing is done: the handle stays valid); `GEX_ERR_INVALID` if `team` is not
/// a team of `ep`.
///
/// # Safety
/// `ep` is NULL or a live endpoint; `team` is NULL or a live team, used by no other
/// thread during or after the call (when it returns `GEX_OK`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_team_free(ep: *const gex_ep_t, team: *mut gex_team_t) -> c_int {
    entry(|| {
        if team.is_null() {
            return Ok(gex_status_t::GEX_OK);
        }
        // SAFETY: the caller's promises, as `ptr::handle` states them.
        let h = unsafe { ptr::handle(ep) }?;
        // SAFETY: `team` is a live team (this function's `# Safety`).
        let t = unsafe { ptr::handle(team.cast_const()) }?;
        let tm = t.of(h)?.clone();
        if !t.world {
            h.with(|s| Ok(s.ep.destroy_team(tm)?))?;
        }
        // SAFETY: as above; the caller no longer uses the handle.
        drop(unsafe { ptr::take(team) }?);
        Ok(gex_status_t::GEX_OK)
    })
}
