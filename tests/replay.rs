//! The simulator's physics, pinned: what must hold whatever the policy, and
//! the command a user runs.

use crate::common;
use serde::Deserialize;

use foresight::{
    replay::{
        policy::{Fixed, Policy, Reactive, ReactiveSignal, Static},
        shipped::{settings, SettingsInput, Shipped},
        simulate, Capacity, Demand, Oracle, Pool, Run, SimConfig, Synthetic, TokenMix,
    },
    sizing::profile::Profile,
    sources::Signal,
};

/// Foresight as it ships (default settings, the concurrency target), told
/// `p`, having seen `history` (one rate per minute) before `demand`.
fn shipped(p: &Profile, cap: &Capacity, demand: &Demand, history: &[f64]) -> Shipped {
    let start = demand.start - 60 * history.len() as i64;
    let s = settings(
        None,
        &SettingsInput {
            workload: None,
            told: p,
            target: Signal::Concurrency,
            per_replica: 32.0,
            max_replicas: 200,
            quantile: Some(0.9),
            learn_capacity: None,
            spare_horizon_secs: None,
            pool: &pool(p_boot(p)),
            until: demand.start + 60 * demand.minutes() as i64,
            from: start,
        },
    )
    .unwrap();
    Shipped::new("predictive(p90)".into(), &s, history, start, cap).unwrap()
}

fn p_boot(p: &Profile) -> f64 {
    serde_json::to_value(p).unwrap()["cold_start_secs"]["node_boot"].as_f64().unwrap()
}

fn keda(signal: ReactiveSignal, cap: &Capacity) -> Reactive {
    Reactive { signal, cap: cap.clone(), down_secs: 300.0 }
}

/// The 8B profile with a chosen cold start (node boot, then pod start).
fn profile(node_boot: f64, pod_start: f64) -> Profile {
    serde_yaml_ng::from_str(&format!(
        "name: test-8b
gpu_type: nvidia-h100-80gb
gpus_per_replica: 1
concurrency_per_replica: 32
cold_start_secs: {{node_boot: {node_boot}, image_pull: {pod_start}, weights_load: 0}}
slo: {{ttft_secs: 2.0, itl_secs: 0.05}}
generation_tokens_per_sec: 1600
"
    ))
    .unwrap()
}

fn pool(node_boot: f64) -> Pool {
    Pool {
        gpus_per_node: 8,
        provisioning_secs: node_boot,
        price_per_node_hour: 32.0,
        reserved_nodes: 0,
        reserved_price_per_node_hour: 20.0,
    }
}

fn synthetic(days: f64, bursts: f64) -> Demand {
    Synthetic { days, mean_rps: 40.0, bursts_per_day: bursts, seed: 7, ..Synthetic::default() }
        .generate(TokenMix::azure_conversation())
        .unwrap()
}

fn run(demand: &Demand, cold: (f64, f64), cfg: &SimConfig, policy: &mut dyn Policy) -> Run {
    let (p, pl) = (profile(cold.0, cold.1), pool(cold.0));
    let cap = Capacity::new(&p, demand.mix, &pl).unwrap();
    simulate(demand, &cap, &pl, cfg, policy, &mut |_| {}).unwrap()
}

#[test]
fn the_oracle_meets_every_minute_for_no_more_than_a_rule_that_also_does() {
    // Nothing to wait for (no cold start, a decision every step, no HPA
    // damping, exact arrivals): the rate rule all but meets the SLO, and the
    // oracle, the fewest replicas that do, meets every minute for no more GPU-hours.
    let demand = synthetic(1.0, 4.0);
    let cfg = SimConfig { poisson: false, poll_secs: 1.0, rate_window_secs: 1.0, hpa: None, ..SimConfig::default() };
    let cap = Capacity::new(&profile(0.0, 0.0), demand.mix, &pool(0.0)).unwrap();
    let reactive = run(&demand, (0.0, 0.0), &cfg, &mut keda(ReactiveSignal::RequestRate, &cap));
    let oracle = run(&demand, (0.0, 0.0), &cfg, &mut Oracle::new(&demand, &cap, &cfg, 0.0));
    assert!(reactive.report.slo_attainment > 0.999, "{:?}", reactive.report);
    assert_eq!(oracle.report.violation_minutes, 0, "{:?}", oracle.report);
    assert!(oracle.report.gpu_hours <= reactive.report.gpu_hours, "{:?}\n{:?}", oracle.report, reactive.report);
    // With a cold start (and Poisson arrivals) foresight is worth something:
    // the oracle still meets every minute; reacting does not.
    let cfg = SimConfig { hpa: None, ..SimConfig::default() };
    let cap = Capacity::new(&profile(240.0, 210.0), demand.mix, &pool(240.0)).unwrap();
    let reactive = run(&demand, (240.0, 210.0), &cfg, &mut keda(ReactiveSignal::RequestRate, &cap));
    let oracle = run(&demand, (240.0, 210.0), &cfg, &mut Oracle::new(&demand, &cap, &cfg, cap.cold_start_secs()));
    assert_eq!(oracle.report.violation_minutes, 0, "{:?}", oracle.report);
    assert!(
        oracle.report.slo_attainment > reactive.report.slo_attainment + 0.001,
        "{:?}\n{:?}",
        oracle.report,
        reactive.report
    );
}

#[test]
fn the_oracle_covers_dumps_a_perfect_rate_forecast_misses() {
    // 20 req/s on average, but each minute's requests arrive in its first
    // three seconds (a batch client's dump). Sizing the true mean rate, even
    // for G/G/c burstiness, leaves the dump waiting; the oracle plans on
    // the arrivals themselves and meets every minute.
    let minutes = 120;
    let mut per_sec = vec![0.0f32; minutes * 60];
    for m in 0..minutes {
        for s in 0..3 {
            per_sec[m * 60 + s] = 400.0;
        }
    }
    let demand = Demand {
        start: 1_700_000_040,
        rate: vec![20.0; minutes],
        mix: TokenMix::azure_conversation(),
        arrivals: Some(per_sec),
    };
    let cfg = SimConfig { hpa: None, ..SimConfig::default() };
    let cap = Capacity::new(&profile(0.0, 0.0), demand.mix, &pool(0.0)).unwrap();
    let oracle = run(&demand, (0.0, 0.0), &cfg, &mut Oracle::new(&demand, &cap, &cfg, 0.0));
    // The first minute starts from the rate rule's fleet.
    assert!(oracle.report.violation_minutes <= 1, "{:?}", oracle.report);
    let rule = cap.replicas_for(20.0, 400.0 * 3.0 / 20.0);
    let perfect_rate = run(&demand, (0.0, 0.0), &cfg, &mut Fixed(vec![rule; minutes]));
    assert!(perfect_rate.report.violation_minutes > minutes / 2, "{rule} replicas: {:?}", perfect_rate.report);
}

#[test]
fn a_longer_cold_start_never_improves_the_slo() {
    let demand = synthetic(2.0, 3.0);
    let cap = Capacity::new(&profile(0.0, 0.0), demand.mix, &pool(0.0)).unwrap();
    // The same decisions every time: replicas for the rate of the minute before (a lagging schedule).
    let schedule: Vec<u32> =
        (0..demand.minutes()).map(|m| cap.replicas_for_rate(demand.rate[m.saturating_sub(1)])).collect();
    let cfg = SimConfig::default();
    for make in [
        &|_: &Demand, _: &Capacity| -> Box<dyn Policy> { Box::new(Fixed(schedule.clone())) }
            as &dyn Fn(&Demand, &Capacity) -> Box<dyn Policy>,
        &|d: &Demand, c: &Capacity| -> Box<dyn Policy> { Box::new(Static::from_history(&d.rate, c, 1.0)) },
        &|_: &Demand, c: &Capacity| -> Box<dyn Policy> {
            Box::new(keda(ReactiveSignal::Concurrency { target: c.slots, queue: None }, c))
        },
    ] {
        let mut last: Option<(f64, f64, String)> = None;
        for cold in [(0.0, 0.0), (0.0, 60.0), (120.0, 120.0), (240.0, 210.0), (600.0, 300.0)] {
            let mut p = make(&demand, &cap);
            let r = run(&demand, cold, &cfg, p.as_mut()).report;
            if let Some((prev, prev_cold, name)) = &last {
                assert!(
                    r.slo_attainment <= prev + 1e-12,
                    "{name}: cold start {prev_cold} s met {prev}, {} s met {}",
                    cold.0 + cold.1,
                    r.slo_attainment
                );
            }
            last = Some((r.slo_attainment, cold.0 + cold.1, r.policy));
        }
    }
}

#[test]
fn every_request_is_served_dropped_or_still_queued() {
    let demand = synthetic(1.0, 6.0);
    let cap = Capacity::new(&profile(240.0, 210.0), demand.mix, &pool(240.0)).unwrap();
    let policies: Vec<Box<dyn Policy>> = vec![
        Box::new(Static::new(3)),
        Box::new(keda(ReactiveSignal::Concurrency { target: 32.0, queue: None }, &cap)),
        Box::new(shipped(&profile(240.0, 210.0), &cap, &demand, &[])),
        Box::new(Oracle::new(&demand, &cap, &SimConfig::default(), 450.0)),
    ];
    for mut p in policies {
        let r = run(&demand, (240.0, 210.0), &SimConfig::default(), p.as_mut());
        let rep = &r.report;
        let total = rep.served + rep.dropped + rep.queued;
        assert!((total - rep.arrived).abs() <= 1e-6 * rep.arrived, "{}: {total} != {}", rep.policy, rep.arrived);
        let per_minute: f64 = r.timeline.iter().map(|m| m.arrived).sum();
        assert!((per_minute - rep.arrived).abs() <= 1e-6 * rep.arrived);
        assert!(rep.arrived > 0.9 * demand.rate.iter().sum::<f64>() * 60.0);
    }
    // Three replicas for a 40 req/s fleet: the queue overflows and clients give up.
    let starved = run(&demand, (240.0, 210.0), &SimConfig::default(), &mut Static::new(3)).report;
    assert!(starved.dropped > 0.0 && starved.slo_attainment < 0.5, "{starved:?}");
}

#[test]
fn the_predictive_policy_sees_only_the_past() {
    // Two demands equal for the first half day, different after: every decision
    // before the split must be the same.
    let a = synthetic(1.0, 2.0);
    let mut b = a.clone();
    b.rate[720..].iter_mut().for_each(|r| *r *= 3.0);
    let cap = Capacity::new(&profile(240.0, 210.0), a.mix, &pool(240.0)).unwrap();
    let history: Vec<f64> = synthetic(3.0, 2.0).rate[..1440].to_vec();
    let go = |d: &Demand| {
        let mut p = shipped(&profile(240.0, 210.0), &cap, d, &history);
        let pl = pool(240.0);
        simulate(d, &cap, &pl, &SimConfig::default(), &mut p, &mut |_| {}).unwrap()
    };
    let (ra, rb) = (go(&a), go(&b));
    assert_eq!(ra.timeline[..720], rb.timeline[..720]);
    assert_ne!(ra.timeline[780..], rb.timeline[780..]);
}

#[test]
fn simulate_command_writes_a_comparison_notebooks_can_read() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let (code, stdout, stderr) = common::run(&[
        "simulate",
        "--synthetic",
        "--days",
        "2",
        "--warmup",
        "1d",
        "--yardstick-headroom",
        "1,1.5",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    for policy in ["static(", "reactive(concurrency>32, down 300s)", "predictive(p90", "yardstick(x1.50)", "oracle"] {
        assert!(stdout.lines().any(|l| l.starts_with(policy)), "{policy} missing:\n{stdout}");
    }
    assert!(stdout.contains("reactive frontier"), "{stdout}");
    assert!(stdout.contains("Azure conversation token mix stands in"), "a borrowed token mix is named: {stdout}");
    let summary: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    let reports = summary["reports"].as_array().unwrap();
    assert_eq!(reports.len(), 6);
    let gpuh = |name: &str| {
        reports.iter().find(|r| r["policy"].as_str().unwrap().starts_with(name)).unwrap()["gpu_hours"].as_f64().unwrap()
    };
    assert!(gpuh("oracle") < gpuh("static"), "oracle {} vs static {}", gpuh("oracle"), gpuh("static"));
    // Every policy under one cap: 1.5x what the busiest minute needs.
    let cap = summary["max_replicas"].as_u64().unwrap();
    assert!(reports.iter().all(|r| r["max_replicas"].as_u64().unwrap() <= cap), "{reports:?}");
    assert!(summary["reading"]["predictive"][0]["minutes_met"].as_f64().unwrap() > 0.5);
    let timeline = std::fs::read_to_string(out.join("timeline.csv")).unwrap();
    assert_eq!(timeline.lines().count(), 1 + 6 * 1440);

    // Mistakes get a message, not a panic.
    let requests = dir.path().join("requests.csv");
    std::fs::write(&requests, "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,44\n").unwrap();
    let requests = requests.to_str().unwrap().to_string();
    for (args, says) in [
        (vec!["simulate", "--trace", "/nonexistent.csv"], "/nonexistent.csv"),
        (vec!["simulate", "--synthetic", "--days", "2", "--warmup", "3d"], "warm-up"),
        (vec!["simulate", "--synthetic", "--model-profile", "gpt-9"], "gpt-9"),
        (vec!["simulate", "--trace", &requests], "--requests"),
        (
            vec!["simulate", "--synthetic", "--policy", "predictive", "--target-signal", "kv_cache_usage"],
            "kv_cache_usage",
        ),
        (vec!["simulate", "--synthetic", "--target-signal", "nope"], "not a signal"),
        (vec!["simulate", "--synthetic", "--peak-rps", "NaN", "--trace", "x"], "cannot be used with"),
    ] {
        let (code, _, stderr) = common::run(&args);
        assert_eq!(code, if says == "cannot be used with" { 2 } else { 1 }, "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[test]
fn simulate_runs_the_shipped_configs() {
    // The demo's config and the Kubernetes manifest's (its ConfigMap), as `serve` would read them.
    let dir = tempfile::tempdir().unwrap();
    let manifest = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/k8s/foresight.yaml")).unwrap();
    let config = serde_yaml_ng::Deserializer::from_str(&manifest)
        .filter_map(|d| serde_yaml_ng::Value::deserialize(d).ok())
        .find_map(|d| d["data"]["foresight.yaml"].as_str().map(String::from))
        .expect("the manifest's ConfigMap");
    let k8s = dir.path().join("foresight.yaml");
    std::fs::write(&k8s, config).unwrap();
    let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/local/foresight.yaml");
    // Two hours after a day of the generator's demand.
    let short = |more: &[&str]| {
        let mut args = vec!["simulate", "--synthetic", "--days", "2", "--warmup", "1d", "--duration", "2h"];
        args.extend_from_slice(more);
        common::run(&args)
    };
    for (config, workload) in [(demo, "llama-8b"), (k8s.to_str().unwrap(), "llama-8b")] {
        let (code, stdout, stderr) =
            short(&["--config", config, "--workload", workload, "--policy", "predictive,oracle"]);
        assert_eq!(code, 0, "{config}: {stderr}");
        let line = stdout.lines().find(|l| l.starts_with("predictive(p90")).unwrap_or_else(|| panic!("{stdout}"));
        assert!(stdout.contains("capped at 12 replicas") || !config.ends_with("local/foresight.yaml"), "{stdout}");
        assert!(line.split_whitespace().count() > 5, "{line}");
    }
    // Another target than the shipped one: its per-replica figure from the profile.
    let (code, stdout, stderr) = short(&["--policy", "predictive", "--target-signal", "request_rate"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.lines().any(|l| l.starts_with("predictive(p90")), "{stdout}");
    let (code, _, stderr) = common::run(&["simulate", "--synthetic", "--config", demo, "--workload", "nope"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("--workload nope: the config has llama-8b"), "{stderr}");
}
