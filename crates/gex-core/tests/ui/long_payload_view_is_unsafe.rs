//! A Long payload lies in the segment, which other ranks may write while the handler
//! runs: reading it safely copies it atomically (`read`, `to_vec`); a borrowed view is
//! `unsafe`, with a written contract.
use gex_core::{Am, Token};

fn handler(_t: &mut Token<'_>, am: Am<'_>) {
    if let Some(l) = am.long() {
        let bytes: &[u8] = l.as_slice();
        println!("{}", bytes.len());
    }
}

fn main() {
    let _ = handler;
}
