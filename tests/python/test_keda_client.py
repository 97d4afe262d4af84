"""Foresight against an independent peer that behaves like KEDA's external
scaler client: Python grpcio stubs compiled at test time from our proto, the
metadata KEDA forwards (scalerAddress included), GetMetricSpec, then
GetMetrics + IsActive under a 3 s deadline, and KEDA's rule of reading the
float field when it is > 0 and the int field otherwise."""

import math
import pathlib

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

DEADLINE = 3.0  # the HPA path's timeout in KEDA

CONFIG = (pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "known-answers.yaml").read_text()


def keda_number(float_value, int_value):
    """KEDA: use the float if > 0, else the int; quantise to milli; NaN, Inf
    and negatives become 0."""
    v = float_value if float_value > 0 else float(int_value)
    if math.isnan(v) or math.isinf(v) or v < 0:
        return 0.0
    return round(v, 3)


class KedaLikeClient:
    def __init__(self, pb, address):
        self.pb2, grpc_mod = pb
        self.address = address
        self.channel = grpc.insecure_channel(address)
        self.stub = grpc_mod.ExternalScalerStub(self.channel)

    def ref(self, workload, **extra):
        # KEDA forwards every trigger metadata entry, scalerAddress included.
        md = {"scalerAddress": self.address, "workload": workload, **extra}
        return self.pb2.ScaledObjectRef(name=f"{workload}-so", namespace="inference", scalerMetadata=md)

    def poll(self, workload, **extra):
        """One KEDA poll: spec, then metrics + activity. Returns
        (metric name, value, target, active, HPA desired replicas)."""
        ref = self.ref(workload, **extra)
        specs = self.stub.GetMetricSpec(ref, timeout=DEADLINE).metricSpecs
        assert len(specs) == 1, "KEDA rejects an empty spec list"
        spec = specs[0]
        assert spec.metricName == spec.metricName.lower()
        target = keda_number(spec.targetSizeFloat, spec.targetSize)
        req = self.pb2.GetMetricsRequest(scaledObjectRef=ref, metricName=spec.metricName)
        values = self.stub.GetMetrics(req, timeout=DEADLINE).metricValues
        assert [v.metricName for v in values] == [spec.metricName]
        value = keda_number(values[0].metricValueFloat, values[0].metricValue)
        active = self.stub.IsActive(ref, timeout=DEADLINE).result
        # HPA AverageValue: desired = ceil(value / target)
        desired = math.ceil(value / target) if target > 0 else 0
        return spec.metricName, value, target, active, desired


@pytest.fixture
def client(pb, foresight, fake_vllm):
    f = foresight(CONFIG.replace("{{METRICS}}", fake_vllm))
    c = KedaLikeClient(pb, f.grpc)
    yield c
    c.channel.close()


def test_replicas_encoding_gives_the_hpa_the_answer(client):
    assert client.poll("llama-8b") == ("foresight-llama-8b-replicas", 4.0, 1.0, True, 4)


def test_load_encoding_gives_the_same_replicas_through_hpa_math(client):
    name, value, target, active, desired = client.poll("llama-8b", encoding="load")
    assert (name, value, target, active) == ("foresight-llama-8b-concurrency", 100.0, 32.0, True)
    assert desired == client.poll("llama-8b")[4] == 4


def test_zero_demand_reads_as_zero_and_inactive(client):
    # metricValueFloat is 0.0, so KEDA reads the int field: it must be 0 too.
    assert client.poll("idle") == ("foresight-idle-replicas", 0.0, 1.0, False, 0)


def test_fractional_load_survives_keda_rounding(client):
    # metricValue (int) is 0 here; KEDA must read metricValueFloat, which is > 0.
    assert client.poll("fractional", encoding="load") == ("foresight-fractional-kv-cache-usage", 0.3, 0.25, True, 2)


def test_metric_names_match_case_insensitively(client):
    ref = client.ref("llama-8b")
    req = client.pb2.GetMetricsRequest(scaledObjectRef=ref, metricName="FORESIGHT-Llama-8B-Replicas")
    assert client.stub.GetMetrics(req, timeout=DEADLINE).metricValues[0].metricValueFloat == 4.0


def test_unknown_workload_is_not_found_and_named(client):
    with pytest.raises(grpc.RpcError) as e:
        client.stub.GetMetricSpec(client.ref("llama-9b"), timeout=DEADLINE)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    assert "llama-9b" in e.value.details()


def test_missing_workload_key_is_invalid_argument_naming_the_key(client):
    ref = client.pb2.ScaledObjectRef(name="so", namespace="inference", scalerMetadata={"scalerAddress": client.address})
    for call in (client.stub.GetMetricSpec, client.stub.IsActive):
        with pytest.raises(grpc.RpcError) as e:
            call(ref, timeout=DEADLINE)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "`workload`" in e.value.details()


def test_stream_is_active_opens_with_the_current_state(client):
    stream = client.stub.StreamIsActive(client.ref("llama-8b"), timeout=DEADLINE)
    first = next(stream)
    assert first.result is True
    stream.cancel()


def test_grpc_health_is_serving(client):
    health = health_pb2_grpc.HealthStub(client.channel)
    for service in ("", "externalscaler.ExternalScaler"):
        r = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=DEADLINE)
        assert r.status == health_pb2.HealthCheckResponse.SERVING
