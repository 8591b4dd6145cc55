//! The safe view of an endpoint's segment.
//!
//! # Safety
//! The conduit keeps the segment mapped for its life, which the endpoint (and so the
//! borrow of it a [`Segment`] carries) keeps alive. Segment memory is shared with other
//! ranks, threads and processes that may write it at any time, so the safe accessors
//! copy byte-wise atomically ([`gex_sync::copy`]: no data race whatever others do) and
//! the slice views are `unsafe` with the rule written down.
#![allow(unsafe_code)]

use crate::error::AmError;
use crate::types::EpAddr;
use std::marker::PhantomData;
use std::ptr::NonNull;

/// A view of an endpoint's segment: registered memory that peers write with Long AMs
/// and RMA.
///
/// ```
/// # use gex_core::{boot::Singleton, loopback::Loopback, ClientBuilder};
/// # let client = ClientBuilder::new().segment_size(4096).init::<Loopback>(Box::new(Singleton::new()))?;
/// # let mut ep = client.endpoint(0)?;
/// let seg = ep.segment();
/// seg.write(100, b"abc")?;
/// let mut out = [0u8; 3];
/// seg.read(100, &mut out)?;
/// assert_eq!(&out, b"abc");
/// assert!(seg.write(4095, b"xy").is_err()); // out of the segment: an error, never a stray write
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Segment<'e> {
    base: NonNull<u8>,
    len: usize,
    me: EpAddr,
    _ep: PhantomData<&'e ()>,
}

impl Segment<'_> {
    pub(crate) fn new(base: NonNull<u8>, len: usize, me: EpAddr) -> Self {
        Segment {
            base,
            len,
            me,
            _ep: PhantomData,
        }
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True for an empty segment.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Base address (for registering it with other libraries, or for `unsafe` code).
    pub fn as_ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }
    fn check(&self, offset: usize, len: usize) -> Result<(), AmError> {
        match offset.checked_add(len) {
            Some(e) if e <= self.len => Ok(()),
            _ => Err(AmError::OutOfSegment {
                dst: self.me,
                offset,
                len,
                seg_len: self.len,
            }),
        }
    }
    /// Copies `out.len()` bytes at `offset` into `out` (relaxed atomic loads: bytes
    /// another rank writes meanwhile come out old or new, never undefined).
    ///
    /// # Errors
    /// [`AmError::OutOfSegment`] if the range is not inside the segment.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), AmError> {
        self.check(offset, out.len())?;
        // SAFETY: in bounds of the mapped segment (checked); atomic copies.
        unsafe { gex_sync::copy::atomic_read(self.base.as_ptr().add(offset), out) };
        Ok(())
    }
    /// Copies `data` into the segment at `offset` (relaxed atomic stores).
    ///
    /// # Errors
    /// [`AmError::OutOfSegment`] if the range is not inside the segment.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), AmError> {
        self.check(offset, data.len())?;
        // SAFETY: in bounds (checked); `data` is a local buffer, never segment memory of
        // this view's range (a `&[u8]` into the segment can only come from `unsafe`
        // code, whose contract excludes writers).
        unsafe { gex_sync::copy::atomic_write(self.base.as_ptr().add(offset), data) };
        Ok(())
    }
    /// The segment as a slice.
    ///
    /// # Safety
    /// No other rank, thread or process may write the segment while the slice is alive
    /// (no RMA, no Long AM to it); gex cannot know what peers do with one-sided
    /// operations, so the program's protocol must guarantee it.
    ///
    /// A layer may let other ranks read bytes of a slice passed to one of its calls
    /// straight from the segment (shared-memory collectives publish a large input in
    /// the segment by reference) and waits for those readers before the call returns
    /// `Ok`; a call that returns an error or unwinds may leave readers behind. After
    /// such a call, the bytes of its input must stay unwritten (this rank included,
    /// through `Segment::write` or RMA) until every member of the call's team has
    /// completed a later collective of the team (a barrier).
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: mapped for the life of the conduit; the caller rules out writers.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr(), self.len) }
    }
}
