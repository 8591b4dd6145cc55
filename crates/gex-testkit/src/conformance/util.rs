//! Helpers shared by the cases: error collection from handlers, bounded waits,
//! deterministic argument and payload patterns.

use crate::rng::{SplitMix64, hash_words};
use gex_core::spi::Conduit;
use gex_core::{AmError, Endpoint, Injected};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Longest any single wait of a case may last before the case fails.
pub const CASE_WAIT: Duration = Duration::from_secs(45);

/// Errors recorded by handlers (which cannot return them), reported at the end.
#[derive(Clone, Debug, Default)]
pub(crate) struct Errs(Arc<Mutex<Vec<String>>>);

impl Errs {
    pub(crate) fn new() -> Self {
        Self::default()
    }
    pub(crate) fn push(&self, e: impl Into<String>) {
        let mut v = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if v.len() < 1000 {
            v.push(e.into());
        }
    }
    /// Records `what` unless `ok`.
    pub(crate) fn check(&self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.push(what());
        }
    }
    pub(crate) fn result(&self) -> Result<(), String> {
        let v = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if v.is_empty() {
            Ok(())
        } else {
            let shown: Vec<&str> = v.iter().take(8).map(String::as_str).collect();
            Err(format!("{} error(s): {}", v.len(), shown.join("; ")))
        }
    }
}

/// Polls `ep` until `cond` holds, at most [`CASE_WAIT`].
pub(crate) fn wait_for<C: Conduit>(
    ep: &mut Endpoint<C>,
    what: &str,
    mut cond: impl FnMut() -> bool,
) -> Result<(), String> {
    let deadline = Instant::now() + CASE_WAIT;
    let mut timed_out = false;
    ep.wait_until(|| {
        if cond() {
            return true;
        }
        timed_out = Instant::now() > deadline;
        timed_out
    });
    if timed_out && !cond() {
        Err(format!(
            "timed out after {CASE_WAIT:?} waiting for {what}; counters: {:?}",
            ep.stats()
        ))
    } else {
        Ok(())
    }
}

/// What an injection returned: `()` from the waiting forms, [`Injected`] from `try_*`.
pub(crate) trait Outcome {
    /// True if the message was sent.
    fn was_sent(&self) -> bool;
}
impl Outcome for () {
    fn was_sent(&self) -> bool {
        true
    }
}
impl Outcome for Injected {
    fn was_sent(&self) -> bool {
        self.is_sent()
    }
}

/// An injection that must have sent its message.
pub(crate) fn sent<T: Outcome>(r: Result<T, AmError>, what: &str) -> Result<(), String> {
    match r {
        Ok(o) if o.was_sent() => Ok(()),
        Ok(_) => Err(format!("{what}: WouldBlock")),
        Err(e) => Err(format!("{what}: {e}")),
    }
}

/// A barrier over the core's all-gather on `ep`'s primordial team (the core has no
/// barrier of its own: the barrier is the collectives layer's; an exchange completes
/// on a member only once every member has entered it).
pub(crate) fn barrier<C: Conduit>(ep: &mut Endpoint<C>) -> Result<(), String> {
    let w = ep.world();
    ep.exchange_tagged(&w, crate::BARRIER_TAG, &[])
        .map(drop)
        .map_err(|e| format!("barrier (exchange): {e}"))
}

/// Expects `r` to be exactly the error `want`.
pub(crate) fn expect_err<T: std::fmt::Debug>(
    r: Result<T, AmError>,
    want: &AmError,
    what: &str,
) -> Result<(), String> {
    match r {
        Err(e) if &e == want => Ok(()),
        other => Err(format!("{what}: expected Err({want:?}), got {other:?}")),
    }
}

/// `n` argument words derived from `seed`.
pub(crate) fn args_for(seed: u64, n: usize) -> Vec<u32> {
    (0..n)
        .map(|i| hash_words(&[seed, i as u64]) as u32)
        .collect()
}

/// A long pseudo-random byte string; payloads are windows into it, so filling and
/// verifying a payload is one `memcpy`/`memcmp`.
#[derive(Debug)]
pub(crate) struct Pattern {
    /// The process's longest pattern so far (a shorter one is its prefix).
    bytes: Arc<[u8]>,
    /// Bytes of it this pattern may use: `max_len + WINDOWS`.
    len: usize,
}

/// The longest pattern made so far in this process, shared by every case and rank:
/// generating one byte at a time is what a case spent most of its time on under Miri.
static PATTERN: Mutex<Option<Arc<[u8]>>> = Mutex::new(None);

/// Number of distinct window starts.
const WINDOWS: usize = 4093;

impl Pattern {
    /// A pattern for payloads of up to `max_len` bytes.
    pub(crate) fn new(max_len: usize) -> Self {
        let len = max_len + WINDOWS;
        let mut longest = lock(&PATTERN);
        let bytes = match &*longest {
            Some(b) if b.len() >= len => b.clone(),
            _ => {
                let mut bytes = Vec::with_capacity(len + 8);
                let mut r = SplitMix64::new(0x5eed);
                while bytes.len() < len {
                    bytes.extend_from_slice(&r.next_u64().to_le_bytes());
                }
                bytes.truncate(len);
                let b: Arc<[u8]> = bytes.into();
                *longest = Some(b.clone());
                b
            }
        };
        Pattern { bytes, len }
    }
    /// The `len`-byte payload of `seed`.
    ///
    /// # Panics
    /// If `len` exceeds the pattern's maximum.
    pub(crate) fn get(&self, seed: u64, len: usize) -> &[u8] {
        let start = (seed % WINDOWS as u64) as usize;
        assert!(
            start + len <= self.len,
            "a {len}-byte payload from a shorter pattern"
        );
        &self.bytes[start..start + len]
    }
    /// Describes how `got` differs from the payload of `seed` (None if equal).
    pub(crate) fn diff(&self, seed: u64, expected_len: usize, got: &[u8]) -> Option<String> {
        if got.len() != expected_len {
            return Some(format!(
                "payload length {} != expected {expected_len}",
                got.len()
            ));
        }
        let want = self.get(seed, expected_len);
        if got == want {
            return None;
        }
        let i = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
        Some(format!(
            "payload differs first at byte {i} of {expected_len} (got {:#04x}, want {:#04x})",
            got[i], want[i]
        ))
    }
}

/// A set of sequence numbers per source, for loss/duplicate detection.
#[derive(Debug, Default)]
pub(crate) struct SeqSet {
    seen: Vec<u64>,
    count: u64,
}

impl SeqSet {
    /// Marks `seq`; false if it was already marked (a duplicate).
    pub(crate) fn insert(&mut self, seq: u32) -> bool {
        let (w, b) = ((seq / 64) as usize, seq % 64);
        if self.seen.len() <= w {
            self.seen.resize(w + 1, 0);
        }
        let fresh = self.seen[w] & (1 << b) == 0;
        self.seen[w] |= 1 << b;
        self.count += u64::from(fresh);
        fresh
    }
    /// Number of distinct sequence numbers seen.
    pub(crate) fn count(&self) -> u64 {
        self.count
    }
    /// True if exactly `0..n` were seen.
    pub(crate) fn is_exactly(&self, n: u32) -> bool {
        self.count == u64::from(n)
            && (0..n).all(|s| {
                self.seen
                    .get((s / 64) as usize)
                    .is_some_and(|w| w & (1 << (s % 64)) != 0)
            })
    }
}

/// The payload of `am` whatever its category: a Medium's bytes, a Long's bytes read
/// from the segment (with the race-free copy of [`gex_core::LongPayload::to_vec`]), or
/// nothing for a Short.
pub(crate) fn bytes_of(am: &gex_core::Am<'_>) -> std::borrow::Cow<'static, [u8]> {
    match am.long() {
        Some(l) => std::borrow::Cow::Owned(l.to_vec()),
        None => std::borrow::Cow::Owned(am.payload().to_vec()),
    }
}

/// Locks a mutex, ignoring poisoning (a panicking handler already failed the case).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_and_seqsets() {
        let p = Pattern::new(100);
        assert_eq!(p.get(5, 100).len(), 100);
        assert!(p.diff(5, 10, p.get(5, 10)).is_none());
        assert!(p.diff(6, 10, p.get(5, 10)).is_some());
        assert!(p.diff(5, 11, p.get(5, 10)).is_some());
        let mut s = SeqSet::default();
        assert!(s.insert(0) && s.insert(70) && !s.insert(70));
        assert!(!s.is_exactly(2));
        assert!(s.insert(1));
        assert!(!s.is_exactly(3));
        let mut t = SeqSet::default();
        (0..3).for_each(|i| assert!(t.insert(i)));
        assert!(t.is_exactly(3));
        assert_eq!(t.count(), 3);
    }
}
