//! The control loop: every tick, read each workload's latest signals from
//! the store, decide, and publish the answers to the [`Registry`] in one step.
//!
//! This is the only writer of per-workload state, and the only place that
//! reads the clock on behalf of decision code (`now` is passed down). A
//! signal older than the workload's `stale_after` is not used: the workload
//! then has no decision, the scaler answers UNAVAILABLE, and KEDA's
//! `fallback` applies, rather than fresh-looking numbers built on old data.
//!
//! Forecasts are refitted off the tick by a [`Refitter`]: each tick hands it
//! the workloads whose forecast is due and takes in what it has finished.

use std::{collections::HashMap, sync::Arc, time::SystemTime};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::{
    config::{ForecastSettings, Settings, Workload},
    refit::Refitter,
    sizing::reactive,
    sources::collector::series,
    state::{Registry, SignalReading, WorkloadState},
    store::Store,
};

struct Slot {
    workload: Arc<Workload>,
    state: WorkloadState,
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
    refitter: Refitter,
    next_job: u64,
}

/// A refit that gave no forecast (no history yet, say) is tried again this soon,
/// or at the refit interval if that is shorter.
const RETRY_SECS: u64 = 60;

impl Engine {
    pub fn new(settings: &Settings, registry: Arc<Registry>, store: Arc<Store>) -> Self {
        let refitter = Refitter::start(store.clone());
        let forecast = Arc::new(settings.forecast.clone());
        let mut engine =
            Engine { slots: Vec::new(), registry, store, log_every_decision: false, forecast, refitter, next_job: 0 };
        engine.reconfigure(settings);
        engine
    }

    /// Take a new config: keep the last answer of workloads whose config is
    /// unchanged, start the rest afresh, drop removed workloads.
    pub fn reconfigure(&mut self, settings: &Settings) {
        self.log_every_decision = settings.log_every_decision;
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
                _ => Slot { workload: w.clone(), state: WorkloadState::new(w), refit_pending: None, refit_due: None },
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
            let decided = match slot.state.signals.get(&w.target.signal) {
                None => Err(format!("no `{}` reading yet", w.target.signal)),
                Some(r) if r.age_secs > w.stale_after.as_secs_f64() => Err(format!(
                    "stale: the last `{}` reading is {:.0} s old (stale_after_secs {})",
                    w.target.signal,
                    r.age_secs,
                    w.stale_after.as_secs_f64()
                )),
                Some(r) => reactive::decide(reactive::Input {
                    signal: r.value,
                    per_replica: w.target.per_replica,
                    min_replicas: w.min_replicas,
                    max_replicas: w.max_replicas,
                    activation_threshold: w.activation_threshold,
                })
                .ok_or_else(|| format!("unusable `{}` reading {}", w.target.signal, r.value)),
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
                    if slot.state.error.as_deref() != Some(why.as_str()) {
                        warn!(workload = %key, reason = %why, "no decision; the scaler answers UNAVAILABLE so KEDA's fallback applies");
                    }
                    // No answer beats an old one presented as current.
                    slot.state.decision = None;
                    slot.state.error = Some(why);
                }
            }
        }
        self.publish();
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
                    if slot.state.forecast_error.as_deref() != Some(why.as_str()) {
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

    fn publish(&self) {
        let ready = self.slots.iter().all(|s| s.state.decided_at.is_some());
        self.registry.publish(self.slots.iter().map(|s| s.state.clone()).collect(), ready);
    }

    /// Tick every `settings.tick_interval` until `shutdown`; apply configs
    /// that arrive on `reloads` at once.
    pub async fn run(mut self, settings: Settings, mut reloads: mpsc::Receiver<Settings>, shutdown: CancellationToken) {
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
