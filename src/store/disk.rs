//! The store's side on disk: opening (and checking) the redb file, loading
//! what it holds at start-up, and flushing: dirty chunks out in one durable
//! transaction, retention applied, the file reopened after an I/O error.

use super::*;

impl Store {
    /// Make every recorded bucket durable (one redb write transaction, durable
    /// commit), then, at most once an hour, delete chunks older than
    /// retention. Safe to call concurrently with `record()`.
    pub fn flush(&self) -> Result<FlushStats, StoreError> {
        self.flush_at(SystemTime::now())
    }

    /// The open database, or an error while it is closed after an I/O error.
    pub(super) fn handle(&self) -> Result<Arc<Database>, StoreError> {
        self.db.load_full().ok_or_else(|| StoreError::Reopening { path: self.path.clone() })
    }

    /// After an I/O error redb refuses every later operation until the file is
    /// reopened (a full disk, a read-only remount): close it and open it again,
    /// which also repairs it if the failed commit left it needing that. What was
    /// not committed is still in memory and goes out with the next flush.
    fn reopen(&self) -> Result<(), StoreError> {
        self.db.store(None);
        let db = open_db(&self.cfg, &self.path)?;
        init_or_check_meta(&db, &self.path, self.res_secs)?;
        self.db.store(Some(Arc::new(db)));
        info!(path = %self.path.display(), "history store reopened after an I/O error");
        Ok(())
    }

    /// [`flush`](Self::flush) with `now` as the clock retention is measured
    /// against (tests, simulated time).
    pub fn flush_at(&self, now: SystemTime) -> Result<FlushStats, StoreError> {
        let _one_at_a_time = lock(&self.flushing);
        if self.db.load().is_none() {
            self.reopen()?;
        }
        let flushed = self.flush_locked(now);
        if let Err(StoreError::Db { source, .. }) = &flushed {
            // An in-memory store has no file to reopen (and reopening would empty it).
            if self.cfg.path.is_some() && matches!(**source, redb::Error::PreviousIo | redb::Error::Io(_)) {
                // Reopen now, so the next flush can succeed once the disk can take it.
                if let Err(e) = self.reopen() {
                    warn!(error = %e, "reopening the history store failed; retried at the next flush");
                }
            }
        }
        flushed
    }

    fn flush_locked(&self, now: SystemTime) -> Result<FlushStats, StoreError> {
        let (names, dirty, prune) = {
            let mut inner = lock(&self.inner);
            let prune = self.prune_due(&inner, now);
            if let Some(cut) = prune {
                inner.expired_before = inner.expired_before.max(cut);
                for s in &mut inner.series {
                    s.chunks.retain(|m| m.index >= cut);
                    if s.newest.is_some_and(|b| chunk::split(b).0 < cut) {
                        s.newest = None;
                    }
                }
            }
            let mut names = Vec::new();
            let mut dirty = Vec::new();
            for (si, s) in inner.series.iter().enumerate() {
                if !s.persisted {
                    names.push((si, s.name.clone(), s.id));
                }
                for m in s.chunks.iter().filter(|m| m.is_dirty()) {
                    dirty.push(Dirty {
                        series: si,
                        id: s.id,
                        index: m.index,
                        generation: m.generation,
                        newest: m.last_value().map(|i| chunk::first_bucket(m.index) + i as i64),
                        bytes: m.encode(),
                    });
                }
            }
            // Every id, so that retention also reaches series created since the last prune.
            let prune = prune.map(|cut| (cut, inner.series.iter().map(|s| s.id).collect::<Vec<_>>()));
            if names.is_empty() && dirty.is_empty() && prune.is_none() {
                return Ok(FlushStats {
                    chunks: 0,
                    pruned: 0,
                    through: inner.durable_through.map(|b| self.bucket_start(b)),
                });
            }
            (names, dirty, prune)
        };

        // The write and its fsync, outside the state lock.
        let txn = self.handle()?.begin_write().ctx(&self.path, "begin flush")?;
        let mut pruned = 0;
        {
            let mut table = txn.open_table(NAMES).ctx(&self.path, "open series table")?;
            for (_, name, id) in &names {
                table.insert(&**name, *id).ctx(&self.path, "insert series")?;
            }
            let mut table = txn.open_table(CHUNKS).ctx(&self.path, "open chunk table")?;
            for d in &dirty {
                table.insert((d.id, d.index), d.bytes.as_slice()).ctx(&self.path, "write chunk")?;
            }
            if let Some((cut, ids)) = &prune {
                for &id in ids {
                    for e in table.extract_from_if((id, i64::MIN)..(id, *cut), |_, _| true).ctx(&self.path, "prune")? {
                        e.ctx(&self.path, "prune")?;
                        pruned += 1;
                    }
                }
            }
        }
        txn.commit().ctx(&self.path, "commit flush")?;

        let mut inner = lock(&self.inner);
        for (si, ..) in &names {
            inner.series[*si].persisted = true;
        }
        for d in &dirty {
            let s = &mut inner.series[d.series];
            if let Ok(pos) = s.chunk_pos(d.index) {
                let m = &mut s.chunks[pos];
                m.flushed = m.flushed.max(d.generation);
            }
            s.disk_max = s.disk_max.max(Some(d.index));
            inner.durable_through = inner.durable_through.max(d.newest);
        }
        if prune.is_some() {
            inner.last_prune = Some(now);
            debug!(path = %self.path.display(), pruned, "history: retention applied");
        }
        // Keep each series' open (newest) chunk and anything changed since the snapshot.
        for s in &mut inner.series {
            let open = s.chunks.last().map(|m| m.index);
            s.chunks.retain(|m| m.is_dirty() || Some(m.index) == open);
        }
        Ok(FlushStats { chunks: dirty.len(), pruned, through: inner.durable_through.map(|b| self.bucket_start(b)) })
    }

    /// The chunk index below which retention deletes, if a prune is due.
    fn prune_due(&self, inner: &Inner, now: SystemTime) -> Option<i64> {
        let due = inner.last_prune.is_none_or(|t| now.duration_since(t).map_or(true, |d| d >= PRUNE_EVERY));
        let cutoff = self.bucket_of(now.checked_sub(self.retention)?)?;
        // Only chunks that end at or before the cutoff bucket go.
        due.then_some(chunk::split(cutoff).0)
    }
}

/// Open or create the redb database with the configured cache.
pub(super) fn open_db(cfg: &StoreConfig, path: &Path) -> Result<Database, StoreError> {
    let mut builder = Builder::new();
    builder.set_cache_size(cfg.cache_bytes);
    let Some(file) = &cfg.path else {
        return builder
            .create_with_backend(InMemoryBackend::new())
            .map_err(|source| StoreError::Open { path: path.to_owned(), source: Box::new(source) });
    };
    // Some of redb's checks on what it reads are debug assertions; a damaged
    // file must be an error, not a crash of the process.
    let opened = panic::catch_unwind(AssertUnwindSafe(|| builder.create(file)));
    let corrupt = |detail: String| StoreError::Corrupt { path: path.to_owned(), detail };
    match opened {
        Ok(Ok(db)) => Ok(db),
        Ok(Err(DatabaseError::DatabaseAlreadyOpen)) => Err(StoreError::Locked { path: path.to_owned() }),
        Ok(Err(DatabaseError::Storage(StorageError::Corrupted(detail)))) => Err(corrupt(detail)),
        Ok(Err(DatabaseError::Storage(StorageError::Io(e)))) if e.kind() == std::io::ErrorKind::InvalidData => {
            Err(corrupt(e.to_string()))
        }
        Ok(Err(DatabaseError::UpgradeRequired(v))) => {
            Err(StoreError::Format { path: path.to_owned(), detail: format!("redb file format {v} needs an upgrade") })
        }
        Ok(Err(source)) => Err(StoreError::Open { path: path.to_owned(), source: Box::new(source) }),
        Err(p) => {
            let msg = p.downcast_ref::<String>().map(String::as_str).or(p.downcast_ref::<&str>().copied());
            Err(corrupt(format!("redb failed reading it: {}", msg.unwrap_or("panic"))))
        }
    }
}

/// Write the meta table of a new store, or check an existing one's.
pub(super) fn init_or_check_meta(db: &Database, path: &Path, res_secs: u64) -> Result<(), StoreError> {
    let format = |detail: String| StoreError::Format { path: path.to_owned(), detail };
    let txn = db.begin_read().ctx(path, "begin read")?;
    match txn.open_table(META) {
        Ok(meta) => {
            let get = |key: &str| meta.get(key).map(|g| g.map(|v| v.value())).ctx(path, "read meta");
            match get("format")? {
                Some(FORMAT_VERSION) => {}
                found => return Err(format(format!("format version {found:?}, this build reads {FORMAT_VERSION}"))),
            }
            match get("chunk_len")? {
                Some(n) if n == CHUNK_LEN as u64 => {}
                found => return Err(format(format!("chunk length {found:?}, this build uses {CHUNK_LEN}"))),
            }
            match get("resolution_secs")? {
                Some(r) if r == res_secs => Ok(()),
                Some(r) => Err(StoreError::ResolutionMismatch {
                    path: path.to_owned(),
                    stored: Duration::from_secs(r),
                    configured: Duration::from_secs(res_secs),
                }),
                None => {
                    Err(StoreError::Corrupt { path: path.to_owned(), detail: "meta table has no resolution".into() })
                }
            }
        }
        Err(TableError::TableDoesNotExist(_)) => {
            if txn.list_tables().ctx(path, "list tables")?.next().is_some() {
                return Err(StoreError::Corrupt {
                    path: path.to_owned(),
                    detail: "a redb database, but not a history store (no meta table)".into(),
                });
            }
            drop(txn);
            let txn = db.begin_write().ctx(path, "begin init")?;
            {
                let mut meta = txn.open_table(META).ctx(path, "create meta table")?;
                for (k, v) in
                    [("format", FORMAT_VERSION), ("chunk_len", CHUNK_LEN as u64), ("resolution_secs", res_secs)]
                {
                    meta.insert(k, v).ctx(path, "write meta")?;
                }
                txn.open_table(NAMES).ctx(path, "create series table")?;
                txn.open_table(CHUNKS).ctx(path, "create chunk table")?;
            }
            txn.commit().ctx(path, "commit init")
        }
        Err(e) => Err(StoreError::db(path, "open meta table", e)),
    }
}

/// The series on disk, each with its newest chunk and bucket.
pub(super) fn load_series(db: &Database, path: &Path) -> Result<Inner, StoreError> {
    let txn = db.begin_read().ctx(path, "begin read")?;
    let names = txn.open_table(NAMES).ctx(path, "open series table")?;
    let chunks = txn.open_table(CHUNKS).ctx(path, "open chunk table")?;
    let mut inner = Inner {
        by_name: HashMap::new(),
        series: Vec::new(),
        next_id: 0,
        expired_before: i64::MIN,
        last_prune: None,
        durable_through: None,
        recent_keep: std::time::Duration::ZERO,
    };
    for entry in names.iter().ctx(path, "read series")? {
        let (name, id) = entry.ctx(path, "read series")?;
        let (name, id): (Arc<str>, u32) = (name.value().into(), id.value());
        let next = id
            .checked_add(1)
            .ok_or_else(|| StoreError::Corrupt { path: path.to_owned(), detail: format!("series id {id}") })?;
        inner.next_id = inner.next_id.max(next);
        let mut s = SeriesState::new(id, name.clone(), true);
        // Newest chunk first; an all-gap chunk is never written, but tolerate one.
        for entry in chunks.range((id, i64::MIN)..=(id, i64::MAX)).ctx(path, "read chunks")?.rev() {
            let (k, v) = entry.ctx(path, "read chunk")?;
            let c = k.value().1;
            s.disk_max = s.disk_max.max(Some(c));
            if v.value().len() != chunk::CHUNK_BYTES {
                let detail = format!("chunk ({id}, {c}) has {} bytes", v.value().len());
                return Err(StoreError::Corrupt { path: path.to_owned(), detail });
            }
            if let Some(i) = chunk::last_value(v.value()) {
                s.newest = Some(chunk::first_bucket(c) + i as i64);
                break;
            }
        }
        inner.durable_through = inner.durable_through.max(s.newest);
        inner.by_name.insert(name, inner.series.len());
        inner.series.push(s);
    }
    Ok(inner)
}
