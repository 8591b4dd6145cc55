//! The matching engine: MPI matching as plain protocol logic, with no I/O, no clock
//! and no knowledge of gex (the layer feeds it arrivals and receives, and acts on what
//! it returns). Tested against a sequential model of MPI matching
//! (`tests/matching_model.rs`).
//!
//! Two queues, each split per source:
//! - **unexpected messages**: arrivals no posted receive matched yet, one FIFO per
//!   source, each stamped with a receiver-wide arrival number;
//! - **posted receives**: receives no arrival matched yet, one FIFO per source for
//!   receives naming their source, and one FIFO for any-source receives, each stamped
//!   with a receiver-wide post number.
//!
//! The two stamps keep MPI's order across the split queues:
//! - an arrival from `s` matches the earliest-posted receive that accepts it: the
//!   first match in `posted[s]` or in the any-source queue, whichever was posted first;
//! - a receive matches the earliest-arrived message it accepts: the first match in
//!   its source's queue, or for any-source the first match of every source's queue with
//!   the smallest arrival number.
//!
//! A specific-source receive and an arrival only ever look at one source's queue and
//! the any-source queue, never at other sources' traffic. Within one source, arrivals
//! must be fed in the sender's order ([`Reorder`] restores it when the network does
//! not keep it), which gives MPI's non-overtaking rule per (source, tag, context).
//!
//! ```
//! use gex_msg::engine::{Envelope, Matcher, Pattern};
//!
//! // Messages carry a name, receives a number.
//! let mut m: Matcher<&str, u32> = Matcher::new(2);
//! let any = Pattern { src: None, tag: None, ctx: 0 };
//! assert!(m.arrive(Envelope { src: 1, tag: 5, ctx: 0 }, "a").is_none()); // unexpected
//! assert!(m.arrive(Envelope { src: 0, tag: 5, ctx: 0 }, "b").is_none());
//! // An any-source receive takes the earliest arrival; a specific one its source's.
//! assert_eq!(m.post(any, 1).map(|(r, e, msg)| (r, e.src, msg)), Some((1, 1, "a")));
//! assert!(m.post(Pattern { src: Some(1), tag: Some(5), ctx: 0 }, 2).is_none()); // posted
//! assert_eq!(m.arrive(Envelope { src: 1, tag: 5, ctx: 0 }, "c"), Some((2, "c")));
//! assert_eq!(m.probe(&any).map(|(e, msg)| (e.src, *msg)), Some((0, "b")));
//! ```

use std::collections::{BTreeMap, VecDeque};

/// Who sent a message, with which tag, in which context (communicator id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Envelope {
    /// The sending rank.
    pub src: u32,
    /// The message's tag.
    pub tag: u32,
    /// The context (communicator) id.
    pub ctx: u32,
}

/// What a receive (or a probe) accepts: `None` is a wildcard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pattern {
    /// The source, or any source.
    pub src: Option<u32>,
    /// The tag, or any tag.
    pub tag: Option<u32>,
    /// The context: never a wildcard.
    pub ctx: u32,
}

impl Pattern {
    /// True if a message with envelope `e` matches.
    #[inline]
    pub fn accepts(&self, e: &Envelope) -> bool {
        self.ctx == e.ctx
            && self.src.is_none_or(|s| s == e.src)
            && self.tag.is_none_or(|t| t == e.tag)
    }
}

#[derive(Debug)]
struct Unexpected<M> {
    tag: u32,
    ctx: u32,
    arrival: u64,
    msg: M,
}

#[derive(Debug)]
struct Posted<R> {
    pat: Pattern,
    post: u64,
    recv: R,
}

/// The posted-receive and unexpected-message queues of one endpoint. `M` is what an
/// arrival carries (an eager payload, a rendezvous request), `R` what a receive
/// carries (its buffer and completer).
#[derive(Debug)]
pub struct Matcher<M, R> {
    unexpected: Vec<VecDeque<Unexpected<M>>>,
    posted: Vec<VecDeque<Posted<R>>>,
    any_src: VecDeque<Posted<R>>,
    next_arrival: u64,
    next_post: u64,
    n_unexpected: usize,
    n_posted: usize,
}

impl<M, R> Matcher<M, R> {
    /// An empty engine for sources `0..sources`.
    pub fn new(sources: u32) -> Self {
        Matcher {
            unexpected: (0..sources).map(|_| VecDeque::new()).collect(),
            posted: (0..sources).map(|_| VecDeque::new()).collect(),
            any_src: VecDeque::new(),
            next_arrival: 0,
            next_post: 0,
            n_unexpected: 0,
            n_posted: 0,
        }
    }

    /// Number of sources.
    pub fn sources(&self) -> u32 {
        self.posted.len() as u32
    }

    /// Unexpected messages queued.
    pub fn unexpected_len(&self) -> usize {
        self.n_unexpected
    }

    /// Receives posted and not matched.
    pub fn posted_len(&self) -> usize {
        self.n_posted
    }

    /// An arrival with envelope `e` (in its source's order). Returns the receive it
    /// matched, or `None` if it was queued as unexpected.
    ///
    /// # Panics
    /// If `e.src` is not below [`sources`](Self::sources) (the layer checks sources).
    pub fn arrive(&mut self, e: Envelope, msg: M) -> Option<(R, M)> {
        let mut msg = Some(msg);
        let r = self.arrive_with(e, || msg.take().expect("made once"))?;
        Some((r, msg.take().expect("not made when matched")))
    }

    /// As [`arrive`](Self::arrive), building the message only if it is queued as
    /// unexpected (a matched arrival is delivered straight from the network's buffer).
    ///
    /// # Panics
    /// If `e.src` is not below [`sources`](Self::sources).
    pub fn arrive_with(&mut self, e: Envelope, make: impl FnOnce() -> M) -> Option<R> {
        let s = e.src as usize;
        let own = self.posted[s].iter().position(|p| p.pat.accepts(&e));
        let any = self.any_src.iter().position(|p| p.pat.accepts(&e));
        let taken = match (own, any) {
            (Some(i), Some(j)) if self.posted[s][i].post < self.any_src[j].post => {
                self.posted[s].remove(i)
            }
            (Some(i), None) => self.posted[s].remove(i),
            (_, Some(j)) => self.any_src.remove(j),
            (None, None) => None,
        };
        match taken {
            Some(p) => {
                self.n_posted -= 1;
                Some(p.recv)
            }
            None => {
                let arrival = self.next_arrival;
                self.next_arrival += 1;
                self.unexpected[s].push_back(Unexpected {
                    tag: e.tag,
                    ctx: e.ctx,
                    arrival,
                    msg: make(),
                });
                self.n_unexpected += 1;
                None
            }
        }
    }

    /// True if a posted receive accepts a message with envelope `e` (an arrival now
    /// would match it rather than be unexpected).
    #[inline]
    pub fn has_posted_for(&self, e: &Envelope) -> bool {
        self.n_posted > 0
            && (self.any_src.iter().any(|p| p.pat.accepts(e))
                || self
                    .posted
                    .get(e.src as usize)
                    .is_some_and(|q| q.iter().any(|p| p.pat.accepts(e))))
    }

    /// Where the earliest-arrived unexpected message matching `pat` is: (source, index).
    fn find(&self, pat: &Pattern) -> Option<(usize, usize)> {
        let first = |s: usize| {
            self.unexpected[s].iter().position(|u| {
                pat.accepts(&Envelope {
                    src: s as u32,
                    tag: u.tag,
                    ctx: u.ctx,
                })
            })
        };
        match pat.src {
            Some(s) => {
                let s = s as usize;
                if s >= self.unexpected.len() {
                    return None;
                }
                first(s).map(|i| (s, i))
            }
            None => (0..self.unexpected.len())
                .filter_map(|s| first(s).map(|i| (s, i)))
                .min_by_key(|&(s, i)| self.unexpected[s][i].arrival),
        }
    }

    /// The envelope and message of the unexpected message a receive with `pat` would
    /// match now, without taking it (MPI's probe).
    pub fn probe(&self, pat: &Pattern) -> Option<(Envelope, &M)> {
        let (s, i) = self.find(pat)?;
        let u = &self.unexpected[s][i];
        Some((
            Envelope {
                src: s as u32,
                tag: u.tag,
                ctx: u.ctx,
            },
            &u.msg,
        ))
    }

    /// Takes the unexpected message a receive with `pat` matches now, if any.
    pub fn take(&mut self, pat: &Pattern) -> Option<(Envelope, M)> {
        let (s, i) = self.find(pat)?;
        let u = self.unexpected[s].remove(i)?;
        self.n_unexpected -= 1;
        Some((
            Envelope {
                src: s as u32,
                tag: u.tag,
                ctx: u.ctx,
            },
            u.msg,
        ))
    }

    /// Posts a receive: matches the earliest-arrived unexpected message it accepts
    /// (returned with the receive), or queues the receive (`None`).
    pub fn post(&mut self, pat: Pattern, recv: R) -> Option<(R, Envelope, M)> {
        if let Some((e, m)) = self.take(&pat) {
            return Some((recv, e, m));
        }
        let post = self.next_post;
        self.next_post += 1;
        let p = Posted { pat, post, recv };
        match pat.src {
            Some(s) => self.posted[s as usize].push_back(p),
            None => self.any_src.push_back(p),
        }
        self.n_posted += 1;
        None
    }

    /// Every posted receive, taken out (for teardown).
    pub fn drain_posted(&mut self) -> Vec<R> {
        self.n_posted = 0;
        let mut out: Vec<R> = self.any_src.drain(..).map(|p| p.recv).collect();
        for q in &mut self.posted {
            out.extend(q.drain(..).map(|p| p.recv));
        }
        out
    }
}

/// Restores one source's sending order when the network may reorder messages: the
/// sender numbers its messages to each destination `0, 1, 2, ...` (wrapping), and the
/// receiver releases them in that order. In-order arrivals pass through without
/// allocation ([`is_next`](Self::is_next), then [`advance`](Self::advance)); only
/// early ones are held ([`hold`](Self::hold)) until [`pop_ready`](Self::pop_ready)
/// gives them back.
#[derive(Debug)]
pub struct Reorder<T> {
    next: Vec<u32>,
    early: Vec<BTreeMap<u32, T>>,
}

impl<T> Reorder<T> {
    /// For sources `0..sources`.
    pub fn new(sources: u32) -> Self {
        Reorder {
            next: vec![0; sources as usize],
            early: (0..sources).map(|_| BTreeMap::new()).collect(),
        }
    }

    /// True if message `seq` of `src` is the next one in the sender's order.
    #[inline]
    pub fn is_next(&self, src: u32, seq: u32) -> bool {
        self.next[src as usize] == seq
    }

    /// The next message of `src` was released.
    #[inline]
    pub fn advance(&mut self, src: u32) {
        let n = &mut self.next[src as usize];
        *n = n.wrapping_add(1);
    }

    /// Holds message `seq` of `src`, which arrived early.
    ///
    /// # Errors
    /// `t` back if that number is already held (a duplicate).
    pub fn hold(&mut self, src: u32, seq: u32, t: T) -> Result<(), T> {
        let q = &mut self.early[src as usize];
        if q.contains_key(&seq) {
            return Err(t);
        }
        q.insert(seq, t);
        Ok(())
    }

    /// The held message of `src` that is next in order, if it arrived (and advances).
    pub fn pop_ready(&mut self, src: u32) -> Option<T> {
        let s = src as usize;
        let t = self.early[s].remove(&self.next[s])?;
        self.next[s] = self.next[s].wrapping_add(1);
        Some(t)
    }

    /// Messages held early.
    pub fn held(&self) -> usize {
        self.early.iter().map(BTreeMap::len).sum()
    }
}
