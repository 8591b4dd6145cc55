//! A bootstrap that changes what another one says, for the tests of what gex checks
//! of its bootstrap and of its peers.
//!
//! [`Bootstrap`] is a safe trait (runtimes implement it for their launchers), so
//! nothing stops an implementation from answering a rank outside the job or returning
//! other ranks' blobs changed. The core checks what it is told against the job layout,
//! and each conduit checks what its peers publish against that layout (see the conduit
//! guide). [`Tampered`] wraps a real bootstrap (a process runner's, a thread job's) and
//! tells one such lie, with safe code only, so a test can show that the lie ends in an
//! error naming the rank and the field, never in a write past a peer's memory, a panic
//! or a hang.
//!
//! # Example
//! ```
//! use gex_core::boot::{Bootstrap, Singleton};
//! use gex_testkit::tamper::Tampered;
//!
//! // Every exchange returns one blob more than there are ranks.
//! let mut b = Tampered::new(Box::new(Singleton::new()))
//!     .incoming(|_n, all| all.push(Vec::new()))
//!     .boxed();
//! assert_eq!(b.exchange(&[1]).unwrap().len(), 2);
//! ```

use gex_core::boot::{BootError, Bootstrap};

/// Changes this rank's blob of the `n`th exchange (0: the first) before it leaves.
pub type Outgoing = Box<dyn FnMut(usize, &mut Vec<u8>) + Send>;
/// Changes what the `n`th exchange returns.
pub type Incoming = Box<dyn FnMut(usize, &mut Vec<Vec<u8>>) + Send>;

/// A bootstrap that passes every call to `inner`, except what it was told to change.
/// See the [module documentation](self).
pub struct Tampered {
    inner: Box<dyn Bootstrap>,
    exchanges: usize,
    rank: Option<u32>,
    size: Option<u32>,
    hosts: Option<Vec<u32>>,
    outgoing: Option<Outgoing>,
    incoming: Option<Incoming>,
}

impl std::fmt::Debug for Tampered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tampered")
            .field("inner", &self.inner)
            .field("exchanges", &self.exchanges)
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("hosts", &self.hosts)
            .field("outgoing", &self.outgoing.is_some())
            .field("incoming", &self.incoming.is_some())
            .finish()
    }
}

impl Tampered {
    /// A wrapper of `inner` that changes nothing yet.
    pub fn new(inner: Box<dyn Bootstrap>) -> Self {
        Tampered {
            inner,
            exchanges: 0,
            rank: None,
            size: None,
            hosts: None,
            outgoing: None,
            incoming: None,
        }
    }
    /// [`Bootstrap::rank`] answers `rank` (the exchanges still place this rank's blob
    /// where the launcher has it).
    pub fn with_rank(mut self, rank: u32) -> Self {
        self.rank = Some(rank);
        self
    }
    /// [`Bootstrap::size`] answers `size`.
    pub fn with_size(mut self, size: u32) -> Self {
        self.size = Some(size);
        self
    }
    /// [`Bootstrap::host_ids`] answers `hosts`.
    pub fn with_host_ids(mut self, hosts: Vec<u32>) -> Self {
        self.hosts = Some(hosts);
        self
    }
    /// `f(n, blob)` changes this rank's blob of the `n`th exchange before it leaves.
    /// What the exchange returns at this rank's index is then the blob the caller
    /// passed, as an honest bootstrap returns it: only the other ranks see the change.
    pub fn outgoing(mut self, f: impl FnMut(usize, &mut Vec<u8>) + Send + 'static) -> Self {
        self.outgoing = Some(Box::new(f));
        self
    }
    /// `f(n, all)` changes what the `n`th exchange returns (after [`outgoing`](Self::outgoing)).
    pub fn incoming(mut self, f: impl FnMut(usize, &mut Vec<Vec<u8>>) + Send + 'static) -> Self {
        self.incoming = Some(Box::new(f));
        self
    }
    /// As a boxed bootstrap, for [`gex_core::ClientBuilder::init`].
    pub fn boxed(self) -> Box<dyn Bootstrap> {
        Box::new(self)
    }
}

impl Bootstrap for Tampered {
    fn name(&self) -> &'static str {
        "tampered"
    }
    fn rank(&self) -> u32 {
        self.rank.unwrap_or_else(|| self.inner.rank())
    }
    fn size(&self) -> u32 {
        self.size.unwrap_or_else(|| self.inner.size())
    }
    fn host_ids(&self) -> &[u32] {
        self.hosts
            .as_deref()
            .unwrap_or_else(|| self.inner.host_ids())
    }
    fn exchange(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, BootError> {
        let n = self.exchanges;
        self.exchanges += 1;
        let mut all = match &mut self.outgoing {
            Some(f) => {
                let mut out = mine.to_vec();
                f(n, &mut out);
                let mut all = self.inner.exchange(&out)?;
                if let Some(own) = all.get_mut(self.inner.rank() as usize) {
                    *own = mine.to_vec();
                }
                all
            }
            None => self.inner.exchange(mine)?,
        };
        if let Some(f) = &mut self.incoming {
            f(n, &mut all);
        }
        Ok(all)
    }
    fn barrier(&mut self) -> Result<(), BootError> {
        self.inner.barrier()
    }
    fn broadcast(&mut self, root: u32, data: &[u8]) -> Result<Vec<u8>, BootError> {
        self.inner.broadcast(root, data)
    }
    fn abort(&mut self, code: i32, msg: &str) -> ! {
        self.inner.abort(code, msg)
    }
    fn finalize(&mut self, code: i32) -> Result<(), BootError> {
        self.inner.finalize(code)
    }
    fn request_exit(&mut self, code: i32) {
        self.inner.request_exit(code)
    }
}

/// Replaces the first little-endian `from` in `blob` with `to` (e.g. a segment length
/// in the core's layout blob, whatever else the blob holds); false if `from` is not
/// there.
pub fn replace_le_u64(blob: &mut [u8], from: u64, to: u64) -> bool {
    let (from, to) = (from.to_le_bytes(), to.to_le_bytes());
    match blob.windows(8).position(|w| w == from) {
        Some(at) => {
            blob[at..at + 8].copy_from_slice(&to);
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gex_core::boot::Singleton;

    #[test]
    fn outgoing_changes_are_hidden_from_the_sender() {
        let mut b = Tampered::new(Box::new(Singleton::new()))
            .outgoing(|_, blob| blob.push(9))
            .with_rank(5)
            .with_size(7)
            .with_host_ids(vec![1, 2]);
        assert_eq!(b.exchange(&[1]).unwrap(), vec![vec![1]]);
        assert_eq!((b.rank(), b.size(), b.host_ids()), (5, 7, &[1, 2][..]));
    }

    #[test]
    fn replace_finds_the_value_anywhere() {
        let mut b = vec![7u8];
        b.extend(4096u64.to_le_bytes());
        assert!(replace_le_u64(&mut b, 4096, 1 << 20));
        assert_eq!(&b[1..], &(1u64 << 20).to_le_bytes());
        assert!(!replace_le_u64(&mut b, 4096, 1));
    }
}
