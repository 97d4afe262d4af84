//! `/metrics`: Foresight's forecasts, decisions and node plan as Prometheus
//! series, so Grafana can draw actual vs forecast vs replicas, beside its
//! own health counters ([`crate::telemetry`]).
//!
//! The forecast series are read from the published snapshot at each scrape
//! (a [`Collector`]), so a scrape sees one consistent tick. Forecasts are
//! exposed at fixed horizons from the scrape time: `foresight_forecast
//! {horizon="5m"} offset 5m` is what was expected for now five minutes ago.

use std::{sync::Arc, time::UNIX_EPOCH};

use axum::{extract::State, http::header, response::IntoResponse};
use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric},
    metrics::{gauge::ConstGauge, MetricType},
    registry::Registry as PromRegistry,
};

use super::ApiState;
use crate::serve::state::{Registry, Snapshot};

/// Horizons the forecast is exposed at, where the forecast reaches.
const HORIZONS: [(&str, f64); 6] =
    [("1m", 60.0), ("5m", 300.0), ("10m", 600.0), ("15m", 900.0), ("30m", 1800.0), ("1h", 3600.0)];

/// The prometheus-client registry behind `/metrics`.
pub struct Exposition {
    registry: PromRegistry,
}

impl Exposition {
    pub fn new(state: Arc<Registry>) -> Exposition {
        let mut registry = PromRegistry::default();
        crate::telemetry::register(&mut registry);
        registry.register_collector(Box::new(SnapshotCollector { state }));
        Exposition { registry }
    }

    /// The OpenMetrics text of every series now.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail; a collector bug would show as a truncated body.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

pub(crate) async fn serve(State(s): State<ApiState>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], s.metrics.render())
}

struct SnapshotCollector {
    state: Arc<Registry>,
}

impl std::fmt::Debug for SnapshotCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SnapshotCollector")
    }
}

type Labels = Vec<(&'static str, String)>;

/// One gauge family: name, help, and its series.
struct Gauges {
    name: &'static str,
    help: &'static str,
    series: Vec<(Labels, f64)>,
}

impl Gauges {
    fn new(name: &'static str, help: &'static str) -> Gauges {
        Gauges { name, help, series: Vec::new() }
    }

    fn push(&mut self, labels: Labels, v: f64) {
        if v.is_finite() {
            self.series.push((labels, v));
        }
    }

    fn encode(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if self.series.is_empty() {
            return Ok(());
        }
        let mut family = encoder.encode_descriptor(self.name, self.help, None, MetricType::Gauge)?;
        for (labels, v) in &self.series {
            ConstGauge::new(*v).encode(family.encode_family(labels)?)?;
        }
        Ok(())
    }
}

impl Collector for SnapshotCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let now = std::time::SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        for family in gauges(&self.state.load(), now) {
            family.encode(&mut encoder)?;
        }
        Ok(())
    }
}

/// Every snapshot-derived gauge, as of Unix time `now`.
fn gauges(snap: &Snapshot, now: f64) -> Vec<Gauges> {
    let mut value = Gauges::new("foresight_signal_value", "Latest reading of each recorded signal");
    let mut age = Gauges::new("foresight_signal_age_seconds", "Age of that reading at the last tick");
    let mut target = Gauges::new("foresight_target_info", "The signal each workload is sized on (value 1)");
    let mut forecast = Gauges::new("foresight_forecast", "Forecast quantile of the target signal for now + horizon");
    let mut point = Gauges::new("foresight_forecast_point", "Point forecast of the target signal for now + horizon");
    let mut mase = Gauges::new("foresight_backtest_mase", "Rolling-origin backtest MASE of the chosen model");
    let mut fit = Gauges::new("foresight_forecast_fit_seconds", "Duration of the latest forecast fit");
    let mut desired = Gauges::new("foresight_desired_replicas", "Replicas KEDA is told");
    let mut needed = Gauges::new("foresight_needed_replicas", "Replicas demand alone asks for, before bounds");
    let mut reactive = Gauges::new("foresight_reactive_replicas", "Replicas the reactive rule alone would ask for");
    let mut pods = Gauges::new("foresight_pods_scraped", "Pods that answered the latest scrape (scraped sources)");
    let mut info = Gauges::new("foresight_decision_info", "The latest decision's policy, binding constraint and mode");
    let mut unavailable = Gauges::new(
        "foresight_decision_unavailable",
        "1 while a workload has no answer (no or stale signal past any forecast bridge): KEDA's fallback applies",
    );
    let mut role_desired =
        Gauges::new("foresight_role_desired_replicas", "Replicas each prefill/decode role's ScaledObject is told");
    let mut role_unavailable =
        Gauges::new("foresight_role_unavailable", "1 while a role has no answer: KEDA's fallback applies to it");
    let mut capacity = Gauges::new(
        "foresight_capacity_per_replica",
        "Requests a replica runs at once: the profile's, the learned figure, and the blend sizing uses",
    );
    for w in snap.workloads() {
        let base = || vec![("namespace", w.namespace.clone()), ("workload", w.name.clone())];
        let with = |extra: &[(&'static str, String)]| {
            let mut l = base();
            l.extend(extra.iter().cloned());
            l
        };
        for (s, r) in &w.signals {
            value.push(with(&[("signal", s.as_str().into())]), r.value);
            age.push(with(&[("signal", s.as_str().into())]), r.age_secs);
        }
        target.push(with(&[("signal", w.signal.as_str().into())]), 1.0);
        if let Some(f) = &w.forecast {
            let step = f.step_secs.max(1) as f64;
            let sig = w.signal.as_str().to_string();
            for (h, secs) in HORIZONS {
                let k = ((now + secs - f.start_unix as f64) / step).round();
                if k < 0.0 || k as usize >= f.point.len() {
                    continue;
                }
                let k = k as usize;
                point.push(with(&[("signal", sig.clone()), ("horizon", h.into())]), f.point[k]);
                for q in &f.quantiles {
                    forecast.push(
                        with(&[("signal", sig.clone()), ("horizon", h.into()), ("quantile", q.quantile.to_string())]),
                        q.values[k],
                    );
                }
            }
            if let Some(m) = f.backtest_mase {
                mase.push(with(&[("signal", sig.clone()), ("model", f.model.clone())]), m);
            }
            fit.push(base(), f.fit_ms / 1e3);
        }
        if let Some(d) = &w.decision {
            desired.push(base(), f64::from(d.desired_replicas));
            let reported = w.shadow.as_ref().unwrap_or(d);
            needed.push(base(), f64::from(reported.needed_replicas));
            let binding = reported.binding.map_or_else(
                || reported.bound.map_or("none".to_string(), |b| format!("{b:?}").to_lowercase()),
                |b| format!("{b:?}").to_lowercase(),
            );
            let mode = if w.forecast_only {
                "forecast_only"
            } else if w.shadow.is_some() {
                "shadow"
            } else {
                "active"
            };
            info.push(
                with(&[("policy", reported.policy.as_str().into()), ("binding", binding), ("mode", mode.into())]),
                1.0,
            );
        }
        unavailable.push(base(), if w.decision.is_none() { 1.0 } else { 0.0 });
        if let Some(r) = w.reactive_replicas {
            reactive.push(base(), f64::from(r));
        }
        if let Some(p) = w.pods {
            pods.push(base(), f64::from(p));
        }
        for r in &w.roles {
            let l = with(&[("role", r.role.as_str().into())]);
            if let Some(d) = &r.decision {
                role_desired.push(l.clone(), f64::from(d.desired_replicas));
            }
            role_unavailable.push(l, if r.decision.is_none() { 1.0 } else { 0.0 });
        }
        if let Some(c) = &w.capacity {
            for (kind, v) in [("profile", c.prior), ("learned", c.learned), ("sizing", c.per_replica)] {
                capacity.push(with(&[("kind", kind.into())]), v);
            }
        }
    }
    let mut warm = Gauges::new("foresight_warm_nodes", "Nodes the plan wants Ready or provisioning now");
    let mut in_use = Gauges::new("foresight_in_use_nodes", "Nodes the running replicas occupy");
    let mut buffer =
        Gauges::new("foresight_buffer_nodes", "Warm nodes for placeholders to hold (balloons, CapacityBuffer)");
    let mut planned = Gauges::new("foresight_planned_nodes", "Nodes the plan needs now");
    let mut reserved = Gauges::new("foresight_reserved_nodes", "Nodes active reservations cover now");
    let mut cost =
        Gauges::new("foresight_pool_cost_per_hour", "Hourly price of the nodes needed now beyond paid reservations");
    let mut spare_gpus = Gauges::new(
        "foresight_pool_spare_gpus",
        "Reserved GPUs the plan over hours leaves idle throughout the horizon: what a batch queue can lease",
    );
    let mut idle_hours = Gauges::new(
        "foresight_pool_idle_reserved_gpu_hours",
        "Reserved GPU-hours the plan leaves idle over the horizon",
    );
    for p in snap.pools() {
        let Some(pp) = &p.plan else { continue };
        let l = || vec![("pool", p.name.clone())];
        warm.push(l(), f64::from(pp.warm_nodes));
        in_use.push(l(), f64::from(pp.in_use_nodes));
        buffer.push(l(), f64::from(pp.buffer_nodes));
        planned.push(l(), f64::from(pp.nodes.first().copied().unwrap_or(0)));
        reserved.push(l(), f64::from(pp.reserved.first().copied().unwrap_or(0)));
        cost.push(l(), pp.cost_per_hour_now);
    }
    for p in snap.pools() {
        for o in p.spare.iter().flat_map(|s| &s.offers) {
            let h = o.horizon_secs;
            let horizon = if h % 3600 == 0 { format!("{}h", h / 3600) } else { format!("{}m", h / 60) };
            let l = vec![("pool", p.name.clone()), ("horizon", horizon)];
            spare_gpus.push(l.clone(), f64::from(o.gpus));
            idle_hours.push(l, o.idle_gpu_hours);
        }
    }
    vec![
        value,
        age,
        target,
        forecast,
        point,
        mase,
        fit,
        desired,
        needed,
        reactive,
        pods,
        info,
        unavailable,
        role_desired,
        role_unavailable,
        capacity,
        warm,
        in_use,
        buffer,
        planned,
        reserved,
        cost,
        spare_gpus,
        idle_hours,
    ]
}
