//! One rank's shared region: layout, creation (memfd), and mapping of peers' regions.
//!
//! Layout (all offsets page- or cache-line aligned), for `S` endpoint *slots* (the
//! rank's capacity, `JobLayout::max_eps`: its `E` endpoints made at init, then room for
//! those made at run time) and `T` slots on the whole host:
//! ```text
//! [Header: one page]
//! [slot table: per slot, 64 bytes: state word, contacts word; rounded to a page]
//! [Doorbell of slot 0 .. S-1: 64 bytes each, rounded to a page]
//! [auxiliary area of slot 0 .. S-1: aux_len bytes each, rounded to a page]
//! [rings: for receiver slot e, for sender global slot g < T, for {request, reply}:
//!         RingCtl + data (ring_bytes_needed(cap)), rounded to a page]
//! [segment of slot 0 .. S-1: seg_len rounded to a page each]
//! ```
//!
//! Only the slots of endpoints that exist are ever touched: `create` initialises the
//! doorbells and incoming rings of the `E` endpoints made at init (and marks them
//! open in the slot table); a slot made at run time is initialised by its owner when it
//! opens it (`Smp::open_endpoint`). The rest of the region is a sparse `memfd` whose
//! untouched pages cost address space only, no memory: reserving 16 slots per rank
//! costs nothing until they are used.
//!
//! A slot's *state word* is `UNUSED` (0, the memfd's zero), `OPENING`, `OPEN` or
//! `CLOSED`; the owner publishes `OPEN` with `Release` after initialising the slot, and
//! a sender reads it with `Acquire` on first contact before it touches the slot's
//! rings. A slot's *contacts word* counts first contacts by endpoints made at run time
//! (which receivers poll only once they know them): a sender made at run time bumps it
//! on first contact with the slot, and the slot's owner, seeing it change, looks for
//! the senders it does not poll yet (whose state words are no longer `UNUSED`). Both
//! words are only compared, never used to index memory.
//!
//! # Safety
//! `Mapping` owns an `mmap` of a whole region; raw pointers into it are handed out for
//! the life of the mapping, which the conduit keeps alive (in an `Arc`) for as long as any
//! endpoint exists. The header is written once by the owner before the region is
//! published through the bootstrap and only read afterwards.
#![allow(unsafe_code)]

use gex_core::InitError;
use gex_sync::ring;
use gex_sync::wait::Doorbell;
use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{Mode, OFlags};
use rustix::mm::{MapFlags, ProtFlags};
use std::ptr::NonNull;

const PAGE: usize = 4096;
/// Bytes of a slot's entry in the slot table (its own cache line).
const SLOT_ENTRY: usize = 64;

/// Slot state: never opened (the memfd's zero).
pub(crate) const UNUSED: u64 = 0;
/// Slot state: being initialised by its owner.
pub(crate) const OPENING: u64 = 1;
/// Slot state: open (its rings and doorbell are initialised).
pub(crate) const OPEN: u64 = 2;
/// Slot state: closed (an endpoint made at run time, dropped); never reopened.
pub(crate) const CLOSED: u64 = 3;
pub(crate) const MAGIC: u64 = 0x6765_785f_736d_7031; // "gex_smp1"

const fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

/// [`round_up`], `None` on overflow.
fn checked_round_up(n: usize, to: usize) -> Option<usize> {
    n.div_ceil(to).checked_mul(to)
}

/// Smallest ring a region may have (the `GEX_SMP_RING_SIZE` minimum).
pub(crate) const MIN_RING: usize = 4096;

/// The first page of every region.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Header {
    pub magic: u64,
    pub rank: u64,
    pub eps: u64,
    /// Endpoint slots (capacity; `eps` of them made at init).
    pub slots: u64,
    pub total_eps: u64,
    pub ring_cap: u64,
    pub max_medium: u64,
    pub seg_len: u64,
    pub aux_len: u64,
    pub len: u64,
}

/// Offsets inside one rank's region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Endpoints made at init (slots `0..eps`).
    pub eps: usize,
    /// Endpoint slots (capacity).
    pub slots: usize,
    /// Endpoint slots of the host (the global slot numbering's size).
    pub total_eps: usize,
    pub ring_cap: usize,
    pub seg_len: usize,
    pub aux_len: usize,
    table: usize,
    bells: usize,
    aux: usize,
    rings: usize,
    ring_stride: usize,
    segs: usize,
    seg_stride: usize,
    pub len: usize,
}

impl Layout {
    /// The layout of a region of `slots` endpoint slots (`eps` of them made at init)
    /// on a host of `total_eps` slots; `None` if it overflows or `eps > slots`.
    pub(crate) fn new(
        eps: usize,
        slots: usize,
        total_eps: usize,
        ring_cap: usize,
        seg_len: usize,
        aux_len: usize,
    ) -> Option<Layout> {
        // Every step is checked: the sizes may come from a peer's header.
        if eps > slots {
            return None;
        }
        let table = PAGE;
        let bells = table.checked_add(checked_round_up(slots.checked_mul(SLOT_ENTRY)?, PAGE)?)?;
        let aux = bells.checked_add(checked_round_up(
            slots.checked_mul(std::mem::size_of::<Doorbell>())?,
            PAGE,
        )?)?;
        let rings = aux.checked_add(slots.checked_mul(checked_round_up(aux_len, PAGE)?)?)?;
        let ring_stride = ring::DATA_OFFSET.checked_add(ring_cap)?;
        let segs = rings.checked_add(checked_round_up(
            slots
                .checked_mul(total_eps)?
                .checked_mul(2)?
                .checked_mul(ring_stride)?,
            PAGE,
        )?)?;
        let seg_stride = checked_round_up(seg_len.max(1), PAGE)?;
        let len = segs.checked_add(slots.checked_mul(seg_stride)?)?;
        Some(Layout {
            eps,
            slots,
            total_eps,
            ring_cap,
            seg_len,
            aux_len,
            table,
            bells,
            aux,
            rings,
            ring_stride,
            segs,
            seg_stride,
            len,
        })
    }
    /// Offset of slot `ep`'s state word (an `AtomicU64`, 64-byte aligned).
    pub(crate) fn state(&self, ep: usize) -> usize {
        self.table + ep * SLOT_ENTRY
    }
    /// Offset of slot `ep`'s contacts word (an `AtomicU64`).
    pub(crate) fn contacts(&self, ep: usize) -> usize {
        self.table + ep * SLOT_ENTRY + 8
    }
    pub(crate) fn bell(&self, ep: usize) -> usize {
        self.bells + ep * std::mem::size_of::<Doorbell>()
    }
    /// Offset of EP `ep`'s auxiliary area (`aux_len` bytes).
    pub(crate) fn aux(&self, ep: usize) -> usize {
        self.aux + ep * round_up(self.aux_len, PAGE)
    }
    /// Offset of the ring carrying messages from global sender EP `g` to local EP `ep`.
    pub(crate) fn ring(&self, ep: usize, g: usize, reply: bool) -> usize {
        self.rings + ((ep * self.total_eps + g) * 2 + reply as usize) * self.ring_stride
    }
    pub(crate) fn segment(&self, ep: usize) -> usize {
        self.segs + ep * self.seg_stride
    }
}

impl Header {
    /// Checks the header of local rank `rank`'s region against the job layout: the
    /// rank, its endpoint count `eps` and the endpoint count `total_eps` of the host,
    /// its segment length `seg_len` (what the core validates every Long and RMA range
    /// to that rank against: a region with shorter segments would let them write past
    /// them), the auxiliary area length `aux_len`, a ring size the rings accept, and a
    /// length that matches the layout these describe. Returns the layout and the
    /// largest Medium payload that rank accepts (its setting, capped by what its rings
    /// hold).
    ///
    /// The header is written by that rank in memory it shares with this one, so it may
    /// hold anything; nothing here panics or overflows whatever it holds. The caller
    /// reads it once (a copy) and uses only the layout returned, never the header again.
    ///
    /// # Errors
    /// A description of the first disagreement, naming the field.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn check(
        &self,
        rank: u32,
        eps: usize,
        slots: usize,
        total_eps: usize,
        seg_len: usize,
        aux_len: usize,
        np_args: usize,
    ) -> Result<(Layout, usize), String> {
        let h = self;
        if h.magic != MAGIC || h.rank != u64::from(rank) {
            return Err(format!("bad magic or rank (header {h:?})"));
        }
        let as_usize = |what: &str, v: u64| {
            usize::try_from(v).map_err(|_| format!("{what} {v} does not fit this machine"))
        };
        if as_usize("endpoint count", h.eps)? != eps
            || as_usize("endpoint capacity", h.slots)? != slots
            || as_usize("host endpoint count", h.total_eps)? != total_eps
        {
            return Err(format!(
                "{} endpoints (capacity {}) of {} on the host, the job layout says {eps} (capacity {slots}) of {total_eps}",
                h.eps, h.slots, h.total_eps
            ));
        }
        let ring_cap = as_usize("ring size", h.ring_cap)?;
        if !ring::is_valid_capacity(ring_cap) || ring_cap < MIN_RING {
            return Err(format!(
                "ring size {ring_cap} is not a power of two between {MIN_RING} and {}",
                ring::MAX_CAPACITY
            ));
        }
        if as_usize("segment length", h.seg_len)? != seg_len {
            return Err(format!(
                "segments of {} bytes, the job layout says {seg_len}",
                h.seg_len
            ));
        }
        if as_usize("auxiliary area length", h.aux_len)? != aux_len {
            return Err(format!(
                "auxiliary areas of {} bytes, this rank's layers need {aux_len}",
                h.aux_len
            ));
        }
        let l = Layout::new(eps, slots, total_eps, ring_cap, seg_len, aux_len)
            .ok_or_else(|| format!("region size overflows (header {h:?})"))?;
        if l.len as u64 != h.len {
            return Err(format!(
                "region length {} does not match its layout ({} bytes)",
                h.len, l.len
            ));
        }
        let room = ring::max_body(ring_cap) - np_args;
        let max_medium = usize::try_from(h.max_medium)
            .unwrap_or(usize::MAX)
            .min(room);
        Ok((l, max_medium))
    }
}

/// An mmap of a whole region (own or a peer's).
#[derive(Debug)]
pub(crate) struct Mapping {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: a Mapping is just an address range; all accesses through it are raw-pointer
// accesses whose synchronisation is the rings' and the users' business.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    pub(crate) fn map(fd: impl AsFd, len: usize) -> Result<Mapping, InitError> {
        // SAFETY: a fresh shared mapping at a kernel-chosen address; nothing aliases it yet.
        let p = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                0,
            )
        }
        .map_err(|e| os("mmap of a shared region", e))?;
        Ok(Mapping {
            base: NonNull::new(p.cast()).expect("mmap returned null"),
            len,
        })
    }
    pub(crate) fn at(&self, off: usize) -> *mut u8 {
        assert!(off <= self.len);
        // SAFETY: in bounds of the mapping (checked).
        unsafe { self.base.as_ptr().add(off) }
    }
    pub(crate) fn header(&self) -> Header {
        // SAFETY: the mapping is at least a page long and page aligned; the header was
        // written by the owner before publication.
        unsafe { self.base.as_ptr().cast::<Header>().read() }
    }
    /// Slot `ep`'s state word in this mapping of a region of layout `l` (`ep < l.slots`).
    pub(crate) fn state(&self, l: &Layout, ep: usize) -> &gex_sync::atomic::AtomicU64 {
        assert!(ep < l.slots && l.len <= self.len);
        // SAFETY: inside the slot table of the mapping (`at` checks the bound), 64-byte
        // aligned; the table is only ever accessed through atomics, by every rank.
        unsafe { &*self.at(l.state(ep)).cast::<gex_sync::atomic::AtomicU64>() }
    }
    /// Slot `ep`'s contacts word, as [`state`](Self::state).
    pub(crate) fn contacts(&self, l: &Layout, ep: usize) -> &gex_sync::atomic::AtomicU64 {
        assert!(ep < l.slots && l.len <= self.len);
        // SAFETY: as in `state` (8-byte aligned, in the same 64-byte entry).
        unsafe {
            &*self
                .at(l.contacts(ep))
                .cast::<gex_sync::atomic::AtomicU64>()
        }
    }
    pub(crate) fn write_header(&self, h: Header) {
        // SAFETY: as in `header`; only the owner writes, before publication.
        unsafe { self.base.as_ptr().cast::<Header>().write(h) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `map` mapped; the conduit drops mappings only when no
        // endpoint (and so no pointer into them) remains.
        let _ = unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

pub(crate) fn os(what: &str, e: rustix::io::Errno) -> InitError {
    InitError::Os {
        what: what.to_string(),
        err: std::io::Error::from_raw_os_error(e.raw_os_error()),
    }
}

/// Creates this rank's region: an anonymous memfd of `layout.len` bytes, mode 0600.
pub(crate) fn create(
    layout: &Layout,
    rank: u32,
    max_medium: usize,
) -> Result<(OwnedFd, Mapping), InitError> {
    let fd = rustix::fs::memfd_create("gex-smp", rustix::fs::MemfdFlags::CLOEXEC)
        .map_err(|e| os("memfd_create", e))?;
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o600))
        .map_err(|e| os("fchmod 0600 of the smp region", e))?;
    rustix::fs::ftruncate(&fd, layout.len as u64)
        .map_err(|e| os("sizing the smp region (ftruncate)", e))?;
    let m = Mapping::map(&fd, layout.len)?;
    for ep in 0..layout.eps {
        m.state(layout, ep)
            .store(OPEN, gex_sync::atomic::Ordering::Relaxed);
        // SAFETY: the doorbell slot is inside the mapping, 64-byte aligned (page base +
        // multiple of size_of::<Doorbell>(), itself a multiple of 64), and unused yet.
        unsafe { Doorbell::init_in_place(m.at(layout.bell(ep)).cast()) };
        for g in 0..layout.total_eps {
            for reply in [false, true] {
                // SAFETY: the ring control block is inside the mapping, page aligned
                // plus a multiple of ring_bytes_needed (a multiple of 64), unused yet.
                unsafe { ring::RingCtl::init_in_place(m.at(layout.ring(ep, g, reply)).cast()) };
            }
        }
    }
    m.write_header(Header {
        magic: MAGIC,
        rank: rank as u64,
        eps: layout.eps as u64,
        slots: layout.slots as u64,
        total_eps: layout.total_eps as u64,
        ring_cap: layout.ring_cap as u64,
        max_medium: max_medium as u64,
        seg_len: layout.seg_len as u64,
        aux_len: layout.aux_len as u64,
        len: layout.len as u64,
    });
    Ok((fd, m))
}

/// What the job layout says a rank's region holds, to check its header against.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Expect {
    /// The rank's endpoints (`JobLayout::eps`).
    pub eps: usize,
    /// The rank's endpoint capacity (`JobLayout::max_eps`).
    pub slots: usize,
    /// Endpoints of the host.
    pub total_eps: usize,
    /// Segment length of each of its endpoints (`JobLayout::seg_len`).
    pub seg_len: usize,
    /// Auxiliary area length of each endpoint (the layers' sum).
    pub aux_len: usize,
}

/// Checks the header of `m`, the region of local rank `rank`, against `want` (see
/// [`Header::check`]) and against the length `m` really maps; returns the region's
/// layout and the largest Medium payload that rank accepts.
///
/// # Errors
/// [`InitError::Conduit`] naming the rank and the field that disagrees.
pub(crate) fn check_region(
    m: &Mapping,
    rank: u32,
    want: Expect,
) -> Result<(Layout, usize), InitError> {
    let refuse = |e: String| InitError::Conduit {
        conduit: "smp",
        msg: format!("rank {rank}'s shared region disagrees with the job layout: {e}"),
    };
    let (l, max_medium) = m
        .header()
        .check(
            rank,
            want.eps,
            want.slots,
            want.total_eps,
            want.seg_len,
            want.aux_len,
            crate::record::NP_ARGS_AREA,
        )
        .map_err(refuse)?;
    if l.len != m.len {
        return Err(refuse(format!(
            "its layout needs {} bytes, {} are mapped",
            l.len, m.len
        )));
    }
    Ok((l, max_medium))
}

/// Maps peer `rank`'s region through `/proc/<pid>/fd/<fd>` (`len` bytes, as its
/// bootstrap blob says), and checks, before anything uses it, that the object really
/// is `len` bytes long and that its header agrees with `want` (the job layout) and
/// with that length ([`check_region`]).
///
/// # Errors
/// [`InitError::Os`] if the region cannot be opened or mapped; [`InitError::Conduit`]
/// naming the rank and the disagreement.
pub(crate) fn map_peer(
    rank: u32,
    pid: u32,
    fd: u32,
    len: usize,
    want: Expect,
) -> Result<(Mapping, Layout, usize), InitError> {
    let path = format!("/proc/{pid}/fd/{fd}");
    let f = rustix::fs::open(&path, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty()).map_err(|e| InitError::Os {
        what: format!("opening rank {rank}'s shared region {path} (the smp conduit needs same-user access to peers' /proc entries)"),
        err: std::io::Error::from_raw_os_error(e.raw_os_error()),
    })?;
    // A mapping longer than the file would fault (SIGBUS) on access past its end.
    let size = rustix::fs::fstat(&f)
        .map_err(|e| os("fstat of a peer's region", e))?
        .st_size;
    if len < PAGE || u64::try_from(size).ok() != Some(len as u64) {
        return Err(InitError::Conduit {
            conduit: "smp",
            msg: format!("rank {rank}'s region is {size} bytes, its bootstrap blob says {len}"),
        });
    }
    let m = Mapping::map(&f, len)?;
    let (l, max_medium) = check_region(&m, rank, want)?;
    Ok((m, l, max_medium))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(eps: usize, total: usize, ring_cap: usize, seg_len: usize) -> Header {
        let l = Layout::new(eps, eps, total, ring_cap, seg_len, 4096).unwrap();
        Header {
            magic: MAGIC,
            rank: 1,
            eps: eps as u64,
            slots: eps as u64,
            total_eps: total as u64,
            ring_cap: ring_cap as u64,
            max_medium: 1 << 20,
            seg_len: seg_len as u64,
            aux_len: 4096,
            len: l.len as u64,
        }
    }

    #[test]
    fn an_auxiliary_area_of_another_size_is_an_error() {
        let h = header(2, 3, 8192, 100);
        let e = h.check(1, 2, 2, 3, 100, 8192, 64).unwrap_err();
        assert!(e.contains("auxiliary"), "{e}");
    }

    #[test]
    fn a_good_header_passes() {
        let h = header(2, 3, 8192, 100);
        let (l, max_medium) = h.check(1, 2, 2, 3, 100, 4096, 64).unwrap();
        assert_eq!(l.len as u64, h.len);
        // Capped by what the ring holds.
        assert_eq!(max_medium, ring::max_body(8192) - 64);
    }

    /// Regression (found while writing the `smp-header` fuzz target): a peer's ring
    /// size was not checked, so a header whose length matched a layout with a ring of,
    /// say, 0 or 100 bytes got through, and the conduit panicked later (`max_body`
    /// underflow, the ring's geometry assertion) without naming the peer.
    #[test]
    fn a_bad_ring_size_is_an_error() {
        for cap in [0usize, 100, 2048, 4097] {
            let l = Layout::new(1, 1, 1, cap, 0, 4096).unwrap();
            let h = Header {
                ring_cap: cap as u64,
                len: l.len as u64,
                ..header(1, 1, 4096, 0)
            };
            let e = h.check(1, 1, 1, 1, 0, 4096, 64).unwrap_err();
            assert!(e.contains("ring size"), "{cap}: {e}");
        }
    }

    /// Regression (found while writing the `smp-header` fuzz target): sizes from a
    /// peer's header overflowed unchecked arithmetic in `Layout::new` (a panic in debug
    /// builds, a wrong layout in release builds).
    #[test]
    fn huge_sizes_are_errors_not_overflows() {
        assert_eq!(Layout::new(1, usize::MAX / 8, 1, 4096, 0, 4096), None);
        assert_eq!(Layout::new(1, 1, 1, usize::MAX - 8, 0, 4096), None);
        assert_eq!(Layout::new(1, 1, 1, 4096, usize::MAX, 4096), None);
        assert_eq!(Layout::new(2, 1, 1, 4096, 0, 4096), None);
        let h = Header {
            slots: u64::MAX / 8,
            ..header(1, 1, 4096, 0)
        };
        assert!(h.check(1, 1, usize::MAX / 8, 1, 0, 4096, 64).is_err());
        let h = Header {
            eps: u64::MAX / 8,
            ..header(1, 1, 4096, 0)
        };
        assert!(h.check(1, 1, 1, 1, 0, 4096, 64).is_err());
        let h = Header {
            seg_len: u64::MAX,
            ..header(1, 1, 4096, 0)
        };
        let e = h.check(1, 1, 1, 1, usize::MAX, 4096, 64).unwrap_err();
        assert!(e.contains("overflows"), "{e}");
    }

    /// A header whose segments are not the length the job layout gives that rank is
    /// refused, whatever else agrees: the core validates Longs and RMA to that rank
    /// against the layout, and the conduit writes through its mapping of this region.
    #[test]
    fn a_segment_length_other_than_the_layout_is_an_error() {
        let h = header(2, 3, 8192, 4096);
        let e = h.check(1, 2, 2, 3, 1 << 20, 4096, 64).unwrap_err();
        assert!(
            e.contains("segments of 4096 bytes, the job layout says 1048576"),
            "{e}"
        );
        // Larger than the layout: refused too (the header is the peer's to write).
        let e = h.check(1, 2, 2, 3, 100, 4096, 64).unwrap_err();
        assert!(e.contains("segments of 4096 bytes"), "{e}");
        assert!(h.check(1, 2, 2, 3, 4096, 4096, 64).is_ok());
    }
}
