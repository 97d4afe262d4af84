//! What a hostile or broken metric source can do, and what it cannot: an
//! invalid value (NaN, negative, absurdly large) is a gap with a counted
//! reason in every signal, from a scraped pod and from Prometheus alike; a
//! body past the size bound fails that target by name while memory stays
//! flat; an escape the grammar allows does not cost a pod its demand.

use crate::common;

use std::{
    sync::{
        atomic::{AtomicU8, Ordering},
        Arc,
    },
    time::{Duration, Instant, SystemTime},
};

use axum::{extract::State, routing::get, Router};
use foresight::sources::{
    scrape::{ScrapeConfig, Scraper},
    Signal,
};
use tokio_util::sync::CancellationToken;

/// Serve `app` on loopback until `shutdown`; its base URL.
async fn serve(app: Router, shutdown: &CancellationToken) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let sd = shutdown.clone();
    tokio::spawn(async move { axum::serve(listener, app).with_graceful_shutdown(sd.cancelled_owned()).await });
    base
}

fn scraper(targets: Vec<String>) -> Scraper {
    Scraper::new(ScrapeConfig {
        targets,
        dns: None,
        interval_secs: 1.0,
        timeout_secs: 5.0,
        concurrency: 4,
        model_name: None,
        max_body_bytes: 10 << 20,
    })
}

/// A vLLM-shaped body with every family a signal is derived from: counters
/// at `n` times their per-poll step (so each poll's rates are positive), and
/// `bad` in place of every value when given.
fn vllm_body(n: f64, bad: Option<&str>) -> String {
    let v = |x: f64| bad.map_or_else(|| format!("{x}"), str::to_string);
    let m = "{model_name=\"m\",engine=\"0\"}";
    let mut b = String::new();
    for (name, kind, x) in [
        ("vllm:num_requests_running", "gauge", 7.0),
        ("vllm:num_requests_waiting", "gauge", 3.0),
        ("vllm:kv_cache_usage_perc", "gauge", 0.4),
        ("vllm:request_success_total", "counter", 10.0 * n),
        ("vllm:prompt_tokens_total", "counter", 5000.0 * n),
        ("vllm:generation_tokens_total", "counter", 800.0 * n),
        ("vllm:prefix_cache_queries_total", "counter", 5000.0 * n),
        ("vllm:prefix_cache_hits_total", "counter", 1000.0 * n),
    ] {
        b.push_str(&format!("# TYPE {name} {kind}\n{name}{m} {}\n", v(x)));
    }
    b.push_str(&format!(
        "# TYPE vllm:num_requests_waiting_by_reason gauge\nvllm:num_requests_waiting_by_reason{{model_name=\"m\",engine=\"0\",reason=\"deferred\"}} {}\n",
        v(1.0)
    ));
    b.push_str(&format!(
        "# TYPE vllm:admission_rejections_total counter\nvllm:admission_rejections_total{{model_name=\"m\"}} {}\n",
        v(n)
    ));
    for (name, le) in [
        ("vllm:time_to_first_token_seconds", [0.1, 1.0]),
        ("vllm:inter_token_latency_seconds", [0.01, 0.1]),
        ("vllm:e2e_request_latency_seconds", [1.0, 10.0]),
        ("vllm:request_queue_time_seconds", [0.3, 1.0]),
        ("vllm:request_prompt_tokens", [100.0, 1000.0]),
        ("vllm:request_generation_tokens", [100.0, 1000.0]),
    ] {
        b.push_str(&format!("# TYPE {name} histogram\n"));
        let count = 10.0 * n;
        for (bound, frac) in [(le[0], 0.5), (le[1], 0.9)] {
            b.push_str(&format!("{name}_bucket{{model_name=\"m\",engine=\"0\",le=\"{bound}\"}} {}\n", v(frac * count)));
        }
        b.push_str(&format!("{name}_bucket{{model_name=\"m\",engine=\"0\",le=\"+Inf\"}} {}\n", v(count)));
        b.push_str(&format!("{name}_sum{m} {}\n{name}_count{m} {}\n", v(le[0] * count), v(count)));
    }
    b
}

/// NaN, a large negative and an absurdly large value, in place of every
/// value of a pod's body: no signal takes any of them (each is a gap in
/// history, with its reason), and the signals come back once the pod is
/// sane again and a rate has two sane readings to go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nan_negative_and_huge_values_are_gaps_in_every_signal() {
    const BAD: [Option<&str>; 4] = [None, Some("NaN"), Some("-1e9"), Some("1e308")];
    let shutdown = CancellationToken::new();
    // (poll number, which of BAD): the pod's body follows it.
    let state = Arc::new((AtomicU8::new(0), AtomicU8::new(0)));
    let app = Router::new()
        .route(
            "/metrics",
            get(|State(s): State<Arc<(AtomicU8, AtomicU8)>>| async move {
                let n = f64::from(s.0.load(Ordering::SeqCst));
                vllm_body(n, BAD[usize::from(s.1.load(Ordering::SeqCst))])
            }),
        )
        .with_state(state.clone());
    let base = serve(app, &shutdown).await;
    let mut scraper = scraper(vec![format!("{base}/metrics")]);
    let mut poll = |bad: u8| {
        state.0.fetch_add(1, Ordering::SeqCst);
        state.1.store(bad, Ordering::SeqCst);
        // A rate divides by the time between bodies.
        std::thread::sleep(Duration::from_millis(20));
        futures_poll(&mut scraper)
    };
    poll(0);
    let sane = poll(0);
    // Every signal the body feeds has a value once there are two readings.
    let all: Vec<Signal> = sane.invalid().keys().copied().collect();
    assert!(all.is_empty(), "a sane body has no invalid signal: {all:?}");
    let derived: Vec<Signal> = foresight_signals().into_iter().filter(|s| sane.get(*s).is_some()).collect();
    assert_eq!(derived.len(), 22, "every signal is derived from the sane body: {sane:?}");
    for (bad, reason) in [(1, "not_a_number"), (2, "negative"), (3, "implausible")] {
        let got = poll(bad);
        for s in &derived {
            assert_eq!(got.get(*s), None, "{s} took {:?} from a body of {:?}", got.get(*s), BAD[bad as usize]);
            assert!(got.invalid().contains_key(s), "{s} is not reported invalid for {:?}", BAD[bad as usize]);
        }
        // A plain gauge says exactly why.
        let running = serde_json::to_value(got.invalid()[&Signal::Running]).unwrap();
        assert_eq!(running, reason, "running from {:?}", BAD[bad as usize]);
        // Back to sane: gauges at once; rates once the previous reading is sane too.
        let after = poll(0);
        assert_eq!(after.get(Signal::QueueDepth), Some(2.0), "waiting 3 less 1 deferred");
        assert_eq!(after.get(Signal::RequestRate), None, "no rate across an invalid reading");
        let again = poll(0);
        for s in &derived {
            assert!(again.get(*s).is_some(), "{s} did not come back after {:?}", BAD[bad as usize]);
        }
    }
    shutdown.cancel();
}

/// The signals, as the public `Signal` enum lists them through its names.
fn foresight_signals() -> Vec<Signal> {
    [
        "concurrency",
        "running",
        "queue_depth",
        "request_rate",
        "prompt_tokens_rate",
        "generation_tokens_rate",
        "kv_cache_usage",
        "ttft_p50",
        "ttft_p90",
        "ttft_p99",
        "itl_p90",
        "e2e_p50",
        "e2e_p90",
        "e2e_p99",
        "rejection_rate",
        "queue_deferred",
        "queue_wait_p50",
        "queue_wait_p90",
        "queue_wait_p99",
        "prompt_tokens_per_request",
        "generation_tokens_per_request",
        "prefix_cache_hit_fraction",
    ]
    .iter()
    .map(|n| serde_json::from_value(serde_json::Value::String(n.to_string())).unwrap())
    .collect()
}

/// One poll on this (multi-threaded) runtime from synchronous test code.
fn futures_poll(scraper: &mut Scraper) -> foresight::sources::Signals {
    tokio::task::block_in_place(|| {
        tokio::runtime::Handle::current().block_on(scraper.poll(SystemTime::now())).expect("the pod answers")
    })
}

/// A `\t`, `\f` or `\z` escape in a pod's HELP or label values (the
/// OpenMetrics grammar allows a backslash before any character) leaves its
/// demand read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unusual_escape_leaves_a_pods_demand_read() {
    let shutdown = CancellationToken::new();
    let body = "# HELP vllm:num_requests_running Requests\\tin the\\f batch \\z.\n\
                # TYPE vllm:num_requests_running gauge\n\
                vllm:num_requests_running{model_name=\"m\\tx\",engine=\"0\"} 12\n\
                # TYPE vllm:num_requests_waiting gauge\n\
                vllm:num_requests_waiting{model_name=\"m\\tx\",engine=\"0\"} 5\n";
    let base = serve(Router::new().route("/metrics", get(move || async move { body })), &shutdown).await;
    let mut s = scraper(vec![format!("{base}/metrics")]);
    let got = s.poll(SystemTime::now()).await.expect("the body parses");
    assert_eq!(got.get(Signal::Concurrency), Some(17.0));
    assert!(s.errors.is_empty(), "{:?}", s.errors);
    shutdown.cancel();
}

/// Peak resident memory of a process, from /proc (Linux), in MiB.
fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/<pid>/status");
    kib / 1024.0
}

/// A vLLM-shaped body of `bytes` bytes or a little more.
fn huge_body(bytes: usize) -> String {
    let line = "vllm:num_requests_running{model_name=\"m\",engine=\"0\"} 1\n";
    let mut b = String::from("# TYPE vllm:num_requests_running gauge\n");
    while b.len() < bytes {
        b.push_str(line);
    }
    b
}

/// A pod that answers a 50 MB body, streamed with no length (the bound is
/// met while reading) and with its length declared (refused before): the
/// real binary stops reading at `max_body_bytes` (10 MiB by default), names
/// the limit in its log and in the API, goes on with the other pod, and its
/// peak memory stays under 100 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_past_the_bound_fails_by_name_and_memory_stays_flat() {
    let shutdown = CancellationToken::new();
    let big = axum::body::Bytes::from(huge_body(50_000_000));
    let small = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\",engine=\"0\"} 4\n";
    let streamed = big.clone();
    let app = Router::new()
        .route(
            "/streamed",
            get(move || {
                let chunks: Vec<Result<axum::body::Bytes, std::io::Error>> = (0..streamed.len())
                    .step_by(64 << 10)
                    .map(|i| Ok(streamed.slice(i..(i + (64 << 10)).min(streamed.len()))))
                    .collect();
                async move { axum::body::Body::from_stream(tokio_stream::iter(chunks)) }
            }),
        )
        .route("/declared", get(move || async move { big.clone() }))
        .route("/small", get(move || async move { small }));
    let base = serve(app, &shutdown).await;
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        "grpc: {{listen: 127.0.0.1:0}}\nhttp: {{listen: 127.0.0.1:0}}\ntick_interval_secs: 0.2\nstore: {{path: null}}\n\
         forecast: {{enabled: false}}\nworkloads:\n  - name: m\n    namespace: inference\n    model: llama-3.1-8b-h100\n\
         \x20   target: {{signal: concurrency}}\n\
         \x20   source: {{scrape: {{targets: ['{base}/streamed', '{base}/declared', '{base}/small'], interval_secs: 0.5, timeout_secs: 10}}}}\n"
    );
    let s = tokio::task::block_in_place(|| common::Server::start(dir.path(), &yaml));
    let line = tokio::task::block_in_place(|| s.wait_for_log("body_too_large", Duration::from_secs(20)));
    assert!(line.contains("10485760-byte limit (scrape.max_body_bytes)"), "{line}");
    // Several rounds of the big body, then the peak.
    let deadline = Instant::now() + Duration::from_secs(5);
    while s.log_lines_with(&["body_too_large"]).len() < 4 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let v: serde_json::Value = serde_json::from_str(&common::http_get(s.http, "/api/v1/workloads").unwrap()).unwrap();
    let w = &v["workloads"][0];
    assert_eq!(w["source"]["failures"]["body_too_large"], 2, "both big pods: {w}");
    assert_eq!(w["signals"]["concurrency"]["value"], 4.0, "the other pod still counts: {w}");
    let peak = peak_rss_mib(s.child.id());
    eprintln!("peak RSS with a 50 MB body every 0.5 s: {peak:.1} MiB");
    assert!(peak < 100.0, "peak RSS {peak:.1} MiB");
    shutdown.cancel();
}

fn answer(body: String) -> ([(&'static str, &'static str); 1], String) {
    ([("content-type", "application/json")], body)
}

/// A small gzip body that inflates past the bound is stopped on the inflated
/// bytes, not the few on the wire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gzip_body_is_bounded_by_what_it_inflates_to() {
    use std::io::Write;
    let shutdown = CancellationToken::new();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(huge_body(50_000_000).as_bytes()).unwrap();
    let wire = axum::body::Bytes::from(gz.finish().unwrap());
    assert!(wire.len() < 1 << 20, "{} bytes on the wire", wire.len());
    let app = Router::new().route(
        "/metrics",
        get(move || async move { ([("content-encoding", "gzip"), ("content-type", "text/plain")], wire.clone()) }),
    );
    let base = serve(app, &shutdown).await;
    let mut s = scraper(vec![format!("{base}/metrics")]);
    let got = s.poll(SystemTime::now()).await;
    assert!(got.is_err(), "the only target failed");
    let kinds: Vec<_> = s.errors.keys().map(|(_, k)| *k).collect();
    assert_eq!(kinds, [foresight::sources::scrape::TargetError::TooLarge]);
    shutdown.cancel();
}

/// The Prometheus source under the same rule: a fake Prometheus answers
/// the target's instant query with a negative value and puts one in its
/// range history. The binary keeps neither (the last valid reading ages, a
/// gap in history), says why in `/api/v1/workloads` and counts it in
/// `/metrics`; a sane answer is taken at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prometheus_answer_passes_the_same_rule() {
    let shutdown = CancellationToken::new();
    // The instant value: 0 = "-1e9", 1 = "12".
    let sane = Arc::new(AtomicU8::new(0));
    let query = {
        let sane = sane.clone();
        move |axum::extract::Form(f): axum::extract::Form<std::collections::HashMap<String, String>>| {
            let sane = sane.clone();
            async move {
                let t: f64 = f.get("time").and_then(|t| t.parse().ok()).unwrap_or(0.0);
                let v = if sane.load(Ordering::SeqCst) == 1 { "12" } else { "-1e9" };
                answer(format!(
                    r#"{{"status":"success","data":{{"resultType":"vector","result":[{{"metric":{{}},"value":[{t},"{v}"]}}]}}}}"#
                ))
            }
        }
    };
    let range = |axum::extract::Form(f): axum::extract::Form<std::collections::HashMap<String, String>>| async move {
        let (start, end, step): (f64, f64, f64) =
            (f["start"].parse().unwrap_or(0.0), f["end"].parse().unwrap_or(0.0), f["step"].parse().unwrap_or(60.0));
        // Every point 5, but the second-newest negative.
        let n = ((end - start) / step).round() as i64;
        let points: Vec<String> = (0..=n)
            .map(|k| {
                let v = if k == n - 1 { "-3" } else { "5" };
                format!("[{},\"{v}\"]", start + k as f64 * step)
            })
            .collect();
        answer(format!(
            r#"{{"status":"success","data":{{"resultType":"matrix","result":[{{"metric":{{}},"values":[{}]}}]}}}}"#,
            points.join(",")
        ))
    };
    let app = Router::new()
        .route("/api/v1/query", axum::routing::post(query))
        .route("/api/v1/query_range", axum::routing::post(range));
    let base = serve(app, &shutdown).await;
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        "grpc: {{listen: 127.0.0.1:0}}\nhttp: {{listen: 127.0.0.1:0}}\ntick_interval_secs: 0.2\n\
         store: {{path: null, resolution_secs: 10}}\nforecast: {{enabled: false}}\nworkloads:\n  - name: m\n\
         \x20   namespace: inference\n    model: llama-3.1-8b-h100\n    signals: [concurrency]\n    target: {{signal: concurrency}}\n\
         \x20   source: {{prometheus: {{url: '{base}', interval_secs: 1, query_delay_secs: 0, backfill_days: 0.01}}}}\n"
    );
    let s = tokio::task::block_in_place(|| common::Server::spawn(dir.path(), &yaml, &[]));
    let workload = || -> serde_json::Value {
        let body = common::http_get(s.http, "/api/v1/workloads").unwrap_or_default();
        serde_json::from_str::<serde_json::Value>(&body).unwrap_or_default()["workloads"][0].clone()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let w = loop {
        let w = workload();
        if w["source"]["invalid"]["concurrency"] == "negative" {
            break w;
        }
        assert!(Instant::now() < deadline, "no invalid reading reported: {w}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // The latest reading is the last valid one (the hold window's history), ageing, never the negative.
    let latest = &w["signals"]["concurrency"]["value"];
    assert!(latest.is_null() || latest == 5.0, "the negative reading was taken: {w}");
    let metrics = common::http_get(s.http, "/metrics").unwrap();
    assert!(
        metrics.lines().any(|l| l.starts_with("foresight_invalid_readings_total{")
            && l.contains("signal=\"concurrency\"")
            && l.contains("reason=\"negative\"")),
        "{metrics}"
    );
    sane.store(1, Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(20);
    let w = loop {
        let w = workload();
        if w["signals"]["concurrency"]["value"] == 12.0 {
            break w;
        }
        assert!(Instant::now() < deadline, "the sane reading was not taken: {w}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(w["source"]["invalid"].is_null(), "{w}");
    // History: fives, never a negative.
    let body = common::http_get(s.http, "/api/v1/workloads/m/history?since=10m").unwrap();
    let h: serde_json::Value = serde_json::from_str(&body).unwrap();
    let values: Vec<f64> =
        h["points"].as_array().unwrap_or_else(|| panic!("{h}")).iter().filter_map(|p| p["value"].as_f64()).collect();
    assert!(values.iter().filter(|v| **v == 5.0).count() >= 3, "{h}");
    assert!(values.iter().all(|v| *v >= 0.0), "a negative value in history: {h}");
    shutdown.cancel();
}
