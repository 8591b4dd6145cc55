//! The AM header carried by every SEND, its encoding and its checked decoding, and the
//! layout of work request identifiers.

use gex_core::{Category, HandlerIndex, Kind};

/// Fixed part of the header: handler, flags (kind, category), argument count, a spare
/// byte, payload length (u32), Long offset (u64).
pub(crate) const HDR: usize = 16;
/// Largest number of arguments.
pub(crate) const MAX_ARGS: usize = 16;
/// Largest header: the fixed part and every argument.
pub(crate) const HDR_MAX: usize = HDR + 4 * MAX_ARGS;

/// A decoded header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) handler: HandlerIndex,
    pub(crate) kind: Kind,
    pub(crate) category: Category,
    pub(crate) nargs: usize,
    pub(crate) len: usize,
    pub(crate) offset: usize,
}

/// Writes the header and the arguments into `out` (at least [`HDR_MAX`] bytes); returns
/// the bytes written.
pub(crate) fn encode(out: &mut [u8], h: &Header, args: &[u32]) -> usize {
    let kind = match h.kind {
        Kind::Request => 0u8,
        Kind::Reply => 1,
    };
    let cat = match h.category {
        Category::Short => 0u8,
        Category::Medium => 1,
        Category::Long => 2,
    };
    out[0] = h.handler;
    out[1] = kind | (cat << 1);
    out[2] = args.len() as u8;
    out[3] = 0;
    out[4..8].copy_from_slice(&(h.len as u32).to_le_bytes());
    out[8..16].copy_from_slice(&(h.offset as u64).to_le_bytes());
    for (i, a) in args.iter().enumerate() {
        out[HDR + 4 * i..HDR + 4 * i + 4].copy_from_slice(&a.to_le_bytes());
    }
    HDR + 4 * args.len()
}

/// Decodes a received message of `bytes` (exactly what arrived): the header, checked
/// for shape (argument count, category, lengths against what arrived); the arguments go
/// to `args`. Ranges against the segment are the caller's to check.
pub(crate) fn decode(bytes: &[u8], args: &mut [u32; MAX_ARGS]) -> Result<Header, String> {
    if bytes.len() < HDR {
        return Err(format!("{} bytes, shorter than a header", bytes.len()));
    }
    let nargs = bytes[2] as usize;
    if nargs > MAX_ARGS {
        return Err(format!("{nargs} arguments"));
    }
    let kind = if bytes[1] & 1 == 0 {
        Kind::Request
    } else {
        Kind::Reply
    };
    let category = match bytes[1] >> 1 {
        0 => Category::Short,
        1 => Category::Medium,
        2 => Category::Long,
        c => return Err(format!("category {c}")),
    };
    if bytes[0] == 0 {
        return Err("handler 0".into());
    }
    let len = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes")) as usize;
    let offset = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
    let offset = usize::try_from(offset).map_err(|_| format!("offset {offset}"))?;
    let head = HDR + 4 * nargs;
    let want = match category {
        Category::Medium => head + len,
        Category::Short if len != 0 => return Err(format!("a Short with {len} bytes")),
        _ => head,
    };
    if bytes.len() != want {
        return Err(format!(
            "{} bytes arrived, the header says {want}",
            bytes.len()
        ));
    }
    for (i, a) in args.iter_mut().take(nargs).enumerate() {
        *a = u32::from_le_bytes(
            bytes[HDR + 4 * i..HDR + 4 * i + 4]
                .try_into()
                .expect("4 bytes"),
        );
    }
    Ok(Header {
        handler: bytes[0],
        kind,
        category,
        nargs,
        len,
        offset,
    })
}

/// The connection datagrams of the lazy wire-up (`crate::connect`), sent over the UD queue
/// pairs: magic, kind, source and destination endpoints (global indices), and the
/// sender's RC queue pair address for the pair (zero in a READY).
pub(crate) mod conn {
    use crate::verbs::QpAddr;

    /// "I made queue pair `addr` for you; make yours and connect it."
    pub(crate) const CONNECT: u8 = 1;
    /// "Mine (`addr`) is connected to yours; connect yours."
    pub(crate) const ACCEPT: u8 = 2;
    /// "Mine is connected too: send."
    pub(crate) const READY: u8 = 3;
    const MAGIC: u32 = 0x6765_7863; // "gexc"
    /// Encoded length.
    pub(crate) const LEN: usize = 4 + 1 + 4 + 4 + QpAddr::LEN;

    /// One datagram.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(crate) struct Msg {
        pub(crate) kind: u8,
        pub(crate) src: u32,
        pub(crate) dst: u32,
        pub(crate) addr: QpAddr,
    }

    impl Msg {
        pub(crate) fn encode(&self) -> [u8; LEN] {
            let mut out = [0u8; LEN];
            out[0..4].copy_from_slice(&MAGIC.to_le_bytes());
            out[4] = self.kind;
            out[5..9].copy_from_slice(&self.src.to_le_bytes());
            out[9..13].copy_from_slice(&self.dst.to_le_bytes());
            let mut a = Vec::with_capacity(QpAddr::LEN);
            self.addr.encode(&mut a);
            out[13..].copy_from_slice(&a);
            out
        }
        /// Decodes exactly [`LEN`] bytes; `None` for anything else.
        pub(crate) fn decode(b: &[u8]) -> Option<Msg> {
            if b.len() != LEN || u32::from_le_bytes(b[0..4].try_into().ok()?) != MAGIC {
                return None;
            }
            let kind = b[4];
            if !(CONNECT..=READY).contains(&kind) {
                return None;
            }
            Some(Msg {
                kind,
                src: u32::from_le_bytes(b[5..9].try_into().ok()?),
                dst: u32::from_le_bytes(b[9..13].try_into().ok()?),
                addr: QpAddr::decode(&b[13..])?,
            })
        }
    }
}

/// Work request identifiers: kind (8 bits), peer (24 bits), index (32 bits).
pub(crate) mod wrid {
    /// A SEND (index: its send slot, or [`NO_SLOT`] for an inline one).
    pub(crate) const SEND: u64 = 1;
    /// The RDMA WRITE of a Long payload (index: its slot).
    pub(crate) const LONG: u64 = 2;
    /// A credit word written to a peer.
    pub(crate) const CREDIT: u64 = 3;
    /// A receive buffer (index: the buffer).
    pub(crate) const RECV: u64 = 4;
    /// A native RMA or atomic operation (index: its operation slot).
    pub(crate) const RMA: u64 = 5;
    /// A connection datagram sent on the UD queue pair (peer: its destination).
    pub(crate) const UD_SEND: u64 = 6;
    /// A receive of the UD queue pair (index: the buffer).
    pub(crate) const UD_RECV: u64 = 7;
    /// No send slot.
    pub(crate) const NO_SLOT: u32 = u32::MAX;

    pub(crate) fn make(kind: u64, peer: u32, index: u32) -> u64 {
        (kind << 56) | ((peer as u64 & 0xff_ffff) << 32) | index as u64
    }
    pub(crate) fn kind(id: u64) -> u64 {
        id >> 56
    }
    pub(crate) fn peer(id: u64) -> u32 {
        ((id >> 32) & 0xff_ffff) as u32
    }
    pub(crate) fn index(id: u64) -> u32 {
        id as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_bad_ones_are_refused() {
        let mut buf = [0u8; HDR_MAX + 8];
        let h = Header {
            handler: 200,
            kind: Kind::Reply,
            category: Category::Medium,
            nargs: 3,
            len: 8,
            offset: 0,
        };
        let n = encode(&mut buf, &h, &[1, 2, 3]);
        let mut args = [0; MAX_ARGS];
        assert_eq!(decode(&buf[..n + 8], &mut args), Ok(h));
        assert_eq!(&args[..3], &[1, 2, 3]);
        assert!(decode(&buf[..n + 7], &mut args).is_err());
        assert!(decode(&buf[..10], &mut args).is_err());
        buf[2] = 17;
        assert!(decode(&buf[..n + 8], &mut args).is_err());
        buf[2] = 3;
        buf[1] = 6;
        assert!(decode(&buf[..n + 8], &mut args).is_err());
        let m = conn::Msg {
            kind: conn::ACCEPT,
            src: 3,
            dst: 0x00ff_fffe,
            addr: crate::verbs::QpAddr {
                lid: 7,
                gid: [9; 16],
                qpn: 0x12_3456,
                psn: 5,
            },
        };
        assert_eq!(conn::Msg::decode(&m.encode()), Some(m));
        let mut bad = m.encode();
        bad[4] = 9;
        assert_eq!(conn::Msg::decode(&bad), None);
        assert_eq!(conn::Msg::decode(&m.encode()[1..]), None);
        let id = wrid::make(wrid::RMA, 0x12_3456, 77);
        assert_eq!(
            (wrid::kind(id), wrid::peer(id), wrid::index(id)),
            (wrid::RMA, 0x12_3456, 77)
        );
    }
}
