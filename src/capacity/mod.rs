//! Capacity: which GPU nodes, in which pool, the planned replicas need over
//! the look-ahead, and so how many to pre-warm now. Pure decision code: pools,
//! reservations and replica timelines in, a plan out; no I/O and no clock
//! (`now` is an input), so every rule is testable with tables.
//!
//! - [`pack`]: one moment: place every replica on nodes, keeping each
//!   replica's GPUs inside one NVLink domain and a multi-node replica's nodes
//!   inside one rack, paid reservations first, then the cheapest capacity.
//! - [`plan`]: the timeline: pack each step of the look-ahead, honour
//!   reservation windows that open or close inside it, and turn node counts
//!   into "warm now" by each pool's provisioning time.
//! - [`spare`]: the reserved nodes a plan over hours leaves idle throughout
//!   each horizon: what a batch queue can lease.

pub mod pack;
pub mod plan;
pub(crate) mod selector;
pub mod spare;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub(crate) use selector::{gpu_matches, Constraints, LabelRequirement, Taint, Toleration};

pub use plan::{limits_at, plan, Demand, Plan, PlanInput, PoolPlan, WorkloadPlan};

/// How a pool's nodes are bought.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum CapacityType {
    /// Only nodes covered by a reservation exist (capacity blocks, committed nodes).
    Reserved,
    OnDemand,
    Spot,
}

impl CapacityType {
    pub fn as_str(self) -> &'static str {
        match self {
            CapacityType::Reserved => "reserved",
            CapacityType::OnDemand => "on-demand",
            CapacityType::Spot => "spot",
        }
    }
}

/// A group of identical GPU nodes (a Karpenter NodePool, a cloud node group).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Pool {
    pub name: String,
    /// GPU product, matched against a profile's `gpu_type`.
    pub gpu_type: String,
    pub gpus_per_node: u32,
    /// GPUs per NVLink (NVSwitch) domain on a node; divides `gpus_per_node`.
    pub nvlink_domain_gpus: u32,
    /// Nodes per rack / network fabric; `None`: the whole pool is one fabric.
    pub nodes_per_rack: Option<u32>,
    pub capacity_type: CapacityType,
    pub price_per_node_hour: f64,
    /// From asking for a node to the node being Ready.
    pub provisioning_secs: f64,
    /// Quota; `None`: unbounded.
    pub max_nodes: Option<u32>,
    /// Labels every node of the pool has (matched against pods' node selectors).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Taints every node of the pool has.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
}

/// Nodes of a pool bought for a window of time.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Reservation {
    pub name: String,
    pub pool: String,
    pub nodes: u32,
    /// Unix seconds; the reservation covers [start, end).
    #[serde(serialize_with = "crate::time::ser_unix")]
    #[schema(value_type = String, format = DateTime)]
    pub start: i64,
    #[serde(serialize_with = "crate::time::ser_unix")]
    #[schema(value_type = String, format = DateTime)]
    pub end: i64,
    /// Already paid for, whether used or not: using it costs nothing more.
    pub paid: bool,
}

impl Reservation {
    pub(crate) fn active_at(&self, t: i64) -> bool {
        self.start <= t && t < self.end
    }
}

/// What one replica of a served model occupies.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, utoipa::ToSchema)]
pub struct Shape {
    pub gpu_type: String,
    pub gpus_per_replica: u32,
    pub nodes_per_replica: u32,
    /// Node selector and tolerations of the replica's pods (none: any node).
    #[serde(skip_serializing_if = "is_default")]
    pub constraints: Constraints,
    /// One replica per rack, alone among such replicas: a LeaderWorkerSet's
    /// exclusive placement (each group's pods share a rack, and no other
    /// group may join them there).
    #[serde(skip_serializing_if = "is_default")]
    pub exclusive_rack: bool,
}

fn is_default<T: Default + PartialEq>(t: &T) -> bool {
    *t == T::default()
}

impl Shape {
    /// GPUs the replica needs on each of its nodes, inside one NVLink domain.
    pub fn gpus_per_node(&self) -> u32 {
        self.gpus_per_replica / self.nodes_per_replica.max(1)
    }
}

/// Why a pool cannot host a shape at all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Unfit {
    /// The pool has other GPUs.
    GpuType { want: String, have: String },
    /// The replica's per-node GPUs do not fit in one NVLink domain.
    NvlinkDomain { need: u32, domain: u32 },
    /// A multi-node replica spans more nodes than one rack holds.
    Rack { need: u32, rack: u32 },
    /// The pods' node selector or tolerations keep them off the pool's nodes.
    Placement { why: String },
}

impl std::fmt::Display for Unfit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unfit::GpuType { want, have } => write!(f, "has {have} GPUs, the model needs {want}"),
            Unfit::NvlinkDomain { need, domain } => {
                write!(f, "needs {need} GPUs in one NVLink domain, the pool's domains have {domain}")
            }
            Unfit::Rack { need, rack } => write!(f, "needs {need} nodes in one rack, the pool's racks hold {rack}"),
            Unfit::Placement { why } => f.write_str(why),
        }
    }
}

impl Pool {
    /// How many parts of `shape` (one per node it spans) fit on one node,
    /// or why none can.
    pub fn parts_per_node(&self, shape: &Shape) -> Result<u32, Unfit> {
        if !gpu_matches(&shape.gpu_type, &self.gpu_type) {
            return Err(Unfit::GpuType { want: shape.gpu_type.clone(), have: self.gpu_type.clone() });
        }
        let need = shape.gpus_per_node();
        let domain = self.nvlink_domain_gpus.max(1);
        if need == 0 || need > domain {
            return Err(Unfit::NvlinkDomain { need, domain });
        }
        if let Some(rack) = self.nodes_per_rack.filter(|r| *r < shape.nodes_per_replica) {
            return Err(Unfit::Rack { need: shape.nodes_per_replica, rack });
        }
        if let Some(why) = shape.constraints.refusal(&self.labels, &self.taints) {
            return Err(Unfit::Placement { why });
        }
        Ok((self.gpus_per_node / domain) * (domain / need))
    }
}
