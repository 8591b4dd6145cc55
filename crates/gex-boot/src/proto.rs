//! The fork launcher's wire protocol: message types, encoding and decoding.
//!
//! This module does no I/O. It turns messages into frames and bytes back into
//! messages; the launcher ([`crate::launch`]) and the rank-side client
//! ([`crate::fork`]) move the bytes. The format is described in the
//! [`launch`](crate::launch#wire-protocol) module documentation.

use std::fmt;

/// Protocol version carried in HELLO; the launcher refuses any other.
pub(crate) const VERSION: u32 = 1;

/// Largest frame body (tag + payload) the launcher accepts from a rank.
pub(crate) const MAX_RANK_FRAME: usize = 64 << 20;

/// Largest frame body a rank accepts from the launcher.
pub(crate) const MAX_LAUNCHER_FRAME: usize = u32::MAX as usize;

/// Bytes in the length prefix of every frame.
pub(crate) const HEADER: usize = 4;

// Frame tags, rank -> launcher.
const T_HELLO: u8 = 0x01;
const T_EXCHANGE: u8 = 0x02;
const T_BARRIER: u8 = 0x03;
const T_BCAST: u8 = 0x04;
const T_FINALIZE: u8 = 0x05;
const T_EXIT: u8 = 0x06;
const T_ABORT: u8 = 0x07;
// Frame tags, launcher -> rank.
const T_WELCOME: u8 = 0x81;
const T_EXCHANGED: u8 = 0x82;
const T_BARRIER_DONE: u8 = 0x83;
const T_BCAST_DONE: u8 = 0x84;

/// The kind of a collective operation (all three share one sequence counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// All-gather of one blob per rank.
    Exchange,
    /// Barrier.
    Barrier,
    /// Broadcast from a root.
    Broadcast,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Exchange => "exchange",
            Kind::Barrier => "barrier",
            Kind::Broadcast => "broadcast",
        })
    }
}

/// A message from a rank to the launcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ToLauncher {
    /// First message of every gex rank.
    Hello { version: u32, rank: u32, size: u32 },
    /// Enter all-gather number `seq` with this rank's blob.
    Exchange { seq: u64, blob: Vec<u8> },
    /// Enter barrier number `seq`.
    Barrier { seq: u64 },
    /// Enter broadcast number `seq` from `root`; `blob` matters on the root only.
    Broadcast { seq: u64, root: u32, blob: Vec<u8> },
    /// This rank finished cleanly and will exit with `code`.
    Finalize { code: i32 },
    /// End the whole job with `code` (gasnet_exit semantics).
    Exit { code: i32 },
    /// End the whole job with `code`, reporting `msg`.
    Abort { code: i32, msg: String },
}

/// A message from the launcher to a rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ToRank {
    /// Reply to HELLO: job size and one host id per rank.
    Welcome { hosts: Vec<u32> },
    /// Result of all-gather `seq`: one blob per rank, indexed by rank.
    Exchanged { seq: u64, blobs: Vec<Vec<u8>> },
    /// Barrier `seq` is complete.
    BarrierDone { seq: u64 },
    /// Result of broadcast `seq`: the root's blob.
    BroadcastDone { seq: u64, blob: Vec<u8> },
}

/// A malformed frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProtoError(pub(crate) String);

impl fmt::Display for ProtoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn err<T>(msg: impl Into<String>) -> Result<T, ProtoError> {
    Err(ProtoError(msg.into()))
}

/// Starts a frame with a placeholder length and the tag.
fn start(tag: u8, capacity: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER + 1 + capacity);
    v.extend_from_slice(&[0; HEADER]);
    v.push(tag);
    v
}

/// A frame of `tag` whose payload is `parts`, one after the other (the length
/// prefix still a placeholder: [`finish`] writes it).
fn frame(tag: u8, parts: &[&[u8]]) -> Vec<u8> {
    let mut v = start(tag, parts.iter().map(|p| p.len()).sum());
    for p in parts {
        v.extend_from_slice(p);
    }
    v
}

/// Writes the length prefix; fails if the body does not fit in a `u32`.
fn finish(mut v: Vec<u8>) -> Result<Vec<u8>, ProtoError> {
    let body = v.len() - HEADER;
    let Ok(len) = u32::try_from(body) else {
        return err(format!(
            "frame of {body} bytes does not fit the 32-bit length prefix"
        ));
    };
    v[..HEADER].copy_from_slice(&len.to_le_bytes());
    Ok(v)
}

fn put_blob(v: &mut Vec<u8>, blob: &[u8]) -> Result<(), ProtoError> {
    let Ok(len) = u32::try_from(blob.len()) else {
        return err(format!("blob of {} bytes is too large", blob.len()));
    };
    v.extend_from_slice(&len.to_le_bytes());
    v.extend_from_slice(blob);
    Ok(())
}

impl ToLauncher {
    /// Encodes the message as one complete frame (length prefix included).
    pub(crate) fn encode(&self) -> Result<Vec<u8>, ProtoError> {
        let v = match self {
            ToLauncher::Hello {
                version,
                rank,
                size,
            } => frame(
                T_HELLO,
                &[
                    &version.to_le_bytes(),
                    &rank.to_le_bytes(),
                    &size.to_le_bytes(),
                ],
            ),
            ToLauncher::Exchange { seq, blob } => frame(T_EXCHANGE, &[&seq.to_le_bytes(), blob]),
            ToLauncher::Barrier { seq } => frame(T_BARRIER, &[&seq.to_le_bytes()]),
            ToLauncher::Broadcast { seq, root, blob } => {
                frame(T_BCAST, &[&seq.to_le_bytes(), &root.to_le_bytes(), blob])
            }
            ToLauncher::Finalize { code } => frame(T_FINALIZE, &[&code.to_le_bytes()]),
            ToLauncher::Exit { code } => frame(T_EXIT, &[&code.to_le_bytes()]),
            ToLauncher::Abort { code, msg } => {
                frame(T_ABORT, &[&code.to_le_bytes(), msg.as_bytes()])
            }
        };
        finish(v)
    }

    /// Decodes one frame body (tag + payload, without the length prefix).
    pub(crate) fn decode(body: &[u8]) -> Result<Self, ProtoError> {
        let mut r = Reader::new(body)?;
        let msg = match r.tag {
            T_HELLO => ToLauncher::Hello {
                version: r.u32()?,
                rank: r.u32()?,
                size: r.u32()?,
            },
            T_EXCHANGE => ToLauncher::Exchange {
                seq: r.u64()?,
                blob: r.rest(),
            },
            T_BARRIER => ToLauncher::Barrier { seq: r.u64()? },
            T_BCAST => ToLauncher::Broadcast {
                seq: r.u64()?,
                root: r.u32()?,
                blob: r.rest(),
            },
            T_FINALIZE => ToLauncher::Finalize { code: r.i32()? },
            T_EXIT => ToLauncher::Exit { code: r.i32()? },
            T_ABORT => ToLauncher::Abort {
                code: r.i32()?,
                msg: String::from_utf8_lossy(&r.rest()).into_owned(),
            },
            t => return err(format!("unknown message tag {t:#04x}")),
        };
        r.end()?;
        Ok(msg)
    }
}

impl ToRank {
    /// Encodes the message as one complete frame (length prefix included).
    pub(crate) fn encode(&self) -> Result<Vec<u8>, ProtoError> {
        let v = match self {
            ToRank::Welcome { hosts } => {
                let mut v = start(T_WELCOME, 4 + 4 * hosts.len());
                let Ok(n) = u32::try_from(hosts.len()) else {
                    return err("too many ranks");
                };
                v.extend_from_slice(&n.to_le_bytes());
                for h in hosts {
                    v.extend_from_slice(&h.to_le_bytes());
                }
                v
            }
            ToRank::Exchanged { seq, blobs } => {
                let total: usize = blobs.iter().map(|b| 4 + b.len()).sum();
                let mut v = start(T_EXCHANGED, 12 + total);
                v.extend_from_slice(&seq.to_le_bytes());
                let Ok(n) = u32::try_from(blobs.len()) else {
                    return err("too many ranks");
                };
                v.extend_from_slice(&n.to_le_bytes());
                for b in blobs {
                    put_blob(&mut v, b)?;
                }
                v
            }
            ToRank::BarrierDone { seq } => frame(T_BARRIER_DONE, &[&seq.to_le_bytes()]),
            ToRank::BroadcastDone { seq, blob } => frame(T_BCAST_DONE, &[&seq.to_le_bytes(), blob]),
        };
        finish(v)
    }

    /// Decodes one frame body (tag + payload, without the length prefix).
    pub(crate) fn decode(body: &[u8]) -> Result<Self, ProtoError> {
        let mut r = Reader::new(body)?;
        let msg = match r.tag {
            T_WELCOME => {
                let n = r.u32()? as usize;
                if r.remaining() != n.saturating_mul(4) {
                    return err(format!(
                        "WELCOME announces {n} ranks but carries {} bytes of host ids",
                        r.remaining()
                    ));
                }
                let hosts = (0..n).map(|_| r.u32()).collect::<Result<_, _>>()?;
                ToRank::Welcome { hosts }
            }
            T_EXCHANGED => {
                let seq = r.u64()?;
                let n = r.u32()? as usize;
                // Every blob needs at least its 4-byte length.
                if n > r.remaining() / 4 {
                    return err(format!(
                        "EXCHANGED announces {n} blobs in too short a frame"
                    ));
                }
                let mut blobs = Vec::with_capacity(n);
                for _ in 0..n {
                    blobs.push(r.blob()?);
                }
                ToRank::Exchanged { seq, blobs }
            }
            T_BARRIER_DONE => ToRank::BarrierDone { seq: r.u64()? },
            T_BCAST_DONE => ToRank::BroadcastDone {
                seq: r.u64()?,
                blob: r.rest(),
            },
            t => return err(format!("unknown message tag {t:#04x}")),
        };
        r.end()?;
        Ok(msg)
    }
}

/// Reads little-endian fields from a frame body.
struct Reader<'a> {
    tag: u8,
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(body: &'a [u8]) -> Result<Self, ProtoError> {
        match body.split_first() {
            Some((&tag, buf)) => Ok(Reader { tag, buf }),
            None => err("empty frame"),
        }
    }
    fn remaining(&self) -> usize {
        self.buf.len()
    }
    fn take<const N: usize>(&mut self) -> Result<[u8; N], ProtoError> {
        let Some((head, tail)) = self.buf.split_first_chunk::<N>() else {
            return err(format!(
                "frame with tag {:#04x} is truncated (needed {N} more bytes, {} left)",
                self.tag,
                self.buf.len()
            ));
        };
        self.buf = tail;
        Ok(*head)
    }
    fn u32(&mut self) -> Result<u32, ProtoError> {
        self.take::<4>().map(u32::from_le_bytes)
    }
    fn i32(&mut self) -> Result<i32, ProtoError> {
        self.take::<4>().map(i32::from_le_bytes)
    }
    fn u64(&mut self) -> Result<u64, ProtoError> {
        self.take::<8>().map(u64::from_le_bytes)
    }
    fn blob(&mut self) -> Result<Vec<u8>, ProtoError> {
        let n = self.u32()? as usize;
        if n > self.buf.len() {
            return err(format!(
                "blob of {n} bytes overruns its frame ({} bytes left)",
                self.buf.len()
            ));
        }
        let (b, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(b.to_vec())
    }
    fn rest(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf).to_vec()
    }
    fn end(&self) -> Result<(), ProtoError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            err(format!(
                "{} unexpected trailing bytes in frame with tag {:#04x}",
                self.buf.len(),
                self.tag
            ))
        }
    }
}

/// Accumulates a byte stream and cuts it into frame bodies.
#[derive(Debug)]
pub(crate) struct FrameBuf {
    buf: Vec<u8>,
    max: usize,
}

impl FrameBuf {
    /// A buffer that rejects frame bodies longer than `max` bytes.
    pub(crate) fn new(max: usize) -> Self {
        FrameBuf {
            buf: Vec::new(),
            max,
        }
    }

    /// Appends received bytes.
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Whether a partial frame is buffered.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Removes and returns the next complete frame body, if one is buffered.
    pub(crate) fn next_frame(&mut self) -> Result<Option<Vec<u8>>, ProtoError> {
        let Some(len) = body_len(&self.buf, self.max)? else {
            return Ok(None);
        };
        if self.buf.len() < HEADER + len {
            return Ok(None);
        }
        let body = self.buf[HEADER..HEADER + len].to_vec();
        self.buf.drain(..HEADER + len);
        Ok(Some(body))
    }
}

/// Reads the body length from a frame header; `None` if the header is incomplete.
pub(crate) fn body_len(buf: &[u8], max: usize) -> Result<Option<usize>, ProtoError> {
    let Some(head) = buf.first_chunk::<HEADER>() else {
        return Ok(None);
    };
    let len = u32::from_le_bytes(*head) as usize;
    if len == 0 {
        return err("zero-length frame");
    }
    if len > max {
        return err(format!(
            "frame of {len} bytes exceeds the limit of {max} bytes"
        ));
    }
    Ok(Some(len))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip_l(m: ToLauncher) {
        let f = m.encode().unwrap();
        let mut fb = FrameBuf::new(MAX_RANK_FRAME);
        // Feed byte by byte: a frame is only returned once complete.
        for (i, b) in f.iter().enumerate() {
            assert!(fb.next_frame().unwrap().is_none(), "early frame at {i}");
            fb.push(&[*b]);
        }
        let body = fb.next_frame().unwrap().unwrap();
        assert!(fb.is_empty());
        assert_eq!(ToLauncher::decode(&body).unwrap(), m);
    }

    fn roundtrip_r(m: ToRank) {
        let f = m.encode().unwrap();
        let len = body_len(&f, MAX_LAUNCHER_FRAME).unwrap().unwrap();
        assert_eq!(len + HEADER, f.len());
        assert_eq!(ToRank::decode(&f[HEADER..]).unwrap(), m);
    }

    #[test]
    fn every_message_roundtrips() {
        roundtrip_l(ToLauncher::Hello {
            version: VERSION,
            rank: 3,
            size: 4,
        });
        roundtrip_l(ToLauncher::Exchange {
            seq: 7,
            blob: b"abc".to_vec(),
        });
        roundtrip_l(ToLauncher::Exchange {
            seq: u64::MAX,
            blob: vec![],
        });
        roundtrip_l(ToLauncher::Barrier { seq: 1 });
        roundtrip_l(ToLauncher::Broadcast {
            seq: 2,
            root: 1,
            blob: vec![9; 1000],
        });
        roundtrip_l(ToLauncher::Finalize { code: -1 });
        roundtrip_l(ToLauncher::Exit { code: 5 });
        roundtrip_l(ToLauncher::Abort {
            code: 3,
            msg: "out of memory: ü".into(),
        });
        roundtrip_r(ToRank::Welcome {
            hosts: vec![0, 0, 1],
        });
        roundtrip_r(ToRank::Exchanged {
            seq: 4,
            blobs: vec![vec![], b"x".to_vec(), vec![7; 300]],
        });
        roundtrip_r(ToRank::BarrierDone { seq: 9 });
        roundtrip_r(ToRank::BroadcastDone {
            seq: 10,
            blob: b"hello".to_vec(),
        });
    }

    #[test]
    fn two_frames_in_one_push() {
        let mut bytes = ToLauncher::Barrier { seq: 1 }.encode().unwrap();
        bytes.extend(ToLauncher::Finalize { code: 0 }.encode().unwrap());
        let mut fb = FrameBuf::new(MAX_RANK_FRAME);
        fb.push(&bytes);
        let a = fb.next_frame().unwrap().unwrap();
        let b = fb.next_frame().unwrap().unwrap();
        assert!(fb.next_frame().unwrap().is_none());
        assert_eq!(
            ToLauncher::decode(&a).unwrap(),
            ToLauncher::Barrier { seq: 1 }
        );
        assert_eq!(
            ToLauncher::decode(&b).unwrap(),
            ToLauncher::Finalize { code: 0 }
        );
    }

    #[test]
    fn malformed_frames_are_rejected() {
        // Oversized and zero-length frames.
        let mut fb = FrameBuf::new(16);
        fb.push(&100u32.to_le_bytes());
        assert!(fb.next_frame().is_err());
        let mut fb = FrameBuf::new(16);
        fb.push(&0u32.to_le_bytes());
        assert!(fb.next_frame().is_err());
        // Unknown tag, truncated field, trailing bytes.
        assert!(ToLauncher::decode(&[0x55]).is_err());
        assert!(ToLauncher::decode(&[T_BARRIER, 1, 2, 3]).is_err());
        assert!(ToLauncher::decode(&[T_FINALIZE, 0, 0, 0, 0, 9]).is_err());
        assert!(ToLauncher::decode(&[]).is_err());
        // A blob that overruns its frame, and a blob count that cannot fit.
        let mut f = vec![T_EXCHANGED];
        f.extend(1u64.to_le_bytes());
        f.extend(1u32.to_le_bytes());
        f.extend(50u32.to_le_bytes());
        f.extend([1, 2]);
        assert!(ToRank::decode(&f).is_err());
        let mut f = vec![T_EXCHANGED];
        f.extend(1u64.to_le_bytes());
        f.extend(u32::MAX.to_le_bytes());
        assert!(ToRank::decode(&f).is_err());
        let mut f = vec![T_WELCOME];
        f.extend(3u32.to_le_bytes());
        f.extend(0u32.to_le_bytes());
        assert!(ToRank::decode(&f).is_err());
    }
}
