//! The sends of an epoch: which pages are ready, cut into spans at the delta and
//! grouped, queued to the mover or sent by the caller.

use super::*;

pub(super) fn begin<C: Conduit>(
    ep: &mut Endpoint<C>,
    buf: &mut DeltaBuf,
    dst: GlobalPtr<u8>,
    to_window: bool,
) -> Result<(), OverlapError> {
    if buf.epoch.is_some() {
        return Err(OverlapError::EpochOpen);
    }
    let len = buf.len();
    let page = sys::page_size();
    let (peer, delta, whole_pct) = with(ep, |l, cx| {
        // Auto: the strip model's length for the buffer, between 4 and 16 pages
        // (seed 001: 4 to 5 pages amortise a delta's cost; much longer ones lose
        // the pipeline).
        let delta = l.delta.unwrap_or_else(|| {
            model::strip_len(l.cost(), &Decomp::Auto, len, page, 0).clamp(4 * page, 16 * page)
        });
        (cx.peer_segment(dst.addr()), delta, l.delta_whole)
    })?;
    if to_window && dst.offset % page != 0 {
        return Err(OverlapError::Unaligned {
            offset: dst.offset,
            page,
        });
    }
    let out_of_segment = |len: usize, seg_len: usize| OverlapError::OutOfSegment {
        offset: dst.offset,
        len,
        seg_len,
    };
    let (remote, header, rwindow) = match peer {
        Some((base, seg_len)) if to_window => {
            // The header first (its buffer length says where the rest lies).
            if dst.offset.checked_add(page).is_none_or(|e| e > seg_len) {
                return Err(out_of_segment(page, seg_len));
            }
            let ctl = base.as_ptr() as usize + dst.offset;
            // SAFETY: the header page lies in the target's mapped segment (checked
            // just above), page-aligned; its words are accessed only through
            // `gex_sync::word`.
            let wlen = unsafe {
                gex_sync::word::load64(
                    (ctl + layer::WINDOW_LEN_WORD) as *const u8,
                    Ordering::Acquire,
                )
            } as usize;
            if wlen < len {
                // A window for shorter buffers, or none made there (0).
                return Err(OverlapError::OutOfBuffer {
                    offset: 0,
                    len,
                    buf_len: wlen,
                });
            }
            let whole = DeltaRecv::window_len(wlen);
            if dst.offset.checked_add(whole).is_none_or(|e| e > seg_len) {
                return Err(out_of_segment(whole, seg_len));
            }
            (
                Some(ctl + page),
                Some((ctl, ctl + arrivals_offset(wlen))),
                None,
            )
        }
        Some((base, seg_len)) => {
            if dst.offset.checked_add(len).is_none_or(|e| e > seg_len) {
                return Err(out_of_segment(len, seg_len));
            }
            (Some(base.as_ptr() as usize + dst.offset), None, None)
        }
        None if to_window => (None, None, Some(remote_window(ep, dst, len, page)?)),
        // gex-rma checks the range at each put.
        None => (None, None, None),
    };
    wait_buf(ep, buf);
    let window = match header {
        Some((ctl, arrivals)) => {
            // The receiver must have received the last epoch before the shadow is
            // written again (a rendezvous: this waits for its `delta_recv`).
            // SAFETY: as above: words of the header.
            let end = unsafe { gex_sync::word::load32(ctl as *const u8, Ordering::Acquire) };
            let mut spins = 0u32;
            loop {
                // SAFETY: as above.
                let consumed = unsafe {
                    gex_sync::word::load32(
                        (ctl + layer::CONSUMED_WORD) as *const u8,
                        Ordering::Acquire,
                    )
                };
                if consumed == end {
                    break;
                }
                backoff(ep, &mut spins);
            }
            Some((ctl, arrivals, end.wrapping_add(1)))
        }
        None => None,
    };
    let key = Dest::Seg(dst.rank, dst.ep, dst.offset);
    buf.sent.clear();
    buf.epoch = Some(Epoch {
        dst,
        remote,
        full: buf.last != Some(key),
        delta: delta.div_ceil(page) * page,
        whole_pct,
        stats: DeltaStats::default(),
        misuse: None,
        window,
        rwindow,
    });
    buf.last = None;
    Ok(())
}

/// A receive window at `dst` in a segment this process does not map (another host):
/// its header words read through gex-rma in one get (the end, consumed and length
/// words), its length checked against `len` and the target's segment, and the
/// rendezvous of the mapped path (the receiver's `delta_recv` of the last epoch
/// first). Returns the header's and the first arrival word's offsets in the target's
/// segment, and the new epoch.
fn remote_window<C: Conduit>(
    ep: &mut Endpoint<C>,
    dst: GlobalPtr<u8>,
    len: usize,
    page: usize,
) -> Result<(usize, usize, u32), OverlapError> {
    let seg_len = with(ep, |_, cx| {
        cx.layout().seg_len.get(dst.rank as usize).copied()
    })?;
    let fits = |n: usize| match seg_len {
        Some(s) if dst.offset.checked_add(n).is_none_or(|e| e > s) => {
            Err(OverlapError::OutOfSegment {
                offset: dst.offset,
                len: n,
                seg_len: s,
            })
        }
        _ => Ok(()),
    };
    fits(page)?;
    let mut h = [0u8; layer::WINDOW_LEN_WORD + 8];
    ep.get(&mut h[..], dst, Blocking)?;
    let word = |at: usize| u32::from_ne_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
    let (end, mut consumed) = (word(0), word(layer::CONSUMED_WORD));
    let mut len_word = [0u8; 8];
    len_word.copy_from_slice(&h[layer::WINDOW_LEN_WORD..]);
    let wlen = u64::from_ne_bytes(len_word) as usize;
    if wlen < len {
        // A window for shorter buffers, or none made there (0).
        return Err(OverlapError::OutOfBuffer {
            offset: 0,
            len,
            buf_len: wlen,
        });
    }
    fits(DeltaRecv::window_len(wlen))?;
    // Only this sender writes the end word; a torn read of the consumed word equals
    // `end` only once every byte that differs is new.
    let at = GlobalPtr::<u32>::new(dst.addr(), dst.offset + layer::CONSUMED_WORD);
    let mut spins = 0u32;
    while consumed != end {
        backoff(ep, &mut spins);
        consumed = ep.get_val(at, Blocking)?;
    }
    Ok((
        dst.offset,
        dst.offset + arrivals_offset(wlen),
        end.wrapping_add(1),
    ))
}

/// Where a window's arrival words start: after the header page and the shadow
/// (rounded up to 64 bytes).
pub(super) fn arrivals_offset(len: usize) -> usize {
    sys::page_size() + len.div_ceil(64) * 64
}

/// What a flush sends now: the whole pages marked (annotated) or written (OS) and
/// not sent in the epoch.
pub(super) fn ready_pages(buf: &DeltaBuf) -> RangeSet {
    let page = sys::page_size();
    let len = buf.len();
    let mut set = buf.marked.whole_pages(page, len);
    if buf.mode == Tracking::OsTriggered {
        for (first, n) in buf.buf.shared.region.table.runs_in(READY) {
            set.insert(first * page, ((first + n) * page).min(len));
        }
    }
    // Pages already sent (a misuse marked again) wait for the end.
    for &(s, e) in buf.sent.runs() {
        let s = s / page * page;
        let e = (e.div_ceil(page) * page).min(len);
        set.remove(s, e);
    }
    set
}

/// One send: the pages `[off, off+len)` (whole pages, the last one possibly short),
/// each touched by one of `pieces`.
struct Span {
    off: usize,
    end: usize,
    pieces: Vec<(usize, usize)>,
}

/// Splits `set` into sends of at most `delta` bytes (page-aligned chunks); pieces that
/// share or neighbour a page go in one send.
fn spans(set: &RangeSet, delta: usize, page: usize, len: usize) -> Vec<Span> {
    let mut out: Vec<Span> = Vec::new();
    for &(s, e) in set.runs() {
        let mut at = s;
        while at < e {
            let cut = ((at / delta + 1) * delta).min(e);
            let (p_first, p_end) = (at / page * page, (cut.div_ceil(page) * page).min(len));
            match out.last_mut() {
                Some(sp) if p_first <= sp.end && at / delta == (sp.off / delta) => {
                    sp.end = sp.end.max(p_end);
                    sp.pieces.push((at, cut - at));
                }
                _ => out.push(Span {
                    off: p_first,
                    end: p_end,
                    pieces: vec![(at, cut - at)],
                }),
            }
            at = cut;
        }
    }
    out
}

/// Hands `task` to the layer's mover, counted in flight for the layer and in `mine`.
pub(super) fn queue<C: Conduit>(
    ep: &mut Endpoint<C>,
    task: Task,
    mine: &Arc<AtomicUsize>,
) -> Result<(), OverlapError> {
    let mine = mine.clone();
    with(ep, |l, _| {
        let all = l.inflight.clone();
        let tx = l.sender()?;
        all.fetch_add(1, Ordering::AcqRel);
        mine.fetch_add(1, Ordering::AcqRel);
        tx.send(task).map_err(|_| {
            all.fetch_sub(1, Ordering::AcqRel);
            mine.fetch_sub(1, Ordering::AcqRel);
            OverlapError::MoverGone
        })
    })?
}

/// Sends `set` to the open epoch's destination; the pages end in state `after`.
pub(super) fn send_set<C: Conduit>(
    ep: &mut Endpoint<C>,
    buf: &mut DeltaBuf,
    set: &RangeSet,
    after: u32,
    inline: bool,
) -> Result<(), OverlapError> {
    let page = sys::page_size();
    let len = buf.len();
    let (dst, remote, delta, notify, rnotify) = match &buf.epoch {
        Some(e) => (
            e.dst,
            e.remote,
            e.delta,
            e.window.map(|(_, a, k)| (a, k)),
            e.rwindow.map(|(_, a, k)| (a, k)),
        ),
        None => return Err(OverlapError::NoEpoch),
    };
    // Where byte 0 of the buffer goes in the destination's segment (not mapped here):
    // a window's shadow starts after its header page.
    let base_off = dst.offset + if rnotify.is_some() { page } else { 0 };
    let shared = buf.buf.shared.clone();
    let region = &shared.region;
    for sp in spans(set, delta, page, len) {
        let (first, n) = (sp.off / page, (sp.end - sp.off).div_ceil(page));
        let bytes: usize = sp.pieces.iter().map(|p| p.1).sum();
        let runs = sp.pieces.len();
        if let (true, Some(base)) = (inline, remote) {
            // The epoch's last pieces, copied by this thread: `&mut buf` keeps every
            // other access to the buffer away, so nothing is claimed or protected
            // for the copy (no hand-off to the mover, no `mprotect` but the one an
            // OS-triggered buffer needs to see the next writes).
            layer::copy_inline(
                &shared,
                base,
                &sp.pieces,
                sp.off,
                sp.end - sp.off,
                after,
                notify,
            )
            .map_err(OverlapError::Os)?;
            if let Some(e) = &mut buf.epoch {
                e.stats.bytes += bytes;
                e.stats.runs += runs;
                e.stats.sends += 1;
            }
            continue;
        }
        region
            .table
            .claim_from(first, n, |s| s == READY || s == CLEAN)
            .map_err(|page| OverlapError::Overlapping { page })?;
        region.generation.fetch_add(1, Ordering::AcqRel);
        if let Err(e) = shared.protect(sp.off, sp.end - sp.off, Prot::Read) {
            layer::retire_strip(&shared, sp.off, sp.end - sp.off, page);
            return Err(OverlapError::Os(e));
        }
        match remote {
            Some(base) => {
                let job = Job {
                    shared: shared.clone(),
                    dir: Dir::Put,
                    remote: base + sp.off,
                    off: sp.off,
                    len: sp.end - sp.off,
                    plan: model::StripPlan::equal(sp.end - sp.off, sp.end - sp.off),
                    lazy: false,
                    pieces: sp.pieces,
                    after,
                    done: Some(buf.inflight.clone()),
                    notify,
                };
                if let Err(e) = queue(ep, Task::Job(job), &buf.inflight) {
                    layer::retire_strip(&shared, sp.off, sp.end - sp.off, page);
                    return Err(e);
                }
            }
            None => {
                // Not mapped here: put each piece now through gex-rma, from the
                // transfer view of the claimed (read-only) pages. To a window, the
                // puts are nonblocking (their sources are free when they return) and
                // the pages' arrival words follow once they are at the target
                // (`reap`); to a plain region, blocking.
                let mut res = Ok(());
                let mut puts = Vec::new();
                for &(off, plen) in &sp.pieces {
                    // SAFETY: the piece lies in pages claimed by this call and made
                    // read-only in the user view, inside the mapping that `shared`
                    // keeps alive: nobody writes these bytes during the put.
                    let view =
                        unsafe { std::slice::from_raw_parts(shared.map.xfer().add(off), plen) };
                    let to = GlobalPtr::<u8>::new(dst.addr(), base_off + off);
                    let r = if rnotify.is_some() {
                        ep.put(to, view, Nb).map(|ev| puts.push(ev))
                    } else {
                        ep.put(to, view, Blocking)
                    };
                    if let Err(e) = r {
                        res = Err(OverlapError::Rma(e));
                        break;
                    }
                }
                if rnotify.is_some() {
                    // Tracked even after a failure: `reap` waits for what started.
                    buf.rsends.push(RemoteSend { puts, first, n });
                }
                if res.is_err() {
                    layer::retire_strip(&shared, sp.off, sp.end - sp.off, page);
                    return res;
                }
                layer::finish_delta(&shared, sp.off, sp.end - sp.off, page, after);
            }
        }
        if let Some(e) = &mut buf.epoch {
            e.stats.bytes += bytes;
            e.stats.runs += runs;
            e.stats.sends += 1;
        }
    }
    if let Some((arrivals, epoch)) = rnotify {
        reap(ep, buf, dst, arrivals, epoch, false)?;
    }
    Ok(())
}

/// For a window not mapped here: puts the arrival words of every send whose bytes
/// are at the target, in issue order (the first send still in flight stops the
/// pass); `all`: waits for every send first, then for every arrival word's put
/// (before the end word).
pub(super) fn reap<C: Conduit>(
    ep: &mut Endpoint<C>,
    buf: &mut DeltaBuf,
    dst: GlobalPtr<u8>,
    arrivals: usize,
    epoch: u32,
    all: bool,
) -> Result<(), OverlapError> {
    let mut res = Ok(());
    let mut done = 0;
    for s in &mut buf.rsends {
        if !all {
            let mut landed = true;
            for ev in &s.puts {
                match ep.test(ev) {
                    Ok(l) => landed &= l,
                    Err(e) => {
                        res = Err(OverlapError::Rma(e.into()));
                        landed = false;
                        break;
                    }
                }
            }
            if !landed {
                break;
            }
        }
        for ev in s.puts.drain(..) {
            if let Err(e) = ep.wait(ev) {
                res = res.and(Err(OverlapError::Rma(e)));
            }
        }
        done += 1;
        if res.is_ok() {
            let words = vec![epoch; s.n];
            let to = GlobalPtr::<u32>::new(dst.addr(), arrivals + layer::arrival_word(s.first));
            match ep.put(to, &words[..], Nb) {
                Ok(ev) => buf.rwords.push(ev),
                Err(e) => res = Err(OverlapError::Rma(e)),
            }
        }
    }
    buf.rsends.drain(..done);
    if all {
        for ev in buf.rwords.drain(..) {
            if let Err(e) = ep.wait(ev) {
                res = res.and(Err(OverlapError::Rma(e)));
            }
        }
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_cut_at_the_delta_and_group_pages() {
        let mut set = RangeSet::new();
        set.insert(10, 20); // page 0
        set.insert(30, 40); // page 0 too: same send
        set.insert(100, 300); // pages 1..=2 (page 100 bytes), next to page 0
        set.insert(1000, 1010); // far away
        let sp = spans(&set, 200, 100, 1050);
        let got: Vec<_> = sp
            .iter()
            .map(|s| (s.off, s.end, s.pieces.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, 200, vec![(10, 10), (30, 10), (100, 100)]),
                (200, 300, vec![(200, 100)]),
                (1000, 1050, vec![(1000, 10)]),
            ]
        );
    }
}
