//! GetMetrics latency and throughput at 2,000 registered workloads, beside a
//! bare tonic unary server measured in the same run.
//!
//! `cargo bench --bench grpc_get_metrics` (FORESIGHT_BENCH_SECS sets each
//! phase's length, default 3). Servers run on one runtime thread and the
//! load generator on another, so the two share the machine the same way for
//! both servers; phases alternate bare/foresight twice to spread noise.

use std::{
    collections::HashMap,
    path::Path,
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use foresight::{
    config::Settings,
    proto::{
        external_scaler_client::ExternalScalerClient,
        external_scaler_server::{ExternalScaler, ExternalScalerServer},
        GetMetricSpecResponse, GetMetricsRequest, GetMetricsResponse, IsActiveResponse, MetricValue, ScaledObjectRef,
    },
    scaler,
    serve::engine::Engine,
    serve::state::Registry,
};
use hdrhistogram::Histogram;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_util::sync::CancellationToken;
use tonic::{transport::Channel, Request, Response, Status};

const WORKLOADS: usize = 2_000;
const CONCURRENCY: usize = 64;
const CONNECTIONS: usize = 4;

/// The floor: a tonic server that answers GetMetrics with a constant.
struct Bare;

#[tonic::async_trait]
impl ExternalScaler for Bare {
    async fn is_active(&self, _: Request<ScaledObjectRef>) -> Result<Response<IsActiveResponse>, Status> {
        Err(Status::unimplemented(""))
    }
    type StreamIsActiveStream = tokio_stream::Empty<Result<IsActiveResponse, Status>>;
    async fn stream_is_active(
        &self,
        _: Request<ScaledObjectRef>,
    ) -> Result<Response<Self::StreamIsActiveStream>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn get_metric_spec(&self, _: Request<ScaledObjectRef>) -> Result<Response<GetMetricSpecResponse>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn get_metrics(&self, _: Request<GetMetricsRequest>) -> Result<Response<GetMetricsResponse>, Status> {
        Ok(Response::new(GetMetricsResponse {
            metric_values: vec![MetricValue {
                metric_name: "constant".into(),
                metric_value: 4,
                metric_value_float: 4.0,
            }],
        }))
    }
    type StreamMetricSpecStream = tokio_stream::Empty<Result<GetMetricSpecResponse, Status>>;
    async fn stream_metric_spec(
        &self,
        _: Request<ScaledObjectRef>,
    ) -> Result<Response<Self::StreamMetricSpecStream>, Status> {
        Err(Status::unimplemented(""))
    }
}

fn config() -> String {
    // Collectors do not run here: the bench writes each workload's latest reading itself.
    let mut y = String::from("store: {path: null}\nworkloads:\n");
    for i in 0..WORKLOADS {
        y.push_str(&format!(
            "  - name: model-{i}\n    namespace: ns-{}\n    model: llama-3.1-8b-h100\n    max_replicas: 100\n    target: {{signal: concurrency}}\n    source: {{scrape: {{targets: [\"http://127.0.0.1:9/metrics\"]}}}}\n",
            i % 20
        ));
    }
    y
}

/// Requests as KEDA sends them, one per workload.
fn requests() -> Vec<GetMetricsRequest> {
    (0..WORKLOADS)
        .map(|i| {
            let md: HashMap<String, String> = [
                ("scalerAddress", "foresight.foresight.svc.cluster.local:6000".to_string()),
                ("workload", format!("model-{i}")),
                ("encoding", "replicas".to_string()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
            GetMetricsRequest {
                scaled_object_ref: Some(ScaledObjectRef {
                    name: format!("so-{i}"),
                    namespace: format!("ns-{}", i % 20),
                    scaler_metadata: md,
                }),
                metric_name: format!("s0-foresight-model-{i}-replicas"),
            }
        })
        .collect()
}

struct Phase {
    requests: u64,
    errors: u64,
    secs: f64,
    hist: Histogram<u64>,
}

async fn run_load(
    url: &str,
    reqs: Arc<Vec<GetMetricsRequest>>,
    concurrency: usize,
    connections: usize,
    dur: Duration,
) -> Phase {
    let mut channels = Vec::new();
    for _ in 0..connections {
        channels.push(Channel::from_shared(url.to_string()).unwrap().connect().await.unwrap());
    }
    let start = Instant::now();
    let deadline = start + dur;
    let mut tasks = Vec::new();
    for t in 0..concurrency {
        let mut client = ExternalScalerClient::new(channels[t % connections].clone());
        let reqs = reqs.clone();
        tasks.push(tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
            let (mut n, mut errors, mut i) = (0u64, 0u64, t * 7919);
            while Instant::now() < deadline {
                let req = reqs[i % reqs.len()].clone();
                i += 1;
                let t0 = Instant::now();
                match client.get_metrics(req).await {
                    Ok(r) if r.get_ref().metric_values.len() == 1 => {}
                    _ => errors += 1,
                }
                hist.record(t0.elapsed().as_micros().max(1) as u64).unwrap();
                n += 1;
            }
            (hist, n, errors)
        }));
    }
    let mut phase =
        Phase { requests: 0, errors: 0, secs: 0.0, hist: Histogram::new_with_bounds(1, 60_000_000, 3).unwrap() };
    for t in tasks {
        let (h, n, e) = t.await.unwrap();
        phase.hist.add(h).unwrap();
        phase.requests += n;
        phase.errors += e;
    }
    phase.secs = start.elapsed().as_secs_f64();
    phase
}

fn main() {
    let secs: f64 = std::env::var("FORESIGHT_BENCH_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(3.0);
    let dur = Duration::from_secs_f64(secs);
    let server_rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let client_rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();

    let shutdown = CancellationToken::new();
    let (foresight_url, bare_url) = server_rt.block_on(async {
        let settings = Settings::from_yaml(&config(), "bench", Path::new(".")).unwrap();
        let registry = Registry::new();
        let store = std::sync::Arc::new(foresight::store::Store::open(Default::default()).unwrap());
        let now = SystemTime::now();
        for i in 0..WORKLOADS {
            store.set_latest(&format!("ns-{}/model-{i}/concurrency", i % 20), now, (10 + (i * 37) % 500) as f64);
        }
        let mut engine = Engine::new(&settings, registry.clone(), store);
        engine.tick(now);
        assert_eq!(registry.load().len(), WORKLOADS);
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let foresight_url = format!("http://{}", l.local_addr().unwrap());
        tokio::spawn(scaler::serve(l, None, registry, shutdown.clone()));
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let bare_url = format!("http://{}", l.local_addr().unwrap());
        tokio::spawn(
            tonic::transport::Server::builder()
                .tcp_nodelay(true)
                .add_service(ExternalScalerServer::new(Bare))
                .serve_with_incoming(TcpListenerStream::new(l)),
        );
        (foresight_url, bare_url)
    });

    let reqs = Arc::new(requests());
    println!("GetMetrics, {WORKLOADS} workloads registered, loopback, {secs}s per phase");
    println!(
        "{:<10} {:<22} {:>10} {:>9} {:>9} {:>9} {:>7}",
        "server", "phase", "req/s", "p50 us", "p99 us", "p999 us", "errors"
    );
    let mut totals: HashMap<&str, (f64, f64)> = HashMap::new();
    client_rt.block_on(async {
        for round in 0..2 {
            for (name, url) in [("bare", &bare_url), ("foresight", &foresight_url)] {
                for (label, c, conns) in
                    [("1 client, sequential", 1, 1), ("64 in flight, 4 conns", CONCURRENCY, CONNECTIONS)]
                {
                    let p = run_load(url, reqs.clone(), c, conns, dur).await;
                    let rps = p.requests as f64 / p.secs;
                    let q = |x: f64| p.hist.value_at_quantile(x);
                    println!(
                        "{name:<10} {label:<22} {rps:>10.0} {:>9} {:>9} {:>9} {:>7}",
                        q(0.5),
                        q(0.99),
                        q(0.999),
                        p.errors
                    );
                    if c > 1 && round == 1 {
                        totals.entry(name).or_default().0 = rps;
                    }
                    if c == 1 && round == 1 {
                        totals.entry(name).or_default().1 = q(0.99) as f64;
                    }
                }
            }
        }
    });
    let (f, b) = (totals["foresight"], totals["bare"]);
    println!(
        "foresight/bare throughput (round 2): {:.2}   foresight p99 sequential: {} us (goal < 1000 us, >= 0.50 of bare)",
        f.0 / b.0,
        f.1
    );
    shutdown.cancel();
}
