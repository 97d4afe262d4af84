//! The automatic forecaster: regime from the history's length, model chosen
//! by rolling-origin backtest on the series' own past, intervals from the
//! chosen model's backtest errors.
//!
//! Regimes: two full cycles of every season → all seasonal models; fewer
//! than two weekly cycles → daily seasonality only; less than two days →
//! [`ShortTrend`](super::ets::ShortTrend), damped Holt blended with the
//! latest value (the reactive signal).
//!
//! Selection: every candidate is fitted at each origin and scored by MASE.
//! The forecast is the median of the best three, unless the best alone
//! scores at least as well as that (see [`SINGLE_MARGIN`]). Candidates are
//! every model but the short regime's fallback: seasonal naive (daily,
//! weekly, and the median of the last days), simple exponential smoothing,
//! Holt-Winters, damped Holt, MSTL, the calendar regression, and MSTL and the
//! calendar regression on the log scale
//! ([`LogScale`](super::logscale::LogScale)).
//!
//! An unusual departure in the latest points, the part the chosen models
//! have not followed by themselves, carries into the steps ahead as far as
//! the series' past departures of that age lasted, or whole when it has held
//! for an hour with nothing like it before: a level shift ([`Anchor`]).

use super::anchor::Anchor;
use super::backtest::{self, Splits, MIN_INTERVAL_SPLITS};
use super::{model, Forecast, ForecastError, Model, Regime, Seasons, Series};

/// The best single model is chosen over the median of the best three only
/// when its backtest MASE is this fraction of the trio's or lower (10%
/// better), or when they tie (an idle series every candidate forecasts at
/// zero: the simplest, listed first, is kept).
///
/// Two dozen origins still rank close models noisily: on the 200 series of
/// `scripts/compare-statsforecast` the best model of the backtest was often
/// not the best of the next hours. The median of three good models,
/// especially of different kinds (level-tracking and seasonal, additive and
/// multiplicative), drops the one that runs away (a trend fitted to a burst,
/// a season that did not come), and absolute error, by which forecasts are
/// scored, rewards a median.
const SINGLE_MARGIN: f64 = 0.9;

/// How many of the best candidates the ensemble is the median of.
const ENSEMBLE: usize = 3;

/// How the forecaster backtests and what it reports.
#[derive(Debug, Clone, PartialEq)]
pub struct ForecasterConfig {
    /// Seasonal periods in steps; `None` means a day and a week of the series' step.
    pub seasons: Option<Seasons>,
    /// Rolling origins for selection and intervals.
    pub origins: usize,
    /// Points between origins; `None` means an eighth of the shortest season
    /// or one horizon if longer, so the origins see different hours of the day.
    pub origin_step: Option<usize>,
    /// Fit on at most this many recent points; `None` means all.
    pub train_window: Option<usize>,
    /// Quantiles to report, in (0, 1).
    pub quantiles: Vec<f64>,
    /// Consider the median of the best models.
    pub ensemble: bool,
}

impl Default for ForecasterConfig {
    fn default() -> Self {
        ForecasterConfig {
            seasons: None,
            origins: 24,
            origin_step: None,
            train_window: None,
            quantiles: vec![0.5, 0.9],
            ensemble: true,
        }
    }
}

/// Which model to use.
#[derive(Debug, Clone, PartialEq)]
pub enum Choice {
    /// Pick by backtest.
    Auto,
    /// This model (by [`Model::name`]), backtested only for its intervals.
    Named(String),
    /// What an earlier forecast selected ([`Forecast::selection`]): refit
    /// those models on the new history without backtesting again, the cheap
    /// path between selections. Falls back to `Auto` if the history has moved
    /// to another regime since.
    Reuse(Selection),
}

/// The outcome of model selection, reusable for later refits.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Selection {
    pub regime: Option<Regime>,
    /// The models whose mean is the forecast (one, or an ensemble).
    pub(crate) members: Vec<String>,
    pub(crate) mase: Option<f64>,
    /// Backtest residuals (actual - forecast), one row per origin: the intervals.
    pub(crate) residuals: Vec<Vec<f64>>,
    /// Every candidate's backtest score, the chosen one first, then best first.
    pub(crate) candidates: Vec<(String, f64)>,
}

#[derive(Debug, Clone)]
pub struct Forecaster {
    cfg: ForecasterConfig,
}

/// One candidate's backtest result.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    pub(crate) name: String,
    /// Component models (one, or several for an ensemble).
    pub(crate) members: Vec<String>,
    pub(crate) mase: f64,
    pub(crate) forecasts: Vec<Option<Vec<f64>>>,
}

impl Forecaster {
    pub fn new(cfg: ForecasterConfig) -> Result<Forecaster, ForecastError> {
        if let Some(q) = cfg.quantiles.iter().find(|q| !(**q > 0.0 && **q < 1.0)) {
            return Err(ForecastError::BadInput(format!("quantile {q} must be strictly between 0 and 1")));
        }
        if cfg.origins == 0 {
            return Err(ForecastError::BadInput("origins must be at least 1".into()));
        }
        Ok(Forecaster { cfg })
    }

    /// The seasons for a series with this step.
    pub(crate) fn seasons(&self, step: i64) -> Seasons {
        self.cfg.seasons.clone().unwrap_or_else(|| Seasons::calendar(step))
    }

    /// The regime `n` points of history put a forecast in.
    pub(crate) fn regime(seasons: &Seasons, n: usize) -> Regime {
        let usable = seasons.usable(n);
        match usable.periods().len() {
            0 => Regime::Short,
            k if k == seasons.periods().len() => Regime::Seasonal,
            _ => Regime::Daily,
        }
    }

    /// The models a regime chooses among, its default first.
    pub(crate) fn candidates(regime: Regime) -> Vec<Box<dyn Model>> {
        super::models()
            .into_iter()
            .filter(|m| match (regime, m.name()) {
                (Regime::Short, name) => name == "short-trend",
                // Weekly naive needs two weeks; short-trend is the short regime's fallback.
                (Regime::Daily, name) => name != "short-trend" && name != "snaive-week",
                (Regime::Seasonal, name) => name != "short-trend",
            })
            .collect()
    }

    /// Forecast `h` steps past the end of `series`.
    pub fn forecast(&self, series: &Series, h: usize, choice: &Choice) -> Result<Forecast, ForecastError> {
        if h == 0 {
            return Err(ForecastError::BadInput("horizon must be at least 1 step".into()));
        }
        let series = self.window(&trim_leading_gaps(series)?);
        let seasons = self.seasons(series.step);
        let regime = Self::regime(&seasons, series.len());
        let mut reused = false;
        let selection = match choice {
            Choice::Reuse(sel) if sel.regime == Some(regime) && !sel.members.is_empty() => {
                reused = true;
                sel.clone()
            }
            Choice::Auto | Choice::Reuse(_) => self.select(&series, &seasons, regime, h, Self::candidates(regime)),
            Choice::Named(name) => self.select(&series, &seasons, regime, h, vec![model(name)?]),
        };
        let (chosen, mase, pool) = (&selection.members, selection.mase, &selection.residuals);
        let mut point = self.fit_members(&series, &seasons, chosen, h)?;
        // The latest points' departure from the usual, as far as it lasts (a level shift held
        // for an hour: whole). Reported as the level shift when carried whole.
        let level_shift = anchor(&series, &seasons, h).and_then(|a| {
            let gap = a.apply(&mut point);
            (a.shift && gap != 0.0).then_some(gap)
        });
        let spread;
        let pool = if pool.len() >= MIN_INTERVAL_SPLITS {
            pool
        } else {
            spread = change_spread(&series.values, h);
            &spread
        };
        let non_negative = series.values.iter().filter(|v| v.is_finite()).all(|v| *v >= 0.0);
        let forecast = Forecast {
            model: ensemble_name(chosen),
            regime,
            start: series.time_of(series.len()),
            step: series.step,
            point,
            quantiles: Vec::new(),
            backtest_mase: mase,
            level_shift,
            candidates: selection.candidates.clone(),
            selection: selection.clone(),
            reused_selection: reused,
        };
        Ok(backtest::with_intervals(forecast, pool, &self.cfg.quantiles, non_negative))
    }

    /// Backtests `models` and keeps the best (or the best ensemble), with its residuals.
    fn select(
        &self,
        series: &Series,
        seasons: &Seasons,
        regime: Regime,
        h: usize,
        models: Vec<Box<dyn Model>>,
    ) -> Selection {
        let ranked = self.rank(series, seasons, regime, h, &models);
        let candidates = ranked.iter().map(|c| (c.name.clone(), c.mase)).collect();
        match ranked.first() {
            Some(best) => {
                let residuals = self
                    .splits(series, h, regime)
                    .map(|s| {
                        s.list
                            .iter()
                            .zip(&best.forecasts)
                            .filter_map(|(sp, f)| f.as_ref().map(|f| backtest::residual_slice(series, sp, f)))
                            .collect()
                    })
                    .unwrap_or_default();
                Selection {
                    regime: Some(regime),
                    members: best.members.clone(),
                    mase: Some(best.mase),
                    residuals,
                    candidates,
                }
            }
            // Too short to backtest: the regime's default model, and no selection to reuse.
            None => Selection {
                regime: None,
                members: vec![models[0].name().to_string()],
                mase: None,
                residuals: Vec::new(),
                candidates,
            },
        }
    }

    /// The splits selection uses for a series of this length.
    pub(crate) fn splits(&self, series: &Series, h: usize, regime: Regime) -> Result<Splits, ForecastError> {
        let seasons = self.seasons(series.step);
        let min_train = match regime {
            Regime::Short => 3,
            _ => 2 * seasons.shortest().unwrap_or(1),
        };
        let step = self.cfg.origin_step.unwrap_or_else(|| h.max(seasons.shortest().map_or(1, |d| d / 8)));
        Splits::rolling(series.len(), h, self.cfg.origins, step, self.cfg.train_window, min_train)
    }

    /// Candidates by backtest MASE, best first, with the median of the best
    /// three placed first (the choice) unless the best alone is as good.
    /// Empty when the history is too short for any split.
    pub(crate) fn rank(
        &self,
        series: &Series,
        seasons: &Seasons,
        regime: Regime,
        h: usize,
        models: &[Box<dyn Model>],
    ) -> Vec<Candidate> {
        let Ok(splits) = self.splits(series, h, regime) else { return Vec::new() };
        let mut ranked: Vec<Candidate> = backtest::run_models(series, seasons, &splits, models)
            .into_iter()
            .filter_map(|run| {
                // A model that could not fit at every origin is not comparable.
                if run.forecasts.iter().any(Option::is_none) {
                    return None;
                }
                let s = backtest::score(series, seasons, &splits, &run.forecasts, (0.1, 0.9))?;
                Some(Candidate {
                    name: run.model.clone(),
                    members: vec![run.model],
                    mase: s.mase,
                    forecasts: run.forecasts,
                })
            })
            .collect();
        ranked.sort_by(|a, b| a.mase.total_cmp(&b.mase));
        if self.cfg.ensemble && ranked.len() >= ENSEMBLE {
            let members = &ranked[..ENSEMBLE];
            let forecasts: Vec<Option<Vec<f64>>> = (0..splits.list.len())
                .map(|i| combine(members.iter().filter_map(|c| c.forecasts[i].as_deref())))
                .collect();
            if let Some(s) = backtest::score(series, seasons, &splits, &forecasts, (0.1, 0.9)) {
                let names: Vec<String> = members.iter().map(|c| c.name.clone()).collect();
                let trio = Candidate { name: ensemble_name(&names), members: names, mase: s.mase, forecasts };
                let at = usize::from(ranked[0].mase <= SINGLE_MARGIN * trio.mase);
                ranked.insert(at, trio);
            }
        }
        ranked
    }

    fn fit_members(
        &self,
        series: &Series,
        seasons: &Seasons,
        members: &[String],
        h: usize,
    ) -> Result<Vec<f64>, ForecastError> {
        let values = super::prep::clean(&series.values, series.step, seasons.periods())?;
        let forecasts = members
            .iter()
            .map(|name| backtest::fit_cleaned(&values, series, seasons, model(name)?.as_ref(), h))
            .collect::<Result<Vec<_>, _>>()?;
        combine(forecasts.iter().map(Vec::as_slice)).ok_or(ForecastError::NoData)
    }

    fn window(&self, series: &Series) -> Series {
        match self.cfg.train_window {
            Some(w) if series.len() > w => series.slice(series.len() - w, series.len()),
            _ => series.clone(),
        }
    }
}

fn ensemble_name(members: &[String]) -> String {
    if members.len() == 1 {
        members[0].clone()
    } else {
        format!("ensemble({})", members.join("+"))
    }
}

/// The per-step median of the members' forecasts (the mean, for two).
fn combine<'a>(rows: impl Iterator<Item = &'a [f64]>) -> Option<Vec<f64>> {
    let rows: Vec<&[f64]> = rows.collect();
    let first = rows.first()?;
    Some((0..first.len()).map(|k| super::prep::median(&mut rows.iter().map(|r| r[k]).collect::<Vec<_>>())).collect())
}

/// The anchor of a forecast from the end of `series` (see [`Anchor`]).
fn anchor(series: &Series, seasons: &Seasons, h: usize) -> Option<Anchor> {
    let values = super::prep::fill_gaps(&series.values).ok()?;
    Anchor::new(&values, series.step, seasons.usable(values.len()).shortest(), h)
}

/// Leading gaps carry nothing; a series that is all gap has no forecast.
fn trim_leading_gaps(series: &Series) -> Result<Series, ForecastError> {
    let first = series.values.iter().position(|v| v.is_finite()).ok_or(ForecastError::NoData)?;
    Ok(series.slice(first, series.len()))
}

/// Without enough backtest origins, intervals come from how much the series
/// itself moved over k steps: the error a "no change" forecast would have
/// made. Wide, but honest for a history that cannot be backtested.
fn change_spread(values: &[f64], h: usize) -> Vec<Vec<f64>> {
    let v = super::prep::fill_gaps(values).unwrap_or_default();
    let rows = v.len().saturating_sub(1);
    let stride = (rows / 200).max(1);
    // Steps further ahead than the history is long reuse the longest change seen.
    (0..rows).step_by(stride).map(|t| (1..=h).map(|k| v[(t + k).min(v.len() - 1)] - v[t]).collect()).collect()
}
