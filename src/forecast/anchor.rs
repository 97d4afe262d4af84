//! Anchoring a forecast to the load arriving now, as far as history says
//! it persists.
//!
//! Seasonal models forecast the usual shape; what the latest points add is
//! how far demand sits from that shape right now (a burst in progress, a
//! client that just switched on, a quiet spell). Whether that departure
//! lasts the next ten minutes or the next four hours is a property of the
//! series, so it is measured on the series' own past:
//!
//! - the baseline of a point is the median of the same phase over the
//!   previous three cycles of the shortest season (a day), or, without a
//!   season, the median of the last day; its anomaly is value minus baseline;
//! - the current anomaly is the mean anomaly of the last quarter hour;
//! - for each step `k` ahead, the persistence `rho_k` is the slope of the
//!   anomaly `k` steps later on the anomaly then, over the past two weeks'
//!   departures like the current one (same sign, at least half its size: a
//!   burst lasts as long as past bursts did, whatever small wobbles do),
//!   fitted by least absolute deviations (the forecast is scored by absolute
//!   error, and a burst that usually ends at once should not be half
//!   carried on), kept within [0, 1] and never rising with `k`;
//! - the model's forecast `f` already carries an anomaly of its own into
//!   its first step (`f_1` minus the baseline there); the rest of the current
//!   anomaly, the gap, is added `rho_k` of it at step `k`: the model's own
//!   forecast where departures fade fast, lifted to the load arriving now
//!   where they last, its shape kept;
//! - only an unusual departure (over three robust standard deviations from
//!   the usual) is anchored: ordinary ones are the models' business, their
//!   fit and selection already weigh the recent level.
//!
//! Pure: the history is a gap-filled slice, nothing else.

/// Cycles of the season a baseline is the median of.
const BASELINE_CYCLES: usize = 3;
/// How far back persistence is measured, in seconds.
const LOOKBACK_SECS: i64 = 14 * 86_400;
/// The current anomaly is the mean over this long (and at least one point).
const NOW_SECS: i64 = 900;
/// A current anomaly this many robust standard deviations from the usual is unusual.
const UNUSUAL_SIGMAS: f64 = 3.0;
/// Run lengths of a departure are compared up to this many steps.
const MAX_RUN: usize = 12;
/// Fewest past departures persistence is measured on.
const MIN_LIKE: usize = 8;

/// How the latest departure from the usual shape carries into the forecast.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Anchor {
    /// Persistence at steps 1..=h.
    pub(crate) rho: Vec<f64>,
    /// The baseline of the first step ahead.
    pub(crate) next_baseline: f64,
    /// The current anomaly.
    pub(crate) anomaly: f64,
    /// A departure held for an hour with no like of it in the past: carried
    /// whole as a level shift.
    pub(crate) shift: bool,
}

impl Anchor {
    /// From a gap-filled history with its step in seconds and its shortest
    /// season (steps), for `h` steps ahead. `None` when the history is too
    /// short to measure persistence.
    pub(crate) fn new(values: &[f64], step: i64, season: Option<usize>, h: usize) -> Option<Anchor> {
        let n = values.len();
        let step = step.max(1);
        let m = ((NOW_SECS / step) as usize).max(1);
        let baseline = |t: usize| -> Option<f64> {
            match season {
                Some(p) => {
                    let mut past: Vec<f64> =
                        (1..=BASELINE_CYCLES).filter_map(|j| t.checked_sub(j * p)).map(|i| values[i]).collect();
                    (!past.is_empty()).then(|| super::prep::median(&mut past))
                }
                None => None,
            }
        };
        // Without a season: one flat baseline, the median of the last day.
        let flat = season.is_none().then(|| {
            let day = ((86_400 / step) as usize).clamp(1, n.max(1));
            super::prep::median(&mut values[n.saturating_sub(day)..].to_vec())
        });
        let base = |t: usize| flat.or_else(|| baseline(t));
        // The baseline of the next point: what the anomaly is measured from.
        let next_baseline = || base(n).unwrap_or(0.0);
        let first = season.unwrap_or(0);
        if n < first + m + h + 2 {
            return None;
        }
        let anomaly: Vec<f64> = (0..n).map(|t| base(t).map_or(f64::NAN, |b| values[t] - b)).collect();
        // current[t]: the mean anomaly of the `m` points ending at t.
        let mut current = vec![f64::NAN; n];
        // Summed afresh (m is small), so an idle stretch sums to exactly 0.
        for t in first + m - 1..n {
            current[t] = anomaly[t + 1 - m..=t].iter().sum::<f64>() / m as f64;
        }
        let now = current[n - 1];
        if !now.is_finite() {
            return None;
        }
        let from = n.saturating_sub((LOOKBACK_SECS / step) as usize).max(first + m - 1);
        // Ordinary departures are the models' business (their fit and selection already
        // weigh the recent level); only an unusual one is anchored.
        let mut spread: Vec<f64> = current[from..n].iter().copied().filter(|a| a.is_finite()).collect();
        let centre = super::prep::median(&mut spread.clone());
        spread.iter_mut().for_each(|a| *a = (*a - centre).abs());
        let sigma = 1.4826 * super::prep::median(&mut spread);
        if (now - centre).abs() <= UNUSUAL_SIGMAS * sigma + f64::EPSILON * (1.0 + centre.abs()) {
            return None;
        }
        let mut rho = Vec::with_capacity(h);
        let mut cap: f64 = 1.0;
        // Departures like the current one: same sign, at least half its size;
        // else the largest of that sign; else every departure.
        // A departure that has already lasted r steps is compared with past ones at the
        // same age: a session an hour old outlasts a one-point blip.
        let alike = |t: usize| current[t] * now > 0.0 && current[t].abs() >= now.abs() / 2.0;
        let mut run = vec![0usize; n];
        for t in from..n {
            run[t] = if alike(t) { (if t > from { run[t - 1] } else { 0 }) + 1 } else { 0 };
        }
        let lasted = run[n - 1].min(MAX_RUN);
        // Past departures at the same age: how long a burst three points old went on is
        // what a burst three points old will do (older ones have less life left).
        let like: Vec<usize> =
            (from..n - 1).filter(|&t| run[t] == lasted || (lasted == MAX_RUN && run[t] >= MAX_RUN)).collect();
        // Too few past departures like this one to say how long it lasts: the models'
        // forecast stands, unless it has held for an hour, which makes it a level shift
        // (a new customer, a lost one) to be carried whole.
        let held = run[n - 1] >= ((3600 / step) as usize).max(3);
        if like.len() < MIN_LIKE {
            return held.then(|| Anchor {
                rho: vec![1.0; h],
                next_baseline: next_baseline(),
                anomaly: now,
                shift: true,
            });
        }
        for k in 1..=h {
            let pairs: Vec<(f64, f64)> = like
                .iter()
                .filter(|&&t| t + k < n)
                .map(|&t| (current[t], anomaly[t + k]))
                .filter(|(a, b)| a.is_finite() && b.is_finite() && *a != 0.0)
                .collect();
            let r = lad_slope(&pairs).unwrap_or(0.0).clamp(0.0, cap);
            cap = r;
            rho.push(r);
        }
        Some(Anchor { rho, next_baseline: next_baseline(), anomaly: now, shift: false })
    }

    /// `forecast` (steps 1..) anchored: the part of the current anomaly the
    /// model does not already carry into its first step, added `rho_k` of it
    /// at step `k`. A model that has followed the burst is left alone; one
    /// that forecasts the usual shape is lifted to the burst and eased back.
    /// Returns the gap.
    pub(crate) fn apply(&self, forecast: &mut [f64]) -> f64 {
        let Some(first) = forecast.first() else { return 0.0 };
        let gap = self.anomaly - (first - self.next_baseline);
        for (f, r) in forecast.iter_mut().zip(&self.rho) {
            *f += r * gap;
        }
        gap
    }
}

/// The least-absolute-deviations slope of `y` on `x` through the origin: the
/// median of `y / x` weighted by `|x|`. `None` without pairs.
fn lad_slope(pairs: &[(f64, f64)]) -> Option<f64> {
    let mut r: Vec<(f64, f64)> = pairs.iter().map(|(x, y)| (y / x, x.abs())).collect();
    if r.is_empty() {
        return None;
    }
    r.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
    let half = r.iter().map(|x| x.1).sum::<f64>() / 2.0;
    let mut acc = 0.0;
    for (slope, w) in &r {
        acc += w;
        if acc >= half {
            return Some(*slope);
        }
    }
    r.last().map(|x| x.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lad_slope_is_a_weighted_median() {
        assert_eq!(lad_slope(&[(1.0, 2.0), (2.0, 4.0), (1.0, 2.0)]), Some(2.0));
        // Most large departures vanish a step later: the median slope is 0, not their mean.
        let pairs = [(10.0, 0.0), (10.0, 0.0), (10.0, 9.0), (1.0, 1.0)];
        assert_eq!(lad_slope(&pairs), Some(0.0));
        assert_eq!(lad_slope(&[]), None);
    }
}
