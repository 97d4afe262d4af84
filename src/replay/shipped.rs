//! The predictive policy is Foresight as it ships: `serve`'s control loop
//! ([`Engine`]: its decision code, forecast refits, scale-down hold,
//! headroom, learned capacity and node plan), built from the same
//! [`Settings`], fed at each poll the readings a vLLM fleet of the simulated
//! size exposes, through the same store. The simulator owns only what the
//! fleet shows; every rule between a reading and an answer is the engine's.
//!
//! Refits run on the caller's thread ([`Engine::inline`]): a finished fit
//! lands on the next tick, as a worker's does when it finishes within one.

use std::{
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use super::{Capacity, Decision, Observation, Policy, SimError};
use crate::{
    config::Settings,
    serve::{engine::Engine, state::Registry},
    sizing::learned::Learned,
    sizing::{profile::Profile, Policy as Rule},
    sources::Signal,
    store::{Store, StoreConfig},
    workload::Workload,
    workload::{pods_series, series},
};

/// KEDA's `fallback` in the shipped ScaledObject: `failureThreshold` and `replicas`.
const FALLBACK_AFTER: u32 = 3;
const FALLBACK_REPLICAS: u32 = 4;

/// The spare-capacity offers read from the engine: the lease length, each
/// offer (seconds into the run, nodes), and when the next is due.
type Offers = (u64, Vec<(f64, u32)>, f64);

/// Foresight's engine run on the simulated fleet's readings.
pub struct Shipped {
    engine: Engine,
    store: Arc<Store>,
    registry: Arc<Registry>,
    key: String,
    name: String,
    /// What a reading is derived from: the fleet's true service.
    cap: Capacity,
    /// Spare-capacity offers, with `sizing.spare_horizons_secs`.
    spare: Option<Offers>,
    /// Whether the source counts pods: scraped ones do, a Prometheus source does not.
    counts_pods: bool,
    /// The signals the workload's source records (the engine reads only these).
    signals: Vec<Signal>,
    /// Polls in a row with no answer, for KEDA's fallback.
    failing: u32,
    /// Polls with no answer (the scaler would say UNAVAILABLE; the HPA keeps the replicas it has).
    pub(crate) unanswered: u64,
    /// The engine's reason for its last answer, or why it had none.
    reason: String,
}

impl Shipped {
    /// The engine for `settings`' one workload, its store holding `history`
    /// (arrivals per second, one per minute from `history_start`) as the
    /// readings a fleet serving it without a queue would have given.
    pub fn new(
        name: String,
        settings: &Settings,
        history: &[f64],
        history_start: i64,
        cap: &Capacity,
    ) -> Result<Shipped, SimError> {
        Shipped::scoring_spare(name, settings, history, history_start, cap, None)
    }

    /// As [`Shipped::new`], also reading the engine's spare-capacity offer
    /// for leases of `score_spare` seconds every hour, to be scored against the run.
    pub fn scoring_spare(
        name: String,
        settings: &Settings,
        history: &[f64],
        history_start: i64,
        cap: &Capacity,
        score_spare: Option<u64>,
    ) -> Result<Shipped, SimError> {
        let [w] = settings.workloads.as_slice() else {
            return Err(SimError::Input(format!(
                "the simulator replays one workload; the settings have {}",
                settings.workloads.len()
            )));
        };
        let res = settings.store.resolution.as_secs().max(1);
        if !(60 % res == 0 || res % 60 == 0) {
            return Err(SimError::Input(format!(
                "store resolution {res} s: the simulator needs one that divides a minute or is whole minutes"
            )));
        }
        let history_secs = history.len() as u64 * 60;
        let store = Arc::new(
            Store::open(StoreConfig {
                path: None,
                resolution: settings.store.resolution,
                retention: settings.store.retention.max(Duration::from_secs(history_secs + 86_400)),
                cache_bytes: settings.store.cache_bytes,
            })
            .map_err(|e| SimError::Input(format!("opening the replay's store: {e}")))?,
        );
        backfill(&store, w, history, history_start, cap)?;
        let key = w.key();
        let registry = Registry::new();
        let engine = Engine::inline(settings, registry.clone(), store.clone());
        let spare = score_spare.map(|h| (h, Vec::new(), 0.0));
        let counts_pods = !matches!(w.source, crate::sources::SourceConfig::Prometheus(_));
        Ok(Shipped {
            engine,
            store,
            registry,
            key,
            name,
            cap: cap.clone(),
            spare,
            counts_pods,
            signals: w.signals.clone(),
            failing: 0,
            unanswered: 0,
            reason: String::new(),
        })
    }

    /// One poll at `now_unix`: store `readings` (and the pods serving), tick,
    /// and return the sizing decision, if the engine has one.
    pub(crate) fn step(
        &mut self,
        now_unix: f64,
        readings: &[(Signal, f64)],
        pods: Option<f64>,
    ) -> Option<crate::sizing::reactive::Decision> {
        let now = at(now_unix);
        // As a collector records them: the workload's signals, the pods answering as the latest value.
        for (s, v) in readings.iter().filter(|(s, v)| self.signals.contains(s) && v.is_finite()) {
            self.store.record(&series(&self.key, *s), now, *v);
        }
        if let Some(p) = pods.filter(|_| self.counts_pods) {
            self.store.set_latest(&pods_series(&self.key), now, p);
        }
        self.engine.tick(now);
        let snap = self.registry.load();
        let state = snap.get(&self.key)?;
        self.reason = match (&state.decision, &state.error) {
            (Some(d), _) => d.reason.clone(),
            (None, Some(e)) => format!("no answer: {e}"),
            (None, None) => String::new(),
        };
        state.decision.clone()
    }

    /// What the engine last published for the workload.
    #[cfg(test)]
    pub(crate) fn state(&self) -> crate::serve::state::WorkloadState {
        self.registry.load().get(&self.key).map(|s| s.as_ref().clone()).expect("the workload is published")
    }

    /// Nodes the engine's plan keeps warm beyond those `replicas` occupy
    /// (its placeholder pods). The plan counts the pods serving, so starting
    /// replicas are inside its figure: only what exceeds the Deployment's is extra.
    fn warm_nodes(&self, replicas: u32) -> u32 {
        let snap = self.registry.load();
        let warm: u32 = snap.plan.as_ref().map_or(0, |p| p.pools.iter().map(|pp| pp.warm_nodes).sum());
        warm.saturating_sub(self.cap.nodes_for(replicas))
    }
}

/// Store `history` (arrivals per second, one per minute from `start`) as
/// `w`'s target and demand-part readings of a fleet that served it without a queue.
pub(crate) fn backfill(
    store: &Store,
    w: &Workload,
    history: &[f64],
    start: i64,
    cap: &Capacity,
) -> Result<(), SimError> {
    let res = store.resolution().as_secs().max(1);
    let mut signals = vec![w.target.signal];
    signals.extend(crate::workload::ROLE_SIGNALS.iter().filter(|s| w.signals.contains(s) && **s != w.target.signal));
    for s in signals {
        let Some(per_minute) = history_of(s, history, cap) else {
            if s == w.target.signal {
                return Err(SimError::Input(format!(
                    "the simulator cannot replay target signal `{s}`: it derives request_rate, concurrency, \
                     running, queue_depth and the token rates from the arrivals"
                )));
            }
            continue;
        };
        let (from, values) = at_resolution(&per_minute, start, res);
        store
            .backfill(&series(&w.key(), s), at(from as f64), &values)
            .map_err(|e| SimError::Input(format!("backfilling the replay's store: {e}")))?;
    }
    Ok(())
}

/// The readings a vLLM fleet in the state `o` shows (summed over pods, as
/// Foresight's sources give them): in flight, running, waiting, the rates
/// and queue-wait p99 since the last scrape, the mix, the inter-token latency.
/// A reading that is not a number (a rate at the first poll) is left out.
pub(crate) fn readings(o: &Observation, cap: &Capacity) -> Vec<(Signal, f64)> {
    let mut r = vec![
        (Signal::Concurrency, o.running + o.waiting),
        (Signal::Running, o.running),
        (Signal::QueueDepth, o.waiting),
        (Signal::RequestRate, o.admitted_rate),
        (Signal::GenerationTokensRate, o.running / cap.itl_secs),
        (Signal::PromptTokensRate, o.admitted_rate * cap.prompt_tokens),
        (Signal::PromptTokensPerRequest, cap.prompt_tokens),
        (Signal::GenerationTokensPerRequest, cap.output_tokens),
    ];
    if o.ready >= 1.0 {
        r.push((Signal::KvCacheUsage, (o.running / (o.ready * cap.slots)).min(1.0)));
        r.push((Signal::ItlP90, cap.itl_secs));
    }
    if o.wait_p99.is_finite() {
        r.push((Signal::QueueWaitP99, o.wait_p99));
    }
    r
}

/// A signal's history from arrivals per minute, for a fleet that served
/// them without a queue (Little's law for the requests in flight); `None`
/// for a signal the arrivals do not give.
fn history_of(s: Signal, per_minute: &[f64], cap: &Capacity) -> Option<Vec<f64>> {
    let k = match s {
        Signal::RequestRate => 1.0,
        Signal::Concurrency | Signal::Running => cap.service_secs,
        Signal::QueueDepth => 0.0,
        Signal::GenerationTokensRate => cap.output_tokens,
        Signal::PromptTokensRate => cap.prompt_tokens,
        Signal::PromptTokensPerRequest => return Some(vec![cap.prompt_tokens; per_minute.len()]),
        Signal::GenerationTokensPerRequest => return Some(vec![cap.output_tokens; per_minute.len()]),
        _ => return None,
    };
    Some(per_minute.iter().map(|r| r * k).collect())
}

/// Minute values as the store's buckets of `res` seconds: repeated when
/// finer, averaged over whole buckets when coarser. Returns the first
/// bucket's start and the values.
fn at_resolution(per_minute: &[f64], start: i64, res: u64) -> (i64, Vec<f64>) {
    if res <= 60 {
        let k = (60 / res) as usize;
        return (start, per_minute.iter().flat_map(|v| std::iter::repeat_n(*v, k)).collect());
    }
    let per = (res / 60) as usize;
    let skip = (per - (start / 60).rem_euclid(per as i64) as usize) % per;
    let values =
        per_minute.get(skip..).unwrap_or(&[]).chunks_exact(per).map(|c| c.iter().sum::<f64>() / per as f64).collect();
    (start + 60 * skip as i64, values)
}

fn at(unix: f64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs_f64(unix.max(0.0))
}

/// What the replay needs to build Foresight's settings.
pub struct SettingsInput<'a> {
    /// Which of its workloads (default: the only one, or the first).
    pub workload: Option<&'a str>,
    /// The profile the workload is told: the config workload's or
    /// `--model-profile`, with `--node-boot` and `--profile-error` applied.
    pub told: &'a Profile,
    /// Without a config: the workload's target signal, and the signal units
    /// one replica handles (for `concurrency`, the told profile's).
    pub target: Signal,
    pub per_replica: f64,
    pub max_replicas: u32,
    /// The sizing quantile, when set (else the config's `sizing.quantile`).
    pub quantile: Option<f64>,
    /// `sizing.learn_capacity`, when set (else the config's).
    pub learn_capacity: Option<bool>,
    /// Lease lengths of the spare-capacity forecast, when set (else the config's).
    pub spare_horizon_secs: Option<u64>,
    /// The simulated pool, planned as `serve` plans its pools when the config has none.
    pub pool: &'a super::Pool,
    /// Unix seconds the replay ends (a reservation for reserved nodes covers it).
    pub until: i64,
    pub from: i64,
}

/// Foresight's settings for the replay: the config's (`config`, else the
/// shipped defaults for one workload, with the deployed ScaledObject's
/// `minReplicaCount: 1`), its one simulated workload with the told profile
/// and the run's replica cap, on the predictive policy. The fleet is one
/// Deployment, so roles are left out; Kubernetes inputs are off.
pub fn settings(config: Option<Settings>, i: &SettingsInput<'_>) -> Result<Settings, SimError> {
    let given = config.is_some();
    let mut s = match config {
        Some(s) => s,
        None => {
            let yaml = format!(
                "workloads:\n  - name: sim\n    model: llama-3.1-8b-h100\n    min_replicas: 1\n    target: {{signal: {}, per_replica: {}}}\n    source: {{scrape: {{targets: ['http://127.0.0.1:9/metrics']}}}}\n",
                i.target, i.per_replica
            );
            Settings::from_yaml(&yaml, "simulate defaults", std::path::Path::new("."))
                .map_err(|e| SimError::Input(e.to_string()))?
        }
    };
    let w = match i.workload {
        Some(name) => s.workloads.iter().find(|w| w.name == name).ok_or_else(|| {
            let names: Vec<&str> = s.workloads.iter().map(|w| w.name.as_str()).collect();
            SimError::Input(format!("--workload {name}: the config has {}", names.join(", ")))
        })?,
        None => s.workloads.first().ok_or_else(|| SimError::Input("the config has no workloads".into()))?,
    };
    let mut w: Workload = w.as_ref().clone();
    // A per-replica target left to the profile follows the told one.
    if given && (w.target.per_replica - w.profile.concurrency_per_replica).abs() < 1e-9 {
        w.target.per_replica = i.told.concurrency_per_replica;
    }
    w.profile = i.told.clone();
    w.max_replicas = i.max_replicas;
    w.min_replicas = w.min_replicas.min(i.max_replicas);
    w.roles.clear();
    s.workloads = vec![std::sync::Arc::new(w)];
    s.sizing.policy = Rule::Predictive;
    let q = i.quantile.unwrap_or(s.sizing.quantile);
    s.sizing.quantile = q;
    if !s.forecast.quantiles.iter().any(|have| (have - q).abs() < 1e-9) {
        s.forecast.quantiles.push(q);
        s.forecast.quantiles.sort_by(f64::total_cmp);
    }
    s.sizing.learn_capacity = i.learn_capacity.unwrap_or(s.sizing.learn_capacity);
    if let Some(h) = i.spare_horizon_secs {
        s.sizing.spare_horizons_secs = vec![h];
    }
    s.kubernetes = None;
    if s.pools.is_empty() {
        let gpu = s.workloads[0].profile.gpu_type.clone();
        let pool =
            |name: &str, kind: crate::capacity::CapacityType, price: f64, max: Option<u32>| crate::capacity::Pool {
                name: name.into(),
                gpu_type: gpu.clone(),
                gpus_per_node: i.pool.gpus_per_node,
                nvlink_domain_gpus: i.pool.gpus_per_node,
                nodes_per_rack: None,
                capacity_type: kind,
                price_per_node_hour: price,
                provisioning_secs: i.pool.provisioning_secs,
                max_nodes: max,
                labels: Default::default(),
                taints: Vec::new(),
            };
        if i.pool.reserved_nodes > 0 {
            s.pools.push(pool(
                "sim-reserved",
                crate::capacity::CapacityType::Reserved,
                i.pool.reserved_price_per_node_hour,
                Some(i.pool.reserved_nodes),
            ));
            s.reservations.push(crate::capacity::Reservation {
                name: "sim".into(),
                pool: "sim-reserved".into(),
                nodes: i.pool.reserved_nodes,
                start: i.from - 86_400,
                end: i.until + 86_400,
                paid: true,
            });
        }
        s.pools.push(pool("sim", crate::capacity::CapacityType::OnDemand, i.pool.price_per_node_hour, None));
    }
    Ok(s)
}

impl Policy for Shipped {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn decide(&mut self, o: &Observation) -> Decision {
        let readings = readings(o, &self.cap);
        let decided = self.step(o.unix, &readings, Some(o.ready));
        if let Some((h, offers, next)) = self.spare.as_mut().filter(|(_, _, next)| o.t >= *next) {
            let snap = self.registry.load();
            let n = snap
                .pools()
                .iter()
                .filter_map(|p| p.spare.as_ref())
                .flat_map(|s| s.offers.iter().filter(|x| x.horizon_secs == *h))
                .map(|x| x.nodes)
                .sum();
            offers.push((o.t, n));
            *next = o.t + 3600.0;
        }
        let replicas = match decided {
            Some(d) => {
                self.failing = 0;
                d.desired_replicas
            }
            // KEDA's fallback as deploy/keda/scaledobject.yaml sets it: after three failed
            // queries, its replicas; before, the HPA keeps what it has.
            None => {
                self.unanswered += 1;
                self.failing += 1;
                if self.failing >= FALLBACK_AFTER {
                    FALLBACK_REPLICAS
                } else {
                    o.spec
                }
            }
        };
        Decision { replicas, warm_nodes: self.warm_nodes(replicas) }
    }

    fn reason(&self) -> Option<String> {
        Some(self.reason.clone())
    }

    fn learned(&self) -> Option<Learned> {
        self.registry.load().get(&self.key).and_then(|s| s.capacity)
    }

    fn offers(&self) -> Option<(f64, &[(f64, u32)])> {
        self.spare.as_ref().map(|(h, offers, _)| (*h as f64, offers.as_slice()))
    }
}
