//! Finds the system libfabric (>= 1.17) and compiles the C shim that turns its
//! `static inline` calls into real functions.
//!
//! Search order:
//! 1. `LIBFABRIC_DIR`: an installation prefix with `include/rdma/fabric.h` and
//!    `lib/` (or `lib64/`) holding `libfabric.so`; no pkg-config involved;
//! 2. pkg-config (`libfabric.pc`, at least 1.17; `PKG_CONFIG_PATH` and the other
//!    variables of the `pkg-config` crate apply).
//!
//! Set `LIBFABRIC_STATIC=1` to link `libfabric.a` instead of the shared library.

use std::env;
use std::path::PathBuf;

const MIN_VERSION: &str = "1.17";

fn main() {
    println!("cargo:rerun-if-env-changed=LIBFABRIC_DIR");
    println!("cargo:rerun-if-env-changed=LIBFABRIC_STATIC");
    println!("cargo:rerun-if-changed=src/shim.c");
    println!("cargo:rerun-if-changed=wrapper.h");
    let statik = env::var("LIBFABRIC_STATIC").is_ok_and(|v| v == "1");
    let includes: Vec<PathBuf> = match env::var_os("LIBFABRIC_DIR") {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            let inc = dir.join("include");
            if !inc.join("rdma/fabric.h").exists() {
                panic!(
                    "libfabric-sys: LIBFABRIC_DIR={} has no include/rdma/fabric.h",
                    dir.display()
                );
            }
            for lib in ["lib", "lib64"] {
                if dir.join(lib).exists() {
                    println!("cargo:rustc-link-search=native={}", dir.join(lib).display());
                }
            }
            let kind = if statik { "static" } else { "dylib" };
            println!("cargo:rustc-link-lib={kind}=fabric");
            vec![inc]
        }
        None => match pkg_config::Config::new()
            .atleast_version(MIN_VERSION)
            .statik(statik)
            .probe("libfabric")
        {
            Ok(lib) => lib.include_paths,
            Err(e) => panic!(
                "libfabric-sys: libfabric >= {MIN_VERSION} not found by pkg-config ({e}).\n\
                 Install it (Debian/Ubuntu: apt-get install libfabric-dev) or point \
                 LIBFABRIC_DIR at an installation prefix."
            ),
        },
    };
    let mut shim = cc::Build::new();
    shim.file("src/shim.c").warnings(true);
    for i in &includes {
        shim.include(i);
    }
    shim.compile("gex_fabric_shim");
    let joined = env::join_paths(&includes).expect("include paths");
    println!("cargo:include={}", joined.to_string_lossy());
}
