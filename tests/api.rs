//! The HTTP routes, served without a port through `tower::ServiceExt::oneshot`:
//! every endpoint, its errors, and every response checked against the
//! OpenAPI document the server itself serves.

use crate::common;

use std::{
    path::Path,
    sync::Arc,
    time::{SystemTime, UNIX_EPOCH},
};

use axum::{
    body::Body,
    http::{Request, StatusCode},
};
use foresight::{
    api,
    config::Settings,
    serve::{engine::Engine, state::Registry},
    store::Store,
};
use serde_json::Value;
use tower::ServiceExt;

async fn get(app: &axum::Router, path: &str) -> (StatusCode, String) {
    let (status, _, body) = get_full(app, path).await;
    (status, body)
}

async fn get_full(app: &axum::Router, path: &str) -> (StatusCode, String, String) {
    let res = app.clone().oneshot(Request::get(path).body(Body::empty()).unwrap()).await.unwrap();
    let status = res.status();
    let ct = res.headers().get("content-type").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    let body = axum::body::to_bytes(res.into_body(), 16 << 20).await.unwrap();
    (status, ct, String::from_utf8(body.to_vec()).unwrap())
}

fn known() -> (Settings, Arc<Registry>, Arc<Store>) {
    let settings = Settings::from_yaml(&common::known_answers(), "test", Path::new(".")).unwrap();
    (settings, Registry::new(), common::store_with_known_readings())
}

#[tokio::test]
async fn readiness_waits_for_the_first_decisions() {
    let (settings, registry, store) = known();
    let app = api::router(registry.clone(), store.clone());
    assert_eq!(get(&app, "/healthz").await.0, StatusCode::OK);
    assert_eq!(get(&app, "/readyz").await.0, StatusCode::SERVICE_UNAVAILABLE);
    Engine::new(&settings, registry.clone(), store).tick(SystemTime::now());
    let (status, body) = get(&app, "/readyz").await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("3 workloads still waiting for their first forecast"), "{body}");
}

#[tokio::test]
async fn workloads_lists_every_decision_with_its_reason() {
    let (settings, registry, store) = known();
    Engine::new(&settings, registry.clone(), store.clone()).tick(SystemTime::now());
    let (status, body) = get(&api::router(registry, store), "/api/v1/workloads").await;
    assert_eq!(status, StatusCode::OK);
    let v: Value = serde_json::from_str(&body).unwrap();
    let list = v["workloads"].as_array().unwrap();
    let names: Vec<&str> = list.iter().map(|w| w["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["fractional", "idle", "llama-8b"]);
    let llama = &list[2];
    assert_eq!(llama["decision"]["desired_replicas"], 4);
    assert_eq!(llama["decision"]["policy"], "reactive");
    // Predictive by default; before the first forecast, the reactive answer says why.
    assert_eq!(llama["decision"]["reason"], "reactive: ceil(100.000 / 32) = 4 replicas (no forecast: no forecast yet)");
    assert_eq!(llama["metrics"]["replicas"], "foresight-llama-8b-replicas");
    let at = llama["decided_at"].as_str().unwrap();
    assert!(chrono::DateTime::parse_from_rfc3339(at).is_ok(), "{at}");
}

use crate::common::{forecast_ready, KEY};

/// The response schema the OpenAPI document gives for `path` and `status`,
/// with the document's components so its `$ref`s resolve.
fn schema_for(doc: &Value, path: &str, status: u16) -> Value {
    let content = &doc["paths"][path]["get"]["responses"][status.to_string()]["content"];
    let schema = content.as_object().and_then(|c| c.values().next()).map(|m| m["schema"].clone());
    let schema = schema.unwrap_or_else(|| panic!("no {status} response schema for {path}"));
    serde_json::json!({ "allOf": [schema], "components": doc["components"] })
}

fn assert_matches(doc: &Value, path: &str, status: u16, body: &str) {
    let instance: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{path}: not JSON ({e}): {body}"));
    let validator = jsonschema::validator_for(&schema_for(doc, path, status)).unwrap();
    let errors: Vec<String> =
        validator.iter_errors(&instance).map(|e| format!("{} at {}", e, e.instance_path())).collect();
    assert!(errors.is_empty(), "{path} {status} does not match the OpenAPI document:\n{}", errors.join("\n"));
}

#[tokio::test]
async fn every_endpoint_answers_as_its_openapi_document_says() {
    let (registry, store, _engine, _) = forecast_ready(|y| y);
    let app = api::router(registry, store);
    let (status, body) = get(&app, "/api/v1/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let cases = [
        ("/api/v1/workloads", "/api/v1/workloads", 200),
        ("/api/v1/workloads/llama-8b/forecast", "/api/v1/workloads/{name}/forecast", 200),
        ("/api/v1/workloads/llama-8b/forecast?horizon=5m&quantiles=0.9", "/api/v1/workloads/{name}/forecast", 200),
        ("/api/v1/workloads/llama-8b/plan", "/api/v1/workloads/{name}/plan", 200),
        ("/api/v1/workloads/llama-8b/history?since=2h", "/api/v1/workloads/{name}/history", 200),
        ("/api/v1/pools", "/api/v1/pools", 200),
        ("/api/v1/plan", "/api/v1/plan", 200),
        ("/api/v1/workloads/nope/plan", "/api/v1/workloads/{name}/plan", 404),
        ("/api/v1/workloads/llama-8b/forecast?horizon=soon", "/api/v1/workloads/{name}/forecast", 400),
        ("/api/v1/workloads/idle/forecast", "/api/v1/workloads/{name}/forecast", 404),
    ];
    let paths = doc["paths"].as_object().unwrap();
    for (url, path, want) in cases {
        assert!(paths.contains_key(path), "{path} is not documented");
        let (status, ct, body) = get_full(&app, url).await;
        assert_eq!(status.as_u16(), want, "{url}: {body}");
        if want >= 400 {
            assert_eq!(ct, "application/problem+json", "{url}");
        }
        assert_matches(&doc, path, want, &body);
    }
}

#[tokio::test]
async fn forecast_plan_and_history_carry_what_the_engine_decided() {
    let (registry, store, _engine, now) = forecast_ready(|y| y);
    let app = api::router(registry.clone(), store);
    let snap = registry.load();
    let state = snap.get(KEY).unwrap();
    let f = state.forecast.as_ref().unwrap();

    let (_, body) = get(&app, "/api/v1/workloads/llama-8b/forecast?horizon=5m&quantiles=0.9").await;
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["model"], f.model.as_str());
    assert_eq!(v["signal"], "concurrency");
    let points = v["points"].as_array().unwrap();
    assert_eq!(points.len(), 5, "5 one-minute steps");
    assert_eq!(points[0]["time"], f.start.as_str());
    assert_eq!(points[2]["value"].as_f64().unwrap(), f.point[2]);
    let p90 = &f.quantiles.iter().find(|q| q.quantile == 0.9).unwrap().values;
    assert_eq!(points[4]["quantiles"]["0.9"].as_f64().unwrap(), p90[4]);
    assert!(points[0]["quantiles"].get("0.5").is_none(), "only the quantiles asked for");

    let (_, body) = get(&app, "/api/v1/workloads/llama-8b/plan?namespace=inference").await;
    let v: Value = serde_json::from_str(&body).unwrap();
    let d = state.decision.as_ref().unwrap();
    assert_eq!(v["policy"], "predictive");
    assert_eq!(v["mode"], "active");
    assert_eq!(v["desired_replicas"], d.desired_replicas);
    assert_eq!(v["reason"], d.reason.as_str());
    let timeline = &d.sizing.as_ref().unwrap().timeline;
    let replicas: Vec<u64> =
        v["replicas"].as_array().unwrap().iter().map(|p| p["replicas"].as_u64().unwrap()).collect();
    assert_eq!(replicas, timeline.iter().map(|r| u64::from(*r)).collect::<Vec<_>>());
    assert_eq!(v["placement"]["placement"][0][0], "h100-reserved", "the paid reservation first");
    assert_eq!(v["pools"][0]["name"], "h100-reserved");

    let (_, body) = get(&app, "/api/v1/workloads/llama-8b/history?since=30m").await;
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["step_secs"], 60.0);
    let pts = v["points"].as_array().unwrap();
    let known: Vec<&Value> = pts.iter().filter(|p| !p["value"].is_null()).collect();
    assert!(!known.is_empty() && known.len() <= 31, "{} points", known.len());
    // The backfilled history ends a minute before `now`.
    let last = known.last().unwrap();
    let t = chrono::DateTime::parse_from_rfc3339(last["time"].as_str().unwrap()).unwrap().timestamp();
    assert_eq!(t, now.duration_since(UNIX_EPOCH).unwrap().as_secs() as i64 - 60);
}

#[tokio::test]
async fn bad_requests_get_problem_details_with_the_right_status() {
    let (registry, store, _engine, _) = forecast_ready(|y| y);
    let app = api::router(registry, store);
    let cases = [
        ("/api/v1/workloads/llama-70b/forecast", 404, "unknown workload `llama-70b`; known: inference/fractional"),
        ("/api/v1/workloads/llama-8b/plan?namespace=default", 404, "no workload `llama-8b` in namespace `default`"),
        ("/api/v1/workloads/llama-8b/forecast?horizon=soon", 400, "horizon `soon` is not a positive duration"),
        ("/api/v1/workloads/llama-8b/forecast?horizon=0", 400, "horizon `0` is not a positive duration"),
        ("/api/v1/workloads/llama-8b/forecast?horizon=3h", 400, "horizon 3h is beyond the forecast's 1080 s"),
        (
            "/api/v1/workloads/llama-8b/forecast?quantiles=0.99",
            400,
            "quantile 0.99 is not forecast; forecast.quantiles: 0.5, 0.9",
        ),
        ("/api/v1/workloads/llama-8b/forecast?quantiles=high", 400, "quantile `high` is not a number"),
        ("/api/v1/workloads/llama-8b/forecast?signal=tokens", 400, "unknown signal `tokens`; signals: concurrency"),
        ("/api/v1/workloads/llama-8b/forecast?signal=queue_depth", 400, "only the target signal `concurrency`"),
        ("/api/v1/workloads/llama-8b/history?since=90d", 400, "is beyond the 35-day limit"),
        ("/api/v1/workloads/llama-8b/history?signal=ttft_p99", 404, "has no `ttft_p99` reading; recorded: concurrency"),
        ("/api/v1/workloads/idle/forecast", 404, "no forecast for `idle` yet"),
        ("/api/v2/anything", 404, "no such route"),
    ];
    for (url, want, detail) in cases {
        let (status, ct, body) = get_full(&app, url).await;
        assert_eq!(status.as_u16(), want, "{url}: {body}");
        assert_eq!(ct, "application/problem+json", "{url}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["status"], want);
        assert!(v["detail"].as_str().unwrap().contains(detail), "{url}: want {detail:?} in {}", v["detail"]);
    }
    // No pools: no plan.
    let (settings, registry, store) = known();
    Engine::new(&settings, registry.clone(), store.clone()).tick(SystemTime::now());
    let (status, _, body) = get_full(&api::router(registry, store), "/api/v1/plan").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body.contains("no `pools` are configured"), "{body}");
}

#[tokio::test]
async fn metrics_expose_the_forecast_the_api_reports() {
    let (registry, store, _engine, _) = forecast_ready(|y| y);
    let app = api::router(registry.clone(), store);
    let (status, ct, text) = get_full(&app, "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    assert!(ct.starts_with("application/openmetrics-text"), "{ct}");
    assert!(text.ends_with("# EOF\n"));
    let snap = registry.load();
    let s = snap.get(KEY).unwrap();
    let d = s.decision.as_ref().unwrap();
    let line = |prefix: &str| {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
            .rsplit(' ')
            .next()
            .unwrap()
            .parse::<f64>()
            .unwrap()
    };
    let labels = r#"namespace="inference",workload="llama-8b""#;
    assert_eq!(line(&format!("foresight_desired_replicas{{{labels}}}")), f64::from(d.desired_replicas));
    assert_eq!(
        line(&format!("foresight_signal_value{{{labels},signal=\"concurrency\"}}")),
        s.signals.values().next().unwrap().value
    );
    assert_eq!(line(&format!("foresight_target_info{{{labels},signal=\"concurrency\"}}")), 1.0);
    assert!(text
        .contains(&format!("foresight_forecast{{{labels},signal=\"concurrency\",horizon=\"5m\",quantile=\"0.9\"}}")));
    assert!(text.contains(&format!("foresight_backtest_mase{{{labels},signal=\"concurrency\",model=")));
    assert!(text.contains("foresight_warm_nodes{pool=\"h100\"}"));
    // Health counters appear once something happened.
    foresight::telemetry::source_error(KEY);
    let (_, text) = get(&app, "/metrics").await;
    assert!(text.contains(r#"foresight_source_errors_total{namespace="inference",workload="llama-8b"} "#), "{text}");
}

#[tokio::test]
async fn shadow_mode_tells_keda_the_reactive_answer_and_reports_the_forecast() {
    let (registry, store, _engine, _) = forecast_ready(|y| {
        y.replacen("    target: {signal: concurrency}\n", "    target: {signal: concurrency}\n    shadow: true\n", 1)
    });
    let snap = registry.load();
    let s = snap.get(KEY).unwrap();
    let d = s.decision.as_ref().unwrap();
    let shadow = s.shadow.as_ref().expect("the predictive decision is reported");
    assert_eq!(d.policy, foresight::sizing::Policy::Reactive);
    assert!(d.reason.starts_with("shadow mode, KEDA gets the reactive answer: reactive:"), "{}", d.reason);
    assert_eq!(shadow.policy, foresight::sizing::Policy::Predictive);
    assert_eq!(Some(d.desired_replicas), s.reactive_replicas);
    let app = api::router(registry.clone(), store);
    let (_, body) = get(&app, "/api/v1/workloads/llama-8b/plan").await;
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["mode"], "shadow");
    assert_eq!(v["policy"], "predictive");
    assert_eq!(v["desired_replicas"], d.desired_replicas, "what KEDA is told");
    let (_, text) = get(&app, "/metrics").await;
    assert!(text.contains(r#"foresight_decision_info{namespace="inference",workload="llama-8b",policy="predictive","#));
    assert!(text.contains(r#"mode="shadow"} 1"#), "{text}");
}

/// The fast correction in `serve`: a p99 queue wait past the profile's
/// budget (vLLM's `request_queue_time_seconds`) raises what the predictive
/// policy sizes for at that tick, and the reason says so; waits within the
/// budget leave the answer alone.
#[tokio::test]
async fn queue_waits_past_the_budget_raise_the_answer_at_once() {
    let (registry, store, mut engine, now) = forecast_ready(|y| y);
    let decision = || registry.load().get(common::KEY).unwrap().decision.clone().unwrap();
    let (wait, conc) = (format!("{}/queue_wait_p99", common::KEY), format!("{}/concurrency", common::KEY));
    let load = store.latest(&conc).unwrap().0;
    let poll = |at: SystemTime, p99: f64, engine: &mut Engine| {
        store.set_latest(&conc, at, load);
        store.set_latest(&wait, at, p99);
        engine.tick(at);
    };
    let t = |s: u64| now + std::time::Duration::from_secs(s);
    poll(t(1), 0.05, &mut engine);
    let calm = decision();
    assert!(!calm.reason.contains("headroom"), "{}", calm.reason);
    // Three polls in which more than 1% waited 2 s: x1.2 each, at once.
    for s in 2..5 {
        poll(t(s), 2.0, &mut engine);
    }
    let raised = decision();
    assert!(raised.desired_replicas > calm.desired_replicas, "{} -> {}", calm.reason, raised.reason);
    assert!(raised.reason.contains("loads x1.73 headroom"), "{}", raised.reason);
}
