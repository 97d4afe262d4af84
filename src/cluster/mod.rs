//! Kubernetes inputs: the shape of each workload's replicas, its replica
//! counts and pending pods, and the GPU node pools, read from the objects the
//! scheduler reads (scale targets, DRA ResourceClaimTemplates, Nodes,
//! ResourceSlices, Pods) instead of only from hand-written config. Off unless
//! config has a `kubernetes:` section, so nothing here runs in the demo.
//!
//! - [`client`]: the only I/O: reads a [`Snapshot`] with kube-rs (in-cluster
//!   config or a kubeconfig), every failure kept as a message, never a panic.
//! - [`shape`], [`nodes`]: pure: objects in, replica shape and pools out,
//!   each fact with the object and field it came from.
//! - [`view`] joins them with config into a [`ClusterView`] the control loop
//!   plans with; [`explain`] says what was derived and why a pool can or
//!   cannot host a workload.
//! - [`actuate`]: optional: balloon Deployments' and CapacityBuffers'
//!   `spec.replicas` from the plan, or in dry-run the change it would make.
//!
//! Precedence: a workload's `shape:` in config wins, then the cluster's pod
//! template and claims, then the model profile; a config pool's fields win
//! over what its nodes say. Every difference is reported as a
//! [`Disagreement`], never silently resolved.

pub mod actuate;
pub mod client;
pub(crate) mod nodes;
pub(crate) mod shape;

use std::collections::BTreeMap;

use k8s_openapi::api::{
    core::v1::{Node, Pod},
    resource::v1::{ResourceClaimTemplate, ResourceSlice},
};
use serde::Serialize;

pub use actuate::{Actuation, ActuationKind, ActuationMode, ActuationTarget, Change};
pub(crate) use nodes::{Disagreement, DiscoveredPool, NodeKeys, PoolDefaults};
pub(crate) use shape::{Derived, Fact, GpuKeys, ReplicaCounts, Target, TargetKind};

use std::{path::PathBuf, time::Duration};

use crate::{
    capacity::{Pool, Shape, WorkloadPlan},
    workload::Workload,
};

/// How the cluster is read, and whether the plan is written back.
#[derive(Debug, Clone, PartialEq)]
pub struct KubeSettings {
    pub(crate) kubeconfig: Option<PathBuf>,
    pub(crate) context: Option<String>,
    pub(crate) refresh: Duration,
    pub timeout: Duration,
    pub(crate) gpu: GpuKeys,
    pub(crate) nodes: NodeKeys,
    pub(crate) discovered_pools: PoolDefaults,
    pub actuation: Actuation,
}

/// What one read of the cluster returned, before interpretation.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Unix seconds.
    pub(crate) read_at: i64,
    pub(crate) nodes: Vec<Node>,
    pub(crate) slices: Vec<ResourceSlice>,
    /// By workload key.
    pub(crate) workloads: BTreeMap<String, WorkloadObjects>,
    /// Reads that failed (the rest of the snapshot still counts).
    pub errors: Vec<String>,
    pub(crate) notes: Vec<String>,
}

/// The objects behind one workload.
#[derive(Debug, Clone)]
pub(crate) struct WorkloadObjects {
    /// `ScaledObject ns/name` whose trigger names the workload.
    pub(crate) scaled_object: Option<String>,
    pub(crate) target: Result<Target, String>,
    pub(crate) claim_templates: BTreeMap<String, Result<ResourceClaimTemplate, String>>,
    pub(crate) pods: Vec<Pod>,
}

/// A pod the scheduler could not place.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct PendingPod {
    pub(crate) name: String,
    /// `Unschedulable`, or the phase's reason when the scheduler has said nothing yet.
    pub reason: String,
    /// The scheduler's message (`0/6 nodes are available: ...`).
    pub message: String,
}

/// Where the shape used for planning came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ShapeSource {
    /// The workload's own `shape:` in config.
    Config,
    /// The scale target's pod template and claims.
    Cluster,
    /// The model profile (the cluster gave nothing usable, or is not read).
    Profile,
}

/// One workload as the cluster describes it.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct WorkloadView {
    pub(crate) workload: String,
    pub scaled_object: Option<String>,
    pub target: Option<String>,
    pub derived: Option<Derived>,
    /// Why nothing was derived.
    pub error: Option<String>,
    /// The shape planned with.
    pub shape: Shape,
    pub shape_source: ShapeSource,
    pub replicas: Option<ReplicaCounts>,
    pub pending: Vec<PendingPod>,
    pub disagreements: Vec<Disagreement>,
}

/// The cluster, interpreted: what the control loop plans with.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ClusterView {
    #[serde(serialize_with = "crate::time::ser_unix")]
    #[schema(value_type = String, format = DateTime)]
    pub(crate) read_at: i64,
    /// Config pools completed from nodes, plus priced pools found only on nodes.
    pub pools: Vec<Pool>,
    pub discovered: Vec<DiscoveredPool>,
    pub workloads: BTreeMap<String, WorkloadView>,
    pub disagreements: Vec<Disagreement>,
    pub(crate) notes: Vec<String>,
    pub(crate) errors: Vec<String>,
    /// The last actuation pass: what was (or in dry-run would be) changed.
    pub(crate) actuation: Vec<Change>,
}

/// Interpret a snapshot against config.
pub fn view(
    config_pools: &[Pool],
    workloads: &[std::sync::Arc<Workload>],
    k: &KubeSettings,
    snap: &Snapshot,
) -> ClusterView {
    let discovered = nodes::discover(&snap.nodes, &snap.slices, &k.nodes);
    let merged = nodes::merge(config_pools, &discovered, &k.nodes, &k.discovered_pools);
    let mut disagreements = merged.disagreements;
    let mut out = BTreeMap::new();
    for w in workloads {
        let key = w.key();
        let objs = snap.workloads.get(&key);
        let v = workload_view(w, objs, &k.gpu);
        disagreements.extend(v.disagreements.iter().cloned());
        out.insert(key, v);
    }
    ClusterView {
        read_at: snap.read_at,
        pools: merged.pools,
        discovered,
        workloads: out,
        disagreements,
        notes: snap.notes.iter().cloned().chain(merged.notes).collect(),
        errors: snap.errors.clone(),
        actuation: Vec::new(),
    }
}

fn workload_view(w: &Workload, objs: Option<&WorkloadObjects>, keys: &GpuKeys) -> WorkloadView {
    let key = w.key();
    let mut v = WorkloadView {
        workload: key.clone(),
        scaled_object: objs.and_then(|o| o.scaled_object.clone()),
        target: None,
        derived: None,
        error: None,
        shape: w.config_shape(),
        shape_source: if w.shape.is_some() { ShapeSource::Config } else { ShapeSource::Profile },
        replicas: None,
        pending: Vec::new(),
        disagreements: Vec::new(),
    };
    let Some(objs) = objs else {
        v.error = Some("not read from the cluster".into());
        return v;
    };
    let target = match &objs.target {
        Ok(t) => t,
        Err(e) => {
            v.error = Some(e.clone());
            return v;
        }
    };
    v.target = Some(target.object());
    v.replicas = Some(target.replicas);
    v.pending = pending(&objs.pods);
    let derived = match shape::derive(target, &objs.claim_templates, keys) {
        Ok(d) => d,
        Err(e) => {
            v.error = Some(e.to_string());
            return v;
        }
    };
    let cluster = derived.shape(&w.profile.gpu_type);
    let stated = w.shape.clone().unwrap_or(crate::workload::StatedShape {
        gpu_type: None,
        gpus_per_replica: None,
        nodes_per_replica: None,
    });
    let profile = w.profile.shape();
    let from = target.object();
    let mut differ = |field: &str, config: String, cluster: String, config_wins: bool| {
        v.disagreements.push(Disagreement {
            subject: format!("workload {key}"),
            field: field.into(),
            config,
            cluster,
            from: from.clone(),
            used: if config_wins { "config".into() } else { "cluster".into() },
        });
    };
    let cfg_gpu = stated.gpu_type.clone().unwrap_or(profile.gpu_type.clone());
    if derived.gpu_product.is_some() && !crate::capacity::gpu_matches(&cfg_gpu, &cluster.gpu_type) {
        differ("gpu_type", cfg_gpu.clone(), cluster.gpu_type.clone(), stated.gpu_type.is_some());
    }
    let cfg_g = stated.gpus_per_replica.unwrap_or(profile.gpus_per_replica);
    if cfg_g != cluster.gpus_per_replica {
        differ(
            "gpus_per_replica",
            cfg_g.to_string(),
            cluster.gpus_per_replica.to_string(),
            stated.gpus_per_replica.is_some(),
        );
    }
    let cfg_n = stated.nodes_per_replica.unwrap_or(profile.nodes_per_replica);
    if cfg_n != cluster.nodes_per_replica {
        differ(
            "nodes_per_replica",
            cfg_n.to_string(),
            cluster.nodes_per_replica.to_string(),
            stated.nodes_per_replica.is_some(),
        );
    }
    let mut shape = cluster;
    if let Some(g) = stated.gpu_type {
        shape.gpu_type = g;
    }
    shape.gpus_per_replica = stated.gpus_per_replica.unwrap_or(shape.gpus_per_replica);
    shape.nodes_per_replica = stated.nodes_per_replica.unwrap_or(shape.nodes_per_replica);
    v.shape = shape;
    if w.shape.is_none() {
        v.shape_source = ShapeSource::Cluster;
    }
    v.derived = Some(derived);
    v
}

/// Pods the scheduler has not placed, with its reason.
pub(crate) fn pending(pods: &[Pod]) -> Vec<PendingPod> {
    let mut out = Vec::new();
    for p in pods {
        let Some(status) = &p.status else { continue };
        if status.phase.as_deref() != Some("Pending") {
            continue;
        }
        let cond = status.conditions.iter().flatten().find(|c| c.type_ == "PodScheduled" && c.status == "False");
        // A Pending pod that is scheduled is pulling its image: not a placement problem.
        let Some(c) = cond else { continue };
        out.push(PendingPod {
            name: p.metadata.name.clone().unwrap_or_default(),
            reason: c.reason.clone().unwrap_or_else(|| "Pending".into()),
            message: c.message.clone().unwrap_or_default(),
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Whether, and how, one pool can host a workload's replicas.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub(crate) struct PoolFit {
    pub(crate) pool: String,
    pub(crate) gpu_type: String,
    pub(crate) gpus_per_node: u32,
    pub(crate) nvlink_domain_gpus: u32,
    /// Replica parts one node takes; `None`: cannot host.
    pub(crate) per_node: Option<u32>,
    pub(crate) why_not: Option<String>,
}

/// The answer to "what shape does Foresight think this workload has, and why".
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub(crate) struct Explanation {
    pub(crate) workload: String,
    /// Whether Kubernetes inputs are on.
    pub(crate) kubernetes: bool,
    pub(crate) shape: Shape,
    pub(crate) shape_source: ShapeSource,
    pub(crate) scaled_object: Option<String>,
    pub(crate) target: Option<String>,
    pub(crate) facts: Vec<Fact>,
    pub(crate) notes: Vec<String>,
    pub(crate) replicas: Option<ReplicaCounts>,
    pub(crate) pending: Vec<PendingPod>,
    pub(crate) pools: Vec<PoolFit>,
    /// The plan's placement, when a plan exists.
    pub(crate) placement: Option<WorkloadPlan>,
    pub(crate) disagreements: Vec<Disagreement>,
    /// The conclusions, one sentence each.
    pub(crate) summary: Vec<String>,
}

/// Explain a workload: from the cluster view when there is one, else from config.
pub(crate) fn explain(
    w: &Workload,
    view: Option<&ClusterView>,
    config_pools: &[Pool],
    placement: Option<&WorkloadPlan>,
) -> Explanation {
    let wv = view.and_then(|v| v.workloads.get(&w.key()));
    let pools = view.map_or(config_pools, |v| v.pools.as_slice());
    let (shape, source) = match wv {
        Some(wv) => (wv.shape.clone(), wv.shape_source),
        None => (w.config_shape(), if w.shape.is_some() { ShapeSource::Config } else { ShapeSource::Profile }),
    };
    let fits: Vec<PoolFit> = pools
        .iter()
        .map(|p| {
            let r = p.parts_per_node(&shape);
            PoolFit {
                pool: p.name.clone(),
                gpu_type: p.gpu_type.clone(),
                gpus_per_node: p.gpus_per_node,
                nvlink_domain_gpus: p.nvlink_domain_gpus,
                per_node: r.as_ref().ok().copied(),
                why_not: r.err().map(|e| e.to_string()),
            }
        })
        .collect();
    let mut summary = Vec::new();
    let per_node = shape.gpus_per_node();
    let place = if shape.nodes_per_replica > 1 {
        format!(
            "{} GPUs per replica over {} nodes ({per_node} per node, nodes in one rack)",
            shape.gpus_per_replica, shape.nodes_per_replica
        )
    } else {
        format!("{} GPUs per replica in one NVLink domain of one node", shape.gpus_per_replica)
    };
    let origin = match (source, wv.and_then(|v| v.target.as_deref())) {
        (ShapeSource::Cluster, Some(t)) => format!("derived from {t} and its claims"),
        (ShapeSource::Config, _) => "stated in config (`shape:`)".to_string(),
        _ => format!("from the profile `{}`", w.profile.name),
    };
    summary.push(format!("Shape: {place}, GPU {}; {origin}.", shape.gpu_type));
    if let Some(e) = wv.and_then(|v| v.error.as_deref()) {
        summary.push(format!("Cluster shape not used: {e}."));
    }
    let (can, cannot): (Vec<&PoolFit>, Vec<&PoolFit>) = fits.iter().partition(|f| f.per_node.is_some());
    if pools.is_empty() {
        summary.push("No pools are configured or discovered, so no node plan.".into());
    } else if can.is_empty() {
        summary.push("No pool can host a replica: every pool's nodes have the wrong shape.".into());
    } else {
        let names: Vec<String> =
            can.iter().map(|f| format!("{} ({} per node)", f.pool, f.per_node.unwrap_or(0))).collect();
        summary.push(format!("Pools that can host it: {}.", names.join(", ")));
    }
    for f in &cannot {
        summary.push(format!("Pool {} cannot: {}.", f.pool, f.why_not.as_deref().unwrap_or("")));
    }
    if let Some(wv) = wv.filter(|v| !v.pending.is_empty()) {
        let first = &wv.pending[0];
        let nodes_ok = view.is_some_and(|v| v.discovered.iter().all(|d| d.ready_nodes == d.nodes));
        summary.push(format!(
            "{} pod(s) pending{}: the scheduler says \"{}\" (pod {}); no free node has the shape above{}.",
            wv.pending.len(),
            if nodes_ok { " on a healthy cluster (every GPU node Ready)" } else { "" },
            first.message,
            first.name,
            if can.is_empty() {
                String::new()
            } else {
                format!(
                    "; capacity must come from {}",
                    can.iter().map(|f| f.pool.as_str()).collect::<Vec<_>>().join(" or ")
                )
            }
        ));
    }
    if let Some(p) = placement {
        let at: Vec<String> =
            p.placement.iter().filter(|(_, n)| *n > 0).map(|(pool, n)| format!("{n} in {pool}")).collect();
        if !at.is_empty() {
            summary.push(format!("Planned replicas: {}.", at.join(", ")));
        }
        if p.unplaced > 0 {
            summary.push(format!("{} replicas have no pool to go to.", p.unplaced));
        }
    }
    let mut disagreements: Vec<Disagreement> = wv.map(|v| v.disagreements.clone()).unwrap_or_default();
    if let Some(v) = view {
        // Pools this workload could use matter to it.
        disagreements.extend(
            v.disagreements.iter().filter(|d| fits.iter().any(|f| d.subject == format!("pool {}", f.pool))).cloned(),
        );
    }
    for d in &disagreements {
        summary.push(format!(
            "{}: config says {} = {}, the cluster says {} ({}); using {}.",
            d.subject, d.field, d.config, d.cluster, d.from, d.used
        ));
    }
    Explanation {
        workload: w.key(),
        kubernetes: view.is_some(),
        shape,
        shape_source: source,
        scaled_object: wv.and_then(|v| v.scaled_object.clone()),
        target: wv.and_then(|v| v.target.clone()),
        facts: wv.and_then(|v| v.derived.as_ref()).map(|d| d.facts.clone()).unwrap_or_default(),
        notes: wv.and_then(|v| v.derived.as_ref()).map(|d| d.notes.clone()).unwrap_or_default(),
        replicas: wv.and_then(|v| v.replicas),
        pending: wv.map(|v| v.pending.clone()).unwrap_or_default(),
        pools: fits,
        placement: placement.cloned(),
        disagreements,
        summary,
    }
}
