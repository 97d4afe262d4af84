//! The reader and the deriver on small bodies in each spelling vLLM's
//! exposition takes. Bodies captured from vLLM 0.34's own metrics code are
//! tested end to end in `tests/vllm_real.rs`.

use super::*;
use crate::sources::exposition::{parse, Format};
use crate::sources::Invalid;
use std::time::Duration;

fn reading(text: &str, at: u64) -> Reading {
    reading_as(text, Format::Text, at)
}

fn reading_as(text: &str, format: Format, at: u64) -> Reading {
    let fams = parse(text, format).unwrap();
    read(&fams, SystemTime::UNIX_EPOCH + Duration::from_secs(at), None).unwrap()
}

fn body(success: u64, prompt: u64, running: u32, waiting: u32, created: f64) -> String {
    format!(
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{engine=\"0\",model_name=\"m\"}} {running}.0\n\
         # TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{{engine=\"0\",model_name=\"m\"}} {waiting}.0\n\
         # TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{{engine=\"0\",model_name=\"m\"}} {prompt}.0\n\
         # TYPE vllm:prompt_tokens_created gauge\nvllm:prompt_tokens_created{{engine=\"0\",model_name=\"m\"}} {created}\n\
         # TYPE vllm:request_success_total counter\n\
         vllm:request_success_total{{engine=\"0\",finished_reason=\"stop\",model_name=\"m\"}} {success}.0\n\
         # TYPE vllm:time_to_first_token_seconds histogram\n\
         vllm:time_to_first_token_seconds_bucket{{engine=\"0\",le=\"0.1\",model_name=\"m\"}} {}.0\n\
         vllm:time_to_first_token_seconds_bucket{{engine=\"0\",le=\"1.0\",model_name=\"m\"}} {success}.0\n\
         vllm:time_to_first_token_seconds_bucket{{engine=\"0\",le=\"+Inf\",model_name=\"m\"}} {success}.0\n\
         vllm:time_to_first_token_seconds_count{{engine=\"0\",model_name=\"m\"}} {success}.0\n\
         vllm:time_to_first_token_seconds_sum{{engine=\"0\",model_name=\"m\"}} 1.0\n",
        success / 2
    )
}

#[test]
fn rates_sum_across_pods_and_survive_a_restart() {
    let mut d = Deriver::default();
    let first = d.round(vec![
        ("a".into(), reading(&body(100, 1000, 3, 1, 1.0), 0)),
        ("b".into(), reading(&body(50, 500, 2, 0, 1.0), 0)),
    ]);
    assert_eq!(first.get(Signal::Concurrency), Some(6.0));
    assert_eq!(first.get(Signal::RequestRate), None, "no rate from a single reading");
    // a: +20 req, +300 tokens in 10 s; b restarted (new _created) and counted 5 since.
    let second = d.round(vec![
        ("a".into(), reading(&body(120, 1300, 1, 0, 1.0), 10)),
        ("b".into(), reading(&body(5, 40, 1, 0, 9.0), 10)),
    ]);
    assert_eq!(second.get(Signal::RequestRate), Some(2.5));
    assert_eq!(second.get(Signal::PromptTokensRate), Some(34.0));
    assert_eq!(second.get(Signal::Running), Some(2.0));
    // b fell without a _created change: also a reset.
    let third = d.round(vec![("b".into(), reading(&body(2, 10, 0, 0, 9.0), 20))]);
    assert_eq!(third.get(Signal::RequestRate), Some(0.2));
}

#[test]
fn quantiles_come_from_the_observations_between_scrapes() {
    let mut d = Deriver::default();
    d.round(vec![("a".into(), reading(&body(100, 0, 0, 0, 1.0), 0))]);
    let s = d.round(vec![("a".into(), reading(&body(200, 0, 0, 0, 1.0), 10))]);
    // 100 new observations: 50 <= 0.1 s, 50 in (0.1, 1.0].
    assert_eq!(s.get(Signal::TtftP50), Some(0.1));
    let p90 = s.get(Signal::TtftP90).unwrap();
    assert!((p90 - (0.1 + 0.9 * 0.8)).abs() < 1e-9, "{p90}");
    let idle = d.round(vec![("a".into(), reading(&body(200, 0, 0, 0, 1.0), 20))]);
    assert_eq!(idle.get(Signal::TtftP50), None, "nothing observed: missing, not zero");
}

#[test]
fn old_names_and_kserve_are_understood() {
    let old = "# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{model_name=\"m\"} 0.25\n";
    let mut d = Deriver::default();
    assert_eq!(d.round(vec![("a".into(), reading(old, 0))]).get(Signal::KvCacheUsage), Some(0.25));
    let kserve = |n: u64| {
        format!(
            "# TYPE request_predict_seconds histogram\nrequest_predict_seconds_bucket{{le=\"0.5\",model_name=\"m\"}} {n}\n\
             request_predict_seconds_bucket{{le=\"+Inf\",model_name=\"m\"}} {n}\nrequest_predict_seconds_count{{model_name=\"m\"}} {n}\n\
             request_predict_seconds_sum{{model_name=\"m\"}} 1.0\n"
        )
    };
    let mut d = Deriver::default();
    d.round(vec![("k".into(), reading(&kserve(10), 0))]);
    let s = d.round(vec![("k".into(), reading(&kserve(40), 10))]);
    assert_eq!(s.get(Signal::RequestRate), Some(3.0));
    assert_eq!(s.get(Signal::E2eP50), Some(0.25));
}

#[test]
fn unrelated_metrics_are_an_error_and_a_model_filter_applies() {
    let fams = parse("# TYPE go_goroutines gauge\ngo_goroutines 12\n", Format::Text).unwrap();
    assert!(read(&fams, SystemTime::UNIX_EPOCH, None).is_err());
    let text = body(1, 1, 1, 1, 1.0);
    let fams = parse(&text, Format::Text).unwrap();
    let e = read(&fams, SystemTime::UNIX_EPOCH, Some("other")).unwrap_err();
    assert_eq!(e.to_string(), "no vLLM or KServe metrics in the response for model_name `other`");
}

/// The same pod in the three spellings prometheus_client and Prometheus give.
fn spellings(success: u64, running: u32) -> [(String, Format); 3] {
    let om_underscores = format!(
        "# TYPE vllm:num_requests_running gauge\nvllm_num_requests_running{{engine=\"0\",model_name=\"m\"}} {running}.0\n\
         # TYPE vllm:request_success counter\n\
         vllm_request_success_total{{engine=\"0\",finished_reason=\"stop\",model_name=\"m\"}} {success}.0\n\
         vllm_request_success_created{{engine=\"0\",finished_reason=\"stop\",model_name=\"m\"}} 1.0\n# EOF\n"
    );
    let om_utf8 = om_underscores.replace("vllm_", "vllm:");
    // What a Prometheus 2.x federation endpoint serves: escaped names, no TYPE lines.
    let bare = format!(
        "vllm_num_requests_running{{engine=\"0\",model_name=\"m\"}} {running}\n\
         vllm_request_success_total{{engine=\"0\",finished_reason=\"stop\",model_name=\"m\"}} {success}\n"
    );
    [(om_underscores, Format::OpenMetrics), (om_utf8, Format::OpenMetrics), (bare, Format::Text)]
}

#[test]
fn every_spelling_reads_as_the_vllm_family() {
    for k in 0..3 {
        let mut d = Deriver::default();
        let (b0, f0) = &spellings(100, 4)[k];
        let (b1, f1) = &spellings(130, 5)[k];
        d.round(vec![("a".into(), reading_as(b0, *f0, 0))]);
        let s = d.round(vec![("a".into(), reading_as(b1, *f1, 10))]);
        assert_eq!(s.get(Signal::Running), Some(5.0), "spelling {k}");
        assert_eq!(s.get(Signal::RequestRate), Some(3.0), "spelling {k}");
    }
}

/// vLLM 0.34's families in text format, one engine.
fn v034(
    success: u64,
    rejected: u64,
    awake: bool,
    waiting: (u32, u32),
    queue_le: [u64; 3],
    lengths: (f64, f64, u64),
) -> String {
    let (capacity, deferred) = waiting;
    let (prompt_sum, gen_sum, n) = lengths;
    let [q01, q1, qinf] = queue_le;
    format!(
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{engine=\"0\",model_name=\"m\"}} 2.0\n\
         # TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{{engine=\"0\",model_name=\"m\"}} {}.0\n\
         # TYPE vllm:num_requests_waiting_by_reason gauge\n\
         vllm:num_requests_waiting_by_reason{{engine=\"0\",model_name=\"m\",reason=\"capacity\"}} {capacity}.0\n\
         vllm:num_requests_waiting_by_reason{{engine=\"0\",model_name=\"m\",reason=\"deferred\"}} {deferred}.0\n\
         # TYPE vllm:engine_sleep_state gauge\n\
         vllm:engine_sleep_state{{engine=\"0\",model_name=\"m\",sleep_state=\"awake\"}} {}\n\
         vllm:engine_sleep_state{{engine=\"0\",model_name=\"m\",sleep_state=\"weights_offloaded\"}} {}\n\
         # TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{{engine=\"0\",model_name=\"m\"}} 0.5\n\
         # TYPE vllm:request_success_total counter\n\
         vllm:request_success_total{{engine=\"0\",finished_reason=\"stop\",model_name=\"m\"}} {success}.0\n\
         # TYPE vllm:admission_rejections_total counter\n\
         vllm:admission_rejections_total{{model_name=\"m\",reason=\"max_num_queued_reqs\"}} {rejected}.0\n\
         # TYPE vllm:prefix_cache_queries_total counter\nvllm:prefix_cache_queries_total{{engine=\"0\",model_name=\"m\"}} {}.0\n\
         # TYPE vllm:prefix_cache_hits_total counter\nvllm:prefix_cache_hits_total{{engine=\"0\",model_name=\"m\"}} {}.0\n\
         # TYPE vllm:request_queue_time_seconds histogram\n\
         vllm:request_queue_time_seconds_bucket{{engine=\"0\",le=\"0.1\",model_name=\"m\"}} {q01}.0\n\
         vllm:request_queue_time_seconds_bucket{{engine=\"0\",le=\"1.0\",model_name=\"m\"}} {q1}.0\n\
         vllm:request_queue_time_seconds_bucket{{engine=\"0\",le=\"+Inf\",model_name=\"m\"}} {qinf}.0\n\
         vllm:request_queue_time_seconds_count{{engine=\"0\",model_name=\"m\"}} {qinf}.0\n\
         vllm:request_queue_time_seconds_sum{{engine=\"0\",model_name=\"m\"}} 1.0\n\
         # TYPE vllm:request_prompt_tokens histogram\n\
         vllm:request_prompt_tokens_bucket{{engine=\"0\",le=\"+Inf\",model_name=\"m\"}} {n}.0\n\
         vllm:request_prompt_tokens_count{{engine=\"0\",model_name=\"m\"}} {n}.0\n\
         vllm:request_prompt_tokens_sum{{engine=\"0\",model_name=\"m\"}} {prompt_sum}\n\
         # TYPE vllm:request_generation_tokens histogram\n\
         vllm:request_generation_tokens_bucket{{engine=\"0\",le=\"+Inf\",model_name=\"m\"}} {n}.0\n\
         vllm:request_generation_tokens_count{{engine=\"0\",model_name=\"m\"}} {n}.0\n\
         vllm:request_generation_tokens_sum{{engine=\"0\",model_name=\"m\"}} {gen_sum}\n",
        capacity + deferred,
        u8::from(awake),
        u8::from(!awake),
        success * 1000,
        success * 300,
    )
}

#[test]
fn vllm_034_signals_are_derived() {
    let mut d = Deriver::default();
    d.round(vec![("a".into(), reading(&v034(100, 10, true, (3, 2), [0, 0, 0], (0.0, 0.0, 0)), 0))]);
    let s = d
        .round(vec![("a".into(), reading(&v034(150, 30, true, (3, 2), [50, 90, 100], (80_000.0, 20_000.0, 100)), 10))]);
    // 50 finished and 20 refused in 10 s: demand is 7/s, of which 2/s refused.
    assert_eq!(s.get(Signal::RequestRate), Some(7.0));
    assert_eq!(s.get(Signal::RejectionRate), Some(2.0));
    // Deferred requests are in flight but not queued for capacity.
    assert_eq!(s.get(Signal::QueueDepth), Some(3.0));
    assert_eq!(s.get(Signal::QueueDeferred), Some(2.0));
    assert_eq!(s.get(Signal::Concurrency), Some(7.0));
    assert_eq!(s.get(Signal::QueueWaitP50), Some(0.1));
    let p90 = s.get(Signal::QueueWaitP90).unwrap();
    assert!((p90 - 1.0).abs() < 1e-9, "{p90}");
    assert_eq!(s.get(Signal::PromptTokensPerRequest), Some(800.0));
    assert_eq!(s.get(Signal::GenerationTokensPerRequest), Some(200.0));
    assert_eq!(s.get(Signal::PrefixCacheHitFraction), Some(0.3));
    assert_eq!(s.get(Signal::KvCacheUsage), Some(0.5));
}

#[test]
fn a_sleeping_engine_is_not_serving() {
    let awake = reading(&v034(1, 0, true, (0, 0), [0, 0, 0], (0.0, 0.0, 0)), 0);
    let asleep = reading(&v034(1, 0, false, (0, 0), [0, 0, 0], (0.0, 0.0, 0)), 0);
    assert!(!awake.is_asleep() && asleep.is_asleep());
    // Older vLLM has no sleep family: awake.
    assert!(!reading(&body(1, 1, 1, 1, 1.0), 0).is_asleep());
    // Its KV cache does not drag the fleet's mean down.
    let mut d = Deriver::default();
    let s = d.round(vec![("a".into(), awake), ("b".into(), asleep)]);
    assert_eq!(s.get(Signal::KvCacheUsage), Some(0.5));
}

#[test]
fn counters_without_created_reset_when_they_fall() {
    // vLLM with --api-server-count > 1 exposes no `_created`.
    let c = |n: u64| {
        format!("# TYPE vllm:request_success_total counter\nvllm:request_success_total{{model_name=\"m\"}} {n}\n")
    };
    let mut d = Deriver::default();
    d.round(vec![("a".into(), reading(&c(500), 0))]);
    assert_eq!(d.round(vec![("a".into(), reading(&c(520), 10))]).get(Signal::RequestRate), Some(2.0));
    assert_eq!(d.round(vec![("a".into(), reading(&c(30), 20))]).get(Signal::RequestRate), Some(3.0));
    // Histogram means restart with their count too.
    let h = |n: u64, sum: f64| {
        format!(
            "# TYPE vllm:request_prompt_tokens histogram\nvllm:request_prompt_tokens_bucket{{le=\"+Inf\",model_name=\"m\"}} {n}\n\
             vllm:request_prompt_tokens_count{{model_name=\"m\"}} {n}\nvllm:request_prompt_tokens_sum{{model_name=\"m\"}} {sum}\n"
        )
    };
    let mut d = Deriver::default();
    d.round(vec![("a".into(), reading(&h(1000, 1e6), 0))]);
    assert_eq!(
        d.round(vec![("a".into(), reading(&h(10, 5000.0), 10))]).get(Signal::PromptTokensPerRequest),
        Some(500.0)
    );
}

#[test]
fn older_prefix_cache_names_are_read_when_the_new_ones_are_absent() {
    let old = |q: u64, h: u64| {
        format!(
            "# TYPE vllm:gpu_prefix_cache_queries_total counter\nvllm:gpu_prefix_cache_queries_total{{model_name=\"m\"}} {q}\n\
             # TYPE vllm:gpu_prefix_cache_hits_total counter\nvllm:gpu_prefix_cache_hits_total{{model_name=\"m\"}} {h}\n"
        )
    };
    let mut d = Deriver::default();
    d.round(vec![("a".into(), reading(&old(100, 10), 0))]);
    assert_eq!(d.round(vec![("a".into(), reading(&old(300, 110), 10))]).get(Signal::PrefixCacheHitFraction), Some(0.5));
    // A release that serves both names counts the cache once, under the new ones.
    let both = |q: u64, h: u64| {
        format!(
            "{}# TYPE vllm:prefix_cache_queries_total counter\nvllm:prefix_cache_queries_total{{model_name=\"m\"}} {q}\n\
             # TYPE vllm:prefix_cache_hits_total counter\nvllm:prefix_cache_hits_total{{model_name=\"m\"}} {h}\n",
            old(q, h)
        )
    };
    let mut d = Deriver::default();
    d.round(vec![("a".into(), reading(&both(100, 10), 0))]);
    assert_eq!(
        d.round(vec![("a".into(), reading(&both(200, 35), 10))]).get(Signal::PrefixCacheHitFraction),
        Some(0.25)
    );
}

/// An inter-token latency histogram under `name` with `fast` of `n` tokens within 0.025 s.
fn itl(name: &str, fast: u64, n: u64) -> String {
    format!(
        "# TYPE {name} histogram\n\
         {name}_bucket{{engine=\"0\",le=\"0.025\",model_name=\"m\"}} {fast}.0\n\
         {name}_bucket{{engine=\"0\",le=\"0.05\",model_name=\"m\"}} {n}.0\n\
         {name}_bucket{{engine=\"0\",le=\"+Inf\",model_name=\"m\"}} {n}.0\n\
         {name}_count{{engine=\"0\",model_name=\"m\"}} {n}.0\n\
         {name}_sum{{engine=\"0\",model_name=\"m\"}} 1.0\n"
    )
}

#[test]
fn inter_token_latency_is_read_under_either_name_the_new_one_first() {
    let new = "vllm:inter_token_latency_seconds";
    let old = "vllm:time_per_output_token_seconds";
    let p90 = |first: String, second: String| {
        let mut d = Deriver::default();
        d.round(vec![("a".into(), reading(&first, 0))]);
        d.round(vec![("a".into(), reading(&second, 10))]).get(Signal::ItlP90)
    };
    // 1,000 tokens since the last poll, all within 0.025 s: p90 interpolates to 0.0225.
    let all_fast = p90(itl(new, 0, 0), itl(new, 1000, 1000)).unwrap();
    assert!((all_fast - 0.0225).abs() < 1e-9, "{all_fast}");
    // Half past 0.025 s: p90 lands in the next bucket.
    let slow = p90(itl(old, 0, 0), itl(old, 500, 1000)).unwrap();
    assert!((slow - 0.045).abs() < 1e-9, "{slow}");
    // Both served: the new name's wins.
    let both = p90(itl(new, 0, 0) + &itl(old, 0, 0), itl(new, 1000, 1000) + &itl(old, 500, 1000)).unwrap();
    assert!((both - 0.0225).abs() < 1e-9, "{both}");
    // No tokens since the last poll: missing, not zero.
    assert_eq!(p90(itl(new, 5, 5), itl(new, 5, 5)), None);
}

#[test]
fn one_pods_kv_share_out_of_range_is_not_averaged_into_range() {
    let kv = |v: &str| {
        format!(
            "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{{engine=\"0\",model_name=\"m\"}} {v}\n"
        )
    };
    let mut d = Deriver::default();
    let sane = d.round(vec![("a".into(), reading(&kv("0.1"), 0)), ("b".into(), reading(&kv("0.5"), 0))]);
    assert_eq!(sane.get(Signal::KvCacheUsage), Some(0.3));
    // 1.8 and 0.1 average to 0.95, which would pass: each pod is checked on its own.
    let bad = d.round(vec![("a".into(), reading(&kv("0.1"), 10)), ("b".into(), reading(&kv("1.8"), 10))]);
    assert_eq!(bad.get(Signal::KvCacheUsage), None);
    assert_eq!(bad.invalid().get(&Signal::KvCacheUsage), Some(&Invalid::Implausible));
}

#[test]
fn a_nan_created_is_no_restart_and_gives_no_lifetime_rate() {
    let mut d = Deriver::default();
    d.round(vec![("a".into(), reading(&body(1_000_000, 0, 1, 0, f64::NAN), 0))]);
    let r = d.round(vec![("a".into(), reading(&body(1_000_010, 0, 1, 0, f64::NAN), 10))]);
    // 10 more requests in 10 s, not the counter's whole million.
    assert_eq!(r.get(Signal::RequestRate), Some(1.0));
}
