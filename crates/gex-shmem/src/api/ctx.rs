//! Contexts: each context other than the default one gets a gex endpoint of its own
//! from a pool (`state::Slot`; docs/shmem.md, "Contexts"), or rides the PE's endpoint
//! when gex cannot make one.

use super::*;

fn new_ctx(team_i: usize, options: c_long, ctx: *mut *mut c_void) -> c_int {
    let r = entry("shmem_ctx_create", || {
        with(|s| {
            let i = s.new_ctx(team_i, options & SHMEM_CTX_PRIVATE != 0)?;
            Ok((i + 1) as *mut c_void)
        })
    });
    if ctx.is_null() {
        return -1;
    }
    // SAFETY: the caller's context slot.
    unsafe { ctx.write(r) };
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_ctx_create(options: c_long, ctx: *mut *mut c_void) -> c_int {
    new_ctx(0, options, ctx)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_team_create_ctx(
    team: *mut c_void,
    options: c_long,
    ctx: *mut *mut c_void,
) -> c_int {
    let ok = entry("shmem_team_create_ctx", || {
        with(|s| Ok(s.team(team_index(team)).is_ok()))
    });
    if !ok {
        if !ctx.is_null() {
            // SAFETY: the caller's context slot.
            unsafe { ctx.write(std::ptr::null_mut()) };
        }
        return -1;
    }
    new_ctx(team_index(team), options, ctx)
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_ctx_destroy(ctx: *mut c_void) {
    entry("shmem_ctx_destroy", || {
        if !ctx_live(ctx)? {
            return Ok(());
        }
        let i = (ctx as usize).wrapping_sub(1);
        if i != 0 {
            // The context's own endpoint first, without the state lock.
            state::ctx_quiet(i)?;
        }
        with(|s| s.end_ctx(i))
    })
}

/// gex's extension (declared in shmem.h): the index of the gex endpoint that carries
/// `ctx`'s operations to PEs reached through an endpoint (0: the PE's own endpoint;
/// -1: not a live context), and in `*ops` (when not NULL) how many operations that
/// endpoint carried for the context since it was made.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gexshmem_ctx_endpoint(ctx: *mut c_void, ops: *mut u64) -> c_int {
    let r = entry("gexshmem_ctx_endpoint", || {
        if !ctx_live(ctx)? {
            return Ok(None);
        }
        Ok(Some(ctx_index(ctx).map_or((0, 0), state::ctx_endpoint)))
    });
    let Some((index, n)) = r else {
        return -1;
    };
    if !ops.is_null() {
        // SAFETY: the caller's `uint64_t` slot.
        unsafe { ops.write(n) };
    }
    c_int::from(index)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_ctx_get_team(ctx: *mut c_void, team: *mut *mut c_void) -> c_int {
    let t = entry("shmem_ctx_get_team", || {
        with(|s| {
            Ok(s.ctxs
                .get((ctx as usize).wrapping_sub(1))
                .copied()
                .flatten())
        })
    });
    if team.is_null() {
        return -1;
    }
    // SAFETY: the caller's team slot.
    unsafe { team.write(t.map_or(std::ptr::null_mut(), |i| (i + 1) as *mut c_void)) };
    if t.is_some() { 0 } else { -1 }
}
