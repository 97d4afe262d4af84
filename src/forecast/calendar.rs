//! Regression on calendar features: Fourier terms for each season (time of
//! day, time of week), an hour-of-week effect on what they leave, and AR(1)
//! errors so the forecast starts from where the series is now and decays to
//! the calendar profile over the horizon.
//!
//! Phases come from the timestamps, not from positions in the series, so a
//! history with a different start still lines up with the clock. Least
//! squares by linfa-linear.

use linfa::{traits::Fit as _, Dataset};
use linfa_linalg::cholesky::SolveC;
use linfa_linear::LinearRegression;
use ndarray::{Array1, Array2, Axis};

use super::{prep::median, Fitted, ForecastError, Model, Seasons, Train};

#[derive(Debug, Clone, Copy)]
pub(crate) struct CalendarRegression;

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
        let (params, intercept, fitted) = calendar
            .least_squares(start, y, &periods)
            .map_err(|reason| ForecastError::Fit { model: self.name().into(), reason })?;
        let mut resid: Vec<f64> = y.iter().zip(&fitted).map(|(a, b)| a - b).collect();

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
    /// Least squares of `y` (from `start`) on the Fourier terms: coefficients,
    /// intercept, and the fitted value at every point.
    ///
    /// When every period divides the longest, points at the same phase of the
    /// longest period share one feature row, so the problem is solved on one
    /// row per phase (the phase's mean, weighted by its count): the same
    /// answer as on every point, with a week of rows instead of four weeks.
    fn least_squares(&self, start: i64, y: &[f64], periods: &[usize]) -> Result<(Array1<f64>, f64, Vec<f64>), String> {
        let longest = periods.last().copied().unwrap_or(1);
        let nested = periods.iter().all(|p| longest % p == 0);
        let (times, weights, means, phase_of): (Vec<i64>, Vec<f64>, Vec<f64>, Vec<usize>) =
            if nested && y.len() > longest {
                let mut sum = vec![0.0; longest];
                let mut count = vec![0.0; longest];
                let mut time = vec![0i64; longest];
                let phase_of: Vec<usize> = (0..y.len()).map(|i| self.position(start, i, longest)).collect();
                for (i, (&p, v)) in phase_of.iter().zip(y).enumerate() {
                    sum[p] += v;
                    count[p] += 1.0;
                    time[p] = start + i as i64 * self.step;
                }
                // Phases are dense here: y spans more than one longest period.
                let means = sum.iter().zip(&count).map(|(s, c)| s / c).collect();
                (time, count, means, phase_of)
            } else {
                let times = (0..y.len()).map(|i| start + i as i64 * self.step).collect();
                (times, vec![1.0; y.len()], y.to_vec(), (0..y.len()).collect())
            };
        let x = self.features(&times);
        // Weighted least squares as plain least squares on rows scaled by
        // sqrt(weight), with the intercept as one more (scaled) column.
        let root: Vec<f64> = weights.iter().map(|w| w.sqrt()).collect();
        let mut xw = Array2::zeros((x.nrows(), x.ncols() + 1));
        for (r, row) in x.outer_iter().enumerate() {
            for (c, v) in row.iter().enumerate() {
                xw[[r, c]] = v * root[r];
            }
            xw[[r, x.ncols()]] = root[r];
        }
        let yw = Array1::from_iter(means.iter().zip(&root).map(|(m, r)| m * r));
        // Fourier columns are close to orthogonal, so the normal equations are
        // well conditioned and a Cholesky solve of the small Gram matrix costs a
        // fraction of a QR of every row. linfa's QR least squares is the fallback.
        let mut gram = xw.t().dot(&xw);
        let rhs = xw.t().dot(&yw).insert_axis(Axis(1));
        let all = match gram.solvec(&rhs) {
            Ok(sol) if sol.iter().all(|v| v.is_finite()) => sol.column(0).to_owned(),
            _ => LinearRegression::new()
                .with_intercept(false)
                .fit(&Dataset::new(xw, yw))
                .map_err(|e| e.to_string())?
                .params()
                .clone(),
        };
        let (params, intercept) = (all.slice(ndarray::s![..x.ncols()]).to_owned(), all[x.ncols()]);
        let per_row = x.dot(&params) + intercept;
        Ok((params, intercept, phase_of.iter().map(|&p| per_row[p]).collect()))
    }

    fn features(&self, times: &[i64]) -> Array2<f64> {
        let cols: usize = self.terms.iter().map(|&(_, k)| 2 * k).sum();
        let mut x = Array2::zeros((times.len(), cols));
        for (i, &t) in times.iter().enumerate() {
            let t = t as f64;
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
        let times: Vec<i64> = (0..h).map(|k| self.next_start + k as i64 * self.calendar.step).collect();
        let base = self.calendar.features(&times).dot(&self.params) + self.intercept;
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
    fn one_row_per_phase_gives_the_same_fit_as_every_point() {
        // 2.5 weeks of hourly points (so phases have unequal counts), noisy.
        let y: Vec<f64> = (0..420).map(|i| 50.0 + 10.0 * ((i * 7919) % 13) as f64 + (i as f64 / 9.0).sin()).collect();
        let calendar = Calendar { terms: vec![(86_400.0, 10), (604_800.0, 6)], step: 3600 };
        let start = 1_700_000_000 - 1_700_000_000 % 3600;
        let (p1, i1, f1) = calendar.least_squares(start, &y, &[24, 168]).unwrap();
        // A period that does not divide the longest forces one row per point.
        let (p2, i2, f2) = calendar.least_squares(start, &y, &[24, 100, 168]).unwrap();
        assert!((i1 - i2).abs() < 1e-6, "{i1} vs {i2}");
        assert!(p1.iter().zip(&p2).all(|(a, b)| (a - b).abs() < 1e-6));
        assert!(f1.iter().zip(&f2).all(|(a, b)| (a - b).abs() < 1e-6));
        // And both agree with linfa's QR least squares on every point.
        let times: Vec<i64> = (0..y.len() as i64).map(|i| start + i * 3600).collect();
        let qr =
            LinearRegression::new().fit(&Dataset::new(calendar.features(&times), Array1::from(y.clone()))).unwrap();
        assert!((qr.intercept() - i1).abs() < 1e-6, "{} vs {i1}", qr.intercept());
        assert!(qr.params().iter().zip(&p1).all(|(a, b)| (a - b).abs() < 1e-6));
    }

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
