//! The table of built-in families: for every [`Kind`], one [`Family`] record that
//! holds its name, its operations, its capability filter, its cost model and its
//! plan — the family's module defines it, this table registers it.

use super::cost::Cost;
use super::{Builtin, Kind, PlanCtx, Query};
use crate::op::OpKind;
use crate::sched::Schedule;

/// A built-in family: everything [`Builtin`] needs about it, read at construction,
/// selection and planning time (never per message).
pub(crate) struct Family {
    /// The kind this record is for.
    pub(crate) kind: Kind,
    /// The radix as given to [`Builtin::new`] → the radix used.
    pub(crate) radix: fn(u32) -> u32,
    /// The name of an instance: (radix, pipelining segment, fork dimensions).
    pub(crate) name: fn(u32, usize, &[u32]) -> String,
    /// The operations with the eager transport.
    pub(crate) ops: &'static [OpKind],
    /// Whether gather_all also moves by signaling put and rendezvous.
    pub(crate) put_gather_all: bool,
    /// The family's own conditions on a query whose operation it declares.
    pub(crate) supports: fn(&Builtin, &Query) -> bool,
    /// The LogGP cost without the transport's share.
    pub(crate) cost: CostFn,
    /// One rank's schedule.
    pub(crate) plan: PlanFn,
}

impl Family {
    /// The family of `kind` with the operations `ops`, instance names `name`, cost model
    /// `cost` and plan `plan`: the radix as given, no condition beyond the declared
    /// operations and gather_all by eager messages only, unless the methods below say
    /// otherwise.
    pub(crate) const fn new(
        kind: Kind,
        ops: &'static [OpKind],
        name: fn(u32, usize, &[u32]) -> String,
        (cost, plan): (CostFn, PlanFn),
    ) -> Family {
        Family {
            kind,
            radix: any_radix,
            name,
            ops,
            put_gather_all: false,
            supports: always,
            cost,
            plan,
        }
    }

    /// With the radix used for a radix given.
    pub(crate) const fn with_radix(mut self, radix: fn(u32) -> u32) -> Family {
        self.radix = radix;
        self
    }

    /// With the family's own conditions on a query.
    pub(crate) const fn with_supports(mut self, supports: fn(&Builtin, &Query) -> bool) -> Family {
        self.supports = supports;
        self
    }

    /// With gather_all also by signaling put and rendezvous.
    pub(crate) const fn with_put_gather_all(mut self) -> Family {
        self.put_gather_all = true;
        self
    }
}

/// A family's cost model ([`Family::cost`]).
pub(crate) type CostFn = fn(&Builtin, &Query, &Cost<'_>) -> f64;
/// A family's plan ([`Family::plan`]).
pub(crate) type PlanFn = fn(&Builtin, &PlanCtx) -> Schedule;

/// Radix as given.
pub(crate) fn any_radix(k: u32) -> u32 {
    k
}

/// No condition beyond the declared operations.
pub(crate) fn always(_: &Builtin, _: &Query) -> bool {
    true
}

/// Every kind (the tests check the table answers for each).
#[cfg(test)]
pub(crate) const KINDS: [Kind; 14] = [
    Kind::Flat,
    Kind::Knomial,
    Kind::Kary,
    Kind::Chain,
    Kind::Fork,
    Kind::Dissemination,
    Kind::Bruck,
    Kind::Ring,
    Kind::RecDoubling,
    Kind::RecHalving,
    Kind::Pairwise,
    Kind::ReduceBcast,
    Kind::GatherBcast,
    Kind::ReduceScatter,
];

/// The family of `kind`: the one table of built-in families.
pub(crate) fn family(kind: Kind) -> &'static Family {
    match kind {
        Kind::Flat => &super::flat::FAMILY,
        Kind::Knomial => &super::tree::KNOMIAL,
        Kind::Kary => &super::tree::KARY,
        Kind::Chain => &super::chain::FAMILY,
        Kind::Fork => &super::tree::FORK,
        Kind::Dissemination => &super::dissemination::FAMILY,
        Kind::Bruck => &super::bruck::FAMILY,
        Kind::Ring => &super::ring::FAMILY,
        Kind::RecDoubling => &super::recdbl::FAMILY,
        Kind::RecHalving => &super::rechalv::FAMILY,
        Kind::Pairwise => &super::pairwise::FAMILY,
        Kind::ReduceBcast => &super::compose::REDUCE_BCAST,
        Kind::GatherBcast => &super::compose::GATHER_BCAST,
        Kind::ReduceScatter => &super::compose::REDUCE_SCATTER,
    }
}
