//! Sizing: how many replicas a workload needs. Pure decision code: data in,
//! data out, no I/O and no clock, so every rule is testable with tables.
//!
//! - [`profile`]: per-model capacity profiles (the YAML files in `models/`).
//! - [`reactive`]: the reactive policy, desired = ceil(signal / per-replica
//!   target); the answer until a forecast exists, and the fallback after.
//! - [`predictive`]: size for an upper forecast quantile over the cold-start
//!   look-ahead, never below the live load, scale-down stabilised.
//! - [`roles`]: prefill and decode roles sized on token demand in its
//!   parts (rate, prompt and output length, prefix-cache share).
//! - [`learned`]: per-replica capacity learned from load against the SLO,
//!   the profile as its prior.
//! - [`headroom`]: a load multiplier learned from the measured queue wait
//!   against the SLO's target.

mod decision;
pub(crate) mod headroom;
pub mod learned;
pub mod predictive;
pub mod profile;
pub(crate) mod reactive;
pub mod roles;

use serde::Serialize;

/// Which policy produced a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    Reactive,
    Predictive,
}

impl Policy {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Policy::Reactive => "reactive",
            Policy::Predictive => "predictive",
        }
    }
}
