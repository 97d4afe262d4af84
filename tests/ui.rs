//! `/ui` in headless Chromium: the page draws history, the forecast band and
//! planned replicas from a live Foresight, and a screenshot is kept as a test
//! artefact (`target/ui-screenshot.png`). Driven by playwright-core from
//! `tests/ui/render.mjs` (`npm ci` in `tests/ui`, which `./scripts/test` does).

use crate::common;

use std::{path::Path, process::Command};

use foresight::api;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_renders_history_forecast_and_replicas() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    use common::tools::{have, CHROMIUM, NODE, PLAYWRIGHT};
    if !have("ui", &[NODE, PLAYWRIGHT, CHROMIUM]) {
        return;
    }
    let (registry, store, _engine, _) = common::forecast_ready(|y| y);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, api::router(registry, store)).await.unwrap() });

    let shot = root.join("target/ui-screenshot.png");
    let _ = std::fs::remove_file(&shot);
    let out = tokio::task::spawn_blocking({
        let shot = shot.clone();
        move || {
            Command::new("node")
                .arg("render.mjs")
                .current_dir(root.join("tests/ui"))
                .env("FORESIGHT_URL", format!("http://{addr}"))
                .env("SCREENSHOT", &shot)
                .env("WORKLOAD", common::KEY)
                .output()
                .expect("node is installed")
        }
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "render.mjs failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let summary: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or_default()).expect("a JSON summary line");
    // Three hours of per-minute history would be 180 points; the page asks for the last hour.
    assert!(summary["history"].as_u64().unwrap() >= 50, "{summary}");
    assert!(summary["forecast"].as_u64().unwrap() >= 10, "{summary}");
    assert!(summary["replicas"].as_u64().unwrap() >= 1, "{summary}");
    assert!(std::fs::metadata(&shot).unwrap().len() > 10_000, "the screenshot is kept");
}
