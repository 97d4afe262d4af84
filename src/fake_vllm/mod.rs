//! Simulated vLLM replicas: a deterministic model of a small fleet whose
//! `/metrics` look like vLLM V1's, driven by a demand trace ([`demand`]).
//!
//! Used by the demo (`source: {simulated: ...}`), by tests as real HTTP
//! scrape targets, and by `foresight vllm-sim` to feed a real Prometheus.
//! Each pod serves requests first-come first-served with at most
//! `max_num_seqs` running: time to first token = queue wait + prompt /
//! `prefill_tokens_per_sec`, then one output token every `itl_secs`.
//! Batching effects on speed are not modelled: the point is metrics with the
//! right shape and counters that follow demand exactly, so tests can compare
//! what Foresight stored with what the pods emitted.

pub mod demand;
mod metrics;
pub mod server;

use std::{
    cmp::Reverse,
    collections::{BinaryHeap, VecDeque},
    sync::Arc,
};

use serde::Deserialize;

pub use demand::{DemandConfig, Request};
pub(crate) use metrics::render;

/// A simulated fleet.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimConfig {
    /// Number of pods (scrape targets).
    #[serde(default = "default_pods")]
    pub pods: u32,
    /// The `model_name` label.
    #[serde(default = "default_model_name")]
    pub model_name: String,
    pub demand: DemandConfig,
    /// vLLM `--max-num-seqs`: requests running at once per pod; the rest wait.
    #[serde(default = "default_max_num_seqs")]
    pub max_num_seqs: u32,
    #[serde(default = "default_prefill")]
    pub prefill_tokens_per_sec: f64,
    /// Seconds between output tokens of one request.
    #[serde(default = "default_itl")]
    pub itl_secs: f64,
    /// KV-cache capacity per pod, in tokens (for `kv_cache_usage_perc`).
    #[serde(default = "default_kv_tokens")]
    pub kv_cache_tokens: f64,
    /// Share 0..1 of each prompt served from the prefix cache (not prefilled).
    #[serde(default)]
    pub prefix_cache_hit_fraction: f64,
}

fn default_pods() -> u32 {
    2
}
fn default_model_name() -> String {
    "meta-llama/Llama-3.1-8B-Instruct".to_string()
}
fn default_max_num_seqs() -> u32 {
    64
}
fn default_prefill() -> f64 {
    8_000.0
}
fn default_itl() -> f64 {
    0.02
}
fn default_kv_tokens() -> f64 {
    400_000.0
}

impl SimConfig {
    pub(crate) fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = self.demand.problems();
        if self.pods == 0 || self.pods > 256 {
            out.push(("pods", format!("must be within 1..=256, got {}", self.pods)));
        }
        if self.max_num_seqs == 0 {
            out.push(("max_num_seqs", "must be at least 1".into()));
        }
        for (field, v) in [
            ("prefill_tokens_per_sec", self.prefill_tokens_per_sec),
            ("itl_secs", self.itl_secs),
            ("kv_cache_tokens", self.kv_cache_tokens),
        ] {
            if !(v.is_finite() && v > 0.0) {
                out.push((field, format!("must be a finite number > 0, got {v}")));
            }
        }
        if !(0.0..=1.0).contains(&self.prefix_cache_hit_fraction) {
            out.push((
                "prefix_cache_hit_fraction",
                format!("must be within 0..=1, got {}", self.prefix_cache_hit_fraction),
            ));
        }
        out
    }

    /// Prompt tokens of a `prompt`-token request served from the prefix cache.
    fn cached(&self, prompt: u32) -> u64 {
        (f64::from(prompt) * self.prefix_cache_hit_fraction).floor() as u64
    }
}

/// Histogram state: cumulative bucket counts, sum, count.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Hist {
    pub(crate) counts: Vec<u64>,
    pub(crate) sum: f64,
    pub(crate) count: u64,
}

impl Hist {
    fn new(bounds: &[f64]) -> Self {
        Hist { counts: vec![0; bounds.len()], sum: 0.0, count: 0 }
    }
    fn observe(&mut self, bounds: &[f64], v: f64) {
        for (c, b) in self.counts.iter_mut().zip(bounds) {
            if v <= *b {
                *c += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }
}

// vLLM's bucket bounds for these histograms.
pub(crate) const TTFT_BOUNDS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
    160.0, 640.0, 2560.0,
];
pub(crate) const ITL_BOUNDS: &[f64] =
    &[0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0];
pub(crate) const LATENCY_BOUNDS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
    1920.0, 7680.0,
];
/// Tokens per request: vLLM's 1-2-5 series up to the model length (32,768 here).
pub(crate) const TOKEN_BOUNDS: &[f64] =
    &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0, 20000.0];

#[derive(Debug, Clone)]
struct Running {
    req: Request,
    first_token: f64,
    finish: f64,
}

/// Counters and histograms of one pod, as vLLM would report them at a moment.
#[derive(Debug, Clone, PartialEq)]
pub struct PodMetrics {
    /// Unix time the pod (process) started: the `_created` value.
    pub(crate) created: f64,
    pub running: u32,
    pub waiting: u32,
    pub(crate) kv_cache_usage: f64,
    pub prompt_tokens: u64,
    pub generation_tokens: u64,
    pub success_stop: u64,
    pub success_length: u64,
    pub(crate) ttft: Hist,
    pub(crate) itl: Hist,
    pub(crate) e2e: Hist,
    pub(crate) queue: Hist,
    /// Prompt and output tokens of finished requests.
    pub(crate) prompt_len: Hist,
    pub(crate) output_len: Hist,
    /// Prompt tokens looked up in, and served from, the prefix cache.
    pub(crate) cache_queries: u64,
    pub(crate) cache_hits: u64,
}

/// Output token limit: requests that hit it finish with reason `length`.
const MAX_TOKENS: u32 = 1000;

/// One simulated vLLM pod.
#[derive(Debug, Clone)]
pub struct Pod {
    config: Arc<SimConfig>,
    now: f64,
    created: f64,
    /// Slots with stable indices, so the completion heap can point into them.
    running: Vec<Option<Running>>,
    free: Vec<usize>,
    active: usize,
    finishing: BinaryHeap<Reverse<(OrdF64, usize)>>,
    waiting: VecDeque<Request>,
    done: PodMetrics,
}

#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
struct OrdF64(f64);
impl Eq for OrdF64 {}
#[allow(clippy::derive_ord_xor_partial_ord)]
impl Ord for OrdF64 {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&o.0)
    }
}

impl Pod {
    fn new(config: Arc<SimConfig>, now: f64) -> Pod {
        let done = PodMetrics {
            created: now,
            running: 0,
            waiting: 0,
            kv_cache_usage: 0.0,
            prompt_tokens: 0,
            generation_tokens: 0,
            success_stop: 0,
            success_length: 0,
            ttft: Hist::new(TTFT_BOUNDS),
            itl: Hist::new(ITL_BOUNDS),
            e2e: Hist::new(LATENCY_BOUNDS),
            queue: Hist::new(LATENCY_BOUNDS),
            prompt_len: Hist::new(TOKEN_BOUNDS),
            output_len: Hist::new(TOKEN_BOUNDS),
            cache_queries: 0,
            cache_hits: 0,
        };
        Pod {
            config,
            now,
            created: now,
            running: Vec::new(),
            free: Vec::new(),
            active: 0,
            finishing: BinaryHeap::new(),
            waiting: VecDeque::new(),
            done,
        }
    }

    fn start(&mut self, req: Request, at: f64) {
        let prefilled = u64::from(req.prompt_tokens) - self.config.cached(req.prompt_tokens);
        let first_token = at + prefilled as f64 / self.config.prefill_tokens_per_sec;
        let finish = first_token + f64::from(req.output_tokens.saturating_sub(1)) * self.config.itl_secs;
        self.done.queue.observe(LATENCY_BOUNDS, at - req.arrival);
        let r = Some(Running { req, first_token, finish });
        let slot = match self.free.pop() {
            Some(i) => {
                self.running[i] = r;
                i
            }
            None => {
                self.running.push(r);
                self.running.len() - 1
            }
        };
        self.active += 1;
        self.finishing.push(Reverse((OrdF64(finish), slot)));
    }

    /// Process completions up to `t` (each frees a slot for the next waiting request).
    fn advance(&mut self, t: f64) {
        while let Some(Reverse((OrdF64(finish), slot))) = self.finishing.peek().copied() {
            if finish > t {
                break;
            }
            self.finishing.pop();
            let Some(r) = self.running[slot].take() else { continue };
            self.free.push(slot);
            self.active -= 1;
            let d = &mut self.done;
            d.prompt_tokens += u64::from(r.req.prompt_tokens);
            d.generation_tokens += u64::from(r.req.output_tokens);
            d.cache_queries += u64::from(r.req.prompt_tokens);
            d.cache_hits += self.config.cached(r.req.prompt_tokens);
            d.prompt_len.observe(TOKEN_BOUNDS, f64::from(r.req.prompt_tokens));
            d.output_len.observe(TOKEN_BOUNDS, f64::from(r.req.output_tokens));
            if r.req.output_tokens >= MAX_TOKENS {
                d.success_length += 1;
            } else {
                d.success_stop += 1;
            }
            d.ttft.observe(TTFT_BOUNDS, r.first_token - r.req.arrival);
            d.e2e.observe(LATENCY_BOUNDS, r.finish - r.req.arrival);
            for _ in 1..r.req.output_tokens.min(64) {
                d.itl.observe(ITL_BOUNDS, self.config.itl_secs);
            }
            if let Some(next) = self.waiting.pop_front() {
                self.start(next, finish);
            }
        }
        self.now = self.now.max(t);
    }

    fn arrive(&mut self, req: Request) {
        self.advance(req.arrival);
        if self.active < self.config.max_num_seqs as usize {
            self.start(req, req.arrival);
        } else {
            self.waiting.push_back(req);
        }
    }

    /// What vLLM would report at the pod's current time: finished requests
    /// counted whole, running ones by the tokens they have produced so far.
    pub fn metrics(&self) -> PodMetrics {
        let t = self.now;
        let mut m = self.done.clone();
        m.created = self.created;
        m.running = self.active as u32;
        m.waiting = self.waiting.len() as u32;
        let mut kv = 0.0;
        for r in self.running.iter().flatten() {
            if r.first_token <= t {
                let generated =
                    (1 + ((t - r.first_token) / self.config.itl_secs) as u64).min(u64::from(r.req.output_tokens));
                m.prompt_tokens += u64::from(r.req.prompt_tokens);
                m.cache_queries += u64::from(r.req.prompt_tokens);
                m.cache_hits += self.config.cached(r.req.prompt_tokens);
                m.generation_tokens += generated;
                m.ttft.observe(TTFT_BOUNDS, r.first_token - r.req.arrival);
                kv += f64::from(r.req.prompt_tokens) + generated as f64;
            }
        }
        m.kv_cache_usage = (kv / self.config.kv_cache_tokens).min(1.0);
        m
    }
}

/// A fleet of pods fed round-robin from one arrival stream.
pub struct Fleet {
    config: Arc<SimConfig>,
    arrivals: demand::Arrivals,
    pods: Vec<Pod>,
    next_pod: usize,
    now: f64,
}

impl Fleet {
    /// A fleet whose demand starts at Unix time `origin`. `trace` is the
    /// loaded `demand.trace_file`, if any.
    pub fn new(config: SimConfig, trace: Option<Arc<Vec<demand::TraceRow>>>, origin: f64) -> Fleet {
        let config = Arc::new(config);
        let arrivals = demand::Arrivals::new(config.demand.clone(), trace, origin);
        let pods = (0..config.pods).map(|_| Pod::new(config.clone(), origin)).collect();
        Fleet { config, arrivals, pods, next_pod: 0, now: origin }
    }

    /// Build from config, loading the trace file if one is named.
    pub fn from_config(config: SimConfig, origin: f64) -> Result<Fleet, String> {
        let trace = match &config.demand.trace_file {
            Some(p) => Some(Arc::new(demand::load_trace(p)?)),
            None => None,
        };
        Ok(Fleet::new(config, trace, origin))
    }

    pub(crate) fn config(&self) -> &SimConfig {
        &self.config
    }

    pub fn now(&self) -> f64 {
        self.now
    }

    /// Run the fleet forward to Unix time `t` (never backwards).
    pub fn advance_to(&mut self, t: f64) {
        if t <= self.now {
            return;
        }
        while let Some(req) = self.arrivals.next_before(t) {
            let i = self.next_pod;
            self.next_pod = (self.next_pod + 1) % self.pods.len();
            self.pods[i].arrive(req);
        }
        for p in &mut self.pods {
            p.advance(t);
        }
        self.now = t;
    }

    pub fn pods(&self) -> &[Pod] {
        &self.pods
    }

    /// Restart pod `i` at the fleet's current time: counters start from zero
    /// and the requests it held are lost, as when a vLLM process restarts.
    pub(crate) fn restart_pod(&mut self, i: usize) {
        if let Some(p) = self.pods.get_mut(i) {
            *p = Pod::new(self.config.clone(), self.now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(rps: f64, max_num_seqs: u32) -> SimConfig {
        SimConfig {
            pods: 2,
            model_name: "m".into(),
            demand: DemandConfig {
                requests_per_sec: rps,
                daily_amplitude: 0.0,
                weekend_factor: 1.0,
                day_length_secs: 86_400.0,
                trace_file: None,
                seed: 1,
            },
            max_num_seqs,
            prefill_tokens_per_sec: 8000.0,
            itl_secs: 0.02,
            kv_cache_tokens: 400_000.0,
            prefix_cache_hit_fraction: 0.25,
        }
    }

    #[test]
    fn requests_are_conserved() {
        let origin = 1_700_000_000.0;
        let mut fleet = Fleet::new(config(20.0, 64), None, origin);
        let mut arrivals = demand::Arrivals::new(config(20.0, 64).demand, None, origin);
        let arrived = std::iter::from_fn(|| arrivals.next_before(origin + 600.0)).count() as u64;
        fleet.advance_to(origin + 600.0);
        let (mut finished, mut in_flight) = (0, 0);
        for p in fleet.pods() {
            let m = p.metrics();
            finished += m.success_stop + m.success_length;
            in_flight += u64::from(m.running + m.waiting);
        }
        assert_eq!(finished + in_flight, arrived);
        assert!(finished > 10_000);
    }

    #[test]
    fn counters_never_decrease_and_capacity_queues() {
        let origin = 1_700_000_000.0;
        let mut fleet = Fleet::new(config(50.0, 4), None, origin);
        let mut last = (0, 0, 0);
        let mut saw_queue = false;
        for k in 1..=120 {
            fleet.advance_to(origin + f64::from(k));
            let m = fleet.pods()[0].metrics();
            let now = (m.prompt_tokens, m.generation_tokens, m.success_stop + m.success_length);
            assert!(now.0 >= last.0 && now.1 >= last.1 && now.2 >= last.2, "{now:?} < {last:?}");
            assert!(m.running <= 4);
            saw_queue |= m.waiting > 0;
            last = now;
        }
        assert!(saw_queue, "50 req/s on 2x4 slots must queue");
    }

    #[test]
    fn restart_resets_counters() {
        let origin = 1_700_000_000.0;
        let mut fleet = Fleet::new(config(20.0, 64), None, origin);
        fleet.advance_to(origin + 60.0);
        assert!(fleet.pods()[1].metrics().generation_tokens > 0);
        fleet.restart_pod(1);
        let m = fleet.pods()[1].metrics();
        assert_eq!((m.generation_tokens, m.running, m.created), (0, 0, origin + 60.0));
    }

    #[test]
    fn lengths_and_cache_hits_are_reported_as_vllm_counts_them() {
        let mut fleet = Fleet::new(config(20.0, 256), None, 0.0);
        fleet.advance_to(600.0);
        let m = fleet.pods()[0].metrics();
        let finished = m.success_stop + m.success_length;
        assert!(finished > 1000, "{finished}");
        assert_eq!((m.prompt_len.count, m.output_len.count), (finished, finished));
        // Finished requests' tokens, whole: the histograms' sums are the counters less what is in flight.
        assert!(m.prompt_len.sum <= m.prompt_tokens as f64 && m.output_len.sum <= m.generation_tokens as f64);
        let share = m.cache_hits as f64 / m.cache_queries as f64;
        assert!((share - 0.25).abs() < 0.01, "{share}");
        // The Azure-fitted prompt length: log-normal(6.63, 0.99), mean ~1,230 tokens.
        let mean = m.prompt_len.sum / m.prompt_len.count as f64;
        assert!((1_000.0..1_500.0).contains(&mean), "{mean}");
    }
}
