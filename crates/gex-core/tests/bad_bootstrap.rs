//! `ClientBuilder::init` against a bootstrap whose exchange returns something other
//! than what the ranks sent (a corrupt launcher): an error, never a panic or an
//! allocation of what a blob claims. The `core-layout` fuzz target of
//! `benches/gex-fuzz` explores the same path with random exchanges.

use gex_core::boot::{BootError, Bootstrap};
use gex_core::loopback::Loopback;
use gex_core::{ClientBuilder, Config, InitError};

/// A bootstrap of `size` ranks (this one rank 0) whose exchange returns `blobs`.
#[derive(Debug)]
struct Corrupt {
    size: u32,
    hosts: Vec<u32>,
    blobs: Vec<Vec<u8>>,
}

impl Bootstrap for Corrupt {
    fn name(&self) -> &'static str {
        "corrupt"
    }
    fn rank(&self) -> u32 {
        0
    }
    fn size(&self) -> u32 {
        self.size
    }
    fn host_ids(&self) -> &[u32] {
        &self.hosts
    }
    fn exchange(&mut self, _mine: &[u8]) -> Result<Vec<Vec<u8>>, BootError> {
        Ok(self.blobs.clone())
    }
    fn barrier(&mut self) -> Result<(), BootError> {
        Ok(())
    }
    fn broadcast(&mut self, _root: u32, data: &[u8]) -> Result<Vec<u8>, BootError> {
        Ok(data.to_vec())
    }
    fn abort(&mut self, code: i32, msg: &str) -> ! {
        panic!("abort({code}): {msg}")
    }
    fn finalize(&mut self, _code: i32) -> Result<(), BootError> {
        Ok(())
    }
    fn request_exit(&mut self, _code: i32) {}
}

fn blob(eps: u16, seg: u64) -> Vec<u8> {
    let mut b = eps.to_le_bytes().to_vec();
    b.extend(seg.to_le_bytes());
    b
}

fn init(size: u32, blobs: Vec<Vec<u8>>) -> Result<(), String> {
    let boot = Box::new(Corrupt {
        size,
        hosts: vec![0; size as usize],
        blobs,
    });
    ClientBuilder::new()
        .segment_size(4096)
        .config(Config::default())
        .init::<Loopback>(boot)
        .map(|c| c.finalize().unwrap())
        .map_err(|e| match e {
            InitError::Boot(BootError::Protocol(m)) => m,
            other => format!("another error: {other}"),
        })
}

#[test]
fn an_honest_exchange_works() {
    init(1, vec![blob(1, 4096)]).unwrap();
}

/// Regression (found by the `core-layout` fuzz target, input `00 01`): an exchange
/// with fewer blobs than ranks made the loopback conduit index past the end of the
/// layout (a panic inside `init`).
#[test]
fn too_few_blobs_is_an_error() {
    let e = init(1, vec![]).unwrap_err();
    assert!(e.contains("0 layout blobs for 1 ranks"), "{e}");
    let e = init(2, vec![blob(1, 4096)]).unwrap_err();
    assert!(e.contains("1 layout blobs for 2 ranks"), "{e}");
}

/// Regression (found while writing the `core-layout` fuzz target): this rank's own
/// entry was taken from the exchange, so a corrupt launcher could make it allocate a
/// segment of any size it named.
#[test]
fn a_changed_own_blob_is_an_error() {
    let e = init(1, vec![blob(1, 1 << 60)]).unwrap_err();
    assert!(e.contains("not this rank's own blob"), "{e}");
}

/// Regression (found while writing the `core-layout` fuzz target): a rank with no
/// endpoint was accepted into the layout.
#[test]
fn a_rank_without_endpoints_is_an_error() {
    let e = init(2, vec![blob(1, 4096), blob(0, 4096)]).unwrap_err();
    assert!(e.contains("rank 1 has no endpoint"), "{e}");
}
