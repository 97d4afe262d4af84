//! Multiplicative variants: a model fitted on `ln(1 + y)` and its forecast
//! mapped back with `exp(f) - 1`.
//!
//! Demand is a count (requests, rides, tokens) whose daily swing scales with
//! its level: a quiet holiday or a storm cuts every hour by a similar
//! fraction, not by a similar number. On the log scale that is one additive
//! offset, which the inner model's residual dynamics carry forward; on the
//! raw scale the additive models forecast the usual peak on top of a
//! collapsed level. Mapping back from the log scale also gives the median,
//! not the mean, which is what an absolute-error score rewards on skewed
//! counts.
//!
//! Only for series that are never negative; others cannot fit (and so drop
//! out of selection).

use super::{Fitted, ForecastError, Model, Seasons, Train};

/// `inner` on the log scale, called `name`.
pub(crate) struct LogScale {
    pub(crate) inner: Box<dyn Model>,
    pub(crate) name: &'static str,
}

impl Model for LogScale {
    fn name(&self) -> &'static str {
        self.name
    }

    fn min_len(&self, seasons: &Seasons) -> usize {
        self.inner.min_len(seasons)
    }

    fn fit(&self, train: &Train<'_>) -> Result<Box<dyn Fitted>, ForecastError> {
        if let Some(v) = train.values.iter().find(|v| v.is_nan() || **v < 0.0) {
            return Err(ForecastError::Fit {
                model: self.name.into(),
                reason: format!("needs values that are never negative, saw {v}"),
            });
        }
        let logs: Vec<f64> = train.values.iter().map(|v| v.ln_1p()).collect();
        let inner = self.inner.fit(&Train { values: &logs, ..*train })?;
        Ok(Box::new(Back(inner)))
    }
}

struct Back(Box<dyn Fitted>);

impl Fitted for Back {
    fn predict(&self, h: usize) -> Vec<f64> {
        // Clamped so a runaway log-scale trend cannot overflow to infinity.
        self.0.predict(h).into_iter().map(|f| f.min(700.0).exp_m1().max(0.0)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forecast::calendar::CalendarRegression;

    fn log_calendar() -> LogScale {
        LogScale { inner: Box::new(CalendarRegression), name: "calendar-log" }
    }

    #[test]
    fn a_level_cut_by_a_fraction_keeps_the_daily_shape_at_the_new_level() {
        // Hourly: a daily curve between 20 and 180 for three weeks, then the
        // last six hours at a quarter of normal (a storm).
        let start = 4 * 86_400; // a Monday, 00:00 UTC
        let normal = |i: usize| 100.0 + 80.0 * (2.0 * std::f64::consts::PI * (i % 24) as f64 / 24.0).sin();
        let n = 21 * 24;
        let y: Vec<f64> = (0..n).map(|i| if i >= n - 6 { normal(i) / 4.0 } else { normal(i) }).collect();
        let seasons = Seasons::new(vec![24, 168]).unwrap();
        let train = Train { values: &y, start, step: 3600, seasons: &seasons };
        let f = log_calendar().fit(&train).unwrap().predict(3);
        for (k, v) in f.iter().enumerate() {
            let (storm, usual) = (normal(n + k) / 4.0, normal(n + k));
            // Much nearer the storm level than the usual one.
            assert!((v - storm).abs() < 0.25 * (usual - storm), "step {k}: {v}, storm {storm}, usual {usual}");
        }
        let additive = CalendarRegression.fit(&train).unwrap().predict(3);
        let err = |f: &[f64]| f.iter().enumerate().map(|(k, v)| (v - normal(n + k) / 4.0).abs()).sum::<f64>();
        assert!(err(&f) < err(&additive), "log {f:?} vs additive {additive:?}");
    }

    #[test]
    fn negative_values_are_refused_not_mangled() {
        let y = vec![1.0, -2.0, 3.0, 4.0];
        let seasons = Seasons::new(vec![2]).unwrap();
        let train = Train { values: &y, start: 0, step: 60, seasons: &seasons };
        let Err(e) = log_calendar().fit(&train) else { panic!("fitted a negative series") };
        assert!(e.to_string().contains("never negative"), "{e}");
    }
}
