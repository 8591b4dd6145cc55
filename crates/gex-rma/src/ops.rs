//! The table of operations in flight: an operation that cannot complete during the
//! call that starts it gets an entry ([`Op`]) holding what completes it ([`Done`]:
//! the completer of its event, or the NBI category it counts toward), how many units
//! (acknowledged messages, bytes of a get, native tickets) are outstanding, and where
//! its data lands. Handlers and the progress hook credit units; an entry completes
//! once it is *sealed* (every unit was started) and none is outstanding. The table
//! also counts its implicit-event entries per category (what
//! [`sync_nbi`](crate::RmaExt::sync_nbi) waits for).
//!
//! Its own state with a narrow interface (make, open, bump, credit, seal, abandon);
//! it knows nothing of paths, messages or the network.
//!
//! # Safety
//! `Op::dst`/`Op::result` point at destinations that outlive the operation (the rules
//! of [`crate::state`]); `Op::land` is a heap word the entry owns (from
//! `Box::into_raw`, freed with the entry, read at completion when every writer is
//! done).
#![allow(unsafe_code)]

use crate::RmaError;
use crate::nbi::Cat;
use gex_core::event::{Data, Finish, OpCompleter};
use gex_core::layer::Cx;
use gex_core::spi::Conduit;
use gex_core::{EpAddr, Event};
use std::collections::HashMap;

/// Outcome of a step.
#[derive(Debug)]
pub(crate) enum Step<O: Send + 'static> {
    /// Back-pressure: poll and call again with the same job.
    Blocked,
    /// Complete during the call (direct path, nothing to move, or counted in its NBI
    /// category): the output. No event exists.
    Now(O),
    /// Every unit has started: complete when the event is.
    Done(Event<O, RmaError>),
    /// A small blocking AM put: complete when the fast acknowledgements reach the
    /// count; then the output.
    Fast(u64, O),
}
use std::hash::{BuildHasherDefault, Hasher};

/// Hasher of the op table: ids are consecutive `u32`s, so a multiplicative mix is
/// enough (no SipHash on the AM path).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    #[inline]
    fn write_u32(&mut self, v: u32) {
        self.0 = u64::from(v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// What completes an operation.
#[derive(Debug)]
pub(crate) enum Done {
    /// Not decided yet (the event is made once the first unit has started).
    Unset,
    /// The completer of the operation's event.
    Event(OpCompleter),
    /// An implicit-event operation counted in its NBI category.
    Count(Cat),
}

/// One operation in flight (see the module documentation).
#[derive(Debug)]
pub(crate) struct Op {
    /// The peer the operation targets (for the hang report).
    pub(crate) peer: EpAddr,
    /// What it is (for the hang report).
    pub(crate) what: &'static str,
    /// Outstanding units: acknowledgements (puts, memset, atomics), bytes (gets),
    /// native tickets.
    pub(crate) remaining: usize,
    /// Every unit has been started.
    pub(crate) sealed: bool,
    /// Failed while starting: only its native tickets are still awaited; replies are
    /// dropped.
    pub(crate) abandoned: bool,
    /// Get destination (null for other operations) and its length in bytes.
    pub(crate) dst: *mut u8,
    pub(crate) dst_len: usize,
    /// A heap word the operation owns (from `Box::into_raw`; null if none): the
    /// destination of a value get or a native fetching atomic.
    pub(crate) land: *mut u64,
    /// A borrowed fetch destination: where the fetched value is stored at completion,
    /// and its width.
    pub(crate) result: Option<(*mut u8, usize)>,
    /// The fetched word (AM atomics).
    pub(crate) word: u64,
    pub(crate) done: Done,
    /// Why an abandoned operation failed (given to its event).
    pub(crate) error: Option<RmaError>,
    /// The owned destination of a counted (NBI) get, freed at completion.
    pub(crate) keep: Option<Box<dyn std::any::Any + Send>>,
}

impl Drop for Op {
    fn drop(&mut self) {
        if !self.land.is_null() {
            // SAFETY: from `Box::into_raw` (module `# Safety`); an entry is dropped
            // only when nothing writes the word any more.
            drop(unsafe { Box::from_raw(self.land) });
        }
    }
}

/// Where the completion of an operation is handed out: the value its event holds (an
/// owned destination), how the event's output is made, and the slot that receives the
/// event once it is made ([`OpTable::open`]).
#[derive(Debug)]
pub(crate) struct Handout<'a, O: Send + 'static> {
    pub(crate) hold: &'a mut Option<O>,
    pub(crate) finish: Finish<O>,
    pub(crate) ev: &'a mut Option<Event<O, RmaError>>,
}

impl<O: Send + 'static> Handout<'_, O> {
    /// The step of an operation whose units have all started: complete when its event
    /// is, or now (no event was made: nothing is outstanding, or it is counted) with
    /// the output made of `d`.
    pub(crate) fn step(self, d: Data) -> Step<O> {
        match self.ev.take() {
            Some(e) => Step::Done(e),
            None => Step::Now((self.finish)(d, self.hold.take())),
        }
    }
}

/// The operations in flight of one endpoint (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct OpTable {
    map: HashMap<u32, Op, BuildHasherDefault<IdHasher>>,
    /// The last id handed out.
    next: u32,
    /// Counted implicit-event entries in flight, per [`Cat`].
    pub(crate) counted: [usize; 3],
}

impl OpTable {
    /// The entry `id`.
    #[inline]
    pub(crate) fn get(&self, id: &u32) -> Option<&Op> {
        self.map.get(id)
    }
    /// The entry `id`, mutably.
    #[inline]
    pub(crate) fn get_mut(&mut self, id: &u32) -> Option<&mut Op> {
        self.map.get_mut(id)
    }
    /// Removes entry `id` without completing it (nothing of it was started).
    #[inline]
    pub(crate) fn remove(&mut self, id: &u32) -> Option<Op> {
        self.map.remove(id)
    }
    /// True if entry `id` is in flight.
    pub(crate) fn contains_key(&self, id: &u32) -> bool {
        self.map.contains_key(id)
    }
    /// Entries in flight.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
    /// Every entry in flight.
    pub(crate) fn values(&self) -> impl Iterator<Item = &Op> {
        self.map.values()
    }

    /// A new, unsealed entry with nothing outstanding (never id 0, which names no
    /// entry: [`Job::entry`](crate::engine::Job)).
    pub(crate) fn new_op(
        &mut self,
        peer: EpAddr,
        what: &'static str,
        dst: *mut u8,
        dst_len: usize,
        land: *mut u64,
    ) -> u32 {
        loop {
            self.next = self.next.wrapping_add(1);
            let id = self.next;
            if id == 0 {
                continue;
            }
            if let std::collections::hash_map::Entry::Vacant(v) = self.map.entry(id) {
                v.insert(Op {
                    peer,
                    what,
                    remaining: 0,
                    sealed: false,
                    abandoned: false,
                    dst,
                    dst_len,
                    land,
                    result: None,
                    word: 0,
                    done: Done::Unset,
                    error: None,
                    keep: None,
                });
                return id;
            }
        }
    }

    /// Decides what completes `id` once its first unit has started: the event of
    /// `ev` (made now, holding `hold`), or, for an implicit-event operation counted in
    /// a category (`counted`: only in mode NBI), the category's counter. Nothing if
    /// already decided.
    pub(crate) fn open<C: Conduit, O: Send + 'static>(
        &mut self,
        cx: &mut Cx<'_, C>,
        id: u32,
        counted: Option<Cat>,
        out: &mut Handout<'_, O>,
    ) {
        let Some(op) = self.map.get_mut(&id) else {
            return;
        };
        if !matches!(op.done, Done::Unset) {
            return;
        }
        match counted {
            Some(cat) => {
                op.done = Done::Count(cat);
                if let Some(h) = out.hold.take() {
                    op.keep = Some(Box::new(h));
                }
                self.counted[cat as usize] += 1;
            }
            _ => {
                let (e, c) = cx.pending(out.hold.take(), out.finish);
                op.done = Done::Event(c);
                *out.ev = Some(e);
            }
        }
    }

    /// `n` more units of `id` are outstanding.
    #[inline]
    pub(crate) fn bump(&mut self, id: u32, n: usize) {
        if let Some(op) = self.map.get_mut(&id) {
            op.remaining += n;
        }
    }

    /// `n` units of `id` are done; completes it if that was the last of a sealed entry.
    /// False if there is no such entry or it had fewer units outstanding.
    pub(crate) fn credit(&mut self, id: u32, n: usize) -> bool {
        let Some(op) = self.map.get_mut(&id) else {
            return false;
        };
        if op.remaining < n {
            return false;
        }
        op.remaining -= n;
        if op.sealed && op.remaining == 0 {
            self.complete(id);
        }
        true
    }

    /// Every unit of `id` has started; completes it if none is outstanding. Returns
    /// the fetched or landed word if it completed now.
    pub(crate) fn seal(&mut self, id: u32) -> Option<u64> {
        let op = self.map.get_mut(&id)?;
        op.sealed = true;
        if op.remaining == 0 {
            return self.complete(id);
        }
        None
    }

    /// Removes a finished entry and completes its event or counter; returns its word.
    pub(crate) fn complete(&mut self, id: u32) -> Option<u64> {
        let mut op = self.map.remove(&id)?;
        if !op.land.is_null() {
            // SAFETY: the entry owns the word and every writer is done (complete).
            op.word = unsafe { op.land.read() };
        }
        if let Some((p, n)) = op.result {
            // SAFETY: a borrowed fetch destination outlives its operation (module
            // `# Safety`); `n` is the width of its element.
            unsafe { crate::aop::store_word(p, n, op.word) };
        }
        match std::mem::replace(&mut op.done, Done::Unset) {
            Done::Event(c) => match op.error.take() {
                Some(e) if op.abandoned => c.fail(e),
                _ if op.abandoned => drop(c),
                _ => c.done(Data::Word(op.word)),
            },
            Done::Count(cat) => self.counted[cat as usize] -= 1,
            Done::Unset => {}
        }
        Some(op.word)
    }

    /// After an error while starting `id`: waits only for its `native` units already
    /// started; replies are dropped. True if the entry is still in flight.
    pub(crate) fn abandon(&mut self, id: u32, err: RmaError, native: usize) -> bool {
        let Some(op) = self.map.get_mut(&id) else {
            return false;
        };
        op.abandoned = true;
        op.error = Some(err);
        op.sealed = true;
        op.remaining = native;
        if native == 0 {
            self.complete(id);
            return false;
        }
        true
    }
}
