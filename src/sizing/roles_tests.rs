use super::*;
use crate::sizing::predictive::Stabiliser;

use super::H100_8B as CAP;

fn demand(rate: f64, prompt: f64, output: f64, hit: f64) -> TokenDemand {
    TokenDemand { request_rate: rate, prompt_tokens: prompt, generation_tokens: output, cache_hit: hit }
}

fn replicas(kind: RoleKind, d: TokenDemand) -> (u32, Limit) {
    let n = need(kind, &d, &CAP).unwrap();
    (ceil(n.replicas), n.limit)
}

#[test]
fn role_needs_table() {
    use Limit::*;
    use RoleKind::*;
    let table = [
        // rate, prompt, output, hit: what binds and how many
        (Prefill, demand(10.0, 2_000.0, 200.0, 0.25), 1, PrefillTokens), // 15k of 24k tokens/s
        (Prefill, demand(40.0, 2_000.0, 200.0, 0.25), 3, PrefillTokens), // 60k / 24k = 2.5
        (Prefill, demand(40.0, 2_000.0, 200.0, 0.0), 4, PrefillTokens),  // 80k / 24k = 3.3
        (Prefill, demand(40.0, 2_000.0, 200.0, 1.0), 0, PrefillTokens),  // all cached
        // 10 req/s x 200 tokens x 0.02 s = 40 sequences of 32
        (Decode, demand(10.0, 2_000.0, 200.0, 0.0), 2, Sequences),
        // 16k-token prompts: 40 x 16.1k = 644k KV tokens of 390k
        (Decode, demand(10.0, 16_000.0, 200.0, 0.0), 2, KvCache),
        (Decode, demand(10.0, 40_000.0, 200.0, 0.0), 5, KvCache), // 40 x 40.1k = 1.6M
        (Decode, demand(0.0, 2_000.0, 200.0, 0.0), 0, Sequences),
    ];
    for (kind, d, want, limit) in table {
        assert_eq!(replicas(kind, d), (want, limit), "{kind} {d:?}");
    }
}

#[test]
fn generation_tokens_bind_decode_when_the_profile_says_fewer_tokens() {
    let cap = RoleCapacity { generation_tokens_per_sec: Some(1_000.0), ..CAP };
    let n = need(RoleKind::Decode, &demand(10.0, 1_000.0, 200.0, 0.0), &cap).unwrap();
    assert_eq!((n.limit, ceil(n.replicas)), (Limit::GenerationTokens, 2)); // 2,000 of 1,000 tokens/s
}

#[test]
fn a_prompt_length_shift_moves_prefill_only() {
    let before = demand(20.0, 1_000.0, 300.0, 0.1);
    let after = TokenDemand { prompt_tokens: 3_000.0, ..before };
    let (p0, _) = replicas(RoleKind::Prefill, before);
    let (p1, _) = replicas(RoleKind::Prefill, after);
    assert!(p1 >= 3 * p0 - 1 && p1 > p0, "prefill {p0} -> {p1}");
    assert_eq!(replicas(RoleKind::Decode, before), replicas(RoleKind::Decode, after));
    // More users move both.
    let busier = TokenDemand { request_rate: 60.0, ..before };
    assert!(replicas(RoleKind::Prefill, busier).0 > p0);
    assert!(replicas(RoleKind::Decode, busier).0 > replicas(RoleKind::Decode, before).0);
    // A warmer prefix cache moves prefill only.
    let cached = TokenDemand { cache_hit: 0.8, ..after };
    assert!(replicas(RoleKind::Prefill, cached).0 < p1);
    assert_eq!(replicas(RoleKind::Decode, cached), replicas(RoleKind::Decode, after));
}

#[test]
fn unusable_demand_and_missing_capacity_are_errors() {
    let cap = RoleCapacity { prefill_tokens_per_sec: None, ..CAP };
    assert_eq!(need(RoleKind::Prefill, &demand(1.0, 1.0, 1.0, 0.0), &cap), Err(RoleError::NoPrefillCapacity));
    assert!(need(RoleKind::Decode, &demand(1.0, 1.0, 1.0, 0.0), &cap).is_ok());
    for bad in [demand(f64::NAN, 1.0, 1.0, 0.0), demand(1.0, -1.0, 1.0, 0.0), demand(1.0, 1.0, f64::INFINITY, 0.0)] {
        assert_eq!(need(RoleKind::Decode, &bad, &CAP), Err(RoleError::Unusable));
    }
}

fn input<'a>(kind: RoleKind, live: TokenDemand, f: Option<PartsForecast<'a>>) -> RoleInput<'a> {
    RoleInput { kind, capacity: CAP, live, forecast: f, lookahead_secs: 300.0, min_replicas: 1, max_replicas: 20 }
}

fn parts<'a>(rate: &'a [f64], prompt: Option<&'a [f64]>) -> PartsForecast<'a> {
    PartsForecast {
        quantile: 0.9,
        step_secs: 60.0,
        request_rate: rate,
        prompt_tokens: prompt,
        generation_tokens: None,
        cache_hit: None,
    }
}

#[test]
fn the_forecast_peak_within_the_look_ahead_binds_and_later_steps_only_shape_the_timeline() {
    let live = demand(10.0, 2_000.0, 200.0, 0.0); // prefill 20k -> 1
                                                  // Peak of 40 req/s at 4 min (inside 300 s), 100 req/s at 10 min (outside).
    let rate = [10.0, 10.0, 20.0, 30.0, 40.0, 20.0, 10.0, 10.0, 10.0, 10.0, 100.0];
    let d = decide(&input(RoleKind::Prefill, live, Some(parts(&rate, None))), &mut Stabiliser::default(), 0.0, 300.0)
        .unwrap();
    assert_eq!(d.desired_replicas, 4, "{}", d.reason); // 40 x 2000 = 80k / 24k
    assert_eq!(d.policy, Policy::Predictive);
    assert_eq!(d.peak_in_secs, 240.0);
    assert_eq!(d.timeline.len(), rate.len());
    assert_eq!(d.timeline[10], 9, "the step past the look-ahead still plans nodes"); // 200k / 24k
    assert!(d.reason.contains("uncached prompt tokens/s bind"), "{}", d.reason);
}

#[test]
fn a_forecast_longer_prompt_raises_prefill_before_it_arrives() {
    let live = demand(10.0, 1_000.0, 200.0, 0.0);
    let rate = [10.0; 6];
    let prompt = [1_000.0, 1_000.0, 4_000.0, 4_000.0, 4_000.0, 4_000.0];
    let p = decide(
        &input(RoleKind::Prefill, live, Some(parts(&rate, Some(&prompt)))),
        &mut Stabiliser::default(),
        0.0,
        0.0,
    )
    .unwrap();
    assert_eq!(p.desired_replicas, 2); // 40k / 24k
    let d =
        decide(&input(RoleKind::Decode, live, Some(parts(&rate, Some(&prompt)))), &mut Stabiliser::default(), 0.0, 0.0)
            .unwrap();
    let flat =
        decide(&input(RoleKind::Decode, live, Some(parts(&rate, None))), &mut Stabiliser::default(), 0.0, 0.0).unwrap();
    assert_eq!(d.desired_replicas, flat.desired_replicas, "decode is not bound by prompts at this length");
}

#[test]
fn live_demand_above_the_forecast_binds_and_is_held_through_the_window() {
    let rate = [5.0; 6];
    let hot = demand(50.0, 2_000.0, 200.0, 0.0); // 100k / 24k -> 5
    let mut stab = Stabiliser::default();
    let d = decide(&input(RoleKind::Prefill, hot, Some(parts(&rate, None))), &mut stab, 0.0, 300.0).unwrap();
    assert_eq!((d.desired_replicas, d.live_replicas), (5, 5), "{}", d.reason);
    let calm = demand(5.0, 2_000.0, 200.0, 0.0);
    let held = decide(&input(RoleKind::Prefill, calm, Some(parts(&rate, None))), &mut stab, 120.0, 300.0).unwrap();
    assert_eq!(held.desired_replicas, 5, "{}", held.reason);
    assert!(held.reason.contains("holding 5"), "{}", held.reason);
    let after = decide(&input(RoleKind::Prefill, calm, Some(parts(&rate, None))), &mut stab, 500.0, 300.0).unwrap();
    assert_eq!(after.desired_replicas, 1);
}

#[test]
fn without_a_forecast_the_live_demand_decides_within_min_and_max() {
    let mut i = input(RoleKind::Decode, demand(200.0, 2_000.0, 500.0, 0.0), None);
    i.max_replicas = 8;
    let d = decide(&i, &mut Stabiliser::default(), 0.0, 0.0).unwrap();
    assert_eq!((d.policy, d.desired_replicas, d.bound), (Policy::Reactive, 8, Some(Bound::MaxReplicas)));
    assert!(d.needed_replicas > 8 && d.reason.contains("capped"), "{}", d.reason);
    let idle = decide(&input(RoleKind::Decode, demand(0.0, 0.0, 0.0, 0.0), None), &mut Stabiliser::default(), 0.0, 0.0)
        .unwrap();
    assert_eq!((idle.desired_replicas, idle.active, idle.bound), (1, false, Some(Bound::MinReplicas)));
}

#[test]
fn a_forecast_with_an_unusable_step_is_set_aside_for_the_live_demand() {
    let live = demand(20.0, 2_000.0, 200.0, 0.0); // prefill 40k / 24k -> 2
    let rate = [20.0, f64::NAN, 90.0];
    let d = decide(&input(RoleKind::Prefill, live, Some(parts(&rate, None))), &mut Stabiliser::default(), 0.0, 0.0)
        .unwrap();
    assert_eq!((d.policy, d.desired_replicas), (Policy::Reactive, 2), "{}", d.reason);
    assert!(d.reason.contains("unusable step"), "{}", d.reason);
    assert!(d.timeline.is_empty());
}
