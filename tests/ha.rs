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

/// One workload's answers from one replica: (desired replicas, active).
type Answer = (i64, bool);

/// GetMetrics and IsActive for each of `workloads` from `c`.
async fn answers(c: &mut ExternalScalerClient<tonic::transport::Channel>, workloads: &[&str]) -> Vec<Answer> {
    let mut out = Vec::new();
    for w in workloads {
        let spec = c.get_metric_spec(so(w, "replicas")).await.unwrap().into_inner();
        let req = GetMetricsRequest {
            scaled_object_ref: Some(so(w, "replicas")),
            metric_name: spec.metric_specs[0].metric_name.clone(),
        };
        let value = c.get_metrics(req).await.unwrap().into_inner().metric_values[0].metric_value;
        out.push((value, c.is_active(so(w, "replicas")).await.unwrap().into_inner().result));
    }
    out
}

/// GetMetrics and IsActive for each of `workloads` from `c`, or UNAVAILABLE
/// (a replica declining to answer yet); GetMetricSpec always answers.
async fn try_answers(
    c: &mut ExternalScalerClient<tonic::transport::Channel>,
    workloads: &[&str],
) -> Result<Vec<Answer>, tonic::Status> {
    let mut out = Vec::new();
    for w in workloads {
        let spec = c.get_metric_spec(so(w, "replicas")).await.expect("GetMetricSpec answers throughout").into_inner();
        let req = GetMetricsRequest {
            scaled_object_ref: Some(so(w, "replicas")),
            metric_name: spec.metric_specs[0].metric_name.clone(),
        };
        let value = c.get_metrics(req).await?.into_inner().metric_values[0].metric_value;
        out.push((value, c.is_active(so(w, "replicas")).await?.into_inner().result));
    }
    Ok(out)
}

/// Seconds since `key`'s latest refit grid point at `t`, and until its next
/// (the phase as the server computes it: FNV-1a of the key, within `every`).
fn refit_phase(key: &str, every: f64, t: f64) -> (f64, f64) {
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    let since = (t - (hash % every as u64) as f64).rem_euclid(every);
    (since, every - since)
}

/// Has every workload a decision and a forecast?
fn forecasting(s: &Server, n: usize) -> bool {
    let Some(body) = common::http_get(s.http, "/api/v1/workloads") else { return false };
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    v["workloads"]
        .as_array()
        .is_some_and(|ws| ws.len() == n && ws.iter().all(|w| !w["forecast"].is_null() && !w["decision"].is_null()))
}

fn unix_now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64()
}

/// Three real binaries on one real Prometheus, started apart (the third
/// half-way through), through a fall in demand: on every poll grid point
/// after each has loaded history, all give the same GetMetrics and IsActive
/// for every workload, scale-down hold included. Demand runs a 5-minute
/// "day" so a fall and the hold it triggers happen within the test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_started_apart_on_one_prometheus_agree_through_a_scale_down() {
    if !common::tools::have("prometheus", &[common::tools::PROMETHEUS, common::tools::PROMTOOL]) {
        return;
    }
    const DAY_SECS: f64 = 240.0;
    const HISTORY_SECS: f64 = 3600.0;
    let workloads = ["m-a", "m-b", "m-c"];
    let dir = tempfile::tempdir().unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    // Live scraping starts on the next 10 s bucket; each fleet's history covers the hour before.
    let live_from = (unix_now() / 10.0).ceil() * 10.0 + 10.0;
    let origin = live_from - HISTORY_SECS;
    let tsdb = dir.path().join("tsdb");
    let mut targets = Vec::new();
    for (k, name) in workloads.iter().enumerate() {
        let fleet = format!(
            "pods: 2\nmodel_name: {name}\nmax_num_seqs: 256\ndemand: {{requests_per_sec: {}, daily_amplitude: 0.8, weekend_factor: 1.0, day_length_secs: {DAY_SECS}, seed: {k}}}\n",
            4 + 4 * k
        );
        let file = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&file, &fleet).unwrap();
        let sim: foresight::fake_vllm::SimConfig = serde_yaml_ng::from_str(&fleet).unwrap();
        let server = foresight::fake_vllm::server::SimServer::start(
            foresight::fake_vllm::Fleet::new(sim, None, origin),
            "127.0.0.1".parse().unwrap(),
            shutdown.clone(),
        )
        .await
        .unwrap();
        let instances: Vec<String> = server
            .urls
            .iter()
            .map(|u| u.trim_start_matches("http://").trim_end_matches("/metrics").to_string())
            .collect();
        let labels: Vec<String> = instances.iter().map(|i| format!("job=\"vllm\",instance=\"{i}\"")).collect();
        common::import_history(&file, origin, live_from - 15.0, &labels, &tsdb);
        targets.extend(instances);
    }
    while unix_now() < live_from - 1.0 {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (_prom, prom_port) = common::start_prometheus(dir.path(), &tsdb, &targets).await;

    // Polls every 5 s on the wall-clock grid, 2 s after each grid point (scrapes every
    // second, so a sample stamped before the grid point is in by then even on a busy
    // machine); refits every minute, models chosen every two.
    const POLL: f64 = 5.0;
    const REFIT: f64 = 60.0;
    let mut yaml = format!(
        "grpc: {{listen: 127.0.0.1:0}}
http: {{listen: 127.0.0.1:0}}
tick_interval_secs: 0.25
store: {{path: null, resolution_secs: 10}}
forecast: {{refit_interval_secs: {REFIT}, reselect_interval_secs: 120, history_days: 0.042, seasons_secs: [{DAY_SECS}]}}
sizing: {{scale_down_stabilization_secs: 60}}
workloads:
"
    );
    for name in workloads {
        yaml.push_str(&format!(
            "  - name: {name}
    namespace: inference
    model: llama-3.1-8b-h100
    max_replicas: 50
    target: {{signal: concurrency, per_replica: 4}}
    source: {{prometheus: {{url: 'http://127.0.0.1:{prom_port}', selector: 'job=\"vllm\",model_name=\"{name}\"', interval_secs: {POLL}, query_delay_secs: 2, backfill_days: 0.05}}}}
"
        ));
    }
    let start = |k: usize| {
        let d = dir.path().join(format!("replica-{k}"));
        std::fs::create_dir_all(&d).unwrap();
        Server::spawn(&d, &yaml, &[])
    };
    let wait_forecasting = |s: &Server| {
        let deadline = Instant::now() + Duration::from_secs(120);
        while !forecasting(s, workloads.len()) {
            assert!(Instant::now() < deadline, "no forecasts in time; log:\n{}", s.log.lock().unwrap().join("\n"));
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let a = tokio::task::block_in_place(|| start(0));
    tokio::task::block_in_place(|| wait_forecasting(&a));
    // The second starts about half a minute after the first.
    tokio::time::sleep(Duration::from_secs(25)).await;
    let b = tokio::task::block_in_place(|| start(1));
    tokio::task::block_in_place(|| wait_forecasting(&b));
    // One batch for all three workloads: a range and an instant query per signal (7) per poll, not 42.
    assert!(!a.log_lines_with(&["polling Prometheus", "\"workloads\":3", "\"queries_per_poll\":14"]).is_empty());
    let text = common::http_get(a.http, "/metrics").unwrap();
    assert!(text.contains("foresight_prometheus_queries_total{kind=\"instant\"}"), "{text}");

    let mut replicas = vec![a, b];
    let mut clients = Vec::new();
    for s in &replicas {
        clients.push(ExternalScalerClient::connect(s.grpc_url()).await.unwrap());
    }
    let (mut compared, mut skipped, mut third_compared) = (0, 0, 0);
    let mut seen: Vec<Vec<i64>> = vec![Vec::new(); workloads.len()];
    let begin = unix_now();
    let end = begin + DAY_SECS;
    let mut third: Option<Server> = None;
    let (mut early_declined, mut early_agreed) = (0, 0);
    while unix_now() < end {
        // Sample 2.5 s after each poll (grid point + 2 s query delay), when every replica has taken it in.
        let now = unix_now();
        let g = (now / POLL).floor() * POLL;
        let at = if now < g + 4.5 { g + 4.5 } else { g + POLL + 4.5 };
        tokio::time::sleep(Duration::from_secs_f64(at - now)).await;
        // The third starts late, with an empty store, where no refit grid point is near (a refit
        // lands in each replica when its worker reaches it), and is asked at once, again and
        // again until the others' next poll: each answer agrees with the first replica's, or
        // it declines (UNAVAILABLE, so KEDA's fallback applies) while it is not ready.
        let quiet = workloads.iter().all(|w| {
            let (since, until) = refit_phase(&format!("inference/{w}"), REFIT, at);
            since >= 10.0 && until >= 4.0
        });
        if third.is_none() && replicas.len() == 2 && unix_now() > begin + DAY_SECS * 0.3 && quiet {
            let t = tokio::task::block_in_place(|| start(2));
            let started = Instant::now();
            let mut early = ExternalScalerClient::connect(t.grpc_url()).await.unwrap();
            // The others poll again at the next grid point + 2 s; the third polled this one at start.
            let next_poll = (at / POLL).floor() * POLL + POLL + 2.0;
            let first_probe = started.elapsed();
            assert!(first_probe < Duration::from_secs(1), "first probe {first_probe:?} after start");
            while unix_now() < next_poll - 0.2 {
                // Ready is for good once reached: a replica that said so must answer.
                let ready_before = common::http_status(t.http, "/readyz") == Some(200);
                match try_answers(&mut early, &workloads).await {
                    Ok(got) => {
                        let mut first = answers(&mut clients[0], &workloads).await;
                        if got != first {
                            // The two tick 0.25 s apart: a hold that expires between the two calls
                            // shows in one first. Asked again after both have ticked, they agree.
                            tokio::time::sleep(Duration::from_millis(300)).await;
                            let again = try_answers(&mut early, &workloads).await.expect("answered before");
                            first = answers(&mut clients[0], &workloads).await;
                            assert_eq!(
                                again,
                                first,
                                "the late replica answered differently {:?} after start (before: {got:?})",
                                started.elapsed()
                            );
                        }
                        early_agreed += 1;
                    }
                    Err(status) => {
                        assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
                        assert!(!ready_before, "declined after /readyz said ready");
                        early_declined += 1;
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            eprintln!(
                "late replica: {early_declined} declined, {early_agreed} agreed in its first {:?}; readyz: {:?}",
                started.elapsed(),
                common::http_get(t.http, "/readyz")
                    .or_else(|| Some(format!("{:?}", common::http_status(t.http, "/readyz"))))
            );
            assert!(early_declined + early_agreed >= 5, "too few early probes");
            third = Some(t);
            continue;
        }
        if let Some(t) = third.take() {
            if forecasting(&t, workloads.len()) {
                clients.push(ExternalScalerClient::connect(t.grpc_url()).await.unwrap());
                replicas.push(t);
            } else {
                third = Some(t);
            }
        }
        // A refit lands in each replica when its worker reaches it: not compared for 10 s after a refit grid point.
        let grid_at = (at / POLL).floor() * POLL;
        if grid_at.rem_euclid(REFIT) < 10.0 {
            skipped += 1;
            continue;
        }
        let mut got = Vec::new();
        for c in clients.iter_mut() {
            got.push(answers(c, &workloads).await);
        }
        if got.iter().any(|g| g != &got[0]) {
            // Every replica's own account of each workload, to see which input differed.
            let views: Vec<String> =
                replicas.iter().map(|r| common::http_get(r.http, "/api/v1/workloads").unwrap_or_default()).collect();
            panic!("replicas disagree at grid point {grid_at}: {got:?}\n{}", views.join("\n\n"));
        }
        for (w, (desired, _)) in got[0].iter().enumerate() {
            seen[w].push(*desired);
        }
        compared += 1;
        if got.len() == 3 {
            third_compared += 1;
        }
    }
    eprintln!("compared {compared} grid points ({third_compared} with the third), skipped {skipped}; desired replicas seen: {seen:?}");
    assert!(
        compared >= 35 && third_compared >= 10,
        "compared {compared} grid points ({third_compared} with the third), skipped {skipped}"
    );
    // Demand fell: some workload scaled down while compared.
    assert!(seen.iter().any(|s| s.windows(2).any(|w| w[1] < w[0])), "no scale-down happened while compared: {seen:?}");
    shutdown.cancel();
}
