//! The bootstrap collectives over a PMI key-value space, shared by the PMI-1 and
//! PMI-2 clients: blobs are base64url-encoded, cut into chunks that fit one value,
//! published under `gex.<seq>.<rank>.<chunk>` and read back after a fence. The
//! scheme is described in the [`pmi`](super#how-the-collectives-map-onto-the-kvs)
//! module documentation.

// The parent module allows `unsafe` for one borrow of an inherited descriptor;
// nothing here needs it.
#![deny(unsafe_code)]

use gex_core::boot::BootError;

use super::b64;

/// Largest chunk count accepted in another rank's chunk 0 (a corrupt count must
/// not make this rank issue billions of requests).
const MAX_CHUNKS: usize = 1 << 26;

/// Room kept in chunk 0 for the chunk count and its dot.
pub(crate) const COUNT_PREFIX: usize = 11;

/// Smallest number of base64 characters per chunk a client accepts to work with.
pub(crate) const MIN_CHUNK: usize = 16;

/// `kvs_rank`, `kvs_size` and `chunk` of a [`Kvs`] impl, read from the client's
/// `rank`, `size` and `chunk` fields.
macro_rules! kvs_fields {
    () => {
        fn kvs_rank(&self) -> u32 {
            self.rank
        }
        fn kvs_size(&self) -> u32 {
            self.size
        }
        fn chunk(&self) -> usize {
            self.chunk
        }
    };
}

/// A job's key-value space, as one PMI client sees it.
pub(crate) trait Kvs {
    /// This process's rank.
    fn kvs_rank(&self) -> u32;
    /// Number of ranks.
    fn kvs_size(&self) -> u32;
    /// Base64 characters per chunk.
    fn chunk(&self) -> usize;
    /// The key of chunk `chunk` of `rank`'s contribution to collective `seq`.
    fn key(&self, seq: u64, rank: u32, chunk: usize) -> Result<String, BootError>;
    /// Publishes `value` under `key`.
    fn put(&mut self, key: &str, value: &str) -> Result<(), BootError>;
    /// The value of `key`, or `None` if no rank published it.
    fn get(&mut self, key: &str) -> Result<Option<String>, BootError>;
    /// The server's barrier, which also makes every earlier `put` visible to every
    /// rank.
    fn fence(&mut self) -> Result<(), BootError>;

    /// Publishes `blob` as this rank's contribution to collective `seq`.
    fn put_blob(&mut self, seq: u64, blob: &[u8]) -> Result<(), BootError> {
        let enc = b64::encode(blob);
        // Base64url is ASCII: splitting at any byte index is splitting at a char.
        let pieces: Vec<&str> = if enc.is_empty() {
            vec![""]
        } else {
            enc.as_bytes()
                .chunks(self.chunk())
                .map(|c| std::str::from_utf8(c).expect("base64 is ASCII"))
                .collect()
        };
        let n = pieces.len();
        let me = self.kvs_rank();
        for (i, piece) in pieces.into_iter().enumerate() {
            let key = self.key(seq, me, i)?;
            if i == 0 {
                self.put(&key, &format!("{n}.{piece}"))?;
            } else {
                self.put(&key, piece)?;
            }
        }
        Ok(())
    }

    /// Reads rank `rank`'s contribution to collective `seq`.
    fn get_blob(&mut self, seq: u64, rank: u32) -> Result<Vec<u8>, BootError> {
        let missing = |i: usize| {
            BootError::Protocol(format!(
                "rank {rank} published no chunk {i} for bootstrap collective #{seq} \
                 (did every rank make the same bootstrap calls?)"
            ))
        };
        let key = self.key(seq, rank, 0)?;
        let first = self.get(&key)?.ok_or_else(|| missing(0))?;
        let (count, data) = first
            .split_once('.')
            .and_then(|(c, d)| Some((c.parse::<usize>().ok()?, d)))
            .filter(|&(c, _)| (1..=MAX_CHUNKS).contains(&c))
            .ok_or_else(|| {
                BootError::Protocol(format!(
                    "PMI value of {key:?} has no chunk count: {first:?}"
                ))
            })?;
        let mut enc = String::from(data);
        for i in 1..count {
            let key = self.key(seq, rank, i)?;
            enc.push_str(&self.get(&key)?.ok_or_else(|| missing(i))?);
        }
        b64::decode(&enc).map_err(|_| {
            BootError::Protocol(format!(
                "rank {rank}'s blob for bootstrap collective #{seq} ({count} chunk(s), {} \
                 characters) is not unpadded base64url",
                enc.len()
            ))
        })
    }

    /// Collective `seq` as an exchange: put, fence, get every other rank's blob.
    fn kvs_exchange(&mut self, seq: u64, mine: &[u8]) -> Result<Vec<Vec<u8>>, BootError> {
        self.put_blob(seq, mine)?;
        self.fence()?;
        let me = self.kvs_rank();
        (0..self.kvs_size())
            .map(|r| {
                if r == me {
                    Ok(mine.to_vec())
                } else {
                    self.get_blob(seq, r)
                }
            })
            .collect()
    }

    /// Collective `seq` as a broadcast from `root`: the root puts, fence, the others
    /// get.
    fn kvs_broadcast(&mut self, seq: u64, root: u32, data: &[u8]) -> Result<Vec<u8>, BootError> {
        if root >= self.kvs_size() {
            return Err(BootError::Protocol(format!(
                "broadcast root {root} is not a rank of this job of {}",
                self.kvs_size()
            )));
        }
        let me = self.kvs_rank();
        if root == me {
            self.put_blob(seq, data)?;
        }
        self.fence()?;
        if root == me {
            Ok(data.to_vec())
        } else {
            self.get_blob(seq, root)
        }
    }
}

/// Host ids from host names: equal names, equal ids; ids numbered by first
/// appearance.
pub(crate) fn host_ids_from_names(names: &[Vec<u8>]) -> Vec<u32> {
    let mut seen: Vec<&[u8]> = Vec::new();
    names
        .iter()
        .map(|n| match seen.iter().position(|s| *s == n.as_slice()) {
            Some(i) => i as u32,
            None => {
                seen.push(n);
                (seen.len() - 1) as u32
            }
        })
        .collect()
}

/// Host ids found by exchanging every rank's [`node_name`] over `boot` (a collective
/// of the job: for when the launcher says nothing of the placement).
pub(crate) fn exchange_host_ids(
    boot: &mut impl gex_core::boot::Bootstrap,
) -> Result<Vec<u32>, BootError> {
    let names = boot.exchange(&node_name())?;
    Ok(host_ids_from_names(&names))
}

/// This host's name (`uname` node name), as the ranks exchange it when the launcher
/// publishes no process mapping.
pub(crate) fn node_name() -> Vec<u8> {
    rustix::system::uname().nodename().to_bytes().to_vec()
}
