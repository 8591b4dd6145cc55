//! # gex-coll
//!
//! Collectives for gex, modelled on the GASNet collectives of seed 003: teams, the
//! barrier, nonblocking collectives with synchronisation and address modes, many
//! algorithms, and an autotuner that picks among them with LogGP cost models.
//!
//! gex-coll is a *layer* of gex-core ([`gex_core::layer`]): [`Coll`] attaches to every
//! endpoint of a client built with it (after gex-rma's layer), gets its handler block,
//! its slice of the auxiliary area and its settings (`GEX_COLL_*`, [`ENV_VARS`]), and
//! its collectives advance in the endpoint's one progress engine (every poll and
//! every wait). Its operations are methods of the endpoint ([`CollExt`]):
//!
//! ```
//! use gex_coll::{Allreduce, BuiltinOp, Coll, CollExt};
//! use gex_core::{Blocking, ClientBuilder};
//! use gex_testkit::sim::{run_sim, SimConfig};
//!
//! let builder = || ClientBuilder::new().layer::<gex_rma::Rma>().layer::<Coll>().segment_size(1 << 16);
//! let out = run_sim(4, SimConfig::default(), builder, |client| {
//!     let mut ep = client.endpoint(0).unwrap();
//!     let world = ep.world();
//!     let sum = ep.collective(&world, Allreduce::new(vec![world.rank() as u64], BuiltinOp::Sum), Blocking).unwrap();
//!     ep.barrier(&world).unwrap();
//!     sum[0]
//! });
//! assert_eq!(out, vec![6; 4]);
//! ```
//!
//! - **Teams** ([`Team`], gex-core's, with the layer's state as an extension): the
//!   primordial team ([`Endpoint::world`](gex_core::Endpoint::world)),
//!   [`CollExt::split`] by (color, key), [`CollExt::create_team`] from a member list,
//!   scratch space per team ([`Scratch`]: client-given or allocated from a region of
//!   the segment; [`TeamExt::scratch`]), [`CollExt::destroy_team`].
//! - **Operations** ([`OpKind`]): barrier, broadcast, scatter, gather, gather_all,
//!   exchange, reduce, allreduce, reduce_scatter, scan, exscan — one entry,
//!   [`CollExt::collective`], with a descriptor ([`desc`]) and a mode (blocking,
//!   nonblocking with an [`Event`](gex_core::Event), implicit). Reductions take a
//!   [`ReduceOp`]: built-in ([`BuiltinOp`] on every element type [`Elem`], [`BitOp`]
//!   on integers) or user-defined, commutative or not (non-commutative ones combine in
//!   rank order).
//! - **The barrier** ([`barrier`]): [`CollExt::barrier`], nonblocking and named
//!   ([`Barrier::named`] in mode `Nb`), split-phase with names and anonymous entries
//!   ([`CollExt::barrier_notify`], [`CollExt::barrier_wait`],
//!   [`CollExt::barrier_try`]); a name mismatch is an error on every member.
//! - **Modes** (seed 003 §2): [`SyncModes`] = in × out over [`SyncMode`] `{No, My,
//!   All}`; [`AddrMode`]: local (owned or borrowed buffers) or single ([`InSegments`],
//!   every member's segment offsets given, in-place with `src: None`).
//! - **Roots** ([`Root`]): a team rank, or where the root's data lives (a
//!   [`GlobalPtr`](gex_rma::GlobalPtr)) — seed 003's data-centric roots.
//! - **Agreement**: members that call one collective with different
//!   operations, roots, element types, block lengths, reduction operators or sync
//!   modes get [`CollError::Mismatch`] naming the field, both values and the members,
//!   on every member, instead of a hang or wrong data; a blocking call that waits is
//!   covered by `GEX_STALL_REPORT` like any other wait.
//! - **Algorithms** ([`algo`], the catalogue [`catalog()`]): flat, binomial, k-nomial,
//!   k-ary, chain (pipelined), fork trees, dissemination, Bruck (radix k), ring,
//!   recursive doubling and halving, pairwise, scatter + gather_all broadcast
//!   ([`ScatterAllgather`]), and compositions; transfers by eager AM, signaling put (Long AM, then a
//!   flag) or rendezvous (a get through gex-rma's layer, then an acknowledgement).
//!   Each is a value behind the [`Algorithm`] trait (its plan and its cost), listed in
//!   one table ([`algo::messages`]); the trait is also the plug-in point for a
//!   hardware collective.
//! - **Shared memory** ([`Shm`], `shm`): on a team whose members map each other's
//!   auxiliary areas (one host), every operation moves by loads and stores through
//!   per-member slots with flag words, no AMs ([`CollExt::shared_memory`]).
//! - **Across hosts** ([`HierAlgo`], `hier`): a team spanning hosts runs every
//!   operation as stages on internal host teams (`shm`) and a leaders team
//!   ([`CollExt::hierarchical`]).
//! - **Autotuner** ([`Tuner`]): capability filter + LogGP cost model, a cached lookup
//!   per (op, team size, size class, modes, commutativity), overrides by
//!   `GEX_COLL_<OP>=<algorithm>`, parameters by `GEX_COLL_LOGGP`, measured choices
//!   from a [`Profile`] written by `gex-tune` (`GEX_COLL_PROFILE`), online timing of
//!   the surviving candidates on first use (`GEX_COLL_TUNE=online`), and the
//!   [`Reason`] of every choice.
//! - **Simulation at scale** (`des`, feature `internals`): a discrete-event LogGP
//!   simulator of the same schedules on thousands of ranks, with transports and data.
//!
//! ## How it works
//! An algorithm produces, for each rank, a [`Schedule`](sched::Schedule): rounds of
//! sends, receives (copy or combine) and local steps over a work buffer — pure data,
//! no I/O. The layer's engine executes schedules over AMs without ever waiting:
//! sends that meet back-pressure stay queued, and the layer's progress hook advances
//! every collective in flight on each poll of the endpoint. `sched::model` (feature
//! `internals`) runs the schedules of a whole team in one thread (the tests' reference)
//! and predicts their time under LogGP (simulations of thousands of ranks).
//!
//! Module map (private modules), in three tiers that import one way (docs/coll.md,
//! "Components"; `ci/check-modules`): the catalogue and the model — `op`, `error`,
//! `loggp`, `sched`, [`algo`] (one module per algorithm), `catalog`, `tune`,
//! `profile`, `hier`, `path` (the path a call takes), `mix`, `env` (settings); the
//! shared-memory channel — `shm`, `barrier`, `rootcheck` (agreement), `msg` (message
//! layouts, the mailbox); the runtime — `layer` (the [`Coll`] layer: state, attach,
//! handlers, progress hook), `engine` (the schedule engine), `shmdrive` (the direct
//! path of blocking calls, sleeping), `hierdrive` (hierarchical stages), `teams`
//! (team state and management), `online` (online tuning), `api` ([`CollExt`]).
//!
//! Feature `internals`: the test and tuning internals (`des`, `sched::model`), for
//! gex-coll's own tests and tools such as gex-tune.
//!
//! ## What it does not do
//! - Signaling put and rendezvous apply to broadcast and gather_all (trees; flat,
//!   ring, recursive doubling): in single address mode into the destinations, in
//!   local mode through team scratch space that holds the whole output on every
//!   member (team size × block bytes; such collectives of one team take turns on it).
//!   Everything else moves eagerly through Medium AMs and a mailbox (one copy at the
//!   receiver).
//! - `hier` takes non-commutative reduce, allreduce and reduce_scatter only where
//!   hosts are team-rank ranges.
//! - Members that force different algorithms are not detected (every field of the
//!   descriptors and barrier names are).
//! - Out-no applies to single address mode; with owned buffers it behaves as out-my.
//!
//! ## Words
//! - **team rank**: position in a team; **job rank**: the rank of the process/thread.
//! - **block**: what one member contributes or receives (`count` elements).
//! - **sequence number**: the per-team count of collectives started; with the team id
//!   it keys every message.
//! - **belief**: a digest of a collective's descriptor: operation, root, element
//!   type, block length, reduction operator, sync modes.
#![warn(missing_docs)]

pub mod algo;
mod api;
pub mod barrier;
mod belief;
mod calls;
mod catalog;
/// The discrete-event LogGP simulator (feature `internals`).
#[cfg(feature = "internals")]
pub mod des;
pub mod desc;
mod engine;
mod env;
mod error;
mod hier;
mod hierdrive;
mod layer;
mod loggp;
#[cfg(gex_loom)]
#[doc(hidden)]
pub mod loomkit;
mod mix;
mod msg;
mod op;
mod optable;
mod path;
mod profile;
mod ring;
/// The parts of gex-rma's layer the collectives use (rendezvous gets; data roots).
mod rma {
    pub(crate) use gex_rma::{GlobalPtr, OwnedGet, Rma, RmaError, try_get_owned};
}
mod root;
mod rootcheck;
pub mod sched;
mod shm;
mod shmdrive;
mod shmpath;
mod single;
mod spec;
mod teamops;
mod teams;
mod tune;
mod tuning;

pub use algo::{Algorithm, Builtin, Kind, PlanCtx, Query, ScatterAllgather};
pub use api::{COLL_TAG, CollExt, CollStats};
pub use barrier::BarrierFlags;
pub use catalog::catalog;
pub use desc::{
    Allreduce, Barrier, Borrowed, Broadcast, ByKind, Collective, Exchange, Exscan, Gather,
    GatherAll, InSegments, Owned, Reduce, ReduceScatter, Scan, Scatter,
};
pub use env::ENV_VARS;
pub use error::{CollError, Disagreement, Field};
pub use gex_core::Team;
pub use hier::HierAlgo;
pub use layer::Coll;
pub use loggp::LogGP;
pub use op::{
    AddrMode, BitOp, BuiltinOp, Elem, IntElem, OpKind, Opts, ReduceArg, ReduceFn, ReduceOp,
    SyncMode, SyncModes, Transport,
};
pub use profile::{Cell as ProfileCell, Profile};
pub use root::Root;
pub use shm::{Shm, cma_capable};
pub use single::Single;
pub use teams::{Scratch, TeamExt};
pub use tune::{Choice, Placement, Reason, TuneMode, Tuner, size_class};
