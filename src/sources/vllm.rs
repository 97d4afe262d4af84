//! vLLM and KServe metrics: from one scrape's parsed families to a pod
//! [`Reading`], and from successive readings of every pod to a workload's
//! [`Signals`] ([`Deriver`]). Pure: times are arguments.
//!
//! Names follow vLLM V1 and accept the older ones (`gpu_cache_usage_perc`).
//! KServe's predictor serves the same `vllm:*` families when it runs vLLM;
//! for other runtimes, its `request_predict_seconds` histogram gives the
//! request rate and latency. Counters become rates per target with resets
//! handled (a value that falls, or a `_created` that changes, starts a new
//! counter), then sum across pods and engines; histograms become quantiles
//! of the observations between two scrapes, merged across pods.

use std::{
    collections::{BTreeMap, HashMap},
    time::SystemTime,
};

use super::{
    exposition::{Family, MetricType, Sample},
    Signal, Signals,
};

/// Counters Foresight turns into rates, by the signal they feed.
const COUNTERS: &[(&str, Signal)] = &[
    ("vllm:request_success_total", Signal::RequestRate),
    ("vllm:prompt_tokens_total", Signal::PromptTokensRate),
    ("vllm:generation_tokens_total", Signal::GenerationTokensRate),
];
/// KServe's request counter for runtimes without vLLM metrics.
const KSERVE_PREDICT: &str = "request_predict_seconds";

/// Latency histograms, preferred name first.
const TTFT: &[&str] = &["vllm:time_to_first_token_seconds"];
const E2E: &[&str] = &["vllm:e2e_request_latency_seconds", KSERVE_PREDICT];

/// Cumulative buckets of one histogram series.
#[derive(Debug, Clone, PartialEq)]
struct Buckets {
    /// (upper bound, cumulative count), sorted by bound, `+Inf` last.
    le: Vec<(f64, f64)>,
}

/// One target's metrics at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    pub at: SystemTime,
    /// (counter name, label set) -> (value, `_created` if exposed).
    counters: HashMap<(String, String), (f64, Option<f64>)>,
    running: Option<f64>,
    waiting: Option<f64>,
    kv: Vec<f64>,
    /// (histogram family, label set without `le`) -> buckets.
    hists: HashMap<(&'static str, String), Buckets>,
}

/// The families a scrape had, as far as Foresight is concerned.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReadError {
    #[error("no vLLM or KServe metrics in the response{0}")]
    NothingKnown(String),
}

fn label_key(s: &Sample<'_>, skip: &str) -> String {
    let mut parts: Vec<String> = s.labels.iter().filter(|(k, _)| *k != skip).map(|(k, v)| format!("{k}={v}")).collect();
    parts.sort();
    parts.join(",")
}

/// Build a reading from parsed families, keeping only series whose
/// `model_name` is `model` when a model is given.
pub fn read(families: &[Family<'_>], at: SystemTime, model: Option<&str>) -> Result<Reading, ReadError> {
    let wanted = |s: &Sample<'_>| match model {
        None => true,
        // KServe's own histograms label the model too; series without the label are kept.
        Some(m) => s.label("model_name").is_none_or(|v| v == m),
    };
    let mut r =
        Reading { at, counters: HashMap::new(), running: None, waiting: None, kv: Vec::new(), hists: HashMap::new() };
    let mut created: HashMap<(String, String), f64> = HashMap::new();
    let mut kv_new = Vec::new();
    let mut kv_old = Vec::new();
    for f in families {
        for s in f.samples.iter().filter(|s| wanted(s)) {
            if let Some(base) = s.name.strip_suffix("_created") {
                created.insert((format!("{base}_total"), label_key(s, "")), s.value);
                continue;
            }
            match (f.kind, s.name) {
                (MetricType::Counter | MetricType::Untyped | MetricType::Unknown, name)
                    if COUNTERS.iter().any(|(c, _)| *c == name) =>
                {
                    r.counters.insert((name.to_string(), label_key(s, "")), (s.value, None));
                }
                (MetricType::Gauge | MetricType::Untyped, "vllm:num_requests_running") => {
                    *r.running.get_or_insert(0.0) += s.value
                }
                (MetricType::Gauge | MetricType::Untyped, "vllm:num_requests_waiting") => {
                    *r.waiting.get_or_insert(0.0) += s.value
                }
                (MetricType::Gauge | MetricType::Untyped, "vllm:kv_cache_usage_perc") => kv_new.push(s.value),
                (MetricType::Gauge | MetricType::Untyped, "vllm:gpu_cache_usage_perc") => kv_old.push(s.value),
                (MetricType::Histogram, _) => {
                    let Some(family) = TTFT.iter().chain(E2E).find(|h| **h == f.name) else { continue };
                    if s.name == format!("{family}_count") && *family == KSERVE_PREDICT {
                        // KServe: requests counted by its predict histogram.
                        r.counters.insert((s.name.to_string(), label_key(s, "")), (s.value, None));
                    }
                    if s.name.len() == family.len() + "_bucket".len() && s.name.ends_with("_bucket") {
                        let Some(le) = s.label("le").and_then(parse_le) else { continue };
                        r.hists
                            .entry((family, label_key(s, "le")))
                            .or_insert(Buckets { le: Vec::new() })
                            .le
                            .push((le, s.value));
                    }
                }
                _ => {}
            }
        }
    }
    for ((name, labels), (_, c)) in r.counters.iter_mut() {
        *c = created.get(&(name.clone(), labels.clone())).copied();
    }
    for b in r.hists.values_mut() {
        b.le.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    // Prefer the current name; fall back to the deprecated one.
    r.kv = if kv_new.is_empty() { kv_old } else { kv_new };
    if r.counters.is_empty() && r.running.is_none() && r.waiting.is_none() && r.hists.is_empty() && r.kv.is_empty() {
        let what = model.map(|m| format!(" for model_name `{m}`")).unwrap_or_default();
        return Err(ReadError::NothingKnown(what));
    }
    Ok(r)
}

fn parse_le(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        _ => s.parse().ok(),
    }
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
        let mut rates: BTreeMap<Signal, f64> = BTreeMap::new();
        let mut have_rates = false;
        let (mut running, mut waiting) = (None::<f64>, None::<f64>);
        let mut kv = Vec::new();
        let mut ttft: BTreeMap<u64, f64> = BTreeMap::new();
        let mut e2e: BTreeMap<u64, f64> = BTreeMap::new();
        for (target, r) in &readings {
            if let Some(v) = r.running {
                *running.get_or_insert(0.0) += v;
            }
            if let Some(v) = r.waiting {
                *waiting.get_or_insert(0.0) += v;
            }
            kv.extend(&r.kv);
            let Some(prev) = self.previous.get(target) else { continue };
            let dt = r.at.duration_since(prev.at).map(|d| d.as_secs_f64()).unwrap_or(0.0);
            if dt <= 0.0 {
                continue;
            }
            have_rates = true;
            // vLLM's own request counter and e2e histogram win over KServe's when a pod has both.
            let has_vllm_success = r.counters.keys().any(|(n, _)| n == "vllm:request_success_total");
            let has_vllm_e2e = r.hists.keys().any(|(f, _)| *f == E2E[0]);
            for ((name, labels), (v, created)) in &r.counters {
                let kserve = name.starts_with(KSERVE_PREDICT);
                if kserve && has_vllm_success {
                    continue;
                }
                let increase = match prev.counters.get(&(name.clone(), labels.clone())) {
                    Some((pv, pc)) if v >= pv && (created.is_none() || pc.is_none() || created == pc) => v - pv,
                    // Fell or restarted (new _created), or new since the last scrape:
                    // a counter that started from 0 inside this interval.
                    _ => *v,
                };
                let signal = if kserve {
                    Signal::RequestRate
                } else {
                    COUNTERS.iter().find(|(c, _)| c == name).map(|(_, s)| *s).unwrap_or(Signal::RequestRate)
                };
                *rates.entry(signal).or_default() += increase / dt;
            }
            for ((family, labels), b) in &r.hists {
                if *family == KSERVE_PREDICT && has_vllm_e2e {
                    continue;
                }
                let acc = if TTFT.contains(family) { &mut ttft } else { &mut e2e };
                let before = prev.hists.get(&(*family, labels.clone()));
                // A histogram whose total fell was reset: count it from zero.
                let reset = before.is_some_and(|pb| pb.le.last().map(|x| x.1) > b.le.last().map(|x| x.1));
                for (le, c) in &b.le {
                    let pc = before.and_then(|pb| pb.le.iter().find(|(l, _)| l == le)).map(|x| x.1).unwrap_or(0.0);
                    let d = if reset { *c } else { (c - pc).max(0.0) };
                    *acc.entry(le.to_bits()).or_default() += d;
                }
            }
        }
        let mut put = |s: Signal, v: Option<f64>| {
            if let Some(v) = v.filter(|v| v.is_finite()) {
                out.values.insert(s, v);
            }
        };
        put(Signal::Running, running);
        put(Signal::QueueDepth, waiting);
        put(
            Signal::Concurrency,
            match (running, waiting) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
            },
        );
        put(Signal::KvCacheUsage, (!kv.is_empty()).then(|| kv.iter().sum::<f64>() / kv.len() as f64));
        if have_rates {
            for s in [Signal::RequestRate, Signal::PromptTokensRate, Signal::GenerationTokensRate] {
                // Families a pod does not expose stay missing, not zero.
                if let Some(v) = rates.get(&s) {
                    put(s, Some(*v));
                }
            }
        }
        for (q, s) in [(0.5, Signal::TtftP50), (0.9, Signal::TtftP90), (0.99, Signal::TtftP99)] {
            put(s, quantile(q, &ttft));
        }
        for (q, s) in [(0.5, Signal::E2eP50), (0.9, Signal::E2eP90), (0.99, Signal::E2eP99)] {
            put(s, quantile(q, &e2e));
        }
        for (target, r) in readings {
            self.previous.insert(target, r);
        }
        out
    }

    /// Forget targets that no longer exist (e.g. pods gone from DNS).
    pub fn retain(&mut self, live: &dyn Fn(&str) -> bool) {
        self.previous.retain(|t, _| live(t));
    }
}

/// The q-quantile of cumulative bucket counts keyed by `f64::to_bits` of
/// the bound, interpolating linearly inside a bucket as Prometheus's
/// `histogram_quantile` does. `None` when nothing was observed.
fn quantile(q: f64, cumulative: &BTreeMap<u64, f64>) -> Option<f64> {
    let mut b: Vec<(f64, f64)> = cumulative.iter().map(|(k, v)| (f64::from_bits(*k), *v)).collect();
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
mod tests {
    use super::*;
    use crate::sources::exposition::{parse, Format};
    use std::time::Duration;

    fn reading(text: &str, at: u64) -> Reading {
        let fams = parse(text, Format::Text).unwrap();
        read(&fams, SystemTime::UNIX_EPOCH + Duration::from_secs(at), None).unwrap()
    }

    fn body(success: u64, prompt: u64, running: u32, waiting: u32, created: f64) -> String {
        format!(
            "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{engine=\"0\",model_name=\"m\"}} {running}.0\n\
             # TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{{engine=\"0\",model_name=\"m\"}} {waiting}.0\n\
             # TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{{engine=\"0\",model_name=\"m\"}} {prompt}.0\n\
             # TYPE vllm:prompt_tokens_created gauge\nvllm:prompt_tokens_created{{engine=\"0\",model_name=\"m\"}} {created}\n\
             # TYPE vllm:request_success_total counter\n\
             vllm:request_success_total{{engine=\"0\",finished_reason=\"stop\",model_name=\"m\"}} {success}.0\n\
             # TYPE vllm:time_to_first_token_seconds histogram\n\
             vllm:time_to_first_token_seconds_bucket{{engine=\"0\",le=\"0.1\",model_name=\"m\"}} {}.0\n\
             vllm:time_to_first_token_seconds_bucket{{engine=\"0\",le=\"1.0\",model_name=\"m\"}} {success}.0\n\
             vllm:time_to_first_token_seconds_bucket{{engine=\"0\",le=\"+Inf\",model_name=\"m\"}} {success}.0\n\
             vllm:time_to_first_token_seconds_count{{engine=\"0\",model_name=\"m\"}} {success}.0\n\
             vllm:time_to_first_token_seconds_sum{{engine=\"0\",model_name=\"m\"}} 1.0\n",
            success / 2
        )
    }

    #[test]
    fn rates_sum_across_pods_and_survive_a_restart() {
        let mut d = Deriver::default();
        let first = d.round(vec![
            ("a".into(), reading(&body(100, 1000, 3, 1, 1.0), 0)),
            ("b".into(), reading(&body(50, 500, 2, 0, 1.0), 0)),
        ]);
        assert_eq!(first.get(Signal::Concurrency), Some(6.0));
        assert_eq!(first.get(Signal::RequestRate), None, "no rate from a single reading");
        // a: +20 req, +300 tokens in 10 s; b restarted (new _created) and counted 5 since.
        let second = d.round(vec![
            ("a".into(), reading(&body(120, 1300, 1, 0, 1.0), 10)),
            ("b".into(), reading(&body(5, 40, 1, 0, 9.0), 10)),
        ]);
        assert_eq!(second.get(Signal::RequestRate), Some(2.5));
        assert_eq!(second.get(Signal::PromptTokensRate), Some(34.0));
        assert_eq!(second.get(Signal::Running), Some(2.0));
        // b fell without a _created change: also a reset.
        let third = d.round(vec![("b".into(), reading(&body(2, 10, 0, 0, 9.0), 20))]);
        assert_eq!(third.get(Signal::RequestRate), Some(0.2));
    }

    #[test]
    fn quantiles_come_from_the_observations_between_scrapes() {
        let mut d = Deriver::default();
        d.round(vec![("a".into(), reading(&body(100, 0, 0, 0, 1.0), 0))]);
        let s = d.round(vec![("a".into(), reading(&body(200, 0, 0, 0, 1.0), 10))]);
        // 100 new observations: 50 <= 0.1 s, 50 in (0.1, 1.0].
        assert_eq!(s.get(Signal::TtftP50), Some(0.1));
        let p90 = s.get(Signal::TtftP90).unwrap();
        assert!((p90 - (0.1 + 0.9 * 0.8)).abs() < 1e-9, "{p90}");
        let idle = d.round(vec![("a".into(), reading(&body(200, 0, 0, 0, 1.0), 20))]);
        assert_eq!(idle.get(Signal::TtftP50), None, "nothing observed: missing, not zero");
    }

    #[test]
    fn old_names_and_kserve_are_understood() {
        let old = "# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{model_name=\"m\"} 0.25\n";
        let mut d = Deriver::default();
        assert_eq!(d.round(vec![("a".into(), reading(old, 0))]).get(Signal::KvCacheUsage), Some(0.25));
        let kserve = |n: u64| {
            format!(
                "# TYPE request_predict_seconds histogram\nrequest_predict_seconds_bucket{{le=\"0.5\",model_name=\"m\"}} {n}\n\
                 request_predict_seconds_bucket{{le=\"+Inf\",model_name=\"m\"}} {n}\nrequest_predict_seconds_count{{model_name=\"m\"}} {n}\n\
                 request_predict_seconds_sum{{model_name=\"m\"}} 1.0\n"
            )
        };
        let mut d = Deriver::default();
        d.round(vec![("k".into(), reading(&kserve(10), 0))]);
        let s = d.round(vec![("k".into(), reading(&kserve(40), 10))]);
        assert_eq!(s.get(Signal::RequestRate), Some(3.0));
        assert_eq!(s.get(Signal::E2eP50), Some(0.25));
    }

    #[test]
    fn unrelated_metrics_are_an_error_and_a_model_filter_applies() {
        let fams = parse("# TYPE go_goroutines gauge\ngo_goroutines 12\n", Format::Text).unwrap();
        assert!(read(&fams, SystemTime::UNIX_EPOCH, None).is_err());
        let text = body(1, 1, 1, 1, 1.0);
        let fams = parse(&text, Format::Text).unwrap();
        let e = read(&fams, SystemTime::UNIX_EPOCH, Some("other")).unwrap_err();
        assert_eq!(e.to_string(), "no vLLM or KServe metrics in the response for model_name `other`");
    }
}
