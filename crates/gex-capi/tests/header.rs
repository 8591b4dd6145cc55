//! include/gex.h is what cbindgen generates from the crate's source: regenerates it
//! and fails if the checked-in file differs (`BLESS=1` rewrites it instead).

#[test]
fn gex_h_matches_the_source() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let config =
        cbindgen::Config::from_file(format!("{dir}/cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(format!("{dir}/src/lib.rs"))
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut generated);
    let path = format!("{dir}/include/gex.h");
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write include/gex.h");
        return;
    }
    let have = std::fs::read(&path).unwrap_or_default();
    assert!(
        have == generated,
        "include/gex.h differs from what cbindgen generates from src/: \
         run `BLESS=1 cargo test -p gex-capi --test header` and commit the header"
    );
}
