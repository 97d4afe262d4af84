//! The history store at production scale, on disk: 500 workloads x 5 signals
//! x 5 weeks at 1-minute resolution (126M points).
//!
//! `cargo bench --bench store`. Phases: (1) ingest the history by backfill,
//! (2) live minutes: `record()` one point for every series, then `flush()`,
//! (3) reopen (a restart), (4) read 4 weeks of every series with `range()`.
//! VmRSS and the phase's peak (VmHWM, reset between phases) after each, and
//! the file size at the end.
//!
//! Scale by env: FORESIGHT_BENCH_WORKLOADS (500), FORESIGHT_BENCH_SIGNALS (5),
//! FORESIGHT_BENCH_WEEKS (5), FORESIGHT_BENCH_LIVE_MINUTES (10),
//! FORESIGHT_BENCH_CACHE_MIB (16); FORESIGHT_BENCH_DIR keeps the file there
//! instead of a temp dir. A quick run:
//! `FORESIGHT_BENCH_WORKLOADS=20 cargo bench --bench store`.

use std::{
    hint::black_box,
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use foresight::store::{Store, StoreConfig};

const SIGNALS: [&str; 7] =
    ["concurrency", "queue_depth", "request_rate", "prompt_tokens_rate", "generation_tokens_rate", "running", "kv"];

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// (VmRSS, VmHWM) in MiB.
fn rss() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    (kib("VmRSS:") / 1024.0, kib("VmHWM:") / 1024.0)
}

/// Start a new peak: Linux resets VmHWM to the current RSS on "5".
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// A day-shaped demand curve with noise and rare gaps, cheap to make.
struct Demand {
    x: u64,
}

impl Demand {
    fn noise(&mut self) -> f64 {
        self.x ^= self.x << 13;
        self.x ^= self.x >> 7;
        self.x ^= self.x << 17;
        (self.x >> 11) as f64 / (1u64 << 53) as f64
    }

    fn fill(&mut self, base: f64, first_minute: u64, out: &mut [f64]) {
        for (k, v) in out.iter_mut().enumerate() {
            let day = ((first_minute + k as u64) % 1440) as f64 / 1440.0;
            let n = self.noise();
            *v =
                if n < 0.001 { f64::NAN } else { base * (1.2 + (day * std::f64::consts::TAU).sin()) * (0.9 + 0.2 * n) };
        }
    }
}

struct Row {
    phase: &'static str,
    work: String,
    secs: f64,
    rate: String,
    rss: (f64, f64),
}

fn main() {
    let workloads = env("FORESIGHT_BENCH_WORKLOADS", 500);
    let signals = env("FORESIGHT_BENCH_SIGNALS", 5).min(SIGNALS.len() as u64);
    let weeks = env("FORESIGHT_BENCH_WEEKS", 5);
    let live_minutes = env("FORESIGHT_BENCH_LIVE_MINUTES", 10).max(1);
    let cache = env("FORESIGHT_BENCH_CACHE_MIB", 16) as usize * 1024 * 1024;
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::env::var_os("FORESIGHT_BENCH_DIR").map(PathBuf::from).unwrap_or_else(|| tmp.path().to_owned());
    let path = dir.join("history-bench.redb");
    let _ = std::fs::remove_file(&path);
    let cfg = StoreConfig {
        path: Some(path.clone()),
        resolution: Duration::from_secs(60),
        // A day beyond the history, so retention runs but keeps everything.
        retention: Duration::from_secs((weeks * 7 + 1) * 86_400),
        cache_bytes: cache,
    };
    let names: Vec<String> = (0..workloads)
        .flat_map(|w| (0..signals as usize).map(move |s| format!("workload-{w:04}/{}", SIGNALS[s])))
        .collect();
    let minutes = weeks * 7 * 1440;
    let points = names.len() as u64 * minutes;
    println!(
        "history store: {workloads} workloads x {signals} signals x {weeks} weeks at 1 min = {:.1}M points, cache {} MiB, {}",
        points as f64 / 1e6,
        cache >> 20,
        path.display()
    );
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() / 60;
    let first = now - minutes;
    let minute = |m: u64| UNIX_EPOCH + Duration::from_secs(m * 60);
    let mut rows = Vec::new();
    reset_peak();

    // (1) Ingest: one backfill (one durable commit) per series.
    let store = Store::open(cfg.clone()).unwrap();
    let mut demand = Demand { x: 0x9E37_79B9_7F4A_7C15 };
    let mut buf = vec![0.0; minutes as usize];
    let mut generating = Duration::ZERO;
    let start = Instant::now();
    for (i, name) in names.iter().enumerate() {
        let g = Instant::now();
        demand.fill(10.0 + (i % 50) as f64, first, &mut buf);
        generating += g.elapsed();
        store.backfill(name, minute(first), &buf).unwrap();
    }
    let secs = (start.elapsed() - generating).as_secs_f64();
    rows.push(Row {
        phase: "ingest (backfill)",
        work: format!("{} series x {minutes}", names.len()),
        secs,
        rate: format!("{:.2}M points/s", points as f64 / secs / 1e6),
        rss: rss(),
    });

    // (2) Live minutes: every series gets one point, then one flush. A probe
    // thread records meanwhile, to see how long record() can wait on a flush.
    reset_peak();
    let store = Arc::new(store);
    let stop = Arc::new(AtomicBool::new(false));
    let probe = {
        let (store, stop) = (store.clone(), stop.clone());
        std::thread::spawn(move || {
            let (mut max, mut n) = (Duration::ZERO, 0u64);
            while !stop.load(Ordering::Relaxed) {
                let r = Instant::now();
                store.record("probe", minute(now), 1.0);
                max = max.max(r.elapsed());
                n += 1;
                std::thread::sleep(Duration::from_micros(200));
            }
            (max, n)
        })
    };
    let (mut record_secs, mut flush_ms) = (0.0, Vec::new());
    let mut through = None;
    for m in 0..live_minutes {
        let t = minute(now + m) + Duration::from_secs(7);
        let r = Instant::now();
        for (i, name) in names.iter().enumerate() {
            store.record(name, t, (i % 50) as f64 + demand.noise());
        }
        record_secs += r.elapsed().as_secs_f64();
        let f = Instant::now();
        let stats = store.flush().unwrap();
        flush_ms.push(f.elapsed().as_secs_f64() * 1e3);
        assert!(stats.chunks >= names.len(), "every series (and the probe) wrote its chunk");
        through = stats.through;
    }
    stop.store(true, Ordering::Relaxed);
    let (probe_max, probe_n) = probe.join().unwrap();
    assert_eq!(through, Some(minute(now + live_minutes - 1)));
    let rest = &flush_ms[1..];
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    rows.push(Row {
        phase: "live minute",
        work: format!("{live_minutes} x ({} record + flush)", names.len()),
        secs: record_secs + flush_ms.iter().sum::<f64>() / 1e3,
        rate: format!(
            "flush {:.0} ms first (with retention), {:.0} ms mean / {:.0} ms max after; record {:.2} us, \
             worst of {probe_n} concurrent records {:.2} ms",
            flush_ms[0],
            mean(rest),
            rest.iter().copied().fold(f64::NAN, f64::max),
            record_secs / (live_minutes as f64 * names.len() as f64) * 1e6,
            probe_max.as_secs_f64() * 1e3
        ),
        rss: rss(),
    });

    // (3) Restart: open scans every series' newest chunk.
    drop(Arc::into_inner(store).unwrap());
    reset_peak();
    let start = Instant::now();
    let store = Store::open(cfg).unwrap();
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(store.series_names().unwrap().len(), names.len() + 1);
    assert_eq!(store.last_bucket(&names[0]).unwrap(), Some(minute(now + live_minutes - 1)));
    rows.push(Row { phase: "reopen", work: format!("{} series", names.len()), secs, rate: String::new(), rss: rss() });

    // (4) Read 4 weeks (or the whole history, if shorter) of every series.
    reset_peak();
    let read_minutes = minutes.min(4 * 7 * 1440);
    let (from, to) = (minute(now - read_minutes), minute(now));
    let start = Instant::now();
    let (mut read, mut present) = (0u64, 0u64);
    for name in &names {
        let s = store.range(name, from, to).unwrap();
        read += s.values.len() as u64;
        present += s.values.iter().filter(|v| !v.is_nan()).count() as u64;
        black_box(&s);
    }
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(read, names.len() as u64 * read_minutes);
    assert!(present as f64 > read as f64 * 0.99, "gaps are ~0.1% of the history");
    rows.push(Row {
        phase: "read 4 weeks (range)",
        work: format!("{} series x {read_minutes}", names.len()),
        secs,
        rate: format!("{:.2}M points/s, {:.2} ms/series", read as f64 / secs / 1e6, secs * 1e3 / names.len() as f64),
        rss: rss(),
    });
    let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    drop(store);

    println!();
    println!("| phase | work | seconds | rate | VmRSS MiB | phase peak (VmHWM) MiB |");
    println!("|---|---|---:|---|---:|---:|");
    for r in &rows {
        println!("| {} | {} | {:.2} | {} | {:.1} | {:.1} |", r.phase, r.work, r.secs, r.rate, r.rss.0, r.rss.1);
    }
    println!();
    println!(
        "on disk: {:.1} MiB ({:.2} bytes/point; raw f32 is 4)",
        bytes as f64 / (1 << 20) as f64,
        bytes as f64 / (points + live_minutes * names.len() as u64) as f64
    );
}
