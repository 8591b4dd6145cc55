//! What gex-core's integration tests share: a loopback client, a counting handler and a
//! bootstrap that says what the test tells it to. (gex-core may not depend on
//! gex-testkit, even as a dev-dependency: layer rule L2 in docs/architecture.md.)
//! Each test file uses part of it.
#![allow(dead_code)]

use gex_core::boot::{BootError, Bootstrap, Singleton};
use gex_core::layer::LayerSet;
use gex_core::loopback::Loopback;
use gex_core::{
    Am, AmError, Body, Client, ClientBuilder, Config, Endpoint, EpAddr, Event, HandlerId,
    InitError, Nb, OwnedEndpoint, Token,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// The segment size of every test client.
pub(crate) const SEG: usize = 4096;

/// `init` of a one-rank loopback client from `builder`, with [`SEG`] bytes of segment
/// and `config`.
pub(crate) fn try_build<L: LayerSet>(
    builder: ClientBuilder<L>,
    config: Config,
) -> Result<Client<Loopback>, InitError> {
    builder
        .segment_size(SEG)
        .config(config)
        .init::<Loopback>(Box::new(Singleton::new()))
}

/// [`try_build`], which must succeed.
pub(crate) fn build<L: LayerSet>(builder: ClientBuilder<L>, config: Config) -> Client<Loopback> {
    try_build(builder, config).unwrap()
}

/// A one-rank loopback client of `eps` endpoints with `config`.
pub(crate) fn loopback(eps: u16, config: Config) -> Client<Loopback> {
    build(ClientBuilder::new().endpoints(eps), config)
}

/// A handler on `ep` counting its calls, and the counter.
pub(crate) fn counting(ep: &mut Endpoint<Loopback>) -> (HandlerId, Arc<AtomicU32>) {
    let n = Arc::new(AtomicU32::new(0));
    let m = n.clone();
    let h = ep
        .register(move |_t: &mut Token<'_>, _a: Am<'_>| {
            m.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
    (h, n)
}

/// Endpoints 0 and 1 of `c`, each with a counting handler, and that handler's index
/// (the same on both: each registered it first).
pub(crate) fn two_counting_eps(
    c: &Client<Loopback>,
) -> (OwnedEndpoint<Loopback>, OwnedEndpoint<Loopback>, HandlerId) {
    let mut a = c.endpoint(0).unwrap();
    let mut b = c.endpoint(1).unwrap();
    let (h, _) = counting(&mut a);
    let (hb, _) = counting(&mut b);
    assert_eq!(h, hb);
    (a, b, h)
}

/// An NB request with an owned 100-byte Medium payload from `a` to handler `h` of
/// endpoint 1: its event belongs to `a`.
pub(crate) fn owned_to_1(a: &mut Endpoint<Loopback>, h: HandlerId) -> Event<Vec<u8>, AmError> {
    a.request_owned(EpAddr::new(0, 1), h, Body::medium(&[], vec![5u8; 100]), Nb)
        .unwrap()
}

/// A bootstrap of `size` ranks (this one `rank`, every rank on the hosts `hosts` names)
/// whose collectives succeed, fail or return what the test set.
#[derive(Debug)]
pub(crate) struct TestBoot {
    /// This rank.
    pub(crate) rank: u32,
    /// The job size.
    pub(crate) size: u32,
    /// The host id of every rank.
    pub(crate) hosts: Vec<u32>,
    /// What the exchange returns; `None`: every rank's blob as that rank would publish
    /// it (this one's, but for the sender's rank, which the core's layout blob starts
    /// with and checks).
    pub(crate) blobs: Option<Vec<Vec<u8>>>,
    /// The exchange fails (the launcher is gone).
    pub(crate) fail_exchange: bool,
    /// The barrier fails (the launcher is gone).
    pub(crate) fail_barrier: bool,
}

impl TestBoot {
    /// Rank 0 of `size` ranks on host 0, with an honest exchange.
    pub(crate) fn new(size: u32) -> Self {
        TestBoot {
            rank: 0,
            size,
            hosts: vec![0; size as usize],
            blobs: None,
            fail_exchange: false,
            fail_barrier: false,
        }
    }

    /// Rank `rank` of `size` ranks on host 0, whose exchange returns `blobs`.
    pub(crate) fn with_blobs(rank: u32, size: u32, blobs: Vec<Vec<u8>>) -> Self {
        TestBoot {
            rank,
            blobs: Some(blobs),
            ..TestBoot::new(size)
        }
    }

    /// `ClientBuilder::init` of a loopback client on this bootstrap.
    pub(crate) fn init(self) -> Result<Client<Loopback>, InitError> {
        ClientBuilder::new()
            .segment_size(SEG)
            .config(Config::default())
            .init::<Loopback>(Box::new(self))
    }
}

fn lost() -> BootError {
    BootError::Lost("the launcher is gone".into())
}

impl Bootstrap for TestBoot {
    fn name(&self) -> &'static str {
        "test"
    }
    fn rank(&self) -> u32 {
        self.rank
    }
    fn size(&self) -> u32 {
        self.size
    }
    fn host_ids(&self) -> &[u32] {
        &self.hosts
    }
    fn exchange(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, BootError> {
        if self.fail_exchange {
            return Err(lost());
        }
        if let Some(blobs) = &self.blobs {
            return Ok(blobs.clone());
        }
        Ok((0..self.size)
            .map(|r| {
                let mut b = mine.to_vec();
                if let Some(head) = b.get_mut(..4) {
                    head.copy_from_slice(&r.to_le_bytes());
                }
                b
            })
            .collect())
    }
    fn barrier(&mut self) -> Result<(), BootError> {
        if self.fail_barrier {
            return Err(lost());
        }
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
