//! The demo source: a fleet of simulated vLLM replicas inside the process.
//!
//! Demand is a compressed daily cycle (a "day" lasts `day_length_secs`) of
//! in-flight requests between `trough_concurrency` and `peak_concurrency`,
//! plus optional deterministic noise. The fleet follows Foresight's own
//! decisions: new replicas become ready after `replica_startup_secs`, and each
//! ready replica runs at most `max_num_seqs` requests (vLLM's
//! `--max-num-seqs`); the rest wait. Signals derive from that state the way
//! vLLM's metrics would, so the demo and tests need no cluster.
//!
//! Demand is a pure function of wall-clock time and the seed, so two Foresight
//! processes with the same config see the same demand at the same moment.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Deserialize;

use super::{Signal, Signals};

/// Parameters of a simulated fleet.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DemoConfig {
    /// In-flight requests at the top of the daily cycle.
    pub peak_concurrency: f64,
    /// In-flight requests at the bottom of the daily cycle.
    #[serde(default)]
    pub trough_concurrency: f64,
    /// Length of one simulated day; short so the demo shows a whole cycle in minutes.
    #[serde(default = "default_day_length_secs")]
    pub day_length_secs: f64,
    /// Relative noise amplitude (0 = none, 0.1 = up to ±10% of the level).
    #[serde(default)]
    pub noise: f64,
    /// Seed for the noise, so runs are reproducible.
    #[serde(default)]
    pub seed: u64,
    /// Replicas running when the process starts.
    #[serde(default = "default_initial_replicas")]
    pub initial_replicas: u32,
    /// Time from a scale-up decision until the new replica serves.
    #[serde(default = "default_startup_secs")]
    pub replica_startup_secs: f64,
    /// Requests one replica runs at once (vLLM `--max-num-seqs`); more wait.
    #[serde(default = "default_max_num_seqs")]
    pub max_num_seqs: u32,
    /// Mean request duration, used with Little's law to turn concurrency into an arrival rate.
    #[serde(default = "default_mean_request_secs")]
    pub mean_request_secs: f64,
    /// Mean prompt tokens per request.
    #[serde(default = "default_prompt_tokens")]
    pub mean_prompt_tokens: f64,
    /// Mean generated tokens per request.
    #[serde(default = "default_output_tokens")]
    pub mean_output_tokens: f64,
}

fn default_day_length_secs() -> f64 {
    600.0
}
fn default_initial_replicas() -> u32 {
    1
}
fn default_startup_secs() -> f64 {
    20.0
}
fn default_max_num_seqs() -> u32 {
    256
}
fn default_mean_request_secs() -> f64 {
    8.0
}
fn default_prompt_tokens() -> f64 {
    1024.0
}
fn default_output_tokens() -> f64 {
    256.0
}

impl DemoConfig {
    /// Problems with the parameters, as (field, message) pairs.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        let mut non_negative = |field, v: f64| {
            if !(v.is_finite() && v >= 0.0) {
                out.push((field, format!("must be a finite number >= 0, got {v}")));
            }
        };
        non_negative("peak_concurrency", self.peak_concurrency);
        non_negative("trough_concurrency", self.trough_concurrency);
        non_negative("mean_prompt_tokens", self.mean_prompt_tokens);
        non_negative("mean_output_tokens", self.mean_output_tokens);
        if !(0.0..=1.0).contains(&self.noise) {
            out.push(("noise", format!("must be within 0..=1, got {}", self.noise)));
        }
        if !(0.0..=86_400.0).contains(&self.replica_startup_secs) {
            out.push(("replica_startup_secs", format!("must be within 0..=86400, got {}", self.replica_startup_secs)));
        }
        for (field, v) in [("day_length_secs", self.day_length_secs), ("mean_request_secs", self.mean_request_secs)] {
            if !(v.is_finite() && v > 0.0) {
                out.push((field, format!("must be a finite number > 0, got {v}")));
            }
        }
        if self.trough_concurrency > self.peak_concurrency {
            out.push((
                "trough_concurrency",
                format!("must not exceed peak_concurrency ({} > {})", self.trough_concurrency, self.peak_concurrency),
            ));
        }
        if self.max_num_seqs == 0 {
            out.push(("max_num_seqs", "must be at least 1".to_string()));
        }
        out
    }

    /// In-flight demand at `t` seconds since the Unix epoch.
    pub fn demand_at(&self, t: f64) -> f64 {
        let phase = (t / self.day_length_secs).fract();
        let cycle = 0.5 - 0.5 * (2.0 * std::f64::consts::PI * phase).cos();
        let level = self.trough_concurrency + (self.peak_concurrency - self.trough_concurrency) * cycle;
        let jitter = if self.noise > 0.0 {
            // One noise draw per whole second: repeatable for a given time and seed.
            1.0 + self.noise * (2.0 * unit_hash(self.seed, t.floor() as u64) - 1.0)
        } else {
            1.0
        };
        (level * jitter).max(0.0)
    }
}

/// A uniform number in [0, 1) from (seed, n): splitmix64.
fn unit_hash(seed: u64, n: u64) -> f64 {
    let mut z = seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// The simulated fleet: ready replicas and replicas still starting.
#[derive(Debug)]
pub struct DemoFleet {
    config: DemoConfig,
    ready: u32,
    starting: Vec<SystemTime>,
}

impl DemoFleet {
    pub fn new(config: DemoConfig) -> Self {
        let ready = config.initial_replicas;
        DemoFleet { config, ready, starting: Vec::new() }
    }

    /// Ready replicas and replicas still starting.
    pub fn replicas(&self) -> (u32, u32) {
        (self.ready, self.starting.len() as u32)
    }

    /// The signals vLLM would report across the fleet at `now`.
    pub fn poll(&mut self, now: SystemTime) -> Signals {
        self.promote(now);
        let c = &self.config;
        let t = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64();
        let concurrency = c.demand_at(t);
        let slots = f64::from(self.ready) * f64::from(c.max_num_seqs);
        let running = concurrency.min(slots);
        let waiting = concurrency - running;
        let request_rate = concurrency / c.mean_request_secs;
        let kv = if slots > 0.0 { running / slots } else { 0.0 };
        let mut s = Signals::default();
        for (k, v) in [
            (Signal::Concurrency, concurrency),
            (Signal::Running, running),
            (Signal::QueueDepth, waiting),
            (Signal::RequestRate, request_rate),
            (Signal::PromptTokensRate, request_rate * c.mean_prompt_tokens),
            (Signal::GenerationTokensRate, request_rate * c.mean_output_tokens),
            (Signal::KvCacheUsage, kv),
        ] {
            s.values.insert(k, v);
        }
        s
    }

    /// Follow a decision: start replicas (ready after the startup time) or
    /// stop them (starting ones first, as a Deployment scale-down would).
    pub fn scale_to(&mut self, desired: u32, now: SystemTime) {
        self.promote(now);
        let total = self.ready + self.starting.len() as u32;
        if desired > total {
            let at = now + Duration::from_secs_f64(self.config.replica_startup_secs);
            self.starting.extend(std::iter::repeat_n(at, (desired - total) as usize));
        } else {
            let mut excess = total - desired;
            while excess > 0 && self.starting.pop().is_some() {
                excess -= 1;
            }
            self.ready -= excess.min(self.ready);
        }
    }

    fn promote(&mut self, now: SystemTime) {
        let before = self.starting.len();
        self.starting.retain(|at| *at > now);
        self.ready += (before - self.starting.len()) as u32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(peak: f64, trough: f64) -> DemoConfig {
        serde_yaml_ng::from_str(&format!("peak_concurrency: {peak}\ntrough_concurrency: {trough}")).unwrap()
    }

    #[test]
    fn demand_follows_the_cycle() {
        let c = config(100.0, 10.0);
        assert!((c.demand_at(0.0) - 10.0).abs() < 1e-9, "trough at phase 0");
        assert!((c.demand_at(c.day_length_secs / 2.0) - 100.0).abs() < 1e-9, "peak at half a day");
    }

    #[test]
    fn noise_is_bounded_and_repeatable() {
        let mut c = config(100.0, 100.0);
        c.noise = 0.2;
        for t in 0..1000 {
            let d = c.demand_at(f64::from(t));
            assert!((80.0..=120.0).contains(&d), "{d}");
            assert_eq!(d, c.demand_at(f64::from(t)));
        }
    }

    #[test]
    fn replicas_become_ready_after_startup_and_queue_meanwhile() {
        let mut c = config(300.0, 300.0);
        c.max_num_seqs = 100;
        c.replica_startup_secs = 10.0;
        let mut fleet = DemoFleet::new(c);
        let t0 = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let s = fleet.poll(t0);
        assert_eq!(s.get(Signal::Running), Some(100.0));
        assert_eq!(s.get(Signal::QueueDepth), Some(200.0));
        fleet.scale_to(3, t0);
        assert_eq!(fleet.replicas(), (1, 2));
        let s = fleet.poll(t0 + Duration::from_secs(9));
        assert_eq!(s.get(Signal::QueueDepth), Some(200.0), "not ready yet");
        let s = fleet.poll(t0 + Duration::from_secs(10));
        assert_eq!(s.get(Signal::QueueDepth), Some(0.0));
        assert_eq!(fleet.replicas(), (3, 0));
        fleet.scale_to(0, t0 + Duration::from_secs(11));
        assert_eq!(fleet.replicas(), (0, 0));
    }

    #[test]
    fn invalid_parameters_are_named() {
        let mut c = config(10.0, 20.0);
        c.day_length_secs = f64::NAN;
        let fields: Vec<_> = c.problems().into_iter().map(|(f, _)| f).collect();
        assert_eq!(fields, ["day_length_secs", "trough_concurrency"]);
    }
}
