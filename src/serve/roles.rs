//! Each tick, the decisions of a workload's prefill and decode roles: live
//! demand from the latest readings, forecast demand from the parts' refits,
//! then [`crate::sizing::roles`].

use std::{sync::Arc, time::SystemTime};

use tracing::{info, warn};

use super::{outcome::RoleNoDecision, refit::ForecastView, state::WorkloadState};
use crate::{
    config::SizingSettings,
    sizing::{
        predictive::Stabiliser,
        roles::{self, PartsForecast, RoleDecision, RoleInput, TokenDemand},
        Policy,
    },
    sources::Signal,
    workload::{Role, Workload},
};

/// Decide every role of `w` into `state.roles`; `stabs` holds one stabiliser per role.
pub(crate) fn decide_all(
    w: &Workload,
    state: &mut WorkloadState,
    stabs: &mut [Stabiliser],
    sizing: &SizingSettings,
    now: SystemTime,
) {
    let now_secs = now.duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
    let window = sizing.scale_down_stabilization.as_secs_f64();
    for (i, (role, stab)) in w.roles.iter().zip(stabs.iter_mut()).enumerate() {
        let decided = decide_one(w, role, state, stab, sizing, now_secs, window);
        let rs = &mut state.roles[i];
        match decided {
            Ok(d) => {
                if rs.decision.as_ref().map(|o| (o.desired_replicas, o.active)) != Some((d.desired_replicas, d.active))
                {
                    info!(workload = %w.key(), role = %role.kind, desired = d.desired_replicas, reason = %d.reason, "role decision");
                }
                rs.decision = Some(d);
                rs.error = None;
            }
            Err(why) => {
                if rs.error.as_ref().is_none_or(|e| std::mem::discriminant(e) != std::mem::discriminant(&why)) {
                    warn!(workload = %w.key(), role = %role.kind, reason = %why, "no role decision; the scaler answers UNAVAILABLE");
                }
                rs.decision = None;
                rs.error = Some(why);
            }
        }
    }
}

fn decide_one(
    w: &Workload,
    role: &Role,
    state: &WorkloadState,
    stab: &mut Stabiliser,
    sizing: &SizingSettings,
    now_secs: f64,
    window: f64,
) -> Result<RoleDecision, RoleNoDecision> {
    let stale_after = w.stale_after.as_secs_f64();
    let rate = state.signals.get(&Signal::RequestRate).ok_or(RoleNoDecision::NoReading(Signal::RequestRate))?;
    if rate.age_secs > stale_after {
        return Err(RoleNoDecision::Stale {
            signal: Signal::RequestRate,
            age_secs: rate.age_secs,
            stale_after_secs: stale_after,
        });
    }
    let predictive = sizing.policy == Policy::Predictive && !w.shadow;
    let forecasts = |s: Signal, quantile: f64| -> Option<&[f64]> {
        let f: &Arc<ForecastView> = state.demand_forecasts.get(&s)?;
        quantile_from_now(f, quantile, now_secs)
    };
    // A length is a mean over the requests finished since the last poll: none
    // finished, no reading. The forecast's median stands in, then zero if
    // nothing is arriving either.
    let fresh =
        |s: Signal| state.signals.get(&s).filter(|r| r.age_secs <= stale_after && r.value.is_finite()).map(|r| r.value);
    let length = |s: Signal| -> Result<f64, RoleNoDecision> {
        if let Some(v) = fresh(s) {
            return Ok(v);
        }
        if let Some(v) = forecasts(s, 0.5).and_then(|v| v.first()).filter(|v| v.is_finite()) {
            return Ok(*v);
        }
        if rate.value <= 0.0 {
            return Ok(0.0);
        }
        Err(RoleNoDecision::NoLength(s))
    };
    // Finished requests stop tracking arrivals while a queue builds (they are
    // capped by what the replicas serve): the backlog counts as arrivals to
    // drain within the role's cold start, as the single-role rule does.
    let backlog = fresh(Signal::QueueDepth).unwrap_or(0.0).max(0.0);
    let drain_secs = role.profile.cold_start_secs.total_secs().max(60.0);
    let live = TokenDemand {
        request_rate: rate.value + backlog / drain_secs,
        prompt_tokens: length(Signal::PromptTokensPerRequest)?,
        generation_tokens: length(Signal::GenerationTokensPerRequest)?,
        // Without a reading no token counts as cached: prefill is not undersized.
        cache_hit: fresh(Signal::PrefixCacheHitFraction).map_or(0.0, |h| h.clamp(0.0, 1.0)),
    };
    let parts = if predictive {
        forecasts(Signal::RequestRate, sizing.quantile).map(|rate| PartsForecast {
            quantile: sizing.quantile,
            step_secs: state.demand_forecasts[&Signal::RequestRate].step_secs.max(1) as f64,
            request_rate: rate,
            prompt_tokens: forecasts(Signal::PromptTokensPerRequest, 0.5),
            generation_tokens: forecasts(Signal::GenerationTokensPerRequest, 0.5),
            cache_hit: forecasts(Signal::PrefixCacheHitFraction, 0.5),
        })
    } else {
        None
    };
    let capacity = role.profile.role_capacity().ok_or(RoleNoDecision::NoCapacity)?;
    let input = RoleInput {
        kind: role.kind,
        capacity,
        live,
        forecast: parts,
        lookahead_secs: role.profile.cold_start_secs.total_secs(),
        min_replicas: role.min_replicas,
        max_replicas: role.max_replicas,
    };
    let mut d = roles::decide(&input, stab, now_secs, window)?;
    if w.shadow {
        d.reason = format!("shadow mode, KEDA gets the reactive answer: {}", d.reason);
    }
    Ok(d)
}

/// A forecast's values at `quantile` (0.5: the point forecast when no such
/// quantile is kept) from the step containing `now_secs` on.
fn quantile_from_now(f: &ForecastView, quantile: f64, now_secs: f64) -> Option<&[f64]> {
    let values = match f.quantiles.iter().find(|q| (q.quantile - quantile).abs() < 1e-9) {
        Some(q) => &q.values,
        None if (quantile - 0.5).abs() < 1e-9 => &f.point,
        None => return None,
    };
    super::decide::from_now(f, values, now_secs)
}
