//! `fi_getinfo` through the bindings finds the providers gex's CI relies on
//! (`tcp;ofi_rxm` and `shm` for `FI_EP_RDM` with `FI_MSG`), and the shim's
//! `static inline` wrappers link and run (`fi_allocinfo`, `fi_strerror`).
//!
//! # Safety
//! Raw FFI calls following the libfabric man pages: `fi_allocinfo` results are freed
//! with `fi_freeinfo`, C strings are NUL-terminated and outlive the calls that read them.
#![allow(unsafe_code)]

use libfabric_sys as fi;
use std::ffi::{CStr, CString};

/// Provider names (`prov_name`) offered for an RDM endpoint with `FI_MSG` when the
/// hints ask for `prov`.
fn rdm_providers(prov: &str) -> Result<Vec<String>, String> {
    let name = CString::new(prov).expect("no NUL");
    // SAFETY: fi_allocinfo returns a zeroed fi_info with its attribute structs allocated,
    // or NULL.
    let hints = unsafe { fi::fi_allocinfo() };
    assert!(!hints.is_null(), "fi_allocinfo");
    // SAFETY: hints and its attribute pointers are valid (allocated above); prov_name is
    // freed by fi_freeinfo, so it must come from the C allocator (strdup).
    unsafe {
        (*hints).caps = u64::from(fi::FI_MSG);
        (*(*hints).ep_attr).type_ = fi::FI_EP_RDM;
        (*(*hints).fabric_attr).prov_name = libc::strdup(name.as_ptr());
    }
    let mut info: *mut fi::fi_info = std::ptr::null_mut();
    // SAFETY: valid hints, out-pointer to a local; node/service NULL.
    let rc = unsafe {
        fi::fi_getinfo(
            fi::FI_VERSION_1_17,
            std::ptr::null(),
            std::ptr::null(),
            0,
            hints,
            &mut info,
        )
    };
    // SAFETY: allocated by fi_allocinfo, freed once.
    unsafe { fi::fi_freeinfo(hints) };
    if rc != 0 {
        // SAFETY: fi_strerror returns a static NUL-terminated string.
        let msg = unsafe { CStr::from_ptr(fi::fi_strerror(-rc)) };
        return Err(format!("fi_getinfo({prov}): {}", msg.to_string_lossy()));
    }
    let mut out = Vec::new();
    let mut p = info;
    while !p.is_null() {
        // SAFETY: p walks the list fi_getinfo returned; fabric_attr and prov_name are set
        // for every entry.
        unsafe {
            out.push(
                CStr::from_ptr((*(*p).fabric_attr).prov_name)
                    .to_string_lossy()
                    .into_owned(),
            );
            p = (*p).next;
        }
    }
    // SAFETY: the list returned by fi_getinfo, freed once.
    unsafe { fi::fi_freeinfo(info) };
    Ok(out)
}

#[test]
fn finds_tcp_rxm() {
    let provs = rdm_providers("tcp").expect("tcp provider");
    assert!(
        provs.iter().any(|p| p == "tcp;ofi_rxm"),
        "tcp RDM providers: {provs:?}"
    );
}

#[test]
fn finds_shm() {
    let provs = rdm_providers("shm").expect("shm provider");
    assert!(
        provs.iter().all(|p| p == "shm") && !provs.is_empty(),
        "{provs:?}"
    );
}

#[test]
fn unknown_provider_is_enodata() {
    let e = rdm_providers("no-such-provider").expect_err("must not exist");
    assert!(e.contains("No data available"), "{e}");
}

#[test]
fn runtime_version_is_at_least_1_17() {
    // SAFETY: fi_version takes no arguments and returns the library's version.
    let v = unsafe { fi::fi_version() };
    assert!(
        v >= fi::FI_VERSION_1_17,
        "libfabric {}.{}",
        v >> 16,
        v & 0xffff
    );
}
