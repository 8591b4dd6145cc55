//! A client region owns its buffer (`Ofi::register(Vec<T>)`): once the region is
//! leaked, the buffer cannot be freed or reallocated, so its pages stay those the
//! endpoints registered. Only `MemRegion::into_vec`, which ends the region first,
//! gives it back.
use gex_conduit_ofi::Ofi;

fn leak(ofi: &Ofi) {
    let mut buf = vec![0u8; 1 << 16];
    let region = ofi.register(buf);
    std::mem::forget(region);
    buf.reserve(8 << 20);
    drop(buf);
}

fn main() {
    let _ = leak;
}
