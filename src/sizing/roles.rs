//! Prefill and decode roles sized on token demand in its parts.
//!
//! Disaggregated serving (llm-d, KServe's LLMInferenceService, Dynamo) runs
//! prefill and decode as separate Deployments. They are bound by different
//! things, so one demand signal cannot size both:
//! - prefill by the prompt tokens it must compute per second: request rate x
//!   prompt length x the share not served from the prefix cache;
//! - decode by the sequences it holds at once (Little's law: rate x output
//!   length x time per output token), their KV-cache footprint, and the
//!   generated tokens per second.
//!
//! Demand is kept in its parts, so a longer prompt moves prefill and not
//! decode, and more users move both. Pure: data in, data out.

use serde::{Deserialize, Serialize};

use super::{reactive::Bound, Policy};

/// A serving role a workload declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RoleKind {
    Prefill,
    Decode,
}

impl RoleKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RoleKind::Prefill => "prefill",
            RoleKind::Decode => "decode",
        }
    }
}

impl std::fmt::Display for RoleKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Token demand at one moment, in its parts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, utoipa::ToSchema)]
pub(crate) struct TokenDemand {
    /// Requests per second.
    pub(crate) request_rate: f64,
    /// Mean prompt tokens per request.
    pub(crate) prompt_tokens: f64,
    /// Mean generated tokens per request.
    pub(crate) generation_tokens: f64,
    /// Share 0..1 of prompt tokens served from the prefix cache.
    pub(crate) cache_hit: f64,
}

impl TokenDemand {
    fn usable(&self) -> bool {
        [self.request_rate, self.prompt_tokens, self.generation_tokens, self.cache_hit]
            .iter()
            .all(|v| v.is_finite() && *v >= 0.0)
    }

    /// Prompt tokens per second prefill must compute.
    pub(crate) fn prefill_tokens_per_sec(&self) -> f64 {
        self.request_rate * self.prompt_tokens * (1.0 - self.cache_hit.clamp(0.0, 1.0))
    }

    pub(crate) fn generation_tokens_per_sec(&self) -> f64 {
        self.request_rate * self.generation_tokens
    }

    /// Sequences decoding at once when each output token takes `itl_secs`.
    pub(crate) fn sequences(&self, itl_secs: f64) -> f64 {
        self.generation_tokens_per_sec() * itl_secs
    }

    /// KV-cache tokens those sequences hold: each its prompt and, on average
    /// over its life, half its output.
    pub(crate) fn kv_tokens(&self, itl_secs: f64) -> f64 {
        self.sequences(itl_secs) * (self.prompt_tokens + self.generation_tokens / 2.0)
    }
}

/// What one replica of a role sustains within its latency SLO.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, utoipa::ToSchema)]
pub(crate) struct RoleCapacity {
    /// Uncached prompt tokens/s within the TTFT SLO (prefill).
    pub(crate) prefill_tokens_per_sec: Option<f64>,
    /// Sequences decoding at once within the ITL SLO.
    pub(crate) sequences: f64,
    /// Generated tokens/s within the ITL SLO.
    pub(crate) generation_tokens_per_sec: Option<f64>,
    /// KV-cache tokens.
    pub(crate) kv_cache_tokens: Option<f64>,
    /// Seconds per output token at that load.
    pub(crate) itl_secs: f64,
}

/// What bounds a role's replica count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Limit {
    /// Uncached prompt tokens per second (prefill).
    PrefillTokens,
    /// Sequences decoding at once.
    Sequences,
    /// The sequences' KV-cache footprint.
    KvCache,
    /// Generated tokens per second.
    GenerationTokens,
}

impl Limit {
    fn unit(self) -> &'static str {
        match self {
            Limit::PrefillTokens => "uncached prompt tokens/s",
            Limit::Sequences => "sequences",
            Limit::KvCache => "KV-cache tokens",
            Limit::GenerationTokens => "generated tokens/s",
        }
    }
}

/// Replicas (fractional) a role needs for one demand, and what binds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Need {
    pub(crate) replicas: f64,
    pub(crate) limit: Limit,
    /// The binding load, in the limit's unit.
    pub(crate) load: f64,
    pub(crate) per_replica: f64,
}

/// Why a role cannot be sized.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum RoleError {
    #[error("the profile states no prefill_tokens_per_sec")]
    NoPrefillCapacity,
    #[error("the demand is not usable (a NaN or negative part)")]
    Unusable,
}

/// The replicas `kind` needs for demand `d`.
pub(crate) fn need(kind: RoleKind, d: &TokenDemand, cap: &RoleCapacity) -> Result<Need, RoleError> {
    if !d.usable() {
        return Err(RoleError::Unusable);
    }
    let one = |limit, load: f64, per: f64| Need { replicas: load / per, limit, load, per_replica: per };
    match kind {
        RoleKind::Prefill => {
            let per = cap.prefill_tokens_per_sec.ok_or(RoleError::NoPrefillCapacity)?;
            Ok(one(Limit::PrefillTokens, d.prefill_tokens_per_sec(), per))
        }
        RoleKind::Decode => {
            let mut best = one(Limit::Sequences, d.sequences(cap.itl_secs), cap.sequences);
            let others = [
                cap.kv_cache_tokens.map(|kv| one(Limit::KvCache, d.kv_tokens(cap.itl_secs), kv)),
                cap.generation_tokens_per_sec.map(|g| one(Limit::GenerationTokens, d.generation_tokens_per_sec(), g)),
            ];
            for n in others.into_iter().flatten() {
                if n.replicas > best.replicas {
                    best = n;
                }
            }
            Ok(best)
        }
    }
}

/// Forecast parts from now on, step-aligned: request rate at the upper
/// quantile, lengths and cache share at the median.
///
/// The rate carries the uncertainty that matters (how many users come);
/// lengths and hit share are means over many requests and move slowly, and
/// multiplying upper quantiles of all parts would size for a joint event far
/// rarer than the quantile asked for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PartsForecast<'a> {
    pub(crate) quantile: f64,
    pub(crate) step_secs: f64,
    pub(crate) request_rate: &'a [f64],
    /// `None`, or shorter than the rate: the live value stands in.
    pub(crate) prompt_tokens: Option<&'a [f64]>,
    pub(crate) generation_tokens: Option<&'a [f64]>,
    pub(crate) cache_hit: Option<&'a [f64]>,
}

impl PartsForecast<'_> {
    fn at(&self, k: usize, live: &TokenDemand) -> TokenDemand {
        let part =
            |s: Option<&[f64]>, live: f64| s.and_then(|s| s.get(k)).copied().filter(|v| v.is_finite()).unwrap_or(live);
        TokenDemand {
            request_rate: self.request_rate[k],
            prompt_tokens: part(self.prompt_tokens, live.prompt_tokens),
            generation_tokens: part(self.generation_tokens, live.generation_tokens),
            cache_hit: part(self.cache_hit, live.cache_hit),
        }
    }
}

/// Everything a role decision takes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RoleInput<'a> {
    pub(crate) kind: RoleKind,
    pub(crate) capacity: RoleCapacity,
    /// Demand now, from the latest readings.
    pub(crate) live: TokenDemand,
    pub(crate) forecast: Option<PartsForecast<'a>>,
    /// The role's cold start: how far ahead a replica ordered now serves.
    pub(crate) lookahead_secs: f64,
    pub(crate) min_replicas: u32,
    pub(crate) max_replicas: u32,
}

/// A role's decision and what went into it.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct RoleDecision {
    pub policy: Policy,
    /// Replicas to run, after min/max and stabilisation.
    pub desired_replicas: u32,
    /// Replicas demand alone needs (forecast peak or live, whichever is more).
    pub(crate) needed_replicas: u32,
    pub(crate) live_replicas: u32,
    pub(crate) limit: Limit,
    /// The binding load and what one replica handles of it.
    pub(crate) load: f64,
    pub(crate) per_replica: f64,
    /// The demand the answer was sized for (the forecast peak's, or the live one).
    pub(crate) demand: TokenDemand,
    pub(crate) peak_in_secs: f64,
    pub(crate) bound: Option<Bound>,
    /// Any demand at all: drives KEDA's 0 <-> 1 step.
    pub active: bool,
    pub reason: String,
    /// Replicas at each forecast step (after min/max), for pre-warm planning.
    pub timeline: Vec<u32>,
    pub(crate) step_secs: f64,
}

fn ceil(x: f64) -> u32 {
    // Tolerate float noise: 2.0000000001 replicas is two.
    let c = (x - 1e-9).ceil().max(0.0);
    if c >= f64::from(u32::MAX) {
        u32::MAX
    } else {
        c as u32
    }
}

/// Size a role: the peak need over the look-ahead of the forecast (when
/// there is one) and the live need, the live part held for `window_secs` by
/// `stab` as the monolithic policy does, then min/max.
pub(crate) fn decide(
    i: &RoleInput<'_>,
    stab: &mut super::predictive::Stabiliser,
    now_secs: f64,
    window_secs: f64,
) -> Result<RoleDecision, RoleError> {
    let live = need(i.kind, &i.live, &i.capacity)?;
    let live_replicas = ceil(live.replicas);
    let held = stab.apply(now_secs, window_secs, live_replicas);
    let clamp = |n: u32| n.clamp(i.min_replicas, i.max_replicas.max(i.min_replicas));
    // Each step's need, the peak within the look-ahead; a forecast with an
    // unusable step (a NaN) is set aside whole, and the live demand decides.
    let sized = |f: &PartsForecast<'_>| -> Result<(Need, usize, TokenDemand, Vec<u32>), RoleError> {
        let steps = ((i.lookahead_secs / f.step_secs).ceil() as usize + 1).clamp(1, f.request_rate.len());
        let (mut best, mut timeline): (Option<(Need, usize, TokenDemand)>, Vec<u32>) = (None, Vec::new());
        for k in 0..f.request_rate.len() {
            let d = f.at(k, &i.live);
            let n = need(i.kind, &d, &i.capacity)?;
            timeline.push(clamp(ceil(n.replicas)));
            if k < steps && best.is_none_or(|(b, _, _)| n.replicas > b.replicas) {
                best = Some((n, k, d));
            }
        }
        let (n, k, d) = best.ok_or(RoleError::Unusable)?;
        Ok((n, k, d, timeline))
    };
    let usable = i.forecast.filter(|f| !f.request_rate.is_empty() && f.step_secs > 0.0);
    let fitted = usable.map(|f| sized(&f));
    let set_aside = matches!(fitted, Some(Err(_)));
    let forecast = usable.filter(|_| !set_aside);
    let (peak, peak_k, peak_demand, timeline) = match fitted {
        Some(Ok(x)) => x,
        _ => (live, 0, i.live, Vec::new()),
    };
    let mut timeline = timeline;
    let step = forecast.map_or(0.0, |f| f.step_secs);
    let forecast_replicas = if forecast.is_some() { ceil(peak.replicas) } else { 0 };
    let needed = forecast_replicas.max(live_replicas);
    let wanted = needed.max(held);
    let (desired, bound) = if wanted > i.max_replicas {
        (i.max_replicas, Some(Bound::MaxReplicas))
    } else if wanted < i.min_replicas {
        (i.min_replicas, Some(Bound::MinReplicas))
    } else {
        (wanted, None)
    };
    if let Some(first) = timeline.first_mut() {
        *first = (*first).max(desired);
    }
    let (binding, d) =
        if forecast_replicas >= live_replicas && forecast.is_some() { (peak, peak_demand) } else { (live, i.live) };
    let policy = if forecast.is_some() { Policy::Predictive } else { Policy::Reactive };
    let mut reason = match forecast {
        Some(f) => format!(
            "{}: p{:.0} forecast peaks in {:.0} s (look-ahead {:.0} s) at {:.2} req/s x {:.0} prompt, {:.0} output tokens, {:.0}% cached -> {} replicas; live -> {}",
            i.kind,
            f.quantile * 100.0,
            peak_k as f64 * f.step_secs,
            i.lookahead_secs,
            peak_demand.request_rate,
            peak_demand.prompt_tokens,
            peak_demand.generation_tokens,
            peak_demand.cache_hit * 100.0,
            forecast_replicas,
            live_replicas
        ),
        None => format!(
            "{}: no forecast, live {:.2} req/s x {:.0} prompt, {:.0} output tokens, {:.0}% cached -> {} replicas",
            i.kind,
            i.live.request_rate,
            i.live.prompt_tokens,
            i.live.generation_tokens,
            i.live.cache_hit * 100.0,
            live_replicas
        ),
    };
    reason.push_str(&format!(
        "; {} bind: {:.0} at {:.0} per replica",
        binding.limit.unit(),
        binding.load,
        binding.per_replica
    ));
    if set_aside {
        reason.push_str("; the forecast has an unusable step, so the live demand decides");
    }
    if held > needed {
        reason.push_str(&format!("; holding {held}, the live need's highest of the last {window_secs:.0} s"));
    }
    match bound {
        Some(Bound::MaxReplicas) => reason.push_str(&format!("; capped at max_replicas {desired}")),
        Some(Bound::MinReplicas) => reason.push_str(&format!("; raised to min_replicas {desired}")),
        None => {}
    }
    let active = i.live.request_rate > 0.0 || (forecast.is_some() && peak_demand.request_rate > 0.0);
    Ok(RoleDecision {
        policy,
        desired_replicas: desired,
        needed_replicas: needed,
        live_replicas,
        limit: binding.limit,
        load: binding.load,
        per_replica: binding.per_replica,
        demand: d,
        peak_in_secs: peak_k as f64 * step,
        bound,
        active,
        reason,
        timeline,
        step_secs: step,
    })
}

/// One H100 replica of the shipped 8B profile, for tests.
#[cfg(test)]
pub(crate) const H100_8B: RoleCapacity = RoleCapacity {
    prefill_tokens_per_sec: Some(24_000.0),
    sequences: 32.0,
    generation_tokens_per_sec: Some(1_600.0),
    kv_cache_tokens: Some(390_000.0),
    itl_secs: 0.02,
};

#[cfg(test)]
#[path = "roles_tests.rs"]
mod tests;
