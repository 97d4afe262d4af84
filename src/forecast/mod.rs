//! Forecasting: a regularly spaced series in, a forecast with quantiles out.
//!
//! Pure code: no I/O, no clock. Callers (the engine's refit task, the
//! `backtest` and `forecast` commands) pass the history and the time it
//! starts at; timestamps are only used for calendar features.
//!
//! The pieces, in the order data flows through them:
//! - [`prep`]: gaps interpolated and one-off spikes clipped, for fitting only
//!   (scores are always against the raw series).
//! - models, each a [`Model`]: [`naive`] (seasonal naive), [`ets`] (Holt-Winters
//!   and damped Holt, fitted by Nelder-Mead), [`decompose`] (MSTL) and
//!   [`calendar`] (regression on calendar features with AR(1) errors), and
//!   [`logscale`], the MSTL and calendar models fitted on `ln(1 + y)` for
//!   demand whose swings scale with its level.
//! - [`backtest`]: rolling-origin splits and scores (MASE, sMAPE, pinball, coverage).
//! - [`auto`]: picks the regime from how much history there is, backtests the
//!   candidates, keeps the best model or an ensemble of the best, and sets
//!   prediction intervals from that model's own backtest errors.
//!
//! Crates used and why:
//! - `stlrs` does the STL/MSTL decomposition. augurs' MSTL builds on the same
//!   STL code but drops any period longer than half the series and forecasts
//!   the trend with an ETS that has no seasonal models, so we use stlrs
//!   directly and forecast the trend with our own damped Holt.
//! - `argmin` (Nelder-Mead) fits the smoothing parameters. No crate offers a
//!   seasonal Holt-Winters with fitted parameters, so [`ets`] is our own.
//! - `linfa-linear` solves the calendar regression's least squares (linfa 0.8
//!   pins ndarray 0.16, so that is the ndarray we use).

pub(crate) mod anchor;
pub mod auto;
pub mod backtest;
pub(crate) mod calendar;
pub(crate) mod decompose;
pub(crate) mod ets;
pub(crate) mod level;
pub(crate) mod logscale;
pub(crate) mod naive;
pub(crate) mod prep;

use serde::Serialize;

pub use auto::{Forecaster, ForecasterConfig};
pub(crate) use backtest::Splits;

/// A regularly spaced series. `NaN` marks a gap.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Unix seconds of `values[0]`.
    pub start: i64,
    /// Seconds between points.
    pub step: i64,
    pub values: Vec<f64>,
}

impl Series {
    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Unix seconds of point `i` (which may be past the end).
    pub fn time_of(&self, i: usize) -> i64 {
        self.start + self.step * i as i64
    }

    /// Points `from..to` as their own series, with the right start time.
    pub fn slice(&self, from: usize, to: usize) -> Series {
        Series { start: self.time_of(from), step: self.step, values: self.values[from..to].to_vec() }
    }
}

/// Seasonal periods in steps, shortest first: "daily" is the first, "weekly" the second.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Seasons(Vec<usize>);

impl Seasons {
    /// Daily and weekly periods for a step in seconds; none when a day is not
    /// a whole number of steps (or fewer than two).
    pub fn calendar(step: i64) -> Seasons {
        if step <= 0 || 86_400 % step != 0 || 86_400 / step < 2 {
            return Seasons(Vec::new());
        }
        let day = (86_400 / step) as usize;
        Seasons(vec![day, day * 7])
    }

    /// Explicit periods (e.g. from `--season`); must be at least 2 steps.
    pub(crate) fn new(mut periods: Vec<usize>) -> Result<Seasons, ForecastError> {
        periods.sort_unstable();
        periods.dedup();
        if let Some(&p) = periods.iter().find(|&&p| p < 2) {
            return Err(ForecastError::BadInput(format!("season {p} is too short: a period needs at least 2 steps")));
        }
        Ok(Seasons(periods))
    }

    pub fn periods(&self) -> &[usize] {
        &self.0
    }

    pub(crate) fn shortest(&self) -> Option<usize> {
        self.0.first().copied()
    }

    /// Only the periods with at least two full cycles in `n` points.
    pub(crate) fn usable(&self, n: usize) -> Seasons {
        Seasons(self.0.iter().copied().filter(|&p| n >= 2 * p).collect())
    }
}

/// How much history the forecast had to work with, and so what it can model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Regime {
    /// Two or more cycles of every season (daily and weekly).
    Seasonal,
    /// Fewer than two weekly cycles: daily seasonality only.
    Daily,
    /// Less than two daily cycles: a short-horizon trend blended with the latest value.
    Short,
}

impl Regime {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Regime::Seasonal => "seasonal",
            Regime::Daily => "daily",
            Regime::Short => "short",
        }
    }
}

/// What a model is fitted on: gap-free values (see [`prep`]) and where they sit in time.
#[derive(Debug, Clone, Copy)]
pub struct Train<'a> {
    pub(crate) values: &'a [f64],
    /// Unix seconds of `values[0]`.
    pub(crate) start: i64,
    pub(crate) step: i64,
    /// Periods the model may use (already cut to what the history supports).
    pub(crate) seasons: &'a Seasons,
}

impl Train<'_> {
    pub(crate) fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

/// A forecasting method. Fitting is the expensive part; predicting is cheap.
pub trait Model: Send + Sync {
    /// Name used in tables, JSON and `--model`.
    fn name(&self) -> &'static str;
    /// Fewest training points the model can fit on with these seasons.
    fn min_len(&self, seasons: &Seasons) -> usize;
    fn fit(&self, train: &Train<'_>) -> Result<Box<dyn Fitted>, ForecastError>;
}

/// A fitted model.
pub trait Fitted: Send + Sync {
    /// Point forecasts for the `h` steps after the training data.
    fn predict(&self, h: usize) -> Vec<f64>;
}

/// One quantile's forecast.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct QuantileForecast {
    pub quantile: f64,
    pub values: Vec<f64>,
}

/// The answer: `point` and quantiles for the steps after the history, and
/// which model and regime produced them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Forecast {
    /// Model name, or `ensemble(a+b)`.
    pub model: String,
    pub regime: Regime,
    /// Unix seconds of the first forecast point (one step after the last observation).
    pub start: i64,
    pub(crate) step: i64,
    pub point: Vec<f64>,
    pub quantiles: Vec<QuantileForecast>,
    /// Backtest MASE of the chosen model (lower is better; 1.0 = as good as seasonal naive in sample).
    pub(crate) backtest_mase: Option<f64>,
    /// Added to every step because the latest observations moved away from
    /// the usual and held for an hour with nothing like it before (see
    /// `anchor`); `None` when no shift was carried whole.
    pub level_shift: Option<f64>,
    /// Why this model: the candidates' backtest scores, the chosen one first, then best first.
    pub candidates: Vec<(String, f64)>,
    /// The selection behind this forecast, to refit cheaply with [`auto::Choice::Reuse`].
    #[serde(skip)]
    pub selection: auto::Selection,
    /// The selection was reused ([`auto::Choice::Reuse`]), not made for this forecast.
    #[serde(skip)]
    pub(crate) reused_selection: bool,
}

impl Forecast {
    /// The forecast at quantile `q`, if it was asked for.
    pub fn quantile(&self, q: f64) -> Option<&[f64]> {
        self.quantiles.iter().find(|x| (x.quantile - q).abs() < 1e-9).map(|x| x.values.as_slice())
    }
}

#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum ForecastError {
    #[error("not enough history: {have} points, {model} needs at least {need}")]
    TooShort { model: String, have: usize, need: usize },
    #[error("no observed values in the series")]
    NoData,
    #[error("unknown model {0:?} (known: {1})")]
    UnknownModel(String, String),
    #[error("{0}")]
    BadInput(String),
    #[error("{model} failed to fit: {reason}")]
    Fit { model: String, reason: String },
}

/// Every model, by name.
pub fn models() -> Vec<Box<dyn Model>> {
    vec![
        Box::new(naive::SeasonalNaive::Daily),
        Box::new(naive::SeasonalNaive::Weekly),
        Box::new(level::SeasonalMedian),
        Box::new(level::Ses),
        Box::new(ets::HoltWinters { damped: false }),
        Box::new(ets::HoltWinters { damped: true }),
        Box::new(ets::Holt),
        Box::new(ets::ShortTrend),
        Box::new(decompose::Mstl),
        Box::new(calendar::CalendarRegression),
        Box::new(logscale::LogScale { inner: Box::new(decompose::Mstl), name: "mstl-log" }),
        Box::new(logscale::LogScale { inner: Box::new(calendar::CalendarRegression), name: "calendar-log" }),
    ]
}

/// The model called `name`.
pub(crate) fn model(name: &str) -> Result<Box<dyn Model>, ForecastError> {
    let all = models();
    let known = all.iter().map(|m| m.name()).collect::<Vec<_>>().join(", ");
    all.into_iter().find(|m| m.name() == name).ok_or_else(|| ForecastError::UnknownModel(name.to_string(), known))
}
