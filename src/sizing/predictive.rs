//! The predictive policy: size now for the demand an upper forecast quantile
//! expects before a replica started now could serve.
//!
//! Replicas take the profile's cold start to come up, so the decision looks
//! at the forecast over [now, now + cold start] and sizes for its peak. The
//! rule per step depends on what the signal measures:
//!
//! - in-flight requests (`concurrency`, `running`, `queue_depth`): Little's
//!   law has already turned arrivals into concurrency, so replicas =
//!   ceil(concurrency / per-replica concurrency at the SLO);
//! - arrivals (`request_rate`): a G/G/c queue with one server per batch slot
//!   (replicas x the profile's concurrency), each serving at per_replica /
//!   slots requests per second; the fewest replicas whose chance of a request
//!   waiting longer than the profile's queue-wait budget is at most the
//!   SLO's allowed miss ([`Queueing`]). The chance of waiting is Erlang C;
//!   the tail of the wait decays as in M/M/c slowed by the arrivals'
//!   burstiness (Kingman / Allen-Cunneen: by 2 / (ca^2 + cs^2), with cs^2 =
//!   1 and ca^2 the arrivals' index of dispersion at the decision's time
//!   scale). LLM arrivals are often far burstier than Poisson, and a fleet
//!   sized as if they were queues at every burst;
//! - anything else (token rates): ceil(rate / per_replica).
//!
//! On top, a token-throughput floor when the profile states one and the
//! generated-token rate is known, and the live signal itself: a forecast
//! never sizes below what the live load needs, so it can add capacity early
//! but never take away capacity that is in use.
//!
//! Scale-down waits for [`Stabiliser`]: the answer is the highest
//! recommendation over the window, so up is immediate and down is slow.

use std::collections::VecDeque;

use serde::Serialize;

pub use super::decision::{Binding, Sizing};
use super::{decision::Bound, Policy};
use crate::sources::Signal;

/// Share of requests allowed to wait longer than the wait budget when no
/// SLO attainment target is given: a 99% target.
pub(crate) const WAIT_BUDGET_MISS: f64 = 0.01;

/// What the queueing rule sizes for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Queueing {
    /// Share of requests allowed to wait longer than the wait budget: one
    /// minus the attainment the SLO is judged by.
    pub(crate) miss: f64,
    /// Index of dispersion of arrivals (variance / mean of counts at the
    /// decision's time scale); 1 for Poisson.
    pub(crate) dispersion: f64,
}

impl Default for Queueing {
    fn default() -> Self {
        Queueing { miss: WAIT_BUDGET_MISS, dispersion: 1.0 }
    }
}

/// The upper-quantile forecast the decision sizes for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Upper<'a> {
    pub(crate) quantile: f64,
    /// Forecast values at now + k x step_secs, k = 0.., in signal units.
    pub(crate) values: &'a [f64],
    pub(crate) step_secs: f64,
}

/// What the rule needs. Everything in the target signal's units unless stated.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Input<'a> {
    pub(crate) signal: Signal,
    /// The live value of the target signal.
    pub(crate) live: f64,
    /// Live requests waiting for a batch slot, when known.
    pub(crate) queue: Option<f64>,
    /// Live generated tokens per second, when known.
    pub(crate) generation_tokens_per_sec: Option<f64>,
    pub(crate) per_replica: f64,
    /// Batch slots per replica (the profile's concurrency at the SLO).
    pub(crate) slots_per_replica: f64,
    /// Most a request may wait for a slot (the TTFT budget left after prefill).
    pub(crate) wait_budget_secs: f64,
    pub(crate) queueing: Queueing,
    /// Multiplier on the load sized for, learned from the measured queue
    /// wait ([`super::headroom`]); 1 when nothing has been missed.
    pub(crate) headroom: f64,
    /// Generated tokens per second one replica sustains at the SLO, if profiled.
    pub(crate) tokens_per_sec_per_replica: Option<f64>,
    pub(crate) forecast: Upper<'a>,
    /// How far ahead to look: the profile's cold start.
    pub(crate) lookahead_secs: f64,
    pub(crate) min_replicas: u32,
    pub(crate) max_replicas: u32,
    pub(crate) activation_threshold: f64,
}

/// Replicas for a load of `load` target-signal units.
pub(crate) fn replicas_for(i: &Input<'_>, load: f64) -> u32 {
    if load.is_nan() || load <= 0.0 {
        return 0;
    }
    let raw = match i.signal {
        Signal::RequestRate => {
            return mmc_replicas(load, i.per_replica, i.slots_per_replica, i.wait_budget_secs, i.queueing)
        }
        _ => load / i.per_replica,
    };
    saturate(raw.ceil())
}

fn saturate(x: f64) -> u32 {
    if x >= f64::from(u32::MAX) {
        u32::MAX
    } else if x > 0.0 {
        x as u32
    } else {
        0
    }
}

/// Fewest replicas for arrivals `lambda`/s such that P(wait > budget) <=
/// `q.miss`, with `slots` servers per replica each serving `rate / slots`
/// requests/s, and arrivals `q.dispersion` times as variable as Poisson.
pub(crate) fn mmc_replicas(lambda: f64, rate: f64, slots: f64, budget: f64, q: Queueing) -> u32 {
    let slots = slots.max(1.0).floor();
    let mu = rate / slots;
    let a = lambda / mu; // offered load in servers
    let miss = if q.miss.is_finite() { q.miss.clamp(1e-6, 1.0) } else { WAIT_BUDGET_MISS };
    let decay = 2.0 / (q.dispersion.clamp(0.0, 1e6) + 1.0);
    let decay = if decay.is_finite() { decay } else { 1.0 };
    // Start where utilisation is below 1; never fewer than the plain ratio.
    let mut r = saturate((lambda / rate).floor()).max(1);
    loop {
        let c = f64::from(r) * slots;
        if c > a && erlang_c(c as u64, a) * (-(c * mu - lambda) * budget * decay).exp() <= miss {
            return r;
        }
        if r >= 1_000_000 {
            return r;
        }
        r += 1;
    }
}

/// Probability an arrival waits in M/M/c with `c` servers and offered load
/// `a` (Erlang C), via the stable Erlang B recursion.
pub(crate) fn erlang_c(c: u64, a: f64) -> f64 {
    if a <= 0.0 {
        return 0.0;
    }
    let mut b = 1.0;
    for k in 1..=c {
        b = a * b / (k as f64 + a * b);
    }
    let rho = a / c as f64;
    if rho >= 1.0 {
        return 1.0;
    }
    b / (1.0 - rho * (1.0 - b))
}

/// Size for the forecast and the live load. `None` when the inputs are
/// unusable (a NaN, no forecast points): the caller falls back to reactive.
pub(crate) fn size(i: &Input<'_>) -> Option<Sizing> {
    let f = i.forecast;
    let usable = i.live.is_finite()
        && i.live >= 0.0
        && i.per_replica.is_finite()
        && i.per_replica > 0.0
        && !f.values.is_empty()
        && f.step_secs > 0.0
        && f.values.iter().all(|v| v.is_finite());
    if !usable {
        return None;
    }
    // Steps within the look-ahead (at least one).
    let steps = ((i.lookahead_secs / f.step_secs).ceil() as usize + 1).clamp(1, f.values.len());
    let window = &f.values[..steps];
    let (peak_k, peak) =
        window.iter().copied().enumerate().fold((0, 0.0f64), |best, (k, v)| if v > best.1 { (k, v) } else { best });
    let k = if i.headroom.is_finite() { i.headroom.max(1.0) } else { 1.0 };
    let forecast_replicas = replicas_for(i, peak * k);
    let (live_replicas, token_replicas) = live_parts(i, k);
    let mut needed = forecast_replicas;
    let mut binding = Binding::Forecast;
    if live_replicas > needed {
        needed = live_replicas;
        binding = Binding::Live;
    }
    if let Some(t) = token_replicas.filter(|t| *t > needed) {
        needed = t;
        binding = Binding::Tokens;
    }
    let clamp = |n: u32| n.clamp(i.min_replicas, i.max_replicas.max(i.min_replicas));
    let timeline = f
        .values
        .iter()
        .enumerate()
        .map(|(j, v)| clamp(if j == 0 { replicas_for(i, v * k).max(needed) } else { replicas_for(i, v * k) }))
        .collect();
    let active = i.live > i.activation_threshold || peak > i.activation_threshold;
    Some(Sizing {
        needed_replicas: needed,
        timeline,
        step_secs: f.step_secs,
        forecast_peak: peak,
        peak_in_secs: peak_k as f64 * f.step_secs,
        quantile: f.quantile,
        live: i.live,
        live_replicas,
        headroom: k,
        token_replicas,
        binding,
        active,
    })
}

/// Replicas the live reading asks for (with headroom `k`), and those the
/// live token rate asks for, when it is known.
fn live_parts(i: &Input<'_>, k: f64) -> (u32, Option<u32>) {
    // The live signal plus any queue it does not already count. For arrivals,
    // enough extra replicas to drain the backlog within the look-ahead (new
    // replicas cannot help sooner); a slot per waiting request would turn a
    // short burst into a fleet that idles for the whole stabilisation window.
    let queue_extra = match (i.signal, i.queue) {
        (Signal::Concurrency | Signal::QueueDepth, _) | (_, None) => 0.0,
        (Signal::RequestRate, Some(q)) if q.is_finite() && q > 0.0 => {
            (q / (i.per_replica * i.lookahead_secs.max(60.0))).ceil()
        }
        (_, Some(q)) if q.is_finite() && q > 0.0 => (q / i.slots_per_replica.max(1.0)).ceil(),
        _ => 0.0,
    };
    let live_replicas = saturate(f64::from(replicas_for(i, i.live * k)) + queue_extra);
    let token_replicas = match (i.generation_tokens_per_sec, i.tokens_per_sec_per_replica) {
        (Some(t), Some(cap)) if t.is_finite() && t > 0.0 && cap > 0.0 => Some(saturate((t / cap).ceil())),
        _ => None,
    };
    (live_replicas, token_replicas)
}

/// What the live load alone asks for: what the scale-down hold keeps for
/// its window. `None` for an unusable reading.
pub(crate) fn live_need(i: &Input<'_>) -> Option<u32> {
    if !(i.live.is_finite() && i.live >= 0.0 && i.per_replica.is_finite() && i.per_replica > 0.0) {
        return None;
    }
    let k = if i.headroom.is_finite() { i.headroom.max(1.0) } else { 1.0 };
    let (live, tokens) = live_parts(i, k);
    Some(live.max(tokens.unwrap_or(0)))
}

/// The full decision: sizing, then min/max, then stabilisation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Outcome {
    pub(crate) policy: Policy,
    pub(crate) desired_replicas: u32,
    pub(crate) sizing: Sizing,
    pub(crate) bound: Option<Bound>,
    pub(crate) binding: Binding,
    pub(crate) reason: String,
    pub(crate) per_replica: f64,
}

impl From<Outcome> for super::decision::Decision {
    fn from(o: Outcome) -> Self {
        super::decision::Decision {
            policy: o.policy,
            desired_replicas: o.desired_replicas,
            needed_replicas: o.sizing.needed_replicas,
            load: o.sizing.forecast_peak.max(o.sizing.live),
            per_replica: o.per_replica,
            active: o.sizing.active || o.desired_replicas > 0,
            bound: o.bound,
            reason: o.reason,
            binding: Some(o.binding),
            sizing: Some(o.sizing),
        }
    }
}

/// Scale-down stabilisation: the highest recommendation of the last
/// `window_secs`, as the HPA's `stabilizationWindowSeconds` for scale-down.
/// Times are the caller's (no clock here).
#[derive(Debug, Clone, Default)]
pub(crate) struct Stabiliser {
    recent: VecDeque<(f64, u32)>,
}

impl Stabiliser {
    /// Record `rec` at `now_secs` and return the stabilised value.
    pub(crate) fn apply(&mut self, now_secs: f64, window_secs: f64, rec: u32) -> u32 {
        while self.recent.front().is_some_and(|(t, _)| *t < now_secs - window_secs) {
            self.recent.pop_front();
        }
        // Recommendations below the new one can never be the maximum again.
        while self.recent.back().is_some_and(|(_, r)| *r <= rec) {
            self.recent.pop_back();
        }
        self.recent.push_back((now_secs, rec));
        self.recent.front().map_or(rec, |(_, r)| *r)
    }
}

/// Size, clamp and stabilise; the reason names every number used.
///
/// Only what the live load asked for is held over the scale-down window:
/// the forecast part already looks a whole cold start ahead, so capacity it
/// no longer needs can go at once (it could be back before it is needed).
pub(crate) fn decide(
    i: &Input<'_>,
    stab: &mut Stabiliser,
    now_secs: f64,
    window_secs: f64,
    profile: &str,
) -> Option<Outcome> {
    let s = size(i)?;
    let forecast_replicas = replicas_for(i, s.forecast_peak * s.headroom);
    let live = s.live_replicas.max(s.token_replicas.unwrap_or(0));
    let held = stab.apply(now_secs, window_secs, live);
    let needed = s.needed_replicas.max(held).max(forecast_replicas);
    let (desired, bound) = if needed > i.max_replicas {
        (i.max_replicas, Some(Bound::MaxReplicas))
    } else if needed < i.min_replicas {
        (i.min_replicas, Some(Bound::MinReplicas))
    } else {
        (needed, None)
    };
    let clamped = s.needed_replicas.clamp(i.min_replicas, i.max_replicas.max(i.min_replicas));
    let binding = match bound {
        Some(Bound::MaxReplicas) => Binding::MaxReplicas,
        Some(Bound::MinReplicas) => Binding::MinReplicas,
        None if needed > s.needed_replicas => Binding::Stabilisation,
        None => s.binding,
    };
    let mut reason = format!(
        "predictive: p{:.0} forecast of {} peaks at {:.2} in {:.0} s (look-ahead {:.0} s, profile {profile}) -> {} replicas; live {:.2} -> {}",
        s.quantile * 100.0,
        i.signal,
        s.forecast_peak,
        s.peak_in_secs,
        i.lookahead_secs,
        replicas_for(i, s.forecast_peak * s.headroom),
        i.live,
        s.live_replicas
    );
    if s.headroom > 1.0 {
        reason.push_str(&format!("; loads x{:.2} headroom (queue wait missed its target recently)", s.headroom));
    }
    if let Some(t) = s.token_replicas {
        reason.push_str(&format!("; tokens -> {t}"));
    }
    reason.push_str(&match binding {
        Binding::Forecast => format!("; forecast binds: {desired}"),
        Binding::Live => format!("; live load binds: {desired}"),
        Binding::Tokens => format!("; token throughput binds: {desired}"),
        Binding::Stabilisation => {
            format!("; holding {desired}, the live load's highest of the last {window_secs:.0} s (would be {clamped})")
        }
        Binding::MaxReplicas => format!("; capped at max_replicas {desired} (needs {})", s.needed_replicas),
        Binding::MinReplicas => format!("; raised to min_replicas {desired}"),
    });
    Some(Outcome {
        policy: Policy::Predictive,
        desired_replicas: desired,
        binding,
        bound,
        reason,
        sizing: s,
        per_replica: i.per_replica,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input<'a>(signal: Signal, live: f64, values: &'a [f64]) -> Input<'a> {
        Input {
            signal,
            live,
            queue: None,
            generation_tokens_per_sec: None,
            per_replica: 32.0,
            slots_per_replica: 32.0,
            wait_budget_secs: 0.5,
            queueing: Queueing::default(),
            headroom: 1.0,
            tokens_per_sec_per_replica: None,
            forecast: Upper { quantile: 0.9, values, step_secs: 60.0 },
            lookahead_secs: 300.0,
            min_replicas: 0,
            max_replicas: 100,
            activation_threshold: 0.0,
        }
    }

    #[test]
    fn concurrency_table() {
        // (live, forecast) -> (needed, binding)
        let cases: [(f64, Vec<f64>, u32, Binding); 5] = [
            (10.0, vec![10.0, 20.0, 100.0, 40.0, 30.0, 30.0], 4, Binding::Forecast),
            (10.0, vec![10.0; 6], 1, Binding::Forecast),
            (200.0, vec![10.0; 6], 7, Binding::Live),
            // A peak beyond the look-ahead (step 6 = 360 s > 300 s) is not sized for yet.
            (10.0, vec![10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 500.0], 1, Binding::Forecast),
            (0.0, vec![0.0; 6], 0, Binding::Forecast),
        ];
        for (live, values, needed, binding) in cases {
            let s = size(&input(Signal::Concurrency, live, &values)).unwrap();
            assert_eq!((s.needed_replicas, s.binding), (needed, binding), "live {live} forecast {values:?}");
        }
    }

    #[test]
    fn forecast_alone_never_removes_capacity_in_use() {
        // The forecast says demand is about to vanish; 150 requests are in flight now.
        let values = [0.0; 6];
        let s = size(&input(Signal::Concurrency, 150.0, &values)).unwrap();
        assert_eq!(s.needed_replicas, 5);
        assert_eq!(s.binding, Binding::Live);
    }

    #[test]
    fn scale_up_is_immediate_and_scale_down_waits_for_the_window() {
        let mut stab = Stabiliser::default();
        let w = 300.0;
        let steps = [(0.0, 5, 5), (60.0, 9, 9), (120.0, 3, 9), (300.0, 3, 9), (361.0, 3, 3), (400.0, 2, 3)];
        for (t, rec, want) in steps {
            assert_eq!(stab.apply(t, w, rec), want, "t={t} rec={rec}");
        }
    }

    #[test]
    fn scale_down_is_held_by_live_load() {
        // Forecast demand drops to nothing, the window has passed, but live load keeps 4.
        let mut stab = Stabiliser::default();
        let high = [300.0; 6];
        let i = input(Signal::Concurrency, 300.0, &high);
        assert_eq!(decide(&i, &mut stab, 0.0, 300.0, "p").unwrap().desired_replicas, 10);
        let low = [0.0; 6];
        let i = input(Signal::Concurrency, 120.0, &low);
        let d = decide(&i, &mut stab, 1000.0, 300.0, "p").unwrap();
        assert_eq!(d.desired_replicas, 4);
        assert_eq!(d.binding, Binding::Live);
        assert!(d.reason.contains("live load binds: 4"), "{}", d.reason);
    }

    #[test]
    fn erlang_c_matches_known_values() {
        // c = 1: P(wait) = rho.
        assert!((erlang_c(1, 0.5) - 0.5).abs() < 1e-12);
        // c = 2, a = 1: 1/3 (textbook).
        assert!((erlang_c(2, 1.0) - 1.0 / 3.0).abs() < 1e-12);
        // Saturated.
        assert_eq!(erlang_c(4, 4.0), 1.0);
        // Many servers stay finite (no factorial overflow).
        let p = erlang_c(10_000, 9_500.0);
        assert!(p.is_finite() && (0.0..1.0).contains(&p));
    }

    #[test]
    fn capacity_only_the_forecast_wanted_goes_at_once_and_live_load_is_held() {
        let mut stab = Stabiliser::default();
        // The forecast asks for 10, the live load for 4.
        let i = input(Signal::Concurrency, 120.0, &[300.0; 6]);
        assert_eq!(decide(&i, &mut stab, 0.0, 300.0, "p").unwrap().desired_replicas, 10);
        // A minute later the forecast no longer needs them: straight down to what live load holds.
        let i = input(Signal::Concurrency, 120.0, &[0.0; 6]);
        assert_eq!(decide(&i, &mut stab, 60.0, 300.0, "p").unwrap().desired_replicas, 4);
        // Live load falls: its highest of the window is held, and the reason says so.
        let i = input(Signal::Concurrency, 30.0, &[0.0; 6]);
        let d = decide(&i, &mut stab, 120.0, 300.0, "p").unwrap();
        assert_eq!((d.desired_replicas, d.binding), (4, Binding::Stabilisation));
        assert!(d.reason.contains("holding 4, the live load's highest of the last 300 s"), "{}", d.reason);
        // And released once the window has passed.
        assert_eq!(decide(&i, &mut stab, 421.0, 300.0, "p").unwrap().desired_replicas, 1);
    }

    #[test]
    fn a_stricter_slo_and_burstier_arrivals_need_more_replicas() {
        // 30 req/s per replica over 32 slots, 0.25 s budget, 600 req/s.
        let r = |miss, dispersion| mmc_replicas(600.0, 30.0, 32.0, 0.25, Queueing { miss, dispersion });
        let poisson_95 = r(0.05, 1.0);
        let poisson_99 = r(0.01, 1.0);
        let bursty_99 = r(0.01, 6.0);
        assert!(poisson_95 >= 20 && poisson_99 >= poisson_95, "{poisson_95} {poisson_99}");
        assert!(bursty_99 > poisson_99, "{poisson_99} {bursty_99}");
        // Nonsense in, the default target out (never a panic or a zero).
        assert_eq!(r(f64::NAN, f64::NAN), r(WAIT_BUDGET_MISS, 1.0));
    }

    #[test]
    fn request_rate_uses_the_queue_model() {
        // 3 req/s per replica over 8 slots; 2 s budget.
        let mut i = input(Signal::RequestRate, 0.0, &[0.0]);
        i.per_replica = 3.0;
        i.slots_per_replica = 8.0;
        i.wait_budget_secs = 2.0;
        // More replicas than the plain ratio at high utilisation, monotone in load.
        let mut last = 0;
        for lambda in [0.5, 3.0, 6.0, 9.0, 12.0, 30.0, 90.0] {
            let r = replicas_for(&i, lambda);
            assert!(f64::from(r) >= lambda / 3.0, "{lambda}: {r}");
            assert!(r >= last);
            last = r;
        }
        assert_eq!(replicas_for(&i, 0.0), 0);
        // Exactly at the ratio (9 req/s on 3 replicas) the queue never drains: one more.
        assert!(replicas_for(&i, 9.0) >= 4);
    }

    #[test]
    fn token_floor_binds_when_requests_are_long() {
        let values = [32.0; 6];
        let mut i = input(Signal::Concurrency, 32.0, &values);
        i.generation_tokens_per_sec = Some(9000.0);
        i.tokens_per_sec_per_replica = Some(2500.0);
        let s = size(&i).unwrap();
        assert_eq!((s.needed_replicas, s.binding), (4, Binding::Tokens));
    }

    #[test]
    fn activation_looks_ahead() {
        // Nothing now, demand in two minutes: active so KEDA wakes the workload from zero in time.
        let values = [0.0, 0.0, 5.0, 5.0];
        let s = size(&input(Signal::Concurrency, 0.0, &values)).unwrap();
        assert!(s.active);
        assert_eq!(s.needed_replicas, 1);
    }

    #[test]
    fn unusable_inputs_give_no_answer() {
        assert!(size(&input(Signal::Concurrency, f64::NAN, &[1.0])).is_none());
        assert!(size(&input(Signal::Concurrency, 1.0, &[f64::NAN])).is_none());
        assert!(size(&input(Signal::Concurrency, 1.0, &[])).is_none());
    }
}
