//! Why the control loop has no answer, as values rather than sentences.
//!
//! A tick can end without a decision ([`NoDecision`]: the scaler answers
//! UNAVAILABLE and KEDA's `fallback` applies), and a decision can be reactive
//! because the forecast cannot be used ([`Unusable`], which wraps a failed
//! refit's [`RefitError`]). The API, the gRPC status and the logs show each
//! through `Display`; the engine compares them by kind, so a reason whose only
//! change is a growing age is logged once, not every tick.

use crate::{
    forecast::ForecastError,
    sources::{health::SourceCause, Signal},
};

/// Why a workload has no decision this tick.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NoDecision {
    /// The target signal has never been read (since start or reload).
    #[error("no `{signal}` reading yet{}", cause_suffix(.cause.as_ref()))]
    NoReading { signal: Signal, cause: Option<SourceCause> },
    /// The target signal went stale and the forecast cannot bridge the gap.
    #[error(
        "stale: the last `{signal}` reading is {age_secs:.0} s old (stale_after_secs {stale_after_secs}){}; {bridge}",
        cause_suffix(.cause.as_ref())
    )]
    Stale { signal: Signal, age_secs: f64, stale_after_secs: f64, cause: Option<SourceCause>, bridge: NoBridge },
    /// The reading is NaN, infinite or negative.
    #[error("unusable `{signal}` reading {value}")]
    UnusableReading { signal: Signal, value: f64 },
    /// Shadow mode tells KEDA only reactive answers, and there is none on stale data.
    #[error("stale target signal; in shadow mode KEDA gets only reactive answers, so none")]
    ShadowStale,
    /// Just started: no answer until it is the one a replica that started earlier would give.
    #[error("warming up: {0}")]
    WarmingUp(Warmup),
}

/// What a workload waits for after start before it answers.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum Warmup {
    /// The source's first poll: the history backfill and the current reading.
    #[error("waiting for the source's first poll (history backfill and current reading)")]
    History,
    /// The first forecast fitted on that history.
    #[error("waiting for the first forecast on the loaded history ({waited_secs:.0} s of at most {bound_secs:.0} s, forecast.first_fit_wait_secs)")]
    FirstForecast { waited_secs: f64, bound_secs: f64 },
}

impl NoDecision {
    /// Same variant (and, when stale, same reason the bridge failed), whatever the ages and counts inside.
    pub(crate) fn same_kind(&self, other: &NoDecision) -> bool {
        match (self, other) {
            (NoDecision::Stale { bridge: a, .. }, NoDecision::Stale { bridge: b, .. }) => {
                std::mem::discriminant(a) == std::mem::discriminant(b)
            }
            (NoDecision::WarmingUp(a), NoDecision::WarmingUp(b)) => {
                std::mem::discriminant(a) == std::mem::discriminant(b)
            }
            _ => std::mem::discriminant(self) == std::mem::discriminant(other),
        }
    }
}

fn cause_suffix(cause: Option<&SourceCause>) -> String {
    cause.map(|c| format!(": {c}")).unwrap_or_default()
}

/// Why the last good forecast cannot stand in for a stale target signal.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NoBridge {
    #[error("no forecast-only bridge (sizing.forecast_only_secs 0 or reactive policy)")]
    Off,
    #[error("past the {bound_secs:.0} s a forecast may stand in for it (sizing.forecast_only_secs)")]
    Expired { bound_secs: f64 },
    #[error("no earlier decision to hold")]
    NoEarlierDecision,
    #[error("no forecast to bridge with")]
    NoForecast,
    #[error("the forecast is unusable")]
    NotFinite,
    #[error(transparent)]
    Unusable(#[from] Unusable),
}

/// Why the forecast cannot size this tick (the decision falls back to the reactive rule).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Unusable {
    /// The first refit has not finished.
    #[error("no forecast yet")]
    NotYet,
    #[error(transparent)]
    Refit(#[from] RefitError),
    /// `sizing.quantile` is not among `forecast.quantiles`.
    #[error("the forecast has no p{:.0}", .0 * 100.0)]
    NoQuantile(f64),
    /// Now is past the forecast's last step (refits have stopped keeping up).
    #[error("the forecast fitted at {fitted_at} has run out")]
    RunOut { fitted_at: String },
    #[error("the forecast or a reading is unusable (NaN or negative)")]
    NotFinite,
}

/// Why a refit gave no forecast.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RefitError {
    /// The store could not be read (its error, rendered: store errors hold I/O handles).
    #[error("reading history: {0}")]
    History(String),
    #[error("history starts before 1970")]
    BeforeEpoch,
    /// The signal stopped reporting: its last value is not carried forward.
    #[error("no `{signal}` recorded in the last {secs} s: not forecasting from stale history")]
    Silent { signal: Signal, secs: i64 },
    /// Too little history, a bad setting, or a model that failed.
    #[error(transparent)]
    Forecast(#[from] ForecastError),
    #[error("the forecaster panicked on this history (a bug; please report it)")]
    Panicked,
}

/// Serialises any reason as its sentence (the API's `error` and `forecast_error` fields).
pub(crate) fn ser_display<T: std::fmt::Display, S: serde::Serializer>(v: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.collect_str(v),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn reasons_read_as_the_sentences_users_and_tests_know() {
        let stale = NoDecision::Stale {
            signal: Signal::Concurrency,
            age_secs: 95.4,
            stale_after_secs: 30.0,
            cause: Some(SourceCause::Targets {
                answered: 1,
                targets: 2,
                failures: BTreeMap::from([("timeout".to_string(), 1)]),
                asleep: None,
            }),
            bridge: NoBridge::Unusable(Unusable::NoQuantile(0.9)),
        };
        assert_eq!(
            stale.to_string(),
            "stale: the last `concurrency` reading is 95 s old (stale_after_secs 30): 1 of 2 scrape targets \
             answered (1 timeout); the forecast has no p90"
        );
        let none = NoDecision::NoReading { signal: Signal::Concurrency, cause: None };
        assert_eq!(none.to_string(), "no `concurrency` reading yet");
        let invalid = NoDecision::NoReading {
            signal: Signal::Concurrency,
            cause: Some(SourceCause::Invalid { why: crate::sources::Invalid::Negative }),
        };
        assert_eq!(
            invalid.to_string(),
            "no `concurrency` reading yet: the source's latest value is negative, which is not a reading"
        );
        let warming = NoDecision::WarmingUp(Warmup::FirstForecast { waited_secs: 3.2, bound_secs: 120.0 });
        assert_eq!(
            warming.to_string(),
            "warming up: waiting for the first forecast on the loaded history (3 s of at most 120 s, \
             forecast.first_fit_wait_secs)"
        );
        let silent = Unusable::from(RefitError::Silent { signal: Signal::QueueDepth, secs: 120 });
        assert_eq!(
            silent.to_string(),
            "no `queue_depth` recorded in the last 120 s: not forecasting from stale history"
        );
    }

    #[test]
    fn reasons_of_one_kind_compare_equal_whatever_their_ages() {
        let stale = |age_secs, bridge| NoDecision::Stale {
            signal: Signal::Concurrency,
            age_secs,
            stale_after_secs: 30.0,
            cause: None,
            bridge,
        };
        assert!(stale(40.0, NoBridge::NoForecast).same_kind(&stale(95.0, NoBridge::NoForecast)));
        assert!(!stale(40.0, NoBridge::NoForecast).same_kind(&stale(40.0, NoBridge::Expired { bound_secs: 600.0 })));
        assert!(!stale(40.0, NoBridge::Off).same_kind(&NoDecision::ShadowStale));
    }
}

/// Why a role has no decision this tick: the scaler answers UNAVAILABLE.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RoleNoDecision {
    #[error("no `{0}` reading yet")]
    NoReading(Signal),
    #[error("stale: the last `{signal}` reading is {age_secs:.0} s old (stale_after_secs {stale_after_secs})")]
    Stale { signal: Signal, age_secs: f64, stale_after_secs: f64 },
    #[error("requests are arriving but no `{0}` has been measured yet")]
    NoLength(Signal),
    #[error("the profile gives no capacity for this role")]
    NoCapacity,
    #[error(transparent)]
    Sizing(#[from] crate::sizing::roles::RoleError),
}
