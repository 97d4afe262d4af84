//! What each workload's source says about itself besides values: which
//! scrape targets answered and why the others did not, which pods are
//! asleep, which Prometheus queries keep returning nothing. Collectors
//! write it; the control loop copies it into the workload's state, so the
//! reason for "no decision" can name the cause (a query that matches no
//! series is a wrong metric name or selector, not a slow source).

use std::{
    collections::{BTreeMap, HashMap},
    sync::RwLock,
    time::SystemTime,
};

use serde::Serialize;

use super::{Invalid, Signal};

/// The latest status of every workload's source, by workload key.
#[derive(Debug, Default)]
pub struct SourceHealth {
    by_workload: RwLock<HashMap<String, SourceStatus>>,
}

impl SourceHealth {
    /// Change one workload's status in place.
    pub(crate) fn update(&self, key: &str, change: impl FnOnce(&mut SourceStatus)) {
        let mut map = self.by_workload.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        change(map.entry(key.to_string()).or_default());
    }

    pub(crate) fn get(&self, key: &str) -> Option<SourceStatus> {
        self.by_workload.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(key).cloned()
    }

    /// Forget a workload whose collector stopped.
    pub(crate) fn remove(&self, key: &str) {
        self.by_workload.write().unwrap_or_else(std::sync::PoisonError::into_inner).remove(key);
    }
}

/// One workload's source, as of its last poll.
#[derive(Debug, Clone, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub(crate) struct SourceStatus {
    /// Scraped sources: targets polled in the last round.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) targets: Option<u32>,
    /// Scraped sources: targets that answered with vLLM or KServe metrics.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) answered: Option<u32>,
    /// Scraped sources: answering pods whose every engine is asleep
    /// (`vllm:engine_sleep_state`); they are not counted as serving pods.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) asleep: Option<u32>,
    /// Scraped sources: targets that failed in the last round, by why
    /// (`unreachable`, `timeout`, `http_status`, `body_too_large`, `parse`, `no_known_metrics`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) failures: BTreeMap<String, u32>,
    /// Signals whose latest reading failed the validity rule (NaN, negative,
    /// above the signal's plausible maximum), and why: each is a gap in history.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) invalid: BTreeMap<Signal, Invalid>,
    /// The collector has finished its first poll (for Prometheus, the history
    /// backfill with it), whatever it found: history is as loaded as it will be.
    #[serde(skip)]
    pub(crate) first_poll_done: bool,
    /// Prometheus sources: signals whose query has matched no series on
    /// every poll since `since`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) empty_queries: BTreeMap<Signal, EmptyQuery>,
}

/// A query that keeps matching no series.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub(crate) struct EmptyQuery {
    /// The PromQL as sent, placeholders filled in.
    pub(crate) query: String,
    /// The first poll of this empty run.
    #[serde(serialize_with = "crate::time::ser_system_time")]
    #[schema(value_type = String, format = DateTime)]
    pub(crate) since: SystemTime,
    /// Whether the collector has logged this run yet.
    #[serde(skip)]
    pub(crate) logged: bool,
}

impl SourceStatus {
    /// Why `signal` has no usable reading, as far as the source knows:
    /// e.g. the query that has matched nothing for `min_secs` or longer.
    pub(crate) fn explain(&self, signal: Signal, now: SystemTime, min_secs: f64) -> Option<SourceCause> {
        if let Some(why) = self.invalid.get(&signal) {
            return Some(SourceCause::Invalid { why: *why });
        }
        if let Some(e) = self.empty_queries.get(&signal) {
            let secs = now.duration_since(e.since).unwrap_or_default().as_secs_f64();
            if secs >= min_secs {
                return Some(SourceCause::EmptyQuery { query: e.query.clone(), secs });
            }
        }
        let (Some(targets), Some(answered)) = (self.targets, self.answered) else { return None };
        let asleep = self.asleep.filter(|a| *a > 0);
        if answered < targets || asleep.is_some() {
            return Some(SourceCause::Targets { answered, targets, failures: self.failures.clone(), asleep });
        }
        None
    }
}

/// What the source knows about a signal that has no usable reading.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SourceCause {
    /// A Prometheus query has matched no series for `secs`: a wrong metric name or selector, not a slow source.
    #[error("the query `{query}` has matched no series for {secs:.0} s (check the metric names and `selector`)")]
    EmptyQuery { query: String, secs: f64 },
    /// The source reports the signal, but its latest value failed the validity rule.
    #[error("the source's latest value is {why}, which is not a reading")]
    Invalid { why: Invalid },
    /// Some scrape targets failed (counted by why) or are asleep.
    #[error("{answered} of {targets} scrape targets answered{}{}", failed(.failures), asleep_note(*.asleep))]
    Targets { answered: u32, targets: u32, failures: BTreeMap<String, u32>, asleep: Option<u32> },
}

fn failed(failures: &BTreeMap<String, u32>) -> String {
    if failures.is_empty() {
        return String::new();
    }
    let each: Vec<String> = failures.iter().map(|(why, n)| format!("{n} {why}")).collect();
    format!(" ({})", each.join(", "))
}

fn asleep_note(asleep: Option<u32>) -> String {
    asleep.map(|a| format!("; {a} asleep")).unwrap_or_default()
}
