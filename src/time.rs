//! Time formatting at the edges (logs, JSON). Decision code takes times as
//! arguments and never reads the clock.

use std::time::SystemTime;

use chrono::{DateTime, SecondsFormat, Utc};

/// Unix seconds of `t` (0 before the epoch).
pub(crate) fn unix(t: SystemTime) -> f64 {
    t.duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// RFC 3339 in UTC with millisecond precision, e.g. `2026-12-02T13:25:38.123Z`.
pub fn rfc3339(t: SystemTime) -> String {
    DateTime::<Utc>::from(t).to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Serialize Unix seconds as RFC 3339 (`#[serde(serialize_with = "crate::time::ser_unix")]`).
pub(crate) fn ser_unix<S: serde::Serializer>(t: &i64, s: S) -> Result<S::Ok, S::Error> {
    let at = if *t >= 0 {
        SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(*t as u64)
    } else {
        SystemTime::UNIX_EPOCH - std::time::Duration::from_secs(t.unsigned_abs())
    };
    s.serialize_str(&rfc3339(at))
}

/// `secs` clamped to [lo, hi] as a Duration; NaN gives `lo`. For config
/// values whose range is reported as a problem separately: turning a bad
/// value into a Duration must not panic before that report is made.
pub(crate) fn secs_within(secs: f64, lo: f64, hi: f64) -> std::time::Duration {
    std::time::Duration::from_secs_f64(if secs.is_nan() { lo } else { secs.clamp(lo, hi) })
}

/// Serialize a `SystemTime` as RFC 3339 (`#[serde(serialize_with = "crate::time::ser_system_time")]`).
pub(crate) fn ser_system_time<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&rfc3339(*t))
}
