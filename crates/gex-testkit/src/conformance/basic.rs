//! Setup, registration and validation cases.

use super::probe::with_conduit;
use super::util::{Errs, barrier, expect_err, sent, wait_for};
use gex_core::spi::Conduit;
use gex_core::spi::{ConduitEp, MIN_MAX_ARGS};
use gex_core::{
    Am, AmError, Body, Client, Endpoint, EpAddr, EpError, HandlerId, RegisterError, Token,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// Segments: every endpoint's segment has the agreed length, reads as zeros before
/// anyone writes it, round-trips local writes, and rejects out-of-range accesses.
/// Endpoints can be taken once each.
pub(crate) fn segment_basics<C: Conduit>(client: &Client<C>) -> Result<(), String> {
    let me = client.rank();
    let count = client.endpoint_count();
    let mut eps = Vec::new();
    for i in 0..count {
        eps.push(
            client
                .endpoint(i)
                .map_err(|e| format!("endpoint({i}): {e}"))?,
        );
    }
    expect_ep_err(client.endpoint(0).map(|_| ()), EpError::Taken(0))?;
    expect_ep_err(
        client.endpoint(count).map(|_| ()),
        EpError::NoSuchEndpoint {
            index: count,
            count,
        },
    )?;
    let seg_len = client.layout().seg_len[me as usize];
    for (i, ep) in eps.iter_mut().enumerate() {
        if ep.addr() != EpAddr::new(me, i as u16)
            || ep.index() != i as u16
            || ep.rank() != me
            || ep.size() != client.size()
        {
            return Err(format!(
                "endpoint {i} reports addr {} / index {} / size {}",
                ep.addr(),
                ep.index(),
                ep.size()
            ));
        }
        if ep.max_args() < MIN_MAX_ARGS {
            return Err(format!("max_args {} < {MIN_MAX_ARGS}", ep.max_args()));
        }
        let seg = ep.segment();
        if seg.len() != seg_len || ep.segment_len_of(me) != Some(seg_len) {
            return Err(format!(
                "EP {i}: segment length {} (layout says {seg_len})",
                seg.len()
            ));
        }
        let (base, len) = with_conduit(ep, |cx| cx.conduit().local_segment());
        if base.as_ptr() != ep.segment().as_ptr() || len != seg_len {
            return Err(format!(
                "EP {i}: local_segment disagrees with Endpoint::segment"
            ));
        }
        // Zero-filled.
        let seg = ep.segment();
        let mut buf = vec![0u8; 64 << 10];
        let zeros = vec![0u8; buf.len()];
        let mut off = 0;
        while off < seg_len {
            let n = buf.len().min(seg_len - off);
            seg.read(off, &mut buf[..n]).map_err(|e| e.to_string())?;
            // One comparison first: a loop over every byte is slow under Miri.
            if buf[..n] == zeros[..n] {
                off += n;
                continue;
            }
            if let Some(p) = buf[..n].iter().position(|&b| b != 0) {
                return Err(format!(
                    "EP {i}: segment byte {} is {:#x}, not zero, before any write",
                    off + p,
                    buf[p]
                ));
            }
            off += n;
        }
        // Local round trip at both ends.
        let data: Vec<u8> = (0..seg_len.min(16)).map(|k| k as u8 ^ 0xa5).collect();
        for at in [0, seg_len - data.len()] {
            seg.write(at, &data).map_err(|e| e.to_string())?;
            let mut back = vec![0; data.len()];
            seg.read(at, &mut back).map_err(|e| e.to_string())?;
            if back != data {
                return Err(format!(
                    "EP {i}: segment write/read round trip at {at} failed"
                ));
            }
        }
        let oos = |offset: usize, len: usize| AmError::OutOfSegment {
            dst: EpAddr::new(me, i as u16),
            offset,
            len,
            seg_len,
        };
        expect_err(
            seg.read(seg_len, &mut [0u8; 1]),
            &oos(seg_len, 1),
            "read past the end",
        )?;
        expect_err(
            seg.write(usize::MAX, &[1u8, 2]),
            &oos(usize::MAX, 2),
            "write with overflowing offset",
        )?;
    }
    for ep in &mut eps {
        barrier(ep)?;
    }
    Ok(())
}

/// A request with `body`, waiting for resources or (`imm`) not.
fn request<C: Conduit>(
    ep: &mut Endpoint<C>,
    imm: bool,
    dst: EpAddr,
    h: HandlerId,
    body: Body<'_>,
) -> Result<(), AmError> {
    if imm {
        ep.try_request(dst, h, body).map(drop)
    } else {
        ep.request(dst, h, body)
    }
}

fn expect_ep_err(r: Result<(), EpError>, want: EpError) -> Result<(), String> {
    match r {
        Err(e) if e == want => Ok(()),
        other => Err(format!("expected Err({want:?}), got {other:?}")),
    }
}

/// Registration: index 0 and the reserved range are refused, a second registration
/// at an index is refused and does not replace the first handler.
pub(crate) fn register_errors<C: Conduit>(client: &Client<C>) -> Result<(), String> {
    let mut ep = client.endpoint(0).map_err(|e| e.to_string())?;
    let noop = |_: &mut Token<'_>, _: Am<'_>| {};
    let reg = |r: Result<HandlerId, RegisterError>,
               want: Option<RegisterError>,
               what: &str|
     -> Result<(), String> {
        match (r, want) {
            (Ok(_), None) => Ok(()),
            (Err(e), Some(w)) if e == w => Ok(()),
            (r, w) => Err(format!("{what}: expected {w:?}, got {r:?}")),
        }
    };
    reg(
        ep.register_at(0, noop),
        Some(RegisterError::Zero),
        "register(0)",
    )?;
    for i in [1u8, 2, 15, 16, 64, 127] {
        reg(
            ep.register_at(i, noop),
            Some(RegisterError::Reserved(i)),
            &format!("register({i})"),
        )?;
        if i > 1 && ep.is_registered(i) {
            return Err(format!(
                "index {i} reads as registered after a refused registration"
            ));
        }
    }
    let first = Arc::new(AtomicU32::new(0));
    let second = Arc::new(AtomicU32::new(0));
    let (f, s) = (first.clone(), second.clone());
    if ep.is_registered(128) {
        return Err("index 128 registered before anything was registered".into());
    }
    reg(
        ep.register_at(128, move |_: &mut Token<'_>, _: Am<'_>| {
            f.fetch_add(1, Ordering::Relaxed);
        }),
        None,
        "register(128)",
    )?;
    reg(
        ep.register_at(128, move |_: &mut Token<'_>, _: Am<'_>| {
            s.fetch_add(1, Ordering::Relaxed);
        }),
        Some(RegisterError::AlreadyRegistered(128)),
        "second register(128)",
    )?;
    reg(ep.register_at(255, noop), None, "register(255)")?;
    reg(
        ep.register_at(255, noop),
        Some(RegisterError::AlreadyRegistered(255)),
        "second register(255)",
    )?;
    if !ep.is_registered(128) || !ep.is_registered(255) || ep.is_registered(200) {
        return Err("is_registered disagrees with the registrations made".into());
    }
    barrier(&mut ep)?;
    sent(
        ep.request(ep.addr(), HandlerId::at(128), Body::short(&[])),
        "self request",
    )?;
    wait_for(&mut ep, "the self request", || {
        first.load(Ordering::Relaxed) == 1
    })?;
    if second.load(Ordering::Relaxed) != 0 {
        return Err("a refused registration replaced the first handler".into());
    }
    barrier(&mut ep)
}

/// The same error `e` from a Short, a Medium (1 byte) and a Long (1 byte at offset 0)
/// request without arguments to handler `h` of `dst` (`imm`: not waiting); `what`
/// names the destination in the messages.
fn expect_err_all<C: Conduit>(
    ep: &mut Endpoint<C>,
    imm: bool,
    dst: EpAddr,
    h: HandlerId,
    e: &AmError,
    what: &str,
) -> Result<(), String> {
    expect_err(
        request(ep, imm, dst, h, Body::short(&[])),
        e,
        &format!("short {what}"),
    )?;
    expect_err(
        request(ep, imm, dst, h, Body::medium(&[], &[1])),
        e,
        &format!("medium {what}"),
    )?;
    expect_err(
        request(ep, imm, dst, h, Body::long(&[], &[1], 0)),
        e,
        &format!("long {what}"),
    )
}

/// Payload sizes and Long ranges refused by requests to handler `h` of `dst`, whose
/// segment has `seg_d` bytes (`imm`: not waiting): a Medium over `max_medium`, a Long
/// over the conduit's limit (or `max_long` equal to the segment), and Longs out of the
/// segment (past its end, overflowing offsets).
fn size_errors<C: Conduit>(
    ep: &mut Endpoint<C>,
    f: bool,
    dst: EpAddr,
    h: HandlerId,
    seg_d: usize,
) -> Result<(), String> {
    let maxm = ep.max_medium(dst);
    let big = vec![0u8; maxm + 1];
    expect_err(
        request(ep, f, dst, h, Body::medium(&[], &big)),
        &AmError::PayloadTooLarge {
            len: maxm + 1,
            max: maxm,
        },
        "medium over max_medium",
    )?;

    let climit = with_conduit(ep, |cx| cx.conduit().limits(dst).max_long);
    if climit < seg_d {
        let big = vec![0u8; climit + 1];
        expect_err(
            request(ep, f, dst, h, Body::long(&[], &big, 0)),
            &AmError::PayloadTooLarge {
                len: climit + 1,
                max: climit,
            },
            "long over max_long",
        )?;
    } else if ep.max_long(dst) != seg_d {
        return Err(format!(
            "max_long({dst}) = {} but the conduit limit {climit} >= segment {seg_d}",
            ep.max_long(dst)
        ));
    }
    let big = vec![0u8; seg_d + 1];
    let r = request(ep, f, dst, h, Body::long(&[], &big, 0));
    match r {
        Err(AmError::OutOfSegment { .. } | AmError::PayloadTooLarge { .. }) => {}
        other => {
            return Err(format!(
                "long of segment length + 1: expected OutOfSegment or PayloadTooLarge, got {other:?}"
            ));
        }
    }
    let mut ranges = vec![(seg_d, 1usize), (usize::MAX, 1), (usize::MAX - 2, 4)];
    if seg_d <= climit {
        ranges.push((1, seg_d));
    }
    if seg_d >= 3 {
        ranges.push((seg_d - 3, 4));
    }
    for (offset, len) in ranges {
        let payload = vec![0u8; len];
        let e = AmError::OutOfSegment {
            dst,
            offset,
            len,
            seg_len: seg_d,
        };
        expect_err(
            request(ep, f, dst, h, Body::long(&[], &payload, offset)),
            &e,
            &format!("long of {len} at {offset}"),
        )?;
    }
    Ok(())
}

/// Sender-side validation: bad rank, bad endpoint, too many args, unregistered
/// handler, payload too large, Long out of segment (also with offset overflow); with
/// waiting and not (`request`, `try_request`); a failed request sends nothing.
pub(crate) fn request_errors<C: Conduit>(client: &Client<C>) -> Result<(), String> {
    const H: HandlerId = HandlerId::at(128);
    let (me, n) = (client.rank(), client.size());
    let mut ep = client.endpoint(0).map_err(|e| e.to_string())?;
    let got = Arc::new(AtomicU32::new(0));
    let g = got.clone();
    ep.register_at(H.index(), move |_: &mut Token<'_>, _: Am<'_>| {
        g.fetch_add(1, Ordering::Relaxed);
    })
    .map_err(|e| e.to_string())?;
    barrier(&mut ep)?;

    let dst = EpAddr::rank((me + 1) % n);
    let eps_of = client
        .endpoint_capacity(dst.rank)
        .ok_or("no endpoint capacity for dst")?;
    let made_at_init = client.layout().eps[dst.rank as usize];
    let seg_d = ep
        .segment_len_of(dst.rank)
        .ok_or("no segment length for dst")?;
    let max_args = ep.max_args();
    let sent_before: u64 = ep.stats().sent.iter().sum();
    for f in [false, true] {
        let bad_rank = EpAddr::rank(n);
        let e = AmError::BadRank { rank: n, size: n };
        expect_err_all(&mut ep, f, bad_rank, H, &e, "to rank == size")?;
        let e = AmError::BadRank {
            rank: u32::MAX,
            size: n,
        };
        expect_err(
            request(&mut ep, f, EpAddr::rank(u32::MAX), H, Body::short(&[])),
            &e,
            "short to rank u32::MAX",
        )?;

        let bad_ep = EpAddr::new(dst.rank, eps_of);
        let e = AmError::BadEndpoint {
            dst: bad_ep,
            eps: eps_of,
        };
        expect_err_all(&mut ep, f, bad_ep, H, &e, "to a missing EP")?;
        // An index within the capacity that the peer has not created (conduits that
        // make endpoints at run time): a clear error, nothing sent.
        if client.runtime_endpoints() && made_at_init < eps_of {
            let absent = EpAddr::new(dst.rank, eps_of - 1);
            let e = AmError::Conduit(gex_core::spi::ConduitError::NoEndpoint {
                dst: absent,
                state: "not created yet",
            });
            expect_err_all(&mut ep, f, absent, H, &e, "to an EP not created yet")?;
        }
        let e = AmError::BadEndpoint {
            dst: EpAddr::new(dst.rank, u16::MAX),
            eps: eps_of,
        };
        expect_err(
            request(
                &mut ep,
                f,
                EpAddr::new(dst.rank, u16::MAX),
                H,
                Body::short(&[]),
            ),
            &e,
            "short to EP u16::MAX",
        )?;

        let many = vec![0u32; max_args + 1];
        let e = AmError::TooManyArgs {
            given: max_args + 1,
            max: max_args,
        };
        expect_err(
            request(&mut ep, f, dst, H, Body::short(&many)),
            &e,
            "short with too many args",
        )?;
        expect_err(
            request(&mut ep, f, dst, H, Body::medium(&many, &[])),
            &e,
            "medium with too many args",
        )?;
        expect_err(
            request(&mut ep, f, dst, H, Body::long(&many, &[], 0)),
            &e,
            "long with too many args",
        )?;

        for h in [0u8, 1, 5, 127, 200, 255] {
            // 1..=127 belong to gex itself (1 is the core barrier's, registered by the
            // core): clients may not send to them at all.
            let e = if (1..128).contains(&h) {
                AmError::ReservedHandler(h)
            } else {
                AmError::UnregisteredHandler(h)
            };
            let h = HandlerId::at_any(h);
            let what = format!("to unregistered handler {h}");
            expect_err_all(&mut ep, f, dst, h, &e, &what)?;
        }

        size_errors(&mut ep, f, dst, H, seg_d)?;
    }
    let sent_after: u64 = ep.stats().sent.iter().sum();
    if sent_after != sent_before {
        return Err(format!(
            "failed requests were counted as sent ({sent_before} -> {sent_after})"
        ));
    }
    // One valid request each; then nothing else may arrive.
    sent(ep.request(dst, H, Body::short(&[])), "valid request")?;
    wait_for(&mut ep, "one request from the left neighbour", || {
        got.load(Ordering::Relaxed) >= 1
    })?;
    barrier(&mut ep)?;
    barrier(&mut ep)?;
    match got.load(Ordering::Relaxed) {
        1 => Ok(()),
        k => Err(format!(
            "{k} requests arrived; failed requests must send nothing"
        )),
    }
}

/// Reply rules and reply validation, checked inside handlers: too many args,
/// unregistered handler, payload too large, Long out of the requester's segment,
/// then one good reply, then `AlreadyReplied` for every category; a reply handler
/// gets `ReplyFromReply` for every category. Failed replies send nothing.
pub(crate) fn reply_errors<C: Conduit>(client: &Client<C>) -> Result<(), String> {
    const RQ: HandlerId = HandlerId::at(130);
    const RP: HandlerId = HandlerId::at(131);
    let (me, n) = (client.rank(), client.size());
    let mut ep = client.endpoint(0).map_err(|e| e.to_string())?;
    let errs = Errs::new();
    let handled = Arc::new(AtomicU32::new(0));
    let replies = Arc::new(AtomicU32::new(0));
    let max_args = ep.max_args();
    let max_medium: Vec<usize> = (0..n).map(|r| ep.max_medium(EpAddr::rank(r))).collect();
    let seg_lens: Vec<usize> = (0..n).map(|r| ep.segment_len_of(r).unwrap_or(0)).collect();
    {
        let (e, handled) = (errs.clone(), handled.clone());
        ep.register_at(RQ.index(), move |t: &mut Token<'_>, am: Am<'_>| {
            let src = am.src();
            let (maxm, seg) = (max_medium[src.rank as usize], seg_lens[src.rank as usize]);
            e.check(t.is_request() && !t.has_replied() && t.src() == src, || {
                "request token state wrong".into()
            });
            let ex = |r: Result<(), AmError>, want: AmError, what: &str| {
                if let Err(m) = expect_err(r, &want, what) {
                    e.push(m);
                }
            };
            ex(
                t.reply(RP, Body::short(&vec![0; max_args + 1])),
                AmError::TooManyArgs {
                    given: max_args + 1,
                    max: max_args,
                },
                "reply with too many args",
            );
            ex(
                t.reply(HandlerId::at(250), Body::short(&[])),
                AmError::UnregisteredHandler(250),
                "reply to unregistered 250",
            );
            ex(
                t.reply(HandlerId::at_any(0), Body::medium(&[], &[])),
                AmError::UnregisteredHandler(0),
                "reply to handler 0",
            );
            ex(
                t.reply(HandlerId::at_any(1), Body::short(&[0, 0])),
                AmError::ReservedHandler(1),
                "reply to the core's reserved exchange handler",
            );
            ex(
                t.reply(RP, Body::medium(&[], &vec![0; maxm + 1])),
                AmError::PayloadTooLarge {
                    len: maxm + 1,
                    max: maxm,
                },
                "reply medium over max",
            );
            ex(
                t.reply(RP, Body::long(&[], &[1], seg)),
                AmError::OutOfSegment {
                    dst: src,
                    offset: seg,
                    len: 1,
                    seg_len: seg,
                },
                "reply long past the end",
            );
            ex(
                t.reply(RP, Body::long(&[], &[1, 2], usize::MAX - 1)),
                AmError::OutOfSegment {
                    dst: src,
                    offset: usize::MAX - 1,
                    len: 2,
                    seg_len: seg,
                },
                "reply long with overflowing offset",
            );
            e.check(!t.has_replied(), || {
                "has_replied() after failed replies only".into()
            });
            if let Err(x) = t.reply(RP, Body::short(&[7])) {
                e.push(format!("good reply failed: {x}"));
            }
            e.check(t.has_replied(), || {
                "has_replied() false after a reply".into()
            });
            ex(
                t.reply(RP, Body::short(&[])),
                AmError::AlreadyReplied,
                "second reply (short)",
            );
            ex(
                t.reply(RP, Body::medium(&[], &[1])),
                AmError::AlreadyReplied,
                "second reply (medium)",
            );
            ex(
                t.reply(RP, Body::long(&[], &[1], 0)),
                AmError::AlreadyReplied,
                "second reply (long)",
            );
            handled.fetch_add(1, Ordering::Relaxed);
        })
        .map_err(|e| e.to_string())?;
        let (e, replies) = (errs.clone(), replies.clone());
        ep.register_at(RP.index(), move |t: &mut Token<'_>, am: Am<'_>| {
            e.check(
                !t.is_request() && am.kind() == gex_core::Kind::Reply && am.args() == [7],
                || format!("reply handler saw {:?} args {:?}", am.kind(), am.args()),
            );
            for (what, r) in [
                ("short", t.reply(RP, Body::short(&[]))),
                ("medium", t.reply(RP, Body::medium(&[], &[1]))),
                ("long", t.reply(RP, Body::long(&[], &[1], 0))),
            ] {
                if let Err(m) = expect_err(
                    r,
                    &AmError::ReplyFromReply,
                    &format!("reply from a reply handler ({what})"),
                ) {
                    e.push(m);
                }
            }
            replies.fetch_add(1, Ordering::Relaxed);
        })
        .map_err(|e| e.to_string())?;
    }
    barrier(&mut ep)?;
    sent(
        ep.request(EpAddr::rank((me + 1) % n), RQ, Body::short(&[me])),
        "request",
    )?;
    wait_for(&mut ep, "the reply and the neighbour's request", || {
        replies.load(Ordering::Relaxed) >= 1 && handled.load(Ordering::Relaxed) >= 1
    })?;
    barrier(&mut ep)?;
    barrier(&mut ep)?;
    errs.result()?;
    let (h, r) = (
        handled.load(Ordering::Relaxed),
        replies.load(Ordering::Relaxed),
    );
    if (h, r) != (1, 1) {
        return Err(format!(
            "{h} requests handled and {r} replies received; expected exactly 1 and 1"
        ));
    }
    Ok(())
}
