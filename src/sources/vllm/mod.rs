//! vLLM and KServe metrics: from one scrape's parsed families to a pod
//! [`Reading`], and from successive readings of every pod to a workload's
//! [`Signals`] ([`Deriver`]). Pure: times are arguments.
//!
//! Families are recognised by name, whichever spelling the body used:
//! `vllm:x` as vLLM registers it, or `vllm_x` as a Prometheus 2.x stores it
//! and as prometheus_client >= 0.23 writes samples when asked for
//! OpenMetrics (a federation endpoint or a proxy may serve either). A
//! counter is the same family with or without `_total`, its `_created` as a
//! sample (OpenMetrics) or a gauge family of its own (text). Names follow
//! vLLM 0.34 and accept the older ones (`gpu_cache_usage_perc`,
//! `gpu_prefix_cache_*`). KServe's predictor serves the same families when
//! it runs vLLM; for other runtimes its `request_predict_seconds` histogram
//! gives the request rate and latency.
//!
//! Counters become rates per target with resets handled (a value that
//! falls, or a `_created` that changes, starts a new counter; vLLM with
//! several API server processes exposes no `_created`, so the fall alone
//! counts), then sum across pods and engines; histograms become quantiles or
//! means of the observations between two scrapes, merged across pods.

use std::{
    borrow::Cow,
    collections::{BTreeMap, HashMap},
    time::SystemTime,
};

use super::{
    exposition::{Family, MetricType, Sample},
    Signal, Signals,
};

/// Counters Foresight turns into rates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Counter {
    /// Finished requests (`vllm:request_success_total`).
    Success,
    /// Requests refused at admission (`vllm:admission_rejections_total`): demand all the same.
    Rejected,
    PromptTokens,
    GenerationTokens,
    PrefixQueries,
    PrefixHits,
    /// Names before vLLM 0.34 (`vllm:gpu_prefix_cache_*`).
    OldPrefixQueries,
    OldPrefixHits,
    /// KServe: requests counted by its predict histogram.
    KservePredict,
}

const COUNTERS: &[(&str, Counter)] = &[
    ("vllm:request_success", Counter::Success),
    ("vllm:admission_rejections", Counter::Rejected),
    ("vllm:prompt_tokens", Counter::PromptTokens),
    ("vllm:generation_tokens", Counter::GenerationTokens),
    ("vllm:prefix_cache_queries", Counter::PrefixQueries),
    ("vllm:prefix_cache_hits", Counter::PrefixHits),
    ("vllm:gpu_prefix_cache_queries", Counter::OldPrefixQueries),
    ("vllm:gpu_prefix_cache_hits", Counter::OldPrefixHits),
];

/// Histograms Foresight reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Hist {
    Ttft,
    /// Inter-token latency, and its older name.
    Itl,
    OldItl,
    E2e,
    /// KServe's predict latency: the e2e latency of runtimes without vLLM metrics.
    KservePredict,
    /// Time waiting before scheduling: the queueing delay itself.
    QueueTime,
    PromptLength,
    GenerationLength,
}

const KSERVE_PREDICT: &str = "request_predict_seconds";

const HISTOGRAMS: &[(&str, Hist)] = &[
    ("vllm:time_to_first_token_seconds", Hist::Ttft),
    ("vllm:inter_token_latency_seconds", Hist::Itl),
    ("vllm:time_per_output_token_seconds", Hist::OldItl),
    ("vllm:e2e_request_latency_seconds", Hist::E2e),
    (KSERVE_PREDICT, Hist::KservePredict),
    ("vllm:request_queue_time_seconds", Hist::QueueTime),
    ("vllm:request_prompt_tokens", Hist::PromptLength),
    ("vllm:request_generation_tokens", Hist::GenerationLength),
];

/// One histogram series: cumulative buckets, sum and count.
#[derive(Debug, Clone, Default, PartialEq)]
struct Histogram {
    /// (upper bound, cumulative count), sorted by bound, `+Inf` last.
    le: Vec<(f64, f64)>,
    sum: Option<f64>,
    count: Option<f64>,
}

impl Histogram {
    fn total(&self) -> Option<f64> {
        self.count.or_else(|| self.le.last().map(|x| x.1))
    }

    fn has_invalid(&self) -> bool {
        self.le.iter().map(|x| x.1).chain(self.sum).chain(self.count).any(|v| !v.is_finite())
    }
}

/// One target's metrics at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    pub(crate) at: SystemTime,
    /// (counter, label set) -> (value, `_created` if exposed).
    counters: HashMap<(Counter, String), (f64, Option<f64>)>,
    running: Option<f64>,
    waiting: Option<f64>,
    /// `num_requests_waiting_by_reason{reason="deferred"}`: waiting on LoRA
    /// budget or KV transfer, not on serving capacity.
    deferred: Option<f64>,
    /// Sum of every `num_requests_waiting_by_reason`, for pods without the total.
    by_reason: Option<f64>,
    kv: Vec<f64>,
    /// (engines reporting `engine_sleep_state`, of which awake).
    sleep: Option<(u32, u32)>,
    /// (histogram, label set without `le`) -> series.
    hists: HashMap<(Hist, String), Histogram>,
}

impl Reading {
    /// Whether every engine of the pod reports itself asleep
    /// (`vllm:engine_sleep_state{sleep_state="awake"} 0`): it answers
    /// `/metrics` but serves nothing, so it is not serving capacity.
    pub fn is_asleep(&self) -> bool {
        self.sleep.is_some_and(|(engines, awake)| engines > 0 && awake == 0)
    }
}

/// Why a scrape gave no reading.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReadError {
    #[error("no vLLM or KServe metrics in the response{0}")]
    NothingKnown(String),
}

/// A family name as vLLM registers it: `vllm_x` (escaped) becomes `vllm:x`.
fn canonical(name: &str) -> Cow<'_, str> {
    match name.strip_prefix("vllm_") {
        Some(rest) => Cow::Owned(format!("vllm:{rest}")),
        None => Cow::Borrowed(name),
    }
}

fn label_key(s: &Sample<'_>, skip: &[&str]) -> String {
    let mut parts: Vec<String> =
        s.labels.iter().filter(|(k, _)| !skip.contains(k)).map(|(k, v)| format!("{k}={v}")).collect();
    parts.sort();
    parts.join(",")
}

fn counter(name: &str) -> Option<Counter> {
    COUNTERS.iter().find(|(n, _)| *n == name).map(|(_, c)| *c)
}

/// Counts and gauges past this (2^53) are no longer exact in an f64: a
/// pod reporting one is broken, not busy.
const RAW_MAX: f64 = 9_007_199_254_740_992.0;

/// A sample's value as the sums below should see it: an invalid one (NaN,
/// negative, past [`RAW_MAX`]) becomes NaN, -Inf or +Inf, so whatever it is
/// summed into or subtracted from stays invalid, for the same reason, and
/// fails [`crate::sources::Signal::check`] instead of being clamped into a
/// plausible number.
fn raw(v: f64) -> f64 {
    if v < 0.0 {
        f64::NEG_INFINITY
    } else if v > RAW_MAX {
        f64::INFINITY
    } else {
        v
    }
}

/// A `_created` time worth comparing; any other is as if absent (else a NaN
/// would differ from itself and make every scrape look like a restart).
fn valid_time(v: f64) -> bool {
    v.is_finite() && v >= 0.0
}

/// `a - b` floored at zero, unless it is already invalid: a clamp must not
/// turn a NaN or a -Inf into a plausible 0.
fn minus_floored(a: f64, b: f64) -> f64 {
    let d = a - b;
    if d.is_finite() {
        d.max(0.0)
    } else {
        d
    }
}

/// Build a reading from parsed families, keeping only series whose
/// `model_name` is `model` when a model is given.
pub fn read(families: &[Family<'_>], at: SystemTime, model: Option<&str>) -> Result<Reading, ReadError> {
    let wanted = |s: &Sample<'_>| match model {
        None => true,
        // KServe's own histograms label the model too; series without the label are kept.
        Some(m) => s.label("model_name").is_none_or(|v| v == m),
    };
    let mut r = Reading {
        at,
        counters: HashMap::new(),
        running: None,
        waiting: None,
        deferred: None,
        by_reason: None,
        kv: Vec::new(),
        sleep: None,
        hists: HashMap::new(),
    };
    let mut created: HashMap<(Counter, String), f64> = HashMap::new();
    let (mut kv_new, mut kv_old) = (Vec::new(), Vec::new());
    let mut engines: HashMap<String, bool> = HashMap::new();
    for f in families {
        let name = canonical(f.name);
        if f.kind == MetricType::Histogram {
            let Some(&(family, h)) = HISTOGRAMS.iter().find(|(n, _)| *n == name) else { continue };
            for s in f.samples.iter().filter(|s| wanted(s)) {
                read_histogram_sample(&mut r, h, family, s);
            }
            continue;
        }
        let untyped = matches!(f.kind, MetricType::Untyped | MetricType::Unknown);
        // A text body's `x_created` gauge, or an untyped `x_created` sample without a TYPE line.
        if let Some(c) = name.strip_suffix("_created").and_then(counter) {
            if f.kind == MetricType::Gauge || untyped {
                for s in f.samples.iter().filter(|s| wanted(s) && valid_time(s.value)) {
                    created.insert((c, label_key(s, &[])), s.value);
                }
            }
            continue;
        }
        // `_created` is a time, not a count: only the values below pass through `raw`.
        if let Some(c) = counter(name.strip_suffix("_total").unwrap_or(&name)) {
            if f.kind != MetricType::Counter && !untyped {
                continue;
            }
            for s in f.samples.iter().filter(|s| wanted(s)) {
                if s.name.ends_with("_created") {
                    if valid_time(s.value) {
                        created.insert((c, label_key(s, &[])), s.value);
                    }
                } else {
                    r.counters.insert((c, label_key(s, &[])), (raw(s.value), None));
                }
            }
            continue;
        }
        if f.kind != MetricType::Gauge && !untyped {
            continue;
        }
        for s in f.samples.iter().filter(|s| wanted(s)) {
            let value = raw(s.value);
            let add = |slot: &mut Option<f64>| *slot.get_or_insert(0.0) += value;
            match name.as_ref() {
                "vllm:num_requests_running" => add(&mut r.running),
                "vllm:num_requests_waiting" => add(&mut r.waiting),
                "vllm:num_requests_waiting_by_reason" => {
                    add(&mut r.by_reason);
                    if s.label("reason") == Some("deferred") {
                        add(&mut r.deferred);
                    }
                }
                "vllm:kv_cache_usage_perc" => kv_new.push(value),
                "vllm:gpu_cache_usage_perc" => kv_old.push(value),
                "vllm:engine_sleep_state" if s.label("sleep_state") == Some("awake") => {
                    let engine = label_key(s, &["sleep_state"]);
                    *engines.entry(engine).or_default() |= s.value >= 0.5;
                }
                _ => {}
            }
        }
    }
    for ((c, labels), (_, made)) in r.counters.iter_mut() {
        *made = created.get(&(*c, labels.clone())).copied();
    }
    for h in r.hists.values_mut() {
        h.le.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    // Prefer the current name; fall back to the deprecated one.
    r.kv = if kv_new.is_empty() { kv_old } else { kv_new };
    if !engines.is_empty() {
        r.sleep = Some((engines.len() as u32, engines.values().filter(|a| **a).count() as u32));
    }
    let nothing = r.counters.is_empty()
        && r.running.is_none()
        && r.waiting.is_none()
        && r.by_reason.is_none()
        && r.hists.is_empty()
        && r.kv.is_empty()
        && r.sleep.is_none();
    if nothing {
        let what = model.map(|m| format!(" for model_name `{m}`")).unwrap_or_default();
        return Err(ReadError::NothingKnown(what));
    }
    Ok(r)
}

fn read_histogram_sample(r: &mut Reading, h: Hist, family: &str, s: &Sample<'_>) {
    // The role comes from the suffix, whichever spelling the prefix has.
    let (role, skip): (&str, &[&str]) = if s.name.ends_with("_bucket") {
        ("bucket", &["le"])
    } else if s.name.ends_with("_sum") {
        ("sum", &[])
    } else if s.name.ends_with("_count") {
        ("count", &[])
    } else {
        return;
    };
    let series = r.hists.entry((h, label_key(s, skip))).or_default();
    let value = raw(s.value);
    match role {
        "bucket" => {
            if let Some(le) = s.label("le").and_then(parse_le) {
                series.le.push((le, value));
            }
        }
        "sum" => series.sum = Some(value),
        _ => {
            series.count = Some(value);
            if family == KSERVE_PREDICT {
                r.counters.insert((Counter::KservePredict, label_key(s, &[])), (value, None));
            }
        }
    }
}

fn parse_le(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        _ => s.parse().ok(),
    }
}

/// What one round adds up across pods, before it becomes signals.
#[derive(Default)]
struct Totals {
    /// Per counter: increase per second, summed over pods.
    rates: HashMap<Counter, f64>,
    /// Per histogram: cumulative bucket increases keyed by `f64::to_bits` of the bound.
    buckets: HashMap<Hist, BTreeMap<u64, f64>>,
    /// Per histogram: (increase of sum, increase of count).
    sums: HashMap<Hist, (f64, f64)>,
    /// Prefix cache (queries, hits) increases, each pod's newest names preferred.
    prefix: Option<(f64, f64)>,
}

/// Turns rounds of readings (one per target) into signals, remembering each
/// target's previous reading.
#[derive(Debug, Default)]
pub struct Deriver {
    previous: HashMap<String, Reading>,
}

impl Deriver {
    /// Signals from one round. `readings` has the targets that answered; a
    /// target's rates need its previous reading, so a target seen for the
    /// first time adds to the gauges only.
    pub fn round(&mut self, readings: Vec<(String, Reading)>) -> Signals {
        let mut out = Signals::default();
        let mut t = Totals::default();
        let mut have_rates = false;
        let (mut running, mut waiting, mut queue, mut deferred) = (None::<f64>, None::<f64>, None::<f64>, None::<f64>);
        let mut kv = Vec::new();
        for (target, r) in &readings {
            let add = |slot: &mut Option<f64>, v: f64| *slot.get_or_insert(0.0) += v;
            if let Some(v) = r.running {
                add(&mut running, v);
            }
            if let Some(v) = r.waiting.or(r.by_reason) {
                add(&mut waiting, v);
                // Deferred requests wait on LoRA budget or KV transfer: more replicas do not drain them.
                add(&mut queue, minus_floored(v, r.deferred.unwrap_or(0.0)));
            }
            if let Some(v) = r.deferred {
                add(&mut deferred, v);
            }
            if !r.is_asleep() {
                // Each pod's share checked on its own: a mean can hide one out of range.
                kv.extend(
                    r.kv.iter().map(|v| if *v > Signal::KvCacheUsage.plausible_max() { f64::INFINITY } else { *v }),
                );
            }
            let Some(prev) = self.previous.get(target) else { continue };
            let dt = r.at.duration_since(prev.at).map(|d| d.as_secs_f64()).unwrap_or(0.0);
            if dt > 0.0 {
                have_rates = true;
                increases(prev, r, dt, &mut t);
            }
        }
        let mut put = |s: Signal, v: Option<f64>| {
            if let Some(v) = v {
                out.put(s, v);
            }
        };
        put(Signal::Running, running);
        put(Signal::QueueDepth, queue);
        put(Signal::QueueDeferred, deferred);
        put(
            Signal::Concurrency,
            match (running, waiting) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
            },
        );
        put(Signal::KvCacheUsage, (!kv.is_empty()).then(|| kv.iter().sum::<f64>() / kv.len() as f64));
        if have_rates {
            // Families a pod does not expose stay missing, not zero.
            let rate = |c: Counter| t.rates.get(&c).copied();
            let demand = match (rate(Counter::Success), rate(Counter::Rejected)) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
            };
            put(Signal::RequestRate, demand);
            put(Signal::RejectionRate, rate(Counter::Rejected));
            put(Signal::PromptTokensRate, rate(Counter::PromptTokens));
            put(Signal::GenerationTokensRate, rate(Counter::GenerationTokens));
            // A ratio of invalid counts is invalid, never "no queries".
            let ratio = |num: f64, den: f64| match (num.is_finite() && den.is_finite(), den > 0.0) {
                (false, _) => Some(f64::NAN),
                (true, true) => Some(num / den),
                (true, false) => None,
            };
            put(Signal::PrefixCacheHitFraction, t.prefix.and_then(|(q, h)| ratio(h, q)));
            let mean = |h: Hist| t.sums.get(&h).and_then(|(s, n)| ratio(*s, *n));
            put(Signal::PromptTokensPerRequest, mean(Hist::PromptLength));
            put(Signal::GenerationTokensPerRequest, mean(Hist::GenerationLength));
        }
        let q = |h: Hist, q: f64| t.buckets.get(&h).and_then(|b| quantile(q, b));
        // vLLM's own e2e histogram wins over KServe's predict latency (see `increases`).
        let e2e = |p: f64| q(Hist::E2e, p).or_else(|| q(Hist::KservePredict, p));
        put(Signal::TtftP50, q(Hist::Ttft, 0.5));
        put(Signal::TtftP90, q(Hist::Ttft, 0.9));
        put(Signal::TtftP99, q(Hist::Ttft, 0.99));
        // The new name wins where a release serves both.
        put(Signal::ItlP90, q(Hist::Itl, 0.9).or_else(|| q(Hist::OldItl, 0.9)));
        put(Signal::E2eP50, e2e(0.5));
        put(Signal::E2eP90, e2e(0.9));
        put(Signal::E2eP99, e2e(0.99));
        put(Signal::QueueWaitP50, q(Hist::QueueTime, 0.5));
        put(Signal::QueueWaitP90, q(Hist::QueueTime, 0.9));
        put(Signal::QueueWaitP99, q(Hist::QueueTime, 0.99));
        for (target, r) in readings {
            self.previous.insert(target, r);
        }
        out
    }

    /// Forget targets that no longer exist (e.g. pods gone from DNS).
    pub(crate) fn retain(&mut self, live: &dyn Fn(&str) -> bool) {
        self.previous.retain(|t, _| live(t));
    }
}

/// One pod's increases between two readings `dt` seconds apart, into `t`.
fn increases(prev: &Reading, r: &Reading, dt: f64, t: &mut Totals) {
    // vLLM's own request counter and e2e histogram win over KServe's when a pod has both.
    let has = |c: Counter| r.counters.keys().any(|(k, _)| *k == c);
    let has_vllm_success = has(Counter::Success);
    let has_vllm_e2e = r.hists.keys().any(|(h, _)| *h == Hist::E2e);
    // A pod's prefix cache under the names it serves: vLLM 0.34's, else the older ones.
    let (queries, hits) = if has(Counter::PrefixQueries) {
        (Counter::PrefixQueries, Counter::PrefixHits)
    } else {
        (Counter::OldPrefixQueries, Counter::OldPrefixHits)
    };
    let mut prefix = (0.0, 0.0);
    for ((c, labels), (v, created)) in &r.counters {
        if *c == Counter::KservePredict && has_vllm_success {
            continue;
        }
        let increase = match prev.counters.get(&(*c, labels.clone())) {
            // After an invalid reading the increase is unknown, not a restart from zero.
            Some((pv, _)) if !pv.is_finite() => f64::NAN,
            Some((pv, pc)) if v >= pv && (created.is_none() || pc.is_none() || created == pc) => v - pv,
            // Fell or restarted (new _created), or new since the last scrape:
            // a counter that started from 0 inside this interval.
            _ => *v,
        };
        match *c {
            c if c == queries => prefix.0 += increase,
            c if c == hits => prefix.1 += increase,
            // The same cache under the other names.
            Counter::PrefixQueries | Counter::OldPrefixQueries | Counter::PrefixHits | Counter::OldPrefixHits => {}
            Counter::KservePredict => *t.rates.entry(Counter::Success).or_default() += increase / dt,
            other => *t.rates.entry(other).or_default() += increase / dt,
        }
    }
    if has(queries) {
        let p = t.prefix.get_or_insert((0.0, 0.0));
        p.0 += prefix.0;
        p.1 += prefix.1;
    }
    for ((h, labels), now) in &r.hists {
        if *h == Hist::KservePredict && has_vllm_e2e {
            continue;
        }
        let before = prev.hists.get(&(*h, labels.clone()));
        if before.is_some_and(Histogram::has_invalid) {
            // After an invalid reading the increases are unknown, not a reset to zero.
            t.buckets.entry(*h).or_default().insert(f64::INFINITY.to_bits(), f64::NAN);
            let acc = t.sums.entry(*h).or_default();
            *acc = (f64::NAN, f64::NAN);
            continue;
        }
        // A histogram whose count fell was reset: count it from zero.
        let reset = before.is_some_and(|b| b.total() > now.total());
        let before = if reset { None } else { before };
        let acc = t.buckets.entry(*h).or_default();
        for (le, c) in &now.le {
            let pc = before.and_then(|b| b.le.iter().find(|(l, _)| l == le)).map_or(0.0, |x| x.1);
            *acc.entry(le.to_bits()).or_default() += minus_floored(*c, pc);
        }
        if let (Some(s), Some(n)) = (now.sum, now.count) {
            let (ps, pn) = before.map_or((0.0, 0.0), |b| (b.sum.unwrap_or(0.0), b.count.unwrap_or(0.0)));
            let acc = t.sums.entry(*h).or_default();
            acc.0 += s - ps;
            acc.1 += minus_floored(n, pn);
        }
    }
}

/// The q-quantile of cumulative bucket counts keyed by `f64::to_bits` of
/// the bound, interpolating linearly inside a bucket as Prometheus's
/// `histogram_quantile` does. `None` when nothing was observed.
fn quantile(q: f64, cumulative: &BTreeMap<u64, f64>) -> Option<f64> {
    let mut b: Vec<(f64, f64)> = cumulative.iter().map(|(k, v)| (f64::from_bits(*k), *v)).collect();
    // Counts that are not counts (an invalid bucket): the quantile is invalid too, not absent.
    if let Some(bad) = b.iter().map(|x| x.1).find(|c| !c.is_finite()) {
        return Some(bad);
    }
    b.sort_by(|x, y| x.0.total_cmp(&y.0));
    let total = b.last()?.1;
    if total <= 0.0 || b.last()?.0 != f64::INFINITY {
        return None;
    }
    let rank = q * total;
    let mut prev = (0.0, 0.0);
    for &(le, c) in &b {
        if c >= rank {
            if le.is_infinite() {
                // Above the largest finite bound: report that bound, as Prometheus does.
                return Some(prev.0);
            }
            let width = c - prev.1;
            let frac = if width > 0.0 { (rank - prev.1) / width } else { 1.0 };
            return Some(prev.0 + (le - prev.0) * frac);
        }
        prev = (le, c);
    }
    None
}

#[cfg(test)]
mod tests;
