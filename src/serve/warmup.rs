//! A workload's start-up, as a value: it waits for its collector's first
//! poll (history loaded), then for its first forecasts on that history, at
//! most `forecast.first_fit_wait_secs`. Until then it has no answer, so a
//! replica that has just started never answers what one running longer
//! would not. The engine owns the clock and the inputs; this says what
//! follows from them.

use std::time::{Duration, SystemTime};

use super::outcome::Warmup;

/// Where a workload is in its start-up; `None` in a slot once it answers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Warming {
    History,
    FirstForecast { since: SystemTime },
}

/// What a tick changes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Step {
    /// Nothing yet.
    Wait,
    /// History is in: queue the first fits now.
    Loaded,
    /// The first forecast did not come within the bound: answer without it.
    TimedOut,
}

/// The next state from `state`, given whether the source has loaded its
/// history, whether forecasting is on, and the bound on the first forecast.
pub(super) fn advance(
    state: Option<Warming>,
    loaded: bool,
    forecasting: bool,
    bound: Duration,
    now: SystemTime,
) -> (Option<Warming>, Step) {
    match state {
        Some(Warming::History) if loaded => {
            ((forecasting && !bound.is_zero()).then_some(Warming::FirstForecast { since: now }), Step::Loaded)
        }
        Some(Warming::FirstForecast { since }) if now.duration_since(since).unwrap_or_default() >= bound => {
            (None, Step::TimedOut)
        }
        other => (other, Step::Wait),
    }
}

/// Why a warming workload has no answer, for its reason.
pub(super) fn reason(state: Warming, bound: Duration, now: SystemTime) -> Warmup {
    match state {
        Warming::History => Warmup::History,
        Warming::FirstForecast { since } => Warmup::FirstForecast {
            waited_secs: now.duration_since(since).unwrap_or_default().as_secs_f64(),
            bound_secs: bound.as_secs_f64(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_then_the_first_forecast_within_its_bound() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let bound = Duration::from_secs(120);
        let h = Some(Warming::History);
        assert_eq!(advance(h, false, true, bound, t0), (h, Step::Wait), "no history yet");
        let (s, step) = advance(h, true, true, bound, t0);
        assert_eq!((s, step), (Some(Warming::FirstForecast { since: t0 }), Step::Loaded));
        let later = t0 + Duration::from_secs(119);
        assert_eq!(advance(s, true, true, bound, later), (s, Step::Wait));
        assert_eq!(reason(s.unwrap(), bound, later), Warmup::FirstForecast { waited_secs: 119.0, bound_secs: 120.0 });
        assert_eq!(advance(s, true, true, bound, t0 + bound), (None, Step::TimedOut));
        // Without forecasts, or with no wait for them, history is all it waits for.
        assert_eq!(advance(h, true, false, bound, t0), (None, Step::Loaded));
        assert_eq!(advance(h, true, true, Duration::ZERO, t0), (None, Step::Loaded));
        assert_eq!(advance(None, true, true, bound, t0), (None, Step::Wait));
    }
}
