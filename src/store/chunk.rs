//! Chunks: a run of [`CHUNK_LEN`] consecutive buckets of one series, the unit
//! the store reads, writes and expires.
//!
//! On disk a chunk is `CHUNK_LEN` little-endian `f32`s, NaN for an empty
//! bucket (a gap, never a zero). In memory an open chunk keeps a running mean
//! and an observation count per bucket, so several observations in one bucket
//! average exactly however many flushes happen in between.

/// Buckets per chunk: 4 h at 1-minute resolution, 4 min at 1 s. Part of the
/// file format (recorded in the meta table).
pub const CHUNK_LEN: usize = 240;

/// Bytes of one chunk on disk.
pub(crate) const CHUNK_BYTES: usize = CHUNK_LEN * 4;

/// Chunk index of bucket `b`, and `b`'s offset in it.
pub(crate) fn split(b: i64) -> (i64, usize) {
    (b.div_euclid(CHUNK_LEN as i64), b.rem_euclid(CHUNK_LEN as i64) as usize)
}

/// First bucket of chunk `c`.
pub(crate) fn first_bucket(c: i64) -> i64 {
    c * CHUNK_LEN as i64
}

/// An all-gap chunk as stored.
pub(crate) fn empty_bytes() -> Vec<u8> {
    f32::NAN.to_le_bytes().repeat(CHUNK_LEN)
}

/// `f64` -> stored `f32`. Values beyond `f32` range saturate rather than
/// becoming infinities that would read back as neither a value nor a gap.
pub(crate) fn to_f32(v: f64) -> f32 {
    (v as f32).clamp(f32::MIN, f32::MAX)
}

/// Bucket `i` of a stored chunk (NaN = gap).
pub(crate) fn stored(bytes: &[u8], i: usize) -> f32 {
    f32::from_le_bytes(bytes[i * 4..i * 4 + 4].try_into().expect("4 bytes"))
}

/// Write bucket `i` of a stored chunk.
pub(crate) fn store(bytes: &mut [u8], i: usize, v: f64) {
    bytes[i * 4..i * 4 + 4].copy_from_slice(&to_f32(v).to_le_bytes());
}

/// Offset of the newest non-gap bucket in a stored chunk.
pub(crate) fn last_value(bytes: &[u8]) -> Option<usize> {
    (0..CHUNK_LEN).rev().find(|&i| !stored(bytes, i).is_nan())
}

/// Copy buckets `from..from + out.len()` of a stored chunk into `out`.
pub(crate) fn decode_into(bytes: &[u8], from: usize, out: &mut [f64]) {
    for (k, o) in out.iter_mut().enumerate() {
        *o = f64::from(stored(bytes, from + k));
    }
}

/// One chunk held in memory: the open chunk a series is recording into, or
/// one with changes not yet flushed.
#[derive(Debug, Clone)]
pub(crate) struct MemChunk {
    pub(crate) index: i64,
    mean: Box<[f64]>,
    count: Box<[u32]>,
    /// Bumped on every change; the chunk is clean when `flushed == generation`.
    pub(crate) generation: u64,
    /// The generation last made durable.
    pub(crate) flushed: u64,
}

impl MemChunk {
    /// A chunk with nothing in it, and nothing on disk to merge with.
    pub(crate) fn empty(index: i64) -> MemChunk {
        MemChunk {
            index,
            mean: vec![f64::NAN; CHUNK_LEN].into(),
            count: vec![0; CHUNK_LEN].into(),
            generation: 0,
            flushed: 0,
        }
    }

    /// A chunk loaded from disk, clean. A stored value counts as one
    /// observation (the store keeps means, not counts), so a late observation
    /// into a stored bucket weighs as much as everything recorded there before.
    pub(crate) fn from_stored(index: i64, bytes: &[u8]) -> MemChunk {
        let mut c = MemChunk::empty(index);
        for i in 0..CHUNK_LEN {
            let v = stored(bytes, i);
            if !v.is_nan() {
                c.mean[i] = f64::from(v);
                c.count[i] = 1;
            }
        }
        c
    }

    pub(crate) fn is_dirty(&self) -> bool {
        self.generation != self.flushed
    }

    /// Add one (finite) observation to bucket `i`.
    pub(crate) fn add(&mut self, i: usize, v: f64) {
        let n = self.count[i].saturating_add(1);
        self.mean[i] = if n == 1 { v } else { self.mean[i] + (v - self.mean[i]) / f64::from(n) };
        self.count[i] = n;
        self.generation += 1;
    }

    /// Set bucket `i` to `v`, dropping what it held.
    pub(crate) fn set(&mut self, i: usize, v: f64) {
        self.mean[i] = v;
        self.count[i] = 1;
        self.generation += 1;
    }

    /// Set bucket `i` to `v` only if it is empty (backfill). True if it was.
    pub(crate) fn fill(&mut self, i: usize, v: f64) -> bool {
        if self.count[i] != 0 {
            return false;
        }
        self.mean[i] = v;
        self.count[i] = 1;
        self.generation += 1;
        true
    }

    /// Bucket `i`'s value, NaN if empty.
    pub(crate) fn get(&self, i: usize) -> f64 {
        if self.count[i] == 0 {
            f64::NAN
        } else {
            self.mean[i]
        }
    }

    /// Offset of the newest non-empty bucket.
    pub(crate) fn last_value(&self) -> Option<usize> {
        (0..CHUNK_LEN).rev().find(|&i| self.count[i] != 0)
    }

    /// The chunk as stored. Runs under the store lock at flush, once per dirty chunk.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = vec![0; CHUNK_BYTES];
        for ((o, &m), &n) in out.chunks_exact_mut(4).zip(self.mean.iter()).zip(self.count.iter()) {
            let v = if n == 0 { f32::NAN } else { to_f32(m) };
            o.copy_from_slice(&v.to_le_bytes());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_is_floor_division() {
        assert_eq!(split(0), (0, 0));
        assert_eq!(split(239), (0, 239));
        assert_eq!(split(240), (1, 0));
        assert_eq!(split(-1), (-1, 239));
        assert_eq!(first_bucket(3), 720);
    }

    #[test]
    fn observations_average_and_gaps_stay_nan() {
        let mut c = MemChunk::empty(7);
        assert!(!c.is_dirty() && c.last_value().is_none());
        c.add(3, 1.0);
        c.add(3, 2.0);
        c.add(3, 6.0);
        assert_eq!(c.get(3), 3.0);
        assert!(c.get(2).is_nan());
        assert!(c.is_dirty());
        assert_eq!(c.last_value(), Some(3));
        let bytes = c.encode();
        assert_eq!(bytes.len(), CHUNK_BYTES);
        assert_eq!(stored(&bytes, 3), 3.0);
        assert!(stored(&bytes, 0).is_nan() && stored(&bytes, 239).is_nan());
        assert_eq!(last_value(&bytes), Some(3));
    }

    #[test]
    fn fill_only_touches_empty_buckets() {
        let mut c = MemChunk::empty(0);
        c.add(0, 5.0);
        assert!(!c.fill(0, 9.0));
        assert!(c.fill(1, 9.0));
        assert_eq!((c.get(0), c.get(1)), (5.0, 9.0));
    }

    #[test]
    fn stored_chunk_round_trips_and_counts_as_one_observation() {
        let mut bytes = empty_bytes();
        store(&mut bytes, 10, 4.0);
        let mut c = MemChunk::from_stored(2, &bytes);
        assert!(!c.is_dirty());
        assert_eq!(c.get(10), 4.0);
        assert!(c.get(11).is_nan());
        c.add(10, 8.0);
        assert_eq!(c.get(10), 6.0);
    }

    #[test]
    fn out_of_range_values_saturate() {
        assert_eq!(to_f32(1e300), f32::MAX);
        assert_eq!(to_f32(-1e300), f32::MIN);
        let mut out = [0.0; 2];
        let mut bytes = empty_bytes();
        store(&mut bytes, 1, 1e300);
        decode_into(&bytes, 0, &mut out);
        assert!(out[0].is_nan());
        assert_eq!(out[1], f64::from(f32::MAX));
    }
}
