//! The forecaster on series with known structure: what `auto` must get
//! exactly right, what it must not be fooled by, and which regime it reports.

use foresight::forecast::auto::Choice;
use foresight::forecast::{models, Forecaster, ForecasterConfig, Regime, Series};

const STEP: i64 = 3600; // hourly: a day is 24 steps, a week 168
const DAY: usize = 24;
const WEEK: usize = 168;
// Monday 2024-01-01 00:00 UTC, so calendar phase lines up with the index.
const START: i64 = 1_704_067_200;

fn series(n: usize, f: impl Fn(usize) -> f64) -> Series {
    Series { start: START, step: STEP, values: (0..n).map(f).collect() }
}

/// Daily and weekly cycles, no noise, positive.
fn seasonal(t: usize) -> f64 {
    let day = (2.0 * std::f64::consts::PI * t as f64 / DAY as f64).sin();
    let week = (2.0 * std::f64::consts::PI * t as f64 / WEEK as f64).cos();
    100.0 + 30.0 * day + 10.0 * week
}

/// Small deterministic noise (an LCG), so no test depends on a random seed.
fn noise(t: usize) -> f64 {
    let x = (t as u64).wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407) >> 33;
    (x as f64 / (1u64 << 31) as f64 - 0.5) * 4.0
}

fn auto() -> Forecaster {
    Forecaster::new(ForecasterConfig::default()).unwrap()
}

#[test]
fn a_pure_daily_and_weekly_series_is_forecast_exactly() {
    let s = series(5 * WEEK, seasonal);
    let h = 12;
    let f = auto().forecast(&s, h, &Choice::Auto).unwrap();
    assert_eq!(f.regime, Regime::Seasonal);
    for (k, p) in f.point.iter().enumerate() {
        let truth = seasonal(s.len() + k);
        assert!((p - truth).abs() < 1e-6, "step {k}: {p} vs {truth} (model {})", f.model);
    }
    assert_eq!(f.start, s.time_of(s.len()));
}

#[test]
fn a_reused_selection_refits_the_same_models_on_new_history() {
    let s1 = series(4 * WEEK, seasonal);
    let f1 = auto().forecast(&s1, 12, &Choice::Auto).unwrap();
    assert_eq!(f1.selection.regime, Some(Regime::Seasonal));
    // A day later: same models, fitted on the new history, still exact.
    let s2 = series(4 * WEEK + DAY, seasonal);
    let f2 = auto().forecast(&s2, 12, &Choice::Reuse(f1.selection.clone())).unwrap();
    assert_eq!(f2.model, f1.model);
    assert_eq!(f2.selection, f1.selection);
    for (k, p) in f2.point.iter().enumerate() {
        assert!((p - seasonal(s2.len() + k)).abs() < 1e-6, "step {k}: {p}");
    }
    // A selection made in another regime is not reused: the forecaster selects afresh.
    let short = series(3 * DAY, seasonal);
    let f3 = auto().forecast(&short, 12, &Choice::Reuse(f1.selection.clone())).unwrap();
    assert_eq!(f3.regime, Regime::Daily);
    assert_eq!(f3.selection.regime, Some(Regime::Daily));
    assert!(!f3.model.contains("snaive-week"), "{}", f3.model);
}

#[test]
fn a_noise_free_trend_is_extrapolated() {
    let line = |t: usize| 50.0 + 0.5 * t as f64;
    let s = series(3 * DAY, line);
    let f = auto().forecast(&s, 6, &Choice::Auto).unwrap();
    for (k, p) in f.point.iter().enumerate() {
        let truth = line(s.len() + k);
        assert!((p - truth).abs() < 1e-3, "step {k}: {p} vs {truth} (model {})", f.model);
    }
}

#[test]
fn the_regime_follows_how_much_history_there_is() {
    let cases =
        [(30, Regime::Short), (3 * DAY, Regime::Daily), (13 * DAY, Regime::Daily), (2 * WEEK, Regime::Seasonal)];
    for (n, want) in cases {
        let f = auto().forecast(&series(n, seasonal), 4, &Choice::Auto).unwrap();
        assert_eq!(f.regime, want, "{n} points");
        if want == Regime::Short {
            assert_eq!(f.model, "short-trend");
        }
    }
}

#[test]
fn a_one_off_spike_last_week_is_not_repeated() {
    let h = 24;
    let n = 5 * WEEK;
    // A spike at the same hour a week before the forecast window.
    let spike_at = n - WEEK + 6;
    let s = series(n, |t| seasonal(t) + noise(t) + if t == spike_at { 2000.0 } else { 0.0 });
    let f = auto().forecast(&s, h, &Choice::Auto).unwrap();
    let echo = f.point[6];
    let truth = seasonal(n + 6);
    assert!((echo - truth).abs() < 20.0, "forecast {echo} at the spike's echo, truth {truth} (model {})", f.model);
    let p90 = f.quantile(0.9).unwrap();
    assert!(p90[6] < truth + 100.0, "p90 {} inflated by the spike", p90[6]);
}

#[test]
fn a_level_shift_is_picked_up_within_hours() {
    let n = 5 * WEEK;
    let shift_at = n - 6;
    let s = series(n, |t| seasonal(t) + noise(t) + if t >= shift_at { 80.0 } else { 0.0 });
    let f = auto().forecast(&s, 6, &Choice::Auto).unwrap();
    let lifted: f64 = f.point.iter().enumerate().map(|(k, p)| p - seasonal(n + k)).sum::<f64>() / 6.0;
    // At least most of the shift shows up in the forecast six hours after it happened.
    assert!(lifted > 50.0, "forecast only {lifted:.1} above the old level after an 80 shift (model {})", f.model);
}

#[test]
fn a_shift_the_model_has_followed_is_not_added_twice() {
    // Flat but noisy, then +80 for the last six hours. Damped Holt has
    // already moved there by itself (its new trend even carries it a little
    // past); adding the shift again would put the forecast near 280.
    let n = 5 * WEEK;
    let s = series(n, |t| 100.0 + 3.0 * noise(t) + if t >= n - 6 { 80.0 } else { 0.0 });
    let f = auto().forecast(&s, 6, &Choice::Named("holt-damped".into())).unwrap();
    let mean = f.point.iter().sum::<f64>() / 6.0;
    assert!(
        (165.0..230.0).contains(&mean),
        "forecast {mean:.1} after a shift from 100 to 180 (shift {:?})",
        f.level_shift
    );
    // A model that does not follow the level (seasonal naive repeats
    // yesterday) gets the whole shift added.
    let f = auto().forecast(&s, 6, &Choice::Named("snaive-day".into())).unwrap();
    let mean = f.point.iter().sum::<f64>() / 6.0;
    assert!((mean - 180.0).abs() < 15.0, "seasonal naive forecast {mean:.1} (shift {:?})", f.level_shift);
    assert!(f.level_shift.is_some_and(|s| s > 40.0), "shift {:?}", f.level_shift);
}

#[test]
fn demand_cut_by_a_fraction_is_forecast_on_the_log_scale() {
    // Two weeks of a strong daily cycle at full level, then the last three
    // days at a third of it (a holiday, a storm): the daily swing shrinks
    // with the level. The multiplicative models fit that; auto must pick
    // one of them and follow the smaller swing.
    let n = 5 * WEEK;
    let full = |t: usize| 200.0 + 150.0 * (2.0 * std::f64::consts::PI * t as f64 / DAY as f64).sin() + noise(t);
    let s = series(n, |t| if t >= n - 3 * DAY { full(t) / 3.0 } else { full(t) });
    let f = auto().forecast(&s, DAY, &Choice::Auto).unwrap();
    assert!(f.model.contains("-log"), "picked {} ({:?})", f.model, f.candidates);
    let mae = f.point.iter().enumerate().map(|(k, p)| (p - full(n + k) / 3.0).abs()).sum::<f64>() / DAY as f64;
    assert!(mae < 10.0, "mean error {mae:.1} against a level of ~67 (model {})", f.model);
}

#[test]
fn gaps_do_not_break_the_forecast() {
    let mut s = series(4 * WEEK, |t| seasonal(t) + noise(t));
    for v in &mut s.values[300..340] {
        *v = f64::NAN;
    }
    let last = s.len() - 1;
    s.values[last - 3] = f64::NAN;
    let f = auto().forecast(&s, 8, &Choice::Auto).unwrap();
    for (k, p) in f.point.iter().enumerate() {
        assert!(p.is_finite());
        assert!((p - seasonal(s.len() + k)).abs() < 15.0, "step {k}: {p}");
    }
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let all_gap = series(100, |_| f64::NAN);
    assert!(auto().forecast(&all_gap, 4, &Choice::Auto).is_err());
    let empty = series(0, |_| 0.0);
    assert!(auto().forecast(&empty, 4, &Choice::Auto).is_err());
    assert!(auto().forecast(&series(100, seasonal), 0, &Choice::Auto).is_err());
    let err = auto().forecast(&series(100, seasonal), 4, &Choice::Named("prophet".into())).unwrap_err();
    assert!(err.to_string().contains("prophet") && err.to_string().contains("holt-winters"), "{err}");
    let bad_q = ForecasterConfig { quantiles: vec![0.5, 1.5], ..ForecasterConfig::default() };
    assert!(Forecaster::new(bad_q).is_err());
    // A single point, and one infinite value among good ones.
    assert!(auto().forecast(&series(1, |_| 3.0), 2, &Choice::Auto).is_ok());
    let mut s = series(3 * DAY, seasonal);
    s.values[10] = f64::INFINITY;
    let f = auto().forecast(&s, 4, &Choice::Auto).unwrap();
    assert!(f.point.iter().all(|p| p.is_finite()));
}

#[test]
fn every_model_fits_a_noisy_seasonal_series() {
    let s = series(4 * WEEK, |t| seasonal(t) + noise(t));
    for m in models() {
        let f = auto().forecast(&s, 12, &Choice::Named(m.name().into())).unwrap();
        assert_eq!(f.model, m.name());
        let mae: f64 = f.point.iter().enumerate().map(|(k, p)| (p - seasonal(s.len() + k)).abs()).sum::<f64>() / 12.0;
        // Holt, short-trend and SES have no season, so cannot follow a daily cycle; the median
        // of the last seven days follows the daily cycle but averages the weekly one away; the
        // rest must follow both.
        let limit = match m.name() {
            "holt-damped" | "short-trend" | "ses" => 40.0,
            "snaive-median" => 15.0,
            _ => 6.0,
        };
        assert!(mae < limit, "{}: MAE {mae:.2}", m.name());
    }
}

#[test]
fn intervals_cover_about_as_often_as_they_claim() {
    // Gaussian-ish noise around a seasonal mean; p10..p90 should hold ~80% of a fresh week.
    let n = 6 * WEEK;
    let s = series(n, |t| seasonal(t) + 3.0 * noise(t));
    let (mut inside, mut total) = (0, 0);
    let cfg = ForecasterConfig { quantiles: vec![0.1, 0.9], ..ForecasterConfig::default() };
    let fc = Forecaster::new(cfg).unwrap();
    for cut in (n - WEEK..n - 12).step_by(12) {
        let f = fc.forecast(&s.slice(0, cut), 12, &Choice::Auto).unwrap();
        let (lo, hi) = (f.quantile(0.1).unwrap(), f.quantile(0.9).unwrap());
        for k in 0..12 {
            let a = s.values[cut + k];
            inside += usize::from(a >= lo[k] && a <= hi[k]);
            total += 1;
        }
    }
    let coverage = inside as f64 / total as f64;
    assert!((0.65..=0.95).contains(&coverage), "p10-p90 covered {coverage:.2}");
}

#[test]
fn non_negative_series_get_non_negative_quantiles() {
    let s = series(3 * DAY, |t| if t % DAY < 6 { 0.0 } else { 5.0 + noise(t) });
    let cfg = ForecasterConfig { quantiles: vec![0.05, 0.5, 0.95], ..ForecasterConfig::default() };
    let f = Forecaster::new(cfg).unwrap().forecast(&s, 12, &Choice::Auto).unwrap();
    for q in &f.quantiles {
        assert!(q.values.iter().all(|v| *v >= 0.0), "q{} went negative: {:?}", q.quantile, q.values);
    }
}

/// Five-minute steps: a day is 288 of them.
fn five_minute(values: Vec<f64>) -> Series {
    Series { start: START, step: 300, values }
}

/// A quiet daily rhythm around 30 (noise included) with a burst to 250 every
/// day at a moving hour, each lasting `burst_len` points; the series ends
/// `into` points into one more.
fn bursty(days: usize, burst_len: usize, into: usize) -> Vec<f64> {
    let n = days * 288;
    let mut v: Vec<f64> =
        (0..n).map(|t| 30.0 + 10.0 * (2.0 * std::f64::consts::PI * t as f64 / 288.0).sin() + noise(t)).collect();
    for d in 0..days - 1 {
        let at = d * 288 + 40 + 23 * d;
        v[at..at + burst_len].iter_mut().for_each(|x| *x += 220.0);
    }
    v[n - into..].iter_mut().for_each(|x| *x += 220.0);
    v
}

#[test]
fn a_series_that_ends_inside_a_burst_is_forecast_from_the_burst() {
    // Past bursts lasted an hour: three points in, the next half hour is still the burst.
    let f = auto().forecast(&five_minute(bursty(10, 12, 3)), 12, &Choice::Auto).unwrap();
    assert!(f.point[..6].iter().all(|p| *p > 180.0), "forecast {:?}", f.point);
    // Past bursts were single points that never lasted: the same ending is not carried on.
    let f = auto().forecast(&five_minute(bursty(10, 1, 1)), 12, &Choice::Auto).unwrap();
    assert!(f.point.iter().all(|p| *p < 80.0), "forecast {:?}", f.point);
}

#[test]
fn a_spike_at_the_same_minutes_every_day_is_forecast() {
    // Baseline 8; a job calls 68 then 50 times in the same two five-minute slots each day.
    let days = 10;
    let mut v: Vec<f64> = (0..days * 288).map(|t| 8.0 + (noise(t) / 2.0).round()).collect();
    for d in 0..days {
        v[d * 288 + 200] = 68.0;
        v[d * 288 + 201] = 50.0;
    }
    // Forecast from two hours before tomorrow's run, four hours ahead.
    let cut = (days - 1) * 288 + 176;
    let f = auto().forecast(&five_minute(v[..cut].to_vec()), 48, &Choice::Auto).unwrap();
    let (run, rest) = (&f.point[24..26], [&f.point[..22], &f.point[28..]].concat());
    assert!(run[0] > 45.0 && run[1] > 30.0, "the job's slots: {run:?}");
    assert!(rest.iter().all(|p| *p < 20.0), "elsewhere the baseline: {rest:?}");
}
