//! Sources: where demand signals come from. The serving loop's collectors
//! run them and write what they read into the store.
//!
//! - [`scrape`]: vLLM / KServe `/metrics` scraped directly ([`exposition`]
//!   parses the text, [`vllm`] turns readings into signals);
//! - [`prometheus`]: a Prometheus-compatible HTTP API, with backfill;
//! - `simulated`: simulated vLLM pods started in-process
//!   ([`crate::fake_vllm`]) and scraped over HTTP like real ones.
//!
//! The set of sources is a closed enum: each variant is a small typed config.

pub mod exposition;
pub(crate) mod health;
pub(crate) mod prometheus;
pub(crate) mod promql;
pub mod scrape;
pub(crate) mod simulated;
pub mod vllm;

use std::{collections::BTreeMap, fmt, time::Duration};

use serde::{Deserialize, Serialize};

/// A demand signal Foresight reads for a workload, named as in config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    /// In-flight requests: running plus waiting (vLLM `num_requests_running + num_requests_waiting`).
    Concurrency,
    /// Requests in the running batch (`vllm:num_requests_running`).
    Running,
    /// Requests queued for serving capacity: `vllm:num_requests_waiting`
    /// minus those deferred (`num_requests_waiting_by_reason{reason="deferred"}`,
    /// vLLM >= 0.34), which wait on LoRA budget or KV transfer instead.
    QueueDepth,
    /// Requests per second: finished (`vllm:request_success_total` rate) plus
    /// refused at admission (`vllm:admission_rejections_total`), so a fleet
    /// that sheds load does not look quieter than it is. At minute resolution
    /// this tracks arrivals, except while a queue builds, which `queue_depth`
    /// shows.
    RequestRate,
    /// Prefill tokens per second (`vllm:prompt_tokens_total` rate).
    PromptTokensRate,
    /// Generated tokens per second (`vllm:generation_tokens_total` rate).
    GenerationTokensRate,
    /// KV-cache use, mean fraction 0..1 across replicas (`vllm:kv_cache_usage_perc`).
    KvCacheUsage,
    /// Time to first token, seconds, quantiles of the requests since the last poll.
    TtftP50,
    TtftP90,
    TtftP99,
    /// Inter-token latency p90, seconds, of the tokens generated since the
    /// last poll (`vllm:inter_token_latency_seconds`, older
    /// `vllm:time_per_output_token_seconds`): what a decode batch costs each sequence.
    ItlP90,
    /// End-to-end request latency, seconds (vLLM, or KServe's predict latency).
    E2eP50,
    E2eP90,
    E2eP99,
    /// Requests refused at admission per second (`vllm:admission_rejections_total`
    /// rate); already part of `request_rate`.
    RejectionRate,
    /// Waiting requests deferred by transient constraints, not capacity
    /// (`vllm:num_requests_waiting_by_reason{reason="deferred"}`).
    QueueDeferred,
    /// Time requests waited before scheduling, seconds, quantiles of the
    /// requests finished since the last poll (`vllm:request_queue_time_seconds`):
    /// the queueing delay a wait SLO is about.
    QueueWaitP50,
    QueueWaitP90,
    QueueWaitP99,
    /// Mean prompt (input) tokens per finished request since the last poll
    /// (`vllm:request_prompt_tokens`).
    PromptTokensPerRequest,
    /// Mean generated (output) tokens per finished request since the last
    /// poll (`vllm:request_generation_tokens`).
    GenerationTokensPerRequest,
    /// Fraction 0..1 of prompt tokens served from the prefix cache since the
    /// last poll (`vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total`).
    PrefixCacheHitFraction,
}

impl Signal {
    pub(crate) const ALL: [Signal; 22] = [
        Signal::Concurrency,
        Signal::Running,
        Signal::QueueDepth,
        Signal::RequestRate,
        Signal::PromptTokensRate,
        Signal::GenerationTokensRate,
        Signal::KvCacheUsage,
        Signal::TtftP50,
        Signal::TtftP90,
        Signal::TtftP99,
        Signal::ItlP90,
        Signal::E2eP50,
        Signal::E2eP90,
        Signal::E2eP99,
        Signal::RejectionRate,
        Signal::QueueDeferred,
        Signal::QueueWaitP50,
        Signal::QueueWaitP90,
        Signal::QueueWaitP99,
        Signal::PromptTokensPerRequest,
        Signal::GenerationTokensPerRequest,
        Signal::PrefixCacheHitFraction,
    ];

    /// What a workload records when its config names no signals: the demand
    /// signals forecasting uses, the p99 queue wait the predictive policy
    /// corrects its headroom from, and the p90 inter-token latency that, with
    /// it, judges the SLO capacity is learned from. Other latency quantiles
    /// are opt-in.
    pub(crate) const DEFAULT: [Signal; 7] = [
        Signal::Concurrency,
        Signal::QueueDepth,
        Signal::RequestRate,
        Signal::PromptTokensRate,
        Signal::GenerationTokensRate,
        Signal::QueueWaitP99,
        Signal::ItlP90,
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
            Signal::TtftP50 => "ttft_p50",
            Signal::TtftP90 => "ttft_p90",
            Signal::TtftP99 => "ttft_p99",
            Signal::ItlP90 => "itl_p90",
            Signal::E2eP50 => "e2e_p50",
            Signal::E2eP90 => "e2e_p90",
            Signal::E2eP99 => "e2e_p99",
            Signal::RejectionRate => "rejection_rate",
            Signal::QueueDeferred => "queue_deferred",
            Signal::QueueWaitP50 => "queue_wait_p50",
            Signal::QueueWaitP90 => "queue_wait_p90",
            Signal::QueueWaitP99 => "queue_wait_p99",
            Signal::PromptTokensPerRequest => "prompt_tokens_per_request",
            Signal::GenerationTokensPerRequest => "generation_tokens_per_request",
            Signal::PrefixCacheHitFraction => "prefix_cache_hit_fraction",
        }
    }
}

impl Signal {
    /// The largest value a reading of this signal can plausibly have; past
    /// it the reading is a pod's or a query's bug, not demand. Generous on
    /// purpose: ten million requests in flight or per second, ten billion
    /// tokens per second, a day of latency, a hundred million tokens per
    /// request, and fractions at most 1.
    pub(crate) fn plausible_max(self) -> f64 {
        match self {
            Signal::Concurrency | Signal::Running | Signal::QueueDepth | Signal::QueueDeferred => 1e7,
            Signal::RequestRate | Signal::RejectionRate => 1e7,
            Signal::PromptTokensRate | Signal::GenerationTokensRate => 1e10,
            Signal::KvCacheUsage | Signal::PrefixCacheHitFraction => 1.0,
            Signal::TtftP50
            | Signal::TtftP90
            | Signal::TtftP99
            | Signal::ItlP90
            | Signal::E2eP50
            | Signal::E2eP90
            | Signal::E2eP99
            | Signal::QueueWaitP50
            | Signal::QueueWaitP90
            | Signal::QueueWaitP99 => 86_400.0,
            Signal::PromptTokensPerRequest | Signal::GenerationTokensPerRequest => 1e8,
        }
    }

    /// The one validity rule every reading of every signal passes, from any
    /// source, before it is a value: finite, not negative, and at most
    /// [`Signal::plausible_max`]. What fails is a gap, with its reason.
    pub(crate) fn check(self, v: f64) -> Result<f64, Invalid> {
        if v.is_nan() {
            Err(Invalid::NotANumber)
        } else if v < 0.0 {
            Err(Invalid::Negative)
        } else if v > self.plausible_max() {
            Err(Invalid::Implausible)
        } else {
            Ok(v)
        }
    }
}

/// Why a reading was not taken as a value (it is a gap in history instead).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Invalid {
    /// NaN.
    NotANumber,
    /// Below zero (`-Inf` included).
    Negative,
    /// Above the signal's plausible maximum (`+Inf` included).
    Implausible,
}

impl Invalid {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Invalid::NotANumber => "not_a_number",
            Invalid::Negative => "negative",
            Invalid::Implausible => "implausible",
        }
    }
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Invalid::NotANumber => "NaN",
            Invalid::Negative => "negative",
            Invalid::Implausible => "above its plausible maximum",
        })
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One poll's worth of signal values for a workload: the valid ones, and
/// why the others were not taken.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Signals {
    values: BTreeMap<Signal, f64>,
    invalid: BTreeMap<Signal, Invalid>,
}

impl Signals {
    /// Take `v` as this poll's `signal` if it passes [`Signal::check`]; else
    /// note why not. Either way the other is forgotten.
    pub(crate) fn put(&mut self, signal: Signal, v: f64) {
        match signal.check(v) {
            Ok(v) => {
                self.invalid.remove(&signal);
                self.values.insert(signal, v);
            }
            Err(why) => {
                self.values.remove(&signal);
                self.invalid.insert(signal, why);
            }
        }
    }

    /// The value of `signal`, if the source reported a valid one. Anything
    /// else counts as missing, never as zero.
    pub fn get(&self, signal: Signal) -> Option<f64> {
        self.values.get(&signal).copied()
    }

    /// Signals the source reported but that failed the validity rule, and why.
    pub fn invalid(&self) -> &BTreeMap<Signal, Invalid> {
        &self.invalid
    }
}

/// Why a poll produced no signals.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SourceError {
    /// Every scrape target failed this round.
    #[error("none of {0} scrape targets answered")]
    NoTargetAnswered(usize),
}

/// Which source a workload reads, as written in config (`source: {scrape: {...}}`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum SourceConfig {
    /// Scrape vLLM / KServe pods' `/metrics` directly.
    Scrape(scrape::ScrapeConfig),
    /// Query a Prometheus-compatible HTTP API.
    Prometheus(prometheus::PrometheusConfig),
    /// Start simulated vLLM pods in-process and scrape them (demo, tests).
    Simulated(SimulatedConfig),
}

/// `source: {simulated: {...}}`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SimulatedConfig {
    pub(crate) fleet: crate::fake_vllm::SimConfig,
    #[serde(default = "default_sim_interval_secs")]
    pub(crate) interval_secs: f64,
    /// Seconds of the fleet's past written into the store at start (gaps
    /// only: recorded history wins). The fleet is a function of time, so its
    /// past is computed, and its pods start already serving that past's load.
    #[serde(default)]
    pub(crate) backfill_secs: f64,
}

fn default_sim_interval_secs() -> f64 {
    5.0
}

impl SourceConfig {
    /// How often the source is polled.
    pub(crate) fn interval(&self) -> Duration {
        let secs = match self {
            SourceConfig::Scrape(c) => c.interval_secs,
            SourceConfig::Prometheus(c) => c.interval_secs,
            SourceConfig::Simulated(c) => c.interval_secs,
        };
        crate::time::secs_within(secs, 0.1, 3600.0)
    }

    /// Problems as (field path below `source`, message).
    pub(crate) fn problems(&self) -> Vec<(String, String)> {
        let (kind, found) = match self {
            SourceConfig::Scrape(c) => ("scrape", c.problems()),
            SourceConfig::Prometheus(c) => ("prometheus", c.problems()),
            SourceConfig::Simulated(c) => {
                let mut p: Vec<(&str, String)> = Vec::new();
                if !(0.1..=3600.0).contains(&c.interval_secs) {
                    p.push(("interval_secs", format!("must be within 0.1..=3600, got {}", c.interval_secs)));
                }
                // Computed at start, a request at a time: two weeks at demo rates take seconds.
                if !(0.0..=1_209_600.0).contains(&c.backfill_secs) {
                    p.push(("backfill_secs", format!("must be within 0..=1209600 (14 days), got {}", c.backfill_secs)));
                }
                let mut out: Vec<(String, String)> =
                    p.into_iter().map(|(f, m)| (format!("simulated.{f}"), m)).collect();
                out.extend(c.fleet.problems().into_iter().map(|(f, m)| (format!("simulated.fleet.{f}"), m)));
                return out;
            }
        };
        found.into_iter().map(|(f, m)| (format!("{kind}.{f}"), m)).collect()
    }
}

/// Why a body was not read whole.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    /// Past the configured bound: reading stopped there, so memory stays flat.
    #[error("the body is over the {limit}-byte limit ({setting})")]
    TooLarge { limit: usize, setting: &'static str },
    #[error(transparent)]
    Http(#[from] reqwest::Error),
}

/// Read `res`'s body, decoded (gzip), up to `limit` bytes; past that, stop
/// and fail. A bound on decoded bytes also caps a small gzip that inflates.
pub(crate) async fn read_bounded(
    mut res: reqwest::Response,
    limit: usize,
    setting: &'static str,
) -> Result<Vec<u8>, BodyError> {
    let too_large = || BodyError::TooLarge { limit, setting };
    // A declared length is the encoded one, so it can only refuse early, never pass a body.
    if res.content_length().is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let mut body = Vec::with_capacity(res.content_length().map_or(64 * 1024, |n| n as usize).min(limit));
    while let Some(chunk) = res.chunk().await? {
        if body.len() + chunk.len() > limit {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// An HTTP client for the sources, one per distinct timeout, shared by every
/// collector: a client carries its own TLS roots and connection pool, and
/// one each for thousands of workloads cost ~150 KiB apiece for nothing.
/// reqwest is built without a default TLS crypto provider, so install ring
/// (the one tonic uses) once, first.
pub(crate) fn http_client(timeout: Duration) -> reqwest::Client {
    static PROVIDER: std::sync::Once = std::sync::Once::new();
    static CLIENTS: std::sync::LazyLock<std::sync::Mutex<std::collections::HashMap<Duration, reqwest::Client>>> =
        std::sync::LazyLock::new(Default::default);
    PROVIDER.call_once(|| {
        // Err means a provider is installed already, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    let mut clients = CLIENTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    clients
        .entry(timeout)
        .or_insert_with(|| {
            reqwest::Client::builder()
                .timeout(timeout)
                .user_agent(concat!("foresight/", env!("CARGO_PKG_VERSION")))
                .build()
                .unwrap_or_else(|_| reqwest::Client::new())
        })
        .clone()
}
