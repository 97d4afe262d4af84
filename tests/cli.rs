//! The command line as a user meets it: `--help`, `check-config` on good and
//! bad files, and `serve` refusing to start on a bad config.

use crate::common::run;

fn check(yaml: &str) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.yaml");
    std::fs::write(&path, yaml).unwrap();
    let (code, out, err) = run(&["check-config", path.to_str().unwrap()]);
    (code, out, err.replace(path.to_str().unwrap(), "FILE"))
}

const GOOD: &str = "workloads:
  - name: llama-8b
    model: llama-3.1-8b-h100
    target: {signal: concurrency}
    source: {scrape: {targets: [http://10.0.0.5:8000/metrics], interval_secs: 15}}
";

#[test]
fn help_lists_the_commands() {
    let (code, out, _) = run(&["--help"]);
    assert_eq!(code, 0);
    for cmd in ["serve", "check-config"] {
        assert!(out.contains(cmd), "{out}");
    }
}

#[test]
fn a_good_config_is_summarised() {
    let (code, out, err) = check(GOOD);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("workload default/llama-8b: model llama-3.1-8b-h100, replicas 0..=10, sized on concurrency at 32 per replica"), "{out}");
}

#[test]
fn name_model_and_source_are_enough_and_the_assumptions_are_printed() {
    let minimal = "workloads:
  - name: llama-8b
    model: llama-3.1-8b-h100
    source: {scrape: {targets: [http://10.0.0.5:8000/metrics]}}
";
    let (code, out, err) = check(minimal);
    assert_eq!(code, 0, "{err}");
    for line in [
        "sized on concurrency at 32 per replica",
        "assumed target: in-flight requests (`concurrency`)",
        "assumed target.per_replica: 32, the `llama-3.1-8b-h100` profile's concurrency_per_replica",
        "assumed replicas: 0..=10",
    ] {
        assert!(out.contains(line), "missing `{line}` in:\n{out}");
    }
    // What the user states is not reported as assumed.
    let (_, out, _) = check(GOOD);
    assert!(!out.contains("assumed target:") && out.contains("assumed target.per_replica: 32"), "{out}");
}

#[test]
fn the_shipped_demo_config_is_valid() {
    let (code, _, err) = run(&["check-config", concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/local/foresight.yaml")]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn typos_and_wrong_types_name_file_line_and_field() {
    let cases = [
        // an unknown top-level key
        (
            GOOD.replace("workloads:", "tick_intervl_secs: 5\nworkloads:"),
            "FILE:1:1: tick_intervl_secs: unknown field `tick_intervl_secs`, expected one of",
        ),
        // an unknown key inside a workload
        (
            GOOD.replace("    model:", "    modle: x\n    model:"),
            "FILE:3:5: workloads[0].modle: unknown field `modle`, expected one of `name`",
        ),
        // a wrong type
        (
            GOOD.replace("interval_secs: 15", "interval_secs: lots"),
            "FILE:5:79: workloads[0].source.scrape.interval_secs: invalid type: string \"lots\", expected f64",
        ),
        // an unknown signal
        (
            GOOD.replace("signal: concurrency", "signal: qps"),
            "FILE:4:22: workloads[0].target.signal: unknown variant `qps`",
        ),
        // an unknown source kind
        (
            GOOD.replace("{scrape:", "{vllm:"),
            "FILE:5:14: workloads[0].source.vllm: unknown variant `vllm`, expected one of `scrape`, `prometheus`, `simulated`",
        ),
        // a missing required key
        (GOOD.replace("    model: llama-3.1-8b-h100\n", ""), "FILE:2:5: workloads[0]: missing field `model`"),
        // not YAML at all
        ("workloads: [".to_string(), "FILE:2:1: workloads: did not find expected node content"),
    ];
    for (yaml, want) in cases {
        let (code, _, err) = check(&yaml);
        assert_eq!(code, 1, "{yaml}");
        assert!(err.contains(want), "want {want:?} in:\n{err}");
    }
}

#[test]
fn invalid_values_are_all_reported_with_their_field() {
    let yaml = "tick_interval_secs: .nan
workloads:
  - name: Llama_8B
    model: llama-9b
    target: {signal: concurrency}
    source: {scrape: {targets: [http://10.0.0.5:8000/metrics], interval_secs: 15}}
  - name: ok
    model: llama-3.1-8b-h100
    min_replicas: 5
    max_replicas: 2
    signals: [queue_depth]
    target: {signal: concurrency}
    source: {scrape: {targets: [ftp://x], timeout_secs: -1}}
";
    let (code, _, err) = check(yaml);
    assert_eq!(code, 1);
    for want in [
        "FILE: tick_interval_secs: must be within 0.1..=3600, got NaN",
        "FILE: workloads[0].name: `Llama_8B` is not a valid Kubernetes name",
        "FILE: workloads[0].model: unknown model profile `llama-9b`; known: llama-3.1-405b-h100-2node, llama-3.1-70b-h100-tp4, llama-3.1-8b-h100",
        "FILE: workloads[1].min_replicas: 5 exceeds max_replicas 2",
        "FILE: workloads[1].target.signal: `concurrency` is not in this workload's signals",
        "FILE: workloads[1].source.scrape.targets: `ftp://x` is not an http(s) URL",
        "FILE: workloads[1].source.scrape.timeout_secs: must be within 0.05..=300, got -1",
    ] {
        assert!(err.contains(want), "want {want:?} in:\n{err}");
    }
}

#[test]
fn out_of_range_values_are_errors_not_panics() {
    let cases = [
        ("tick_interval_secs: 1e20\n", "tick_interval_secs: must be within 0.1..=3600, got 100000000000000000000"),
        ("defaults: {max_replicas: 4294967295}\n", "workloads[0].max_replicas: must be within 1..=2147483647"),
        // Found by the fuzzer: a NaN duration once panicked before its range check.
        ("store: {flush_interval_secs: .nan}\n", "store.flush_interval_secs: must be within 0.1..=3600, got NaN"),
        (
            "forecast: {refit_interval_secs: .nan}\nsizing: {forecast_only_secs: .nan}\n",
            "sizing.forecast_only_secs: must be within 0..=86400, got NaN",
        ),
    ];
    for (prefix, want) in cases {
        let (code, _, err) = check(&format!("{prefix}{GOOD}"));
        assert_eq!(code, 1, "{prefix}");
        assert!(err.contains(want) && !err.contains("panicked"), "want {want:?} in:\n{err}");
    }
    let (code, _, err) = check(&GOOD.replace("    model:", "    namespace: my.team\n    model:"));
    assert_eq!(code, 1);
    assert!(err.contains("workloads[0].namespace: `my.team` is not a valid Kubernetes name (at most 63"), "{err}");
}

#[test]
fn duplicate_workloads_and_missing_files_are_errors() {
    let dup = format!("{GOOD}{}", &GOOD["workloads:\n".len()..]);
    let (code, _, err) = check(&dup);
    assert_eq!(code, 1);
    assert!(err.contains("workloads[1].name: workload `llama-8b` appears twice in namespace `default`"), "{err}");

    let tls = GOOD.replace("workloads:", "grpc:\n  tls: {cert_file: nope.pem, key_file: nope.key}\nworkloads:");
    let (code, _, err) = check(&tls);
    assert_eq!(code, 1);
    assert!(
        err.contains("grpc.tls.cert_file: no such file:") && err.contains("grpc.tls.key_file: no such file:"),
        "{err}"
    );

    let (code, _, err) = run(&["check-config", "/nonexistent/foresight.yaml"]);
    assert_eq!(code, 1);
    assert!(err.contains("/nonexistent/foresight.yaml: cannot read"), "{err}");
}

#[test]
fn a_bad_profile_in_models_dir_names_its_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("models")).unwrap();
    std::fs::write(
        dir.path().join("models/mine.yaml"),
        "name: mine\ngpu_type: l4\ngpus_per_replica: 3\nnodes_per_replica: 2\nconcurrency_per_replica: 8\ncold_start_secs: {image_pull: 30}\n",
    )
    .unwrap();
    let cfg = dir.path().join("f.yaml");
    std::fs::write(&cfg, format!("models_dir: models\n{}", GOOD.replace("llama-3.1-8b-h100", "mine"))).unwrap();
    let (code, _, err) = run(&["check-config", cfg.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("models/mine.yaml: gpus_per_replica: 3 GPUs cannot be split evenly over 2 nodes"), "{err}");
}

#[test]
fn serve_refuses_a_bad_config_and_needs_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.yaml");
    std::fs::write(&path, GOOD.replace("model:", "modle:")).unwrap();
    let (code, _, err) = run(&["serve", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("unknown field `modle`"), "{err}");
    assert!(!err.contains("panicked"), "{err}");

    let (code, _, err) = run(&["serve"]);
    assert_eq!(code, 2, "clap usage error");
    assert!(err.contains("--config"), "{err}");
}

#[test]
fn bad_pools_reservations_and_sizing_are_all_reported_with_their_field() {
    let yaml = GOOD.replace(
        "workloads:",
        "sizing: {policy: predictve, quantile: 0.95, scale_down_stabilization_secs: -5}
pools:
  - {name: h100, gpu_type: nvidia-h100-80gb, gpus_per_node: 8, nvlink_domain_gpus: 3, capacity_type: reserverd,
     provisioning_secs: 600, price_per_node_hour: .nan}
  - {name: h100, gpu_type: nvidia-h100-80gb, gpus_per_node: 8, capacity_type: spot, provisioning_secs: -1}
reservations:
  - {name: block, pool: h200, nodes: 2, start: 2026-12-01T00:00:00Z, end: 2026-12-31}
  - {name: late, pool: h100, nodes: 2, start: 2026-12-02T00:00:00Z, end: 2026-12-01T00:00:00Z}
workloads:",
    );
    let (code, _, err) = check(&yaml);
    assert_eq!(code, 1);
    for want in [
        "FILE: sizing.policy: must be `predictive` or `reactive`, got `predictve`",
        "FILE: sizing.quantile: 0.95 is not one of forecast.quantiles",
        "FILE: sizing.scale_down_stabilization_secs: must be within 0..=86400, got -5",
        "FILE: pools[0].nvlink_domain_gpus: 3 must be at least 1 and divide gpus_per_node 8",
        "FILE: pools[0].capacity_type: must be `reserved`, `on-demand` or `spot`, got `reserverd`",
        "FILE: pools[0].price_per_node_hour: must be a finite number >= 0, got NaN",
        "FILE: pools[1].name: pool `h100` appears twice",
        "FILE: pools[1].provisioning_secs: must be within 0..=86400, got -1",
        "FILE: reservations[0].pool: unknown pool `h200`; pools: h100",
        "FILE: reservations[0].end: `2026-12-31` is not an RFC 3339 time",
        "FILE: reservations[1].end: 2026-12-01T00:00:00Z is not after start 2026-12-02T00:00:00Z",
    ] {
        assert!(err.contains(want), "want {want:?} in:\n{err}");
    }
}

#[test]
fn kubernetes_settings_are_checked_like_the_rest() {
    let yaml = format!(
        "{GOOD}kubernetes:
  kubeconfig: no-such-kubeconfig
  refresh_secs: 0
  discovered_pools: {{price_per_node_hour: {{spott: 1}}}}
  actuation: {{mode: always, balloons: [{{pool: a, namespace: '', name: b}}]}}
"
    );
    // An unknown key inside `kubernetes:` is located like any typo.
    let (code, _, err) = check(&yaml.replace("  refresh_secs: 0", "  refresh_sec: 0"));
    assert_eq!(code, 1);
    assert!(err.contains("kubernetes.refresh_sec: unknown field `refresh_sec`"), "{err}");
    let (code, _, err) = check(&yaml);
    assert_eq!(code, 1);
    for want in [
        "kubernetes.refresh_secs: must be within 1..=86400, got 0",
        "kubernetes.kubeconfig: no such file:",
        "kubernetes.discovered_pools.price_per_node_hour.spott: capacity type must be `reserved`, `on-demand` or `spot`",
        "kubernetes.actuation.mode: must be `off`, `dry-run` or `apply`, got `always`",
        "kubernetes.actuation.balloons[0]: needs `namespace` and `name`",
    ] {
        assert!(err.contains(want), "want {want:?} in:\n{err}");
    }
    let (code, out, err) = check(&format!("{GOOD}kubernetes: {{}}\n"));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("kubernetes  on (in-cluster or $KUBECONFIG), every 30s; actuation Off on 0 object(s)"),
        "{out}"
    );
}

const ROLES: &str = "workloads:
  - name: llama-8b
    model: llama-3.1-8b-h100
    max_replicas: 12
    target: {signal: concurrency}
    roles:
      prefill: {max_replicas: 4}
      decode: {model: llama-3.1-70b-h100-tp4, min_replicas: 1}
    source: {scrape: {targets: [http://10.0.0.5:8000/metrics], interval_secs: 15}}
";

#[test]
fn roles_are_summarised_with_their_metric_bounds_and_what_sizes_them() {
    let (code, out, err) = check(ROLES);
    assert_eq!(code, 0, "{err}");
    for want in [
        "    role prefill: metric foresight-llama-8b-prefill-replicas, model llama-3.1-8b-h100, replicas 0..=4, sized on uncached prompt tokens/s at 24000 per replica",
        "    role decode: metric foresight-llama-8b-decode-replicas, model llama-3.1-70b-h100-tp4, replicas 1..=12, sized on sequences at 24 per replica, KV cache 400000 tokens, 600 generated tokens/s",
    ] {
        assert!(out.contains(want), "want {want:?} in:\n{out}");
    }
}

#[test]
fn bad_roles_name_the_role_and_field() {
    let cases = [
        (ROLES.replace("prefill: {max", "prefil: {max"), "unknown variant `prefil`, expected `prefill` or `decode`"),
        (ROLES.replace("{max_replicas: 4}", "{max_replicas: 4, shape: {gpus_per_replica: 3, nodes_per_replica: 2}}"),
            "workloads[0].roles.prefill.shape: gpus_per_replica (3) must be a multiple of nodes_per_replica (2)"),
        (ROLES.replace("{max_replicas: 4}", "{max_replicas: 4, min_replicas: 5}"), "workloads[0].roles.prefill.min_replicas: 5 exceeds max_replicas 4"),
        (ROLES.replace("model: llama-3.1-70b-h100-tp4", "model: llama-9b"), "workloads[0].roles.decode.model: unknown model profile `llama-9b`"),
        (ROLES.replace("    target:", "    signals: [concurrency, request_rate]\n    target:"),
            "workloads[0].signals: must include `prompt_tokens_per_request`: roles are sized on request rate and lengths"),
    ];
    for (yaml, want) in cases {
        let (code, _, err) = check(&yaml);
        assert_eq!(code, 1, "{yaml}");
        assert!(err.contains(want), "want {want:?} in:\n{err}");
    }
}

#[test]
fn a_prefill_role_needs_a_profile_that_states_its_prefill_rate() {
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    std::fs::create_dir(&models).unwrap();
    std::fs::write(
        models.join("small.yaml"),
        "name: small\ngpu_type: nvidia-l4\ngpus_per_replica: 1\nconcurrency_per_replica: 8\n\
         cold_start_secs: {image_pull: 60}\nslo: {ttft_secs: 1, itl_secs: 0.05}\n",
    )
    .unwrap();
    let yaml = format!("models_dir: models\n{}", ROLES.replace("model: llama-3.1-8b-h100", "model: small"));
    let path = dir.path().join("f.yaml");
    std::fs::write(&path, yaml).unwrap();
    let (code, _, err) = run(&["check-config", path.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        err.contains("workloads[0].roles.prefill.model: profile `small` states no prefill_tokens_per_sec, which a prefill role is sized on"),
        "{err}"
    );
}

#[test]
fn compare_roles_sizes_a_servegen_token_mix_three_ways() {
    // tests/fixtures/servegen: window 0 has 12 req/s (10 of 1,200-token prompts and 2 of 12,000)
    // -> prefill 1.5, decode 1.375 (44 sequences of 32): time-share 3, P/D 2 + 2, in-flight 2;
    // window 1 has 5 req/s of 1,200 -> 1, 1 + 1, 1. One GPU, a sixth of an hour each.
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/servegen/m-x");
    let (code, out, err) = run(&["compare-roles", "--servegen", dir, "--json"]);
    assert_eq!(code, 0, "{err}");
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    let fleet = &rows[0];
    assert_eq!(fleet["deployment"], "m-x fleet (2 clients)");
    let h = |k: &str| fleet[k].as_f64().unwrap() * 6.0;
    assert!((h("in_flight_gpu_hours") - 3.0).abs() < 1e-9, "{fleet}");
    assert!((h("time_share_gpu_hours") - 4.0).abs() < 1e-9, "{fleet}");
    assert!((h("prefill_gpu_hours") - 3.0).abs() < 1e-9 && (h("decode_gpu_hours") - 3.0).abs() < 1e-9, "{fleet}");
    assert_eq!(fleet["in_flight_short_windows"], 1);
    // Then each client alone, busiest first.
    assert_eq!(rows[1]["deployment"], "m-x client 1");
    assert_eq!(rows.as_array().unwrap().len(), 3);
    let (code, table, _) = run(&["compare-roles", "--servegen", dir]);
    assert_eq!(code, 0);
    assert!(table.contains("time-share") && table.contains("m-x client 2"), "{table}");
    let (code, _, err) = run(&["compare-roles", "--servegen", "/nonexistent"]);
    assert_eq!(code, 1);
    assert!(err.contains("/nonexistent"), "{err}");
}

#[test]
fn spare_horizons_are_checked() {
    let yaml = format!("sizing: {{spare_horizons_secs: [60, 3600, 100000]}}\n{GOOD}");
    let (code, _, err) = check(&yaml);
    assert_eq!(code, 1);
    assert!(
        err.contains("sizing.spare_horizons_secs: must list at most 4 lease lengths, each within 600..=86400, got [60, 3600, 100000]"),
        "{err}"
    );
    let (code, _, err) = check(&format!("sizing: {{spare_horizons_secs: []}}\n{GOOD}"));
    assert_eq!(code, 0, "{err}");
}

#[test]
fn a_report_whose_reader_goes_away_ends_quietly() {
    // `foresight check-config f.yaml | head -1`: the pipe closes before or while it prints.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.yaml");
    std::fs::write(&path, GOOD).unwrap();
    let mut child = std::process::Command::new(crate::common::bin())
        .args(["check-config", path.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
}
