//! The integration tests, one binary so the crate and its dependencies are
//! linked once. Each module is one area; `cargo test --test it <module>::`
//! runs one. Tests that need programs from outside the crate (Prometheus,
//! VictoriaMetrics, Chromium and node, prlimit, the vLLM fixture's venv)
//! skip with a message when those are missing; `scripts/test` installs
//! them and sets `FORESIGHT_REQUIRE_TOOLS=1`, which turns a skip into a
//! failure, so CI never passes by skipping.

mod common;

mod api;
mod capacity;
mod cli;
mod deploy;
mod exposition;
mod faults;
mod forecast;
mod forecast_cli;
mod fuzz;
mod grafana;
mod grafana_schema;
mod ha;
mod hostile;
mod kserve;
mod kube;
mod layout;
mod learned;
mod prometheus;
mod refit;
mod replay;
mod restart;
mod scaler;
mod schemas;
mod scrape;
mod security;
mod serve;
mod signals;
mod spare;
mod store;
mod ui;
mod vllm_real;
