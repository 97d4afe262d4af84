//! Decisions from stored readings: staleness, and the simulated fleet driven
//! by (an excerpt of) the real Azure LLM conversation trace.

use crate::common;

use std::{
    path::Path,
    time::{Duration, SystemTime},
};

use foresight::{
    config::Settings,
    fake_vllm,
    serve::{engine::Engine, state::Registry},
};

#[test]
fn a_stale_reading_gives_no_decision_and_a_fresh_one_does() {
    let settings = Settings::from_yaml(&common::known_answers(), "test", Path::new(".")).unwrap();
    let store = std::sync::Arc::new(foresight::store::Store::open(Default::default()).unwrap());
    let registry = Registry::new();
    let mut engine = Engine::new(&settings, registry.clone(), store.clone());
    let now = SystemTime::now();
    // stale_after defaults to three source intervals: 0.6 s here. (Older than the
    // 300 s scale-down window too, so no hold keeps what it asked for.)
    store.set_latest("inference/llama-8b/concurrency", now - Duration::from_secs(400), 100.0);
    engine.tick(now);
    let snap = registry.load();
    let s = snap.get("inference/llama-8b").unwrap();
    assert!(s.decision.is_none());
    let why = s.error.as_ref().unwrap().to_string();
    assert!(why.starts_with("stale: the last `concurrency` reading is 400 s old"), "{why}");
    assert!(!snap.ready);

    store.set_latest("inference/llama-8b/concurrency", now, 33.0);
    engine.tick(now);
    let snap = registry.load();
    let s = snap.get("inference/llama-8b").unwrap();
    assert_eq!(s.decision.as_ref().map(|d| d.desired_replicas), Some(2));
    assert!(s.error.is_none());
}

#[test]
fn the_fleet_replays_the_azure_trace_at_the_configured_rate() {
    let trace = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/traces/azure_llm_2023_conv_first3000.csv");
    let config: fake_vllm::SimConfig = serde_yaml_ng::from_str(&format!(
        "pods: 2\nmax_num_seqs: 1024\ndemand: {{requests_per_sec: 11, daily_amplitude: 0, weekend_factor: 1, trace_file: {}}}",
        trace.display()
    ))
    .unwrap();
    let rows = fake_vllm::demand::load_trace(&trace).unwrap();
    assert_eq!(rows.len(), 3_000);
    let trace_prompt_mean = rows.iter().map(|r| f64::from(r.1)).sum::<f64>() / rows.len() as f64;
    // The trace's own rate (it loops with one mean gap after its last request).
    let native = rows.len() as f64 / (rows.last().unwrap().0 * rows.len() as f64 / (rows.len() as f64 - 1.0));
    let speed = 11.0 / native;
    let expected = rows.iter().filter(|r| r.0 < 200.0 * speed).count();

    let origin = 1_800_000_000.0;
    let mut arrivals = fake_vllm::demand::Arrivals::new(config.demand.clone(), Some(std::sync::Arc::new(rows)), origin);
    let got: Vec<_> = std::iter::from_fn(|| arrivals.next_before(origin + 200.0)).collect();
    // 11 req/s is about twice the excerpt's own rate: it plays at double speed, request for request.
    assert!(got.len().abs_diff(expected) <= 1, "{} arrivals, the trace has {expected} in that span", got.len());
    let prompt_mean = got.iter().map(|r| f64::from(r.prompt_tokens)).sum::<f64>() / got.len() as f64;
    assert!((prompt_mean - trace_prompt_mean).abs() / trace_prompt_mean < 0.1, "{prompt_mean} vs {trace_prompt_mean}");

    let mut fleet = fake_vllm::Fleet::from_config(config, origin).unwrap();
    fleet.advance_to(origin + 200.0);
    let finished: u64 = fleet.pods().iter().map(|p| p.metrics().success_stop + p.metrics().success_length).sum();
    let in_flight: u64 = fleet.pods().iter().map(|p| u64::from(p.metrics().running + p.metrics().waiting)).sum();
    assert_eq!(finished + in_flight, got.len() as u64, "every request is finished or in flight");
}
