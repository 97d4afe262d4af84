//! `foresight backtest` and `foresight forecast` as a user runs them: on a
//! CSV export, with files for notebooks, and clear errors on bad input.

use std::path::Path;

use crate::common::run;

/// `foresight CMD --csv CSV` on the `time,requests` columns of [`write_csv`], then `rest`.
fn run_on(cmd: &str, csv: &str, rest: &[&str]) -> (i32, String, String) {
    let mut args = vec![cmd, "--csv", csv, "--time-col", "time", "--value-col", "requests"];
    args.extend_from_slice(rest);
    run(&args)
}

/// Three weeks of half-hourly demand with daily and weekly cycles, a gap
/// and an empty value, as `time,requests` with RFC 3339 times.
fn write_csv(dir: &Path) -> String {
    let mut text = String::from("time,requests\n");
    let start = 1_700_438_400; // Monday 2023-11-20 00:00 UTC
    for i in 0..21 * 48 {
        if (500..504).contains(&i) {
            continue; // four missing rows
        }
        let t = start + i * 1800;
        let day = (2.0 * std::f64::consts::PI * (i % 48) as f64 / 48.0).sin();
        let weekend = if (i / 48) % 7 >= 5 { 0.6 } else { 1.0 };
        let v = (100.0 + 40.0 * day) * weekend + ((i * 7919) % 11) as f64;
        let value = if i == 700 { String::new() } else { format!("{v:.1}") };
        let time = chrono::DateTime::from_timestamp(t, 0).unwrap().to_rfc3339();
        text.push_str(&format!("{time},{value}\n"));
    }
    let path = dir.join("demand.csv");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn backtest_scores_every_model_and_writes_its_splits() {
    let dir = tempfile::tempdir().unwrap();
    let csv = write_csv(dir.path());
    let out_dir = dir.path().join("out");
    let (code, out, err) = run_on(
        "backtest",
        &csv,
        &["--horizon", "2h", "--origins", "6", "--step", "7h", "--out", out_dir.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("1008 points every 1800s (5 gaps), horizon 4 steps, seasons [48, 336], 6 origins 14 steps apart"),
        "{out}"
    );
    for model in ["auto", "snaive-day", "snaive-week", "holt-winters", "mstl", "calendar"] {
        assert!(out.lines().any(|l| l.starts_with(&format!("{model} "))), "no row for {model}:\n{out}");
    }
    assert!(out.contains("auto picked: "), "{out}");
    let (code, only, err) = run_on("backtest", &csv, &["--horizon", "2h", "--origins", "3", "--model", "auto"]);
    assert_eq!(code, 0, "{err}");
    assert!(only.lines().any(|l| l.starts_with("auto ")) && !only.contains("mstl "), "only auto is scored:\n{only}");

    // The splits are written so another tool can be run on exactly the same ones.
    let splits = std::fs::read_to_string(out_dir.join("splits.csv")).unwrap();
    let rows: Vec<Vec<usize>> =
        splits.lines().skip(1).map(|l| l.split(',').take(4).map(|x| x.parse().unwrap()).collect()).collect();
    assert_eq!(rows.len(), 6);
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r[0], i);
        assert_eq!(r[3] - r[2], 4, "each split scores one horizon");
        assert!(r[1] < r[2]);
    }
    assert_eq!(rows[5][3], 1008, "the last split ends at the last point");
    assert_eq!(rows[5][2] - rows[4][2], 14);

    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["horizon"], 4);
    assert_eq!(summary["load"]["gaps"], 5);
    assert_eq!(summary["load"]["empty_values"], 1);
    let forecasts = std::fs::read_to_string(out_dir.join("forecasts.csv")).unwrap();
    let auto_rows = forecasts.lines().filter(|l| l.starts_with("auto,")).count();
    assert_eq!(auto_rows, 6 * 4, "auto forecast every step of every split");
    assert!(out_dir.join("series.csv").is_file());
}

#[test]
fn forecast_prints_the_next_points_with_quantiles() {
    let dir = tempfile::tempdir().unwrap();
    let csv = write_csv(dir.path());
    let (code, out, err) = run_on("forecast", &csv, &["--horizon", "3h", "--json"]);
    assert_eq!(code, 0, "{err}");
    let f: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(f["regime"], "seasonal");
    assert_eq!(f["point"].as_array().unwrap().len(), 6);
    // One step after the last row (2023-12-10 23:30).
    assert_eq!(f["times"][0], "2023-12-11T00:00:00Z");
    let p90 = f["quantiles"].as_array().unwrap().iter().find(|q| q["quantile"] == 0.9).unwrap();
    assert_eq!(p90["values"].as_array().unwrap().len(), 6);

    let (code, out, _) = run_on("forecast", &csv, &["--horizon", "1h", "--model", "snaive-week"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("model snaive-week (seasonal regime), backtest MASE "), "{out}");
    assert_eq!(out.lines().count(), 2 + 2, "header, column names, two points:\n{out}");
}

#[test]
fn bad_input_gets_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let csv = write_csv(dir.path());
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--horizon", "1h"], "has no column `timestamp` (columns: time, requests)"),
        (
            vec!["--time-col", "time", "--value-col", "requests", "--horizon", "7m"],
            "--horizon 7m is not a whole number of 1800s steps",
        ),
        (
            vec!["--time-col", "time", "--value-col", "requests", "--horizon", "1h", "--model", "prophet"],
            "unknown model \"prophet\"",
        ),
        (
            vec!["--time-col", "time", "--value-col", "requests", "--horizon", "1h", "--quantiles", "0.5,1.5"],
            "quantile 1.5",
        ),
    ];
    for (extra, want) in cases {
        let mut args = vec!["forecast", "--csv", csv.as_str()];
        args.extend(extra.iter());
        let (code, _, err) = run(&args);
        assert_eq!(code, 1, "{extra:?}: {err}");
        assert!(err.contains(want), "{extra:?}: {err}");
    }
    let garbage = dir.path().join("bad.csv");
    std::fs::write(&garbage, "timestamp,value\n2024-01-01 00:00:00,1\nnot a time,2\n").unwrap();
    let (code, _, err) = run(&["forecast", "--csv", garbage.to_str().unwrap(), "--horizon", "1"]);
    assert_eq!(code, 1);
    assert!(err.contains("bad.csv:3: cannot read time \"not a time\""), "{err}");
    let (code, _, err) = run_on("backtest", &csv, &["--horizon", "1h", "--step", "0"]);
    assert_eq!(code, 1);
    assert!(err.contains("--step and --origins must be at least 1"), "{err}");
    // Three days: no weekly season to repeat, said in words.
    let short = dir.path().join("short.csv");
    let text: String =
        std::fs::read_to_string(&csv).unwrap().lines().take(1 + 3 * 48).map(|l| format!("{l}\n")).collect();
    std::fs::write(&short, text).unwrap();
    let (code, _, err) = run_on("forecast", short.to_str().unwrap(), &["--horizon", "1h", "--model", "snaive-week"]);
    assert_eq!(code, 1);
    assert!(err.contains("snaive-week needs a season with two full cycles in the history"), "{err}");
    let (code, _, err) = run(&["backtest", "--csv", "/nonexistent.csv", "--horizon", "1"]);
    assert_eq!(code, 1);
    assert!(err.contains("opening /nonexistent.csv"), "{err}");
}
