//! The PMI-2 wire format: length-prefixed commands `cmd=NAME;key=value;…;`.
//!
//! Every command, in both directions, is a 6-byte ASCII length field (the decimal
//! length of what follows, left-aligned and padded with spaces, as `%-6d` prints it)
//! followed by that many bytes of `key=value;` pairs, the first of which is
//! `cmd=NAME`. A `;` inside a value is written `;;` by the reference client; servers
//! do not all undo that (Slurm 22.05 does not), so this client never sends a `;` in a
//! value (callers replace it) and only undoes `;;` in what it receives.
//!
//! Only the syntax lives here; which commands exist is [`super::pmi2`]'s business.

// The parent module allows `unsafe` for one borrow of an inherited descriptor;
// nothing here needs it.
#![deny(unsafe_code)]

use gex_core::boot::BootError;

use super::wire::{Attrs, Conn};

/// Width of the length field.
const LEN_FIELD: usize = 6;

/// Longest command this client sends or accepts (`PMII_MAX_COMMAND_LEN` of the
/// reference client, 64 KiB; the length field could describe up to 999 999 bytes).
pub(crate) const MAX_COMMAND: usize = 64 * 1024;

/// One parsed PMI-2 command: its name and its attributes, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cmd {
    pub(crate) cmd: String,
    pub(crate) attrs: Vec<(String, String)>,
}

fn protocol(msg: String) -> BootError {
    BootError::Protocol(msg)
}

impl Cmd {
    /// Parses the body of a command (without its length field).
    pub(crate) fn parse(body: &str) -> Result<Cmd, BootError> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        let mut rest = body;
        while !rest.is_empty() {
            let (key, after) = rest.split_once('=').ok_or_else(|| {
                protocol(format!("PMI-2 server sent a pair without '=': {body:?}"))
            })?;
            // The value runs to the first `;` that is not doubled.
            let bytes = after.as_bytes();
            let mut value = String::new();
            let mut i = 0;
            loop {
                match bytes.get(i) {
                    None => {
                        return Err(protocol(format!(
                            "PMI-2 server sent a value without its closing ';': {body:?}"
                        )));
                    }
                    Some(b';') if bytes.get(i + 1) == Some(&b';') => {
                        value.push(';');
                        i += 2;
                    }
                    Some(b';') => break,
                    Some(_) => {
                        // Copy up to the next ';' in one go (keeps UTF-8 intact).
                        let end = after[i..].find(';').map_or(after.len(), |j| i + j);
                        value.push_str(&after[i..end]);
                        i = end;
                    }
                }
            }
            pairs.push((key.to_owned(), value));
            rest = &after[i + 1..];
        }
        let mut it = pairs.into_iter();
        match it.next() {
            Some((k, cmd)) if k == "cmd" => Ok(Cmd {
                cmd,
                attrs: it.collect(),
            }),
            _ => Err(protocol(format!(
                "PMI-2 server sent a command that does not start with cmd=: {body:?}"
            ))),
        }
    }

    /// The value of attribute `key` as a PMI-2 boolean (`TRUE` or `FALSE`).
    pub(crate) fn flag(&self, key: &str) -> Result<bool, BootError> {
        match self.require(key)? {
            "TRUE" => Ok(true),
            "FALSE" => Ok(false),
            v => Err(protocol(format!(
                "PMI-2 reply cmd={}: {key}={v:?} is neither TRUE nor FALSE",
                self.cmd
            ))),
        }
    }

    /// The `rc` attribute, which every PMI-2 reply carries.
    pub(crate) fn rc(&self) -> Result<i64, BootError> {
        self.int("rc")
    }
}

/// Encodes a command: the length field and `cmd=NAME;k=v;…;`. A `;` in a value is
/// doubled, as the protocol says (callers avoid it: see the module documentation).
pub(crate) fn encode(cmd: &str, attrs: &[(&str, &str)]) -> Result<Vec<u8>, BootError> {
    let mut body = format!("cmd={cmd};");
    for (k, v) in attrs {
        debug_assert!(!k.is_empty() && !k.contains(['=', ';']), "bad key {k:?}");
        body.push_str(k);
        body.push('=');
        body.push_str(&v.replace(';', ";;"));
        body.push(';');
    }
    if body.len() > MAX_COMMAND {
        return Err(protocol(format!(
            "PMI-2 command {cmd} would be {} bytes, more than the {MAX_COMMAND} allowed",
            body.len()
        )));
    }
    let mut out = format!("{:<width$}", body.len(), width = LEN_FIELD).into_bytes();
    out.extend_from_slice(body.as_bytes());
    Ok(out)
}

/// Sends one command.
pub(crate) fn send(conn: &mut Conn, cmd: &str, attrs: &[(&str, &str)]) -> Result<(), BootError> {
    let bytes = encode(cmd, attrs)?;
    tracing::trace!(cmd, ?attrs, "PMI-2 request");
    conn.send_bytes(&bytes)
}

/// Receives one command.
pub(crate) fn recv(conn: &mut Conn) -> Result<Cmd, BootError> {
    let field = conn.recv_exact(LEN_FIELD)?;
    let len = std::str::from_utf8(&field)
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .filter(|&n| n <= MAX_COMMAND)
        .ok_or_else(|| {
            protocol(format!(
                "PMI-2 server sent a bad length field {:?}",
                String::from_utf8_lossy(&field)
            ))
        })?;
    let body = conn.recv_exact(len)?;
    let body = String::from_utf8(body)
        .map_err(|_| protocol("PMI-2 server sent a command that is not UTF-8".into()))?;
    tracing::trace!(body = body.as_str(), "PMI-2 reply");
    Cmd::parse(&body)
}

/// Sends a command and returns the reply, which must be `cmd=expect` with `rc=0`.
pub(crate) fn call(
    conn: &mut Conn,
    cmd: &str,
    attrs: &[(&str, &str)],
    expect: &str,
) -> Result<Cmd, BootError> {
    send(conn, cmd, attrs)?;
    let r = recv(conn)?;
    if r.cmd != expect {
        return Err(protocol(format!(
            "PMI-2 server answered cmd={cmd} with cmd={} (expected cmd={expect})",
            r.cmd
        )));
    }
    let rc = r.rc()?;
    if rc != 0 {
        return Err(protocol(format!(
            "PMI-2 server refused cmd={cmd} (rc={rc}{})",
            r.get("errmsg")
                .or_else(|| r.get("msg"))
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        )));
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_with_a_padded_length_field() {
        let b = encode("kvs-put", &[("key", "k"), ("value", "v")]).unwrap();
        assert_eq!(b, b"26    cmd=kvs-put;key=k;value=v;");
        let b = encode("kvs-fence", &[]).unwrap();
        assert_eq!(b, b"14    cmd=kvs-fence;");
    }

    #[test]
    fn semicolons_in_values_are_doubled_and_undone() {
        let b = encode("abort", &[("msg", "a;b")]).unwrap();
        let text = std::str::from_utf8(&b[LEN_FIELD..]).unwrap();
        assert_eq!(text, "cmd=abort;msg=a;;b;");
        let c = Cmd::parse(text).unwrap();
        assert_eq!(c.get("msg"), Some("a;b"));
    }

    #[test]
    fn parses_replies_in_any_attribute_order() {
        // Hydra puts rc last, Slurm first.
        for body in [
            "cmd=kvs-get-response;found=TRUE;value=(vector,(0,1,4));rc=0;",
            "cmd=kvs-get-response;rc=0;found=TRUE;value=(vector,(0,1,4));",
        ] {
            let c = Cmd::parse(body).unwrap();
            assert_eq!(c.cmd, "kvs-get-response");
            assert_eq!(c.rc().unwrap(), 0);
            assert!(c.flag("found").unwrap());
            assert_eq!(c.get("value"), Some("(vector,(0,1,4))"));
        }
        let c = Cmd::parse("cmd=finalize-response;rc=0;").unwrap();
        assert_eq!((c.cmd.as_str(), c.attrs.len()), ("finalize-response", 1));
    }

    #[test]
    fn values_may_contain_equals_signs() {
        let c = Cmd::parse("cmd=x;a=b=c;rc=0;").unwrap();
        assert_eq!(c.get("a"), Some("b=c"));
    }

    #[test]
    fn rejects_malformed_commands() {
        for body in [
            "",
            "rc=0;cmd=x;",
            "cmd=x;novalue;",
            "cmd=x;a=unterminated",
            "cmd=x",
        ] {
            assert!(
                matches!(Cmd::parse(body), Err(BootError::Protocol(_))),
                "{body:?}"
            );
        }
        let c = Cmd::parse("cmd=x;found=MAYBE;rc=zero;").unwrap();
        assert!(matches!(c.flag("found"), Err(BootError::Protocol(_))));
        assert!(matches!(c.rc(), Err(BootError::Protocol(_))));
        assert!(matches!(c.int("absent"), Err(BootError::Protocol(_))));
    }

    #[test]
    fn too_long_commands_are_refused() {
        let v = "x".repeat(MAX_COMMAND);
        assert!(matches!(
            encode("kvs-put", &[("value", &v)]),
            Err(BootError::Protocol(_))
        ));
    }
}
