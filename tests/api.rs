//! The HTTP routes, served without a port through `tower::ServiceExt::oneshot`.

mod common;

use std::path::Path;

use axum::{
    body::Body,
    http::{Request, StatusCode},
};
use foresight::{api, config::Settings, engine::Engine, state::Registry};
use tower::ServiceExt;

async fn get(app: &axum::Router, path: &str) -> (StatusCode, String) {
    let res = app.clone().oneshot(Request::get(path).body(Body::empty()).unwrap()).await.unwrap();
    let status = res.status();
    let body = axum::body::to_bytes(res.into_body(), 1 << 20).await.unwrap();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

#[tokio::test]
async fn readiness_waits_for_the_first_decisions() {
    let settings = Settings::from_yaml(&common::known_answers(), "test", Path::new(".")).unwrap();
    let registry = Registry::new();
    let app = api::router(registry.clone());
    assert_eq!(get(&app, "/healthz").await.0, StatusCode::OK);
    assert_eq!(get(&app, "/readyz").await.0, StatusCode::SERVICE_UNAVAILABLE);
    Engine::new(&settings, registry.clone(), common::store_with_known_readings()).tick(std::time::SystemTime::now());
    assert_eq!(get(&app, "/readyz").await.0, StatusCode::OK);
}

#[tokio::test]
async fn workloads_lists_every_decision_with_its_reason() {
    let settings = Settings::from_yaml(&common::known_answers(), "test", Path::new(".")).unwrap();
    let registry = Registry::new();
    Engine::new(&settings, registry.clone(), common::store_with_known_readings()).tick(std::time::SystemTime::now());
    let (status, body) = get(&api::router(registry), "/api/v1/workloads").await;
    assert_eq!(status, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
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
