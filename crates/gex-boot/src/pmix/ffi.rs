//! Hand-written declarations of the part of libpmix's C API (PMIx standard 4, as in
//! OpenPMIx 4.2) that the client uses, and the one helper every return code goes
//! through ([`check`]).
//!
//! The types are declared by hand rather than generated: the client needs five
//! structures and eight calls. `layout.c`, compiled by the build script against the
//! real `pmix.h`, asserts the sizes and offsets written here (and the `const`
//! assertions below assert them on the Rust side), so a mismatch fails the build.
//! Nothing from this module appears in gex-boot's public API.
//!
//! # Safety
//!
//! Every function here is `unsafe` to call: the caller passes pointers that must be
//! valid for the library's reads and writes for the duration of the call, C strings
//! that are NUL-terminated, and frees what the library allocates with the matching
//! call ([`release_value`]). The wrappers in [`super`] are the only callers; each of
//! their `unsafe` blocks states why its pointers are valid.
#![allow(unsafe_code, non_camel_case_types)]

use std::ffi::{CStr, c_char, c_int, c_void};

/// `pmix_status_t`.
pub(crate) type pmix_status_t = c_int;
/// `pmix_rank_t`.
pub(crate) type pmix_rank_t = u32;
/// `pmix_data_type_t`.
pub(crate) type pmix_data_type_t = u16;

/// `PMIX_MAX_NSLEN`.
pub(crate) const PMIX_MAX_NSLEN: usize = 255;
/// `PMIX_MAX_KEYLEN`.
pub(crate) const PMIX_MAX_KEYLEN: usize = 511;
/// `PMIX_RANK_WILDCARD`: "the job as a whole" in a `pmix_proc_t`.
pub(crate) const PMIX_RANK_WILDCARD: pmix_rank_t = u32::MAX - 1;

/// `PMIX_SUCCESS`.
pub(crate) const PMIX_SUCCESS: pmix_status_t = 0;
/// `PMIX_ERR_NOT_FOUND`.
pub(crate) const PMIX_ERR_NOT_FOUND: pmix_status_t = -46;
/// `PMIX_ERR_TIMEOUT`.
pub(crate) const PMIX_ERR_TIMEOUT: pmix_status_t = -24;
/// `PMIX_ERR_UNREACH`.
pub(crate) const PMIX_ERR_UNREACH: pmix_status_t = -25;
/// `PMIX_ERR_LOST_CONNECTION`.
pub(crate) const PMIX_ERR_LOST_CONNECTION: pmix_status_t = -61;

/// `PMIX_BOOL`.
pub(crate) const PMIX_BOOL: pmix_data_type_t = 1;
/// `PMIX_INT`.
pub(crate) const PMIX_INT: pmix_data_type_t = 6;
/// `PMIX_STRING`.
pub(crate) const PMIX_STRING: pmix_data_type_t = 3;
/// `PMIX_UINT32`.
pub(crate) const PMIX_UINT32: pmix_data_type_t = 14;
/// `PMIX_BYTE_OBJECT`.
pub(crate) const PMIX_BYTE_OBJECT: pmix_data_type_t = 27;

/// `PMIX_GLOBAL`: a put visible to every process of the job.
pub(crate) const PMIX_GLOBAL: u8 = 3;

/// `PMIX_JOB_SIZE` (`uint32_t`).
pub(crate) const KEY_JOB_SIZE: &CStr = c"pmix.job.size";
/// `PMIX_NODEID` (`uint32_t`, per process).
pub(crate) const KEY_NODEID: &CStr = c"pmix.nodeid";
/// `PMIX_HOSTNAME` (`char*`, per process).
pub(crate) const KEY_HOSTNAME: &CStr = c"pmix.hname";
/// `PMIX_COLLECT_DATA` (`bool`): a fence that also gathers every put.
pub(crate) const KEY_COLLECT_DATA: &CStr = c"pmix.collect";
/// `PMIX_OPTIONAL` (`bool`): a get that looks only at data already here.
pub(crate) const KEY_OPTIONAL: &CStr = c"pmix.optional";
/// `PMIX_TIMEOUT` (`int`, seconds): how long a blocking operation may wait.
pub(crate) const KEY_TIMEOUT: &CStr = c"pmix.timeout";

/// `pmix_proc_t`: a namespace and a rank in it.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct pmix_proc_t {
    pub(crate) nspace: [c_char; PMIX_MAX_NSLEN + 1],
    pub(crate) rank: pmix_rank_t,
}

/// `pmix_byte_object_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct pmix_byte_object_t {
    pub(crate) bytes: *mut c_char,
    pub(crate) size: usize,
}

/// The part of `pmix_value_t`'s data union the client reads or writes; `_room`
/// gives it the size of the real union (its largest member, `pmix_envar_t`, is
/// three words).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) union pmix_value_data {
    pub(crate) flag: bool,
    pub(crate) uint32: u32,
    pub(crate) string: *mut c_char,
    pub(crate) bo: pmix_byte_object_t,
    _room: [u64; 3],
}

/// `pmix_value_t`: a type tag and the data union.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct pmix_value_t {
    pub(crate) type_: pmix_data_type_t,
    pub(crate) data: pmix_value_data,
}

/// `pmix_info_t`: a key, directive flags and a value.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct pmix_info_t {
    pub(crate) key: [c_char; PMIX_MAX_KEYLEN + 1],
    pub(crate) flags: u32,
    pub(crate) value: pmix_value_t,
}

// The same numbers as layout.c asserts against pmix.h.
const _: () = assert!(std::mem::size_of::<pmix_proc_t>() == 260);
const _: () = assert!(std::mem::offset_of!(pmix_proc_t, rank) == 256);
const _: () = assert!(std::mem::size_of::<pmix_byte_object_t>() == 16);
const _: () = assert!(std::mem::size_of::<pmix_value_t>() == 32);
const _: () = assert!(std::mem::offset_of!(pmix_value_t, data) == 8);
const _: () = assert!(std::mem::size_of::<pmix_info_t>() == 552);
const _: () = assert!(std::mem::offset_of!(pmix_info_t, flags) == 512);
const _: () = assert!(std::mem::offset_of!(pmix_info_t, value) == 520);

#[link(name = "pmix")]
unsafe extern "C" {
    pub(crate) fn PMIx_Init(
        proc_: *mut pmix_proc_t,
        info: *mut pmix_info_t,
        ninfo: usize,
    ) -> pmix_status_t;
    pub(crate) fn PMIx_Finalize(info: *const pmix_info_t, ninfo: usize) -> pmix_status_t;
    pub(crate) fn PMIx_Abort(
        status: c_int,
        msg: *const c_char,
        procs: *mut pmix_proc_t,
        nprocs: usize,
    ) -> pmix_status_t;
    pub(crate) fn PMIx_Put(scope: u8, key: *const c_char, val: *mut pmix_value_t) -> pmix_status_t;
    pub(crate) fn PMIx_Commit() -> pmix_status_t;
    pub(crate) fn PMIx_Fence(
        procs: *const pmix_proc_t,
        nprocs: usize,
        info: *const pmix_info_t,
        ninfo: usize,
    ) -> pmix_status_t;
    pub(crate) fn PMIx_Get(
        proc_: *const pmix_proc_t,
        key: *const c_char,
        info: *const pmix_info_t,
        ninfo: usize,
        val: *mut *mut pmix_value_t,
    ) -> pmix_status_t;
    pub(crate) fn PMIx_Value_destruct(val: *mut pmix_value_t);
    #[cfg(test)]
    pub(crate) fn PMIx_Value_load(
        val: *mut pmix_value_t,
        data: *const c_void,
        type_: pmix_data_type_t,
    ) -> pmix_status_t;
    pub(crate) fn PMIx_Info_load(
        info: *mut pmix_info_t,
        key: *const c_char,
        data: *const c_void,
        type_: pmix_data_type_t,
    ) -> pmix_status_t;
    pub(crate) fn PMIx_Error_string(status: pmix_status_t) -> *const c_char;
    pub(crate) fn PMIx_Get_version() -> *const c_char;
}

/// A PMIx status code: the small `Copy` type at the FFI boundary. Its `Display`
/// is the library's name for it (`PMIX_ERR_NOT_FOUND`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Status(pub(crate) pmix_status_t);

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // SAFETY: PMIx_Error_string takes any status and returns a pointer to a
        // static NUL-terminated string (or NULL, handled).
        let p = unsafe { PMIx_Error_string(self.0) };
        if p.is_null() {
            write!(f, "PMIx status {}", self.0)
        } else {
            // SAFETY: non-null, static and NUL-terminated (above).
            let s = unsafe { CStr::from_ptr(p) };
            write!(f, "{} ({})", s.to_string_lossy(), self.0)
        }
    }
}

/// Every libpmix return code goes through here: `Ok` for `PMIX_SUCCESS`, else the
/// status.
pub(crate) fn check(rc: pmix_status_t) -> Result<(), Status> {
    if rc == PMIX_SUCCESS {
        Ok(())
    } else {
        Err(Status(rc))
    }
}

/// The library's version string (`OpenPMIx 4.2.2 …`).
pub(crate) fn version() -> String {
    // SAFETY: PMIx_Get_version returns a static NUL-terminated string; callable
    // before PMIx_Init.
    let p = unsafe { PMIx_Get_version() };
    if p.is_null() {
        return String::from("(unknown)");
    }
    // SAFETY: non-null, static and NUL-terminated (above).
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Frees a value the library allocated and returned from `PMIx_Get`
/// (`PMIX_VALUE_RELEASE`).
///
/// # Safety
/// `v` must come from a successful `PMIx_Get` and not have been released before.
pub(crate) unsafe fn release_value(v: *mut pmix_value_t) {
    // SAFETY: the caller guarantees `v` is a live value allocated by libpmix with
    // malloc; destruct frees its contents, free the struct itself.
    unsafe {
        PMIx_Value_destruct(v);
        libc::free(v.cast());
    }
}

/// An info array entry holding an `int`.
pub(crate) fn int_info(key: &CStr, value: c_int) -> Result<pmix_info_t, Status> {
    // SAFETY: `PMIX_INT` is the type of a `c_int`.
    unsafe { scalar_info(key, &value, PMIX_INT) }
}

/// An info array entry holding a `bool`.
pub(crate) fn bool_info(key: &CStr, value: bool) -> Result<pmix_info_t, Status> {
    // SAFETY: `PMIX_BOOL` is the type of a `bool`.
    unsafe { scalar_info(key, &value, PMIX_BOOL) }
}

/// An info array entry holding the scalar `value`, of PMIx type `ty`.
///
/// # Safety
/// `ty` is the PMIx type of `T`, a plain scalar that `PMIx_Info_load` copies (no
/// allocation, so nothing needs freeing): `PMIX_INT` for `c_int`, `PMIX_BOOL` for
/// `bool`.
unsafe fn scalar_info<T: Copy>(
    key: &CStr,
    value: &T,
    ty: pmix_data_type_t,
) -> Result<pmix_info_t, Status> {
    // SAFETY: pmix_info_t is plain data (arrays, integers, a union of integers and
    // pointers) for which all-zero bytes is the PMIX_INFO_CONSTRUCT state.
    let mut info: pmix_info_t = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is a valid, writable pmix_info_t; `key` is NUL-terminated and
    // shorter than PMIX_MAX_KEYLEN; `value` is live for the duration of the call,
    // which copies it as the `ty` it is (the caller's promise).
    check(unsafe {
        PMIx_Info_load(
            &mut info,
            key.as_ptr(),
            std::ptr::from_ref(value).cast(),
            ty,
        )
    })?;
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_answers() {
        let v = version();
        assert!(v.contains("PMIx"), "{v}");
        assert_eq!(Status(PMIX_ERR_NOT_FOUND).to_string(), "NOT-FOUND (-46)");
    }

    /// The library writes a loaded value where this module's declarations read it.
    #[test]
    fn values_and_infos_land_where_declared() {
        // In this test, every pointer passed lives across its call and loaded data is
        // destructed.
        // SAFETY: zero bytes are PMIX_VALUE_CONSTRUCT's state of this plain-data type.
        let mut v: pmix_value_t = unsafe { std::mem::zeroed() };
        let x: u32 = 0xdead_beef;
        // SAFETY: see above.
        check(unsafe { PMIx_Value_load(&mut v, std::ptr::from_ref(&x).cast(), PMIX_UINT32) })
            .unwrap();
        assert_eq!(v.type_, PMIX_UINT32);
        // SAFETY: the type tag says uint32.
        assert_eq!(unsafe { v.data.uint32 }, 0xdead_beef);
        // SAFETY: see above.
        unsafe { PMIx_Value_destruct(&mut v) };

        let payload = b"four\0bytes";
        let bo = pmix_byte_object_t {
            bytes: payload.as_ptr().cast_mut().cast(),
            size: payload.len(),
        };
        // SAFETY: see above; load copies the bytes.
        check(unsafe { PMIx_Value_load(&mut v, std::ptr::from_ref(&bo).cast(), PMIX_BYTE_OBJECT) })
            .unwrap();
        assert_eq!(v.type_, PMIX_BYTE_OBJECT);
        // SAFETY: the type tag says byte object; load allocated `size` bytes.
        let copied =
            unsafe { std::slice::from_raw_parts(v.data.bo.bytes.cast::<u8>(), v.data.bo.size) };
        assert_eq!(copied, payload);
        assert_ne!(v.data_ptr(), payload.as_ptr());
        // SAFETY: see above.
        unsafe { PMIx_Value_destruct(&mut v) };

        let info = bool_info(KEY_COLLECT_DATA, true).unwrap();
        // SAFETY: load wrote a NUL-terminated key.
        let key = unsafe { CStr::from_ptr(info.key.as_ptr()) };
        assert_eq!(key, KEY_COLLECT_DATA);
        assert_eq!(info.value.type_, PMIX_BOOL);
        // SAFETY: the type tag says bool.
        assert!(unsafe { info.value.data.flag });
    }

    impl pmix_value_t {
        fn data_ptr(&self) -> *const u8 {
            // SAFETY: only called on byte-object values.
            unsafe { self.data.bo.bytes.cast::<u8>().cast_const() }
        }
    }
}
