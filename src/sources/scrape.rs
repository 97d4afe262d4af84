//! The direct scraper: GET `/metrics` from every vLLM or KServe pod of a
//! workload, concurrently, and derive the workload's signals.
//!
//! Targets are static URLs, or a DNS name resolved on every poll to all its
//! A/AAAA records (a headless Service lists one per ready pod). A target
//! that is down, slow or answers garbage is logged and counted, and the
//! round goes on with the others: signals then sum over the pods that
//! answered (the count is reported). Only when no target answers does the
//! poll fail.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
    time::{Duration, SystemTime},
};

use serde::Deserialize;
use tokio::{sync::Semaphore, task::JoinSet};
use tracing::{info, warn};

use super::{
    exposition::{self, Format},
    vllm::{self, Deriver},
    Signals, SourceError,
};

/// `source: {scrape: {...}}`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScrapeConfig {
    /// Static target URLs, e.g. `http://10.0.0.5:8000/metrics`.
    #[serde(default)]
    pub targets: Vec<String>,
    /// Discover targets from DNS (every A/AAAA record of the name).
    #[serde(default)]
    pub dns: Option<DnsTargets>,
    #[serde(default = "default_interval_secs")]
    pub interval_secs: f64,
    #[serde(default = "default_timeout_secs")]
    pub timeout_secs: f64,
    /// Scrapes in flight at once.
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// Keep only series with this `model_name` label.
    #[serde(default)]
    pub model_name: Option<String>,
    /// Largest body read from one target (decoded); past it that target's
    /// scrape fails with `body_too_large`. A vLLM pod serves tens of KB.
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: usize,
}

/// Targets from a (headless Service) DNS name.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DnsTargets {
    pub name: String,
    pub port: u16,
    #[serde(default = "default_path")]
    pub path: String,
    #[serde(default = "default_scheme")]
    pub scheme: String,
}

fn default_interval_secs() -> f64 {
    15.0
}
fn default_timeout_secs() -> f64 {
    5.0
}
fn default_concurrency() -> usize {
    16
}
pub(crate) fn default_max_body_bytes() -> usize {
    10 << 20
}
fn default_path() -> String {
    "/metrics".into()
}
fn default_scheme() -> String {
    "http".into()
}

impl ScrapeConfig {
    pub(crate) fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if self.targets.is_empty() && self.dns.is_none() {
            out.push(("targets", "give `targets`, `dns`, or both".into()));
        }
        for t in &self.targets {
            if reqwest::Url::parse(t).map(|u| !matches!(u.scheme(), "http" | "https")).unwrap_or(true) {
                out.push(("targets", format!("`{t}` is not an http(s) URL")));
            }
        }
        if let Some(d) = &self.dns {
            if !matches!(d.scheme.as_str(), "http" | "https") {
                out.push(("dns.scheme", format!("must be http or https, got `{}`", d.scheme)));
            }
            if !d.path.starts_with('/') {
                out.push(("dns.path", format!("must start with `/`, got `{}`", d.path)));
            }
        }
        if !(0.1..=3600.0).contains(&self.interval_secs) {
            out.push(("interval_secs", format!("must be within 0.1..=3600, got {}", self.interval_secs)));
        }
        if !(0.05..=300.0).contains(&self.timeout_secs) {
            out.push(("timeout_secs", format!("must be within 0.05..=300, got {}", self.timeout_secs)));
        }
        if !(1024..=1 << 30).contains(&self.max_body_bytes) {
            out.push(("max_body_bytes", format!("must be within 1024..=1073741824, got {}", self.max_body_bytes)));
        }
        if self.concurrency == 0 {
            out.push(("concurrency", "must be at least 1".into()));
        }
        out
    }
}

/// Why one target gave nothing this round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TargetError {
    /// Connection refused, reset, DNS, TLS.
    Unreachable,
    Timeout,
    /// A non-2xx status.
    Status,
    /// The body is not a valid exposition.
    Parse,
    /// Valid, but without vLLM or KServe metrics.
    NoKnownMetrics,
    /// Longer than `max_body_bytes`.
    TooLarge,
}

impl TargetError {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            TargetError::Unreachable => "unreachable",
            TargetError::Timeout => "timeout",
            TargetError::Status => "http_status",
            TargetError::Parse => "parse",
            TargetError::NoKnownMetrics => "no_known_metrics",
            TargetError::TooLarge => "body_too_large",
        }
    }
}

/// How one round of scrapes went.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Round {
    pub targets: usize,
    /// Targets that answered with vLLM or KServe metrics.
    pub answered: usize,
    /// Of those, pods whose every engine reports itself asleep.
    pub asleep: usize,
    /// Targets that failed, by why.
    pub(crate) failures: BTreeMap<TargetError, usize>,
}

impl Round {
    /// Pods serving: answered and awake. A sleeping vLLM still answers
    /// `/metrics` but serves nothing, so it is not a running replica.
    pub fn serving(&self) -> usize {
        self.answered - self.asleep
    }
}

/// A repeated failure of one target is logged when it starts, when its kind
/// changes, and then at most this often.
const RELOG_SECS: u64 = 60;

/// A scraper with the state rates need between polls.
#[derive(Debug)]
pub struct Scraper {
    config: ScrapeConfig,
    client: reqwest::Client,
    deriver: Deriver,
    /// Errors so far by (target, kind).
    pub errors: BTreeMap<(String, TargetError), u64>,
    /// The last round.
    pub last_round: Round,
    /// Per failing target: the kind last logged, and when.
    logged: HashMap<String, (TargetError, std::time::Instant)>,
}

impl Scraper {
    pub fn new(config: ScrapeConfig) -> Scraper {
        let client = super::http_client(Duration::from_secs_f64(config.timeout_secs));
        Scraper {
            config,
            client,
            deriver: Deriver::default(),
            errors: BTreeMap::new(),
            last_round: Round::default(),
            logged: HashMap::new(),
        }
    }

    pub(crate) fn interval(&self) -> Duration {
        Duration::from_secs_f64(self.config.interval_secs)
    }

    async fn targets(&self) -> Vec<String> {
        let mut out = self.config.targets.clone();
        if let Some(d) = &self.config.dns {
            match tokio::net::lookup_host((d.name.as_str(), d.port)).await {
                Ok(addrs) => {
                    let mut found: Vec<String> = addrs.map(|a| format!("{}://{}{}", d.scheme, a, d.path)).collect();
                    found.sort();
                    found.dedup();
                    out.extend(found);
                }
                Err(e) => warn!(name = %d.name, error = %e, "DNS lookup of scrape targets failed"),
            }
        }
        out
    }

    /// Scrape every target once and derive signals.
    pub async fn poll(&mut self, _now: SystemTime) -> Result<Signals, SourceError> {
        let targets = self.targets().await;
        let limit = Arc::new(Semaphore::new(self.config.concurrency));
        let mut set = JoinSet::new();
        for target in targets.iter().cloned() {
            let (client, limit, model) = (self.client.clone(), limit.clone(), self.config.model_name.clone());
            let max_body = self.config.max_body_bytes;
            set.spawn(async move {
                let _permit = limit.acquire_owned().await;
                let got = scrape_one(&client, &target, model.as_deref(), max_body).await;
                (target, got)
            });
        }
        let mut readings = Vec::new();
        let mut round = Round { targets: targets.len(), ..Round::default() };
        while let Some(joined) = set.join_next().await {
            let Ok((target, got)) = joined else { continue };
            match got {
                Ok(r) => {
                    if self.logged.remove(&target).is_some() {
                        info!(url = %target, "scrape target answers again");
                    }
                    round.asleep += usize::from(r.is_asleep());
                    readings.push((target, r));
                }
                Err((kind, detail)) => {
                    let due = self
                        .logged
                        .get(&target)
                        .is_none_or(|(k, at)| *k != kind || at.elapsed() >= Duration::from_secs(RELOG_SECS));
                    if due {
                        warn!(url = %target, error = kind.as_str(), %detail, "scrape failed");
                        self.logged.insert(target.clone(), (kind, std::time::Instant::now()));
                    }
                    *round.failures.entry(kind).or_default() += 1;
                    *self.errors.entry((target, kind)).or_default() += 1;
                }
            }
        }
        round.answered = readings.len();
        self.last_round = round;
        self.deriver.retain(&|t| targets.iter().any(|x| x == t));
        self.logged.retain(|t, _| targets.iter().any(|x| x == t));
        if readings.is_empty() {
            return Err(SourceError::NoTargetAnswered(targets.len()));
        }
        Ok(self.deriver.round(readings))
    }
}

/// The Accept header of a scrape: the text format, whose names every
/// client writes as registered.
pub(crate) const ACCEPT: &str = "text/plain;version=0.0.4";

async fn scrape_one(
    client: &reqwest::Client,
    target: &str,
    model: Option<&str>,
    max_body: usize,
) -> Result<vllm::Reading, (TargetError, String)> {
    let res = client
        .get(target)
        // Text 0.0.4 only: prometheus_client >= 0.23 ignores q-values and answers any
        // Accept that lists OpenMetrics with `escaping=underscores` (samples `vllm_x`
        // under `# TYPE vllm:x`). Other spellings are read all the same (`vllm`).
        .header(reqwest::header::ACCEPT, ACCEPT)
        .send()
        .await
        .map_err(|e| (if e.is_timeout() { TargetError::Timeout } else { TargetError::Unreachable }, e.to_string()))?;
    if !res.status().is_success() {
        return Err((TargetError::Status, res.status().to_string()));
    }
    let format =
        Format::from_content_type(res.headers().get(reqwest::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()));
    let body = super::read_bounded(res, max_body, "scrape.max_body_bytes").await.map_err(|e| match e {
        super::BodyError::TooLarge { .. } => (TargetError::TooLarge, e.to_string()),
        super::BodyError::Http(e) => {
            (if e.is_timeout() { TargetError::Timeout } else { TargetError::Unreachable }, e.to_string())
        }
    })?;
    // The reading's time is when the body arrived: rates divide by the time between bodies.
    let at = SystemTime::now();
    let body = String::from_utf8_lossy(&body);
    let families = exposition::parse(&body, format).map_err(|e| (TargetError::Parse, e.to_string()))?;
    vllm::read(&families, at, model).map_err(|e| (TargetError::NoKnownMetrics, e.to_string()))
}
