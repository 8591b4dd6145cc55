//! Active-message data-path cases (the semantics of GASNet-EX's `testam`).

use super::probe::with_conduit;
use super::util::{Errs, Pattern, args_for, barrier, bytes_of, lock, sent, wait_for};
use crate::rng::hash_words;
use gex_core::spi::{Conduit, ConduitEp};
use gex_core::{Am, Body, Category, Client, EpAddr, HandlerId, Kind, Limits, Nb, Token};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Registers `handler` at `id`, run on the handlers' shared state `st`.
fn register_on<C: Conduit, S: Send + Sync + 'static>(
    ep: &mut gex_core::Endpoint<C>,
    id: HandlerId,
    st: &Arc<S>,
    handler: fn(&S, &mut Token<'_>, Am<'_>),
) -> Result<(), String> {
    let st = st.clone();
    ep.register_at(id.index(), move |t: &mut Token<'_>, am: Am<'_>| {
        handler(&st, t, am)
    })
    .map_err(err)?;
    Ok(())
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Size {
    Zero,
    One,
    MaxMinus1,
    Max,
}

#[derive(Clone, Copy, Debug)]
struct Spec {
    cat: Category,
    nargs: usize,
    size: Size,
}

/// Every (category, argument count, size) triple; Short only with size zero. Under Miri
/// (`ci/miri.sh`) each (category, size) pair once, the argument count alternating
/// between 0 and `max_args` (Short: both), so that every category still sees both
/// extremes and every size.
fn specs(max_args: usize) -> Vec<Spec> {
    let mut v = Vec::new();
    for cat in [Category::Short, Category::Medium, Category::Long] {
        let sizes: &[Size] = if cat == Category::Short {
            &[Size::Zero]
        } else {
            &[Size::Zero, Size::One, Size::MaxMinus1, Size::Max]
        };
        if cfg!(miri) {
            for i in 0..sizes.len().max(2) {
                let nargs = if i % 2 == 0 { 0 } else { max_args };
                let size = sizes[i % sizes.len()];
                v.push(Spec { cat, nargs, size });
            }
            continue;
        }
        for nargs in 0..=max_args {
            for &size in sizes {
                v.push(Spec { cat, nargs, size });
            }
        }
    }
    v
}

/// Iteration `i` sends request `sched[i].0` and gets reply `sched[i].1`: every spec is
/// used once as a request and once as a reply, paired with a different category.
fn schedule(max_args: usize) -> Vec<(Spec, Spec)> {
    let s = specs(max_args);
    let k = s.len() / 3;
    (0..s.len()).map(|i| (s[i], s[(i + k) % s.len()])).collect()
}

/// Largest payload of `cat` towards a peer whose conduit limits are `lim` and whose
/// (target) segment is `seg` bytes.
fn max_for(cat: Category, lim: &Limits, seg: usize) -> usize {
    match cat {
        Category::Short => 0,
        Category::Medium => lim.max_medium,
        Category::Long => lim.max_long.min(seg),
    }
}

fn len_of(size: Size, max: usize) -> usize {
    match size {
        Size::Zero => 0,
        Size::One => 1.min(max),
        Size::MaxMinus1 => max.saturating_sub(1),
        Size::Max => max,
    }
}

fn long_offset(i: usize, mul: usize, seg: usize, len: usize) -> usize {
    (i * mul + 7) % (seg - len + 1)
}

/// What a received message must look like.
struct Expect {
    kind: Kind,
    src: EpAddr,
    cat: Category,
    nargs: usize,
    seed: u64,
    len: usize,
    offset: usize,
    #[allow(dead_code)]
    seg_base: usize,
}

fn verify(am: &Am<'_>, x: &Expect, pat: &Pattern) -> Option<String> {
    if am.kind() != x.kind || am.src() != x.src || am.category() != x.cat {
        return Some(format!(
            "got {:?} {:?} from {}, expected {:?} {:?} from {}",
            am.kind(),
            am.category(),
            am.src(),
            x.kind,
            x.cat,
            x.src
        ));
    }
    if am.args() != args_for(x.seed, x.nargs).as_slice() {
        return Some(format!(
            "{:?} {:?} with {} args: arguments differ ({} received)",
            x.kind,
            x.cat,
            x.nargs,
            am.args().len()
        ));
    }
    match x.cat {
        Category::Short => {
            (!am.payload().is_empty()).then(|| "Short AM with a payload".to_string())
        }
        Category::Medium => pat
            .diff(x.seed, x.len, am.payload())
            .map(|d| format!("Medium {:?}: {d}", x.kind)),
        Category::Long => {
            if am.offset() != x.offset {
                return Some(format!(
                    "Long {:?}: offset {} != {}",
                    x.kind,
                    am.offset(),
                    x.offset
                ));
            }
            if am.long().map(|l| (l.offset(), l.len())) != Some((x.offset, x.len)) {
                return Some(format!(
                    "Long {:?}: the payload is not described at offset {} with {} bytes",
                    x.kind, x.offset, x.len
                ));
            }
            pat.diff(x.seed, x.len, &bytes_of(am))
                .map(|d| format!("Long {:?} of {} at {}: {d}", x.kind, x.len, x.offset))
        }
    }
}

/// Per-rank view used by handlers: conduit limits towards every rank and segment lengths.
#[derive(Clone, Debug)]
struct View {
    me: u32,
    limits: Vec<Limits>,
    seg: Vec<usize>,
    #[allow(dead_code)]
    seg_base: usize,
}

impl View {
    fn new<C: Conduit>(client: &Client<C>, ep: &mut gex_core::Endpoint<C>) -> View {
        let n = client.size();
        let k = ep.index();
        View {
            me: client.rank(),
            limits: with_conduit(ep, |cx| {
                (0..n)
                    .map(|r| cx.conduit().limits(EpAddr::new(r, k)))
                    .collect()
            }),
            seg: client.layout().seg_len.clone(),
            seg_base: ep.segment().as_ptr() as usize,
        }
    }
    /// What message `i` of [`am_categories`], of `spec` and `kind`, from `src` to this
    /// rank must look like: its length within the limits from `src` into this rank's
    /// segment, its seed, and for a Long the offset the sender chose (stride 61 for
    /// requests, 37 for replies).
    fn expect(&self, kind: Kind, src: EpAddr, spec: Spec, i: usize) -> Expect {
        let (dir, stride) = match kind {
            Kind::Request => (0, 61),
            Kind::Reply => (1, 37),
        };
        let my_seg = self.seg[self.me as usize];
        let len = len_of(
            spec.size,
            max_for(spec.cat, &self.limits[src.rank as usize], my_seg),
        );
        Expect {
            kind,
            src,
            cat: spec.cat,
            nargs: spec.nargs,
            seed: cat_seed(src.rank, self.me, i, dir),
            len,
            offset: if spec.cat == Category::Long {
                long_offset(i, stride, my_seg, len)
            } else {
                0
            },
            seg_base: self.seg_base,
        }
    }
    fn largest(&self) -> usize {
        let mut m = 0;
        for (l, s) in self.limits.iter().zip(&self.seg) {
            m = m
                .max(l.max_medium)
                .max(l.max_long.min(*s))
                .max(l.max_long.min(self.seg[self.me as usize]));
        }
        m
    }
}

/// Handlers of [`am_categories`]: requests to `CAT_RQ`, replies to `CAT_RP`.
const CAT_RQ: HandlerId = HandlerId::at(140);
const CAT_RP: HandlerId = HandlerId::at(141);

/// The payload seed of message `i` from rank `s` to rank `d` in direction `dir` (0:
/// request, 1: reply) of [`am_categories`].
fn cat_seed(s: u32, d: u32, i: usize, dir: u64) -> u64 {
    hash_words(&[s as u64, d as u64, i as u64, dir])
}

/// What [`am_categories`] and its handlers share.
struct Cats {
    view: View,
    sched: Vec<(Spec, Spec)>,
    pat: Pattern,
    errs: Errs,
    /// Requests received, per source (the next iteration number).
    next: Mutex<HashMap<EpAddr, usize>>,
    /// The request outstanding: destination and iteration.
    cur: Mutex<Option<(EpAddr, usize)>>,
    /// Replies received.
    done: AtomicU64,
}

impl Cats {
    /// A request: verified against the schedule, answered with the scheduled reply
    /// into the requester's segment.
    fn on_request(&self, t: &mut Token<'_>, am: Am<'_>) {
        let (view, sched, pat, errs, next) =
            (&self.view, &self.sched, &self.pat, &self.errs, &self.next);
        let src = am.src();
        let s = src.rank as usize;
        let i = {
            let mut g = lock(next);
            let e = g.entry(src).or_insert(0);
            *e += 1;
            *e - 1
        };
        let Some(&(rq, rp)) = sched.get(i) else {
            errs.push(format!("unexpected request #{i} from {src}"));
            return;
        };
        if !t.is_request() || t.has_replied() || t.src() != src {
            errs.push("request token in a wrong state".to_string());
        }
        let x = view.expect(Kind::Request, src, rq, i);
        if let Some(d) = verify(&am, &x, pat) {
            errs.push(format!("iteration {i} request from {src}: {d}"));
        }
        // Reply per schedule into the requester's segment.
        let rseed = cat_seed(view.me, src.rank, i, 1);
        let rlen = len_of(rp.size, max_for(rp.cat, &view.limits[s], view.seg[s]));
        let args = args_for(rseed, rp.nargs);
        let payload = pat.get(rseed, rlen);
        let r = match rp.cat {
            Category::Short => t.reply(CAT_RP, Body::short(&args)),
            Category::Medium => t.reply(CAT_RP, Body::medium(&args, payload)),
            Category::Long => t.reply(
                CAT_RP,
                Body::long(&args, payload, long_offset(i, 37, view.seg[s], rlen)),
            ),
        };
        if let Err(e) = r {
            errs.push(format!(
                "iteration {i}: reply {rp:?} ({rlen} bytes) to {src} failed: {e}"
            ));
        } else if !t.has_replied() {
            errs.push("has_replied() false after replying".to_string());
        }
    }

    /// A reply: verified against the request outstanding.
    fn on_reply(&self, t: &mut Token<'_>, am: Am<'_>) {
        let (view, sched, pat, errs, cur, done) = (
            &self.view,
            &self.sched,
            &self.pat,
            &self.errs,
            &self.cur,
            &self.done,
        );
        let Some((dst, i)) = *lock(cur) else {
            errs.push(format!(
                "reply from {} with no request outstanding",
                am.src()
            ));
            return;
        };
        if t.is_request() {
            errs.push("reply token claims to be a request".to_string());
        }
        let rp = sched[i].1;
        let x = view.expect(Kind::Reply, dst, rp, i);
        if let Some(e) = verify(&am, &x, pat) {
            errs.push(format!("iteration {i} reply from {dst}: {e}"));
        }
        done.fetch_add(1, Ordering::Release);
    }
}

/// Every category x every argument count `0..=max_args` x payload sizes 0, 1, max-1
/// and max, as request and as reply; contents, arguments, categories, kinds, sources,
/// Long offsets and the Long payload's address are verified. One message in flight at
/// a time: rank `t` sends to its right neighbour and to itself during turn `t`. (Under
/// Miri: each size once, with 0 or `max_args` arguments, to the right neighbour only.)
pub(crate) fn am_categories<C: Conduit>(client: &Client<C>) -> Result<(), String> {
    let (me, n) = (client.rank(), client.size());
    let mut ep = client.endpoint(0).map_err(err)?;
    let view = View::new(client, &mut ep);
    let st = Arc::new(Cats {
        sched: schedule(ep.max_args()),
        pat: Pattern::new(view.largest()),
        view,
        errs: Errs::new(),
        next: Mutex::default(),
        cur: Mutex::default(),
        done: AtomicU64::new(0),
    });
    let (view, sched, pat, errs, next, cur, done) = (
        &st.view, &st.sched, &st.pat, &st.errs, &st.next, &st.cur, &st.done,
    );
    let seed = cat_seed;
    register_on(&mut ep, CAT_RQ, &st, Cats::on_request)?;
    register_on(&mut ep, CAT_RP, &st, Cats::on_reply)?;
    barrier(&mut ep)?;
    // The right neighbour, and this rank itself (not under Miri, where self-sends are
    // left to `ping_pong_all_pairs`).
    let to_self = n > 1 && !cfg!(miri);
    let mut dsts = vec![EpAddr::rank((me + 1) % n)];
    if to_self {
        dsts.push(EpAddr::rank(me));
    }
    for turn in 0..n {
        if turn == me {
            for &dst in &dsts {
                let d = dst.rank as usize;
                for (i, &(rq, _)) in sched.iter().enumerate() {
                    *lock(cur) = Some((dst, i));
                    let before = done.load(Ordering::Acquire);
                    let len = len_of(rq.size, max_for(rq.cat, &view.limits[d], view.seg[d]));
                    let s = seed(me, dst.rank, i, 0);
                    let args = args_for(s, rq.nargs);
                    let payload = pat.get(s, len);
                    let what = format!("iteration {i}: request {rq:?} ({len} bytes) to {dst}");
                    let r = match rq.cat {
                        Category::Short => ep.request(dst, CAT_RQ, Body::short(&args)),
                        Category::Medium => ep.request(dst, CAT_RQ, Body::medium(&args, payload)),
                        Category::Long => ep.request(
                            dst,
                            CAT_RQ,
                            Body::long(&args, payload, long_offset(i, 61, view.seg[d], len)),
                        ),
                    };
                    sent(r, &what)?;
                    wait_for(&mut ep, &format!("the reply of {what}"), || {
                        done.load(Ordering::Acquire) > before
                    })?;
                }
            }
            *lock(cur) = None;
        }
        barrier(&mut ep)?;
    }
    errs.result()?;
    let expected: Vec<EpAddr> = if to_self {
        vec![EpAddr::rank((me + n - 1) % n), EpAddr::rank(me)]
    } else {
        vec![EpAddr::rank((me + n - 1) % n)]
    };
    let got = lock(next).clone();
    for src in expected {
        if got.get(&src).copied().unwrap_or(0) != sched.len() {
            return Err(format!(
                "received {:?} requests from {src}, expected {}",
                got.get(&src),
                sched.len()
            ));
        }
    }
    if got.len() != dsts.len() {
        return Err(format!(
            "requests arrived from unexpected sources: {:?}",
            got.keys().collect::<Vec<_>>()
        ));
    }
    Ok(())
}

/// Handlers of [`ping_pong_all_pairs`]: pings to `PP_RQ`, pongs to `PP_RP`.
const PP_RQ: HandlerId = HandlerId::at(150);
const PP_RP: HandlerId = HandlerId::at(151);
/// The categories of [`ping_pong_all_pairs`], by index in the arguments.
const PP_CATS: [Category; 3] = [Category::Short, Category::Medium, Category::Long];

/// The arguments of a ping or a pong of [`ping_pong_all_pairs`], `[sender, round,
/// category index, len]`: the last three, if there are four and the first names the
/// message's source.
fn args_of(am: &Am<'_>) -> Option<(u32, usize, usize)> {
    let a = am.args();
    (a.len() == 4 && a[0] == am.src().rank).then(|| (a[1], a[2] as usize, a[3] as usize))
}

/// What [`ping_pong_all_pairs`] and its handlers share.
struct PingPong {
    n: u32,
    view: View,
    pat: Pattern,
    errs: Errs,
    /// Pings handled.
    handled: AtomicU64,
    /// Pongs received.
    replies: AtomicU64,
}

impl PingPong {
    /// The bytes of each rank's slot in either half of rank `rank`'s segment.
    fn slot(&self, rank: usize) -> usize {
        self.view.seg[rank] / 2 / self.n as usize
    }

    /// Where rank `sender`'s pongs land in rank `rank`'s segment: `sender`'s slot in
    /// its reply half.
    fn reply_offset(&self, rank: usize, sender: u32) -> usize {
        self.view.seg[rank] / 2 + self.slot(rank) * sender as usize
    }

    /// A ping: verified (category, kind, payload, Long offset) and echoed in the same
    /// category into the requester's reply half.
    fn on_ping(&self, t: &mut Token<'_>, am: Am<'_>) {
        let src = am.src();
        let Some((round, ci, len)) = args_of(&am) else {
            self.errs
                .push(format!("request from {src} with args {:?}", am.args()));
            return;
        };
        let cat = PP_CATS[ci % 3];
        let s = hash_words(&[
            src.rank as u64,
            self.view.me as u64,
            round as u64,
            ci as u64,
        ]);
        let my_slot = self.slot(self.view.me as usize);
        if am.category() != cat || am.kind() != Kind::Request {
            self.errs.push(format!(
                "request from {src}: category {:?} / kind {:?}",
                am.category(),
                am.kind()
            ));
        }
        let bad = match cat {
            Category::Short => (!am.payload().is_empty()).then(|| "payload on Short".to_string()),
            Category::Medium => self.pat.diff(s, len, am.payload()),
            Category::Long => {
                let off = my_slot * src.rank as usize;
                if am.offset() != off {
                    Some(format!("Long offset {} != {off}", am.offset()))
                } else {
                    self.pat.diff(s, len, &bytes_of(&am))
                }
            }
        };
        if let Some(b) = bad {
            self.errs
                .push(format!("request round {round} {cat:?} from {src}: {b}"));
        }
        // Echo in the same category.
        let peer = src.rank as usize;
        let rlen = match cat {
            Category::Long => self
                .slot(peer)
                .min(self.view.limits[peer].max_long)
                .min(len + 1),
            Category::Medium => self.view.limits[peer]
                .max_medium
                .min(2 + 131 * round as usize),
            Category::Short => 0,
        };
        let rs = hash_words(&[
            self.view.me as u64,
            src.rank as u64,
            round as u64,
            ci as u64,
            1,
        ]);
        let args = [self.view.me, round, ci as u32, rlen as u32];
        let payload = self.pat.get(rs, rlen);
        let r = match cat {
            Category::Short => t.reply(PP_RP, Body::short(&args)),
            Category::Medium => t.reply(PP_RP, Body::medium(&args, payload)),
            Category::Long => {
                let off = self.reply_offset(peer, self.view.me);
                t.reply(PP_RP, Body::long(&args, payload, off))
            }
        };
        if let Err(e) = r {
            self.errs.push(format!("reply to {src}: {e}"));
        }
        self.handled.fetch_add(1, Ordering::Release);
    }

    /// A pong: verified against the ping it answers.
    fn on_pong(&self, am: Am<'_>) {
        let src = am.src();
        let Some((round, ci, len)) = args_of(&am).filter(|_| am.kind() == Kind::Reply) else {
            self.errs.push(format!(
                "reply from {src} with args {:?} kind {:?}",
                am.args(),
                am.kind()
            ));
            return;
        };
        let rs = hash_words(&[
            src.rank as u64,
            self.view.me as u64,
            round as u64,
            ci as u64,
            1,
        ]);
        let bad = if am.category() != PP_CATS[ci % 3] {
            Some(format!("category {:?}", am.category()))
        } else if am.category() == Category::Long
            && am.offset() != self.reply_offset(self.view.me as usize, src.rank)
        {
            Some(format!("Long reply offset {}", am.offset()))
        } else if am.category() == Category::Short {
            (!am.payload().is_empty()).then(|| "payload on Short".to_string())
        } else {
            self.pat.diff(rs, len, &bytes_of(&am))
        };
        if let Some(b) = bad {
            self.errs
                .push(format!("reply round {round} from {src}: {b}"));
        }
        self.replies.fetch_add(1, Ordering::Release);
    }
}

/// Ping-pong between every pair of ranks (self included), all ranks at once: each
/// rank sends Short, Medium and Long requests to every rank, one at a time, waiting for
/// each reply (same category) before the next. Requests land in the request half of
/// the target's segment, replies in the reply half of the requester's, in per-peer
/// slots.
pub(crate) fn ping_pong_all_pairs<C: Conduit>(client: &Client<C>) -> Result<(), String> {
    const ROUNDS: u32 = if cfg!(miri) { 2 } else { 6 };
    let (me, n) = (client.rank(), client.size());
    let mut ep = client.endpoint(0).map_err(err)?;
    let view = View::new(client, &mut ep);
    let st = Arc::new(PingPong {
        n,
        pat: Pattern::new(view.largest()),
        view,
        errs: Errs::new(),
        handled: AtomicU64::new(0),
        replies: AtomicU64::new(0),
    });
    let (view, pat, errs, handled, replies) =
        (&st.view, &st.pat, &st.errs, &st.handled, &st.replies);
    let cats = PP_CATS;
    // Lengths travel in the arguments: [sender, round, category, len].
    register_on(&mut ep, PP_RQ, &st, PingPong::on_ping)?;
    register_on(&mut ep, PP_RP, &st, |st, _, am| st.on_pong(am))?;
    barrier(&mut ep)?;
    let mut expected_replies = 0;
    for round in 0..ROUNDS {
        for k in 0..n {
            let d = ((me + k + round) % n) as usize;
            let dst = EpAddr::rank(d as u32);
            for (ci, &cat) in cats.iter().enumerate() {
                let len = match cat {
                    Category::Long => st
                        .slot(d)
                        .min(view.limits[d].max_long)
                        .min(1 + 97 * round as usize),
                    Category::Medium => view.limits[d].max_medium.min(1 + 131 * round as usize),
                    Category::Short => 0,
                };
                let s = hash_words(&[me as u64, d as u64, round as u64, ci as u64]);
                let args = [me, round, ci as u32, len as u32];
                let payload = pat.get(s, len);
                let what = format!("round {round} {cat:?} ping to {dst}");
                let r = match cat {
                    Category::Short => ep.request(dst, PP_RQ, Body::short(&args)),
                    Category::Medium => ep.request(dst, PP_RQ, Body::medium(&args, payload)),
                    Category::Long => ep.request(
                        dst,
                        PP_RQ,
                        Body::long(&args, payload, st.slot(d) * me as usize),
                    ),
                };
                sent(r, &what)?;
                expected_replies += 1;
                wait_for(&mut ep, &format!("the pong of {what}"), || {
                    replies.load(Ordering::Acquire) >= expected_replies
                })?;
            }
        }
    }
    let want = (ROUNDS * 3 * n) as u64;
    wait_for(&mut ep, "every peer's pings", || {
        handled.load(Ordering::Acquire) >= want
    })?;
    barrier(&mut ep)?;
    errs.result()?;
    let (h, r) = (
        handled.load(Ordering::Acquire),
        replies.load(Ordering::Acquire),
    );
    if h != want || r != expected_replies {
        return Err(format!(
            "handled {h} pings (want {want}), got {r} pongs (want {expected_replies})"
        ));
    }
    Ok(())
}

/// Long requests from every rank to every rank at many offsets (unaligned, tiny and
/// large, zero-length, ending exactly at the segment's end); handlers check offset,
/// address and bytes, and afterwards every rank checks its whole segment image, so
/// bytes outside the targeted ranges must be untouched.
pub(crate) fn long_offsets<C: Conduit>(client: &Client<C>) -> Result<(), String> {
    const H: HandlerId = HandlerId::at(160);
    let (me, n) = (client.rank(), client.size());
    let mut ep = client.endpoint(0).map_err(err)?;
    let view = Arc::new(View::new(client, &mut ep));
    let pat = Arc::new(Pattern::new(view.largest()));
    let errs = Errs::new();
    let got = Arc::new(AtomicU64::new(0));
    // Pieces (offset, len) that `s` sends into `d`'s segment.
    let pieces = move |view: &View, s: u32, d: usize| -> Vec<(usize, usize)> {
        let seg = view.seg[d];
        let maxl = view.limits[d].max_long.min(seg);
        let tail = 64.min(seg);
        let slot = (seg - tail) / n as usize;
        let mut v = Vec::new();
        let mut cur = slot * s as usize;
        let end = cur + slot;
        for (k, len) in [1usize, 2, 3, 7, 8, 9, 63, 64, 65, 255, 1000, 4096, 0, 17]
            .into_iter()
            .enumerate()
        {
            let len = len.min(maxl);
            let at = cur + 1 + k % 3;
            if at + len > end {
                break;
            }
            v.push((at, len));
            cur = at + len;
        }
        if s == n - 1 && tail > 0 {
            let len = (tail - 1).min(maxl);
            v.push((seg - len, len));
            v.push((seg, 0));
        }
        v
    };
    let seed = |s: u32, d: usize, k: usize| hash_words(&[s as u64, d as u64, k as u64, 77]);
    {
        let (view, pat, errs, got) = (view.clone(), pat.clone(), errs.clone(), got.clone());
        ep.register_at(H.index(), move |_t: &mut Token<'_>, am: Am<'_>| {
            let src = am.src();
            let a = am.args();
            let me = view.me as usize;
            let Some((off, len)) = a
                .get(1)
                .and_then(|&k| pieces(&view, src.rank, me).get(k as usize).copied())
            else {
                errs.push(format!("Long from {src} with args {a:?}"));
                return;
            };
            let k = a[1] as usize;
            if am.category() != Category::Long || am.offset() != off {
                errs.push(format!(
                    "piece {k} from {src}: {:?} at {} (expected Long at {off})",
                    am.category(),
                    am.offset()
                ));
            } else if am.long().map(|l| (l.offset(), l.len())) != Some((off, len)) {
                errs.push(format!(
                    "piece {k} from {src}: payload not described at offset {off} with {len} bytes"
                ));
            } else if let Some(d) = pat.diff(seed(src.rank, me, k), len, &bytes_of(&am)) {
                errs.push(format!("piece {k} from {src} ({len} at {off}): {d}"));
            }
            got.fetch_add(1, Ordering::Release);
        })
        .map_err(err)?;
    }
    barrier(&mut ep)?;
    for k in 0..n {
        let d = ((me + k) % n) as usize;
        for (i, (off, len)) in pieces(&view, me, d).into_iter().enumerate() {
            let payload = pat.get(seed(me, d, i), len);
            sent(
                ep.request(
                    EpAddr::rank(d as u32),
                    H,
                    Body::long(&[me, i as u32], payload, off),
                ),
                &format!("piece {i} to rank {d}"),
            )?;
        }
    }
    let my = me as usize;
    let want: u64 = (0..n).map(|s| pieces(&view, s, my).len() as u64).sum();
    wait_for(&mut ep, "every Long piece", || {
        got.load(Ordering::Acquire) >= want
    })?;
    barrier(&mut ep)?;
    errs.result()?;
    if got.load(Ordering::Acquire) != want {
        return Err(format!(
            "{} Long requests arrived, {want} were sent",
            got.load(Ordering::Acquire)
        ));
    }
    // The whole segment: the pieces where they were sent, zeros elsewhere. (One
    // comparison first: a loop over every byte is slow under Miri.)
    let seg_len = view.seg[my];
    let mut image = vec![0u8; seg_len];
    for s in 0..n {
        for (i, (off, len)) in pieces(&view, s, my).into_iter().enumerate() {
            image[off..off + len].copy_from_slice(pat.get(seed(s, my, i), len));
        }
    }
    let mut actual = vec![0u8; seg_len];
    ep.segment().read(0, &mut actual).map_err(err)?;
    if actual == image {
        return Ok(());
    }
    if let Some(p) = actual.iter().zip(&image).position(|(a, b)| a != b) {
        return Err(format!(
            "segment byte {p} is {:#04x}, expected {:#04x} after all Long requests",
            actual[p], image[p]
        ));
    }
    Ok(())
}

/// Payload sources may be reused as soon as injection returns: Medium and Long
/// requests are sent from one buffer overwritten right after each call; the
/// local-completion variant gives its buffer back intact.
pub(crate) fn payload_source_reuse<C: Conduit>(client: &Client<C>) -> Result<(), String> {
    const H: HandlerId = HandlerId::at(170);
    const K: u32 = if cfg!(miri) { 8 } else { 40 };
    let (me, n) = (client.rank(), client.size());
    let mut ep = client.endpoint(0).map_err(err)?;
    let view = Arc::new(View::new(client, &mut ep));
    let dst = EpAddr::rank((me + 1) % n);
    let d = dst.rank as usize;
    let mlen = view.limits[d].max_medium.min(512);
    let llen = (view.seg[d] / n as usize / K as usize)
        .min(view.limits[d].max_long)
        .min(512);
    let pat = Arc::new(Pattern::new(mlen.max(llen) + 1));
    let errs = Errs::new();
    let got = Arc::new(AtomicU64::new(0));
    let seed = |s: u32, k: u32, what: u64| hash_words(&[s as u64, k as u64, what]);
    {
        let (view, pat, errs, got) = (view.clone(), pat.clone(), errs.clone(), got.clone());
        ep.register_at(H.index(), move |_t: &mut Token<'_>, am: Am<'_>| {
            let src = am.src();
            let a = am.args();
            let (k, what, len) = (a[0], a[1] as u64, a[2] as usize);
            if am.category() == Category::Long {
                let slot = view.seg[view.me as usize] / n as usize;
                let off = slot * src.rank as usize + k as usize * len;
                if am.offset() != off {
                    errs.push(format!("Long {k} from {src} at {} (expected {off})", am.offset()));
                }
            }
            if let Some(e) = pat.diff(seed(src.rank, k, what), len, &bytes_of(&am)) {
                errs.push(format!("message {k}/{what} from {src}: {e} (was the source buffer read after injection returned?)"));
            }
            got.fetch_add(1, Ordering::Release);
        })
        .map_err(err)?;
    }
    barrier(&mut ep)?;
    let slot = view.seg[d] / n as usize;
    let mut buf = vec![0u8; mlen.max(llen)];
    for k in 0..K {
        buf[..mlen].copy_from_slice(pat.get(seed(me, k, 0), mlen));
        sent(
            ep.request(dst, H, Body::medium(&[k, 0, mlen as u32], &buf[..mlen])),
            "medium",
        )?;
        buf.fill(0xee);
        buf[..llen].copy_from_slice(pat.get(seed(me, k, 1), llen));
        let off = slot * me as usize + k as usize * llen;
        sent(
            ep.request(dst, H, Body::long(&[k, 1, llen as u32], &buf[..llen], off)),
            "long",
        )?;
        buf.fill(0xdd);
        let owned = pat.get(seed(me, k, 2), mlen).to_vec();
        let ev = ep
            .request_owned(dst, H, Body::medium(&[k, 2, mlen as u32], owned), Nb)
            .map_err(err)?;
        let back = ep.wait(ev).map_err(err)?;
        if back.as_slice() != pat.get(seed(me, k, 2), mlen) {
            return Err("request_owned gave back a different buffer".into());
        }
    }
    wait_for(&mut ep, "every message from the left neighbour", || {
        got.load(Ordering::Acquire) >= 3 * K as u64
    })?;
    barrier(&mut ep)?;
    errs.result()?;
    match got.load(Ordering::Acquire) {
        g if g == 3 * K as u64 => Ok(()),
        g => Err(format!("{g} messages arrived, {} were sent", 3 * K)),
    }
}
