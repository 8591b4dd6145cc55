//! Pinning a rank to one core (`--pin`).
//!
//! Both calls act on the calling thread only (`sched_{get,set}affinity` of thread 0 =
//! the caller), so a thread rank pins its own thread as a process rank pins its
//! process's one thread: the thread ranks of a process are started from its main
//! thread, which never pins itself, so each starts with the process's full mask.

use rustix::thread::{CpuSet, sched_getaffinity, sched_setaffinity};

/// The cores this thread may run on.
pub(crate) fn allowed_cores() -> Result<Vec<usize>, String> {
    let allowed = sched_getaffinity(None).map_err(|e| format!("sched_getaffinity: {e}"))?;
    let cpus: Vec<usize> = (0..CpuSet::MAX_CPU)
        .filter(|&c| allowed.is_set(c))
        .collect();
    if cpus.is_empty() {
        return Err("sched_getaffinity returned no allowed core".into());
    }
    Ok(cpus)
}

/// Pins the calling thread to the `(index mod n)`-th of the `n` cores it may run
/// on, and returns that core's number.
pub(crate) fn pin_to_nth_allowed(index: u32) -> Result<usize, String> {
    let cpus = allowed_cores()?;
    let cpu = cpus[index as usize % cpus.len()];
    let mut set = CpuSet::new();
    set.set(cpu);
    sched_setaffinity(None, &set).map_err(|e| format!("sched_setaffinity(core {cpu}): {e}"))?;
    Ok(cpu)
}

/// Pins the calling thread (a rank's) unless `mode` is off: the rank's place among the
/// ranks of its host picks the core (`pin_to_nth_allowed`).
pub(crate) fn pin_rank<C: gex::spi::Conduit>(
    client: &gex::core::Client<C>,
    mode: crate::PinMode,
) -> Result<(), String> {
    if mode != crate::PinMode::Off {
        let me = client.rank();
        let local = client
            .neighbours()
            .iter()
            .position(|&x| x == me)
            .unwrap_or(0) as u32;
        pin_to_nth_allowed(local)?;
    }
    Ok(())
}
