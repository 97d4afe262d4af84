//! The control loop: every tick, read each workload's latest signals from
//! the store, decide, and publish the answers to the [`Registry`] in one step.
//!
//! This is the only writer of per-workload state, and the only place that
//! reads the clock on behalf of decision code (`now` is passed down). A
//! signal older than the workload's `stale_after` is not used: the workload
//! then has no decision, the scaler answers UNAVAILABLE, and KEDA's
//! `fallback` applies, rather than fresh-looking numbers built on old data.

use std::{collections::HashMap, sync::Arc, time::SystemTime};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::{
    config::{Settings, Workload},
    sizing::reactive,
    sources::collector::series,
    state::{Registry, SignalReading, WorkloadState},
    store::Store,
};

struct Slot {
    workload: Arc<Workload>,
    state: WorkloadState,
}

/// The control loop's state.
pub struct Engine {
    slots: Vec<Slot>,
    registry: Arc<Registry>,
    store: Arc<Store>,
    log_every_decision: bool,
}

impl Engine {
    pub fn new(settings: &Settings, registry: Arc<Registry>, store: Arc<Store>) -> Self {
        let mut engine = Engine { slots: Vec::new(), registry, store, log_every_decision: false };
        engine.reconfigure(settings);
        engine
    }

    /// Take a new config: keep the last answer of workloads whose config is
    /// unchanged, start the rest afresh, drop removed workloads.
    pub fn reconfigure(&mut self, settings: &Settings) {
        self.log_every_decision = settings.log_every_decision;
        let mut old: HashMap<String, Slot> = self.slots.drain(..).map(|s| (s.workload.key(), s)).collect();
        for w in &settings.workloads {
            let state = match old.remove(&w.key()) {
                Some(s) if s.workload.as_ref() == w.as_ref() => s.state,
                _ => WorkloadState::new(w),
            };
            self.slots.push(Slot { workload: w.clone(), state });
        }
        for key in old.keys() {
            info!(workload = %key, "workload removed from config");
        }
    }

    /// One tick: read, decide, publish.
    pub fn tick(&mut self, now: SystemTime) {
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
