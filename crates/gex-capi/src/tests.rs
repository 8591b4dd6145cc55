//! In-process tests of the entry points on a job of one rank (the C examples cover
//! multi-rank jobs): the argument checks, the one-thread-per-endpoint rule, the
//! in-handler rule, events, and the client's life.
#![allow(unsafe_code)]

use crate::am::*;
use crate::client::*;
use crate::coll::*;
use crate::event::*;
use crate::handle::{HandlerMark, gex_client_t, gex_ep_t};
use crate::rma::*;
use crate::status::*;
use gex_status_t::*;
use std::ffi::{CStr, c_void};
use std::ptr::{null, null_mut};

fn last() -> String {
    // SAFETY: a NUL-terminated string valid until the next failing call on this thread.
    unsafe { CStr::from_ptr(gex_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// A client of one rank with endpoint 0 open.
fn open() -> (*mut gex_client_t, *mut gex_ep_t) {
    let (mut c, mut e) = (null_mut(), null_mut());
    // SAFETY: valid output slots.
    assert_eq!(unsafe { gex_client_init(1 << 16, &mut c) }, 0, "{}", last());
    // SAFETY: a live client, a valid output slot.
    assert_eq!(unsafe { gex_ep_open(c, 0, &mut e) }, 0, "{}", last());
    (c, e)
}

fn close(c: *mut gex_client_t, e: *mut gex_ep_t) {
    // SAFETY: live handles, given up here.
    assert_eq!(unsafe { gex_ep_close(e) }, 0, "{}", last());
    // SAFETY: as above.
    assert_eq!(unsafe { gex_client_finalize(c) }, 0, "{}", last());
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
