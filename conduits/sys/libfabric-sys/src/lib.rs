//! # libfabric-sys
//!
//! Raw bindings to the system [libfabric](https://ofiwg.github.io/libfabric/) (1.17 or
//! newer), for gex's ofi conduit (`gex-conduit-ofi`) and nothing else. Nothing here is
//! safe to call without reading the libfabric man pages: these are the C declarations,
//! one to one.
//!
//! ## What it does
//! - **Finds libfabric** with pkg-config (`libfabric.pc`, at least 1.17), or under
//!   `LIBFABRIC_DIR` (an installation prefix) when that is set; `LIBFABRIC_STATIC=1`
//!   links the static library. The package declares `links = "fabric"` and exports the
//!   include directories to dependent build scripts as `DEP_FABRIC_INCLUDE`.
//! - **Declares** the `fi_*` functions, the `fi_*`/`fid*` types and the `FI_*` constants
//!   of `rdma/fabric.h`, `fi_errno.h`, `fi_domain.h`, `fi_endpoint.h`, `fi_cm.h`,
//!   `fi_eq.h`, `fi_rma.h`, `fi_tagged.h` and `fi_atomic.h` (an allowlist: no libc or
//!   system types leak in; `iovec` is `libc::iovec`).
//! - **Reaches the `static inline` calls.** Most of libfabric's data path (`fi_send`,
//!   `fi_recv`, `fi_cq_read`, `fi_write`, `fi_close`, `fi_mr_reg`, ...) is `static
//!   inline` in the headers: a call through the object's ops table. `src/shim.c`
//!   compiles each of them into a real function `<name>__extern`, and the bindings
//!   declare it under its C name (`#[link_name]`), so `fi_send(...)` in Rust calls
//!   `fi_send__extern`, which calls `ep->msg->send(...)`. Cost: one direct call.
//! - A few items bindgen cannot express (macros with casts, function-like macros) are
//!   written by hand below: [`FI_ADDR_UNSPEC`], [`FI_ADDR_NOTAVAIL`],
//!   [`FI_KEY_NOTAVAIL`], [`fi_make_version`], [`FI_VERSION_1_17`].
//!
//! ## Why pregenerated bindings
//! `src/bindings.rs` and `src/shim.c` are generated once by `regen.sh` (bindgen 0.72.1
//! with `--wrap-static-fns`) from Debian 12's libfabric 1.17 headers, and committed.
//! Building therefore needs neither libclang nor bindgen (a build takes seconds, and CI
//! installs only `libfabric-dev`), and the bindings are reviewable text. libfabric keeps
//! its ABI backwards compatible (symbol versioning, and an application asks for an API
//! version in `fi_getinfo`), so bindings for the oldest supported version (1.17) work
//! with newer libraries; structures that later versions extend are only ever allocated
//! by libfabric itself (`fi_allocinfo`, `fi_getinfo`). Regenerate with `regen.sh` when
//! the oldest supported version changes. (The crates.io `ofi-libfabric-sys` crate needs
//! 2.x headers and does not build against Debian 12's 1.17.)
//!
//! ## What it does not do
//! No safe wrapper, no ownership of handles, no error conversion: that is the conduit's
//! job. Integer macros come out with the narrowest type bindgen picks (`u32` for
//! `FI_MSG`, which is a `u64` flag in the API): widen them with `u64::from`.

// The generated declarations keep C's names; documenting 4 000 generated items would
// only repeat the man pages.
#![allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    clippy::all
)]

mod ffi {
    //! The generated bindings.
    //!
    //! # Safety
    //! Declarations only: every function is an `unsafe extern "C"` item whose contract
    //! is libfabric's man page for the function of the same name. Nothing in this module
    //! executes code by itself.
    #![allow(
        unsafe_code,
        unsafe_op_in_unsafe_fn,
        clippy::all,
        clippy::undocumented_unsafe_blocks
    )]
    include!("bindings.rs");
}

pub use ffi::*;

/// `FI_ADDR_UNSPEC` (`((uint64_t) -1)`): any source, or no address.
pub const FI_ADDR_UNSPEC: fi_addr_t = u64::MAX;
/// `FI_ADDR_NOTAVAIL` (`((uint64_t) -1)`): the address is not available.
pub const FI_ADDR_NOTAVAIL: fi_addr_t = u64::MAX;
/// `FI_KEY_NOTAVAIL` (`((uint64_t) -1)`): the memory key is not available.
pub const FI_KEY_NOTAVAIL: u64 = u64::MAX;

/// `FI_VERSION(major, minor)`: the API version number `fi_getinfo` expects.
pub const fn fi_make_version(major: u32, minor: u32) -> u32 {
    (major << 16) | minor
}

/// The API version these bindings were generated from: 1.17.
pub const FI_VERSION_1_17: u32 = fi_make_version(1, 17);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_macro() {
        assert_eq!(FI_VERSION_1_17, (1 << 16) | 17);
        assert_eq!(FI_MAJOR_VERSION, 1);
        assert!(FI_MINOR_VERSION >= 17);
    }
}
