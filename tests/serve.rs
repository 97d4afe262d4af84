//! `foresight serve` as a process: TLS and mTLS on the scaler port, SIGHUP
//! reloads that reach open streams, and a clean exit on SIGTERM.

use crate::common;

use std::{collections::HashMap, path::Path, time::Duration};

use crate::common::Server;
use foresight::proto::{external_scaler_client::ExternalScalerClient, GetMetricsRequest, ScaledObjectRef};
use tokio_stream::StreamExt;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

fn so(workload: &str, encoding: &str) -> ScaledObjectRef {
    let md: HashMap<String, String> =
        [("scalerAddress", "127.0.0.1:6000"), ("workload", workload), ("encoding", encoding)]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
    ScaledObjectRef { name: "so".into(), namespace: "inference".into(), scaler_metadata: md }
}

fn tls_config(dir: &Path, client_ca: bool) -> String {
    let ca = if client_ca { format!("\n    client_ca_file: {}/ca.pem", dir.display()) } else { String::new() };
    common::known_answers().replacen(
        "grpc:\n  listen: 127.0.0.1:0",
        &format!("grpc:\n  listen: 127.0.0.1:0\n  tls:\n    cert_file: server.pem\n    key_file: server.key{ca}"),
        1,
    )
}

async fn tls_client(
    s: &Server,
    dir: &Path,
    identity: Option<&str>,
) -> Result<ExternalScalerClient<Channel>, tonic::transport::Error> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(std::fs::read(dir.join("ca.pem")).unwrap()))
        .domain_name("localhost");
    if let Some(name) = identity {
        let read = |ext: &str| std::fs::read(dir.join(format!("{name}.{ext}"))).unwrap();
        tls = tls.identity(Identity::from_pem(read("pem"), read("key")));
    }
    let channel = Channel::from_shared(format!("https://{}", s.grpc)).unwrap().tls_config(tls)?.connect().await?;
    Ok(ExternalScalerClient::new(channel))
}

async fn replicas(client: &mut ExternalScalerClient<Channel>) -> Result<f64, tonic::Status> {
    let r = client
        .get_metrics(GetMetricsRequest {
            scaled_object_ref: Some(so("llama-8b", "replicas")),
            metric_name: "foresight-llama-8b-replicas".into(),
        })
        .await?;
    Ok(r.into_inner().metric_values[0].metric_value_float)
}

#[tokio::test]
async fn tls_serves_clients_that_trust_the_ca_and_refuses_plaintext() {
    let dir = tempfile::tempdir().unwrap();
    common::write_pki(dir.path());
    let s = Server::start(dir.path(), &tls_config(dir.path(), false));
    let mut client = tls_client(&s, dir.path(), None).await.unwrap();
    assert_eq!(replicas(&mut client).await.unwrap(), 4.0);

    let plain = ExternalScalerClient::connect(s.grpc_url()).await;
    let refused = match plain {
        Err(_) => true,
        Ok(mut c) => replicas(&mut c).await.is_err(),
    };
    assert!(refused, "a plaintext client must not get an answer from a TLS server");
}

#[tokio::test]
async fn mtls_requires_a_client_certificate_from_the_trusted_ca() {
    let dir = tempfile::tempdir().unwrap();
    common::write_pki(dir.path());
    let s = Server::start(dir.path(), &tls_config(dir.path(), true));
    let mut good = tls_client(&s, dir.path(), Some("client")).await.unwrap();
    assert_eq!(replicas(&mut good).await.unwrap(), 4.0);

    for who in [None, Some("rogue")] {
        let outcome = match tls_client(&s, dir.path(), who).await {
            Err(_) => Err(()),
            Ok(mut c) => replicas(&mut c).await.map_err(|_| ()),
        };
        assert!(outcome.is_err(), "client {who:?} must be refused, got {outcome:?}");
    }
}

async fn next<T>(stream: &mut tonic::Streaming<T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), stream.next()).await.expect("a message").unwrap().unwrap()
}

#[tokio::test]
async fn sighup_reloads_config_and_open_streams_see_the_new_spec() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &common::known_answers());
    let mut client = ExternalScalerClient::connect(s.grpc_url()).await.unwrap();
    let mut stream = client.stream_metric_spec(so("llama-8b", "load")).await.unwrap().into_inner();
    let first = next(&mut stream).await;
    assert_eq!(first.metric_specs[0].target_size_float, 32.0);

    // A broken config is refused and the running one kept.
    std::fs::write(&s.config, "workloads: [").unwrap();
    s.signal("HUP");
    s.wait_for_log("config reload failed", Duration::from_secs(10));
    assert_eq!(replicas(&mut client).await.unwrap(), 4.0);

    let edited = common::known_answers().replacen(
        "target: {signal: concurrency}",
        "target: {signal: concurrency, per_replica: 20}",
        1,
    );
    std::fs::write(&s.config, edited).unwrap();
    s.signal("HUP");
    let changed = next(&mut stream).await;
    assert_eq!(changed.metric_specs[0].target_size_float, 20.0);
    // The decision follows the new target: ceil(100 / 20).
    assert_eq!(replicas(&mut client).await.unwrap(), 5.0);
    let polled = client.get_metric_spec(so("llama-8b", "load")).await.unwrap().into_inner();
    assert_eq!(polled, changed);
}

// Multi-threaded so the client's connection task keeps running (and answers
// the server's shutdown PING) while this test blocks waiting for the exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_streams_and_exits_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start(dir.path(), &common::known_answers());
    let mut client = ExternalScalerClient::connect(s.grpc_url()).await.unwrap();
    let mut stream = client.stream_is_active(so("llama-8b", "replicas")).await.unwrap().into_inner();
    assert!(stream.next().await.unwrap().unwrap().result);
    s.signal("TERM");
    let end = tokio::time::timeout(Duration::from_secs(10), stream.next()).await.expect("the stream ends");
    assert!(end.is_none() || end.unwrap().is_err());
    let started = std::time::Instant::now();
    let status =
        tokio::task::block_in_place(|| s.wait_exit(Duration::from_secs(15))).expect("exits within the grace period");
    assert!(started.elapsed() < Duration::from_secs(5), "drained promptly, not by the grace timeout");
    assert!(status.success(), "{status:?}");
    s.wait_for_log("\"stopped\"", Duration::from_secs(1));
    assert!(!s.log.lock().unwrap().iter().any(|l| l.contains("panicked")));
}

/// The shipped demo as a newcomer starts it: its simulated fleets write their
/// past two demo weeks into the store on start, so the first forecast is
/// already seasonal (no trend extrapolated from a start-up ramp) and the
/// history endpoint shows that past at once.
#[tokio::test]
async fn the_demo_forecasts_with_its_seasons_from_the_first_minute() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = foresight::config::DEMO_CONFIG
        .replace("127.0.0.1:6000", "127.0.0.1:0")
        .replace("127.0.0.1:8080", "127.0.0.1:0");
    let s = Server::start(dir.path(), &yaml);
    // As `main` does: reqwest's rustls needs a crypto provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let base = format!("http://{}/api/v1/workloads/llama-8b", s.http);
    let started = std::time::Instant::now();
    let forecast: serde_json::Value = loop {
        let r = reqwest::get(format!("{base}/forecast")).await.unwrap();
        if r.status() == 200 {
            break r.json().await.unwrap();
        }
        assert!(started.elapsed() < Duration::from_secs(60), "no forecast a minute after start: {}", r.status());
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(forecast["regime"], "seasonal", "{forecast}");
    let history: serde_json::Value =
        reqwest::get(format!("{base}/history?since=2h")).await.unwrap().json().await.unwrap();
    let points = history["points"].as_array().unwrap();
    let known = points.iter().filter(|p| !p["value"].is_null()).count();
    assert!(known as f64 >= 0.9 * points.len() as f64 && points.len() >= 700, "{known} of {}", points.len());
    // The demo's day runs from a trough of 0.2x to a peak of 1.8x the mean: the past shows it.
    let v: Vec<f64> = points.iter().filter_map(|p| p["value"].as_f64()).collect();
    let (lo, hi) = v.iter().fold((f64::MAX, 0f64), |(l, h), x| (l.min(*x), h.max(*x)));
    assert!(hi > 3.0 * lo.max(1.0), "no daily cycle in the backfilled past: {lo}..{hi}");
}

/// The value of `name{labels}` in a Prometheus text body (0 when absent).
fn sample(body: &str, name: &str, labels: &str) -> f64 {
    body.lines()
        .find(|l| l.starts_with(&format!("{name}{{")) && labels.split(',').all(|kv| l.contains(kv)))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scaler_call_is_timed_and_counted_by_method_and_code() {
    // As `main` does: reqwest's rustls needs a crypto provider (another test may not have installed it first).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &common::known_answers());
    s.wait_ready(Duration::from_secs(30));
    let mut client = ExternalScalerClient::connect(s.grpc_url()).await.unwrap();
    for _ in 0..3 {
        client.get_metric_spec(so("llama-8b", "replicas")).await.unwrap();
    }
    let missing = client.get_metric_spec(so("no-such-workload", "replicas")).await.unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound);
    let body = reqwest::get(format!("http://{}/metrics", s.http)).await.unwrap().text().await.unwrap();
    let calls = |code: &str| {
        sample(&body, "foresight_grpc_requests_total", &format!("method=\"GetMetricSpec\",code=\"{code}\""))
    };
    assert_eq!(calls("Ok"), 3.0, "{body}");
    assert_eq!(calls("NotFound"), 1.0, "{body}");
    let timed = sample(&body, "foresight_grpc_request_duration_seconds_count", "method=\"GetMetricSpec\"");
    assert_eq!(timed, 4.0, "{body}");
    // Only the scaler's five methods become labels.
    assert!(!body.contains("method=\"Check\"") && !body.contains("method=\"other\""), "{body}");
}
