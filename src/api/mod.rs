//! The HTTP server: health and readiness for Kubernetes probes, the JSON API
//! (workloads, forecasts, plans, history, pools), its OpenAPI document
//! (generated from these handlers, so it cannot drift), Prometheus
//! `/metrics`, and a small built-in page at `/ui`.
//!
//! Handlers read the published snapshot; only history reads the store.
//! Errors are `application/problem+json` ([`problem::Problem`]).

pub mod guard;
pub mod metrics;
pub(crate) mod problem;
mod ui;
pub(crate) mod workloads;

use std::sync::Arc;

use axum::{
    extract::State,
    http::{header, StatusCode},
    response::IntoResponse,
    routing::get,
    Json, Router,
};
use serde::Serialize;
use utoipa::{OpenApi, ToSchema};

use crate::{
    capacity::Plan,
    serve::state::{PoolState, Registry},
    store::Store,
};
use problem::Problem;

/// What handlers share.
#[derive(Clone)]
pub(crate) struct ApiState {
    pub(crate) registry: Arc<Registry>,
    pub(crate) store: Arc<Store>,
    metrics: Arc<metrics::Exposition>,
}

/// The OpenAPI document of the JSON API.
#[derive(OpenApi)]
#[openapi(
    info(title = "Foresight API", description = "Forecasts, replica and node plans, and why each decision was made."),
    paths(
        workloads::list,
        workloads::forecast,
        workloads::plan,
        workloads::history,
        workloads::explain,
        pools,
        spare,
        plan,
        cluster
    ),
    components(schemas(Problem))
)]
pub(crate) struct ApiDoc;

/// The HTTP routes, as a value (testable with `tower::ServiceExt::oneshot`).
pub fn router(registry: Arc<Registry>, store: Arc<Store>) -> Router {
    let state = ApiState { metrics: Arc::new(metrics::Exposition::new(registry.clone())), registry, store };
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics::serve))
        .route("/api/v1/openapi.json", get(|| async { Json(ApiDoc::openapi()) }))
        .route("/api/v1/workloads", get(workloads::list))
        .route("/api/v1/workloads/{name}/forecast", get(workloads::forecast))
        .route("/api/v1/workloads/{name}/plan", get(workloads::plan))
        .route("/api/v1/workloads/{name}/history", get(workloads::history))
        .route("/api/v1/workloads/{name}/explain", get(workloads::explain))
        .route("/api/v1/cluster", get(cluster))
        .route("/api/v1/pools", get(pools))
        .route("/api/v1/pools/{pool}/spare", get(spare))
        .route("/api/v1/plan", get(plan))
        .merge(ui::routes())
        .fallback(|| async { Problem::not_found("no such route; the API is described at /api/v1/openapi.json") })
        .with_state(state)
}

/// Ready once every workload has loaded its history, had its first
/// forecast fitted on it (or waited `forecast.first_fit_wait_secs` for it),
/// and been decided: KEDA reaches only ready pods, so a replica that has
/// just started does not answer what one running longer would not. Not
/// ready lists the workloads without an answer and why.
async fn readyz(State(s): State<ApiState>) -> impl IntoResponse {
    let snap = s.registry.load();
    let workloads = snap.workloads();
    let pending = workloads.iter().filter(|w| w.forecast.is_none() && w.forecast_error.is_none()).count();
    if snap.ready {
        return (StatusCode::OK, format!("ready; {pending} workloads still waiting for their first forecast\n"));
    }
    const LISTED: usize = 20;
    let waiting: Vec<_> = workloads.iter().filter(|w| w.decision.is_none()).collect();
    let mut body = format!("not ready: {} of {} workloads have no answer yet\n", waiting.len(), workloads.len());
    for w in waiting.iter().take(LISTED) {
        let why = w.error.as_ref().map_or_else(|| "not decided yet".to_string(), |e| e.to_string());
        body.push_str(&format!("  {}/{}: {why}\n", w.namespace, w.name));
    }
    if waiting.len() > LISTED {
        body.push_str(&format!("  ... and {} more (GET /api/v1/workloads)\n", waiting.len() - LISTED));
    }
    (StatusCode::SERVICE_UNAVAILABLE, body)
}

#[derive(Serialize, ToSchema)]
pub(crate) struct PoolList {
    pub(crate) pools: Vec<PoolState>,
}

/// Pools, their reservations, and the plan's use of them: the desired
/// CapacityBuffer / balloon count is `capacity_buffer_replicas`.
#[utoipa::path(get, path = "/api/v1/pools", tag = "capacity", responses((status = 200, body = PoolList)))]
pub(crate) async fn pools(State(s): State<ApiState>) -> Json<PoolList> {
    let snap = s.registry.load();
    Json(PoolList { pools: snap.pools().into_iter().map(|p| p.as_ref().clone()).collect() })
}

/// What a batch queue can lease from one pool: the reserved nodes the plan
/// over hours (the forecasts' sizing quantile) leaves idle throughout each
/// lease length in `sizing.spare_horizons_secs`.
#[utoipa::path(get, path = "/api/v1/pools/{pool}/spare", tag = "capacity",
    params(("pool" = String, Path, description = "A pool name")),
    responses((status = 200, body = crate::serve::state::PoolSpare),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "No such pool, or no spare forecast yet")))]
pub(crate) async fn spare(
    State(s): State<ApiState>,
    axum::extract::Path(pool): axum::extract::Path<String>,
) -> Result<impl IntoResponse, Problem> {
    let snap = s.registry.load();
    let p = snap.pool(&pool).ok_or_else(|| Problem::not_found(format!("no pool `{pool}` is configured")))?;
    let spare = p.spare.clone().ok_or_else(|| {
        Problem::not_found("no spare forecast: sizing.spare_horizons_secs is empty, or no plan has run yet")
    })?;
    Ok(([(header::CACHE_CONTROL, "no-store")], Json(spare)))
}

/// The whole node plan: per pool and per workload, with reasons.
#[utoipa::path(get, path = "/api/v1/plan", tag = "capacity",
    responses((status = 200, body = Plan),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "No pools are configured")))]
pub(crate) async fn plan(State(s): State<ApiState>) -> Result<impl IntoResponse, Problem> {
    let snap = s.registry.load();
    let plan = snap.plan.clone().ok_or_else(|| Problem::not_found("no node plan: no `pools` are configured"))?;
    Ok(([(header::CACHE_CONTROL, "no-store")], Json(plan.as_ref().clone())))
}

/// What the Kubernetes inputs last read: pools found on nodes, the pools
/// planned with, per-workload shapes, config/cluster disagreements, errors,
/// and the last actuation pass. 404 when Kubernetes inputs are off.
#[utoipa::path(get, path = "/api/v1/cluster", tag = "pools",
    responses((status = 200, body = crate::cluster::ClusterView),
              (status = 404, description = "Kubernetes inputs are off, or not read yet", body = Problem, content_type = "application/problem+json")))]
async fn cluster(State(s): State<ApiState>) -> Result<Json<Arc<crate::cluster::ClusterView>>, Problem> {
    s.registry.load().cluster.clone().map(Json).ok_or_else(|| {
        Problem::not_found("no cluster view: Kubernetes inputs are off (no `kubernetes:` in config) or the cluster has not been read yet")
    })
}
