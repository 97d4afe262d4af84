//! What happens when the target signal stops: a source down, hung past its
//! timeout, answering garbage (all of which leave no fresh reading; the
//! source tests show each is logged and counted), or a stale reading. For a
//! bounded time the last good forecast answers, never below the last
//! decision; then there is no answer, the scaler says UNAVAILABLE and KEDA's
//! `fallback` applies. GetMetricSpec answers throughout, and a metric says
//! which state each workload is in.

use crate::common;

use std::{collections::HashMap, sync::Arc, time::Duration};

use crate::common::KEY;
use foresight::{
    api::metrics::Exposition,
    proto::{external_scaler_client::ExternalScalerClient, GetMetricsRequest, ScaledObjectRef},
    scaler,
    serve::{
        outcome::{NoBridge, NoDecision},
        state::Registry,
    },
};
use tokio_util::sync::CancellationToken;

fn so() -> ScaledObjectRef {
    let md: HashMap<String, String> = [("workload".to_string(), "llama-8b".to_string())].into();
    ScaledObjectRef { name: "llama-8b".into(), namespace: "inference".into(), scaler_metadata: md }
}

async fn scaler(registry: Arc<Registry>) -> ExternalScalerClient<tonic::transport::Channel> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(scaler::serve(listener, None, registry, CancellationToken::new()));
    ExternalScalerClient::connect(format!("http://{addr}")).await.unwrap()
}

async fn replicas(c: &mut ExternalScalerClient<tonic::transport::Channel>) -> Result<f64, tonic::Code> {
    let req = GetMetricsRequest { scaled_object_ref: Some(so()), metric_name: "foresight-llama-8b-replicas".into() };
    c.get_metrics(req).await.map(|r| r.into_inner().metric_values[0].metric_value_float).map_err(|s| s.code())
}

async fn spec_answers(c: &mut ExternalScalerClient<tonic::transport::Channel>) -> bool {
    c.get_metric_spec(so()).await.is_ok_and(|r| !r.into_inner().metric_specs.is_empty())
}

fn metric_line<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    text.lines().filter(|l| l.starts_with(name) && l.contains("workload=\"llama-8b\"")).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stale_signal_is_bridged_by_the_forecast_then_kedas_fallback_applies() {
    let (registry, store, mut engine, now) =
        tokio::task::spawn_blocking(|| common::forecast_ready(|y| y)).await.unwrap();
    let mut c = scaler(registry.clone()).await;
    let metrics = Exposition::new(registry.clone());
    let live = registry.load().get(KEY).unwrap().decision.clone().unwrap();
    assert!(live.desired_replicas > 0 && !registry.load().get(KEY).unwrap().forecast_only);

    // The source goes quiet: 30 s on, the last reading is far past stale_after (0.6 s).
    let t = now + Duration::from_secs(30);
    engine.tick(t);
    let s = registry.load().get(KEY).unwrap().clone();
    assert!(s.forecast_only);
    let d = s.decision.clone().expect("the forecast answers");
    assert!(d.desired_replicas >= live.desired_replicas, "never below the last decision: {}", d.reason);
    assert!(d.reason.starts_with("forecast only: the target signal is 30 s old"), "{}", d.reason);
    assert_eq!(replicas(&mut c).await, Ok(f64::from(d.desired_replicas)));
    assert!(spec_answers(&mut c).await);
    let text = metrics.render();
    assert!(
        metric_line(&text, "foresight_decision_info").iter().any(|l| l.contains("mode=\"forecast_only\"")),
        "{text}"
    );
    assert!(metric_line(&text, "foresight_decision_unavailable").iter().any(|l| l
        .rsplit(' ')
        .next()
        .and_then(|v| v.parse::<f64>().ok())
        == Some(0.0)));

    // Still blind 10 minutes later: no answer, so KEDA's fallback replicas apply; the spec still answers.
    let t = now + Duration::from_secs(601);
    engine.tick(t);
    let s = registry.load().get(KEY).unwrap().clone();
    assert!(s.decision.is_none() && !s.forecast_only);
    assert!(matches!(s.error, Some(NoDecision::Stale { bridge: NoBridge::Expired { .. }, .. })), "{:?}", s.error);
    let why = s.error.clone().unwrap().to_string();
    assert!(why.contains("stale") && why.contains("past the 600 s a forecast may stand in for it"), "{why}");
    assert_eq!(replicas(&mut c).await, Err(tonic::Code::Unavailable), "no made-up number, and no zero");
    assert!(spec_answers(&mut c).await);
    let text = metrics.render();
    assert!(
        metric_line(&text, "foresight_decision_unavailable").iter().any(|l| l
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            == Some(1.0)),
        "{text}"
    );

    // The source comes back: live decisions again.
    let back = t + Duration::from_secs(1);
    store.set_latest(&format!("{KEY}/concurrency"), back, 100.0);
    engine.tick(back);
    let s = registry.load().get(KEY).unwrap().clone();
    assert!(s.decision.is_some() && !s.forecast_only && s.error.is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn with_no_bridge_or_no_forecast_a_stale_signal_gets_no_answer_at_once() {
    let edit = |y: String| y.replacen("workloads:", "sizing: {forecast_only_secs: 0}\nworkloads:", 1);
    let (registry, _store, mut engine, now) =
        tokio::task::spawn_blocking(move || common::forecast_ready(edit)).await.unwrap();
    engine.tick(now + Duration::from_secs(5));
    let s = registry.load().get(KEY).unwrap().clone();
    assert!(s.decision.is_none(), "forecast_only_secs 0 bridges nothing");
    assert!(s.error.as_ref().unwrap().to_string().contains("no forecast-only bridge"));

    // The known-answers workloads have no forecast in their first seconds: stale means no answer.
    let settings =
        foresight::config::Settings::from_yaml(&common::known_answers(), "t", std::path::Path::new(".")).unwrap();
    let store = common::store_with_known_readings();
    let registry = Registry::new();
    let mut engine = foresight::serve::engine::Engine::new(&settings, registry.clone(), store);
    let t = std::time::SystemTime::now();
    engine.tick(t);
    assert!(registry.load().get(KEY).unwrap().decision.is_some());
    engine.tick(t + Duration::from_secs(5));
    let s = registry.load().get(KEY).unwrap().clone();
    assert!(s.decision.is_none() && s.error.as_ref().unwrap().to_string().contains("no forecast to bridge with"));
}

/// A fake Prometheus (queries are POSTed as forms, as Foresight sends them) whose `query_range` answers 503 to its 2nd to 4th
/// calls, as one restarting mid-backfill would; every other call returns
/// v(t) = 1 + (t / 60) % 97 at each step.
async fn flaky_prometheus() -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use axum::{http::StatusCode, response::IntoResponse, routing::post, Form, Json};
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let c = calls.clone();
    let v = |t: f64| 1.0 + ((t / 60.0).round() % 97.0);
    let app = axum::Router::new()
        .route(
            "/api/v1/query_range",
            post(move |Form(q): Form<HashMap<String, String>>| {
                let n = c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async move {
                    if (1..=3).contains(&n) {
                        return (StatusCode::SERVICE_UNAVAILABLE, "restarting").into_response();
                    }
                    let num = |k: &str| q[k].parse::<f64>().unwrap();
                    let (start, end, step) = (num("start"), num("end"), num("step"));
                    let mut values = Vec::new();
                    let mut t = start;
                    while t <= end + 1e-9 {
                        values.push(serde_json::json!([t, v(t).to_string()]));
                        t += step;
                    }
                    Json(serde_json::json!({"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}, "values": values}]}}))
                        .into_response()
                }
            }),
        )
        .route(
            "/api/v1/query",
            post(move |Form(q): Form<HashMap<String, String>>| async move {
                let t = q["time"].parse::<f64>().unwrap();
                Json(serde_json::json!({"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [t, v(t).to_string()]}]}}))
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), calls)
}

#[tokio::test(flavor = "multi_thread")]
async fn prometheus_restarting_mid_backfill_loses_no_history_and_writes_no_zeros() {
    use std::time::{SystemTime, UNIX_EPOCH};
    // As `main` does: reqwest's rustls needs a crypto provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (url, calls) = flaky_prometheus().await;
    let yaml = format!(
        "workloads:\n  - name: llama-8b\n    namespace: inference\n    model: llama-3.1-8b-h100\n    signals: [concurrency]\n    target: {{signal: concurrency}}\n    source: {{prometheus: {{url: \"{url}\", selector: 'job=\"vllm\"', interval_secs: 1, backfill_days: 1, query_delay_secs: 0, max_points_per_query: 200}}}}\n"
    );
    let settings = foresight::config::Settings::from_yaml(&yaml, "t", std::path::Path::new(".")).unwrap();
    let store = Arc::new(foresight::store::Store::open(Default::default()).unwrap());
    let shutdown = CancellationToken::new();
    let mut collectors = foresight::serve::collector::Collectors::default();
    let sinks = foresight::serve::collector::Sinks { store: store.clone(), health: Arc::default() };
    collectors.apply(&settings.workloads, &sinks, &shutdown);

    // Every complete minute of the last day, including those the failed calls covered.
    let series = format!("{KEY}/concurrency");
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64();
    let last_complete = (now / 60.0).floor() as i64 - 1;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let have = store
            .last_bucket(&series)
            .unwrap()
            .map(|t| (t.duration_since(UNIX_EPOCH).unwrap().as_secs_f64() / 60.0).round() as i64);
        if have >= Some(last_complete) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "history never caught up (have {have:?}, want {last_complete}, {} calls)",
            calls.load(std::sync::atomic::Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    shutdown.cancel();
    let first = last_complete - 1439;
    let got = store
        .range(
            &series,
            UNIX_EPOCH + Duration::from_secs(first as u64 * 60),
            UNIX_EPOCH + Duration::from_secs((last_complete + 1) as u64 * 60),
        )
        .unwrap();
    assert_eq!(got.values.len(), 1440);
    for (i, value) in got.values.iter().enumerate() {
        let bucket = first + i as i64;
        // Bucket b holds the sample Prometheus reports at its end, (b + 1) x 60.
        let want = 1.0 + (((bucket + 1) as f64) % 97.0);
        assert_eq!(*value, want, "bucket {bucket}: a gap or a made-up value where Prometheus had {want}");
    }
    assert!(calls.load(std::sync::atomic::Ordering::SeqCst) >= 9, "the failed calls were retried");
    let text = Exposition::new(Registry::new()).render();
    assert!(text.lines().any(|l| l.starts_with("foresight_source_errors_total{") && l.contains("llama-8b")), "{text}");
}
