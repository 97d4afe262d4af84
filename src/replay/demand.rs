//! Demand traces for the simulator: the expected request rate per minute,
//! and the token mix that sets how long a request holds a batch slot.
//!
//! Three ways to get one:
//! - [`Demand::from_series`]: a recorded series (the NAB traces: taxi
//!   passengers, load-balancer requests, tweets) used as the *shape* of
//!   request arrivals, interpolated to minutes and scaled so its 99th
//!   percentile minute is a stated fleet peak. The series' own units mean
//!   nothing to an LLM fleet; its daily and weekly rhythm, holidays and
//!   bursts do.
//! - [`Demand::with_bursts`]: minute-to-minute burstiness taken from a real
//!   LLM request log (the Azure LLM inference trace): arrivals per minute
//!   divided by their local (15-minute) mean, tiled over the demand. Those logs span an hour,
//!   too short for a daily cycle, so they modulate a seasonal envelope
//!   rather than stand alone.
//! - [`Synthetic`]: a documented generator (daily and weekly cycles, bursts,
//!   a level shift, noise) from a seed.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::SimError;
use crate::{fake_vllm::demand::TraceRow, forecast::Series};

/// Expected arrivals, minute by minute, and what a request asks for.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Demand {
    /// Unix seconds of minute 0.
    pub start: i64,
    /// Expected requests per second during each minute.
    pub rate: Vec<f64>,
    pub mix: TokenMix,
    /// Recorded arrivals per second (a ServeGen trace): replayed as they
    /// are instead of Poisson draws from `rate`, which is then their
    /// per-minute mean.
    #[serde(skip)]
    pub arrivals: Option<Vec<f32>>,
}

/// Mean tokens per request.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TokenMix {
    pub(crate) prompt_tokens: f64,
    pub(crate) output_tokens: f64,
}

impl TokenMix {
    /// The means of the lognormal fitted to the Azure LLM 2023 conversation
    /// trace (log-mean/log-sd 6.63/0.99 prompt, 5.02/0.86 output), the same
    /// fit the simulated vLLM pods draw from.
    pub fn azure_conversation() -> TokenMix {
        TokenMix {
            prompt_tokens: (6.63f64 + 0.99 * 0.99 / 2.0).exp(),
            output_tokens: (5.02f64 + 0.86 * 0.86 / 2.0).exp(),
        }
    }

    /// The means of a request log.
    pub(crate) fn of_requests(rows: &[TraceRow]) -> Option<TokenMix> {
        if rows.is_empty() {
            return None;
        }
        let n = rows.len() as f64;
        Some(TokenMix {
            prompt_tokens: rows.iter().map(|r| f64::from(r.1)).sum::<f64>() / n,
            output_tokens: rows.iter().map(|r| f64::from(r.2)).sum::<f64>() / n,
        })
    }
}

impl Demand {
    pub fn minutes(&self) -> usize {
        self.rate.len()
    }

    /// Expected rate at `secs` after the start (held within a minute; 0 past the end).
    pub(crate) fn rate_at(&self, secs: f64) -> f64 {
        if secs < 0.0 {
            return 0.0;
        }
        self.rate.get((secs / 60.0) as usize).copied().unwrap_or(0.0)
    }

    /// A regularly spaced series as the shape of demand: linear between
    /// points (gaps bridged the same way), one value per minute, scaled so
    /// the 99th percentile minute is `peak_rps` (a percentile, not the
    /// maximum, so one freak spike does not shrink the rest of the trace).
    pub(crate) fn from_series(series: &Series, peak_rps: f64, mix: TokenMix) -> Result<Demand, SimError> {
        if !(peak_rps.is_finite() && peak_rps > 0.0) {
            return Err(SimError::Input(format!("peak rate must be a number > 0, got {peak_rps}")));
        }
        if series.step <= 0 {
            return Err(SimError::Input(format!("series step must be > 0 s, got {}", series.step)));
        }
        let known: Vec<(f64, f64)> = series
            .values
            .iter()
            .enumerate()
            .filter(|(_, v)| v.is_finite())
            .map(|(i, v)| ((i as i64 * series.step) as f64, v.max(0.0)))
            .collect();
        if known.len() < 2 {
            return Err(SimError::Input("the series needs at least two numeric points".into()));
        }
        let (first, last) = (known[0].0, known[known.len() - 1].0);
        let minutes = ((last - first) / 60.0).floor() as usize + 1;
        let mut rate = Vec::with_capacity(minutes);
        let mut j = 0;
        for m in 0..minutes {
            let t = first + m as f64 * 60.0;
            while j + 2 < known.len() && known[j + 1].0 <= t {
                j += 1;
            }
            let ((t0, v0), (t1, v1)) = (known[j], known[j + 1]);
            let w = ((t - t0) / (t1 - t0)).clamp(0.0, 1.0);
            rate.push(v0 + w * (v1 - v0));
        }
        let mut sorted = rate.clone();
        let p99 = crate::forecast::backtest::quantile(&mut sorted, 0.99);
        if p99.is_nan() || p99 <= 0.0 {
            return Err(SimError::Input("the series is zero almost everywhere: no shape to scale".into()));
        }
        let k = peak_rps / p99;
        rate.iter_mut().for_each(|r| *r *= k);
        Ok(Demand { start: series.start + first as i64, rate, mix, arrivals: None })
    }

    /// Multiply each minute by the burstiness of a request log: its arrivals
    /// per minute over their centred 15-minute mean, tiled from `phase`
    /// minutes in. Partial minutes at the log's ends are dropped.
    pub(crate) fn with_bursts(mut self, rows: &[TraceRow], phase: usize) -> Result<Demand, SimError> {
        if self.arrivals.is_some() {
            return Err(SimError::Input("recorded arrivals already carry their own bursts".into()));
        }
        let span = rows.last().map_or(0.0, |r| r.0);
        let whole = (span / 60.0).floor() as usize;
        if whole < 2 {
            return Err(SimError::Input(format!(
                "a burst log needs at least two whole minutes, this one spans {span:.0} s"
            )));
        }
        let mut counts = vec![0.0f64; whole];
        for r in rows {
            if let Some(c) = counts.get_mut((r.0 / 60.0) as usize) {
                *c += 1.0;
            }
        }
        // Against a centred 15-minute mean: the log's own slow trend over its
        // hour is not a burst (the envelope supplies the slow part), and tiled
        // it would become a fake 58-minute cycle.
        let half = 7usize;
        let factor: Vec<f64> = (0..whole)
            .map(|m| {
                let (lo, hi) = (m.saturating_sub(half), (m + half + 1).min(whole));
                let local = counts[lo..hi].iter().sum::<f64>() / (hi - lo) as f64;
                if local > 0.0 {
                    counts[m] / local
                } else {
                    1.0
                }
            })
            .collect();
        for (m, r) in self.rate.iter_mut().enumerate() {
            *r *= factor[(m + phase) % whole];
        }
        Ok(self)
    }

    /// The minutes `[from, to)` as their own demand.
    pub(crate) fn window(&self, from: usize, to: usize) -> Demand {
        let to = to.min(self.rate.len());
        let from = from.min(to);
        let arrivals = self.arrivals.as_ref().map(|a| a[(from * 60).min(a.len())..(to * 60).min(a.len())].to_vec());
        Demand { start: self.start + 60 * from as i64, rate: self.rate[from..to].to_vec(), mix: self.mix, arrivals }
    }
}

/// A synthetic demand: `mean_rps` x daily cycle x weekday factor x level
/// shift, with bursts and multiplicative noise, all from `seed`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Synthetic {
    pub days: f64,
    /// Unix seconds of the first minute (sets the weekday and hour).
    pub start: i64,
    pub mean_rps: f64,
    /// Relative swing of the daily cycle: trough at 04:00 UTC, peak at 16:00.
    pub daily_amplitude: f64,
    /// Rate multiplier on Saturdays and Sundays.
    pub weekend_factor: f64,
    /// Expected bursts per day; each multiplies the rate by `burst_factor`
    /// for `burst_minutes`.
    pub bursts_per_day: f64,
    pub burst_factor: f64,
    pub burst_minutes: usize,
    /// From this day on the rate is multiplied by `level_shift_factor` (a new customer).
    pub level_shift_day: Option<f64>,
    pub level_shift_factor: f64,
    /// Standard deviation of the per-minute multiplicative noise.
    pub noise: f64,
    pub seed: u64,
}

impl Default for Synthetic {
    fn default() -> Self {
        Synthetic {
            days: 14.0,
            // Monday 2026-01-05 00:00 UTC.
            start: 1_767_571_200,
            mean_rps: 60.0,
            daily_amplitude: 0.6,
            weekend_factor: 0.6,
            bursts_per_day: 2.0,
            burst_factor: 1.6,
            burst_minutes: 10,
            level_shift_day: None,
            level_shift_factor: 1.5,
            noise: 0.05,
            seed: 1,
        }
    }
}

impl Synthetic {
    pub fn generate(&self, mix: TokenMix) -> Result<Demand, SimError> {
        if !(self.days > 0.0 && self.days <= 400.0) {
            return Err(SimError::Input(format!("days must be within (0, 400], got {}", self.days)));
        }
        for (name, v) in [
            ("mean_rps", self.mean_rps),
            ("daily_amplitude", self.daily_amplitude),
            ("weekend_factor", self.weekend_factor),
            ("bursts_per_day", self.bursts_per_day),
            ("burst_factor", self.burst_factor),
            ("level_shift_factor", self.level_shift_factor),
            ("noise", self.noise),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(SimError::Input(format!("{name} must be a finite number >= 0, got {v}")));
            }
        }
        let minutes = (self.days * 1440.0).round() as usize;
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let burst_p = self.bursts_per_day / 1440.0;
        let mut burst_left = 0usize;
        let mut rate = Vec::with_capacity(minutes);
        for m in 0..minutes {
            let t = self.start as f64 + 60.0 * m as f64;
            let hour = (t / 3600.0).rem_euclid(24.0);
            let daily = 1.0 + self.daily_amplitude * (2.0 * std::f64::consts::PI * (hour - 10.0) / 24.0).sin();
            // 1970-01-01 was a Thursday: weekday 0 = Monday.
            let weekday = ((t / 86_400.0).floor() as i64 + 3).rem_euclid(7);
            let weekly = if weekday >= 5 { self.weekend_factor } else { 1.0 };
            let shift = match self.level_shift_day {
                Some(d) if m as f64 >= d * 1440.0 => self.level_shift_factor,
                _ => 1.0,
            };
            if burst_left == 0 && rng.random::<f64>() < burst_p {
                burst_left = self.burst_minutes;
            }
            let burst = if burst_left > 0 {
                burst_left -= 1;
                self.burst_factor
            } else {
                1.0
            };
            // Box-Muller: a normal draw without another dependency on the hot path.
            let (u1, u2) = (rng.random::<f64>().max(1e-12), rng.random::<f64>());
            let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
            let noise = (1.0 + self.noise * z).max(0.0);
            rate.push((self.mean_rps * daily.max(0.0) * weekly * shift * burst * noise).max(0.0));
        }
        Ok(Demand { start: self.start, rate, mix, arrivals: None })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_series_is_interpolated_to_minutes_and_scaled_at_its_99th_percentile() {
        // 5-minute points rising 0, 10, 20, ...: minute 2 sits 40% of the way from 0 to 10.
        let s = Series { start: 1_000_000, step: 300, values: (0..200).map(|i| 10.0 * i as f64).collect() };
        let d = Demand::from_series(&s, 100.0, TokenMix::azure_conversation()).unwrap();
        assert_eq!(d.minutes(), 199 * 5 + 1);
        let mut sorted = d.rate.clone();
        assert!((crate::forecast::backtest::quantile(&mut sorted, 0.99) - 100.0).abs() < 1e-9);
        let k = d.rate[5]; // the second point, value 10 before scaling
        assert!((d.rate[2] - 0.4 * k).abs() < 1e-9);
    }

    #[test]
    fn gaps_are_bridged_and_bad_input_is_refused() {
        let mut v: Vec<f64> = (0..100).map(|i| 1.0 + i as f64).collect();
        v[10] = f64::NAN;
        let s = Series { start: 0, step: 60, values: v };
        let d = Demand::from_series(&s, 10.0, TokenMix::azure_conversation()).unwrap();
        assert!((d.rate[10] - (d.rate[9] + d.rate[11]) / 2.0).abs() < 1e-9);
        assert!(Demand::from_series(&s, f64::NAN, TokenMix::azure_conversation()).is_err());
        let flat = Series { start: 0, step: 60, values: vec![0.0; 50] };
        assert!(Demand::from_series(&flat, 10.0, TokenMix::azure_conversation()).is_err());
    }

    #[test]
    fn bursts_keep_the_mean_of_the_log() {
        let rows: Vec<TraceRow> = (0..600).map(|i| (i as f64 * if i < 300 { 0.1 } else { 0.3 }, 100, 10)).collect();
        let d = Demand { start: 0, rate: vec![1.0; 10], mix: TokenMix::azure_conversation(), arrivals: None };
        let b = d.with_bursts(&rows, 0).unwrap();
        // 300 requests in the first 30 s, then 300 over 90 s: minute 0 is busier than minute 1.
        assert!(b.rate[0] > b.rate[1]);
    }

    #[test]
    fn the_generator_is_deterministic_and_shifts_level() {
        let g = Synthetic {
            days: 2.0,
            level_shift_day: Some(1.0),
            noise: 0.0,
            bursts_per_day: 0.0,
            ..Synthetic::default()
        };
        let a = g.generate(TokenMix::azure_conversation()).unwrap();
        assert_eq!(a, g.generate(TokenMix::azure_conversation()).unwrap());
        // Same hour of a weekday, a day apart: 1.5x after the shift.
        assert!((a.rate[1440 + 600] / a.rate[600] - 1.5).abs() < 1e-9);
        assert!(Synthetic { mean_rps: f64::NAN, ..g }.generate(TokenMix::azure_conversation()).is_err());
    }
}
