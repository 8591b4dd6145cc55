//! Client and endpoint entry points: init from the environment, rank/size, the
//! segment, poll, finalize.
#![allow(unsafe_code)]

use crate::handle::{gex_client_t, gex_ep_t, in_handler};
use crate::ptr;
use crate::status::{Error, entry, gex_status_t};
use gex_sync::atomic::Ordering;
use std::ffi::{c_int, c_void};

/// Initialises this process's rank of the job and writes its client to `*client`.
///
/// Collective over every rank. The bootstrap comes from the environment, as for a
/// Rust program (`gex::start`): the job of the launcher that started this process
/// (gex-run, mpiexec, srun, mpirun), or a job of one rank when started alone; the
/// conduit from `GEX_CONDUIT` (default smp). `segment_size` is the size of this rank's
/// segment in bytes (0: the default; `GEX_SEGMENT_SIZE` overrides both). Every
/// `GEX_*` setting of docs/env.md applies.
///
/// Returns `GEX_OK`; `GEX_ERR_NULL` if `client` is NULL; `GEX_ERR_INIT` if the
/// bootstrap, the configuration or the conduit failed (the last error says which).
///
/// # Safety
/// `client` is NULL or valid for writing one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_client_init(
    segment_size: usize,
    client: *mut *mut gex_client_t,
) -> c_int {
    // SAFETY: the caller's promise, passed on.
    unsafe { gex_client_init_ex(segment_size, 0, client) }
}

/// `gex_client_init_ex` flag: every endpoint gets a progress thread that polls it
/// while the program computes outside gex (peers' gets, atomics and collectives over
/// active messages are served meanwhile; AM handlers may then run on that thread).
/// `GEX_PROGRESS_THREAD=0` or `1` in the environment overrides it.
pub const GEX_INIT_PROGRESS_THREAD: u32 = 1;

/// As [`gex_client_init`], with `flags`: 0, or `GEX_INIT_PROGRESS_THREAD`.
///
/// Returns as [`gex_client_init`], and `GEX_ERR_INVALID` for an unknown flag.
///
/// # Safety
/// As [`gex_client_init`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_client_init_ex(
    segment_size: usize,
    flags: u32,
    client: *mut *mut gex_client_t,
) -> c_int {
    entry(|| {
        if flags & !GEX_INIT_PROGRESS_THREAD != 0 {
            return Err(Error::invalid(format!(
                "unknown gex_client_init_ex flags {flags:#x}"
            )));
        }
        if client.is_null() {
            return Err(Error::null("client"));
        }
        if in_handler() {
            return Err(Error::new(
                gex_status_t::GEX_ERR_IN_HANDLER,
                "gex_client_init inside an AM handler",
            ));
        }
        let mut b = gex_facade::builder();
        if segment_size > 0 {
            b = b.segment_size(segment_size);
        }
        if flags & GEX_INIT_PROGRESS_THREAD != 0 {
            b = b.progress_thread(true);
        }
        let c = gex_facade::start(b)?;
        let h = ptr::into_raw(Box::new(gex_client_t::new(c)));
        // SAFETY: `client` is non-null and writable (the caller's promise).
        unsafe { ptr::write(client, h, "client") }?;
        Ok(gex_status_t::GEX_OK)
    })
}

/// Writes this process's rank (`0..size`) to `*rank`.
///
/// # Safety
/// `client` is NULL or a client from `gex_client_init` not yet finalised; `rank` is
/// NULL or valid for writing one `uint32_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_client_rank(client: *const gex_client_t, rank: *mut u32) -> c_int {
    // SAFETY: the caller's promises, as `ptr::write_of` states them.
    entry(|| unsafe { ptr::write_of(client, rank, "rank", |c| Ok(c.client.rank())) })
}

/// Writes the number of ranks of the job to `*size`.
///
/// # Safety
/// As [`gex_client_rank`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_client_size(client: *const gex_client_t, size: *mut u32) -> c_int {
    // SAFETY: the caller's promises, as `ptr::write_of` states them.
    entry(|| unsafe { ptr::write_of(client, size, "size", |c| Ok(c.client.size())) })
}

/// Finalises the client (collective over every rank) and frees it: every rank waits
/// for the others, then tells the launcher it finished cleanly. Quiesce AM traffic
/// first (`gex_ep_barrier`) and close every endpoint before.
///
/// Returns `GEX_OK` (the handle is freed); `GEX_ERR_STATE` if endpoints of this client
/// are still open (nothing is done, the handle stays valid); `GEX_ERR_INIT` if the
/// bootstrap failed (the handle is freed all the same); `GEX_ERR_NULL` /
/// `GEX_ERR_INVALID` for a NULL or closed handle.
///
/// # Safety
/// `client` is NULL or a client from `gex_client_init` not yet finalised, used by no
/// other thread during or after the call (when it returns `GEX_OK` or `GEX_ERR_INIT`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_client_finalize(client: *mut gex_client_t) -> c_int {
    entry(|| {
        if in_handler() {
            return Err(Error::new(
                gex_status_t::GEX_ERR_IN_HANDLER,
                "gex_client_finalize inside an AM handler",
            ));
        }
        // SAFETY: the caller's promise, as `ptr::handle` states it.
        let c = unsafe { ptr::handle(client) }?;
        let open = c.open.load(Ordering::Acquire);
        if open > 0 {
            return Err(Error::new(
                gex_status_t::GEX_ERR_STATE,
                format!(
                    "{open} endpoint(s) of this client are still open: gex_ep_close them first"
                ),
            ));
        }
        // SAFETY: as above; the caller no longer uses the handle.
        let c = unsafe { ptr::take(client) }?;
        c.client.finalize()?;
        Ok(gex_status_t::GEX_OK)
    })
}

/// Opens endpoint `index` of the client (0: the primordial endpoint; each index
/// `0..GEX_ENDPOINTS` can be opened once) with the RMA and collectives layers, and
/// writes it to `*ep`. AM handler tables, atomic domains and collectives are per
/// endpoint index: open the same indices on every rank.
///
/// Returns `GEX_OK`; `GEX_ERR_INVALID` if there is no such endpoint or it was opened
/// already; `GEX_ERR_NULL` / `GEX_ERR_INVALID` for the handles.
///
/// # Safety
/// `client` is NULL or a live client; `ep` is NULL or valid for writing one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_ep_open(
    client: *const gex_client_t,
    index: u16,
    ep: *mut *mut gex_ep_t,
) -> c_int {
    entry(|| {
        // SAFETY: the caller's promises, passed on.
        unsafe { new_ep(client, ep, |c| Ok(c.endpoint(index)?)) }?;
        Ok(gex_status_t::GEX_OK)
    })
}

/// The body of the endpoint constructors: the client checked and `ep` non-null, then
/// `make` on the client; the new endpoint's handle written to `*ep` and its index
/// returned.
///
/// # Safety
/// `client` is NULL or a live client; `ep` is NULL or valid for writing one pointer.
unsafe fn new_ep(
    client: *const gex_client_t,
    ep: *mut *mut gex_ep_t,
    make: impl FnOnce(&gex_facade::Client) -> Result<gex_facade::OwnedEndpoint, Error>,
) -> Result<u16, Error> {
    // SAFETY: the caller's promise, as `ptr::handle` states it.
    let c = unsafe { ptr::handle(client) }?;
    if ep.is_null() {
        return Err(Error::null("ep"));
    }
    let e = make(&c.client)?;
    let i = e.addr().ep;
    let h = ptr::into_raw(Box::new(gex_ep_t::new(e, c.open.clone())));
    // SAFETY: `ep` is non-null and writable (the caller's promise).
    unsafe { ptr::write(ep, h, "ep") }?;
    Ok(i)
}

/// Makes a new endpoint of the client at run time, with the RMA and collectives
/// layers, and writes it to `*ep` and its index to `*index` (NULL when not wanted).
/// Not collective: peers reach it from now on (found on first contact), and only this
/// endpoint's owner polls its traffic, so each thread of a runtime can drive an
/// endpoint of its own without touching the others'. As with `gex_ep_open`, a call
/// reaches the endpoint of the same index on other ranks: indices are handed out in
/// order (after the `GEX_ENDPOINTS` of initialisation) and never reused, so ranks that
/// create their endpoints in the same order get the same indices. A client makes at
/// most `GEX_MAX_ENDPOINTS` endpoints over its life (both kinds; default 16).
///
/// Returns `GEX_OK`; `GEX_ERR_STATE` once that many were made; `GEX_ERR_INIT` if the
/// conduit cannot make endpoints at run time or a layer cannot attach (the last error
/// says which); `GEX_ERR_NULL` / `GEX_ERR_INVALID` for the handles.
///
/// # Safety
/// `client` is NULL or a live client; `ep` is NULL or valid for writing one pointer;
/// `index` is NULL or valid for writing one `uint16_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_ep_create(
    client: *const gex_client_t,
    ep: *mut *mut gex_ep_t,
    index: *mut u16,
) -> c_int {
    entry(|| {
        // SAFETY: the caller's promises, passed on.
        let i = unsafe { new_ep(client, ep, |c| Ok(c.create_endpoint()?)) }?;
        if !index.is_null() {
            // SAFETY: non-null and writable (the caller's promise).
            unsafe { index.write(i) };
        }
        Ok(gex_status_t::GEX_OK)
    })
}

/// Closes an endpoint and frees its handle. Reduce traffic to it to nothing first
/// (`gex_ep_barrier`): messages still in flight to it are discarded. Events of the
/// endpoint not completed yet stay valid handles but can only be freed
/// (`gex_event_free`); their operations are abandoned.
///
/// # Safety
/// `ep` is NULL or a live endpoint, used by no other thread during or after the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_ep_close(ep: *mut gex_ep_t) -> c_int {
    entry(|| {
        // SAFETY: the caller's promise, as `ptr::handle` states it.
        let h = unsafe { ptr::handle(ep) }?;
        // Not from a handler, not while another thread is inside it.
        h.with(|_| Ok(()))?;
        // SAFETY: as above; the caller no longer uses the handle.
        drop(unsafe { ptr::take(ep) }?);
        Ok(gex_status_t::GEX_OK)
    })
}

/// Writes the endpoint's rank to `*rank` and the job's number of ranks to `*size`
/// (either may be NULL when not wanted).
///
/// # Safety
/// `ep` is NULL or a live endpoint; `rank` and `size` are NULL or valid for writing
/// one `uint32_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_ep_rank(ep: *const gex_ep_t, rank: *mut u32, size: *mut u32) -> c_int {
    entry(|| {
        // SAFETY: the caller's promises, as `ptr::handle` and `ptr::write` state them.
        let h = unsafe { ptr::handle(ep) }?;
        if !rank.is_null() {
            // SAFETY: `rank` is NULL or writable (this function's `# Safety`).
            unsafe { ptr::write(rank, h.rank, "rank") }?;
        }
        if !size.is_null() {
            // SAFETY: `size` is NULL or writable (this function's `# Safety`).
            unsafe { ptr::write(size, h.size, "size") }?;
        }
        Ok(gex_status_t::GEX_OK)
    })
}

/// Writes the address and length of this endpoint's segment (the memory other ranks
/// reach with put, get and atomics at offsets `0..len`) to `*base` and `*len`.
///
/// The segment stays mapped until the client is finalised. This process may read
/// and write it directly; other ranks' puts may write it at any time, so reading what
/// they put needs a synchronisation with them first (a barrier, an AM, an event).
///
/// # Safety
/// `ep` is NULL or a live endpoint; `base` is NULL or valid for writing one pointer,
/// `len` NULL or valid for writing one `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_ep_segment(
    ep: *const gex_ep_t,
    base: *mut *mut c_void,
    len: *mut usize,
) -> c_int {
    entry(|| {
        // SAFETY: the caller's promise, as `ptr::handle` states it.
        let h = unsafe { ptr::handle(ep) }?;
        if base.is_null() {
            return Err(Error::null("base"));
        }
        if len.is_null() {
            return Err(Error::null("len"));
        }
        let (b, l) = h.with(|s| {
            let seg = s.ep.segment();
            Ok((seg.as_ptr().cast::<c_void>(), seg.len()))
        })?;
        // SAFETY: both non-null and writable (the caller's promise).
        unsafe { ptr::write(base, b, "base") }?;
        // SAFETY: `len` is NULL or writable (this function's `# Safety`).
        unsafe { ptr::write(len, l, "len") }?;
        Ok(gex_status_t::GEX_OK)
    })
}

/// Polls the endpoint once: runs the AM handlers of the messages that arrived and
/// advances every layer's operations. Writes the number of messages handled to
/// `*handled` unless it is NULL.
///
/// # Safety
/// `ep` is NULL or a live endpoint; `handled` is NULL or valid for writing one
/// `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gex_ep_poll(ep: *const gex_ep_t, handled: *mut usize) -> c_int {
    entry(|| {
        // SAFETY: the caller's promise, as `ptr::handle` states it.
        let h = unsafe { ptr::handle(ep) }?;
        let n = h.with(|s| Ok(s.ep.poll()))?;
        if !handled.is_null() {
            // SAFETY: non-null and writable (the caller's promise).
            unsafe { ptr::write(handled, n, "handled") }?;
        }
        Ok(gex_status_t::GEX_OK)
    })
}
