//! Per-workload reads: the list, and one workload's forecast, plan and
//! history. Everything but history comes from the published snapshot (no
//! computing on the request path); history is read from the store.

use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use axum::{
    extract::{Path, Query, State},
    Json,
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{problem::Problem, ApiState};
use crate::{
    capacity::{PoolPlan, WorkloadPlan},
    serve::state::{Snapshot, WorkloadState},
    sizing::{predictive::Binding, Policy},
    sources::Signal,
    time::rfc3339,
    workload::series,
    workload::workload_key,
};

/// Longest history one request may read.
const MAX_HISTORY: Duration = Duration::from_secs(35 * 86_400);

#[derive(Serialize, ToSchema)]
pub(crate) struct WorkloadList {
    pub(crate) workloads: Vec<WorkloadState>,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct NamespaceQuery {
    /// Needed only when the name is configured in more than one namespace.
    pub(crate) namespace: Option<String>,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ForecastQuery {
    pub(crate) namespace: Option<String>,
    /// The workload's target signal (the one forecast); default: it.
    pub(crate) signal: Option<String>,
    /// How far ahead, e.g. `5m`, `300s` or `300`; default: all the forecast has.
    pub(crate) horizon: Option<String>,
    /// Comma-separated quantiles among the configured ones, e.g. `0.5,0.9`; default: all.
    pub(crate) quantiles: Option<String>,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct HistoryQuery {
    pub(crate) namespace: Option<String>,
    /// A recorded signal; default: the target signal.
    pub(crate) signal: Option<String>,
    /// How far back, e.g. `1h`, `3600s` or `3600`; default 1 h, at most 35 days.
    pub(crate) since: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub(crate) struct ForecastPoint {
    pub(crate) time: String,
    /// The point forecast.
    pub(crate) value: f64,
    /// Quantile (as written in config, e.g. `"0.9"`) -> value.
    pub(crate) quantiles: BTreeMap<String, f64>,
}

#[derive(Serialize, ToSchema)]
pub(crate) struct ForecastResponse {
    pub(crate) namespace: String,
    pub(crate) workload: String,
    pub(crate) signal: Signal,
    /// The model the backtest chose (or `ensemble(a+b)`).
    pub(crate) model: String,
    pub(crate) regime: crate::forecast::Regime,
    /// Backtest MASE of the chosen model; null when the history was too short to backtest.
    pub(crate) backtest_mase: Option<f64>,
    /// Every candidate's backtest MASE, the chosen one first, then best first.
    pub(crate) candidates: Vec<(String, f64)>,
    pub(crate) fitted_at: String,
    pub(crate) step_secs: i64,
    pub(crate) points: Vec<ForecastPoint>,
}

#[derive(Serialize, ToSchema)]
pub(crate) struct HistoryPoint {
    pub(crate) time: String,
    /// Null where nothing was recorded.
    pub(crate) value: Option<f64>,
}

#[derive(Serialize, ToSchema)]
pub(crate) struct HistoryResponse {
    pub(crate) namespace: String,
    pub(crate) workload: String,
    pub(crate) signal: Signal,
    pub(crate) step_secs: f64,
    pub(crate) points: Vec<HistoryPoint>,
}

#[derive(Serialize, ToSchema)]
pub(crate) struct ReplicaPoint {
    pub(crate) time: String,
    pub(crate) replicas: u32,
}

#[derive(Serialize, ToSchema)]
pub(crate) struct PlanResponse {
    pub(crate) namespace: String,
    pub(crate) workload: String,
    /// `active`, or `shadow` (KEDA gets the reactive answer; the plan shows the predictive one).
    pub(crate) mode: String,
    pub(crate) policy: Option<Policy>,
    /// What KEDA is told now.
    pub(crate) desired_replicas: Option<u32>,
    pub(crate) reason: Option<String>,
    pub(crate) binding: Option<Binding>,
    pub(crate) step_secs: f64,
    /// Replicas needed over the look-ahead, from the decision's time.
    pub(crate) replicas: Vec<ReplicaPoint>,
    /// Where the node plan puts the replicas (with `pools` configured).
    pub(crate) placement: Option<WorkloadPlan>,
    /// The pools it is placed in, with their warm nodes and reasons.
    pub(crate) pools: Vec<PoolPlan>,
}

/// The workload `name`, disambiguated by `namespace` when given.
fn find(snap: &Snapshot, name: &str, namespace: Option<&str>) -> Result<Arc<WorkloadState>, Problem> {
    if let Some(ns) = namespace {
        return snap
            .get(&workload_key(ns, name))
            .cloned()
            .ok_or_else(|| Problem::not_found(format!("no workload `{name}` in namespace `{ns}`")));
    }
    match snap.namespaces_of(name) {
        [] => {
            let known: Vec<String> = snap.workloads().iter().map(|w| workload_key(&w.namespace, &w.name)).collect();
            Err(Problem::not_found(format!("unknown workload `{name}`; known: {}", known.join(", "))))
        }
        [ns] => snap.get(&workload_key(ns, name)).cloned().ok_or_else(|| Problem::not_found("workload removed")),
        many => Err(Problem::bad_request(format!(
            "workload `{name}` is configured in namespaces {}; add ?namespace=",
            many.join(", ")
        ))),
    }
}

fn parse_signal(s: Option<&str>, default: Signal) -> Result<Signal, Problem> {
    let Some(s) = s else { return Ok(default) };
    serde_json::from_value(serde_json::Value::String(s.to_string())).map_err(|_| {
        let known: Vec<&str> = Signal::ALL.iter().map(|s| s.as_str()).collect();
        Problem::bad_request(format!("unknown signal `{s}`; signals: {}", known.join(", ")))
    })
}

/// `5m`, `300s` or a plain number of seconds; positive and finite.
fn parse_duration(field: &str, s: &str) -> Result<Duration, Problem> {
    let d = match s.trim().parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs > 0.0 && secs < 1e9 => Ok(Duration::from_secs_f64(secs)),
        Ok(_) => Err(()),
        Err(_) => humantime::parse_duration(s.trim()).map_err(|_| ()),
    };
    match d {
        Ok(d) if !d.is_zero() => Ok(d),
        _ => Err(Problem::bad_request(format!("{field} `{s}` is not a positive duration such as 15m, 900s or 900"))),
    }
}

fn at(secs: f64) -> String {
    rfc3339(UNIX_EPOCH + Duration::from_secs_f64(secs.max(0.0)))
}

/// Every workload with its signals, decision, forecast and placement.
#[utoipa::path(get, path = "/api/v1/workloads", tag = "workloads",
    responses((status = 200, body = WorkloadList)))]
pub(crate) async fn list(State(s): State<ApiState>) -> Json<WorkloadList> {
    let snap = s.registry.load();
    Json(WorkloadList { workloads: snap.workloads().into_iter().map(|w| w.as_ref().clone()).collect() })
}

/// The latest forecast of the workload's target signal.
#[utoipa::path(get, path = "/api/v1/workloads/{name}/forecast", tag = "workloads",
    params(("name" = String, Path, description = "Workload name"), ForecastQuery),
    responses((status = 200, body = ForecastResponse),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json")))]
pub(crate) async fn forecast(
    State(s): State<ApiState>,
    Path(name): Path<String>,
    Query(q): Query<ForecastQuery>,
) -> Result<Json<ForecastResponse>, Problem> {
    let snap = s.registry.load();
    let w = find(&snap, &name, q.namespace.as_deref())?;
    let signal = parse_signal(q.signal.as_deref(), w.signal)?;
    if signal != w.signal {
        return Err(Problem::bad_request(format!(
            "only the target signal `{}` of `{name}` is forecast, not `{signal}`",
            w.signal
        )));
    }
    let Some(f) = w.forecast.as_ref() else {
        let why = w
            .forecast_error
            .as_ref()
            .map_or_else(|| "the first refit has not finished".to_string(), ToString::to_string);
        return Err(Problem::not_found(format!("no forecast for `{name}` yet: {why}")));
    };
    let step = f.step_secs.max(1);
    let available = f.point.len() as i64 * step;
    let steps = match q.horizon.as_deref() {
        None => f.point.len(),
        Some(h) => {
            let d = parse_duration("horizon", h)?;
            if d.as_secs_f64() > available as f64 {
                return Err(Problem::bad_request(format!(
                    "horizon {h} is beyond the forecast's {available} s (the cold start plus the refit interval)"
                )));
            }
            ((d.as_secs_f64() / step as f64).ceil() as usize).clamp(1, f.point.len())
        }
    };
    let quantiles: Vec<&crate::forecast::QuantileForecast> = match q.quantiles.as_deref() {
        None => f.quantiles.iter().collect(),
        Some(list) => list
            .split(',')
            .map(|x| {
                let v: f64 =
                    x.trim().parse().map_err(|_| Problem::bad_request(format!("quantile `{x}` is not a number")))?;
                f.quantiles.iter().find(|fq| (fq.quantile - v).abs() < 1e-9).ok_or_else(|| {
                    let have: Vec<String> = f.quantiles.iter().map(|fq| fq.quantile.to_string()).collect();
                    Problem::bad_request(format!(
                        "quantile {v} is not forecast; forecast.quantiles: {}",
                        have.join(", ")
                    ))
                })
            })
            .collect::<Result<_, _>>()?,
    };
    let points = (0..steps)
        .map(|k| ForecastPoint {
            time: at((f.start_unix + k as i64 * step) as f64),
            value: f.point[k],
            quantiles: quantiles.iter().map(|fq| (fq.quantile.to_string(), fq.values[k])).collect(),
        })
        .collect();
    Ok(Json(ForecastResponse {
        namespace: w.namespace.clone(),
        workload: w.name.clone(),
        signal,
        model: f.model.clone(),
        regime: f.regime,
        backtest_mase: f.backtest_mase,
        candidates: f.candidates.clone(),
        fitted_at: f.fitted_at.clone(),
        step_secs: step,
        points,
    }))
}

/// Replicas over the look-ahead and where the node plan puts them, with reasons.
#[utoipa::path(get, path = "/api/v1/workloads/{name}/plan", tag = "workloads",
    params(("name" = String, Path, description = "Workload name"), NamespaceQuery),
    responses((status = 200, body = PlanResponse),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json")))]
pub(crate) async fn plan(
    State(s): State<ApiState>,
    Path(name): Path<String>,
    Query(q): Query<NamespaceQuery>,
) -> Result<Json<PlanResponse>, Problem> {
    let snap = s.registry.load();
    let w = find(&snap, &name, q.namespace.as_deref())?;
    let reported = w.shadow.as_ref().or(w.decision.as_ref());
    let t0 = w.decided_at.and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map_or(0.0, |d| d.as_secs_f64());
    let (step, replicas) = match reported {
        Some(d) => match d.sizing.as_ref().filter(|s| !s.timeline.is_empty()) {
            Some(sz) => (sz.step_secs, sz.timeline.clone()),
            None => (0.0, vec![d.desired_replicas]),
        },
        None => (0.0, Vec::new()),
    };
    let placed: Vec<&str> =
        w.placement.iter().flat_map(|p| p.placement.iter().map(|(pool, _)| pool.as_str())).collect();
    let pools = snap
        .plan
        .as_ref()
        .map(|p| p.pools.iter().filter(|pp| placed.contains(&pp.name.as_str())).cloned().collect())
        .unwrap_or_default();
    Ok(Json(PlanResponse {
        namespace: w.namespace.clone(),
        workload: w.name.clone(),
        mode: if w.shadow.is_some() { "shadow" } else { "active" }.into(),
        policy: reported.map(|d| d.policy),
        desired_replicas: w.decision.as_ref().map(|d| d.desired_replicas),
        reason: reported.map(|d| d.reason.clone()),
        binding: reported.and_then(|d| d.binding),
        step_secs: step,
        replicas: replicas
            .iter()
            .enumerate()
            .map(|(k, r)| ReplicaPoint { time: at(t0 + k as f64 * step), replicas: *r })
            .collect(),
        placement: w.placement.clone(),
        pools,
    }))
}

/// Recorded values of one signal, at the store's resolution.
#[utoipa::path(get, path = "/api/v1/workloads/{name}/history", tag = "workloads",
    params(("name" = String, Path, description = "Workload name"), HistoryQuery),
    responses((status = 200, body = HistoryResponse),
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json")))]
pub(crate) async fn history(
    State(s): State<ApiState>,
    Path(name): Path<String>,
    Query(q): Query<HistoryQuery>,
) -> Result<Json<HistoryResponse>, Problem> {
    let snap = s.registry.load();
    let w = find(&snap, &name, q.namespace.as_deref())?;
    let signal = parse_signal(q.signal.as_deref(), w.signal)?;
    if !w.signals.contains_key(&signal) && signal != w.signal {
        // Not an error in the data, but almost always a wrong name: say which are recorded.
        let recorded: Vec<&str> = w.signals.keys().map(|s| s.as_str()).collect();
        return Err(Problem::not_found(format!(
            "`{name}` has no `{signal}` reading; recorded: {}",
            recorded.join(", ")
        )));
    }
    let since = match q.since.as_deref() {
        None => Duration::from_secs(3600),
        Some(v) => parse_duration("since", v)?,
    };
    if since > MAX_HISTORY {
        return Err(Problem::bad_request(format!("since {} s is beyond the 35-day limit", since.as_secs())));
    }
    let store = s.store.clone();
    let key = series(&workload_key(&w.namespace, &w.name), signal);
    let now = SystemTime::now();
    let from = now.checked_sub(since).unwrap_or(UNIX_EPOCH);
    let range = tokio::task::spawn_blocking(move || store.range(&key, from, now))
        .await
        .map_err(|_| Problem::new(axum::http::StatusCode::INTERNAL_SERVER_ERROR, "history read panicked"))?
        .map_err(|e| Problem::new(axum::http::StatusCode::SERVICE_UNAVAILABLE, format!("reading history: {e}")))?;
    let start = range.start.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
    let step = range.step.as_secs_f64();
    Ok(Json(HistoryResponse {
        namespace: w.namespace.clone(),
        workload: w.name.clone(),
        signal,
        step_secs: step,
        points: range
            .values
            .iter()
            .enumerate()
            .map(|(i, v)| HistoryPoint { time: at(start + i as f64 * step), value: v.is_finite().then_some(*v) })
            .collect(),
    }))
}

/// The shape Foresight derived for the workload, which object each part came
/// from, which pools can host it and why the others cannot, and its pending pods.
#[utoipa::path(get, path = "/api/v1/workloads/{name}/explain", tag = "workloads",
    params(("name" = String, Path, description = "Workload name"), NamespaceQuery),
    responses((status = 200, body = crate::cluster::Explanation),
              (status = 404, description = "No such workload", body = Problem, content_type = "application/problem+json")))]
pub(crate) async fn explain(
    State(s): State<ApiState>,
    Path(name): Path<String>,
    Query(q): Query<NamespaceQuery>,
) -> Result<Json<crate::cluster::Explanation>, Problem> {
    let snap = s.registry.load();
    let w = find(&snap, &name, q.namespace.as_deref())?;
    let key = workload_key(&w.namespace, &w.name);
    let config =
        snap.config(&key).ok_or_else(|| Problem::not_found(format!("workload `{key}` has no published config yet")))?;
    let pools: Vec<crate::capacity::Pool> = snap.pools().iter().map(|p| p.config.clone()).collect();
    Ok(Json(crate::cluster::explain(config, snap.cluster.as_deref(), &pools, w.placement.as_ref())))
}
