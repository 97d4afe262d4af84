//! Demand for the simulated fleet: request arrivals with prompt and output
//! token counts, on a daily and weekly envelope.
//!
//! A base process supplies requests in its own time τ at a native rate r0:
//! either a recorded trace in the Azure LLM inference format
//! (`TIMESTAMP,ContextTokens,GeneratedTokens`, looped), or a synthetic Poisson
//! process whose token counts are lognormal with parameters fitted to the
//! Azure LLM 2023 conversation trace (log-mean/log-sd 6.63/0.99 for prompt
//! tokens, 5.02/0.86 for output tokens; 19,366 requests). Wall time t drives τ
//! at dτ/dt = m(t) / r0, where m(t) is the target request rate: the trace's
//! burstiness and token mix survive, and its rate follows the envelope.

use std::{path::Path, sync::Arc};

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp1, LogNormal};
use serde::Deserialize;

/// The envelope and the request mix.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DemandConfig {
    /// Mean arrival rate across the fleet, requests per second.
    pub requests_per_sec: f64,
    /// Relative swing of the daily cycle (trough at midnight UTC, peak at
    /// noon); above 1 the rate is zero for part of each day.
    #[serde(default = "default_daily_amplitude")]
    pub daily_amplitude: f64,
    /// Rate multiplier on Saturdays and Sundays (UTC).
    #[serde(default = "default_weekend_factor")]
    pub weekend_factor: f64,
    /// Length of a simulated day; shorter than 86,400 compresses the cycles.
    #[serde(default = "default_day_length_secs")]
    pub day_length_secs: f64,
    /// A request trace in the Azure LLM inference CSV format; synthetic when absent.
    #[serde(default)]
    pub trace_file: Option<std::path::PathBuf>,
    #[serde(default)]
    pub seed: u64,
}

fn default_daily_amplitude() -> f64 {
    0.6
}
fn default_weekend_factor() -> f64 {
    0.7
}
fn default_day_length_secs() -> f64 {
    86_400.0
}

impl DemandConfig {
    /// Target arrival rate at Unix time `t`.
    pub(crate) fn rate_at(&self, t: f64) -> f64 {
        let day = t / self.day_length_secs;
        let daily = 1.0 - self.daily_amplitude * (2.0 * std::f64::consts::PI * day.fract()).cos();
        // 1970-01-01 was a Thursday: weekday 0 = Monday.
        let weekday = (day.floor() as i64 + 3).rem_euclid(7);
        let weekly = if weekday >= 5 { self.weekend_factor } else { 1.0 };
        (self.requests_per_sec * daily * weekly).max(0.0)
    }

    pub(crate) fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if !(0.0..=100_000.0).contains(&self.requests_per_sec) {
            out.push(("requests_per_sec", format!("must be within 0..=100000, got {}", self.requests_per_sec)));
        }
        if !(0.0..=10.0).contains(&self.daily_amplitude) {
            out.push(("daily_amplitude", format!("must be within 0..=10, got {}", self.daily_amplitude)));
        }
        if !(self.weekend_factor.is_finite() && self.weekend_factor >= 0.0) {
            out.push(("weekend_factor", format!("must be a finite number >= 0, got {}", self.weekend_factor)));
        }
        if !(self.day_length_secs.is_finite() && self.day_length_secs >= 1.0) {
            out.push(("day_length_secs", format!("must be at least 1, got {}", self.day_length_secs)));
        }
        out
    }
}

/// One request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Request {
    /// Arrival, Unix seconds.
    pub(crate) arrival: f64,
    pub prompt_tokens: u32,
    pub(crate) output_tokens: u32,
}

/// A request of a recorded trace: offset from the trace's start, tokens.
pub(crate) type TraceRow = (f64, u32, u32);

/// Load an Azure-format trace (`TIMESTAMP,ContextTokens,GeneratedTokens`).
pub fn load_trace(path: &Path) -> Result<Vec<TraceRow>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut rows = Vec::new();
    let mut first: Option<chrono::NaiveDateTime> = None;
    for (i, line) in text.lines().enumerate().skip(1) {
        let mut cols = line.split(',');
        let (Some(ts), Some(ctx), Some(gen)) = (cols.next(), cols.next(), cols.next()) else {
            return Err(format!("{}:{}: expected 3 columns", path.display(), i + 1));
        };
        // Seven fractional digits in the Azure files: chrono reads up to nine.
        let t = chrono::NaiveDateTime::parse_from_str(ts.trim(), "%Y-%m-%d %H:%M:%S%.f")
            .map_err(|e| format!("{}:{}: bad timestamp `{ts}`: {e}", path.display(), i + 1))?;
        let num = |s: &str| s.trim().parse::<u32>().map_err(|e| format!("{}:{}: `{s}`: {e}", path.display(), i + 1));
        let t0 = *first.get_or_insert(t);
        rows.push(((t - t0).num_microseconds().unwrap_or(0) as f64 / 1e6, num(ctx)?, num(gen)?.max(1)));
    }
    if rows.len() < 2 {
        return Err(format!("{}: a trace needs at least two requests", path.display()));
    }
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    Ok(rows)
}

enum Base {
    Synthetic { rng: Box<ChaCha8Rng>, prompt: LogNormal<f64>, output: LogNormal<f64> },
    Trace { rows: Arc<Vec<TraceRow>>, next: usize, lap: f64, span: f64 },
}

impl Base {
    /// Native rate r0, requests per unit of τ.
    fn native_rate(&self) -> f64 {
        match self {
            Base::Synthetic { .. } => 1.0,
            Base::Trace { rows, span, .. } => rows.len() as f64 / span,
        }
    }

    /// The next request as (τ, prompt, output).
    fn next(&mut self, tau: f64) -> (f64, u32, u32) {
        match self {
            Base::Synthetic { rng, prompt, output } => {
                let gap: f64 = Exp1.sample(rng);
                let p = prompt.sample(rng).round().clamp(1.0, 32_768.0) as u32;
                let o = output.sample(rng).round().clamp(1.0, 4_096.0) as u32;
                (tau + gap, p, o)
            }
            Base::Trace { rows, next, lap, span } => {
                let (off, p, o) = rows[*next];
                let at = *lap + off;
                *next += 1;
                if *next == rows.len() {
                    *next = 0;
                    *lap += *span;
                }
                (at, p, o)
            }
        }
    }
}

/// Arrivals in time order from a fixed origin: the same config, seed and
/// origin always give the same requests.
pub struct Arrivals {
    config: DemandConfig,
    base: Base,
    r0: f64,
    /// Wall time and base time reached by the integration.
    t: f64,
    tau: f64,
    pending: Option<(f64, u32, u32)>,
}

impl Arrivals {
    pub fn new(config: DemandConfig, trace: Option<Arc<Vec<TraceRow>>>, origin: f64) -> Self {
        let base = match trace {
            Some(rows) => {
                // The span includes one mean gap, so a looped trace keeps its rate.
                let last = rows.last().map(|r| r.0).unwrap_or(0.0);
                let span = last * rows.len() as f64 / (rows.len() as f64 - 1.0);
                Base::Trace { rows, next: 0, lap: 0.0, span }
            }
            None => Base::Synthetic {
                rng: Box::new(ChaCha8Rng::seed_from_u64(config.seed)),
                prompt: LogNormal::new(6.63, 0.99).expect("valid parameters"),
                output: LogNormal::new(5.02, 0.86).expect("valid parameters"),
            },
        };
        let r0 = base.native_rate();
        let mut rng_offset = ChaCha8Rng::seed_from_u64(config.seed ^ 0x5eed);
        // Start the base process at a seeded point so pods of different seeds differ.
        let tau = if matches!(base, Base::Trace { .. }) { 0.0 } else { rng_offset.random::<f64>() };
        Arrivals { config, base, r0, t: origin, tau, pending: None }
    }

    /// The next request arriving at or before `limit`, if any.
    pub fn next_before(&mut self, limit: f64) -> Option<Request> {
        loop {
            let (tau_next, p, o) = match self.pending {
                Some(x) => x,
                None => {
                    let x = self.base.next(self.tau);
                    self.pending = Some(x);
                    x
                }
            };
            // Integrate dτ/dt = m(t)/r0 one whole wall second at a time (m constant within it).
            let step_end = (self.t.floor() + 1.0).min(limit.max(self.t));
            let speed = self.config.rate_at(self.t.floor()) / self.r0;
            let tau_at_end = self.tau + speed * (step_end - self.t);
            if speed > 0.0 && tau_next <= tau_at_end {
                let arrival = self.t + (tau_next - self.tau) / speed;
                self.t = arrival;
                self.tau = tau_next;
                self.pending = None;
                return Some(Request { arrival, prompt_tokens: p, output_tokens: o });
            }
            if step_end >= limit {
                self.tau = tau_at_end;
                self.t = limit;
                return None;
            }
            self.tau = tau_at_end;
            self.t = step_end;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(rps: f64) -> DemandConfig {
        DemandConfig {
            requests_per_sec: rps,
            daily_amplitude: 0.0,
            weekend_factor: 1.0,
            day_length_secs: 86_400.0,
            trace_file: None,
            seed: 7,
        }
    }

    #[test]
    fn synthetic_arrivals_follow_the_rate_and_are_repeatable() {
        let origin = 1_700_000_000.0;
        let count = |c: DemandConfig| {
            let mut a = Arrivals::new(c, None, origin);
            std::iter::from_fn(|| a.next_before(origin + 1000.0)).count()
        };
        let n = count(config(20.0));
        assert!((18_000..22_000).contains(&n), "{n}");
        assert_eq!(n, count(config(20.0)));
        assert_eq!(count(config(0.0)), 0);
    }

    #[test]
    fn arrivals_are_ordered_and_resumable() {
        let origin = 1_700_000_000.0;
        let mut whole = Arrivals::new(config(5.0), None, origin);
        let all: Vec<_> = std::iter::from_fn(|| whole.next_before(origin + 300.0)).collect();
        let mut parts = Arrivals::new(config(5.0), None, origin);
        let mut pieces = Vec::new();
        for k in 1..=30 {
            pieces.extend(std::iter::from_fn(|| parts.next_before(origin + 10.0 * f64::from(k))));
        }
        assert_eq!(all, pieces);
        assert!(all.windows(2).all(|w| w[0].arrival <= w[1].arrival));
    }

    #[test]
    fn the_envelope_has_a_daily_and_weekly_shape() {
        let c = DemandConfig { daily_amplitude: 0.5, weekend_factor: 0.5, ..config(10.0) };
        let monday = 4.0 * 86_400.0; // 1970-01-05
        assert!((c.rate_at(monday) - 5.0).abs() < 1e-9, "trough at midnight");
        assert!((c.rate_at(monday + 43_200.0) - 15.0).abs() < 1e-9, "peak at noon");
        assert!((c.rate_at(monday + 5.0 * 86_400.0 + 43_200.0) - 7.5).abs() < 1e-9, "Saturday");
    }
}
