//! Time formatting at the edges (logs, JSON). Decision code takes times as
//! arguments and never reads the clock.

use std::time::SystemTime;

use chrono::{DateTime, SecondsFormat, Utc};

/// RFC 3339 in UTC with millisecond precision, e.g. `2026-12-02T13:25:38.123Z`.
pub fn rfc3339(t: SystemTime) -> String {
    DateTime::<Utc>::from(t).to_rfc3339_opts(SecondsFormat::Millis, true)
}
