//! Test support of the PMI-1 and PMI-2 clients' unit tests: a fake server for `size`
//! clients in threads of this process (one thread per connection, over a socket pair,
//! with a key-value space, a barrier and a record of what it saw shared by all), and
//! jobs that run one client per rank against it.

use gex_core::boot::Bootstrap;
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Barrier, Mutex};
use std::thread::JoinHandle;

/// What the threads of a fake server share: the key-value space, the barrier of its
/// `size` connections and what it saw (`S`).
pub(crate) struct Shared<S> {
    pub(crate) kvs: Arc<Mutex<HashMap<String, String>>>,
    pub(crate) barrier: Arc<Barrier>,
    pub(crate) seen: Arc<Mutex<S>>,
}

/// A running fake server: the clients' ends of its connections, its threads and what
/// it saw.
pub(crate) type Served<S> = (Vec<OwnedFd>, Vec<JoinHandle<()>>, Arc<Mutex<S>>);

/// Starts a fake server of `size` connections; connection `rank` is served by
/// `conn(rank, its end, the shared state)` in a thread of its own.
pub(crate) fn serve<S: Default + Send + 'static>(
    size: u32,
    conn: impl Fn(u32, UnixStream, Shared<S>) + Clone + Send + 'static,
) -> Served<S> {
    let kvs: Arc<Mutex<HashMap<String, String>>> = Arc::default();
    let barrier = Arc::new(Barrier::new(size as usize));
    let seen: Arc<Mutex<S>> = Arc::default();
    let mut clients = Vec::new();
    let mut threads = Vec::new();
    for rank in 0..size {
        let (a, b) = UnixStream::pair().unwrap();
        clients.push(OwnedFd::from(a));
        let shared = Shared {
            kvs: kvs.clone(),
            barrier: barrier.clone(),
            seen: seen.clone(),
        };
        let conn = conn.clone();
        threads.push(std::thread::spawn(move || conn(rank, b, shared)));
    }
    (clients, threads, seen)
}

/// Runs `body` on the client `connect(rank, socket)` makes of each connection of
/// `served`, each in its own thread, then waits for the server's threads. Returns what
/// `body` returned, in rank order, and what the server saw.
pub(crate) fn job<S, C, T: Send + 'static>(
    served: Served<S>,
    connect: impl Fn(u32, OwnedFd) -> C + Send + Sync + 'static,
    body: impl Fn(C) -> T + Send + Sync + 'static,
) -> (Vec<T>, Arc<Mutex<S>>) {
    let (clients, servers, seen) = served;
    let rank = Arc::new(move |r: u32, sock: OwnedFd| body(connect(r, sock)));
    let ranks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(r, sock)| {
            let rank = rank.clone();
            std::thread::spawn(move || rank(r as u32, sock))
        })
        .collect();
    let out = ranks.into_iter().map(|t| t.join().unwrap()).collect();
    for s in servers {
        s.join().unwrap();
    }
    (out, seen)
}

/// A job's body: the client's host ids, after which it finalizes.
pub(crate) fn finalized_host_ids<C: Bootstrap>(mut c: C) -> Vec<u32> {
    let h = c.host_ids().to_vec();
    c.finalize(0).unwrap();
    h
}

/// A test blob of `len` bytes that depends on `rank`.
pub(crate) fn blob(rank: u32, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u32 * 7 + rank * 13) as u8).collect()
}
