//! The smp conduit's ring records: encoding of the 32-bit user word and decoding and
//! checking of a received record. Pure logic (no I/O, no shared memory), so it is
//! fuzzed on its own (`benches/gex-fuzz`, target `smp-record`).
//!
//! # Record format
//! A ring record ([`gex_sync::ring`]) carries one AM: its user word says what the
//! body holds.
//!
//! | user word bits | field |
//! |---|---|
//! | 0–7 | handler index |
//! | 8–9 | category: 0 Short, 1 Medium, 2 Long (3 is invalid) |
//! | 10 | reply (must match the ring the record came from) |
//! | 11–15 | number of arguments (at most [`MAX_ARGS`]) |
//! | 16 | fixed argument area: the arguments take [`NP_ARGS_AREA`] bytes (a negotiated-payload Medium) |
//! | 17–31 | reserved (0) |
//!
//! The body holds the arguments (4 bytes each, native order) padded to a multiple of 8
//! (or the fixed area), then: nothing (Short), the payload (Medium), or the
//! destination offset and length in the receiver's segment as two native `u64` (Long,
//! whose payload the sender already wrote into the segment).
//!
//! A record from another process may hold anything. [`decode`] accepts exactly what
//! the encoder writes and returns an error describing anything else; the conduit then
//! ends the rank with a message naming the sender (`poll` cannot return an error).
//!
//! # Safety
//! One `unsafe` block (`args_of`) reinterprets the argument bytes as `u32`s after
//! checking their alignment and length (every bit pattern is a valid `u32`).
#![allow(unsafe_code)]

use gex_core::{Category, Kind};

/// Bytes reserved for arguments in a negotiated-payload Medium record.
pub(crate) const NP_ARGS_AREA: usize = 64;
/// Largest argument count a record may carry.
pub(crate) const MAX_ARGS: usize = 16;

pub(crate) const U_CAT_SHIFT: u32 = 8;
/// The category bits of the user word.
const U_CAT_MASK: u32 = 3 << U_CAT_SHIFT;
pub(crate) const U_REPLY: u32 = 1 << 10;
pub(crate) const U_NARGS_SHIFT: u32 = 11;
pub(crate) const U_FIXED_ARGS: u32 = 1 << 16;
/// Bits of the user word that must be zero.
const U_RESERVED: u32 = !((1 << 17) - 1);
/// Bytes of a Long descriptor (offset, length).
pub(crate) const LONG_DESC: usize = 16;

/// Bytes of the argument area of `nargs` arguments (padded to a multiple of 8).
#[inline(always)]
pub(crate) fn args_area(nargs: usize) -> usize {
    (nargs * 4 + 7) & !7
}

/// The user word of a record.
#[inline(always)]
pub(crate) fn user_word(handler: u8, category: Category, kind: Kind, nargs: usize) -> u32 {
    let cat = match category {
        Category::Short => 0,
        Category::Medium => 1,
        Category::Long => 2,
    };
    let reply = if kind == Kind::Reply { U_REPLY } else { 0 };
    handler as u32 | (cat << U_CAT_SHIFT) | reply | ((nargs as u32) << U_NARGS_SHIFT)
}

/// What a record's body holds after the arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Body<'a> {
    /// A Short: nothing.
    Short,
    /// A Medium: the payload.
    Medium(&'a [u8]),
    /// A Long: where the payload is in the receiver's segment (offset, length),
    /// checked against its length.
    Long { offset: usize, len: usize },
}

/// A checked record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Record<'a> {
    pub(crate) handler: u8,
    pub(crate) args: &'a [u32],
    pub(crate) body: Body<'a>,
}

impl Record<'_> {
    /// The record's category.
    pub(crate) fn category(&self) -> Category {
        match self.body {
            Body::Short => Category::Short,
            Body::Medium(_) => Category::Medium,
            Body::Long { .. } => Category::Long,
        }
    }
}

/// What is wrong with a record (see [`decode`]); its `Display` is the description
/// the conduit reports. A plain value, so the decoder's hot path builds no string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bad {
    Reserved(u32),
    WrongRing {
        reply: bool,
    },
    TooManyArgs(usize),
    FixedOutsideMedium,
    BodyLen {
        what: &'static str,
        got: usize,
        want: usize,
    },
    MediumTooShort {
        got: usize,
        area: usize,
    },
    LongOutside {
        offset: u64,
        len: u64,
        seg_len: usize,
    },
    Category3(u32),
    Misaligned,
}

impl std::fmt::Display for Bad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Bad::Reserved(user) => write!(f, "reserved bits set in the user word {user:#010x}"),
            Bad::WrongRing { reply } => {
                let (what, ring) = if reply {
                    ("reply", "request")
                } else {
                    ("request", "reply")
                };
                write!(f, "a {what} on the {ring} ring")
            }
            Bad::TooManyArgs(n) => write!(f, "{n} arguments (at most {MAX_ARGS})"),
            Bad::FixedOutsideMedium => f.write_str("a fixed argument area outside a Medium"),
            Bad::BodyLen { what, got, want } => {
                write!(f, "a {what} of {got} bytes (expected {want})")
            }
            Bad::MediumTooShort { got, area } => write!(
                f,
                "a Medium of {got} bytes, shorter than its {area}-byte argument area"
            ),
            Bad::LongOutside {
                offset,
                len,
                seg_len,
            } => write!(
                f,
                "a Long of {len} bytes at offset {offset}, outside the {seg_len}-byte segment"
            ),
            Bad::Category3(user) => write!(f, "category 3 in the user word {user:#010x}"),
            Bad::Misaligned => f.write_str("a misaligned record body"),
        }
    }
}

/// Decodes and checks a record with user word `user` and body `body`, received on a
/// ring of `kind` (request or reply) by an endpoint whose segment has `seg_len`
/// bytes. `body` must be 4-byte aligned (ring bodies are 8-byte aligned).
///
/// Shorts, the records of the smallest and most frequent AMs, are recognised by one
/// mask test of the user word and two bounds; everything else (Mediums, Longs and
/// whatever is malformed) goes through the full decoder, out of line. Both accept
/// exactly the same records and decode them alike (unit test
/// `the_fast_path_agrees_with_the_full_decoder`). The split is for the receive loop:
/// with the full decoder inlined, a flood of Short AMs took 1.04-1.08 times the time
/// per message of the build that checked only the argument count and the length
/// (`gex-perf am --test am_short_flood`, alternated runs); with the Short fast path it
/// takes 0.92-0.97. A fast path for plain Mediums as well measured 1.02-1.04 on the
/// Short flood and was left out (docs/performance.md).
///
/// # Errors
/// What is wrong ([`Bad`]): reserved bits set, category 3, a reply flag that does not
/// match the ring, too many arguments, a fixed argument area outside a Medium, a body
/// too short for its arguments or of the wrong length for a Short or Long, a Long
/// outside the segment, or a misaligned body.
#[inline(always)]
pub(crate) fn decode(
    user: u32,
    body: &[u8],
    kind: Kind,
    seg_len: usize,
) -> Result<Record<'_>, Bad> {
    let nargs = ((user >> U_NARGS_SHIFT) & 31) as usize;
    let area = args_area(nargs);
    // The bits that must be exactly these for a Short on this ring.
    let shape = user & (U_RESERVED | U_REPLY | U_FIXED_ARGS | U_CAT_MASK);
    let reply = if kind == Kind::Reply { U_REPLY } else { 0 };
    if shape == reply && nargs <= MAX_ARGS && body.len() == area {
        if let Some(args) = args_of(body, nargs) {
            return Ok(Record {
                handler: user as u8,
                args,
                body: Body::Short,
            });
        }
    }
    decode_full(user, body, kind, seg_len)
}

/// The `nargs` arguments at the start of `body` (`None` if `body` is not 4-byte
/// aligned). `body` holds at least `4 * nargs` bytes.
#[inline(always)]
fn args_of(body: &[u8], nargs: usize) -> Option<&[u32]> {
    let arg_bytes = &body[..nargs * 4];
    // SAFETY: every bit pattern is a valid `u32`; `align_to` puts in `pre` whatever
    // does not start on a `u32` boundary, which is checked to be nothing.
    let (pre, args, _) = unsafe { arg_bytes.align_to::<u32>() };
    (pre.is_empty() && args.len() == nargs).then_some(args)
}

/// [`decode`] of any record: every check, one by one. Out of line: inlined into the
/// receive loop, its branches slowed the Short path.
#[inline(never)]
fn decode_full(user: u32, body: &[u8], kind: Kind, seg_len: usize) -> Result<Record<'_>, Bad> {
    if user & U_RESERVED != 0 {
        return Err(Bad::Reserved(user));
    }
    let reply = user & U_REPLY != 0;
    if reply != (kind == Kind::Reply) {
        return Err(Bad::WrongRing { reply });
    }
    let nargs = ((user >> U_NARGS_SHIFT) & 31) as usize;
    if nargs > MAX_ARGS {
        return Err(Bad::TooManyArgs(nargs));
    }
    let cat = (user >> U_CAT_SHIFT) & 3;
    let fixed = user & U_FIXED_ARGS != 0;
    if fixed && cat != 1 {
        return Err(Bad::FixedOutsideMedium);
    }
    let area = if fixed {
        NP_ARGS_AREA
    } else {
        args_area(nargs)
    };
    let want = |what: &'static str, n: usize| -> Result<(), Bad> {
        if body.len() == n {
            Ok(())
        } else {
            Err(Bad::BodyLen {
                what,
                got: body.len(),
                want: n,
            })
        }
    };
    let rest = match cat {
        0 => {
            want("Short", area)?;
            Body::Short
        }
        1 => {
            let Some(payload) = body.get(area..) else {
                return Err(Bad::MediumTooShort {
                    got: body.len(),
                    area,
                });
            };
            Body::Medium(payload)
        }
        2 => {
            want("Long", area + LONG_DESC)?;
            let word = |at: usize| {
                let mut w = [0u8; 8];
                w.copy_from_slice(&body[at..at + 8]);
                u64::from_ne_bytes(w)
            };
            let (offset, len) = (word(area), word(area + 8));
            let fits = usize::try_from(offset)
                .ok()
                .zip(usize::try_from(len).ok())
                .filter(|&(o, l)| o.checked_add(l).is_some_and(|e| e <= seg_len));
            let Some((offset, len)) = fits else {
                return Err(Bad::LongOutside {
                    offset,
                    len,
                    seg_len,
                });
            };
            Body::Long { offset, len }
        }
        _ => return Err(Bad::Category3(user)),
    };
    let Some(args) = args_of(body, nargs) else {
        return Err(Bad::Misaligned);
    };
    Ok(Record {
        handler: user as u8,
        args,
        body: rest,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An 8-byte aligned body.
    fn body(words: &[u64]) -> Vec<u64> {
        words.to_vec()
    }

    fn bytes(v: &[u64]) -> &[u8] {
        // SAFETY: a u64 slice viewed as its bytes.
        unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), v.len() * 8) }
    }

    #[test]
    fn well_formed_records_decode() {
        let b = body(&[u64::from(7u32) | (u64::from(9u32) << 32), 0]);
        let u = user_word(200, Category::Short, Kind::Request, 2);
        let r = decode(u, &bytes(&b)[..8], Kind::Request, 0).unwrap();
        assert_eq!(r.handler, 200);
        assert_eq!(r.args, [7, 9]);
        assert_eq!(r.body, Body::Short);
        let u = user_word(1, Category::Medium, Kind::Reply, 0);
        let r = decode(u, &bytes(&b)[..5], Kind::Reply, 0).unwrap();
        assert_eq!(r.body, Body::Medium(&bytes(&b)[..5]));
        let b = body(&[100, 28]);
        let u = user_word(3, Category::Long, Kind::Request, 0);
        let r = decode(u, bytes(&b), Kind::Request, 128).unwrap();
        assert_eq!(
            r.body,
            Body::Long {
                offset: 100,
                len: 28
            }
        );
        assert_eq!(r.category(), Category::Long);
    }

    /// Regression (found while writing the `smp-record` fuzz target): a Long record
    /// whose body ends after its argument area. The drain loop read the 16-byte
    /// descriptor after the body, past the end of the record and, for a record at the
    /// end of the ring, outside the ring's data area.
    #[test]
    fn long_record_without_its_descriptor_is_an_error() {
        let b = body(&[0]);
        let u = user_word(0, Category::Long, Kind::Request, 0);
        let e = decode(u, &bytes(&b)[..0], Kind::Request, 1 << 20)
            .unwrap_err()
            .to_string();
        assert!(e.contains("a Long of 0 bytes (expected 16)"), "{e}");
    }

    /// Regression (found while writing the `smp-record` fuzz target): category 3 was
    /// delivered as a Long, and reserved user-word bits and a reply flag on the request
    /// ring were ignored.
    #[test]
    fn garbage_user_words_are_errors() {
        let b = body(&[0, 0, 0]);
        for (u, what) in [
            (3 << U_CAT_SHIFT, "category 3"),
            (1 << 20, "reserved bits"),
            (U_REPLY, "a reply on the request ring"),
            (17 << U_NARGS_SHIFT, "17 arguments"),
            (U_FIXED_ARGS, "fixed argument area outside a Medium"),
        ] {
            let e = decode(u, bytes(&b), Kind::Request, 1 << 20)
                .unwrap_err()
                .to_string();
            assert!(e.contains(what), "{u:#x}: {e}");
        }
        let e = decode(0, bytes(&b), Kind::Reply, 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("a request on the reply ring"), "{e}");
    }

    #[test]
    fn long_outside_the_segment_is_an_error() {
        let b = body(&[u64::MAX, 2]);
        let u = user_word(0, Category::Long, Kind::Request, 0);
        let e = decode(u, bytes(&b), Kind::Request, 1 << 20)
            .unwrap_err()
            .to_string();
        assert!(e.contains("outside the 1048576-byte segment"), "{e}");
        let b = body(&[1 << 20, 0]);
        assert!(decode(u, bytes(&b), Kind::Request, 1 << 20).is_ok());
    }

    /// The fast path of `decode` accepts and decodes exactly what the full decoder
    /// does: every combination of the user word's fields (handler, category, reply
    /// flag, argument count up to the field's maximum, fixed area, a reserved bit),
    /// on both rings, against bodies of every length up to past the fixed area, aligned
    /// and misaligned.
    #[test]
    fn the_fast_path_agrees_with_the_full_decoder() {
        let words: Vec<u64> = (0..24u64).map(|i| i * 0x0101_0101_0101_0101).collect();
        let aligned = bytes(&words);
        let mut checked = 0usize;
        for handler in [0u32, 255] {
            for cat in 0..4u32 {
                for reply in [0, U_REPLY] {
                    for nargs in 0..32u32 {
                        for extra in [0, U_FIXED_ARGS, 1 << 17, 1 << 31] {
                            let user = handler
                                | (cat << U_CAT_SHIFT)
                                | reply
                                | (nargs << U_NARGS_SHIFT)
                                | extra;
                            for kind in [Kind::Request, Kind::Reply] {
                                for len in 0..=NP_ARGS_AREA + 40 {
                                    for skew in [0, 4, 1] {
                                        let b = &aligned[skew..skew + len];
                                        assert_eq!(
                                            decode(user, b, kind, 4096),
                                            decode_full(user, b, kind, 4096),
                                            "user {user:#x}, {len} bytes at +{skew}, {kind:?}"
                                        );
                                        checked += 1;
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(checked, 2 * 4 * 2 * 32 * 4 * 2 * (NP_ARGS_AREA + 41) * 3);
    }
}
