//! `/metrics` against a real Prometheus (Debian package `prometheus`), and
//! the shipped Grafana dashboard against both: Prometheus scrapes an
//! in-process Foresight, a PromQL query on the forecast series returns what
//! the HTTP API reports, and every query of the dashboard runs and names only
//! series Foresight exposes.

use crate::common;

use std::{
    collections::BTreeSet,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use foresight::api;
use serde_json::Value;

pub(crate) fn dashboard() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/grafana/dashboards/foresight.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).expect("the dashboard is valid JSON")
}

/// Every `expr` in the dashboard's panels (rows' nested panels included).
fn exprs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(e)) = m.get("expr") {
                out.push(e.clone());
            }
            m.values().for_each(|x| exprs(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| exprs(x, out)),
        _ => {}
    }
}

/// Metric names a PromQL expression reads (Foresight's own prefix).
fn names_in(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = expr;
    while let Some(i) = rest.find("foresight_") {
        let tail = &rest[i..];
        let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        out.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}

/// Series names in an exposition, with a histogram's `_bucket/_sum/_count`
/// and a counter's `_total` as Prometheus stores them.
fn exposed(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap().to_string())
        .collect()
}

async fn query(prom: &str, q: &str) -> Value {
    let url = format!("{prom}/api/v1/query");
    let v: Value = reqwest::Client::new().get(url).query(&[("query", q)]).send().await.unwrap().json().await.unwrap();
    assert_eq!(v["status"], "success", "{q}: {v}");
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_the_forecasts_and_the_dashboard_queries_them() {
    if !common::tools::have("grafana", &[common::tools::PROMETHEUS]) {
        return;
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (registry, store, _engine, _) = common::forecast_ready(|y| y);
    // Every health family has something to show.
    foresight::telemetry::source_error(common::KEY);
    foresight::telemetry::grpc_call("GetMetrics", tonic::Code::Ok, std::time::Duration::from_millis(2));

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = api::router(registry.clone(), store);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let base = format!("http://{addr}");

    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let cfg = dir.path().join("prometheus.yml");
    std::fs::write(
        &cfg,
        format!("global: {{scrape_interval: 1s, scrape_timeout: 900ms}}\nscrape_configs:\n  - job_name: foresight\n    static_configs:\n      - targets: ['{addr}']\n"),
    )
    .unwrap();
    let _prom = common::Kill(
        Command::new("prometheus")
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("tsdb").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(dir.path().join("prometheus.log")).unwrap()))
            .spawn()
            .unwrap(),
    );
    let prom = format!("http://127.0.0.1:{port}");

    // Wait for a few scrapes of the forecast series.
    let q = r#"foresight_forecast_point{workload="llama-8b",horizon="5m"}"#;
    let deadline = Instant::now() + Duration::from_secs(90);
    let sample = loop {
        if let Ok(r) = reqwest::Client::new().get(format!("{prom}/api/v1/query")).query(&[("query", q)]).send().await {
            if let Ok(v) = r.json::<Value>().await {
                if let Some(s) = v["data"]["result"].as_array().and_then(|a| a.first()).cloned() {
                    let n = query(&prom, "count_over_time(foresight_desired_replicas[1m])").await;
                    if n["data"]["result"][0]["value"][1].as_str().is_some_and(|c| c.parse::<f64>().unwrap() >= 3.0) {
                        break s;
                    }
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus never stored {q}; its log:\n{}",
            std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };

    // The sample at scrape time t is the API's forecast point for t + 5 minutes.
    let t = sample["value"][0].as_f64().unwrap();
    let got: f64 = sample["value"][1].as_str().unwrap().parse().unwrap();
    let api: Value =
        reqwest::get(format!("{base}/api/v1/workloads/llama-8b/forecast")).await.unwrap().json().await.unwrap();
    let step = api["step_secs"].as_f64().unwrap();
    let target = t + 300.0;
    let want = api["points"]
        .as_array()
        .unwrap()
        .iter()
        .min_by_key(|p| {
            let pt = chrono::DateTime::parse_from_rfc3339(p["time"].as_str().unwrap()).unwrap().timestamp() as f64;
            ((pt - target).abs() * 1000.0) as i64
        })
        .unwrap();
    let pt = chrono::DateTime::parse_from_rfc3339(want["time"].as_str().unwrap()).unwrap().timestamp() as f64;
    assert!((pt - target).abs() <= step / 2.0 + 1.0, "no API point near {target}");
    assert_eq!(got, want["value"].as_f64().unwrap(), "PromQL and the API disagree at {t}");

    // Every dashboard query names only exposed series, and runs on a real Prometheus.
    let metrics = reqwest::get(format!("{base}/metrics")).await.unwrap().text().await.unwrap();
    let have = exposed(&metrics);
    let mut all = Vec::new();
    exprs(&dashboard()["panels"], &mut all);
    assert!(all.len() >= 8, "expected the dashboard's queries, found {}", all.len());
    for e in &all {
        let names = names_in(e);
        assert!(!names.is_empty(), "a query that reads no Foresight series: {e}");
        for n in &names {
            assert!(have.contains(n), "`{n}` in the dashboard query `{e}` is not exposed by /metrics");
        }
        let concrete = e
            .replace("$__rate_interval", "1m")
            .replace("$__interval", "15s")
            .replace("${namespace:regex}", ".*")
            .replace("$namespace", ".*")
            .replace("$workload", ".*")
            .replace("$pool", ".*");
        let v = query(&prom, &concrete).await;
        // `offset 5m` looks before this Prometheus existed: those run but are empty.
        if !concrete.contains("offset") {
            let n = v["data"]["result"].as_array().map_or(0, Vec::len);
            assert!(n > 0, "the dashboard query `{concrete}` returns nothing");
        }
    }
    // Template variables resolve too.
    for var in dashboard()["templating"]["list"].as_array().unwrap() {
        if let Some(q) = var["query"].as_str().or_else(|| var["query"]["query"].as_str()) {
            if let Some(inner) = q.strip_prefix("label_values(").and_then(|r| r.strip_suffix(')')) {
                let (sel, label) = inner.rsplit_once(',').unwrap();
                let sel = sel.replace("$namespace", ".*").replace("=~\"\"", "=~\".*\"");
                let v = query(&prom, &format!("count by ({}) ({sel})", label.trim())).await;
                assert!(!v["data"]["result"].as_array().unwrap().is_empty(), "variable {} is empty", var["name"]);
            }
        }
    }
}
