//! The control loop: every tick, poll each workload's source, decide, and
//! publish the answers to the [`Registry`] in one step.
//!
//! This is the only writer of per-workload state, and the only place that
//! reads the clock on behalf of decision code (`now` is passed down).

use std::{collections::HashMap, sync::Arc, time::SystemTime};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::{
    config::{Settings, Workload},
    sizing::reactive,
    sources::{Source, SourceError},
    state::{Registry, WorkloadState},
};

struct Slot {
    workload: Arc<Workload>,
    source: Source,
    state: WorkloadState,
}

/// The control loop's state.
pub struct Engine {
    slots: Vec<Slot>,
    registry: Arc<Registry>,
    log_every_decision: bool,
}

impl Engine {
    pub fn new(settings: &Settings, registry: Arc<Registry>) -> Self {
        let mut engine = Engine { slots: Vec::new(), registry, log_every_decision: false };
        engine.reconfigure(settings);
        engine
    }

    /// Take a new config: keep the source state of workloads whose source
    /// config is unchanged, build the rest, drop removed workloads. Readers see
    /// the change on the next publish.
    pub fn reconfigure(&mut self, settings: &Settings) {
        self.log_every_decision = settings.log_every_decision;
        let mut old: HashMap<String, Slot> = self.slots.drain(..).map(|s| (s.workload.key(), s)).collect();
        for w in &settings.workloads {
            let slot = match old.remove(&w.key()) {
                Some(s) if s.workload.source == w.source => {
                    let mut state = WorkloadState::new(w);
                    // Carry the last answer over only if what it was computed for is unchanged.
                    if s.workload.as_ref() == w.as_ref() {
                        state = s.state;
                    }
                    Slot { workload: w.clone(), source: s.source, state }
                }
                _ => Slot { workload: w.clone(), source: Source::build(&w.source), state: WorkloadState::new(w) },
            };
            self.slots.push(slot);
        }
        for key in old.keys() {
            info!(workload = %key, "workload removed from config");
        }
    }

    /// One tick: poll, decide, publish.
    pub async fn tick(&mut self, now: SystemTime) {
        for slot in &mut self.slots {
            let w = &slot.workload;
            let polled = slot.source.poll(now).await;
            let decided = polled.and_then(|signals| {
                let signal = signals.get(w.target.signal).ok_or(SourceError::MissingSignal(w.target.signal))?;
                reactive::decide(reactive::Input {
                    signal,
                    per_replica: w.target.per_replica,
                    min_replicas: w.min_replicas,
                    max_replicas: w.max_replicas,
                    activation_threshold: w.activation_threshold,
                })
                .ok_or(SourceError::MissingSignal(w.target.signal))
            });
            let previous = slot.state.decision.as_ref().map(|d| (d.desired_replicas, d.active));
            match decided {
                Ok(d) => {
                    let changed = previous != Some((d.desired_replicas, d.active));
                    if changed || self.log_every_decision {
                        info!(
                            workload = %w.key(), policy = d.policy.as_str(), signal = %w.target.signal,
                            load = format_args!("{:.2}", d.load), desired = d.desired_replicas,
                            active = d.active, reason = %d.reason, "decision"
                        );
                    } else {
                        debug!(workload = %w.key(), desired = d.desired_replicas, "decision unchanged");
                    }
                    slot.source.observe_decision(d.desired_replicas, now);
                    slot.state.decision = Some(d);
                    slot.state.decided_at = Some(now);
                    slot.state.error = None;
                }
                Err(e) => {
                    warn!(workload = %w.key(), error = %e, "no decision this tick; scaler answers UNAVAILABLE so KEDA's fallback applies");
                    // No answer beats an old one presented as current.
                    slot.state.decision = None;
                    slot.state.error = Some(e.to_string());
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
        interval.reset();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = interval.tick() => self.tick(SystemTime::now()).await,
                Some(new) = reloads.recv() => {
                    self.reconfigure(&new);
                    if new.tick_interval != interval.period() {
                        interval = tokio::time::interval(new.tick_interval);
                        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    }
                    self.tick(SystemTime::now()).await;
                }
            }
        }
    }
}
