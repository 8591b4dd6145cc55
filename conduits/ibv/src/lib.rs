//! # gex-conduit-ibv
//!
//! The ibverbs conduit (work in progress): the verbs interface ([`verbs`]) and its
//! software RC emulation ([`emu`]).
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod emu;
pub mod verbs;
