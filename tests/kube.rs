//! Kubernetes inputs against a fake API server on 127.0.0.1 that serves the
//! objects in `tests/fixtures/k8s/` the way an API server does (lists,
//! gets, label selectors, merge patches, 404 Status for what it does not
//! serve, 401 without the kubeconfig's token). kube-rs reaches it through a
//! kubeconfig, exactly as it would a cluster.

use std::{
    collections::BTreeSet,
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    body::Bytes,
    http::{HeaderMap, Method, StatusCode, Uri},
    response::IntoResponse,
    Json,
};
use foresight::{
    capacity::{self, Demand, PlanInput},
    cluster::{self, actuate, client, ShapeSource},
    config::Settings,
};
use serde_json::{json, Value};

use crate::common;

pub(crate) const TOKEN: &str = "fixture-token-3b9e";

/// A request the fake served: (API group, resource, verb).
type Verb = (String, String, String);

#[derive(Clone)]
pub(crate) struct Fake {
    pub(crate) objects: Arc<Mutex<Vec<Value>>>,
    requests: Arc<Mutex<Vec<Verb>>>,
    /// API groups answered with 404, as a cluster without that CRD or feature.
    missing: Arc<Vec<String>>,
}

pub(crate) struct FakeKube {
    addr: SocketAddr,
    pub(crate) fake: Fake,
}

fn fixtures() -> Vec<Value> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/k8s");
    let mut out = Vec::new();
    for f in ["nodes.yaml", "resourceslices.yaml", "inference.yaml", "foresight.yaml", "kserve.yaml"] {
        let text = std::fs::read_to_string(dir.join(f)).unwrap();
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            let v: Value = serde::Deserialize::deserialize(doc).unwrap();
            out.push(v);
        }
    }
    out
}

impl FakeKube {
    pub(crate) async fn start(missing: &[&str]) -> FakeKube {
        let fake = Fake {
            objects: Arc::new(Mutex::new(fixtures())),
            requests: Arc::new(Mutex::new(Vec::new())),
            missing: Arc::new(missing.iter().map(|s| s.to_string()).collect()),
        };
        let f = fake.clone();
        let app = axum::Router::new().fallback(move |m: Method, uri: Uri, h: HeaderMap, body: Bytes| {
            let f = f.clone();
            async move { serve(&f, m, uri, h, body) }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        FakeKube { addr, fake }
    }

    pub(crate) fn kubeconfig(&self, dir: &Path, token: &str) -> PathBuf {
        kubeconfig_for(&format!("http://{}", self.addr), dir, token)
    }

    fn verbs(&self) -> BTreeSet<Verb> {
        self.fake.requests.lock().unwrap().iter().cloned().collect()
    }

    fn object(&self, kind: &str, ns: &str, name: &str) -> Value {
        let objs = self.fake.objects.lock().unwrap();
        objs.iter()
            .find(|o| o["kind"] == kind && o["metadata"]["namespace"] == ns && o["metadata"]["name"] == name)
            .unwrap()
            .clone()
    }
}

fn kubeconfig_for(server: &str, dir: &Path, token: &str) -> PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {server}\ncontexts:\n- name: fake\n  context: {{cluster: fake, user: foresight}}\ncurrent-context: fake\nusers:\n- name: foresight\n  user:\n    token: {token}\n"
        ),
    )
    .unwrap();
    path
}

fn status(code: StatusCode, reason: &str, message: String) -> axum::response::Response {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code.as_u16()});
    (code, Json(body)).into_response()
}

fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

fn serve(f: &Fake, method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> axum::response::Response {
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(&format!("Bearer {TOKEN}")) {
        return status(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized".into());
    }
    let segs: Vec<&str> = uri.path().trim_matches('/').split('/').collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => {
            return status(StatusCode::NOT_FOUND, "NotFound", "the server could not find the requested resource".into())
        }
    };
    let (ns, plural, name) = match rest {
        ["namespaces", ns, plural] => (Some(*ns), *plural, None),
        ["namespaces", ns, plural, name] => (Some(*ns), *plural, Some(*name)),
        [plural] => (None, *plural, None),
        [plural, name] => (None, *plural, Some(*name)),
        _ => {
            return status(StatusCode::NOT_FOUND, "NotFound", "the server could not find the requested resource".into())
        }
    };
    if f.missing.iter().any(|m| m == group) {
        return status(StatusCode::NOT_FOUND, "NotFound", "the server could not find the requested resource".into());
    }
    let verb = match (&method, name) {
        (&Method::GET, Some(_)) => "get",
        (&Method::GET, None) => "list",
        (&Method::PATCH, Some(_)) => "patch",
        _ => return status(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", format!("{method} is not served here")),
    };
    f.requests.lock().unwrap().push((group.to_string(), plural.to_string(), verb.to_string()));
    let api_version = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    let selector: Vec<(String, String)> = uri
        .query()
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter_map(|kv| kv.strip_prefix("labelSelector="))
        .flat_map(|s| {
            let s = s.replace("%3D", "=").replace("%2C", ",").replace("%2F", "/");
            s.split(',')
                .filter_map(|p| p.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
                .collect::<Vec<_>>()
        })
        .collect();
    let matches = |o: &Value| {
        o["apiVersion"] == api_version.as_str()
            && format!("{}s", o["kind"].as_str().unwrap_or("").to_ascii_lowercase()) == plural
            && ns.is_none_or(|n| o["metadata"]["namespace"] == n)
            && name.is_none_or(|n| o["metadata"]["name"] == n)
            && selector.iter().all(|(k, v)| o["metadata"]["labels"][k] == v.as_str())
    };
    let mut objs = f.objects.lock().unwrap();
    match verb {
        "list" => {
            let items: Vec<Value> = objs.iter().filter(|o| matches(o)).cloned().collect();
            let kind = items.first().and_then(|o| o["kind"].as_str()).unwrap_or("Object").to_string();
            Json(json!({"apiVersion": api_version, "kind": format!("{kind}List"), "metadata": {"resourceVersion": "1"}, "items": items})).into_response()
        }
        _ => {
            let Some(o) = objs.iter_mut().find(|o| matches(o)) else {
                return status(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    format!("{plural} \"{}\" not found", name.unwrap_or("")),
                );
            };
            if verb == "patch" {
                let ct = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("");
                if ct != "application/merge-patch+json" {
                    return status(
                        StatusCode::UNSUPPORTED_MEDIA_TYPE,
                        "UnsupportedMediaType",
                        format!("patch type {ct}"),
                    );
                }
                let p: Value = serde_json::from_slice(&body).unwrap();
                merge(o, &p);
            }
            Json(o.clone()).into_response()
        }
    }
}

/// The team's profile: "TP-8", written down as two 4-GPU halves.
const PROFILE: &str = "name: llama-70b-tp8\ngpu_type: nvidia-h100-80gb\ngpus_per_replica: 8\nnodes_per_replica: 2\nconcurrency_per_replica: 24\ncold_start_secs: {node_boot: 240, image_pull: 120, weights_load: 240}\n";

fn config(dir: &Path, kube: Option<(&Path, &str)>) -> PathBuf {
    std::fs::create_dir_all(dir.join("models")).unwrap();
    std::fs::write(dir.join("models/tp8.yaml"), PROFILE).unwrap();
    let kubernetes = match kube {
        None => String::new(),
        Some((kc, mode)) => format!(
            r#"kubernetes:
  kubeconfig: {}
  refresh_secs: 1
  timeout_secs: 5
  gpu: {{nvlink_domain_attributes: [gpu.nvidia.com/nvlinkDomain]}}
  node_labels: {{rack: example.com/rack}}
  discovered_pools: {{price_per_node_hour: {{spot: 1.2}}}}
  actuation:
    mode: {mode}
    balloons: [{{pool: h100-x8, namespace: foresight, name: balloon-h100-x8}}]
    capacity_buffers: [{{pool: h100-x4, namespace: foresight, name: h100-x4}}]
"#,
            kc.display()
        ),
    };
    let sim = |seed: u32, rps: u32| {
        format!("source: {{simulated: {{interval_secs: 1, fleet: {{pods: 2, max_num_seqs: 64, demand: {{requests_per_sec: {rps}, daily_amplitude: 0.0, day_length_secs: 600, seed: {seed}}}}}}}}}")
    };
    let yaml = format!(
        r#"grpc: {{listen: "127.0.0.1:0"}}
http: {{listen: "127.0.0.1:0"}}
tick_interval_secs: 0.5
models_dir: models
store: {{path: null}}
forecast: {{enabled: false}}
pools:
  - {{name: h100-x4, gpu_type: nvidia-h100-80gb, gpus_per_node: 4, capacity_type: spot, price_per_node_hour: 40, provisioning_secs: 300, max_nodes: 16}}
  - {{name: h100-x8, gpu_type: nvidia-h100-80gb, gpus_per_node: 8, capacity_type: on-demand, price_per_node_hour: 98, provisioning_secs: 300, max_nodes: 16}}
workloads:
  - name: llama-tp8
    namespace: inference
    model: llama-70b-tp8
    min_replicas: 2
    target: {{signal: concurrency}}
    {}
  - name: llama-8b
    namespace: inference
    model: llama-3.1-8b-h100
    target: {{signal: concurrency}}
    {}
  - name: llama-405b
    namespace: inference
    model: llama-3.1-405b-h100-2node
    target: {{signal: concurrency}}
    {}
  - name: embed
    namespace: inference
    model: llama-3.1-8b-h100
    target: {{signal: concurrency}}
    {}
{kubernetes}"#,
        sim(1, 20),
        sim(2, 5),
        sim(3, 5),
        sim(4, 5)
    );
    let path = dir.join("foresight.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread")]
async fn shapes_pools_and_pending_pods_come_from_the_cluster_objects() {
    let kube = FakeKube::start(&[]).await;
    let dir = tempfile::tempdir().unwrap();
    let kc = kube.kubeconfig(dir.path(), TOKEN);
    let settings = Settings::load(&config(dir.path(), Some((&kc, "apply")))).unwrap();
    let k = settings.kubernetes.as_ref().unwrap();
    let c = client::connect(k).await.unwrap();
    let snap = client::read(&c, &settings.workloads, k, 1_700_000_000).await;
    assert!(snap.errors.is_empty(), "{:?}", snap.errors);
    let v = cluster::view(&settings.pools, &settings.workloads, k, &snap);

    // TP-8: 8 GPUs from the claim, on one node, in one NVLink domain; the profile's 2 x 4 is overruled and reported.
    let tp8 = &v.workloads["inference/llama-tp8"];
    assert_eq!(tp8.error, None);
    assert_eq!(tp8.shape_source, ShapeSource::Cluster);
    assert_eq!((tp8.shape.gpus_per_replica, tp8.shape.nodes_per_replica), (8, 1));
    assert_eq!(tp8.scaled_object.as_deref(), Some("ScaledObject inference/llama-tp8"));
    let d = tp8.derived.as_ref().unwrap();
    assert!(d.one_nvlink_domain);
    assert_eq!(d.gpu_product.as_deref(), Some("NVIDIA H100 80GB HBM3"));
    let from: Vec<&str> = d.facts.iter().map(|f| f.from.as_str()).collect();
    assert!(
        from.contains(&"ResourceClaimTemplate inference/tp8-one-nvlink spec.spec.devices.requests[0].exactly.count"),
        "{from:?}"
    );
    assert!(
        from.contains(
            &"ResourceClaimTemplate inference/tp8-one-nvlink spec.spec.devices.constraints[0].matchAttribute"
        ),
        "{from:?}"
    );
    assert_eq!(tp8.replicas.map(|r| (r.desired, r.current, r.ready)), Some((2, 2, 1)));
    assert_eq!(tp8.pending.len(), 1);
    assert_eq!(tp8.pending[0].reason, "Unschedulable");
    assert!(tp8.pending[0].message.contains("cannot allocate all claims"));
    let nodes_dis =
        tp8.disagreements.iter().find(|d| d.field == "nodes_per_replica").expect("profile vs claim reported");
    assert_eq!((nodes_dis.config.as_str(), nodes_dis.cluster.as_str(), nodes_dis.used.as_str()), ("2", "1", "cluster"));

    // Device plugin + node selector: one GPU, only on h100-x4.
    let small = &v.workloads["inference/llama-8b"];
    assert_eq!((small.shape.gpus_per_replica, small.shape.nodes_per_replica), (1, 1));
    assert_eq!(small.shape.gpu_type, "NVIDIA-H100-80GB-HBM3");
    assert_eq!(small.replicas.map(|r| r.desired), Some(1), "no spec.replicas means 1");
    // LeaderWorkerSet: a group of 2 pods x 8 GPUs.
    let lws = &v.workloads["inference/llama-405b"];
    assert_eq!(lws.target.as_deref(), Some("LeaderWorkerSet inference/llama-405b"));
    assert_eq!((lws.shape.gpus_per_replica, lws.shape.nodes_per_replica), (16, 2));
    assert!(lws.shape.exclusive_rack, "its exclusive-topology annotation: one group per rack");

    // StatefulSet: 2 GPUs a pod, tolerating everything.
    let embed = &v.workloads["inference/embed"];
    assert_eq!(embed.target.as_deref(), Some("StatefulSet inference/embed-vllm"));
    assert_eq!((embed.shape.gpus_per_replica, embed.replicas.map(|r| r.ready)), (2, Some(3)));

    // Pools from node labels, allocatable and ResourceSlices.
    let found = |name: &str| {
        v.discovered
            .iter()
            .find(|p| p.name == name)
            .unwrap_or_else(|| panic!("{name} not discovered: {:?}", v.discovered))
    };
    let x4 = found("h100-x4");
    assert_eq!((x4.nodes, x4.gpus_per_node, x4.nvlink_domain_gpus), (2, Some(4), None));
    assert_eq!(x4.taints.len(), 1);
    assert!(!x4.labels.contains_key("topology.kubernetes.io/zone"), "zones differ between its nodes");
    let x8 = found("h100-x8");
    assert_eq!(
        (x8.gpus_per_node, x8.nvlink_domain_gpus, x8.nodes_per_rack),
        (Some(8), Some(8), Some(1)),
        "DRA devices, not the NIC's"
    );
    assert_eq!(found("l4-spot").label, "cloud.google.com/gke-nodepool");
    assert_eq!(v.discovered.len(), 3, "the CPU node is no pool");
    let l4 = v.pools.iter().find(|p| p.name == "l4-spot").expect("a priced discovered pool is planned");
    assert_eq!((l4.gpus_per_node, l4.price_per_node_hour, l4.capacity_type.as_str()), (1, 1.2, "spot"));
    // Config wins, and says so.
    let ct = v.disagreements.iter().find(|d| d.subject == "pool h100-x4" && d.field == "capacity_type").unwrap();
    assert_eq!((ct.config.as_str(), ct.cluster.as_str(), ct.used.as_str()), ("spot", "on-demand", "config"));

    // The packer sees the cluster's shape: the 4-GPU pool cannot host TP-8.
    let x4_pool = v.pools.iter().find(|p| p.name == "h100-x4").unwrap();
    let why = x4_pool.parts_per_node(&tp8.shape).unwrap_err().to_string();
    assert!(why.contains("needs 8 GPUs in one NVLink domain"), "{why}");
    let x8_pool = v.pools.iter().find(|p| p.name == "h100-x8").unwrap();
    let why = x8_pool.parts_per_node(&small.shape).unwrap_err().to_string();
    assert!(why.contains("karpenter.sh/nodepool=h100-x4"), "node selector keeps llama-8b off h100-x8: {why}");
    assert!(x4_pool.parts_per_node(&small.shape).is_ok(), "tolerates the GPU taint");

    // Actuation writes the plan's buffer nodes; the RBAC in deploy/ covers exactly the verbs used.
    let demands = [Demand {
        workload: "inference/llama-tp8".into(),
        shape: tp8.shape.clone(),
        replicas: vec![2],
        pod_start_secs: 0.0,
        running: 0,
    }];
    let plan = capacity::plan(PlanInput {
        now: 0,
        step_secs: 60,
        steps: 1,
        pools: &v.pools,
        reservations: &[],
        demands: &demands,
    });
    let warm: Vec<(&str, u32)> =
        plan.pools.iter().filter(|p| p.warm_nodes > 0).map(|p| (p.name.as_str(), p.warm_nodes)).collect();
    assert_eq!(warm, [("h100-x8", 2)]);
    let changes = actuate::run(&c, &k.actuation, Some(&plan), k.timeout).await;
    let by: Vec<(&str, Option<u32>, Option<u32>, &str)> =
        changes.iter().map(|c| (c.object.as_str(), c.current, c.desired, c.action.as_str())).collect();
    assert_eq!(
        by,
        [
            ("Deployment foresight/balloon-h100-x8", Some(0), Some(2), "patched"),
            ("CapacityBuffer foresight/h100-x4", Some(3), Some(0), "patched")
        ]
    );
    assert_eq!(kube.object("Deployment", "foresight", "balloon-h100-x8")["spec"]["replicas"], 2);
    assert_eq!(kube.object("CapacityBuffer", "foresight", "h100-x4")["spec"]["replicas"], 0);
    assert_eq!(
        kube.object("CapacityBuffer", "foresight", "h100-x4")["spec"]["podTemplateRef"]["name"],
        "warm-node-h100-x4",
        "a merge patch leaves the rest"
    );

    let used = kube.verbs();
    let (read_only, actuation) = rbac_rules();
    for (_, _, verb) in &read_only {
        assert!(["get", "list", "watch"].contains(&verb.as_str()), "the read-only role grants `{verb}`");
    }
    let granted: BTreeSet<Verb> = read_only.union(&actuation).cloned().collect();
    let unused: Vec<&Verb> = granted.difference(&used).collect();
    let ungranted: Vec<&Verb> = used.difference(&granted).collect();
    assert!(unused.is_empty(), "deploy/k8s grants verbs the code never uses: {unused:?}");
    assert!(ungranted.is_empty(), "the code uses verbs deploy/k8s does not grant: {ungranted:?}");
}

/// (group, resource, verb) granted by deploy/k8s/rbac.yaml and by rbac-actuation.yaml.
fn rbac_rules() -> (BTreeSet<Verb>, BTreeSet<Verb>) {
    let read = |file: &str| -> BTreeSet<Verb> {
        let text =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/k8s").join(file)).unwrap();
        let mut out = BTreeSet::new();
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            let v: serde_yaml_ng::Value = serde::Deserialize::deserialize(doc).unwrap();
            let kind = v["kind"].as_str().unwrap_or("");
            if kind != "ClusterRole" && kind != "Role" {
                continue;
            }
            for rule in v["rules"].as_sequence().unwrap() {
                let list = |k: &str| -> Vec<String> {
                    rule[k].as_sequence().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect()
                };
                for g in list("apiGroups") {
                    for r in list("resources") {
                        for verb in list("verbs") {
                            out.insert((g.clone(), r.clone(), verb));
                        }
                    }
                }
            }
        }
        assert!(!out.is_empty(), "{file} grants nothing");
        out
    };
    (read("rbac.yaml"), read("rbac-actuation.yaml"))
}

/// The seed failure: a TP-8 model written down as 2 x 4 GPUs. From config
/// alone Foresight warms the cheaper 4-GPU pool, where the scheduler will
/// refuse the claim; reading the claim, it warms the 8-GPU pool only and
/// says why the 4-GPU pool cannot serve.
#[tokio::test(flavor = "multi_thread")]
async fn tp8_claim_prewarms_only_the_8_gpu_pool_and_explains_why() {
    let kube = FakeKube::start(&[]).await;
    let dir = tempfile::tempdir().unwrap();
    let kc = kube.kubeconfig(dir.path(), TOKEN);
    let cfg = config(dir.path(), None);
    let cfg_s = cfg.to_str().unwrap().to_string();
    let kc_s = kc.to_str().unwrap().to_string();
    let run = |args: Vec<String>| {
        tokio::task::spawn_blocking(move || common::run(&args.iter().map(String::as_str).collect::<Vec<_>>()))
    };

    let base = vec![
        "explain".to_string(),
        "inference/llama-tp8".into(),
        "--config".into(),
        cfg_s.clone(),
        "--replicas".into(),
        "2".into(),
    ];
    let (code, out, err) = run([base.clone(), vec!["--json".into()]].concat()).await.unwrap();
    assert_eq!(code, 0, "{err}");
    let blind: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(blind["kubernetes"], false);
    assert_eq!(blind["shape_source"], "profile");
    assert_eq!(blind["prewarm"]["pools"], json!([["h100-x4", 4]]), "from config alone the 4-GPU pool looks cheapest");

    let (code, out, err) =
        run([base.clone(), vec!["--json".into(), "--kubeconfig".into(), kc_s.clone()]].concat()).await.unwrap();
    assert_eq!(code, 0, "{err}");
    let seen: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(seen["kubernetes"], true);
    assert_eq!(seen["shape_source"], "cluster");
    assert_eq!(seen["prewarm"]["pools"], json!([["h100-x8", 2]]), "{out}");
    let x4 = seen["pools"].as_array().unwrap().iter().find(|p| p["pool"] == "h100-x4").unwrap();
    assert_eq!(x4["per_node"], Value::Null);
    assert_eq!(x4["why_not"], "needs 8 GPUs in one NVLink domain, the pool's domains have 4");
    let summary =
        seen["summary"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect::<Vec<_>>().join("\n");
    assert!(summary.contains("Pool h100-x4 cannot: needs 8 GPUs in one NVLink domain"), "{summary}");
    assert!(summary.contains("1 pod(s) pending on a healthy cluster"), "{summary}");
    assert!(summary.contains("capacity must come from h100-x8"), "{summary}");

    // The human form says the same, with the object each part came from.
    let (code, out, err) = run([base, vec!["--kubeconfig".into(), kc_s]].concat()).await.unwrap();
    assert_eq!(code, 0, "{err}");
    eprintln!("{out}");
    assert!(out.contains("h100-x4              cannot:   needs 8 GPUs in one NVLink domain"), "{out}");
    assert!(
        out.contains(
            "<- ResourceClaimTemplate inference/tp8-one-nvlink spec.spec.devices.constraints[0].matchAttribute"
        ),
        "{out}"
    );
    assert!(out.contains("pre-warm for 2 replica(s): h100-x8: 2 node(s)"), "{out}");
}

/// `serve` plans with the cluster's shapes, explains over HTTP, reports the
/// cluster, and in dry-run shows the change without making it.
#[tokio::test(flavor = "multi_thread")]
async fn serve_plans_with_the_cluster_and_dry_run_changes_nothing() {
    let kube = FakeKube::start(&[]).await;
    let dir = tempfile::tempdir().unwrap();
    let kc = kube.kubeconfig(dir.path(), TOKEN);
    let yaml = std::fs::read_to_string(config(dir.path(), Some((&kc, "dry-run")))).unwrap();
    let d = dir.path().to_path_buf();
    let server = tokio::task::spawn_blocking(move || common::Server::start(&d, &yaml)).await.unwrap();
    let base = format!("http://{}", server.http);
    let get = |path: String| async move { reqwest::get(path).await.unwrap().json::<Value>().await.unwrap() };

    let mut cluster = Value::Null;
    for _ in 0..100 {
        cluster = get(format!("{base}/api/v1/cluster")).await;
        let acts = cluster["actuation"].as_array().cloned().unwrap_or_default();
        if acts.iter().any(|a| a["action"] == "would-patch") {
            let plan = get(format!("{base}/api/v1/plan")).await;
            let tp8 =
                plan["workloads"].as_array().unwrap().iter().find(|w| w["workload"] == "inference/llama-tp8").cloned();
            if tp8.is_some_and(|w| {
                w["placement"].as_array().unwrap().iter().any(|p| p[0] == "h100-x8" && p[1].as_u64() > Some(0))
            }) {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let plan = get(format!("{base}/api/v1/plan")).await;
    let tp8 = plan["workloads"].as_array().unwrap().iter().find(|w| w["workload"] == "inference/llama-tp8").unwrap();
    for (pool, n) in
        tp8["placement"].as_array().unwrap().iter().map(|p| (p[0].as_str().unwrap(), p[1].as_u64().unwrap()))
    {
        assert!(pool == "h100-x8" || n == 0, "TP-8 placed on {pool}: {plan}");
    }
    assert!(tp8["excluded"].to_string().contains("needs 8 GPUs in one NVLink domain"), "{tp8}");
    let pools: Vec<&str> = cluster["pools"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(pools, ["h100-x4", "h100-x8", "l4-spot"]);
    let acts = cluster["actuation"].as_array().unwrap();
    assert!(acts.iter().all(|a| a["action"] == "would-patch" || a["action"] == "unchanged"), "{acts:?}");
    assert!(acts.iter().all(|a| a["desired"].is_u64() && a["error"].is_null()), "{acts:?}");
    assert!(
        acts.iter().any(|a| a["object"] == "CapacityBuffer foresight/h100-x4" && a["action"] == "would-patch"),
        "{acts:?}"
    );
    assert!(!kube.verbs().iter().any(|(_, _, v)| v == "patch"), "dry-run patched");
    assert_eq!(kube.object("Deployment", "foresight", "balloon-h100-x8")["spec"]["replicas"], 0);

    let e = get(format!("{base}/api/v1/workloads/llama-tp8/explain?namespace=inference")).await;
    assert_eq!(e["shape_source"], "cluster");
    assert_eq!(e["shape"]["gpus_per_replica"], 8);
    assert_eq!(e["pending"][0]["reason"], "Unschedulable");
    assert!(e["placement"]["placement"].is_array(), "{e}");
    let pools_api = get(format!("{base}/api/v1/pools")).await;
    assert!(pools_api.to_string().contains("l4-spot"), "discovered pools are served like configured ones");
}

/// What goes wrong on the way to the cluster is reported, and the scaler keeps planning from config.
#[tokio::test(flavor = "multi_thread")]
async fn a_missing_crd_a_wrong_token_or_no_api_server_fall_back_to_config() {
    // KEDA's CRD is not installed.
    let kube = FakeKube::start(&["keda.sh"]).await;
    let dir = tempfile::tempdir().unwrap();
    let kc = kube.kubeconfig(dir.path(), TOKEN);
    let settings = Settings::load(&config(dir.path(), Some((&kc, "off")))).unwrap();
    let k = settings.kubernetes.as_ref().unwrap();
    let c = client::connect(k).await.unwrap();
    let v = cluster::view(&settings.pools, &settings.workloads, k, &client::read(&c, &settings.workloads, k, 0).await);
    let tp8 = &v.workloads["inference/llama-tp8"];
    assert_eq!(tp8.shape_source, ShapeSource::Profile);
    assert_eq!(tp8.error.as_deref(), Some("KEDA's ScaledObject API (keda.sh/v1alpha1) is not served"));
    assert_eq!((tp8.shape.gpus_per_replica, tp8.shape.nodes_per_replica), (8, 2));
    assert_eq!(v.discovered.len(), 3, "nodes are still read");
    assert!(kube.verbs().iter().all(|(_, _, verb)| verb != "patch"), "actuation off");

    // A token the API server refuses.
    let kc = kube.kubeconfig(dir.path(), "wrong");
    let settings = Settings::load(&config(dir.path(), Some((&kc, "off")))).unwrap();
    let k = settings.kubernetes.as_ref().unwrap();
    let c = client::connect(k).await.unwrap();
    let snap = client::read(&c, &settings.workloads, k, 0).await;
    assert!(snap.errors.iter().any(|e| e.starts_with("listing Nodes: 401")), "{:?}", snap.errors);
    let v = cluster::view(&settings.pools, &settings.workloads, k, &snap);
    assert_eq!(v.pools.len(), 2, "config pools stand");
    assert!(v.workloads.values().all(|w| w.shape_source == ShapeSource::Profile));

    // No API server at all: the CLI says so and explains from config.
    let closed = common::ClosedPort::new("/");
    let kc = kubeconfig_for(closed.url.trim_end_matches('/'), dir.path(), TOKEN);
    let cfg = config(dir.path(), None);
    let args = ["explain", "llama-tp8", "--config", cfg.to_str().unwrap(), "--kubeconfig", kc.to_str().unwrap()]
        .map(String::from);
    let (code, out, err) =
        tokio::task::spawn_blocking(move || common::run(&args.iter().map(String::as_str).collect::<Vec<_>>()))
            .await
            .unwrap();
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("warning: listing Nodes"), "{err}");
    assert!(out.contains("[profile]"), "{out}");
}
