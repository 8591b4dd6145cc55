//! Library setup, exit and query (`shmem_init`, `shmem_finalize`, `shmem_my_pe`,
//! `shmem_ptr`, `shmem_info_*`...), and the symbol behind shmem.h's unsupported
//! generic selections.

use super::*;

#[unsafe(no_mangle)]
pub extern "C" fn shmem_init() {
    entry("shmem_init", || state::init(0).map(|_| ()))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_init_thread(requested: c_int, provided: *mut c_int) -> c_int {
    entry("shmem_init_thread", || {
        let p = state::init(requested)?;
        if !provided.is_null() {
            // SAFETY: the caller's pointer to an int.
            unsafe { provided.write(p) };
        }
        Ok(0)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_query_thread(provided: *mut c_int) {
    entry("shmem_query_thread", || {
        let p = state::pe()?.thread_level;
        if !provided.is_null() {
            // SAFETY: the caller's pointer to an int.
            unsafe { provided.write(p) };
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_finalize() {
    entry("shmem_finalize", state::finalize)
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_global_exit(status: c_int) {
    // Completes what this PE issued, then ends the job with `status` (gex-run ends
    // every other PE).
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    state::exit_job(status)
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_my_pe() -> c_int {
    entry("shmem_my_pe", || Ok(state::pe()?.me as c_int))
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_n_pes() -> c_int {
    entry("shmem_n_pes", || Ok(state::pe()?.npes as c_int))
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_pe_accessible(pe: c_int) -> c_int {
    entry("shmem_pe_accessible", || {
        with(|s| Ok(c_int::from(s.pe(pe).is_ok())))
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_addr_accessible(addr: *const c_void, pe: c_int) -> c_int {
    entry("shmem_addr_accessible", || {
        with(|s| {
            Ok(c_int::from(
                s.pe(pe).is_ok() && s.locate(addr as usize, 1).is_ok(),
            ))
        })
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_ptr(dest: *const c_void, pe: c_int) -> *mut c_void {
    entry("shmem_ptr", || {
        with(|s| {
            let Ok(pe) = s.pe(pe) else {
                return Ok(std::ptr::null_mut());
            };
            Ok(s.ptr(dest as usize, pe)
                .map_or(std::ptr::null_mut(), |a| a as *mut c_void))
        })
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn shmem_team_ptr(team: *mut c_void, dest: *const c_void, pe: c_int) -> *mut c_void {
    entry("shmem_team_ptr", || {
        with(|s| {
            let t = &s.team(team_index(team))?.team;
            let Some(r) = u32::try_from(pe).ok().and_then(|p| t.member(p)) else {
                return Ok(std::ptr::null_mut());
            };
            Ok(s.ptr(dest as usize, r.rank)
                .map_or(std::ptr::null_mut(), |a| a as *mut c_void))
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_info_get_version(major: *mut c_int, minor: *mut c_int) {
    if !major.is_null() {
        // SAFETY: the caller's pointer to an int.
        unsafe { major.write(MAJOR) };
    }
    if !minor.is_null() {
        // SAFETY: the caller's pointer to an int.
        unsafe { minor.write(MINOR) };
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_info_get_name(name: *mut c_char) {
    if !name.is_null() {
        // SAFETY: the caller's buffer of SHMEM_MAX_NAME_LEN (256) bytes.
        unsafe { std::ptr::copy_nonoverlapping(NAME.as_ptr().cast::<c_char>(), name, NAME.len()) };
    }
}

/// The default branch of shmem.h's generic selections: a program naming a generic
/// function with an unsupported type does not compile (this takes no arguments); it
/// exists so that every declaration of the header is a symbol of the library.
#[unsafe(no_mangle)]
pub extern "C" fn gexshmem_generic_type_not_supported() {
    crate::fatal(
        "shmem.h",
        "a generic function was called with an unsupported type",
    )
}
