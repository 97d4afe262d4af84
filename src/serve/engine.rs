//! The control loop: every tick, read each workload's latest signals from
//! the store, decide, and publish the answers to the [`Registry`] in one step.
//!
//! This is the only writer of per-workload state, and the only place that
//! reads the clock on behalf of decision code (`now` is passed down). A
//! signal older than the workload's `stale_after` is not used: the workload
//! then has no decision, the scaler answers UNAVAILABLE, and KEDA's
//! `fallback` applies, rather than fresh-looking numbers built on old data.
//!
//! With Kubernetes inputs on, the plan uses the cluster's replica shapes,
//! pools and placed pods as the [`crate::cluster`] reader last delivered them.
//!
//! Forecasts are refitted off the tick by a [`Refitter`]: each tick hands it
//! the workloads whose forecast is due and takes in what it has finished.

use std::{collections::HashMap, sync::Arc, time::SystemTime};

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::{
    outcome::{NoBridge, NoDecision, Unusable},
    refit::{ForecastView, Refitter},
    state::{PoolState, Registry, SignalReading, WorkloadState},
};
use crate::{
    capacity::{self, Demand, Plan, PlanInput, Pool, Reservation},
    cluster::ClusterView,
    config::{ForecastSettings, Settings, SizingSettings},
    sizing::{
        headroom::{Headroom, HeadroomConfig},
        predictive::{self, Stabiliser, Upper},
        reactive::{self, Decision},
        Policy,
    },
    sources::{health::SourceHealth, Signal},
    store::Store,
    workload::Workload,
    workload::{pods_series, series},
};

struct Slot {
    workload: Arc<Workload>,
    state: WorkloadState,
    /// Scale-down stabilisation of predictive decisions.
    stabiliser: Stabiliser,
    /// The load multiplier learned from measured queue waits, and when the
    /// queue-wait reading it last took in was made.
    headroom: Headroom,
    wait_seen: Option<SystemTime>,
    /// The id of this workload's refit that is queued or running.
    refit_pending: Option<u64>,
    /// When the next refit is due.
    refit_due: Option<SystemTime>,
}

/// The control loop's state.
pub struct Engine {
    slots: Vec<Slot>,
    registry: Arc<Registry>,
    store: Arc<Store>,
    log_every_decision: bool,
    forecast: Arc<ForecastSettings>,
    sizing: SizingSettings,
    pools: Vec<Pool>,
    reservations: Vec<Reservation>,
    refitter: Refitter,
    next_job: u64,
    /// The cluster as the Kubernetes reader last saw it (Kubernetes inputs on).
    cluster: Option<watch::Receiver<Option<Arc<ClusterView>>>>,
    /// What the collectors say about their sources.
    health: Arc<SourceHealth>,
}

/// vLLM's `request_queue_time_seconds` buckets start at 0.3 s. With every
/// wait inside that bucket a quantile interpolates to at most 0.99 x 0.3 s,
/// so a p99 above it proves more than 1% waited longer, and a p99 below it
/// proves nothing finer: a tighter budget is checked at 0.3 s. (TTFT is
/// finer-grained but counts prefill, which more replicas do not shorten.)
const QUEUE_TIME_FIRST_BUCKET_SECS: f64 = 0.3;

/// A refit that gave no forecast (no history yet, say) is tried again this soon,
/// or at the refit interval if that is shorter. A fit that fails for want of
/// data fails in microseconds, and history can arrive at once (a backfill).
const RETRY_SECS: u64 = 5;

impl Engine {
    pub fn new(settings: &Settings, registry: Arc<Registry>, store: Arc<Store>) -> Self {
        let refitter = Refitter::start(store.clone());
        let forecast = Arc::new(settings.forecast.clone());
        let mut engine = Engine {
            slots: Vec::new(),
            registry,
            store,
            log_every_decision: false,
            forecast,
            sizing: settings.sizing.clone(),
            pools: settings.pools.clone(),
            reservations: settings.reservations.clone(),
            refitter,
            next_job: 0,
            cluster: None,
            health: Arc::default(),
        };
        engine.reconfigure(settings);
        engine
    }

    /// Plan with the cluster's shapes and pools as `views` delivers them.
    pub(crate) fn with_cluster(mut self, views: watch::Receiver<Option<Arc<ClusterView>>>) -> Self {
        self.cluster = Some(views);
        self
    }

    /// Report the collectors' view of their sources (see [`SourceHealth`]).
    pub(crate) fn with_source_health(mut self, health: Arc<SourceHealth>) -> Self {
        self.health = health;
        self
    }

    fn cluster_view(&self) -> Option<Arc<ClusterView>> {
        self.cluster.as_ref().and_then(|rx| rx.borrow().clone())
    }

    /// Take a new config: keep the last answer of workloads whose config is
    /// unchanged, start the rest afresh, drop removed workloads.
    pub(crate) fn reconfigure(&mut self, settings: &Settings) {
        self.log_every_decision = settings.log_every_decision;
        self.sizing = settings.sizing.clone();
        self.pools = settings.pools.clone();
        self.reservations = settings.reservations.clone();
        let forecast_changed = *self.forecast != settings.forecast;
        self.forecast = Arc::new(settings.forecast.clone());
        let mut old: HashMap<String, Slot> = self.slots.drain(..).map(|s| (s.workload.key(), s)).collect();
        for w in &settings.workloads {
            let slot = match old.remove(&w.key()) {
                Some(mut s) if s.workload.as_ref() == w.as_ref() => {
                    if forecast_changed {
                        // Refit now with the new settings; a fit still running with the old ones is dropped.
                        s.refit_due = None;
                        s.refit_pending = None;
                    }
                    s
                }
                _ => Slot {
                    workload: w.clone(),
                    state: WorkloadState::new(w),
                    stabiliser: Stabiliser::default(),
                    headroom: Headroom::new(HeadroomConfig::default()),
                    wait_seen: None,
                    refit_pending: None,
                    refit_due: None,
                },
            };
            self.slots.push(slot);
        }
        for key in old.keys() {
            info!(workload = %key, "workload removed from config");
        }
    }

    /// One tick: take in finished forecasts, queue due refits, read, decide, publish.
    pub fn tick(&mut self, now: SystemTime) {
        self.refits(now);
        for slot in &mut self.slots {
            let w = &slot.workload;
            let key = w.key();
            slot.state.signals.clear();
            for s in &w.signals {
                if let Some((value, at)) = self.store.latest(&series(&key, *s)) {
                    let age = now.duration_since(at).unwrap_or_default();
                    slot.state.signals.insert(*s, SignalReading { value, age_secs: age.as_secs_f64() });
                }
            }
            slot.state.source = self.health.get(&key);
            // The fast correction: each new p99 queue wait past the profile's wait budget means
            // more than the SLO's 1% waited too long, so the loads sized for are raised at once.
            if let Some((p99, at)) = self.store.latest(&series(&key, Signal::QueueWaitP99)) {
                if slot.wait_seen != Some(at) && p99.is_finite() {
                    slot.wait_seen = Some(at);
                    let late = p99 > w.profile.wait_budget_secs().max(QUEUE_TIME_FIRST_BUCKET_SECS);
                    slot.headroom.observe(unix(at), if late { 0.0 } else { 1.0 });
                }
            }
            // What the source knows about a missing target signal, once it has been missing as long as
            // it takes to go stale.
            let cause = || {
                slot.state.source.as_ref().and_then(|h| h.explain(w.target.signal, now, w.stale_after.as_secs_f64()))
            };
            let mut forecast_only = false;
            let decided = match slot.state.signals.get(&w.target.signal) {
                None => Err(NoDecision::NoReading { signal: w.target.signal, cause: cause() }),
                Some(r) if r.age_secs > w.stale_after.as_secs_f64() => {
                    match blind_decision(w, &slot.state, r.age_secs, &self.sizing, &mut slot.stabiliser, now) {
                        Ok(d) => {
                            forecast_only = true;
                            Ok(d)
                        }
                        Err(bridge) => Err(NoDecision::Stale {
                            signal: w.target.signal,
                            age_secs: r.age_secs,
                            stale_after_secs: w.stale_after.as_secs_f64(),
                            cause: cause(),
                            bridge,
                        }),
                    }
                }
                Some(r) => {
                    let headroom = slot.headroom.factor();
                    decide(w, &slot.state, r.value, &self.sizing, &mut slot.stabiliser, headroom, now)
                }
            };
            if forecast_only != slot.state.forecast_only {
                if forecast_only {
                    warn!(workload = %key, bound_secs = self.sizing.forecast_only.as_secs_f64(), "target signal stale: answering from the last good forecast, never below the last decision");
                } else {
                    info!(workload = %key, "left forecast-only mode");
                }
            }
            slot.state.forecast_only = forecast_only;
            let live = slot.state.signals.get(&w.target.signal).map(|r| r.value);
            slot.state.reactive_replicas = live.and_then(|v| reactive_decision(w, v).ok()).map(|d| d.desired_replicas);
            slot.state.pods = self.store.latest(&pods_series(&key)).map(|(v, _)| v as u32);
            // Shadow: KEDA gets the reactive answer; the predictive one is reported beside it.
            let decided = match (w.shadow, decided, live) {
                // Shadow mode tells KEDA the reactive answer, and there is none on stale data.
                (true, Ok(_), _) if forecast_only => {
                    slot.state.shadow = None;
                    Err(NoDecision::ShadowStale)
                }
                (true, Ok(d), Some(v)) if d.policy == Policy::Predictive => {
                    slot.state.shadow = Some(d);
                    reactive_decision(w, v).map(|mut r| {
                        r.reason = format!("shadow mode, KEDA gets the reactive answer: {}", r.reason);
                        r
                    })
                }
                (_, decided, _) => {
                    slot.state.shadow = None;
                    decided
                }
            };
            let previous = slot.state.decision.as_ref().map(|d| (d.desired_replicas, d.active));
            match decided {
                Ok(d) => {
                    let changed = previous != Some((d.desired_replicas, d.active));
                    if changed || self.log_every_decision {
                        let queue = slot.state.signals.get(&crate::sources::Signal::QueueDepth).map(|r| r.value);
                        info!(
                            workload = %key, policy = d.policy.as_str(), signal = %w.target.signal,
                            load = format_args!("{:.2}", d.load), queue = ?queue, desired = d.desired_replicas,
                            active = d.active, reason = %d.reason, "decision"
                        );
                    } else {
                        debug!(workload = %key, desired = d.desired_replicas, "decision unchanged");
                    }
                    slot.state.decision = Some(d);
                    slot.state.decided_at = Some(now);
                    slot.state.error = None;
                }
                Err(why) => {
                    if !slot.state.error.as_ref().is_some_and(|was| was.same_kind(&why)) {
                        warn!(workload = %key, reason = %why, "no decision; the scaler answers UNAVAILABLE so KEDA's fallback applies");
                    }
                    // No answer beats an old one presented as current.
                    slot.state.decision = None;
                    slot.state.error = Some(why);
                }
            }
        }
        let view = self.cluster_view();
        let plan = self.plan(now, view.as_deref());
        self.publish(plan, view);
    }

    /// The node plan for every workload's replica timeline (none without pools).
    fn plan(&mut self, now: SystemTime, view: Option<&ClusterView>) -> Option<Arc<Plan>> {
        let pools = view.map_or(self.pools.as_slice(), |v| v.pools.as_slice());
        if pools.is_empty() {
            return None;
        }
        let now_unix = unix(now) as i64;
        let step = self.sizing.plan_step_secs;
        let demands: Vec<Demand> = self
            .slots
            .iter()
            .map(|s| {
                let p = &s.workload.profile;
                // Shadow workloads are planned as the forecast would have them: the plan is reported, not acted on.
                let d = s.state.shadow.as_ref().or(s.state.decision.as_ref());
                let cluster = view.and_then(|v| v.workloads.get(&s.workload.key()));
                // Pods the scheduler has placed, when the cluster is read; else pods
                // answering the scrape; else what KEDA was last told.
                // Each pending pod counts as an unplaced replica: exact for one-pod replicas, and for
                // LeaderWorkerSet groups the bound that keeps more nodes warm rather than fewer.
                let placed = cluster.and_then(|c| Some(c.replicas?.current.saturating_sub(c.pending.len() as u32)));
                Demand {
                    workload: s.workload.key(),
                    shape: cluster.map_or_else(|| s.workload.config_shape(), |c| c.shape.clone()),
                    replicas: d.map_or_else(|| vec![0], |d| timeline(d, step)),
                    pod_start_secs: p.pod_start_secs(),
                    running: placed
                        .or(s.state.pods)
                        .or(s.state.decision.as_ref().map(|d| d.desired_replicas))
                        .unwrap_or(0),
                }
            })
            .collect();
        let longest = pools.iter().map(|p| p.provisioning_secs).fold(0.0, f64::max)
            + demands.iter().map(|d| d.pod_start_secs).fold(0.0, f64::max);
        let steps = (longest / step as f64).ceil() as usize + 1;
        let plan = capacity::plan(PlanInput {
            now: now_unix,
            step_secs: step,
            steps,
            pools,
            reservations: &self.reservations,
            demands: &demands,
        });
        for (slot, wp) in self.slots.iter_mut().zip(&plan.workloads) {
            if wp.unplaced > 0 && slot.state.placement.as_ref().is_none_or(|old| old.unplaced == 0) {
                warn!(workload = %wp.workload, unplaced = wp.unplaced, excluded = ?wp.excluded, "replicas no pool can host");
            }
            slot.state.placement = Some(wp.clone());
        }
        Some(Arc::new(plan))
    }

    fn refits(&mut self, now: SystemTime) {
        let finished = self.refitter.finished();
        for done in finished {
            // A workload removed or changed since the job was queued has a new slot: drop the result.
            let Some(slot) = self.slots.iter_mut().find(|s| s.refit_pending == Some(done.id)) else {
                continue;
            };
            slot.refit_pending = None;
            let interval = self.forecast.refit_interval;
            match done.outcome {
                Ok(f) => {
                    if slot.state.forecast.as_ref().map(|p| (&p.model, p.regime)) != Some((&f.model, f.regime)) {
                        info!(workload = %done.key, model = %f.model, regime = f.regime.as_str(), mase = ?f.backtest_mase, fit_ms = format_args!("{:.1}", f.fit_ms), "forecast model");
                    }
                    slot.state.forecast = Some(f);
                    slot.state.forecast_error = None;
                    slot.refit_due = Some(now + interval);
                }
                Err(why) => {
                    if slot.state.forecast_error.as_ref() != Some(&why) {
                        warn!(workload = %done.key, reason = %why, "no forecast; decisions stay reactive");
                    }
                    // No forecast beats an old one presented as current.
                    slot.state.forecast = None;
                    slot.state.forecast_error = Some(why);
                    slot.refit_due = Some(now + interval.min(std::time::Duration::from_secs(RETRY_SECS)));
                }
            }
        }
        if !self.forecast.enabled {
            for slot in &mut self.slots {
                slot.state.forecast = None;
                slot.state.forecast_error = None;
            }
            return;
        }
        for slot in
            self.slots.iter_mut().filter(|s| s.refit_pending.is_none() && s.refit_due.is_none_or(|due| now >= due))
        {
            self.next_job += 1;
            self.refitter.submit(self.next_job, &slot.workload, now, &self.forecast);
            slot.refit_pending = Some(self.next_job);
        }
    }

    fn publish(&self, plan: Option<Arc<Plan>>, view: Option<Arc<ClusterView>>) {
        let ready = self.slots.iter().all(|s| s.state.decided_at.is_some());
        let pools = view
            .as_ref()
            .map_or(self.pools.as_slice(), |v| v.pools.as_slice())
            .iter()
            .map(|p| {
                let pp = plan.as_ref().and_then(|plan| plan.pools.iter().find(|pp| pp.name == p.name).cloned());
                PoolState::new(p, &self.reservations, pp)
            })
            .collect();
        let configs = self.slots.iter().map(|s| s.workload.clone()).collect();
        self.registry.publish_with(
            self.slots.iter().map(|s| s.state.clone()).collect(),
            pools,
            plan,
            ready,
            view,
            configs,
        );
    }

    /// Tick every `settings.tick_interval` until `shutdown`; apply configs
    /// that arrive on `reloads` at once.
    pub(crate) async fn run(
        mut self,
        settings: Settings,
        mut reloads: mpsc::Receiver<Settings>,
        shutdown: CancellationToken,
    ) {
        let mut interval = tokio::time::interval(settings.tick_interval);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = interval.tick() => self.tick(SystemTime::now()),
                Some(new) = reloads.recv() => {
                    self.reconfigure(&new);
                    if new.tick_interval != interval.period() {
                        interval = tokio::time::interval(new.tick_interval);
                        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    }
                    self.tick(SystemTime::now());
                }
            }
        }
    }
}

fn unix(t: SystemTime) -> f64 {
    t.duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// The reactive rule on the live target reading.
fn reactive_decision(w: &Workload, live: f64) -> Result<Decision, NoDecision> {
    reactive::decide(reactive::Input {
        signal: live,
        per_replica: w.target.per_replica,
        min_replicas: w.min_replicas,
        max_replicas: w.max_replicas,
        activation_threshold: w.activation_threshold,
    })
    .ok_or(NoDecision::UnusableReading { signal: w.target.signal, value: live })
}

/// One workload's decision from its fresh target reading `live`: predictive
/// when configured and a forecast covers now, else reactive, saying why.
fn decide(
    w: &Workload,
    state: &WorkloadState,
    live: f64,
    sizing: &SizingSettings,
    stab: &mut Stabiliser,
    headroom: f64,
    now: SystemTime,
) -> Result<Decision, NoDecision> {
    let reactive = || reactive_decision(w, live);
    if sizing.policy == Policy::Reactive {
        return reactive();
    }
    let window = sizing.scale_down_stabilization.as_secs_f64();
    let now_secs = unix(now);
    let why_not = match state.forecast.as_deref() {
        None => state.forecast_error.clone().map_or(Unusable::NotYet, Unusable::Refit),
        Some(f) => match forecast_from_now(f, sizing.quantile, now_secs) {
            Err(why) => why,
            Ok(values) => {
                let reading = |s: Signal| state.signals.get(&s).map(|r| r.value);
                let mut input = predictive_input(w, sizing, f, values);
                input.live = live;
                input.headroom = headroom;
                input.queue = reading(Signal::QueueDepth);
                input.generation_tokens_per_sec = reading(Signal::GenerationTokensRate);
                match predictive::decide(&input, stab, now_secs, window, &w.profile.name) {
                    Some(o) => return Ok(o.into()),
                    None => Unusable::NotFinite,
                }
            }
        },
    };
    // Without a forecast: the reactive answer, still held by the stabiliser so
    // a forecast outage does not drop capacity in one step.
    let mut d = reactive()?;
    let held = stab.apply(now_secs, window, d.desired_replicas);
    if held > d.desired_replicas {
        d.reason.push_str(&format!("; holding {held} (scale-down stabilisation {window:.0} s)"));
        d.desired_replicas = held;
    }
    d.reason = format!("{} (no forecast: {why_not})", d.reason);
    Ok(d)
}

/// With the target signal stale for `age_secs`: the last good forecast alone,
/// never below the last decision (blind data never scales a fleet down),
/// for at most `sizing.forecast_only` past the staleness limit. After that,
/// or without a forecast or a last decision, no answer: the scaler says
/// UNAVAILABLE and KEDA's `fallback` replicas apply.
fn blind_decision(
    w: &Workload,
    state: &WorkloadState,
    age_secs: f64,
    sizing: &SizingSettings,
    stab: &mut Stabiliser,
    now: SystemTime,
) -> Result<Decision, NoBridge> {
    let bound = sizing.forecast_only.as_secs_f64();
    let blind_for = age_secs - w.stale_after.as_secs_f64();
    if sizing.policy != Policy::Predictive || bound <= 0.0 {
        return Err(NoBridge::Off);
    }
    if blind_for > bound {
        return Err(NoBridge::Expired { bound_secs: bound });
    }
    let last = state.decision.as_ref().ok_or(NoBridge::NoEarlierDecision)?;
    let f = state.forecast.as_deref().ok_or(NoBridge::NoForecast)?;
    let values = forecast_from_now(f, sizing.quantile, unix(now))?;
    // No live reading, queue or token rate: the forecast alone.
    let input = predictive_input(w, sizing, f, values);
    let window = sizing.scale_down_stabilization.as_secs_f64();
    let o = predictive::decide(&input, stab, unix(now), window, &w.profile.name).ok_or(NoBridge::NotFinite)?;
    let mut d: Decision = o.into();
    if last.desired_replicas > d.desired_replicas {
        d.desired_replicas = last.desired_replicas;
        d.active |= last.active;
    }
    d.reason = format!(
        "forecast only: the target signal is {age_secs:.0} s old, so no live reading; {}; never below the last decision {} ({:.0} s of {bound:.0} s left before KEDA's fallback)",
        d.reason,
        last.desired_replicas,
        (bound - blind_for).max(0.0)
    );
    Ok(d)
}

/// Sizing input from the workload, its profile and forecast values; no live readings yet.
fn predictive_input<'a>(
    w: &Workload,
    sizing: &SizingSettings,
    f: &ForecastView,
    values: &'a [f64],
) -> predictive::Input<'a> {
    predictive::Input {
        signal: w.target.signal,
        live: 0.0,
        queue: None,
        generation_tokens_per_sec: None,
        per_replica: w.target.per_replica,
        slots_per_replica: w.profile.concurrency_per_replica,
        wait_budget_secs: w.profile.wait_budget_secs(),
        queueing: predictive::Queueing::default(),
        headroom: 1.0,
        tokens_per_sec_per_replica: w.profile.generation_tokens_per_sec,
        forecast: Upper { quantile: sizing.quantile, values, step_secs: f.step_secs as f64 },
        lookahead_secs: w.profile.cold_start_secs.total_secs(),
        min_replicas: w.min_replicas,
        max_replicas: w.max_replicas,
        activation_threshold: w.activation_threshold,
    }
}

/// The forecast's `quantile` values from the step that contains `now` on.
fn forecast_from_now(f: &ForecastView, quantile: f64, now_secs: f64) -> Result<&[f64], Unusable> {
    let q = f.quantiles.iter().find(|q| (q.quantile - quantile).abs() < 1e-9).ok_or(Unusable::NoQuantile(quantile))?;
    let step = f.step_secs.max(1) as f64;
    let k0 = ((now_secs - f.start_unix as f64) / step).floor().max(0.0) as usize;
    if k0 >= q.values.len() {
        return Err(Unusable::RunOut { fitted_at: f.fitted_at.clone() });
    }
    Ok(&q.values[k0..])
}

/// A decision's replicas at each `step` seconds from now: the highest of
/// the sizing timeline within each step, and never below the decided count
/// at the first.
fn timeline(d: &Decision, step: i64) -> Vec<u32> {
    let Some(s) = d.sizing.as_ref().filter(|s| !s.timeline.is_empty()) else { return vec![d.desired_replicas] };
    let per = (step as f64 / s.step_secs.max(1e-9)).max(1.0);
    let len = s.timeline.len();
    let n = ((len as f64 / per).ceil() as usize).max(1);
    let mut out: Vec<u32> = (0..n)
        .map(|j| {
            let lo = ((j as f64 * per) as usize).min(len - 1);
            let hi = (((j + 1) as f64 * per) as usize).clamp(lo + 1, len);
            s.timeline[lo..hi].iter().copied().max().unwrap_or(0)
        })
        .collect();
    out[0] = out[0].max(d.desired_replicas);
    out
}
