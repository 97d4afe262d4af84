//! The HTTP server: health and readiness for Kubernetes probes, and a JSON
//! view of what Foresight currently decides for each workload.

use std::sync::Arc;

use axum::{extract::State, http::StatusCode, response::IntoResponse, routing::get, Json, Router};
use serde::Serialize;

use crate::state::{PoolState, Registry, WorkloadState};

/// The HTTP routes, as a value (testable with `tower::ServiceExt::oneshot`).
pub fn router(registry: Arc<Registry>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/api/v1/workloads", get(workloads))
        .route("/api/v1/pools", get(pools))
        .route("/api/v1/plan", get(plan))
        .with_state(registry)
}

/// Ready once every workload has been decided at least once.
async fn readyz(State(registry): State<Arc<Registry>>) -> impl IntoResponse {
    if registry.load().ready {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready: some workloads have no decision yet\n")
    }
}

#[derive(Serialize)]
struct WorkloadList<'a> {
    workloads: Vec<&'a WorkloadState>,
}

async fn workloads(State(registry): State<Arc<Registry>>) -> Result<Json<serde_json::Value>, StatusCode> {
    let snap = registry.load();
    let list = WorkloadList { workloads: snap.workloads().into_iter().map(Arc::as_ref).collect() };
    serde_json::to_value(list).map(Json).map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)
}

#[derive(Serialize)]
struct PoolList<'a> {
    pools: Vec<&'a PoolState>,
}

/// Pools, their reservations, and the plan's use of them: the desired
/// CapacityBuffer / balloon count is `capacity_buffer_replicas`.
async fn pools(State(registry): State<Arc<Registry>>) -> Result<Json<serde_json::Value>, StatusCode> {
    let snap = registry.load();
    let list = PoolList { pools: snap.pools().into_iter().map(Arc::as_ref).collect() };
    serde_json::to_value(list).map(Json).map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)
}

/// The whole node plan: per pool and per workload, with reasons. 404 when no pools are configured.
async fn plan(State(registry): State<Arc<Registry>>) -> Result<Json<serde_json::Value>, (StatusCode, &'static str)> {
    let snap = registry.load();
    let plan = snap.plan.as_ref().ok_or((StatusCode::NOT_FOUND, "no node plan: no `pools` are configured\n"))?;
    serde_json::to_value(plan.as_ref())
        .map(Json)
        .map_err(|_| (StatusCode::INTERNAL_SERVER_ERROR, "could not encode the plan\n"))
}
