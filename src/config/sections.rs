//! Validation of the sections beside the workloads: `kubernetes:` (how the
//! cluster is read and written), `sizing:`, `pools:` and `reservations:`,
//! and the Kubernetes name rules the workloads share. Each check reports
//! every problem through `bad(field, why)`, as `validate` does.

use super::*;

/// Kubernetes inputs with every default (in-cluster config, else `$KUBECONFIG`).
pub(crate) fn default_kube_settings() -> KubeSettings {
    let raw: raw::RawKubernetes = serde_yaml_ng::from_str("{}").expect("every kubernetes field has a default");
    validate_kubernetes(Some(raw), Path::new("."), &mut |_, _| {}).expect("given Some")
}

pub(super) fn validate_kubernetes(
    raw: Option<raw::RawKubernetes>,
    base: &Path,
    bad: &mut impl FnMut(String, String),
) -> Option<KubeSettings> {
    use crate::cluster::{Actuation, ActuationKind, ActuationMode, ActuationTarget, GpuKeys, NodeKeys, PoolDefaults};
    let k = raw?;
    if !(1.0..=86_400.0).contains(&k.refresh_secs) {
        bad("kubernetes.refresh_secs".into(), format!("must be within 1..=86400, got {}", k.refresh_secs));
    }
    if !(0.1..=600.0).contains(&k.timeout_secs) {
        bad("kubernetes.timeout_secs".into(), format!("must be within 0.1..=600, got {}", k.timeout_secs));
    }
    let kubeconfig = k.kubeconfig.map(|p| base.join(p));
    if let Some(p) = kubeconfig.as_ref().filter(|p| !p.is_file()) {
        bad("kubernetes.kubeconfig".into(), format!("no such file: {}", p.display()));
    }
    if k.node_labels.pool.is_empty() {
        bad("kubernetes.node_labels.pool".into(), "must name at least one label".into());
    }
    let mut prices = BTreeMap::new();
    for (t, price) in &k.discovered_pools.price_per_node_hour {
        let ct = match t.as_str() {
            "reserved" => CapacityType::Reserved,
            "on-demand" => CapacityType::OnDemand,
            "spot" => CapacityType::Spot,
            other => {
                bad(
                    format!("kubernetes.discovered_pools.price_per_node_hour.{other}"),
                    "capacity type must be `reserved`, `on-demand` or `spot`".into(),
                );
                continue;
            }
        };
        if !(price.is_finite() && *price >= 0.0) {
            bad(
                format!("kubernetes.discovered_pools.price_per_node_hour.{t}"),
                format!("must be a finite number >= 0, got {price}"),
            );
        }
        prices.insert(ct, price.max(0.0));
    }
    let mode = match k.actuation.mode.as_deref().unwrap_or("off") {
        "off" => ActuationMode::Off,
        "dry-run" => ActuationMode::DryRun,
        "apply" => ActuationMode::Apply,
        other => {
            bad("kubernetes.actuation.mode".into(), format!("must be `off`, `dry-run` or `apply`, got `{other}`"));
            ActuationMode::Off
        }
    };
    let mut targets = Vec::new();
    let lists = [
        (ActuationKind::Balloon, "balloons", &k.actuation.balloons),
        (ActuationKind::CapacityBuffer, "capacity_buffers", &k.actuation.capacity_buffers),
    ];
    for (kind, field, list) in lists {
        for (i, t) in list.iter().enumerate() {
            // A pool not in config may be one discovered at run time; the actuation pass reports an unknown one.
            if t.name.is_empty() || t.namespace.is_empty() {
                bad(format!("kubernetes.actuation.{field}[{i}]"), "needs `namespace` and `name`".into());
            }
            targets.push(ActuationTarget {
                kind,
                pool: t.pool.clone(),
                namespace: t.namespace.clone(),
                name: t.name.clone(),
            });
        }
    }
    let mut seen = HashSet::new();
    for t in &targets {
        if !seen.insert(&t.pool) {
            bad(
                "kubernetes.actuation".into(),
                format!("pool `{}` has more than one balloon/CapacityBuffer target; use one per pool", t.pool),
            );
        }
    }
    Some(KubeSettings {
        kubeconfig,
        context: k.context,
        refresh: crate::time::secs_within(k.refresh_secs, 1.0, 86_400.0),
        timeout: crate::time::secs_within(k.timeout_secs, 0.1, 600.0),
        gpu: GpuKeys {
            resource: k.gpu.resource.clone(),
            device_classes: k.gpu.device_classes,
            nvlink_attributes: k.gpu.nvlink_domain_attributes.clone(),
            product_label: k.node_labels.gpu_product.clone(),
        },
        nodes: NodeKeys {
            pool_labels: k.node_labels.pool,
            capacity_type_label: k.node_labels.capacity_type,
            product_label: k.node_labels.gpu_product,
            count_label: k.node_labels.gpu_count,
            zone_label: k.node_labels.zone,
            rack_label: k.node_labels.rack,
            gpu_resource: k.gpu.resource,
            gpu_drivers: k.gpu.drivers,
            nvlink_attributes: k.gpu.nvlink_domain_attributes,
        },
        discovered_pools: PoolDefaults {
            price_per_node_hour: prices,
            provisioning_secs: k.discovered_pools.provisioning_secs.clamp(0.0, 86_400.0),
        },
        actuation: Actuation { mode, targets },
    })
}

pub(super) fn validate_sizing(
    raw: &raw::RawSizing,
    forecast: &ForecastSettings,
    bad: &mut impl FnMut(String, String),
) -> SizingSettings {
    let policy = match raw.policy.as_str() {
        "predictive" => Policy::Predictive,
        "reactive" => Policy::Reactive,
        other => {
            bad("sizing.policy".into(), format!("must be `predictive` or `reactive`, got `{other}`"));
            Policy::Reactive
        }
    };
    // Checked unless the policy is plainly reactive, so a typo'd policy still gets it.
    if raw.policy != "reactive" && !forecast.quantiles.iter().any(|q| (q - raw.quantile).abs() < 1e-9) {
        bad(
            "sizing.quantile".into(),
            format!("{} is not one of forecast.quantiles {:?}", raw.quantile, forecast.quantiles),
        );
    }
    let w = raw.scale_down_stabilization_secs;
    if !(0.0..=86_400.0).contains(&w) {
        bad("sizing.scale_down_stabilization_secs".into(), format!("must be within 0..=86400, got {w}"));
    }
    if !(1..=3600).contains(&raw.plan_step_secs) {
        bad("sizing.plan_step_secs".into(), format!("must be within 1..=3600, got {}", raw.plan_step_secs));
    }
    if !(0.0..=86_400.0).contains(&raw.forecast_only_secs) {
        bad("sizing.forecast_only_secs".into(), format!("must be within 0..=86400, got {}", raw.forecast_only_secs));
    }
    let mut spare = raw.spare_horizons_secs.clone();
    if spare.len() > 4 || spare.iter().any(|h| !(600..=86_400).contains(h)) {
        bad(
            "sizing.spare_horizons_secs".into(),
            format!("must list at most 4 lease lengths, each within 600..=86400, got {spare:?}"),
        );
        spare.retain(|h| (600..=86_400).contains(h));
        spare.truncate(4);
    }
    spare.sort_unstable();
    spare.dedup();
    SizingSettings {
        policy,
        quantile: raw.quantile,
        scale_down_stabilization: crate::time::secs_within(w, 0.0, 86_400.0),
        plan_step_secs: raw.plan_step_secs.clamp(1, 3600) as i64,
        forecast_only: crate::time::secs_within(raw.forecast_only_secs, 0.0, 86_400.0),
        learn_capacity: raw.learn_capacity,
        spare_horizons_secs: spare,
    }
}

pub(super) fn validate_pools(raw: &[raw::RawPool], bad: &mut impl FnMut(String, String)) -> Vec<Pool> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (i, p) in raw.iter().enumerate() {
        let at = |field: &str| format!("pools[{i}].{field}");
        if let Err(why) = check_k8s_name(&p.name, 63, false) {
            bad(at("name"), why);
        }
        if !seen.insert(p.name.as_str()) {
            bad(at("name"), format!("pool `{}` appears twice", p.name));
        }
        if p.gpu_type.trim().is_empty() {
            bad(at("gpu_type"), "must not be empty".into());
        }
        if p.gpus_per_node == 0 {
            bad(at("gpus_per_node"), "must be at least 1".into());
        }
        let domain = p.nvlink_domain_gpus.unwrap_or(p.gpus_per_node);
        if domain == 0 || (p.gpus_per_node > 0 && p.gpus_per_node % domain != 0) {
            bad(
                at("nvlink_domain_gpus"),
                format!("{domain} must be at least 1 and divide gpus_per_node {}", p.gpus_per_node),
            );
        }
        if p.nodes_per_rack == Some(0) {
            bad(at("nodes_per_rack"), "must be at least 1".into());
        }
        if p.max_nodes == Some(0) {
            bad(at("max_nodes"), "must be at least 1 (remove the pool to have none)".into());
        }
        let capacity_type = match p.capacity_type.as_str() {
            "reserved" => CapacityType::Reserved,
            "on-demand" => CapacityType::OnDemand,
            "spot" => CapacityType::Spot,
            other => {
                bad(at("capacity_type"), format!("must be `reserved`, `on-demand` or `spot`, got `{other}`"));
                CapacityType::OnDemand
            }
        };
        if !(p.price_per_node_hour.is_finite() && p.price_per_node_hour >= 0.0) {
            bad(at("price_per_node_hour"), format!("must be a finite number >= 0, got {}", p.price_per_node_hour));
        }
        if !(0.0..=86_400.0).contains(&p.provisioning_secs) {
            bad(at("provisioning_secs"), format!("must be within 0..=86400, got {}", p.provisioning_secs));
        }
        out.push(Pool {
            name: p.name.clone(),
            gpu_type: p.gpu_type.clone(),
            gpus_per_node: p.gpus_per_node.max(1),
            nvlink_domain_gpus: domain.max(1),
            nodes_per_rack: p.nodes_per_rack.filter(|n| *n > 0),
            capacity_type,
            price_per_node_hour: p.price_per_node_hour.max(0.0),
            provisioning_secs: p.provisioning_secs.clamp(0.0, 86_400.0),
            max_nodes: p.max_nodes,
            labels: p.labels.clone(),
            taints: p.taints.clone(),
        });
    }
    out
}

pub(super) fn validate_reservations(
    raw: &[raw::RawReservation],
    pools: &[Pool],
    bad: &mut impl FnMut(String, String),
) -> Vec<Reservation> {
    let mut out = Vec::new();
    for (i, r) in raw.iter().enumerate() {
        let at = |field: &str| format!("reservations[{i}].{field}");
        if !pools.iter().any(|p| p.name == r.pool) {
            let mut known: Vec<&str> = pools.iter().map(|p| p.name.as_str()).collect();
            known.sort_unstable();
            known.dedup();
            bad(at("pool"), format!("unknown pool `{}`; pools: {}", r.pool, known.join(", ")));
        }
        if r.nodes == 0 {
            bad(at("nodes"), "must be at least 1".into());
        }
        let mut time = |field: &str, v: &str| match chrono::DateTime::parse_from_rfc3339(v) {
            Ok(t) => Some(t.timestamp()),
            Err(e) => {
                bad(at(field), format!("`{v}` is not an RFC 3339 time (e.g. 2026-12-01T00:00:00Z): {e}"));
                None
            }
        };
        let (start, end) = (time("start", &r.start), time("end", &r.end));
        if let (Some(start), Some(end)) = (start, end) {
            if end <= start {
                bad(at("end"), format!("{} is not after start {}", r.end, r.start));
            }
            out.push(Reservation {
                name: r.name.clone(),
                pool: r.pool.clone(),
                nodes: r.nodes,
                start,
                end,
                paid: r.paid,
            });
        }
    }
    out
}

/// Kubernetes names: a DNS-1123 subdomain (object names, dots allowed) or
/// label (namespaces): lowercase alphanumerics and `-`, alphanumeric at both ends.
pub(super) fn check_k8s_name(s: &str, max_len: usize, dots: bool) -> Result<(), String> {
    let ok_chars = s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || (dots && b == b'.'));
    let ok_ends = s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && s.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric());
    if s.is_empty() || s.len() > max_len || !ok_chars || !ok_ends {
        let allowed = if dots { "`-` and `.`" } else { "and `-`" };
        return Err(format!(
            "`{s}` is not a valid Kubernetes name (at most {max_len} lowercase letters, digits {allowed}, starting and ending alphanumeric)"
        ));
    }
    Ok(())
}
