//! Entry points for the fuzz targets of `benches/gex-fuzz`: the decoders of what other
//! processes write into shared memory (ring records, region headers), callable from
//! outside the crate. Not part of the API: hidden from the documentation, may change
//! with any release, and nothing else may use it.

use gex_core::{Category, Kind};

/// A decoded ring record: handler, arguments, and what follows them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Handler index.
    pub handler: u8,
    /// The arguments.
    pub args: Vec<u32>,
    /// The category.
    pub category: Category,
    /// Medium: the payload; otherwise empty.
    pub payload: Vec<u8>,
    /// Long: (offset, length) in the receiver's segment.
    pub long: Option<(usize, usize)>,
}

/// Largest argument count of a record.
pub const MAX_ARGS: usize = crate::record::MAX_ARGS;
/// Bytes of the fixed argument area of a negotiated-payload Medium.
pub const NP_ARGS_AREA: usize = crate::record::NP_ARGS_AREA;
/// User-word flag of the fixed argument area.
pub const U_FIXED_ARGS: u32 = crate::record::U_FIXED_ARGS;

/// The user word the conduit writes for a message.
pub fn user_word(handler: u8, category: Category, kind: Kind, nargs: usize) -> u32 {
    crate::record::user_word(handler, category, kind, nargs)
}

/// Bytes of the argument area of `nargs` arguments.
pub fn args_area(nargs: usize) -> usize {
    crate::record::args_area(nargs)
}

/// Decodes a record as the receiving endpoint's `poll` does (`body` 4-byte aligned).
///
/// # Errors
/// What the conduit would report before ending the rank.
pub fn decode_record(user: u32, body: &[u8], kind: Kind, seg_len: usize) -> Result<Record, String> {
    let r = crate::record::decode(user, body, kind, seg_len).map_err(|e| e.to_string())?;
    let (payload, long) = match r.body {
        crate::record::Body::Short => (Vec::new(), None),
        crate::record::Body::Medium(p) => (p.to_vec(), None),
        crate::record::Body::Long { offset, len } => (Vec::new(), Some((offset, len))),
    };
    Ok(Record {
        handler: r.handler,
        args: r.args.to_vec(),
        category: r.category(),
        payload,
        long,
    })
}

/// The header fields of a shared region, in file order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Magic number.
    pub magic: u64,
    /// Owner's rank.
    pub rank: u64,
    /// Owner's endpoints.
    pub eps: u64,
    /// Endpoints of the host.
    pub total_eps: u64,
    /// Bytes per ring.
    pub ring_cap: u64,
    /// Largest Medium payload.
    pub max_medium: u64,
    /// Segment bytes per endpoint.
    pub seg_len: u64,
    /// Region bytes.
    pub len: u64,
}

/// A well-formed header for a region of the given shape (`None` if it overflows), as
/// the owner writes it.
pub fn header_for(
    rank: u32,
    eps: usize,
    total_eps: usize,
    ring_cap: usize,
    seg_len: usize,
    max_medium: usize,
) -> Option<Header> {
    let l = crate::region::Layout::new(eps, eps, total_eps, ring_cap, seg_len, 0)?;
    Some(Header {
        magic: crate::region::MAGIC,
        rank: u64::from(rank),
        eps: eps as u64,
        total_eps: total_eps as u64,
        ring_cap: ring_cap as u64,
        max_medium: max_medium as u64,
        seg_len: seg_len as u64,
        len: l.len as u64,
    })
}

/// Checks a peer's region header as `open` does, against what the job layout says
/// (`rank`, its endpoints `eps`, the host's `total_eps`, its `seg_len`); returns
/// (region length, largest Medium payload).
///
/// # Errors
/// What `open` would report.
pub fn check_header(
    h: Header,
    rank: u32,
    eps: usize,
    total_eps: usize,
    seg_len: usize,
) -> Result<(usize, usize), String> {
    let h = crate::region::Header {
        magic: h.magic,
        rank: h.rank,
        eps: h.eps,
        slots: h.eps,
        total_eps: h.total_eps,
        ring_cap: h.ring_cap,
        max_medium: h.max_medium,
        seg_len: h.seg_len,
        aux_len: 0,
        len: h.len,
    };
    h.check(rank, eps, eps, total_eps, seg_len, 0, NP_ARGS_AREA)
        .map(|(l, m)| (l.len, m))
}
