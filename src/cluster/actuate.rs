//! Writing the plan back: each pool's buffer nodes into its balloon
//! Deployment's or CapacityBuffer's `spec.replicas`. Off by default; in
//! dry-run the change is computed and reported, never sent. Uses `get` and
//! `patch` on exactly the objects config names (the actuation Role in
//! `deploy/k8s/rbac-actuation.yaml`).

use k8s_openapi::api::apps::v1::Deployment;
use kube::{
    api::{DynamicObject, Patch, PatchParams},
    Api, Client,
};
use serde::Serialize;

use super::client::{resource, timed};
use crate::capacity::Plan;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ActuationMode {
    Off,
    DryRun,
    Apply,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub enum ActuationKind {
    /// A Deployment of node-sized placeholder pods.
    Balloon,
    /// `autoscaling.x-k8s.io/v1beta1` CapacityBuffer.
    CapacityBuffer,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActuationTarget {
    pub kind: ActuationKind,
    pub pool: String,
    pub namespace: String,
    pub name: String,
}

impl ActuationTarget {
    pub(crate) fn object(&self) -> String {
        let kind = match self.kind {
            ActuationKind::Balloon => "Deployment",
            ActuationKind::CapacityBuffer => "CapacityBuffer",
        };
        format!("{kind} {}/{}", self.namespace, self.name)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Actuation {
    pub(crate) mode: ActuationMode,
    pub targets: Vec<ActuationTarget>,
}

/// What actuation did to one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// Already at the plan's count.
    Unchanged,
    /// Dry-run: a patch to the plan's count would be sent.
    WouldPatch,
    Patched,
    /// Not read or not written; `Change::error` says why.
    Failed,
}

impl Action {
    /// The name the API and logs use.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Unchanged => "unchanged",
            Action::WouldPatch => "would-patch",
            Action::Patched => "patched",
            Action::Failed => "failed",
        }
    }
}

/// One object's `spec.replicas`: what it is, what the plan wants, what was done.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Change {
    pub object: String,
    pub(crate) pool: String,
    pub(crate) field: String,
    pub current: Option<u32>,
    pub desired: Option<u32>,
    pub action: Action,
    pub(crate) error: Option<String>,
}

/// The plan's buffer nodes for a target's pool (`None`: the pool is not in the plan).
pub(crate) fn desired(plan: Option<&Plan>, target: &ActuationTarget) -> Option<u32> {
    plan?.pools.iter().find(|p| p.name == target.pool).map(|p| p.buffer_nodes)
}

/// Bring every target to the plan (or, in dry-run, say what would change).
pub async fn run(client: &Client, a: &Actuation, plan: Option<&Plan>, timeout: std::time::Duration) -> Vec<Change> {
    if a.mode == ActuationMode::Off {
        return Vec::new();
    }
    let mut out = Vec::new();
    for t in &a.targets {
        let mut c = Change {
            object: t.object(),
            pool: t.pool.clone(),
            field: "spec.replicas".into(),
            current: None,
            desired: desired(plan, t),
            action: Action::Failed,
            error: None,
        };
        let Some(want) = c.desired else {
            c.error = Some(match plan {
                None => "no plan made with this read of the cluster yet; nothing written".into(),
                Some(_) => {
                    format!("pool `{}` is not in the plan (not configured, or discovered without a price)", t.pool)
                }
            });
            out.push(c);
            continue;
        };
        let dyn_api: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            &t.namespace,
            &resource("autoscaling.x-k8s.io", "v1beta1", "CapacityBuffer", "capacitybuffers"),
        );
        let dep_api: Api<Deployment> = Api::namespaced(client.clone(), &t.namespace);
        let current = match t.kind {
            ActuationKind::Balloon => timed(timeout, dep_api.get(&t.name))
                .await
                .map(|d| d.spec.and_then(|s| s.replicas).unwrap_or(1).max(0) as u32),
            ActuationKind::CapacityBuffer => timed(timeout, dyn_api.get(&t.name))
                .await
                .map(|o| o.data.pointer("/spec/replicas").and_then(|v| v.as_u64()).unwrap_or(0) as u32),
        };
        match current {
            Err((_, e)) => c.error = Some(e),
            Ok(cur) => {
                c.current = Some(cur);
                if cur == want {
                    c.action = Action::Unchanged;
                } else if a.mode == ActuationMode::DryRun {
                    c.action = Action::WouldPatch;
                } else {
                    let patch = Patch::Merge(serde_json::json!({"spec": {"replicas": want}}));
                    let pp = PatchParams::default();
                    let res = match t.kind {
                        ActuationKind::Balloon => timed(timeout, dep_api.patch(&t.name, &pp, &patch)).await.map(|_| ()),
                        ActuationKind::CapacityBuffer => {
                            timed(timeout, dyn_api.patch(&t.name, &pp, &patch)).await.map(|_| ())
                        }
                    };
                    match res {
                        Ok(()) => c.action = Action::Patched,
                        Err((_, e)) => c.error = Some(e),
                    }
                }
            }
        }
        out.push(c);
    }
    out
}
