//! The KEDA external scaler over real gRPC, in process: a tonic client
//! against `scaler::serve`, with the registry driven directly so stream
//! transitions can be pinned exactly.

use crate::common;

use std::{collections::HashMap, path::Path, sync::Arc, time::Duration};

use foresight::{
    config::Settings,
    proto::{external_scaler_client::ExternalScalerClient, GetMetricsRequest, ScaledObjectRef},
    scaler,
    serve::engine::Engine,
    serve::outcome::{NoBridge, NoDecision},
    serve::state::{Registry, WorkloadState},
    sources::Signal,
};
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;
use tonic::{transport::Channel, Code};

struct Harness {
    registry: Arc<Registry>,
    client: ExternalScalerClient<Channel>,
    shutdown: CancellationToken,
    addr: std::net::SocketAddr,
}

async fn harness() -> Harness {
    serve_yaml(&common::known_answers()).await
}

/// One engine tick over the known readings with this config, then the scaler serving its answers.
async fn serve_yaml(yaml: &str) -> Harness {
    let settings = Settings::from_yaml(yaml, "test", Path::new(".")).unwrap();
    let registry = Registry::new();
    let store = common::store_with_known_readings();
    let mut engine = Engine::new(&settings, registry.clone(), store);
    engine.tick(std::time::SystemTime::now());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    tokio::spawn(scaler::serve(listener, None, registry.clone(), shutdown.clone()));
    let client = ExternalScalerClient::connect(format!("http://{addr}")).await.unwrap();
    Harness { registry, client, shutdown, addr }
}

/// Metadata as KEDA sends it: every trigger entry, `scalerAddress` included.
fn so(workload: &str, extra: &[(&str, &str)]) -> ScaledObjectRef {
    let mut md: HashMap<String, String> = [("scalerAddress", "foresight.foresight.svc:6000"), ("workload", workload)]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    md.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    ScaledObjectRef { name: format!("{workload}-so"), namespace: "inference".into(), scaler_metadata: md }
}

/// Republish the registry with `edit` applied to one workload's state.
fn republish(registry: &Registry, name: &str, edit: impl Fn(&mut WorkloadState)) {
    let states = registry
        .load()
        .workloads()
        .into_iter()
        .map(|s| {
            let mut s = WorkloadState::clone(s);
            if s.name == name {
                edit(&mut s);
            }
            s
        })
        .collect();
    registry.publish(states, true);
}

async fn value(h: &mut Harness, workload: &str, metric: &str, extra: &[(&str, &str)]) -> (f64, i64) {
    let r = h
        .client
        .get_metrics(GetMetricsRequest { scaled_object_ref: Some(so(workload, extra)), metric_name: metric.into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.metric_values.len(), 1);
    (r.metric_values[0].metric_value_float, r.metric_values[0].metric_value)
}

#[tokio::test]
async fn metric_specs_for_both_encodings() {
    let mut h = harness().await;
    let spec = h.client.get_metric_spec(so("llama-8b", &[])).await.unwrap().into_inner().metric_specs;
    assert_eq!(spec.len(), 1);
    assert_eq!(
        (spec[0].metric_name.as_str(), spec[0].target_size_float, spec[0].target_size),
        ("foresight-llama-8b-replicas", 1.0, 1)
    );
    let spec =
        h.client.get_metric_spec(so("llama-8b", &[("encoding", "load")])).await.unwrap().into_inner().metric_specs;
    assert_eq!(
        (spec[0].metric_name.as_str(), spec[0].target_size_float, spec[0].target_size),
        ("foresight-llama-8b-concurrency", 32.0, 32)
    );
    let spec =
        h.client.get_metric_spec(so("fractional", &[("encoding", "load")])).await.unwrap().into_inner().metric_specs;
    assert_eq!(
        (spec[0].metric_name.as_str(), spec[0].target_size_float, spec[0].target_size),
        ("foresight-fractional-kv-cache-usage", 0.25, 1)
    );
}

#[tokio::test]
async fn metric_values_set_float_and_int() {
    let mut h = harness().await;
    assert_eq!(value(&mut h, "llama-8b", "foresight-llama-8b-replicas", &[]).await, (4.0, 4));
    assert_eq!(
        value(&mut h, "llama-8b", "foresight-llama-8b-concurrency", &[("encoding", "load")]).await,
        (100.0, 100)
    );
    assert_eq!(value(&mut h, "idle", "foresight-idle-replicas", &[]).await, (0.0, 0));
    assert_eq!(
        value(&mut h, "fractional", "foresight-fractional-kv-cache-usage", &[("encoding", "load")]).await,
        (0.3, 0),
        "0.3 as float, 0 as int: KEDA reads the float because it is > 0"
    );
    assert_eq!(value(&mut h, "fractional", "foresight-fractional-replicas", &[]).await, (2.0, 2));
    // KEDA may hand back the HPA's name, prefixed and in another case.
    assert_eq!(value(&mut h, "llama-8b", "s0-Foresight-Llama-8B-Replicas", &[]).await, (4.0, 4));
}

#[tokio::test]
async fn activity_follows_demand() {
    let mut h = harness().await;
    assert!(h.client.is_active(so("llama-8b", &[])).await.unwrap().into_inner().result);
    assert!(!h.client.is_active(so("idle", &[])).await.unwrap().into_inner().result);
}

#[tokio::test]
async fn bad_requests_get_clear_errors() {
    let mut h = harness().await;
    let e = h.client.get_metric_spec(so("llama-9b", &[])).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert!(e.message().contains("no workload `llama-9b` in namespace `inference`"), "{}", e.message());

    let e = h.client.is_active(so("llama-8b", &[("namespace", "prod")])).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert!(e.message().contains("it exists in namespace inference"), "{}", e.message());

    let mut missing = so("x", &[]);
    missing.scaler_metadata.remove("workload");
    for e in [
        h.client.get_metric_spec(missing.clone()).await.unwrap_err(),
        h.client.is_active(missing.clone()).await.unwrap_err(),
        h.client.stream_is_active(missing.clone()).await.unwrap_err(),
        h.client.stream_metric_spec(missing.clone()).await.unwrap_err(),
    ] {
        assert_eq!(e.code(), Code::InvalidArgument);
        assert!(e.message().contains("missing required key `workload`"), "{}", e.message());
    }

    let huge = "x".repeat(100_000);
    let e = h.client.get_metric_spec(so(&huge, &[])).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().len() < 200 && e.message().contains("100000 bytes"), "{}", e.message());

    let e = h.client.get_metric_spec(so("llama-8b", &[("encoding", "qps")])).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("`encoding`"), "{}", e.message());

    let e = h
        .client
        .get_metrics(GetMetricsRequest {
            scaled_object_ref: Some(so("llama-8b", &[])),
            metric_name: "foresight-llama-8b-concurrency".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("GetMetricSpec names `foresight-llama-8b-replicas`"), "{}", e.message());

    let e =
        h.client.get_metrics(GetMetricsRequest { scaled_object_ref: None, metric_name: "m".into() }).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
}

#[tokio::test]
async fn without_a_decision_metrics_are_unavailable_but_the_spec_still_answers() {
    let mut h = harness().await;
    republish(&h.registry, "llama-8b", |s| {
        s.decision = None;
        s.error = Some(NoDecision::Stale {
            signal: Signal::Concurrency,
            age_secs: 95.0,
            stale_after_secs: 0.6,
            cause: None,
            bridge: NoBridge::Off,
        });
    });
    let e = h
        .client
        .get_metrics(GetMetricsRequest {
            scaled_object_ref: Some(so("llama-8b", &[])),
            metric_name: "foresight-llama-8b-replicas".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unavailable);
    assert!(e.message().contains("stale: the last `concurrency` reading is 95 s old"), "{}", e.message());
    assert_eq!(h.client.is_active(so("llama-8b", &[])).await.unwrap_err().code(), Code::Unavailable);
    let spec = h.client.get_metric_spec(so("llama-8b", &[])).await.unwrap().into_inner();
    assert_eq!(spec.metric_specs[0].metric_name, "foresight-llama-8b-replicas");
}

async fn nothing_more<T: std::fmt::Debug>(
    s: &mut (impl tokio_stream::Stream<Item = Result<T, tonic::Status>> + Unpin),
) {
    if let Ok(item) = tokio::time::timeout(Duration::from_millis(300), s.next()).await {
        panic!("unexpected stream message {item:?}");
    }
}

async fn next<T>(s: &mut (impl tokio_stream::Stream<Item = Result<T, tonic::Status>> + Unpin)) -> T {
    tokio::time::timeout(Duration::from_secs(5), s.next())
        .await
        .expect("a stream message")
        .expect("stream open")
        .unwrap()
}

fn set_active(active: bool) -> impl Fn(&mut WorkloadState) {
    move |s| s.decision.as_mut().unwrap().active = active
}

#[tokio::test]
async fn stream_is_active_sends_the_state_at_open_then_transitions_only() {
    let mut h = harness().await;
    let mut stream = h.client.stream_is_active(so("llama-8b", &[])).await.unwrap().into_inner();
    assert!(next(&mut stream).await.result, "current state at open");
    for _ in 0..3 {
        republish(&h.registry, "llama-8b", set_active(true));
    }
    republish(&h.registry, "idle", set_active(true)); // another workload's change is not ours
    nothing_more(&mut stream).await;
    republish(&h.registry, "llama-8b", set_active(false));
    assert!(!next(&mut stream).await.result);
    republish(&h.registry, "llama-8b", set_active(false));
    nothing_more(&mut stream).await;
    republish(&h.registry, "llama-8b", set_active(true));
    assert!(next(&mut stream).await.result);
}

#[tokio::test]
async fn stream_metric_spec_sends_current_specs_then_changes() {
    let mut h = harness().await;
    let mut stream = h.client.stream_metric_spec(so("llama-8b", &[("encoding", "load")])).await.unwrap().into_inner();
    let first = next(&mut stream).await;
    assert_eq!(first.metric_specs[0].target_size_float, 32.0);
    // Decisions change every tick; the spec does not, so nothing is sent.
    republish(&h.registry, "llama-8b", set_active(false));
    nothing_more(&mut stream).await;
    republish(&h.registry, "llama-8b", |s| s.per_replica = 40.0);
    let changed = next(&mut stream).await;
    assert_eq!((changed.metric_specs[0].target_size_float, changed.metric_specs[0].target_size), (40.0, 40));
    // GetMetricSpec agrees with the latest streamed value.
    let polled = h.client.get_metric_spec(so("llama-8b", &[("encoding", "load")])).await.unwrap().into_inner();
    assert_eq!(polled, changed);
}

#[tokio::test]
async fn a_stream_ends_with_not_found_when_its_workload_is_removed() {
    let mut h = harness().await;
    let mut stream = h.client.stream_is_active(so("idle", &[])).await.unwrap().into_inner();
    next(&mut stream).await;
    let rest: Vec<WorkloadState> = h
        .registry
        .load()
        .workloads()
        .into_iter()
        .filter(|s| s.name != "idle")
        .map(|s| WorkloadState::clone(s))
        .collect();
    h.registry.publish(rest, true);
    let end = tokio::time::timeout(Duration::from_secs(5), stream.next()).await.unwrap().unwrap();
    assert_eq!(end.unwrap_err().code(), Code::NotFound);
}

#[tokio::test]
async fn streams_end_on_shutdown() {
    let mut h = harness().await;
    let mut stream = h.client.stream_metric_spec(so("llama-8b", &[])).await.unwrap().into_inner();
    next(&mut stream).await;
    h.shutdown.cancel();
    let end = tokio::time::timeout(Duration::from_secs(5), stream.next()).await.expect("stream ends");
    assert!(end.is_none() || end.unwrap().is_err());
}

#[tokio::test]
async fn grpc_health_reports_serving() {
    use tonic_health::pb::{health_check_response::ServingStatus, health_client::HealthClient, HealthCheckRequest};
    let h = harness().await;
    let channel = Channel::from_shared(format!("http://{}", h.addr)).unwrap().connect().await.unwrap();
    let mut health = HealthClient::new(channel);
    for service in ["", "externalscaler.ExternalScaler"] {
        let r = health.check(HealthCheckRequest { service: service.into() }).await.unwrap().into_inner();
        assert_eq!(r.status(), ServingStatus::Serving, "{service:?}");
    }
}

/// A balloon trigger (`pool:` metadata) for each of two pools, with the
/// known-answers workloads (6 one-GPU replicas) planned onto them.
async fn pool_harness(reservation_ends_in_secs: i64) -> Harness {
    let end = chrono::Utc::now() + chrono::Duration::seconds(reservation_ends_in_secs);
    let pools = format!(
        "pools:
  - {{name: h100-reserved, gpu_type: nvidia-h100-80gb, gpus_per_node: 8, capacity_type: reserved, provisioning_secs: 0}}
  - {{name: h100-on-demand, gpu_type: nvidia-h100-80gb, gpus_per_node: 8, capacity_type: on-demand,
     price_per_node_hour: 98, provisioning_secs: 900}}
reservations:
  - {{name: block, pool: h100-reserved, nodes: 1, start: 2026-01-01T00:00:00Z, end: {}}}
workloads:",
        end.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    );
    serve_yaml(&common::known_answers().replacen("workloads:", &pools, 1)).await
}

fn balloon(pool: &str) -> ScaledObjectRef {
    let md = [("scalerAddress", "foresight.foresight.svc:6000"), ("pool", pool)]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    ScaledObjectRef { name: format!("balloon-{pool}"), namespace: "foresight".into(), scaler_metadata: md }
}

async fn buffer(h: &mut Harness, pool: &str) -> i64 {
    let spec = h.client.get_metric_spec(balloon(pool)).await.unwrap().into_inner();
    assert_eq!(spec.metric_specs.len(), 1);
    let metric = spec.metric_specs[0].metric_name.clone();
    assert_eq!(metric, format!("foresight-pool-{pool}-buffer"));
    assert_eq!(spec.metric_specs[0].target_size, 1, "balloon replicas = the metric");
    let r = h
        .client
        .get_metrics(GetMetricsRequest { scaled_object_ref: Some(balloon(pool)), metric_name: metric })
        .await
        .unwrap()
        .into_inner();
    let active = h.client.is_active(balloon(pool)).await.unwrap().into_inner().result;
    assert_eq!(active, r.metric_values[0].metric_value > 0);
    r.metric_values[0].metric_value
}

#[tokio::test]
async fn a_closing_reservation_warms_on_demand_nodes_through_the_balloon_metric() {
    // Reserved node for 5 more minutes; an on-demand node takes 15 to come up:
    // warm one now, held by one balloon, while the replicas still run on the reservation.
    let mut h = pool_harness(300).await;
    assert_eq!(buffer(&mut h, "h100-reserved").await, 0, "the running replicas fill the reserved node");
    assert_eq!(buffer(&mut h, "h100-on-demand").await, 1);
    let snap = h.registry.load();
    let pools = snap.pools();
    let od = pools.iter().find(|p| p.name == "h100-on-demand").unwrap();
    assert_eq!(od.capacity_buffer_replicas, Some(1));
    assert_eq!(od.plan.as_ref().unwrap().warm_nodes, 1);
    let reserved = pools.iter().find(|p| p.name == "h100-reserved").unwrap();
    let why = &reserved.plan.as_ref().unwrap().reason;
    assert!(why.contains("reservations drop from 1 to 0 nodes at +5m"), "{why}");

    // A reservation that outlasts the horizon: nothing to warm on demand.
    let mut h = pool_harness(86_400).await;
    assert_eq!(buffer(&mut h, "h100-on-demand").await, 0);
    h.shutdown.cancel();
}

#[tokio::test]
async fn balloon_triggers_get_clear_errors() {
    let mut h = pool_harness(86_400).await;
    let e = h.client.get_metric_spec(balloon("a100-spot")).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert!(e.message().contains("pools: h100-on-demand, h100-reserved"), "{}", e.message());
    let mut both = balloon("h100-reserved");
    both.scaler_metadata.insert("workload".into(), "llama-8b".into());
    let e = h.client.get_metric_spec(both).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    let e = h
        .client
        .get_metrics(GetMetricsRequest {
            scaled_object_ref: Some(balloon("h100-reserved")),
            metric_name: "foresight-llama-8b-replicas".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    // Before the first plan the count is unknown, not zero: KEDA's fallback applies.
    let snap = h.registry.load();
    let states = snap.workloads().into_iter().map(|s| WorkloadState::clone(s)).collect();
    let pools = snap
        .pools()
        .into_iter()
        .map(|p| foresight::serve::state::PoolState {
            plan: None,
            capacity_buffer_replicas: None,
            ..foresight::serve::state::PoolState::clone(p)
        })
        .collect();
    h.registry.publish_all(states, pools, None, true);
    let e = h.client.is_active(balloon("h100-reserved")).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable);
    h.shutdown.cancel();
}
