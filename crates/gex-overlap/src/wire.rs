//! The delta message format (a [`DeltaBuf`](crate::DeltaBuf) sent as one ordinary
//! message carries only what changed since its last transfer to that destination)
//! and its decoder [`apply_delta`], whose docs give the format.

use crate::error::OverlapError;

/// The magic of a delta message: `GXDL` as a little-endian u32.
pub const DELTA_MAGIC: u32 = u32::from_le_bytes(*b"GXDL");
/// The format version this crate writes and reads.
const VERSION: u8 = 1;
/// Bit 0 of the flags byte: the message carries the whole buffer.
const F_WHOLE: u8 = 1;
/// The length of a delta message's header.
pub const DELTA_HEADER: usize = 24;
/// The length of each run's header (offset and length, u64 each).
pub const DELTA_RUN_HEADER: usize = 16;

/// What a delta message carried, as applied to a receive buffer ([`apply_delta`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeltaStatus {
    /// The sender's buffer length (may be shorter than the receive buffer: the bytes
    /// past it are left as they were).
    pub len: usize,
    /// Bytes of the buffer the message carried (the runs' lengths).
    pub bytes: usize,
    /// Runs applied.
    pub runs: usize,
    /// Whether the message carried the whole buffer (the first transfer to this
    /// destination, or most of the buffer changed).
    pub whole: bool,
    /// The message's length in bytes (header and runs).
    pub wire: usize,
}

/// Encodes the runs `runs` (sorted, disjoint byte ranges `(start, end)`) of `buf` as a
/// delta message.
#[cfg(feature = "msg")]
pub(crate) fn encode(buf: &[u8], runs: &[(usize, usize)], whole: bool) -> Vec<u8> {
    let bytes: usize = runs.iter().map(|&(s, e)| e - s).sum();
    let mut out = Vec::with_capacity(DELTA_HEADER + runs.len() * DELTA_RUN_HEADER + bytes);
    out.extend_from_slice(&DELTA_MAGIC.to_le_bytes());
    out.push(VERSION);
    out.push(if whole { F_WHOLE } else { 0 });
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&(buf.len() as u64).to_le_bytes());
    let n = u32::try_from(runs.len()).expect("fewer runs than bytes in a buffer");
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    for &(s, e) in runs {
        out.extend_from_slice(&(s as u64).to_le_bytes());
        out.extend_from_slice(&((e - s) as u64).to_le_bytes());
        out.extend_from_slice(&buf[s..e]);
    }
    out
}

fn u64_at(msg: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(msg[at..at + 8].try_into().expect("8 bytes"))
}

/// Applies a delta message (a [`DeltaBuf`](crate::DeltaBuf) sent as one gex-msg
/// message: `DeltaMsgExt::delta_send_msg`, feature `msg`) to `buf`, the receiver's
/// copy of the sender's buffer: each run's bytes are written at its offset, the rest
/// of `buf` is left as it was. The whole message is checked before any byte is
/// written, so a malformed one changes nothing. For a program that receives the
/// message itself (a plain `MsgExt::recv`, sized by a probe).
///
/// # Format
/// All integers are little-endian. A message is a header of [`DELTA_HEADER`] bytes:
///
/// | bytes | field |
/// |---|---|
/// | 0..4 | magic `GXDL` ([`DELTA_MAGIC`]) |
/// | 4 | version, 1 |
/// | 5 | flags: bit 0 set when the message carries the whole buffer; other bits 0 |
/// | 6..8 | 0 |
/// | 8..16 | the sender's buffer length (u64) |
/// | 16..20 | the number of runs (u32) |
/// | 20..24 | 0 |
///
/// then that many runs, each a run header of [`DELTA_RUN_HEADER`] bytes (the byte
/// offset in the buffer, u64; the run's length, u64) followed by the run's bytes.
/// Nothing follows the last run. The sender writes runs sorted and disjoint, and one
/// run `(0, len)` for a whole buffer; the decoder accepts any order.
///
/// # Examples
/// ```
/// use gex_overlap::{apply_delta, DELTA_MAGIC};
///
/// // A delta of a 16-byte buffer: one run, 3 bytes at offset 5.
/// let mut msg = Vec::new();
/// msg.extend_from_slice(&DELTA_MAGIC.to_le_bytes());
/// msg.extend_from_slice(&[1, 0, 0, 0]); // version 1, flags 0
/// msg.extend_from_slice(&16u64.to_le_bytes()); // the sender's buffer length
/// msg.extend_from_slice(&1u32.to_le_bytes()); // one run
/// msg.extend_from_slice(&[0; 4]);
/// msg.extend_from_slice(&5u64.to_le_bytes()); // offset
/// msg.extend_from_slice(&3u64.to_le_bytes()); // length
/// msg.extend_from_slice(b"abc");
/// let mut copy = [b'.'; 16];
/// let st = apply_delta(&msg, &mut copy)?;
/// assert_eq!(&copy, b".....abc........");
/// assert_eq!((st.bytes, st.runs, st.wire), (3, 1, msg.len()));
/// // A truncated message is refused, and nothing is written.
/// assert!(apply_delta(&msg[..msg.len() - 1], &mut [0; 16]).is_err());
/// # Ok::<(), gex_overlap::OverlapError>(())
/// ```
///
/// # Errors
/// Nothing is written on error.
/// - [`OverlapError::DeltaLength`]: shorter than the header; a run's header or bytes
///   past the message's end; bytes after the last run.
/// - [`OverlapError::NotDelta`]: a bad magic or an unknown version.
/// - [`OverlapError::OutOfBuffer`]: the sender's buffer is longer than `buf`
///   (`offset` 0, `len` the sender's length), or a run does not lie in the sender's
///   buffer (`buf_len` the sender's length).
pub fn apply_delta(msg: &[u8], buf: &mut [u8]) -> Result<DeltaStatus, OverlapError> {
    let st = check(msg, buf.len())?;
    let mut at = DELTA_HEADER;
    for _ in 0..st.runs {
        let off = u64_at(msg, at) as usize;
        let len = u64_at(msg, at + 8) as usize;
        at += DELTA_RUN_HEADER;
        buf[off..off + len].copy_from_slice(&msg[at..at + len]);
        at += len;
    }
    Ok(st)
}

/// Checks the whole message against a receive buffer of `cap` bytes.
fn check(msg: &[u8], cap: usize) -> Result<DeltaStatus, OverlapError> {
    let got = msg.len();
    if got < DELTA_HEADER {
        // Name what there is: a message too short to be one, even for its magic.
        let mut m = [0u8; 4];
        let k = got.min(4);
        m[..k].copy_from_slice(&msg[..k]);
        let magic = u32::from_le_bytes(m);
        if got < 5 || magic != DELTA_MAGIC || msg[4] != VERSION {
            return Err(OverlapError::NotDelta {
                magic,
                version: msg.get(4).copied().unwrap_or(0),
            });
        }
        return Err(OverlapError::DeltaLength {
            need: DELTA_HEADER,
            got,
        });
    }
    let magic = u32::from_le_bytes(msg[0..4].try_into().expect("4 bytes"));
    if magic != DELTA_MAGIC || msg[4] != VERSION {
        return Err(OverlapError::NotDelta {
            magic,
            version: msg[4],
        });
    }
    let whole = msg[5] & F_WHOLE != 0;
    let len = usize::try_from(u64_at(msg, 8)).unwrap_or(usize::MAX);
    if len > cap {
        return Err(OverlapError::OutOfBuffer {
            offset: 0,
            len,
            buf_len: cap,
        });
    }
    let runs = u32::from_le_bytes(msg[16..20].try_into().expect("4 bytes")) as usize;
    let mut at = DELTA_HEADER;
    let mut bytes = 0usize;
    for _ in 0..runs {
        let need = at + DELTA_RUN_HEADER;
        if need > got {
            return Err(OverlapError::DeltaLength { need, got });
        }
        let off = usize::try_from(u64_at(msg, at)).unwrap_or(usize::MAX);
        let n = usize::try_from(u64_at(msg, at + 8)).unwrap_or(usize::MAX);
        if off.checked_add(n).is_none_or(|e| e > len) {
            return Err(OverlapError::OutOfBuffer {
                offset: off,
                len: n,
                buf_len: len,
            });
        }
        // `n <= len <= cap`, a length of memory: no overflow.
        at = need + n;
        if at > got {
            return Err(OverlapError::DeltaLength { need: at, got });
        }
        bytes += n;
    }
    if at != got {
        return Err(OverlapError::DeltaLength { need: at, got });
    }
    Ok(DeltaStatus {
        len,
        bytes,
        runs,
        whole,
        wire: got,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(len: u64, runs: u32) -> Vec<u8> {
        let mut m = DELTA_MAGIC.to_le_bytes().to_vec();
        m.extend_from_slice(&[VERSION, 0, 0, 0]);
        m.extend_from_slice(&len.to_le_bytes());
        m.extend_from_slice(&runs.to_le_bytes());
        m.extend_from_slice(&[0; 4]);
        m
    }

    #[test]
    fn a_huge_run_is_out_of_buffer_not_an_overflow() {
        let mut m = header(64, 1);
        m.extend_from_slice(&8u64.to_le_bytes());
        m.extend_from_slice(&u64::MAX.to_le_bytes());
        let mut buf = [0u8; 64];
        assert!(matches!(
            apply_delta(&m, &mut buf),
            Err(OverlapError::OutOfBuffer {
                offset: 8,
                buf_len: 64,
                ..
            })
        ));
    }

    #[test]
    fn many_runs_claimed_in_a_short_message_is_a_length_error() {
        let m = header(64, u32::MAX);
        assert!(matches!(
            apply_delta(&m, &mut [0u8; 64]),
            Err(OverlapError::DeltaLength { need: 40, got: 24 })
        ));
    }
}
