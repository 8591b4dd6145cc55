//! The layer is state composed into the endpoint, not a wrapper around it: it does not
//! dereference to the endpoint (no inheritance by `Deref`), so a layer's code cannot
//! poll or wait.
use gex_rma::Rma;

fn progress(r: &mut Rma) -> usize {
    r.poll()
}

fn main() {
    let _ = progress;
}
