//! Cleaning a series for fitting: gaps filled, one-off spikes clipped.
//!
//! Only models see the cleaned values; backtest scores use the raw series,
//! so cleaning can never flatter a score.

use super::ForecastError;

/// Linear interpolation across gaps (`NaN`); a leading gap takes the first
/// observed value and a trailing gap the last.
pub(crate) fn fill_gaps(values: &[f64]) -> Result<Vec<f64>, ForecastError> {
    let first = values.iter().position(|v| v.is_finite()).ok_or(ForecastError::NoData)?;
    let mut out = values.to_vec();
    let mut prev = first;
    for v in &mut out[..first] {
        *v = values[first];
    }
    for i in first + 1..values.len() {
        if !values[i].is_finite() {
            continue;
        }
        if i > prev + 1 {
            let (a, b) = (values[prev], values[i]);
            let span = (i - prev) as f64;
            for (k, v) in out[prev + 1..i].iter_mut().enumerate() {
                *v = a + (b - a) * (k + 1) as f64 / span;
            }
        }
        prev = i;
    }
    let last = values[prev];
    for v in &mut out[prev + 1..] {
        *v = last;
    }
    Ok(out)
}

/// Spikes are points further than this many robust standard deviations from
/// the median of their neighbourhood.
const SPIKE_SIGMAS: f64 = 6.0;

/// Hampel filter: a point far from the median of the `half` points either
/// side is replaced by that median. A one-off spike is narrower than the
/// window and goes; a level shift fills the window and stays, so a new level
/// is picked up.
///
/// A point that recurs is seasonality, not a spike, and stays: one whose
/// value is matched (within half its distance from the local median) at the
/// same phase one `periods` cycle before or after, give or take a step. A job
/// that calls the endpoint at the same minutes every day is the most
/// forecastable demand there is, and clipping it would make every seasonal
/// model miss it.
///
/// The newest points are clipped like any others, for the models only: a
/// burst that has just begun would make trend models extrapolate it, and a
/// seasonal model has no use for it. What it says about the next steps is
/// added back by the [anchor](super::anchor), from the raw values, as far
/// as the series' past bursts lasted.
///
/// The scale is the larger of the window's MAD and the series' typical
/// step-to-step change, so a smooth curve's peaks are never taken for spikes.
/// Returns how many points were replaced.
pub(crate) fn clip_spikes(values: &mut [f64], half: usize, periods: &[usize]) -> usize {
    let n = values.len();
    if n < 3 || half == 0 {
        return 0;
    }
    let mut diffs: Vec<f64> = values.windows(2).map(|w| (w[1] - w[0]).abs()).collect();
    let mean_step = diffs.iter().sum::<f64>() / diffs.len() as f64;
    // A mostly flat series (an idle workload) has a median step of 0: then the
    // mean step is the scale, so a lone burst among zeros still counts as a spike.
    let typical_step = match median(&mut diffs) {
        m if m > 0.0 => m,
        _ => mean_step,
    };
    // Below this distance from the median no point is a spike, whatever the
    // window's MAD: so the MAD is only computed for the rare point past it.
    let floor = SPIKE_SIGMAS * 1.4826 * typical_step;
    let original = values.to_vec();
    // The window kept sorted as it slides: one removal and one insertion per point.
    let mut sorted: Vec<f64> = original[..(half + 1).min(n)].to_vec();
    sorted.sort_unstable_by(f64::total_cmp);
    let mut scratch = Vec::with_capacity(2 * half + 1);
    let mut replaced = 0;
    for i in 0..n {
        if i > 0 {
            if let Some(&enter) = original.get(i + half) {
                let at = sorted.partition_point(|v| v.total_cmp(&enter).is_lt());
                sorted.insert(at, enter);
            }
            if i > half {
                let leave = original[i - half - 1];
                let at = sorted.partition_point(|v| v.total_cmp(&leave).is_lt());
                sorted.remove(at);
            }
        }
        let med = sorted_median(&sorted);
        let dist = (original[i] - med).abs();
        if dist <= floor {
            continue;
        }
        scratch.clear();
        scratch.extend(sorted.iter().map(|v| (v - med).abs()));
        let mad = median(&mut scratch);
        let scale = 1.4826 * mad.max(typical_step);
        if scale > 0.0 && dist > SPIKE_SIGMAS * scale && !recurs(&original, i, dist, periods) {
            values[i] = med;
            replaced += 1;
        }
    }
    replaced
}

/// Whether `v[i]` is matched, within half of `dist`, one cycle of a period
/// before or after it (one step either side of the exact phase).
fn recurs(v: &[f64], i: usize, dist: f64, periods: &[usize]) -> bool {
    periods.iter().any(|&p| {
        let near =
            |c: usize| (c.saturating_sub(1)..=c + 1).filter_map(|j| v.get(j)).any(|x| (x - v[i]).abs() <= dist / 2.0);
        i.checked_sub(p).is_some_and(near) || near(i + p)
    })
}

fn sorted_median(v: &[f64]) -> f64 {
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

/// Half-width of the spike window: half an hour, and at least 3 points.
pub(crate) fn spike_half_window(step_secs: i64) -> usize {
    ((1800 + step_secs - 1) / step_secs.max(1)).max(3) as usize
}

/// Gaps filled and spikes clipped (recurring ones at `periods` kept): what
/// every model is fitted on.
pub(crate) fn clean(values: &[f64], step_secs: i64, periods: &[usize]) -> Result<Vec<f64>, ForecastError> {
    let mut v = fill_gaps(values)?;
    clip_spikes(&mut v, spike_half_window(step_secs), periods);
    Ok(v)
}

/// Median of a scratch buffer (reordered). 0 for an empty one.
pub(crate) fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mid = v.len() / 2;
    let (_, m, _) = v.select_nth_unstable_by(mid, f64::total_cmp);
    let m = *m;
    if v.len() % 2 == 1 {
        m
    } else {
        let lower = v[..mid].iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (lower + m) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_are_interpolated_and_edges_held() {
        let v = fill_gaps(&[f64::NAN, 1.0, f64::NAN, f64::NAN, 4.0, f64::NAN]).unwrap();
        assert_eq!(v, vec![1.0, 1.0, 2.0, 3.0, 4.0, 4.0]);
        assert_eq!(fill_gaps(&[f64::NAN, f64::NAN]), Err(ForecastError::NoData));
    }

    #[test]
    fn a_spike_is_clipped_but_a_level_shift_and_a_smooth_peak_are_not() {
        let mut v: Vec<f64> = (0..200).map(|i| 100.0 + 20.0 * (i as f64 / 10.0).sin() + (i % 3) as f64).collect();
        let smooth = v.clone();
        assert_eq!(clip_spikes(&mut v, 6, &[]), 0, "a smooth curve is left alone");
        assert_eq!(v, smooth);
        v[50] = 1000.0;
        assert_eq!(clip_spikes(&mut v, 6, &[]), 1);
        assert!((v[50] - smooth[50]).abs() < 25.0);
        let mut shifted: Vec<f64> =
            (0..100).map(|i| if i < 80 { 10.0 + (i % 2) as f64 } else { 60.0 + (i % 2) as f64 }).collect();
        let before = shifted.clone();
        clip_spikes(&mut shifted, 6, &[]);
        assert_eq!(&shifted[90..], &before[90..], "the new level survives once it fills the window");
    }

    #[test]
    fn the_sliding_window_agrees_with_a_window_built_afresh_at_every_point() {
        let mut state = 7u64;
        let mut values: Vec<f64> = (0..3000)
            .map(|i| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let noise = (state >> 40) as f64 / (1u64 << 24) as f64;
                let spike = if state % 97 == 0 { 500.0 } else { 0.0 };
                50.0 + 20.0 * (i as f64 / 40.0).sin() + 5.0 * noise + spike
            })
            .collect();
        let original = values.clone();
        let half = 12;
        let fast = clip_spikes(&mut values, half, &[]);
        // The rule, written plainly.
        let mut diffs: Vec<f64> = original.windows(2).map(|w| (w[1] - w[0]).abs()).collect();
        let typical = median(&mut diffs);
        assert!(typical > 0.0);
        let mut want = original.clone();
        for i in 0..original.len() {
            let mut w = original[i.saturating_sub(half)..(i + half + 1).min(original.len())].to_vec();
            let med = median(&mut w);
            let mut dev: Vec<f64> = w.iter().map(|v| (v - med).abs()).collect();
            let scale = 1.4826 * median(&mut dev).max(typical);
            if (original[i] - med).abs() > SPIKE_SIGMAS * scale {
                want[i] = med;
            }
        }
        assert!(fast > 10, "only {fast} spikes clipped");
        assert_eq!(values, want);
    }

    #[test]
    fn a_lone_burst_in_an_idle_series_is_a_spike() {
        // Mostly zeros (median step 0): the mean step sets the scale.
        let mut v = vec![0.0; 600];
        v[300] = 500.0;
        for i in (0..600).step_by(40) {
            v[i] += 1.0;
        }
        assert_eq!(clip_spikes(&mut v, 6, &[]), 1);
        assert_eq!(v[300], 0.0);
        assert_eq!(v.iter().filter(|x| **x == 1.0).count(), 15, "small everyday movements stay");
    }

    #[test]
    fn a_spike_that_recurs_each_day_is_seasonality() {
        // 5-minute steps, baseline 8, and 68 then 50 at the same two steps every day.
        let day = 288;
        let mut v: Vec<f64> = (0..7 * day).map(|i| 8.0 + (i % 3) as f64).collect();
        for d in 0..7 {
            v[d * day + 100] = 68.0;
            v[d * day + 101] = 50.0;
        }
        // One day's run a step late, as a scheduled job may be.
        v[3 * day + 102] = 50.0;
        v[3 * day + 101] = 68.0;
        v[3 * day + 100] = 9.0;
        let before = v.clone();
        assert_eq!(clip_spikes(&mut v, 6, &[day]), 0, "a daily job is kept");
        assert_eq!(v, before);
        // Without the daily period it is taken for spikes, which is what the rule prevents.
        assert!(clip_spikes(&mut v, 6, &[]) >= 12);
    }

    #[test]
    fn median_of_even_and_odd() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    }
}
