//! Several Foresight replicas behind one address (KEDA round-robins across
//! the headless Service's pods) must give the same answer for the same
//! workload at the same time. They do by deterministic computation on shared
//! inputs: every replica reads the same pods or the same Prometheus, and the
//! forecast, sizing and plan are pure functions of that history and the
//! clock. Two real binaries side by side, and two engines on the same
//! history, show it. (The scale-down hold is the one piece of per-replica
//! memory; README "High availability" says how to run with it.)

use crate::common;

use std::{
    collections::HashMap,
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use crate::common::{Server, KEY};
use foresight::{
    config::Settings,
    proto::{external_scaler_client::ExternalScalerClient, GetMetricsRequest, ScaledObjectRef},
    serve::engine::Engine,
    serve::state::Registry,
    store::Store,
};

fn so(workload: &str, encoding: &str) -> ScaledObjectRef {
    let md: HashMap<String, String> =
        [("workload", workload), ("encoding", encoding)].iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    ScaledObjectRef { name: format!("{workload}-so"), namespace: "inference".into(), scaler_metadata: md }
}

#[tokio::test(flavor = "multi_thread")]
async fn two_replicas_side_by_side_answer_every_call_the_same() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let yaml = common::known_answers();
    let (a, b) = (Server::start(d1.path(), &yaml), Server::start(d2.path(), &yaml));
    let mut clients = Vec::new();
    for s in [&a, &b] {
        clients.push(ExternalScalerClient::connect(s.grpc_url()).await.unwrap());
    }
    for workload in ["llama-8b", "idle", "fractional"] {
        for encoding in ["replicas", "load"] {
            let mut answers = Vec::new();
            for c in clients.iter_mut() {
                let spec = c.get_metric_spec(so(workload, encoding)).await.unwrap().into_inner();
                let name = spec.metric_specs[0].metric_name.clone();
                let req = GetMetricsRequest { scaled_object_ref: Some(so(workload, encoding)), metric_name: name };
                let value = c.get_metrics(req).await.unwrap().into_inner().metric_values[0].metric_value_float;
                let active = c.is_active(so(workload, encoding)).await.unwrap().into_inner().result;
                answers.push((spec.metric_specs[0].clone(), value, active));
            }
            assert_eq!(answers[0], answers[1], "{workload}/{encoding}");
        }
    }
}

const DAY: f64 = 86_400.0;

/// An engine on its own store holding the same three days of history, forecast fitted, at `now`.
fn replica(now_secs: f64) -> (Engine, Arc<Registry>) {
    let settings = Settings::from_yaml(&common::known_answers(), "test", Path::new(".")).unwrap();
    let store = Arc::new(Store::open(Default::default()).unwrap());
    let registry = Registry::new();
    let demand = |t: f64| 100.0 + 60.0 * (2.0 * std::f64::consts::PI * t / DAY).sin() + 7.0 * (t / 3600.0).sin();
    let now = common::record_history(&store, &format!("{KEY}/concurrency"), now_secs, 3.0, demand);
    let mut engine = Engine::new(&settings, registry.clone(), store);
    let deadline = Instant::now() + Duration::from_secs(120);
    while !registry
        .load()
        .get(KEY)
        .is_some_and(|s| s.forecast.is_some() && s.decision.as_ref().is_some_and(|d| d.sizing.is_some()))
    {
        assert!(Instant::now() < deadline, "no forecast in time");
        engine.tick(now);
        std::thread::sleep(Duration::from_millis(50));
    }
    (engine, registry)
}

#[test]
fn forecasts_and_decisions_are_the_same_on_the_same_history_and_clock() {
    let now_secs = 1_800_000_000.0 - 0.4 * 3600.0;
    let (_a, ra) = replica(now_secs);
    let (_b, rb) = replica(now_secs);
    let (sa, sb) = (ra.load(), rb.load());
    let (wa, wb) = (sa.get(KEY).unwrap(), sb.get(KEY).unwrap());
    let (fa, fb) = (wa.forecast.as_ref().unwrap(), wb.forecast.as_ref().unwrap());
    assert_eq!(fa.model, fb.model);
    assert_eq!(fa.point, fb.point, "bit-for-bit the same point forecast");
    for (qa, qb) in fa.quantiles.iter().zip(&fb.quantiles) {
        assert_eq!(qa.values, qb.values);
    }
    let (da, db) = (wa.decision.as_ref().unwrap(), wb.decision.as_ref().unwrap());
    assert_eq!((da.desired_replicas, &da.reason), (db.desired_replicas, &db.reason));
    assert_eq!(sa.plan, sb.plan);
}
