//! Tuning profiles: what `gex-tune` measured on a machine, in a human-readable file
//! that `GEX_COLL_PROFILE` loads.
//!
//! A profile records the calibrated LogGP parameters and, per cell (operation, team
//! size, block bytes), the time of every candidate algorithm that was measured and
//! the winner. The file is a small subset of TOML (comments, `key = value` with
//! strings and numbers, `[loggp]`, `[machine]`, `[[cell]]` and one inline table of
//! timings per cell), written and read by this module without a TOML dependency:
//!
//! ```toml
//! version = 1
//!
//! [machine]
//! conduit = "smp"
//! ranks = 4
//!
//! [loggp]
//! l = 0.35
//! o = 0.12
//! g = 0.05
//! big_g = 0.0001
//! copy = 0.00005
//!
//! [[cell]]
//! op = "broadcast"
//! team = 4
//! bytes = 4096
//! choice = "binomial"
//! us = { binomial = 3.2, flat = 3.5, "binomial+put" = 4.1 }
//! ```
//!
//! The measured cells were timed in local address mode with the default sync modes
//! and a commutative operator; [`Tuner`](crate::Tuner) applies a cell to calls of the
//! same operation and team size in local address mode, taking the cell with the
//! nearest size class, when its choice supports the call (otherwise the cost model
//! decides).

use crate::error::CollError;
use crate::loggp::LogGP;
use crate::op::OpKind;
use std::fmt::Write as _;

/// One measured cell of a profile.
#[derive(Clone, Debug, PartialEq)]
pub struct Cell {
    /// The operation.
    pub op: OpKind,
    /// Team size.
    pub team: u32,
    /// Block bytes measured (the cell stands for its size class).
    pub bytes: usize,
    /// The winner (fastest measured candidate).
    pub choice: String,
    /// (algorithm, µs per call) of every measured candidate, in file order.
    pub times: Vec<(String, f64)>,
}

impl Cell {
    /// A cell whose choice is the fastest of `times` (`None` if `times` is empty).
    pub fn from_times(
        op: OpKind,
        team: u32,
        bytes: usize,
        times: Vec<(String, f64)>,
    ) -> Option<Cell> {
        let choice = times.iter().min_by(|a, b| a.1.total_cmp(&b.1))?.0.clone();
        Some(Cell {
            op,
            team,
            bytes,
            choice,
            times,
        })
    }

    /// The measured time of `name`, if measured.
    pub fn time_of(&self, name: &str) -> Option<f64> {
        self.times.iter().find(|t| t.0 == name).map(|t| t.1)
    }
}

/// A tuning profile (see the module docs).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Profile {
    /// Free-form facts about the run (`conduit`, `ranks`, `created`, ...), in order.
    pub machine: Vec<(String, String)>,
    /// The calibrated parameters, if the profile has them.
    pub loggp: Option<LogGP>,
    /// The measured cells.
    pub cells: Vec<Cell>,
}

/// Largest whole number of bytes a profile may give (`f64` represents every whole
/// number up to it exactly).
const MAX_EXACT: f64 = 9_007_199_254_740_992.0;

fn quote(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            // The parser reads one line at a time: a line break must be escaped.
            '\n' => o.push_str("\\n"),
            '\t' => o.push_str("\\t"),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn key(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        s.to_string()
    } else {
        quote(s)
    }
}

/// A parsed value.
#[derive(Debug)]
enum Val {
    Str(String),
    Num(f64),
    Table(Vec<(String, f64)>),
}

struct Lexer<'a> {
    s: &'a [u8],
    i: usize,
}

impl Lexer<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && (self.s[self.i] == b' ' || self.s[self.i] == b'\t') {
            self.i += 1;
        }
    }
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }
    fn eat(&mut self, c: u8) -> bool {
        self.ws();
        if self.peek() == Some(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn string(&mut self) -> Result<String, String> {
        // at the opening quote
        self.i += 1;
        let mut out = Vec::new();
        while let Some(c) = self.peek() {
            self.i += 1;
            match c {
                b'"' => return String::from_utf8(out).map_err(|e| e.to_string()),
                b'\\' => {
                    let e = self.peek().ok_or("unterminated string")?;
                    self.i += 1;
                    out.push(match e {
                        b'"' => b'"',
                        b'\\' => b'\\',
                        b'n' => b'\n',
                        b't' => b'\t',
                        _ => return Err(format!("unsupported escape \\{}", e as char)),
                    });
                }
                c => out.push(c),
            }
        }
        Err("unterminated string".into())
    }
    fn bare(&mut self) -> String {
        let st = self.i;
        while let Some(c) = self.peek() {
            if c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.' | b'+') {
                self.i += 1;
            } else {
                break;
            }
        }
        String::from_utf8_lossy(&self.s[st..self.i]).into_owned()
    }
    fn key(&mut self) -> Result<String, String> {
        self.ws();
        match self.peek() {
            Some(b'"') => self.string(),
            _ => {
                let k = self.bare();
                if k.is_empty() {
                    Err("expected a key".into())
                } else {
                    Ok(k)
                }
            }
        }
    }
    fn number(&mut self) -> Result<f64, String> {
        self.ws();
        let t = self.bare();
        t.replace('_', "")
            .parse::<f64>()
            .map_err(|_| format!("expected a number, found {t:?}"))
    }
    fn value(&mut self) -> Result<Val, String> {
        self.ws();
        match self.peek() {
            Some(b'"') => Ok(Val::Str(self.string()?)),
            Some(b'{') => {
                self.i += 1;
                let mut v = Vec::new();
                if self.eat(b'}') {
                    return Ok(Val::Table(v));
                }
                loop {
                    let k = self.key()?;
                    if !self.eat(b'=') {
                        return Err(format!("expected '=' after {k:?}"));
                    }
                    v.push((k, self.number()?));
                    if self.eat(b'}') {
                        return Ok(Val::Table(v));
                    }
                    if !self.eat(b',') {
                        return Err("expected ',' or '}' in an inline table".into());
                    }
                }
            }
            _ => Ok(Val::Num(self.number()?)),
        }
    }
    fn end(&mut self) -> Result<(), String> {
        self.ws();
        match self.peek() {
            None | Some(b'#') => Ok(()),
            Some(c) => Err(format!("unexpected {:?} after the value", c as char)),
        }
    }
}

#[derive(Default)]
struct PartCell {
    op: Option<OpKind>,
    team: Option<u32>,
    bytes: Option<usize>,
    choice: Option<String>,
    times: Vec<(String, f64)>,
    line: usize,
}

/// The name of the table header `t` opened by `open` and closed by `close` (`[name]`,
/// `[[name]]`; a comment may follow), `None` if `t` is not one, or the problem.
fn header<'t>(t: &'t str, open: &str, close: &str) -> Result<Option<&'t str>, String> {
    let Some(name) = t.strip_prefix(open) else {
        return Ok(None);
    };
    let Some((name, rest)) = name.split_once(close) else {
        return Err(format!("{open}{name} lacks its closing {close}"));
    };
    if !(rest.trim().is_empty() || rest.trim_start().starts_with('#')) {
        return Err(format!("unexpected {rest:?} after {open}{name}{close}"));
    }
    Ok(Some(name.trim()))
}

impl Profile {
    /// Parses a profile; `what` names the source in errors (a path).
    ///
    /// ```
    /// let p = gex_coll::Profile::parse("t", "[[cell]]\nop = \"barrier\"\nteam = 4\nbytes = 0\n\
    ///     choice = \"dissem2\"\nus = { dissem2 = 1.5, flat = 2.5 }\n").unwrap();
    /// assert_eq!(p.cells[0].choice, "dissem2");
    /// assert!(gex_coll::Profile::parse("t", "[[cell]]\nop = \"nope\"\n").is_err());
    /// ```
    ///
    /// # Errors
    /// [`CollError::Profile`] with the line and the problem.
    pub fn parse(what: &str, text: &str) -> Result<Profile, CollError> {
        let err = |line: usize, reason: String| CollError::Profile {
            path: what.to_string(),
            line,
            reason,
        };
        let mut p = Profile::default();
        let mut section = String::new();
        let mut loggp: Vec<(String, f64)> = Vec::new();
        let mut cells: Vec<PartCell> = Vec::new();
        for (n, raw) in text.lines().enumerate() {
            let line = n + 1;
            let t = raw.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            if let Some(name) = header(t, "[[", "]]").map_err(|e| err(line, e))? {
                if name != "cell" {
                    return Err(err(line, format!("unknown array of tables [[{name}]]")));
                }
                section = "cell".into();
                cells.push(PartCell {
                    line,
                    ..PartCell::default()
                });
                continue;
            }
            if let Some(name) = header(t, "[", "]").map_err(|e| err(line, e))? {
                if !matches!(name, "machine" | "loggp") {
                    return Err(err(line, format!("unknown table [{name}]")));
                }
                section = name.into();
                continue;
            }
            let mut lx = Lexer {
                s: t.as_bytes(),
                i: 0,
            };
            let k = lx.key().map_err(|e| err(line, e))?;
            if !lx.eat(b'=') {
                return Err(err(line, format!("expected '=' after {k:?}")));
            }
            let v = lx.value().map_err(|e| err(line, e))?;
            lx.end().map_err(|e| err(line, e))?;
            let bad = |line, k: &str, v: &Val| err(line, format!("bad value for {k}: {v:?}"));
            match (section.as_str(), k.as_str(), v) {
                ("", "version", Val::Num(x)) => {
                    if x != 1.0 {
                        return Err(err(line, format!("profile version {x}; this gex reads 1")));
                    }
                }
                ("machine", _, Val::Str(s)) => p.machine.push((k, s)),
                ("machine", _, Val::Num(x)) => p.machine.push((k, x.to_string())),
                ("loggp", "l" | "o" | "g" | "big_g" | "copy", Val::Num(x)) => {
                    if !x.is_finite() || x < 0.0 {
                        return Err(err(line, format!("{k} must be a non-negative number")));
                    }
                    loggp.push((k, x));
                }
                ("cell", _, v) => {
                    let c = cells.last_mut().expect("in a cell section");
                    match (k.as_str(), v) {
                        ("op", Val::Str(s)) => {
                            c.op =
                                Some(OpKind::ALL.into_iter().find(|o| o.name() == s).ok_or_else(
                                    || err(line, format!("unknown operation {s:?}")),
                                )?);
                        }
                        // Whole numbers in range only: `as` would saturate 1e30 silently.
                        ("team", Val::Num(x))
                            if (1.0..=f64::from(u32::MAX)).contains(&x) && x.fract() == 0.0 =>
                        {
                            c.team = Some(x as u32)
                        }
                        ("bytes", Val::Num(x))
                            if (0.0..=MAX_EXACT).contains(&x) && x.fract() == 0.0 =>
                        {
                            c.bytes = Some(x as usize)
                        }
                        ("choice", Val::Str(s)) => c.choice = Some(s),
                        ("us", Val::Table(t)) => {
                            if t.iter().any(|x| !x.1.is_finite() || x.1 < 0.0) {
                                return Err(err(line, "timings must be non-negative".into()));
                            }
                            c.times = t;
                        }
                        (k, v) => return Err(bad(line, k, &v)),
                    }
                }
                (_, k, v) => return Err(bad(line, k, &v)),
            }
        }
        if !loggp.is_empty() {
            let get = |n: &str| loggp.iter().find(|x| x.0 == n).map(|x| x.1);
            let d = LogGP::default();
            match (get("l"), get("o"), get("g"), get("big_g")) {
                (Some(l), Some(o), Some(g), Some(big_g)) => {
                    p.loggp = Some(LogGP {
                        l,
                        o,
                        g,
                        big_g,
                        copy: get("copy").unwrap_or(d.copy),
                    })
                }
                _ => {
                    return Err(err(
                        0,
                        "[loggp] needs l, o, g and big_g (copy is optional)".into(),
                    ));
                }
            }
        }
        for c in cells {
            let (Some(op), Some(team), Some(bytes), Some(choice)) =
                (c.op, c.team, c.bytes, c.choice)
            else {
                return Err(err(
                    c.line,
                    "a [[cell]] needs op, team, bytes and choice".into(),
                ));
            };
            p.cells.push(Cell {
                op,
                team,
                bytes,
                choice,
                times: c.times,
            });
        }
        Ok(p)
    }

    /// Reads and parses the profile at `path`.
    ///
    /// # Errors
    /// [`CollError::Profile`] if the file cannot be read or parsed.
    pub fn load(path: &str) -> Result<Profile, CollError> {
        let text = std::fs::read_to_string(path).map_err(|e| CollError::Profile {
            path: path.to_string(),
            line: 0,
            reason: e.to_string(),
        })?;
        Profile::parse(path, &text)
    }

    /// The profile as text (what [`parse`](Self::parse) reads back).
    pub fn to_toml(&self) -> String {
        let mut o = String::from(
            "# gex-coll tuning profile (written by gex-tune; load with GEX_COLL_PROFILE=<this file>)\n\
             # Times in microseconds per call (rank 0's median batch); big_g and copy in us per byte.\n\
             version = 1\n",
        );
        if !self.machine.is_empty() {
            o.push_str("\n[machine]\n");
            for (k, v) in &self.machine {
                let _ = writeln!(o, "{} = {}", key(k), quote(v));
            }
        }
        if let Some(m) = &self.loggp {
            let _ = write!(
                o,
                "\n[loggp]\nl = {:e}\no = {:e}\ng = {:e}\nbig_g = {:e}\ncopy = {:e}\n",
                m.l, m.o, m.g, m.big_g, m.copy
            );
        }
        for c in &self.cells {
            let _ = writeln!(
                o,
                "\n[[cell]]\nop = {}\nteam = {}\nbytes = {}\nchoice = {}",
                quote(c.op.name()),
                c.team,
                c.bytes,
                quote(&c.choice)
            );
            let times: Vec<String> = c
                .times
                .iter()
                .map(|(n, t)| format!("{} = {t:.4}", key(n)))
                .collect();
            let _ = writeln!(o, "us = {{ {} }}", times.join(", "));
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Profile {
        Profile {
            machine: vec![
                ("conduit".into(), "smp".into()),
                ("ranks".into(), "4".into()),
            ],
            loggp: Some(LogGP {
                l: 0.35,
                o: 0.125,
                g: 0.05,
                big_g: 1e-4,
                copy: 5e-5,
            }),
            cells: vec![
                Cell::from_times(
                    OpKind::Broadcast,
                    4,
                    4096,
                    vec![("binomial".into(), 3.25), ("binomial+put".into(), 2.5)],
                )
                .unwrap(),
                Cell::from_times(OpKind::Barrier, 4, 0, vec![("dissem2".into(), 1.5)]).unwrap(),
            ],
        }
    }

    #[test]
    fn round_trip() {
        let p = sample();
        assert_eq!(p.cells[0].choice, "binomial+put");
        let text = p.to_toml();
        let q = Profile::parse("x", &text).unwrap();
        assert_eq!(q, p, "{text}");
    }

    /// Regression (found by the `coll-profile` fuzz target, input
    /// `[machine]\n0="\n"`): `to_toml` wrote a line break inside a string as a raw
    /// line break, so the profile it wrote did not parse back.
    #[test]
    fn line_breaks_in_strings_round_trip() {
        let p = Profile::parse("f", "[machine]\n0 = \"a\\nb\\tc\"\n\"k\\n\" = \"v\"\n").unwrap();
        assert_eq!(p.machine[0], ("0".to_string(), "a\nb\tc".to_string()));
        let q = Profile::parse("again", &p.to_toml()).unwrap();
        assert_eq!(q, p);
    }

    #[test]
    fn errors_name_the_line() {
        let cases = [
            ("version = 2\n", 1, "version"),
            ("[bogus]\n", 1, "unknown table"),
            ("[[cell]]\nop = \"barrier\"\nteam = x\n", 3, "number"),
            ("[[cell]]\nop = \"barrier\"\n", 1, "needs op, team"),
            ("[loggp]\nl = 1\n", 0, "needs l, o, g"),
            ("[loggp]\nl = -1\n", 2, "non-negative"),
            ("[[cell]]\nus = { a = 1 b = 2 }\n", 2, "','"),
            ("op = \"barrier\"\n", 1, "bad value"),
        ];
        for (text, line, what) in cases {
            match Profile::parse("f.toml", text) {
                Err(CollError::Profile {
                    line: l, reason, ..
                }) => {
                    assert_eq!(l, line, "{text:?}: {reason}");
                    assert!(reason.contains(what), "{text:?}: {reason}");
                }
                other => panic!("{text:?}: {other:?}"),
            }
        }
        // Regressions (found by the `coll-profile` fuzz target and while writing it):
        // unclosed table headers and out-of-range team sizes were accepted (1e30 became
        // u32::MAX).
        for (text, what) in [
            ("[[cell\n", "lacks its closing ]]"),
            ("[machine\n", "lacks its closing ]"),
            ("[machine] x\n", "unexpected"),
            ("[[cell]]\nteam = 1e30\n", "bad value for team"),
            ("[[cell]]\nbytes = 1e300\n", "bad value for bytes"),
        ] {
            match Profile::parse("f.toml", text) {
                Err(CollError::Profile { reason, .. }) => {
                    assert!(reason.contains(what), "{text:?}: {reason}")
                }
                other => panic!("{text:?}: {other:?}"),
            }
        }
        assert!(Profile::parse("f.toml", "[machine] # the machine\n").is_ok());
        assert!(matches!(
            Profile::load("/nonexistent/gex-profile.toml"),
            Err(CollError::Profile { line: 0, .. })
        ));
    }
}
