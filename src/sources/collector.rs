//! Collectors: one task per workload that polls its source on the source's
//! interval and writes what it reads into the store. The control loop only
//! reads the store, so a slow source never delays a decision.

use std::{
    collections::HashMap,
    net::{IpAddr, Ipv4Addr},
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{
    prometheus::{self, bucket_values, chunks, PrometheusConfig},
    scrape::{ScrapeConfig, Scraper},
    SimulatedConfig, SourceConfig,
};
use crate::{
    config::Workload,
    sources::Signal,
    store::Store,
    vllm_sim::{server::SimServer, Fleet},
};

/// The store series of a workload's signal: `namespace/name/signal`.
pub fn series(workload_key: &str, signal: Signal) -> String {
    format!("{workload_key}/{signal}")
}

/// The latest-only series of how many pods answered a workload's scrape.
pub fn pods_series(workload_key: &str) -> String {
    format!("{workload_key}/pods")
}

fn unix(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64()
}

/// Run one workload's source until `shutdown`.
pub async fn run(workload: Arc<Workload>, store: Arc<Store>, shutdown: CancellationToken) {
    let result = match &workload.source {
        SourceConfig::Scrape(c) => scrape_loop(&workload, c.clone(), &store, &shutdown).await,
        SourceConfig::Simulated(c) => simulated(&workload, c, &store, &shutdown).await,
        SourceConfig::Prometheus(c) => prometheus_loop(&workload, c, &store, &shutdown).await,
    };
    if let Err(e) = result {
        warn!(workload = %workload.key(), error = %e, "collector stopped; its signals will go stale");
    }
}

async fn scrape_loop(
    w: &Workload,
    config: ScrapeConfig,
    store: &Store,
    shutdown: &CancellationToken,
) -> Result<(), String> {
    let mut scraper = Scraper::new(config);
    let mut every = tokio::time::interval(scraper.interval());
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let key = w.key();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = every.tick() => {}
        }
        let now = SystemTime::now();
        let polled = scraper.poll(now).await;
        // Pods answering are the replicas running, for the replicas panel; not history.
        store.set_latest(&pods_series(&key), now, scraper.last_round.1 as f64);
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
                warn!(workload = %key, error = %e, "poll failed")
            }
        }
    }
}

/// Start simulated pods on loopback, then scrape them like real ones.
async fn simulated(
    w: &Workload,
    c: &SimulatedConfig,
    store: &Store,
    shutdown: &CancellationToken,
) -> Result<(), String> {
    let fleet = Fleet::from_config(c.fleet.clone(), unix(SystemTime::now()))?;
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
    scrape_loop(w, scrape, store, shutdown).await
}

async fn prometheus_loop(
    w: &Workload,
    c: &PrometheusConfig,
    store: &Store,
    shutdown: &CancellationToken,
) -> Result<(), String> {
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
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = every.tick() => {}
        }
        let now = SystemTime::now();
        // Buckets that ended at least query_delay ago are complete in Prometheus.
        let last_complete = ((unix(now) - c.query_delay_secs) / res).floor() as i64 - 1;
        for s in &w.signals {
            let query = c.query(*s);
            let name = series(&key, *s);
            let from = next[s];
            let mut written = 0usize;
            for (a, b) in chunks(from, last_complete, c.max_points_per_query) {
                match bucket_values(&client, &query, a, b, res).await {
                    Ok(values) => {
                        written += values.iter().filter(|v| v.is_finite()).count();
                        let start = UNIX_EPOCH + Duration::from_secs_f64(a as f64 * res);
                        if first {
                            // Bulk history: one durable transaction per chunk.
                            if let Err(e) = store.backfill(&name, start, &values) {
                                warn!(workload = %key, signal = %s, error = %e, "writing history failed");
                                break;
                            }
                        } else {
                            // A few new buckets each poll: made durable by the periodic flush,
                            // not an fsync per workload and signal.
                            for (i, v) in values.iter().enumerate().filter(|(_, v)| v.is_finite()) {
                                store.record(&name, start + Duration::from_secs_f64(i as f64 * res), *v);
                            }
                        }
                        next.insert(*s, b + 1);
                    }
                    Err(e) => {
                        // Retried from the same bucket next poll: history is not skipped.
                        crate::telemetry::source_error(&key);
                        warn!(workload = %key, signal = %s, error = %e, "query_range failed");
                        break;
                    }
                }
            }
            if first && written > 0 {
                info!(workload = %key, signal = %s, buckets = written, "backfilled history from Prometheus");
            }
            match client.instant(&query, now).await {
                Ok(Some(v)) if v.is_finite() => store.set_latest(&name, now, v),
                Ok(_) => {}
                Err(e) => {
                    crate::telemetry::source_error(&key);
                    warn!(workload = %key, signal = %s, error = %e, "instant query failed")
                }
            }
        }
        first = false;
    }
}

/// The running collectors, restarted on reload when their workload changes.
#[derive(Default)]
pub struct Collectors {
    running: HashMap<String, (Arc<Workload>, CancellationToken, JoinHandle<()>)>,
}

impl Collectors {
    /// Make the running set match `workloads`.
    pub fn apply(&mut self, workloads: &[Arc<Workload>], store: &Arc<Store>, shutdown: &CancellationToken) {
        let wanted: HashMap<String, &Arc<Workload>> = workloads.iter().map(|w| (w.key(), w)).collect();
        self.running.retain(|key, (w, token, _)| {
            let keep = wanted.get(key).is_some_and(|n| n.source == w.source && n.signals == w.signals);
            if !keep {
                token.cancel();
            }
            keep
        });
        for (key, w) in wanted {
            self.running.entry(key).or_insert_with(|| {
                let token = shutdown.child_token();
                let task = tokio::spawn(run(w.clone(), store.clone(), token.clone()));
                (w.clone(), token, task)
            });
        }
    }

    /// Wait for every collector to stop (after the shutdown token fired).
    pub async fn join(self) {
        for (_, (_, _, task)) in self.running {
            let _ = task.await;
        }
    }
}
