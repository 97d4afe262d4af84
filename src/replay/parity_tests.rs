//! Serve and replay decide alike: the same readings, step by step, through
//! the serving engine (forecasts fitted on its worker threads) and through
//! the simulator's predictive policy give the same decisions and reasons.

use std::{
    sync::Arc,
    time::{Duration, UNIX_EPOCH},
};

use super::{
    shipped::{backfill, readings, settings, SettingsInput, Shipped},
    Capacity, Observation, Policy, Pool, TokenMix,
};
use crate::{
    config::Settings,
    serve::{engine::Engine, state::Registry},
    store::{Store, StoreConfig},
    workload::{pods_series, series},
};

const SCRAPE: &str = "source: {scrape: {targets: ['http://127.0.0.1:9/metrics']}}";

const POOL: Pool = Pool {
    gpus_per_node: 8,
    provisioning_secs: 300.0,
    price_per_node_hour: 32.0,
    reserved_nodes: 2,
    reserved_price_per_node_hour: 20.0,
};

fn cap(settings: &Settings) -> Capacity {
    Capacity::new(&settings.workloads[0].profile, TokenMix::azure_conversation(), &POOL).unwrap()
}

fn parse(yaml: &str) -> Settings {
    Settings::from_yaml(yaml, "parity", std::path::Path::new(".")).unwrap()
}

/// `yaml` as `simulate --config` replays it: its one workload, capped at 40
/// replicas, the simulated pool (two of its nodes reserved) planned.
fn as_simulated(yaml: &str) -> Settings {
    let base = parse(yaml);
    let told = base.workloads[0].profile.clone();
    let input = SettingsInput {
        workload: None,
        told: &told,
        target: crate::sources::Signal::Concurrency,
        per_replica: told.concurrency_per_replica,
        max_replicas: 40,
        quantile: None,
        learn_capacity: None,
        spare_horizon_secs: None,
        pool: &POOL,
        until: 1_900_000_000,
        from: 1_700_000_000,
    };
    settings(Some(base), &input).unwrap()
}

/// Steps the two side by side: `load(k)` is the arrival rate at step k,
/// `None` a poll with no readings (the source is down). Serve's store is
/// written as its collector writes (the workload's signals; the pods as
/// the latest value); the replay is asked through the policy interface the
/// simulator uses, and its answer (replicas and warm nodes) must be serve's.
fn agree(settings: Settings, load: impl Fn(usize) -> Option<f64>, steps: usize) -> Vec<String> {
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
        let o = Observation {
            t: now,
            unix: now,
            running: load(k).unwrap_or(0.0) * cap.service_secs,
            waiting: if k % 7 == 0 { 5.0 } else { 0.0 },
            ready: 4.0,
            spec: 4,
            wait_p99: if k % 11 == 0 { 2.0 } else { 0.1 },
            arrival_rate: load(k).unwrap_or(0.0),
            admitted_rate: load(k).unwrap_or(0.0),
        };
        let ours = match load(k) {
            Some(_) => {
                for (s, v) in readings(&o, &cap).iter().filter(|(s, _)| w.signals.contains(s)) {
                    store.record(&series(&w.key(), *s), at, *v);
                }
                store.set_latest(&pods_series(&w.key()), at, 4.0);
                replay.decide(&o)
            }
            None => {
                replay.step(now, &[], None);
                super::Decision {
                    replicas: replay.state().decision.map_or(o.spec, |d| d.desired_replicas),
                    warm_nodes: 0,
                }
            }
        };
        serve.tick(at);
        serve.wait_refits();
        let served = registry.load().get(&w.key()).cloned().unwrap();
        let replayed = replay.state();
        assert_eq!(served.decision, replayed.decision, "step {k}");
        if let (Some(d), Some(_)) = (&served.decision, load(k)) {
            assert_eq!(d.desired_replicas, ours.replicas, "step {k}");
            let warm: u32 = registry.load().plan.as_ref().map_or(0, |p| p.pools.iter().map(|pp| pp.warm_nodes).sum());
            assert_eq!(warm.saturating_sub(cap.nodes_for(ours.replicas)), ours.warm_nodes, "step {k}: warm nodes");
        }
        let roles =
            |s: &crate::serve::state::WorkloadState| -> Vec<_> { s.roles.iter().map(|r| r.decision.clone()).collect() };
        assert_eq!(roles(&served), roles(&replayed), "step {k}: role decisions");
        assert_eq!(
            served.forecast.as_ref().map(|f| &f.point),
            replayed.forecast.as_ref().map(|f| &f.point),
            "step {k}: forecasts"
        );
        assert_eq!(served.demand_forecasts.len(), replayed.demand_forecasts.len(), "step {k}: demand-part forecasts");
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
    let reasons = agree(as_simulated(&yaml), |k| Some(60.0 + (k % 40) as f64), 60);
    assert!(reasons.iter().any(|r| r.contains("forecast")), "the forecast took part: {reasons:?}");
}

#[test]
fn a_workload_with_roles_decides_alike() {
    let yaml = format!(
        "forecast: {{refit_interval_secs: 120}}\nworkloads:\n  - name: pd\n    model: llama-3.1-70b-h100-tp4\n    target: {{signal: concurrency}}\n    roles:\n      prefill: {{min_replicas: 1, max_replicas: 8}}\n      decode: {{min_replicas: 1, max_replicas: 16}}\n    {SCRAPE}\n"
    );
    // Roles are served as the engine serves them (`simulate` replays one Deployment, so
    // this case builds the replay from the settings directly).
    let reasons = agree(parse(&yaml), |k| Some(8.0 + (k % 10) as f64), 40);
    assert!(reasons.iter().any(|r| r.contains("forecast")), "{reasons:?}");
}

#[test]
fn a_workload_whose_signal_and_forecast_go_stale_decides_alike() {
    // The source goes down after ten polls: the forecast alone answers for a
    // while (forecast_only_secs), then neither does.
    let yaml = format!(
        "forecast: {{refit_interval_secs: 120}}\nsizing: {{forecast_only_secs: 120}}\nworkloads:\n  - name: w\n    model: llama-3.1-8b-h100\n    max_replicas: 40\n    stale_after_secs: 30\n    target: {{signal: concurrency}}\n    {SCRAPE}\n"
    );
    let reasons = agree(as_simulated(&yaml), |k| (k < 10).then_some(70.0), 30);
    assert!(reasons.iter().any(|r| r.starts_with("forecast only")), "{reasons:?}");
    assert!(reasons.last().is_some_and(|r| r.contains("stale")), "{reasons:?}");
}
