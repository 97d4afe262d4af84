//! The KServe example end to end, as far as this machine allows: the fake
//! API server serves what KServe creates for `deploy/kserve/inferenceservice.yaml`
//! (the InferenceService and its `<name>-predictor` Deployment) plus the
//! shipped ScaledObject, and `foresight explain` follows the ScaledObject to
//! the predictor and reads its shape. (The KEDA-like Python client asks for
//! the same workload in `tests/python/test_keda_kserve.py`.)

use std::path::Path;

use serde_json::Value;

use crate::{
    common,
    kube::{FakeKube, TOKEN},
    schemas,
};

/// Foresight's config for the workload, as deploy/k8s/foresight.yaml has it
/// but with a static target for a source (no cluster DNS here; explain
/// reads no metrics).
fn config(dir: &Path, kubeconfig: &Path) -> std::path::PathBuf {
    let yaml = format!(
        r#"store: {{path: null}}
forecast: {{enabled: false}}
pools:
  - {{name: h100-x8, gpu_type: nvidia-h100-80gb, gpus_per_node: 8, capacity_type: on-demand, price_per_node_hour: 98, provisioning_secs: 300, max_nodes: 16}}
workloads:
  - name: llama-8b-kserve
    namespace: inference
    model: llama-3.1-8b-h100
    min_replicas: 1
    source: {{scrape: {{targets: ["http://127.0.0.1:9/metrics"]}}}}
kubernetes:
  kubeconfig: {}
  timeout_secs: 5
"#,
        kubeconfig.display()
    );
    let path = dir.join("foresight.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread")]
async fn explain_follows_the_shipped_scaled_object_to_the_kserve_predictor() {
    let kube = FakeKube::start(&[]).await;
    let so = schemas::objects()
        .into_iter()
        .find(|(name, o)| name.starts_with("kserve/inferenceservice.yaml#") && o["kind"] == "ScaledObject")
        .expect("the shipped ScaledObject")
        .1;
    assert_eq!(so["spec"]["scaleTargetRef"]["name"], "llama-8b-kserve-predictor", "KServe names it <isvc>-predictor");
    kube.fake.objects.lock().unwrap().push(so);

    let dir = tempfile::tempdir().unwrap();
    let kc = kube.kubeconfig(dir.path(), TOKEN);
    let cfg = config(dir.path(), &kc);
    let args: Vec<String> = ["explain", "inference/llama-8b-kserve", "--config", cfg.to_str().unwrap(), "--json"]
        .into_iter()
        .chain(["--kubeconfig", kc.to_str().unwrap()])
        .map(String::from)
        .collect();
    let (code, out, err) =
        tokio::task::spawn_blocking(move || common::run(&args.iter().map(String::as_str).collect::<Vec<_>>()))
            .await
            .unwrap();
    assert_eq!(code, 0, "{err}");
    let e: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(e["kubernetes"], true, "{out}");
    assert_eq!(e["shape_source"], "cluster", "the shape comes from the predictor's pod template: {out}");
    let text = out.to_string();
    assert!(text.contains("ScaledObject inference/llama-8b-kserve"), "{out}");
    assert!(text.contains("Deployment inference/llama-8b-kserve-predictor"), "{out}");
    assert_eq!(e["shape"]["gpus_per_replica"], 1, "{out}");
    assert!(text.contains("containers[kserve-container].resources.limits[nvidia.com/gpu]"), "{out}");
    // The shipped InferenceService tolerates the GPU taint, so the 8-GPU pool can host it.
    assert_eq!(e["prewarm"]["pools"], serde_json::json!([["h100-x8", 1]]), "{out}");
}
