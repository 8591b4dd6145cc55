//! gex-fuzz: a fuzz target for every decoder of bytes that come from another process or
//! the network, and a mutation fuzzer that runs them on stable Rust.
//!
//! Every [`Target`] turns arbitrary bytes into one decoder call (or a short scripted
//! conversation, for the bootstrap clients) and checks what a decoder of untrusted
//! input must guarantee: it returns (no panic, no hang, no allocation sized by a
//! claim), it rejects what the encoder would not have written, and what it accepts
//! re-encodes to the same bytes. A corrupt message must be an error (naming the peer
//! where the caller knows it), never undefined behaviour, a panic or a hang.
//!
//! [`fuzz`] runs one target: it starts from the target's seeds (valid encodings of
//! every message kind) and the saved inputs of `benches/gex-fuzz/corpus/<target>/`,
//! mutates them (bit flips, interesting integers, insertions, deletions, splices,
//! fresh random bytes), keeps every input that produces an outcome not seen before
//! (an error of a new kind, a message of a new kind: a cheap stand-in for coverage
//! feedback, which needs a nightly compiler), and stops after a time or an execution
//! budget. A panic is minimised and written to a file that `gex-fuzz replay` runs
//! again; an execution that takes longer than the hang limit is written out and ends
//! the process. Runs are reproducible from the seed printed at the start.
//!
//! The `gex-fuzz` binary runs the targets (`gex-fuzz run`, what `ci/test fuzz` does),
//! lists them and replays files; `tests/targets.rs` runs each for a fixed number of
//! executions and replays the saved inputs, so `cargo test` keeps them working.
//!
//! # What it does not do
//! No coverage instrumentation (`cargo fuzz` needs nightly; a coverage-guided run
//! with cargo-afl is described in `docs/testing.md`), no sanitizers: an out-of-bounds
//! read in `unsafe` code is found only where the checks of safe code around it catch
//! it. The decoders under test keep their own unit tests with the minimised input of
//! every bug found.

mod engine;
pub mod targets;

pub use engine::{Failure, Options, Report, fuzz, outcome, replay, saved_inputs, show};

/// A fuzz target: one decoder and the properties checked on every input.
#[derive(Clone, Copy)]
pub struct Target {
    /// Short name (`gex-fuzz run NAME`).
    pub name: &'static str,
    /// The decoder under test.
    pub decoder: &'static str,
    /// What is checked beyond "returns without panicking".
    pub checks: &'static str,
    /// Valid inputs to start from.
    pub seeds: fn() -> Vec<Vec<u8>>,
    /// Runs one input; panics if a property fails. Returns an outcome class
    /// ([`outcome`]): inputs with a class not seen before are kept for mutation.
    pub run: fn(&[u8]) -> u64,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("name", &self.name)
            .field("decoder", &self.decoder)
            .finish_non_exhaustive()
    }
}

/// Every target, in the order `gex-fuzz run` runs them.
pub fn all() -> Vec<Target> {
    targets::all()
}

/// The target called `name`.
pub fn find(name: &str) -> Option<Target> {
    all().into_iter().find(|t| t.name == name)
}
