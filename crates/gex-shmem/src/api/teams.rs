//! Barriers and teams: `shmem_barrier_all`, `shmem_sync_all`, the team queries,
//! splits and destroy.

use super::*;

#[unsafe(no_mangle)]
pub extern "C" fn shmem_barrier_all() {
    entry("shmem_barrier_all", || with(|s| s.barrier_all()))
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_sync_all() {
    entry("shmem_sync_all", || {
        with(|s| {
            let w = s.world.clone();
            s.ep.barrier(&w)?;
            Ok(())
        })
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_team_sync(team: *mut c_void) -> c_int {
    entry("shmem_team_sync", || {
        with(|s| {
            let t = s.team(team_index(team))?.team.clone();
            s.ep.barrier(&t)?;
            Ok(0)
        })
    })
}

/// A number `f` reads off team handle `team`'s entry; -1 for an invalid handle.
fn team_number(name: &str, team: *mut c_void, f: impl FnOnce(&TeamEntry) -> u32) -> c_int {
    entry(name, || {
        with(|s| Ok(s.team(team_index(team)).map_or(-1, |t| f(t) as c_int)))
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_team_my_pe(team: *mut c_void) -> c_int {
    team_number("shmem_team_my_pe", team, |t| t.team.rank())
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_team_n_pes(team: *mut c_void) -> c_int {
    team_number("shmem_team_n_pes", team, |t| t.team.size())
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_team_translate_pe(
    src_team: *mut c_void,
    src_pe: c_int,
    dest_team: *mut c_void,
) -> c_int {
    entry("shmem_team_translate_pe", || {
        with(|s| {
            let (Ok(a), Ok(b)) = (s.team(team_index(src_team)), s.team(team_index(dest_team)))
            else {
                return Ok(-1);
            };
            let Some(r) = u32::try_from(src_pe).ok().and_then(|p| a.team.job_rank(p)) else {
                return Ok(-1);
            };
            Ok(b.team.rank_of_job_rank(r).map_or(-1, |x| x as c_int))
        })
    })
}

/// `shmem_team_config_t` of shmem.h.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct shmem_team_config_t {
    pub num_contexts: c_int,
}

/// `SHMEM_TEAM_NUM_CONTEXTS` of shmem.h.
const TEAM_NUM_CONTEXTS: c_long = 1;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_team_get_config(
    team: *mut c_void,
    mask: c_long,
    config: *mut shmem_team_config_t,
) -> c_int {
    entry("shmem_team_get_config", || {
        with(|s| {
            let Ok(t) = s.team(team_index(team)) else {
                return Ok(-1);
            };
            if !config.is_null() && mask & TEAM_NUM_CONTEXTS != 0 {
                // SAFETY: the caller's config struct.
                unsafe { (*config).num_contexts = t.num_contexts };
            }
            Ok(0)
        })
    })
}

/// Adds a team made by this library; returns its handle.
fn add_team(s: &mut state::State, team: Team, num_contexts: i32) -> *mut c_void {
    let e = TeamEntry {
        team,
        num_contexts,
        owned: true,
    };
    let i = match s.teams.iter().position(Option::is_none) {
        Some(i) => {
            s.teams[i] = Some(e);
            i
        }
        None => {
            s.teams.push(Some(e));
            s.teams.len() - 1
        }
    };
    (i + 1) as *mut c_void
}

unsafe fn config_contexts(config: *const shmem_team_config_t, mask: c_long) -> i32 {
    if config.is_null() || mask & TEAM_NUM_CONTEXTS == 0 {
        0
    } else {
        // SAFETY: the caller's config struct.
        unsafe { (*config).num_contexts }
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_team_split_strided(
    parent: *mut c_void,
    start: c_int,
    stride: c_int,
    size: c_int,
    config: *const shmem_team_config_t,
    config_mask: c_long,
    new_team: *mut *mut c_void,
) -> c_int {
    // SAFETY: the caller's config struct.
    let nctx = unsafe { config_contexts(config, config_mask) };
    let out = entry("shmem_team_split_strided", || {
        with(|s| {
            let Ok(p) = s.team(team_index(parent)) else {
                return Ok(None);
            };
            let p = p.team.clone();
            let n = p.size() as i64;
            let (start, stride, size) = (i64::from(start), i64::from(stride), i64::from(size));
            let valid = size > 0
                && (0..size).all(|i| (0..n).contains(&(start + i * stride)))
                && (stride != 0 || size == 1);
            let me = i64::from(p.rank());
            let key = (0..size).position(|i| start + i * stride == me);
            let color = if valid { key.map(|_| 0) } else { None };
            let t =
                s.ep.split(&p, color, key.unwrap_or(0) as u32, Scratch::None)?;
            if !valid {
                return Ok(Some(std::ptr::null_mut()));
            }
            Ok(Some(
                t.map_or(std::ptr::null_mut(), |t| add_team(s, t, nctx)),
            ))
        })
    });
    if !new_team.is_null() {
        // SAFETY: the caller's team slot.
        unsafe { new_team.write(out.unwrap_or(std::ptr::null_mut())) };
    }
    match out {
        Some(p) if p.is_null() => {
            // Invalid arguments return an error; a PE left out is not one.
            0
        }
        Some(_) => 0,
        None => -1,
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_team_split_2d(
    parent: *mut c_void,
    xrange: c_int,
    xaxis_config: *const shmem_team_config_t,
    xaxis_mask: c_long,
    xaxis_team: *mut *mut c_void,
    yaxis_config: *const shmem_team_config_t,
    yaxis_mask: c_long,
    yaxis_team: *mut *mut c_void,
) -> c_int {
    // SAFETY: the caller's config structs.
    let (xc, yc) = unsafe {
        (
            config_contexts(xaxis_config, xaxis_mask),
            config_contexts(yaxis_config, yaxis_mask),
        )
    };
    let out = entry("shmem_team_split_2d", || {
        with(|s| {
            let Ok(p) = s.team(team_index(parent)) else {
                return Ok(None);
            };
            if xrange <= 0 {
                return Ok(None);
            }
            let p = p.team.clone();
            let xr = (xrange as u32).min(p.size());
            let me = p.rank();
            let x = s.ep.split(&p, Some(me / xr), me % xr, Scratch::None)?;
            let y = s.ep.split(&p, Some(me % xr), me / xr, Scratch::None)?;
            let x = x.map_or(std::ptr::null_mut(), |t| add_team(s, t, xc));
            let y = y.map_or(std::ptr::null_mut(), |t| add_team(s, t, yc));
            Ok(Some((x, y)))
        })
    });
    let (x, y) = out.unwrap_or((std::ptr::null_mut(), std::ptr::null_mut()));
    if !xaxis_team.is_null() {
        // SAFETY: the caller's team slot.
        unsafe { xaxis_team.write(x) };
    }
    if !yaxis_team.is_null() {
        // SAFETY: the caller's team slot.
        unsafe { yaxis_team.write(y) };
    }
    if out.is_some() { 0 } else { -1 }
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_team_destroy(team: *mut c_void) {
    entry("shmem_team_destroy", || {
        with(|s| {
            let i = team_index(team);
            if i < 2 {
                return Ok(()); // the predefined teams are not destroyed
            }
            if let Some(Some(e)) = s.teams.get_mut(i).map(Option::take) {
                for c in 0..s.ctxs.len() {
                    if s.ctxs[c] == Some(i) {
                        s.set_ctx(c, None);
                    }
                }
                s.ep.destroy_team(e.team)?;
            }
            Ok(())
        })
    })
}
