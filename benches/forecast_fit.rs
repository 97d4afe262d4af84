//! Fit speed: fit + forecast of 4 weeks of 1-minute history (40,320 points),
//! what one workload's refit costs, for every model, for `auto` (model
//! selection by a rolling-origin backtest, 24 origins by default, then the
//! final fit and intervals), and for `auto refit` (the chosen models refitted
//! with the selection reused, which is what the engine runs between
//! selections).
//!
//! `cargo bench --bench forecast_fit`. The series is a seeded synthetic
//! in-flight-requests curve (daily and weekly cycles, noise, short bursts);
//! FORESIGHT_FIT_CSV=FILE uses a `timestamp,value` CSV instead.
//! FORESIGHT_FIT_OUT=DIR writes the series used (series.csv) and the
//! timings (foresight.json) there, so `scripts/bench-fit-speed` can time
//! statsforecast on exactly the same points in the same run.
//! FORESIGHT_FIT_RUNS (default 7) timed runs per model; the median is reported.

use std::{hint::black_box, io::Write, path::PathBuf, time::Instant};

use foresight::{
    cli::forecast::{read_csv, CsvInput},
    forecast::{auto::Choice, backtest::fit_predict, models, Forecaster, ForecasterConfig, Seasons, Series},
};

const POINTS: usize = 28 * 1440;
/// One hour ahead at one-minute steps.
const HORIZON: usize = 60;

fn synthetic() -> Series {
    let mut state = 42u64;
    let mut uniform = move || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    // Monday 2026-11-02 00:00 UTC.
    let start = 1_793_577_600;
    let mut burst = 0.0;
    let values = (0..POINTS)
        .map(|i| {
            let minute_of_day = (i % 1440) as f64;
            let weekday = (i / 1440) % 7 < 5;
            let daily = 1.0 + 0.6 * (2.0 * std::f64::consts::PI * (minute_of_day - 480.0) / 1440.0).sin();
            let level = 200.0 * daily * if weekday { 1.0 } else { 0.6 };
            // A burst now and then, decaying over a few minutes.
            if uniform() < 0.002 {
                burst = 150.0 * uniform();
            }
            burst *= 0.7;
            let noise = (uniform() - 0.5) * 2.0 * level.sqrt() * 1.7;
            (level + burst + noise).max(0.0).round()
        })
        .collect();
    Series { start, step: 60, values }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn time_ms(runs: usize, mut f: impl FnMut()) -> f64 {
    f(); // warm-up
    median(
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect(),
    )
}

fn main() {
    let runs: usize = std::env::var("FORESIGHT_FIT_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(7).max(1);
    let series = match std::env::var_os("FORESIGHT_FIT_CSV") {
        Some(path) => {
            let input =
                CsvInput { path: path.into(), time_col: "timestamp".into(), value_col: "value".into(), freq: None };
            read_csv(&input).expect("reading FORESIGHT_FIT_CSV").series
        }
        None => synthetic(),
    };
    let seasons = Seasons::calendar(series.step);
    println!(
        "fit + forecast of {} points ({}s steps, seasons {:?}), horizon {HORIZON}, median of {runs} runs",
        series.len(),
        series.step,
        seasons.periods()
    );
    let mut results = Vec::new();
    for m in models() {
        let ms = time_ms(runs, || {
            black_box(fit_predict(&series, &seasons, m.as_ref(), HORIZON).expect("fit"));
        });
        println!("  {:<22} {ms:>9.2} ms", m.name());
        results.push((m.name().to_string(), ms));
    }
    let forecaster = Forecaster::new(ForecasterConfig::default()).expect("config");
    let auto_runs = runs.min(3);
    let mut chosen = String::new();
    let ms = time_ms(auto_runs, || {
        chosen = forecaster.forecast(&series, HORIZON, &Choice::Auto).expect("auto").model;
    });
    println!(
        "  {:<22} {ms:>9.2} ms   (selection over {} origins + final fit; chose {chosen}; median of {auto_runs})",
        "auto",
        ForecasterConfig::default().origins
    );
    results.push(("auto".into(), ms));
    // What the engine does between selections: refit the chosen models, reuse the backtest's residuals.
    let selection = forecaster.forecast(&series, HORIZON, &Choice::Auto).expect("auto").selection;
    let reuse = Choice::Reuse(selection);
    let ms = time_ms(runs, || {
        black_box(forecaster.forecast(&series, HORIZON, &reuse).expect("refit"));
    });
    println!(
        "  {:<22} {ms:>9.2} ms   (the chosen models refitted, selection reused: each refit between selections)",
        "auto refit"
    );
    results.push(("auto-refit".into(), ms));

    if let Some(dir) = std::env::var_os("FORESIGHT_FIT_OUT").map(PathBuf::from) {
        std::fs::create_dir_all(&dir).expect("creating FORESIGHT_FIT_OUT");
        let mut w = std::io::BufWriter::new(std::fs::File::create(dir.join("series.csv")).expect("series.csv"));
        writeln!(w, "timestamp,value").unwrap();
        for (i, v) in series.values.iter().enumerate() {
            writeln!(w, "{},{}", series.time_of(i), if v.is_finite() { v.to_string() } else { String::new() }).unwrap();
        }
        w.flush().unwrap();
        let json = serde_json::json!({
            "points": series.len(),
            "step_secs": series.step,
            "horizon": HORIZON,
            "seasons": seasons.periods(),
            "runs": runs,
            "auto_chose": chosen,
            "median_ms": results.iter().map(|(m, ms)| (m.clone(), *ms)).collect::<std::collections::BTreeMap<_, _>>(),
        });
        std::fs::write(dir.join("foresight.json"), serde_json::to_string_pretty(&json).unwrap())
            .expect("foresight.json");
    }
}
