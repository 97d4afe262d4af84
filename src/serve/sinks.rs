//! Where collectors write, and the source-health bookkeeping every kind of
//! collector shares: invalid readings and queries that match nothing.

use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use tracing::{info, warn};

use crate::{
    sources::{
        health::{EmptyQuery, SourceHealth},
        Invalid, Signal,
    },
    store::Store,
    telemetry::Throttle,
};

/// A source that stays down is logged once a minute per workload and kind
/// of failure (with how many were held back), not once a poll; the
/// `foresight_source_errors_total` counter still counts every one.
pub(super) const WARN_EVERY: Duration = Duration::from_secs(60);

/// Where a collector writes: history into the store, its own status beside it.
#[derive(Clone)]
pub struct Sinks {
    pub store: Arc<Store>,
    pub health: Arc<SourceHealth>,
}

/// Count and report one poll's invalid readings (each already a gap, not a
/// value): `/metrics` counts every one, `/api/v1/workloads` shows the
/// latest under `source.invalid`, the log says so at most once a minute.
/// `polled` are the signals this poll read; `invalid` those of them that failed.
pub(super) fn note_invalid(
    health: &SourceHealth,
    key: &str,
    polled: &[Signal],
    invalid: &BTreeMap<Signal, Invalid>,
    log: &mut Throttle,
) {
    let invalid = report_invalid(key, polled, invalid, log);
    health.update(key, |h| {
        h.invalid.retain(|s, _| !polled.contains(s));
        h.invalid.extend(invalid);
    });
}

/// The counting and logging of [`note_invalid`]: which of `polled` failed, and why.
pub(super) fn report_invalid(
    key: &str,
    polled: &[Signal],
    invalid: &BTreeMap<Signal, Invalid>,
    log: &mut Throttle,
) -> Vec<(Signal, Invalid)> {
    let invalid: Vec<(Signal, Invalid)> =
        invalid.iter().filter(|(s, _)| polled.contains(s)).map(|(s, why)| (*s, *why)).collect();
    for (s, why) in &invalid {
        crate::telemetry::invalid_reading(key, s.as_str(), why.as_str());
    }
    if !invalid.is_empty() {
        if let Some(held) = log.allow(Instant::now()) {
            let each: Vec<String> = invalid.iter().map(|(s, why)| format!("{s}: {why}")).collect();
            warn!(workload = %key, invalid = %each.join(", "), held_back = held, "readings failed the validity rule; kept as gaps");
        }
    }
    invalid
}

/// Record whether `signal`'s instant query matched no series this poll: a
/// run of empty answers is reported with the query (a wrong metric name or
/// selector looks exactly like this), and logged once when it has lasted
/// [`EMPTY_LOG_SECS`].
pub(super) fn note_empty(health: &SourceHealth, key: &str, signal: Signal, query: &str, empty: bool, now: SystemTime) {
    health.update(key, |h| {
        if !empty {
            if h.empty_queries.remove(&signal).is_some() {
                info!(workload = %key, signal = %signal, "query matches series again");
            }
            return;
        }
        let e = h.empty_queries.entry(signal).or_insert_with(|| EmptyQuery {
            query: query.to_string(),
            since: now,
            logged: false,
        });
        let secs = now.duration_since(e.since).unwrap_or_default().as_secs_f64();
        if !e.logged && secs >= EMPTY_LOG_SECS {
            e.logged = true;
            warn!(workload = %key, signal = %signal, query = %e.query, secs = secs as u64, "query has matched no series; check the metric names and `selector`");
        }
    });
}

/// A query empty this long is logged (once per run of empty answers).
const EMPTY_LOG_SECS: f64 = 300.0;
