//! Distributed locks: the lock word of PE 0 holds 0 (free) or 1 + the holder's PE.

use super::sync::wait_for;
use super::*;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_set_lock(lock: *mut c_long) {
    entry("shmem_set_lock", || {
        let me = with(|s| Ok(u64::from(s.me) + 1))?;
        wait_for(|| with(|s| Ok(s.amo(lock as usize, 0, 8, Amo::Cswap, 0, me, true)? == 0)))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_test_lock(lock: *mut c_long) -> c_int {
    entry("shmem_test_lock", || {
        with(|s| {
            // Programs spin on test_lock: it polls, so that this PE serves the others.
            s.ep.poll();
            let me = u64::from(s.me) + 1;
            Ok(c_int::from(
                s.amo(lock as usize, 0, 8, Amo::Cswap, 0, me, true)? != 0,
            ))
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn shmem_clear_lock(lock: *mut c_long) {
    entry("shmem_clear_lock", || {
        with(|s| {
            s.quiet()?;
            let me = u64::from(s.me) + 1;
            let old = s.amo(lock as usize, 0, 8, Amo::Cswap, me, 0, true)?;
            if old != me {
                return Err(ShmemError::Invalid(
                    "shmem_clear_lock of a lock this PE does not hold".into(),
                ));
            }
            Ok(())
        })
    })
}
