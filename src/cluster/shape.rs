//! A workload's replica shape, read off the objects the scheduler reads: the
//! scale target's pod template (GPU limits, node selector, required node
//! affinity, tolerations), its DRA `resourceClaims` and their
//! ResourceClaimTemplates (device class, count, CEL product selector,
//! `matchAttribute` constraints), and for a LeaderWorkerSet the group size.
//! Every fact keeps the object and field it came from. Pure: objects in,
//! shape out.

use std::collections::BTreeMap;

use k8s_openapi::api::{
    core::v1::{PodSpec, PodTemplateSpec},
    resource::v1::{DeviceRequest, ResourceClaimTemplate},
};
use serde::Serialize;

use crate::capacity::{Constraints, LabelRequirement, Shape, Toleration};

/// One derived fact and where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Fact {
    pub(crate) what: String,
    pub(crate) value: String,
    /// `Kind namespace/name field.path`.
    pub from: String,
}

/// The kinds of scale target whose pods Foresight can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub(crate) enum TargetKind {
    Deployment,
    StatefulSet,
    LeaderWorkerSet,
}

impl TargetKind {
    pub(crate) fn parse(kind: &str) -> Option<TargetKind> {
        match kind {
            "Deployment" => Some(TargetKind::Deployment),
            "StatefulSet" => Some(TargetKind::StatefulSet),
            "LeaderWorkerSet" => Some(TargetKind::LeaderWorkerSet),
            _ => None,
        }
    }
}

/// Replica counts the target reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ReplicaCounts {
    pub desired: u32,
    pub current: u32,
    pub ready: u32,
}

/// The scale target, reduced to what shapes a replica.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Target {
    pub(crate) kind: TargetKind,
    pub(crate) namespace: String,
    pub(crate) name: String,
    /// Every pod's template (a LeaderWorkerSet: its workers').
    pub(crate) template: PodTemplateSpec,
    /// A LeaderWorkerSet's leader template, when it has its own.
    pub(crate) leader_template: Option<PodTemplateSpec>,
    /// Pods per replica (a LeaderWorkerSet's `size`; otherwise 1).
    pub(crate) group_size: u32,
    /// A LeaderWorkerSet's exclusive-topology label: a group's pods share its
    /// value, and no other group's pods may have it (one group per domain).
    pub(crate) group_topology: Option<String>,
    pub(crate) replicas: ReplicaCounts,
    /// Labels that select the target's pods.
    pub(crate) pod_labels: BTreeMap<String, String>,
}

impl Target {
    pub(crate) fn object(&self) -> String {
        format!("{:?} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// What the cluster settings say about GPUs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GpuKeys {
    /// Extended resource of the device plugin (`nvidia.com/gpu`).
    pub(crate) resource: String,
    /// DRA device classes whose devices are GPUs.
    pub(crate) device_classes: Vec<String>,
    /// DRA attributes whose shared value means "one NVLink domain".
    pub(crate) nvlink_attributes: Vec<String>,
    /// Node label holding the GPU product (`nvidia.com/gpu.product`).
    pub(crate) product_label: String,
}

/// A shape derived from the cluster, with its evidence.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Derived {
    /// `None`: the objects name no GPU product; the profile's is used.
    pub gpu_product: Option<String>,
    pub(crate) gpus_per_pod: u32,
    pub(crate) pods_per_replica: u32,
    pub(crate) constraints: Constraints,
    /// DRA `matchAttribute` constraints across all of a pod's GPUs.
    pub(crate) match_attributes: Vec<String>,
    /// Whether a claim requires the GPUs inside one NVLink domain.
    pub one_nvlink_domain: bool,
    pub facts: Vec<Fact>,
    /// What was read but could not be used, and why.
    pub(crate) notes: Vec<String>,
    /// A LeaderWorkerSet's exclusive-topology key: one group per domain of it.
    pub(crate) exclusive_topology: Option<String>,
}

impl Derived {
    /// The packer's shape; `fallback_gpu` when the objects name no product.
    pub(crate) fn shape(&self, fallback_gpu: &str) -> Shape {
        let pods = self.pods_per_replica.max(1);
        Shape {
            gpu_type: self.gpu_product.clone().unwrap_or_else(|| fallback_gpu.to_string()),
            gpus_per_replica: self.gpus_per_pod * pods,
            nodes_per_replica: pods,
            constraints: self.constraints.clone(),
            exclusive_rack: self.exclusive_topology.is_some(),
        }
    }
}

/// Why no shape could be derived.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum ShapeError {
    #[error("{0} has no pod spec")]
    NoPodSpec(String),
    #[error("{0}'s pods request no GPUs (neither `{1}` nor a DRA claim on a GPU device class)")]
    NoGpus(String, String),
}

/// Derive the replica shape of `target`, given the ResourceClaimTemplates of
/// its namespace that were read (`Err`: could not be read, and why).
pub(crate) fn derive(
    target: &Target,
    templates: &BTreeMap<String, Result<ResourceClaimTemplate, String>>,
    keys: &GpuKeys,
) -> Result<Derived, ShapeError> {
    let obj = target.object();
    let spec = target.template.spec.as_ref().ok_or_else(|| ShapeError::NoPodSpec(obj.clone()))?;
    let prefix = if target.kind == TargetKind::LeaderWorkerSet {
        "spec.leaderWorkerTemplate.workerTemplate.spec"
    } else {
        "spec.template.spec"
    };
    let mut d = Derived {
        gpu_product: None,
        gpus_per_pod: 0,
        pods_per_replica: target.group_size.max(1),
        constraints: Constraints::default(),
        match_attributes: Vec::new(),
        one_nvlink_domain: false,
        facts: Vec::new(),
        notes: Vec::new(),
        exclusive_topology: None,
    };
    let fact = |what: &str, value: String, from: String| Fact { what: what.to_string(), value, from };

    // Device-plugin GPUs: limits (requests must equal them for extended resources).
    for c in &spec.containers {
        let res = c.resources.as_ref();
        let q = res
            .and_then(|r| r.limits.as_ref()?.get(&keys.resource))
            .or_else(|| res.and_then(|r| r.requests.as_ref()?.get(&keys.resource)));
        if let Some(q) = q {
            match q.0.trim().parse::<u32>() {
                Ok(n) => {
                    d.gpus_per_pod += n;
                    d.facts.push(fact(
                        "GPUs per pod (device plugin)",
                        n.to_string(),
                        format!("{obj} {prefix}.containers[{}].resources.limits[{}]", c.name, keys.resource),
                    ));
                }
                Err(_) => d.notes.push(format!(
                    "container `{}` asks for `{}: {}`, not a whole number; ignored",
                    c.name, keys.resource, q.0
                )),
            }
        }
    }

    claims(&mut d, spec, target, templates, keys, prefix);

    if d.gpus_per_pod == 0 {
        return Err(ShapeError::NoGpus(obj, keys.resource.clone()));
    }
    if target.kind == TargetKind::LeaderWorkerSet {
        d.facts.push(fact(
            "pods per replica",
            d.pods_per_replica.to_string(),
            format!("{obj} spec.leaderWorkerTemplate.size"),
        ));
        if let Some(leader) = target.leader_template.as_ref().and_then(|t| t.spec.as_ref()) {
            let leader_gpus: u32 = leader
                .containers
                .iter()
                .filter_map(|c| {
                    c.resources.as_ref()?.limits.as_ref()?.get(&keys.resource)?.0.trim().parse::<u32>().ok()
                })
                .sum();
            if leader_gpus != d.gpus_per_pod && leader.resource_claims.is_none() {
                d.notes.push(format!(
                    "the leader template asks for {leader_gpus} GPUs, workers for {}; sized as {} pods of {}",
                    d.gpus_per_pod, d.pods_per_replica, d.gpus_per_pod
                ));
            }
        }
        if let Some(key) = &target.group_topology {
            d.exclusive_topology = Some(key.clone());
            d.facts.push(fact(
                "one replica alone per value of",
                key.clone(),
                format!("{obj} metadata.annotations[leaderworkerset.sigs.k8s.io/exclusive-topology]"),
            ));
        }
    }

    placement(&mut d, spec, &obj, prefix, keys);
    Ok(d)
}

/// DRA: the pod's claims from templates, counted on GPU device classes.
fn claims(
    d: &mut Derived,
    spec: &PodSpec,
    target: &Target,
    templates: &BTreeMap<String, Result<ResourceClaimTemplate, String>>,
    keys: &GpuKeys,
    prefix: &str,
) {
    for (i, pc) in spec.resource_claims.iter().flatten().enumerate() {
        let Some(tname) = &pc.resource_claim_template_name else {
            if let Some(shared) = &pc.resource_claim_name {
                d.notes.push(format!(
                    "{prefix}.resourceClaims[{i}] uses the shared ResourceClaim `{shared}`: its devices are shared by every replica, so they add nothing per replica"
                ));
            }
            continue;
        };
        let tobj = format!("ResourceClaimTemplate {}/{}", target.namespace, tname);
        let tpl = match templates.get(tname) {
            Some(Ok(t)) => t,
            Some(Err(why)) => {
                d.notes.push(format!("{tobj} (claim `{}`): {why}", pc.name));
                continue;
            }
            None => {
                d.notes.push(format!("{tobj} (claim `{}`) was not read", pc.name));
                continue;
            }
        };
        let Some(devices) = tpl.spec.spec.devices.as_ref() else { continue };
        let mut gpu_requests = Vec::new();
        for (j, r) in devices.requests.iter().flatten().enumerate() {
            let at = format!("{tobj} spec.spec.devices.requests[{j}]");
            if let Some((count, class, selectors, field)) = exact(r, d, &at) {
                if !keys.device_classes.iter().any(|c| c == &class) {
                    continue;
                }
                gpu_requests.push(r.name.clone());
                d.gpus_per_pod += count;
                d.facts.push(Fact {
                    what: format!("GPUs per pod (DRA, device class {class})"),
                    value: count.to_string(),
                    from: format!("{at}{field}.count"),
                });
                for (k, cel) in selectors.iter().enumerate() {
                    match product_in_cel(cel) {
                        Some(p) => {
                            d.facts.push(Fact {
                                what: "GPU product".into(),
                                value: p.clone(),
                                from: format!("{at}{field}.selectors[{k}].cel"),
                            });
                            d.gpu_product = Some(p);
                        }
                        None => d.notes.push(format!(
                            "{at}{field}.selectors[{k}]: CEL `{cel}` is not a productName comparison; not modelled (the scheduler still applies it)"
                        )),
                    }
                }
            }
        }
        for (j, c) in devices.constraints.iter().flatten().enumerate() {
            let Some(attr) = &c.match_attribute else { continue };
            let covers =
                c.requests.as_ref().is_none_or(|rs| rs.is_empty() || gpu_requests.iter().all(|g| rs.contains(g)));
            if gpu_requests.is_empty() || !covers {
                continue;
            }
            let domain = keys.nvlink_attributes.iter().any(|a| a == attr);
            if domain {
                d.one_nvlink_domain = true;
            }
            d.match_attributes.push(attr.clone());
            d.facts.push(Fact {
                what: if domain {
                    "GPUs in one NVLink domain".into()
                } else {
                    "GPUs share the device attribute".into()
                },
                value: attr.clone(),
                from: format!("{tobj} spec.spec.devices.constraints[{j}].matchAttribute"),
            });
        }
    }
}

/// (count, device class, CEL expressions, field of the chosen form) of a request; `None` when it has neither form.
fn exact(r: &DeviceRequest, d: &mut Derived, at: &str) -> Option<(u32, String, Vec<String>, String)> {
    let cel = |sel: &Option<Vec<k8s_openapi::api::resource::v1::DeviceSelector>>| -> Vec<String> {
        sel.iter().flatten().filter_map(|s| s.cel.as_ref().map(|c| c.expression.clone())).collect()
    };
    let count = |mode: &Option<String>, count: Option<i64>, d: &mut Derived, field: &str| -> u32 {
        if mode.as_deref() == Some("All") {
            d.notes.push(format!("{at}{field}: allocationMode All takes every matching device on the node; counted as 0 extra, size it with the node's GPUs"));
            return 0;
        }
        count.unwrap_or(1).clamp(0, u32::MAX as i64) as u32
    };
    if let Some(e) = &r.exactly {
        let n = count(&e.allocation_mode, e.count, d, ".exactly");
        return Some((n, e.device_class_name.clone(), cel(&e.selectors), ".exactly".into()));
    }
    let first = r.first_available.as_ref()?.first()?;
    d.notes.push(format!("{at}: firstAvailable lists alternatives; sized on the first, `{}`", first.name));
    let n = count(&first.allocation_mode, first.count, d, ".firstAvailable[0]");
    Some((n, first.device_class_name.clone(), cel(&first.selectors), ".firstAvailable[0]".into()))
}

/// `device.attributes["<driver>"].productName == "<P>"` (either side) -> P.
fn product_in_cel(cel: &str) -> Option<String> {
    let at = cel.find("productName")?;
    let rest = &cel[at + "productName".len()..];
    let rest = rest.trim_start().strip_prefix("==")?.trim_start();
    let quote = rest.chars().next().filter(|c| *c == '"' || *c == '\'')?;
    let body = &rest[1..];
    let end = body.find(quote)?;
    Some(body[..end].to_string())
}

/// Node selector, required node affinity and tolerations.
fn placement(d: &mut Derived, spec: &PodSpec, obj: &str, prefix: &str, keys: &GpuKeys) {
    let mut base = Vec::new();
    for (k, v) in spec.node_selector.iter().flatten() {
        if *k == keys.product_label {
            // A GPU product is matched by name against pools, whose nodes may not exist yet.
            d.gpu_product = Some(v.clone());
            d.facts.push(Fact {
                what: "GPU product".into(),
                value: v.clone(),
                from: format!("{obj} {prefix}.nodeSelector[{k}]"),
            });
            continue;
        }
        base.push(LabelRequirement::is_in(k, v));
        d.facts.push(Fact {
            what: "node selector".into(),
            value: format!("{k}={v}"),
            from: format!("{obj} {prefix}.nodeSelector"),
        });
    }
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref());
    let mut terms = Vec::new();
    for (i, t) in required.map(|r| r.node_selector_terms.as_slice()).unwrap_or_default().iter().enumerate() {
        let mut term = base.clone();
        for e in t.match_expressions.iter().flatten() {
            term.push(LabelRequirement {
                key: e.key.clone(),
                operator: e.operator.clone(),
                values: e.values.clone().unwrap_or_default(),
            });
        }
        if t.match_fields.as_ref().is_some_and(|f| !f.is_empty()) {
            d.notes.push(format!(
                "{prefix}.affinity...nodeSelectorTerms[{i}].matchFields names nodes, not pools; not modelled"
            ));
        }
        d.facts.push(Fact {
            what: "required node affinity".into(),
            value: term.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", "),
            from: format!("{obj} {prefix}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}]"),
        });
        terms.push(term);
    }
    if terms.is_empty() && !base.is_empty() {
        terms.push(base);
    }
    d.constraints.node_terms = terms;
    for t in spec.tolerations.iter().flatten() {
        d.constraints.tolerations.push(Toleration {
            key: t.key.clone().unwrap_or_default(),
            operator: t.operator.clone().unwrap_or_else(|| "Equal".into()),
            value: t.value.clone().unwrap_or_default(),
            effect: t.effect.clone().unwrap_or_default(),
        });
    }
    if !d.constraints.tolerations.is_empty() {
        d.facts.push(Fact {
            what: "tolerations".into(),
            value: d.constraints.tolerations.len().to_string(),
            from: format!("{obj} {prefix}.tolerations"),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> GpuKeys {
        GpuKeys {
            resource: "nvidia.com/gpu".into(),
            device_classes: vec!["gpu.nvidia.com".into()],
            nvlink_attributes: vec!["gpu.nvidia.com/nvlinkDomain".into()],
            product_label: "nvidia.com/gpu.product".into(),
        }
    }

    fn target(spec: serde_json::Value) -> Target {
        Target {
            kind: TargetKind::Deployment,
            namespace: "ns".into(),
            name: "d".into(),
            template: serde_json::from_value(serde_json::json!({ "spec": spec })).unwrap(),
            leader_template: None,
            group_size: 1,
            group_topology: None,
            replicas: ReplicaCounts::default(),
            pod_labels: BTreeMap::new(),
        }
    }

    fn claim(requests: serde_json::Value, constraints: serde_json::Value) -> Result<ResourceClaimTemplate, String> {
        Ok(serde_json::from_value(serde_json::json!({
            "metadata": {"name": "t"},
            "spec": {"spec": {"devices": {"requests": requests, "constraints": constraints}}}
        }))
        .unwrap())
    }

    #[test]
    fn claims_count_gpu_classes_only_and_say_what_they_skip() {
        let with_claim = |requests, constraints| {
            let t = target(serde_json::json!({
                "containers": [{"name": "c", "resources": {"claims": [{"name": "g"}]}}],
                "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "t"}, {"name": "shared", "resourceClaimName": "s"}]
            }));
            derive(&t, &[("t".to_string(), claim(requests, constraints))].into(), &keys())
        };
        // Two GPU requests and a NIC; the constraint covers both GPU requests.
        let d = with_claim(
            serde_json::json!([
                {"name": "a", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 4}},
                {"name": "b", "exactly": {"deviceClassName": "gpu.nvidia.com"}},
                {"name": "nic", "exactly": {"deviceClassName": "rdma.example.com", "count": 2}}
            ]),
            serde_json::json!([{"matchAttribute": "gpu.nvidia.com/nvlinkDomain"}]),
        )
        .unwrap();
        assert_eq!(d.gpus_per_pod, 5, "count defaults to 1; NICs are not GPUs");
        assert!(d.one_nvlink_domain);
        assert!(d.notes.iter().any(|n| n.contains("shared ResourceClaim `s`")), "{:?}", d.notes);
        // A constraint over only some GPU requests does not bind them all; firstAvailable is sized on its first choice.
        let d = with_claim(
            serde_json::json!([
                {"name": "a", "firstAvailable": [{"name": "big", "deviceClassName": "gpu.nvidia.com", "count": 8}, {"name": "small", "deviceClassName": "gpu.nvidia.com", "count": 4}]},
                {"name": "b", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 1}}
            ]),
            serde_json::json!([{"requests": ["a"], "matchAttribute": "gpu.nvidia.com/nvlinkDomain"}]),
        )
        .unwrap();
        assert_eq!(d.gpus_per_pod, 9);
        assert!(!d.one_nvlink_domain);
        assert!(d.notes.iter().any(|n| n.contains("firstAvailable")));
        // An unreadable template is a note, and with no other GPUs, an error that names the object.
        let t = target(
            serde_json::json!({"containers": [{"name": "c"}], "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "t"}]}),
        );
        let err = derive(&t, &[("t".to_string(), Err("403 Forbidden".to_string()))].into(), &keys()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Deployment ns/d's pods request no GPUs (neither `nvidia.com/gpu` nor a DRA claim on a GPU device class)"
        );
        let no_spec = Target { template: PodTemplateSpec::default(), ..t };
        assert!(matches!(derive(&no_spec, &BTreeMap::new(), &keys()), Err(ShapeError::NoPodSpec(_))));
    }

    #[test]
    fn selectors_affinity_and_tolerations_become_constraints() {
        let t = target(serde_json::json!({
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}, {"name": "side", "resources": {"limits": {"nvidia.com/gpu": "x"}}}],
            "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "team": "ml"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]},
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["c"]}]}
            ]}}},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]
        }));
        let d = derive(&t, &BTreeMap::new(), &keys()).unwrap();
        assert_eq!(d.gpus_per_pod, 2);
        assert!(d.notes.iter().any(|n| n.contains("not a whole number")));
        assert_eq!(
            d.gpu_product.as_deref(),
            Some("NVIDIA-A100-SXM4-80GB"),
            "the product selector becomes the GPU type"
        );
        // The node selector is ANDed into every affinity term.
        let terms: Vec<Vec<String>> =
            d.constraints.node_terms.iter().map(|t| t.iter().map(|r| r.to_string()).collect()).collect();
        assert_eq!(terms, [vec!["team=ml", "zone In (a,b)"], vec!["team=ml", "zone=c"]]);
        assert_eq!(d.constraints.tolerations.len(), 1);
        let shape = d.shape("fallback");
        assert_eq!((shape.gpu_type.as_str(), shape.gpus_per_replica), ("NVIDIA-A100-SXM4-80GB", 2));
    }

    #[test]
    fn product_names_come_out_of_cel_comparisons() {
        let cases = [
            (
                r#"device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3""#,
                Some("NVIDIA H100 80GB HBM3"),
            ),
            (r#"device.attributes['gpu.nvidia.com'].productName=='NVIDIA A100'"#, Some("NVIDIA A100")),
            (r#"device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0"#, None),
            (r#"device.attributes["gpu.nvidia.com"].productName != "x""#, None),
            (r#"productName == "unterminated"#, None),
        ];
        for (cel, want) in cases {
            assert_eq!(product_in_cel(cel).as_deref(), want, "{cel}");
        }
    }
}
