//! Reading the cluster with kube-rs: the only I/O of [`crate::cluster`].
//!
//! One [`read`] lists Nodes and ResourceSlices, and per workload finds the
//! ScaledObject whose external trigger names it, gets its scale target
//! (Deployment, StatefulSet or LeaderWorkerSet), the ResourceClaimTemplates
//! its pods claim from, and lists its pods. Only `get` and `list` are used
//! (the read-only ClusterRole in `deploy/k8s/rbac.yaml`). A failed read
//! becomes a message in the snapshot; the rest of the snapshot still counts.

use std::{collections::BTreeMap, future::Future, sync::Arc, time::Duration};

use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    core::v1::{Node, Pod, PodTemplateSpec},
    resource::v1::{ResourceClaimTemplate, ResourceSlice},
};
use kube::{
    api::{ApiResource, DynamicObject, GroupVersionKind, ListParams},
    config::{KubeConfigOptions, Kubeconfig},
    Api, Client, Config,
};
use serde_json::Value;

use super::KubeSettings;
use super::{shape::ReplicaCounts, Snapshot, Target, TargetKind, WorkloadObjects};
use crate::workload::Workload;

/// Why no client could be made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("reading kubeconfig {path}: {error}")]
    Kubeconfig { path: String, error: String },
    #[error("no Kubernetes configuration (not in a cluster, no $KUBECONFIG, no ~/.kube/config): {0}")]
    Infer(String),
    #[error("Kubernetes client: {0}")]
    Client(String),
}

/// A client from the settings: their kubeconfig, else in-cluster, else `$KUBECONFIG` / `~/.kube/config`.
pub async fn connect(k: &KubeSettings) -> Result<Client, ConnectError> {
    let mut config = match &k.kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .map_err(|e| ConnectError::Kubeconfig { path: path.display().to_string(), error: e.to_string() })?;
            let opts = KubeConfigOptions { context: k.context.clone(), ..Default::default() };
            Config::from_custom_kubeconfig(kc, &opts)
                .await
                .map_err(|e| ConnectError::Kubeconfig { path: path.display().to_string(), error: e.to_string() })?
        }
        None => Config::infer().await.map_err(|e| ConnectError::Infer(e.to_string()))?,
    };
    config.connect_timeout = Some(k.timeout);
    config.read_timeout = Some(k.timeout);
    Client::try_from(config).map_err(|e| ConnectError::Client(e.to_string()))
}

pub(crate) fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

fn scaled_objects() -> ApiResource {
    resource("keda.sh", "v1alpha1", "ScaledObject", "scaledobjects")
}

fn leader_worker_sets() -> ApiResource {
    resource("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet", "leaderworkersets")
}

/// A kube error as one line; `None` for 404 (the object or API does not exist).
pub(crate) fn describe(e: &kube::Error) -> (bool, String) {
    match e {
        kube::Error::Api(s) => (s.code == 404, format!("{} {}: {}", s.code, s.reason, s.message)),
        other => (false, other.to_string()),
    }
}

/// Run one request under the settings' timeout.
pub(crate) async fn timed<T>(
    timeout: Duration,
    f: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, (bool, String)> {
    match tokio::time::timeout(timeout, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(describe(&e)),
        Err(_) => Err((false, format!("no answer within {:.1} s", timeout.as_secs_f64()))),
    }
}

/// Read everything the workloads and pools need.
pub async fn read(client: &Client, workloads: &[Arc<Workload>], k: &KubeSettings, now: i64) -> Snapshot {
    let t = k.timeout;
    let mut snap = Snapshot { read_at: now, ..Snapshot::default() };
    match timed(t, Api::<Node>::all(client.clone()).list(&ListParams::default())).await {
        Ok(list) => snap.nodes = list.items,
        Err((_, e)) => snap.errors.push(format!("listing Nodes: {e}")),
    }
    match timed(t, Api::<ResourceSlice>::all(client.clone()).list(&ListParams::default())).await {
        Ok(list) => snap.slices = list.items,
        Err((true, _)) => snap.notes.push("resource.k8s.io/v1 ResourceSlices are not served (DRA off); GPU counts come from node labels and allocatable".into()),
        Err((false, e)) => snap.errors.push(format!("listing ResourceSlices: {e}")),
    }
    let mut scaled: BTreeMap<String, Result<Vec<DynamicObject>, (bool, String)>> = BTreeMap::new();
    for w in workloads {
        let ns = w.namespace.clone();
        if !scaled.contains_key(&ns) {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &scaled_objects());
            let got = timed(t, api.list(&ListParams::default())).await.map(|l| l.items);
            scaled.insert(ns.clone(), got);
        }
        let objs = read_workload(client, w, scaled.get(&ns).expect("inserted above"), k).await;
        snap.workloads.insert(w.key(), objs);
    }
    snap
}

/// The ScaledObject whose external trigger names `w`, and its scale target reference.
fn find_scaled_object(w: &Workload, items: &[DynamicObject]) -> Option<(String, String, String)> {
    for so in items {
        let spec = so.data.get("spec")?;
        let named = spec.get("triggers").and_then(Value::as_array).into_iter().flatten().any(|tr| {
            let ty = tr.get("type").and_then(Value::as_str).unwrap_or("");
            let md = tr.get("metadata");
            let get = |k: &str| md.and_then(|m| m.get(k)).and_then(Value::as_str);
            matches!(ty, "external" | "external-push")
                && get(crate::workload::KEY_WORKLOAD) == Some(w.name.as_str())
                && get(crate::workload::KEY_NAMESPACE).is_none_or(|n| n == w.namespace)
        });
        if !named {
            continue;
        }
        let r = spec.get("scaleTargetRef");
        let kind = r.and_then(|r| r.get("kind")).and_then(Value::as_str).unwrap_or("Deployment").to_string();
        let name = r.and_then(|r| r.get("name")).and_then(Value::as_str).unwrap_or_default().to_string();
        let so_name = format!("ScaledObject {}/{}", w.namespace, so.metadata.name.clone().unwrap_or_default());
        return Some((so_name, kind, name));
    }
    None
}

async fn read_workload(
    client: &Client,
    w: &Workload,
    scaled: &Result<Vec<DynamicObject>, (bool, String)>,
    k: &KubeSettings,
) -> WorkloadObjects {
    let t = k.timeout;
    let ns = &w.namespace;
    let mut out = WorkloadObjects {
        scaled_object: None,
        target: Err(String::new()),
        claim_templates: BTreeMap::new(),
        pods: Vec::new(),
    };
    let (kind, name) = match scaled {
        Ok(items) => match find_scaled_object(w, items) {
            Some((so, kind, name)) => {
                out.scaled_object = Some(so);
                (kind, name)
            }
            None => {
                out.target = Err(format!(
                    "no ScaledObject in namespace {ns} has an external trigger with metadata workload: {}",
                    w.name
                ));
                return out;
            }
        },
        Err((true, _)) => {
            out.target = Err("KEDA's ScaledObject API (keda.sh/v1alpha1) is not served".into());
            return out;
        }
        Err((false, e)) => {
            out.target = Err(format!("listing ScaledObjects in {ns}: {e}"));
            return out;
        }
    };
    let target = match TargetKind::parse(&kind) {
        None => Err(format!(
            "scale target kind `{kind}` is not one Foresight reads (Deployment, StatefulSet, LeaderWorkerSet)"
        )),
        Some(TargetKind::Deployment) => timed(t, Api::<Deployment>::namespaced(client.clone(), ns).get(&name))
            .await
            .map_err(|(_, e)| format!("Deployment {ns}/{name}: {e}"))
            .map(|d| {
                let (spec, st) = (d.spec.unwrap_or_default(), d.status.unwrap_or_default());
                let replicas = counts(spec.replicas, st.replicas, st.ready_replicas);
                one_pod_replicas(TargetKind::Deployment, ns, &name, spec.template, replicas, spec.selector.match_labels)
            }),
        Some(TargetKind::StatefulSet) => timed(t, Api::<StatefulSet>::namespaced(client.clone(), ns).get(&name))
            .await
            .map_err(|(_, e)| format!("StatefulSet {ns}/{name}: {e}"))
            .map(|s| {
                let (spec, st) = (s.spec.unwrap_or_default(), s.status.unwrap_or_default());
                let replicas = counts(spec.replicas, Some(st.replicas), st.ready_replicas);
                one_pod_replicas(
                    TargetKind::StatefulSet,
                    ns,
                    &name,
                    spec.template,
                    replicas,
                    spec.selector.match_labels,
                )
            }),
        Some(TargetKind::LeaderWorkerSet) => {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &leader_worker_sets());
            match timed(t, api.get(&name)).await {
                Ok(obj) => lws_target(&obj, ns, &name),
                Err((_, e)) => Err(format!("LeaderWorkerSet {ns}/{name}: {e}")),
            }
        }
    };
    let target = match target {
        Ok(t) => t,
        Err(e) => {
            out.target = Err(e);
            return out;
        }
    };
    let templates = [Some(&target.template), target.leader_template.as_ref()];
    let claimed: Vec<String> = templates
        .into_iter()
        .flatten()
        .filter_map(|t| t.spec.as_ref())
        .flat_map(|s| s.resource_claims.iter().flatten())
        .filter_map(|c| c.resource_claim_template_name.clone())
        .collect();
    for tname in claimed {
        if out.claim_templates.contains_key(&tname) {
            continue;
        }
        let api = Api::<ResourceClaimTemplate>::namespaced(client.clone(), ns);
        let got = timed(t, api.get(&tname)).await.map_err(|(_, e)| e);
        out.claim_templates.insert(tname, got);
    }
    if !target.pod_labels.is_empty() {
        let selector: Vec<String> = target.pod_labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let lp = ListParams::default().labels(&selector.join(","));
        match timed(t, Api::<Pod>::namespaced(client.clone(), ns).list(&lp)).await {
            Ok(list) => out.pods = list.items,
            Err((_, e)) => tracing::warn!(workload = %w.key(), error = %e, "listing pods"),
        }
    }
    out.target = Ok(target);
    out
}

/// A target whose replica is one pod (Deployment, StatefulSet).
fn one_pod_replicas(
    kind: TargetKind,
    ns: &str,
    name: &str,
    template: PodTemplateSpec,
    replicas: ReplicaCounts,
    pod_labels: Option<BTreeMap<String, String>>,
) -> Target {
    Target {
        kind,
        namespace: ns.to_string(),
        name: name.to_string(),
        template,
        leader_template: None,
        group_size: 1,
        group_topology: None,
        replicas,
        pod_labels: pod_labels.unwrap_or_default(),
    }
}

fn counts(desired: Option<i32>, current: Option<i32>, ready: Option<i32>) -> ReplicaCounts {
    let u = |v: Option<i32>| v.unwrap_or(0).max(0) as u32;
    ReplicaCounts { desired: u(desired.or(Some(1))), current: u(current), ready: u(ready) }
}

/// A LeaderWorkerSet (a CRD, read untyped): worker template, group size, exclusive topology.
fn lws_target(obj: &DynamicObject, ns: &str, name: &str) -> Result<Target, String> {
    let spec = obj.data.get("spec").ok_or_else(|| format!("LeaderWorkerSet {ns}/{name} has no spec"))?;
    let lwt = spec
        .get("leaderWorkerTemplate")
        .ok_or_else(|| format!("LeaderWorkerSet {ns}/{name} has no spec.leaderWorkerTemplate"))?;
    let parse = |v: Option<&Value>, field: &str| -> Result<Option<PodTemplateSpec>, String> {
        v.map(|v| {
            serde_json::from_value::<PodTemplateSpec>(v.clone())
                .map_err(|e| format!("LeaderWorkerSet {ns}/{name} {field}: {e}"))
        })
        .transpose()
    };
    let worker = parse(lwt.get("workerTemplate"), "spec.leaderWorkerTemplate.workerTemplate")?
        .ok_or_else(|| format!("LeaderWorkerSet {ns}/{name} has no workerTemplate"))?;
    let leader = parse(lwt.get("leaderTemplate"), "spec.leaderWorkerTemplate.leaderTemplate")?;
    let size = lwt.get("size").and_then(Value::as_u64).unwrap_or(1).clamp(1, 1024) as u32;
    let status = obj.data.get("status");
    let int = |v: Option<&Value>| v.and_then(Value::as_i64).map(|i| i as i32);
    Ok(Target {
        kind: TargetKind::LeaderWorkerSet,
        namespace: ns.to_string(),
        name: name.to_string(),
        template: worker,
        leader_template: leader,
        group_size: size,
        group_topology: obj
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("leaderworkerset.sigs.k8s.io/exclusive-topology"))
            .cloned(),
        replicas: counts(
            int(spec.get("replicas")),
            int(status.and_then(|s| s.get("replicas"))),
            int(status.and_then(|s| s.get("readyReplicas"))),
        ),
        pod_labels: [("leaderworkerset.sigs.k8s.io/name".to_string(), name.to_string())].into(),
    })
}
