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
//! The forecast is the mean of the best two, unless the best alone scores
//! clearly better (see [`SINGLE_MARGIN`]). Candidates are every model but
//! the short regime's fallback: seasonal naive, Holt-Winters, damped Holt,
//! MSTL, the calendar regression, and MSTL and the calendar regression on
//! the log scale ([`LogScale`](super::logscale::LogScale)).
//!
//! A level shift the chosen models have not followed by themselves is added
//! on top (see [`level_shift`]).

use super::backtest::{self, Splits, MIN_INTERVAL_SPLITS};
use super::{model, Forecast, ForecastError, Model, Regime, Seasons, Series};

/// The best single model is chosen over the mean of the best two only when
/// its backtest MASE is this fraction of the pair's or lower (10% better).
///
/// A dozen origins rank close models noisily: in the NAB comparison
/// (`scripts/compare-statsforecast`) the best model of the backtest was often
/// not the best of the next hours. Two good models, especially of different
/// kinds (additive and multiplicative, level-tracking and seasonal), rarely
/// both miss the same way, so their mean is the safer forecast unless one is
/// clearly ahead.
const SINGLE_MARGIN: f64 = 0.9;

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
    /// Consider the mean of the best models.
    pub ensemble: bool,
}

impl Default for ForecasterConfig {
    fn default() -> Self {
        ForecasterConfig {
            seasons: None,
            origins: 12,
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
    pub members: Vec<String>,
    pub mase: Option<f64>,
    /// Backtest residuals (actual - forecast), one row per origin: the intervals.
    pub residuals: Vec<Vec<f64>>,
    /// Every candidate's backtest score, the chosen one first, then best first.
    pub candidates: Vec<(String, f64)>,
}

#[derive(Debug, Clone)]
pub struct Forecaster {
    cfg: ForecasterConfig,
}

/// One candidate's backtest result.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub name: String,
    /// Component models (one, or several for an ensemble).
    pub members: Vec<String>,
    pub mase: f64,
    pub forecasts: Vec<Option<Vec<f64>>>,
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

    pub fn config(&self) -> &ForecasterConfig {
        &self.cfg
    }

    /// The seasons for a series with this step.
    pub fn seasons(&self, step: i64) -> Seasons {
        self.cfg.seasons.clone().unwrap_or_else(|| Seasons::calendar(step))
    }

    /// The regime `n` points of history put a forecast in.
    pub fn regime(seasons: &Seasons, n: usize) -> Regime {
        let usable = seasons.usable(n);
        match usable.periods().len() {
            0 => Regime::Short,
            k if k == seasons.periods().len() => Regime::Seasonal,
            _ => Regime::Daily,
        }
    }

    /// The models a regime chooses among, its default first.
    pub fn candidates(regime: Regime) -> Vec<Box<dyn Model>> {
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
        // A shift has to hold for an hour (and three points) before it is believed.
        let min_run = ((3600 / series.step.max(1)) as usize).max(3);
        let level_shift =
            if pool.is_empty() { None } else { self.shift_left(&series, &seasons, chosen, pool, &point, min_run) };
        if let Some(shift) = level_shift {
            point.iter_mut().for_each(|p| *p += shift);
        }
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
    pub fn splits(&self, series: &Series, h: usize, regime: Regime) -> Result<Splits, ForecastError> {
        let seasons = self.seasons(series.step);
        let min_train = match regime {
            Regime::Short => 3,
            _ => 2 * seasons.shortest().unwrap_or(1),
        };
        let step = self.cfg.origin_step.unwrap_or_else(|| h.max(seasons.shortest().map_or(1, |d| d / 8)));
        Splits::rolling(series.len(), h, self.cfg.origins, step, self.cfg.train_window, min_train)
    }

    /// Candidates by backtest MASE, best first, with the mean of the best two
    /// placed first (the choice) unless the best alone is clearly better.
    /// Empty when the history is too short for any split.
    pub fn rank(
        &self,
        series: &Series,
        seasons: &Seasons,
        regime: Regime,
        h: usize,
        models: &[Box<dyn Model>],
    ) -> Vec<Candidate> {
        let Ok(splits) = self.splits(series, h, regime) else { return Vec::new() };
        let mut ranked: Vec<Candidate> = models
            .iter()
            .filter_map(|m| {
                let run = backtest::run_model(series, seasons, &splits, m.as_ref(), &mut || 0.0);
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
        if self.cfg.ensemble && ranked.len() >= 2 {
            let members = &ranked[..2];
            let forecasts: Vec<Option<Vec<f64>>> = (0..splits.list.len())
                .map(|i| mean_of(members.iter().filter_map(|c| c.forecasts[i].as_deref())))
                .collect();
            if let Some(s) = backtest::score(series, seasons, &splits, &forecasts, (0.1, 0.9)) {
                let names: Vec<String> = members.iter().map(|c| c.name.clone()).collect();
                let pair = Candidate { name: ensemble_name(&names), members: names, mase: s.mase, forecasts };
                let at = usize::from(ranked[0].mase < SINGLE_MARGIN * pair.mase);
                ranked.insert(at, pair);
            }
        }
        ranked
    }

    /// The part of a recent level shift (see [`level_shift`]) that the model
    /// refitted on all history has not already followed.
    ///
    /// The evidence is a forecast made `2 * min_run` points ago: how far the
    /// latest points ran from it. Models that track the level (AR errors,
    /// Holt's level) have moved part or all of the way on their own since;
    /// that part is how far `fresh` sits from the old forecast for the same
    /// future points, and adding it again would overshoot.
    fn shift_left(
        &self,
        series: &Series,
        seasons: &Seasons,
        members: &[String],
        pool: &[Vec<f64>],
        fresh: &[f64],
        min_run: usize,
    ) -> Option<f64> {
        let (n, w, h) = (series.len(), 2 * min_run, fresh.len());
        if n < 4 * w {
            return None;
        }
        let old = self.fit_members(&series.slice(0, n - w), seasons, members, w + h).ok()?;
        let recent: Vec<f64> = series.values[n - w..].iter().zip(&old).map(|(a, p)| a - p).collect();
        let shift = level_shift(pool, &recent, min_run)?;
        let mut moved: Vec<f64> = fresh.iter().zip(&old[w..]).map(|(f, o)| f - o).collect();
        let moved = backtest::quantile(&mut moved, 0.5);
        let left = if shift > 0.0 { (shift - moved).max(0.0) } else { (shift - moved).min(0.0) };
        (left != 0.0).then_some(left)
    }

    fn fit_members(
        &self,
        series: &Series,
        seasons: &Seasons,
        members: &[String],
        h: usize,
    ) -> Result<Vec<f64>, ForecastError> {
        let forecasts = members
            .iter()
            .map(|name| backtest::fit_predict(series, seasons, model(name)?.as_ref(), h))
            .collect::<Result<Vec<_>, _>>()?;
        mean_of(forecasts.iter().map(Vec::as_slice)).ok_or(ForecastError::NoData)
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

fn mean_of<'a>(rows: impl Iterator<Item = &'a [f64]>) -> Option<Vec<f64>> {
    let rows: Vec<&[f64]> = rows.collect();
    let first = rows.first()?;
    Some((0..first.len()).map(|k| rows.iter().map(|r| r[k]).sum::<f64>() / rows.len() as f64).collect())
}

/// A recent, sustained shift the chosen model has not caught up with (a new
/// customer, a lost one): the median of the latest backtest errors when at
/// least `min_run` of the last points were all off the same way, each by more
/// than three robust standard deviations of the model's usual error.
///
/// Seasonal models learn a new level only as fast as the season repeats
/// (a week, for weekly naive), so without this a step change would be
/// forecast away for days. The latest split ends at the last observation,
/// so its errors are the freshest evidence there is.
fn level_shift(pool: &[Vec<f64>], latest: &[f64], min_run: usize) -> Option<f64> {
    let mut all: Vec<f64> = pool.iter().flatten().copied().filter(|r| r.is_finite()).collect();
    let med = backtest::quantile(&mut all, 0.5);
    let mut dev: Vec<f64> = all.iter().map(|r| (r - med).abs()).collect();
    let sigma = 1.4826 * backtest::quantile(&mut dev, 0.5);
    if !(sigma > 0.0) {
        return None;
    }
    let observed: Vec<f64> = latest.iter().copied().filter(|r| r.is_finite()).collect();
    let sign = (observed.last()? - med).signum();
    let run =
        observed.iter().rev().take_while(|r| (*r - med).signum() == sign && (*r - med).abs() > 3.0 * sigma).count();
    if run < min_run {
        return None;
    }
    let mut tail = observed[observed.len() - run..].to_vec();
    Some(backtest::quantile(&mut tail, 0.5))
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
