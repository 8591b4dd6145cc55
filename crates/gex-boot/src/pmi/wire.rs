//! The PMI-1 wire format: newline-terminated `cmd=NAME key=value …` lines over a
//! stream socket, and the connection that carries them.
//!
//! This module knows the syntax only; which commands exist and what they answer is
//! [`super`]'s business.

// The parent module allows `unsafe` for one borrow of an inherited descriptor;
// nothing here needs it.
#![deny(unsafe_code)]

use std::os::fd::{AsFd, OwnedFd};

use gex_core::boot::BootError;
use rustix::io::Errno;
use rustix::net::RecvFlags;

/// Longest request line this client sends, newline included: `PMIU_MAXLINE` of
/// MPICH's simple PMI client, the size of the line buffers PMI servers were
/// written for. Values are chunked so that a `put` line never exceeds it.
pub(crate) const MAX_REQUEST_LINE: usize = 1024;

/// Longest reply line this client accepts (a guard against a runaway server).
const MAX_REPLY_LINE: usize = 1 << 20;

/// One parsed line: the command name and its attributes, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Msg {
    pub(crate) cmd: String,
    pub(crate) attrs: Vec<(String, String)>,
}

/// The attribute lookups of a parsed PMI-1 line ([`Msg`]) or PMI-2 command
/// ([`Cmd`](super::wire2::Cmd)); errors name the protocol and the command.
pub(crate) trait Attrs: std::fmt::Debug {
    /// The protocol, as error messages name it.
    const PROTOCOL: &'static str;
    /// The command name.
    fn cmd(&self) -> &str;
    /// The attributes, in order.
    fn attrs(&self) -> &[(String, String)];

    /// The value of attribute `key`, if present.
    fn get(&self, key: &str) -> Option<&str> {
        self.attrs()
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The value of attribute `key`, which must be present.
    fn require(&self, key: &str) -> Result<&str, BootError> {
        self.get(key).ok_or_else(|| {
            BootError::Protocol(format!(
                "{} reply cmd={} lacks the attribute {key}: {self:?}",
                Self::PROTOCOL,
                self.cmd()
            ))
        })
    }

    /// The value of attribute `key` as an integer.
    fn int(&self, key: &str) -> Result<i64, BootError> {
        let v = self.require(key)?;
        v.trim().parse::<i64>().map_err(|_| {
            BootError::Protocol(format!(
                "{} reply cmd={}: {key}={v:?} is not an integer",
                Self::PROTOCOL,
                self.cmd()
            ))
        })
    }
}

/// [`Attrs`] for the reply types, with the protocol their errors name.
macro_rules! attrs_of {
    ($($t:ty => $protocol:literal),*) => {$(
        impl Attrs for $t {
            const PROTOCOL: &'static str = $protocol;
            fn cmd(&self) -> &str {
                &self.cmd
            }
            fn attrs(&self) -> &[(String, String)] {
                &self.attrs
            }
        }
    )*};
}
attrs_of!(Msg => "PMI", super::wire2::Cmd => "PMI-2");

impl Msg {
    /// Parses `cmd=NAME k=v k=v` (no newline). Attributes are separated by
    /// spaces; a value extends to the next space. A word without `=` is appended,
    /// after a space, to the previous value (servers put free text in `msg=`).
    pub(crate) fn parse(line: &str) -> Result<Msg, BootError> {
        let mut words = line.split(' ').filter(|w| !w.is_empty());
        let first = words.next().unwrap_or("");
        let Some(cmd) = first.strip_prefix("cmd=") else {
            return Err(BootError::Protocol(format!(
                "PMI server sent a line that does not start with cmd=: {line:?}"
            )));
        };
        let mut attrs: Vec<(String, String)> = Vec::new();
        for w in words {
            match w.split_once('=') {
                Some((k, v)) => attrs.push((k.to_owned(), v.to_owned())),
                None => match attrs.last_mut() {
                    Some((_, v)) => {
                        v.push(' ');
                        v.push_str(w);
                    }
                    None => {
                        return Err(BootError::Protocol(format!(
                            "PMI server sent a malformed line: {line:?}"
                        )));
                    }
                },
            }
        }
        Ok(Msg {
            cmd: cmd.to_owned(),
            attrs,
        })
    }

    /// The `rc` attribute (0 when absent, as in MPICH's client).
    pub(crate) fn rc(&self) -> Result<i64, BootError> {
        if self.get("rc").is_some() {
            self.int("rc")
        } else {
            Ok(0)
        }
    }
}

/// Whether `s` can travel as a PMI key or value: non-empty printable ASCII
/// without spaces or `=`.
pub(crate) fn is_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_graphic() && b != b'=')
}

/// A connection to the PMI server: one request line at a time, one reply line.
#[derive(Debug)]
pub(crate) struct Conn {
    sock: OwnedFd,
    /// Bytes received and not yet returned as lines.
    buf: Vec<u8>,
}

fn lost_or_io(e: Errno, what: &str) -> BootError {
    match e {
        Errno::PIPE | Errno::CONNRESET | Errno::NOTCONN => BootError::Lost(format!(
            "the PMI server (the launcher) went away ({what}: {e})"
        )),
        e => BootError::Io(std::io::Error::from(e)),
    }
}

impl Conn {
    pub(crate) fn new(sock: OwnedFd) -> Self {
        Conn {
            sock,
            buf: Vec::new(),
        }
    }

    /// Sends one line; `line` must end with `\n`.
    pub(crate) fn send_line(&mut self, line: &str) -> Result<(), BootError> {
        debug_assert!(line.ends_with('\n'));
        tracing::trace!(line = line.trim_end(), "PMI request");
        self.send_bytes(line.as_bytes())
    }

    /// Sends `bytes` as they are (PMI-2 framed commands).
    pub(crate) fn send_bytes(&mut self, bytes: &[u8]) -> Result<(), BootError> {
        crate::client::send_all(&self.sock, bytes, lost_or_io)
    }

    /// Receives one line, without its `\n`.
    pub(crate) fn recv_line(&mut self) -> Result<String, BootError> {
        let mut scanned = 0;
        loop {
            if let Some(i) = self.buf[scanned..].iter().position(|&b| b == b'\n') {
                let end = scanned + i;
                let line: Vec<u8> = self.buf.drain(..=end).collect();
                let line = String::from_utf8(line[..end].to_vec()).map_err(|_| {
                    BootError::Protocol("PMI server sent a line that is not UTF-8".into())
                })?;
                tracing::trace!(line = line.as_str(), "PMI reply");
                return Ok(line);
            }
            scanned = self.buf.len();
            if scanned > MAX_REPLY_LINE {
                return Err(BootError::Protocol(format!(
                    "PMI server sent a line longer than {MAX_REPLY_LINE} bytes"
                )));
            }
            self.fill(usize::MAX)?;
        }
    }

    /// Appends what one `recv` of at most `max` (and 4 KiB) bytes gives to the
    /// buffer (nothing when interrupted).
    fn fill(&mut self, max: usize) -> Result<(), BootError> {
        let mut chunk = [0u8; 4096];
        let want = max.min(chunk.len());
        match rustix::net::recv(self.sock.as_fd(), &mut chunk[..want], RecvFlags::empty()) {
            Ok((0, _)) => Err(BootError::Lost(
                "the PMI server (the launcher) closed the connection (the job is ending)".into(),
            )),
            Ok((got, _)) => {
                self.buf.extend_from_slice(&chunk[..got]);
                Ok(())
            }
            Err(Errno::INTR) => Ok(()),
            Err(e) => Err(lost_or_io(e, "recv")),
        }
    }

    /// Receives exactly `n` bytes (PMI-2 framed replies), taking first what an earlier
    /// read left in the buffer.
    pub(crate) fn recv_exact(&mut self, n: usize) -> Result<Vec<u8>, BootError> {
        while self.buf.len() < n {
            self.fill(n - self.buf.len())?;
        }
        Ok(self.buf.drain(..n).collect())
    }

    /// Receives and parses one line.
    pub(crate) fn recv_msg(&mut self) -> Result<Msg, BootError> {
        let line = self.recv_line()?;
        Msg::parse(&line)
    }

    /// Sends `request` and returns the reply, which must be `cmd=expect`.
    pub(crate) fn call(&mut self, request: &str, expect: &str) -> Result<Msg, BootError> {
        self.send_line(request)?;
        let m = self.recv_msg()?;
        if m.cmd != expect {
            return Err(BootError::Protocol(format!(
                "PMI server answered {:?} with cmd={} (expected cmd={expect})",
                request.trim_end(),
                m.cmd
            )));
        }
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_replies() {
        let m = Msg::parse("cmd=get_result rc=0 msg=success value=(vector,(0,1,4))").unwrap();
        assert_eq!(m.cmd, "get_result");
        assert_eq!(m.rc().unwrap(), 0);
        assert_eq!(m.get("value"), Some("(vector,(0,1,4))"));
        assert_eq!(m.get("nothing"), None);
        let m = Msg::parse("cmd=barrier_out").unwrap();
        assert_eq!((m.cmd.as_str(), m.attrs.len()), ("barrier_out", 0));
        assert_eq!(m.rc().unwrap(), 0);
    }

    #[test]
    fn free_text_joins_the_previous_value() {
        let m = Msg::parse("cmd=put_result rc=-1 msg=duplicate key  given").unwrap();
        assert_eq!(m.rc().unwrap(), -1);
        assert_eq!(m.get("msg"), Some("duplicate key given"));
    }

    #[test]
    fn values_may_contain_equals_after_the_first() {
        let m = Msg::parse("cmd=x a=b=c").unwrap();
        assert_eq!(m.get("a"), Some("b=c"));
    }

    #[test]
    fn rejects_lines_without_cmd() {
        assert!(matches!(Msg::parse("hello"), Err(BootError::Protocol(_))));
        assert!(matches!(Msg::parse(""), Err(BootError::Protocol(_))));
        assert!(matches!(
            Msg::parse("rc=0 cmd=x"),
            Err(BootError::Protocol(_))
        ));
    }

    #[test]
    fn integers_are_checked() {
        let m = Msg::parse("cmd=maxes vallen_max=1024 keylen_max=x").unwrap();
        assert_eq!(m.int("vallen_max").unwrap(), 1024);
        assert!(matches!(m.int("keylen_max"), Err(BootError::Protocol(_))));
        assert!(matches!(m.int("kvsname_max"), Err(BootError::Protocol(_))));
    }

    #[test]
    fn tokens() {
        assert!(is_token("gex.0.1.2"));
        assert!(is_token("kvs_123_0"));
        assert!(!is_token(""));
        assert!(!is_token("a b"));
        assert!(!is_token("a=b"));
        assert!(!is_token("é"));
        assert!(!is_token("a\n"));
    }
}
