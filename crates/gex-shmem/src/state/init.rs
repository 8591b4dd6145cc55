//! Setup and teardown: the static data region, the heap size, `shmem_init` (the
//! client, endpoint, heap, static-data handlers and the published [`Pe`]) and
//! `shmem_finalize`.

use super::*;

/// The writable loadable segments of the main program: (start, end).
fn static_region() -> (usize, usize) {
    struct Acc {
        first: bool,
        lo: usize,
        hi: usize,
    }
    unsafe extern "C" fn cb(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: `data` is the `&mut Acc` passed to dl_iterate_phdr below, alive for the
        // whole iteration; `info` is valid during the callback (glibc's contract).
        let (acc, info) = unsafe { (&mut *data.cast::<Acc>(), &*info) };
        if !acc.first {
            return 1;
        }
        acc.first = false;
        for i in 0..usize::from(info.dlpi_phnum) {
            // SAFETY: `dlpi_phdr` points to `dlpi_phnum` program headers (glibc's contract).
            let ph = unsafe { &*info.dlpi_phdr.add(i) };
            if ph.p_type == libc::PT_LOAD && ph.p_flags & libc::PF_W != 0 {
                let start = info.dlpi_addr as usize + ph.p_vaddr as usize;
                let end = start + ph.p_memsz as usize;
                acc.lo = acc.lo.min(start);
                acc.hi = acc.hi.max(end);
            }
        }
        1
    }
    let mut acc = Acc {
        first: true,
        lo: usize::MAX,
        hi: 0,
    };
    // SAFETY: `cb` follows dl_iterate_phdr's callback contract and `acc` outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(cb), (&raw mut acc).cast()) };
    if acc.hi > acc.lo {
        (acc.lo, acc.hi)
    } else {
        (0, 0)
    }
}

/// Performs `op` on the `width`-byte word at `addr` of this process and returns the
/// old value (zero-extended).
///
/// # Safety
/// `addr` is valid for atomic reads and writes of `width` (4 or 8) bytes and aligned to it.
pub(super) unsafe fn local_amo(addr: usize, width: u32, op: Amo, a: u64, b: u64) -> u64 {
    macro_rules! run {
        ($at:ty, $t:ty) => {{
            // SAFETY: the caller's promise.
            let w = unsafe { <$at>::from_ptr(addr as *mut $t) };
            let (a, b) = (a as $t, b as $t);
            let o = Ordering::SeqCst;
            (match op {
                Amo::Fetch => w.load(o),
                Amo::Set => w.swap(a, o),
                Amo::Swap => w.swap(a, o),
                Amo::Cswap => match w.compare_exchange(a, b, o, o) {
                    Ok(v) | Err(v) => v,
                },
                Amo::Add => w.fetch_add(a, o),
                Amo::And => w.fetch_and(a, o),
                Amo::Or => w.fetch_or(a, o),
                Amo::Xor => w.fetch_xor(a, o),
            }) as u64
        }};
    }
    if width == 4 {
        run!(AtomicU32, u32)
    } else {
        run!(AtomicU64, u64)
    }
}

/// Whether `[off, off + len)` is inside the static data, and its address if so.
fn static_addr(off: usize, len: usize) -> Option<usize> {
    let (base, slen) = (
        STATIC_BASE.load(Ordering::Acquire),
        STATIC_LEN.load(Ordering::Acquire),
    );
    (off.checked_add(len)? <= slen).then_some(base + off)
}

pub(super) fn split64(v: u64) -> [u32; 2] {
    [v as u32, (v >> 32) as u32]
}

fn join64(lo: u32, hi: u32) -> u64 {
    u64::from(lo) | (u64::from(hi) << 32)
}

/// The symmetric heap's size: `GEX_SHMEM_HEAP`, else `SHMEM_SYMMETRIC_SIZE`, else 64 MiB.
fn heap_size() -> Result<usize, ShmemError> {
    for var in ["GEX_SHMEM_HEAP", "SHMEM_SYMMETRIC_SIZE"] {
        if let Ok(v) = std::env::var(var) {
            return parse_size(&v).ok_or_else(|| {
                ShmemError::Config(
                    format!("{var}={v}: not a size (bytes, with an optional K, M or G)").into(),
                )
            });
        }
    }
    Ok(64 << 20)
}

/// `123`, `64K`, `512M`, `2G` (binary units, case-insensitive, optional `B`/`iB`).
pub(crate) fn parse_size(v: &str) -> Option<usize> {
    let t = v.trim().to_ascii_uppercase();
    let t = t
        .strip_suffix("IB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(&t);
    let (num, mul) = match t.chars().last()? {
        'K' => (&t[..t.len() - 1], 1usize << 10),
        'M' => (&t[..t.len() - 1], 1 << 20),
        'G' => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    num.trim()
        .parse::<usize>()
        .ok()?
        .checked_mul(mul)
        .filter(|&n| n > 0)
}

/// Initialises the PE (collective). A second call while initialised does nothing.
pub(crate) fn init(level: i32) -> Result<i32, ShmemError> {
    let mut g = STATE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(p) = published() {
        return Ok(p.thread_level);
    }
    if FINALIZED.load(Ordering::Acquire) {
        return Err(ShmemError::Finalized);
    }
    let (lo, hi) = static_region();
    STATIC_BASE.store(lo, Ordering::Release);
    STATIC_LEN.store(hi - lo, Ordering::Release);
    let heap = heap_size()?;
    let client = gex_facade::start(gex_facade::builder().segment_size(heap + HEAP_ALIGN))?;
    let mut ep = client.endpoint(0)?;
    let world = ep.world();
    let (me, npes) = (ep.rank(), ep.size());
    let (seg, seg_len) = {
        let s = ep.segment();
        (s.as_ptr() as usize, s.len())
    };
    let h = register_handlers(&mut ep)?;
    // The heap starts at the first HEAP_ALIGN-aligned address of each PE's segment, so
    // that alignments up to it hold on every PE; the offsets differ, so they are exchanged.
    let pad = seg.next_multiple_of(HEAP_ALIGN) - seg;
    if pad >= seg_len {
        return Err(ShmemError::Config(
            format!("a segment of {seg_len} bytes has no room for the heap").into(),
        ));
    }
    let pads: Vec<u64> = ep.collective(&world, GatherAll::new(vec![pad as u64]), Blocking)?;
    let pads: Vec<usize> = pads.into_iter().map(|p| p as usize).collect();
    let heap_len = seg_len - pad;
    let all_int = AtomicOps::all() & !(AtomicOps::MULT | AtomicOps::FMULT);
    let ad32 = ep.atomic_domain::<u32>(&world, all_int)?;
    let ad64 = ep.atomic_domain::<u64>(&world, all_int)?;
    let shared = shared_team(&mut ep, &world)?;
    let level = level.clamp(0, 3);
    let peers = mapped_heaps(&ep, &pads, heap_len).into_boxed_slice();
    let view = View::new(seg + pad, &peers, npes, me);
    let published = Pe {
        me,
        npes,
        heap_base: seg + pad,
        heap_len,
        pads: pads.clone().into_boxed_slice(),
        ctx_eps: peers.iter().any(|p| p.lim == 0),
        hello: h.hello,
        peers,
        view,
        cpu_atomics: !ad32.is_native() && !ad64.is_native(),
        thread_level: level,
    };
    if PE.set(published).is_err() {
        // Only one shmem_init runs (`FINALIZED` refuses a second one), under the lock.
        return Err(ShmemError::Finalized);
    }
    ep.barrier(&world)?;
    if let Some(p) = PE.get() {
        PUB.store(std::ptr::from_ref(p).cast_mut(), Ordering::Release);
        GEXSHMEM_VIEW.store(std::ptr::from_ref(&p.view).cast_mut(), Ordering::Release);
    }
    let mut s = State {
        client: Some(client),
        ep,
        world: world.clone(),
        me,
        npes,
        heap_base: seg + pad,
        heap_len,
        pads,
        ad32,
        ad64,
        heap: Heap::new(heap_len),
        h_put: h.put,
        h_get: h.get,
        h_amo: h.amo,
        teams: vec![
            Some(TeamEntry {
                team: world,
                num_contexts: 0,
                owned: false,
            }),
            Some(TeamEntry {
                team: shared,
                num_contexts: 0,
                owned: false,
            }),
        ],
        ctxs: Vec::new(),
    };
    s.set_ctx(0, Some(0));
    place(&mut g, s, level);
    Ok(level)
}

/// The ids of the static-data request handlers that [`register_handlers`] registers
/// (their replies' handlers are known to them only), and of the no-op `hello`.
struct Handlers {
    put: HandlerId,
    get: HandlerId,
    amo: HandlerId,
    hello: HandlerId,
}

/// Registers the AM handlers of static data (puts, gets and atomics that the target
/// runs when it polls) and their replies on `ep`, and the no-op `hello`.
fn register_handlers(ep: &mut OwnedEndpoint) -> Result<Handlers, ShmemError> {
    // Reply handlers first, so that the request handlers know their ids.
    let h_ack = ep.register(|_t: &mut Token<'_>, am: Am<'_>| {
        if am.args().first() == Some(&1) {
            REMOTE_FAULT.store(1, Ordering::Release);
        }
        OUTSTANDING.fetch_sub(1, Ordering::AcqRel);
    })?;
    let h_getr = ep.register(|_t: &mut Token<'_>, am: Am<'_>| {
        if am.args().first() == Some(&1) {
            REMOTE_FAULT.store(1, Ordering::Release);
        }
        let mut b = REPLY_BUF.lock().unwrap_or_else(|p| p.into_inner());
        b.clear();
        b.extend_from_slice(am.payload());
        REPLY_DONE.store(true, Ordering::Release);
    })?;
    let h_amor = ep.register(|_t: &mut Token<'_>, am: Am<'_>| {
        let a = am.args();
        if a.get(2) == Some(&1) {
            REMOTE_FAULT.store(1, Ordering::Release);
        }
        REPLY_VAL.store(join64(a[0], a[1]), Ordering::Release);
        REPLY_DONE.store(true, Ordering::Release);
    })?;
    let put = ep.register(move |t: &mut Token<'_>, am: Am<'_>| {
        let a = am.args();
        let off = join64(a[0], a[1]) as usize;
        let p = am.payload();
        let ok = match static_addr(off, p.len()) {
            Some(addr) => {
                // SAFETY: `[addr, addr + len)` is inside this process's writable static
                // data (checked); the program's own accesses to it race only as any RMA
                // does (OpenSHMEM leaves concurrent local and remote access undefined).
                unsafe { std::ptr::copy(p.as_ptr(), addr as *mut u8, p.len()) };
                0
            }
            None => 1,
        };
        let _ = t.reply(h_ack, Body::short(&[ok]));
    })?;
    let get = ep.register(move |t: &mut Token<'_>, am: Am<'_>| {
        let a = am.args();
        let (off, len) = (join64(a[0], a[1]) as usize, a[2] as usize);
        match static_addr(off, len) {
            Some(addr) => {
                // SAFETY: inside this process's static data (checked), readable.
                let s = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
                let _ = t.reply(h_getr, Body::medium(&[0], s));
            }
            None => {
                let _ = t.reply(h_getr, Body::medium(&[1], &[]));
            }
        }
    })?;
    let amo = ep.register(move |t: &mut Token<'_>, am: Am<'_>| {
        let a = am.args();
        let off = join64(a[0], a[1]) as usize;
        let width = a[3];
        let op = Amo::from_code(a[2]);
        let (x, y) = (join64(a[4], a[5]), join64(a[6], a[7]));
        let addr = static_addr(off, width as usize)
            .filter(|&p| (width == 4 || width == 8) && p % width as usize == 0);
        let (old, fault) = match (addr, op) {
            // SAFETY: inside the static data, aligned to its width (checked).
            (Some(p), Some(op)) => (unsafe { local_amo(p, width, op, x, y) }, 0),
            _ => (0, 1),
        };
        let [lo, hi] = split64(old);
        let _ = t.reply(h_amor, Body::short(&[lo, hi, fault]));
    })?;
    let hello = ep.register(|_t: &mut Token<'_>, _am: Am<'_>| {})?;
    Ok(Handlers {
        put,
        get,
        amo,
        hello,
    })
}

/// SHMEM_TEAM_SHARED: every PE whose heap this one maps, which for the conduits of
/// one host is all or none of the others.
fn shared_team(ep: &mut OwnedEndpoint, world: &Team) -> Result<Team, ShmemError> {
    let (me, npes) = (ep.rank(), ep.size());
    let shares_all = (0..npes).all(|r| ep.shares_memory_with(EpAddr::new(r, 0)));
    Ok(if shares_all {
        world.clone()
    } else {
        ep.split(world, Some(me), 0, gex_facade::coll::Scratch::None)?
            .ok_or_else(|| ShmemError::Config("split of the shared team".into()))?
    })
}

/// For every PE, its heap (address in this process, length) when the conduit maps it
/// here, else `(0, 0)`: [`Pe::peers`]. `pads` are the heaps' offsets in the segments.
fn mapped_heaps(ep: &OwnedEndpoint, pads: &[usize], heap_len: usize) -> Vec<Peer> {
    let npes = ep.size();
    // The AM path forced (`GEX_RMA_PATH=am`, `--cfg gex_force_am_rma`): every operation
    // goes through the endpoint, as gex-rma's own would.
    let forced_am =
        cfg!(gex_force_am_rma) || ep.config().get("GEX_RMA_PATH").is_some_and(|v| v == "am");
    let mut peers = Vec::with_capacity(npes as usize);
    for r in (0..npes).filter(|_| !forced_am) {
        let heap = ep
            .peer_segment(EpAddr::new(r, 0))
            .zip(ep.segment_len_of(r))
            .and_then(|((base, mapped), published)| {
                let len = mapped.min(published).checked_sub(pads[r as usize])?;
                Some((base.as_ptr() as usize + pads[r as usize], len))
            });
        peers.push(
            heap.map(|(base, len)| Peer {
                base,
                lim: len.min(heap_len),
            })
            .filter(|p| p.lim > 0)
            .unwrap_or(Peer { base: 0, lim: 0 }),
        );
    }
    peers.resize(npes as usize, Peer { base: 0, lim: 0 });
    peers
}

/// Finalises the PE (collective): quiet, barrier, close.
pub(crate) fn finalize() -> Result<(), ShmemError> {
    let mut g = STATE.lock().unwrap_or_else(|p| p.into_inner());
    let Some(mut s) = take(&mut g)? else {
        return Ok(());
    };
    FINALIZED.store(true, Ordering::Release);
    PUB.store(std::ptr::null_mut(), Ordering::Release);
    GEXSHMEM_VIEW.store(std::ptr::null_mut(), Ordering::Release);
    let closed = (|| {
        s.quiet()?;
        let world = s.world.clone();
        s.ep.barrier(&world)?;
        for t in s.teams.drain(..).flatten() {
            if t.owned && t.team.id() != world.id() {
                let _ = s.ep.destroy_team(t.team);
            }
        }
        Ok::<(), ShmemError>(())
    })();
    let client = s.client.take();
    let State { ep, .. } = s;
    // Kept for the life of the process, also when closing failed (module
    // documentation): what a racing direct copy reaches stays mapped.
    *RETIRED.lock().unwrap_or_else(|p| p.into_inner()) = Some(ep);
    closed?;
    if let Some(c) = client {
        c.finalize()?;
    }
    Ok(())
}
