//! The mover thread: the copies and delta sends it runs for the fault handlers and the
//! transfers, its watches of the arrival words, and the steps the strips' ends share
//! with the transfer paths.

use super::*;

pub(super) fn mover(rx: Receiver<Task>, inflight: Arc<AtomicUsize>) {
    use std::sync::mpsc::TryRecvError;
    let mut watches: Vec<Watch> = Vec::new();
    let mut idle = 0u32;
    loop {
        let task = if watches.is_empty() {
            match rx.recv() {
                Ok(t) => Some(t),
                Err(_) => break,
            }
        } else {
            match rx.try_recv() {
                Ok(t) => Some(t),
                Err(TryRecvError::Empty) => None,
                // The layer is dropping: receives still posted never complete (their
                // memory stays alive through the `Arc`s dropped here only if unused).
                Err(TryRecvError::Disconnected) => break,
            }
        };
        let got = task.is_some();
        match task {
            Some(Task::Job(job)) => {
                if job.pieces.is_empty() {
                    run(&job);
                } else {
                    run_delta(&job);
                }
                let done = job.done.clone();
                drop(job);
                if let Some(d) = done {
                    d.fetch_sub(1, Ordering::AcqRel);
                }
                inflight.fetch_sub(1, Ordering::AcqRel);
            }
            Some(Task::Watch(w)) => watches.push(w),
            None => {}
        }
        let mut moved = false;
        watches.retain_mut(|w| {
            let (progress, finished) = poll_watch(w);
            moved |= progress;
            if finished {
                w.done.fetch_sub(1, Ordering::AcqRel);
                inflight.fetch_sub(1, Ordering::AcqRel);
            }
            !finished
        });
        if got || moved {
            idle = 0;
        } else {
            // Nothing arrived: spin, then yield, then sleep 20 µs at a time.
            idle = idle.saturating_add(1);
            if idle < 64 {
                std::hint::spin_loop();
            } else if idle < 256 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(20));
            }
        }
    }
}

/// Retires the pages of a posted receive that have arrived; at the epoch's end (the
/// sender's end word) the rest too, copied from the shadow, which holds the last
/// bytes of every page. Returns (whether a page retired, whether the receive is done).
fn poll_watch(w: &mut Watch) -> (bool, bool) {
    let page = sys::page_size();
    let xfer = w.shared.map.xfer() as usize;
    let copy_page = |p: usize| {
        let off = p * page;
        let n = page.min(w.len - off);
        // SAFETY: the shadow page lies in this process's own segment (the window was
        // checked against its length when the receive was made; mapped while the
        // endpoint lives, which joins this thread first), the destination in the
        // transfer view of a page this receive claimed (no access through the user
        // view until it retires). Byte-wise atomic (the sender's mover may write other
        // pages of the shadow meanwhile; this page it finished before its arrival
        // word said so).
        unsafe {
            gex_sync::copy::atomic_copy((w.shadow + off) as *const u8, (xfer + off) as *mut u8, n)
        };
    };
    // Pages ready in this pass retire in runs (one `mprotect` per run).
    let mut run: Option<(usize, usize)> = None;
    let flush = |run: &mut Option<(usize, usize)>| {
        if let Some((first, end)) = run.take() {
            let off = first * page;
            retire_strip(&w.shared, off, (end * page).min(w.len) - off, page);
        }
    };
    // The end word first: once it holds the epoch (`Acquire`), every arrival word of
    // the epoch is visible (the sender stores them before it, `Release`), so a page
    // whose word does not hold the epoch was not sent in it.
    // SAFETY: a word of the window's control block, in this process's own segment
    // (checked at `delta_recv_window`), accessed only through `gex_sync::word`.
    let end = unsafe { gex_sync::word::load32(w.ctl as *const u8, Ordering::Acquire) };
    let ended = end == w.epoch;
    let mut moved = false;
    for p in 0..w.left.len() {
        if !w.left[p] {
            flush(&mut run);
            continue;
        }
        // SAFETY: as above.
        let a = unsafe {
            gex_sync::word::load32(
                (w.arrivals + arrival_word(p)) as *const u8,
                Ordering::Acquire,
            )
        };
        if a == w.epoch || (ended && w.copy_rest) {
            copy_page(p);
        } else if !ended {
            flush(&mut run);
            continue;
        }
        // Else not sent in this epoch: unchanged, and the receive buffer holds the
        // shadow's bytes already (the program did not write it since).
        run = match run {
            Some((first, e)) if e == p => Some((first, p + 1)),
            other => {
                let mut other = other;
                flush(&mut other);
                Some((p, p + 1))
            }
        };
        w.left[p] = false;
        moved = true;
    }
    flush(&mut run);
    if !ended {
        return (moved, false);
    }
    // SAFETY: as above.
    unsafe {
        gex_sync::word::store32(
            (w.ctl + CONSUMED_WORD) as *mut u8,
            w.epoch,
            Ordering::Release,
        )
    };
    (true, true)
}

/// Moves one job strip by strip, the strip a faulting thread waits for first.
fn run(j: &Job) {
    let page = sys::page_size();
    let region = &j.shared.region;
    let n = j.plan.count();
    let first_page = j.off / page;
    let mut done = vec![false; n];
    let mut next = 0;
    for _ in 0..n {
        let w = region.wanted.swap(usize::MAX, Ordering::AcqRel);
        let mut pick = None;
        if w != usize::MAX && w >= first_page && (w - first_page) * page < j.len {
            let i = j.plan.index_of((w - first_page) * page);
            if !done[i] {
                pick = Some(i);
            }
        }
        let i = pick.unwrap_or_else(|| {
            while done[next] {
                next += 1;
            }
            next
        });
        done[i] = true;
        let (rel, s_len) = j.plan.strip(i);
        let s_off = j.off + rel;
        let remote = j.remote + rel;
        let local = j.shared.map.xfer() as usize + s_off;
        // SAFETY: `remote..+s_len` lies in a peer's segment, mapped while the endpoint
        // lives (checked against its length at issue; the endpoint drops its layers,
        // which join this thread, before its conduit endpoint); `local..+s_len` lies in
        // the transfer view, kept mapped by `j.shared`, and its pages are claimed by
        // this job (nobody else writes them, the user view cannot access them). Both
        // sides are copied byte-wise atomically (the peer may access its segment).
        unsafe {
            match j.dir {
                Dir::Get => {
                    gex_sync::copy::atomic_copy(remote as *const u8, local as *mut u8, s_len)
                }
                Dir::Put => {
                    gex_sync::copy::atomic_copy(local as *const u8, remote as *mut u8, s_len)
                }
            }
        }
        if j.lazy {
            sys::lazy_retire(region, s_off / page, s_len.div_ceil(page));
        } else {
            retire_strip(&j.shared, s_off, s_len, page);
        }
    }
    if j.lazy {
        sys::lazy_settle(region);
    }
}

/// Stores the message's length, then `epoch` in the end word, of the receive window
/// whose header is at `ctl` (a delta send's epoch is complete).
pub(crate) fn store_end(ctl: usize, epoch: u32, msg_len: usize) {
    // SAFETY: `ctl` is the page-aligned header of a receive window in a peer's segment
    // mapped in this process (checked when the epoch opened, against the window's
    // whole length; mapped while the endpoint lives, and the caller holds it); its
    // words are accessed only through `gex_sync::word`.
    unsafe {
        gex_sync::word::store64(
            (ctl + MSG_LEN_WORD) as *mut u8,
            msg_len as u64,
            Ordering::Relaxed,
        );
        gex_sync::word::store32(ctl as *mut u8, epoch, Ordering::Release);
    }
}

/// Copies the pieces of a delta send on the calling thread, which holds the buffer's
/// `&mut` (so nobody reads or writes it meanwhile: nothing is claimed), stores the
/// arrival words of a receive window, and moves the pages to `after` (read-only when
/// it is not [`table::READY`]). `base`: the target address of the buffer's byte 0.
pub(crate) fn copy_inline(
    shared: &Shared,
    base: usize,
    pieces: &[(usize, usize)],
    off: usize,
    len: usize,
    after: u32,
    notify: Option<(usize, u32)>,
) -> std::io::Result<()> {
    let page = sys::page_size();
    for &(o, l) in pieces {
        // SAFETY: the remote range lies in the target's mapped segment (the buffer's
        // whole image was checked at `delta_begin`/`delta_send_begin`); the local one
        // in the transfer view, which `shared` keeps mapped, of a buffer whose `&mut`
        // the caller holds and with no send in flight: nobody writes these bytes.
        unsafe {
            gex_sync::copy::atomic_copy(
                (shared.map.xfer() as usize + o) as *const u8,
                (base + o) as *mut u8,
                l,
            )
        };
    }
    if let Some((ctl, epoch)) = notify {
        for p in off / page..(off + len).div_ceil(page) {
            // SAFETY: as in `run_delta`: a word of the window's control block.
            unsafe {
                gex_sync::word::store32(
                    (ctl + arrival_word(p)) as *mut u8,
                    epoch,
                    Ordering::Release,
                )
            };
        }
    }
    if after != table::READY {
        shared.protect(off, len, Prot::Read)?;
        shared
            .region
            .table
            .set(off / page, len.div_ceil(page), after);
    }
    Ok(())
}

/// Copies a delta send's pieces to the target, then moves its pages to their state
/// after the send.
fn run_delta(j: &Job) {
    let page = sys::page_size();
    debug_assert_eq!(j.dir, Dir::Put);
    for &(off, len) in &j.pieces {
        let remote = j.remote + (off - j.off);
        let local = j.shared.map.xfer() as usize + off;
        // SAFETY: as in `run`: the remote range lies in the target's mapped segment
        // (the whole buffer's image was checked against its length when the epoch
        // opened), the local one in pages of the transfer view this job claimed
        // (read-only in the user view: nobody writes them); byte-wise atomic copy.
        unsafe { gex_sync::copy::atomic_copy(local as *const u8, remote as *mut u8, len) };
    }
    if let Some((ctl, epoch)) = j.notify {
        for p in j.off / page..(j.off + j.len).div_ceil(page) {
            // SAFETY: `ctl` is the control block of a receive window in the target's
            // mapped segment, sized for every page of the buffer (checked when the
            // epoch opened); a 4-aligned word accessed only through `gex_sync::word`.
            unsafe {
                gex_sync::word::store32(
                    (ctl + arrival_word(p)) as *mut u8,
                    epoch,
                    Ordering::Release,
                )
            };
        }
    }
    finish_delta(&j.shared, j.off, j.len, page, j.after);
}

/// Moves the pages of `[off, off+len)` of a delta send to `after`: unprotected first
/// when it is [`table::READY`]; [`table::CLEAN`] and [`table::SENT`] stay read-only.
pub(crate) fn finish_delta(shared: &Shared, off: usize, len: usize, page: usize, after: u32) {
    if after == table::READY {
        retire_strip(shared, off, len, page);
    } else {
        shared
            .region
            .table
            .set(off / page, len.div_ceil(page), after);
    }
}

/// Unprotects a strip's pages, then marks them retired.
pub(crate) fn retire_strip(shared: &Shared, off: usize, len: usize, page: usize) {
    if let Err(e) = shared.protect(off, len, Prot::ReadWrite) {
        // A page left protected and pending would make its readers wait forever.
        eprintln!("gex-overlap: mprotect failed: {e}");
        std::process::abort();
    }
    shared.region.table.retire(off / page, len.div_ceil(page));
}
