//! The engine's start-up as the serving process runs it (collectors report
//! to the source health): no answer and not ready until a workload's
//! history is loaded and its first forecast fitted, pools planned only
//! then, and a workload a reload adds warms up on its own without taking
//! the replica out of service.

use std::{
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use super::*;
use crate::{config::Settings, serve::outcome::Warmup};

fn yaml(workloads: &[&str]) -> String {
    let mut y = String::from(
        "store: {path: null, resolution_secs: 60}\nforecast: {first_fit_wait_secs: 60}\n\
         pools: [{name: h100, gpu_type: nvidia-h100-80gb, gpus_per_node: 8, capacity_type: on-demand, price_per_node_hour: 98, max_nodes: 4, provisioning_secs: 300}]\nworkloads:\n",
    );
    for w in workloads {
        y.push_str(&format!(
            "  - name: {w}\n    model: llama-3.1-8b-h100\n    target: {{signal: concurrency}}\n    \
             source: {{scrape: {{targets: ['http://127.0.0.1:9/metrics']}}}}\n"
        ));
    }
    y
}

fn engine(workloads: &[&str]) -> (Engine, Arc<Registry>, Arc<Store>, Arc<SourceHealth>) {
    let settings = Settings::from_yaml(&yaml(workloads), "t", std::path::Path::new(".")).unwrap();
    let store = Arc::new(Store::open(Default::default()).unwrap());
    let registry = Registry::new();
    let health = Arc::new(SourceHealth::default());
    let engine = Engine::new(&settings, registry.clone(), store.clone()).with_source_health(health.clone());
    (engine, registry, store, health)
}

/// The collector's part: a reading now, and its first poll reported.
fn poll(store: &Store, health: &SourceHealth, key: &str, now: SystemTime) {
    store.set_latest(&series(key, Signal::Concurrency), now, 100.0);
    health.update(key, |h| h.first_poll_done = true);
}

fn warming(registry: &Registry, key: &str) -> Option<Warmup> {
    match registry.load().get(key)?.error.clone()? {
        NoDecision::WarmingUp(w) => Some(w),
        _ => None,
    }
}

#[test]
fn a_workload_answers_only_once_its_history_and_first_forecast_are_in() {
    let (mut e, registry, store, health) = engine(&["a"]);
    let t0 = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    // A reading without the first poll reported: still loading history.
    store.set_latest(&series("default/a", Signal::Concurrency), t0, 100.0);
    e.tick(t0);
    assert_eq!(warming(&registry, "default/a"), Some(Warmup::History));
    assert!(!registry.load().ready);
    assert!(registry.load().plan.is_none(), "no plan counts a warming workload as zero replicas");
    // History in: the first fit is queued and waited for (it fails at once: no history).
    poll(&store, &health, "default/a", t0);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut t = t0;
    loop {
        t += Duration::from_millis(100);
        e.tick(t);
        let snap = registry.load();
        let s = snap.get("default/a").unwrap();
        if s.decision.is_some() {
            assert!(s.forecast_error.is_some() || s.forecast.is_some(), "answered before the first fit: {s:?}");
            break;
        }
        assert!(matches!(warming(&registry, "default/a"), Some(Warmup::FirstForecast { .. })));
        assert!(std::time::Instant::now() < deadline, "no first fit");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(registry.load().ready);
    assert!(registry.load().plan.is_some());
}

#[test]
fn the_first_forecast_is_waited_for_at_most_its_bound() {
    let (mut e, registry, store, health) = engine(&["a"]);
    let t0 = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    poll(&store, &health, "default/a", t0);
    e.tick(t0);
    // The fit is queued; past the 60 s bound the workload answers whether or not it is in.
    let later = t0 + Duration::from_secs(61);
    store.set_latest(&series("default/a", Signal::Concurrency), later, 100.0);
    e.tick(later);
    assert!(registry.load().get("default/a").unwrap().decision.is_some());
}

#[test]
fn a_workload_added_by_reload_warms_up_alone_and_the_replica_stays_ready() {
    let (mut e, registry, store, health) = engine(&["a"]);
    let t0 = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    poll(&store, &health, "default/a", t0);
    let t1 = t0 + Duration::from_secs(61);
    store.set_latest(&series("default/a", Signal::Concurrency), t1, 100.0);
    e.tick(t0);
    e.tick(t1);
    assert!(registry.load().ready);
    let settings = Settings::from_yaml(&yaml(&["a", "b"]), "t", std::path::Path::new(".")).unwrap();
    e.reconfigure(&settings);
    let t2 = t1 + Duration::from_secs(1);
    store.set_latest(&series("default/a", Signal::Concurrency), t2, 100.0);
    e.tick(t2);
    let snap = registry.load();
    assert!(snap.ready, "one new workload does not take the replica out of the Service");
    assert!(snap.get("default/a").unwrap().decision.is_some(), "the unchanged workload keeps answering");
    assert_eq!(warming(&registry, "default/b"), Some(Warmup::History));
    assert!(snap.plan.is_some());
}
