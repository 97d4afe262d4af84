//! The history store through its public API: averaging, gaps, disk + memory
//! reads, durability across reopen and crash, backfill rules, retention,
//! concurrency, and damaged files.

use std::{
    path::{Path, PathBuf},
    sync::{Arc, OnceLock},
    thread,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use foresight::store::{Store, StoreConfig, StoreError, CHUNK_LEN};

const MIN: u64 = 60;
const CHUNK_SECS: u64 = CHUNK_LEN as u64 * MIN;

const T0_VAR: &str = "FORESIGHT_STORE_TEST_T0";

/// The tests' epoch: a chunk boundary (at 1-minute resolution) two weeks ago,
/// well inside retention, which `flush()` measures against the wall clock.
/// Passed to the crash child so both agree.
fn t0() -> u64 {
    static T0: OnceLock<u64> = OnceLock::new();
    *T0.get_or_init(|| match std::env::var(T0_VAR) {
        Ok(v) => v.parse().unwrap(),
        Err(_) => {
            let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
            now - now % CHUNK_SECS - 14 * 24 * 3600
        }
    })
}

fn t(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

/// Start of bucket `i` after T0 (1-minute buckets).
fn at(i: u64) -> SystemTime {
    t(t0() + i * MIN)
}

fn mem() -> Store {
    Store::open(StoreConfig::default()).unwrap()
}

fn file_cfg(dir: &Path) -> StoreConfig {
    StoreConfig { path: Some(dir.join("history.redb")), ..StoreConfig::default() }
}

/// Buckets `from..to` after T0.
fn values(store: &Store, series: &str, from: u64, to: u64) -> Vec<f64> {
    let s = store.range(series, at(from), at(to)).unwrap();
    assert_eq!(s.start, at(from));
    assert_eq!(s.step, Duration::from_secs(60));
    assert_eq!(s.values.len() as u64, to - from);
    s.values
}

fn finite(v: &[f64]) -> Vec<(usize, f64)> {
    v.iter().copied().enumerate().filter(|(_, x)| !x.is_nan()).collect()
}

/// Open the file with redb directly and run its full checksum walk.
fn assert_intact(path: &Path) {
    let mut db = redb::Database::open(path).unwrap();
    assert!(db.check_integrity().unwrap(), "redb repaired {}", path.display());
}

#[test]
fn store_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Store>();
    check::<StoreError>();
}

#[test]
fn observations_in_one_bucket_average_and_latest_follows_the_newest() {
    let s = mem();
    assert_eq!(s.resolution(), Duration::from_secs(60));
    s.record("w/c", t(t0() + 5), 1.0);
    s.record("w/c", t(t0() + 30), 2.0);
    s.record("w/c", t(t0() + 59), 6.0);
    assert_eq!(values(&s, "w/c", 0, 1), [3.0]);
    assert_eq!(s.latest("w/c"), Some((6.0, t(t0() + 59))));
    // An older observation joins history but does not replace latest.
    s.record("w/c", t(t0() + 10), 3.0);
    assert_eq!(values(&s, "w/c", 0, 1), [3.0]);
    assert_eq!(s.latest("w/c"), Some((6.0, t(t0() + 59))));
    // set_latest: a fresh reading, not history.
    s.set_latest("w/c", at(10), 42.0);
    assert_eq!(s.latest("w/c"), Some((42.0, at(10))));
    assert!(values(&s, "w/c", 10, 11)[0].is_nan());
    s.set_latest("w/c", at(5), 1.0);
    assert_eq!(s.latest("w/c"), Some((42.0, at(10))), "an older reading is ignored");
    assert_eq!(s.latest("other"), None);
    // Still averaging correctly after a flush of the open chunk.
    s.flush().unwrap();
    s.record("w/c", t(t0() + 1), 8.0);
    assert_eq!(values(&s, "w/c", 0, 1), [4.0]);
}

#[test]
fn gaps_stay_nan_across_chunk_boundaries() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(file_cfg(dir.path())).unwrap();
    let edge = CHUNK_LEN as u64;
    s.record("x", at(edge - 2), 1.5);
    s.record("x", at(edge + 2), 2.5);
    s.record("x", at(3 * edge + 7), 3.5); // two empty chunks in between
    let check = |s: &Store| {
        let v = values(s, "x", edge - 10, 3 * edge + 10);
        assert_eq!(finite(&v), [(8, 1.5), (12, 2.5), (2 * CHUNK_LEN + 17, 3.5)]);
    };
    check(&s);
    s.flush().unwrap();
    check(&s);
    drop(s);
    let s = Store::open(file_cfg(dir.path())).unwrap();
    check(&s);
    assert!(values(&s, "x", 0, 10 * edge).iter().all(|v| v.is_nan() || *v > 1.0), "no zeros anywhere");
}

#[test]
fn range_spans_disk_and_memory() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(file_cfg(dir.path())).unwrap();
    let n = CHUNK_LEN as u64;
    for i in 0..n {
        s.record("x", at(i), i as f64);
    }
    s.flush().unwrap();
    for i in n..2 * n {
        s.record("x", at(i), i as f64);
    }
    // Chunk 0 is clean and no longer the open chunk: released to disk only.
    let stats = s.flush().unwrap();
    assert_eq!(stats.chunks, 1);
    assert_eq!(stats.through, Some(at(2 * n - 1)));
    for i in 2 * n..2 * n + 100 {
        s.record("x", at(i), i as f64); // memory only
    }
    let v = values(&s, "x", 10, 2 * n + 120);
    for (k, x) in v.iter().enumerate() {
        let i = k as u64 + 10;
        if i < 2 * n + 100 {
            assert_eq!(*x, i as f64, "bucket {i}");
        } else {
            assert!(x.is_nan(), "bucket {i}");
        }
    }
    // Unaligned bounds are aligned down, `to` exclusive.
    let r = s.range("x", t(t0() + 90), t(t0() + 5 * MIN + 30)).unwrap();
    assert_eq!((r.start, r.values), (at(1), vec![1.0, 2.0, 3.0, 4.0]));
    assert!(s.range("x", at(5), at(5)).unwrap().values.is_empty());
    assert!(s.range("x", at(5), at(1)).unwrap().values.is_empty());
    assert!(values(&s, "unknown", 0, 10).iter().all(|v| v.is_nan()));
}

#[test]
fn reopen_after_flush_keeps_flushed_data_and_loses_only_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = file_cfg(dir.path());
    let s = Store::open(cfg.clone()).unwrap();
    for i in 0..300 {
        s.record("a", at(i), 1.0 + i as f64);
    }
    s.record("b", at(3), 7.0);
    let stats = s.flush().unwrap();
    assert_eq!(stats.chunks, 3);
    assert_eq!(stats.through, Some(at(299)));
    // Unflushed: new buckets in the flushed open chunk, a later chunk, a new series.
    for i in 300..400 {
        s.record("a", at(i), 1.0 + i as f64);
    }
    s.record("c", at(0), 1.0);
    drop(s);
    assert_intact(cfg.path.as_ref().unwrap());

    let s = Store::open(cfg.clone()).unwrap();
    assert_eq!(s.series_names().unwrap(), ["a", "b"]);
    let v = values(&s, "a", 0, 400);
    for (i, x) in v.iter().enumerate() {
        if i < 300 {
            assert_eq!(*x, 1.0 + i as f64);
        } else {
            assert!(x.is_nan(), "bucket {i} was never flushed");
        }
    }
    assert_eq!(finite(&values(&s, "b", 0, 10)), [(3, 7.0)]);
    assert_eq!(s.last_bucket("a").unwrap(), Some(at(299)));
    assert_eq!(s.latest("a"), None, "latest is not restored: it would not be fresh");

    // Recording into the partly stored chunk after the restart merges with it.
    s.record("a", at(299 - CHUNK_LEN as u64 / 2), 1000.0);
    s.record("a", at(300), 5.0);
    s.flush().unwrap();
    drop(s);
    let s = Store::open(cfg).unwrap();
    let v = values(&s, "a", 0, 301);
    assert_eq!(v[0], 1.0);
    assert_eq!(v[299 - CHUNK_LEN / 2], (1000.0 + 300.0 - CHUNK_LEN as f64 / 2.0) / 2.0);
    assert_eq!(v[298], 299.0);
    assert_eq!(v[300], 5.0);
}

const CRASH_DIR: &str = "FORESIGHT_STORE_CRASH_DIR";

/// Run by `a_crash_loses_only_unflushed_data` in a child process, which it
/// kills mid-work with `abort()`; a no-op in a normal test run.
#[test]
fn crash_child() {
    let Some(dir) = std::env::var_os(CRASH_DIR) else { return };
    let s = Arc::new(Store::open(file_cfg(Path::new(&dir))).unwrap());
    for i in 0..600 {
        s.record("a", at(i), i as f64);
    }
    s.flush().unwrap();
    let flushes = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (w, done) = (s.clone(), flushes.clone());
    thread::spawn(move || {
        for i in 600.. {
            w.record("a", at(i), i as f64);
            w.record("b", at(i), i as f64);
            if i % 97 == 0 {
                w.flush().unwrap();
                done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            if i % 1000 == 0 {
                let vals: Vec<f64> = (0..5000).map(|k| (i + k) as f64).collect();
                w.backfill("c", at(i), &vals).unwrap();
            }
        }
    });
    // Die somewhere in the middle of recording, flushing and backfilling.
    while flushes.load(std::sync::atomic::Ordering::Relaxed) < 20 {
        thread::sleep(Duration::from_millis(1));
    }
    thread::sleep(Duration::from_micros(
        SystemTime::now().duration_since(UNIX_EPOCH).unwrap().subsec_micros() as u64 % 50_000,
    ));
    std::process::abort();
}

#[test]
fn a_crash_loses_only_unflushed_data() {
    let dir = tempfile::tempdir().unwrap();
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["store::crash_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(CRASH_DIR, dir.path())
        .env(T0_VAR, t0().to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(!status.success(), "the child must die by abort");

    let s = Store::open(file_cfg(dir.path())).unwrap();
    let v = values(&s, "a", 0, 1_000_000);
    assert!((0..600).all(|i| v[i] == i as f64), "everything before the first flush is there");
    assert!(v[600 + 19 * 97] == (600 + 19 * 97) as f64, "and everything up to the 20th flush after it");
    for series in ["a", "b", "c"] {
        let v = values(&s, series, 0, 1_000_000);
        for (i, x) in finite(&v) {
            assert_eq!(x, i as f64, "{series} bucket {i}: only what was recorded, never made up");
        }
    }
    let path: PathBuf = file_cfg(dir.path()).path.unwrap();
    drop(s);
    assert_intact(&path);
}

#[test]
fn backfill_fills_gaps_and_never_overwrites_or_makes_zeros() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = file_cfg(dir.path());
    let s = Store::open(cfg.clone()).unwrap();
    let n = CHUNK_LEN as u64;
    // Recorded history: on disk only (chunk 0, released), and in memory (chunk 1, open).
    s.record("x", at(5), 5.0);
    s.flush().unwrap();
    s.record("x", at(n + 5), 50.0);
    s.flush().unwrap();
    s.record("x", at(n + 6), 60.0); // unflushed
                                    // Backfill two and a half chunks from bucket 0: finite everywhere except every 10th bucket.
    let fill: Vec<f64> = (0..(2 * n + n / 2)).map(|i| if i % 10 == 3 { f64::NAN } else { -1.0 - i as f64 }).collect();
    s.backfill("x", at(0), &fill).unwrap();

    let check = |s: &Store| {
        let v = values(s, "x", 0, 3 * n);
        for (i, x) in v.iter().enumerate() {
            let i = i as u64;
            let want = match i {
                5 => 5.0,
                _ if i == n + 5 => 50.0,
                _ if i == n + 6 => 60.0,
                _ if i >= fill.len() as u64 || i % 10 == 3 => f64::NAN,
                _ => -1.0 - i as f64,
            };
            assert!(x.to_bits() == want.to_bits() || (x.is_nan() && want.is_nan()), "bucket {i}: {x} != {want}");
        }
        assert!(!v.contains(&0.0));
    };
    check(&s);
    s.flush().unwrap();
    drop(s);
    let s = Store::open(cfg).unwrap();
    check(&s);
    // A second backfill over filled buckets changes nothing.
    s.backfill("x", at(0), &vec![99.0; 3 * CHUNK_LEN]).unwrap();
    let gaps = fill.iter().filter(|v| v.is_nan()).count() as u64;
    assert_eq!(
        values(&s, "x", 0, 3 * n).iter().filter(|v| **v == 99.0).count() as u64,
        3 * n - fill.len() as u64 + gaps
    );

    // Into a new series, durable without a flush; all-NaN input is a no-op.
    s.backfill("y", t(t0() + 30), &[1.0, f64::NAN, 3.0]).unwrap();
    s.backfill("z", at(0), &[f64::NAN; 4]).unwrap();
    assert_eq!(s.last_bucket("y").unwrap(), Some(at(2)));
    drop(s);
    let s = Store::open(file_cfg(dir.path())).unwrap();
    let v = values(&s, "y", 0, 4);
    assert_eq!(finite(&v), [(0, 1.0), (2, 3.0)]);
    assert!(!s.series_names().unwrap().contains(&"z".to_string()));
    assert!(matches!(
        s.backfill("y", UNIX_EPOCH - Duration::from_secs(1), &[1.0]),
        Err(StoreError::BeforeEpoch { .. })
    ));
}

#[test]
fn reopening_at_another_resolution_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = file_cfg(dir.path());
    let s = Store::open(cfg.clone()).unwrap();
    s.record("x", at(0), 1.0);
    s.flush().unwrap();
    drop(s);
    let err = Store::open(StoreConfig { resolution: Duration::from_secs(10), ..cfg.clone() }).unwrap_err();
    match &err {
        StoreError::ResolutionMismatch { path, stored, configured } => {
            assert_eq!(path, cfg.path.as_ref().unwrap());
            assert_eq!((*stored, *configured), (Duration::from_secs(60), Duration::from_secs(10)));
        }
        e => panic!("unexpected {e:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("history.redb") && msg.contains("60s") && msg.contains("10s"), "{msg}");
    // The file is untouched and still opens at its own resolution.
    assert_eq!(values(&Store::open(cfg).unwrap(), "x", 0, 1), [1.0]);
}

#[test]
fn bad_configs_are_rejected() {
    for resolution in [Duration::ZERO, Duration::from_millis(500), Duration::from_millis(1500)] {
        let err = Store::open(StoreConfig { resolution, ..StoreConfig::default() }).unwrap_err();
        assert!(matches!(err, StoreError::InvalidConfig { .. }), "{err}");
    }
    let err = Store::open(StoreConfig { retention: Duration::from_secs(60), ..StoreConfig::default() }).unwrap_err();
    assert!(matches!(err, StoreError::InvalidConfig { .. }), "{err}");
    let s = Store::open(StoreConfig { resolution: Duration::from_secs(1), ..StoreConfig::default() }).unwrap();
    s.record("x", t(t0() + 1), 1.0);
    assert_eq!(s.range("x", t(t0()), t(t0() + 3)).unwrap().values[1], 1.0);
    let err = s.range("x", UNIX_EPOCH, t(t0())).unwrap_err();
    assert!(matches!(err, StoreError::RangeTooLarge { .. }), "{err}");
}

#[test]
fn retention_removes_old_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = file_cfg(dir.path());
    let week = 7 * 24 * 3600;
    let now = t0() + 10 * week; // retention measured against flush_at's clock
    let s = Store::open(cfg.clone()).unwrap();
    let day: Vec<f64> = vec![1.0; 24 * 60];
    s.backfill("x", t(now - 6 * week), &day).unwrap(); // older than 5 weeks
    s.backfill("x", t(now - week), &day).unwrap();
    s.record("x", t(now - 6 * week - CHUNK_SECS), 2.0); // in memory, also expired
    s.record("y", t(now), 3.0);
    let stats = s.flush_at(t(now)).unwrap();
    assert_eq!(stats.pruned, 24 * 60 / CHUNK_LEN, "six 4-hour chunks a day");
    assert!(s.range("x", t(now - 7 * week), t(now - 5 * week)).unwrap().values.iter().all(|v| v.is_nan()));
    assert_eq!(s.range("x", t(now - week), t(now)).unwrap().values.iter().filter(|v| **v == 1.0).count(), 24 * 60);
    // Late observations into expired chunks are dropped, not resurrected.
    s.record("x", t(now - 6 * week), 5.0);
    s.backfill("x", t(now - 6 * week), &day).unwrap();
    assert_eq!(s.dropped_rejected(), 1);
    assert_eq!(s.flush_at(t(now + 60)).unwrap().pruned, 0, "not due again within the hour");
    drop(s);
    let s = Store::open(cfg).unwrap();
    assert!(s.range("x", t(now - 7 * week), t(now - 5 * week)).unwrap().values.iter().all(|v| v.is_nan()));
    assert_eq!(s.range("y", t(now), t(now + 60)).unwrap().values, [3.0]);
    // The last-bucket walk after reopen does not see pruned chunks.
    assert_eq!(s.last_bucket("x").unwrap(), Some(t(now - week + 24 * 3600 - 60)));
}

#[test]
fn non_finite_values_are_ignored_and_counted() {
    let s = mem();
    s.record("x", at(0), f64::NAN);
    s.record("x", at(1), f64::INFINITY);
    s.record("x", at(2), f64::NEG_INFINITY);
    s.set_latest("x", at(3), f64::NAN);
    assert_eq!(s.dropped_non_finite(), 4);
    assert_eq!(s.latest("x"), None);
    assert!(values(&s, "x", 0, 4).iter().all(|v| v.is_nan()));
    s.backfill("x", at(0), &[f64::INFINITY, 2.0, f64::NAN]).unwrap();
    assert_eq!(s.dropped_non_finite(), 5, "NaN in a backfill is a gap, not a drop");
    assert_eq!(finite(&values(&s, "x", 0, 4)), [(1, 2.0)]);
    s.record("x", UNIX_EPOCH - Duration::from_secs(60), 1.0);
    assert_eq!(s.dropped_rejected(), 1);
}

#[test]
fn last_bucket_tracks_memory_and_disk() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(file_cfg(dir.path())).unwrap();
    assert_eq!(s.last_bucket("x").unwrap(), None);
    s.record("x", t(t0() + 3 * MIN + 20), 1.0);
    assert_eq!(s.last_bucket("x").unwrap(), Some(at(3)));
    s.flush().unwrap();
    s.record("x", at(1), 1.0); // older: no change
    s.set_latest("x", at(50), 1.0); // not history: no change
    assert_eq!(s.last_bucket("x").unwrap(), Some(at(3)));
    s.backfill("x", at(1000), &[1.0, 2.0, f64::NAN]).unwrap();
    assert_eq!(s.last_bucket("x").unwrap(), Some(at(1001)));
    drop(s);
    let s = Store::open(file_cfg(dir.path())).unwrap();
    assert_eq!(s.last_bucket("x").unwrap(), Some(at(1001)));
}

#[test]
fn late_write_into_a_released_chunk_merges_with_disk() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(file_cfg(dir.path())).unwrap();
    let n = CHUNK_LEN as u64;
    s.record("x", at(0), 4.0);
    s.record("x", at(1), 9.0);
    s.flush().unwrap();
    s.record("x", at(n), 1.0);
    s.flush().unwrap(); // chunk 0 is released here
    s.record("x", at(0), 8.0); // stored 4.0 counts as one observation
    s.record("x", at(2), 2.0);
    assert_eq!(values(&s, "x", 0, 3), [6.0, 9.0, 2.0]);
    s.flush().unwrap();
    drop(s);
    let s = Store::open(file_cfg(dir.path())).unwrap();
    assert_eq!(values(&s, "x", 0, 3), [6.0, 9.0, 2.0]);
    assert_eq!(values(&s, "x", n, n + 1), [1.0]);
}

#[test]
fn concurrent_records_while_flushing() {
    let dir = tempfile::tempdir().unwrap();
    let s = Arc::new(Store::open(file_cfg(dir.path())).unwrap());
    const THREADS: usize = 4;
    const POINTS: u64 = 3000; // 12.5 chunks per series
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flusher = {
        let (s, stop) = (s.clone(), stop.clone());
        thread::spawn(move || {
            let mut flushes = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                s.flush().unwrap();
                flushes += 1;
            }
            flushes
        })
    };
    let writers: Vec<_> = (0..THREADS)
        .map(|w| {
            let s = s.clone();
            thread::spawn(move || {
                for i in 0..POINTS {
                    // Two observations per bucket, one also read back at once.
                    s.record(&format!("w{w}"), at(i), i as f64);
                    s.record(&format!("w{w}"), at(i), i as f64 + 2.0);
                    s.record("shared", at(i), 1.0);
                    if i % 500 == 0 {
                        assert_eq!(values(&s, &format!("w{w}"), i, i + 1), [i as f64 + 1.0]);
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(flusher.join().unwrap() > 0);
    s.flush().unwrap();
    let check = |s: &Store| {
        for w in 0..THREADS {
            let v = values(s, &format!("w{w}"), 0, POINTS);
            assert!(v.iter().enumerate().all(|(i, x)| *x == i as f64 + 1.0), "w{w}");
        }
        assert!(values(s, "shared", 0, POINTS).iter().all(|x| *x == 1.0));
    };
    check(&s);
    drop(s);
    check(&Store::open(file_cfg(dir.path())).unwrap());
}

#[test]
fn garbage_and_foreign_files_are_errors_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("garbage.redb");
    let cfg = StoreConfig { path: Some(path.clone()), ..StoreConfig::default() };
    // Random bytes of several sizes, including shorter than a header.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for len in [7, 512, 4096, 1 << 20] {
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        std::fs::write(&path, &bytes).unwrap();
        let err = Store::open(cfg.clone()).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{len} bytes: {err:?}");
        assert!(err.to_string().contains("garbage.redb"), "{err}");
    }
    // A text file.
    std::fs::write(&path, "workloads: []\n".repeat(100)).unwrap();
    assert!(matches!(Store::open(cfg.clone()), Err(StoreError::Corrupt { .. })));
    // A redb database that is not a history store.
    std::fs::remove_file(&path).unwrap();
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(redb::TableDefinition::<u64, u64>::new("other")).unwrap().insert(1, 2).unwrap();
        txn.commit().unwrap();
    }
    let err = Store::open(cfg.clone()).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    // A directory that does not exist.
    let err = Store::open(StoreConfig { path: Some(dir.path().join("no/such/dir/h.redb")), ..cfg }).unwrap_err();
    assert!(matches!(err, StoreError::Open { .. }), "{err:?}");
}

#[test]
fn a_store_file_opens_once() {
    let dir = tempfile::tempdir().unwrap();
    let _s = Store::open(file_cfg(dir.path())).unwrap();
    let err = Store::open(file_cfg(dir.path())).unwrap_err();
    assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");
}

#[test]
fn recent_values_are_kept_for_the_window() {
    let s = mem();
    s.keep_recent(Duration::from_secs(120));
    for (secs, v) in [(0, 1.0), (30, 2.0), (60, 3.0), (150, 4.0)] {
        s.set_latest("w/x", t(secs), v);
    }
    // An older reading is not the latest, and a second one at the same time replaces the first.
    s.set_latest("w/x", t(10), 9.0);
    s.set_latest("w/x", t(150), 5.0);
    let got: Vec<(f64, u64)> =
        s.recent("w/x", t(0)).iter().map(|(v, at)| (*v, at.duration_since(t(0)).unwrap().as_secs())).collect();
    assert_eq!(got, vec![(2.0, 30), (3.0, 60), (5.0, 150)], "within 120 s of the newest");
    assert_eq!(s.latest("w/x"), Some((5.0, t(150))));
    assert_eq!(s.recent("w/x", t(60)).len(), 2);
    assert!(s.recent("nothing", t(0)).is_empty());
    // By default only the latest is kept.
    let d = mem();
    d.set_latest("w/x", t(0), 1.0);
    d.set_latest("w/x", t(1), 2.0);
    assert_eq!(d.recent("w/x", t(0)), vec![(2.0, t(1))]);
}

#[test]
fn many_series_backfill_in_one_transaction_with_the_same_rules() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(file_cfg(dir.path())).unwrap();
    s.record("b", at(1), 42.0);
    let a: Vec<f64> = (0..600).map(|i| i as f64).collect();
    let b = vec![1.0, 2.0, f64::NAN];
    s.backfill_many(&[("a", at(0), a.as_slice()), ("b", at(0), b.as_slice()), ("c", at(0), &[])]).unwrap();
    assert_eq!(values(&s, "a", 0, 600), a, "across chunks");
    // History already recorded wins; a NaN is a gap.
    assert_eq!(values(&s, "b", 0, 3)[..2], [1.0, 42.0]);
    assert!(values(&s, "b", 0, 3)[2].is_nan());
    assert!(s.series_names().unwrap().iter().all(|n| n != "c"), "nothing to write, no series");
    drop(s);
    let s = Store::open(file_cfg(dir.path())).unwrap();
    assert_eq!(values(&s, "a", 0, 600), a, "durable without a flush");
}
