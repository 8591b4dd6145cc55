//! gex-coll: tuning profiles (`GEX_COLL_PROFILE` files, written by `gex-tune` on one
//! machine and read by every rank).

use super::few;
use crate::engine::outcome;
use gex_coll::catalog;
use gex_coll::{CollError, LogGP, Profile, Query, Tuner};

pub(crate) fn profile_seeds() -> Vec<Vec<u8>> {
    let doc = "version = 1\n\n[machine]\nconduit = \"smp\"\nranks = 4\n\n[loggp]\nl = 0.35\n\
               o = 0.12\ng = 0.05\nbig_g = 0.0001\ncopy = 0.00005\n\n[[cell]]\n\
               op = \"broadcast\"\nteam = 4\nbytes = 4096\nchoice = \"binomial\"\n\
               us = { binomial = 3.2, flat = 3.5, \"binomial+put\" = 4.1 }\n";
    let two = "# comment\n[[cell]]\nop = \"barrier\"\nteam = 4\nbytes = 0\n\
               choice = \"dissem2\"\nus = { dissem2 = 1.5, flat = 2.5 }\n\
               [[cell]]\nop = \"allreduce\"\nteam = 2\nbytes = 1_024\nchoice = \"flat\"\n\
               us = {}\n[machine]\nnote = \"a \\\"quoted\\\" \\\\ word\\tand\\nmore\"\n";
    vec![doc.as_bytes().to_vec(), two.as_bytes().to_vec()]
}

/// A profile file: whatever parses is written back by `to_toml` into text that parses
/// to the same profile; loading it into a tuner and choosing for its cells never
/// panics.
pub(crate) fn profile(d: &[u8]) -> u64 {
    let text = String::from_utf8_lossy(d);
    match Profile::parse("fuzz.toml", &text) {
        Ok(p) => {
            let t1 = p.to_toml();
            let q = Profile::parse("again.toml", &t1).unwrap_or_else(|e| {
                panic!("to_toml wrote a profile that does not parse: {e}\n{t1}")
            });
            let t2 = q.to_toml();
            assert_eq!(t1, t2, "to_toml is not stable across a round trip");
            assert_eq!(
                p.machine, q.machine,
                "machine facts changed in a round trip"
            );
            assert_eq!(p.cells.len(), q.cells.len());
            let mut tuner = Tuner::new(catalog(), LogGP::default());
            let cells = p.cells.clone();
            let loaded = tuner.set_profile("fuzz.toml", p).is_ok();
            if loaded {
                for c in cells.iter().take(8) {
                    let q = Query::plain(c.op, c.team, c.bytes);
                    let _ = tuner.select(&q, None);
                }
            }
            outcome(&format!("ok {} {loaded}", few(cells.len())))
        }
        Err(CollError::Profile { reason, .. }) => {
            // The words of the message, not the file's text it quotes.
            let words: Vec<&str> = reason
                .split_whitespace()
                .filter(|w| w.chars().all(|c| c.is_ascii_alphabetic()))
                .take(3)
                .collect();
            outcome(&words.join(" "))
        }
        Err(e) => panic!("a parse error of another kind: {e:?}"),
    }
}
