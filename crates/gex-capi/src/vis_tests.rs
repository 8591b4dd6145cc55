//! In-process tests of the VIS entry points and of user-defined reduction operators
//! on a job of one rank (the C example `vis_reduce.c` covers multi-rank jobs).
#![allow(unsafe_code)]

use crate::client::*;
use crate::event::*;
use crate::handle::{gex_client_t, gex_ep_t};
use crate::rma::*;
use crate::status::*;
use crate::team::*;
use crate::userop::*;
use crate::vis::*;
use gex_status_t::*;
use std::ffi::{CStr, c_int, c_void};
use std::ptr::{null, null_mut};

fn last() -> String {
    // SAFETY: a NUL-terminated string valid until the next failing call on this thread.
    unsafe { CStr::from_ptr(gex_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// A client of one rank with endpoint 0 open, and its segment.
fn open() -> (*mut gex_client_t, *mut gex_ep_t, &'static mut [u8]) {
    let (mut c, mut e) = (null_mut(), null_mut());
    let (mut base, mut len) = (null_mut::<c_void>(), 0usize);
    // SAFETY: valid output slots; the segment is valid until the endpoint closes, and
    // the tests touch it only between gex calls on this thread.
    unsafe {
        assert_eq!(gex_client_init(1 << 16, &mut c), 0, "{}", last());
        assert_eq!(gex_ep_open(c, 0, &mut e), 0, "{}", last());
        assert_eq!(gex_ep_segment(e, &mut base, &mut len), 0);
        (c, e, std::slice::from_raw_parts_mut(base.cast::<u8>(), len))
    }
}

fn close(c: *mut gex_client_t, e: *mut gex_ep_t) {
    // SAFETY: live handles, given up here.
    assert_eq!(unsafe { gex_ep_close(e) }, 0, "{}", last());
    // SAFETY: as above.
    assert_eq!(unsafe { gex_client_finalize(c) }, 0, "{}", last());
}

fn wait(e: *mut gex_ep_t, mut ev: *mut gex_event_t) {
    // SAFETY: a live endpoint and a live event of it.
    assert_eq!(unsafe { gex_event_wait(e, &mut ev) }, 0, "{}", last());
    assert!(ev.is_null());
}

/// The nonblocking and NBI strided gets of the shape `strided_put_and_get_with_byte_strides`
/// put at offset 8: only the addressed elements are written, at completion.
///
/// # Safety
/// `e` is a live endpoint whose segment holds that put's elements.
unsafe fn strided_gets_nb_nbi(e: *mut gex_ep_t, dst_st: &[isize], counts: &[usize]) {
    // SAFETY: the caller's endpoint; the buffers are locals of the shapes given, alive
    // until the event or sync that completes them.
    unsafe {
        // Nonblocking get: only the addressed elements are written, the gaps are kept.
        let mut gappy = [0xaaaau16; 12];
        let gap_st = [4isize, 12];
        let mut ev = null_mut();
        assert_eq!(
            gex_get_strided_nb(
                e,
                gappy.as_mut_ptr().cast(),
                gap_st.as_ptr(),
                0,
                8,
                dst_st.as_ptr(),
                2,
                counts.as_ptr(),
                2,
                &mut ev
            ),
            0,
            "{}",
            last()
        );
        assert_eq!(gappy, [0xaaaa; 12], "written before completion");
        wait(e, ev);
        assert_eq!(
            gappy,
            [
                16, 0xaaaa, 17, 0xaaaa, 18, 0xaaaa, 11, 0xaaaa, 12, 0xaaaa, 13, 0xaaaa
            ]
        );
        // NBI: the same, completed by the gets' NBI sync (a puts' sync leaves it).
        let mut gappy = [0xaaaau16; 12];
        assert_eq!(
            gex_get_strided_nbi(
                e,
                gappy.as_mut_ptr().cast(),
                gap_st.as_ptr(),
                0,
                8,
                dst_st.as_ptr(),
                2,
                counts.as_ptr(),
                2
            ),
            0,
            "{}",
            last()
        );
        assert_eq!(gex_nbi_sync(e, GEX_NBI_PUTS), 0);
        assert_eq!(gappy, [0xaaaa; 12], "written by a puts' sync");
        assert_eq!(gex_nbi_sync(e, GEX_NBI_GETS), 0);
        assert_eq!(
            gappy,
            [
                16, 0xaaaa, 17, 0xaaaa, 18, 0xaaaa, 11, 0xaaaa, 12, 0xaaaa, 13, 0xaaaa
            ]
        );
    }
}

/// The nonblocking and NBI strided puts of the same shape, then the degenerate shapes
/// (ndims 0: one element; a count of 0: nothing moves, NULL pointers allowed).
///
/// # Safety
/// `e` is a live endpoint, `seg` its segment (touched only between gex calls), `src`
/// valid for the shape `src_st`/`counts`.
unsafe fn strided_puts_nb_nbi_degenerate(
    e: *mut gex_ep_t,
    seg: &mut [u8],
    src: *const c_void,
    src_st: &[isize],
    dst_st: &[isize],
    counts: &[usize],
) {
    // SAFETY: as the caller promised; the other buffers are locals.
    unsafe {
        // Nonblocking and NBI puts of the same shape.
        seg[..64].fill(0);
        let mut ev = null_mut();
        assert_eq!(
            gex_put_strided_nb(
                e,
                0,
                8,
                dst_st.as_ptr(),
                src,
                src_st.as_ptr(),
                2,
                counts.as_ptr(),
                2,
                &mut ev
            ),
            0
        );
        wait(e, ev);
        assert_eq!(&seg[8..10], 16u16.to_ne_bytes());
        assert_eq!(
            gex_put_strided_nbi(
                e,
                0,
                40,
                dst_st.as_ptr(),
                src,
                src_st.as_ptr(),
                2,
                counts.as_ptr(),
                2
            ),
            0
        );
        assert_eq!(gex_nbi_sync(e, GEX_NBI_PUTS), 0);
        assert_eq!(seg[8..20], seg[40..52]);
        // ndims 0: one element; a count of 0: nothing moves (NULL pointers allowed).
        let one = 0x1234u16;
        assert_eq!(
            gex_put_strided(
                e,
                0,
                60,
                null(),
                (&raw const one).cast(),
                null(),
                2,
                null(),
                0
            ),
            0
        );
        assert_eq!(&seg[60..62], one.to_ne_bytes());
        let zero = [0usize, 5];
        assert_eq!(
            gex_put_strided(
                e,
                0,
                0,
                dst_st.as_ptr(),
                null(),
                src_st.as_ptr(),
                2,
                zero.as_ptr(),
                2
            ),
            0,
            "{}",
            last()
        );
        assert_eq!(&seg[8..10], 16u16.to_ne_bytes());
    }
}

#[test]
fn strided_put_and_get_with_byte_strides() {
    let (c, e, seg) = open();
    let m: Vec<u16> = (0..20).collect(); // a 4 x 5 matrix of u16, row-major
    let (counts, src_st) = ([3usize, 2], [2isize, -10]);
    // Rows 3 then 2 (negative row stride), columns 1..4: element (i, j) at m[(3 - j) * 5 + 1 + i].
    let src = m[3 * 5 + 1..].as_ptr().cast::<c_void>();
    let dst_st = [2isize, 6];
    // SAFETY: every call has a live endpoint and arrays/buffers valid for the shapes.
    unsafe {
        seg[..64].fill(0xee);
        assert_eq!(
            gex_put_strided(
                e,
                0,
                8,
                dst_st.as_ptr(),
                src,
                src_st.as_ptr(),
                2,
                counts.as_ptr(),
                2
            ),
            0,
            "{}",
            last()
        );
        let got: Vec<u16> = seg[8..20]
            .chunks(2)
            .map(|b| u16::from_ne_bytes([b[0], b[1]]))
            .collect();
        assert_eq!(got, [16, 17, 18, 11, 12, 13]);
        assert_eq!(seg[7], 0xee);
        assert_eq!(seg[20], 0xee);
        // Back with a transposed, reflected layout: element (i, j) to out[(2 - i) * 2 + j].
        let mut out = [0xffffu16; 6];
        let out_st = [-4isize, 2];
        let dst = out.as_mut_ptr().add(4).cast::<c_void>();
        assert_eq!(
            gex_get_strided(
                e,
                dst,
                out_st.as_ptr(),
                0,
                8,
                dst_st.as_ptr(),
                2,
                counts.as_ptr(),
                2
            ),
            0,
            "{}",
            last()
        );
        assert_eq!(out, [18, 13, 17, 12, 16, 11]);
        strided_gets_nb_nbi(e, &dst_st, &counts);
        strided_puts_nb_nbi_degenerate(e, seg, src, &src_st, &dst_st, &counts);
        close(c, e);
    }
}

#[test]
fn strided_bad_input_is_refused() {
    let (c, e, seg) = open();
    let len = seg.len();
    let src = [0u8; 64];
    let (counts, st) = ([4usize, 4], [1isize, 8]);
    let s = src.as_ptr().cast::<c_void>();
    let mut ev = null_mut();
    // SAFETY: arguments the checks refuse before use, or valid ones.
    unsafe {
        let put = |off, dst_st: *const isize, src: *const c_void, counts: *const usize, n| {
            gex_put_strided(e, 0, off, dst_st, src, st.as_ptr(), 1, counts, n)
        };
        assert_eq!(put(0, null(), s, counts.as_ptr(), 2), GEX_ERR_NULL.code());
        assert!(last().contains("dst_strides"), "{}", last());
        assert_eq!(put(0, st.as_ptr(), s, null(), 2), GEX_ERR_NULL.code());
        assert_eq!(
            put(0, st.as_ptr(), null(), counts.as_ptr(), 2),
            GEX_ERR_NULL.code()
        );
        assert_eq!(
            put(len - 8, st.as_ptr(), s, counts.as_ptr(), 2),
            GEX_ERR_RMA.code()
        );
        // A negative remote stride reaching below the segment's start.
        let neg = [1isize, -8];
        assert_eq!(
            put(8, neg.as_ptr(), s, counts.as_ptr(), 2),
            GEX_ERR_RMA.code()
        );
        assert_eq!(
            put(24, neg.as_ptr(), s, counts.as_ptr(), 2),
            0,
            "{}",
            last()
        );
        let huge = [usize::MAX, 2];
        assert_eq!(
            put(0, st.as_ptr(), s, huge.as_ptr(), 2),
            GEX_ERR_INVALID.code()
        );
        assert_eq!(
            gex_put_strided(e, 1, 0, st.as_ptr(), s, st.as_ptr(), 1, counts.as_ptr(), 2),
            GEX_ERR_INVALID.code()
        );
        assert_eq!(
            gex_put_strided_nb(
                e,
                0,
                0,
                st.as_ptr(),
                s,
                st.as_ptr(),
                1,
                counts.as_ptr(),
                2,
                null_mut()
            ),
            GEX_ERR_NULL.code()
        );
        assert_eq!(
            gex_get_strided_nb(
                e,
                null_mut(),
                st.as_ptr(),
                0,
                0,
                st.as_ptr(),
                1,
                counts.as_ptr(),
                2,
                &mut ev
            ),
            GEX_ERR_NULL.code()
        );
        assert!(ev.is_null());
        assert_eq!(
            gex_get_strided(
                e,
                null_mut(),
                st.as_ptr(),
                0,
                len,
                st.as_ptr(),
                1,
                counts.as_ptr(),
                2
            ),
            GEX_ERR_NULL.code()
        );
    }
    close(c, e);
}

#[test]
fn vector_and_indexed_put_and_get() {
    let (c, e, seg) = open();
    let pieces = [
        gex_piece_t {
            offset: 100,
            len: 3,
        },
        gex_piece_t { offset: 10, len: 2 },
        gex_piece_t { offset: 50, len: 0 },
    ];
    let src = *b"abcde";
    let offsets = [30usize, 20, 40];
    // SAFETY: every call has a live endpoint and arrays/buffers valid for the counts.
    unsafe {
        seg[..128].fill(0);
        assert_eq!(
            gex_put_vector(e, 0, pieces.as_ptr(), 3, src.as_ptr().cast(), 5),
            0,
            "{}",
            last()
        );
        assert_eq!((&seg[100..103], &seg[10..12]), (&b"abc"[..], &b"de"[..]));
        let mut back = [0u8; 5];
        assert_eq!(
            gex_get_vector(e, back.as_mut_ptr().cast(), 5, 0, pieces.as_ptr(), 3),
            0
        );
        assert_eq!(&back, b"abcde");
        let mut nb = [0u8; 5];
        let mut ev = null_mut();
        assert_eq!(
            gex_get_vector_nb(e, nb.as_mut_ptr().cast(), 5, 0, pieces.as_ptr(), 3, &mut ev),
            0
        );
        wait(e, ev);
        assert_eq!(&nb, b"abcde");
        let mut nbi = [0u8; 5];
        assert_eq!(
            gex_get_vector_nbi(e, nbi.as_mut_ptr().cast(), 5, 0, pieces.as_ptr(), 3),
            0
        );
        let rev = [40usize, 30];
        let mut ix3 = [0u8; 4];
        // Before the indexed put below, so this get must read the bytes as they are now.
        let was = [seg[40], seg[41], seg[30], seg[31]];
        assert_eq!(
            gex_get_indexed_nbi(e, ix3.as_mut_ptr().cast(), 0, rev.as_ptr(), 2, 2),
            0
        );
        assert_eq!(gex_nbi_sync(e, GEX_NBI_GETS), 0);
        assert_eq!(&nbi, b"abcde");
        assert_eq!(ix3, was);
        assert_eq!(
            gex_put_vector_nb(
                e,
                0,
                pieces.as_ptr(),
                2,
                b"vwxyz".as_ptr().cast(),
                5,
                &mut ev
            ),
            0
        );
        wait(e, ev);
        assert_eq!(&seg[100..103], b"vwx");
        assert_eq!(
            gex_put_vector_nbi(e, 0, pieces.as_ptr(), 1, b"123".as_ptr().cast(), 3),
            0
        );
        assert_eq!(gex_nbi_sync(e, GEX_NBI_PUTS), 0);
        assert_eq!(&seg[100..103], b"123");
        // Indexed: three pieces of two bytes.
        assert_eq!(
            gex_put_indexed(e, 0, offsets.as_ptr(), 3, 2, b"ABCDEF".as_ptr().cast()),
            0
        );
        assert_eq!(
            (&seg[30..32], &seg[20..22], &seg[40..42]),
            (&b"AB"[..], &b"CD"[..], &b"EF"[..])
        );
        let mut ix = [0u8; 6];
        assert_eq!(
            gex_get_indexed(e, ix.as_mut_ptr().cast(), 0, offsets.as_ptr(), 3, 2),
            0
        );
        assert_eq!(&ix, b"ABCDEF");
        let rev = [40usize, 30];
        let mut ix2 = [0u8; 4];
        assert_eq!(
            gex_get_indexed_nb(e, ix2.as_mut_ptr().cast(), 0, rev.as_ptr(), 2, 2, &mut ev),
            0
        );
        wait(e, ev);
        assert_eq!(&ix2, b"EFAB");
        assert_eq!(
            gex_put_indexed_nb(e, 0, rev.as_ptr(), 2, 1, b"xy".as_ptr().cast(), &mut ev),
            0
        );
        wait(e, ev);
        assert_eq!((seg[40], seg[30]), (b'x', b'y'));
        assert_eq!(
            gex_put_indexed_nbi(e, 0, rev.as_ptr(), 2, 1, b"pq".as_ptr().cast()),
            0
        );
        assert_eq!(gex_nbi_sync(e, GEX_NBI_ALL), 0);
        assert_eq!((seg[40], seg[30]), (b'p', b'q'));
        // Nothing to move: NULL arrays are fine with 0 pieces.
        assert_eq!(gex_put_vector(e, 0, null(), 0, null(), 0), 0, "{}", last());
        assert_eq!(
            gex_get_indexed(e, null_mut(), 0, null(), 0, 8),
            0,
            "{}",
            last()
        );
    }
    close(c, e);
}

#[test]
fn vector_and_indexed_bad_input_is_refused() {
    let (c, e, seg) = open();
    let len = seg.len();
    let pieces = [
        gex_piece_t { offset: 0, len: 4 },
        gex_piece_t {
            offset: len - 2,
            len: 4,
        },
    ];
    let src = [0u8; 8];
    let s = src.as_ptr().cast::<c_void>();
    let mut ev = null_mut();
    // SAFETY: arguments the checks refuse before use.
    unsafe {
        assert_eq!(
            gex_put_vector(e, 0, pieces.as_ptr(), 1, s, 5),
            GEX_ERR_INVALID.code()
        );
        assert!(last().contains("total"), "{}", last());
        assert_eq!(gex_put_vector(e, 0, null(), 1, s, 4), GEX_ERR_NULL.code());
        assert_eq!(
            gex_put_vector(e, 0, pieces.as_ptr(), 1, null(), 4),
            GEX_ERR_NULL.code()
        );
        assert_eq!(
            gex_put_vector(e, 0, pieces.as_ptr(), 2, s, 8),
            GEX_ERR_RMA.code()
        );
        assert_eq!(
            gex_put_vector(e, 1, pieces.as_ptr(), 1, s, 4),
            GEX_ERR_INVALID.code()
        );
        let mut d = [0u8; 8];
        assert_eq!(
            gex_get_vector(e, d.as_mut_ptr().cast(), 3, 0, pieces.as_ptr(), 1),
            GEX_ERR_INVALID.code()
        );
        assert_eq!(
            gex_get_vector_nb(
                e,
                d.as_mut_ptr().cast(),
                4,
                0,
                pieces.as_ptr(),
                1,
                null_mut()
            ),
            GEX_ERR_NULL.code()
        );
        let offs = [0usize, len - 1];
        assert_eq!(
            gex_put_indexed(e, 0, offs.as_ptr(), 2, 2, s),
            GEX_ERR_RMA.code()
        );
        assert_eq!(
            gex_put_indexed(e, 0, offs.as_ptr(), 2, usize::MAX, s),
            GEX_ERR_INVALID.code()
        );
        assert_eq!(
            gex_get_indexed(e, d.as_mut_ptr().cast(), 0, null(), 2, 2),
            GEX_ERR_NULL.code()
        );
        assert_eq!(
            gex_get_indexed_nb(e, null_mut(), 0, offs.as_ptr(), 1, 2, &mut ev),
            GEX_ERR_NULL.code()
        );
        assert!(ev.is_null());
    }
    close(c, e);
}

/// `inout = inout · in` on 2x2 matrices of i64 (row-major): not commutative.
unsafe extern "C" fn matmul(inout: *mut c_void, inp: *const c_void, n: usize, arg: *mut c_void) {
    // SAFETY: gex passes `n` aligned elements of 32 bytes each; `arg` is a counter.
    unsafe {
        let a = std::slice::from_raw_parts_mut(inout.cast::<[i64; 4]>(), n);
        let b = std::slice::from_raw_parts(inp.cast::<[i64; 4]>(), n);
        for (x, y) in a.iter_mut().zip(b) {
            *x = [
                x[0] * y[0] + x[1] * y[2],
                x[0] * y[1] + x[1] * y[3],
                x[2] * y[0] + x[3] * y[2],
                x[2] * y[1] + x[3] * y[3],
            ];
        }
        *arg.cast::<usize>() += n;
    }
}

#[test]
fn user_operators_combine_in_order_and_run_collectives() {
    let (c, e, _) = open();
    let mut calls = 0usize;
    let arg = (&raw mut calls).cast::<c_void>();
    // SAFETY: `matmul` is thread-safe for this test's single thread; `arg` outlives
    // every collective; the buffers are valid for the counts given.
    unsafe {
        let mut op = null_mut();
        assert_eq!(
            gex_op_create(Some(matmul), 32, 0, arg, &mut op),
            0,
            "{}",
            last()
        );
        // The operator gex-coll applies: left ⊕ right, whichever side arrives.
        let u = crate::ptr::handle(op).unwrap();
        let f = crate::userop::reduce_op_for_test(u);
        let bytes = |m: [i64; 4]| -> Vec<u8> { m.iter().flat_map(|x| x.to_ne_bytes()).collect() };
        let (a, b) = (bytes([1, 1, 0, 1]), bytes([1, 0, 1, 1]));
        let mut acc = a.clone();
        f(&mut acc, &b, false); // acc = a · b
        assert_eq!(acc, bytes([2, 1, 1, 1]));
        let mut acc = a.clone();
        f(&mut acc, &b, true); // acc = b · a
        assert_eq!(acc, bytes([1, 1, 1, 2]));
        assert_eq!(calls, 2);

        let mut w = null_mut();
        assert_eq!(gex_team_world(e, &mut w), 0);
        let src = [[1i64, 2, 3, 4], [5, 6, 7, 8]];
        let s = src.as_ptr().cast::<c_void>();
        // On one rank every form gives back its input: each writes `n` matrices to
        // `d` (through an event for the `_nb` forms) and nothing past them.
        type Form<'a> = &'a dyn Fn(*mut c_void, usize, *mut *mut gex_event_t) -> c_int;
        let forms: [(&str, Form<'_>); 10] = [
            ("allreduce", &|d, n, _| {
                gex_allreduce_user(e, w, s, d, n, op)
            }),
            ("allreduce_nb", &|d, n, ev| {
                gex_allreduce_user_nb(e, w, s, d, n, op, ev)
            }),
            ("reduce", &|d, n, _| gex_reduce_user(e, w, 0, s, d, n, op)),
            ("reduce_nb", &|d, n, ev| {
                gex_reduce_user_nb(e, w, 0, s, d, n, op, ev)
            }),
            ("scan", &|d, n, _| gex_scan_user(e, w, s, d, n, op)),
            ("scan_nb", &|d, n, ev| {
                gex_scan_user_nb(e, w, s, d, n, op, ev)
            }),
            ("reduce_scatter", &|d, n, _| {
                gex_reduce_scatter_user(e, w, s, d, n, op)
            }),
            ("reduce_scatter_nb", &|d, n, ev| {
                gex_reduce_scatter_user_nb(e, w, s, d, n, op, ev)
            }),
            // One rank: rank 0's exclusive prefix is empty, so nothing is written.
            ("exscan", &|d, n, _| gex_exscan_user(e, w, s, d, n, op)),
            ("exscan_nb", &|d, n, ev| {
                gex_exscan_user_nb(e, w, s, d, n, op, ev)
            }),
        ];
        for (name, f) in forms {
            for n in [0, 1, 2] {
                let mut dst = [[0i64; 4]; 2];
                let mut ev = null_mut();
                assert_eq!(
                    f(dst.as_mut_ptr().cast(), n, &mut ev),
                    0,
                    "{name}: {}",
                    last()
                );
                assert_eq!(ev.is_null(), !name.ends_with("_nb"), "{name}");
                if !ev.is_null() {
                    wait(e, ev);
                }
                let wrote = if name.starts_with("exscan") { 0 } else { n };
                assert_eq!(dst[..wrote], src[..wrote], "{name} of {n}");
                assert!(
                    dst[wrote..].iter().all(|m| *m == [0; 4]),
                    "{name} wrote past {wrote}"
                );
            }
        }
        let mut dst = [[0i64; 4]; 2];
        // Bad input.
        assert_eq!(
            gex_reduce_user(e, w, 1, src.as_ptr().cast(), dst.as_mut_ptr().cast(), 2, op),
            GEX_ERR_INVALID.code()
        );
        assert_eq!(
            gex_allreduce_user(
                e,
                w,
                src.as_ptr().cast(),
                dst.as_mut_ptr().cast(),
                2,
                null()
            ),
            GEX_ERR_NULL.code()
        );
        assert_eq!(
            gex_allreduce_user(
                e,
                w,
                src.as_ptr().cast(),
                src.as_ptr().cast_mut().cast(),
                2,
                op
            ),
            GEX_ERR_INVALID.code()
        );
        assert_eq!(
            gex_scan_user_nb(
                e,
                w,
                src.as_ptr().cast(),
                dst.as_mut_ptr().cast(),
                2,
                op,
                null_mut()
            ),
            GEX_ERR_NULL.code()
        );
        let mut bad = null_mut();
        assert_eq!(
            gex_op_create(Some(matmul), 24, 0, arg, &mut bad),
            GEX_ERR_INVALID.code()
        );
        assert_eq!(
            gex_op_create(None, 32, 0, arg, &mut bad),
            GEX_ERR_NULL.code()
        );
        assert_eq!(
            gex_op_create(Some(matmul), 32, 0, arg, null_mut()),
            GEX_ERR_NULL.code()
        );
        assert!(bad.is_null());
        assert_eq!(gex_op_free(op), 0);
        assert_eq!(gex_op_free(null_mut()), 0);
        assert_eq!(gex_team_free(e, w), 0);
    }
    close(c, e);
}
