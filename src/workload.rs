//! The validated workload: what `config` produces and every stage after it
//! (sources, cluster, the serving loop, the scaler) takes, with the key KEDA's
//! trigger metadata names it by. It lives apart from `config` so that those
//! stages depend on the workload, not on how YAML is read and checked.

use std::time::Duration;

use serde::Deserialize;

use crate::{
    capacity::Shape,
    sizing::{profile::Profile, roles::RoleKind},
    sources::{Signal, SourceConfig},
};

/// Trigger metadata key naming the workload a ScaledObject scales.
pub(crate) const KEY_WORKLOAD: &str = "workload";
/// Trigger metadata key for its namespace (default: the ScaledObject's).
pub(crate) const KEY_NAMESPACE: &str = "namespace";

/// One workload Foresight sizes.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    pub(crate) name: String,
    pub(crate) namespace: String,
    pub(crate) profile: Profile,
    pub min_replicas: u32,
    pub(crate) max_replicas: u32,
    pub(crate) signals: Vec<Signal>,
    pub(crate) target: Target,
    pub(crate) activation_threshold: f64,
    /// Signals older than this give no decision.
    pub(crate) stale_after: Duration,
    pub(crate) source: SourceConfig,
    /// Forecast-only: KEDA gets the reactive answer, the predictive one is reported beside it.
    pub(crate) shadow: bool,
    /// Shape fields stated in config, which win over the cluster's and the profile's.
    pub(crate) shape: Option<StatedShape>,
    /// Prefill/decode roles, each sized on its own (empty: one role, the workload).
    pub roles: Vec<Role>,
    /// What the config left out and was filled in (`check-config` prints it).
    pub(crate) assumed: Vec<String>,
}

/// One role of a disaggregated workload: its own Deployment, profile, bounds and shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Role {
    pub kind: RoleKind,
    pub(crate) profile: Profile,
    pub min_replicas: u32,
    pub max_replicas: u32,
    pub(crate) shape: Option<StatedShape>,
}

/// The signals role sizing reads: demand in its parts.
pub(crate) const ROLE_SIGNALS: [Signal; 4] = [
    Signal::RequestRate,
    Signal::PromptTokensPerRequest,
    Signal::GenerationTokensPerRequest,
    Signal::PrefixCacheHitFraction,
];

impl Role {
    /// The role's replica shape: its profile's, under its `shape:` fields.
    pub(crate) fn config_shape(&self) -> Shape {
        stated(self.profile.shape(), self.shape.as_ref())
    }
}

/// The signal a workload is sized on, and how much of it one replica handles.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Target {
    pub(crate) signal: Signal,
    pub(crate) per_replica: f64,
}

impl Workload {
    /// The shape from config alone: the profile's, under the workload's own `shape:` fields.
    pub(crate) fn config_shape(&self) -> Shape {
        stated(self.profile.shape(), self.shape.as_ref())
    }

    /// `namespace/name`, the key the scaler looks workloads up by.
    pub fn key(&self) -> String {
        workload_key(&self.namespace, &self.name)
    }
}

/// `shape` with the fields `over` states replaced.
fn stated(mut s: Shape, over: Option<&StatedShape>) -> Shape {
    if let Some(o) = over {
        if let Some(g) = &o.gpu_type {
            s.gpu_type = g.clone();
        }
        s.gpus_per_replica = o.gpus_per_replica.unwrap_or(s.gpus_per_replica);
        s.nodes_per_replica = o.nodes_per_replica.unwrap_or(s.nodes_per_replica);
    }
    s
}

/// The lookup key of a workload.
pub(crate) fn workload_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// Shape fields a workload states in config (`shape:`), which win over the
/// cluster's and the profile's.
#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct StatedShape {
    #[serde(default)]
    pub(crate) gpu_type: Option<String>,
    #[serde(default)]
    pub(crate) gpus_per_replica: Option<u32>,
    #[serde(default)]
    pub(crate) nodes_per_replica: Option<u32>,
}

/// The store series of a workload's signal: `namespace/name/signal`.
pub(crate) fn series(workload_key: &str, signal: Signal) -> String {
    format!("{workload_key}/{signal}")
}

/// The latest-only series of how many pods answered a workload's scrape.
pub fn pods_series(workload_key: &str) -> String {
    format!("{workload_key}/pods")
}
