//! The precomputed answers: per-workload state that the scaler and the HTTP
//! API read, and that only the control loop writes.
//!
//! Readers never compute: a request looks its workload up in an immutable
//! [`Snapshot`] (one atomic load, one hash lookup). The control loop publishes
//! a whole new snapshot each tick, and a `watch` channel tells the streaming
//! RPCs that something may have changed.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
    time::SystemTime,
};

use arc_swap::ArcSwap;
use serde::Serialize;
use tokio::sync::watch;

use crate::{
    capacity::{spare::Spare, Plan, Pool, PoolPlan, Reservation, WorkloadPlan},
    serve::{
        outcome::{ser_display, NoDecision, RefitError, RoleNoDecision},
        refit::ForecastView,
    },
    sizing::{
        learned::Learned,
        reactive::Decision,
        roles::{RoleDecision, RoleKind},
    },
    sources::{health::SourceStatus, Signal},
    workload::{Role, Workload},
};

/// What Foresight currently says about one workload.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct WorkloadState {
    pub(crate) namespace: String,
    pub name: String,
    pub(crate) model: String,
    pub(crate) signal: Signal,
    /// Signal units one replica handles (the target of the `load` encoding).
    pub per_replica: f64,
    /// Metric names served for this workload, lowercase.
    pub(crate) metrics: MetricNames,
    /// Latest reading of each recorded signal, with its age at the last tick.
    pub signals: BTreeMap<Signal, SignalReading>,
    /// The latest decision, the one KEDA is told; `None` until a usable signal has been read.
    pub decision: Option<Decision>,
    /// Shadow (forecast-only) workloads: the predictive decision, reported but not acted on.
    pub shadow: Option<Decision>,
    /// What the reactive rule alone says now (for comparison; equals `decision` when reactive).
    pub reactive_replicas: Option<u32>,
    /// Pods that answered the latest scrape and are awake (scraped sources only): the replicas running.
    pub(crate) pods: Option<u32>,
    /// What the source reported about itself at its last poll: scrape targets
    /// that failed and why, pods asleep, Prometheus queries matching nothing.
    pub(crate) source: Option<SourceStatus>,
    /// When the decision was made.
    #[serde(serialize_with = "ser_time")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub(crate) decided_at: Option<SystemTime>,
    /// Why the latest poll gave no decision, if it did not.
    #[serde(serialize_with = "ser_display")]
    #[schema(value_type = Option<String>)]
    pub error: Option<NoDecision>,
    /// Set while the target signal is stale and the answer comes from the last good forecast alone.
    pub forecast_only: bool,
    /// The latest forecast of the target signal over the cold-start look-ahead
    /// (refitted in the background, see [`crate::serve::refit`]).
    #[schema(value_type = Option<ForecastView>)]
    pub forecast: Option<Arc<ForecastView>>,
    /// Why the latest refit gave no forecast (e.g. no history yet, or the signal went silent); `forecast` is then `None`.
    #[serde(serialize_with = "ser_display")]
    #[schema(value_type = Option<String>)]
    pub forecast_error: Option<RefitError>,
    /// Where the node plan puts this workload's replicas (with `pools` configured).
    pub(crate) placement: Option<WorkloadPlan>,
    /// Workloads with roles: forecasts of the demand parts (request rate,
    /// prompt and output length, prefix-cache share) the roles are sized on.
    #[schema(value_type = BTreeMap<String, ForecastView>)]
    pub(crate) demand_forecasts: BTreeMap<Signal, Arc<ForecastView>>,
    /// Prefill/decode roles, each with its own metric and decision.
    pub roles: Vec<RoleState>,
    /// In-flight requests per replica at the SLO, learned from the pods' load
    /// against the queue-wait SLO, beside the profile's figure it started from
    /// (`sizing.learn_capacity`); per-replica figures that grow with the batch scale by their ratio.
    pub capacity: Option<Learned>,
}

/// One node pool's answer: the placeholder count behind its KEDA metric.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct PoolState {
    pub name: String,
    /// Metric name served for the pool (`foresight-pool-<name>-buffer`).
    pub metric: String,
    pub config: Pool,
    pub reservations: Vec<Reservation>,
    /// The pool's side of the latest plan; `None` until a plan exists.
    pub plan: Option<PoolPlan>,
    /// What a CapacityBuffer's `spec.replicas` (or the balloon Deployment) should be:
    /// the plan's `buffer_nodes`.
    pub capacity_buffer_replicas: Option<u32>,
    /// Reserved nodes the plan over hours leaves idle throughout each lease length.
    pub spare: Option<PoolSpare>,
}

impl PoolState {
    pub(crate) fn new(
        pool: &Pool,
        reservations: &[Reservation],
        plan: Option<PoolPlan>,
        spare: Option<PoolSpare>,
    ) -> Self {
        PoolState {
            name: pool.name.clone(),
            metric: metric_name(&format!("pool-{}", pool.name), "buffer"),
            config: pool.clone(),
            reservations: reservations.iter().filter(|r| r.pool == pool.name).cloned().collect(),
            capacity_buffer_replicas: plan.as_ref().map(|p| p.buffer_nodes),
            plan,
            spare,
        }
    }
}

/// A signal's latest value and how old it was when the tick read it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, utoipa::ToSchema)]
pub struct SignalReading {
    pub value: f64,
    pub(crate) age_secs: f64,
}

/// The metric names of the two encodings.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub(crate) struct MetricNames {
    /// Value = desired replicas, target 1.
    pub(crate) replicas: String,
    /// Value = load in signal units, target = per-replica capacity.
    pub(crate) load: String,
}

impl WorkloadState {
    /// State for a workload that has not been polled yet.
    pub(crate) fn new(w: &Workload) -> Self {
        WorkloadState {
            namespace: w.namespace.clone(),
            name: w.name.clone(),
            model: w.profile.name.clone(),
            signal: w.target.signal,
            per_replica: w.target.per_replica,
            metrics: MetricNames {
                replicas: metric_name(&w.name, "replicas"),
                load: metric_name(&w.name, w.target.signal.as_str()),
            },
            signals: BTreeMap::new(),
            decision: None,
            shadow: None,
            reactive_replicas: None,
            pods: None,
            source: None,
            decided_at: None,
            error: None,
            forecast_only: false,
            forecast: None,
            forecast_error: None,
            placement: None,
            demand_forecasts: BTreeMap::new(),
            roles: w.roles.iter().map(|r| RoleState::new(w, r)).collect(),
            capacity: None,
        }
    }
}

/// `foresight-<workload>-<suffix>`, lowercase, with anything outside
/// `[a-z0-9-]` turned into `-` (KEDA and the HPA want DNS-like metric names).
pub(crate) fn metric_name(workload: &str, suffix: &str) -> String {
    format!("foresight-{workload}-{suffix}")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' })
        .collect()
}

/// What Foresight says about one role.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct RoleState {
    pub role: RoleKind,
    /// The metric served for it: `foresight-<workload>-<role>-replicas`.
    pub metric: String,
    pub decision: Option<RoleDecision>,
    /// Why there is no decision, when there is none.
    #[serde(serialize_with = "ser_display")]
    #[schema(value_type = Option<String>)]
    pub error: Option<RoleNoDecision>,
    /// Where the node plan puts this role's replicas (with `pools` configured).
    pub(crate) placement: Option<WorkloadPlan>,
}

impl RoleState {
    pub(crate) fn new(w: &Workload, r: &Role) -> Self {
        RoleState { role: r.kind, metric: role_metric(&w.name, r.kind), decision: None, error: None, placement: None }
    }
}

/// The metric a role's ScaledObject reads: `foresight-<workload>-<role>-replicas`.
pub(crate) fn role_metric(workload: &str, role: RoleKind) -> String {
    metric_name(&format!("{workload}-{role}"), "replicas")
}

/// A pool's offers, and what they rest on.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct PoolSpare {
    pub offers: Vec<Spare>,
    /// Workloads with no hours-ahead forecast yet (or with roles), counted at
    /// their current replicas throughout: the offers are only as good as that.
    pub held_at_current: Vec<String>,
}

fn ser_time<S: serde::Serializer>(t: &Option<SystemTime>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_some(&crate::time::rfc3339(*t)),
        None => s.serialize_none(),
    }
}

/// An immutable view of every workload at one moment.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Bumped on every publish.
    pub(crate) generation: u64,
    /// True once every workload has been polled at least once.
    pub ready: bool,
    by_key: HashMap<String, Arc<WorkloadState>>,
    /// Workload name -> namespaces it is configured in, for error messages.
    namespaces_of: HashMap<String, Vec<String>>,
    pools: HashMap<String, Arc<PoolState>>,
    /// The latest node plan (with `pools` configured).
    pub plan: Option<Arc<Plan>>,
    /// The cluster as last read (Kubernetes inputs on).
    pub(crate) cluster: Option<Arc<crate::cluster::ClusterView>>,
    configs: HashMap<String, Arc<crate::workload::Workload>>,
}

impl Snapshot {
    pub fn get(&self, key: &str) -> Option<&Arc<WorkloadState>> {
        self.by_key.get(key)
    }

    /// Namespaces a workload of this name exists in.
    pub(crate) fn namespaces_of(&self, name: &str) -> &[String] {
        self.namespaces_of.get(name).map(Vec::as_slice).unwrap_or(&[])
    }

    /// All workloads, sorted by namespace then name.
    pub fn workloads(&self) -> Vec<&Arc<WorkloadState>> {
        let mut v: Vec<_> = self.by_key.values().collect();
        v.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        v
    }

    /// A workload's config, by key (for explanations).
    pub(crate) fn config(&self, key: &str) -> Option<&Arc<crate::workload::Workload>> {
        self.configs.get(key)
    }

    pub(crate) fn pool(&self, name: &str) -> Option<&Arc<PoolState>> {
        self.pools.get(name)
    }

    /// All pools, by name.
    pub fn pools(&self) -> Vec<&Arc<PoolState>> {
        let mut v: Vec<_> = self.pools.values().collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

/// The shared, swappable snapshot plus change notification.
#[derive(Debug)]
pub struct Registry {
    current: ArcSwap<Snapshot>,
    changed: watch::Sender<u64>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry { current: ArcSwap::from_pointee(Snapshot::default()), changed: watch::channel(0).0 }
    }
}

impl Registry {
    pub fn new() -> Arc<Self> {
        Arc::new(Registry::default())
    }

    /// The current snapshot: cheap, lock-free.
    pub fn load(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// Replace every workload's state at once and wake the streams.
    pub fn publish(&self, states: Vec<WorkloadState>, ready: bool) {
        self.publish_all(states, Vec::new(), None, ready)
    }

    /// As [`publish`](Self::publish), with the pools and the node plan.
    pub fn publish_all(&self, states: Vec<WorkloadState>, pools: Vec<PoolState>, plan: Option<Arc<Plan>>, ready: bool) {
        self.publish_with(states, pools, plan, ready, None, Vec::new())
    }

    /// As [`publish_all`](Self::publish_all), with the cluster view and the workloads' configs.
    pub(crate) fn publish_with(
        &self,
        states: Vec<WorkloadState>,
        pools: Vec<PoolState>,
        plan: Option<Arc<Plan>>,
        ready: bool,
        cluster: Option<Arc<crate::cluster::ClusterView>>,
        configs: Vec<Arc<crate::workload::Workload>>,
    ) {
        let configs = configs.into_iter().map(|w| (w.key(), w)).collect();
        let generation = self.current.load().generation + 1;
        let mut by_key = HashMap::with_capacity(states.len());
        let mut namespaces_of: HashMap<String, Vec<String>> = HashMap::new();
        for s in states {
            namespaces_of.entry(s.name.clone()).or_default().push(s.namespace.clone());
            by_key.insert(crate::workload::workload_key(&s.namespace, &s.name), Arc::new(s));
        }
        for v in namespaces_of.values_mut() {
            v.sort();
        }
        let pools = pools.into_iter().map(|p| (p.name.clone(), Arc::new(p))).collect();
        self.current.store(Arc::new(Snapshot {
            generation,
            ready,
            by_key,
            namespaces_of,
            pools,
            plan,
            cluster,
            configs,
        }));
        self.changed.send_replace(generation);
    }

    /// A receiver that wakes on every publish.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }
}
