//! The serving loop, between the sources and the answers: collectors run
//! each workload's source into the store ([`collector`]), the control loop
//! reads the store every tick, decides and publishes ([`engine`]), forecasts
//! are refitted off the tick ([`refit`]), and the published answers sit in a
//! lock-free registry the scaler and the HTTP API read ([`state`]). Why a
//! tick has no decision, or no usable forecast, is typed in [`outcome`].
//! Workloads with prefill/decode roles get a decision per role ([`roles`]);
//! pools get a spare-capacity forecast for batch work ([`spare`]). A workload
//! answers only once it has warmed up after start ([`warmup`]).

pub mod collector;
mod decide;
pub mod engine;
mod lookback;
pub mod outcome;
mod prom_poll;
pub(crate) mod refit;
pub mod roles;
mod sinks;
pub mod spare;
pub mod state;
mod timeline;
mod warmup;
