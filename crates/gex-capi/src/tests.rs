//! In-process tests of the entry points on a job of one rank (the C examples cover
//! multi-rank jobs): the argument checks, the one-thread-per-endpoint rule, the
//! in-handler rule, events, and the client's life.
#![allow(unsafe_code)]

use crate::am::*;
use crate::atomic::*;
use crate::client::*;
use crate::coll::*;
use crate::event::*;
use crate::handle::{HandlerMark, gex_client_t, gex_ep_t, gex_team_t};
use crate::rma::*;
use crate::status::*;
use crate::team::*;
use gex_status_t::*;
use gex_sync::atomic::{AtomicUsize, Ordering};
use std::ffi::{CStr, c_int, c_void};
use std::ptr::{null, null_mut};

fn last() -> String {
    // SAFETY: a NUL-terminated string valid until the next failing call on this thread.
    unsafe { CStr::from_ptr(gex_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// Asserts that an entry point returned `GEX_OK`, with the last error message if not.
#[track_caller]
fn ok(rc: c_int) {
    assert_eq!(rc, 0, "{}", last());
}

/// A client of one rank with endpoint 0 open.
fn open() -> (*mut gex_client_t, *mut gex_ep_t) {
    let (mut c, mut e) = (null_mut(), null_mut());
    // SAFETY: valid output slots.
    ok(unsafe { gex_client_init(1 << 16, &mut c) });
    // SAFETY: a live client, a valid output slot.
    ok(unsafe { gex_ep_open(c, 0, &mut e) });
    (c, e)
}

fn close(c: *mut gex_client_t, e: *mut gex_ep_t) {
    // SAFETY: live handles, given up here.
    ok(unsafe { gex_ep_close(e) });
    // SAFETY: as above.
    ok(unsafe { gex_client_finalize(c) });
}

#[test]
fn null_misaligned_and_foreign_handles_are_refused() {
    let junk = vec![0u64; 64];
    let foreign = junk.as_ptr().cast::<gex_ep_t>();
    let misaligned = junk
        .as_ptr()
        .cast::<u8>()
        .wrapping_add(1)
        .cast::<gex_ep_t>();
    // SAFETY: NULL, misaligned and foreign pointers are what the checks are for; the
    // foreign one points to readable zeroed memory larger than a handle.
    // The last failure (the misaligned endpoint) is the thread's last error.
    let (null_ep, foreign_ep, null_out, null_ev, misaligned_ep) = unsafe {
        (
            gex_ep_poll(null(), null_mut()),
            gex_ep_poll(foreign, null_mut()),
            gex_client_init(0, null_mut()),
            gex_event_free(null_mut()),
            gex_barrier(misaligned),
        )
    };
    assert_eq!(null_ep, GEX_ERR_NULL.code());
    assert_eq!(foreign_ep, GEX_ERR_INVALID.code());
    assert_eq!(misaligned_ep, GEX_ERR_INVALID.code());
    assert!(last().contains("misaligned"), "{}", last());
    assert_eq!(null_out, GEX_ERR_NULL.code());
    assert_eq!(null_ev, GEX_OK.code());
}

#[test]
fn error_messages_are_never_null() {
    for code in [-100, -11, -1, 0, 1, 2, 100] {
        // SAFETY: static NUL-terminated strings.
        let m = unsafe { CStr::from_ptr(gex_error_message(code)) };
        assert!(!m.to_bytes().is_empty());
    }
}

#[test]
fn a_client_lives_from_init_to_finalize() {
    let (c, e) = open();
    let (mut r, mut n, mut base, mut len) = (9u32, 9u32, null_mut::<c_void>(), 0usize);
    // SAFETY: every call below has live handles and valid output slots, or arguments the
    // checks refuse before use.
    unsafe {
        assert_eq!(gex_client_rank(c, &mut r), 0);
        assert_eq!(gex_client_size(c, &mut n), 0);
        assert_eq!((r, n), (0, 1));
        assert_eq!(gex_ep_segment(e, &mut base, &mut len), 0);
        assert!(!base.is_null() && len >= 1 << 16);
        let mut again = null_mut();
        assert_eq!(gex_ep_open(c, 0, &mut again), GEX_ERR_INVALID.code());
        assert_eq!(gex_ep_open(c, 7, &mut again), GEX_ERR_INVALID.code());
        assert!(again.is_null());
        assert_eq!(gex_client_finalize(c), GEX_ERR_STATE.code());
        assert!(last().contains("still open"), "{}", last());
    }
    close(c, e);
}

#[test]
fn an_endpoint_is_used_by_one_thread_at_a_time() {
    let (c, e) = open();
    let addr = e as usize;
    // SAFETY: a live endpoint.
    let h = unsafe { crate::ptr::handle(e) }.unwrap();
    let got = h
        .with(|_| {
            // Another thread calls in while this one is inside the endpoint.
            let other = std::thread::spawn(move || {
                // SAFETY: the endpoint stays open until this thread is joined.
                unsafe { gex_ep_poll(addr as *const gex_ep_t, null_mut()) }
            });
            Ok(other.join().unwrap())
        })
        .unwrap();
    assert_eq!(got, GEX_ERR_BUSY.code());
    // Free again once the first call is over.
    // SAFETY: a live endpoint.
    assert_eq!(unsafe { gex_ep_poll(e, null_mut()) }, 0);
    close(c, e);
}

#[test]
fn endpoint_calls_are_refused_inside_a_handler_and_tokens_outside() {
    let (c, e) = open();
    {
        let _mark = HandlerMark::set();
        // SAFETY: a live endpoint.
        let rc = unsafe { gex_ep_poll(e, null_mut()) };
        assert_eq!(rc, GEX_ERR_IN_HANDLER.code());
    }
    // No handler runs on this thread: any token is refused unread.
    let fake = 0x1000 as *mut gex_token_t;
    // SAFETY: the token is checked before any use.
    let rc = unsafe { gex_am_reply_short(fake, 128, null(), 0) };
    assert_eq!(rc, GEX_ERR_INVALID.code());
    let mut src = 0;
    // SAFETY: as above.
    let rc = unsafe { gex_token_src(fake, &mut src) };
    assert_eq!(rc, GEX_ERR_INVALID.code());
    close(c, e);
}

#[test]
fn events_complete_once_and_are_refused_twice_in_an_array() {
    let (c, e) = open();
    let data = [7u8; 64];
    let mut back = [0u8; 64];
    // SAFETY: every call below has live handles, buffers valid for the lengths given
    // and alive until their events complete.
    unsafe {
        let mut ev = null_mut();
        assert_eq!(gex_put_nb(e, 0, 128, data.as_ptr().cast(), 64, &mut ev), 0);
        let mut twice = [ev, ev];
        assert_eq!(
            gex_event_wait_all(e, twice.as_mut_ptr(), 2),
            GEX_ERR_INVALID.code()
        );
        assert_eq!(gex_event_wait(e, &mut ev), 0);
        assert!(ev.is_null());
        assert_eq!(gex_event_test(e, &mut ev), GEX_ERR_NULL.code());
        assert_eq!(
            gex_get_nb(e, back.as_mut_ptr().cast(), 0, 128, 64, &mut ev),
            0
        );
        let rc = loop {
            match gex_event_test(e, &mut ev) {
                x if x == GEX_PENDING.code() => continue,
                x => break x,
            }
        };
        assert_eq!(rc, 0);
        assert_eq!(back, data);
        let mut none = [null_mut(); 3];
        let mut i = 9;
        assert_eq!(
            gex_event_wait_any(e, none.as_mut_ptr(), 3, &mut i),
            GEX_ERR_INVALID.code()
        );
        assert_eq!(gex_event_wait_all(e, none.as_mut_ptr(), 3), 0);
        // Out of the segment: an error, no event.
        assert_eq!(
            gex_put_nb(e, 0, 1 << 30, data.as_ptr().cast(), 64, &mut ev),
            GEX_ERR_RMA.code()
        );
        assert!(ev.is_null());
    }
    close(c, e);
}

#[test]
fn allreduce_and_atomics_on_one_rank() {
    let (c, e) = open();
    // SAFETY: every call below has live handles and buffers valid for the lengths given.
    unsafe {
        let src = [3u64, 4];
        let mut dst = [0u64; 2];
        assert_eq!(
            gex_allreduce_u64(e, src.as_ptr(), dst.as_mut_ptr(), 2, 0),
            0
        );
        assert_eq!(dst, src);
        let mut both = [1u64, 2, 3];
        let p = both.as_mut_ptr();
        assert_eq!(
            gex_allreduce_u64(e, p, p.add(1), 2, 0),
            GEX_ERR_INVALID.code()
        );
        assert_eq!(
            gex_allreduce_u64(e, src.as_ptr(), dst.as_mut_ptr(), 2, 42),
            GEX_ERR_INVALID.code()
        );
        let mut ad = null_mut();
        assert_eq!(gex_atomic_domain_create(e, &mut ad), 0);
        let mut old = 9;
        assert_eq!(gex_atomic_compare_swap_u64(e, ad, 0, 64, 0, 5, &mut old), 0);
        assert_eq!(old, 0);
        assert_eq!(gex_atomic_fetch_add_u64(e, ad, 0, 64, 2, &mut old), 0);
        assert_eq!(old, 5);
        let mut v = 0;
        assert_eq!(gex_atomic_get_u64(e, ad, 0, 64, &mut v), 0);
        assert_eq!(v, 7);
        assert_eq!(gex_atomic_get_u64(e, ad, 0, 60, &mut v), GEX_ERR_RMA.code());
        assert_eq!(gex_atomic_domain_free(ad), 0);
    }
    close(c, e);
}

/// include/gex.h is what cbindgen generates from the crate's source, with the
/// declarations of the macro-generated entry points (`crate::DECLS`: cbindgen does not
/// expand macros): regenerates it and fails if the checked-in file differs
/// (`BLESS=1` rewrites it instead).
#[test]
fn gex_h_matches_the_source() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let config =
        cbindgen::Config::from_file(format!("{dir}/cbindgen.toml")).expect("cbindgen.toml");
    let decls = std::env::temp_dir().join(format!("gex-capi-decls-{}.rs", std::process::id()));
    std::fs::write(&decls, crate::DECLS.concat()).expect("write the declarations");
    let mut generated = Vec::new();
    let built = cbindgen::Builder::new()
        .with_config(config)
        .with_src(format!("{dir}/src/lib.rs"))
        .with_src(&decls)
        .generate();
    std::fs::remove_file(&decls).expect("remove the declarations");
    built
        .expect("cbindgen generates the header")
        .write(&mut generated);
    let text = String::from_utf8_lossy(&generated);
    for f in [
        "gex_atomic_op_nb_f32",
        "gex_atomic_op_nbi_i64",
        "gex_atomic_op_u32",
        "gex_gather_nb",
        "gex_exscan_user",
    ] {
        assert!(
            text.contains(&format!("int {f}(")),
            "{f} is not in the header"
        );
    }
    let path = format!("{dir}/include/gex.h");
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write include/gex.h");
        return;
    }
    let have = std::fs::read(&path).unwrap_or_default();
    assert!(
        have == generated,
        "include/gex.h differs from what cbindgen generates from src/: \
         run `BLESS=1 cargo test -p gex-capi --lib gex_h` and commit the header"
    );
}

/// Team creation, queries, splits and the barriers of one rank's job; returns the world
/// team and a split of it.
///
/// # Safety
/// `e` is a live endpoint.
unsafe fn one_rank_teams(e: *mut gex_ep_t) -> (*mut gex_team_t, *mut gex_team_t) {
    // SAFETY: the caller's endpoint; every out-pointer below is a local.
    unsafe {
        let (mut w, mut sub, mut none) = (null_mut(), null_mut(), null_mut());
        ok(gex_team_world(e, &mut w));
        let (mut r, mut n, mut j) = (9, 9, 9);
        assert_eq!(gex_team_rank(w, &mut r, &mut n), 0);
        assert_eq!((r, n), (0, 1));
        assert_eq!(gex_team_translate(w, 0, &mut j), 0);
        assert_eq!(j, 0);
        assert_eq!(gex_team_translate(w, 1, &mut j), GEX_ERR_INVALID.code());
        ok(gex_team_split(e, w, 5, 0, &mut sub));
        assert!(!sub.is_null());
        assert_eq!(
            gex_team_split(e, w, crate::team::GEX_COLOR_NONE, 0, &mut none),
            0
        );
        assert!(none.is_null());
        assert_eq!(gex_team_barrier(e, sub), 0);
        // The split-phase barrier: named, anonymous, and its misuses.
        ok(gex_team_barrier_notify(e, w, 7, 0));
        assert_eq!(gex_team_barrier_notify(e, w, 7, 0), GEX_ERR_COLL.code());
        let rc = loop {
            match gex_team_barrier_try(e, w, 7, 0) {
                x if x == GEX_PENDING.code() => continue,
                x => break x,
            }
        };
        ok(rc);
        assert_eq!(gex_team_barrier_wait(e, w, 7, 0), GEX_ERR_COLL.code());
        let anon = crate::coll::GEX_BARRIER_ANONYMOUS;
        assert_eq!(gex_team_barrier_notify(e, w, 0, anon), 0);
        ok(gex_team_barrier_wait(e, w, 0, anon));
        assert_eq!(gex_team_barrier_notify(e, w, 0, 4), GEX_ERR_INVALID.code());
        let (mut listed, zero) = (null_mut(), [0u32]);
        ok(gex_team_create(e, sub, zero.as_ptr(), 1, &mut listed));
        assert_eq!(gex_team_rank(listed, &mut r, &mut n), 0);
        assert_eq!((r, n), (0, 1));
        let twice = [0u32, 0];
        let rc = gex_team_create(e, w, twice.as_ptr(), 2, &mut none);
        assert_eq!(rc, GEX_ERR_COLL.code(), "{}", last());
        assert!(none.is_null());
        assert_eq!(gex_team_free(e, listed), 0);
        (w, sub)
    }
}

/// Allreduce of several types and operators, blocking and nonblocking, on one rank.
///
/// # Safety
/// `e` is a live endpoint and the teams are live teams of it.
unsafe fn one_rank_allreduces(e: *mut gex_ep_t, w: *mut gex_team_t, sub: *mut gex_team_t) {
    // SAFETY: the caller's handles; every buffer below is a local valid for the
    // counts given, alive until its event completes.
    unsafe {
        // Allreduce of several types and operators, blocking and nonblocking.
        let src = [6i32, -3];
        let mut dst = [0i32; 2];
        let (s, d) = (src.as_ptr().cast(), dst.as_mut_ptr().cast());
        let i32t = gex_dt_t::GEX_DT_I32 as i32;
        assert_eq!(
            gex_allreduce(e, sub, s, d, 2, i32t, gex_op_t::GEX_OP_BXOR as i32),
            0
        );
        assert_eq!(dst, src);
        let f = [1.5f64];
        let mut g = [0f64];
        let f64t = gex_dt_t::GEX_DT_F64 as i32;
        let (fs, fd) = (f.as_ptr().cast(), g.as_mut_ptr().cast());
        let band = gex_op_t::GEX_OP_BAND as i32;
        assert_eq!(
            gex_allreduce(e, w, fs, fd, 1, f64t, band),
            GEX_ERR_INVALID.code()
        );
        assert_eq!(
            gex_allreduce(e, w, fs, fd, 1, 99, 0),
            GEX_ERR_INVALID.code()
        );
        let mut ev = null_mut();
        let max = gex_op_t::GEX_OP_MAX as i32;
        assert_eq!(gex_allreduce_nb(e, w, fs, fd, 1, f64t, max, &mut ev), 0);
        assert_eq!(g, [0.0], "written only when the event completes");
        assert_eq!(gex_event_wait(e, &mut ev), 0);
        assert!(ev.is_null());
        assert_eq!(g, f);
    }
}

/// Broadcast, gather, gather_all and reduce on one rank, with bad roots.
///
/// # Safety
/// `e` is a live endpoint and the teams are live teams of it.
unsafe fn one_rank_rooted(e: *mut gex_ep_t, w: *mut gex_team_t, sub: *mut gex_team_t) {
    // SAFETY: the caller's handles; every buffer below is a local valid for the
    // counts given, alive until its event completes.
    unsafe {
        // Broadcast, gather, gather_all, reduce.
        let mut b = [7u64, 8, 9];
        let u64t = gex_dt_t::GEX_DT_U64 as i32;
        assert_eq!(gex_broadcast(e, sub, 0, b.as_mut_ptr().cast(), 3, u64t), 0);
        assert_eq!(
            gex_broadcast(e, sub, 1, b.as_mut_ptr().cast(), 3, u64t),
            GEX_ERR_COLL.code()
        );
        let mut all = [0u64; 3];
        assert_eq!(
            gex_gather_all(e, sub, b.as_ptr().cast(), all.as_mut_ptr().cast(), 3, u64t),
            0
        );
        assert_eq!(all, b);
        let mut one = [0u64; 3];
        let mut evs = [null_mut(); 2];
        assert_eq!(
            gex_gather_nb(
                e,
                w,
                0,
                b.as_ptr().cast(),
                one.as_mut_ptr().cast(),
                3,
                u64t,
                &mut evs[0]
            ),
            0
        );
        assert_eq!(gex_team_barrier_nb(e, w, &mut evs[1]), 0);
        assert_eq!(gex_event_wait_all(e, evs.as_mut_ptr(), 2), 0);
        assert_eq!(one, b);
        let mut red = [0u64; 3];
        let sum = gex_op_t::GEX_OP_SUM as i32;
        let (src, dst) = (b.as_ptr().cast(), red.as_mut_ptr().cast());
        let reduce_at = |root| gex_reduce(e, w, root, src, dst, 3, u64t, sum);
        assert_eq!(reduce_at(0), 0);
        assert_eq!(red, b);
        assert_eq!(reduce_at(3), GEX_ERR_INVALID.code());
        assert_eq!(
            gex_broadcast_nb(e, w, 0, b.as_mut_ptr().cast(), 3, u64t, null_mut()),
            GEX_ERR_NULL.code()
        );
    }
}

/// Scatter, exchange, reduce_scatter, scan and exscan on one rank (identities).
///
/// # Safety
/// `e` is a live endpoint and the teams are live teams of it.
unsafe fn one_rank_scatter_scan(e: *mut gex_ep_t, w: *mut gex_team_t) {
    // SAFETY: the caller's handles; every buffer below is a local valid for the
    // counts given, alive until its event completes.
    unsafe {
        // Scatter, exchange, reduce_scatter, scan, exscan (one member: identities).
        let sum = gex_op_t::GEX_OP_SUM as i32;
        let i64t = gex_dt_t::GEX_DT_I64 as i32;
        let v = [4i64, -5];
        let mut out = [0i64; 2];
        let vs = v.as_ptr().cast();
        ok(gex_scatter(e, w, 0, vs, out.as_mut_ptr().cast(), 2, i64t));
        assert_eq!(out, v);
        out = [0; 2];
        ok(gex_exchange(e, w, vs, out.as_mut_ptr().cast(), 2, i64t));
        assert_eq!(out, v);
        out = [0; 2];
        ok(gex_reduce_scatter(
            e,
            w,
            vs,
            out.as_mut_ptr().cast(),
            2,
            i64t,
            sum,
        ));
        assert_eq!(out, v);
        out = [0; 2];
        ok(gex_scan(e, w, vs, out.as_mut_ptr().cast(), 2, i64t, sum));
        assert_eq!(out, v);
        out = [9; 2];
        let mut ev = null_mut();
        ok(gex_exscan_nb(
            e,
            w,
            vs,
            out.as_mut_ptr().cast(),
            2,
            i64t,
            sum,
            &mut ev,
        ));
        assert_eq!(gex_event_wait(e, &mut ev), 0);
        assert_eq!(out, [9, 9], "team rank 0's dst is not written");
        ok(gex_scatter_nb(
            e,
            w,
            0,
            vs,
            out.as_mut_ptr().cast(),
            2,
            i64t,
            &mut ev,
        ));
        assert_eq!(gex_event_wait(e, &mut ev), 0);
        assert_eq!(out, v);
    }
}

#[test]
fn teams_and_typed_collectives_on_one_rank() {
    let (c, e) = open();
    // SAFETY: every call below has live handles and buffers valid for the counts given,
    // alive until their events complete.
    unsafe {
        let (w, sub) = one_rank_teams(e);
        one_rank_allreduces(e, w, sub);
        one_rank_rooted(e, w, sub);
        one_rank_scatter_scan(e, w);
        assert_eq!(gex_team_free(e, sub), 0);
        assert_eq!(gex_team_barrier(e, sub), GEX_ERR_INVALID.code());
        assert_eq!(gex_team_free(e, w), 0);
        assert_eq!(gex_team_free(e, null_mut()), 0);
    }
    close(c, e);
}

/// NBI puts and gets, the three memsets, and `gex_nbi_sync`/`gex_nbi_test` on one rank.
///
/// # Safety
/// `e` is a live endpoint whose segment holds at least 4 KiB.
unsafe fn one_rank_nbi_and_memset(e: *mut gex_ep_t) {
    // SAFETY: the caller's endpoint; every buffer below is a local valid for the lengths
    // given, alive until the syncs that complete them.
    unsafe {
        let data: Vec<u8> = (0..200u8).collect();
        for k in 0..4 {
            let off = 1024 + 50 * k;
            assert_eq!(
                gex_put_nbi(e, 0, off, data[50 * k..].as_ptr().cast(), 50),
                0
            );
        }
        assert_eq!(gex_nbi_sync(e, crate::rma::GEX_NBI_PUTS), 0);
        // Memsets, all three forms, then the bytes read back.
        assert_eq!(gex_memset(e, 0, 2048, 0xAB, 16), 0);
        let mut ev = null_mut();
        assert_eq!(gex_memset_nb(e, 0, 2064, 0xCD, 16, &mut ev), 0);
        assert_eq!(gex_event_wait(e, &mut ev), 0);
        assert_eq!(gex_memset_nbi(e, 0, 2080, 0xEF, 16), 0);
        assert_eq!(gex_nbi_sync(e, crate::rma::GEX_NBI_PUTS), 0);
        let mut m = [0u8; 48];
        assert_eq!(gex_get(e, m.as_mut_ptr().cast(), 0, 2048, 48), 0);
        assert!(m[..16].iter().all(|&b| b == 0xAB), "{m:?}");
        assert!(m[16..32].iter().all(|&b| b == 0xCD), "{m:?}");
        assert!(m[32..].iter().all(|&b| b == 0xEF), "{m:?}");
        assert_eq!(gex_memset(e, 0, 1 << 30, 0, 1), GEX_ERR_RMA.code());
        let mut back = vec![0u8; 200];
        assert_eq!(gex_get_nbi(e, back.as_mut_ptr().cast(), 0, 1024, 100), 0);
        assert_eq!(
            gex_get_nbi(e, back[100..].as_mut_ptr().cast(), 0, 1124, 100),
            0
        );
        let rc = loop {
            match gex_nbi_test(e, crate::rma::GEX_NBI_ALL) {
                x if x == GEX_PENDING.code() => continue,
                x => break x,
            }
        };
        assert_eq!(rc, 0);
        assert_eq!(back, data);
        assert_eq!(gex_nbi_sync(e, 8), GEX_ERR_INVALID.code());
        assert_eq!(
            gex_get_nbi(e, back.as_mut_ptr().cast(), 0, 1 << 30, 8),
            GEX_ERR_RMA.code()
        );
    }
}

/// Typed atomic domains over the world team (u32 with every operation, f64 arithmetic),
/// blocking, NB and NBI, and their misuses, on one rank.
///
/// # Safety
/// `e` is a live endpoint whose segment holds at least 1 KiB.
unsafe fn one_rank_atomics(e: *mut gex_ep_t) {
    // SAFETY: the caller's endpoint; every out-pointer below is a local, alive until the
    // event or sync that completes it.
    unsafe {
        // Typed atomic domains over the world team.
        let mut w = null_mut();
        assert_eq!(gex_team_world(e, &mut w), 0);
        let (mut du32, mut df64, mut bad) = (null_mut(), null_mut(), null_mut());
        let all = crate::atomic::GEX_AOPS_ALL;
        let arith = crate::atomic::GEX_AOPS_ARITH;
        let u32t = gex_dt_t::GEX_DT_U32 as i32;
        let f64t = gex_dt_t::GEX_DT_F64 as i32;
        ok(gex_atomic_domain_create_ex(e, w, u32t, all, &mut du32));
        assert_eq!(
            gex_atomic_domain_create_ex(e, w, f64t, all, &mut bad),
            GEX_ERR_RMA.code()
        );
        assert_eq!(
            gex_atomic_domain_create_ex(e, w, 6, all, &mut bad),
            GEX_ERR_INVALID.code()
        );
        ok(gex_atomic_domain_create_ex(e, w, f64t, arith, &mut df64));
        use gex_aop_t::*;
        let mut old = 0u32;
        assert_eq!(
            gex_atomic_op_u32(e, du32, 0, 256, GEX_AOP_SET as i32, 0xF0, 0, 0, null_mut()),
            0
        );
        // (operation, operand, the word's value before it)
        for (op, a, before) in [
            (GEX_AOP_FOR, 0x0F, 0xF0),
            (GEX_AOP_FAND, 0x3C, 0xFF),
            (GEX_AOP_FXOR, 0xFF, 0x3C),
            (GEX_AOP_SWAP, 5, 0xC3),
        ] {
            let rc = gex_atomic_op_u32(e, du32, 0, 256, op as i32, a, 0, 0, &mut old);
            assert_eq!((rc, old), (0, before), "{op:?} {a:#x}");
        }
        let mut ev = null_mut();
        assert_eq!(
            gex_atomic_op_nb_u32(
                e,
                du32,
                0,
                256,
                GEX_AOP_FADD as i32,
                1,
                0,
                0,
                &mut old,
                &mut ev
            ),
            0
        );
        assert_eq!(gex_event_wait(e, &mut ev), 0);
        assert_eq!(old, 5);
        assert_eq!(
            gex_atomic_op_nbi_u32(e, du32, 0, 256, GEX_AOP_INC as i32, 0, 0, 0),
            0
        );
        assert_eq!(gex_nbi_sync(e, crate::rma::GEX_NBI_ATOMICS), 0);
        assert_eq!(
            gex_atomic_op_u32(e, du32, 0, 256, GEX_AOP_GET as i32, 0, 0, 0, &mut old),
            0
        );
        assert_eq!(old, 7);
        // Wrong type, unknown op, misaligned.
        assert_eq!(
            gex_atomic_op_u64(e, du32, 0, 256, GEX_AOP_GET as i32, 0, 0, 0, null_mut()),
            GEX_ERR_INVALID.code()
        );
        assert_eq!(
            gex_atomic_op_u32(e, du32, 0, 256, 25, 0, 0, 0, null_mut()),
            GEX_ERR_INVALID.code()
        );
        assert_eq!(
            gex_atomic_op_u32(e, du32, 0, 258, GEX_AOP_ADD as i32, 1, 0, 0, null_mut()),
            GEX_ERR_RMA.code()
        );
        let mut x = 0f64;
        let op64 = |op: gex_aop_t, a, b, old: *mut f64| {
            gex_atomic_op_f64(e, df64, 0, 512, op as i32, a, b, 0, old)
        };
        assert_eq!(op64(GEX_AOP_SET, 2.5, 0.0, null_mut()), 0);
        assert_eq!(op64(GEX_AOP_FMAX, 1.0, 0.0, &mut x), 0);
        assert_eq!(x, 2.5);
        assert_eq!(op64(GEX_AOP_FCSWAP, 2.5, -1.0, &mut x), 0);
        assert_eq!(op64(GEX_AOP_GET, 0.0, 0.0, &mut x), 0);
        assert_eq!(x, -1.0);
        assert_eq!(gex_atomic_domain_free(du32), 0);
        assert_eq!(gex_atomic_domain_free(df64), 0);
        assert_eq!(gex_team_free(e, w), 0);
    }
}

#[test]
fn nbi_and_atomic_families_on_one_rank() {
    let (c, e) = open();
    // SAFETY: every call below has live handles and buffers valid for the lengths given,
    // alive until the syncs that complete them.
    unsafe {
        one_rank_nbi_and_memset(e);
        one_rank_atomics(e);
    }
    close(c, e);
}

/// A Long handler: records the payload's address and first byte.
unsafe extern "C" fn long_handler(
    _token: *mut gex_token_t,
    payload: *const c_void,
    len: usize,
    _args: *const u32,
    _nargs: usize,
    user: *mut c_void,
) {
    // SAFETY: `user` is the test's `[AtomicUsize; 3]`, alive while the endpoint polls;
    // the payload is `len` bytes of the segment nobody writes meanwhile.
    let (seen, first) = unsafe { (&*user.cast::<[AtomicUsize; 3]>(), *payload.cast::<u8>()) };
    seen[0].store(payload as usize, Ordering::Relaxed);
    seen[2].store(usize::from(first), Ordering::Relaxed);
    seen[1].store(len, Ordering::Release);
}

#[test]
fn a_long_am_lands_in_the_segment() {
    let (c, e) = open();
    let seen: [AtomicUsize; 3] = Default::default();
    // SAFETY: live handles, a handler of the right signature, `seen` alive until the
    // endpoint is closed, a payload valid for its length.
    unsafe {
        let mut idx = 0;
        let user = (&raw const seen).cast_mut().cast::<c_void>();
        assert_eq!(gex_am_register(e, Some(long_handler), user, &mut idx), 0);
        let (mut base, mut len, mut max) = (null_mut::<c_void>(), 0usize, 0usize);
        assert_eq!(gex_ep_segment(e, &mut base, &mut len), 0);
        assert_eq!(gex_am_max_long(e, 0, &mut max), 0);
        assert!(max >= 64, "{max}");
        let p = [42u8; 64];
        assert_eq!(
            gex_am_request_long(e, 0, idx, null(), 0, p.as_ptr().cast(), 64, 4096),
            0
        );
        while seen[1].load(Ordering::Acquire) == 0 {
            assert_eq!(gex_ep_poll(e, null_mut()), 0);
        }
        let got = seen.each_ref().map(|x| x.load(Ordering::Relaxed));
        assert_eq!(got, [base as usize + 4096, 64, 42]);
        assert_eq!(
            gex_am_request_long(e, 0, idx, null(), 0, p.as_ptr().cast(), 64, len - 8),
            GEX_ERR_AM.code()
        );
    }
    close(c, e);
}

#[test]
fn the_new_entry_points_refuse_null_and_foreign_handles() {
    let (c, e) = open();
    let junk = vec![0u64; 64];
    let foreign_team = junk.as_ptr().cast::<crate::handle::gex_team_t>();
    let foreign_ad = junk.as_ptr().cast::<crate::handle::gex_atomic_domain_t>();
    let null_ = GEX_ERR_NULL.code();
    let bad = GEX_ERR_INVALID.code();
    let u64t = gex_dt_t::GEX_DT_U64 as i32;
    let mut x = [0u64; 4];
    // SAFETY: live handles, buffers valid for the counts given, or NULL/foreign
    // pointers to readable zeroed memory that the checks must refuse before use.
    unsafe {
        let mut w = null_mut();
        assert_eq!(gex_team_world(e, &mut w), 0);
        let p = x.as_mut_ptr().cast::<c_void>();
        // Teams.
        assert_eq!(gex_team_world(e, null_mut()), null_);
        assert_eq!(gex_team_world(null(), &mut w), null_);
        let mut t = null_mut();
        assert_eq!(gex_team_split(e, null(), 0, 0, &mut t), null_);
        assert_eq!(gex_team_split(e, foreign_team, 0, 0, &mut t), bad);
        assert_eq!(gex_team_split(e, w, 0, 0, null_mut()), null_);
        assert_eq!(gex_team_create(e, w, null(), 1, &mut t), null_);
        assert_eq!(gex_team_rank(foreign_team, null_mut(), null_mut()), bad);
        assert_eq!(gex_team_translate(w, 0, null_mut()), null_);
        assert_eq!(gex_team_free(e, foreign_team.cast_mut()), bad);
        // Collectives.
        assert_eq!(gex_team_barrier(e, foreign_team), bad);
        assert_eq!(gex_team_barrier_nb(e, w, null_mut()), null_);
        assert_eq!(gex_broadcast(e, w, 0, null_mut(), 1, u64t), null_);
        assert_eq!(gex_gather_all(e, w, p, null_mut(), 1, u64t), null_);
        assert_eq!(gex_allreduce(e, w, null(), p, 1, u64t, 0), null_);
        assert_eq!(
            gex_exchange_nb(e, w, p, p.wrapping_add(16), 1, u64t, null_mut()),
            null_
        );
        let misaligned = p.cast::<u8>().wrapping_add(1).cast::<c_void>();
        assert_eq!(gex_allreduce(e, w, misaligned, p, 1, u64t, 0), bad);
        assert_eq!(gex_team_barrier_notify(null(), w, 0, 0), null_);
        // RMA, NBI.
        assert_eq!(gex_put_nbi(e, 0, 0, null(), 1), null_);
        assert_eq!(gex_get_nbi(e, null_mut(), 0, 0, 1), null_);
        assert_eq!(gex_put_nbi(e, 1, 0, p, 1), bad);
        assert_eq!(gex_memset_nb(e, 0, 0, 0, 1, null_mut()), null_);
        assert_eq!(gex_nbi_sync(null(), crate::rma::GEX_NBI_ALL), null_);
        // Atomics.
        let mut ad = null_mut();
        let all = crate::atomic::GEX_AOPS_ALL;
        assert_eq!(
            gex_atomic_domain_create_ex(e, w, u64t, all, null_mut()),
            null_
        );
        assert_eq!(
            gex_atomic_domain_create_ex(e, null(), u64t, all, &mut ad),
            null_
        );
        assert_eq!(
            gex_atomic_domain_create_ex(e, w, u64t, 1 << 25, &mut ad),
            bad
        );
        assert!(ad.is_null());
        assert_eq!(
            gex_atomic_op_u64(e, foreign_ad, 0, 0, 0, 0, 0, 0, null_mut()),
            bad
        );
        assert_eq!(gex_atomic_op_nbi_i32(e, null(), 0, 0, 0, 0, 0, 0), null_);
        // AMs and the client.
        assert_eq!(
            gex_am_request_long(e, 0, 128, null(), 1, null(), 0, 0),
            null_
        );
        assert_eq!(
            gex_am_reply_long(null_mut(), 128, null(), 0, null(), 0, 0),
            null_
        );
        assert_eq!(gex_am_max_long(e, 0, null_mut()), null_);
        let mut c2 = null_mut();
        assert_eq!(gex_client_init_ex(0, 2, &mut c2), bad);
        assert!(c2.is_null());
        assert_eq!(gex_team_free(e, w), 0);
    }
    close(c, e);
}

#[test]
fn endpoints_made_at_run_time_carry_rma_and_are_never_reused() {
    let (c, e0) = open();
    let (mut e1, mut i1) = (null_mut(), 0u16);
    // SAFETY: a live client, valid output slots.
    let r = unsafe { gex_ep_create(c, &mut e1, &mut i1) };
    ok(r);
    assert_eq!(i1, 1);
    // A put through the new endpoint lands in the segment of endpoint 1 (its index),
    // not endpoint 0's.
    let (word, mut back, mut zero) = (0x5eed_u64.to_le_bytes(), [0u8; 8], [9u8; 8]);
    // SAFETY: live endpoints; 8 readable / writable bytes.
    unsafe {
        ok(gex_put(e1, 0, 64, word.as_ptr().cast(), 8));
        ok(gex_get(e1, back.as_mut_ptr().cast(), 0, 64, 8));
        ok(gex_get(e0, zero.as_mut_ptr().cast(), 0, 64, 8));
    }
    assert_eq!((back, zero), (word, [0; 8]));
    // SAFETY: a live endpoint, given up.
    ok(unsafe { gex_ep_close(e1) });
    // Indices are not reused; the index output may be NULL; capacity runs out.
    let mut made = Vec::new();
    loop {
        let (mut e, mut i) = (null_mut(), 0u16);
        // SAFETY: a live client, valid output slots.
        let r = unsafe { gex_ep_create(c, &mut e, &mut i) };
        if r != 0 {
            assert_eq!(r, GEX_ERR_STATE as c_int, "{}", last());
            assert!(last().contains("GEX_MAX_ENDPOINTS"), "{}", last());
            break;
        }
        assert_eq!(i as usize, 2 + made.len());
        made.push(e);
    }
    assert!(!made.is_empty());
    // SAFETY: NULL slots are what the checks are for.
    let nulls = unsafe {
        (
            gex_ep_create(c, null_mut(), null_mut()),
            gex_ep_create(null(), &mut e1, null_mut()),
        )
    };
    assert_eq!(nulls, (GEX_ERR_NULL as c_int, GEX_ERR_NULL as c_int));
    for e in made {
        // SAFETY: live endpoints, given up.
        ok(unsafe { gex_ep_close(e) });
    }
    close(c, e0);
}
