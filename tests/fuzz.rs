//! Bad input never panics: the config loader on mutated and arbitrary YAML,
//! and the HTTP API (behind its guards) on arbitrary methods, paths, query
//! strings and tokens, where no answer may be a 5xx. (The exposition parser
//! has its own in tests/exposition.rs.) `FORESIGHT_FUZZ_CASES` sets the cases
//! per property (default 1000); `scripts/fuzz` runs a million of each.

use crate::common;

use std::{path::Path, time::SystemTime};

use axum::{body::Body, http::Request};
use foresight::{
    api,
    config::{HttpSettings, Secret, Settings, DEMO_CONFIG},
    serve::engine::Engine,
};
use proptest::prelude::*;
use tower::ServiceExt;

fn config() -> ProptestConfig {
    let cases = std::env::var("FORESIGHT_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

const YAML_SOUP: &[&str] = &[
    "-1",
    "0",
    "1e309",
    "-1e309",
    ".nan",
    ".inf",
    "~",
    "null",
    "",
    "\"\"",
    "[",
    "]",
    "{",
    "}",
    "[]",
    "{}",
    "true",
    "4294967296",
    "18446744073709551616",
    "0.0000001",
    "'",
    "\"",
    ":",
    "- ",
    "#",
    "&a",
    "*a",
    "!!binary AA==",
    "<<: *a",
    "\t",
    "\u{feff}",
    "é",
    "127.0.0.1:0",
    "::1",
    "http://",
    "300s",
    "1d",
    "a/b",
    "/dev/null",
    "../../etc/passwd",
    "keda.sh",
    "karpenter.sh/nodepool",
    "on-demand",
    "spot",
    "reserved",
    "off",
    "apply",
    "dry-run",
    "concurrency",
    "request_rate",
    "llama-3.1-8b-h100",
];

/// The demo config with a few lines deleted, duplicated, or with a value or key swapped for soup.
fn mutated_config() -> impl Strategy<Value = String> {
    let lines: Vec<String> = DEMO_CONFIG.lines().map(String::from).collect();
    let n = lines.len();
    prop::collection::vec((0..n, 0u8..4, prop::sample::select(YAML_SOUP)), 1..6).prop_map(move |edits| {
        let mut ls = lines.clone();
        for (i, op, soup) in edits {
            let i = i % ls.len().max(1);
            match op {
                0 => {
                    ls.remove(i);
                }
                1 => ls.insert(i, ls[i].clone()),
                2 => {
                    // Replace the value after the first `: ` (or the whole line).
                    let l = &ls[i];
                    ls[i] = match l.find(": ") {
                        Some(at) => format!("{}: {soup}", &l[..at]),
                        None => format!("{l}{soup}"),
                    };
                }
                _ => {
                    let l = &ls[i];
                    let indent = l.len() - l.trim_start().len();
                    ls[i] = format!("{}{soup}: 1", &l[..indent]);
                }
            }
            if ls.is_empty() {
                break;
            }
        }
        ls.join("\n")
    })
}

fn load(text: &str) {
    match Settings::from_yaml(text, "fuzz.yaml", Path::new("/nonexistent")) {
        Ok(s) => assert!(!s.workloads.is_empty()),
        Err(e) => assert!(!e.to_string().is_empty(), "an error must say something"),
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn the_config_loader_never_panics_on_a_mutated_config(text in mutated_config()) {
        load(&text);
    }

    #[test]
    fn the_config_loader_never_panics_on_arbitrary_text(text in any::<String>()) {
        load(&text);
    }
}

const TOKEN: &str = "fuzz-token-0123456789abcdef";

struct Api {
    rt: tokio::runtime::Runtime,
    app: axum::Router,
}

fn api() -> &'static Api {
    static API: std::sync::OnceLock<Api> = std::sync::OnceLock::new();
    API.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let settings = Settings::from_yaml(&common::known_answers(), "test", Path::new(".")).unwrap();
        let (registry, store) = (foresight::serve::state::Registry::new(), common::store_with_known_readings());
        rt.block_on(async { Engine::new(&settings, registry.clone(), store.clone()).tick(SystemTime::now()) });
        let http = HttpSettings { bearer_token: Some(Secret::new(TOKEN)), max_in_flight: 64, ..settings.http.clone() };
        let app = api::guard::guard(api::router(registry, store), &http);
        Api { rt, app }
    })
}

const PATH_SOUP: &[&str] = &[
    "api",
    "v1",
    "workloads",
    "llama-8b",
    "idle",
    "forecast",
    "plan",
    "history",
    "explain",
    "pools",
    "plan",
    "cluster",
    "openapi.json",
    "ui",
    "metrics",
    "healthz",
    "readyz",
    "..",
    ".",
    "",
    "%00",
    "%ff",
    "%2F",
    "é",
    "a%20b",
    "llama-8b%00",
    "{name}",
    "*",
];
const KEY_SOUP: &[&str] = &["namespace", "signal", "horizon", "quantiles", "since", "", "x", "namespace[]", "%zz"];
const VALUE_SOUP: &[&str] = &[
    "inference",
    "default",
    "concurrency",
    "kv_cache_usage",
    "nope",
    "5m",
    "300",
    "300s",
    "-1",
    "0",
    "1e999",
    "nan",
    "inf",
    "99999999999d",
    "0.5,0.9",
    "0.5,,0.9",
    "2",
    "0.9,0.5",
    "",
    "%",
    "%00",
    "a=b",
    "1h",
    "35d",
    "36d",
    "é",
];

fn request() -> impl Strategy<Value = (String, String, Option<String>)> {
    let method = prop::sample::select(vec!["GET", "GET", "GET", "HEAD", "POST", "DELETE", "PUT", "OPTIONS"]);
    let path =
        prop::collection::vec(prop::sample::select(PATH_SOUP), 0..6).prop_map(|segs| format!("/{}", segs.join("/")));
    let query = prop::collection::vec((prop::sample::select(KEY_SOUP), prop::sample::select(VALUE_SOUP)), 0..4)
        .prop_map(|kv| kv.into_iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("&"));
    let token = prop_oneof![Just(None), Just(Some(TOKEN.to_string())), "[ -~]{0,40}".prop_map(Some)];
    (method, path, query, token)
        .prop_map(|(m, p, q, t)| (m.to_string(), if q.is_empty() { p } else { format!("{p}?{q}") }, t))
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn the_http_api_never_panics_or_answers_5xx((method, uri, token) in request(), body in prop::collection::vec(any::<u8>(), 0..64)) {
        let a = api();
        let mut req = Request::builder().method(method.as_str()).uri(uri.as_str());
        if let Some(t) = &token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let Ok(req) = req.body(Body::from(body)) else { return Ok(()) };
        let status = a.rt.block_on(async { a.app.clone().oneshot(req).await.unwrap().status() });
        // 503 is the load shedder's answer; nothing here is concurrent, so it must not appear either.
        prop_assert!(status.as_u16() < 500, "{method} {uri}: {status}");
    }
}
