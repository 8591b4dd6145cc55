//! Other ranks write this rank's segment: safe code reads it through atomic copies
//! (`Segment::read`), never as a `&[u8]`.
use gex_core::loopback::Loopback;
use gex_core::Endpoint;

fn peek(ep: &Endpoint<Loopback>) -> u8 {
    let seg = ep.segment();
    let bytes: &[u8] = &seg[..];
    bytes[0]
}

fn main() {
    let _ = peek;
}
