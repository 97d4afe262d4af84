//! Forecasts in the running engine: history in the store is refitted in the
//! background and published with the workload's state, without holding up
//! the tick or the reactive decision.

use crate::common;

use std::{
    path::Path,
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use foresight::{
    config::Settings,
    forecast::Regime,
    serve::engine::Engine,
    serve::outcome::RefitError,
    serve::state::{Registry, WorkloadState},
    store::Store,
};

const KEY: &str = "inference/llama-8b";
const DAY: f64 = 86_400.0;

/// A daily cycle of in-flight requests, 40 +- 20.
fn demand(t: f64) -> f64 {
    40.0 + 20.0 * (2.0 * std::f64::consts::PI * t / DAY).sin()
}

fn engine_with(yaml_extra: &str) -> (Engine, Arc<Registry>, Arc<Store>) {
    let yaml = format!("{}\n{yaml_extra}", common::known_answers());
    let settings = Settings::from_yaml(&yaml, "test", Path::new(".")).unwrap();
    let store = Arc::new(Store::open(Default::default()).unwrap());
    let registry = Registry::new();
    (Engine::new(&settings, registry.clone(), store.clone()), registry, store)
}

/// Ticks until `done` holds for the workload's state, or panics after a while.
fn tick_until(
    engine: &mut Engine,
    registry: &Registry,
    now: SystemTime,
    done: impl Fn(&WorkloadState) -> bool,
) -> WorkloadState {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        engine.tick(now);
        let snap = registry.load();
        let s = snap.get(KEY).unwrap();
        if done(s) {
            return s.as_ref().clone();
        }
        assert!(Instant::now() < deadline, "no forecast in time: {:?}", s.forecast_error);
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn stored_history_is_forecast_over_the_cold_start_look_ahead() {
    let (mut engine, registry, store) = engine_with("");
    // Three days of per-minute history, ending at a whole minute.
    let now_secs = 1_800_000_000.0;
    let series = format!("{KEY}/concurrency");
    let now = common::record_history(&store, &series, now_secs, 3.0, demand);

    let s = tick_until(&mut engine, &registry, now, |s| s.forecast.is_some());
    // The decision did not wait for the forecast: it is the reactive one.
    assert!(s.decision.is_some());
    let f = s.forecast.clone().unwrap();
    assert_eq!(f.regime, Regime::Daily, "three days of history: daily seasonality only");
    // llama-3.1-8b-h100 cold-starts in 240 + 150 + 60 s, refits every 600 s: 18 one-minute steps,
    // so the look-ahead is covered until the next refit.
    assert_eq!(f.horizon_steps, 18);
    assert_eq!(f.point.len(), 18);
    assert_eq!(f.step_secs, 60);
    assert!(f.backtest_mase.is_some_and(|m| m < 0.5), "model {} scored {:?}", f.model, f.backtest_mase);
    // Each workload refits on its own phase of the refit interval (the same in
    // every replica): this fit is as of a point within the last 600 s, and
    // forecasts from the minute that holds it.
    let secs =
        |rfc: &str| humantime::parse_rfc3339(rfc).unwrap().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let (fitted, start) = (secs(&f.fitted_at), secs(&f.start));
    assert!(fitted <= now_secs && fitted > now_secs - 600.0, "fitted as of {}", f.fitted_at);
    assert_eq!(start, (fitted / 60.0).floor() * 60.0);
    for (k, p) in f.point.iter().enumerate() {
        let truth = demand(start + 60.0 * k as f64);
        assert!((p - truth).abs() < 0.5, "step {k}: forecast {p}, truth {truth} (model {})", f.model);
    }
    let p90 = &f.quantiles.iter().find(|q| q.quantile == 0.9).unwrap().values;
    assert!(p90.iter().zip(&f.point).all(|(q, p)| q >= &(p - 1e-9)), "p90 below the point forecast");

    // The forecast shows in the HTTP API's JSON.
    let json = serde_json::to_value(&s.forecast).unwrap();
    assert_eq!(json["regime"], "daily");
    assert_eq!(json["start"], f.start.as_str());
    // The model was chosen on this series' six-hourly grid, as of its last point.
    let selected = secs(json["selected_at"].as_str().unwrap());
    assert!(selected <= fitted && selected > fitted - 6.0 * 3600.0, "selected as of {}", json["selected_at"]);

    // Ten minutes later (the default refit interval) the model is refitted, not chosen again.
    let more: Vec<f64> = (0..10).map(|i| demand(now_secs + 60.0 * i as f64)).collect();
    store.backfill(&series, now, &more).unwrap();
    let later = now + Duration::from_secs(600);
    let first_fit = f.fitted_at.clone();
    let s =
        tick_until(&mut engine, &registry, later, |s| s.forecast.as_ref().is_some_and(|g| g.fitted_at != first_fit));
    let g = s.forecast.unwrap();
    assert_eq!(g.selected_at, f.selected_at, "a refit within the reselect interval reuses the selection");
    assert_eq!((g.model.as_str(), g.candidates.len()), (f.model.as_str(), f.candidates.len()));
    assert_eq!(secs(&g.start), start + 600.0, "the next fit is one refit interval later");

    // An hour after the signal went silent, stale history is not forecast.
    let silent = later + Duration::from_secs(3600);
    let s = tick_until(&mut engine, &registry, silent, |s| s.forecast_error.is_some());
    assert!(s.forecast.is_none());
    // Silent from the end of the history to the grid point the refit is as of (within the last 600 s).
    let Some(RefitError::Silent { secs: quiet, .. }) = s.forecast_error.clone() else {
        panic!("{:?}", s.forecast_error)
    };
    assert!(quiet > 3000 && quiet <= 3600, "{quiet}");
    let why = s.forecast_error.unwrap().to_string();
    assert!(why.starts_with(&format!("no `concurrency` recorded in the last {quiet} s")), "{why}");
}

#[test]
fn no_history_means_no_forecast_and_a_reason() {
    let (mut engine, registry, store) = engine_with("");
    let now = SystemTime::now();
    store.set_latest(&format!("{KEY}/concurrency"), now, 10.0);
    let s = tick_until(&mut engine, &registry, now, |s| s.forecast_error.is_some());
    assert_eq!(s.forecast_error.map(|e| e.to_string()).as_deref(), Some("no observed values in the series"));
    assert!(s.forecast.is_none());
    assert!(s.decision.is_some(), "the reactive decision stands without a forecast");
}

#[test]
fn forecasting_can_be_turned_off() {
    let (mut engine, registry, store) = engine_with("forecast: {enabled: false}");
    let now = SystemTime::now();
    let values: Vec<f64> = (0..1440).map(|i| demand(60.0 * i as f64)).collect();
    store.backfill(&format!("{KEY}/concurrency"), now - Duration::from_secs(86_400), &values).unwrap();
    for _ in 0..10 {
        engine.tick(now);
        std::thread::sleep(Duration::from_millis(20));
    }
    let snap = registry.load();
    let s = snap.get(KEY).unwrap();
    assert!(s.forecast.is_none() && s.forecast_error.is_none());
}

#[test]
fn forecast_settings_are_validated() {
    let cases = [
        ("forecast: {refit_interval_secs: 1}", "forecast.refit_interval_secs: must be within 10..=86400, got 1"),
        ("forecast: {quantiles: [0.5, 1.2]}", "forecast.quantiles: each must be strictly between 0 and 1, got 1.2"),
        ("forecast: {history_days: 60}", "forecast.history_days: 60 exceeds store.retention_days 35"),
        ("forecast: {origins: 0}", "forecast.origins: must be within 1..=100, got 0"),
        (
            "forecast: {reselect_interval_secs: 0}",
            "forecast.reselect_interval_secs: must be within 10..=2592000, got 0",
        ),
        ("forecast: {horizon: 3}", "unknown field `horizon`"),
        (
            "forecast: {seasons_secs: [90]}",
            "forecast.seasons_secs: 90 is not a whole number (of at least 2) of store.resolution_secs 60",
        ),
    ];
    for (extra, want) in cases {
        let yaml = format!("{}\n{extra}", common::known_answers());
        let err = Settings::from_yaml(&yaml, "test", Path::new(".")).unwrap_err().to_string();
        assert!(err.contains(want), "{extra}: {err}");
    }
}

/// A steeper daily cycle: 100 +- 80 in-flight requests (1 to 6 replicas of 32).
fn steep(t: f64) -> f64 {
    100.0 + 80.0 * (2.0 * std::f64::consts::PI * t / DAY).sin()
}

#[test]
fn with_a_forecast_replicas_are_sized_ahead_and_live_load_holds_scale_down() {
    let (mut engine, registry, store) = engine_with("");
    // Now is on the morning ramp: the look-ahead sees more demand than now.
    let now_secs = 1_800_000_000.0 - 0.5 * 3600.0;
    let series = format!("{KEY}/concurrency");
    let now = common::record_history(&store, &series, now_secs, 3.0, steep);
    tick_until(&mut engine, &registry, now, |s| s.forecast.is_some());

    // The next tick sizes from the forecast: p90 peak over the cold start, 32 per replica.
    let s = tick_until(&mut engine, &registry, now, |s| {
        s.decision.as_ref().is_some_and(|d| d.policy == foresight::sizing::Policy::Predictive)
    });
    let d = s.decision.unwrap();
    let sz = d.sizing.clone().unwrap();
    let f = s.forecast.as_ref().unwrap();
    // The fit is as of this workload's refit phase (within the last 600 s): sizing reads it from now on.
    let start =
        humantime::parse_rfc3339(&f.start).unwrap().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let from_now = ((now_secs - start) / 60.0).floor() as usize;
    let p90 = &f.quantiles.iter().find(|q| q.quantile == 0.9).unwrap().values[from_now..];
    // Sized for the peak within the 450 s cold start (9 one-minute steps, now included);
    // the replica timeline runs on to the forecast's end, for the node plan.
    assert_eq!(sz.timeline.len(), p90.len());
    let peak = p90[..9].iter().copied().fold(f64::MIN, f64::max);
    assert!((sz.forecast_peak - peak).abs() < 1e-6, "{} vs {peak}", sz.forecast_peak);
    assert!(peak > steep(now_secs), "the ramp: the look-ahead peak is above the live value");
    assert_eq!(d.desired_replicas, (peak / 32.0).ceil() as u32, "{}", d.reason);
    assert_eq!(sz.quantile, 0.9);
    assert!(d.reason.contains("p90"), "{}", d.reason);

    // A surge the forecast did not see: the live value binds.
    let surge_at = now + Duration::from_secs(10);
    store.set_latest(&series, surge_at, 300.0);
    engine.tick(surge_at);
    let d = registry.load().get(KEY).unwrap().decision.clone().unwrap();
    assert_eq!(d.desired_replicas, 10, "ceil(300 / 32) = 10 = max_replicas: {}", d.reason);

    // It ends: the count waits out the 300 s stabilisation window, then follows the forecast.
    let calm_at = surge_at + Duration::from_secs(60);
    store.set_latest(&series, calm_at, steep(now_secs));
    engine.tick(calm_at);
    let d = registry.load().get(KEY).unwrap().decision.clone().unwrap();
    assert_eq!(d.desired_replicas, 10, "held within the window: {}", d.reason);
    assert_eq!(d.binding, Some(foresight::sizing::predictive::Binding::Stabilisation));
    let after = surge_at + Duration::from_secs(301);
    store.set_latest(&series, after, steep(now_secs));
    engine.tick(after);
    let d = registry.load().get(KEY).unwrap().decision.clone().unwrap();
    assert!(d.desired_replicas < 10, "released after the window: {}", d.reason);
}
