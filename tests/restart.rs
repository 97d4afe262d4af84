//! Crash safety of history: `kill -9` the server mid-run (5 times in CI, 50
//! in `scripts/kill-loop`, at varying moments of the flush cycle), restart it on the same store, and check that history up
//! to the last flush it logged is intact, unchanged by the restarts, and
//! readable with `foresight history`; a graceful stop then flushes the rest.

use crate::common;

use std::{
    collections::BTreeMap,
    path::Path,
    process::Command,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use foresight::store::{Store, StoreConfig};

const SERIES: &str = "inference/x/concurrency";
const SIGNALS: [&str; 5] =
    ["concurrency", "queue_depth", "request_rate", "prompt_tokens_rate", "generation_tokens_rate"];
const RUST_LOG: &str = "info,foresight::cli::serve=debug";

fn config(store: &Path) -> String {
    format!(
        "grpc: {{listen: 127.0.0.1:0}}\n\
         http: {{listen: 127.0.0.1:0}}\n\
         tick_interval_secs: 0.25\n\
         store: {{path: {}, resolution_secs: 1, flush_interval_secs: 0.5}}\n\
         workloads:\n\
         \x20 - name: x\n\
         \x20   namespace: inference\n\
         \x20   model: llama-3.1-8b-h100\n\
         \x20   target: {{signal: concurrency}}\n\
         \x20   source: {{simulated: {{interval_secs: 0.25, fleet: {{pods: 1, demand: {{requests_per_sec: 20, daily_amplitude: 0}}}}}}}}\n",
        store.display()
    )
}

fn unix(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_secs() as i64
}

fn at(bucket: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(bucket as u64)
}

fn open(path: &Path) -> Store {
    let cfg = StoreConfig { path: Some(path.to_owned()), resolution: Duration::from_secs(1), ..StoreConfig::default() };
    Store::open(cfg).unwrap_or_else(|e| panic!("the store must open after a crash: {e}"))
}

/// Buckets `from..=to` of `SERIES` as (bucket, value), NaN for a gap.
fn buckets(store: &Store, from: i64, to: i64) -> Vec<(i64, f64)> {
    let s = store.range(SERIES, at(from), at(to + 1)).unwrap();
    assert_eq!(unix(s.start), from);
    s.values.iter().enumerate().map(|(i, v)| (from + i as i64, *v)).collect()
}

/// The newest durable bucket the server reported: the `through` of its last
/// "history flushed" debug line (logged after the commit).
fn last_through(s: &common::Server) -> Option<i64> {
    let lines = s.log_lines_with(&["\"message\":\"history flushed\"", "\"through\""]);
    lines.iter().rev().find_map(|l| {
        let v: serde_json::Value = serde_json::from_str(l).ok()?;
        // Debug-formatted today (`Some("2026-...Z")`); accept a plain string too.
        let raw = v["through"].as_str()?;
        let text = raw.trim_start_matches("Some(\"").trim_end_matches("\")");
        Some(chrono::DateTime::parse_from_rfc3339(text).ok()?.timestamp())
    })
}

/// Wait (bounded) until the server has logged a flush through `bucket` or later.
fn wait_flushed_through(s: &common::Server, bucket: i64) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(t) = last_through(s).filter(|t| *t >= bucket) {
            return t;
        }
        assert!(Instant::now() < deadline, "no flush through {bucket}; log:\n{}", s.log_lines_with(&[]).join("\n"));
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every bucket recorded before must still hold exactly the same value.
fn assert_unchanged(store: &Store, kept: &BTreeMap<i64, f64>, when: &str) {
    let (Some((&first, _)), Some((&last, _))) = (kept.first_key_value(), kept.last_key_value()) else { return };
    let now: BTreeMap<i64, f64> = buckets(store, first, last).into_iter().collect();
    for (b, v) in kept {
        assert_eq!(now[b].to_bits(), v.to_bits(), "{when}: bucket {b} was {v}, now {}", now[b]);
    }
}

/// The recording of one run: its first bucket at or after `from`, and every
/// bucket from there through `through` holding a value (no gap while it ran).
fn assert_contiguous(store: &Store, from: i64, through: i64, when: &str) -> Vec<(i64, f64)> {
    let got = buckets(store, from, through);
    let first = got.iter().position(|(_, v)| v.is_finite()).unwrap_or_else(|| panic!("{when}: nothing recorded"));
    // Start-up (spawn, store open, first poll) takes well under this even on a loaded machine.
    assert!(first <= 5, "{when}: the first bucket is {first} s after the start");
    let run = got[first..].to_vec();
    let gaps: Vec<i64> = run.iter().filter(|(_, v)| !v.is_finite()).map(|(b, _)| *b).collect();
    assert!(gaps.is_empty(), "{when}: gaps at {gaps:?} within {}..={through}", run[0].0);
    run
}

/// `foresight history` while the server is stopped: its CSV has every kept bucket, same value.
fn assert_history_cli(config: &Path, kept: &BTreeMap<i64, f64>) {
    let out = Command::new(common::bin())
        .args(["history", "--config"])
        .arg(config)
        .args(["--workload", "x", "--signal", "concurrency", "--minutes", "5"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "history failed: {}", String::from_utf8_lossy(&out.stderr));
    let mut lines = stdout.lines();
    assert_eq!(lines.next(), Some("timestamp,value"));
    let rows: BTreeMap<String, String> = lines
        .map(|l| {
            let (t, v) = l.split_once(',').unwrap_or_else(|| panic!("bad row {l:?}"));
            (t.to_string(), v.to_string())
        })
        .collect();
    for (b, v) in kept {
        let t = foresight::time::rfc3339(at(*b));
        let cell = rows.get(&t).unwrap_or_else(|| panic!("no row {t} in:\n{stdout}"));
        let parsed: f64 = cell.parse().unwrap_or_else(|_| panic!("row {t}: {cell:?} is not the value {v}"));
        assert_eq!(parsed, *v, "row {t}");
    }
}

/// Sleep until the wall clock is in a later bucket than `t`, so a restarted
/// server cannot record into a bucket the crashed one had.
fn sleep_past_bucket_of(t: SystemTime) {
    let next = at(unix(t) + 1) + Duration::from_millis(20);
    if let Ok(d) = next.duration_since(SystemTime::now()) {
        std::thread::sleep(d);
    }
}

#[test]
fn kill_9_keeps_history_through_the_last_flush() {
    // CI: 5; `scripts/kill-loop` runs 50 or more.
    let crashes: usize = std::env::var("FORESIGHT_CRASHES").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("history.redb");
    let yaml = config(&path);
    let test_start = Instant::now();
    // Every bucket of every run so far, as the store had it after that run.
    let mut kept: BTreeMap<i64, f64> = BTreeMap::new();

    for run in 0..crashes {
        let started = SystemTime::now();
        let mut s = common::Server::start_with_env(dir.path(), &yaml, &[("RUST_LOG", RUST_LOG)]);
        // Let it record and flush for a while, then die at a different moment
        // of the 0.5 s flush cycle each time (mid-commit, between commits...).
        wait_flushed_through(&s, unix(started) + 2);
        let jitter = Duration::from_millis(150 + 137 * run as u64 % 500);
        std::thread::sleep(jitter);
        s.child.kill().unwrap(); // SIGKILL
        let killed = SystemTime::now();
        s.child.wait().unwrap();
        // The log reader drains what was written before the kill.
        std::thread::sleep(Duration::from_millis(100));
        let through = last_through(&s).unwrap();
        let config = s.config.clone();
        drop(s);

        let when = format!("after crash {run}");
        let store = open(&path);
        let names = store.series_names().unwrap();
        for sig in SIGNALS {
            assert!(names.contains(&format!("inference/x/{sig}")), "{when}: no {sig} series in {names:?}");
        }
        let newest = store.last_bucket(SERIES).unwrap().map(unix);
        assert!(newest >= Some(through), "{when}: newest durable bucket {newest:?} < logged {through}");
        assert_unchanged(&store, &kept, &when);
        let recorded = assert_contiguous(&store, unix(started), through, &when);
        if let Some((&prev_last, _)) = kept.last_key_value() {
            assert!(recorded[0].0 > prev_last, "{when}: run {run} starts at {} <= {prev_last}", recorded[0].0);
        }
        eprintln!(
            "run {run}: recorded {}..={through}, newest durable {newest:?}, killed at {:.3}",
            recorded[0].0,
            killed.duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
        );
        kept.extend(recorded);
        drop(store);
        assert_history_cli(&config, &kept);
        sleep_past_bucket_of(killed);
    }

    // A last run, stopped gracefully: everything it recorded is flushed.
    let started = SystemTime::now();
    let mut s = common::Server::start_with_env(dir.path(), &yaml, &[("RUST_LOG", RUST_LOG)]);
    wait_flushed_through(&s, unix(started) + 1);
    std::thread::sleep(Duration::from_millis(700));
    s.signal("TERM");
    let status = s.wait_exit(Duration::from_secs(15)).expect("exits on SIGTERM");
    let stopped = SystemTime::now();
    assert!(status.success(), "{status:?}");
    s.wait_for_log("\"stopped\"", Duration::from_secs(2));
    drop(s);
    let store = open(&path);
    assert_unchanged(&store, &kept, "after the graceful stop");
    let newest = unix(store.last_bucket(SERIES).unwrap().unwrap());
    assert!(newest >= unix(stopped) - 2, "the final flush wrote through {newest}, stopped at {}", unix(stopped));
    let last_run = assert_contiguous(&store, unix(started), newest, "after the graceful stop");
    assert!(last_run[0].0 > *kept.keys().last().unwrap());
    kept.extend(last_run);
    drop(store);
    assert_history_cli(&dir.path().join("foresight.yaml"), &kept);
    eprintln!("{} buckets over {} runs in {:?}", kept.len(), crashes + 1, test_start.elapsed());
}

/// A disk that fills up (here: a file-size limit put on the running server
/// with `prlimit`, so every store write fails with EFBIG) and then frees up:
/// the server keeps answering, counts and logs the failed flushes (once a
/// minute, not once a flush), and once writes succeed again everything it
/// recorded meanwhile is on disk.
#[test]
fn a_full_disk_loses_no_history_once_space_returns() {
    if !common::tools::have("restart", &[common::tools::PRLIMIT]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("history.redb");
    let started = SystemTime::now();
    let mut s = common::Server::start_with_env(dir.path(), &config(&path), &[("RUST_LOG", RUST_LOG)]);
    wait_flushed_through(&s, unix(started) + 1);
    let pid = s.child.id().to_string();
    let limit = |spec: &str| {
        let ok = Command::new("prlimit").args(["--pid", &pid, &format!("--fsize={spec}")]).status().unwrap().success();
        assert!(ok, "prlimit --fsize={spec}");
    };
    limit("4096:unlimited");
    let full_from = SystemTime::now();
    s.wait_for_log("history flush failed", Duration::from_secs(10));
    let flush_errors = || {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(s.http).unwrap();
        write!(c, "GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut body = String::new();
        c.read_to_string(&mut body).unwrap();
        body.lines()
            .find_map(|l| l.strip_prefix("foresight_store_flush_errors_total "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // Several failed flushes (0.5 s apart), counted: waited for, not slept for.
    let deadline = Instant::now() + Duration::from_secs(15);
    while flush_errors() < 3.0 {
        assert!(Instant::now() < deadline, "flush errors counted: {}", flush_errors());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(common::http_status(s.http, "/readyz"), Some(200), "still serving while the disk is full");
    assert_eq!(s.log_lines_with(&["history flush failed"]).len(), 1, "one error line a minute, not one a flush");

    limit("unlimited:unlimited");
    s.wait_for_log("history flushes succeed again", Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(700));
    s.signal("TERM");
    assert!(s.wait_exit(Duration::from_secs(15)).expect("exits on SIGTERM").success());
    let stopped = SystemTime::now();
    drop(s);
    let store = open(&path);
    let newest = unix(store.last_bucket(SERIES).unwrap().unwrap());
    assert!(newest >= unix(stopped) - 2, "flushed through {newest}, stopped at {}", unix(stopped));
    // Contiguous from the first run's start through the stop: the full-disk seconds included.
    let kept = assert_contiguous(&store, unix(started) + 1, newest, "after the full disk");
    assert!(kept.iter().any(|(b, _)| *b == unix(full_from) + 1), "the seconds while the disk was full are there");
}
