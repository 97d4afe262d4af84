//! Rolling-origin backtests: where the splits fall, and how forecasts made
//! at them score against what happened.
//!
//! A split trains on `train_start..origin` and is scored on
//! `origin..origin + horizon`. [`Split::train`] is the only way a model gets
//! history, and it cannot reach past the origin.

use serde::Serialize;

use super::{prep, Forecast, ForecastError, Model, Seasons, Series, Train};

/// One rolling origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct Split {
    /// First training point.
    pub(crate) train_start: usize,
    /// First point forecast (one past the last training point).
    pub(crate) origin: usize,
    /// One past the last point scored.
    pub(crate) test_end: usize,
}

impl Split {
    /// The history the model may see: nothing at or after the origin.
    pub(crate) fn train(&self, series: &Series) -> Series {
        let train = series.slice(self.train_start, self.origin);
        assert!(
            train.start + train.step * train.len() as i64 == series.time_of(self.origin),
            "training data reaches past the origin"
        );
        train
    }

    /// What happened after the origin (raw, gaps as `NaN`).
    pub(crate) fn actual<'a>(&self, series: &'a Series) -> &'a [f64] {
        &series.values[self.origin..self.test_end]
    }
}

/// The splits of one backtest.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Splits {
    pub(crate) horizon: usize,
    pub(crate) list: Vec<Split>,
}

impl Splits {
    /// `origins` origins `step` points apart, the last leaving exactly one
    /// horizon to score. Each trains on everything before it, or on the last
    /// `train_window` points. Origins with fewer than `min_train` training
    /// points are dropped.
    pub(crate) fn rolling(
        n: usize,
        horizon: usize,
        origins: usize,
        step: usize,
        train_window: Option<usize>,
        min_train: usize,
    ) -> Result<Splits, ForecastError> {
        if horizon == 0 || origins == 0 || step == 0 {
            return Err(ForecastError::BadInput("horizon, origins and step must be at least 1".into()));
        }
        let list: Vec<Split> = (0..origins)
            .rev()
            .filter_map(|back| {
                let origin = n.checked_sub(horizon + back * step)?;
                let train_start = train_window.map_or(0, |w| origin.saturating_sub(w));
                (origin - train_start >= min_train.max(1)).then_some(Split {
                    train_start,
                    origin,
                    test_end: origin + horizon,
                })
            })
            .collect();
        if list.is_empty() {
            return Err(ForecastError::TooShort {
                model: "backtest".into(),
                have: n,
                need: min_train.max(1) + horizon,
            });
        }
        Ok(Splits { horizon, list })
    }
}

/// The in-sample MAE of seasonal naive on `train` (season `m`; one step if
/// the history is shorter than a season): the MASE denominator.
pub(crate) fn mase_scale(train: &[f64], m: Option<usize>) -> f64 {
    let lag = |m: usize| {
        let d: Vec<f64> =
            train.iter().skip(m).zip(train).map(|(a, b)| (a - b).abs()).filter(|d| d.is_finite()).collect();
        (!d.is_empty()).then(|| d.iter().sum::<f64>() / d.len() as f64).filter(|s| *s > 0.0)
    };
    m.filter(|&m| train.len() > m).and_then(lag).or_else(|| lag(1)).unwrap_or(1.0)
}

/// Forecasts of one model at every split (`None` where it could not fit).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ModelRun {
    pub(crate) model: String,
    pub(crate) forecasts: Vec<Option<Vec<f64>>>,
    /// Seconds spent fitting and forecasting, per split that fitted.
    pub(crate) fit_secs: Vec<f64>,
    /// Why it could not fit, at the first split where it could not.
    #[serde(skip)]
    pub(crate) first_error: Option<ForecastError>,
}

/// Fits `model` at each split (on cleaned training data, with the seasons its
/// training length supports) and forecasts the horizon. `timer` returns
/// seconds, and is passed in so this module stays clock-free.
pub(crate) fn run_model(
    series: &Series,
    seasons: &Seasons,
    splits: &Splits,
    model: &dyn Model,
    timer: &mut dyn FnMut() -> f64,
) -> ModelRun {
    let mut forecasts = Vec::with_capacity(splits.list.len());
    let mut fit_secs = Vec::new();
    let mut first_error = None;
    for split in &splits.list {
        let t0 = timer();
        match fit_predict(&split.train(series), seasons, model, splits.horizon) {
            Ok(f) => {
                fit_secs.push(timer() - t0);
                forecasts.push(Some(f));
            }
            Err(e) => {
                first_error.get_or_insert(e);
                forecasts.push(None);
            }
        }
    }
    ModelRun { model: model.name().to_string(), forecasts, fit_secs, first_error }
}

/// [`run_model`] for several models, each split's history cleaned once.
pub(crate) fn run_models(
    series: &Series,
    seasons: &Seasons,
    splits: &Splits,
    models: &[Box<dyn Model>],
) -> Vec<ModelRun> {
    let mut runs: Vec<ModelRun> = models
        .iter()
        .map(|m| ModelRun {
            model: m.name().to_string(),
            forecasts: Vec::new(),
            fit_secs: Vec::new(),
            first_error: None,
        })
        .collect();
    for split in &splits.list {
        let train = split.train(series);
        let cleaned = prep::clean(&train.values, train.step, seasons.periods());
        for (m, run) in models.iter().zip(&mut runs) {
            let f = cleaned
                .as_ref()
                .map_err(Clone::clone)
                .and_then(|v| fit_cleaned(v, &train, seasons, m.as_ref(), splits.horizon));
            match f {
                Ok(f) => run.forecasts.push(Some(f)),
                Err(e) => {
                    run.first_error.get_or_insert(e);
                    run.forecasts.push(None);
                }
            }
        }
    }
    runs
}

/// Clean, fit and forecast `h` steps after `train`.
pub fn fit_predict(train: &Series, seasons: &Seasons, model: &dyn Model, h: usize) -> Result<Vec<f64>, ForecastError> {
    let values = prep::clean(&train.values, train.step, seasons.periods())?;
    fit_cleaned(&values, train, seasons, model, h)
}

/// As [`fit_predict`], on `values` already cleaned from `train` (so several
/// models fitted on one history clean it once).
pub(crate) fn fit_cleaned(
    values: &[f64],
    train: &Series,
    seasons: &Seasons,
    model: &dyn Model,
    h: usize,
) -> Result<Vec<f64>, ForecastError> {
    let usable = seasons.usable(values.len());
    let need = model.min_len(&usable);
    if need == usize::MAX {
        return Err(ForecastError::BadInput(format!(
            "{} needs a season with two full cycles in the history ({} points, seasons {:?})",
            model.name(),
            values.len(),
            seasons.periods()
        )));
    }
    if values.len() < need {
        return Err(ForecastError::TooShort { model: model.name().into(), have: values.len(), need });
    }
    let t = Train { values, start: train.start, step: train.step, seasons: &usable };
    let f = model.fit(&t)?.predict(h);
    if f.iter().all(|v| v.is_finite()) {
        Ok(f)
    } else {
        Err(ForecastError::Fit { model: model.name().into(), reason: "forecast is not finite".into() })
    }
}

/// Scores of one set of forecasts over the splits.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct Scores {
    /// Mean over splits of MAE / in-sample seasonal-naive MAE.
    pub(crate) mase: f64,
    /// Symmetric MAPE, percent.
    pub(crate) smape: f64,
    /// Mean pinball loss of the upper quantile, scaled like MASE.
    pub(crate) pinball_upper: Option<f64>,
    /// Share of actuals inside the [lower, upper] quantile interval.
    pub(crate) coverage: Option<f64>,
    /// Splits the model fitted at / splits in all.
    pub(crate) fitted: usize,
    pub(crate) splits: usize,
    /// Splits that had enough earlier errors to set an interval.
    pub(crate) interval_splits: usize,
}

/// Scores `forecasts` (one per split), with the intervals of
/// [`earlier_intervals`], so coverage and pinball are out of sample too.
/// `band` is the (lower, upper) quantile pair.
pub(crate) fn score(
    series: &Series,
    seasons: &Seasons,
    splits: &Splits,
    forecasts: &[Option<Vec<f64>>],
    band: (f64, f64),
) -> Option<Scores> {
    score_with(series, seasons, splits, forecasts, band, &earlier_intervals(series, splits, forecasts, band))
}

/// Lower and upper bounds of a forecast's interval, one per step.
pub(crate) type Interval = (Vec<f64>, Vec<f64>);

/// The `band` interval each split's forecast would have been given: from the
/// errors of earlier splits whose test windows had ended by its origin.
/// `None` where the forecast is missing or too few earlier splits had ended.
pub(crate) fn earlier_intervals(
    series: &Series,
    splits: &Splits,
    forecasts: &[Option<Vec<f64>>],
    band: (f64, f64),
) -> Vec<Option<Interval>> {
    forecasts
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let f = f.as_ref()?;
            let pool = earlier_pool(series, splits, forecasts, i)?;
            let bound = |q| f.iter().zip(offsets(&pool, splits.horizon, q)).map(|(p, o)| p + o).collect();
            Some((bound(band.0), bound(band.1)))
        })
        .collect()
}

/// As [`score`], with the intervals given (e.g. `auto`'s, from its own inner
/// backtest); a split whose interval is `None` counts for MASE and sMAPE only.
pub(crate) fn score_with(
    series: &Series,
    seasons: &Seasons,
    splits: &Splits,
    forecasts: &[Option<Vec<f64>>],
    band: (f64, f64),
    intervals: &[Option<Interval>],
) -> Option<Scores> {
    let (mut mase, mut n_mase) = (0.0, 0);
    let (mut smape, mut n_smape) = (0.0, 0);
    let (mut pinball, mut covered, mut n_interval, mut interval_splits) = (0.0, 0, 0, 0);
    for (i, (split, f)) in splits.list.iter().zip(forecasts).enumerate() {
        let Some(f) = f else { continue };
        let actual = split.actual(series);
        let train = &series.values[split.train_start..split.origin];
        let scale = mase_scale(train, seasons.shortest());
        let errs: Vec<(f64, f64)> =
            actual.iter().zip(f).filter(|(a, _)| a.is_finite()).map(|(a, p)| (*a, *p)).collect();
        if errs.is_empty() {
            continue;
        }
        mase += errs.iter().map(|(a, p)| (a - p).abs()).sum::<f64>() / errs.len() as f64 / scale;
        n_mase += 1;
        for (a, p) in &errs {
            if a.abs() + p.abs() > 0.0 {
                smape += 200.0 * (a - p).abs() / (a.abs() + p.abs());
                n_smape += 1;
            }
        }
        let Some((lower, upper)) = &intervals[i] else { continue };
        interval_splits += 1;
        for (k, a) in actual.iter().enumerate() {
            if !a.is_finite() {
                continue;
            }
            let (lo, hi) = (lower[k], upper[k]);
            let d = a - hi;
            pinball += if d >= 0.0 { band.1 * d } else { (band.1 - 1.0) * d } / scale;
            covered += usize::from(*a >= lo && *a <= hi);
            n_interval += 1;
        }
    }
    (n_mase > 0).then(|| Scores {
        mase: mase / n_mase as f64,
        smape: if n_smape > 0 { smape / n_smape as f64 } else { 0.0 },
        pinball_upper: (n_interval > 0).then(|| pinball / n_interval as f64),
        coverage: (n_interval > 0).then(|| covered as f64 / n_interval as f64),
        fitted: forecasts.iter().filter(|f| f.is_some()).count(),
        splits: splits.list.len(),
        interval_splits,
    })
}

/// Fewest earlier splits an interval is set from.
pub(crate) const MIN_INTERVAL_SPLITS: usize = 3;

/// Residuals of the splits whose test windows had ended by split `i`'s
/// origin: all an interval at `i` may be set from. `None` when there are
/// fewer than [`MIN_INTERVAL_SPLITS`].
pub(crate) fn earlier_pool(
    series: &Series,
    splits: &Splits,
    forecasts: &[Option<Vec<f64>>],
    i: usize,
) -> Option<Vec<Vec<f64>>> {
    let origin = splits.list[i].origin;
    let pool: Vec<Vec<f64>> = splits
        .list
        .iter()
        .zip(forecasts)
        .filter_map(|(s, f)| Some((s, f.as_deref()?)))
        .filter(|(s, _)| s.test_end <= origin)
        .map(|(s, f)| residual_slice(series, s, f))
        .collect();
    (pool.len() >= MIN_INTERVAL_SPLITS).then_some(pool)
}

/// actual - forecast at each step of one split (`NaN` where the actual is a gap).
pub(crate) fn residual_slice(series: &Series, split: &Split, forecast: &[f64]) -> Vec<f64> {
    split.actual(series).iter().zip(forecast).map(|(a, p)| a - p).collect()
}

/// Offset to add to the point forecast at each step for quantile `q`, from
/// residuals of earlier forecasts (`pool`, one row per split). Steps are
/// pooled with their neighbours (a quarter of the step number either side)
/// so a handful of splits still gives a usable quantile.
pub(crate) fn offsets(pool: &[Vec<f64>], horizon: usize, q: f64) -> Vec<f64> {
    (0..horizon)
        .map(|k| {
            let w = (k + 1) / 4;
            let (lo, hi) = (k.saturating_sub(w), (k + w + 1).min(horizon));
            let mut v: Vec<f64> = pool
                .iter()
                .flat_map(|r| r.get(lo..hi.min(r.len())).unwrap_or(&[]))
                .copied()
                .filter(|x| x.is_finite())
                .collect();
            if v.is_empty() {
                // No error was ever observed near this step (gaps, or a longer
                // horizon than the backtest's): every step's errors, not a zero-width interval.
                v = pool.iter().flatten().copied().filter(|x| x.is_finite()).collect();
            }
            conformal_quantile(&mut v, q)
        })
        .collect()
}

/// The split-conformal quantile of `n` errors: rank `ceil((n + 1) q)` for an
/// upper quantile, `floor((n + 1) q)` for a lower one. With the few errors a
/// backtest gives, the plain empirical quantile sits inside the true one and
/// intervals cover less than they claim; this rank is the smallest that
/// covers at least `q` of a fresh error.
pub(crate) fn conformal_quantile(v: &mut [f64], q: f64) -> f64 {
    let n = v.len();
    if n == 0 || (q - 0.5).abs() < 1e-12 {
        return quantile(v, q);
    }
    v.sort_unstable_by(f64::total_cmp);
    let rank = if q > 0.5 { ((n + 1) as f64 * q).ceil() } else { ((n + 1) as f64 * q).floor() };
    v[(rank as usize).clamp(1, n) - 1]
}

/// Empirical quantile (linear interpolation); 0 for no data.
pub(crate) fn quantile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_unstable_by(f64::total_cmp);
    let pos = q.clamp(0.0, 1.0) * (v.len() - 1) as f64;
    let (i, frac) = (pos.floor() as usize, pos.fract());
    if i + 1 < v.len() {
        v[i] * (1.0 - frac) + v[i + 1] * frac
    } else {
        v[i]
    }
}

/// A forecast's quantiles set from a pool of backtest residuals.
pub(crate) fn with_intervals(mut f: Forecast, pool: &[Vec<f64>], quantiles: &[f64], non_negative: bool) -> Forecast {
    let h = f.point.len();
    f.quantiles = quantiles
        .iter()
        .map(|&q| super::QuantileForecast {
            quantile: q,
            values: f.point.iter().zip(offsets(pool, h, q)).map(|(p, o)| clamp(p + o, non_negative)).collect(),
        })
        .collect();
    f.point.iter_mut().for_each(|p| *p = clamp(*p, non_negative));
    f
}

fn clamp(v: f64, non_negative: bool) -> f64 {
    if non_negative {
        v.max(0.0)
    } else {
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_roll_back_from_the_end() {
        let s = Splits::rolling(100, 10, 3, 5, None, 20).unwrap();
        let origins: Vec<usize> = s.list.iter().map(|s| s.origin).collect();
        assert_eq!(origins, vec![80, 85, 90]);
        assert!(s.list.iter().all(|s| s.test_end == s.origin + 10 && s.train_start == 0));
        let w = Splits::rolling(100, 10, 3, 5, Some(30), 20).unwrap();
        assert!(w.list.iter().all(|s| s.origin - s.train_start == 30));
        // Origins without enough training data are dropped, not shortened.
        assert_eq!(Splits::rolling(100, 10, 10, 10, None, 50).unwrap().list.len(), 5);
        assert!(Splits::rolling(30, 10, 3, 5, None, 50).is_err());
    }

    #[test]
    fn the_model_never_sees_the_future() {
        // Poison everything from the origin on: forecasts must not change.
        let values: Vec<f64> = (0..400).map(|i| (i % 24) as f64 + i as f64 * 0.01).collect();
        let series = Series { start: 0, step: 3600, values };
        let mut poisoned = series.clone();
        let splits = Splits::rolling(400, 12, 4, 12, None, 48).unwrap();
        let seasons = Seasons::calendar(3600);
        for model in super::super::models() {
            let clean = run_model(&series, &seasons, &splits, model.as_ref(), &mut || 0.0);
            for split in &splits.list {
                for v in &mut poisoned.values[split.origin..] {
                    *v = 1e12;
                }
                let f = fit_predict(&split.train(&poisoned), &seasons, model.as_ref(), 12).ok();
                let i = splits.list.iter().position(|s| s == split).unwrap();
                assert_eq!(f, clean.forecasts[i], "{} saw past the origin", model.name());
                poisoned.values.clone_from(&series.values);
            }
        }
    }

    #[test]
    fn mase_is_one_for_seasonal_naive_on_a_random_walk_like_scale() {
        // A perfect forecast scores 0; the in-sample naive error scores 1.
        let series = Series { start: 0, step: 60, values: (0..50).map(|i| (i * i) as f64).collect() };
        let splits = Splits { horizon: 1, list: vec![Split { train_start: 0, origin: 40, test_end: 41 }] };
        let exact = vec![Some(vec![1600.0])];
        assert_eq!(score(&series, &Seasons::new(vec![]).unwrap(), &splits, &exact, (0.1, 0.9)).unwrap().mase, 0.0);
        let scale = mase_scale(&series.values[..40], None);
        let off = vec![Some(vec![1600.0 + scale])];
        let s = score(&series, &Seasons::new(vec![]).unwrap(), &splits, &off, (0.1, 0.9)).unwrap();
        assert!((s.mase - 1.0).abs() < 1e-12);
    }

    #[test]
    fn quantiles_interpolate() {
        assert_eq!(quantile(&mut [3.0, 1.0, 2.0, 4.0, 5.0], 0.5), 3.0);
        assert!((quantile(&mut [0.0, 10.0], 0.9) - 9.0).abs() < 1e-12);
        assert_eq!(quantile(&mut [], 0.9), 0.0);
        // Nine errors: p90 is the largest, p10 the smallest (plain quantiles would sit inside them).
        let mut v: Vec<f64> = (1..=9).map(f64::from).collect();
        assert_eq!(conformal_quantile(&mut v, 0.9), 9.0);
        assert_eq!(conformal_quantile(&mut v, 0.1), 1.0);
        assert_eq!(conformal_quantile(&mut v, 0.5), 5.0);
    }
}
