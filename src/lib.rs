//! Foresight: a predictive autoscaler for LLM inference on Kubernetes.
//!
//! Data flows `sources` (pull signals) -> `store` (history) -> `forecast`
//! (refitted in the background by `refit`) -> `engine` (decide each tick,
//! using `sizing`) -> `state` (precomputed answers) -> `scaler` (KEDA gRPC)
//! and `api` (HTTP). `config` is the one typed, validated input. `replay`
//! replays demand traces against policies, using the same decision code.

pub mod api;
pub mod capacity;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod fake_vllm;
pub mod forecast;
pub mod replay;
pub mod scaler;
pub mod serve;
pub mod sizing;
pub mod sources;
pub mod store;
pub mod telemetry;
pub mod time;
pub mod workload;

/// Code generated from `proto/externalscaler.proto`.
pub mod proto {
    tonic::include_proto!("externalscaler");
}
