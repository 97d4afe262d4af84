//! Exponential smoothing with additive errors: Holt-Winters (additive trend
//! and season, optionally damped), damped Holt (no season), and the
//! short-history blend of damped Holt with the latest value.
//!
//! Written here because no Rust crate fits a seasonal ETS: augurs-ets has no
//! seasonal models. Smoothing parameters are fitted by minimising the
//! one-step squared error with argmin's Nelder-Mead, through a logistic
//! transform that keeps them admissible (0 < beta < alpha < 1,
//! 0 < gamma < 1 - alpha, 0.8 <= phi <= 0.98).

use argmin::core::{CostFunction, Executor};
use argmin::solver::neldermead::NelderMead;

use super::{Fitted, ForecastError, Model, Seasons, Train};

/// Additive Holt-Winters on the shortest season.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HoltWinters {
    pub(crate) damped: bool,
}

/// Damped Holt: level and trend, no season.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Holt;

/// For less than two days of history: the mean of damped Holt and the latest
/// value, so a young trend is followed without betting on it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ShortTrend;

impl Model for HoltWinters {
    fn name(&self) -> &'static str {
        if self.damped {
            "holt-winters-damped"
        } else {
            "holt-winters"
        }
    }

    fn min_len(&self, seasons: &Seasons) -> usize {
        seasons.shortest().map_or(usize::MAX, |m| 2 * m)
    }

    fn fit(&self, train: &Train<'_>) -> Result<Box<dyn Fitted>, ForecastError> {
        let need = self.min_len(train.seasons);
        if train.len() < need {
            return Err(ForecastError::TooShort { model: self.name().into(), have: train.len(), need });
        }
        Ok(Box::new(fit(train.values, train.seasons.shortest(), self.damped)))
    }
}

impl Model for Holt {
    fn name(&self) -> &'static str {
        "holt-damped"
    }

    fn min_len(&self, _: &Seasons) -> usize {
        3
    }

    fn fit(&self, train: &Train<'_>) -> Result<Box<dyn Fitted>, ForecastError> {
        if train.len() < 3 {
            return Err(ForecastError::TooShort { model: self.name().into(), have: train.len(), need: 3 });
        }
        Ok(Box::new(fit(train.values, None, true)))
    }
}

impl Model for ShortTrend {
    fn name(&self) -> &'static str {
        "short-trend"
    }

    fn min_len(&self, _: &Seasons) -> usize {
        1
    }

    fn fit(&self, train: &Train<'_>) -> Result<Box<dyn Fitted>, ForecastError> {
        let last = *train.values.last().ok_or(ForecastError::NoData)?;
        let holt = (train.len() >= 3).then(|| fit(train.values, None, true));
        Ok(Box::new(Blend { holt, last, seen: train.len() }))
    }
}

struct Blend {
    holt: Option<EtsFit>,
    last: f64,
    /// Points the trend was measured over.
    seen: usize,
}

impl Fitted for Blend {
    /// The trend runs on only as far ahead as the history behind it is long,
    /// then holds: n points show that a trend lasted n steps, not more. A few
    /// minutes of a ramp (a fleet starting, a backlog draining) otherwise
    /// become a forecast of many times the load over a cold start.
    fn predict(&self, h: usize) -> Vec<f64> {
        match &self.holt {
            Some(holt) => {
                let mut f = holt.predict(h);
                if let Some(&held) = f.get(self.seen.saturating_sub(1)) {
                    f[self.seen..].iter_mut().for_each(|v| *v = held);
                }
                f.into_iter().map(|t| 0.5 * (t + self.last)).collect()
            }
            None => vec![self.last; h],
        }
    }
}

/// Older history adds little to smoothing parameters and costs fit time, so
/// parameters and states are fitted on the most recent window only.
fn fit_window(season: Option<usize>) -> usize {
    season.map_or(2_016, |m| (6 * m).max(4_032))
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Params {
    alpha: f64,
    beta: f64,
    gamma: f64,
    phi: f64,
}

fn logistic(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

impl Params {
    fn decode(x: &[f64], seasonal: bool, damped: bool) -> Params {
        let alpha = 1e-4 + (1.0 - 2e-4) * logistic(x[0]);
        let beta = alpha * logistic(x[1]);
        let gamma = if seasonal { (1.0 - alpha) * logistic(x[2]) } else { 0.0 };
        let phi = if damped { 0.8 + 0.18 * logistic(x[x.len() - 1]) } else { 1.0 };
        Params { alpha, beta, gamma, phi }
    }
}

/// A fitted ETS: final states, ready to forecast.
#[derive(Debug, Clone)]
pub(crate) struct EtsFit {
    level: f64,
    trend: f64,
    phi: f64,
    /// Seasonal states indexed by position mod m (empty without a season).
    season: Vec<f64>,
    /// Points the states have absorbed (so the next point's season index is known).
    seen: usize,
}

impl Fitted for EtsFit {
    fn predict(&self, h: usize) -> Vec<f64> {
        let mut damp = 0.0;
        let mut phi_k = 1.0;
        (1..=h)
            .map(|k| {
                phi_k *= self.phi;
                damp += phi_k;
                let s = if self.season.is_empty() { 0.0 } else { self.season[(self.seen + k - 1) % self.season.len()] };
                self.level + damp * self.trend + s
            })
            .collect()
    }
}

/// Initial states: a line through the means of the first two cycles, and the
/// average deviation from it at each position of the cycle.
fn initial_states(y: &[f64], season: Option<usize>) -> (f64, f64, Vec<f64>) {
    match season {
        Some(m) => {
            let cycles = (y.len() / m).clamp(1, 2);
            let mean = |j: usize| y[j * m..(j + 1) * m].iter().sum::<f64>() / m as f64;
            let b = if cycles == 2 { (mean(1) - mean(0)) / m as f64 } else { 0.0 };
            let line = |t: f64| mean(0) + b * (t - (m as f64 - 1.0) / 2.0);
            let mut s: Vec<f64> = (0..m)
                .map(|i| (0..cycles).map(|j| y[i + j * m] - line((i + j * m) as f64)).sum::<f64>() / cycles as f64)
                .collect();
            let mean_s = s.iter().sum::<f64>() / m as f64;
            s.iter_mut().for_each(|v| *v -= mean_s);
            (line(-1.0) + mean_s, b, s)
        }
        None => {
            let k = y.len().min(10);
            let b = if k > 1 { (y[k - 1] - y[0]) / (k - 1) as f64 } else { 0.0 };
            (y[0] - b, b, Vec::new())
        }
    }
}

/// Runs the recursion over `y`; returns the one-step SSE and the final states.
fn run(y: &[f64], p: Params, init: &(f64, f64, Vec<f64>)) -> (f64, EtsFit) {
    let (mut l, mut b, mut s) = (init.0, init.1, init.2.clone());
    let m = s.len();
    let mut sse = 0.0;
    for (t, &obs) in y.iter().enumerate() {
        let season = if m > 0 { s[t % m] } else { 0.0 };
        let pred = l + p.phi * b + season;
        let e = obs - pred;
        sse += e * e;
        l = l + p.phi * b + p.alpha * e;
        b = p.phi * b + p.beta * e;
        if m > 0 {
            s[t % m] = season + p.gamma * e;
        }
    }
    (sse, EtsFit { level: l, trend: b, phi: p.phi, season: s, seen: y.len() })
}

struct Sse<'a> {
    y: &'a [f64],
    init: (f64, f64, Vec<f64>),
    seasonal: bool,
    damped: bool,
}

impl CostFunction for Sse<'_> {
    type Param = Vec<f64>;
    type Output = f64;

    fn cost(&self, x: &Vec<f64>) -> Result<f64, argmin::core::Error> {
        let (sse, _) = run(self.y, Params::decode(x, self.seasonal, self.damped), &self.init);
        Ok(if sse.is_finite() { sse } else { f64::MAX })
    }
}

/// Fits an additive ETS on `y` (gap-free). Never fails: if the optimiser
/// does, the starting parameters are used.
pub(crate) fn fit(y: &[f64], season: Option<usize>, damped: bool) -> EtsFit {
    let y = &y[y.len().saturating_sub(fit_window(season))..];
    let seasonal = season.is_some();
    let init = initial_states(y, season);
    // alpha 0.5, beta 0.05, gamma 0.1, phi 0.95 as the starting point.
    let mut x0 = vec![0.0, -2.2];
    if seasonal {
        x0.push(-1.6);
    }
    if damped {
        x0.push(1.7);
    }
    let mut simplex = vec![x0.clone()];
    for i in 0..x0.len() {
        let mut v = x0.clone();
        v[i] += 1.5;
        simplex.push(v);
    }
    let best = NelderMead::new(simplex)
        .with_sd_tolerance(1e-7)
        .ok()
        .and_then(|solver| {
            let problem = Sse { y, init: init.clone(), seasonal, damped };
            Executor::new(problem, solver).configure(|s| s.max_iters(120)).run().ok()
        })
        .and_then(|r| r.state.best_param)
        .unwrap_or(x0);
    run(y, Params::decode(&best, seasonal, damped), &init).1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_noise_free_trend_is_extrapolated() {
        let y: Vec<f64> = (0..300).map(|t| 5.0 + 0.5 * t as f64).collect();
        let seasons = Seasons::new(vec![]).unwrap();
        let train = Train { values: &y, start: 0, step: 60, seasons: &seasons };
        let f = Holt.fit(&train).unwrap().predict(10);
        // Damped Holt bends the line by design, but follows it over a short horizon.
        for (k, v) in f.iter().enumerate() {
            let truth = 5.0 + 0.5 * (300 + k) as f64;
            assert!((v - truth).abs() < 0.01 * truth, "step {k}: {v} vs {truth}");
        }
        assert!(f.windows(2).all(|w| w[1] > w[0]), "still rising: {f:?}");
    }

    #[test]
    fn a_short_history_extrapolates_no_further_than_it_is_long() {
        // A minute of a start-up ramp, 0 to 80 in six 10-second steps.
        let y: Vec<f64> = (0..6).map(|t| 16.0 * t as f64).collect();
        let seasons = Seasons::new(vec![]).unwrap();
        let train = Train { values: &y, start: 0, step: 10, seasons: &seasons };
        let f = ShortTrend.fit(&train).unwrap().predict(48);
        // Rising for six steps (as long as the ramp was seen), then level.
        assert!(f[..6].windows(2).all(|w| w[1] > w[0]), "{f:?}");
        assert!(f[6..].iter().all(|v| *v == f[5]), "{f:?}");
        // At most the last value plus six steps of the ramp's slope, halved by the blend.
        assert!(f[47] <= 80.0 + 0.5 * 6.0 * 16.0 + 1e-9, "{}", f[47]);
    }

    #[test]
    fn holt_winters_recovers_trend_plus_season_exactly() {
        let m = 24;
        let truth = |t: usize| 100.0 + 0.3 * t as f64 + 10.0 * (2.0 * std::f64::consts::PI * t as f64 / m as f64).sin();
        let y: Vec<f64> = (0..10 * m).map(truth).collect();
        let seasons = Seasons::new(vec![m]).unwrap();
        let train = Train { values: &y, start: 0, step: 3600, seasons: &seasons };
        let f = HoltWinters { damped: false }.fit(&train).unwrap().predict(48);
        for (k, v) in f.iter().enumerate() {
            assert!((v - truth(y.len() + k)).abs() < 1e-6, "step {k}: {v} vs {}", truth(y.len() + k));
        }
    }

    #[test]
    fn parameters_are_fitted_not_fixed() {
        // A random walk wants alpha near 1; white noise around a level wants it near 0.
        let mut state = 1u64;
        let mut noise = || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((state >> 33) as f64 / (1u64 << 31) as f64) - 0.5
        };
        let mut walk = vec![0.0];
        for _ in 0..999 {
            let next = walk.last().unwrap() + noise();
            walk.push(next);
        }
        let flat: Vec<f64> = (0..1000).map(|_| 50.0 + noise()).collect();
        let alpha = |y: &[f64]| {
            let init = initial_states(y, None);
            let problem = Sse { y, init, seasonal: false, damped: true };
            let x0 = vec![0.0, -2.2, 1.7];
            let simplex = vec![x0.clone(), vec![1.5, -2.2, 1.7], vec![0.0, -0.7, 1.7], vec![0.0, -2.2, 3.2]];
            let r = Executor::new(problem, NelderMead::new(simplex)).configure(|s| s.max_iters(200)).run().unwrap();
            Params::decode(&r.state.best_param.unwrap(), false, true).alpha
        };
        assert!(alpha(&walk) > 0.8, "random walk alpha {}", alpha(&walk));
        assert!(alpha(&flat) < 0.2, "level alpha {}", alpha(&flat));
    }
}
