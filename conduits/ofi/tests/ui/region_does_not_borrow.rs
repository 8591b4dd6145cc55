//! A client region no longer borrows its buffer. With `register(&mut buf) ->
//! MemRegion<'_, T>` this program compiled: forgetting the guard ended the borrow
//! without its drop, so the region stayed alive in every endpoint's cache while `buf`
//! was freed, and a later buffer at the same addresses took its registration
//! (`tests/regions.rs`).
use gex_conduit_ofi::Ofi;

fn leak(ofi: &Ofi) {
    let mut buf = vec![0u8; 1 << 16];
    let region = ofi.register(&mut buf);
    std::mem::forget(region);
    drop(buf);
}

fn main() {
    let _ = leak;
}
