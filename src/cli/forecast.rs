//! The forecasting commands' edge: CSV in, a regular [`Series`] out, and
//! `backtest` / `forecast` reports written to the terminal and to files.
//!
//! Everything here is I/O and formatting; the decisions are in [`crate::forecast`].

use std::{
    collections::BTreeMap,
    io::Write,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _};
use chrono::{DateTime, NaiveDateTime};
use serde::Serialize;

use crate::forecast::{
    auto::Choice,
    backtest::{self, Interval, Scores},
    models, Forecaster, ForecasterConfig, Seasons, Series, Splits,
};

/// Where the series comes from and how to lay it on a grid.
#[derive(Debug, Clone)]
pub struct CsvInput {
    pub path: PathBuf,
    pub time_col: String,
    pub value_col: String,
    /// Grid step; `None` means the median spacing of the timestamps.
    pub freq: Option<Duration>,
}

/// A CSV laid on a regular grid, and what that took.
#[derive(Debug, Clone, Serialize)]
pub struct Loaded {
    #[serde(skip)]
    pub series: Series,
    pub(crate) rows: usize,
    /// Rows with an empty or non-numeric-but-NaN value.
    pub(crate) empty_values: usize,
    /// Rows that fell in a grid slot another row already filled (averaged).
    pub(crate) merged: usize,
    /// Grid slots with no row.
    pub(crate) gaps: usize,
}

/// Reads `time_col` and `value_col` from a CSV with a header row. Times may
/// be unix seconds or milliseconds, RFC 3339, or `YYYY-MM-DD HH:MM:SS[.f]`
/// (taken as UTC). The grid starts at the first timestamp; rows are placed
/// in the nearest slot and averaged when several land in one.
pub fn read_csv(input: &CsvInput) -> anyhow::Result<Loaded> {
    let file = std::fs::File::open(&input.path).with_context(|| format!("opening {}", input.path.display()))?;
    let mut reader = csv::ReaderBuilder::new().flexible(true).trim(csv::Trim::All).from_reader(file);
    let headers = reader.headers().with_context(|| format!("reading the header of {}", input.path.display()))?.clone();
    let col = |name: &str| {
        headers.iter().position(|h| h == name).with_context(|| {
            format!(
                "{} has no column `{name}` (columns: {}); pick one with --time-col / --value-col",
                input.path.display(),
                headers.iter().collect::<Vec<_>>().join(", ")
            )
        })
    };
    let (tc, vc) = (col(&input.time_col)?, col(&input.value_col)?);
    let mut points: Vec<(f64, f64)> = Vec::new();
    let (mut rows, mut empty_values) = (0, 0);
    for record in reader.records() {
        let record = record.with_context(|| format!("reading {}", input.path.display()))?;
        let line = record.position().map_or(0, |p| p.line());
        rows += 1;
        let raw_t = record.get(tc).unwrap_or("");
        let t = parse_time(raw_t)
            .with_context(|| format!("{}:{line}: cannot read time {raw_t:?} (unix seconds or milliseconds, RFC 3339, or YYYY-MM-DD HH:MM:SS)", input.path.display()))?;
        let raw_v = record.get(vc).unwrap_or("");
        if raw_v.is_empty() {
            empty_values += 1;
            continue;
        }
        let v: f64 = raw_v
            .parse()
            .with_context(|| format!("{}:{line}: value {raw_v:?} is not a number", input.path.display()))?;
        if !v.is_finite() {
            empty_values += 1;
            continue;
        }
        points.push((t, v));
    }
    if points.is_empty() {
        bail!("{} has no rows with a numeric `{}`", input.path.display(), input.value_col);
    }
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    let step = match input.freq {
        Some(f) if f.as_secs() >= 1 => f.as_secs() as i64,
        Some(f) => bail!("--freq {f:?} is shorter than a second"),
        None => median_spacing(&points).with_context(|| {
            format!("{}: cannot tell the spacing from fewer than two distinct times; pass --freq", input.path.display())
        })?,
    };
    let start = points[0].0;
    let n = ((points[points.len() - 1].0 - start) / step as f64).round() as usize + 1;
    if n > 50_000_000 {
        bail!("{} spans {n} steps of {step}s; pass a coarser --freq", input.path.display());
    }
    let (mut sum, mut count) = (vec![0.0; n], vec![0u32; n]);
    for (t, v) in &points {
        let i = ((t - start) / step as f64).round() as usize;
        sum[i] += v;
        count[i] += 1;
    }
    let merged = count.iter().map(|&c| c.saturating_sub(1) as usize).sum();
    let values: Vec<f64> = sum.iter().zip(&count).map(|(s, &c)| if c > 0 { s / c as f64 } else { f64::NAN }).collect();
    let gaps = count.iter().filter(|&&c| c == 0).count();
    let series = Series { start: start.round() as i64, step, values };
    Ok(Loaded { series, rows, empty_values, merged, gaps })
}

fn median_spacing(points: &[(f64, f64)]) -> Option<i64> {
    let mut d: Vec<f64> = points.windows(2).map(|w| w[1].0 - w[0].0).filter(|d| *d > 0.0).collect();
    if d.is_empty() {
        return None;
    }
    let m = backtest::quantile(&mut d, 0.5).round() as i64;
    Some(m.max(1))
}

/// Unix seconds from the time formats [`read_csv`] accepts.
pub(crate) fn parse_time(s: &str) -> Option<f64> {
    if let Ok(x) = s.parse::<f64>() {
        // Past 1e11 seconds is year 5138: it must be milliseconds.
        return x.is_finite().then(|| if x.abs() > 1e11 { x / 1000.0 } else { x });
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Some(t.timestamp_micros() as f64 / 1e6);
    }
    ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M"]
        .iter()
        .find_map(|f| NaiveDateTime::parse_from_str(s, f).ok())
        .map(|t| t.and_utc().timestamp_micros() as f64 / 1e6)
}

/// A length in steps: a bare number is steps, a duration (`90m`, `4h`, `1d`)
/// must be a whole number of them.
pub(crate) fn steps(arg: &str, step: i64, what: &str) -> anyhow::Result<usize> {
    if let Ok(n) = arg.parse::<usize>() {
        return Ok(n);
    }
    let d = humantime::parse_duration(arg)
        .with_context(|| format!("{what} {arg:?}: expected a number of steps or a duration like 30m, 4h, 7d"))?;
    let secs = d.as_secs() as i64;
    if secs % step != 0 {
        bail!("{what} {arg} is not a whole number of {step}s steps");
    }
    Ok((secs / step) as usize)
}

/// What `foresight backtest` runs.
#[derive(Debug, Clone)]
pub(crate) struct BacktestArgs {
    pub(crate) input: CsvInput,
    pub(crate) horizon: String,
    /// Seasons as steps or durations; empty means a day and a week.
    pub(crate) seasons: Vec<String>,
    pub(crate) origins: usize,
    /// Points between origins (steps or a duration); `None` = the horizon.
    pub(crate) origin_step: Option<String>,
    pub(crate) train_window: Option<String>,
    /// Models to score (empty = all); `auto` is always scored.
    pub(crate) models: Vec<String>,
    pub(crate) out: Option<PathBuf>,
}

#[derive(Debug, Clone, Serialize)]
struct Row {
    model: String,
    mase: f64,
    smape: f64,
    pinball_p90: Option<f64>,
    coverage_p10_p90: Option<f64>,
    fit_ms: f64,
    fitted: usize,
    splits: usize,
}

#[derive(Debug, Serialize)]
struct Summary<'a> {
    csv: String,
    step_secs: i64,
    points: usize,
    load: &'a Loaded,
    horizon: usize,
    seasons: &'a Seasons,
    splits: &'a Splits,
    results: Vec<Row>,
    /// How often `auto` picked each model across the splits.
    auto_choices: BTreeMap<String, usize>,
}

/// Rolling-origin backtest of every model and of the automatic choice.
/// `auto` is nested: at each origin it runs its own selection on that
/// origin's training data only, so its score is out of sample.
pub(crate) fn run_backtest(args: &BacktestArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let load = read_csv(&args.input)?;
    let series = &load.series;
    let step = series.step;
    let h = steps(&args.horizon, step, "--horizon")?;
    if h == 0 {
        bail!("--horizon must be at least one step");
    }
    let seasons = parse_seasons(&args.seasons, step)?;
    let origin_step = args.origin_step.as_deref().map(|s| steps(s, step, "--step")).transpose()?.unwrap_or(h);
    if origin_step == 0 || args.origins == 0 {
        bail!("--step and --origins must be at least 1");
    }
    let train_window = args.train_window.as_deref().map(|s| steps(s, step, "--train-window")).transpose()?;
    let min_train = 2 * seasons.shortest().unwrap_or(1);
    if let Some(w) = train_window.filter(|&w| w < min_train) {
        bail!("--train-window is {w} steps; the models need at least {min_train} (two cycles of the shortest season)");
    }
    warn_if_sparse(&load);
    let splits = Splits::rolling(series.len(), h, args.origins, origin_step, train_window, min_train)
        .context("not enough history for one split with these --horizon, --season and --origins")?;
    let only_auto = args.models.iter().all(|m| m == "auto") && !args.models.is_empty();
    let chosen: Vec<Box<dyn crate::forecast::Model>> = if only_auto {
        Vec::new()
    } else if args.models.is_empty() {
        models()
    } else {
        args.models.iter().filter(|m| *m != "auto").map(|m| crate::forecast::model(m)).collect::<Result<_, _>>()?
    };
    writeln!(
        out,
        "{}: {} points every {step}s ({} gaps), horizon {h} steps, seasons {:?}, {} origins {} steps apart",
        args.input.path.display(),
        series.len(),
        load.gaps,
        seasons.periods(),
        splits.list.len(),
        origin_step
    )?;
    let bar = indicatif::ProgressBar::new(((chosen.len() + 1) * splits.list.len()) as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {msg:24} [{bar:30}] {pos}/{len} fits, {elapsed}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let clock = Instant::now();
    let mut timer = || clock.elapsed().as_secs_f64();
    let band = (0.1, 0.9);
    let mut rows = Vec::new();
    let mut skipped = Vec::new();
    let mut runs: Vec<Run> = Vec::new();
    for m in &chosen {
        bar.set_message(m.name());
        let run = backtest::run_model(series, &seasons, &splits, m.as_ref(), &mut timer);
        bar.inc(splits.list.len() as u64);
        let intervals = backtest::earlier_intervals(series, &splits, &run.forecasts, band);
        match backtest::score_with(series, &seasons, &splits, &run.forecasts, band, &intervals) {
            Some(s) => rows.push(row(m.name(), &s, &run.fit_secs)),
            None => {
                let why = run.first_error.as_ref().map_or_else(|| "no error".into(), ToString::to_string);
                skipped.push(format!("{} (fitted at no origin: {why})", m.name()));
            }
        }
        runs.push((run.model, run.forecasts, intervals));
    }
    bar.set_message("auto");
    let forecaster = Forecaster::new(ForecasterConfig {
        seasons: Some(seasons.clone()),
        quantiles: vec![band.0, 0.5, band.1],
        ..ForecasterConfig::default()
    })?;
    let (mut auto_f, mut auto_i, mut auto_secs) = (Vec::new(), Vec::new(), Vec::new());
    let mut auto_choices = BTreeMap::new();
    for split in &splits.list {
        let t0 = timer();
        match forecaster.forecast(&split.train(series), h, &Choice::Auto) {
            Ok(f) => {
                auto_secs.push(timer() - t0);
                *auto_choices.entry(f.model.clone()).or_insert(0) += 1;
                let lo = f.quantile(band.0).map(<[f64]>::to_vec);
                let hi = f.quantile(band.1).map(<[f64]>::to_vec);
                auto_i.push(lo.zip(hi));
                auto_f.push(Some(f.point));
            }
            Err(_) => {
                auto_f.push(None);
                auto_i.push(None);
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    if let Some(s) = backtest::score_with(series, &seasons, &splits, &auto_f, band, &auto_i) {
        rows.push(row("auto", &s, &auto_secs));
    }
    runs.push(("auto".into(), auto_f, auto_i));
    rows.sort_by(|a, b| a.mase.total_cmp(&b.mase));
    print_table(&rows, out)?;
    let picks: Vec<String> = auto_choices.iter().map(|(m, n)| format!("{m} x{n}")).collect();
    writeln!(out, "auto picked: {}", picks.join(", "))?;
    for s in &skipped {
        writeln!(out, "not scored: {s}")?;
    }
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let summary = Summary {
            csv: args.input.path.display().to_string(),
            step_secs: step,
            points: series.len(),
            load: &load,
            horizon: h,
            seasons: &seasons,
            splits: &splits,
            results: rows,
            auto_choices,
        };
        write_file(&dir.join("summary.json"), |w| Ok(serde_json::to_writer_pretty(w, &summary)?))?;
        write_file(&dir.join("series.csv"), |w| write_series(series, w))?;
        write_file(&dir.join("splits.csv"), |w| write_splits(series, &splits, w))?;
        write_file(&dir.join("forecasts.csv"), |w| write_forecasts(series, &splits, &runs, w))?;
        writeln!(out, "wrote summary.json, series.csv, splits.csv, forecasts.csv to {}", dir.display())?;
    }
    Ok(())
}

/// A grid that is mostly gaps usually means a wrong `--freq` or a stray timestamp.
fn warn_if_sparse(load: &Loaded) {
    if load.gaps * 2 > load.series.len() {
        eprintln!(
            "warning: {} of the {} grid slots ({}s apart) have no value: check --freq and the timestamps",
            load.gaps,
            load.series.len(),
            load.series.step
        );
    }
}

fn parse_seasons(args: &[String], step: i64) -> anyhow::Result<Seasons> {
    if args.is_empty() {
        let s = Seasons::calendar(step);
        if s.periods().is_empty() {
            bail!("no calendar seasons for {step}s steps (a day must be a whole number of at least 2 steps); give the periods with --season, or --season none");
        }
        return Ok(s);
    }
    let periods = args
        .iter()
        .flat_map(|a| a.split(','))
        .filter(|a| !a.is_empty() && *a != "none")
        .map(|a| steps(a, step, "--season"))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(Seasons::new(periods)?)
}

fn row(model: &str, s: &Scores, secs: &[f64]) -> Row {
    Row {
        model: model.to_string(),
        mase: s.mase,
        smape: s.smape,
        pinball_p90: s.pinball_upper,
        coverage_p10_p90: s.coverage,
        fit_ms: if secs.is_empty() { 0.0 } else { 1e3 * secs.iter().sum::<f64>() / secs.len() as f64 },
        fitted: s.fitted,
        splits: s.splits,
    }
}

fn print_table(rows: &[Row], out: &mut dyn Write) -> anyhow::Result<()> {
    let opt = |v: Option<f64>, pct: bool| match v {
        Some(v) if pct => format!("{:.0}%", 100.0 * v),
        Some(v) => format!("{v:.3}"),
        None => "-".into(),
    };
    writeln!(
        out,
        "{:<44} {:>7} {:>8} {:>11} {:>13} {:>10} {:>7}",
        "model", "MASE", "sMAPE%", "pinball p90", "cover p10-90", "fit ms", "fitted"
    )?;
    for r in rows {
        writeln!(
            out,
            "{:<44} {:>7.3} {:>8.2} {:>11} {:>13} {:>10.1} {:>7}",
            r.model,
            r.mase,
            r.smape,
            opt(r.pinball_p90, false),
            opt(r.coverage_p10_p90, true),
            r.fit_ms,
            format!("{}/{}", r.fitted, r.splits)
        )?;
    }
    Ok(())
}

fn write_file(path: &Path, f: impl FnOnce(&mut dyn Write) -> anyhow::Result<()>) -> anyhow::Result<()> {
    let mut w =
        std::io::BufWriter::new(std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?);
    f(&mut w).with_context(|| format!("writing {}", path.display()))?;
    w.flush().with_context(|| format!("writing {}", path.display()))
}

fn iso(t: i64) -> String {
    DateTime::from_timestamp(t, 0).map_or_else(|| t.to_string(), |d| d.format("%Y-%m-%dT%H:%M:%SZ").to_string())
}

fn num(v: f64) -> String {
    if v.is_finite() {
        format!("{v}")
    } else {
        String::new()
    }
}

fn write_series(series: &Series, w: &mut dyn Write) -> anyhow::Result<()> {
    writeln!(w, "index,time,value")?;
    for (i, v) in series.values.iter().enumerate() {
        writeln!(w, "{i},{},{}", iso(series.time_of(i)), num(*v))?;
    }
    Ok(())
}

fn write_splits(series: &Series, splits: &Splits, w: &mut dyn Write) -> anyhow::Result<()> {
    writeln!(w, "split,train_start,origin,test_end,origin_time")?;
    for (i, s) in splits.list.iter().enumerate() {
        writeln!(w, "{i},{},{},{},{}", s.train_start, s.origin, s.test_end, iso(series.time_of(s.origin)))?;
    }
    Ok(())
}

type Run = (String, Vec<Option<Vec<f64>>>, Vec<Option<Interval>>);

fn write_forecasts(series: &Series, splits: &Splits, runs: &[Run], w: &mut dyn Write) -> anyhow::Result<()> {
    writeln!(w, "model,split,origin_time,step_ahead,time,actual,forecast,p10,p90")?;
    for (model, forecasts, intervals) in runs {
        for (i, (split, f)) in splits.list.iter().zip(forecasts).enumerate() {
            let Some(f) = f else { continue };
            for (k, p) in f.iter().enumerate() {
                let t = split.origin + k;
                let (lo, hi) =
                    intervals[i].as_ref().map_or((String::new(), String::new()), |(l, u)| (num(l[k]), num(u[k])));
                writeln!(
                    w,
                    "{model},{i},{},{},{},{},{},{lo},{hi}",
                    iso(series.time_of(split.origin)),
                    k + 1,
                    iso(series.time_of(t)),
                    num(series.values[t]),
                    num(*p)
                )?;
            }
        }
    }
    Ok(())
}

/// What `foresight forecast` runs.
#[derive(Debug, Clone)]
pub(crate) struct ForecastArgs {
    pub(crate) input: CsvInput,
    pub(crate) horizon: String,
    pub(crate) seasons: Vec<String>,
    pub(crate) model: String,
    pub(crate) quantiles: Vec<f64>,
    pub(crate) json: bool,
}

/// Forecast past the end of the CSV and print it (a table, or JSON).
pub(crate) fn run_forecast(args: &ForecastArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let load = read_csv(&args.input)?;
    let series = &load.series;
    let h = steps(&args.horizon, series.step, "--horizon")?;
    warn_if_sparse(&load);
    let seasons = if args.seasons.is_empty() { None } else { Some(parse_seasons(&args.seasons, series.step)?) };
    let mut quantiles = args.quantiles.clone();
    quantiles.sort_by(f64::total_cmp);
    quantiles.dedup();
    let forecaster = Forecaster::new(ForecasterConfig { seasons, quantiles, ..ForecasterConfig::default() })?;
    let choice = if args.model == "auto" { Choice::Auto } else { Choice::Named(args.model.clone()) };
    let f = forecaster.forecast(series, h, &choice)?;
    if args.json {
        let mut value = serde_json::to_value(&f)?;
        // Unix seconds in `start`, and RFC 3339 times beside every point for people and notebooks.
        value["times"] = (0..f.point.len()).map(|k| iso(f.start + f.step * k as i64)).collect();
        serde_json::to_writer_pretty(&mut *out, &value)?;
        writeln!(out)?;
        return Ok(());
    }
    let mase = f
        .backtest_mase
        .map_or_else(|| "not backtested (too little history)".into(), |m| format!("backtest MASE {m:.3}"));
    writeln!(out, "model {} ({} regime), {mase}", f.model, f.regime.as_str())?;
    if let Some(shift) = f.level_shift {
        writeln!(out, "level shift of {shift:+.3} applied: the latest points moved away from the model and stayed")?;
    }
    write!(out, "{:<22} {:>12}", "time", "forecast")?;
    for q in &f.quantiles {
        write!(out, " {:>12}", format!("p{}", (q.quantile * 100.0).round()))?;
    }
    writeln!(out)?;
    for (k, p) in f.point.iter().enumerate() {
        write!(out, "{:<22} {:>12.3}", iso(f.start + f.step * k as i64), p)?;
        for q in &f.quantiles {
            write!(out, " {:>12.3}", q.values[k])?;
        }
        writeln!(out)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_formats() {
        let cases = [
            ("1700000000", Some(1_700_000_000.0)),
            ("1700000000500", Some(1_700_000_000.5)),
            ("2014-07-01 00:30:00", Some(1_404_174_600.0)),
            ("2014-07-01T00:30:00Z", Some(1_404_174_600.0)),
            ("2014-07-01T02:30:00+02:00", Some(1_404_174_600.0)),
            ("2023-11-16 18:17:03.9799600", Some(1_700_158_623.979_96)),
            ("yesterday", None),
            ("", None),
        ];
        for (s, want) in cases {
            let got = parse_time(s);
            match (got, want) {
                (Some(g), Some(w)) => assert!((g - w).abs() < 1e-3, "{s}: {g} vs {w}"),
                _ => assert_eq!(got, want, "{s}"),
            }
        }
    }

    #[test]
    fn lengths_in_steps_or_durations() {
        assert_eq!(steps("12", 300, "h").unwrap(), 12);
        assert_eq!(steps("1h", 300, "h").unwrap(), 12);
        assert_eq!(steps("1d", 1800, "h").unwrap(), 48);
        assert!(steps("7m", 300, "h").unwrap_err().to_string().contains("whole number"));
        assert!(steps("soon", 300, "h").is_err());
    }
}
