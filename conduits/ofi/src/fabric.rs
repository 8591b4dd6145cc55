//! Owned handles over the libfabric objects the conduit uses, and the one place where
//! libfabric return codes become Rust errors.
//!
//! Every call into libfabric goes through `fi_call!`, which maps a negative return code
//! to an [`Errno`] (a small `Copy` code, like rustix's `Errno`); callers name the
//! operation when they turn it into a gex error, with `fi_strerror`'s text
//! ([`Errno::text`]). No -sys type leaves the crate: these wrappers are `pub(crate)`.
//!
//! # Safety
//! - Each wrapper owns one libfabric object and closes it exactly once, on drop. Objects
//!   that depend on others (an endpoint on its domain, CQ and AV; a memory region on its
//!   domain) are dropped before what they depend on: the conduit keeps them in structs
//!   whose field order encodes that (`ofi::Objects`), and the fabric outlives every
//!   domain because every endpoint holds the conduit's `Arc`.
//! - libfabric objects are not thread-safe beyond the threading level asked for
//!   (`FI_THREAD_DOMAIN`): every domain and everything opened from it belongs to one gex
//!   endpoint, which is `Send` but driven by one thread at a time. That is why the
//!   wrappers are `Send` and not `Sync`. The fabric itself is only used while opening
//!   (by the one thread running `Conduit::open`) and when closing.
//! - Data-path calls that hand libfabric a buffer or a context ([`EpHandle::send`],
//!   [`EpHandle::recv`], [`EpHandle::write`], [`EpHandle::read`], [`EpHandle::atomic`]) are `unsafe fn`s: the
//!   caller keeps the buffer and the context alive and untouched until the matching
//!   completion has been read from the CQ (or the endpoint is closed), the rule
//!   rust-ibverbs writes down for posted work.
//! - `fi_info` structures are only created by libfabric (`fi_allocinfo`, `fi_getinfo`,
//!   `fi_dupinfo`) and freed with `fi_freeinfo`; strings stored into them are allocated
//!   with `strdup`, because `fi_freeinfo` frees them with `free`.
#![allow(unsafe_code)]

use libfabric_sys as fi;
use std::ffi::{CStr, CString, c_void};
use std::fmt;
use std::ptr;

/// A libfabric error number (positive, as in `FI_EAGAIN`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Errno(pub(crate) i32);

impl Errno {
    /// Resources temporarily unavailable: retry after progress.
    pub(crate) const AGAIN: Errno = Errno(fi::FI_EAGAIN as i32);
    /// An error completion is waiting (`fi_cq_readerr`).
    pub(crate) const AVAIL: Errno = Errno(fi::FI_EAVAIL as i32);
    /// Out of memory (shm 1.17: no free receive entry when posting a buffer).
    pub(crate) const NOMEM: Errno = Errno(fi::FI_ENOMEM as i32);
    /// No data available (`fi_getinfo` found nothing matching).
    pub(crate) const NODATA: Errno = Errno(fi::FI_ENODATA as i32);
    /// The buffer given is too small (`fi_getname`).
    pub(crate) const TOOSMALL: Errno = Errno(fi::FI_ETOOSMALL as i32);

    /// `fi_strerror`'s text.
    pub(crate) fn text(self) -> String {
        // SAFETY: fi_strerror accepts any number and returns a static NUL-terminated string.
        let p = unsafe { fi::fi_strerror(self.0) };
        if p.is_null() {
            return format!("libfabric error {}", self.0);
        }
        // SAFETY: non-null, NUL-terminated, static.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text())
    }
}

/// Maps a libfabric return code: negative values are `-errno`.
#[inline(always)]
pub(crate) fn check(rc: i64) -> Result<u64, Errno> {
    if rc < 0 {
        Err(Errno((-rc) as i32))
    } else {
        Ok(rc as u64)
    }
}

/// Calls libfabric and routes the return code through [`check`] (the one place where
/// libfabric return codes are interpreted, like mio's `syscall!`).
macro_rules! fi_call {
    ($call:expr) => {
        $crate::fabric::check(($call) as i64)
    };
}

fn cstr(p: *const libc::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: libfabric's strings are NUL-terminated and live as long as their fi_info.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// What the conduit asks `fi_getinfo` for.
#[derive(Clone, Debug)]
pub(crate) struct Hints {
    /// `fabric_attr->prov_name` (None: any provider, libfabric's `FI_PROVIDER` applies).
    pub(crate) provider: Option<String>,
    /// Capabilities (`FI_MSG`, optionally `FI_MULTI_RECV`, `FI_RMA`, ...).
    pub(crate) caps: u64,
    /// Memory-registration modes the conduit can honour.
    pub(crate) mr_mode: i32,
    /// Operation modes the conduit supports (`FI_CONTEXT`, `FI_CONTEXT2`).
    pub(crate) mode: u64,
    /// Message ordering required on both sides.
    pub(crate) msg_order: u64,
}

/// The list `fi_getinfo` returned.
#[derive(Debug)]
pub(crate) struct InfoList {
    head: *mut fi::fi_info,
}

impl InfoList {
    /// `fi_getinfo(1.17, NULL, NULL, 0, hints)` for an `FI_EP_RDM` endpoint.
    pub(crate) fn get(h: &Hints) -> Result<InfoList, Errno> {
        // SAFETY: returns a zeroed fi_info with its attribute structs allocated, or NULL.
        let hints = unsafe { fi::fi_allocinfo() };
        if hints.is_null() {
            return Err(Errno(libc::ENOMEM));
        }
        let prov = h
            .provider
            .as_deref()
            .map(|p| CString::new(p).unwrap_or_default());
        // SAFETY: `hints` and its attribute structs were allocated by fi_allocinfo; the
        // provider name is strdup'ed because fi_freeinfo frees it.
        unsafe {
            (*hints).caps = h.caps;
            (*hints).mode = h.mode;
            (*(*hints).ep_attr).type_ = fi::FI_EP_RDM;
            (*(*hints).domain_attr).mr_mode = h.mr_mode;
            (*(*hints).domain_attr).threading = fi::FI_THREAD_DOMAIN;
            (*(*hints).tx_attr).msg_order = h.msg_order;
            (*(*hints).rx_attr).msg_order = h.msg_order;
            if let Some(p) = &prov {
                (*(*hints).fabric_attr).prov_name = libc::strdup(p.as_ptr());
            }
        }
        let mut head = ptr::null_mut();
        // SAFETY: valid hints, out-pointer to a local; node and service NULL.
        let rc = fi_call!(unsafe {
            fi::fi_getinfo(
                fi::FI_VERSION_1_17,
                ptr::null(),
                ptr::null(),
                0,
                hints,
                &mut head,
            )
        });
        // SAFETY: allocated by fi_allocinfo above, freed once.
        unsafe { fi::fi_freeinfo(hints) };
        rc?;
        if head.is_null() {
            return Err(Errno::NODATA);
        }
        Ok(InfoList { head })
    }

    /// The entries, in libfabric's order of preference.
    pub(crate) fn entries(&self) -> Vec<InfoRef<'_>> {
        let mut v = Vec::new();
        let mut p = self.head;
        while !p.is_null() {
            v.push(InfoRef {
                p,
                _list: std::marker::PhantomData,
            });
            // SAFETY: p is an entry of the list we own.
            p = unsafe { (*p).next };
        }
        v
    }
}

impl Drop for InfoList {
    fn drop(&mut self) {
        // SAFETY: the list fi_getinfo returned, freed once.
        unsafe { fi::fi_freeinfo(self.head) };
    }
}

/// One entry of an [`InfoList`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct InfoRef<'a> {
    p: *mut fi::fi_info,
    _list: std::marker::PhantomData<&'a InfoList>,
}

/// The attributes of a provider offer that the conduit uses, copied out of `fi_info`.
#[derive(Clone, Debug, Default)]
pub(crate) struct Attrs {
    pub(crate) provider: String,
    pub(crate) fabric: String,
    pub(crate) domain: String,
    pub(crate) mr_mode: i32,
    pub(crate) inject_size: usize,
    pub(crate) max_msg_size: usize,
    pub(crate) threading: &'static str,
    pub(crate) data_progress: &'static str,
    /// RMA reads are transmitted after earlier RMA writes (message ordering
    /// `FI_ORDER_RAW` or `FI_ORDER_RMA_RAW` in both the transmit and receive
    /// `msg_order`).
    pub(crate) rma_raw: bool,
    /// With `rma_raw`: a read sees the data of earlier writes of up to this many bytes
    /// (`ep_attr->max_order_raw_size`, data ordering); 0 otherwise.
    pub(crate) max_order_raw: usize,
    /// Addresses are strings (`FI_ADDR_STR`, e.g. `shm`'s `fi_shm://...`, NUL
    /// terminated, of varying length); otherwise binary, of one length per provider.
    pub(crate) addr_str: bool,
}

impl InfoRef<'_> {
    pub(crate) fn attrs(&self) -> Attrs {
        // SAFETY: an entry returned by fi_getinfo has all attribute structs set.
        unsafe {
            let i = &*self.p;
            let (f, d, tx, rx) = (&*i.fabric_attr, &*i.domain_attr, &*i.tx_attr, &*i.rx_attr);
            let raw = u64::from(fi::FI_ORDER_RAW) | fi::FI_ORDER_RMA_RAW;
            let raw_ordered = tx.msg_order & raw != 0 && rx.msg_order & raw != 0;
            Attrs {
                provider: cstr(f.prov_name),
                fabric: cstr(f.name),
                domain: cstr(d.name),
                mr_mode: d.mr_mode,
                inject_size: tx.inject_size,
                max_msg_size: (*i.ep_attr).max_msg_size,
                threading: match d.threading {
                    fi::FI_THREAD_SAFE => "FI_THREAD_SAFE",
                    fi::FI_THREAD_FID => "FI_THREAD_FID",
                    fi::FI_THREAD_DOMAIN => "FI_THREAD_DOMAIN",
                    fi::FI_THREAD_COMPLETION => "FI_THREAD_COMPLETION",
                    fi::FI_THREAD_ENDPOINT => "FI_THREAD_ENDPOINT",
                    _ => "unspecified",
                },
                data_progress: match d.data_progress {
                    fi::FI_PROGRESS_AUTO => "FI_PROGRESS_AUTO",
                    fi::FI_PROGRESS_MANUAL => "FI_PROGRESS_MANUAL",
                    _ => "unspecified",
                },
                rma_raw: raw_ordered,
                max_order_raw: if raw_ordered {
                    (*i.ep_attr).max_order_raw_size
                } else {
                    0
                },
                addr_str: i.addr_format == fi::FI_ADDR_STR,
            }
        }
    }

    /// An owned copy of this entry alone.
    pub(crate) fn dup(&self) -> Info {
        // SAFETY: a valid entry; fi_dupinfo copies one entry (not the chain).
        let p = unsafe { fi::fi_dupinfo(self.p) };
        assert!(!p.is_null(), "fi_dupinfo: out of memory");
        // SAFETY: the copy is ours; cut it from the chain so fi_freeinfo frees one entry.
        unsafe { (*p).next = ptr::null_mut() };
        Info { p }
    }
}

/// One owned `fi_info` (the offer the conduit opened).
#[derive(Debug)]
pub(crate) struct Info {
    p: *mut fi::fi_info,
}

// SAFETY: read-only after creation (libfabric only reads it in fi_fabric/fi_domain/
// fi_endpoint), so sharing it between threads is sound.
unsafe impl Send for Info {}
// SAFETY: as above.
unsafe impl Sync for Info {}

impl Drop for Info {
    fn drop(&mut self) {
        // SAFETY: allocated by fi_dupinfo, freed once.
        unsafe { fi::fi_freeinfo(self.p) };
    }
}

/// Closes a libfabric object.
///
/// # Safety
/// `fid` must be a valid open object, closed once.
unsafe fn close(fid: *mut fi::fid, what: &str) {
    // SAFETY: by the caller's contract.
    if let Err(e) = fi_call!(unsafe { fi::fi_close(fid) }) {
        tracing::warn!("ofi: fi_close({what}): {e}");
    }
}

/// An open fabric.
#[derive(Debug)]
pub(crate) struct Fabric {
    p: *mut fi::fid_fabric,
}

// SAFETY: only opened and used to open domains during `Conduit::open` (one thread),
// then closed on drop; see the module's Safety section.
unsafe impl Send for Fabric {}
// SAFETY: as above: no concurrent calls are made through a shared reference.
unsafe impl Sync for Fabric {}

impl Fabric {
    pub(crate) fn open(info: &Info) -> Result<Fabric, Errno> {
        let mut p = ptr::null_mut();
        // SAFETY: info is a valid fi_info with fabric_attr set; out-pointer to a local.
        fi_call!(unsafe { fi::fi_fabric((*info.p).fabric_attr, &mut p, ptr::null_mut()) })?;
        Ok(Fabric { p })
    }
}

impl Drop for Fabric {
    fn drop(&mut self) {
        // SAFETY: opened by fi_fabric; every domain was closed before (module Safety).
        unsafe { close(&mut (*self.p).fid, "fabric") };
    }
}

/// An open domain (one per gex endpoint).
#[derive(Debug)]
pub(crate) struct Domain {
    p: *mut fi::fid_domain,
}

// SAFETY: used by one thread at a time (module Safety section).
unsafe impl Send for Domain {}

impl Domain {
    pub(crate) fn open(fabric: &Fabric, info: &Info) -> Result<Domain, Errno> {
        let mut p = ptr::null_mut();
        // SAFETY: open fabric, valid info, out-pointer to a local.
        fi_call!(unsafe { fi::fi_domain(fabric.p, info.p, &mut p, ptr::null_mut()) })?;
        Ok(Domain { p })
    }
}

impl Drop for Domain {
    fn drop(&mut self) {
        // SAFETY: opened by fi_domain; its endpoint, CQ, AV and MRs were closed before.
        unsafe { close(&mut (*self.p).fid, "domain") };
    }
}

/// One completion (the fields of `fi_cq_data_entry` the conduit uses).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Completion {
    pub(crate) ctx: *mut c_void,
    pub(crate) flags: u64,
    pub(crate) len: usize,
    pub(crate) buf: *mut c_void,
}

impl Completion {
    /// A completion of nothing (null pointers), to fill arrays completions are read into.
    pub(crate) const EMPTY: Completion = Completion {
        ctx: ptr::null_mut(),
        flags: 0,
        len: 0,
        buf: ptr::null_mut(),
    };
}

/// An error completion.
#[derive(Clone, Debug)]
pub(crate) struct CqError {
    pub(crate) ctx: *mut c_void,
    pub(crate) flags: u64,
    pub(crate) text: String,
}

/// A completion queue in `FI_CQ_FORMAT_DATA`.
#[derive(Debug)]
pub(crate) struct Cq {
    p: *mut fi::fid_cq,
    waitable: bool,
}

// SAFETY: used by one thread at a time (module Safety section).
unsafe impl Send for Cq {}

/// Completions read per `fi_cq_read` call.
pub(crate) const CQ_BATCH: usize = 16;

impl Cq {
    /// Opens a CQ of `size` entries, with a file-descriptor wait object if `wait` (for
    /// `fi_cq_sread`).
    pub(crate) fn open(domain: &Domain, size: usize, wait: bool) -> Result<Cq, Errno> {
        // SAFETY: fi_cq_attr is plain data; all-zero is its documented default.
        let mut attr: fi::fi_cq_attr = unsafe { std::mem::zeroed() };
        attr.size = size;
        attr.format = fi::FI_CQ_FORMAT_DATA;
        // A file descriptor, not FI_WAIT_UNSPEC: some providers (shm in 1.17) answer
        // UNSPEC with a yield loop that ignores the timeout. Without FD support the
        // open fails and the conduit goes without a wait object.
        attr.wait_obj = if wait {
            fi::FI_WAIT_FD
        } else {
            fi::FI_WAIT_NONE
        };
        let mut p = ptr::null_mut();
        // SAFETY: open domain, valid attr, out-pointer to a local.
        fi_call!(unsafe { fi::fi_cq_open(domain.p, &mut attr, &mut p, ptr::null_mut()) })?;
        Ok(Cq { p, waitable: wait })
    }

    pub(crate) fn waitable(&self) -> bool {
        self.waitable
    }

    /// Reads up to `out.len()` (at most [`CQ_BATCH`]) completions. `Ok(0)` when none;
    /// `Err(Errno::AVAIL)` when an error completion waits for [`Cq::read_error`].
    #[inline]
    pub(crate) fn read(&mut self, out: &mut [Completion]) -> Result<usize, Errno> {
        self.read_inner(out, None)
    }

    /// Like [`Cq::read`] but sleeps in the provider's wait object for up to `timeout_ms`
    /// (only on a CQ opened with a wait object).
    pub(crate) fn sread(
        &mut self,
        out: &mut [Completion],
        timeout_ms: i32,
    ) -> Result<usize, Errno> {
        debug_assert!(self.waitable);
        self.read_inner(out, Some(timeout_ms))
    }

    #[inline]
    fn read_inner(&mut self, out: &mut [Completion], wait: Option<i32>) -> Result<usize, Errno> {
        // Not initialised: this runs on every poll, and libfabric writes the entries it
        // returns (only those are read below).
        let mut raw = [const { std::mem::MaybeUninit::<fi::fi_cq_data_entry>::uninit() }; CQ_BATCH];
        let n = out.len().min(CQ_BATCH);
        let rc = match wait {
            // SAFETY: open CQ of FI_CQ_FORMAT_DATA; `raw` has room for `n` entries.
            None => fi_call!(unsafe { fi::fi_cq_read(self.p, raw.as_mut_ptr().cast(), n) }),
            // SAFETY: as above; the CQ has a wait object (checked by the caller).
            Some(t) => fi_call!(unsafe {
                fi::fi_cq_sread(self.p, raw.as_mut_ptr().cast(), n, ptr::null(), t)
            }),
        };
        match rc {
            Ok(k) => {
                let k = (k as usize).min(n);
                for (o, r) in out.iter_mut().zip(&raw[..k]) {
                    // SAFETY: libfabric wrote the first `k` entries before returning `k`.
                    let r = unsafe { r.assume_init_ref() };
                    *o = Completion {
                        ctx: r.op_context,
                        flags: r.flags,
                        len: r.len,
                        buf: r.buf,
                    };
                }
                Ok(k)
            }
            Err(Errno::AGAIN) => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// Reads the waiting error completion, with the provider's explanation.
    pub(crate) fn read_error(&mut self) -> Result<CqError, Errno> {
        // SAFETY: plain data; err_data NULL and size 0 ask for no provider error data
        // buffer of ours (the provider may point err_data at its own).
        let mut e: fi::fi_cq_err_entry = unsafe { std::mem::zeroed() };
        // SAFETY: open CQ, valid out-structure.
        fi_call!(unsafe { fi::fi_cq_readerr(self.p, &mut e, 0) })?;
        let mut buf = [0 as libc::c_char; 256];
        // SAFETY: open CQ; err_data as returned by fi_cq_readerr; buf has 256 bytes.
        let s = unsafe {
            fi::fi_cq_strerror(
                self.p,
                e.prov_errno,
                e.err_data,
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        let errno = Errno(e.err);
        let prov = cstr(s);
        Ok(CqError {
            ctx: e.op_context,
            flags: e.flags,
            text: if prov.is_empty() {
                errno.text()
            } else {
                format!(
                    "{} (provider: {prov}, errno {})",
                    errno.text(),
                    e.prov_errno
                )
            },
        })
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: opened by fi_cq_open; the endpoint bound to it was closed before.
        unsafe { close(&mut (*self.p).fid, "cq") };
    }
}

/// An AV address not known (`FI_ADDR_NOTAVAIL`): a peer endpoint this one has not
/// inserted yet.
pub(crate) const NOT_AVAIL: u64 = fi::FI_ADDR_NOTAVAIL;

/// An address vector.
#[derive(Debug)]
pub(crate) struct Av {
    p: *mut fi::fid_av,
}

// SAFETY: used by one thread at a time (module Safety section).
unsafe impl Send for Av {}

impl Av {
    /// Opens an AV for `count` addresses, as a table if the provider allows.
    pub(crate) fn open(domain: &Domain, count: usize) -> Result<Av, Errno> {
        let mut last = Errno::NODATA;
        for ty in [fi::FI_AV_TABLE, fi::FI_AV_UNSPEC] {
            // SAFETY: plain data; all-zero is the documented default.
            let mut attr: fi::fi_av_attr = unsafe { std::mem::zeroed() };
            attr.type_ = ty;
            attr.count = count;
            let mut p = ptr::null_mut();
            // SAFETY: open domain, valid attr, out-pointer to a local.
            match fi_call!(unsafe { fi::fi_av_open(domain.p, &mut attr, &mut p, ptr::null_mut()) })
            {
                Ok(_) => return Ok(Av { p }),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Inserts one address (as `fi_getname` returned it, on some rank); returns its
    /// `fi_addr_t`. `fi_av_insert` takes no length: the provider reads as many bytes as
    /// its format says (a `sockaddr` by its family, a string up to its NUL), so the
    /// address is copied into a buffer with [`ADDR_PAD`] zero bytes after it, and a
    /// short or unterminated address (a peer's, through the bootstrap) cannot make it
    /// read past the copy. (`open` also refuses addresses whose length disagrees with
    /// the provider's, with an error naming the rank.)
    pub(crate) fn insert(&mut self, name: &[u8]) -> Result<u64, Errno> {
        let mut padded = Vec::with_capacity(name.len() + ADDR_PAD);
        padded.extend_from_slice(name);
        padded.resize(name.len() + ADDR_PAD, 0);
        let mut a: fi::fi_addr_t = fi::FI_ADDR_NOTAVAIL;
        // SAFETY: open AV; `padded` holds one address followed by ADDR_PAD zero bytes,
        // more than any address format reads past what the address says (a NUL ends a
        // string, a sockaddr is at most 128 bytes); out-pointer to a local;
        // synchronous insert (no EQ bound).
        let n = fi_call!(unsafe {
            fi::fi_av_insert(
                self.p,
                padded.as_ptr().cast(),
                1,
                &mut a,
                0,
                ptr::null_mut(),
            )
        })?;
        if n != 1 || a == fi::FI_ADDR_NOTAVAIL {
            return Err(Errno(libc::EINVAL));
        }
        Ok(a)
    }
}

impl Drop for Av {
    fn drop(&mut self) {
        // SAFETY: opened by fi_av_open; the endpoint bound to it was closed before.
        unsafe { close(&mut (*self.p).fid, "av") };
    }
}

/// Zero bytes after an address handed to `fi_av_insert` (see [`Av::insert`]): more than
/// the largest fixed-size address format (`sockaddr_storage`, 128 bytes).
pub(crate) const ADDR_PAD: usize = 256;

/// A registered memory region.
#[derive(Debug)]
pub(crate) struct Mr {
    p: *mut fi::fid_mr,
}

// SAFETY: used by one thread at a time (module Safety section).
unsafe impl Send for Mr {}

impl Mr {
    /// Registers `[base, base + len)` with `access` (`FI_SEND`, `FI_RECV`, `FI_REMOTE_*`)
    /// and `requested_key` (ignored under `FI_MR_PROV_KEY`).
    ///
    /// # Safety
    /// The memory must stay allocated until the region is dropped.
    pub(crate) unsafe fn register(
        domain: &Domain,
        base: *const u8,
        len: usize,
        access: u64,
        requested_key: u64,
    ) -> Result<Mr, Errno> {
        let mut p = ptr::null_mut();
        // SAFETY: open domain; memory valid for the region's life (caller's contract).
        fi_call!(unsafe {
            fi::fi_mr_reg(
                domain.p,
                base.cast(),
                len,
                access,
                0,
                requested_key,
                0,
                &mut p,
                ptr::null_mut(),
            )
        })?;
        Ok(Mr { p })
    }

    /// `FI_MR_ENDPOINT`: binds the region to `ep` and enables it.
    pub(crate) fn bind(&mut self, ep: &Endpoint) -> Result<(), Errno> {
        // SAFETY: open MR and endpoint of the same domain.
        fi_call!(unsafe { fi::fi_mr_bind(self.p, &mut (*ep.h.0).fid, 0) })?;
        // SAFETY: open MR, bound above.
        fi_call!(unsafe { fi::fi_mr_enable(self.p) })?;
        Ok(())
    }

    /// The key peers use to access the region.
    pub(crate) fn key(&self) -> u64 {
        // SAFETY: open (and, under FI_MR_ENDPOINT, enabled) MR.
        unsafe { fi::fi_mr_key(self.p) }
    }

    /// The local descriptor (`FI_MR_LOCAL`).
    pub(crate) fn desc(&self) -> Desc {
        // SAFETY: open MR.
        Desc(unsafe { fi::fi_mr_desc(self.p) })
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: opened by fi_mr_reg; closed before its domain (field order).
        unsafe { close(&mut (*self.p).fid, "mr") };
    }
}

/// A local memory descriptor for data-path calls (NULL when not needed).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Desc(*mut c_void);

// SAFETY: an opaque token libfabric hands out; only passed back to the same domain by
// the thread driving it.
unsafe impl Send for Desc {}

impl Desc {
    pub(crate) const NONE: Desc = Desc(ptr::null_mut());
}

/// A raw endpoint handle for the data path (copied into the send and receive halves of
/// a gex endpoint; the owning [`Endpoint`] closes it).
#[derive(Clone, Copy, Debug)]
pub(crate) struct EpHandle(*mut fi::fid_ep);

// SAFETY: used by the one thread driving the gex endpoint (module Safety section).
unsafe impl Send for EpHandle {}

impl EpHandle {
    /// The handle's address, which names the endpoint in the test log.
    #[cfg(test)]
    pub(crate) fn addr(&self) -> usize {
        self.0 as usize
    }

    /// `fi_inject`: sends `buf` without a completion; the buffer is free on return.
    #[inline]
    pub(crate) fn inject(&self, buf: &[u8], dest: u64) -> Result<(), Errno> {
        // SAFETY: open, enabled endpoint; fi_inject copies `buf` before returning.
        fi_call!(unsafe { fi::fi_inject(self.0, buf.as_ptr().cast(), buf.len(), dest) })?;
        Ok(())
    }

    /// `fi_send` with a completion reported with `ctx`.
    ///
    /// # Safety
    /// `buf..buf+len` and `ctx` (an `fi_context2`) stay valid and untouched until the
    /// completion for `ctx` has been read or the endpoint is closed.
    #[inline]
    pub(crate) unsafe fn send(
        &self,
        buf: *const u8,
        len: usize,
        desc: Desc,
        dest: u64,
        ctx: *mut c_void,
    ) -> Result<(), Errno> {
        // SAFETY: by the caller's contract.
        fi_call!(unsafe { fi::fi_send(self.0, buf.cast(), len, desc.0, dest, ctx) })?;
        Ok(())
    }

    /// Posts a receive buffer (`fi_recvmsg`, with `FI_MULTI_RECV` if `multi`).
    ///
    /// # Safety
    /// As for [`EpHandle::send`]: buffer and context stay valid until the (last, for
    /// multi-receive) completion for `ctx` has been read or the endpoint is closed.
    #[inline]
    pub(crate) unsafe fn recv(
        &self,
        buf: *mut u8,
        len: usize,
        desc: Desc,
        ctx: *mut c_void,
        multi: bool,
    ) -> Result<(), Errno> {
        let iov = libc::iovec {
            iov_base: buf.cast(),
            iov_len: len,
        };
        let mut d = desc.0;
        let msg = fi::fi_msg {
            msg_iov: &iov,
            desc: &mut d,
            iov_count: 1,
            addr: fi::FI_ADDR_UNSPEC,
            context: ctx,
            data: 0,
        };
        let flags = if multi {
            u64::from(fi::FI_MULTI_RECV)
        } else {
            0
        };
        // SAFETY: by the caller's contract; `msg`, `iov` and `d` are only read during the
        // call.
        fi_call!(unsafe { fi::fi_recvmsg(self.0, &msg, flags) })?;
        Ok(())
    }

    /// `fi_writemsg`: writes `buf..buf+len` to `addr` (under `key`) at `dest`, with a
    /// completion reported with `ctx`. With `delivery` it asks for
    /// `FI_DELIVERY_COMPLETE` (the completion is generated once the data is visible at
    /// the target); without, the provider's default, `FI_TRANSMIT_COMPLETE` for
    /// `FI_EP_RDM` (the source may be reused; the bytes may still be on their way).
    ///
    /// # Safety
    /// `buf..buf+len` and `ctx` (an `fi_context2`) stay valid, and the source unmodified,
    /// until the completion for `ctx` has been read or the endpoint is closed.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn write(
        &self,
        buf: *const u8,
        len: usize,
        desc: Desc,
        dest: u64,
        addr: u64,
        key: u64,
        ctx: *mut c_void,
        delivery: bool,
    ) -> Result<(), Errno> {
        let iov = libc::iovec {
            iov_base: buf.cast_mut().cast(),
            iov_len: len,
        };
        let rma = fi::fi_rma_iov { addr, len, key };
        let mut d = desc.0;
        let msg = fi::fi_msg_rma {
            msg_iov: &iov,
            desc: &mut d,
            iov_count: 1,
            addr: dest,
            rma_iov: &rma,
            rma_iov_count: 1,
            context: ctx,
            data: 0,
        };
        let flags = if delivery {
            u64::from(fi::FI_COMPLETION | fi::FI_DELIVERY_COMPLETE)
        } else {
            u64::from(fi::FI_COMPLETION)
        };
        // SAFETY: by the caller's contract; `msg`, `iov`, `rma` and `d` are only read
        // during the call.
        fi_call!(unsafe { fi::fi_writemsg(self.0, &msg, flags) })?;
        Ok(())
    }

    /// An atomic on one `dt` word at `addr` (under `key`) of `dest`, with a completion
    /// reported with `ctx`: `fi_atomic` (operand `buf`), `fi_fetch_atomic` (old value
    /// into `result`) or `fi_compare_atomic` (`compare`, then `buf` stored, old value
    /// into `result`), as `call` says.
    ///
    /// `desc` is the descriptor of the registration holding `buf`, `compare` and
    /// `result` (all three in one registered array under `FI_MR_LOCAL`; else none).
    ///
    /// # Safety
    /// `buf`, `compare` and `result` (as used by `call`) and `ctx` stay valid, and
    /// `result` untouched by others, until the completion for `ctx` has been read or the
    /// endpoint is closed.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn atomic(
        &self,
        call: AtomicCall,
        buf: *const u64,
        compare: *const u64,
        result: *mut u64,
        desc: Desc,
        dest: u64,
        addr: u64,
        key: u64,
        dt: fi::fi_datatype,
        op: fi::fi_op,
        ctx: *mut c_void,
    ) -> Result<(), Errno> {
        let nd = desc.0;
        // SAFETY: by the caller's contract (one element; the descriptor covers the
        // operand, compare and result words).
        fi_call!(unsafe {
            match call {
                AtomicCall::Plain => {
                    fi::fi_atomic(self.0, buf.cast(), 1, nd, dest, addr, key, dt, op, ctx)
                }
                AtomicCall::Fetch => fi::fi_fetch_atomic(
                    self.0,
                    buf.cast(),
                    1,
                    nd,
                    result.cast(),
                    nd,
                    dest,
                    addr,
                    key,
                    dt,
                    op,
                    ctx,
                ),
                AtomicCall::Compare => fi::fi_compare_atomic(
                    self.0,
                    buf.cast(),
                    1,
                    nd,
                    compare.cast(),
                    nd,
                    result.cast(),
                    nd,
                    dest,
                    addr,
                    key,
                    dt,
                    op,
                    ctx,
                ),
            }
        })?;
        Ok(())
    }

    /// Whether the provider performs `op` on `dt` as `call` (`fi_atomicvalid`,
    /// `fi_fetch_atomicvalid`, `fi_compare_atomicvalid`) for at least one element.
    pub(crate) fn atomic_valid(
        &self,
        call: AtomicCall,
        dt: fi::fi_datatype,
        op: fi::fi_op,
    ) -> bool {
        let mut count = 0usize;
        // SAFETY: open, enabled endpoint; `count` is a local written by the call.
        let rc = unsafe {
            match call {
                AtomicCall::Plain => fi::fi_atomicvalid(self.0, dt, op, &mut count),
                AtomicCall::Fetch => fi::fi_fetch_atomicvalid(self.0, dt, op, &mut count),
                AtomicCall::Compare => fi::fi_compare_atomicvalid(self.0, dt, op, &mut count),
            }
        };
        rc == 0 && count >= 1
    }

    /// `fi_read`: reads `len` bytes at `addr` (under `key`) of `src` into `buf`, with a
    /// completion reported with `ctx` once the bytes are in `buf`.
    ///
    /// # Safety
    /// `buf..buf+len` and `ctx` stay valid, and `buf` untouched by anyone else, until the
    /// completion for `ctx` has been read or the endpoint is closed.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn read(
        &self,
        buf: *mut u8,
        len: usize,
        desc: Desc,
        src: u64,
        addr: u64,
        key: u64,
        ctx: *mut c_void,
    ) -> Result<(), Errno> {
        // SAFETY: by the caller's contract.
        fi_call!(unsafe { fi::fi_read(self.0, buf.cast(), len, desc.0, src, addr, key, ctx) })?;
        Ok(())
    }
}

/// Which libfabric atomic call an operation uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AtomicCall {
    /// `fi_atomic`: no result.
    Plain,
    /// `fi_fetch_atomic`: the old value is returned.
    Fetch,
    /// `fi_compare_atomic`: compare-and-swap, the old value is returned.
    Compare,
}

/// An endpoint.
#[derive(Debug)]
pub(crate) struct Endpoint {
    h: EpHandle,
}

// SAFETY: used by one thread at a time (module Safety section).
unsafe impl Send for Endpoint {}

impl Endpoint {
    pub(crate) fn open(domain: &Domain, info: &Info) -> Result<Endpoint, Errno> {
        let mut p = ptr::null_mut();
        // SAFETY: open domain, valid info, out-pointer to a local.
        fi_call!(unsafe { fi::fi_endpoint(domain.p, info.p, &mut p, ptr::null_mut()) })?;
        Ok(Endpoint { h: EpHandle(p) })
    }

    pub(crate) fn handle(&self) -> EpHandle {
        self.h
    }

    /// Binds the CQ for both directions.
    pub(crate) fn bind_cq(&mut self, cq: &Cq) -> Result<(), Errno> {
        let flags = u64::from(fi::FI_TRANSMIT | fi::FI_RECV);
        // SAFETY: open endpoint and CQ of the same domain.
        fi_call!(unsafe { fi::fi_ep_bind(self.h.0, &mut (*cq.p).fid, flags) })?;
        Ok(())
    }

    pub(crate) fn bind_av(&mut self, av: &Av) -> Result<(), Errno> {
        // SAFETY: open endpoint and AV of the same domain.
        fi_call!(unsafe { fi::fi_ep_bind(self.h.0, &mut (*av.p).fid, 0) })?;
        Ok(())
    }

    /// `FI_OPT_MIN_MULTI_RECV`: a multi-receive buffer is released when less than
    /// `bytes` remain.
    pub(crate) fn set_min_multi_recv(&mut self, bytes: usize) -> Result<(), Errno> {
        // SAFETY: open endpoint; the option value is a size_t read during the call.
        fi_call!(unsafe {
            fi::fi_setopt(
                &mut (*self.h.0).fid,
                fi::FI_OPT_ENDPOINT as i32,
                fi::FI_OPT_MIN_MULTI_RECV as i32,
                (&bytes as *const usize).cast(),
                std::mem::size_of::<usize>(),
            )
        })?;
        Ok(())
    }

    pub(crate) fn enable(&mut self) -> Result<(), Errno> {
        // SAFETY: open endpoint with CQ and AV bound.
        fi_call!(unsafe { fi::fi_enable(self.h.0) })?;
        Ok(())
    }

    /// The endpoint's address (`fi_getname`).
    pub(crate) fn name(&self) -> Result<Vec<u8>, Errno> {
        let mut buf = vec![0u8; 64];
        loop {
            let mut len = buf.len();
            // SAFETY: open, enabled endpoint; `buf` has `len` bytes.
            match fi_call!(unsafe {
                fi::fi_getname(&mut (*self.h.0).fid, buf.as_mut_ptr().cast(), &mut len)
            }) {
                Ok(_) => {
                    buf.truncate(len);
                    return Ok(buf);
                }
                Err(Errno::TOOSMALL) if len > buf.len() => buf.resize(len, 0),
                Err(e) => return Err(e),
            }
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        #[cfg(test)]
        crate::test_hooks::note(crate::test_hooks::Event::Closed { ep: self.h.addr() });
        // SAFETY: opened by fi_endpoint; closed before its CQ, AV, MRs and domain, and
        // before the buffers posted to it (receive and send pools, RMA slot words) are
        // freed: every owner of an endpoint (`ep::Objects`, held by `open::Local`, by
        // an `OfiEp` until its drop moves it into a `close::Grave`) declares it before
        // that memory, and receive buffers are posted only by an `OfiEp` or a `Grave`.
        unsafe { close(&mut (*self.h.0).fid, "endpoint") };
    }
}

/// The libfabric flag values the conduit uses, widened to the API's `u64`.
pub(crate) mod flags {
    use libfabric_sys as fi;
    pub(crate) const MSG: u64 = fi::FI_MSG as u64;
    pub(crate) const RMA: u64 = fi::FI_RMA as u64;
    pub(crate) const ATOMIC: u64 = fi::FI_ATOMIC as u64;
    pub(crate) const READ: u64 = fi::FI_READ as u64;
    pub(crate) const WRITE: u64 = fi::FI_WRITE as u64;
    pub(crate) const SEND: u64 = fi::FI_SEND as u64;
    pub(crate) const RECV: u64 = fi::FI_RECV as u64;
    pub(crate) const REMOTE_READ: u64 = fi::FI_REMOTE_READ as u64;
    pub(crate) const REMOTE_WRITE: u64 = fi::FI_REMOTE_WRITE as u64;
    pub(crate) const MULTI_RECV: u64 = fi::FI_MULTI_RECV as u64;
    pub(crate) const CONTEXT: u64 = fi::FI_CONTEXT;
    pub(crate) const CONTEXT2: u64 = fi::FI_CONTEXT2;
    pub(crate) const ORDER_SAS: u64 = fi::FI_ORDER_SAS as u64;
    pub(crate) const MR_LOCAL: i32 = fi::FI_MR_LOCAL as i32;
    pub(crate) const MR_VIRT_ADDR: i32 = fi::FI_MR_VIRT_ADDR as i32;
    pub(crate) const MR_ALLOCATED: i32 = fi::FI_MR_ALLOCATED as i32;
    pub(crate) const MR_PROV_KEY: i32 = fi::FI_MR_PROV_KEY as i32;
    pub(crate) const MR_ENDPOINT: i32 = fi::FI_MR_ENDPOINT as i32;
    /// Bytes of an `fi_context2` (the per-operation context the conduit hands out).
    pub(crate) const CONTEXT_BYTES: usize = std::mem::size_of::<fi::fi_context2>();
}
