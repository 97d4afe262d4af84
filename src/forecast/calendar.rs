//! Regression on calendar features: Fourier terms for each season (time of
//! day, time of week), an hour-of-week effect on what they leave, and AR(1)
//! errors so the forecast starts from where the series is now and decays to
//! the calendar profile over the horizon.
//!
//! Phases come from the timestamps, not from positions in the series, so a
//! history with a different start still lines up with the clock. Least
//! squares by linfa-linear.

use linfa::{traits::Fit as _, Dataset};
use linfa_linear::LinearRegression;
use ndarray::{Array1, Array2};

use super::{prep::median, Fitted, ForecastError, Model, Seasons, Train};

#[derive(Debug, Clone, Copy)]
pub struct CalendarRegression;

/// Fourier pairs per season, shortest season first; more would fit noise.
const HARMONICS: [usize; 2] = [10, 6];

impl Model for CalendarRegression {
    fn name(&self) -> &'static str {
        "calendar"
    }

    fn min_len(&self, seasons: &Seasons) -> usize {
        seasons.shortest().map_or(usize::MAX, |m| 2 * m)
    }

    fn fit(&self, train: &Train<'_>) -> Result<Box<dyn Fitted>, ForecastError> {
        let periods = train.seasons.usable(train.len()).periods().to_vec();
        let Some(&longest) = periods.last() else {
            let need = self.min_len(train.seasons);
            return Err(ForecastError::TooShort { model: self.name().into(), have: train.len(), need });
        };
        let cut = train.len().saturating_sub(4 * longest.max(2 * periods[0]));
        let y = &train.values[cut..];
        let start = train.start + cut as i64 * train.step;
        let terms: Vec<(f64, usize)> = periods
            .iter()
            .zip(HARMONICS)
            .map(|(&p, k)| ((p as i64 * train.step) as f64, k.min((p - 1) / 2)))
            .filter(|&(_, k)| k > 0)
            .collect();
        let calendar = Calendar { terms, step: train.step };
        let x = calendar.features(start, y.len());
        let dataset = Dataset::new(x.clone(), Array1::from(y.to_vec()));
        let ols = LinearRegression::default()
            .fit(&dataset)
            .map_err(|e| ForecastError::Fit { model: self.name().into(), reason: e.to_string() })?;
        let (params, intercept) = (ols.params().clone(), ols.intercept());
        let fitted = x.dot(&params) + intercept;
        let mut resid: Vec<f64> = y.iter().zip(fitted.iter()).map(|(a, b)| a - b).collect();

        // Hour-of-period effect: the median residual in each hour-wide bin of the longest season.
        let bin_width = (3600 / train.step).max(1) as usize;
        let bins = (longest / bin_width).max(1);
        let bin_of = |i: usize| calendar.position(start, i, longest) / bin_width % bins;
        let mut by_bin: Vec<Vec<f64>> = vec![Vec::new(); bins];
        for (i, r) in resid.iter().enumerate() {
            by_bin[bin_of(i)].push(*r);
        }
        let effect: Vec<f64> = by_bin.iter_mut().map(|v| median(v)).collect();
        for (i, r) in resid.iter_mut().enumerate() {
            *r -= effect[bin_of(i)];
        }

        // AR(1) on what is left: the current offset from the profile, decaying.
        let (num, den) = resid.windows(2).fold((0.0, 0.0), |(n, d), w| (n + w[0] * w[1], d + w[0] * w[0]));
        let ar = if den > 0.0 { (num / den).clamp(0.0, 0.995) } else { 0.0 };
        Ok(Box::new(Fit {
            calendar,
            params,
            intercept,
            effect,
            bin_width,
            longest,
            ar,
            last_resid: resid.last().copied().unwrap_or(0.0),
            next_start: start + y.len() as i64 * train.step,
        }))
    }
}

struct Calendar {
    /// (period in seconds, harmonics)
    terms: Vec<(f64, usize)>,
    step: i64,
}

impl Calendar {
    fn features(&self, start: i64, n: usize) -> Array2<f64> {
        let cols: usize = self.terms.iter().map(|&(_, k)| 2 * k).sum();
        let mut x = Array2::zeros((n, cols));
        for i in 0..n {
            let t = (start + i as i64 * self.step) as f64;
            let mut c = 0;
            for &(period, k) in &self.terms {
                let phase = 2.0 * std::f64::consts::PI * (t.rem_euclid(period) / period);
                for j in 1..=k {
                    let (s, co) = (phase * j as f64).sin_cos();
                    x[[i, c]] = s;
                    x[[i, c + 1]] = co;
                    c += 2;
                }
            }
        }
        x
    }

    /// Position of point `i` within a season of `period` steps, from the clock.
    fn position(&self, start: i64, i: usize, period: usize) -> usize {
        let t = start + i as i64 * self.step;
        (t.div_euclid(self.step)).rem_euclid(period as i64) as usize
    }
}

struct Fit {
    calendar: Calendar,
    params: Array1<f64>,
    intercept: f64,
    effect: Vec<f64>,
    bin_width: usize,
    longest: usize,
    ar: f64,
    last_resid: f64,
    next_start: i64,
}

impl Fitted for Fit {
    fn predict(&self, h: usize) -> Vec<f64> {
        let base = self.calendar.features(self.next_start, h).dot(&self.params) + self.intercept;
        let mut carry = self.last_resid;
        base.iter()
            .enumerate()
            .map(|(k, b)| {
                carry *= self.ar;
                let bin = self.calendar.position(self.next_start, k, self.longest) / self.bin_width % self.effect.len();
                b + self.effect[bin] + carry
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_calendar_profile_is_learned_from_the_clock() {
        // Hourly points; busy 9-17 on weekdays. Start on a Monday 00:00 UTC (1970-01-05).
        let monday = 4 * 86_400;
        let truth = |t: i64| {
            let (dow, hour) = ((t / 86_400) % 7, (t % 86_400) / 3600);
            let weekday = (0..5).contains(&((dow + 3) % 7));
            if weekday && (9..17).contains(&hour) {
                100.0
            } else {
                20.0
            }
        };
        let y: Vec<f64> = (0..4 * 168).map(|i| truth(monday + i * 3600)).collect();
        let seasons = Seasons::new(vec![24, 168]).unwrap();
        // Shift the window start by 5 hours: phases must still come from the clock.
        let start = monday + 5 * 3600;
        let y = &y[5..];
        let train = Train { values: y, start, step: 3600, seasons: &seasons };
        let f = CalendarRegression.fit(&train).unwrap().predict(48);
        let next = start + y.len() as i64 * 3600;
        for (k, v) in f.iter().enumerate() {
            let want = truth(next + k as i64 * 3600);
            assert!((v - want).abs() < 5.0, "hour {k}: {v} vs {want}");
        }
    }
}
