"""The KServe example through the KEDA-like client: the trigger metadata of
the shipped ScaledObject (deploy/kserve/inferenceservice.yaml), sent as KEDA
sends it, against `foresight serve` with the shipped workload entry
(deploy/k8s/foresight.yaml) scraping two predictor pods' /metrics, where
KServe's own histograms sit beside vLLM's families."""

import math
import pathlib

import yaml

from test_keda_client import KedaLikeClient

ROOT = pathlib.Path(__file__).resolve().parents[2]


def shipped_scaled_object():
    docs = yaml.safe_load_all((ROOT / "deploy" / "kserve" / "inferenceservice.yaml").read_text())
    return next(d for d in docs if d["kind"] == "ScaledObject")


def shipped_workload(name):
    docs = yaml.safe_load_all((ROOT / "deploy" / "k8s" / "foresight.yaml").read_text())
    cm = next(d for d in docs if d["kind"] == "ConfigMap")
    config = yaml.safe_load(cm["data"]["foresight.yaml"])
    return next(w for w in config["workloads"] if w["name"] == name)


def test_the_shipped_kserve_trigger_gets_answers(pb, foresight, fake_vllm):
    so = shipped_scaled_object()
    md = so["spec"]["triggers"][0]["metadata"]
    w = shipped_workload(md["workload"])
    # The cluster's DNS is not here: the same entry, scraping two predictor pods' bodies.
    target = f"{fake_vllm}/kserve-llama-8b.txt"
    w["source"] = {"scrape": {"targets": [target, target], "interval_secs": 0.2}}
    config = {
        "grpc": {"listen": "127.0.0.1:0"},
        "http": {"listen": "127.0.0.1:0"},
        "tick_interval_secs": 0.2,
        "store": {"path": None},
        "workloads": [w],
    }
    f = foresight(yaml.safe_dump(config))
    c = KedaLikeClient(pb, f.grpc)
    try:
        ref = c.pb2.ScaledObjectRef(
            name=so["metadata"]["name"],
            namespace=so["metadata"]["namespace"],
            scalerMetadata={**md, "scalerAddress": f.grpc},
        )
        specs = c.stub.GetMetricSpec(ref, timeout=3.0).metricSpecs
        assert len(specs) == 1
        req = c.pb2.GetMetricsRequest(scaledObjectRef=ref, metricName=specs[0].metricName)
        value = c.stub.GetMetrics(req, timeout=3.0).metricValues[0]
        replicas = value.metricValueFloat if value.metricValueFloat > 0 else value.metricValue
        # 2 pods x (50 running + 30 waiting) = 160 in flight, 32 per replica (the profile's default).
        assert replicas == math.ceil(160 / 32), replicas
        assert c.stub.IsActive(ref, timeout=3.0).result
    finally:
        c.channel.close()
