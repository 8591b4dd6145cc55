//! The cooperative single copy between processes of one host: a blocking send lends
//! the caller's buffer, and the receiver and the sender copy the message together.
//!
//! A rendezvous message between two processes of a host is copied once, by the kernel,
//! with CMA (`process_vm_readv`/`process_vm_writev`). A blocking standard
//! [`send`](crate::MsgExt::send) has nothing to do until the message is read, so instead
//! of copying the caller's bytes into a buffer of the layer (a second copy, as
//! nonblocking sends do) it lends the caller's slice for the duration of the call and
//! helps: the message is cut into chunks ([`chunk_len`]) that both sides claim from a
//! shared counter, the receiver reading its chunks from the sender's slice
//! (`process_vm_readv`) while the sender writes its chunks into the receiver's buffer
//! (`process_vm_writev`). On two cores that halves the time a 1 MiB message takes
//! (docs/performance.md, "Tagged messaging"). If the sender is busy or descheduled the
//! receiver simply claims every chunk itself: the sender's help is never waited for,
//! only a chunk it already claimed is.
//!
//! ## The loan block
//! Each endpoint's auxiliary area (module `area`) ends with one block of
//! [`LOAN_WORDS`] words: an endpoint lends at most one slice at a time (a blocking
//! send holds the endpoint). Plain atomic words, so that two processes that map the
//! area at different addresses share it, and so that loom can check the protocol
//! (`tests/loom_coop.rs`):
//!
//! | word | what | written by |
//! |---|---|---|
//! | `state` | the loan's generation (40 bits) and its state | both (see below) |
//! | `dst` | the address of the receiver's buffer, in the receiver's process | receiver |
//! | `next` | the next chunk to claim | both (`fetch_add`) |
//! | `done` | chunks copied | both (`fetch_add`) |
//! | `err` | nonzero if a copy failed | both |
//!
//! ## The protocol
//! - **Offer** ([`Lender::offer`]): the sender stores `(gen, READY)` (`Release`) and
//!   sends the request to send, which names the generation and the slice's address.
//! - **Claim** ([`receive`]): the receiver that matched the request moves
//!   `(gen, READY)` to `(gen, CLAIMED)` by compare-and-swap (a failure means the loan
//!   was withdrawn, or is another one: the receiver asks for the chunks instead),
//!   resets `next`, `done` and `err`, stores its buffer's address and publishes
//!   `(gen, HELP)` (`Release`).
//! - **Copy**: each side claims chunk `i = next.fetch_add(1)` while `i` is below the
//!   chunk count, copies it, and counts it in `done` (`Release`); a failed copy sets
//!   `err`.
//! - **End**: the receiver waits until `done` (`Acquire`) counts every chunk, then
//!   moves `HELP` to `DONE`, or to `FAILED` if a copy failed (then it asks for the
//!   chunks and the sender sends them from a copy it makes on seeing `FAILED`).
//!   A receiver that finds the loan withdrawn (it came late) asks the sender where the
//!   copy it made on withdrawal is (the layer's `ADDR` message) and reads that.
//! - **Withdraw** ([`sender_step`] with `withdraw`): a sender whose receiver did not
//!   come within its budget moves `(gen, READY)` to `(gen, IDLE)` by compare-and-swap;
//!   if the receiver claimed first, the sender waits (and helps) instead. So once the
//!   sender returns, nobody reads the caller's slice: either the loan was withdrawn
//!   before any claim, or every chunk was copied.
//!
//! The generation makes a late or repeated claim harmless: the compare-and-swap
//! expects the generation of the request it matched, and every new loan of the
//! endpoint has a new one (40 bits: it would take 2^40 blocking sends of one endpoint
//! while one request stays unmatched to confuse two of them).
//!
//! ## A lying or dead peer
//! Every process of the host can write the block. The sender trusts nothing in it: a
//! state of another generation or an unknown state ends the loan as `Failed` (the
//! sender makes its copy, a receiver that asks gets the chunks), and its writes go
//! through `process_vm_writev`, whose target range the kernel checks against the
//! receiver's mappings (a liar can make the sender write only into the liar's own
//! memory). The receiver reads through `process_vm_readv` (a bad address is an error).
//! Either side waiting for the other checks now and then that the other process is
//! still alive (its `/proc` entry, not a zombie), so a peer that dies mid-copy ends the
//! wait instead of hanging it; a peer that stalls forever stalls the transfer, as on any
//! shared-memory transport.
//!
//! This module is the protocol only, over the block's words and two copy functions;
//! the layer (`ext.rs`, `layer.rs`) supplies CMA and the processes.

use gex_sync::atomic::{AtomicU64, Ordering};

/// Words of an endpoint's loan block.
pub const LOAN_WORDS: usize = 8;

const W_STATE: usize = 0;
const W_DST: usize = 1;
const W_NEXT: usize = 2;
const W_DONE: usize = 3;
const W_ERR: usize = 4;

const IDLE: u64 = 0;
const READY: u64 = 1;
const CLAIMED: u64 = 2;
const HELP: u64 = 3;
const DONE: u64 = 4;
const FAILED: u64 = 5;

/// Bits of a loan's generation.
pub const GEN_BITS: u32 = 40;
const GEN_MASK: u64 = (1 << GEN_BITS) - 1;

fn word(generation: u64, state: u64) -> u64 {
    ((generation & GEN_MASK) << 3) | state
}

/// Bytes of one chunk of a message of `len` bytes: an eighth of it, in whole pages,
/// at least 32 KiB (each chunk costs a system call).
pub fn chunk_len(len: usize) -> usize {
    len.div_ceil(8).next_multiple_of(4096).max(32 * 1024)
}

/// Chunks of a message of `len` bytes.
pub fn chunks(len: usize) -> u64 {
    len.div_ceil(chunk_len(len)) as u64
}

/// The byte range of chunk `i` of a message of `len` bytes.
fn range(len: usize, i: u64) -> std::ops::Range<usize> {
    let c = chunk_len(len);
    let off = i as usize * c;
    off..(off + c).min(len)
}

/// An endpoint's loan block ([`LOAN_WORDS`] atomic words).
#[derive(Clone, Copy, Debug)]
pub struct Block<'a>(&'a [AtomicU64]);

impl<'a> Block<'a> {
    /// The block over `words` (`None` unless exactly [`LOAN_WORDS`] words).
    pub fn new(words: &'a [AtomicU64]) -> Option<Block<'a>> {
        (words.len() == LOAN_WORDS).then_some(Block(words))
    }

    fn w(&self, i: usize) -> &AtomicU64 {
        &self.0[i]
    }
}

/// The sender's side: the generation of its endpoint's loans.
#[derive(Debug, Default)]
pub struct Lender {
    generation: u64,
}

impl Lender {
    /// Offers a new loan in `b` (the sender's own block) and returns its generation,
    /// for the request to send. The previous loan of the block must have ended
    /// ([`sender_step`] returned something other than a pending step ([`Step::pending`])).
    pub fn offer(&mut self, b: Block<'_>) -> u64 {
        self.generation = (self.generation + 1) & GEN_MASK;
        if self.generation == 0 {
            self.generation = 1;
        }
        b.w(W_STATE)
            .store(word(self.generation, READY), Ordering::Release);
        self.generation
    }
}

/// What the sender's loan is doing ([`sender_step`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Not claimed yet.
    Ready,
    /// Claimed: the receiver (and maybe this sender) is copying.
    Reading,
    /// Every chunk was copied: the slice is no longer read.
    Done,
    /// Withdrawn before any claim: nobody reads the slice; a receiver that comes later
    /// asks for the chunks.
    Withdrawn,
    /// A copy failed, or the block holds something this loan did not write: nobody
    /// reads the slice any more (or ever did); the receiver asks for the chunks.
    Failed,
}

impl Step {
    /// True while the loan may still be read (the sender must not return).
    pub fn pending(self) -> bool {
        matches!(self, Step::Ready | Step::Reading)
    }
}

/// One step of the sender of loan `generation` of `len` bytes in its own block `b`:
/// reads the state; helps copy while the receiver has published its buffer (`help(range,
/// dst)` copies the slice's bytes `range` to the receiver's address `dst` and says if
/// it worked); with `withdraw`, withdraws a loan not claimed yet.
pub fn sender_step(
    b: Block<'_>,
    generation: u64,
    len: usize,
    withdraw: bool,
    mut help: impl FnMut(std::ops::Range<usize>, u64) -> bool,
) -> Step {
    let s = b.w(W_STATE).load(Ordering::Acquire);
    if s >> 3 != generation & GEN_MASK {
        return Step::Failed;
    }
    match s & 7 {
        READY if withdraw => {
            match b.w(W_STATE).compare_exchange(
                s,
                word(generation, IDLE),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => Step::Withdrawn,
                // Claimed meanwhile (or garbled): look again next step.
                Err(_) => Step::Reading,
            }
        }
        READY => Step::Ready,
        CLAIMED => Step::Reading,
        HELP => {
            // `dst` was stored before `HELP` was published (`Release`), read above
            // with `Acquire`.
            let dst = b.w(W_DST).load(Ordering::Relaxed);
            let n = chunks(len);
            loop {
                let i = b.w(W_NEXT).fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let r = range(len, i);
                if !help(r.clone(), dst.wrapping_add(r.start as u64)) {
                    b.w(W_ERR).store(1, Ordering::Relaxed);
                }
                b.w(W_DONE).fetch_add(1, Ordering::Release);
            }
            Step::Reading
        }
        DONE => Step::Done,
        _ => Step::Failed,
    }
}

/// What [`receive`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Received {
    /// The loan was not there to claim (withdrawn, another one, or garbled): ask for
    /// the chunks.
    NotLent,
    /// Every byte is in the buffer.
    Read,
    /// A copy failed (or the sender died): ask for the chunks; the buffer's content
    /// is unspecified.
    Failed,
}

/// The receiver's side: claims loan `generation` of the sender's block `b` and copies
/// the message into `dst` (exactly the message's length) with the sender's help.
/// `dst_addr` is `dst`'s address as the sender's `help` will use it (its address in
/// this process); `read(range, out)` copies the slice's bytes `range` into `out`;
/// `alive()` says if the sender still lives (asked now and then while waiting for a
/// chunk the sender claimed).
pub fn receive(
    b: Block<'_>,
    generation: u64,
    dst: &mut [u8],
    dst_addr: u64,
    mut read: impl FnMut(std::ops::Range<usize>, &mut [u8]) -> bool,
    mut alive: impl FnMut() -> bool,
) -> Received {
    let ready = word(generation, READY);
    if b.w(W_STATE)
        .compare_exchange(
            ready,
            word(generation, CLAIMED),
            Ordering::Acquire,
            Ordering::Relaxed,
        )
        .is_err()
    {
        return Received::NotLent;
    }
    let len = dst.len();
    let n = chunks(len);
    b.w(W_NEXT).store(0, Ordering::Relaxed);
    b.w(W_DONE).store(0, Ordering::Relaxed);
    b.w(W_ERR).store(0, Ordering::Relaxed);
    b.w(W_DST).store(dst_addr, Ordering::Relaxed);
    b.w(W_STATE)
        .store(word(generation, HELP), Ordering::Release);
    let mut ok = true;
    loop {
        let i = b.w(W_NEXT).fetch_add(1, Ordering::Relaxed);
        if i >= n {
            break;
        }
        let r = range(len, i);
        if !read(r.clone(), &mut dst[r]) {
            ok = false;
        }
        b.w(W_DONE).fetch_add(1, Ordering::Release);
    }
    // Wait for the chunks the sender claimed (it is copying them now).
    let mut spins = 0u32;
    while b.w(W_DONE).load(Ordering::Acquire) < n {
        spins = spins.wrapping_add(1);
        if spins % 4096 == 0 {
            if !alive() {
                return Received::Failed;
            }
            gex_sync::thread::yield_now();
        } else {
            gex_sync::hint::spin_loop();
        }
    }
    if b.w(W_ERR).load(Ordering::Relaxed) != 0 {
        ok = false;
    }
    let end = word(generation, if ok { DONE } else { FAILED });
    // A failed exchange means someone else wrote the block: the copies were ours and
    // counted, so the outcome stands.
    let _ = b.w(W_STATE).compare_exchange(
        word(generation, HELP),
        end,
        Ordering::Release,
        Ordering::Relaxed,
    );
    if ok { Received::Read } else { Received::Failed }
}

/// True if process `pid` still runs (its `/proc` entry exists and is not a zombie).
/// A slow path: a file read.
pub(crate) fn process_alive(pid: u64) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name's closing parenthesis.
        Ok(s) => s
            .rfind(')')
            .and_then(|i| s[i + 1..].trim_start().chars().next())
            .is_none_or(|st| st != 'Z' && st != 'X'),
        Err(_) => false,
    }
}

#[cfg(all(test, not(gex_loom)))]
mod tests {
    use super::*;

    fn block_words() -> Vec<AtomicU64> {
        (0..LOAN_WORDS).map(|_| AtomicU64::new(0)).collect()
    }

    /// The block over `words` with one loan offered: the block, its lender and the
    /// loan's generation.
    fn offered(words: &[AtomicU64]) -> (Block<'_>, Lender, u64) {
        let b = Block::new(words).unwrap();
        let mut lender = Lender::default();
        let g = lender.offer(b);
        (b, lender, g)
    }

    #[test]
    fn chunking_covers_the_message_once() {
        for len in [
            1,
            4096,
            8193,
            32 * 1024,
            100_000,
            1 << 20,
            (1 << 20) + 3,
            9 << 20,
        ] {
            let n = chunks(len);
            assert!((1..=8).contains(&n), "{len}: {n} chunks");
            let mut next = 0;
            for i in 0..n {
                let r = range(len, i);
                assert_eq!(r.start, next);
                assert!(!r.is_empty());
                next = r.end;
            }
            assert_eq!(next, len);
        }
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "process_vm_writev: a system call Miri does not emulate"
    )]
    fn a_loan_read_by_both_sides() {
        let words = block_words();
        let (b, _, g) = offered(&words);
        let src: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        assert_eq!(
            sender_step(b, g, src.len(), false, |_, _| true),
            Step::Ready
        );
        let mut dst = vec![0u8; src.len()];
        let dst_addr = dst.as_ptr() as u64;
        // The receiver copies its chunks; while it copies chunk 0, the "sender" (the
        // other process in life; here the same one, through the same system call)
        // claims and writes every remaining chunk into the receiver's buffer.
        let mut helped = 0;
        // The host must allow CMA (this machine and CI do): the test says so if not.
        assert!(
            gex_sync::cma::cma_capable(),
            "this test needs CMA (process_vm_writev)"
        );
        let pid = u64::from(std::process::id());
        let got = receive(
            b,
            g,
            &mut dst,
            dst_addr,
            |r, out| {
                out.copy_from_slice(&src[r.clone()]);
                if r.start == 0 {
                    // The sender's step runs now (another process, in life): it
                    // claims and copies every remaining chunk.
                    let s = sender_step(b, g, src.len(), false, |r, to| {
                        assert_eq!(to, dst_addr + r.start as u64);
                        helped += 1;
                        crate::direct::coop_write(pid, to, &src[r])
                    });
                    assert_eq!(s, Step::Reading);
                }
                true
            },
            || true,
        );
        assert_eq!(got, Received::Read);
        assert!(helped > 0);
        assert_eq!(dst, src);
        assert_eq!(sender_step(b, g, src.len(), true, |_, _| true), Step::Done);
    }

    #[test]
    fn a_withdrawn_loan_is_not_claimed_and_a_claimed_one_is_not_withdrawn() {
        let words = block_words();
        let (b, mut lender, g) = offered(&words);
        assert_eq!(sender_step(b, g, 10, true, |_, _| true), Step::Withdrawn);
        let mut dst = [0u8; 10];
        let a = dst.as_ptr() as u64;
        assert_eq!(
            receive(b, g, &mut dst, a, |_, _| true, || true),
            Received::NotLent
        );
        // A new loan: claimed (and read) before the sender withdraws.
        let g2 = lender.offer(b);
        assert_ne!(g, g2);
        // A stale request (the old generation) finds nothing.
        assert_eq!(
            receive(b, g, &mut dst, a, |_, _| true, || true),
            Received::NotLent
        );
        assert_eq!(
            receive(
                b,
                g2,
                &mut dst,
                a,
                |_, o| {
                    o.fill(3);
                    true
                },
                || true
            ),
            Received::Read
        );
        assert_eq!(dst, [3; 10]);
        assert_eq!(sender_step(b, g2, 10, true, |_, _| true), Step::Done);
    }

    #[test]
    fn a_failed_copy_fails_the_loan_on_both_sides() {
        let words = block_words();
        let (b, _, g) = offered(&words);
        let mut dst = vec![0u8; 100_000];
        let a = dst.as_ptr() as u64;
        assert_eq!(
            receive(b, g, &mut dst, a, |r, _| r.start != 0, || true),
            Received::Failed
        );
        assert_eq!(sender_step(b, g, 100_000, true, |_, _| true), Step::Failed);
    }

    #[test]
    fn a_garbled_block_fails_the_sender_without_reading() {
        let words = block_words();
        let (b, _, g) = offered(&words);
        // A liar writes another generation, then an unknown state.
        words[W_STATE].store(word(g + 5, READY), Ordering::Relaxed);
        assert_eq!(sender_step(b, g, 10, false, |_, _| panic!()), Step::Failed);
        words[W_STATE].store(word(g, 7), Ordering::Relaxed);
        assert_eq!(sender_step(b, g, 10, false, |_, _| panic!()), Step::Failed);
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "spawns a process and reads /proc: not under Miri's isolation"
    )]
    fn this_process_is_alive_and_a_reaped_child_is_not() {
        assert!(process_alive(u64::from(std::process::id())));
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = u64::from(c.id());
        c.wait().unwrap();
        assert!(!process_alive(pid));
    }
}
