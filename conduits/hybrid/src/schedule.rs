//! When a hybrid endpoint reads the far conduit. A network's progress pass can cost a
//! system call (tcp: a `poll(2)` over every socket), which shared-memory traffic between
//! ranks of one host must not pay on every poll. So while the far endpoint has nothing
//! in flight, its completion queue is read at growing intervals: after a read that
//! finds nothing the interval doubles, up to [`FAR_POLL_MAX`] polls, and a read that
//! finds a completion resets it to 1; a request sent to another host, or a nap on the
//! near endpoint, makes the next poll read it. While operations are in flight it is
//! read on every poll. Pure logic, unit-tested below.

use std::time::Duration;

/// Longest interval, in polls, between reads of the far endpoint while nothing of it
/// is in flight.
pub const FAR_POLL_MAX: u32 = 256;

/// Longest nap of a hybrid endpoint's `block` on the near endpoint (the far conduit is
/// not watched meanwhile: a message from another host waits at most this long, plus
/// one poll interval, to be seen).
pub const NAP: Duration = Duration::from_micros(50);

/// The far-read schedule of one endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FarSchedule {
    /// Polls left before the next read.
    countdown: u32,
    /// Current interval between reads.
    interval: u32,
}

impl Default for FarSchedule {
    fn default() -> Self {
        FarSchedule {
            countdown: 0,
            interval: 1,
        }
    }
}

impl FarSchedule {
    /// Whether this poll skips the far endpoint: yes while the countdown runs and
    /// nothing is in flight (`in_flight` is asked only while the countdown runs).
    #[inline(always)]
    pub(crate) fn skip(&mut self, in_flight: impl FnOnce() -> bool) -> bool {
        if self.countdown > 0 && !in_flight() {
            self.countdown -= 1;
            true
        } else {
            false
        }
    }

    /// After a read: `active` if it found a completion (keep reading every poll),
    /// else the interval doubles.
    #[inline(always)]
    pub(crate) fn after_read(&mut self, active: bool) {
        self.interval = if active {
            1
        } else {
            (self.interval * 2).min(FAR_POLL_MAX)
        };
        self.countdown = self.interval;
    }

    /// A request went to another host: a reply (or completion) is coming, so read on
    /// the next polls.
    #[inline(always)]
    pub(crate) fn expect(&mut self) {
        self.countdown = 0;
        self.interval = 1;
    }

    /// After a nap on the near endpoint: read at the next poll (a far message may
    /// have arrived meanwhile).
    #[inline(always)]
    pub(crate) fn woke(&mut self) {
        self.countdown = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Polls `n` times with nothing in flight and every read fruitless; returns the
    /// poll numbers (from 0) that read the far endpoint.
    fn reads(s: &mut FarSchedule, n: u32) -> Vec<u32> {
        (0..n)
            .filter(|_| {
                let read = !s.skip(|| false);
                if read {
                    s.after_read(false);
                }
                read
            })
            .collect()
    }

    #[test]
    fn idle_reads_back_off_to_the_maximum() {
        let mut s = FarSchedule::default();
        let r = reads(&mut s, 2000);
        // Intervals 2, 4, ..., 256, then every 257th poll.
        assert_eq!(&r[..9], &[0, 3, 8, 17, 34, 67, 132, 261, 518]);
        assert!(
            r.windows(2)
                .skip(8)
                .all(|w| w[1] - w[0] == FAR_POLL_MAX + 1)
        );
    }

    #[test]
    fn activity_and_requests_reset_the_interval() {
        let mut s = FarSchedule::default();
        reads(&mut s, 1000);
        assert!(s.skip(|| false));
        // A read that finds something: every poll reads again.
        s.expect();
        assert!(!s.skip(|| false));
        s.after_read(true);
        assert_eq!(s.countdown, 1);
        assert!(s.skip(|| false));
        assert!(!s.skip(|| false));
        s.after_read(false);
        assert_eq!(s.countdown, 2);
    }

    #[test]
    fn work_in_flight_reads_every_poll() {
        let mut s = FarSchedule::default();
        reads(&mut s, 1000);
        for _ in 0..10 {
            assert!(!s.skip(|| true), "in flight: read every poll");
            s.after_read(false);
        }
        let mut asked = false;
        s.woke();
        assert!(!s.skip(|| {
            asked = true;
            false
        }));
        assert!(!asked, "no countdown: in_flight is not asked");
    }
}
