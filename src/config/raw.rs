//! The config file as the user wrote it. Every struct denies unknown keys, so
//! a typo is an error instead of a silently ignored setting. Defaults are
//! functions; units are in the field names.

use std::{collections::BTreeMap, net::SocketAddr, path::PathBuf};

use serde::Deserialize;

use crate::{
    sizing::roles::RoleKind,
    sources::{Signal, SourceConfig},
    workload::StatedShape,
};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConfig {
    /// The KEDA external scaler (gRPC) server.
    #[serde(default)]
    pub(crate) grpc: RawGrpc,
    /// The HTTP server (health, API).
    #[serde(default)]
    pub(crate) http: RawHttp,
    /// How often sources are polled and decisions recomputed.
    #[serde(default = "default_tick_interval_secs")]
    pub(crate) tick_interval_secs: f64,
    /// Log every workload's decision every tick at INFO (default: only changes).
    #[serde(default)]
    pub(crate) log_every_decision: bool,
    /// Directory of extra capacity profiles (`*.yaml`), relative to this file.
    #[serde(default)]
    pub(crate) models_dir: Option<PathBuf>,
    /// Values a workload takes when it does not set them.
    #[serde(default)]
    pub(crate) defaults: RawDefaults,
    /// Where signal history is kept.
    #[serde(default)]
    pub(crate) store: RawStore,
    /// How forecasts are refitted in the background.
    #[serde(default)]
    pub(crate) forecast: RawForecast,
    /// How forecasts become replica counts.
    #[serde(default)]
    pub(crate) sizing: RawSizing,
    /// GPU node pools pre-warming plans for; none: no node plan.
    #[serde(default)]
    pub(crate) pools: Vec<RawPool>,
    /// Capacity bought for a window of time, in a pool.
    #[serde(default)]
    pub(crate) reservations: Vec<RawReservation>,
    /// The workloads Foresight sizes.
    pub(crate) workloads: Vec<RawWorkload>,
    /// Read shape from the cluster (workloads, DRA claims, nodes); absent: off.
    #[serde(default)]
    pub(crate) kubernetes: Option<RawKubernetes>,
}

/// `kubernetes:`: present turns the Kubernetes input layer on.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawKubernetes {
    /// A kubeconfig file (relative to this file); default: in-cluster, then `$KUBECONFIG` / `~/.kube/config`.
    #[serde(default)]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// Context in the kubeconfig; default: its current context.
    #[serde(default)]
    pub(crate) context: Option<String>,
    /// How often the cluster is read.
    #[serde(default = "default_kube_refresh_secs")]
    pub(crate) refresh_secs: f64,
    /// Per API request.
    #[serde(default = "default_kube_timeout_secs")]
    pub(crate) timeout_secs: f64,
    #[serde(default)]
    pub(crate) gpu: RawKubeGpu,
    #[serde(default)]
    pub(crate) node_labels: RawNodeLabels,
    /// Pools found on nodes but absent from `pools:`.
    #[serde(default)]
    pub(crate) discovered_pools: RawDiscoveredPools,
    /// Writing the plan to balloon Deployments and CapacityBuffers.
    #[serde(default)]
    pub(crate) actuation: RawActuation,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawKubeGpu {
    /// Device-plugin resource name.
    #[serde(default = "default_gpu_resource")]
    pub(crate) resource: String,
    /// DRA DeviceClasses whose devices are GPUs.
    #[serde(default = "default_gpu_device_classes")]
    pub(crate) device_classes: Vec<String>,
    /// DRA drivers (ResourceSlice `spec.driver`) whose devices are GPUs.
    #[serde(default = "default_gpu_drivers")]
    pub(crate) drivers: Vec<String>,
    /// DRA device attributes whose shared value means one NVLink domain (a
    /// claim's `matchAttribute` on one requires it; slices give domain sizes).
    #[serde(default)]
    pub(crate) nvlink_domain_attributes: Vec<String>,
}

impl Default for RawKubeGpu {
    fn default() -> Self {
        RawKubeGpu {
            resource: default_gpu_resource(),
            device_classes: default_gpu_device_classes(),
            drivers: default_gpu_drivers(),
            nvlink_domain_attributes: Vec::new(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawNodeLabels {
    /// Tried in order; the first a node carries names its pool.
    #[serde(default = "default_pool_labels")]
    pub(crate) pool: Vec<String>,
    #[serde(default = "default_capacity_type_label")]
    pub(crate) capacity_type: String,
    #[serde(default = "default_product_label")]
    pub(crate) gpu_product: String,
    #[serde(default = "default_count_label")]
    pub(crate) gpu_count: String,
    #[serde(default = "default_zone_label")]
    pub(crate) zone: String,
    /// Nodes sharing this label's value are one rack / fabric block; no default.
    #[serde(default)]
    pub(crate) rack: Option<String>,
}

impl Default for RawNodeLabels {
    fn default() -> Self {
        RawNodeLabels {
            pool: default_pool_labels(),
            capacity_type: default_capacity_type_label(),
            gpu_product: default_product_label(),
            gpu_count: default_count_label(),
            zone: default_zone_label(),
            rack: None,
        }
    }
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDiscoveredPools {
    /// By capacity type (`reserved`, `on-demand`, `spot`); a pool whose type has no price is reported, not planned.
    #[serde(default)]
    pub(crate) price_per_node_hour: BTreeMap<String, f64>,
    #[serde(default = "default_discovered_provisioning_secs")]
    pub(crate) provisioning_secs: f64,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawActuation {
    /// `off` (default), `dry-run` (report the change), `apply` (patch it).
    #[serde(default)]
    pub(crate) mode: Option<String>,
    /// Balloon Deployments whose `spec.replicas` is a pool's buffer nodes.
    #[serde(default)]
    pub(crate) balloons: Vec<RawActuationTarget>,
    /// CapacityBuffers whose `spec.replicas` is a pool's buffer nodes.
    #[serde(default)]
    pub(crate) capacity_buffers: Vec<RawActuationTarget>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawActuationTarget {
    pub(crate) pool: String,
    pub(crate) namespace: String,
    pub(crate) name: String,
}

fn default_kube_refresh_secs() -> f64 {
    30.0
}
fn default_kube_timeout_secs() -> f64 {
    10.0
}
fn default_gpu_resource() -> String {
    "nvidia.com/gpu".into()
}
fn default_gpu_device_classes() -> Vec<String> {
    vec!["gpu.nvidia.com".into()]
}
fn default_gpu_drivers() -> Vec<String> {
    vec!["gpu.nvidia.com".into()]
}
fn default_pool_labels() -> Vec<String> {
    [
        "karpenter.sh/nodepool",
        "cloud.google.com/gke-nodepool",
        "eks.amazonaws.com/nodegroup",
        "kubernetes.azure.com/agentpool",
    ]
    .map(String::from)
    .to_vec()
}
fn default_capacity_type_label() -> String {
    "karpenter.sh/capacity-type".into()
}
fn default_product_label() -> String {
    "nvidia.com/gpu.product".into()
}
fn default_count_label() -> String {
    "nvidia.com/gpu.count".into()
}
fn default_zone_label() -> String {
    "topology.kubernetes.io/zone".into()
}
fn default_discovered_provisioning_secs() -> f64 {
    600.0
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawForecast {
    /// Off: decisions stay reactive and no forecast is computed.
    #[serde(default = "default_true")]
    pub(crate) enabled: bool,
    /// How often each workload's forecast is refitted on new history.
    #[serde(default = "default_refit_interval_secs")]
    pub(crate) refit_interval_secs: f64,
    /// How often the model is chosen again by backtest (the costly part); refits in between reuse the choice.
    #[serde(default = "default_reselect_interval_secs")]
    pub(crate) reselect_interval_secs: f64,
    /// History each fit reads from the store.
    #[serde(default = "default_history_days")]
    pub(crate) history_days: f64,
    /// Rolling origins for model selection and intervals.
    #[serde(default = "default_origins")]
    pub(crate) origins: usize,
    /// Quantiles reported beside the point forecast.
    #[serde(default = "default_quantiles")]
    pub(crate) quantiles: Vec<f64>,
    /// Seasonal periods, shortest first ("daily", then "weekly"); each a
    /// whole number of store buckets.
    #[serde(default = "default_seasons_secs")]
    pub(crate) seasons_secs: Vec<u64>,
    /// Threads that fit forecasts (0: one per core); read at start.
    #[serde(default)]
    pub(crate) refit_threads: usize,
    /// At start, how long a workload whose history has loaded waits for its
    /// first forecast before answering (reactively) without one; until then
    /// KEDA gets UNAVAILABLE and its fallback, not an answer a replica that
    /// started earlier would not give.
    #[serde(default = "default_first_fit_wait_secs")]
    pub(crate) first_fit_wait_secs: f64,
}

impl Default for RawForecast {
    fn default() -> Self {
        RawForecast {
            enabled: true,
            refit_interval_secs: default_refit_interval_secs(),
            reselect_interval_secs: default_reselect_interval_secs(),
            history_days: default_history_days(),
            origins: default_origins(),
            quantiles: default_quantiles(),
            seasons_secs: default_seasons_secs(),
            refit_threads: 0,
            first_fit_wait_secs: default_first_fit_wait_secs(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSizing {
    /// `predictive` (forecast, falling back to reactive without one) or `reactive`.
    #[serde(default = "default_policy")]
    pub(crate) policy: String,
    /// Forecast quantile replicas are sized for; one of `forecast.quantiles`.
    #[serde(default = "default_sizing_quantile")]
    pub(crate) quantile: f64,
    /// A lower replica count waits this long (the highest recommendation in the window wins).
    #[serde(default = "default_stabilization_secs")]
    pub(crate) scale_down_stabilization_secs: f64,
    /// Time step of the node plan's timeline.
    #[serde(default = "default_plan_step_secs")]
    pub(crate) plan_step_secs: u64,
    /// With the target signal stale, answer from the last good forecast for
    /// this long (never below the last decision), then give no answer so
    /// KEDA's fallback applies; 0: no answer as soon as the signal is stale.
    #[serde(default = "default_forecast_only_secs")]
    pub(crate) forecast_only_secs: f64,
    /// Learn each workload's per-replica capacity from its pods' load against
    /// the SLO, with the profile (or `target.per_replica`) as the prior.
    #[serde(default = "default_true")]
    pub(crate) learn_capacity: bool,
    /// Lease lengths the spare-capacity forecast offers per pool; empty: off.
    #[serde(default = "default_spare_horizons_secs")]
    pub(crate) spare_horizons_secs: Vec<u64>,
}

fn default_spare_horizons_secs() -> Vec<u64> {
    vec![3600, 14_400]
}

fn default_forecast_only_secs() -> f64 {
    600.0
}

impl Default for RawSizing {
    fn default() -> Self {
        RawSizing {
            policy: default_policy(),
            quantile: default_sizing_quantile(),
            scale_down_stabilization_secs: default_stabilization_secs(),
            plan_step_secs: default_plan_step_secs(),
            learn_capacity: true,
            spare_horizons_secs: default_spare_horizons_secs(),
            forecast_only_secs: default_forecast_only_secs(),
        }
    }
}

fn default_policy() -> String {
    "predictive".into()
}
fn default_sizing_quantile() -> f64 {
    0.9
}
fn default_stabilization_secs() -> f64 {
    300.0
}
fn default_plan_step_secs() -> u64 {
    60
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPool {
    pub(crate) name: String,
    /// GPU product, as in profiles' `gpu_type` (e.g. `nvidia-h100-80gb`).
    pub(crate) gpu_type: String,
    pub(crate) gpus_per_node: u32,
    /// GPUs per NVLink domain on a node; default: the whole node.
    #[serde(default)]
    pub(crate) nvlink_domain_gpus: Option<u32>,
    /// Nodes per rack / fabric that multi-node replicas must stay inside; default: one fabric.
    #[serde(default)]
    pub(crate) nodes_per_rack: Option<u32>,
    /// `reserved`, `on-demand` or `spot`.
    pub(crate) capacity_type: String,
    #[serde(default)]
    pub(crate) price_per_node_hour: f64,
    /// Asking for a node to the node being Ready.
    pub(crate) provisioning_secs: f64,
    #[serde(default)]
    pub(crate) max_nodes: Option<u32>,
    /// Labels the pool's nodes carry (beyond `karpenter.sh/nodepool` and
    /// `karpenter.sh/capacity-type`, which are implied), matched against pods' node selectors.
    #[serde(default)]
    pub(crate) labels: BTreeMap<String, String>,
    /// Taints the pool's nodes carry; default: what its nodes show, with Kubernetes inputs on.
    #[serde(default)]
    pub(crate) taints: Vec<crate::capacity::Taint>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawReservation {
    pub(crate) name: String,
    pub(crate) pool: String,
    pub(crate) nodes: u32,
    /// RFC 3339; the reservation covers [start, end).
    pub(crate) start: String,
    pub(crate) end: String,
    /// Already paid whether used or not (a capacity block, a commitment).
    #[serde(default = "default_true")]
    pub(crate) paid: bool,
}

fn default_true() -> bool {
    true
}
fn default_first_fit_wait_secs() -> f64 {
    120.0
}
fn default_refit_interval_secs() -> f64 {
    600.0
}
fn default_reselect_interval_secs() -> f64 {
    6.0 * 3600.0
}
fn default_history_days() -> f64 {
    28.0
}
fn default_origins() -> usize {
    24
}
fn default_quantiles() -> Vec<f64> {
    vec![0.5, 0.9]
}
fn default_seasons_secs() -> Vec<u64> {
    vec![86_400, 7 * 86_400]
}

fn default_tick_interval_secs() -> f64 {
    10.0
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawGrpc {
    #[serde(default = "default_grpc_listen")]
    pub(crate) listen: SocketAddr,
    /// Serve TLS instead of plaintext h2c.
    #[serde(default)]
    pub(crate) tls: Option<RawTls>,
}

impl Default for RawGrpc {
    fn default() -> Self {
        RawGrpc { listen: default_grpc_listen(), tls: None }
    }
}

fn default_grpc_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 6000))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTls {
    /// PEM certificate chain of this server.
    pub(crate) cert_file: PathBuf,
    /// PEM private key of this server.
    pub(crate) key_file: PathBuf,
    /// PEM CA bundle; when set, clients must present a certificate it signed (mTLS).
    #[serde(default)]
    pub(crate) client_ca_file: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHttp {
    #[serde(default = "default_http_listen")]
    pub(crate) listen: SocketAddr,
    /// Serve HTTPS instead of HTTP (and, with `client_ca_file`, require client certificates).
    #[serde(default)]
    pub(crate) tls: Option<RawTls>,
    /// A file holding a bearer token that `/api/*` and `/ui` then require; probes and `/metrics` stay open.
    #[serde(default)]
    pub(crate) bearer_token_file: Option<PathBuf>,
    /// Require the token on `/metrics` too: its labels name every workload,
    /// namespace and model (Prometheus sends it with `authorization` in its scrape config).
    #[serde(default)]
    pub(crate) token_on_metrics: bool,
    /// Requests served at once; past it the server answers 503 at once instead of queueing.
    #[serde(default = "default_http_max_in_flight")]
    pub(crate) max_in_flight: usize,
}

impl Default for RawHttp {
    fn default() -> Self {
        RawHttp {
            listen: default_http_listen(),
            tls: None,
            bearer_token_file: None,
            token_on_metrics: false,
            max_in_flight: default_http_max_in_flight(),
        }
    }
}

fn default_http_max_in_flight() -> usize {
    256
}

fn default_http_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8080))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStore {
    /// The history database, relative to this file; `null` keeps history in memory only.
    #[serde(default = "default_store_path")]
    pub(crate) path: Option<PathBuf>,
    /// Width of one history bucket.
    #[serde(default = "default_resolution_secs")]
    pub(crate) resolution_secs: u64,
    #[serde(default = "default_retention_days")]
    pub(crate) retention_days: f64,
    /// How often recorded history is made durable; a crash loses at most this much.
    #[serde(default = "default_flush_interval_secs")]
    pub(crate) flush_interval_secs: f64,
    /// Page cache of the database.
    #[serde(default = "default_cache_mib")]
    pub(crate) cache_mib: u64,
}

impl Default for RawStore {
    fn default() -> Self {
        RawStore {
            path: default_store_path(),
            resolution_secs: default_resolution_secs(),
            retention_days: default_retention_days(),
            flush_interval_secs: default_flush_interval_secs(),
            cache_mib: default_cache_mib(),
        }
    }
}

fn default_store_path() -> Option<PathBuf> {
    Some(PathBuf::from("foresight-data/history.redb"))
}
fn default_resolution_secs() -> u64 {
    60
}
fn default_retention_days() -> f64 {
    35.0
}
fn default_flush_interval_secs() -> f64 {
    60.0
}
fn default_cache_mib() -> u64 {
    16
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDefaults {
    #[serde(default)]
    pub(crate) min_replicas: u32,
    #[serde(default = "default_max_replicas")]
    pub(crate) max_replicas: u32,
    #[serde(default)]
    pub(crate) activation_threshold: f64,
}

impl Default for RawDefaults {
    fn default() -> Self {
        RawDefaults { min_replicas: 0, max_replicas: default_max_replicas(), activation_threshold: 0.0 }
    }
}

fn default_max_replicas() -> u32 {
    10
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawWorkload {
    /// Workload name; a ScaledObject selects it with trigger metadata `workload`.
    pub(crate) name: String,
    #[serde(default = "default_namespace")]
    pub(crate) namespace: String,
    /// Capacity profile name (a file in `models/` or `models_dir`).
    pub(crate) model: String,
    #[serde(default)]
    pub(crate) min_replicas: Option<u32>,
    #[serde(default)]
    pub(crate) max_replicas: Option<u32>,
    /// Signals to record; default: concurrency, queue_depth, request_rate,
    /// prompt_tokens_rate, generation_tokens_rate (plus the target signal).
    #[serde(default)]
    pub(crate) signals: Option<Vec<Signal>>,
    /// The signal replicas are sized on, and what one replica handles.
    /// Default: in-flight requests (`concurrency`) at the profile's
    /// `concurrency_per_replica`.
    #[serde(default)]
    pub(crate) target: Option<RawTarget>,
    #[serde(default)]
    pub(crate) activation_threshold: Option<f64>,
    /// Signals older than this are stale: no decision, KEDA's fallback applies.
    /// Default: three source intervals.
    #[serde(default)]
    pub(crate) stale_after_secs: Option<f64>,
    /// Where the signals come from, as a one-key map: `source: {demo: {...}}`.
    #[serde(with = "serde_yaml_ng::with::singleton_map")]
    pub(crate) source: SourceConfig,
    /// Forecast-only: compute and report the predictive answer, tell KEDA the reactive one.
    #[serde(default)]
    pub(crate) shadow: bool,
    /// Replica shape stated here wins over the cluster's and the profile's.
    #[serde(default)]
    pub(crate) shape: Option<StatedShape>,
    /// Prefill/decode roles, each scaled by its own ScaledObject.
    #[serde(default)]
    pub(crate) roles: BTreeMap<RoleKind, RawRole>,
}

/// One role of a disaggregated workload; unset fields come from the workload.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRole {
    /// Capacity profile of this role's replicas; default: the workload's `model`.
    #[serde(default)]
    pub(crate) model: Option<String>,
    #[serde(default)]
    pub(crate) min_replicas: Option<u32>,
    #[serde(default)]
    pub(crate) max_replicas: Option<u32>,
    #[serde(default)]
    pub(crate) shape: Option<StatedShape>,
}

fn default_namespace() -> String {
    "default".to_string()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTarget {
    pub(crate) signal: Signal,
    /// Signal units one replica handles; default for `concurrency`: the
    /// profile's `concurrency_per_replica`.
    #[serde(default)]
    pub(crate) per_replica: Option<f64>,
}
