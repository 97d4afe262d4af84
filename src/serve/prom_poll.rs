//! The Prometheus collector: one task per Prometheus-compatible source (URL
//! and poll settings) reads every workload on it, batched
//! ([`crate::sources::promql`]): one range and one instant query per signal
//! per batch of up to `max_workloads_per_query` workloads, not per workload.
//!
//! **Aligned polls.** Polls run on the wall-clock grid of `interval_secs`
//! (Unix time), `query_delay_secs` after each grid point, and evaluate at the
//! grid point itself. Replicas of Foresight on one Prometheus so ask the
//! same questions at the same instants and get the same answers, whenever
//! each started; a replica starting late reads the grid points of the
//! scale-down window it missed with one range query, so its hold looks
//! back over the same readings as one that was running.
//!
//! **Limits.** A range query asks for at most a million points (workloads
//! times steps) and `max_points_per_query` steps per series. A query the
//! server refuses for its size (or that times out) is split, time first,
//! then workloads, and tried again.

use std::{
    collections::{BTreeMap, HashMap},
    future::Future,
    pin::Pin,
    sync::Arc,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::sinks::{note_empty, note_invalid, Sinks, WARN_EVERY};
use crate::{
    sources::{
        prometheus::{bucket_values, chunks, Client, PromError, PrometheusConfig, LATE_DATA_SECS},
        promql::{batch_selector, batchable, fill, keys, Key},
        Signal, SourceConfig,
    },
    telemetry::Throttle,
    time::unix,
    workload::{series, Workload},
};

/// Points one range query may return (series times steps): about 30 MB of JSON.
const MAX_POINTS_PER_RESPONSE: usize = 1_000_000;

/// Batches queried at once within a poll.
const PARALLEL_QUERIES: usize = 4;

fn at_unix(secs: f64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs_f64(secs.max(0.0))
}

/// The first bucket (of `res` seconds) that ended less than [`LATE_DATA_SECS`] before `now`.
pub(crate) fn first_unsettled(now: f64, res: f64) -> i64 {
    ((now - LATE_DATA_SECS) / res).floor() as i64
}

/// The grid point a poll at `now` evaluates: the latest multiple of
/// `interval` at least `delay` seconds ago.
pub(crate) fn grid_point(now: f64, interval: f64, delay: f64) -> f64 {
    ((now - delay) / interval).floor() * interval
}

/// One signal's query for some workloads: a template, and how they are told apart.
struct Batch {
    signal: Signal,
    template: String,
    /// The label that tells the workloads apart and the matchers they
    /// share; `None` for a workload queried alone with its own selector.
    by: Option<(String, String)>,
    /// Indices into [`Ctx::members`], sorted by label value.
    members: Vec<usize>,
}

struct Member {
    key: String,
    selector: String,
    /// The label value that is this workload's (empty when queried alone).
    value: String,
}

struct Ctx {
    client: Client,
    cfg: PrometheusConfig,
    members: Vec<Member>,
    sinks: Sinks,
    res: f64,
}

/// The batches of `workloads` (all on one source), per signal they record.
fn plan(workloads: &[Arc<Workload>], cfg: &PrometheusConfig) -> (Vec<Member>, Vec<Batch>) {
    let configs: Vec<&PrometheusConfig> = workloads
        .iter()
        .map(|w| match &w.source {
            SourceConfig::Prometheus(c) => c,
            _ => cfg,
        })
        .collect();
    let selectors: Vec<&str> = configs.iter().map(|c| c.selector.as_str()).collect();
    let batch_keys = keys(&selectors);
    let members = workloads
        .iter()
        .zip(&configs)
        .zip(&batch_keys)
        .map(|((w, c), k)| Member {
            key: w.key(),
            selector: c.selector.clone(),
            value: k.as_ref().map(|k| k.value.clone()).unwrap_or_default(),
        })
        .collect();
    let mut grouped: HashMap<(Signal, String, String, String), Vec<usize>> = HashMap::new();
    let mut batches = Vec::new();
    for (i, w) in workloads.iter().enumerate() {
        for &signal in &w.signals {
            let template = configs[i].template(signal);
            match &batch_keys[i] {
                Some(Key { label, shared, .. }) if batchable(&template) => {
                    grouped.entry((signal, template, label.clone(), shared.clone())).or_default().push(i);
                }
                _ => batches.push(Batch { signal, template, by: None, members: vec![i] }),
            }
        }
    }
    let value = |i: &usize| batch_keys[*i].as_ref().map(|k| k.value.clone()).unwrap_or_default();
    let mut grouped: Vec<_> = grouped.into_iter().collect();
    grouped.sort_by(|a, b| a.0.cmp(&b.0));
    for ((signal, template, label, shared), mut idx) in grouped {
        idx.sort_by_key(value);
        for part in idx.chunks(cfg.max_workloads_per_query.max(1)) {
            batches.push(Batch {
                signal,
                template: template.clone(),
                by: Some((label.clone(), shared.clone())),
                members: part.to_vec(),
            });
        }
    }
    (members, batches)
}

impl Ctx {
    /// The query for `idx` of `batch`, and the label its answers are told
    /// apart by. One workload is asked with its own selector, as if alone.
    fn query(&self, batch: &Batch, idx: &[usize]) -> (String, Option<String>) {
        match (&batch.by, idx) {
            (Some((label, shared)), [_, _, ..]) => {
                let mut values: Vec<&str> = idx.iter().map(|i| self.members[*i].value.as_str()).collect();
                values.dedup();
                let selector = batch_selector(label, shared, &values);
                (fill(&batch.template, &selector, &self.cfg.rate_window, Some(label)), Some(label.clone()))
            }
            _ => {
                let selector = &self.members[idx[0]].selector;
                (fill(&batch.template, selector, &self.cfg.rate_window, None), None)
            }
        }
    }

    /// `answers` handed to each of `idx`: by its label value, or the one
    /// answer (`""`) to the workload asked alone.
    fn assign<T: Clone>(&self, idx: &[usize], label: Option<&str>, answers: HashMap<String, T>) -> Vec<(usize, T)> {
        let key = |i: usize| if label.is_some() { self.members[i].value.as_str() } else { "" };
        idx.iter().filter_map(|i| answers.get(key(*i)).map(|a| (*i, a.clone()))).collect()
    }
}

type Answers<T> = Result<Vec<(usize, T)>, PromError>;

/// Per-bucket values of buckets [a, b] for `idx`; split and retried when refused for size.
fn range<'a>(
    ctx: &'a Ctx,
    batch: &'a Batch,
    idx: &'a [usize],
    a: i64,
    b: i64,
) -> Pin<Box<dyn Future<Output = Answers<Vec<f64>>> + Send + 'a>> {
    Box::pin(async move {
        let (query, label) = ctx.query(batch, idx);
        match bucket_values(&ctx.client, &query, label.as_deref(), a, b, ctx.res).await {
            Ok(answers) => Ok(ctx.assign(idx, label.as_deref(), answers)),
            Err(e) if e.is_limit() && b > a => {
                let mid = a + (b - a) / 2;
                let first = range(ctx, batch, idx, a, mid).await?;
                let mut second: HashMap<usize, Vec<f64>> =
                    range(ctx, batch, idx, mid + 1, b).await?.into_iter().collect();
                let mut first: HashMap<usize, Vec<f64>> = first.into_iter().collect();
                // Joined per workload: the first half's values, then the second's, gaps where one had none.
                let gap = |n: i64| vec![f64::NAN; n as usize];
                let mut out = Vec::new();
                for i in idx {
                    let (x, y) = (first.remove(i), second.remove(i));
                    if x.is_some() || y.is_some() {
                        let mut v = x.unwrap_or_else(|| gap(mid - a + 1));
                        v.extend(y.unwrap_or_else(|| gap(b - mid)));
                        out.push((*i, v));
                    }
                }
                Ok(out)
            }
            Err(e) if e.is_limit() && idx.len() > 1 => {
                let (l, r) = idx.split_at(idx.len() / 2);
                let mut out = range(ctx, batch, l, a, b).await?;
                out.extend(range(ctx, batch, r, a, b).await?);
                Ok(out)
            }
            Err(e) => Err(e),
        }
    })
}

/// The instant values at `at` for `idx`; split and retried when refused for size.
fn instant<'a>(
    ctx: &'a Ctx,
    batch: &'a Batch,
    idx: &'a [usize],
    at: SystemTime,
) -> Pin<Box<dyn Future<Output = Answers<f64>> + Send + 'a>> {
    Box::pin(async move {
        let (query, label) = ctx.query(batch, idx);
        match ctx.client.instant(&query, at, label.as_deref()).await {
            Ok(answers) => Ok(ctx.assign(idx, label.as_deref(), answers)),
            Err(e) if e.is_limit() && idx.len() > 1 => {
                let (l, r) = idx.split_at(idx.len() / 2);
                let mut out = instant(ctx, batch, l, at).await?;
                out.extend(instant(ctx, batch, r, at).await?);
                Ok(out)
            }
            Err(e) => Err(e),
        }
    })
}

/// One batch's state between polls: the next bucket to write per member.
struct BatchState {
    next: Vec<i64>,
    /// The hold window's past readings are in.
    seeded: bool,
    range_failing: Throttle,
    instant_failing: Throttle,
    /// Invalid instant readings, logged at most once a minute per batch.
    invalid_log: Throttle,
    /// Members (positions in the batch) whose last instant reading was
    /// invalid: only they and new ones touch the source health, not every
    /// member every poll.
    invalid_at: std::collections::HashSet<usize>,
    /// A poll has read this batch's history through its last complete bucket
    /// and its instant reading: its members' history is loaded.
    loaded: bool,
}

/// Poll `batch` for grid point `g`: history since each member's next bucket
/// (bulk on the first poll), then the reading at `g`.
async fn poll_batch(ctx: Arc<Ctx>, batch: Arc<Batch>, mut st: BatchState, g: f64, first: bool) -> BatchState {
    let (res, store) = (ctx.res, &ctx.sinks.store);
    let last_complete = (g / res).floor() as i64 - 1;
    let reread_from = first_unsettled(g, res);
    let from = st.next.iter().copied().min().unwrap_or(reread_from).min(reread_from);
    let names: Vec<String> = batch.members.iter().map(|i| series(&ctx.members[*i].key, batch.signal)).collect();
    let pos: HashMap<usize, usize> = batch.members.iter().enumerate().map(|(p, i)| (*i, p)).collect();
    let per_chunk = (MAX_POINTS_PER_RESPONSE / batch.members.len().max(1)).clamp(1, ctx.cfg.max_points_per_query);
    let mut written = 0usize;
    let mut range_ok = true;
    for (a, b) in chunks(from, last_complete, per_chunk) {
        match range(&ctx, &batch, &batch.members, a, b).await {
            Ok(mut answers) => {
                // The validity rule, as for every source: an invalid value is a gap, counted.
                // (A NaN here is also how a bucket without a point reads, so only the rest is counted.)
                for (i, values) in &mut answers {
                    for v in values.iter_mut().filter(|v| !v.is_nan()) {
                        if let Err(why) = batch.signal.check(*v) {
                            let key = &ctx.members[*i].key;
                            crate::telemetry::invalid_reading(key, batch.signal.as_str(), why.as_str());
                            *v = f64::NAN;
                        }
                    }
                }
                let at = |k: i64| at_unix(k as f64 * res);
                // Settled buckets of the first poll are bulk history: one durable
                // transaction for the whole batch, never over what the store has.
                let bulk = if first { (reread_from - a).clamp(0, b - a + 1) as usize } else { 0 };
                let mut items = Vec::new();
                for (i, values) in &answers {
                    let p = pos[i];
                    written += values.iter().filter(|v| v.is_finite()).count();
                    if bulk > 0 {
                        items.push((names[p].clone(), values[..bulk.min(values.len())].to_vec()));
                    }
                    // The rest, a few buckets each poll: each bucket is one evaluation, the
                    // latest answer wins; made durable by the periodic flush.
                    for (k, v) in values
                        .iter()
                        .enumerate()
                        .skip(bulk)
                        .filter(|(k, v)| v.is_finite() && a + *k as i64 >= st.next[p].min(reread_from))
                    {
                        store.replace(&names[p], at(a + k as i64), *v);
                    }
                }
                if !items.is_empty() {
                    let (store, start) = (store.clone(), at(a));
                    let wrote = tokio::task::spawn_blocking(move || {
                        let refs: Vec<(&str, SystemTime, &[f64])> =
                            items.iter().map(|(n, v)| (n.as_str(), start, v.as_slice())).collect();
                        store.backfill_many(&refs)
                    })
                    .await;
                    if let Some(e) = match wrote {
                        Ok(r) => r.err().map(|e| e.to_string()),
                        Err(e) => Some(format!("the backfill task failed: {e}")),
                    } {
                        warn!(signal = %batch.signal, workloads = batch.members.len(), error = %e, "writing history failed");
                        range_ok = false;
                        break;
                    }
                }
                for n in &mut st.next {
                    *n = (*n).max(b + 1);
                }
            }
            Err(e) => {
                // Retried from the same bucket next poll: history is not skipped.
                for i in &batch.members {
                    crate::telemetry::source_error(&ctx.members[*i].key);
                }
                if let Some(held) = st.range_failing.allow(Instant::now()) {
                    warn!(signal = %batch.signal, workloads = batch.members.len(), first = %ctx.members[batch.members[0]].key, error = %e, held_back = held, "query_range failed");
                }
                range_ok = false;
                break;
            }
        }
    }
    if first && written > 0 {
        info!(signal = %batch.signal, workloads = batch.members.len(), buckets = written, "backfilled history from Prometheus");
    }
    // A replica that starts now reads the grid points of the hold window it
    // missed, so its scale-down hold looks back over what a running one saw.
    let keep = store.recent_window().as_secs_f64();
    let interval = ctx.cfg.interval_secs;
    let start = grid_point(g - keep + interval, interval, 0.0);
    if !st.seeded && start <= g - interval {
        let (query, label) = ctx.query(&batch, &batch.members);
        if let Ok(answers) = ctx.client.range(&query, start, g - interval, interval, label.as_deref()).await {
            st.seeded = true;
            for (i, points) in ctx.assign(&batch.members, label.as_deref(), answers) {
                for (t, v) in points.into_iter().filter(|(_, v)| batch.signal.check(*v).is_ok()) {
                    store.set_latest(&names[pos[&i]], at_unix(t), v);
                }
            }
        }
    }
    let now = at_unix(g);
    match instant(&ctx, &batch, &batch.members, now).await {
        Ok(answers) => {
            st.loaded |= range_ok;
            let got: HashMap<usize, f64> = answers.into_iter().collect();
            for (p, i) in batch.members.iter().enumerate() {
                let v = got.get(i).copied();
                let mut invalid = BTreeMap::new();
                // NaN is how PromQL says "nothing to divide" (a quantile or mean of an idle
                // fleet): no value, as a scraped histogram with no observations has none.
                match v.filter(|v| !v.is_nan()).map(|v| batch.signal.check(v)) {
                    Some(Ok(v)) => store.set_latest(&names[p], now, v),
                    Some(Err(why)) => {
                        invalid.insert(batch.signal, why);
                    }
                    None => {}
                }
                if !invalid.is_empty() || st.invalid_at.remove(&p) {
                    note_invalid(
                        &ctx.sinks.health,
                        &ctx.members[*i].key,
                        &[batch.signal],
                        &invalid,
                        &mut st.invalid_log,
                    );
                }
                if !invalid.is_empty() {
                    st.invalid_at.insert(p);
                }
                // The query is only shown for a workload that matched nothing.
                let query = if v.is_none() { ctx.query(&batch, &[*i]).0 } else { String::new() };
                note_empty(&ctx.sinks.health, &ctx.members[*i].key, batch.signal, &query, v.is_none(), now);
            }
        }
        Err(e) => {
            for i in &batch.members {
                crate::telemetry::source_error(&ctx.members[*i].key);
            }
            if let Some(held) = st.instant_failing.allow(Instant::now()) {
                warn!(signal = %batch.signal, workloads = batch.members.len(), error = %e, held_back = held, "instant query failed");
            }
            // No values this poll, so none invalid: the failure is the reason now.
            for p in st.invalid_at.drain() {
                ctx.sinks.health.update(&ctx.members[batch.members[p]].key, |h| {
                    h.invalid.remove(&batch.signal);
                });
            }
        }
    }
    st
}

/// Poll every workload of one source until `shutdown`.
pub(crate) async fn run(
    workloads: Vec<Arc<Workload>>,
    cfg: PrometheusConfig,
    sinks: Sinks,
    shutdown: CancellationToken,
) {
    let res = sinks.store.resolution().as_secs_f64();
    let (members, batches) = plan(&workloads, &cfg);
    info!(url = %cfg.url, workloads = workloads.len(), queries_per_poll = 2 * batches.len(), "polling Prometheus");
    let earliest = ((unix(SystemTime::now()) - cfg.backfill_days * 86_400.0) / res).floor() as i64;
    let mut states = Vec::new();
    for b in &batches {
        let next = b
            .members
            .iter()
            .map(|i| {
                let have = sinks.store.last_bucket(&series(&members[*i].key, b.signal)).ok().flatten();
                have.map(|t| (unix(t) / res).round() as i64 + 1).unwrap_or(earliest).max(earliest)
            })
            .collect();
        states.push(Some(BatchState {
            next,
            seeded: false,
            range_failing: Throttle::new(WARN_EVERY),
            instant_failing: Throttle::new(WARN_EVERY),
            invalid_log: Throttle::new(WARN_EVERY),
            invalid_at: Default::default(),
            loaded: false,
        }));
    }
    let ctx = Arc::new(Ctx { client: Client::new(&cfg), cfg: cfg.clone(), members, sinks, res });
    let batches: Vec<Arc<Batch>> = batches.into_iter().map(Arc::new).collect();
    let (interval, delay) = (cfg.interval_secs, cfg.query_delay_secs);
    let mut first = true;
    let mut loaded = vec![false; ctx.members.len()];
    // Each member's batches (one per signal it records).
    let mut of_member: Vec<Vec<usize>> = vec![Vec::new(); ctx.members.len()];
    for (k, b) in batches.iter().enumerate() {
        for i in &b.members {
            of_member[*i].push(k);
        }
    }
    let mut last_g = f64::NEG_INFINITY;
    loop {
        // The next grid point not yet polled, once `delay` has passed it.
        let now = unix(SystemTime::now());
        let mut g = grid_point(now, interval, delay);
        if g <= last_g {
            g = last_g + interval;
        }
        let wait = (g + delay - now).max(0.0);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs_f64(wait)) => {}
        }
        last_g = g;
        let t0 = Instant::now();
        let mut tasks = JoinSet::new();
        for (k, b) in batches.iter().enumerate() {
            if tasks.len() >= PARALLEL_QUERIES {
                if let Some(Ok((k, st))) = tasks.join_next().await {
                    states[k] = Some(st);
                }
            }
            let Some(st) = states[k].take() else { continue };
            let (ctx, b) = (ctx.clone(), b.clone());
            tasks.spawn(async move { (k, poll_batch(ctx, b, st, g, first).await) });
        }
        while let Some(done) = tasks.join_next().await {
            if let Ok((k, st)) = done {
                states[k] = Some(st);
            }
        }
        // A batch whose task panicked starts over from what the store has.
        for (k, st) in states.iter_mut().enumerate().filter(|(_, s)| s.is_none()) {
            let n = batches[k].members.len();
            *st = Some(BatchState {
                next: vec![earliest; n],
                seeded: false,
                range_failing: Throttle::new(WARN_EVERY),
                instant_failing: Throttle::new(WARN_EVERY),
                invalid_log: Throttle::new(WARN_EVERY),
                invalid_at: Default::default(),
                loaded: false,
            });
        }
        crate::telemetry::prometheus_poll(t0.elapsed().as_secs_f64());
        // A workload whose every batch has loaded its history may start deciding (the engine's warm-up).
        for (i, m) in ctx.members.iter().enumerate() {
            if !loaded[i] && of_member[i].iter().all(|k| states[*k].as_ref().is_some_and(|s| s.loaded)) {
                loaded[i] = true;
                ctx.sinks.health.update(&m.key, |h| h.first_poll_done = true);
            }
        }
        first = false;
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

    #[test]
    fn polls_evaluate_on_the_wall_clock_grid() {
        // Every replica polling between 1030 and 1060 (30 s grid, 10 s delay) asks about 1020.
        for now in [1030.0, 1045.5, 1059.9] {
            assert_eq!(grid_point(now, 30.0, 10.0), 1020.0);
        }
        assert_eq!(grid_point(1060.0, 30.0, 10.0), 1050.0);
    }
}
