//! What the type system forbids: compile-fail cases under `tests/ui/` (each with the
//! compiler's message in its `.stderr`; regenerate with `TRYBUILD=overwrite` after a
//! toolchain change).

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
