//! Against vLLM 0.34.0's own metrics code (`scripts/vllm-fixture`: its
//! unmodified `PrometheusStatLogger` under a steady synthetic load, served by
//! prometheus_client 0.26): what Foresight reads must be what the pods
//! recorded, within 2%, for every signal, whether it scrapes the pods
//! itself or reads them through a real Prometheus 2.x or VictoriaMetrics.
//!
//! Truth is the pods' own record (a line per 50 ms step). A reading was
//! rendered at some moment inside its request, and a server's rate covers
//! the samples that fell in its window, so each check takes the range of
//! what the pods recorded over every window those moments allow
//! ([`over_windows`]) and requires Foresight's value within 2% of it.

use crate::common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::common::vllm_pod::{bucket_quantile, Truth, VllmPod, QUEUE_TIME_BOUNDS};
use foresight::sources::{
    scrape::{ScrapeConfig, Scraper},
    Signal, Signals,
};

fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

/// The truth files' fixed step: windows are searched at this grain.
const STEP: f64 = 0.05;
const TOLERANCE: f64 = 0.02;

/// (min, max) of `f(a, b)` over windows (a, b] with `a` in `starts` and `b`
/// in `ends`, on a grid of [`STEP`]; `None` values are skipped.
fn over_windows(starts: (f64, f64), ends: (f64, f64), f: impl Fn(f64, f64) -> Option<f64>) -> Option<(f64, f64)> {
    let grid = |(lo, hi): (f64, f64)| {
        let n = ((hi - lo) / STEP).ceil().max(0.0) as usize;
        (0..=n).map(move |k| (lo + k as f64 * STEP).min(hi))
    };
    let mut out: Option<(f64, f64)> = None;
    for a in grid(starts) {
        for b in grid(ends) {
            if let Some(v) = f(a, b).filter(|v| v.is_finite()) {
                out = Some(out.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v))));
            }
        }
    }
    out
}

/// (min, max) of `f(t)` for `t` in `range`, on the same grid.
fn over_times(range: (f64, f64), f: impl Fn(f64) -> Option<f64>) -> Option<(f64, f64)> {
    over_windows(range, (0.0, 0.0), |t, _| f(t))
}

/// `got` within [`TOLERANCE`] of the range the pods' record allows.
fn check(what: &str, got: Option<f64>, want: Option<(f64, f64)>) {
    let (lo, hi) = want.unwrap_or_else(|| panic!("{what}: nothing recorded to compare with"));
    let got = got.unwrap_or_else(|| panic!("{what}: Foresight read nothing; the pods recorded {lo}..{hi}"));
    let slack = |v: f64| TOLERANCE * v.abs().max(1e-9);
    assert!(
        got >= lo - slack(lo) && got <= hi + slack(hi),
        "{what}: Foresight read {got}, the pods recorded {lo}..{hi} (more than 2% off)"
    );
}

/// Sum over `pods` of `f(truth, a, b)`.
fn fleet(pods: &[Truth], f: impl Fn(&Truth) -> f64) -> f64 {
    pods.iter().map(f).sum()
}

/// The window-dependent signals over (a, b], from the pods' truth.
fn windowed(signal: Signal, pods: &[Truth], a: f64, b: f64) -> Option<f64> {
    let inc = |path: &str| fleet(pods, |t| t.increase(a, b, path));
    let per_sec = |path: &str| Some(inc(path) / (b - a));
    let ratio = |num: &str, den: &str| {
        let d = inc(den);
        (d > 0.0).then(|| inc(num) / d)
    };
    match signal {
        Signal::RequestRate => Some((inc("/total/request_success") + inc("/admission_rejections_total")) / (b - a)),
        Signal::RejectionRate => per_sec("/admission_rejections_total"),
        Signal::PromptTokensRate => per_sec("/total/prompt_tokens"),
        Signal::GenerationTokensRate => per_sec("/total/generation_tokens"),
        Signal::PrefixCacheHitFraction => ratio("/total/prefix_cache_hits", "/total/prefix_cache_queries"),
        Signal::PromptTokensPerRequest => {
            ratio("/total/request_prompt_tokens/sum", "/total/request_prompt_tokens/count")
        }
        Signal::GenerationTokensPerRequest => {
            ratio("/total/request_generation_tokens/sum", "/total/request_generation_tokens/count")
        }
        Signal::QueueWaitP50 | Signal::QueueWaitP90 | Signal::QueueWaitP99 => {
            let q = match signal {
                Signal::QueueWaitP50 => 0.5,
                Signal::QueueWaitP90 => 0.9,
                _ => 0.99,
            };
            let obs: Vec<f64> = pods.iter().flat_map(|t| t.queue_times(a, b)).collect();
            bucket_quantile(q, &obs, &QUEUE_TIME_BOUNDS)
        }
        other => panic!("{other} is not windowed"),
    }
}

/// The gauges at `t`: sums over awake pods; KV cache a mean over awake engines.
fn gauge(signal: Signal, pods: &[Truth], t: f64) -> Option<f64> {
    let awake: Vec<&Truth> = pods.iter().filter(|p| !p.at(t)["sleeping"].as_bool().unwrap()).collect();
    let sum = |path: &str| awake.iter().map(|p| p.value(t, path)).sum::<f64>();
    Some(match signal {
        Signal::Running => sum("/total/num_requests_running"),
        Signal::QueueDepth => sum("/total/num_requests_waiting_capacity"),
        Signal::QueueDeferred => sum("/total/num_requests_waiting_deferred"),
        Signal::Concurrency => sum("/total/num_requests_running") + sum("/total/num_requests_waiting"),
        Signal::KvCacheUsage => {
            let kv: Vec<f64> = awake
                .iter()
                .flat_map(|p| {
                    let engines = p.at(t)["engines"].as_object().unwrap().clone();
                    engines.values().map(|e| e["kv_cache_usage_perc"].as_f64().unwrap()).collect::<Vec<_>>()
                })
                .collect();
            kv.iter().sum::<f64>() / kv.len() as f64
        }
        other => panic!("{other} is not a gauge"),
    })
}

const GAUGES: [Signal; 5] =
    [Signal::Running, Signal::QueueDepth, Signal::QueueDeferred, Signal::Concurrency, Signal::KvCacheUsage];
const WINDOWED: [Signal; 10] = [
    Signal::RequestRate,
    Signal::RejectionRate,
    Signal::PromptTokensRate,
    Signal::GenerationTokensRate,
    Signal::PrefixCacheHitFraction,
    Signal::PromptTokensPerRequest,
    Signal::GenerationTokensPerRequest,
    Signal::QueueWaitP50,
    Signal::QueueWaitP90,
    Signal::QueueWaitP99,
];

/// Pod arguments: steady load at a fine step, queue times spread over
/// several of vLLM's buckets, then `extra` (space-separated).
fn pod_args(extra: &str) -> Vec<&str> {
    let mut a = vec!["--engines", "2", "--step", "0.05", "--queue-mean", "1.5"];
    a.extend(extra.split_whitespace());
    a
}

/// A pod answering prometheus_client's content negotiation on /metrics:
/// OpenMetrics with `vllm_` samples to any Accept that lists OpenMetrics
/// (Prometheus 2.x's), refusing some requests at admission.
const NEGOTIATING: &str = "--http negotiate --rps 30 --reject-rps 10 --running 6 --waiting-capacity 3 \
                           --waiting-deferred 1 --kv-cache-usage 0.5";
/// A pod routed as vLLM's API server routes /metrics (text whatever the Accept).
const API_SERVER: &str = "--rps 20 --running 10 --waiting-capacity 0 --waiting-deferred 2 --kv-cache-usage 0.3 \
                          --prefix-hit-ratio 0.6";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_scrape_reads_what_real_vllm_pods_recorded() {
    if !common::tools::have("vllm_real", &[common::tools::TEST_VENV]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Pods answering prometheus_client's content negotiation on /metrics (the
    // case that read nothing before: it answers OpenMetrics with `vllm_` samples
    // to any Accept listing OpenMetrics), vLLM's own API-server routing, one with
    // several API server processes (no `_created`), and one asleep.
    let pods = tokio::task::block_in_place(|| {
        let d = dir.path();
        [
            VllmPod::start(d, "negotiating", &pod_args(&format!("{NEGOTIATING} --seed 1"))),
            VllmPod::start(d, "api-server", &pod_args(&format!("{API_SERVER} --seed 2"))),
            VllmPod::start(d, "multiprocess", &pod_args("--multiprocess --rps 15 --seed 3")),
            VllmPod::start(d, "asleep", &pod_args("--http negotiate --sleep-level 1 --kv-cache-usage 0.9 --seed 4")),
        ]
    });
    let mut scraper = Scraper::new(ScrapeConfig {
        targets: pods.iter().map(|p| p.url("/metrics")).collect(),
        dns: None,
        interval_secs: 10.0,
        timeout_secs: 5.0,
        concurrency: 16,
        model_name: None,
        max_body_bytes: 10 << 20,
    });
    // Polls 10 s apart; each bracketed by the clock before and after.
    let mut polls: Vec<(f64, f64, Signals)> = Vec::new();
    for i in 0..4 {
        if i > 0 {
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
        let before = now();
        let got = scraper.poll(SystemTime::now()).await.expect("a poll with every pod answering");
        polls.push((before, now(), got));
        let round = &scraper.last_round;
        assert_eq!((round.targets, round.answered), (4, 4), "every pod answers: {round:?}");
        assert_eq!((round.asleep, round.serving()), (1, 3), "the sleeping pod is no serving replica");
    }
    let truth: Vec<Truth> = pods.iter().map(VllmPod::truth).collect();
    // A value read at a poll was rendered between its start and its end (and
    // a truth line is stamped just after its step is recorded).
    let span = |(before, after): (f64, f64)| (before, after + STEP);
    for w in polls.windows(2) {
        let ((b0, a0, _), (b1, a1, got)) = (&w[0], &w[1]);
        for s in GAUGES {
            check(&format!("{s} at {b1:.1}"), got.get(s), over_times(span((*b1, *a1)), |t| gauge(s, &truth, t)));
        }
        for s in WINDOWED {
            let want = over_windows(span((*b0, *a0)), span((*b1, *a1)), |a, b| windowed(s, &truth, a, b));
            check(&format!("{s} over {b0:.1}..{b1:.1}"), got.get(s), want);
        }
    }
    // Refused requests are part of the demand Foresight records.
    let (_, _, last) = &polls[3];
    let served = last.get(Signal::RequestRate).unwrap() - last.get(Signal::RejectionRate).unwrap();
    assert!(last.get(Signal::RejectionRate).unwrap() > 8.0 && served > 50.0, "{last:?}");
}

fn wait_http_ok(addr: &str, path: &str, what: &str) {
    let addr: std::net::SocketAddr = addr.parse().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while common::http_status(addr, path) != Some(200) {
        assert!(std::time::Instant::now() < deadline, "{what} did not get ready");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Store resolution of the servers test: one bucket per 10 s.
const RES: f64 = 10.0;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_2_and_victoriametrics_hold_what_real_vllm_pods_recorded() {
    use common::tools::{have, PROMETHEUS, TEST_VENV, VICTORIA_METRICS};
    if !have("vllm_real", &[PROMETHEUS, VICTORIA_METRICS, TEST_VENV]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let pods = tokio::task::block_in_place(|| {
        [
            // Prometheus 2.x stores this pod's families under `vllm_` names.
            VllmPod::start(d, "negotiating", &pod_args(&format!("{NEGOTIATING} --seed 5"))),
            VllmPod::start(d, "api-server", &pod_args(&format!("{API_SERVER} --seed 6"))),
            VllmPod::start(d, "asleep", &pod_args("--sleep-level 1 --seed 7")),
        ]
    });
    let awake = &pods[..2];
    let targets: Vec<String> = awake.iter().map(|p| format!("'127.0.0.1:{}'", p.port)).collect();
    let scrape = d.join("scrape.yml");
    std::fs::write(
        &scrape,
        format!(
            "global: {{scrape_interval: 1s, scrape_timeout: 900ms}}\nscrape_configs:\n  - job_name: vllm\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        ),
    )
    .unwrap();
    let (prom, vm) = (format!("127.0.0.1:{}", common::free_port()), format!("127.0.0.1:{}", common::free_port()));
    let log = |name: &str| std::process::Stdio::from(std::fs::File::create(d.join(name)).unwrap());
    let _prom = common::Kill(
        std::process::Command::new("prometheus")
            .arg(format!("--config.file={}", scrape.display()))
            .arg(format!("--storage.tsdb.path={}", d.join("prom").display()))
            .arg(format!("--web.listen-address={prom}"))
            .stdout(std::process::Stdio::null())
            .stderr(log("prometheus.log"))
            .spawn()
            .unwrap(),
    );
    // VictoriaMetrics with its defaults, among them hiding the newest 30 s from queries.
    let _vm = common::Kill(
        std::process::Command::new("victoria-metrics")
            .arg(format!("-promscrape.config={}", scrape.display()))
            .arg(format!("-storageDataPath={}", d.join("vm").display()))
            .arg(format!("-httpListenAddr={vm}"))
            .stdout(log("vm.out.log"))
            .stderr(log("vm.log"))
            .spawn()
            .unwrap(),
    );
    tokio::task::block_in_place(|| {
        wait_http_ok(&prom, "/-/ready", "Prometheus");
        wait_http_ok(&vm, "/health", "VictoriaMetrics");
    });
    let every = "[concurrency, running, queue_depth, queue_deferred, kv_cache_usage, request_rate, rejection_rate, prompt_tokens_rate, generation_tokens_rate, prefix_cache_hit_fraction, prompt_tokens_per_request, generation_tokens_per_request, queue_wait_p50, queue_wait_p90, queue_wait_p99]";
    let store_path = d.join("history.redb");
    let all_pods: Vec<String> = pods.iter().map(|p| format!("'{}'", p.url("/metrics"))).collect();
    let config = format!(
        "grpc: {{listen: 127.0.0.1:0}}
http: {{listen: 127.0.0.1:0}}
tick_interval_secs: 1
store: {{path: {store}, resolution_secs: {res}, flush_interval_secs: 1}}
workloads:
  - name: via-prometheus
    namespace: inference
    model: llama-3.1-8b-h100
    signals: {every}
    target: {{signal: concurrency}}
    source: {{prometheus: {{url: 'http://{prom}', selector: 'job=\"vllm\"', rate_window: 10s, interval_secs: 2, query_delay_secs: 2, backfill_days: 0.01}}}}
  - name: via-victoriametrics
    namespace: inference
    model: llama-3.1-8b-h100
    signals: {every}
    target: {{signal: concurrency}}
    source: {{prometheus: {{url: 'http://{vm}', selector: 'job=\"vllm\"', rate_window: 10s, interval_secs: 2, backfill_days: 0.01}}}}
  - name: wrong-selector
    namespace: inference
    model: llama-3.1-8b-h100
    signals: [concurrency]
    target: {{signal: concurrency}}
    stale_after_secs: 3
    source: {{prometheus: {{url: 'http://{prom}', selector: 'job=\"not-vllm\"', interval_secs: 1}}}}
  - name: direct
    namespace: inference
    model: llama-3.1-8b-h100
    target: {{signal: concurrency}}
    source: {{scrape: {{targets: [{targets}], interval_secs: 1}}}}
",
        store = store_path.display(),
        res = RES,
        targets = all_pods.join(", "),
    );
    let mut server = tokio::task::block_in_place(|| common::Server::spawn(d, &config, &[]));
    // As `main` does: reqwest's rustls needs a crypto provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let started = now();
    let api = format!("http://{}/api/v1/workloads", server.http);
    let workload = |list: &serde_json::Value, name: &str| {
        list["workloads"].as_array().unwrap().iter().find(|w| w["name"] == name).cloned().unwrap()
    };
    // The sleeping pod answers but is not a serving replica; a selector that
    // matches nothing is named in the reason, not left to look merely stale.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let list: serde_json::Value = reqwest::get(&api).await.unwrap().json().await.unwrap();
        let direct = workload(&list, "direct");
        let wrong = workload(&list, "wrong-selector");
        let error = wrong["error"].as_str().unwrap_or("");
        if direct["pods"] == 2 && error.contains("has matched no series") {
            assert_eq!(direct["source"]["asleep"], 1, "{direct}");
            assert_eq!(direct["source"]["answered"], 3, "{direct}");
            let q = wrong["source"]["empty_queries"]["concurrency"]["query"].as_str().unwrap();
            assert!(q.contains("job=\"not-vllm\"") && error.contains(q), "{wrong}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "direct: {direct}\nwrong-selector: {wrong}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Ten buckets past VictoriaMetrics' 30 s of hidden samples and Foresight's wait for them.
    while now() < started + 12.0 * RES + 45.0 {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let stopped = now();
    server.signal("TERM");
    assert!(tokio::task::block_in_place(|| server.wait_exit(Duration::from_secs(20))).is_some_and(|s| s.success()));

    let truth: Vec<Truth> = awake.iter().map(VllmPod::truth).collect();
    let store = foresight::store::Store::open(foresight::store::StoreConfig {
        path: Some(store_path),
        resolution: Duration::from_secs_f64(RES),
        ..Default::default()
    })
    .unwrap();
    let t = |secs: f64| UNIX_EPOCH + Duration::from_secs_f64(secs);
    // Buckets whose windows lie wholly within the pods' record.
    let from = (truth.iter().map(Truth::first_t).fold(0.0, f64::max) / RES).ceil() * RES + 2.0 * RES;
    for name in ["via-prometheus", "via-victoriametrics"] {
        for s in GAUGES.into_iter().chain(WINDOWED) {
            let series = store.range(&format!("inference/{name}/{s}"), t(from), t(now())).unwrap();
            let got = &series.values;
            // A bucket settles once its samples are all searchable: VictoriaMetrics answers
            // for its newest 30 s from part of them, and Foresight reads such buckets again.
            let settled = (((stopped - 40.0 - from) / RES).floor() as usize).min(got.len());
            assert!(settled >= 8, "{name}/{s}: only {settled} settled buckets from {from}: {got:?}");
            for (k, v) in got[..settled].iter().enumerate() {
                // Bucket [b, b + RES) holds the query evaluated at its end.
                let end = from + (k as f64 + 1.0) * RES;
                let what = format!("{name}/{s}, bucket ending {:.0} s before the stop", stopped - end);
                assert!(v.is_finite(), "{what}: a gap");
                // A server's rate spans its samples in (end - window, end] (VictoriaMetrics also
                // the one before); a sample holds what the pod had when it answered.
                let want = if GAUGES.contains(&s) {
                    over_times((end - 1.0, end + 0.2), |x| gauge(s, &truth, x))
                } else {
                    over_windows((end - RES - 1.0, end - RES + 1.2), (end - 1.0, end + 0.2), |a, b| {
                        windowed(s, &truth, a, b)
                    })
                };
                check(&what, Some(*v), want);
            }
        }
    }
}

// ---------------------------------------------------------------- captured bodies

/// `tests/fixtures/exposition/vllm-0.34/`: one frozen pod's `/metrics`
/// captured in every negotiation prometheus_client offers (see its capture.json).
fn corpus() -> (std::path::PathBuf, serde_json::Value) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/exposition/vllm-0.34");
    let index = serde_json::from_str(&std::fs::read_to_string(dir.join("capture.json")).unwrap()).unwrap();
    (dir, index)
}

fn content_type(index: &serde_json::Value, file: &str) -> String {
    index["files"][file]["content_type"].as_str().unwrap().to_string()
}

fn read_captured(file: &str) -> foresight::sources::vllm::Reading {
    use foresight::sources::exposition::{parse, Format};
    let (dir, index) = corpus();
    let body = std::fs::read_to_string(dir.join(file)).unwrap();
    let format = Format::from_content_type(Some(&content_type(&index, file)));
    let families = parse(&body, format).unwrap_or_else(|e| panic!("{file}: {e}"));
    foresight::sources::vllm::read(&families, UNIX_EPOCH, None).unwrap_or_else(|e| panic!("{file}: {e}"))
}

#[test]
fn captured_vllm_bodies_read_the_same_in_every_negotiation() {
    let text = read_captured("vllm-0.34-text.txt");
    // OpenMetrics with `vllm_` samples under `vllm:` TYPE lines (what any Accept listing
    // OpenMetrics gets, Prometheus 2.x's included), OpenMetrics with UTF-8 names, and the
    // API server's own /metrics (text, `version=1.0.0`).
    for file in
        ["vllm-0.34-om-underscores.txt", "vllm-0.34-prometheus2.txt", "vllm-0.34-om-utf8.txt", "vllm-0.34-api.txt"]
    {
        assert_eq!(read_captured(file), text, "{file} reads unlike the text body");
    }
    let signals = foresight::sources::vllm::Deriver::default().round(vec![("pod".into(), text)]);
    // The capture's pod: 2 engines, each 8 running, 2 waiting for capacity, 1 deferred.
    assert_eq!(signals.get(Signal::Running), Some(16.0));
    assert_eq!(signals.get(Signal::QueueDepth), Some(4.0));
    assert_eq!(signals.get(Signal::QueueDeferred), Some(2.0));
    assert_eq!(signals.get(Signal::Concurrency), Some(22.0));
    assert_eq!(signals.get(Signal::KvCacheUsage), Some(0.4));
    // Several API server processes: no `_created` anywhere, read alike.
    let mp = read_captured("vllm-0.34-multiprocess.txt");
    assert_eq!(read_captured("vllm-0.34-multiprocess-negotiated.txt"), mp);
    let (dir, _) = corpus();
    assert!(!std::fs::read_to_string(dir.join("vllm-0.34-multiprocess.txt")).unwrap().contains("_created"));
    assert!(read_captured("vllm-0.34-sleeping.txt").is_asleep() && !mp.is_asleep());
}

#[tokio::test]
async fn gzip_bodies_are_scraped_as_their_plain_twins() {
    let (dir, index) = corpus();
    let served = dir.clone();
    let types = index.clone();
    let app = axum::Router::new().route(
        "/{file}",
        axum::routing::get(move |axum::extract::Path(file): axum::extract::Path<String>| {
            let body = std::fs::read(served.join(&file)).unwrap();
            let mut headers = axum::http::HeaderMap::new();
            headers.insert("content-type", content_type(&types, &file).parse().unwrap());
            if file.ends_with(".gz") {
                headers.insert("content-encoding", "gzip".parse().unwrap());
            }
            async move { (headers, body) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    for file in ["vllm-0.34-text.txt", "vllm-0.34-om-underscores.txt", "vllm-0.34-om-utf8.txt"] {
        let scrape = |target: String| async move {
            let mut s = Scraper::new(ScrapeConfig {
                targets: vec![target],
                dns: None,
                interval_secs: 1.0,
                timeout_secs: 5.0,
                concurrency: 1,
                model_name: None,
                max_body_bytes: 10 << 20,
            });
            s.poll(SystemTime::now()).await.unwrap()
        };
        let plain = scrape(format!("{base}/{file}")).await;
        assert!(plain.get(Signal::Running).is_some(), "{file}: {plain:?}");
        assert_eq!(scrape(format!("{base}/{file}.gz")).await, plain, "{file}.gz");
    }
}

#[test]
fn older_vllm_and_kserve_bodies_still_read() {
    use foresight::sources::exposition::{parse, Format};
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/exposition");
    let signals = |file: &str| {
        let body = std::fs::read_to_string(dir.join(file)).unwrap();
        let reading = foresight::sources::vllm::read(&parse(&body, Format::Text).unwrap(), UNIX_EPOCH, None).unwrap();
        assert!(!reading.is_asleep(), "{file}: no sleep family is awake");
        foresight::sources::vllm::Deriver::default().round(vec![("pod".into(), reading)])
    };
    // vLLM before V1: `gpu_cache_usage_perc`, no `engine` label, no waiting reasons.
    let v0 = signals("vllm-v0-old-names.txt");
    assert_eq!(v0.get(Signal::KvCacheUsage), Some(0.2634));
    assert_eq!(v0.get(Signal::Running), Some(12.0));
    assert_eq!(v0.get(Signal::QueueDepth), v0.get(Signal::Concurrency).map(|c| c - 12.0));
    assert_eq!(v0.get(Signal::QueueDeferred), None);
    // KServe's Hugging Face runtime: vLLM's families beside KServe's own.
    let kserve = signals("kserve.txt");
    assert!(kserve.get(Signal::Running).is_some_and(|r| r >= 37.0), "{kserve:?}");
}
