//! Capacity learned from live metrics, end to end: simulated vLLM pods that
//! run fewer requests at once than the profile claims (24 batch slots where
//! the 8B profile says 32), kept busier than that, so their queue waits miss
//! the SLO at 24 running per pod. Foresight learns the 24 from `/metrics`
//! and sizes with it, and `/api/v1/workloads` shows learned against profile.

use std::time::{Duration, Instant};

use crate::common::Server;

const CONFIG: &str = "
grpc: {listen: 127.0.0.1:0}
http: {listen: 127.0.0.1:0}
tick_interval_secs: 0.2
store: {path: null}
forecast: {enabled: false}
workloads:
  - name: small-batch
    model: llama-3.1-8b-h100
    max_replicas: 64
    target: {signal: concurrency}
    source:
      simulated:
        interval_secs: 0.2
        fleet:
          pods: 2
          max_num_seqs: 24
          demand: {requests_per_sec: 20, daily_amplitude: 0.0, seed: 5}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_that_runs_fewer_requests_than_its_profile_is_learned_and_sized_for() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), CONFIG);
    s.wait_ready(Duration::from_secs(30));
    let _ = rustls::crypto::ring::default_provider().install_default();
    let url = format!("http://{}/api/v1/workloads", s.http);
    let started = Instant::now();
    let w = loop {
        let body: serde_json::Value = reqwest::get(&url).await.unwrap().json().await.unwrap();
        let w = body.as_array().map_or(&body["workloads"][0], |a| &a[0]).clone();
        let c = &w["capacity"];
        if c["weight"].as_f64().unwrap_or(0.0) > 0.5 {
            break w;
        }
        assert!(started.elapsed() < Duration::from_secs(90), "nothing learned in 90 s: {c}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let c = &w["capacity"];
    let learned = c["learned"].as_f64().unwrap();
    assert!((learned / 24.0 - 1.0).abs() < 0.10, "learned {learned}, the pods run 24: {c}");
    assert_eq!(c["prior"].as_f64(), Some(32.0));
    let used = c["per_replica"].as_f64().unwrap();
    assert!(used < 32.0 && used >= learned - 1e-9, "{c}");
    // The decision divides by what was learned, not by the profile's 32.
    let d = &w["decision"];
    let per = d["per_replica"].as_f64().unwrap();
    assert!((per - used).abs() < 0.5, "decision per_replica {per}, learned {used}: {d}");
    let load = d["load"].as_f64().unwrap();
    let desired = d["desired_replicas"].as_u64().unwrap() as f64;
    assert!(desired >= (load / per).ceil() - 1.0, "{d}");
}
