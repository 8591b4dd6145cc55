//! # gex-coll
//!
//! Collectives for gex, modelled on the GASNet collectives of seed 003: teams,
//! nonblocking collectives with handles, synchronisation and address modes, many
//! algorithms, and an autotuner that picks among them with LogGP cost models. Generic
//! over the conduit SPI; every piece of state hangs off a [`CollEp`] (one per rank
//! and endpoint), so thread-ranks in one process work.
//!
//! - **Teams** ([`Team`]): the world team, [`CollEp::split`] by (color, key),
//!   [`CollEp::create_team`] from a member list, rank translation
//!   ([`Team::member`], [`Team::rank_of`]), scratch space per team ([`Scratch`]:
//!   client-given or allocated from a region of the segment), [`CollEp::destroy_team`].
//! - **Operations** ([`OpKind`]): barrier, broadcast, scatter, gather, gather_all,
//!   exchange, reduce, allreduce, reduce_scatter, scan, exscan. Each starts
//!   nonblocking (`*_nb`, returning a [`Handle`] to [`CollEp::test`] or
//!   [`CollEp::wait`]) and has a blocking wrapper. Reductions take a [`ReduceOp`]:
//!   built-in ([`BuiltinOp`] on every primitive numeric type [`Elem`]) or
//!   user-defined, commutative or not (non-commutative ones combine in rank order).
//! - **Modes** (seed 003 §2): [`SyncModes`] = in × out over [`SyncMode`] `{No, My, All}`;
//!   [`AddrMode`]: local (owned buffers) or single ([`CollEp::start_single`], every
//!   member's segment offsets given, in-place with `src: None`).
//! - **Roots** ([`Root`]): a team rank, or where the root's data lives (a gex-rma
//!   `GlobalPtr`: the member owning that segment; in single address mode also the
//!   root's offset) — seed 003's data-centric roots.
//! - **Algorithms** ([`algo`]): flat, binomial, k-nomial, k-ary, chain (pipelined),
//!   fork trees (a grid of dimensions, one chain per dimension), dissemination, Bruck (radix k), ring, recursive doubling and halving, pairwise,
//!   and compositions (reduce+bcast, gather+bcast, reduce+scatter, ring
//!   reduce_scatter+gather_all); transfers by eager AM, signaling put (Long AM, then a
//!   flag) or rendezvous (get, then acknowledge). Each is a value behind the
//!   [`Algorithm`] trait, which is also the plug-in point for a hardware collective.
//! - **Shared memory** ([`Shm`], `shm`): on a team whose members map each other's
//!   auxiliary areas (one host), every operation moves by loads and stores through
//!   per-member slots with flag words, no AMs ([`CollEp::shared_memory`]).
//! - **Across hosts** ([`HierAlgo`], `hier`): a team spanning hosts, the world team
//!   of a multi-host job included, runs every operation as stages on internal host
//!   teams (`shm`) and a leaders team ([`CollEp::hierarchical`]).
//! - **Autotuner** ([`Tuner`]): capability filter + LogGP cost model, a cached lookup
//!   per (op, team size, size class, modes, commutativity), overrides by
//!   `GEX_COLL_<OP>=<algorithm>`, parameters by `GEX_COLL_LOGGP`, measured choices
//!   from a [`Profile`] written by `gex-tune` (`GEX_COLL_PROFILE`), online timing of
//!   the surviving candidates on first use (`GEX_COLL_TUNE=online`), and the
//!   [`Reason`] of every choice.
//! - **Simulation at scale** ([`des`]): a discrete-event LogGP simulator of the same
//!   schedules on thousands of ranks, with transports and data.
//!
//! ## How it works
//! An algorithm produces, for each rank, a [`Schedule`](sched::Schedule): rounds of
//! sends, receives (copy or combine) and local steps over a work buffer — pure data,
//! no I/O. The engine in [`CollEp`] executes schedules over AMs; [`sched::model`]
//! runs the schedules of a whole team in one thread (the tests' reference) and
//! predicts their time under LogGP (simulations of thousands of ranks).
//!
//! ## What it does not do
//! - Progress happens only inside gex-coll calls ([`CollEp::test`], [`CollEp::wait`],
//!   [`CollEp::progress`], starting a collective); there is no progress thread.
//! - Signaling put and rendezvous apply to broadcast and gather_all (trees; flat,
//!   ring, recursive doubling): in single address mode into the destinations, in
//!   local mode through team scratch space large enough for the output (such
//!   collectives of one team take turns on it). Everything else moves eagerly
//!   through Medium AMs and a mailbox (one copy at the receiver).
//! - `hier` takes non-commutative reduce, allreduce and reduce_scatter only where
//!   hosts are team-rank ranges.
//! - Members that name different roots are not detected (see [`Root`]).
//! - Out-no applies to single address mode; with owned buffers it behaves as out-my.
//!
//! ## Words
//! - **team rank**: position in a team; **job rank**: the rank of the process/thread.
//! - **block**: what one member contributes or receives (`count` elements).
//! - **sequence number**: the per-team count of collectives started; with the team id
//!   it keys every message.
//!
//! ## Handler indices
//! gex-coll registers `48..=52` and owns `48..=127` ([`FIRST_COLL_HANDLER`]..=
//! [`LAST_COLL_HANDLER`]).
//!
//! ## Example
//! ```
//! use gex_coll::{BuiltinOp, CollEp, Opts, ReduceOp};
//! use gex_core::ClientBuilder;
//! use gex_rma::RmaEp;
//! use gex_testkit::sim::{run_sim, SimConfig};
//!
//! let out = run_sim(3, SimConfig::default(), || ClientBuilder::new().segment_size(1 << 16), |client| {
//!     let mut coll = CollEp::new(RmaEp::new(client.endpoint(0).unwrap()).unwrap()).unwrap();
//!     let world = coll.world().clone();
//!     let me = world.rank() as u64;
//!     // Nonblocking allreduce and gather_all in flight together.
//!     let sum = ReduceOp::builtin(BuiltinOp::Sum).unwrap();
//!     let h1 = coll.allreduce_nb(&world, vec![me, 10 * me], &sum, &Opts::default()).unwrap();
//!     let h2 = coll.gather_all_nb(&world, vec![me as u8], &Opts::default()).unwrap();
//!     let all = coll.wait(h2).unwrap();
//!     let s = coll.wait(h1).unwrap();
//!     // Split into even and odd ranks.
//!     let sub = coll.split(&world, Some(me as u32 % 2), 0, Default::default()).unwrap().unwrap();
//!     let mut b = [me as u32];
//!     coll.broadcast(&sub, 0, &mut b).unwrap();
//!     coll.barrier(&world).unwrap();
//!     (s, all, b[0])
//! });
//! assert_eq!(out[0].0, vec![3, 30]);
//! assert_eq!(out[2].1, vec![0, 1, 2]);
//! assert_eq!(out.iter().map(|x| x.2).collect::<Vec<_>>(), vec![0, 1, 0]);
//! ```
#![warn(missing_docs)]

pub mod algo;
pub mod des;
mod ep;
mod error;
mod hier;
mod op;
pub mod profile;
mod root;
pub mod sched;
mod shm;
mod team;
mod tune;

pub use algo::{Algorithm, Builtin, Kind, PlanCtx, Query};
pub use ep::{CollEp, FIRST_COLL_HANDLER, Handle, LAST_COLL_HANDLER, Output, Single};
pub use error::CollError;
pub use hier::HierAlgo;
pub use op::{AddrMode, BuiltinOp, Elem, OpKind, Opts, ReduceOp, SyncMode, SyncModes, Transport};
pub use profile::Profile;
pub use root::Root;
pub use sched::ReduceFn;
pub use shm::{Shm, cma_capable};
pub use team::{Scratch, Team};
pub use tune::{Choice, LogGP, Reason, TuneMode, Tuner, size_class};
