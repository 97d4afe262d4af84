//! One workload's decision for a tick, from its readings and forecast:
//! predictive when a forecast covers now, reactive otherwise, and the
//! forecast alone (bounded, never below the last answer) while the target
//! signal is stale. The engine calls these; they read no clock and no store.
//!
//! The scale-down hold is recomputed each time from the readings of the
//! window ([`Past`]), not remembered: replicas of Foresight that read the
//! same readings (a Prometheus source's grid points) hold the same, however
//! long each has run.

use std::time::SystemTime;

use super::{
    outcome::{NoBridge, NoDecision, Unusable},
    refit::ForecastView,
    state::WorkloadState,
};
pub(super) use crate::time::unix;
use crate::{
    config::SizingSettings,
    sizing::{
        predictive::{self, Stabiliser, Upper},
        reactive::{self, Decision},
        Policy,
    },
    sources::Signal,
    workload::Workload,
};

/// A reading within the scale-down window: when, the target signal, and
/// the queue and generation token rate read with it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Past {
    pub(super) at: f64,
    pub(super) target: f64,
    pub(super) queue: Option<f64>,
    pub(super) tokens: Option<f64>,
}

/// A stabiliser holding what each past reading asked for, by `need`.
fn held_over(past: &[Past], window: f64, need: impl Fn(&Past) -> Option<u32>) -> Stabiliser {
    let mut stab = Stabiliser::default();
    for p in past {
        if let Some(n) = need(p) {
            stab.apply(p.at, window, n);
        }
    }
    stab
}

/// The hold of the predictive rule: each past reading's live need, sized as `input` sizes now.
fn predictive_hold(input: &predictive::Input<'_>, past: &[Past], window: f64) -> Stabiliser {
    held_over(past, window, |p| {
        predictive::live_need(&predictive::Input {
            live: p.target,
            queue: p.queue,
            generation_tokens_per_sec: p.tokens,
            ..*input
        })
    })
}

/// How much of the profile's batch a replica has shown it runs within the
/// SLO (1 without learning, before evidence, and in shadow mode, where KEDA
/// gets the configured answer).
fn capacity_scale(w: &Workload, state: &WorkloadState) -> f64 {
    if w.shadow {
        return 1.0;
    }
    state.capacity.map_or(1.0, |l| l.per_replica / l.prior).clamp(1.0 / 16.0, 16.0)
}

/// Did the replicas meet their SLO, for learning capacity: `Some(false)`
/// when the queue wait missed or the p90 inter-token latency is past the
/// profile's `slo.itl_secs`; `Some(true)` only when the wait held and, if the
/// profile states an ITL target, the ITL was measured within it. A fleet
/// whose ITL is not read never teaches that it takes more than the profile:
/// vLLM admits up to `max_num_seqs` with no queue at all while every token
/// slows down, and a wait alone would learn that batch as capacity.
pub(super) fn slo_held(w: &Workload, wait_late: bool, itl_p90: Option<f64>) -> Option<bool> {
    let itl_target = w.profile.slo.as_ref().map(|s| s.itl_secs);
    match (wait_late, itl_target, itl_p90.filter(|v| v.is_finite())) {
        (true, _, _) => Some(false),
        (false, Some(target), Some(itl)) => Some(itl <= target),
        (false, Some(_), None) => None,
        (false, None, _) => Some(true),
    }
}

/// Signal units one replica handles: the configured target, scaled by what
/// was learned when the target is a load that grows with the batch (requests
/// or tokens); a share such as `kv_cache_usage`, or a latency, is not scaled.
pub(super) fn per_replica(w: &Workload, state: &WorkloadState) -> f64 {
    let scales = matches!(
        w.target.signal,
        Signal::Concurrency
            | Signal::Running
            | Signal::QueueDepth
            | Signal::RequestRate
            | Signal::PromptTokensRate
            | Signal::GenerationTokensRate
    );
    w.target.per_replica * if scales { capacity_scale(w, state) } else { 1.0 }
}

/// The reactive rule on the live target reading.
pub(super) fn reactive_decision(w: &Workload, state: &WorkloadState, live: f64) -> Result<Decision, NoDecision> {
    reactive::decide(reactive::Input {
        signal: live,
        per_replica: per_replica(w, state),
        min_replicas: w.min_replicas,
        max_replicas: w.max_replicas,
        activation_threshold: w.activation_threshold,
    })
    .ok_or(NoDecision::UnusableReading { signal: w.target.signal, value: live })
}

/// One workload's decision from its fresh target reading `live`: predictive
/// when configured and a forecast covers now, else reactive, saying why.
pub(super) fn decide(
    w: &Workload,
    state: &WorkloadState,
    live: f64,
    sizing: &SizingSettings,
    past: &[Past],
    headroom: f64,
    now: SystemTime,
) -> Result<Decision, NoDecision> {
    let reactive = || reactive_decision(w, state, live);
    if sizing.policy == Policy::Reactive {
        return reactive();
    }
    let window = sizing.scale_down_stabilization.as_secs_f64();
    let now_secs = unix(now);
    let why_not = match state.forecast.as_deref() {
        None => state.forecast_error.clone().map_or(Unusable::NotYet, Unusable::Refit),
        Some(f) => match forecast_from_now(f, sizing.quantile, now_secs) {
            Err(why) => why,
            Ok(values) => {
                let reading = |s: Signal| state.signals.get(&s).map(|r| r.value);
                let mut input = predictive_input(w, state, sizing, f, values);
                input.live = live;
                input.headroom = headroom;
                input.queue = reading(Signal::QueueDepth);
                input.generation_tokens_per_sec = reading(Signal::GenerationTokensRate);
                let mut stab = predictive_hold(&input, past, window);
                match predictive::decide(&input, &mut stab, now_secs, window, &w.profile.name) {
                    Some(o) => return Ok(o.into()),
                    None => Unusable::NotFinite,
                }
            }
        },
    };
    // Without a forecast: the reactive answer, still held by the stabiliser so
    // a forecast outage does not drop capacity in one step.
    let mut d = reactive()?;
    let mut stab = held_over(past, window, |p| reactive_decision(w, state, p.target).ok().map(|d| d.desired_replicas));
    let held = stab.apply(now_secs, window, d.desired_replicas);
    if held > d.desired_replicas {
        d.reason.push_str(&format!("; holding {held} (scale-down stabilisation {window:.0} s)"));
        d.desired_replicas = held;
    }
    d.reason = format!("{} (no forecast: {why_not})", d.reason);
    Ok(d)
}

/// With the target signal stale for `age_secs`: the last good forecast alone,
/// never below the last decision (blind data never scales a fleet down),
/// for at most `sizing.forecast_only` past the staleness limit. After that,
/// or without a forecast or a last decision, no answer: the scaler says
/// UNAVAILABLE and KEDA's `fallback` replicas apply.
pub(super) fn blind_decision(
    w: &Workload,
    state: &WorkloadState,
    age_secs: f64,
    sizing: &SizingSettings,
    past: &[Past],
    now: SystemTime,
) -> Result<Decision, NoBridge> {
    let bound = sizing.forecast_only.as_secs_f64();
    let blind_for = age_secs - w.stale_after.as_secs_f64();
    if sizing.policy != Policy::Predictive || bound <= 0.0 {
        return Err(NoBridge::Off);
    }
    if blind_for > bound {
        return Err(NoBridge::Expired { bound_secs: bound });
    }
    let last = state.decision.as_ref().ok_or(NoBridge::NoEarlierDecision)?;
    let f = state.forecast.as_deref().ok_or(NoBridge::NoForecast)?;
    let values = forecast_from_now(f, sizing.quantile, unix(now))?;
    // No live reading, queue or token rate: the forecast alone.
    let input = predictive_input(w, state, sizing, f, values);
    let window = sizing.scale_down_stabilization.as_secs_f64();
    let mut stab = predictive_hold(&input, past, window);
    let o = predictive::decide(&input, &mut stab, unix(now), window, &w.profile.name).ok_or(NoBridge::NotFinite)?;
    let mut d: Decision = o.into();
    if last.desired_replicas > d.desired_replicas {
        d.desired_replicas = last.desired_replicas;
        d.active |= last.active;
    }
    d.reason = format!(
        "forecast only: the target signal is {age_secs:.0} s old, so no live reading; {}; never below the last decision {} ({:.0} s of {bound:.0} s left before KEDA's fallback)",
        d.reason,
        last.desired_replicas,
        (bound - blind_for).max(0.0)
    );
    Ok(d)
}

/// Sizing input from the workload, its profile and forecast values; no live readings yet.
pub(super) fn predictive_input<'a>(
    w: &Workload,
    state: &WorkloadState,
    sizing: &SizingSettings,
    f: &ForecastView,
    values: &'a [f64],
) -> predictive::Input<'a> {
    predictive::Input {
        signal: w.target.signal,
        live: 0.0,
        queue: None,
        generation_tokens_per_sec: None,
        per_replica: per_replica(w, state),
        slots_per_replica: w.profile.concurrency_per_replica * capacity_scale(w, state),
        wait_budget_secs: w.profile.wait_budget_secs(),
        queueing: predictive::Queueing::default(),
        headroom: 1.0,
        tokens_per_sec_per_replica: w.profile.generation_tokens_per_sec.map(|t| t * capacity_scale(w, state)),
        forecast: Upper { quantile: sizing.quantile, values, step_secs: f.step_secs as f64 },
        lookahead_secs: w.profile.cold_start_secs.total_secs(),
        min_replicas: w.min_replicas,
        max_replicas: w.max_replicas,
        activation_threshold: w.activation_threshold,
    }
}

/// The forecast's `quantile` values from the step that contains `now` on.
pub(super) fn forecast_from_now(f: &ForecastView, quantile: f64, now_secs: f64) -> Result<&[f64], Unusable> {
    let q = f.quantiles.iter().find(|q| (q.quantile - quantile).abs() < 1e-9).ok_or(Unusable::NoQuantile(quantile))?;
    from_now(f, &q.values, now_secs).ok_or_else(|| Unusable::RunOut { fitted_at: f.fitted_at.clone() })
}

/// `values`, one of `f`'s series, from the step that contains `now_secs` on;
/// `None` once now is past its last step.
pub(super) fn from_now<'a>(f: &ForecastView, values: &'a [f64], now_secs: f64) -> Option<&'a [f64]> {
    let k0 = ((now_secs - f.start_unix as f64) / f.step_secs.max(1) as f64).floor().max(0.0) as usize;
    values.get(k0..).filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{config::Settings, serve::state::WorkloadState};

    #[test]
    fn the_hold_is_what_the_readings_of_the_window_asked_for() {
        let yaml = "sizing: {policy: predictive}\nworkloads:\n  - name: w\n    model: llama-3.1-8b-h100\n    max_replicas: 20\n    target: {signal: concurrency}\n    source: {scrape: {targets: ['http://127.0.0.1:9/metrics']}}\n";
        let settings = Settings::from_yaml(yaml, "t", std::path::Path::new(".")).unwrap();
        let w = &settings.workloads[0];
        let state = WorkloadState::new(w);
        let now = 1_800_000_000.0;
        let at = |secs: f64| std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(secs);
        let past = |ago: f64, v: f64| Past { at: now - ago, target: v, queue: None, tokens: None };
        // No forecast yet: the reactive answer, held at the highest the window's readings asked for (32 per replica).
        let readings = [past(400.0, 600.0), past(200.0, 300.0), past(100.0, 40.0), past(0.0, 40.0)];
        let d = decide(w, &state, 40.0, &settings.sizing, &readings, 1.0, at(now)).unwrap();
        assert_eq!(d.desired_replicas, 10, "300 within the 300 s window, 600 before it: {}", d.reason);
        // The same readings give the same answer whatever else this process saw before.
        let again = decide(w, &state, 40.0, &settings.sizing, &readings, 1.0, at(now)).unwrap();
        assert_eq!(again.desired_replicas, 10);
        let d = decide(w, &state, 40.0, &settings.sizing, &readings[2..], 1.0, at(now)).unwrap();
        assert_eq!(d.desired_replicas, 2, "{}", d.reason);
    }
}
