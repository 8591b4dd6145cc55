//! Negotiated-payload case.

use super::util::{Errs, Pattern, barrier, bytes_of, expect_err, wait_for};
use crate::rng::hash_words;
use gex_core::spi::Conduit;
use gex_core::{Am, AmError, Body, Category, Client, Endpoint, EpAddr, HandlerId, Injected, Token};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Builds a negotiated-payload message of `body` (its payload: the capacity, `plen`
/// bytes) and commits `fill` (its first `clen` bytes; `clen` may exceed `plen` to
/// provoke `CommitTooLarge`). With `imm`,
/// through [`Endpoint::try_request_with`](gex_core::Endpoint::try_request_with)
/// (polling while the conduit lacks resources, bounded); without, through
/// [`Endpoint::request_with`](gex_core::Endpoint::request_with), which
/// waits for resources.
fn send_prepared<C: Conduit>(
    ep: &mut Endpoint<C>,
    dst: EpAddr,
    h: HandlerId,
    body: Body<'_, usize>,
    imm: bool,
    fill: &[u8],
    clen: usize,
) -> Result<(), AmError> {
    let plen = *body.payload();
    let wrong_len = std::cell::Cell::new(None);
    let fill_with = |b: &mut [u8]| {
        if b.len() != plen {
            wrong_len.set(Some(b.len()));
        }
        let n = clen.min(b.len()).min(fill.len());
        b[..n].copy_from_slice(&fill[..n]);
        clen
    };
    let checked = |r: Result<(), AmError>| match wrong_len.get() {
        Some(got) => Err(AmError::Conduit(gex_core::spi::ConduitError::Contract(
            format!("the buffer to fill has {got} bytes, {plen} asked"),
        ))),
        None => r,
    };
    if imm {
        let deadline = Instant::now() + super::CASE_WAIT;
        loop {
            let r = ep.try_request_with(dst, h, body, fill_with)?;
            if r == Injected::Sent {
                return checked(Ok(()));
            }
            if Instant::now() > deadline {
                return Err(AmError::Conduit(gex_core::spi::ConduitError::Contract(
                    "an immediate prepare never found resources".into(),
                )));
            }
            ep.poll();
        }
    }
    checked(ep.request_with(dst, h, body, fill_with))
}

/// Prepare-time errors of negotiated payloads to `dst` (whose largest Medium is
/// `max_medium` and segment `seg_len` bytes), waiting and immediate:
/// `PayloadTooLarge`, `OutOfSegment` (past the end, overflowing offset), `BadRank`,
/// `BadEndpoint`, and an endpoint not created yet where there can be one.
fn prepare_errors<C: Conduit>(
    client: &Client<C>,
    ep: &mut Endpoint<C>,
    h: HandlerId,
    dst: EpAddr,
    max_medium: usize,
    seg_len: usize,
) -> Result<(), String> {
    let (n, d) = (client.size(), dst.rank as usize);
    for imm in [false, true] {
        let medium = |ep: &mut Endpoint<C>, dst: EpAddr, len: usize| -> Result<(), AmError> {
            if imm {
                ep.try_request_with(dst, h, Body::medium(&[], len), |_| 0)
                    .map(drop)
            } else {
                ep.request_with(dst, h, Body::medium(&[], len), |_| 0)
            }
        };
        let long = |ep: &mut Endpoint<C>, len: usize, off: usize| -> Result<(), AmError> {
            if imm {
                ep.try_request_with(dst, h, Body::long(&[], len, off), |_| 0)
                    .map(drop)
            } else {
                ep.request_with(dst, h, Body::long(&[], len, off), |_| 0)
            }
        };
        expect_err(
            medium(ep, dst, max_medium + 1),
            &AmError::PayloadTooLarge {
                len: max_medium + 1,
                max: max_medium,
            },
            "prepare medium over max",
        )?;
        let e = AmError::OutOfSegment {
            dst,
            offset: seg_len,
            len: 1,
            seg_len,
        };
        expect_err(long(ep, 1, seg_len), &e, "prepare long past the end")?;
        let e = AmError::OutOfSegment {
            dst,
            offset: usize::MAX,
            len: 1,
            seg_len,
        };
        expect_err(
            long(ep, 1, usize::MAX),
            &e,
            "prepare long with overflowing offset",
        )?;
        expect_err(
            medium(ep, EpAddr::rank(n), 1),
            &AmError::BadRank { rank: n, size: n },
            "prepare to a bad rank",
        )?;
        let eps = client.endpoint_capacity(d as u32).ok_or("no capacity")?;
        let bad = EpAddr::new(d as u32, eps);
        expect_err(
            medium(ep, bad, 1),
            &AmError::BadEndpoint { dst: bad, eps },
            "prepare to a bad EP",
        )?;
        if client.runtime_endpoints() && client.layout().eps[d] < eps {
            let absent = EpAddr::new(d as u32, eps - 1);
            expect_err(
                medium(ep, absent, 1),
                &AmError::Conduit(gex_core::spi::ConduitError::NoEndpoint {
                    dst: absent,
                    state: "not created yet",
                }),
                "prepare to an EP not created yet",
            )?;
        }
    }
    Ok(())
}

/// Negotiated payloads to every rank: Medium and Long buffers prepared, filled in place
/// and committed with fewer bytes than prepared; zero-byte commits; non-waiting ones (`try_request_with`);
/// a `fill` that panics and every failed commit (`CommitTooLarge`,
/// `UnregisteredHandler`, `TooManyArgs`) send nothing; prepare-time errors
/// (`PayloadTooLarge`, `OutOfSegment`, `BadRank`, `BadEndpoint`).
/// Negotiated payloads to `dst` that send nothing (`imm`: not waiting): a `fill` that
/// panics (Medium, and Long at `spare`, a range of its own), a commit larger than
/// prepared, to an unregistered handler, with too many arguments. `max_medium` and
/// `max_long` are `dst`'s limits.
fn failed_sends<C: Conduit>(
    ep: &mut Endpoint<C>,
    h: HandlerId,
    dst: EpAddr,
    imm: bool,
    max_medium: usize,
    max_long: usize,
    spare: usize,
) -> Result<(), String> {
    let me = ep.rank();
    let max_args = ep.max_args();
    // Abandoned (a panicking `fill`) and failed messages send nothing.
    let abandoned = catch_unwind(AssertUnwindSafe(|| {
        ep.request_with(dst, h, Body::medium(&[me, 9, 0], 16.min(max_medium)), |b| {
            b.fill(0xab);
            panic!("a fill that panics on purpose")
        })
    }));
    if abandoned.is_ok() {
        return Err("a panicking fill did not end the call".into());
    }
    // A conduit may build Long payloads directly in the target segment, so prepares
    // that send nothing use their own range (the committed one's handler may not
    // have run yet).
    let abandoned = catch_unwind(AssertUnwindSafe(|| {
        ep.request_with(
            dst,
            h,
            Body::long(&[me, 9, 0], 16.min(max_long), spare),
            |b| {
                b.fill(0xab);
                panic!("a fill that panics on purpose")
            },
        )
    }));
    if abandoned.is_ok() {
        return Err("a panicking fill did not end the call".into());
    }
    let pl = 16.min(max_medium);
    expect_err(
        send_prepared(ep, dst, h, Body::medium(&[me, 9, 0], pl), imm, &[], pl + 1),
        &AmError::CommitTooLarge {
            len: pl + 1,
            prepared: pl,
        },
        "commit larger than prepared",
    )?;
    expect_err(
        send_prepared(
            ep,
            dst,
            HandlerId::at(250),
            Body::medium(&[me, 9, 0], pl),
            imm,
            &[],
            0,
        ),
        &AmError::UnregisteredHandler(250),
        "commit to an unregistered handler",
    )?;
    expect_err(
        send_prepared(
            ep,
            dst,
            h,
            Body::long(&vec![0; max_args + 1], 16.min(max_long), spare),
            imm,
            &[],
            0,
        ),
        &AmError::TooManyArgs {
            given: max_args + 1,
            max: max_args,
        },
        "commit with too many args",
    )?;
    Ok(())
}

pub(crate) fn negotiated_payload<C: Conduit>(client: &Client<C>) -> Result<(), String> {
    const H: HandlerId = HandlerId::at(210);
    let (me, n) = (client.rank(), client.size());
    let mut ep = client.endpoint(0).map_err(err)?;
    let seg: Vec<usize> = client.layout().seg_len.clone();
    let maxm: Vec<usize> = (0..n).map(|r| ep.max_medium(EpAddr::rank(r))).collect();
    let maxl: Vec<usize> = (0..n).map(|r| ep.max_long(EpAddr::rank(r))).collect();
    let pat = Arc::new(Pattern::new(4096));
    let errs = Errs::new();
    let got = Arc::new(AtomicU64::new(0));
    let seed = |s: u32, d: u32, step: u32| hash_words(&[s as u64, d as u64, step as u64, 3]);
    let slot = |d: usize| seg[d] / n as usize;
    let long_off = |d: usize, s: u32| slot(d) * s as usize + 3;
    {
        let (errs, got, pat, seg) = (errs.clone(), got.clone(), pat.clone(), seg.clone());
        ep.register_at(H.index(), move |_t: &mut Token<'_>, am: Am<'_>| {
            let a = am.args();
            let (src, step, len) = (am.src(), a[1], a[2] as usize);
            if a[0] != src.rank {
                errs.push(format!("message from {src} claims rank {}", a[0]));
            }
            let want_cat = if step == 1 {
                Category::Long
            } else {
                Category::Medium
            };
            if am.category() != want_cat {
                errs.push(format!(
                    "step {step} from {src} arrived as {:?}",
                    am.category()
                ));
            }
            if step == 1 {
                let off = seg[me as usize] / n as usize * src.rank as usize + 3;
                if am.offset() != off {
                    errs.push(format!(
                        "Long from {src} at {} (prepared at {off})",
                        am.offset()
                    ));
                }
            }
            if let Some(d) = pat.diff(seed(src.rank, me, step), len, &bytes_of(&am)) {
                errs.push(format!("step {step} from {src}: {d}"));
            }
            got.fetch_add(1, Ordering::Release);
        })
        .map_err(err)?;
    }
    barrier(&mut ep)?;
    for k in 0..n {
        let d = ((me + k) % n) as usize;
        let dst = EpAddr::rank(d as u32);
        let imm = k % 2 == 1;
        // Medium, commit fewer bytes than prepared.
        let plen = maxm[d].min(300);
        let clen = plen.saturating_sub(7);
        let fill = pat.get(seed(me, d as u32, 0), clen).to_vec();
        send_prepared(
            &mut ep,
            dst,
            H,
            Body::medium(&[me, 0, clen as u32], plen),
            imm,
            &fill,
            clen,
        )
        .map_err(|e| format!("medium commit: {e}"))?;
        // Long into a per-sender slot, commit fewer bytes.
        let off = long_off(d, me);
        let plen = maxl[d].min(slot(d) - 3 - 16).min(1000);
        let clen = plen.saturating_sub(5);
        let fill = pat.get(seed(me, d as u32, 1), clen).to_vec();
        send_prepared(
            &mut ep,
            dst,
            H,
            Body::long(&[me, 1, clen as u32], plen, off),
            imm,
            &fill,
            clen,
        )
        .map_err(|e| format!("long commit: {e}"))?;
        // Zero-byte commit.
        send_prepared(
            &mut ep,
            dst,
            H,
            Body::medium(&[me, 2, 0], 16.min(maxm[d])),
            imm,
            &[],
            0,
        )
        .map_err(|e| format!("zero-byte commit: {e}"))?;
        let spare = off + plen;
        failed_sends(&mut ep, H, dst, imm, maxm[d], maxl[d], spare)?;
        prepare_errors(client, &mut ep, H, dst, maxm[d], seg[d])?;
    }
    let want = 3 * n as u64;
    wait_for(&mut ep, "every committed message", || {
        got.load(Ordering::Acquire) >= want
    })?;
    barrier(&mut ep)?;
    barrier(&mut ep)?;
    errs.result()?;
    match got.load(Ordering::Acquire) {
        g if g == want => Ok(()),
        g => Err(format!(
            "{g} messages arrived, {want} were committed: dropped or failed prepares sent something"
        )),
    }
}
