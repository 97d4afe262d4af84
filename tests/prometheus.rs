//! End to end with a real Prometheus (Debian package `prometheus`, started
//! here on 127.0.0.1): simulated vLLM pods with three hours of history
//! written into Prometheus's TSDB by `promtool`, then scraped live every
//! second. `foresight serve` backfills the history through `query_range`
//! (split into several queries by a small `max_points_per_query`), then
//! keeps polling; the per-minute request and token rates it stored must
//! match what the simulated pods emitted within 1% (3% for live minutes).

use crate::common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use foresight::{
    fake_vllm::{server::SimServer, Fleet, SimConfig},
    store::{Store, StoreConfig},
};
use tokio_util::sync::CancellationToken;

const FLEET: &str = "pods: 2
max_num_seqs: 512
demand: {requests_per_sec: 20, daily_amplitude: 0.3, seed: 5}
";
const HISTORY_SECS: f64 = 3.0 * 3600.0;
const RES: f64 = 60.0;

fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

/// (finished requests, prompt tokens, generated tokens) across the fleet.
fn counters(f: &Fleet) -> (f64, f64, f64) {
    f.pods().iter().fold((0.0, 0.0, 0.0), |acc, p| {
        let m = p.metrics();
        (
            acc.0 + (m.success_stop + m.success_length) as f64,
            acc.1 + m.prompt_tokens as f64,
            acc.2 + m.generation_tokens as f64,
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backfilled_and_polled_rates_match_what_the_pods_emitted() {
    if !common::tools::have("prometheus", &[common::tools::PROMETHEUS, common::tools::PROMTOOL]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let fleet_file = dir.path().join("fleet.yaml");
    std::fs::write(&fleet_file, FLEET).unwrap();
    let sim: SimConfig = serde_yaml_ng::from_str(FLEET).unwrap();

    // Live scraping starts at the next whole minute; history covers the three hours before.
    let live_from = (now() / RES).ceil() * RES + RES;
    let origin = live_from - HISTORY_SECS;

    // The live pods: the same deterministic fleet, so their counters continue the history.
    let shutdown = CancellationToken::new();
    let server =
        SimServer::start(Fleet::new(sim.clone(), None, origin), "127.0.0.1".parse().unwrap(), shutdown.clone())
            .await
            .unwrap();
    let instances: Vec<String> =
        server.urls.iter().map(|u| u.trim_start_matches("http://").trim_end_matches("/metrics").to_string()).collect();

    // History as Prometheus would have scraped it (every 15 s), labelled as the live series will be.
    let labels: Vec<String> = instances.iter().map(|i| format!("job=\"vllm\",instance=\"{i}\"")).collect();
    let tsdb = dir.path().join("tsdb");
    common::import_history(&fleet_file, origin, live_from - 15.0, &labels, &tsdb);

    // Wait to start scraping until the history ends, so live samples follow it.
    while now() < live_from - 1.0 {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (_prom, prom_port) = common::start_prometheus(dir.path(), &tsdb, &instances).await;

    let store_path = dir.path().join("history.redb");
    let config = format!(
        "grpc: {{listen: 127.0.0.1:0}}
http: {{listen: 127.0.0.1:0}}
tick_interval_secs: 1
store: {{path: {}, resolution_secs: 60, flush_interval_secs: 1}}
workloads:
  - name: llama-8b
    namespace: inference
    model: llama-3.1-8b-h100
    signals: [concurrency, request_rate, prompt_tokens_rate, generation_tokens_rate]
    target: {{signal: concurrency}}
    source:
      prometheus:
        url: http://127.0.0.1:{prom_port}
        selector: job=\"vllm\"
        interval_secs: 5
        query_delay_secs: 5
        backfill_days: 0.13
        max_points_per_query: 50
",
        store_path.display()
    );
    let mut foresight = tokio::task::block_in_place(|| common::Server::start(dir.path(), &config));
    let backfilled = foresight.wait_for_log("backfilled history from Prometheus", Duration::from_secs(60));
    assert!(backfilled.contains("\"buckets\":179") || backfilled.contains("\"buckets\":180"), "{backfilled}");

    // Live minutes after the hand-over, plus the query delay and a poll.
    let live_to = live_from + 4.0 * RES;
    while now() < live_to + 12.0 {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    foresight.signal("TERM");
    assert!(tokio::task::block_in_place(|| foresight.wait_exit(Duration::from_secs(20))).is_some_and(|s| s.success()));

    // Ground truth: the same fleet, advanced to each bucket boundary.
    let mut truth = Fleet::new(sim, None, origin);
    let buckets = ((live_to - origin) / RES) as usize;
    let mut at_edges = Vec::with_capacity(buckets + 1);
    for k in 0..=buckets {
        truth.advance_to(origin + k as f64 * RES);
        at_edges.push(counters(&truth));
    }
    let store = Store::open(StoreConfig {
        path: Some(store_path),
        resolution: Duration::from_secs(60),
        ..StoreConfig::default()
    })
    .unwrap();
    let t = |secs: f64| UNIX_EPOCH + Duration::from_secs_f64(secs);
    for (signal, pick) in [("request_rate", 0usize), ("prompt_tokens_rate", 1), ("generation_tokens_rate", 2)] {
        let s = store.range(&format!("inference/llama-8b/{signal}"), t(origin), t(live_to)).unwrap();
        assert_eq!(s.values.len(), buckets);
        let (mut checked, mut live_checked, mut worst) = (0, 0, 0.0f64);
        for (k, got) in s.values.iter().enumerate() {
            let start = origin + k as f64 * RES;
            // The two minutes at the hand-over from imported (15 s) to scraped (1 s)
            // samples have windows that mix both.
            if start >= live_from - RES && start < live_from + RES {
                continue;
            }
            let get = |c: (f64, f64, f64)| [c.0, c.1, c.2][pick];
            let want = (get(at_edges[k + 1]) - get(at_edges[k])) / RES;
            assert!(got.is_finite(), "{signal}: bucket {k} ({start}) is a gap; want {want}");
            let err = (got - want).abs() / want;
            worst = worst.max(err);
            // Imported history carries exact timestamps. A live sample is stamped
            // when Prometheus starts the scrape, but the pod reads its counters
            // when it answers; on a loaded machine that lag (and a late scrape
            // near a window edge, which `rate` extrapolates over) moves up to a
            // second or two of lumpy token counts across the bucket edge.
            let tolerance = if start >= live_from { 0.03 } else { 0.01 };
            assert!(
                err <= tolerance,
                "{signal}: bucket {k} at {start}: stored {got}, pods emitted {want} ({:.2}% off)",
                err * 100.0
            );
            checked += 1;
            if start >= live_from {
                live_checked += 1;
            }
        }
        assert!(checked >= 175 && live_checked >= 2, "{signal}: checked {checked} buckets, {live_checked} live");
        eprintln!("{signal}: {checked} minutes checked ({live_checked} live), worst error {:.3}%", worst * 100.0);
    }
    shutdown.cancel();
}
