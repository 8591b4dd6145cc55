//! VIS: non-contiguous put and get (strided, vector, indexed) over gex-rma's
//! `put_vis`/`get_vis` on bytes, blocking, nonblocking (an event) and, for the puts,
//! implicit-event (NBI, completed by `gex_nbi_sync` / `gex_nbi_test` of
//! `GEX_NBI_PUTS`).
//!
//! Remote addresses are byte offsets in the segment of the target `rank`'s endpoint of
//! the calling endpoint's index, as for `gex_put`; one call targets one rank. Every
//! piece is range-checked against the target's segment before any byte moves
//! (`GEX_ERR_RMA`).
//!
//! - **Strided** (GASNet-style): `ndims` dimensions, dimension 0 innermost, each a
//!   `count` and a BYTE stride per side (negative and zero strides allowed); the
//!   addresses given are those of element `(0, .., 0)`, elements are `elem_size`
//!   bytes. It becomes gex-rma's element-strided shape over bytes with one more,
//!   innermost dimension of `elem_size` bytes of stride 1; the local side is the one
//!   span from the lowest to the highest byte the shape addresses.
//! - **Vector**: pieces `(offset, len)` in the target's segment; the local side packed,
//!   piece after piece.
//! - **Indexed**: `n` pieces of `each` bytes at the given offsets; the local side
//!   packed.
//!
//! A nonblocking strided get writes only the elements its shape addresses when its
//! event completes (the gaps of the local span are the caller's, and may be in use);
//! vector and indexed gets write their packed buffer then.
#![allow(unsafe_code)]

use crate::event::{Filled, Op, Pending, gex_event_t, hand_out};
use crate::handle::gex_ep_t;
use crate::ptr::{self, Lent};
use crate::rma::{Mode, gptr};
use crate::status::{Error, entry, gex_status_t};
use gex_facade::prelude::*;
use std::ffi::{c_int, c_void};

/// One piece of a vector transfer: `len` bytes at byte `offset` of the target's
/// segment.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct gex_piece_t {
    /// Byte offset in the target's segment.
    pub offset: usize,
    /// Length in bytes.
    pub len: usize,
}

/// A C strided shape in gex-rma's terms (bytes): `[elem_size, counts..]` with strides
/// `[1, strides..]` on both sides, and the local span it addresses.
#[derive(Debug)]
struct Shape {
    counts: Vec<usize>,
    remote: Vec<isize>,
    local: Vec<isize>,
    /// Byte offset (from the caller's local address) of the lowest byte addressed.
    lo: isize,
    /// Bytes from the lowest to one past the highest byte addressed (0: nothing moves).
    span: usize,
}

fn overflow() -> Error {
    Error::invalid("strided shape: the byte offsets it addresses overflow")
}

impl Shape {
    /// Reads and checks the caller's arrays (`ndims` each) and computes the local span.
    ///
    /// # Errors
    /// `GEX_ERR_NULL` for a NULL array with `ndims > 0`; `GEX_ERR_INVALID` if an offset
    /// overflows.
    ///
    /// # Safety
    /// If `ndims > 0`, the three arrays are valid for reading `ndims` elements each.
    unsafe fn new(
        remote_strides: *const isize,
        remote_what: &str,
        local_strides: *const isize,
        local_what: &str,
        elem_size: usize,
        counts: *const usize,
        ndims: usize,
    ) -> Result<Self, Error> {
        // SAFETY: the caller's promise, as `ptr::slice` states it.
        let c = unsafe { ptr::slice(counts, ndims, "counts") }?;
        // SAFETY: as above.
        let r = unsafe { ptr::slice(remote_strides, ndims, remote_what) }?;
        // SAFETY: as above.
        let l = unsafe { ptr::slice(local_strides, ndims, local_what) }?;
        let empty = elem_size == 0 || c.contains(&0);
        let (mut lo, mut hi) = (0isize, 0isize);
        if !empty {
            for (&n, &s) in c.iter().zip(l) {
                let n1 = isize::try_from(n - 1).map_err(|_| overflow())?;
                let reach = n1.checked_mul(s).ok_or_else(overflow)?;
                if reach < 0 {
                    lo = lo.checked_add(reach).ok_or_else(overflow)?;
                } else {
                    hi = hi.checked_add(reach).ok_or_else(overflow)?;
                }
            }
            // The remote side's reach must be representable too (gex-rma checks it
            // against the segment).
            for (&n, &s) in c.iter().zip(r) {
                let n1 = isize::try_from(n - 1).map_err(|_| overflow())?;
                n1.checked_mul(s).ok_or_else(overflow)?;
            }
        }
        let span = if empty {
            0
        } else {
            let es = isize::try_from(elem_size).map_err(|_| overflow())?;
            let top = hi.checked_add(es).ok_or_else(overflow)?;
            usize::try_from(top.checked_sub(lo).ok_or_else(overflow)?).map_err(|_| overflow())?
        };
        let counts = std::iter::once(elem_size)
            .chain(c.iter().copied())
            .collect();
        let remote = std::iter::once(1).chain(r.iter().copied()).collect();
        let local = std::iter::once(1).chain(l.iter().copied()).collect();
        Ok(Shape {
            counts,
            remote,
            local,
            lo,
            span,
        })
    }

    /// gex-rma's shape, over the local span.
    fn strided(&self) -> Strided<'_> {
        Strided {
            counts: &self.counts,
            remote_strides: &self.remote,
            local_start: self.lo.unsigned_abs(),
            local_strides: &self.local,
        }
    }

    /// Calls `f` with the offset in the local span of every element the shape
    /// addresses (each `counts[0]` bytes), in no particular order.
    fn each(&self, mut f: impl FnMut(usize) -> Result<(), Error>) -> Result<(), Error> {
        if self.span == 0 {
            return Ok(());
        }
        let dims = &self.counts[1..];
        let strides = &self.local[1..];
        let mut idx = vec![0usize; dims.len()];
        loop {
            let mut off = self.lo.unsigned_abs() as isize;
            for (&i, &s) in idx.iter().zip(strides) {
                // In the span (checked without overflow by `new`).
                off += i as isize * s;
            }
            f(off as usize)?;
            // The next index, dimension 0 fastest.
            let mut d = 0;
            loop {
                if d == dims.len() {
                    return Ok(());
                }
                idx[d] += 1;
                if idx[d] < dims[d] {
                    break;
                }
                idx[d] = 0;
                d += 1;
            }
        }
    }

    /// The caller's local address `p` moved to the lowest byte of the span.
    fn base<P>(&self, p: *const P, what: &str) -> Result<*const u8, Error> {
        if self.span == 0 {
            return Ok(std::ptr::NonNull::dangling().as_ptr());
        }
        if p.is_null() {
            return Err(Error::null(what));
        }
        Ok(p.cast::<u8>().wrapping_offset(self.lo))
    }
}

/// The remote side of a C VIS call.
enum Remote {
    Strided(GlobalPtr<u8>, Shape),
    Vector(Vec<(GlobalPtr<u8>, usize)>),
    Indexed(Vec<GlobalPtr<u8>>, usize),
}

impl Remote {
    fn vis(&self) -> Vis<'_, u8> {
        match self {
            Remote::Strided(p, s) => Vis::Strided {
                ptr: *p,
                shape: s.strided(),
            },
            Remote::Vector(v) => Vis::Vector(v),
            Remote::Indexed(v, each) => Vis::Indexed {
                ptrs: v,
                each: *each,
            },
        }
    }
}

/// The remote pieces of a vector or indexed call, as the caller gave them.
#[derive(Clone, Copy)]
enum Pieces {
    /// `gex_piece_t`s and their number.
    Vector(*const gex_piece_t, usize),
    /// Offsets, their number, and the bytes of each piece.
    Indexed(*const usize, usize, usize),
}

impl Pieces {
    /// The remote side (every offset's `rank` checked) and its total length.
    ///
    /// # Safety
    /// The array is valid for reading its count of elements (any pointer for 0).
    unsafe fn remote(self, h: &gex_ep_t, rank: u32) -> Result<(Remote, usize), Error> {
        gptr::<u8>(h, rank, 0)?;
        Ok(match self {
            Pieces::Vector(p, n) => {
                // SAFETY: the caller's promise, as `ptr::slice` states it.
                let ps = unsafe { ptr::slice(p, n, "pieces") }?;
                let mut total = 0usize;
                let mut v = Vec::with_capacity(n);
                for p in ps {
                    total = total
                        .checked_add(p.len)
                        .ok_or_else(|| Error::invalid("the pieces' lengths overflow"))?;
                    v.push((gptr::<u8>(h, rank, p.offset)?, p.len));
                }
                (Remote::Vector(v), total)
            }
            Pieces::Indexed(o, n, each) => {
                // SAFETY: the caller's promise, as `ptr::slice` states it.
                let os = unsafe { ptr::slice(o, n, "offsets") }?;
                let total = n
                    .checked_mul(each)
                    .filter(|&b| b <= isize::MAX as usize)
                    .ok_or_else(|| {
                        Error::invalid(format!("{n} pieces of {each} bytes overflow"))
                    })?;
                let v = os
                    .iter()
                    .map(|&o| gptr::<u8>(h, rank, o))
                    .collect::<Result<_, _>>()?;
                (Remote::Indexed(v, each), total)
            }
        })
    }
}

/// The local length of a packed side: the caller's `given` (a vector call's), which
/// must be the pieces' `total`, or the total (an indexed call's).
fn packed_len(given: Option<usize>, total: usize, what: &str) -> Result<usize, Error> {
    match given {
        Some(g) if g != total => Err(Error::invalid(format!(
            "{what} {g} is not the pieces' total length {total}"
        ))),
        _ => Ok(total),
    }
}

/// The body of the vector and indexed puts (`src_len`: a vector put's).
///
/// # Safety
/// As [`gex_put_vector`] / [`gex_put_indexed`] (and the `ev` of their `_nb` forms with
/// `Mode::Nb`).
unsafe fn put_pieces(
    ep: *const gex_ep_t,
    rank: u32,
    pieces: Pieces,
    src: *const c_void,
    src_len: Option<usize>,
    mode: Mode,
) -> c_int {
    entry(|| {
        // SAFETY: the caller's promise, as `ptr::handle` states it.
        let h = unsafe { ptr::handle(ep) }?;
        // SAFETY: the pieces' array is readable for its count (contract).
        let (r, total) = unsafe { pieces.remote(h, rank) }?;
        let len = packed_len(src_len, total, "src_len")?;
        // SAFETY: `src` is readable for the pieces' total length (contract).
        let s = unsafe { ptr::slice(src.cast::<u8>(), len, "src") }?;
        // SAFETY: the caller's promise about `ev`, passed on.
        unsafe { put(h, &r, s, mode) }
    })
}

/// The body of the vector and indexed gets (`dst_len`: a vector get's).
///
/// # Safety
/// As [`gex_get_vector`] / [`gex_get_indexed`] (and their `_nb` forms with `ev`).
unsafe fn get_pieces(
    ep: *const gex_ep_t,
    dst: *mut c_void,
    dst_len: Option<usize>,
    rank: u32,
    pieces: Pieces,
    mode: Mode,
) -> c_int {
    entry(|| {
        // SAFETY: the caller's promise, as `ptr::handle` states it.
        let h = unsafe { ptr::handle(ep) }?;
        // SAFETY: the pieces' array is readable for its count (contract).
        let (r, total) = unsafe { pieces.remote(h, rank) }?;
        let len = packed_len(dst_len, total, "dst_len")?;
        // SAFETY: the caller's promises about `dst` and `ev`, passed on.
        unsafe { get_packed(h, &r, dst, len, mode) }
    })
}

/// A VIS put of `src` to `remote`.
///
/// # Safety
/// With `Mode::Nb(ev)`, `ev` is NULL or valid for writing one pointer.
unsafe fn put(
    h: &gex_ep_t,
    remote: &Remote,
    src: &[u8],
    mode: Mode,
) -> Result<gex_status_t, Error> {
    let vis = remote.vis();
    match mode {
        Mode::Blocking => h.with(|s| Ok(s.ep.put_vis(vis, src, Blocking)?))?,
        Mode::Nbi => h.with(|s| Ok(s.ep.put_vis(vis, src, Nbi)?))?,
        Mode::Nb(ev) => {
            if ev.is_null() {
                return Err(Error::null("ev"));
            }
            let e = h.with(|s| Ok(s.ep.put_vis(vis, src, Nb)?))?;
            // SAFETY: `ev` is non-null and writable (the caller's promise).
            return unsafe { hand_out(ev, Op::Unit(e)) };
        }
    }
    Ok(gex_status_t::GEX_OK)
}

/// A packed (vector or indexed) get of `len` bytes from `remote` into `dst`.
///
/// # Safety
/// `dst` is valid for writing `len` bytes (any pointer when 0): during the call when
/// blocking, until the event is completed or freed with `Mode::Nb(ev)`, until the
/// gets' NBI sync with `Mode::Nbi`; `ev` is NULL or valid for writing one pointer.
unsafe fn get_packed(
    h: &gex_ep_t,
    remote: &Remote,
    dst: *mut c_void,
    len: usize,
    mode: Mode,
) -> Result<gex_status_t, Error> {
    let vis = remote.vis();
    if let Mode::Blocking = mode {
        // SAFETY: `dst` is writable for `len` bytes during the call (contract).
        let d = unsafe { ptr::slice_mut(dst.cast::<u8>(), len, "dst") }?;
        h.with(|s| Ok(s.ep.get_vis(d, vis, Blocking)?))?;
        return Ok(gex_status_t::GEX_OK);
    }
    // SAFETY: `dst` stays writable until the event completes or is freed, or until the
    // NBI sync of the gets (contract).
    let d = unsafe { Lent::new(dst.cast::<u8>(), len, "dst") }?;
    if let Mode::Nb(ev) = mode {
        if ev.is_null() {
            return Err(Error::null("ev"));
        }
        let e = h.with(|s| Ok(s.ep.get_vis(vec![0u8; len], vis, Nb)?))?;
        // SAFETY: `ev` is non-null and writable (contract).
        return unsafe { hand_out(ev, Op::Get(e, d)) };
    }
    h.with(|s| {
        let ev = s.ep.get_vis(vec![0u8; len], vis, Nb)?;
        s.nbi_gets.push(Box::new(Filled { ev, dst: d }));
        Ok(())
    })?;
    Ok(gex_status_t::GEX_OK)
}

/// A nonblocking strided get: on completion, only the elements its shape addresses
/// are copied from the span gex-rma filled to the caller's span.
#[derive(Debug)]
struct StridedGet {
    ev: Event<Vec<u8>, RmaError>,
    dst: Lent<u8>,
    shape: Shape,
}

impl Pending for StridedGet {
    fn any(&self) -> &dyn gex_facade::AnyEvent {
        &self.ev
    }
    fn test(&self, ep: &mut gex_facade::Endpoint) -> Result<bool, Error> {
        Ok(ep.test(&self.ev)?)
    }
    fn finish(self: Box<Self>, ep: &mut gex_facade::Endpoint) -> Result<(), Error> {
        let StridedGet { ev, mut dst, shape } = *self;
        let v = ep.wait(ev)?;
        let es = shape.counts[0];
        shape.each(|off| dst.write_at(off, &v[off..off + es]))
    }
}

/// The C arrays of a strided call, by side.
#[derive(Clone, Copy)]
struct Dims {
    remote: *const isize,
    local: *const isize,
    elem_size: usize,
    counts: *const usize,
    ndims: usize,
}

/// The [`Dims`] of remote strides `remote` and local strides `local`.
fn dims(
    remote: *const isize,
    local: *const isize,
    elem_size: usize,
    counts: *const usize,
    ndims: usize,
) -> Dims {
    Dims {
        remote,
        local,
        elem_size,
        counts,
        ndims,
    }
}

impl Dims {
    /// The remote pointer and the shape, `rank` checked; `put` names the sides.
    ///
    /// # Safety
    /// As [`Shape::new`].
    unsafe fn shape(
        self,
        h: &gex_ep_t,
        rank: u32,
        offset: usize,
        put: bool,
    ) -> Result<(GlobalPtr<u8>, Shape), Error> {
        let (rw, lw) = if put {
            ("dst_strides", "src_strides")
        } else {
            ("src_strides", "dst_strides")
        };
        let (r, l, es, c, n) = (
            self.remote,
            self.local,
            self.elem_size,
            self.counts,
            self.ndims,
        );
        // SAFETY: the caller's promise, passed on.
        let sh = unsafe { Shape::new(r, rw, l, lw, es, c, n) }?;
        Ok((gptr::<u8>(h, rank, offset)?, sh))
    }
}

/// The body of the strided puts.
///
/// # Safety
/// As [`gex_put_strided`] (and the `ev` of [`gex_put_strided_nb`] with `Mode::Nb`).
unsafe fn put_strided(
    ep: *const gex_ep_t,
    rank: u32,
    offset: usize,
    src: *const c_void,
    d: Dims,
    mode: Mode,
) -> c_int {
    entry(|| {
        // SAFETY: the caller's promise, as `ptr::handle` states it.
        let h = unsafe { ptr::handle(ep) }?;
        // SAFETY: the arrays are readable for `ndims` elements (contract).
        let (p, sh) = unsafe { d.shape(h, rank, offset, true) }?;
        let base = sh.base(src, "src")?;
        // SAFETY: the span from the lowest to the highest byte the shape addresses
        // from `src` is readable during the call (contract).
        let s = unsafe { ptr::slice(base, sh.span, "src") }?;
        // SAFETY: the caller's promise about `ev`, passed on.
        unsafe { put(h, &Remote::Strided(p, sh), s, mode) }
    })
}

/// The body of the strided gets.
///
/// # Safety
/// As [`gex_get_strided`] (and [`gex_get_strided_nb`] with `ev`).
unsafe fn get_strided(
    ep: *const gex_ep_t,
    dst: *mut c_void,
    rank: u32,
    offset: usize,
    d: Dims,
    mode: Mode,
) -> c_int {
    entry(|| {
        // SAFETY: the caller's promise, as `ptr::handle` states it.
        let h = unsafe { ptr::handle(ep) }?;
        // SAFETY: the arrays are readable for `ndims` elements (contract).
        let (p, sh) = unsafe { d.shape(h, rank, offset, false) }?;
        let base = sh.base(dst.cast_const(), "dst")?.cast_mut();
        if let Mode::Blocking = mode {
            // SAFETY: the span from the lowest to the highest byte the shape
            // addresses from `dst` is writable and used by nothing else during the
            // call (contract).
            let d = unsafe { ptr::slice_mut(base, sh.span, "dst") }?;
            let shape = sh.strided();
            h.with(|s| Ok(s.ep.get_vis(d, Vis::Strided { ptr: p, shape }, Blocking)?))?;
            return Ok(gex_status_t::GEX_OK);
        }
        // SAFETY: the elements the shape addresses stay writable until the event
        // completes or is freed, or until the gets' NBI sync (contract); only they are
        // written (`StridedGet`).
        let d = unsafe { Lent::new(base, sh.span, "dst") }?;
        mode.check()?;
        let shape = sh.strided();
        let vis = Vis::Strided { ptr: p, shape };
        let e = h.with(|s| Ok(s.ep.get_vis(vec![0u8; sh.span], vis, Nb)?))?;
        let g = Box::new(StridedGet {
            ev: e,
            dst: d,
            shape: sh,
        });
        match mode {
            // SAFETY: `ev` is non-null (checked above) and writable (contract).
            Mode::Nb(ev) => unsafe { hand_out(ev, Op::Dyn(g)) },
            _ => h.with(|s| {
                s.nbi_gets.push(g);
                Ok(gex_status_t::GEX_OK)
            }),
        }
    })
}

c_families! {
    /// Puts a strided region: `ndims` dimensions of `counts[d]` elements of `elem_size`
    /// bytes, dimension 0 innermost. Element `(i_0, .., i_{n-1})` is read at byte
    /// `src + Σ i_d * src_strides[d]` and written at byte `offset + Σ i_d * dst_strides[d]`
    /// of `rank`'s segment (strides in bytes, negative or zero allowed; zero destination
    /// strides make elements overwrite each other in an unspecified order). `ndims` 0 moves
    /// one element; a count or `elem_size` of 0 moves nothing. Returns once the bytes are
    /// at the target.
    ///
    /// Returns `GEX_OK`; `GEX_ERR_RMA` if an element is outside the target's segment or the
    /// conduit failed (nothing moves); `GEX_ERR_INVALID` for a rank out of range or an
    /// offset that overflows; `GEX_ERR_NULL` for a NULL array with `ndims > 0` or a NULL
    /// `src` with something to move.
    ///
    /// # Safety
    /// `ep` is NULL or a live endpoint; `dst_strides`, `src_strides` and `counts` are valid
    /// for reading `ndims` elements (any pointers when `ndims` is 0); every byte from the
    /// lowest to the highest the shape addresses from `src` (the gaps between elements
    /// included) is in one object, readable and not written during the call.
    fn gex_put_strided,
    /// Starts a strided put (as [`gex_put_strided`]) and writes its event to `*ev`; `src`
    /// may be reused as soon as the call returns, the event completes when the bytes are
    /// at the target.
    ///
    /// Returns as [`gex_put_strided`] (no event is made on error); `GEX_ERR_NULL` if `ev`
    /// is NULL.
    ///
    /// # Safety
    /// As [`gex_put_strided`], and `ev` is NULL or valid for writing one pointer.
    fn gex_put_strided_nb,
    /// Starts a strided put (as [`gex_put_strided`]) with an implicit event: the bytes are
    /// at the target once `gex_nbi_sync` of `GEX_NBI_PUTS` returns. `src` may be reused as
    /// soon as the call returns.
    ///
    /// Returns as [`gex_put_strided`] (nothing is started on error).
    ///
    /// # Safety
    /// As [`gex_put_strided`].
    fn gex_put_strided_nbi;
    (
        ep: *const gex_ep_t,
        rank: u32,
        offset: usize,
        dst_strides: *const isize,
        src: *const c_void,
        src_strides: *const isize,
        elem_size: usize,
        counts: *const usize,
        ndims: usize,
    ) |mode| {
        let d = dims(dst_strides, src_strides, elem_size, counts, ndims);
        // SAFETY: the caller's promises, passed on.
        unsafe { put_strided(ep, rank, offset, src, d, mode) }
    }

    /// Gets a strided region: element `(i_0, .., i_{n-1})` (`elem_size` bytes, dimension 0
    /// innermost) is read at byte `offset + Σ i_d * src_strides[d]` of `rank`'s segment and
    /// written at byte `dst + Σ i_d * dst_strides[d]` (strides in bytes, negative or zero
    /// allowed). `ndims` 0 moves one element; a count or `elem_size` of 0 moves nothing.
    /// Returns once the bytes are in `dst`; only the addressed bytes are written.
    ///
    /// Returns as [`gex_put_strided`] (NULL `dst` with something to move: `GEX_ERR_NULL`).
    ///
    /// # Safety
    /// `ep` is NULL or a live endpoint; `dst_strides`, `src_strides` and `counts` are valid
    /// for reading `ndims` elements (any pointers when `ndims` is 0); every byte from the
    /// lowest to the highest the shape addresses from `dst` (the gaps between elements
    /// included) is in one object, writable and not accessed by anything else during the
    /// call.
    fn gex_get_strided,
    /// Starts a strided get (as [`gex_get_strided`]) and writes its event to `*ev`. The
    /// elements are written to `dst` by the call that completes the event (not before,
    /// and never if the event is freed first); only the elements the shape addresses are
    /// written, so the gaps between them may be used meanwhile.
    ///
    /// Returns as [`gex_get_strided`] (no event is made on error); `GEX_ERR_NULL` if `ev`
    /// is NULL.
    ///
    /// # Safety
    /// `ep` is NULL or a live endpoint; `ev` is NULL or valid for writing one pointer;
    /// the arrays are valid for reading `ndims` elements; every byte from the lowest to the
    /// highest the shape addresses from `dst` is in one object, and the bytes of the
    /// addressed elements are writable and not accessed by anything else until the event
    /// is completed or freed.
    fn gex_get_strided_nb,
    /// Starts a strided get (as [`gex_get_strided`]) with an implicit event: the elements
    /// are written to `dst` by the `gex_nbi_sync` (or a `gex_nbi_test` that finds it done)
    /// of `GEX_NBI_GETS` that completes it; only the elements the shape addresses are
    /// written.
    ///
    /// Returns as [`gex_get_strided`] (nothing is started on error).
    ///
    /// # Safety
    /// As [`gex_get_strided_nb`] without `ev`, with the addressed elements writable and
    /// not accessed by anything else until the gets' NBI sync (or the endpoint's close).
    fn gex_get_strided_nbi;
    (
        ep: *const gex_ep_t,
        dst: *mut c_void,
        dst_strides: *const isize,
        rank: u32,
        offset: usize,
        src_strides: *const isize,
        elem_size: usize,
        counts: *const usize,
        ndims: usize,
    ) |mode| {
        let d = dims(src_strides, dst_strides, elem_size, counts, ndims);
        // SAFETY: the caller's promises, passed on.
        unsafe { get_strided(ep, dst, rank, offset, d, mode) }
    }

    /// Puts `npieces` pieces to `rank`'s segment: piece `i` is `pieces[i].len` bytes at
    /// byte `pieces[i].offset`, taken from `src` in order (packed, piece after piece;
    /// `src_len` must be the pieces' total length). Returns once the bytes are at the
    /// target.
    ///
    /// Returns `GEX_OK`; `GEX_ERR_RMA` if a piece is outside the target's segment or the
    /// conduit failed (nothing moves); `GEX_ERR_INVALID` for a rank out of range or a
    /// `src_len` that is not the total; `GEX_ERR_NULL` for a NULL `pieces` with
    /// `npieces > 0` or a NULL `src` with `src_len > 0`.
    ///
    /// # Safety
    /// `ep` is NULL or a live endpoint; `pieces` is valid for reading `npieces` pieces and
    /// `src` for reading `src_len` bytes (any pointers for 0).
    fn gex_put_vector,
    /// Starts a vector put (as [`gex_put_vector`]) and writes its event to `*ev`; `src`
    /// may be reused as soon as the call returns.
    ///
    /// Returns as [`gex_put_vector`]; `GEX_ERR_NULL` if `ev` is NULL.
    ///
    /// # Safety
    /// As [`gex_put_vector`], and `ev` is NULL or valid for writing one pointer.
    fn gex_put_vector_nb,
    /// Starts a vector put (as [`gex_put_vector`]) with an implicit event (completed by
    /// `gex_nbi_sync` of `GEX_NBI_PUTS`); `src` may be reused as soon as the call returns.
    ///
    /// Returns as [`gex_put_vector`].
    ///
    /// # Safety
    /// As [`gex_put_vector`].
    fn gex_put_vector_nbi;
    (
        ep: *const gex_ep_t,
        rank: u32,
        pieces: *const gex_piece_t,
        npieces: usize,
        src: *const c_void,
        src_len: usize,
    ) |mode| {
        let pc = Pieces::Vector(pieces, npieces);
        // SAFETY: the caller's promises, passed on.
        unsafe { put_pieces(ep, rank, pc, src, Some(src_len), mode) }
    }

    /// Gets `npieces` pieces from `rank`'s segment into `dst`, packed in order (`dst_len`
    /// must be the pieces' total length). Returns once the bytes are in `dst`.
    ///
    /// Returns as [`gex_put_vector`] (`dst`, `dst_len` in place of `src`, `src_len`).
    ///
    /// # Safety
    /// `ep` is NULL or a live endpoint; `pieces` is valid for reading `npieces` pieces;
    /// `dst` is valid for writing `dst_len` bytes (any pointers for 0) and not accessed by
    /// anything else during the call.
    fn gex_get_vector,
    /// Starts a vector get (as [`gex_get_vector`]) and writes its event to `*ev`; `dst`
    /// is written by the call that completes the event (never if it is freed first).
    ///
    /// Returns as [`gex_get_vector`]; `GEX_ERR_NULL` if `ev` is NULL.
    ///
    /// # Safety
    /// As [`gex_get_vector`], with `dst` writable until the event is completed or freed;
    /// `ev` is NULL or valid for writing one pointer.
    fn gex_get_vector_nb,
    /// Starts a vector get (as [`gex_get_vector`]) with an implicit event: `dst` is
    /// written by the `gex_nbi_sync` (or a `gex_nbi_test` that finds it done) of
    /// `GEX_NBI_GETS` that completes it.
    ///
    /// Returns as [`gex_get_vector`] (nothing is started on error).
    ///
    /// # Safety
    /// As [`gex_get_vector`], with `dst` writable and not accessed by anything else until
    /// the gets' NBI sync (or the endpoint's close).
    fn gex_get_vector_nbi;
    (
        ep: *const gex_ep_t,
        dst: *mut c_void,
        dst_len: usize,
        rank: u32,
        pieces: *const gex_piece_t,
        npieces: usize,
    ) |mode| {
        let pc = Pieces::Vector(pieces, npieces);
        // SAFETY: the caller's promises, passed on.
        unsafe { get_pieces(ep, dst, Some(dst_len), rank, pc, mode) }
    }

    /// Puts `n` pieces of `each` bytes to `rank`'s segment, piece `i` at byte
    /// `offsets[i]`, taken from `src` in order (packed: `n × each` bytes). Returns once
    /// the bytes are at the target.
    ///
    /// Returns as [`gex_put_vector`] (`GEX_ERR_INVALID` if `n × each` overflows).
    ///
    /// # Safety
    /// `ep` is NULL or a live endpoint; `offsets` is valid for reading `n` offsets and
    /// `src` for reading `n × each` bytes (any pointers for 0).
    fn gex_put_indexed,
    /// Starts an indexed put (as [`gex_put_indexed`]) and writes its event to `*ev`; `src`
    /// may be reused as soon as the call returns.
    ///
    /// Returns as [`gex_put_indexed`]; `GEX_ERR_NULL` if `ev` is NULL.
    ///
    /// # Safety
    /// As [`gex_put_indexed`], and `ev` is NULL or valid for writing one pointer.
    fn gex_put_indexed_nb,
    /// Starts an indexed put (as [`gex_put_indexed`]) with an implicit event (completed by
    /// `gex_nbi_sync` of `GEX_NBI_PUTS`); `src` may be reused as soon as the call returns.
    ///
    /// Returns as [`gex_put_indexed`].
    ///
    /// # Safety
    /// As [`gex_put_indexed`].
    fn gex_put_indexed_nbi;
    (
        ep: *const gex_ep_t,
        rank: u32,
        offsets: *const usize,
        n: usize,
        each: usize,
        src: *const c_void,
    ) |mode| {
        let pc = Pieces::Indexed(offsets, n, each);
        // SAFETY: the caller's promises, passed on.
        unsafe { put_pieces(ep, rank, pc, src, None, mode) }
    }

    /// Gets `n` pieces of `each` bytes from `rank`'s segment, piece `i` from byte
    /// `offsets[i]`, into `dst` packed in order (`n × each` bytes). Returns once the bytes
    /// are in `dst`.
    ///
    /// Returns as [`gex_put_indexed`].
    ///
    /// # Safety
    /// `ep` is NULL or a live endpoint; `offsets` is valid for reading `n` offsets; `dst`
    /// is valid for writing `n × each` bytes (any pointers for 0) and not accessed by
    /// anything else during the call.
    fn gex_get_indexed,
    /// Starts an indexed get (as [`gex_get_indexed`]) and writes its event to `*ev`; `dst`
    /// is written by the call that completes the event (never if it is freed first).
    ///
    /// Returns as [`gex_get_indexed`]; `GEX_ERR_NULL` if `ev` is NULL.
    ///
    /// # Safety
    /// As [`gex_get_indexed`], with `dst` writable until the event is completed or freed;
    /// `ev` is NULL or valid for writing one pointer.
    fn gex_get_indexed_nb,
    /// Starts an indexed get (as [`gex_get_indexed`]) with an implicit event: `dst` is
    /// written by the `gex_nbi_sync` (or a `gex_nbi_test` that finds it done) of
    /// `GEX_NBI_GETS` that completes it.
    ///
    /// Returns as [`gex_get_indexed`] (nothing is started on error).
    ///
    /// # Safety
    /// As [`gex_get_indexed`], with `dst` writable and not accessed by anything else until
    /// the gets' NBI sync (or the endpoint's close).
    fn gex_get_indexed_nbi;
    (
        ep: *const gex_ep_t,
        dst: *mut c_void,
        rank: u32,
        offsets: *const usize,
        n: usize,
        each: usize,
    ) |mode| {
        let pc = Pieces::Indexed(offsets, n, each);
        // SAFETY: the caller's promises, passed on.
        unsafe { get_pieces(ep, dst, None, rank, pc, mode) }
    }
}
