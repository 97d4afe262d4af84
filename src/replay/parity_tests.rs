//! Serve and replay decide alike: the same readings, step by step, through
//! the serving engine (forecasts fitted on its worker threads) and through
//! the simulator's predictive policy give the same decisions and reasons.

use std::{
    sync::Arc,
    time::{Duration, UNIX_EPOCH},
};

use super::{
    shipped::{backfill, readings, Shipped},
    Capacity, Observation, Pool, TokenMix,
};
use crate::{
    config::Settings,
    serve::{engine::Engine, state::Registry},
    store::{Store, StoreConfig},
    workload::{pods_series, series},
};

const SCRAPE: &str = "source: {scrape: {targets: ['http://127.0.0.1:9/metrics']}}";

fn cap(settings: &Settings) -> Capacity {
    let pool = Pool {
        gpus_per_node: 8,
        provisioning_secs: 300.0,
        price_per_node_hour: 32.0,
        reserved_nodes: 0,
        reserved_price_per_node_hour: 20.0,
    };
    Capacity::new(&settings.workloads[0].profile, TokenMix::azure_conversation(), &pool).unwrap()
}

/// Steps the two side by side: `load(k)` is the arrival rate at step k,
/// `None` a poll with no readings (the source is down).
fn agree(yaml: &str, load: impl Fn(usize) -> Option<f64>, steps: usize) -> Vec<String> {
    let settings = Settings::from_yaml(yaml, "parity", std::path::Path::new(".")).unwrap();
    let w = settings.workloads[0].clone();
    let cap = cap(&settings);
    // Two days of history, a daily cycle, ending where the steps start.
    let start = 1_800_000_000 - 2 * 86_400;
    let history: Vec<f64> =
        (0..2 * 1440).map(|m| 60.0 + 40.0 * (m as f64 / 1440.0 * std::f64::consts::TAU).sin()).collect();
    let store = Arc::new(Store::open(StoreConfig::default()).unwrap());
    backfill(&store, &w, &history, start, &cap).unwrap();
    let registry = Registry::new();
    let mut serve = Engine::new(&settings, registry.clone(), store.clone());
    let mut replay = Shipped::new("p".into(), &settings, &history, start, &cap).unwrap();
    let mut reasons = Vec::new();
    for k in 0..steps {
        let now = 1_800_000_000.0 + 15.0 * k as f64;
        let at = UNIX_EPOCH + Duration::from_secs_f64(now);
        let (read, pods) = match load(k) {
            Some(rate) => {
                let o = Observation {
                    t: now,
                    unix: now,
                    running: rate * cap.service_secs,
                    waiting: if k % 7 == 0 { 5.0 } else { 0.0 },
                    ready: 4.0,
                    spec: 4,
                    wait_p99: if k % 11 == 0 { 2.0 } else { 0.1 },
                    arrival_rate: rate,
                };
                (readings(&o, &cap), Some(4.0))
            }
            None => (Vec::new(), None),
        };
        for (s, v) in &read {
            store.record(&series(&w.key(), *s), at, *v);
        }
        if let Some(p) = pods {
            store.record(&pods_series(&w.key()), at, p);
        }
        serve.tick(at);
        serve.wait_refits();
        let ours = replay.step(now, &read, pods);
        let served = registry.load().get(&w.key()).cloned().unwrap();
        assert_eq!(served.decision, ours, "step {k}");
        let replayed = replay.state();
        let roles =
            |s: &crate::serve::state::WorkloadState| -> Vec<_> { s.roles.iter().map(|r| r.decision.clone()).collect() };
        assert_eq!(roles(&served), roles(&replayed), "step {k}: role decisions");
        assert_eq!(served.forecast.as_ref().map(|f| &f.point), replayed.forecast.as_ref().map(|f| &f.point));
        reasons.push(
            served
                .decision
                .as_ref()
                .map_or_else(|| served.error.as_ref().map_or(String::new(), |e| e.to_string()), |d| d.reason.clone()),
        );
    }
    reasons
}

#[test]
fn a_plain_workload_decides_alike() {
    let yaml = format!(
        "forecast: {{refit_interval_secs: 120}}\nworkloads:\n  - name: w\n    model: llama-3.1-8b-h100\n    max_replicas: 40\n    target: {{signal: concurrency}}\n    {SCRAPE}\n"
    );
    let reasons = agree(&yaml, |k| Some(60.0 + (k % 40) as f64), 60);
    assert!(reasons.iter().any(|r| r.contains("forecast")), "the forecast took part: {reasons:?}");
}

#[test]
fn a_workload_with_roles_decides_alike() {
    let yaml = format!(
        "forecast: {{refit_interval_secs: 120}}\nworkloads:\n  - name: pd\n    model: llama-3.1-70b-h100-tp4\n    target: {{signal: concurrency}}\n    roles:\n      prefill: {{min_replicas: 1, max_replicas: 8}}\n      decode: {{min_replicas: 1, max_replicas: 16}}\n    {SCRAPE}\n"
    );
    agree(&yaml, |k| Some(8.0 + (k % 10) as f64), 40);
}

#[test]
fn a_workload_whose_signal_and_forecast_go_stale_decides_alike() {
    // The source goes down after ten polls: the forecast alone answers for a
    // while (forecast_only_secs), then neither does.
    let yaml = format!(
        "forecast: {{refit_interval_secs: 120}}\nsizing: {{forecast_only_secs: 120}}\nworkloads:\n  - name: w\n    model: llama-3.1-8b-h100\n    max_replicas: 40\n    stale_after_secs: 30\n    target: {{signal: concurrency}}\n    {SCRAPE}\n"
    );
    let reasons = agree(&yaml, |k| (k < 10).then_some(70.0), 30);
    assert!(reasons.iter().any(|r| r.starts_with("forecast only")), "{reasons:?}");
    assert!(reasons.last().is_some_and(|r| r.contains("stale")), "{reasons:?}");
}
