//! Foresight's own health: logs (`tracing` to stderr, filtered by `RUST_LOG`,
//! default `info`) and the process-wide counters `/metrics` exposes beside
//! the forecasts (source errors, gRPC requests and their latency).
//!
//! The counters are process globals: sources and the scaler bump them
//! without threading a handle through every call, and `/metrics` reads them.

use std::{sync::LazyLock, time::Instant};

use prometheus_client::{
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};
use tracing_subscriber::{fmt, EnvFilter};

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    Text,
    Json,
}

/// Install the global subscriber. Safe to call more than once (tests).
pub(crate) fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

type Labels = Vec<(&'static str, String)>;

struct Counters {
    source_errors: Family<Labels, Counter>,
    invalid_readings: Family<Labels, Counter>,
    grpc_requests: Family<Labels, Counter>,
    grpc_seconds: Family<Labels, Histogram>,
    flush_errors: Counter,
    prom_queries: Family<Labels, Counter>,
    prom_poll_seconds: Histogram,
    refits: Family<Labels, Counter>,
    refit_lag: Histogram,
    refit_waiting: Gauge,
}

static COUNTERS: LazyLock<Counters> = LazyLock::new(|| Counters {
    source_errors: Family::default(),
    invalid_readings: Family::default(),
    grpc_requests: Family::default(),
    flush_errors: Counter::default(),
    prom_queries: Family::default(),
    // 1 ms to ~33 s: one batched poll of thousands of workloads takes seconds.
    prom_poll_seconds: Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(1e-3, 2.0, 16)),
    refits: Family::default(),
    // 10 ms to ~1.5 h: from one fit on an idle worker to a backlog of thousands.
    refit_lag: Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(0.01, 2.0, 20)),
    refit_waiting: Gauge::default(),
    // 50 us to ~1.6 s: GetMetrics answers from memory in microseconds.
    grpc_seconds: Family::new_with_constructor(|| {
        Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(5e-5, 2.0, 16))
    }),
});

fn split_key(workload_key: &str) -> Labels {
    let (ns, name) = workload_key.split_once('/').unwrap_or(("", workload_key));
    vec![("namespace", ns.to_string()), ("workload", name.to_string())]
}

/// Making history durable failed (disk full, read-only, I/O error); it is retried.
pub(crate) fn flush_error() {
    COUNTERS.flush_errors.inc();
}

/// A source poll or query for this workload failed.
pub fn source_error(workload_key: &str) {
    COUNTERS.source_errors.get_or_create(&split_key(workload_key)).inc();
}

/// A reading of `signal` for this workload failed the validity rule and became a gap.
pub(crate) fn invalid_reading(workload_key: &str, signal: &str, reason: &str) {
    let mut labels = split_key(workload_key);
    labels.push(("signal", signal.to_string()));
    labels.push(("reason", reason.to_string()));
    COUNTERS.invalid_readings.get_or_create(&labels).inc();
}

/// Record one KEDA scaler call: its method, status code and latency (the
/// scaler's tower layer calls this for every request).
pub fn grpc_call(method: &'static str, code: tonic::Code, took: std::time::Duration) {
    let method = vec![("method", method.to_string())];
    COUNTERS.grpc_seconds.get_or_create(&method).observe(took.as_secs_f64());
    let mut labels = method;
    labels.push(("code", format!("{code:?}")));
    COUNTERS.grpc_requests.get_or_create(&labels).inc();
}

/// One HTTP query sent to a Prometheus-compatible source (`kind`: `instant` or `range`).
pub(crate) fn prometheus_query(kind: &'static str) {
    COUNTERS.prom_queries.get_or_create(&vec![("kind", kind.to_string())]).inc();
}

/// One poll of a Prometheus source (every signal of every workload it reads) took `secs`.
pub(crate) fn prometheus_poll(secs: f64) {
    COUNTERS.prom_poll_seconds.observe(secs);
}

/// A forecast fit finished (`ok` or `error`), `lag_secs` after it became due.
pub(crate) fn refit_done(ok: bool, lag_secs: f64) {
    COUNTERS.refits.get_or_create(&vec![("outcome", if ok { "ok" } else { "error" }.to_string())]).inc();
    COUNTERS.refit_lag.observe(lag_secs.max(0.0));
}

/// Fits waiting for a worker.
pub(crate) fn refit_waiting(n: usize) {
    COUNTERS.refit_waiting.set(n as i64);
}

/// Register the process counters (names as exposed, `foresight_` included).
pub(crate) fn register(registry: &mut Registry) {
    registry.register(
        "foresight_source_errors",
        "Failed source polls and queries (scrapes with no target answering, Prometheus errors)",
        COUNTERS.source_errors.clone(),
    );
    registry.register(
        "foresight_invalid_readings",
        "Readings that failed the validity rule (NaN, negative, above the signal's plausible maximum) and were kept as gaps, by signal and reason",
        COUNTERS.invalid_readings.clone(),
    );
    registry.register(
        "foresight_store_flush_errors",
        "Failed history flushes (disk full, read-only, I/O errors); each is retried, and history since the last good flush is at risk until one succeeds",
        COUNTERS.flush_errors.clone(),
    );
    registry.register(
        "foresight_grpc_requests",
        "KEDA scaler calls by method and gRPC code",
        COUNTERS.grpc_requests.clone(),
    );
    registry.register(
        "foresight_grpc_request_duration_seconds",
        "KEDA scaler call latency (to the first message for streams)",
        COUNTERS.grpc_seconds.clone(),
    );
    registry.register("foresight_refits", "Forecast fits finished, by outcome", COUNTERS.refits.clone());
    registry.register(
        "foresight_refit_lag_seconds",
        "Time from when a fit became due (as planned, or when queued for a first fit) to its result: the fit plus its wait for a worker",
        COUNTERS.refit_lag.clone(),
    );
    registry.register(
        "foresight_refit_waiting",
        "Forecast fits waiting for a worker at the last tick",
        COUNTERS.refit_waiting.clone(),
    );
    registry.register(
        "foresight_prometheus_queries",
        "HTTP queries sent to Prometheus-compatible sources, by kind (instant, range)",
        COUNTERS.prom_queries.clone(),
    );
    registry.register(
        "foresight_prometheus_poll_duration_seconds",
        "Time one poll of a Prometheus source took, every workload and signal it reads included",
        COUNTERS.prom_poll_seconds.clone(),
    );
}

/// Lets a warning that repeats every poll (a source that is down) through
/// at most once per `every`, and says how many were held back meanwhile, so
/// an outage of hours is a line a minute per workload, not one a poll.
#[derive(Debug)]
pub(crate) struct Throttle {
    every: std::time::Duration,
    last: Option<Instant>,
    held: u64,
}

impl Throttle {
    pub(crate) fn new(every: std::time::Duration) -> Throttle {
        Throttle { every, last: None, held: 0 }
    }

    /// `Some(held back since the last one)` when this occurrence, at `now`,
    /// is to be logged; `None` when it is held back.
    pub(crate) fn allow(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(t) if now.saturating_duration_since(t) < self.every => {
                self.held += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.held))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::Throttle;

    #[test]
    fn a_repeated_warning_is_logged_once_per_interval_with_what_was_held_back() {
        let t0 = Instant::now();
        let mut t = Throttle::new(Duration::from_secs(60));
        assert_eq!(t.allow(t0), Some(0), "the first one goes through");
        for s in [15, 30, 45] {
            assert_eq!(t.allow(t0 + Duration::from_secs(s)), None);
        }
        assert_eq!(t.allow(t0 + Duration::from_secs(60)), Some(3), "then one a minute, counting the rest");
        assert_eq!(t.allow(t0 + Duration::from_secs(61)), None);
        assert_eq!(t.allow(t0 + Duration::from_secs(600)), Some(1));
    }
}
