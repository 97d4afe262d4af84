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
    decide::{blind_decision, decide, reactive_decision, slo_held, unix},
    outcome::NoDecision,
    refit::{key_grid, settle_secs, ForecastView, Refitter},
    spare,
    state::{PoolSpare, PoolState, Registry, SignalReading, WorkloadState},
    timeline::{role_timeline, timeline},
    warmup::{self, Step, Warming},
};
use crate::{
    capacity::{self, Demand, Plan, PlanInput, Pool, Reservation},
    cluster::ClusterView,
    config::{ForecastSettings, Settings, SizingSettings},
    sizing::{learned::Estimator, predictive::Stabiliser, Policy},
    sources::{health::SourceHealth, Signal},
    store::Store,
    workload::Workload,
    workload::{pods_series, series, ROLE_SIGNALS},
};

struct Slot {
    workload: Arc<Workload>,
    state: WorkloadState,
    /// The load multiplier learned from measured queue waits, and when the
    /// queue-wait reading it last took in was made.
    headroom: super::lookback::Replayed,
    wait_seen: Option<SystemTime>,
    /// Per-replica capacity learned from load against the queue-wait SLO.
    capacity: Estimator,
    /// Scale-down stabilisation of each role's decisions, in `workload.roles` order.
    role_stabilisers: Vec<Stabiliser>,
    /// The ids of this workload's refits queued or running (its target and demand parts).
    refit_pending: Vec<u64>,
    /// When the next refit is due.
    refit_due: Option<SystemTime>,
    /// The target forecast hours ahead for the spare-capacity plan, its job, and when the next is due.
    spare_forecast: Option<Arc<ForecastView>>,
    spare_pending: Option<u64>,
    spare_due: Option<SystemTime>,
    /// The target signal's highest reading over the same hours a day and a week ago.
    spare_floor: Option<f64>,
    /// What the workload still waits for after start before it answers; `None` once it answers.
    warmup: Option<Warming>,
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
    /// Collectors report their first poll to `health` (the serving process):
    /// each workload then answers only once its history is loaded and its
    /// first forecast fitted on it. Without collectors (tests, tools) the
    /// store's history is taken as loaded.
    awaits_sources: bool,
    /// Every workload has warmed up and been decided once since start. From
    /// then on the replica stays ready: a workload a reload adds declines on
    /// its own while it warms up, and the node plan includes what it has.
    started: bool,
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

/// How often the spare plan's hours-ahead forecasts are refitted (or the refit interval, if longer).
const SPARE_REFIT_SECS: u64 = 1800;

impl Engine {
    pub fn new(settings: &Settings, registry: Arc<Registry>, store: Arc<Store>) -> Self {
        let refitter = Refitter::start(store.clone(), settings.forecast.refit_threads);
        Engine::with_refitter(settings, registry, store, refitter)
    }

    /// The engine the simulator runs: the same one, fitting on the caller's
    /// thread so a replay is deterministic and needs no wall clock.
    pub(crate) fn inline(settings: &Settings, registry: Arc<Registry>, store: Arc<Store>) -> Self {
        let refitter = Refitter::inline(store.clone());
        Engine::with_refitter(settings, registry, store, refitter)
    }

    fn with_refitter(settings: &Settings, registry: Arc<Registry>, store: Arc<Store>, refitter: Refitter) -> Self {
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
            awaits_sources: false,
            started: false,
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
    /// Each workload waits for its collector's first poll, then for its first forecast (see [`Warmup`]).
    pub(crate) fn with_source_health(mut self, health: Arc<SourceHealth>) -> Self {
        self.health = health;
        self.awaits_sources = true;
        self
    }

    /// Blocks until every queued refit has finished (tests stepping this
    /// threaded engine beside an inline one).
    #[cfg(test)]
    pub(crate) fn wait_refits(&self) {
        self.refitter.wait_idle();
    }

    fn cluster_view(&self) -> Option<Arc<ClusterView>> {
        self.cluster.as_ref().and_then(|rx| rx.borrow().clone())
    }

    /// Take a new config: keep the last answer of workloads whose config is
    /// unchanged, start the rest afresh, drop removed workloads.
    pub(crate) fn reconfigure(&mut self, settings: &Settings) {
        self.log_every_decision = settings.log_every_decision;
        // The hold looks back over the store's recent readings, the headroom over those not yet
        // settled into history: keep the window's worth, and at least ten minutes.
        self.store.keep_recent(settings.sizing.scale_down_stabilization.max(std::time::Duration::from_secs(600)));
        self.sizing = settings.sizing.clone();
        self.pools = settings.pools.clone();
        self.reservations = settings.reservations.clone();
        let forecast_changed = *self.forecast != settings.forecast;
        self.forecast = Arc::new(settings.forecast.clone());
        let mut old: HashMap<String, Slot> = self.slots.drain(..).map(|s| (s.workload.key(), s)).collect();
        for w in &settings.workloads {
            // A changed workload on the same source has its history already: it need not warm up again.
            let warmup = match old.get(&w.key()) {
                Some(s) if s.workload.source == w.source => s.warmup,
                _ => Some(Warming::History),
            };
            let slot = match old.remove(&w.key()) {
                Some(mut s) if s.workload.as_ref() == w.as_ref() => {
                    if forecast_changed {
                        // Refit now with the new settings; a fit still running with the old ones is dropped.
                        s.refit_due = None;
                        s.refit_pending.clear();
                        s.spare_due = None;
                        s.spare_pending = None;
                    }
                    s
                }
                _ => Slot {
                    workload: w.clone(),
                    state: WorkloadState::new(w),
                    role_stabilisers: vec![Stabiliser::default(); w.roles.len()],
                    headroom: Default::default(),
                    wait_seen: None,
                    capacity: Estimator::new(w.profile.concurrency_per_replica),
                    refit_pending: Vec::new(),
                    refit_due: None,
                    spare_forecast: None,
                    spare_pending: None,
                    spare_due: None,
                    spare_floor: None,
                    warmup,
                },
            };
            self.slots.push(slot);
        }
        for key in old.keys() {
            info!(workload = %key, "workload removed from config");
        }
    }

    /// Move each workload's start-up along: history loaded (its collector's
    /// first poll is done), then its first forecast in, or waited for long enough.
    fn warm_up(&mut self, now: SystemTime) {
        let (bound, forecasting) = (self.forecast.first_fit_wait, self.forecast.enabled);
        for slot in self.slots.iter_mut().filter(|s| s.warmup.is_some()) {
            if !self.awaits_sources {
                slot.warmup = None;
                continue;
            }
            let key = slot.workload.key();
            let loaded = self.health.get(&key).is_some_and(|h| h.first_poll_done);
            let (next, step) = warmup::advance(slot.warmup, loaded, forecasting, bound, now);
            slot.warmup = next;
            match step {
                // The first refits are queued this tick, on the history just loaded.
                Step::Loaded => {
                    slot.refit_due = None;
                    slot.spare_due = None;
                }
                Step::TimedOut => {
                    info!(workload = %key, waited_secs = bound.as_secs_f64(), "first forecast not in yet; answering reactively until it lands")
                }
                Step::Wait => {}
            }
        }
    }

    /// One tick: take in finished forecasts, queue due refits, read, decide, publish.
    pub fn tick(&mut self, now: SystemTime) {
        self.warm_up(now);
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
            slot.state.pods = self.store.latest(&pods_series(&key)).map(|(v, _)| v as u32);
            // Each new p99 queue wait past the profile's wait budget means more than the SLO's 1%
            // waited too long: with the ITL, a verdict capacity is learned from. (The headroom
            // takes the same readings in from the store, in `decide` below.)
            if let Some((p99, at)) = self.store.latest(&series(&key, Signal::QueueWaitP99)) {
                if slot.wait_seen != Some(at) && p99.is_finite() {
                    slot.wait_seen = Some(at);
                    let late = p99 > w.profile.wait_budget_secs().max(QUEUE_TIME_FIRST_BUCKET_SECS);
                    // A verdict on the SLO against the requests each replica was running: evidence of how
                    // many it runs at once within it (`running`, else in flight less those waiting).
                    let read = |s: Signal| slot.state.signals.get(&s).map(|r| r.value);
                    let load = read(Signal::Running)
                        .or_else(|| Some(read(Signal::Concurrency)? - read(Signal::QueueDepth).unwrap_or(0.0)));
                    if let (Some(load), Some(pods), Some(held)) =
                        (load, slot.state.pods.filter(|p| *p >= 1), slo_held(w, late, read(Signal::ItlP90)))
                    {
                        slot.capacity.observe(load / f64::from(pods), held);
                    }
                }
            }
            slot.state.capacity = self.sizing.learn_capacity.then(|| slot.capacity.estimate());
            // What the source knows about a missing target signal, once it has been missing as long as
            // it takes to go stale.
            let cause = || {
                slot.state.source.as_ref().and_then(|h| h.explain(w.target.signal, now, w.stale_after.as_secs_f64()))
            };
            let past = super::lookback::past_readings(&self.store, w, now, self.sizing.scale_down_stabilization);
            let mut forecast_only = false;
            let warming = slot.warmup.map(|s| warmup::reason(s, self.forecast.first_fit_wait, now));
            let decided = match (slot.state.signals.get(&w.target.signal), warming) {
                (_, Some(why)) => Err(NoDecision::WarmingUp(why)),
                (None, None) => Err(NoDecision::NoReading { signal: w.target.signal, cause: cause() }),
                (Some(r), None) if r.age_secs > w.stale_after.as_secs_f64() => {
                    match blind_decision(w, &slot.state, r.age_secs, &self.sizing, &past, now) {
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
                (Some(r), None) => {
                    let budget = w.profile.wait_budget_secs().max(QUEUE_TIME_FIRST_BUCKET_SECS);
                    let headroom = slot.headroom.factor(&self.store, w, now, settle_secs(w), |p99| p99 > budget);
                    decide(w, &slot.state, r.value, &self.sizing, &past, headroom, now)
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
            if !w.roles.is_empty() && warming.is_none() {
                super::roles::decide_all(w, &mut slot.state, &mut slot.role_stabilisers, &self.sizing, now);
            }
            let live = slot.state.signals.get(&w.target.signal).map(|r| r.value);
            slot.state.reactive_replicas =
                live.and_then(|v| reactive_decision(w, &slot.state, v).ok()).map(|d| d.desired_replicas);
            // Shadow: KEDA gets the reactive answer; the predictive one is reported beside it.
            let decided = match (w.shadow, decided, live) {
                // Shadow mode tells KEDA the reactive answer, and there is none on stale data.
                (true, Ok(_), _) if forecast_only => {
                    slot.state.shadow = None;
                    Err(NoDecision::ShadowStale)
                }
                (true, Ok(d), Some(v)) if d.policy == Policy::Predictive => {
                    slot.state.shadow = Some(d);
                    reactive_decision(w, &slot.state, v).map(|mut r| {
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
                        if matches!(why, NoDecision::WarmingUp(_)) {
                            // Expected at every start: not a warning.
                            info!(workload = %key, reason = %why, "no answer yet; the scaler answers UNAVAILABLE");
                        } else {
                            warn!(workload = %key, reason = %why, "no decision; the scaler answers UNAVAILABLE so KEDA's fallback applies");
                        }
                    }
                    // No answer beats an old one presented as current.
                    slot.state.decision = None;
                    slot.state.error = Some(why);
                }
            }
        }
        self.started |= self.slots.iter().all(|s| s.warmup.is_none() && s.state.decided_at.is_some());
        let view = self.cluster_view();
        let plan = self.plan(now, view.as_deref());
        let spare = self.spare(now, view.as_deref());
        self.publish(plan, spare, view);
    }

    /// The node plan for every workload's replica timeline (none without
    /// pools, and none before start-up has warmed every workload up: a plan
    /// that counts a warming workload as zero replicas is not the one a
    /// replica running longer has, so pool targets decline until then).
    fn plan(&mut self, now: SystemTime, view: Option<&ClusterView>) -> Option<Arc<Plan>> {
        let pools = view.map_or(self.pools.as_slice(), |v| v.pools.as_slice());
        if pools.is_empty() || (self.awaits_sources && !self.started) {
            return None;
        }
        let now_unix = unix(now) as i64;
        let step = self.sizing.plan_step_secs;
        // One demand per workload, or per role for workloads with roles (their
        // Deployments are the roles'); `owner` maps each back to its slot and role.
        let mut demands: Vec<Demand> = Vec::new();
        let mut owner: Vec<(usize, Option<usize>)> = Vec::new();
        for (i, s) in self.slots.iter().enumerate() {
            let p = &s.workload.profile;
            let cluster = view.and_then(|v| v.workloads.get(&s.workload.key()));
            if !s.workload.roles.is_empty() {
                for (r, (role, rs)) in s.workload.roles.iter().zip(&s.state.roles).enumerate() {
                    let d = rs.decision.as_ref();
                    demands.push(Demand {
                        workload: format!("{}/{}", s.workload.key(), role.kind),
                        shape: role.config_shape(),
                        replicas: d.map_or_else(|| vec![0], |d| role_timeline(d, step)),
                        pod_start_secs: role.profile.pod_start_secs(),
                        running: d.map_or(0, |d| d.desired_replicas),
                    });
                    owner.push((i, Some(r)));
                }
                continue;
            }
            // Shadow workloads are planned as the forecast would have them: the plan is reported, not acted on.
            let d = s.state.shadow.as_ref().or(s.state.decision.as_ref());
            // Pods the scheduler has placed, when the cluster is read; else pods
            // answering the scrape; else what KEDA was last told.
            // Each pending pod counts as an unplaced replica: exact for one-pod replicas, and for
            // LeaderWorkerSet groups the bound that keeps more nodes warm rather than fewer.
            let placed = cluster.and_then(|c| Some(c.replicas?.current.saturating_sub(c.pending.len() as u32)));
            demands.push(Demand {
                workload: s.workload.key(),
                shape: cluster.map_or_else(|| s.workload.config_shape(), |c| c.shape.clone()),
                replicas: d.map_or_else(|| vec![0], |d| timeline(d, step)),
                pod_start_secs: p.pod_start_secs(),
                running: placed.or(s.state.pods).or(s.state.decision.as_ref().map(|d| d.desired_replicas)).unwrap_or(0),
            });
            owner.push((i, None));
        }
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
        for (&(i, role), wp) in owner.iter().zip(&plan.workloads) {
            let state = &mut self.slots[i].state;
            let placement = match role {
                Some(r) => &mut state.roles[r].placement,
                None => &mut state.placement,
            };
            if wp.unplaced > 0 && placement.as_ref().is_none_or(|old| old.unplaced == 0) {
                warn!(workload = %wp.workload, unplaced = wp.unplaced, excluded = ?wp.excluded, "replicas no pool can host");
            }
            *placement = Some(wp.clone());
        }
        Some(Arc::new(plan))
    }

    fn refits(&mut self, now: SystemTime) {
        crate::telemetry::refit_waiting(self.refitter.waiting());
        let finished = self.refitter.finished();
        for done in finished {
            if done.spare {
                if let Some(slot) = self.slots.iter_mut().find(|s| s.spare_pending == Some(done.id)) {
                    slot.spare_pending = None;
                    // No hours-ahead forecast: the spare plan holds this workload at its current replicas.
                    slot.spare_forecast = done.outcome.ok();
                }
                continue;
            }
            // A workload removed or changed since the job was queued has a new slot: drop the result.
            let Some(slot) = self.slots.iter_mut().find(|s| s.refit_pending.contains(&done.id)) else {
                continue;
            };
            slot.refit_pending.retain(|id| *id != done.id);
            // The first forecasts on the loaded history (the target's, and a role workload's demand
            // parts), or why there are none: either way the answer is now the one a replica that
            // started earlier gives.
            if slot.refit_pending.is_empty() && matches!(slot.warmup, Some(Warming::FirstForecast { .. })) {
                slot.warmup = None;
            }
            if !slot.workload.roles.is_empty() && ROLE_SIGNALS.contains(&done.signal) {
                // A demand part that failed to fit leaves that part to its live reading.
                match &done.outcome {
                    Ok(f) => slot.state.demand_forecasts.insert(done.signal, f.clone()),
                    Err(_) => slot.state.demand_forecasts.remove(&done.signal),
                };
            }
            if done.signal != slot.workload.target.signal {
                continue;
            }
            let interval = self.forecast.refit_interval;
            match done.outcome {
                Ok(f) => {
                    if slot.state.forecast.as_ref().map(|p| (&p.model, p.regime)) != Some((&f.model, f.regime)) {
                        info!(workload = %done.key, model = %f.model, regime = f.regime.as_str(), mase = ?f.backtest_mase, fit_ms = format_args!("{:.1}", f.fit_ms), "forecast model");
                    }
                    slot.state.forecast = Some(f);
                    slot.state.forecast_error = None;
                    // The next grid point after the one fitted: every replica refits at the same
                    // instants, and a fit that finished late is followed at once, for the latest point.
                    slot.refit_due = Some(done.at + interval);
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
                slot.state.demand_forecasts.clear();
            }
            return;
        }
        for slot in self.slots.iter_mut().filter(|s| {
            s.refit_pending.is_empty() && s.refit_due.is_none_or(|due| now >= due) && s.warmup != Some(Warming::History)
        }) {
            let w = &slot.workload;
            // The target first, then the demand parts roles are sized on.
            let mut signals = vec![w.target.signal];
            if !w.roles.is_empty() {
                signals.extend(ROLE_SIGNALS.iter().filter(|s| w.signals.contains(s) && **s != w.target.signal));
            }
            let at = key_grid(now, self.forecast.refit_interval, &w.key());
            // When it became due, for the refit-lag metric: as planned, or now for a first fit.
            let due = slot.refit_due.unwrap_or(now);
            for signal in signals {
                self.next_job += 1;
                self.refitter.submit(self.next_job, w, signal, at, due, &self.forecast);
                slot.refit_pending.push(self.next_job);
            }
        }
        // Hours-ahead forecasts for the spare plan, less often: they change slowly and cost more.
        let Some(&longest) = self.sizing.spare_horizons_secs.last() else { return };
        // No pools (configured or read from the cluster), no spare plan: its fits would cost
        // each workload a forecast hours ahead for nothing. (The cluster receiver is always
        // there; whether it has delivered pools is what counts.)
        if self.pools.is_empty() && self.cluster_view().is_none_or(|v| v.pools.is_empty()) {
            return;
        }
        let every = self.forecast.refit_interval.max(std::time::Duration::from_secs(SPARE_REFIT_SECS));
        for slot in self.slots.iter_mut().filter(|s| {
            s.spare_pending.is_none() && s.spare_due.is_none_or(|due| now >= due) && s.warmup != Some(Warming::History)
        }) {
            self.next_job += 1;
            let lead = longest as f64 + every.as_secs_f64();
            let at = key_grid(now, every, &slot.workload.key());
            let due = slot.spare_due.unwrap_or(now);
            self.refitter.submit_spare(self.next_job, &slot.workload, at, due, &self.forecast, lead);
            slot.spare_pending = Some(self.next_job);
            slot.spare_due = Some(at + every);
            slot.spare_floor = spare::seasonal_peak(&self.store, &slot.workload, at, lead);
        }
    }

    /// Each pool's spare-capacity offers (none without pools or horizons).
    fn spare(&self, now: SystemTime, view: Option<&ClusterView>) -> Option<Vec<PoolSpare>> {
        let pools = view.map_or(self.pools.as_slice(), |v| v.pools.as_slice());
        let inputs: Vec<spare::Input<'_>> = self
            .slots
            .iter()
            .map(|s| spare::Input {
                workload: &s.workload,
                state: &s.state,
                forecast: s.spare_forecast.as_ref(),
                floor: s.spare_floor,
            })
            .collect();
        spare::plan(unix(now) as i64, &self.sizing, pools, &self.reservations, &inputs)
    }

    fn publish(&self, plan: Option<Arc<Plan>>, spare: Option<Vec<PoolSpare>>, view: Option<Arc<ClusterView>>) {
        let ready = self.started;
        let pools = view
            .as_ref()
            .map_or(self.pools.as_slice(), |v| v.pools.as_slice())
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let pp = plan.as_ref().and_then(|plan| plan.pools.iter().find(|pp| pp.name == p.name).cloned());
                let offers = spare.as_ref().and_then(|s| s.get(i).cloned());
                PoolState::new(p, &self.reservations, pp, offers)
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

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
