//! The history store: per-series demand history at a fixed resolution,
//! persisted in an embedded crash-safe database (redb), plus the latest
//! value of each series.
//!
//! Callers: metric collectors [`record`](Store::record), the control loop reads
//! [`latest`](Store::latest), the forecaster reads [`range`](Store::range).
//! A series is any name; by convention `<workload>/<signal>`.
//!
//! **Layout.** Time is cut into buckets of the resolution (bucket index =
//! `floor(unix_secs / resolution_secs)`, so times before 1970 are rejected) and
//! buckets into chunks of [`CHUNK_LEN`] (4 h at 1 min). One redb table maps
//! `(series id u32, chunk index i64)` to the chunk's `CHUNK_LEN` little-endian
//! `f32`s, NaN for a gap; a gap is never stored as 0, and an all-gap chunk is
//! never written. A second table maps series name -> id, a third records the
//! format version, chunk length and resolution; opening a file at another
//! resolution is [`StoreError::ResolutionMismatch`].
//!
//! **Memory.** The full history lives on disk behind a small page cache
//! ([`StoreConfig::cache_bytes`]; redb's own default is 1 GiB). Memory holds
//! per series its latest value, its open chunk (the newest one it has, as a
//! running mean and count per bucket, about 3 KiB) and chunks with changes not
//! yet flushed. A flush releases every clean chunk but the open one, so memory
//! stays bounded by the number of series as time passes.
//!
//! **Durability.** [`flush`](Store::flush) writes every changed chunk in one
//! redb write transaction with a durable commit; a crash loses at most what
//! was recorded since, and redb's commit protocol (checksummed, copy-on-write)
//! never corrupts what was committed. Dropping a `Store` does not flush.
//! [`backfill`](Store::backfill) commits its own durable transaction.
//!
//! **Locking.** One mutex guards the in-memory state. `flush` takes it only to
//! snapshot the changed chunks (encoding them, ~1 KiB each: about 3 ms for
//! 2,500 series) and, after the commit, to mark them clean; the write
//! transaction and its fsync run outside it, so `record` does not wait for
//! the disk. Flushes are serialised by a second mutex, so an older snapshot
//! never commits over a newer one. `backfill` is the exception: it holds the
//! state lock through its own transaction, because it writes chunks that are
//! not in memory and a concurrent `record` must not load such a chunk
//! half-way. It is a start-up operation (~2.5 ms for 5 weeks of one series);
//! while live recording runs, backfill in slices of a day or so.
//!
//! **Late writes.** A `record` into a chunk no longer in memory loads that
//! chunk from disk (a short read under the lock) and merges into it; a stored
//! bucket counts as one observation in the average (the store keeps means,
//! not counts). Records into chunks already expired by retention are dropped
//! and counted ([`dropped_rejected`](Store::dropped_rejected)).
//!
//! **Retention.** A flush deletes chunks that end before `now - retention`,
//! at most once per hour; the file does not shrink, redb reuses the pages.

mod chunk;
mod disk;
mod error;

use std::{
    collections::{HashMap, VecDeque},
    panic::{self, AssertUnwindSafe},
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex, MutexGuard, PoisonError,
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use redb::{
    backends::InMemoryBackend, Builder, Database, DatabaseError, ReadableDatabase, ReadableTable, StorageError,
    TableDefinition, TableError,
};
use tracing::{debug, info, warn};

pub use chunk::CHUNK_LEN;
pub use error::StoreError;

use disk::{init_or_check_meta, load_series, open_db};
use error::Ctx;

use chunk::MemChunk;

const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const NAMES: TableDefinition<&str, u32> = TableDefinition::new("series");
const CHUNKS: TableDefinition<(u32, i64), &[u8]> = TableDefinition::new("chunks");

/// Bumped on any change to the tables' meaning.
const FORMAT_VERSION: u64 = 1;

/// How often a flush also applies retention.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// Most buckets one [`Store::range`] answer may hold (128 MiB of f64).
pub(crate) const MAX_RANGE_BUCKETS: u64 = 1 << 24;

/// Where and how history is kept.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreConfig {
    /// The database file, created if missing (its directory must exist).
    /// `None` keeps everything in memory (tests, demo).
    pub path: Option<PathBuf>,
    /// Bucket width: whole seconds, at least 1 s. Fixed for the life of a file.
    pub resolution: Duration,
    /// How far back history is kept (at least this much is).
    pub retention: Duration,
    /// redb's page cache, the main memory cost besides the open chunks.
    pub cache_bytes: usize,
}

impl Default for StoreConfig {
    /// In memory, 1-minute buckets, 5 weeks, 16 MiB of cache.
    fn default() -> Self {
        StoreConfig {
            path: None,
            resolution: Duration::from_secs(60),
            retention: Duration::from_secs(35 * 24 * 3600),
            cache_bytes: 16 << 20,
        }
    }
}

/// Consecutive buckets of one series.
#[derive(Debug, Clone)]
pub struct Series {
    /// Start of the first bucket.
    pub start: SystemTime,
    /// Bucket width (the store's resolution).
    pub step: Duration,
    /// One value per bucket, NaN where nothing was recorded.
    pub values: Vec<f64>,
}

/// What a [`Store::flush`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlushStats {
    /// Chunks written.
    pub chunks: usize,
    /// Chunks deleted by retention (0 when retention was not due).
    pub pruned: usize,
    /// Start of the newest bucket (any series) now durable.
    pub through: Option<SystemTime>,
}

/// One series' in-memory state.
struct SeriesState {
    id: u32,
    name: Arc<str>,
    /// The name -> id row is committed (false until the first flush or backfill).
    persisted: bool,
    /// Sorted by index; normally just the open chunk.
    chunks: Vec<MemChunk>,
    /// No chunk on disk has a higher index (an upper bound: retention may
    /// have deleted it). Chunks above it need no load before recording.
    disk_max: Option<i64>,
    /// Newest bucket holding a value, memory or disk.
    newest: Option<i64>,
    /// The latest values, oldest first, within [`Inner::recent_keep`] of the newest (at least the newest).
    recent: VecDeque<(f64, SystemTime)>,
}

impl SeriesState {
    fn new(id: u32, name: Arc<str>, persisted: bool) -> Self {
        SeriesState { id, name, persisted, chunks: Vec::new(), disk_max: None, newest: None, recent: VecDeque::new() }
    }

    /// Take `value` at `t` as the latest unless an older time; keep the
    /// values within `keep` of it. A second value at the same time replaces the first.
    fn note_latest(&mut self, value: f64, t: SystemTime, keep: Duration) {
        match self.recent.back_mut() {
            Some((v, lt)) if *lt == t => *v = value,
            Some((_, lt)) if *lt > t => return,
            _ => self.recent.push_back((value, t)),
        }
        let since = t.checked_sub(keep).unwrap_or(UNIX_EPOCH);
        while self.recent.len() > 1 && self.recent.front().is_some_and(|(_, at)| *at < since) {
            self.recent.pop_front();
        }
    }

    fn chunk_pos(&self, index: i64) -> Result<usize, usize> {
        self.chunks.binary_search_by_key(&index, |m| m.index)
    }
}

struct Inner {
    by_name: HashMap<Arc<str>, usize>,
    series: Vec<SeriesState>,
    next_id: u32,
    /// Chunks below this index have been deleted by retention.
    expired_before: i64,
    last_prune: Option<SystemTime>,
    /// Newest durable bucket over all series.
    durable_through: Option<i64>,
    /// How far back each series keeps its latest values ([`Store::keep_recent`]).
    recent_keep: Duration,
}

impl Inner {
    /// Index of `name` in `series`, creating it; `None` when ids ran out.
    fn series_index(&mut self, name: &str) -> Option<usize> {
        if let Some(&i) = self.by_name.get(name) {
            return Some(i);
        }
        let id = self.next_id;
        self.next_id = id.checked_add(1)?;
        let name: Arc<str> = name.into();
        self.series.push(SeriesState::new(id, name.clone(), false));
        self.by_name.insert(name, self.series.len() - 1);
        Some(self.series.len() - 1)
    }

    fn get(&self, name: &str) -> Option<&SeriesState> {
        self.by_name.get(name).map(|&i| &self.series[i])
    }
}

/// A chunk snapshot taken by a flush.
struct Dirty {
    series: usize,
    id: u32,
    index: i64,
    generation: u64,
    newest: Option<i64>,
    bytes: Vec<u8>,
}

/// The history store. `Send + Sync`: share it with an `Arc`.
pub struct Store {
    /// `None` after an I/O error closed it, until a flush reopens it.
    db: arc_swap::ArcSwapOption<Database>,
    /// What the file was opened with, to reopen it.
    cfg: StoreConfig,
    /// The file, or `:memory:`, for errors and logs.
    path: PathBuf,
    res_secs: u64,
    retention: Duration,
    inner: Mutex<Inner>,
    /// Held for a whole flush, so flushes commit in snapshot order.
    flushing: Mutex<()>,
    non_finite: AtomicU64,
    rejected: AtomicU64,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).field("resolution_secs", &self.res_secs).finish()
    }
}

/// A panicking caller must not take history down with it: the state is
/// consistent between statements, so a poisoned lock is still usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Store {
    /// Open (or create) the store. Fails on a bad config, a file that is not a
    /// history store or is damaged, another resolution, or a file already open.
    pub fn open(cfg: StoreConfig) -> Result<Store, StoreError> {
        let path = cfg.path.clone().unwrap_or_else(|| PathBuf::from(":memory:"));
        let invalid = |reason: String| StoreError::InvalidConfig { path: path.clone(), reason };
        if cfg.resolution.subsec_nanos() != 0 || cfg.resolution.as_secs() == 0 {
            return Err(invalid(format!("resolution must be whole seconds, at least 1 s, not {:?}", cfg.resolution)));
        }
        if cfg.retention < cfg.resolution * CHUNK_LEN as u32 {
            return Err(invalid(format!(
                "retention {:?} is shorter than one chunk ({CHUNK_LEN} buckets of {:?})",
                cfg.retention, cfg.resolution
            )));
        }
        let res_secs = cfg.resolution.as_secs();
        let db = open_db(&cfg, &path)?;
        init_or_check_meta(&db, &path, res_secs)?;
        let inner = load_series(&db, &path)?;
        info!(path = %path.display(), series = inner.series.len(), resolution_secs = res_secs, "history store open");
        Ok(Store {
            db: arc_swap::ArcSwapOption::from_pointee(db),
            cfg: cfg.clone(),
            path,
            res_secs,
            retention: cfg.retention,
            inner: Mutex::new(inner),
            flushing: Mutex::new(()),
            non_finite: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
        })
    }

    pub fn resolution(&self) -> Duration {
        Duration::from_secs(self.res_secs)
    }

    /// One observation. Non-finite values are ignored (and counted), never
    /// stored as 0. Several observations in one bucket average. Also updates
    /// latest if `t` is newer. Times before 1970 or in expired chunks are
    /// dropped and counted in [`dropped_rejected`](Self::dropped_rejected).
    pub fn record(&self, series: &str, t: SystemTime, value: f64) {
        self.write(series, t, value, MemChunk::add, true)
    }

    /// Set the bucket holding `t` to `value`, whatever it held: for sources
    /// whose value is one evaluation per bucket that may be read again as
    /// late data settles (a Prometheus-compatible server's recent buckets).
    /// Otherwise as [`record`](Self::record), but the latest value is left
    /// alone: a bucket's value is not a reading taken at its start.
    pub(crate) fn replace(&self, series: &str, t: SystemTime, value: f64) {
        self.write(series, t, value, MemChunk::set, false)
    }

    fn write(&self, series: &str, t: SystemTime, value: f64, op: fn(&mut MemChunk, usize, f64), latest: bool) {
        if !value.is_finite() {
            self.non_finite.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let Some(b) = self.bucket_of(t) else {
            return self.reject(series, "time before the Unix epoch");
        };
        let (c, i) = chunk::split(b);
        let mut inner = lock(&self.inner);
        if c < inner.expired_before {
            return self.reject(series, "older than retention");
        }
        let Some(si) = inner.series_index(series) else {
            return self.reject(series, "series id space exhausted");
        };
        let keep = inner.recent_keep;
        let s = &mut inner.series[si];
        let pos = match s.chunk_pos(c) {
            Ok(pos) => pos,
            Err(pos) => {
                let loaded = if s.disk_max.is_some_and(|m| c <= m) {
                    // A late write (or the first after a restart) into a chunk
                    // that may be on disk: merge into it, never overwrite it.
                    match self.load_chunk(s.id, c) {
                        Ok(m) => m,
                        Err(e) => {
                            warn!(error = %e, series, "history: cannot load chunk for a late observation");
                            return self.reject(series, "chunk load failed");
                        }
                    }
                } else {
                    MemChunk::empty(c)
                };
                s.chunks.insert(pos, loaded);
                pos
            }
        };
        op(&mut s.chunks[pos], i, value);
        s.newest = s.newest.max(Some(b));
        if latest {
            s.note_latest(value, t, keep);
        }
    }

    /// Latest value only (fresh reading for decisions) without touching
    /// history. Ignored if older than the current latest; non-finite values
    /// are ignored and counted.
    pub fn set_latest(&self, series: &str, t: SystemTime, value: f64) {
        if !value.is_finite() {
            self.non_finite.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut inner = lock(&self.inner);
        let Some(si) = inner.series_index(series) else {
            return self.reject(series, "series id space exhausted");
        };
        let keep = inner.recent_keep;
        inner.series[si].note_latest(value, t, keep);
    }

    /// The latest value and its time, from `record` or `set_latest` in this
    /// process (not restored from disk: after a restart it is not fresh).
    pub fn latest(&self, series: &str) -> Option<(f64, SystemTime)> {
        lock(&self.inner).get(series)?.recent.back().copied()
    }

    /// The latest values at or after `since`, oldest first: the readings a
    /// scale-down hold looks back over. Kept for [`keep_recent`](Store::keep_recent).
    pub fn recent(&self, series: &str, since: SystemTime) -> Vec<(f64, SystemTime)> {
        let inner = lock(&self.inner);
        inner.get(series).map_or_else(Vec::new, |s| s.recent.iter().filter(|(_, t)| *t >= since).copied().collect())
    }

    /// Keep each series' latest values for `keep` (the scale-down window); by default only the latest.
    pub fn keep_recent(&self, keep: Duration) {
        lock(&self.inner).recent_keep = keep;
    }

    /// How long each series keeps its latest values ([`keep_recent`](Store::keep_recent)).
    pub fn recent_window(&self) -> Duration {
        lock(&self.inner).recent_keep
    }

    /// Bulk backfill: consecutive buckets from `start` (aligned down to the
    /// resolution). NaN entries are gaps and never overwrite stored values;
    /// finite entries fill gaps and do not overwrite existing values either
    /// (history already recorded wins). Infinities count as non-finite and are
    /// skipped; buckets in expired chunks are skipped. Durable when it returns
    /// (chunks in memory are merged there and become durable with the next flush).
    pub fn backfill(&self, series: &str, start: SystemTime, values: &[f64]) -> Result<(), StoreError> {
        self.backfill_many(&[(series, start, values)])
    }

    /// [`backfill`](Store::backfill) of several series in one durable
    /// transaction: a batched source writes a thousand workloads' history
    /// with one commit (one fsync), not a thousand.
    pub fn backfill_many(&self, items: &[(&str, SystemTime, &[f64])]) -> Result<(), StoreError> {
        // Per item: (series index, first bucket, values, chunks to merge on disk, newest bucket, newest on disk).
        type Planned<'v> = (usize, i64, &'v [f64], Vec<(i64, i64, i64)>, Option<i64>, Option<i64>);
        let mut inner = lock(&self.inner);
        let expired = inner.expired_before;
        let mut planned: Vec<Planned<'_>> = Vec::with_capacity(items.len());
        for &(series, start, values) in items {
            let b0 = self.bucket_of(start).ok_or_else(|| self.before_epoch("backfill start"))?;
            let infinite = values.iter().filter(|v| v.is_infinite()).count();
            self.non_finite.fetch_add(infinite as u64, Ordering::Relaxed);
            let Some(last) = values.iter().rposition(|v| v.is_finite()) else {
                continue;
            };
            let end = b0 + last as i64 + 1;
            let si = inner.series_index(series).ok_or_else(|| StoreError::TooManySeries { path: self.path.clone() })?;
            let s = &mut inner.series[si];
            let mut on_disk = Vec::new();
            let (mut newest, mut disk_newest) = (None, None);
            for c in chunk::split(b0).0..=chunk::split(end - 1).0 {
                let (lo, hi) = (chunk::first_bucket(c).max(b0), (chunk::first_bucket(c) + CHUNK_LEN as i64).min(end));
                let part = &values[(lo - b0) as usize..(hi - b0) as usize];
                let Some(top) = part.iter().rposition(|v| v.is_finite()) else { continue };
                if c < expired {
                    continue;
                }
                let top = Some(lo + top as i64);
                newest = newest.max(top);
                match s.chunk_pos(c) {
                    Ok(pos) => {
                        let m = &mut s.chunks[pos];
                        let off = (lo - chunk::first_bucket(c)) as usize;
                        for (k, v) in part.iter().enumerate().filter(|(_, v)| v.is_finite()) {
                            m.fill(off + k, *v);
                        }
                    }
                    Err(_) => {
                        on_disk.push((c, lo, hi));
                        disk_newest = disk_newest.max(top);
                    }
                }
            }
            planned.push((si, b0, values, on_disk, newest, disk_newest));
        }
        if planned.iter().any(|p| !p.3.is_empty()) {
            let txn = self.handle()?.begin_write().ctx(&self.path, "begin backfill")?;
            {
                let mut names = txn.open_table(NAMES).ctx(&self.path, "open series table")?;
                let mut table = txn.open_table(CHUNKS).ctx(&self.path, "open chunk table")?;
                for (si, b0, values, on_disk, ..) in planned.iter().filter(|p| !p.3.is_empty()) {
                    let s = &inner.series[*si];
                    if !s.persisted {
                        names.insert(&*s.name, s.id).ctx(&self.path, "insert series")?;
                    }
                    for &(c, lo, hi) in on_disk {
                        let existing = table.get((s.id, c)).ctx(&self.path, "read chunk")?.map(|g| g.value().to_vec());
                        let mut bytes = match existing {
                            Some(b) => self.checked(s.id, c, b)?,
                            None => chunk::empty_bytes(),
                        };
                        let off = (lo - chunk::first_bucket(c)) as usize;
                        let mut changed = false;
                        for (k, v) in values[(lo - b0) as usize..(hi - b0) as usize].iter().enumerate() {
                            if v.is_finite() && chunk::stored(&bytes, off + k).is_nan() {
                                chunk::store(&mut bytes, off + k, *v);
                                changed = true;
                            }
                        }
                        if changed {
                            table.insert((s.id, c), bytes.as_slice()).ctx(&self.path, "write chunk")?;
                        }
                    }
                }
            }
            txn.commit().ctx(&self.path, "commit backfill")?;
        }
        for (si, _, _, on_disk, newest, disk_newest) in planned {
            let s = &mut inner.series[si];
            if let Some(&(c, ..)) = on_disk.last() {
                s.persisted = true;
                s.disk_max = s.disk_max.max(Some(c));
            }
            s.newest = s.newest.max(newest);
            inner.durable_through = inner.durable_through.max(disk_newest);
        }
        Ok(())
    }

    /// Buckets in `[from, to)` (both aligned down), from disk plus unflushed
    /// memory; NaN where nothing was recorded. An unknown series is all NaN.
    pub fn range(&self, series: &str, from: SystemTime, to: SystemTime) -> Result<Series, StoreError> {
        let fb = self.bucket_of(from).ok_or_else(|| self.before_epoch("range start"))?;
        let tb = self.bucket_of(to).ok_or_else(|| self.before_epoch("range end"))?.max(fb);
        let n = (tb - fb) as u64;
        if n > MAX_RANGE_BUCKETS {
            return Err(StoreError::RangeTooLarge { path: self.path.clone(), buckets: n, limit: MAX_RANGE_BUCKETS });
        }
        let mut out =
            Series { start: self.bucket_start(fb), step: self.resolution(), values: vec![f64::NAN; n as usize] };
        if n == 0 {
            return Ok(out);
        }
        let (c0, c1) = (chunk::split(fb).0, chunk::split(tb - 1).0);
        // Overlap of chunk c with the answer: (first bucket, end bucket).
        let overlap = |c: i64| (chunk::first_bucket(c).max(fb), (chunk::first_bucket(c) + CHUNK_LEN as i64).min(tb));
        let (id, in_memory, txn) = {
            let inner = lock(&self.inner);
            let Some(s) = inner.get(series) else { return Ok(out) };
            let mut in_memory = Vec::new();
            for m in s.chunks.iter().filter(|m| (c0..=c1).contains(&m.index)) {
                let (lo, hi) = overlap(m.index);
                for b in lo..hi {
                    out.values[(b - fb) as usize] = m.get((b - chunk::first_bucket(m.index)) as usize);
                }
                in_memory.push(m.index);
            }
            // Begun under the lock, so disk and memory are from the same moment:
            // a chunk is either still in memory here or committed in this snapshot.
            let txn = if s.persisted { Some(self.handle()?.begin_read().ctx(&self.path, "begin read")?) } else { None };
            (s.id, in_memory, txn)
        };
        let Some(txn) = txn else { return Ok(out) };
        let table = txn.open_table(CHUNKS).ctx(&self.path, "open chunk table")?;
        for entry in table.range((id, c0)..=(id, c1)).ctx(&self.path, "read chunks")? {
            let (k, v) = entry.ctx(&self.path, "read chunk")?;
            let c = k.value().1;
            // Memory is a superset of disk for a chunk it holds.
            if in_memory.contains(&c) {
                continue;
            }
            let bytes = v.value();
            if bytes.len() != chunk::CHUNK_BYTES {
                return Err(self.bad_chunk(id, c, bytes.len()));
            }
            let (lo, hi) = overlap(c);
            chunk::decode_into(
                bytes,
                (lo - chunk::first_bucket(c)) as usize,
                &mut out.values[(lo - fb) as usize..(hi - fb) as usize],
            );
        }
        Ok(out)
    }

    /// Start of the newest bucket holding a value (memory or disk), for
    /// incremental backfill after a restart.
    pub fn last_bucket(&self, series: &str) -> Result<Option<SystemTime>, StoreError> {
        Ok(lock(&self.inner).get(series).and_then(|s| s.newest).map(|b| self.bucket_start(b)))
    }

    /// Every series name known (on disk or recorded since open), sorted.
    pub fn series_names(&self) -> Result<Vec<String>, StoreError> {
        let inner = lock(&self.inner);
        let mut names: Vec<String> = inner.series.iter().map(|s| s.name.to_string()).collect();
        names.sort_unstable();
        Ok(names)
    }

    /// Observations ignored because they were NaN or infinite.
    pub fn dropped_non_finite(&self) -> u64 {
        self.non_finite.load(Ordering::Relaxed)
    }

    /// Observations dropped for another reason: a time before 1970, a chunk
    /// already expired by retention, or a failed load of an old chunk (logged).
    pub fn dropped_rejected(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }

    fn bucket_of(&self, t: SystemTime) -> Option<i64> {
        Some((t.duration_since(UNIX_EPOCH).ok()?.as_secs() / self.res_secs) as i64)
    }

    fn bucket_start(&self, b: i64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(b as u64 * self.res_secs)
    }

    fn load_chunk(&self, id: u32, c: i64) -> Result<MemChunk, StoreError> {
        let txn = self.handle()?.begin_read().ctx(&self.path, "begin read")?;
        let table = txn.open_table(CHUNKS).ctx(&self.path, "open chunk table")?;
        let bytes = table.get((id, c)).ctx(&self.path, "read chunk")?.map(|g| g.value().to_vec());
        Ok(match bytes {
            Some(b) => MemChunk::from_stored(c, &self.checked(id, c, b)?),
            None => MemChunk::empty(c),
        })
    }

    fn checked(&self, id: u32, c: i64, bytes: Vec<u8>) -> Result<Vec<u8>, StoreError> {
        if bytes.len() == chunk::CHUNK_BYTES {
            Ok(bytes)
        } else {
            Err(self.bad_chunk(id, c, bytes.len()))
        }
    }

    fn bad_chunk(&self, id: u32, c: i64, len: usize) -> StoreError {
        StoreError::Corrupt {
            path: self.path.clone(),
            detail: format!("chunk ({id}, {c}) has {len} bytes, expected {}", chunk::CHUNK_BYTES),
        }
    }

    fn before_epoch(&self, what: &'static str) -> StoreError {
        StoreError::BeforeEpoch { path: self.path.clone(), what }
    }

    fn reject(&self, series: &str, why: &'static str) {
        // Counted, and logged only at debug: a stuck collector would flood the log.
        self.rejected.fetch_add(1, Ordering::Relaxed);
        debug!(series, why, "history: observation dropped");
    }
}
