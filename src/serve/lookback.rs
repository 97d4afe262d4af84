//! What decisions look back over, read from the store rather than
//! remembered: the scale-down hold's window of readings ([`past_readings`])
//! and the headroom multiplier ([`Replayed`]). Replicas of Foresight that
//! read one Prometheus so hold and multiply alike whenever each started.
//!
//! The headroom at `now` replays the queue-wait p99 from an anchor on a fixed
//! grid ([`ANCHOR_EVERY`], looking back [`LOOK_BACK`]): stored minute buckets
//! up to the last one the source will not revise, then the recent readings
//! after it. Eighteen hours are nine of the default two-hour half-lives, so
//! moving the anchor every six hours changes the factor by under 1%.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{
    decide::{unix as secs, Past},
    refit::grid,
};
use crate::{
    sizing::headroom::{Headroom, HeadroomConfig},
    sources::Signal,
    store::Store,
    workload::{series, Workload},
};

/// How often the replay's start moves.
const ANCHOR_EVERY: Duration = Duration::from_secs(6 * 3600);
/// How far before its grid point the replay starts.
const LOOK_BACK: Duration = Duration::from_secs(18 * 3600);

/// The readings of `w`'s target within `window` before `now`, each with the
/// queue and token rate read at the same instant: what the scale-down hold
/// looks back over. They are the store's recent values, which a Prometheus
/// source reads on the wall-clock grid, so every replica sees the same ones.
pub(super) fn past_readings(store: &Store, w: &Workload, now: SystemTime, window: std::time::Duration) -> Vec<Past> {
    let key = w.key();
    let since = now.checked_sub(window).unwrap_or(UNIX_EPOCH);
    let read = |s: Signal| store.recent(&series(&key, s), since);
    let (queue, tokens) = (read(Signal::QueueDepth), read(Signal::GenerationTokensRate));
    let at = |v: &[(f64, SystemTime)], t: SystemTime| v.iter().find(|(_, at)| *at == t).map(|(x, _)| *x);
    read(w.target.signal)
        .into_iter()
        .filter(|(_, t)| *t <= now)
        .map(|(target, t)| Past { at: secs(t), target, queue: at(&queue, t), tokens: at(&tokens, t) })
        .collect()
}

/// One workload's replay: its anchor, the first bucket not yet taken in, and the factor so far.
#[derive(Debug, Clone, Default)]
pub(super) struct Replayed {
    base: Option<(SystemTime, i64, Headroom)>,
}

impl Replayed {
    /// The factor at `now`; `late(p99)` says whether a reading missed the
    /// wait budget, and `settle_secs` is how long the source may revise a bucket.
    pub(super) fn factor(
        &mut self,
        store: &Store,
        w: &Workload,
        now: SystemTime,
        settle_secs: f64,
        late: impl Fn(f64) -> bool,
    ) -> f64 {
        let name = series(&w.key(), Signal::QueueWaitP99);
        let res = store.resolution().as_secs_f64();
        let anchor = grid(now, ANCHOR_EVERY).checked_sub(LOOK_BACK).unwrap_or(UNIX_EPOCH);
        let observe = |h: &mut Headroom, at: f64, p99: f64| {
            if p99.is_finite() {
                h.observe(at, if late(p99) { 0.0 } else { 1.0 });
            }
        };
        if self.base.as_ref().is_none_or(|(a, ..)| *a != anchor) {
            self.base = Some((anchor, (secs(anchor) / res).floor() as i64, Headroom::new(HeadroomConfig::default())));
        }
        let Some((_, next, base)) = self.base.as_mut() else { return 1.0 };
        // Buckets that ended at least `settle_secs` ago are final.
        let settled = ((secs(now) - settle_secs) / res).floor() as i64;
        if settled > *next {
            let at = |b: i64| UNIX_EPOCH + Duration::from_secs_f64(b as f64 * res);
            if let Ok(h) = store.range(&name, at(*next), at(settled)) {
                for (k, v) in h.values.iter().enumerate() {
                    // A bucket's value is the reading at its end.
                    observe(base, (*next + k as i64 + 1) as f64 * res, *v);
                }
                *next = settled;
            }
        }
        let mut h = base.clone();
        let since = UNIX_EPOCH + Duration::from_secs_f64(*next as f64 * res);
        for (v, t) in store.recent(&name, since).into_iter().filter(|(_, t)| *t > since && *t <= now) {
            observe(&mut h, secs(t), v);
        }
        h.factor()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;

    #[test]
    fn a_replay_started_late_lands_on_the_factor_of_one_that_ran_all_along() {
        let yaml = "workloads:\n  - name: w\n    model: llama-3.1-8b-h100\n    target: {signal: concurrency}\n    source: {scrape: {targets: ['http://127.0.0.1:9/metrics']}}\n";
        let settings = Settings::from_yaml(yaml, "t", std::path::Path::new(".")).unwrap();
        let w = &settings.workloads[0];
        let store = Store::open(Default::default()).unwrap();
        // Two days of minutes: waits within budget, but missed through two late stretches.
        let t0 = 1_800_000_000.0 - 2.0 * 86_400.0;
        let p99: Vec<f64> = (0..2 * 1440)
            .map(|m| if (2000..2030).contains(&m) || (2800..2810).contains(&m) { 2.0 } else { 0.1 })
            .collect();
        let at = |secs: f64| UNIX_EPOCH + Duration::from_secs_f64(secs);
        store.backfill(&series(&w.key(), Signal::QueueWaitP99), at(t0), &p99).unwrap();
        let end = t0 + 2.0 * 86_400.0 - 60.0;
        let late = |v: f64| v > 0.5;
        // One replica ticks every 7 s through the last eight hours (across an anchor move); another starts at the end.
        let mut running = Replayed::default();
        let mut t = end - 8.0 * 3600.0;
        while t < end {
            running.factor(&store, w, at(t), 0.0, late);
            t += 7.0;
        }
        let (a, b) =
            (running.factor(&store, w, at(end), 0.0, late), Replayed::default().factor(&store, w, at(end), 0.0, late));
        assert_eq!(a, b);
        assert!(a > 1.5 && a <= 3.0, "the recent misses raised it: {a}");
    }
}
