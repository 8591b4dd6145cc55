//! Unpadded base64url (RFC 4648 §5): how blobs travel as PMI values, which must be
//! printable and contain neither spaces nor `=`. The alphabet is `A-Z a-z 0-9 - _`.

// The parent module allows `unsafe` for one borrow of an inherited descriptor;
// nothing here needs it.
#![deny(unsafe_code)]

use gex_core::boot::BootError;

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Length of the encoding of `n` bytes.
pub(crate) fn encoded_len(n: usize) -> usize {
    n / 3 * 4 + [0, 2, 3][n % 3]
}

/// Encodes `data` (4 characters per 3 bytes, no padding).
pub(crate) fn encode(data: &[u8]) -> String {
    let mut out = String::with_capacity(encoded_len(data.len()));
    for c in data.chunks(3) {
        let b = [c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0)];
        let v = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..=c.len() {
            out.push(ALPHABET[(v >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

fn sextet(c: u8) -> Option<u32> {
    let v = match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'-' => 62,
        b'_' => 63,
        _ => return None,
    };
    Some(u32::from(v))
}

/// Decodes what [`encode`] produced.
///
/// # Errors
/// [`BootError::Protocol`] for a character outside the alphabet, an impossible
/// length, or non-zero trailing bits.
pub(crate) fn decode(s: &str) -> Result<Vec<u8>, BootError> {
    let bad = || BootError::Protocol(format!("PMI value is not unpadded base64url: {s:?}"));
    let s = s.as_bytes();
    if s.len() % 4 == 1 {
        return Err(bad());
    }
    let mut out = Vec::with_capacity(s.len() / 4 * 3 + 2);
    for c in s.chunks(4) {
        let mut v = 0u32;
        for (i, &ch) in c.iter().enumerate() {
            v |= sextet(ch).ok_or_else(bad)? << (18 - 6 * i);
        }
        let bytes = [(v >> 16) as u8, (v >> 8) as u8, v as u8];
        let n = c.len() - 1;
        // Bits below the last whole byte must be zero (canonical encoding).
        if n < 3 && bytes[n] != 0 {
            return Err(bad());
        }
        out.extend_from_slice(&bytes[..n]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc4648_vectors() {
        // RFC 4648 §10, without padding.
        for (plain, enc) in [
            ("", ""),
            ("f", "Zg"),
            ("fo", "Zm8"),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg"),
            ("fooba", "Zm9vYmE"),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(encode(plain.as_bytes()), enc);
            assert_eq!(decode(enc).unwrap(), plain.as_bytes());
        }
        // The URL-safe characters.
        assert_eq!(encode(&[0xfb, 0xff]), "-_8");
    }

    #[test]
    fn round_trips_every_length_and_byte() {
        let all: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
        for n in 0..all.len() {
            let e = encode(&all[..n]);
            assert_eq!(e.len(), encoded_len(n));
            assert!(
                e.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            );
            assert_eq!(decode(&e).unwrap(), &all[..n], "length {n}");
        }
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["A", "Zm9vY", "Zm9=", "Zm 9", "Zh", "Zm9w+", "é"] {
            assert!(decode(bad).is_err(), "{bad:?}");
        }
    }
}
