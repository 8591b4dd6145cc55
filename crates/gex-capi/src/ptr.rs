//! Every read and write through a pointer the C caller gave: handles (null, alignment
//! and magic checked), argument slices, output slots and the destination buffers of
//! nonblocking operations.
//!
//! # Safety
//! Each function states what the caller promised; the entry points pass their own
//! callers' promises (their `# Safety` sections) down to these. What the checks here
//! catch (null, misalignment, a byte count that overflows, a handle without its magic
//! word) is reported as an error code instead.
#![allow(unsafe_code)]

use crate::status::Error;
use gex_sync::atomic::{AtomicU64, Ordering};

/// A handle type: a heap object whose address the C caller holds, marked by a magic
/// word while it is alive.
pub trait Magic {
    /// The word a live handle of this type carries.
    const MAGIC: u64;
    /// What the C caller calls it (for messages).
    const NAME: &'static str;
    /// The handle's magic word.
    fn magic(&self) -> &AtomicU64;
    /// The address of the magic word of the object at `p`, computed without reading
    /// or referencing the object.
    ///
    /// # Safety
    /// `p` is non-null, aligned, and points to at least `size_of::<Self>()` bytes of
    /// one allocation.
    unsafe fn magic_at(p: *const Self) -> *const AtomicU64;
}

/// Implements [`Magic`] for a handle type with a `magic: AtomicU64` field. Its one
/// `unsafe` (a field's address) is this module's, allowed on the impl it expands to.
macro_rules! magic {
    ($t:ty, $word:expr, $name:expr) => {
        #[allow(unsafe_code)]
        impl $crate::ptr::Magic for $t {
            const MAGIC: u64 = $word;
            const NAME: &'static str = $name;
            fn magic(&self) -> &AtomicU64 {
                &self.magic
            }
            unsafe fn magic_at(p: *const Self) -> *const AtomicU64 {
                // SAFETY: `p` points to `size_of::<Self>()` bytes of one allocation
                // (the caller's promise): the field's place is in bounds; no reference
                // to the object is made and nothing is read.
                unsafe { &raw const (*p).magic }
            }
        }
    };
}
pub(crate) use magic;

/// Hands `b` to the C caller as a raw handle.
pub fn into_raw<T: Magic>(b: Box<T>) -> *mut T {
    b.magic().store(T::MAGIC, Ordering::Relaxed);
    Box::into_raw(b)
}

/// Checks a pointer to a handle and borrows it.
///
/// # Errors
/// `GEX_ERR_NULL` if `p` is NULL; `GEX_ERR_INVALID` if it is misaligned or the object
/// does not carry the magic word of a live `T`.
///
/// # Safety
/// `p` is NULL or points to readable memory of at least `size_of::<T>()` bytes; if it
/// carries `T`'s magic word it is a handle returned by [`into_raw`] and not yet taken
/// back by [`take`], and no `&mut` to it exists for `'a`.
pub unsafe fn handle<'a, T: Magic>(p: *const T) -> Result<&'a T, Error> {
    if p.is_null() {
        return Err(Error::null(T::NAME));
    }
    if !p.is_aligned() {
        return Err(Error::invalid(format!("{} {p:p} is misaligned", T::NAME)));
    }
    // SAFETY: non-null and aligned (checked), readable for a `T` (the caller's
    // promise); an `AtomicU64` is valid for any initialised bytes, and nothing else of
    // the object is read or referenced before its magic word matches.
    let magic = unsafe { &*T::magic_at(p) };
    if magic.load(Ordering::Relaxed) != T::MAGIC {
        return Err(Error::invalid(format!(
            "{p:p} is not a live {} (closed, freed, or never one)",
            T::NAME
        )));
    }
    // SAFETY: the object carries `T`'s magic word: a live handle (the caller's promise).
    Ok(unsafe { &*p })
}

/// Takes a handle back from the C caller (to close or free it): checked as
/// [`handle`], its magic word cleared.
///
/// # Errors
/// As [`handle`].
///
/// # Safety
/// As [`handle`], and no other reference to the handle is used afterwards (the C
/// caller no longer uses `p`).
pub unsafe fn take<T: Magic>(p: *mut T) -> Result<Box<T>, Error> {
    // SAFETY: the caller's promise, as `handle` states it.
    unsafe { handle(p) }?;
    // SAFETY: a live handle made by `into_raw` from a box, not taken before, and no
    // longer used by the caller: ownership comes back here once.
    let b = unsafe { Box::from_raw(p) };
    b.magic().store(0, Ordering::Relaxed);
    Ok(b)
}

/// Frees a handle the C caller gives up (`gex_*_free`): NULL is ignored, anything
/// else is taken back as [`take`] and dropped.
///
/// # Errors
/// As [`handle`] (but for NULL).
///
/// # Safety
/// As [`take`], for a non-null `p`.
pub unsafe fn free<T: Magic>(p: *mut T) -> Result<crate::status::gex_status_t, Error> {
    if !p.is_null() {
        // SAFETY: the caller's promise, as `take` states it.
        drop(unsafe { take(p) }?);
    }
    Ok(crate::status::gex_status_t::GEX_OK)
}

/// Writes `v` to the caller's output slot `p`.
///
/// # Errors
/// `GEX_ERR_NULL` naming `what` if `p` is NULL, `GEX_ERR_INVALID` if misaligned.
///
/// # Safety
/// `p` is NULL or valid for a write of one `T`.
pub unsafe fn write<T>(p: *mut T, v: T, what: &str) -> Result<(), Error> {
    check(p, 1, what)?;
    // SAFETY: non-null, aligned, and writable (the caller's promise).
    unsafe { p.write(v) };
    Ok(())
}

/// Writes `value` of the live handle `h` to the caller's output slot `out`: the body
/// of the entry points that report one value of a handle.
///
/// # Errors
/// As [`handle`] and [`write()`], and `value`'s.
///
/// # Safety
/// `h` is NULL or a live handle; `out` is NULL or valid for a write of one `T`.
pub unsafe fn write_of<H: Magic, T>(
    h: *const H,
    out: *mut T,
    what: &str,
    value: impl FnOnce(&H) -> Result<T, Error>,
) -> Result<crate::status::gex_status_t, Error> {
    // SAFETY: `h` is NULL or a live handle (the caller's promise).
    let v = value(unsafe { handle(h) }?)?;
    // SAFETY: `out` is NULL or writable (the caller's promise).
    unsafe { write(out, v, what) }?;
    Ok(crate::status::gex_status_t::GEX_OK)
}

/// Checks that `n` elements at `p` make a possible slice.
fn check<T>(p: *const T, n: usize, what: &str) -> Result<(), Error> {
    if p.is_null() {
        return Err(Error::null(what));
    }
    if !p.is_aligned() {
        return Err(Error::invalid(format!("{what} {p:p} is misaligned")));
    }
    match n.checked_mul(size_of::<T>()) {
        Some(b) if b <= isize::MAX as usize => Ok(()),
        _ => Err(Error::invalid(format!(
            "{what}: {n} elements of {} bytes overflow",
            size_of::<T>()
        ))),
    }
}

/// The caller's `n` elements at `p` (any `p`, NULL included, when `n` is 0).
///
/// # Errors
/// `GEX_ERR_NULL` if `p` is NULL and `n > 0`; `GEX_ERR_INVALID` if misaligned or the
/// byte count overflows.
///
/// # Safety
/// If `n > 0`, `p` is valid for reads of `n` elements for `'a`, and not written
/// meanwhile.
pub unsafe fn slice<'a, T>(p: *const T, n: usize, what: &str) -> Result<&'a [T], Error> {
    if n == 0 {
        return Ok(&[]);
    }
    check(p, n, what)?;
    // SAFETY: non-null, aligned, in one allocation and readable for `'a` (the caller's
    // promise), at most isize::MAX bytes (checked).
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// The caller's `n` writable elements at `p`.
///
/// # Errors
/// As [`slice()`].
///
/// # Safety
/// If `n > 0`, `p` is valid for reads and writes of `n` elements for `'a`, accessed by
/// nothing else meanwhile.
pub unsafe fn slice_mut<'a, T>(p: *mut T, n: usize, what: &str) -> Result<&'a mut [T], Error> {
    if n == 0 {
        return Ok(&mut []);
    }
    check(p, n, what)?;
    // SAFETY: as in `slice`, with exclusive access (the caller's promise).
    Ok(unsafe { std::slice::from_raw_parts_mut(p, n) })
}

/// A destination the caller lent to a nonblocking operation: written once, when the
/// operation's event completes (a get's bytes, a fetched word).
#[derive(Debug)]
pub struct Lent<T> {
    p: *mut T,
    n: usize,
}

// SAFETY: the destination is the C caller's memory, which it promised writable until
// the operation's event is completed or freed, by whichever thread does that (an event
// or an endpoint's NBI list may be completed on another thread than the one that
// started it, one thread at a time: the endpoint's lock, or the event's owner); `T` is
// sent with it.
unsafe impl<T: Send> Send for Lent<T> {}

impl<T: Copy> Lent<T> {
    /// Checks `n` elements at `p` (as [`slice_mut`]) and remembers them.
    ///
    /// # Errors
    /// As [`slice()`].
    ///
    /// # Safety
    /// If `n > 0`, `p` is valid for writes of `n` elements until the event of the
    /// operation is completed (`gex_event_test`/`wait`/`wait_all`/`wait_any`) or freed
    /// (`gex_event_free`), and nothing else accesses them meanwhile.
    pub unsafe fn new(p: *mut T, n: usize, what: &str) -> Result<Self, Error> {
        if n > 0 {
            check(p, n, what)?;
        }
        Ok(Lent { p, n })
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.n
    }

    /// True if no element is lent.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Writes `src` (its first `len()` elements) into the lent destination, consuming
    /// the loan.
    pub fn fill(self, src: &[T]) {
        let n = self.n.min(src.len());
        if n > 0 {
            // SAFETY: `new` checked `p` for `n` elements and its caller promised them
            // writable until the event completes, which is now (this runs once, as
            // the event is taken); `src` is ours, so they do not overlap.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.p, n) };
        }
    }

    /// Writes `src` at element `at` of the lent destination (a part of it: the
    /// elements a strided get addresses, one run at a time, when its event completes).
    ///
    /// # Errors
    /// `GEX_ERR_INVALID` if `at + src.len()` is past the lent elements (nothing is
    /// written).
    pub fn write_at(&mut self, at: usize, src: &[T]) -> Result<(), Error> {
        match at.checked_add(src.len()) {
            Some(end) if end <= self.n => {}
            _ => {
                return Err(Error::invalid(format!(
                    "write of {} elements at {at} past the {} lent",
                    src.len(),
                    self.n
                )));
            }
        }
        if !src.is_empty() {
            // SAFETY: `new` checked `p` for `n` elements and its caller promised them
            // writable until the event completes, which is now (`&mut self`: the loan
            // is used by one completion); `at + len <= n` (checked); `src` is ours, so
            // they do not overlap.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.p.add(at), src.len()) };
        }
        Ok(())
    }
}
