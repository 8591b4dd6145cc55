//! Support of the `gex-tune` tool, shared with `gex-perf coll`: timing one collective
//! cell the same way everywhere ([`measure`]) and hand-written SVG line charts
//! ([`svg`]; no plotting dependency, no native code).
#![warn(missing_docs)]

pub mod measure;
pub mod svg;
