//! The config file as the user wrote it. Every struct denies unknown keys, so
//! a typo is an error instead of a silently ignored setting. Defaults are
//! functions; units are in the field names.

use std::{net::SocketAddr, path::PathBuf};

use serde::Deserialize;

use crate::sources::{Signal, SourceConfig};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// The KEDA external scaler (gRPC) server.
    #[serde(default)]
    pub grpc: RawGrpc,
    /// The HTTP server (health, API).
    #[serde(default)]
    pub http: RawHttp,
    /// How often sources are polled and decisions recomputed.
    #[serde(default = "default_tick_interval_secs")]
    pub tick_interval_secs: f64,
    /// Log every workload's decision every tick at INFO (default: only changes).
    #[serde(default)]
    pub log_every_decision: bool,
    /// Directory of extra capacity profiles (`*.yaml`), relative to this file.
    #[serde(default)]
    pub models_dir: Option<PathBuf>,
    /// Values a workload takes when it does not set them.
    #[serde(default)]
    pub defaults: RawDefaults,
    /// Where signal history is kept.
    #[serde(default)]
    pub store: RawStore,
    /// How forecasts are refitted in the background.
    #[serde(default)]
    pub forecast: RawForecast,
    /// How forecasts become replica counts.
    #[serde(default)]
    pub sizing: RawSizing,
    /// GPU node pools pre-warming plans for; none: no node plan.
    #[serde(default)]
    pub pools: Vec<RawPool>,
    /// Capacity bought for a window of time, in a pool.
    #[serde(default)]
    pub reservations: Vec<RawReservation>,
    /// The workloads Foresight sizes.
    pub workloads: Vec<RawWorkload>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawForecast {
    /// Off: decisions stay reactive and no forecast is computed.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// How often each workload's forecast is refitted on new history.
    #[serde(default = "default_refit_interval_secs")]
    pub refit_interval_secs: f64,
    /// How often the model is chosen again by backtest (the costly part); refits in between reuse the choice.
    #[serde(default = "default_reselect_interval_secs")]
    pub reselect_interval_secs: f64,
    /// History each fit reads from the store.
    #[serde(default = "default_history_days")]
    pub history_days: f64,
    /// Rolling origins for model selection and intervals.
    #[serde(default = "default_origins")]
    pub origins: usize,
    /// Quantiles reported beside the point forecast.
    #[serde(default = "default_quantiles")]
    pub quantiles: Vec<f64>,
    /// Seasonal periods, shortest first ("daily", then "weekly"); each a
    /// whole number of store buckets.
    #[serde(default = "default_seasons_secs")]
    pub seasons_secs: Vec<u64>,
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
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSizing {
    /// `predictive` (forecast, falling back to reactive without one) or `reactive`.
    #[serde(default = "default_policy")]
    pub policy: String,
    /// Forecast quantile replicas are sized for; one of `forecast.quantiles`.
    #[serde(default = "default_sizing_quantile")]
    pub quantile: f64,
    /// A lower replica count waits this long (the highest recommendation in the window wins).
    #[serde(default = "default_stabilization_secs")]
    pub scale_down_stabilization_secs: f64,
    /// Time step of the node plan's timeline.
    #[serde(default = "default_plan_step_secs")]
    pub plan_step_secs: u64,
}

impl Default for RawSizing {
    fn default() -> Self {
        RawSizing {
            policy: default_policy(),
            quantile: default_sizing_quantile(),
            scale_down_stabilization_secs: default_stabilization_secs(),
            plan_step_secs: default_plan_step_secs(),
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
pub struct RawPool {
    pub name: String,
    /// GPU product, as in profiles' `gpu_type` (e.g. `nvidia-h100-80gb`).
    pub gpu_type: String,
    pub gpus_per_node: u32,
    /// GPUs per NVLink domain on a node; default: the whole node.
    #[serde(default)]
    pub nvlink_domain_gpus: Option<u32>,
    /// Nodes per rack / fabric that multi-node replicas must stay inside; default: one fabric.
    #[serde(default)]
    pub nodes_per_rack: Option<u32>,
    /// `reserved`, `on-demand` or `spot`.
    pub capacity_type: String,
    #[serde(default)]
    pub price_per_node_hour: f64,
    /// Asking for a node to the node being Ready.
    pub provisioning_secs: f64,
    #[serde(default)]
    pub max_nodes: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawReservation {
    pub name: String,
    pub pool: String,
    pub nodes: u32,
    /// RFC 3339; the reservation covers [start, end).
    pub start: String,
    pub end: String,
    /// Already paid whether used or not (a capacity block, a commitment).
    #[serde(default = "default_true")]
    pub paid: bool,
}

fn default_true() -> bool {
    true
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
    12
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
pub struct RawGrpc {
    #[serde(default = "default_grpc_listen")]
    pub listen: SocketAddr,
    /// Serve TLS instead of plaintext h2c.
    #[serde(default)]
    pub tls: Option<RawTls>,
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
pub struct RawTls {
    /// PEM certificate chain of this server.
    pub cert_file: PathBuf,
    /// PEM private key of this server.
    pub key_file: PathBuf,
    /// PEM CA bundle; when set, clients must present a certificate it signed (mTLS).
    #[serde(default)]
    pub client_ca_file: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHttp {
    #[serde(default = "default_http_listen")]
    pub listen: SocketAddr,
}

impl Default for RawHttp {
    fn default() -> Self {
        RawHttp { listen: default_http_listen() }
    }
}

fn default_http_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8080))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStore {
    /// The history database, relative to this file; `null` keeps history in memory only.
    #[serde(default = "default_store_path")]
    pub path: Option<PathBuf>,
    /// Width of one history bucket.
    #[serde(default = "default_resolution_secs")]
    pub resolution_secs: u64,
    #[serde(default = "default_retention_days")]
    pub retention_days: f64,
    /// How often recorded history is made durable; a crash loses at most this much.
    #[serde(default = "default_flush_interval_secs")]
    pub flush_interval_secs: f64,
    /// Page cache of the database.
    #[serde(default = "default_cache_mib")]
    pub cache_mib: u64,
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
pub struct RawDefaults {
    #[serde(default)]
    pub min_replicas: u32,
    #[serde(default = "default_max_replicas")]
    pub max_replicas: u32,
    #[serde(default)]
    pub activation_threshold: f64,
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
pub struct RawWorkload {
    /// Workload name; a ScaledObject selects it with trigger metadata `workload`.
    pub name: String,
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// Capacity profile name (a file in `models/` or `models_dir`).
    pub model: String,
    #[serde(default)]
    pub min_replicas: Option<u32>,
    #[serde(default)]
    pub max_replicas: Option<u32>,
    /// Signals to record; default: concurrency, queue_depth, request_rate,
    /// prompt_tokens_rate, generation_tokens_rate (plus the target signal).
    #[serde(default)]
    pub signals: Option<Vec<Signal>>,
    /// The signal replicas are sized on, and what one replica handles.
    pub target: RawTarget,
    #[serde(default)]
    pub activation_threshold: Option<f64>,
    /// Signals older than this are stale: no decision, KEDA's fallback applies.
    /// Default: three source intervals.
    #[serde(default)]
    pub stale_after_secs: Option<f64>,
    /// Where the signals come from, as a one-key map: `source: {demo: {...}}`.
    #[serde(with = "serde_yaml_ng::with::singleton_map")]
    pub source: SourceConfig,
    /// Forecast-only: compute and report the predictive answer, tell KEDA the reactive one.
    #[serde(default)]
    pub shadow: bool,
}

fn default_namespace() -> String {
    "default".to_string()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTarget {
    pub signal: Signal,
    /// Signal units one replica handles; default for `concurrency`: the
    /// profile's `concurrency_per_replica`.
    #[serde(default)]
    pub per_replica: Option<f64>,
}
