//! The optional progress thread of an endpoint: while the rank computes without
//! calling gex, it polls the endpoint so that peers' AM-path operations (gets, atomics,
//! collectives over AMs) are served.
//!
//! It takes the endpoint's lock word only when free (the rank's own calls always win:
//! a rank inside gex progresses by itself), polls once, and releases it. Between polls
//! it naps: a short nap after traffic, doubling while nothing arrives up to the
//! configured interval (`GEX_PROGRESS_INTERVAL`), so an idle thread costs little and a
//! peer's request waits at most about one interval. The thread's timer slack is set to
//! 1 µs so that naps of a few microseconds are honoured.

use super::EpCell;
use crate::spi::Conduit;
use gex_sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Shortest nap between polls.
const MIN_NAP: Duration = Duration::from_micros(2);

/// A running progress thread (joined when the endpoint is dropped).
#[derive(Debug)]
pub(crate) struct ProgressThread {
    handle: std::thread::JoinHandle<()>,
}

impl ProgressThread {
    /// Starts a thread that polls `cell` at most every `max_nap` while idle.
    pub(crate) fn start<C: Conduit>(cell: Arc<EpCell<C>>, max_nap: Duration) -> Self {
        let handle = std::thread::Builder::new()
            .name("gex-progress".into())
            .spawn(move || run(&cell, max_nap))
            .expect("gex: cannot start the progress thread");
        ProgressThread { handle }
    }

    /// Waits for the thread to end (the caller has set `stop`).
    pub(crate) fn join(self) {
        let _ = self.handle.join();
    }
}

fn run<C: Conduit>(cell: &EpCell<C>, max_nap: Duration) {
    gex_sync::thread::set_timer_slack(Duration::from_micros(1));
    let mut nap = MIN_NAP;
    while !cell.stop.load(Ordering::Acquire) {
        let handled = match cell.try_lock_thread() {
            Some(mut g) => g.inner().poll(),
            None => 0,
        };
        if handled > 0 {
            nap = MIN_NAP;
            continue;
        }
        std::thread::sleep(nap);
        nap = (nap * 2).min(max_nap.max(MIN_NAP));
    }
}
