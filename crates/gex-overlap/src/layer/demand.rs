//! The demand-driven transfers behind [`OverlapExt::get_demand`] and
//! [`OverlapExt::put_demand`]: through a mapped peer segment by the mover, or through
//! the conduit's native RMA.

use super::*;

/// What a demand-driven transfer moves: `len` bytes at `offset` of `buf`, to or from
/// (`dir`) `remote`.
#[derive(Clone, Copy)]
struct Span<'a> {
    dir: Dir,
    buf: &'a OverlapBuf,
    offset: usize,
    remote: GlobalPtr<u8>,
    len: usize,
}

pub(super) fn transfer<C: Conduit>(
    ep: &mut Endpoint<C>,
    dir: Dir,
    buf: &OverlapBuf,
    offset: usize,
    remote: GlobalPtr<u8>,
    len: usize,
    lazy: bool,
) -> Result<Issued, OverlapError> {
    let page = sys::page_size();
    let (first, n) = table::pages_of(offset, len, buf.len_bytes(), page, true)
        .map_err(|e| range_err(e, offset, len, buf.len_bytes()))?;
    let threaded = ep.has_progress_thread();
    let (peer, plan, now, native) = with(ep, |l, cx| {
        if dir == Dir::Get {
            l.learn();
        }
        let now = l.decomp == Decomp::Auto && len < l.min_split;
        let native = threaded && cx.capabilities().contains(Capabilities::NATIVE_RMA);
        (cx.peer_segment(remote.addr()), l.plan_for(len), now, native)
    })?;
    let done = Issued {
        strips: usize::from(len > 0),
        strip_len: len,
        variable: false,
        demand: false,
    };
    let region = &buf.shared.region;
    if peer.is_none() && native && !now && len > 0 {
        let span = Span {
            dir,
            buf,
            offset,
            remote,
            len,
        };
        if let Some(issued) = native_transfer(ep, span, &plan)? {
            return Ok(issued);
        }
    }
    let Some((base, seg_len)) = peer else {
        // Fallback: gex-rma, blocking, through the transfer view of claimed pages.
        region
            .table
            .claim(first, n, PENDING)
            .map_err(|page| OverlapError::Overlapping { page })?;
        // SAFETY: the pages holding `offset..offset+len` are claimed by this call
        // (nobody else reads or writes them through the transfer view) and lie in the
        // mapping, which `buf` keeps alive for the call; the user view of them is not
        // written meanwhile (a get holds `&mut OverlapBuf`; a put only reads).
        let view = unsafe { std::slice::from_raw_parts_mut(buf.xfer().add(offset), len) };
        let r = match dir {
            Dir::Get => ep.get(&mut *view, remote, Blocking).map(|_| ()),
            Dir::Put => ep.put(remote, &*view, Blocking),
        };
        region.table.retire(first, n);
        r?;
        return Ok(done);
    };
    let end = remote.offset.checked_add(len);
    if end.is_none_or(|e| e > seg_len) {
        return Err(OverlapError::OutOfSegment {
            offset: remote.offset,
            len,
            seg_len,
        });
    }
    if len == 0 {
        return Ok(done);
    }
    region
        .table
        .claim(first, n, PENDING)
        .map_err(|page| OverlapError::Overlapping { page })?;
    region.generation.fetch_add(1, Ordering::AcqRel);
    let remote_addr = base.as_ptr() as usize + remote.offset;
    if now {
        // Below the threshold: copy now, protect nothing.
        let local = buf.xfer() as usize + offset;
        // SAFETY: as the mover's copy: the remote range lies in the peer's mapped
        // segment (checked above), the local one in the claimed pages of the transfer
        // view; byte-wise atomic on both sides.
        unsafe {
            match dir {
                Dir::Get => {
                    gex_sync::copy::atomic_copy(remote_addr as *const u8, local as *mut u8, len)
                }
                Dir::Put => {
                    gex_sync::copy::atomic_copy(local as *const u8, remote_addr as *mut u8, len)
                }
            }
        }
        region.table.retire(first, n);
        return Ok(done);
    }
    let prot = match dir {
        Dir::Get => Prot::None,
        Dir::Put => Prot::Read,
    };
    let lazy = lazy
        && dir == Dir::Get
        && sys::lazy_begin(
            region,
            first,
            n,
            plan.iter().map(|(o, _)| first + o / page),
            plan.count(),
        );
    if !lazy {
        if let Err(e) = buf.shared.protect(offset, len, prot) {
            region.table.retire(first, n);
            return Err(OverlapError::Os(e));
        }
    }
    let job = Job {
        shared: buf.shared.clone(),
        dir,
        remote: remote_addr,
        off: offset,
        len,
        plan: plan.clone(),
        lazy,
        pieces: Vec::new(),
        after: table::READY,
        done: None,
        notify: None,
    };
    let sent = with(ep, |l, _| {
        if dir == Dir::Get && plan.count() >= 4 {
            let waits = buf.shared.region.waits.load(Ordering::Relaxed);
            l.watch = Some((Arc::downgrade(&buf.shared), waits, plan.count()));
        }
        let inflight = l.inflight.clone();
        let tx = l.sender()?;
        inflight.fetch_add(1, Ordering::AcqRel);
        tx.send(Task::Job(job)).map_err(|_| {
            inflight.fetch_sub(1, Ordering::AcqRel);
            OverlapError::MoverGone
        })
    })?;
    if let Err(e) = sent {
        // Nothing will move the strips: unprotect and release them.
        let _ = buf.shared.protect(offset, len, Prot::ReadWrite);
        region.table.retire(first, n);
        sys::lazy_settle(region);
        return Err(e);
    }
    Ok(issued(&plan))
}

/// A demand-driven transfer to a peer whose segment is not mapped here, through the
/// conduit's native RMA, when the endpoint has a progress thread (which runs the
/// progress hook that retires the strips: the fault handler only waits). `None`: the
/// conduit does not offer it for this peer (nothing claimed; the caller falls back).
fn native_transfer<C: Conduit>(
    ep: &mut Endpoint<C>,
    span: Span<'_>,
    plan: &StripPlan,
) -> Result<Option<Issued>, OverlapError> {
    let Span {
        dir,
        buf,
        offset,
        remote,
        len,
    } = span;
    let page = sys::page_size();
    let target = remote.addr();
    let (open, seg_len) = with(ep, |_, cx| {
        let open = remote.rank < cx.size()
            && cx
                .endpoint_capacity(remote.rank)
                .is_some_and(|cap| remote.ep < cap)
            && cx.peer_open(target).is_ok();
        (open, cx.layout().seg_len.get(remote.rank as usize).copied())
    })?;
    if !open {
        // gex-rma's path names the error (a rank or endpoint that does not exist).
        return Ok(None);
    }
    match (seg_len, remote.offset.checked_add(len)) {
        (Some(s), Some(e)) if e <= s => {}
        (s, _) => {
            return Err(OverlapError::OutOfSegment {
                offset: remote.offset,
                len,
                seg_len: s.unwrap_or(0),
            });
        }
    }
    let (first, n) = table::pages_of(offset, len, buf.len_bytes(), page, true)
        .map_err(|e| range_err(e, offset, len, buf.len_bytes()))?;
    let region = &buf.shared.region;
    region
        .table
        .claim(first, n, PENDING)
        .map_err(|page| OverlapError::Overlapping { page })?;
    region.generation.fetch_add(1, Ordering::AcqRel);
    let prot = match dir {
        Dir::Get => Prot::None,
        Dir::Put => Prot::Read,
    };
    if let Err(e) = buf.shared.protect(offset, len, prot) {
        region.table.retire(first, n);
        return Err(OverlapError::Os(e));
    }
    let strips = plan.count();
    let mut retry = layer::Retry::default();
    let mut i = 0;
    while i < strips {
        let (rel, s_len) = plan.strip(i);
        let s_off = offset + rel;
        let local = buf.xfer() as usize + s_off;
        let shared = &buf.shared;
        let range = SegRange::new(remote.addr(), remote.offset + rel, s_len);
        let started = with(ep, |l, cx| {
            // SAFETY: the strip's pages are claimed by this transfer and protected in the
            // user view (no access for a get, read-only for a put), so nobody else reads
            // or writes them through the transfer view and nobody modifies them until
            // the progress hook retires them after `native_test`; the mapping stays
            // alive while the strip's `Arc<Shared>` is held, and is leaked if the layer
            // drops first. The remote range lies in the target's segment (checked above
            // against the job layout's segment length).
            let r = unsafe {
                match dir {
                    Dir::Get => cx.native_get(range, local as *mut u8),
                    Dir::Put => cx.native_put(range, local as *const u8),
                }
            };
            match r {
                Ok(Native::Pending(ticket)) => {
                    l.inflight.fetch_add(1, Ordering::AcqRel);
                    l.native.push(NativeStrip {
                        shared: shared.clone(),
                        ticket,
                        off: s_off,
                        len: s_len,
                    });
                    cx.set_busy();
                    Ok(Some(true))
                }
                Ok(Native::Done) => {
                    retire_strip(shared, s_off, s_len, page);
                    Ok(Some(true))
                }
                Ok(Native::WouldBlock) => Ok(Some(false)),
                Ok(Native::Unsupported) => Ok(None),
                Err(e) => Err(e),
            }
        })?;
        match started {
            Ok(Some(true)) => i += 1,
            Ok(Some(false)) => layer::retry(ep, &mut retry),
            Ok(None) if i == 0 => {
                // Not offered for this peer: release everything, the caller falls back.
                let _ = buf.shared.protect(offset, len, Prot::ReadWrite);
                region.table.retire(first, n);
                return Ok(None);
            }
            Ok(None) | Err(_) => {
                // Strips from `i` on were never started: release them; the ones
                // started retire as they complete.
                let rest = offset + plan.strip(i).0;
                retire_strip(&buf.shared, rest, offset + len - rest, page);
                return Err(match started {
                    Err(e) => OverlapError::Conduit(e),
                    _ => OverlapError::Conduit(ConduitError::Contract(
                        "native RMA refused a strip after accepting the first".into(),
                    )),
                });
            }
        }
    }
    Ok(Some(issued(plan)))
}

/// What a demand-driven transfer in strips `plan` reports.
fn issued(plan: &StripPlan) -> Issued {
    Issued {
        strips: plan.count(),
        strip_len: plan.iter().next().map_or(0, |s| s.1),
        variable: !plan.is_equal(),
        demand: true,
    }
}
