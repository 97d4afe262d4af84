//! Load and soak: `foresight serve` as its own process with 2,000 workloads
//! scraping a fake vLLM endpoint, 2,000 open StreamIsActive streams (as KEDA
//! holds for `external-push` ScaledObjects), GetMetrics at 32 in flight and
//! the HTTP API at 8 in flight, all on loopback, for FORESIGHT_SOAK_SECS
//! (default 60; the README's figure is 600). Prints latency percentiles,
//! error counts, and the server's resident memory every 30 s: it must not
//! grow once warm.
//!
//! `cargo bench --bench soak` (FORESIGHT_SOAK_CACHE_MIB sets the store's page cache, default 16)

use std::{
    collections::HashMap,
    io::{BufRead, BufReader},
    net::SocketAddr,
    process::{Command, Stdio},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use foresight::proto::{external_scaler_client::ExternalScalerClient, GetMetricsRequest, ScaledObjectRef};
use hdrhistogram::Histogram;
use tokio_stream::StreamExt;
use tonic::transport::Channel;

const WORKLOADS: usize = 2_000;
const GRPC_IN_FLIGHT: usize = 32;
const HTTP_IN_FLIGHT: usize = 8;
const CONNECTIONS: usize = 4;

fn so(i: usize) -> ScaledObjectRef {
    let md: HashMap<String, String> = [
        ("scalerAddress".to_string(), "foresight.foresight.svc:6000".to_string()),
        ("workload".to_string(), format!("w{i}")),
    ]
    .into();
    ScaledObjectRef { name: format!("w{i}"), namespace: "load".into(), scaler_metadata: md }
}

fn rss_mib(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

struct Stats {
    hist: Mutex<Histogram<u64>>,
    errors: AtomicU64,
}

impl Stats {
    fn new() -> Arc<Stats> {
        Arc::new(Stats {
            hist: Mutex::new(Histogram::new_with_bounds(1, 60_000_000, 3).unwrap()),
            errors: AtomicU64::new(0),
        })
    }
    fn record(&self, start: Instant, ok: bool) {
        if ok {
            let us = start.elapsed().as_micros().max(1) as u64;
            let _ = self.hist.lock().unwrap().record(us.min(60_000_000));
        } else {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
    fn row(&self, name: &str, secs: f64) -> String {
        let h = self.hist.lock().unwrap();
        format!(
            "| {name} | {:.0} | {} us | {} us | {} us | {} |",
            h.len() as f64 / secs,
            h.value_at_quantile(0.5),
            h.value_at_quantile(0.99),
            h.value_at_quantile(0.999),
            self.errors.load(Ordering::Relaxed)
        )
    }
}

fn main() {
    let secs: u64 = std::env::var("FORESIGHT_SOAK_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(60);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(run(secs));
}

async fn run(secs: u64) {
    // As `main` does: reqwest's rustls needs a crypto provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    // The pods: one fake vLLM /metrics body for every workload.
    let body =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/fake-vllm/llama-8b.txt")).unwrap();
    let app = axum::Router::new().route("/metrics", axum::routing::get(move || std::future::ready(body.clone())));
    let pods = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let pods_addr = pods.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(pods, app).await.unwrap() });

    let dir = tempfile::tempdir().unwrap();
    // FORESIGHT_SOAK_CACHE_MIB: the store's page cache (default 16), to tell its filling from a leak.
    let cache: u32 = std::env::var("FORESIGHT_SOAK_CACHE_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(16);
    let mut yaml = format!(
        "grpc: {{listen: 127.0.0.1:0}}\nhttp: {{listen: 127.0.0.1:0, max_in_flight: 1024}}\ntick_interval_secs: 10\nstore: {{path: history.redb, resolution_secs: 60, cache_mib: {cache}}}\nworkloads:\n"
    );
    for i in 0..WORKLOADS {
        yaml += &format!(
            "  - {{name: w{i}, namespace: load, model: llama-3.1-8b-h100, max_replicas: 16, target: {{signal: concurrency}}, source: {{scrape: {{targets: [\"http://{pods_addr}/metrics\"], interval_secs: 15}}}}}}\n"
        );
    }
    let cfg = dir.path().join("foresight.yaml");
    std::fs::write(&cfg, yaml).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_foresight"))
        .args(["--log-format", "json", "serve", "--config"])
        .arg(&cfg)
        .env("RUST_LOG", "warn,foresight::cli::serve=info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) {
                if v["fields"]["message"] == "listening" || v["message"] == "listening" {
                    let f = if v["fields"].is_object() { &v["fields"] } else { &v };
                    let addr = |k: &str| f[k].as_str().unwrap().parse::<SocketAddr>().unwrap();
                    let _ = tx.send((addr("grpc"), addr("http")));
                }
            }
        }
    });
    let (grpc, http) = rx.recv_timeout(Duration::from_secs(60)).expect("the server listens");
    let web = reqwest::Client::new();
    let ready = Instant::now();
    while !web.get(format!("http://{http}/readyz")).send().await.is_ok_and(|r| r.status().as_u16() == 200) {
        assert!(ready.elapsed() < Duration::from_secs(120), "never ready");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!("ready in {:.1} s with {WORKLOADS} workloads; RSS {:.1} MiB", ready.elapsed().as_secs_f64(), rss_mib(pid));

    let mut channels = Vec::new();
    for _ in 0..CONNECTIONS {
        channels.push(Channel::from_shared(format!("http://{grpc}")).unwrap().connect().await.unwrap());
    }
    let deadline = Instant::now() + Duration::from_secs(secs);

    // One open stream per workload, as KEDA keeps for external-push.
    let stream_msgs = Arc::new(AtomicU64::new(0));
    let stream_errors = Arc::new(AtomicU64::new(0));
    for i in 0..WORKLOADS {
        let mut c = ExternalScalerClient::new(channels[i % CONNECTIONS].clone());
        let (msgs, errs) = (stream_msgs.clone(), stream_errors.clone());
        tokio::spawn(async move {
            match c.stream_is_active(so(i)).await {
                Ok(r) => {
                    let mut s = r.into_inner();
                    while let Some(m) = s.next().await {
                        match m {
                            Ok(_) => msgs.fetch_add(1, Ordering::Relaxed),
                            Err(_) => errs.fetch_add(1, Ordering::Relaxed),
                        };
                    }
                }
                Err(_) => {
                    errs.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }

    let grpc_stats = Stats::new();
    let mut tasks = Vec::new();
    for k in 0..GRPC_IN_FLIGHT {
        let mut c = ExternalScalerClient::new(channels[k % CONNECTIONS].clone());
        let st = grpc_stats.clone();
        tasks.push(tokio::spawn(async move {
            let mut i = k * 7919;
            while Instant::now() < deadline {
                i = (i + 104_729) % WORKLOADS;
                let req = GetMetricsRequest {
                    scaled_object_ref: Some(so(i)),
                    metric_name: format!("foresight-w{i}-replicas"),
                };
                let t = Instant::now();
                let ok = c.get_metrics(req).await.is_ok();
                st.record(t, ok);
            }
        }));
    }
    let http_stats = Stats::new();
    for k in 0..HTTP_IN_FLIGHT {
        let (web, st) = (web.clone(), http_stats.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = k * 31;
            let paths = ["plan", "forecast", "history"];
            while Instant::now() < deadline {
                i = (i + 7_919) % WORKLOADS;
                let url = format!("http://{http}/api/v1/workloads/w{i}/{}?namespace=load", paths[i % 3]);
                let t = Instant::now();
                // Forecast answers 404 until a forecast exists: an answer, not an error.
                let ok = web.get(url).send().await.is_ok_and(|r| r.status().is_success() || r.status().as_u16() == 404);
                st.record(t, ok);
            }
        }));
    }

    println!("| t (s) | server RSS (MiB) | GetMetrics done | HTTP done |");
    println!("|---:|---:|---:|---:|");
    let start = Instant::now();
    let mut rss = Vec::new();
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_secs(30).min(deadline.saturating_duration_since(Instant::now()))).await;
        let r = rss_mib(pid);
        rss.push(r);
        println!(
            "| {:.0} | {r:.1} | {} | {} |",
            start.elapsed().as_secs_f64(),
            grpc_stats.hist.lock().unwrap().len(),
            http_stats.hist.lock().unwrap().len()
        );
    }
    for t in tasks {
        t.await.unwrap();
    }
    let took = start.elapsed().as_secs_f64();
    println!("\n| load | req/s | p50 | p99 | p99.9 | errors |\n|---|---:|---:|---:|---:|---:|");
    println!("{}", grpc_stats.row(&format!("GetMetrics, {GRPC_IN_FLIGHT} in flight, {CONNECTIONS} connections"), took));
    println!("{}", http_stats.row(&format!("HTTP API, {HTTP_IN_FLIGHT} in flight"), took));
    println!(
        "\n{WORKLOADS} StreamIsActive streams: {} messages, {} errors; server RSS first/last/max {:.1}/{:.1}/{:.1} MiB over {took:.0} s",
        stream_msgs.load(Ordering::Relaxed),
        stream_errors.load(Ordering::Relaxed),
        rss.first().copied().unwrap_or(0.0),
        rss.last().copied().unwrap_or(0.0),
        rss.iter().copied().fold(0.0, f64::max)
    );
    stop(&mut child);
}

fn stop(child: &mut std::process::Child) {
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let _ = child.wait();
}
