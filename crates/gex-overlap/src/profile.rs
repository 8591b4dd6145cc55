//! The overlap profile: the strip model's parameters ([`CostParams`]) measured per
//! conduit by `gex-tune overlap` (with [`calibrate`](crate::calibrate)) and loaded by
//! the layer from the file named by `GEX_OVERLAP_PROFILE`.
//!
//! A file of its own, not a section of gex-coll's profile (`GEX_COLL_PROFILE`), whose
//! reader refuses tables it does not know. One table per conduit, named as the
//! conduit names itself (`smp`, `ofi`, `loopback`, ...), with the five parameters in
//! nanoseconds:
//!
//! ```text
//! # gex-overlap profile (gex-tune overlap)
//! [smp]
//! overhead_ns = 4200
//! gap_ns_per_byte = 0.11
//! round_trip_ns = 350
//! fault_ns = 1900
//! mprotect_ns = 800
//! ```
//!
//! Blank lines and `#` comments are ignored. Every table needs all five keys, each a
//! finite non-negative number (`gap_ns_per_byte` greater than zero); anything else is
//! an error naming the line. A conduit without a table keeps the parameters the
//! process measures itself ([`params`](crate::params)).

use crate::error::OverlapError;
use crate::model::CostParams;

const KEYS: [&str; 5] = [
    "overhead_ns",
    "gap_ns_per_byte",
    "round_trip_ns",
    "fault_ns",
    "mprotect_ns",
];

/// The parameters of the strip model per conduit (see the module documentation of
/// the format).
///
/// ```
/// use gex_overlap::OverlapProfile;
/// let p = OverlapProfile::parse("[smp]\noverhead_ns = 1\ngap_ns_per_byte = 0.5\n\
///     round_trip_ns = 2\nfault_ns = 3\nmprotect_ns = 4\n")?;
/// assert_eq!(p.get("smp").unwrap().fault_ns, 3.0);
/// assert!(p.get("ofi").is_none());
/// assert_eq!(OverlapProfile::parse(&p.to_text())?, p);
/// assert!(OverlapProfile::parse("[smp]\nfault_ns = 3\n").is_err());
/// # Ok::<(), gex_overlap::OverlapError>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OverlapProfile {
    /// (conduit name, its parameters), in file order.
    pub conduits: Vec<(String, CostParams)>,
}

fn err(line: usize, msg: impl std::fmt::Display) -> OverlapError {
    OverlapError::Profile(format!("line {line}: {msg}"))
}

impl OverlapProfile {
    /// Reads a profile.
    ///
    /// # Errors
    /// [`OverlapError::Profile`] naming the line and the problem: a key outside a
    /// table or not one of the five, a value that is not a finite non-negative
    /// number (or a zero `gap_ns_per_byte`), a table twice or lacking a key.
    pub fn parse(text: &str) -> Result<OverlapProfile, OverlapError> {
        let mut out = OverlapProfile::default();
        // The table being read: name, its first line, the values seen.
        let mut cur: Option<(String, usize, [Option<f64>; 5])> = None;
        let close = |cur: Option<(String, usize, [Option<f64>; 5])>,
                     out: &mut OverlapProfile|
         -> Result<(), OverlapError> {
            let Some((name, line, v)) = cur else {
                return Ok(());
            };
            if let Some(i) = v.iter().position(Option::is_none) {
                return Err(err(line, format!("[{name}] lacks {}", KEYS[i])));
            }
            let [o, g, r, f, m] = v.map(|x| x.unwrap_or(0.0));
            out.conduits.push((
                name,
                CostParams {
                    overhead_ns: o,
                    gap_ns_per_byte: g,
                    round_trip_ns: r,
                    fault_ns: f,
                    mprotect_ns: m,
                },
            ));
            Ok(())
        };
        for (i, raw) in text.lines().enumerate() {
            let n = i + 1;
            let t = raw.split('#').next().unwrap_or("").trim();
            if t.is_empty() {
                continue;
            }
            if let Some(rest) = t.strip_prefix('[') {
                let name = rest
                    .strip_suffix(']')
                    .ok_or_else(|| err(n, "a table name lacks its closing ]"))?
                    .trim();
                if name.is_empty()
                    || !name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
                {
                    return Err(err(n, format!("bad table name [{name}]")));
                }
                close(cur.take(), &mut out)?;
                if out.get(name).is_some() {
                    return Err(err(n, format!("table [{name}] given twice")));
                }
                cur = Some((name.to_string(), n, [None; 5]));
                continue;
            }
            let (k, v) = t.split_once('=').ok_or_else(|| {
                err(
                    n,
                    format!("expected `key = value` or `[conduit]`, got {t:?}"),
                )
            })?;
            let (k, v) = (k.trim(), v.trim());
            let Some((_, _, vals)) = cur.as_mut() else {
                return Err(err(n, format!("{k} outside a [conduit] table")));
            };
            let idx = KEYS
                .iter()
                .position(|&x| x == k)
                .ok_or_else(|| err(n, format!("unknown key {k} (expected one of {KEYS:?})")))?;
            let x: f64 = v
                .parse()
                .ok()
                .filter(|x: &f64| x.is_finite() && *x >= 0.0)
                .ok_or_else(|| err(n, format!("{k} = {v}: expected a non-negative number")))?;
            if idx == 1 && x == 0.0 {
                return Err(err(n, "gap_ns_per_byte must be greater than zero"));
            }
            vals[idx] = Some(x);
        }
        close(cur, &mut out)?;
        Ok(out)
    }

    /// Reads the profile in file `path`.
    ///
    /// # Errors
    /// [`OverlapError::Profile`] if the file cannot be read or parsed (the message
    /// names the file).
    pub fn load(path: &str) -> Result<OverlapProfile, OverlapError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| OverlapError::Profile(format!("{path}: {e}")))?;
        OverlapProfile::parse(&text).map_err(|e| match e {
            OverlapError::Profile(m) => OverlapError::Profile(format!("{path}: {m}")),
            e => e,
        })
    }

    /// The parameters of `conduit`, if the profile has them.
    pub fn get(&self, conduit: &str) -> Option<&CostParams> {
        self.conduits
            .iter()
            .find(|(n, _)| n == conduit)
            .map(|(_, p)| p)
    }

    /// Sets (or replaces) the parameters of `conduit`.
    pub fn set(&mut self, conduit: &str, p: CostParams) {
        match self.conduits.iter_mut().find(|(n, _)| n == conduit) {
            Some(slot) => slot.1 = p,
            None => self.conduits.push((conduit.to_string(), p)),
        }
    }

    /// The profile as text ([`parse`](Self::parse) reads it back).
    pub fn to_text(&self) -> String {
        let mut s = String::from(
            "# gex-overlap profile: the strip model's parameters per conduit (gex-tune overlap)\n",
        );
        for (name, p) in &self.conduits {
            s.push_str(&format!(
                "\n[{name}]\noverhead_ns = {:?}\ngap_ns_per_byte = {:?}\nround_trip_ns = {:?}\nfault_ns = {:?}\nmprotect_ns = {:?}\n",
                p.overhead_ns, p.gap_ns_per_byte, p.round_trip_ns, p.fault_ns, p.mprotect_ns
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_line() {
        let full = "overhead_ns = 1\ngap_ns_per_byte = 1\nround_trip_ns = 1\nfault_ns = 1\nmprotect_ns = 1\n";
        let cases = [
            ("fault_ns = 1\n", "line 1: fault_ns outside"),
            ("[smp]\nfault_ns = x\n", "line 2: fault_ns = x"),
            ("[smp]\nfault_ns = -1\n", "non-negative"),
            ("[smp]\nfault_ns = inf\n", "non-negative"),
            ("[smp]\nspeed = 1\n", "line 2: unknown key speed"),
            ("[smp]\nfault_ns = 1\n", "line 1: [smp] lacks overhead_ns"),
            ("[smp\n", "line 1: a table name lacks"),
            ("[s p]\n", "bad table name"),
            ("[smp]\ngap_ns_per_byte = 0\n", "greater than zero"),
            ("[smp]\nnonsense\n", "line 2: expected `key = value`"),
        ];
        for (text, want) in cases {
            match OverlapProfile::parse(text) {
                Err(OverlapError::Profile(m)) => assert!(m.contains(want), "{text:?}: {m}"),
                other => panic!("{text:?}: {other:?}"),
            }
        }
        let twice = format!("[smp]\n{full}[smp]\n{full}");
        match OverlapProfile::parse(&twice) {
            Err(OverlapError::Profile(m)) => {
                assert!(m.contains("line 7: table [smp] given twice"), "{m}")
            }
            other => panic!("{other:?}"),
        }
        // Comments, blank lines, two conduits, and a round trip through the text.
        let p =
            OverlapProfile::parse(&format!("# x\n\n[smp] # here\n{full}[ofi]\n{full}")).unwrap();
        assert_eq!(p.conduits.len(), 2);
        assert_eq!(OverlapProfile::parse(&p.to_text()).unwrap(), p);
        let mut q = p.clone();
        q.set(
            "smp",
            CostParams {
                fault_ns: 7.5,
                ..*p.get("smp").unwrap()
            },
        );
        assert_eq!(q.get("smp").unwrap().fault_ns, 7.5);
        assert_eq!(q.conduits.len(), 2);
    }
}
