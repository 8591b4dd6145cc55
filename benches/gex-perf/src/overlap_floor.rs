//! The floor of the `overlap` kernel: the same copy and the same use, overlapped by
//! hand as well as a machine allows, with no library in the way.
//!
//! A helper thread (the floor's mover) copies the source into the destination strip
//! by strip while the rank's thread uses the strips in order as they arrive: no page
//! protection, no fault, no `mprotect`, no wake-up inside the timed section (the
//! mover is woken and spinning before the clock starts), and the mover on another
//! core than the rank's when the process may use one. Strips move between the two
//! threads by ownership (a boxed strip sent through a channel each way), so the
//! copy and the use share no memory while either writes it.
//!
//! What this measures is how much a perfect demand-driven get could gain on this
//! machine: the kernel's blocking variant is `M + C` (copy, then use); the floor is
//! about `max(M, C)` plus what the copied lines cost to cross from the mover's core to
//! the consumer's, which on some machines eats most of the overlap. The demand
//! variant cannot beat it; when the floor itself is below a target, no
//! implementation reaches that target on the machine (docs/overlap.md, "The floor").

use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, TryRecvError, channel};
use std::thread::JoinHandle;
use std::time::Instant;

/// What the rank's thread asks of the floor's mover.
enum Ask {
    /// Spin (answer `Awake` first) until this round's strips have been filled.
    Round(usize),
    /// Fill this strip: source bytes from `at`.
    Fill(Box<[u8]>, usize),
}

/// What the mover answers.
enum Answer {
    /// The mover is running and spins until the round's strips are filled.
    Awake,
    /// A filled strip.
    Filled(Box<[u8]>),
}

/// The floor's mover and the destination strips it fills.
pub(crate) struct Floor {
    ask: Option<Sender<Ask>>,
    answers: Receiver<Answer>,
    strips: Vec<Box<[u8]>>,
    mover: Option<JoinHandle<()>>,
    /// The core the mover pinned itself to, if it could take one apart from the rank's.
    pub(crate) core: Option<usize>,
}

impl Floor {
    /// A mover copying from `src` in strips of `strip` bytes (at least one page),
    /// pinned to the first of `cores` that is not `mine` (none: it keeps the rank's
    /// affinity).
    pub(crate) fn new(
        src: Arc<Vec<u8>>,
        strip: usize,
        cores: &[usize],
        mine: Option<usize>,
    ) -> Floor {
        let strip = strip.max(4096);
        let strips = (0..src.len().div_ceil(strip))
            .map(|i| vec![0u8; strip.min(src.len() - i * strip)].into_boxed_slice())
            .collect();
        let core = cores.iter().copied().find(|&c| Some(c) != mine);
        let (ask, asks) = channel::<Ask>();
        let (answer, answers) = channel::<Answer>();
        let mover = std::thread::spawn(move || {
            if let Some(c) = core {
                let mut set = rustix::thread::CpuSet::new();
                set.set(c);
                let _ = rustix::thread::sched_setaffinity(None, &set);
            }
            move_strips(&src, &asks, &answer);
        });
        Floor {
            ask: Some(ask),
            answers,
            strips,
            mover: Some(mover),
            core,
        }
    }

    /// One round: the copy and `use_strip` of every strip in order, overlapped; the
    /// time from the first strip asked to the last one used, and the sum of what
    /// `use_strip` returned.
    ///
    /// # Errors
    /// The mover ended (it panicked).
    pub(crate) fn round(
        &mut self,
        mut use_strip: impl FnMut(&[u8]) -> u64,
    ) -> Result<(f64, u64), String> {
        let gone = || "the floor's mover ended".to_string();
        let ask = self.ask.as_ref().ok_or_else(gone)?;
        let n = self.strips.len();
        ask.send(Ask::Round(n)).map_err(|_| gone())?;
        match self.answers.recv() {
            Ok(Answer::Awake) => {}
            _ => return Err(gone()),
        }
        let strip = self.strips.first().map_or(0, |s| s.len());
        let t0 = Instant::now();
        for (i, s) in std::mem::take(&mut self.strips).into_iter().enumerate() {
            ask.send(Ask::Fill(s, i * strip)).map_err(|_| gone())?;
        }
        let mut sum = 0u64;
        while self.strips.len() < n {
            match self.answers.try_recv() {
                Ok(Answer::Filled(s)) => {
                    sum += use_strip(&s);
                    self.strips.push(s);
                }
                Ok(Answer::Awake) => return Err(gone()),
                Err(TryRecvError::Empty) => std::hint::spin_loop(),
                Err(TryRecvError::Disconnected) => return Err(gone()),
            }
        }
        Ok((t0.elapsed().as_secs_f64() * 1e6, sum))
    }
}

impl Drop for Floor {
    fn drop(&mut self) {
        // Closing the channel ends the mover's loop.
        self.ask = None;
        if let Some(h) = self.mover.take() {
            let _ = h.join();
        }
    }
}

/// The mover's loop: asleep in `recv` between rounds, spinning within one.
fn move_strips(src: &[u8], asks: &Receiver<Ask>, answer: &Sender<Answer>) {
    while let Ok(a) = asks.recv() {
        let Ask::Round(n) = a else { return };
        if answer.send(Answer::Awake).is_err() {
            return;
        }
        let mut filled = 0;
        while filled < n {
            match asks.try_recv() {
                Ok(Ask::Fill(mut s, at)) => {
                    let len = s.len();
                    s.copy_from_slice(&src[at..at + len]);
                    if answer.send(Answer::Filled(s)).is_err() {
                        return;
                    }
                    filled += 1;
                }
                Ok(Ask::Round(_)) | Err(TryRecvError::Disconnected) => return,
                Err(TryRecvError::Empty) => std::hint::spin_loop(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every strip arrives in order with the source's bytes, round after round, and
    /// the strips cover the source exactly (a last strip shorter than the others).
    #[test]
    fn the_floor_delivers_every_strip_in_order_with_the_source_bytes() {
        let src: Vec<u8> = (0..(10 * 4096 + 100))
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let want: u64 = src.iter().map(|&b| u64::from(b)).sum();
        let src = Arc::new(src);
        let mut f = Floor::new(Arc::clone(&src), 3 * 4096, &[], None);
        for _ in 0..3 {
            let mut seen = Vec::new();
            let (us, sum) = f
                .round(|s| {
                    seen.extend_from_slice(s);
                    s.iter().map(|&b| u64::from(b)).sum()
                })
                .unwrap();
            assert!(us >= 0.0);
            assert_eq!(sum, want);
            assert_eq!(&seen[..], &src[..]);
        }
    }
}
