//! gex-core: configuration values (`GEX_*`, set by whoever started the process, often
//! a launcher) and the job layout every rank publishes at `init` through the
//! bootstrap.

use crate::engine::outcome;
use arbitrary::Unstructured;
use gex_coll::{LogGP, TuneMode, Tuner};
use gex_core::config::{Config, parse_size};
use gex_core::loopback::Loopback;
use gex_core::{ClientBuilder, InitError};
use gex_testkit::boot::{Exchange, LAYOUT_BLOB_LEN, ScriptedBoot, layout_blob};

pub(crate) fn config_seeds() -> Vec<Vec<u8>> {
    super::text_seeds(&[
        "GEX_SEGMENT_SIZE=16M\nGEX_WAIT=spin-then-block\nGEX_SPIN=100\nGEX_VERBOSEENV=yes",
        "GEX_COLL_LOGGP=6.2,0.5,0.5,0.0001\nGEX_COLL_TUNE=online\nGEX_COLL_BARRIER=dissem2",
        "GEX_ENDPOINTS=4\nGEX_SMP_RING_SIZE=64K\nGEX_COLL_ALLREDUCE=auto",
    ])
}

/// Lines `NAME=value`: every typed getter of the configuration, `GEX_COLL_LOGGP` and
/// the tuner's reading of the `GEX_COLL_*` variables return a value or an error naming
/// the variable; sizes that parse print back to themselves.
pub(crate) fn config(d: &[u8]) -> u64 {
    let text = String::from_utf8_lossy(d);
    let pairs: Vec<(String, String)> = text
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let c = Config::from_pairs(pairs.clone());
    let mut classes = std::collections::BTreeSet::new();
    let short = |s: String| {
        s.split_whitespace()
            .filter(|w| w.chars().all(|c| c.is_ascii_alphabetic()))
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    };
    for (k, v) in &pairs {
        if let Some(n) = parse_size(v) {
            assert_eq!(parse_size(&n.to_string()), Some(n));
        }
        let named = |e: InitError| {
            let s = e.to_string();
            assert!(s.contains(k.as_str()) || s.contains("GEX_"), "{s}");
        };
        if let Err(e) = c.size(k, 1) {
            named(e);
        }
        if let Err(e) = c.u64(k, 1) {
            named(e);
        }
        match c.bool(k, false) {
            Ok(b) => {
                classes.insert(format!("{b}"));
            }
            Err(e) => named(e),
        }
        if let Ok(m) = LogGP::parse(v) {
            assert!(
                [m.l, m.o, m.g, m.big_g, m.copy]
                    .iter()
                    .all(|x| x.is_finite() && *x >= 0.0)
            );
            classes.insert("loggp".into());
        }
    }
    match c.wait_mode() {
        Ok(m) => classes.insert(format!("{m:?}").chars().take(8).collect()),
        Err(e) => classes.insert(short(e.to_string())),
    };
    let _ = c.describe(&[gex_core::config::ENV_VARS]);
    let mut t = Tuner::new(gex_coll::catalog(), LogGP::default());
    // Not GEX_COLL_PROFILE: it names a file to read (fuzzed by `coll-profile`).
    let r = t.configure(|k| {
        if k == "GEX_COLL_PROFILE" {
            None
        } else {
            c.get(k).map(str::to_string)
        }
    });
    classes.insert(match r {
        Ok(()) => format!("tuned {:?}", t.mode() == TuneMode::Online),
        Err(e) => short(e.to_string()),
    });
    outcome(&classes.into_iter().collect::<Vec<_>>().join(" "))
}

pub(crate) fn layout_seeds() -> Vec<Vec<u8>> {
    // One rank whose blob echoes what it sent (one endpoint, 4 KiB), as a launcher
    // returns it; see `layout` for the encoding.
    let mut v = vec![0u8, 1, 0];
    let b = layout_blob(0, 1, 1, 4096, 0);
    v.push(b.len() as u8);
    v.extend(b);
    vec![v]
}

/// `ClientBuilder::init` over the loopback conduit with a bootstrap whose exchange
/// returns fuzzed layout blobs (byte 0: size − 1 in 0..=2; byte 1: host ids; byte
/// 2: blob count; then length-prefixed blobs, whose process id field this process
/// fills in when a blob has a layout blob's length): a corrupt exchange is an error, never
/// a panic or an allocation of what a blob claims.
pub(crate) fn layout(d: &[u8]) -> u64 {
    let mut u = Unstructured::new(d);
    let size = 1 + u32::from(u.int_in_range(0u8..=2).unwrap_or(0));
    let nhosts = u.int_in_range(0u8..=4).unwrap_or(1) as usize;
    let nblobs = u.int_in_range(0u8..=4).unwrap_or(1) as usize;
    let hosts = vec![0; nhosts];
    let mut blobs = Vec::new();
    for _ in 0..nblobs {
        let n = usize::from(u.int_in_range(0u8..=30).unwrap_or(LAYOUT_BLOB_LEN as u8));
        let mut b: Vec<u8> = (0..n).map(|_| u.arbitrary().unwrap_or(0)).collect();
        if n == LAYOUT_BLOB_LEN {
            // The process id this process publishes (a launcher echoes it; the input
            // cannot know it, so it is written here).
            b[22..26].copy_from_slice(&std::process::id().to_le_bytes());
        }
        blobs.push(b);
    }
    let boot = Box::new(ScriptedBoot {
        hosts,
        ..ScriptedBoot::new(0, size, Exchange::Blobs(blobs))
    });
    let r = ClientBuilder::new()
        .segment_size(4096)
        .config(Config::default())
        .init::<Loopback>(boot);
    match r {
        Ok(c) => {
            let _ = c.finalize();
            outcome("ok")
        }
        Err(e) => outcome(&e.to_string()),
    }
}
