//! In-band liveness: a rank notices that a neighbour (another rank of its host) has
//! ended, without the launcher's help, and ends itself with a message naming it.
//!
//! At initialisation every rank opens a pidfd of each neighbour (the pids travel in
//! the region blobs; the pidfd is opened *before* the neighbour's region is mapped
//! through `/proc/<pid>/fd/<fd>`, so a successful mapping proves the pidfd names the
//! right process). A pidfd becomes readable once its process has ended, whether it
//! exited, panicked or was killed (`SIGKILL` included), and stays readable while the
//! process is a zombie; one `poll(2)` over all of them with a zero timeout says whether
//! any neighbour has ended.
//!
//! **When an endpoint checks.** Never on the message path: [`Watch::tick`] adds to a
//! counter once per `poll` -- [`EMPTY_WEIGHT`] for a poll that found nothing, 1 for one
//! that delivered messages -- and when it reaches [`POLLS_PER_CHECK`] (after 4 empty
//! polls, or 4096 busy ones) the cold [`Watch::due`] reads the coarse monotonic clock
//! (`CLOCK_MONOTONIC_COARSE`: a few nanoseconds through the vDSO, no system call, 4 ms
//! resolution); `block` (a wait about to sleep) asks `due` every time. Counting polls
//! with a high threshold is not enough: a wait that yields its core between polls (the
//! collectives' shared-memory barrier polls the endpoint once every 16 yields under
//! spin-then-block) may poll only tens of times a second on a loaded machine. `due` lets a check through at
//! most every [`CHECK_INTERVAL`], so a waiting rank pays one `poll(2)` per interval. A
//! rank that waits inside gex (a barrier, a collective, a reply, back-pressure, its own
//! `poll` loop) therefore notices a dead neighbour within about [`CHECK_INTERVAL`]
//! (plus one `block` timeout); a rank that computes without calling gex notices
//! nothing until it calls gex again.
//!
//! **What it does not see.** A neighbour that is alive but stuck (a deadlock, an
//! endless loop without polling) cannot be told from a slow one: the stall report
//! (`GEX_STALL_REPORT`) is for that. Ranks on other hosts are the network conduit's
//! business (in a hybrid job, this conduit watches only the ranks of its host).
//!
//! **What happens.** The endpoint panics with `gex smp: rank R: neighbour rank P (pid
//! N) has ended (exited or killed) while this rank is still in the job; ending this
//! rank` (every neighbour that has ended is named: when one death ends other ranks in
//! turn, the first one is among them): `poll` cannot return an error, and every wait of this rank would wait
//! for the dead rank forever. This is the path of every fatal conduit error (a corrupt
//! ring record ends a rank the same way). Before it panics, the rank waits until the
//! ended neighbours have been reaped by their parent (at most [`REAP_GRACE`]), so that
//! the launcher records the neighbour's own exit status first and names it as the rank
//! that failed; a launcher that ends the job when a rank fails usually ends this rank
//! during that wait. If the thread is already
//! unwinding (a drop that waits for operations during a panic), the message is printed
//! and the process exits with 101, the code of a panic, instead of a double panic.
//! Checks stop once [`Conduit::finalize`](gex_core::spi::Conduit::finalize) has begun:
//! peers that finalized may then exit at any time.
//!
//! Without pidfds (Linux before 5.3) a rank simply does not watch its neighbours:
//! liveness is a diagnosis, not part of the protocol. Each rank holds one descriptor
//! per neighbour.

use gex_sync::atomic::{AtomicBool, Ordering};
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::process::{Pid, PidfdFlags};
use rustix::time::{ClockId, clock_gettime};
use std::os::fd::OwnedFd;
use std::time::Duration;

/// Polls that delivered messages between two looks at the clock.
pub(crate) const POLLS_PER_CHECK: u32 = 1 << 12;
/// What an empty poll counts for (so an idle wait looks at the clock every
/// `POLLS_PER_CHECK / EMPTY_WEIGHT` = 4 polls).
pub(crate) const EMPTY_WEIGHT: u32 = 1 << 10;
/// Shortest time between two checks of one endpoint.
pub(crate) const CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// Longest wait, when a neighbour has ended, for the launcher to reap it before this
/// rank ends itself (see [`Peers::fail`]).
pub(crate) const REAP_GRACE: Duration = Duration::from_millis(500);

/// A neighbour being watched.
#[derive(Debug)]
struct Peer {
    rank: u32,
    pid: u32,
    pidfd: OwnedFd,
}

/// The pidfds of this rank's neighbours, shared by its endpoints.
#[derive(Debug)]
pub(crate) struct Peers {
    me: u32,
    peers: Vec<Peer>,
    /// Set once finalisation has begun: no more checks.
    closing: AtomicBool,
}

impl Peers {
    /// Nobody watched yet (rank `me`).
    pub(crate) fn new(me: u32) -> Peers {
        Peers {
            me,
            peers: Vec::new(),
            closing: AtomicBool::new(false),
        }
    }

    /// Starts watching rank `rank`, process `pid`. Call it before mapping the rank's
    /// region (see the module docs). Without a pidfd the rank is not watched.
    pub(crate) fn watch(&mut self, rank: u32, pid: u32) {
        let Some(p) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
            return;
        };
        match rustix::process::pidfd_open(p, PidfdFlags::empty()) {
            Ok(pidfd) => self.peers.push(Peer { rank, pid, pidfd }),
            Err(e) => {
                tracing::debug!(rank, pid, error = %e, "smp: no pidfd: neighbour not watched")
            }
        }
    }

    /// How many neighbours are watched.
    pub(crate) fn watched(&self) -> usize {
        self.peers.len()
    }

    /// Finalisation has begun: stop checking.
    pub(crate) fn close(&self) {
        self.closing.store(true, Ordering::Relaxed);
    }

    /// The watched neighbours (rank, pid) whose processes have ended, in rank order
    /// (empty if none). One `poll(2)`.
    pub(crate) fn ended(&self) -> Vec<(u32, u32)> {
        if self.peers.is_empty() || self.closing.load(Ordering::Relaxed) {
            return Vec::new();
        }
        let mut fds: Vec<PollFd<'_>> = self
            .peers
            .iter()
            .map(|p| PollFd::new(&p.pidfd, PollFlags::IN))
            .collect();
        let zero = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        match rustix::event::poll(&mut fds, Some(&zero)) {
            Ok(n) if n > 0 => {}
            // Nothing ended, or interrupted (the next check looks again).
            _ => return Vec::new(),
        }
        fds.iter()
            .zip(&self.peers)
            .filter(|(fd, _)| !fd.revents().is_empty())
            .map(|(_, p)| (p.rank, p.pid))
            .collect()
    }

    /// What the stall report says about the neighbours: those that have ended.
    pub(crate) fn describe(&self) -> Option<String> {
        let ended = self.ended();
        (!ended.is_empty()).then(|| format!("{} (exited or killed)", Self::names(&ended)))
    }

    /// `neighbour rank 2 (pid 42) has ended`, `neighbours rank 1 (pid 41) and rank 2
    /// (pid 42) have ended`.
    fn names(ended: &[(u32, u32)]) -> String {
        let list: Vec<String> = ended
            .iter()
            .map(|(r, p)| format!("rank {r} (pid {p})"))
            .collect();
        match list.as_slice() {
            [one] => format!("neighbour {one} has ended"),
            [rest @ .., last] => format!("neighbours {} and {last} have ended", rest.join(", ")),
            [] => String::new(),
        }
    }

    /// Waits (at most `grace`) until every process of `ended` has been reaped by its
    /// parent -- the launcher, which records the exit status when it reaps. Ending this
    /// rank at once would race the launcher: it could see this rank's panic (101)
    /// before the neighbour's own status and name this rank as the one that failed.
    /// `/proc/<pid>` exists while the process is a zombie and goes when it is reaped.
    fn let_the_launcher_see(ended: &[(u32, u32)], grace: Duration) {
        let t = std::time::Instant::now();
        while t.elapsed() < grace
            && ended
                .iter()
                .any(|(_, pid)| std::path::Path::new(&format!("/proc/{pid}")).exists())
        {
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Ends this rank because the neighbours `ended` (rank, pid) have ended (all that
    /// have: when one rank's death ends others, the first one is among them).
    #[cold]
    pub(crate) fn fail(&self, ended: &[(u32, u32)]) -> ! {
        Self::let_the_launcher_see(ended, REAP_GRACE);
        let msg = format!(
            "gex smp: rank {}: {} (exited or killed) while this rank is still in the job; \
             ending this rank",
            self.me,
            Self::names(ended)
        );
        if std::thread::panicking() {
            // A second panic would abort with a less helpful message.
            eprintln!("{msg}");
            std::process::exit(101);
        }
        panic!("{msg}");
    }
}

/// One endpoint's schedule of checks: a weighted poll count and the time of the next
/// check (nanoseconds of the coarse monotonic clock).
#[derive(Debug)]
pub(crate) struct Watch {
    score: u32,
    next: u64,
}

/// The coarse monotonic clock, in nanoseconds.
fn coarse_ns() -> u64 {
    let t = clock_gettime(ClockId::MonotonicCoarse);
    (t.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec as u64)
}

impl Watch {
    pub(crate) fn new() -> Watch {
        Watch { score: 0, next: 0 }
    }

    /// Counts one poll that delivered `delivered` messages; true once the count reaches
    /// [`POLLS_PER_CHECK`] (an empty poll counts [`EMPTY_WEIGHT`]): then ask
    /// [`due`](Self::due).
    #[inline(always)]
    pub(crate) fn tick(&mut self, delivered: usize) -> bool {
        self.score += if delivered == 0 { EMPTY_WEIGHT } else { 1 };
        if self.score >= POLLS_PER_CHECK {
            self.score = 0;
            return true;
        }
        false
    }

    /// Whether a check is due (at most one per [`CHECK_INTERVAL`]); if so, the next one
    /// is scheduled.
    #[cold]
    pub(crate) fn due(&mut self) -> bool {
        let now = coarse_ns();
        if now < self.next {
            return false;
        }
        self.next = now.saturating_add(CHECK_INTERVAL.as_nanos() as u64);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_child_that_ends_is_seen() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let mut peers = Peers::new(0);
        peers.watch(3, child.id());
        assert_eq!(peers.watched(), 1);
        assert_eq!(peers.ended(), []);
        assert_eq!(peers.describe(), None);
        child.kill().unwrap();
        // Readable from the moment it is a zombie: not reaped yet.
        let t = Instant::now();
        while peers.ended().is_empty() && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(peers.ended(), [(3, child.id())]);
        assert!(peers.describe().unwrap().contains("neighbour rank 3 (pid"));
        peers.close();
        assert_eq!(peers.ended(), [], "no checks once closing");
        // A zombie not yet reaped: the wait for the launcher lasts the whole grace...
        let zombie = [(3, child.id())];
        let t = Instant::now();
        Peers::let_the_launcher_see(&zombie, Duration::from_millis(60));
        assert!(t.elapsed() >= Duration::from_millis(60));
        child.wait().unwrap();
        // ... and ends as soon as the parent has reaped it.
        let t = Instant::now();
        Peers::let_the_launcher_see(&zombie, Duration::from_secs(10));
        assert!(t.elapsed() < Duration::from_secs(5));
        let e = std::panic::catch_unwind(|| peers.fail(&[(3, 42)])).unwrap_err();
        let text = e.downcast_ref::<String>().unwrap();
        assert!(
            text.contains("rank 0: neighbour rank 3 (pid 42) has ended (exited or killed)"),
            "{text}"
        );
        let e = std::panic::catch_unwind(|| peers.fail(&[(1, 41), (3, 42)])).unwrap_err();
        let text = e.downcast_ref::<String>().unwrap();
        assert!(
            text.contains("rank 0: neighbours rank 1 (pid 41) and rank 3 (pid 42) have ended"),
            "{text}"
        );
    }

    #[test]
    fn the_clock_is_read_every_4_idle_polls_and_checks_are_spaced() {
        let mut w = Watch::new();
        let busy = (0..POLLS_PER_CHECK * 3).filter(|_| w.tick(1)).count();
        assert_eq!(busy, 3, "polls that deliver: every POLLS_PER_CHECK");
        let idle = (0..4 * 5).filter(|_| w.tick(0)).count();
        assert_eq!(idle, 5, "empty polls: every 4");
        assert!(w.due(), "the first check is due at once");
        assert!(!w.due(), "the next one only after the interval");
        // The coarse clock ticks every few milliseconds: allow for one tick.
        std::thread::sleep(CHECK_INTERVAL + Duration::from_millis(20));
        assert!(w.due());
    }

    #[test]
    fn no_such_process_is_not_watched() {
        let mut peers = Peers::new(0);
        peers.watch(1, 0); // not a pid
        peers.watch(2, u32::MAX);
        assert_eq!(peers.watched(), 0);
        assert_eq!(peers.ended(), []);
    }
}
