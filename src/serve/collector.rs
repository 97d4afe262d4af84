//! Collectors: one task per workload that polls its source on the source's
//! interval and writes what it reads into the store. The control loop only
//! reads the store, so a slow source never delays a decision.

use std::{
    collections::HashMap,
    net::{IpAddr, Ipv4Addr},
    sync::Arc,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::{
    fake_vllm::{server::SimServer, Fleet},
    sources::{
        health::{EmptyQuery, SourceHealth},
        prometheus::{self, bucket_values, chunks, PrometheusConfig},
        scrape::{ScrapeConfig, Scraper},
        Signal, SimulatedConfig, SourceConfig,
    },
    store::Store,
    telemetry::Throttle,
    workload::{pods_series, series, Workload},
};

/// A source that stays down is logged once a minute per workload and kind
/// of failure (with how many were held back), not once a poll; the
/// `foresight_source_errors_total` counter still counts every one.
const WARN_EVERY: Duration = Duration::from_secs(60);

fn unix(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64()
}

/// Where a collector writes: history into the store, its own status beside it.
#[derive(Clone)]
pub struct Sinks {
    pub store: Arc<Store>,
    pub health: Arc<SourceHealth>,
}

/// Run one workload's source until `shutdown`.
pub(crate) async fn run(workload: Arc<Workload>, sinks: Sinks, shutdown: CancellationToken) {
    let result = match &workload.source {
        SourceConfig::Scrape(c) => scrape_loop(&workload, c.clone(), &sinks, &shutdown).await,
        SourceConfig::Simulated(c) => simulated(&workload, c, &sinks, &shutdown).await,
        SourceConfig::Prometheus(c) => prometheus_loop(&workload, c, &sinks, &shutdown).await,
    };
    if let Err(e) = result {
        warn!(workload = %workload.key(), error = %e, "collector stopped; its signals will go stale");
    }
}

async fn scrape_loop(
    w: &Workload,
    config: ScrapeConfig,
    sinks: &Sinks,
    shutdown: &CancellationToken,
) -> Result<(), String> {
    let store = &sinks.store;
    let mut scraper = Scraper::new(config);
    let mut every = tokio::time::interval(scraper.interval());
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let key = w.key();
    let mut failing = Throttle::new(WARN_EVERY);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = every.tick() => {}
        }
        let now = SystemTime::now();
        let polled = scraper.poll(now).await;
        // Pods answering and awake are the replicas running, for the replicas panel; not history.
        let round = &scraper.last_round;
        store.set_latest(&pods_series(&key), now, round.serving() as f64);
        sinks.health.update(&key, |h| {
            h.targets = Some(round.targets as u32);
            h.answered = Some(round.answered as u32);
            h.asleep = Some(round.asleep as u32);
            h.failures = round.failures.iter().map(|(k, n)| (k.as_str().to_string(), *n as u32)).collect();
        });
        match polled {
            Ok(signals) => {
                for s in &w.signals {
                    if let Some(v) = signals.get(*s) {
                        store.record(&series(&key, *s), now, v);
                    }
                }
            }
            Err(e) => {
                crate::telemetry::source_error(&key);
                if let Some(held) = failing.allow(Instant::now()) {
                    warn!(workload = %key, error = %e, held_back = held, "poll failed");
                }
            }
        }
    }
}

/// Start simulated pods on loopback, then scrape them like real ones.
async fn simulated(
    w: &Workload,
    c: &SimulatedConfig,
    sinks: &Sinks,
    shutdown: &CancellationToken,
) -> Result<(), String> {
    let fleet = with_history(w, c, &sinks.store).await?;
    let server = SimServer::start(fleet, IpAddr::V4(Ipv4Addr::LOCALHOST), shutdown.clone())
        .await
        .map_err(|e| format!("starting simulated vLLM pods: {e}"))?;
    info!(workload = %w.key(), pods = ?server.urls, "simulated vLLM pods serving /metrics");
    let scrape = ScrapeConfig {
        targets: server.urls.clone(),
        dns: None,
        interval_secs: c.interval_secs,
        timeout_secs: 2.0,
        concurrency: 16,
        model_name: None,
    };
    scrape_loop(w, scrape, sinks, shutdown).await
}

/// The workload's fleet, started `backfill_secs` ago and run to now off the
/// async workers, its readings on the way written into the store as history.
async fn with_history(w: &Workload, c: &SimulatedConfig, store: &Arc<Store>) -> Result<Fleet, String> {
    let res = store.resolution();
    // The past starts on a bucket boundary, so each reading fills one bucket.
    let now = unix(SystemTime::now());
    let from = if c.backfill_secs > 0.0 {
        crate::sources::simulated::bucket_start(UNIX_EPOCH + Duration::from_secs_f64(now - c.backfill_secs), res)
    } else {
        now
    };
    let mut fleet = Fleet::from_config(c.fleet.clone(), from)?;
    if c.backfill_secs <= 0.0 {
        return Ok(fleet);
    }
    let (key, signals, store) = (w.key(), w.signals.clone(), store.clone());
    tokio::task::spawn_blocking(move || {
        let history = crate::sources::simulated::history(&mut fleet, from, now, res.as_secs_f64());
        let start = UNIX_EPOCH + Duration::from_secs_f64(from);
        for s in &signals {
            let values: Vec<f64> = history.iter().map(|h| h.get(*s).unwrap_or(f64::NAN)).collect();
            // Gaps only: what the store already holds for these buckets wins.
            if let Err(e) = store.backfill(&series(&key, *s), start, &values) {
                warn!(workload = %key, signal = %s, error = %e, "writing simulated history failed");
            }
        }
        info!(workload = %key, buckets = history.len(), secs = now - from, "backfilled the simulated fleet's past");
        fleet
    })
    .await
    .map_err(|e| format!("computing simulated history: {e}"))
}

async fn prometheus_loop(
    w: &Workload,
    c: &PrometheusConfig,
    sinks: &Sinks,
    shutdown: &CancellationToken,
) -> Result<(), String> {
    let store = &sinks.store;
    let client = prometheus::Client::new(c);
    let res = store.resolution().as_secs_f64();
    let key = w.key();
    // Next bucket to write, per signal: after what the store has, within the backfill window.
    let mut next: HashMap<Signal, i64> = HashMap::new();
    let earliest = ((unix(SystemTime::now()) - c.backfill_days * 86_400.0) / res).floor() as i64;
    for s in &w.signals {
        let have = store.last_bucket(&series(&key, *s)).map_err(|e| e.to_string())?;
        let from = have.map(|t| (unix(t) / res).round() as i64 + 1).unwrap_or(earliest).max(earliest);
        next.insert(*s, from);
    }
    let mut every = tokio::time::interval(Duration::from_secs_f64(c.interval_secs));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut first = true;
    let (mut range_failing, mut instant_failing) = (Throttle::new(WARN_EVERY), Throttle::new(WARN_EVERY));
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = every.tick() => {}
        }
        let now = SystemTime::now();
        // Buckets that ended at least query_delay ago are complete in Prometheus.
        let last_complete = ((unix(now) - c.query_delay_secs) / res).floor() as i64 - 1;
        // Buckets that ended within LATE_DATA_SECS are read again each poll until they settle.
        let reread_from = first_unsettled(unix(now), res);
        for s in &w.signals {
            let query = c.query(*s);
            let name = series(&key, *s);
            let from = next[s].min(reread_from);
            let mut written = 0usize;
            for (a, b) in chunks(from, last_complete, c.max_points_per_query) {
                match bucket_values(&client, &query, a, b, res).await {
                    Ok(values) => {
                        written += values.iter().filter(|v| v.is_finite()).count();
                        let at = |i: usize| UNIX_EPOCH + Duration::from_secs_f64((a + i as i64) as f64 * res);
                        // Settled buckets of the first poll are bulk history: one durable
                        // transaction per chunk, never over what the store already has.
                        let bulk = if first { (reread_from - a).clamp(0, values.len() as i64) as usize } else { 0 };
                        if bulk > 0 {
                            if let Err(e) = backfill_off_runtime(store, &name, at(0), values[..bulk].to_vec()).await {
                                warn!(workload = %key, signal = %s, error = %e, "writing history failed");
                                break;
                            }
                        }
                        // The rest, a few buckets each poll: each bucket is one evaluation, the
                        // latest answer wins; made durable by the periodic flush.
                        for (i, v) in values.iter().enumerate().skip(bulk).filter(|(_, v)| v.is_finite()) {
                            store.replace(&name, at(i), *v);
                        }
                        next.insert(*s, b + 1);
                    }
                    Err(e) => {
                        // Retried from the same bucket next poll: history is not skipped.
                        crate::telemetry::source_error(&key);
                        if let Some(held) = range_failing.allow(Instant::now()) {
                            warn!(workload = %key, signal = %s, error = %e, held_back = held, "query_range failed");
                        }
                        break;
                    }
                }
            }
            if first && written > 0 {
                info!(workload = %key, signal = %s, buckets = written, "backfilled history from Prometheus");
            }
            match client.instant(&query, now).await {
                Ok(got) => {
                    if let Some(v) = got.filter(|v| v.is_finite()) {
                        store.set_latest(&name, now, v);
                    }
                    note_empty(&sinks.health, &key, *s, &query, got.is_none(), now);
                }
                Err(e) => {
                    crate::telemetry::source_error(&key);
                    if let Some(held) = instant_failing.allow(Instant::now()) {
                        warn!(workload = %key, signal = %s, error = %e, held_back = held, "instant query failed");
                    }
                }
            }
        }
        first = false;
    }
}

/// [`Store::backfill`] commits a durable redb transaction: on the blocking
/// pool, so a slow disk never holds an async worker (and the answers it serves).
async fn backfill_off_runtime(
    store: &Arc<Store>,
    name: &str,
    start: SystemTime,
    values: Vec<f64>,
) -> Result<(), String> {
    let (store, name) = (store.clone(), name.to_string());
    match tokio::task::spawn_blocking(move || store.backfill(&name, start, &values)).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(e) => Err(format!("the backfill task failed: {e}")),
    }
}

/// Record whether `signal`'s instant query matched no series this poll: a
/// run of empty answers is reported with the query (a wrong metric name or
/// selector looks exactly like this), and logged once when it has lasted
/// [`EMPTY_LOG_SECS`].
fn note_empty(health: &SourceHealth, key: &str, signal: Signal, query: &str, empty: bool, now: SystemTime) {
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

/// A Prometheus-compatible server may still change a bucket this long after
/// it ended: VictoriaMetrics answers for its newest 30 s (`-search.latencyOffset`)
/// from samples not all searchable yet, remote write and Mimir or Thanos
/// ingestion land late. Such buckets are read again each poll until older.
const LATE_DATA_SECS: f64 = 120.0;

/// The first bucket (of `res` seconds) that ended less than [`LATE_DATA_SECS`] before `now`.
fn first_unsettled(now: f64, res: f64) -> i64 {
    ((now - LATE_DATA_SECS) / res).floor() as i64
}

/// The running collectors, restarted on reload when their workload changes.
#[derive(Default)]
pub struct Collectors {
    running: HashMap<String, (Arc<Workload>, CancellationToken, JoinHandle<()>)>,
}

impl Collectors {
    /// Make the running set match `workloads`.
    pub fn apply(&mut self, workloads: &[Arc<Workload>], sinks: &Sinks, shutdown: &CancellationToken) {
        let wanted: HashMap<String, &Arc<Workload>> = workloads.iter().map(|w| (w.key(), w)).collect();
        self.running.retain(|key, (w, token, _)| {
            let keep = wanted.get(key).is_some_and(|n| n.source == w.source && n.signals == w.signals);
            if !keep {
                token.cancel();
                sinks.health.remove(key);
            }
            keep
        });
        for (key, w) in wanted {
            self.running.entry(key).or_insert_with(|| {
                let token = shutdown.child_token();
                let task = tokio::spawn(run(w.clone(), sinks.clone(), token.clone()));
                (w.clone(), token, task)
            });
        }
    }

    /// Wait for every collector to stop (after the shutdown token fired).
    pub(crate) async fn join(self) {
        for (_, (_, _, task)) in self.running {
            let _ = task.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_of_the_last_two_minutes_are_unsettled() {
        // 60 s buckets; at 330 s, bucket 3 (180..240) ended 90 s ago, bucket 2 150 s ago.
        assert_eq!(first_unsettled(330.0, 60.0), 3);
        assert_eq!(first_unsettled(360.0, 60.0), 4, "bucket 3 ended exactly 120 s ago: settled");
        assert_eq!(first_unsettled(125.0, 10.0), 0);
    }
}
