//! The optional progress thread of an endpoint: while the rank computes without
//! calling gex, it polls the endpoint so that peers' AM-path operations (gets, atomics,
//! collectives over AMs) are served.
//!
//! It takes the endpoint's lock word only when free (the rank's own calls always win:
//! a rank inside gex progresses by itself), polls, and releases it. When a poll finds
//! nothing and no layer has work in progress:
//! - on a conduit with a doorbell ([`ConduitEp::sleeper`](crate::spi::ConduitEp::sleeper),
//!   e.g. the shared-memory conduit) it sleeps in the kernel until a sender rings it, so an idle thread costs
//!   nothing and a request wakes it within a futex wake-up (it re-checks for messages
//!   after announcing its sleep, under the lock word, so no ring is missed; it wakes at
//!   least every [`SLEEP_MAX`] anyway);
//! - otherwise it naps: a short nap after traffic, doubling while nothing arrives up to
//!   the configured interval (`GEX_PROGRESS_INTERVAL`), so a peer's request waits at
//!   most about one interval.
//!
//! A handler that panics on the thread ends the process with exit code 101, the code
//! of a panic on the rank's own thread (the launcher then ends the job).
//!
//! While the rank itself holds the lock word (it is inside gex), the thread naps one
//! interval at a time. Naps are parks that dropping the endpoint interrupts, so a long
//! interval never holds up the drop. The thread's timer slack is set to 1 µs so that
//! naps of a few microseconds are honoured.

use super::EpCell;
use crate::spi::{Conduit, ConduitEp, Sleeper};
use gex_sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Shortest nap between polls.
const MIN_NAP: Duration = Duration::from_micros(2);

/// Longest sleep on the doorbell before the thread polls again regardless (a safety
/// net: the protocol does not need it).
pub(crate) const SLEEP_MAX: Duration = Duration::from_millis(10);

/// A running progress thread (joined when the endpoint is dropped).
#[derive(Debug)]
pub(crate) struct ProgressThread {
    handle: std::thread::JoinHandle<()>,
    sleeper: Option<Arc<Sleeper>>,
}

impl ProgressThread {
    /// Starts a thread that polls `cell`, sleeping on `sleeper` when idle, or napping at
    /// most `max_nap` without one.
    pub(crate) fn start<C: Conduit>(
        cell: Arc<EpCell<C>>,
        max_nap: Duration,
        sleeper: Option<Sleeper>,
    ) -> Self {
        let sleeper = sleeper.map(Arc::new);
        let s = sleeper.clone();
        let handle = std::thread::Builder::new()
            .name("gex-progress".into())
            .spawn(move || {
                let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run(&cell, max_nap, s.as_deref())
                }));
                if ran.is_err() {
                    // A handler panicked on this thread (the panic hook printed it).
                    // On the rank's own thread the panic would end the rank; it must
                    // here too, rather than leave the rank running without progress
                    // and its endpoint's state half-updated.
                    eprintln!(
                        "gex: a handler panicked on the progress thread of {}; ending the rank",
                        cell.me
                    );
                    std::process::exit(101);
                }
            })
            .expect("gex: cannot start the progress thread");
        ProgressThread { handle, sleeper }
    }

    /// Wakes the thread and waits for it to end (the caller has set `stop`).
    pub(crate) fn join(self) {
        if let Some(s) = &self.sleeper {
            s.wake();
        }
        // Its naps are parks: end the current one (or make the next return at once).
        self.handle.thread().unpark();
        let _ = self.handle.join();
    }
}

fn run<C: Conduit>(cell: &EpCell<C>, max_nap: Duration, sleeper: Option<&Sleeper>) {
    gex_sync::thread::set_timer_slack(Duration::from_micros(1));
    let max_nap = max_nap.max(MIN_NAP);
    let mut nap = MIN_NAP;
    while !cell.stop.load(Ordering::Acquire) {
        let idle = match cell.try_lock_thread() {
            Some(mut g) => {
                let i = g.inner();
                let n = i.poll();
                if i.core.panicked.is_some() {
                    // A handler panicked on this thread (caught where it ran; the
                    // panic hook printed it): end the rank, as below.
                    std::panic::resume_unwind(i.core.panicked.take().expect("checked"));
                }
                if n > 0 {
                    nap = MIN_NAP;
                    continue;
                }
                i.core.busy == 0 && i.core.lc.is_empty()
            }
            None => {
                // The rank is inside gex and progresses by itself. (Naps are parks, so
                // that dropping the endpoint ends them: `ProgressThread::join`.)
                std::thread::park_timeout(max_nap);
                continue;
            }
        };
        match sleeper {
            Some(s) if idle => {
                s.wait(SLEEP_MAX, || {
                    cell.stop.load(Ordering::Acquire)
                        || match cell.try_lock_thread() {
                            Some(mut g) => g.inner().core.cep.has_incoming(),
                            // The rank took the lock: poll (or nap) rather than sleep.
                            None => true,
                        }
                });
            }
            _ => {
                std::thread::park_timeout(nap);
                nap = nap.saturating_mul(2).min(max_nap);
            }
        }
    }
}
