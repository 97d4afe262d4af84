//! Foresight: a predictive autoscaler for LLM inference on Kubernetes.
//!
//! Data flows `sources` (pull signals) -> `store` (history) -> `forecast`
//! (refitted in the background by `serve::refit`) -> `serve::engine` (decide
//! each tick, using `sizing` and `capacity`) -> `serve::state` (precomputed
//! answers) -> `scaler` (KEDA gRPC) and `api` (HTTP). `config` is the one
//! typed, validated input and `workload` the unit every stage takes. Beside
//! the flow, `replay` replays demand traces against policies with the same
//! decision code, and `fake_vllm` serves simulated vLLM pods.
//!
//! `pub` marks what the binary, the integration tests and the benches use;
//! the rest is `pub(crate)`, and `unreachable_pub` keeps a stray `pub` from
//! creeping back in.

#![warn(unreachable_pub)]

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
