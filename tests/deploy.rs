//! The manifests in `deploy/` are valid and agree with each other and with
//! the code: the ConfigMap's config loads, ports line up, and every KEDA
//! trigger names a workload Foresight serves with metadata it accepts.

use std::{collections::HashMap, path::Path};

use foresight::{config::Settings, proto::ScaledObjectRef, scaler::metadata};
use serde_yaml_ng::Value;

pub(crate) fn docs() -> Vec<(String, Value)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    let mut out = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                // deploy/local holds Foresight configs, not Kubernetes objects (tests/cli.rs checks them).
                if path.file_name().unwrap() != "local" {
                    stack.push(path);
                }
                continue;
            }
            if path.extension().is_none_or(|e| e != "yaml") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let name = path.strip_prefix(&root).unwrap().display().to_string();
            for (i, doc) in serde_yaml_ng::Deserializer::from_str(&text).enumerate() {
                let v = Value::deserialize(doc).unwrap_or_else(|e| panic!("{name} document {i}: {e}"));
                out.push((format!("{name}#{i}"), v));
            }
        }
    }
    assert!(out.len() >= 8, "expected the shipped manifests, found {}", out.len());
    out
}

use serde::Deserialize;

fn s<'a>(v: &'a Value, path: &str) -> &'a str {
    let mut cur = v;
    for key in path.split('.') {
        cur = match key.parse::<usize>() {
            Ok(i) => &cur[i],
            Err(_) => &cur[key],
        };
    }
    cur.as_str().unwrap_or_else(|| panic!("{path} is not a string in {v:?}"))
}

fn find<'a>(docs: &'a [(String, Value)], kind: &str, ns: &str, name: &str) -> &'a Value {
    docs.iter()
        .map(|(_, v)| v)
        .find(|v| {
            v["kind"].as_str() == Some(kind)
                && v["metadata"]["namespace"].as_str() == Some(ns)
                && v["metadata"]["name"].as_str() == Some(name)
        })
        .unwrap_or_else(|| panic!("no {kind} {ns}/{name} in deploy/"))
}

/// The config Foresight runs with in the shipped ConfigMap.
fn shipped_settings(docs: &[(String, Value)]) -> Settings {
    let cm = find(docs, "ConfigMap", "foresight", "foresight-config");
    let text = cm["data"]["foresight.yaml"].as_str().expect("ConfigMap key foresight.yaml");
    Settings::from_yaml(text, "ConfigMap foresight-config", Path::new("."))
        .unwrap_or_else(|e| panic!("the shipped ConfigMap config is invalid:\n{e}"))
}

#[test]
fn every_document_is_a_named_kubernetes_object() {
    for (name, v) in docs() {
        for field in ["apiVersion", "kind", "metadata.name"] {
            assert!(!s(&v, field).is_empty(), "{name}: {field}");
        }
    }
}

#[test]
fn foresight_deployment_config_and_service_agree() {
    let docs = docs();
    let settings = shipped_settings(&docs);
    let grpc_port = i64::from(settings.grpc.listen.port());
    let http_port = i64::from(settings.http.listen.port());

    let dep = find(&docs, "Deployment", "foresight", "foresight");
    let pod = &dep["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let args: Vec<&str> = c["args"].as_sequence().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    let config_path = args[args.iter().position(|a| *a == "--config").expect("--config in args") + 1];
    let mount = c["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| config_path.starts_with(s(m, "mountPath")))
        .expect("config path is mounted");
    let volume = pod["volumes"].as_sequence().unwrap().iter().find(|v| v["name"] == mount["name"]).unwrap();
    assert_eq!(s(volume, "configMap.name"), "foresight-config");
    assert!(config_path.ends_with("/foresight.yaml"));
    // The history store sits on a writable volume (the root filesystem is read-only).
    let store_dir =
        settings.store.path.as_ref().expect("a persistent store").parent().unwrap().to_str().unwrap().to_string();
    let data = c["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| s(m, "mountPath") == store_dir)
        .expect("store dir is mounted");
    assert!(data["readOnly"].as_bool() != Some(true));

    let ports: HashMap<&str, i64> = c["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|p| (s(p, "name"), p["containerPort"].as_i64().unwrap()))
        .collect();
    assert_eq!(ports["grpc"], grpc_port);
    assert_eq!(ports["http"], http_port);
    // Liveness over HTTP: the gRPC port may require client certificates.
    assert_eq!(s(c, "livenessProbe.httpGet.path"), "/healthz");
    assert_eq!(s(c, "livenessProbe.httpGet.port"), "http");
    assert_eq!(s(c, "readinessProbe.httpGet.path"), "/readyz");

    let svc = find(&docs, "Service", "foresight", "foresight");
    assert_eq!(s(svc, "spec.clusterIP"), "None", "headless, so KEDA balances across pods");
    let selector = &svc["spec"]["selector"];
    assert_eq!(selector, &dep["spec"]["template"]["metadata"]["labels"]);
    let grpc = svc["spec"]["ports"].as_sequence().unwrap().iter().find(|p| p["name"] == "grpc").unwrap();
    assert_eq!(grpc["port"].as_i64(), Some(grpc_port));
}

/// Every ScaledObject, and the one KServe writes for an LLMInferenceService
/// whose `spec.scaling.keda` lists triggers (`<name>-kserve-keda` around the
/// `<name>-kserve` Deployment, bounds from `spec.scaling`).
fn scaled_objects(docs: &[(String, Value)]) -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = docs.iter().filter(|(_, v)| v["kind"] == "ScaledObject").cloned().collect();
    for (name, llm) in docs.iter().filter(|(_, v)| v["kind"] == "LLMInferenceService") {
        let scaling = &llm["spec"]["scaling"];
        if scaling["keda"]["triggers"].is_sequence() {
            let n = s(llm, "metadata.name");
            let so = serde_json::json!({
                "kind": "ScaledObject",
                "metadata": {"name": format!("{n}-kserve-keda"), "namespace": s(llm, "metadata.namespace")},
                "spec": {
                    "scaleTargetRef": {"name": format!("{n}-kserve")},
                    "minReplicaCount": scaling["minReplicas"].as_u64().unwrap_or(1),
                    "maxReplicaCount": scaling["maxReplicas"].as_u64(),
                    "triggers": serde_json::to_value(&scaling["keda"]["triggers"]).unwrap(),
                },
            });
            out.push((format!("{name} (spec.scaling.keda)"), serde_yaml_ng::to_value(so).unwrap()));
        }
    }
    out
}

#[test]
fn every_keda_trigger_names_a_served_workload_with_valid_metadata() {
    let docs = docs();
    let settings = shipped_settings(&docs);
    let svc_port = settings.grpc.listen.port();
    let mut triggers = 0;
    let mut balloons = 0;
    let mut roles = 0;
    for (name, so) in scaled_objects(&docs).iter() {
        let ns = s(so, "metadata.namespace");
        for t in so["spec"]["triggers"].as_sequence().unwrap() {
            let kind = s(t, "type");
            assert!(kind == "external" || kind == "external-push", "{name}: trigger type {kind}");
            let mt = t["metricType"].as_str().unwrap_or("AverageValue");
            assert_eq!(mt, "AverageValue", "{name}: both encodings rely on AverageValue math");
            let md: HashMap<String, String> = t["metadata"]
                .as_mapping()
                .unwrap()
                .iter()
                .map(|(k, v)| {
                    (k.as_str().unwrap().to_string(), v.as_str().expect("metadata values are strings").to_string())
                })
                .collect();
            assert_eq!(md["scalerAddress"], format!("foresight.foresight.svc.cluster.local:{svc_port}"), "{name}");
            let target = metadata::parse_target(&ScaledObjectRef {
                name: s(so, "metadata.name").into(),
                namespace: ns.into(),
                scaler_metadata: md,
            })
            .unwrap_or_else(|e| panic!("{name}: {}", e.message()));
            let q = match target {
                metadata::Target::Workload(q) => q,
                metadata::Target::Pool(pool) => {
                    // A balloon: its pool is planned, and its Deployment asks
                    // for whole nodes of that pool.
                    let p = settings
                        .pools
                        .iter()
                        .find(|p| p.name == pool)
                        .unwrap_or_else(|| panic!("{name}: pool {pool} is not in the shipped config"));
                    let dep = find(&docs, "Deployment", ns, s(so, "spec.scaleTargetRef.name"));
                    let spec = &dep["spec"]["template"]["spec"];
                    assert_eq!(spec["nodeSelector"]["karpenter.sh/nodepool"].as_str(), Some(pool.as_str()), "{name}");
                    let gpus = spec["containers"][0]["resources"]["requests"]["nvidia.com/gpu"].as_u64();
                    assert_eq!(gpus, Some(u64::from(p.gpus_per_node)), "{name}: a balloon holds one whole node");
                    assert_eq!(s(spec, "priorityClassName"), "foresight-balloon", "{name}");
                    balloons += 1;
                    triggers += 1;
                    continue;
                }
            };
            let w = settings
                .workloads
                .iter()
                .find(|w| w.key() == q.key())
                .unwrap_or_else(|| panic!("{name}: workload {} is not in the shipped config", q.key()));
            let min = so["spec"]["minReplicaCount"].as_u64().unwrap_or(0);
            let max = so["spec"]["maxReplicaCount"].as_u64();
            match q.role {
                Some(kind) => {
                    // A role's ScaledObject: the workload declares the role, and the bounds agree.
                    let r = w
                        .roles
                        .iter()
                        .find(|r| r.kind == kind)
                        .unwrap_or_else(|| panic!("{name}: workload {} declares no {kind} role", q.key()));
                    assert_eq!(min, u64::from(r.min_replicas), "{name}: minReplicaCount differs from the role's");
                    assert_eq!(max, Some(u64::from(r.max_replicas)), "{name}: maxReplicaCount differs from the role's");
                    roles += 1;
                }
                None => assert_eq!(
                    min,
                    u64::from(w.min_replicas),
                    "{name}: minReplicaCount differs from Foresight's min_replicas"
                ),
            }
            if let Some(auth) = t["authenticationRef"]["name"].as_str() {
                let ta = find(&docs, "TriggerAuthentication", ns, auth);
                for r in ta["spec"]["secretTargetRef"].as_sequence().unwrap() {
                    assert!(["caCert", "tlsClientCert", "tlsClientKey"].contains(&s(r, "parameter")), "{name}");
                    let secret = find(&docs, "Secret", ns, s(r, "name"));
                    assert!(!secret["stringData"][s(r, "key")].is_null(), "{name}: secret key {}", s(r, "key"));
                }
            }
            triggers += 1;
        }
    }
    assert!(triggers >= 5, "pull, push, mTLS, KServe InferenceService and LLMInferenceService examples");
    assert_eq!(roles, 4, "an llm-d and a KServe prefill/decode pair");
    assert_eq!(balloons, settings.pools.len(), "one balloon per configured pool");
}

#[test]
fn every_capacity_buffer_warms_whole_nodes_of_a_configured_pool() {
    let docs = docs();
    let settings = shipped_settings(&docs);
    let mut buffers = 0;
    for (name, cb) in docs.iter().filter(|(_, v)| v["kind"] == "CapacityBuffer") {
        let ns = s(cb, "metadata.namespace");
        // Named after the pool: the HTTP API's `capacity_buffer_replicas` for
        // pool P is written to CapacityBuffer P.
        let pool = s(cb, "metadata.name");
        let p = settings
            .pools
            .iter()
            .find(|p| p.name == pool)
            .unwrap_or_else(|| panic!("{name}: pool {pool} is not in the shipped config"));
        assert_eq!(cb["spec"]["replicas"].as_u64(), Some(0), "{name}: applying the file alone warms nothing");
        let tpl = find(&docs, "PodTemplate", ns, s(cb, "spec.podTemplateRef.name"));
        let spec = &tpl["template"]["spec"];
        assert_eq!(spec["nodeSelector"]["karpenter.sh/nodepool"].as_str(), Some(pool), "{name}");
        let gpus = spec["containers"][0]["resources"]["requests"]["nvidia.com/gpu"].as_u64();
        assert_eq!(gpus, Some(u64::from(p.gpus_per_node)), "{name}: one chunk is one whole node");
        buffers += 1;
    }
    assert_eq!(buffers, settings.pools.len(), "one CapacityBuffer per configured pool");
    let pc = docs
        .iter()
        .map(|(_, v)| v)
        .find(|v| v["kind"] == "PriorityClass" && v["metadata"]["name"] == "foresight-balloon")
        .expect("the balloons' PriorityClass");
    // Preemptible by every real pod, yet not below cluster-autoscaler's
    // expendable cutoff (-10), under which a pending balloon buys no node.
    assert_eq!(pc["value"].as_i64(), Some(-10));
    assert_eq!(pc["preemptionPolicy"].as_str(), Some("Never"));
}

#[test]
fn the_service_monitor_scrapes_the_foresight_service_http_port() {
    let docs = docs();
    let sm = find(&docs, "ServiceMonitor", "foresight", "foresight");
    let svc = find(&docs, "Service", "foresight", "foresight");
    for (k, v) in sm["spec"]["selector"]["matchLabels"].as_mapping().unwrap() {
        assert_eq!(&svc["metadata"]["labels"][k.as_str().unwrap()], v, "the ServiceMonitor selects the Service");
    }
    let port = s(sm, "spec.endpoints.0.port");
    assert!(svc["spec"]["ports"].as_sequence().unwrap().iter().any(|p| p["name"] == port), "port {port}");
    assert_eq!(s(sm, "spec.endpoints.0.path"), "/metrics");
}

#[test]
fn rbac_binds_the_service_account_and_actuation_names_only_shipped_placeholders() {
    let docs = docs();
    let settings = shipped_settings(&docs);
    let k = settings.kubernetes.as_ref().expect("the shipped config reads the cluster");
    let sa = find(&docs, "ServiceAccount", "foresight", "foresight");
    assert_eq!(sa["automountServiceAccountToken"].as_bool(), Some(true), "in-cluster config needs the token");
    let bindings: Vec<&Value> = docs
        .iter()
        .map(|(_, v)| v)
        .filter(|v| matches!(v["kind"].as_str(), Some("ClusterRoleBinding" | "RoleBinding")))
        .collect();
    assert_eq!(bindings.len(), 2, "read and actuation bindings");
    for b in &bindings {
        assert_eq!(s(b, "subjects.0.name"), "foresight");
        assert_eq!(s(b, "subjects.0.namespace"), "foresight");
        let role_kind = s(b, "roleRef.kind");
        let role_name = s(b, "roleRef.name");
        assert!(
            docs.iter().any(
                |(_, v)| v["kind"].as_str() == Some(role_kind) && v["metadata"]["name"].as_str() == Some(role_name)
            ),
            "{role_kind} {role_name} is bound but not shipped"
        );
    }
    // The actuation Role may patch exactly the placeholders deploy/prewarm ships, and config's targets are among them.
    let role = find(&docs, "Role", "foresight", "foresight-actuation");
    let names = |resource: &str| -> Vec<String> {
        let rule =
            role["rules"].as_sequence().unwrap().iter().find(|r| r["resources"][0].as_str() == Some(resource)).unwrap();
        rule["resourceNames"].as_sequence().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect()
    };
    for name in names("deployments") {
        find(&docs, "Deployment", "foresight", &name);
    }
    for name in names("capacitybuffers") {
        find(&docs, "CapacityBuffer", "foresight", &name);
    }
    for t in &k.actuation.targets {
        let (resource, kind) = match t.kind {
            foresight::cluster::ActuationKind::Balloon => ("deployments", "Deployment"),
            foresight::cluster::ActuationKind::CapacityBuffer => ("capacitybuffers", "CapacityBuffer"),
        };
        assert!(names(resource).contains(&t.name), "config actuates {kind} {} but the Role may not patch it", t.name);
        assert_eq!(t.namespace, "foresight");
        assert!(settings.pools.iter().any(|p| p.name == t.pool), "actuation target for unknown pool {}", t.pool);
    }
}
