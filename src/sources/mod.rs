//! Sources: where demand signals come from.
//!
//! A source is polled once per tick and returns a [`Signals`] snapshot, the
//! current value of each demand signal for one workload. The set of sources is
//! a closed enum ([`Source`]) rather than trait objects: each variant is a
//! small typed config plus the state it needs between polls, and adding a
//! source is adding a variant.

pub mod demo;

use std::{collections::BTreeMap, fmt, time::SystemTime};

use serde::{Deserialize, Serialize};

/// A demand signal Foresight reads for a workload, named as in config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    /// In-flight requests: running plus waiting (vLLM `num_requests_running + num_requests_waiting`).
    Concurrency,
    /// Requests in the running batch (`vllm:num_requests_running`).
    Running,
    /// Requests queued for a batch slot (`vllm:num_requests_waiting`).
    QueueDepth,
    /// Request arrivals per second.
    RequestRate,
    /// Prefill tokens per second (`vllm:prompt_tokens_total` rate).
    PromptTokensRate,
    /// Generated tokens per second (`vllm:generation_tokens_total` rate).
    GenerationTokensRate,
    /// KV-cache use, mean fraction 0..1 across replicas (`vllm:kv_cache_usage_perc`).
    KvCacheUsage,
}

impl Signal {
    pub const ALL: [Signal; 7] = [
        Signal::Concurrency,
        Signal::Running,
        Signal::QueueDepth,
        Signal::RequestRate,
        Signal::PromptTokensRate,
        Signal::GenerationTokensRate,
        Signal::KvCacheUsage,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Signal::Concurrency => "concurrency",
            Signal::Running => "running",
            Signal::QueueDepth => "queue_depth",
            Signal::RequestRate => "request_rate",
            Signal::PromptTokensRate => "prompt_tokens_rate",
            Signal::GenerationTokensRate => "generation_tokens_rate",
            Signal::KvCacheUsage => "kv_cache_usage",
        }
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One poll's worth of signal values for a workload.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Signals {
    pub values: BTreeMap<Signal, f64>,
}

impl Signals {
    /// The value of `signal` if the source reported a usable one: finite and
    /// not negative. Anything else counts as missing, never as zero.
    pub fn get(&self, signal: Signal) -> Option<f64> {
        self.values.get(&signal).copied().filter(|v| v.is_finite() && *v >= 0.0)
    }
}

/// Why a poll produced no signals.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SourceError {
    /// The source answered, but without the signal the workload scales on.
    #[error("source reported no usable value for signal `{0}`")]
    MissingSignal(Signal),
}

/// Which source a workload reads, as written in config (`source: {demo: {...}}`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum SourceConfig {
    /// Simulated vLLM replicas inside the process, for the demo and for tests.
    Demo(demo::DemoConfig),
}

/// A built source with the state it keeps between polls.
#[derive(Debug)]
pub enum Source {
    Demo(demo::DemoFleet),
}

impl Source {
    pub fn build(config: &SourceConfig) -> Source {
        match config {
            SourceConfig::Demo(c) => Source::Demo(demo::DemoFleet::new(c.clone())),
        }
    }

    /// Read the current signals.
    pub async fn poll(&mut self, now: SystemTime) -> Result<Signals, SourceError> {
        match self {
            Source::Demo(fleet) => Ok(fleet.poll(now)),
        }
    }

    /// Tell the source what was decided, for sources that simulate the fleet
    /// being scaled (the demo). Real sources ignore it.
    pub fn observe_decision(&mut self, desired_replicas: u32, now: SystemTime) {
        match self {
            Source::Demo(fleet) => fleet.scale_to(desired_replicas, now),
        }
    }
}
