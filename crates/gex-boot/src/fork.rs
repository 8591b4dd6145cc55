//! The rank side of the fork launcher: [`ForkClient`], a [`Bootstrap`] over the
//! socket the launcher left open in the rank.
//!
//! The inherited socket is adopted by the crate's `inherit` module; this module has
//! no `unsafe` code.

use std::os::fd::{AsFd, OwnedFd};

use gex_core::boot::{BootError, Bootstrap};
use rustix::io::Errno;
use rustix::net::RecvFlags;

use crate::env;
use crate::proto::{self, ToLauncher, ToRank};

/// The bootstrap of a rank started by the fork launcher ([`crate::launch`]).
///
/// Created by [`from_env`](crate::from_env) when `GEX_BOOT=fork`; it says HELLO on
/// creation and learns the host map from the launcher's reply. Every call blocks
/// until the launcher answers; if the launcher goes away the call returns
/// [`BootError::Lost`].
///
/// ```no_run
/// use gex_core::boot::Bootstrap;
/// // Inside a process started by `gex-run -n 4 ...`:
/// let mut boot = gex_boot::fork::ForkClient::from_env()?;
/// let all = boot.exchange(&boot.rank().to_le_bytes())?;
/// assert_eq!(all.len(), boot.size() as usize);
/// boot.finalize(0)?;
/// # Ok::<(), gex_core::boot::BootError>(())
/// ```
#[derive(Debug)]
pub struct ForkClient {
    sock: OwnedFd,
    rank: u32,
    size: u32,
    hosts: Vec<u32>,
    seq: u64,
}

fn env_u32(name: &str) -> Result<u32, BootError> {
    let v = std::env::var_os(name).ok_or_else(|| {
        BootError::Environment(format!("{name} is not set (GEX_BOOT=fork needs it)"))
    })?;
    v.to_str()
        .and_then(|s| s.parse::<u32>().ok())
        .ok_or_else(|| {
            BootError::Environment(format!("{name}={v:?} is not a non-negative integer"))
        })
}

fn lost_or_io(e: Errno, what: &str) -> BootError {
    match e {
        Errno::PIPE | Errno::CONNRESET | Errno::NOTCONN => {
            BootError::Lost(format!("the launcher went away ({what}: {e})"))
        }
        e => BootError::Io(std::io::Error::from(e)),
    }
}

impl ForkClient {
    /// Connects to the launcher described by `GEX_BOOT_FD`, `GEX_RANK` and
    /// `GEX_SIZE` (see [`crate::env`](mod@crate::env)) and says HELLO.
    ///
    /// # Errors
    /// [`BootError::Environment`] if a variable is missing or malformed or the
    /// descriptor is not a socket; [`BootError::Lost`] if the launcher is gone.
    pub fn from_env() -> Result<Self, BootError> {
        let fd = env_u32(env::BOOT_FD)?;
        let rank = env_u32(env::RANK)?;
        let size = env_u32(env::SIZE)?;
        let owned = crate::inherit::socket(env::BOOT_FD, fd, "gex-run")?;
        Self::connect(owned, rank, size)
    }

    /// Says HELLO as `rank` of `size` over `sock` and waits for the launcher's
    /// WELCOME.
    pub(crate) fn connect(sock: OwnedFd, rank: u32, size: u32) -> Result<Self, BootError> {
        if size == 0 || rank >= size {
            return Err(BootError::Environment(format!(
                "{}={rank} is not below {}={size}",
                env::RANK,
                env::SIZE
            )));
        }
        let mut me = ForkClient {
            sock,
            rank,
            size,
            hosts: Vec::new(),
            seq: 0,
        };
        me.send(&ToLauncher::Hello {
            version: proto::VERSION,
            rank,
            size,
        })?;
        match me.recv()? {
            ToRank::Welcome { hosts } if hosts.len() == size as usize => me.hosts = hosts,
            other => {
                return Err(BootError::Protocol(format!(
                    "expected WELCOME with {size} host ids, got {other:?}"
                )));
            }
        }
        Ok(me)
    }

    fn send(&mut self, msg: &ToLauncher) -> Result<(), BootError> {
        let frame = msg.encode().map_err(|e| BootError::Protocol(e.0))?;
        crate::client::send_all(&self.sock, &frame, lost_or_io)
    }

    fn recv_exact(&mut self, buf: &mut [u8]) -> Result<(), BootError> {
        let mut got = 0;
        while got < buf.len() {
            match rustix::net::recv(self.sock.as_fd(), &mut buf[got..], RecvFlags::empty()) {
                Ok((0, _)) => {
                    return Err(BootError::Lost(
                        "the launcher closed the bootstrap connection (the job is ending)".into(),
                    ));
                }
                Ok((n, _)) => got += n,
                Err(Errno::INTR) => {}
                Err(e) => return Err(lost_or_io(e, "recv")),
            }
        }
        Ok(())
    }

    fn recv(&mut self) -> Result<ToRank, BootError> {
        let mut head = [0u8; proto::HEADER];
        self.recv_exact(&mut head)?;
        let len = proto::body_len(&head, proto::MAX_LAUNCHER_FRAME)
            .map_err(|e| BootError::Protocol(e.0))?
            .unwrap_or(0);
        // Grown as the bytes arrive, not allocated at once: `len` is what the header
        // claims (up to 4 GiB).
        let mut body = Vec::with_capacity(len.min(1 << 20));
        while body.len() < len {
            let at = body.len();
            body.resize(len.min(at.saturating_mul(2).max(1 << 16)), 0);
            self.recv_exact(&mut body[at..])?;
        }
        ToRank::decode(&body).map_err(|e| BootError::Protocol(e.0))
    }

    collective_seq!();

    fn unexpected(what: &str, seq: u64, got: &ToRank) -> BootError {
        BootError::Protocol(format!("expected the result of {what} #{seq}, got {got:?}"))
    }
}

impl Bootstrap for ForkClient {
    bootstrap_identity!("fork");
    fn exchange(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, BootError> {
        let seq = self.next_seq();
        self.send(&ToLauncher::Exchange {
            seq,
            blob: mine.to_vec(),
        })?;
        match self.recv()? {
            ToRank::Exchanged { seq: s, blobs }
                if s == seq && blobs.len() == self.size as usize =>
            {
                Ok(blobs)
            }
            other => Err(Self::unexpected("exchange", seq, &other)),
        }
    }
    fn barrier(&mut self) -> Result<(), BootError> {
        let seq = self.next_seq();
        self.send(&ToLauncher::Barrier { seq })?;
        match self.recv()? {
            ToRank::BarrierDone { seq: s } if s == seq => Ok(()),
            other => Err(Self::unexpected("barrier", seq, &other)),
        }
    }
    fn broadcast(&mut self, root: u32, data: &[u8]) -> Result<Vec<u8>, BootError> {
        let seq = self.next_seq();
        let blob = if root == self.rank {
            data.to_vec()
        } else {
            Vec::new()
        };
        self.send(&ToLauncher::Broadcast { seq, root, blob })?;
        match self.recv()? {
            ToRank::BroadcastDone { seq: s, blob } if s == seq => Ok(blob),
            other => Err(Self::unexpected("broadcast", seq, &other)),
        }
    }
    fn abort(&mut self, code: i32, msg: &str) -> ! {
        let code = crate::client::abort_code(code);
        let sent = self.send(&ToLauncher::Abort {
            code,
            msg: msg.to_owned(),
        });
        if sent.is_err() {
            // The launcher cannot print the message for us.
            crate::client::print_abort(self.rank, code, msg);
        }
        std::process::exit(code)
    }
    fn finalize(&mut self, code: i32) -> Result<(), BootError> {
        self.send(&ToLauncher::Finalize { code })
    }
    fn request_exit(&mut self, code: i32) {
        if let Err(e) = self.send(&ToLauncher::Exit { code }) {
            tracing::debug!(rank = self.rank, code, error = %e, "exit request not delivered");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::FrameBuf;
    use rustix::net::{AddressFamily, SendFlags, SocketFlags, SocketType};

    /// A fake launcher on the other end of a socketpair: reads one frame, answers
    /// with `reply(msg)` until `reply` returns `None`.
    fn fake_launcher(
        sock: OwnedFd,
        mut reply: impl FnMut(ToLauncher) -> Option<Vec<ToRank>> + Send + 'static,
    ) -> std::thread::JoinHandle<Vec<ToLauncher>> {
        std::thread::spawn(move || {
            let mut seen = Vec::new();
            let mut fb = FrameBuf::new(proto::MAX_RANK_FRAME);
            let mut buf = [0u8; 4096];
            loop {
                while let Some(body) = fb.next_frame().unwrap() {
                    let m = ToLauncher::decode(&body).unwrap();
                    seen.push(m.clone());
                    match reply(m) {
                        Some(rs) => {
                            for r in rs {
                                rustix::net::send(&sock, &r.encode().unwrap(), SendFlags::NOSIGNAL)
                                    .unwrap();
                            }
                        }
                        None => return seen,
                    }
                }
                let (n, _) = rustix::net::recv(&sock, &mut buf, RecvFlags::empty()).unwrap();
                if n == 0 {
                    return seen;
                }
                fb.push(&buf[..n]);
            }
        })
    }

    fn pair() -> (OwnedFd, OwnedFd) {
        rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap()
    }

    #[test]
    fn client_speaks_the_protocol() {
        let (a, b) = pair();
        let launcher = fake_launcher(b, |m| match m {
            ToLauncher::Hello { .. } => Some(vec![ToRank::Welcome { hosts: vec![0, 0] }]),
            ToLauncher::Exchange { seq, blob } => Some(vec![ToRank::Exchanged {
                seq,
                blobs: vec![b"zero".to_vec(), blob],
            }]),
            ToLauncher::Barrier { seq } => Some(vec![ToRank::BarrierDone { seq }]),
            ToLauncher::Broadcast { seq, .. } => Some(vec![ToRank::BroadcastDone {
                seq,
                blob: b"from root".to_vec(),
            }]),
            ToLauncher::Finalize { .. } => None,
            other => panic!("unexpected {other:?}"),
        });
        let mut c = ForkClient::connect(a, 1, 2).unwrap();
        assert_eq!((c.rank(), c.size(), c.host_ids()), (1, 2, &[0, 0][..]));
        assert_eq!(
            c.exchange(b"one").unwrap(),
            vec![b"zero".to_vec(), b"one".to_vec()]
        );
        c.barrier().unwrap();
        assert_eq!(c.broadcast(0, b"ignored").unwrap(), b"from root");
        c.finalize(0).unwrap();
        let seen = launcher.join().unwrap();
        assert_eq!(
            seen,
            vec![
                ToLauncher::Hello {
                    version: proto::VERSION,
                    rank: 1,
                    size: 2
                },
                ToLauncher::Exchange {
                    seq: 0,
                    blob: b"one".to_vec()
                },
                ToLauncher::Barrier { seq: 1 },
                ToLauncher::Broadcast {
                    seq: 2,
                    root: 0,
                    blob: vec![]
                },
                ToLauncher::Finalize { code: 0 },
            ]
        );
    }

    #[test]
    fn launcher_eof_is_lost() {
        let (a, b) = pair();
        let launcher = fake_launcher(b, |m| match m {
            ToLauncher::Hello { .. } => Some(vec![ToRank::Welcome { hosts: vec![0] }]),
            _ => None,
        });
        let mut c = ForkClient::connect(a, 0, 1).unwrap();
        let e = c.barrier().unwrap_err();
        assert!(matches!(e, BootError::Lost(_)), "{e:?}");
        launcher.join().unwrap();
    }

    #[test]
    fn wrong_reply_is_a_protocol_error() {
        let (a, b) = pair();
        let launcher = fake_launcher(b, |m| match m {
            ToLauncher::Hello { .. } => Some(vec![ToRank::Welcome { hosts: vec![0] }]),
            ToLauncher::Barrier { seq } => Some(vec![ToRank::BarrierDone { seq: seq + 1 }]),
            _ => None,
        });
        let mut c = ForkClient::connect(a, 0, 1).unwrap();
        assert!(matches!(c.barrier(), Err(BootError::Protocol(_))));
        drop(c);
        launcher.join().unwrap();
    }

    #[test]
    fn bad_rank_is_refused_before_talking() {
        let (a, _b) = pair();
        assert!(matches!(
            ForkClient::connect(a, 2, 2),
            Err(BootError::Environment(_))
        ));
    }
}
