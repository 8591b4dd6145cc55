//! Build script of gex-boot. Without the `pmix` feature it does nothing. With it, it
//! finds the system libpmix (>= 4) and compiles `src/pmix/layout.c`, whose static
//! assertions check the hand-written declarations of `src/pmix/ffi.rs` against the
//! real `pmix.h`: a libpmix whose structure layouts differ fails the build here
//! instead of corrupting memory at run time.
//!
//! Search order:
//! 1. `LIBPMIX_DIR`: an installation prefix with `include/pmix.h` and `lib/` (or
//!    `lib64/`) holding `libpmix.so`; no pkg-config involved;
//! 2. pkg-config (`pmix.pc`, at least 4.0; Debian/Ubuntu: `apt-get install
//!    libpmix-dev`; `PKG_CONFIG_PATH` and the other variables of the `pkg-config`
//!    crate apply).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "pmix")]
    pmix::probe();
}

#[cfg(feature = "pmix")]
mod pmix {
    use std::env;
    use std::path::PathBuf;

    const MIN_VERSION: &str = "4.0";

    pub(crate) fn probe() {
        println!("cargo:rerun-if-env-changed=LIBPMIX_DIR");
        println!("cargo:rerun-if-changed=src/pmix/layout.c");
        let includes: Vec<PathBuf> = match env::var_os("LIBPMIX_DIR") {
            Some(dir) => {
                let dir = PathBuf::from(dir);
                let inc = dir.join("include");
                if !inc.join("pmix.h").exists() {
                    panic!(
                        "gex-boot (feature pmix): LIBPMIX_DIR={} has no include/pmix.h",
                        dir.display()
                    );
                }
                for lib in ["lib", "lib64"] {
                    let d = dir.join(lib);
                    if d.exists() {
                        println!("cargo:rustc-link-search=native={}", d.display());
                        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", d.display());
                    }
                }
                println!("cargo:rustc-link-lib=dylib=pmix");
                vec![inc]
            }
            None => match pkg_config::Config::new()
                .atleast_version(MIN_VERSION)
                .probe("pmix")
            {
                Ok(lib) => lib.include_paths,
                Err(e) => panic!(
                    "gex-boot (feature pmix): libpmix >= {MIN_VERSION} not found by pkg-config \
                     ({e}).\nInstall it (Debian/Ubuntu: apt-get install libpmix-dev) or point \
                     LIBPMIX_DIR at an installation prefix."
                ),
            },
        };
        let mut check = cc::Build::new();
        check.file("src/pmix/layout.c").warnings(true);
        for i in &includes {
            check.include(i);
        }
        check.compile("gex_pmix_layout");
    }
}
