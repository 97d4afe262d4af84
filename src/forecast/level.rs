//! Two robust models for demand that is mostly level or mostly idle:
//!
//! - [`Ses`]: simple exponential smoothing, the level alone, its smoothing
//!   constant chosen on a grid by one-step absolute error. For a client that
//!   switches on and off in sessions, where it is now is the best guess for
//!   the next hour, and a trend fitted to the switch would run away.
//! - [`SeasonalMedian`]: each future point is the median of the same phase
//!   over the last cycles of the shortest season. For a workload busy at some
//!   hours on some days, the median says "idle" unless most days were busy
//!   then, which is what absolute error rewards; for a dense one it is
//!   seasonal naive with the day-to-day noise averaged out.

use super::{Fitted, ForecastError, Model, Seasons, Train};

/// Simple exponential smoothing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ses;

/// The median of the same phase over the last [`MEDIAN_CYCLES`] cycles.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SeasonalMedian;

/// Cycles of the shortest season the median is taken over (at most).
const MEDIAN_CYCLES: usize = 7;

/// Smoothing constants tried by [`Ses`].
const ALPHAS: [f64; 12] = [0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.85, 1.0];

/// [`Ses`] fits on at most this many recent points: the level of weeks ago
/// says nothing about the next hour.
const SES_WINDOW: usize = 4032;

struct Flat(f64);

impl Fitted for Flat {
    fn predict(&self, h: usize) -> Vec<f64> {
        vec![self.0; h]
    }
}

struct Profile(Vec<f64>);

impl Fitted for Profile {
    fn predict(&self, h: usize) -> Vec<f64> {
        (0..h).map(|k| self.0[k % self.0.len()]).collect()
    }
}

impl Model for Ses {
    fn name(&self) -> &'static str {
        "ses"
    }

    fn min_len(&self, _: &Seasons) -> usize {
        2
    }

    fn fit(&self, train: &Train<'_>) -> Result<Box<dyn Fitted>, ForecastError> {
        let y = &train.values[train.len().saturating_sub(SES_WINDOW)..];
        let run = |alpha: f64| {
            let (mut level, mut err) = (y[0], 0.0);
            for v in &y[1..] {
                err += (v - level).abs();
                level += alpha * (v - level);
            }
            (err, level)
        };
        let (_, level) = ALPHAS
            .iter()
            .map(|&a| run(a))
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .ok_or_else(|| ForecastError::Fit { model: self.name().into(), reason: "no data".into() })?;
        Ok(Box::new(Flat(level)))
    }
}

impl Model for SeasonalMedian {
    fn name(&self) -> &'static str {
        "snaive-median"
    }

    fn min_len(&self, seasons: &Seasons) -> usize {
        seasons.shortest().map_or(usize::MAX, |p| 2 * p)
    }

    fn fit(&self, train: &Train<'_>) -> Result<Box<dyn Fitted>, ForecastError> {
        let n = train.len();
        let p = train.seasons.shortest().filter(|&p| n >= 2 * p).ok_or(ForecastError::TooShort {
            model: self.name().into(),
            have: n,
            need: self.min_len(train.seasons),
        })?;
        let cycles = (n / p).min(MEDIAN_CYCLES);
        // Phase k of the next cycle is point n + k; its past copies are n + k - j p.
        let profile = (0..p)
            .map(|k| {
                let mut past: Vec<f64> = (1..=cycles).map(|j| train.values[n + k - j * p]).collect();
                super::prep::median(&mut past)
            })
            .collect();
        Ok(Box::new(Profile(profile)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_day_ignores_the_odd_busy_day() {
        let p = 4;
        // Four days idle at phase 1, one busy: the median is idle.
        let mut y = vec![0.0; 5 * p];
        y[2 * p + 1] = 50.0;
        y.iter_mut().step_by(p).for_each(|v| *v = 10.0);
        let seasons = Seasons::new(vec![p]).unwrap();
        let t = Train { values: &y, start: 0, step: 60, seasons: &seasons };
        assert_eq!(SeasonalMedian.fit(&t).unwrap().predict(p + 1), vec![10.0, 0.0, 0.0, 0.0, 10.0]);
    }

    #[test]
    fn ses_follows_a_session_that_switched_on() {
        let mut y = vec![0.0; 200];
        y[190..].iter_mut().for_each(|v| *v = 40.0);
        let seasons = Seasons::new(vec![]).unwrap();
        let t = Train { values: &y, start: 0, step: 600, seasons: &seasons };
        let f = Ses.fit(&t).unwrap().predict(3);
        assert!(f.iter().all(|v| (v - 40.0).abs() < 1.0), "{f:?}");
    }
}
