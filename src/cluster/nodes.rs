//! Node pools as the cluster describes them, and how they meet config.
//!
//! Nodes are grouped by their pool label (`karpenter.sh/nodepool`, or a
//! cloud's node-group label); each group's GPU product and count come from
//! GPU feature discovery labels and allocatable `nvidia.com/gpu`, or from the
//! devices a DRA driver publishes in ResourceSlices, which also give NVLink
//! domain sizes where the driver publishes a domain attribute. Config wins
//! wherever it states a value; every difference is reported. Pure.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::{core::v1::Node, resource::v1::ResourceSlice};
use serde::Serialize;

use crate::capacity::{selector::normalize_gpu, CapacityType, Pool, Taint};

/// Label and attribute names nodes are read by.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NodeKeys {
    /// Tried in order; the first a node has names its pool.
    pub(crate) pool_labels: Vec<String>,
    pub(crate) capacity_type_label: String,
    pub(crate) product_label: String,
    pub(crate) count_label: String,
    pub(crate) zone_label: String,
    /// Nodes sharing this label's value are one rack / fabric block.
    pub(crate) rack_label: Option<String>,
    pub(crate) gpu_resource: String,
    /// DRA drivers whose devices are GPUs.
    pub(crate) gpu_drivers: Vec<String>,
    pub(crate) nvlink_attributes: Vec<String>,
}

/// A pool found on nodes.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct DiscoveredPool {
    pub name: String,
    /// The label that named it.
    pub label: String,
    pub nodes: u32,
    pub(crate) ready_nodes: u32,
    /// GPU feature discovery's product name, as on the label.
    pub(crate) gpu_product: Option<String>,
    /// Allocatable GPUs (device plugin) or DRA GPU devices per node, the most of any node.
    pub gpus_per_node: Option<u32>,
    /// Largest group of a node's DRA GPUs sharing an NVLink-domain attribute.
    pub nvlink_domain_gpus: Option<u32>,
    pub(crate) capacity_type: Option<String>,
    pub(crate) zones: BTreeSet<String>,
    /// Most nodes seen sharing one rack label value.
    pub nodes_per_rack: Option<u32>,
    /// Labels every node of the pool has.
    pub labels: BTreeMap<String, String>,
    /// Taints every node of the pool has.
    pub taints: Vec<Taint>,
    pub(crate) node_names: Vec<String>,
}

/// Group GPU nodes into pools. Nodes with no pool label or no GPUs are skipped.
pub(crate) fn discover(nodes: &[Node], slices: &[ResourceSlice], keys: &NodeKeys) -> Vec<DiscoveredPool> {
    // DRA GPU devices per node, and the largest same-domain group.
    let mut dra: BTreeMap<&str, (u32, BTreeMap<String, u32>)> = BTreeMap::new();
    for s in slices {
        if !keys.gpu_drivers.contains(&s.spec.driver) {
            continue;
        }
        let Some(node) = s.spec.node_name.as_deref() else { continue };
        let entry = dra.entry(node).or_default();
        for dev in s.spec.devices.iter().flatten() {
            entry.0 += 1;
            let attrs = dev.attributes.as_ref();
            for a in &keys.nvlink_attributes {
                // Attributes are published unqualified (in the driver's domain) or qualified.
                let short = a.rsplit('/').next().unwrap_or(a);
                let v = attrs.and_then(|m| m.get(a).or_else(|| m.get(short)));
                if let Some(v) = v {
                    let val =
                        v.string.clone().or(v.int.map(|i| i.to_string())).or(v.version.clone()).unwrap_or_default();
                    *entry.1.entry(format!("{a}={val}")).or_default() += 1;
                }
            }
        }
    }

    let mut groups: BTreeMap<(String, String), Vec<&Node>> = BTreeMap::new();
    for n in nodes {
        let labels = n.metadata.labels.as_ref();
        let Some((key, pool)) =
            keys.pool_labels.iter().find_map(|k| labels.and_then(|l| l.get(k)).map(|v| (k.clone(), v.clone())))
        else {
            continue;
        };
        groups.entry((pool, key)).or_default().push(n);
    }

    let mut out = Vec::new();
    for ((name, label), members) in groups {
        let label_of = |n: &Node, k: &str| n.metadata.labels.as_ref().and_then(|l| l.get(k)).cloned();
        let gpus_of = |n: &Node| -> Option<u32> {
            let alloc = n
                .status
                .as_ref()
                .and_then(|s| s.allocatable.as_ref())
                .and_then(|a| a.get(&keys.gpu_resource))
                .and_then(|q| q.0.parse::<u32>().ok())
                .filter(|g| *g > 0);
            let dra_count = n.metadata.name.as_deref().and_then(|nm| dra.get(nm)).map(|d| d.0).filter(|g| *g > 0);
            let labelled = label_of(n, &keys.count_label).and_then(|v| v.parse::<u32>().ok()).filter(|g| *g > 0);
            alloc.or(dra_count).or(labelled)
        };
        let gpus = members.iter().filter_map(|n| gpus_of(n)).max();
        let Some(gpus) = gpus else { continue };
        let domain = members
            .iter()
            .filter_map(|n| n.metadata.name.as_deref().and_then(|nm| dra.get(nm)))
            .flat_map(|d| d.1.values().copied())
            .max();
        let ready = members
            .iter()
            .filter(|n| {
                n.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .count() as u32;
        let mut common: Option<BTreeMap<String, String>> = None;
        for n in &members {
            let l = n.metadata.labels.clone().unwrap_or_default();
            common = Some(match common {
                None => l,
                Some(c) => c.into_iter().filter(|(k, v)| l.get(k) == Some(v)).collect(),
            });
        }
        // Per-node labels would never match another node; keep only pool-wide ones.
        let mut labels = common.unwrap_or_default();
        labels.retain(|k, _| k != "kubernetes.io/hostname");
        let taints_of = |n: &Node| -> Vec<Taint> {
            n.spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default()
                .into_iter()
                .map(|t| Taint { key: t.key, value: t.value, effect: t.effect })
                .collect()
        };
        let mut taints = taints_of(members[0]);
        for n in &members[1..] {
            let t = taints_of(n);
            taints.retain(|x| t.contains(x));
        }
        let mut racks: BTreeMap<String, u32> = BTreeMap::new();
        if let Some(rk) = &keys.rack_label {
            for n in &members {
                if let Some(r) = label_of(n, rk) {
                    *racks.entry(r).or_default() += 1;
                }
            }
        }
        out.push(DiscoveredPool {
            gpu_product: members.iter().find_map(|n| label_of(n, &keys.product_label)),
            gpus_per_node: Some(gpus),
            nvlink_domain_gpus: domain,
            capacity_type: members.iter().find_map(|n| label_of(n, &keys.capacity_type_label)),
            zones: members.iter().filter_map(|n| label_of(n, &keys.zone_label)).collect(),
            nodes_per_rack: racks.values().copied().max(),
            labels,
            taints,
            node_names: members.iter().filter_map(|n| n.metadata.name.clone()).collect(),
            nodes: members.len() as u32,
            ready_nodes: ready,
            name,
            label,
        });
    }
    out
}

/// Prices and provisioning for pools found on nodes but absent from config.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct PoolDefaults {
    pub(crate) price_per_node_hour: BTreeMap<CapacityType, f64>,
    pub(crate) provisioning_secs: f64,
}

/// Config and cluster saying different things.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Disagreement {
    /// `pool h100` or `workload inference/llama`.
    pub subject: String,
    pub field: String,
    pub config: String,
    pub cluster: String,
    /// Which object the cluster's value came from.
    pub(crate) from: String,
    /// Which value is used.
    pub used: String,
}

/// Pools to plan with: config pools, completed with what nodes say, and pools found only on nodes.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Merged {
    pub(crate) pools: Vec<Pool>,
    pub(crate) disagreements: Vec<Disagreement>,
    pub(crate) notes: Vec<String>,
}

pub(crate) fn merge(config: &[Pool], found: &[DiscoveredPool], keys: &NodeKeys, defaults: &PoolDefaults) -> Merged {
    let mut out = Merged::default();
    for p in config {
        let mut pool = p.clone();
        let pool_label = keys.pool_labels.first().cloned().unwrap_or_else(|| "karpenter.sh/nodepool".into());
        // What a Karpenter NodePool's nodes carry, so selectors on them match a pool with no nodes yet.
        pool.labels.entry(pool_label).or_insert_with(|| p.name.clone());
        pool.labels.entry(keys.capacity_type_label.clone()).or_insert_with(|| p.capacity_type.as_str().to_string());
        if let Some(d) = found.iter().find(|d| d.name == p.name) {
            let from = format!("Nodes with {}={} ({})", d.label, d.name, d.node_names.join(", "));
            let mut differ = |field: &str, config: String, cluster: String| {
                out.disagreements.push(Disagreement {
                    subject: format!("pool {}", p.name),
                    field: field.into(),
                    config,
                    cluster,
                    from: from.clone(),
                    used: "config".into(),
                });
            };
            if let Some(prod) = &d.gpu_product {
                if !crate::capacity::gpu_matches(&p.gpu_type, prod) {
                    differ("gpu_type", p.gpu_type.clone(), prod.clone());
                }
            }
            if let Some(g) = d.gpus_per_node.filter(|g| *g != p.gpus_per_node) {
                differ("gpus_per_node", p.gpus_per_node.to_string(), g.to_string());
            }
            if let Some(g) = d.nvlink_domain_gpus.filter(|g| *g != p.nvlink_domain_gpus) {
                differ("nvlink_domain_gpus", p.nvlink_domain_gpus.to_string(), g.to_string());
            }
            if let Some(ct) = d.capacity_type.as_deref().filter(|ct| *ct != p.capacity_type.as_str()) {
                differ("capacity_type", p.capacity_type.as_str().into(), ct.to_string());
            }
            if let (Some(max), true) = (p.max_nodes, d.nodes > p.max_nodes.unwrap_or(u32::MAX)) {
                differ("max_nodes", max.to_string(), format!("{} nodes exist", d.nodes));
            }
            for (k, v) in &d.labels {
                pool.labels.entry(k.clone()).or_insert_with(|| v.clone());
            }
            if pool.taints.is_empty() {
                pool.taints = d.taints.clone();
            }
        }
        out.pools.push(pool);
    }
    for d in found.iter().filter(|d| !config.iter().any(|p| p.name == d.name)) {
        let what = format!("pool {} ({} nodes with {}={})", d.name, d.nodes, d.label, d.name);
        let Some(product) = &d.gpu_product else {
            out.notes.push(format!("{what}: no `{}` label, so no GPU product; not planned", keys.product_label));
            continue;
        };
        let ct = match d.capacity_type.as_deref() {
            Some("reserved") => CapacityType::Reserved,
            Some("spot") => CapacityType::Spot,
            Some("on-demand") => CapacityType::OnDemand,
            other => {
                out.notes.push(format!("{what}: capacity type {other:?} read as on-demand"));
                CapacityType::OnDemand
            }
        };
        let Some(price) = defaults.price_per_node_hour.get(&ct).copied() else {
            out.notes.push(format!(
                "{what}: found on nodes, not in config, and `kubernetes.discovered_pools.price_per_node_hour` has no `{}` price; not planned",
                ct.as_str()
            ));
            continue;
        };
        let gpus = d.gpus_per_node.unwrap_or(1);
        let domain = d.nvlink_domain_gpus.filter(|g| *g > 0 && gpus % *g == 0).unwrap_or(gpus);
        out.pools.push(Pool {
            name: d.name.clone(),
            gpu_type: normalize_gpu(product),
            gpus_per_node: gpus,
            nvlink_domain_gpus: domain,
            nodes_per_rack: d.nodes_per_rack,
            capacity_type: ct,
            price_per_node_hour: price,
            provisioning_secs: defaults.provisioning_secs,
            // Reserved capacity is what exists; the rest is bounded by quota the cluster does not show.
            max_nodes: (ct == CapacityType::Reserved).then_some(d.nodes),
            labels: d.labels.clone(),
            taints: d.taints.clone(),
        });
        out.notes.push(format!("{what}: found on nodes, not in config; planned at {price}/node-hour"));
    }
    out
}
