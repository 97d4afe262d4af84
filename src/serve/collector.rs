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

pub use super::sinks::Sinks;
use super::sinks::{report_invalid, WARN_EVERY};
use crate::{
    fake_vllm::{server::SimServer, Fleet},
    sources::{
        prometheus::PrometheusConfig,
        scrape::{ScrapeConfig, Scraper},
        Signal, SimulatedConfig, SourceConfig,
    },
    store::Store,
    telemetry::Throttle,
    workload::{pods_series, series, Workload},
};

/// Run one workload's source until `shutdown`.
pub(crate) async fn run(workload: Arc<Workload>, sinks: Sinks, shutdown: CancellationToken) {
    let result = match &workload.source {
        SourceConfig::Scrape(c) => scrape_loop(&workload, c.clone(), &sinks, &shutdown).await,
        SourceConfig::Simulated(c) => simulated(&workload, c, &sinks, &shutdown).await,
        // Collectors::apply runs Prometheus workloads in batches, never here.
        SourceConfig::Prometheus(c) => {
            super::prom_poll::run(vec![workload.clone()], c.shared(), sinks.clone(), shutdown.clone()).await;
            Ok(())
        }
    };
    if let Err(e) = result {
        warn!(workload = %workload.key(), error = %e, "collector stopped; its signals will go stale");
        // Nothing more will load: the workload stops waiting for it (and has no reading, so no answer).
        if !shutdown.is_cancelled() {
            sinks.health.update(&workload.key(), |h| h.first_poll_done = true);
        }
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
    let mut invalid_log = Throttle::new(WARN_EVERY);
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
        // No values on a failed poll, so none invalid: the failure is the reason then.
        let invalid = match polled {
            Ok(signals) => {
                for s in &w.signals {
                    if let Some(v) = signals.get(*s) {
                        store.record(&series(&key, *s), now, v);
                    }
                }
                report_invalid(&key, &w.signals, signals.invalid(), &mut invalid_log)
            }
            Err(e) => {
                crate::telemetry::source_error(&key);
                if let Some(held) = failing.allow(Instant::now()) {
                    warn!(workload = %key, error = %e, held_back = held, "poll failed");
                }
                Vec::new()
            }
        };
        // One update a poll, after the readings are in the store, so the control loop's first decision sees them.
        sinks.health.update(&key, |h| {
            h.targets = Some(round.targets as u32);
            h.answered = Some(round.answered as u32);
            h.asleep = Some(round.asleep as u32);
            h.failures = round.failures.iter().map(|(k, n)| (k.as_str().to_string(), *n as u32)).collect();
            h.invalid = invalid.into_iter().collect();
            h.first_poll_done = true;
        });
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
        max_body_bytes: crate::sources::scrape::default_max_body_bytes(),
    };
    scrape_loop(w, scrape, sinks, shutdown).await
}

/// The workload's fleet, started `backfill_secs` ago and run to now off the
/// async workers, its readings on the way written into the store as history.
async fn with_history(w: &Workload, c: &SimulatedConfig, store: &Arc<Store>) -> Result<Fleet, String> {
    let res = store.resolution();
    // The past starts on a bucket boundary, so each reading fills one bucket.
    let now = crate::time::unix(SystemTime::now());
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

/// The running collectors, restarted on reload when their workload changes:
/// one per scraped or simulated workload, one per Prometheus source (its URL
/// and poll settings) for all the workloads it serves.
#[derive(Default)]
pub struct Collectors {
    running: HashMap<String, (Arc<Workload>, CancellationToken, JoinHandle<()>)>,
    prometheus: Vec<PromGroup>,
}

/// One Prometheus source's collector: its settings and workloads (source and signals).
struct PromGroup {
    cfg: PrometheusConfig,
    members: Vec<(String, SourceConfig, Vec<Signal>)>,
    token: CancellationToken,
    task: JoinHandle<()>,
}

impl Collectors {
    /// Make the running set match `workloads`.
    pub fn apply(&mut self, workloads: &[Arc<Workload>], sinks: &Sinks, shutdown: &CancellationToken) {
        let (prom, workloads): (Vec<Arc<Workload>>, Vec<Arc<Workload>>) =
            workloads.iter().cloned().partition(|w| matches!(w.source, SourceConfig::Prometheus(_)));
        self.apply_prometheus(&prom, sinks, shutdown);
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

    /// One collector per Prometheus source; a source whose workloads changed starts over
    /// (from what the store has: history is not read twice).
    fn apply_prometheus(&mut self, workloads: &[Arc<Workload>], sinks: &Sinks, shutdown: &CancellationToken) {
        let mut groups: Vec<(PrometheusConfig, Vec<Arc<Workload>>)> = Vec::new();
        for w in workloads {
            let SourceConfig::Prometheus(c) = &w.source else { continue };
            let shared = c.shared();
            match groups.iter_mut().find(|(g, _)| *g == shared) {
                Some((_, ws)) => ws.push(w.clone()),
                None => groups.push((shared, vec![w.clone()])),
            }
        }
        let member = |w: &Arc<Workload>| (w.key(), w.source.clone(), w.signals.clone());
        let mut old = std::mem::take(&mut self.prometheus);
        for (cfg, ws) in groups {
            let members: Vec<_> = ws.iter().map(member).collect();
            if let Some(k) = old.iter().position(|g| g.cfg == cfg && g.members == members) {
                self.prometheus.push(old.swap_remove(k));
                continue;
            }
            let token = shutdown.child_token();
            let task = tokio::spawn(super::prom_poll::run(ws, cfg.clone(), sinks.clone(), token.clone()));
            self.prometheus.push(PromGroup { cfg, members, token, task });
        }
        let kept: std::collections::HashSet<&str> =
            self.prometheus.iter().flat_map(|g| g.members.iter().map(|m| m.0.as_str())).collect();
        for g in old {
            g.token.cancel();
            for (key, ..) in g.members.iter().filter(|m| !kept.contains(m.0.as_str())) {
                sinks.health.remove(key);
            }
        }
    }

    /// Wait for every collector to stop (after the shutdown token fired).
    pub(crate) async fn join(self) {
        for (_, (_, _, task)) in self.running {
            let _ = task.await;
        }
        for g in self.prometheus {
            let _ = g.task.await;
        }
    }
}
