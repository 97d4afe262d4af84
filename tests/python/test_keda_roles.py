"""Prefill and decode roles through the KEDA-like client: each role is its
own ScaledObject (trigger metadata `role`), with its own metric, answer and
activity, sized from demand in its parts.

The pods here serve vLLM-named counters that grow at fixed rates in wall
time (30 requests/s, 2,000 prompt tokens and 200 output tokens per request,
a quarter of prompt tokens from the prefix cache), so every answer is
known. With no history there is no forecast: the live demand decides.
  prefill: 30 x 2,000 x 0.75 = 45,000 uncached tokens/s / 24,000 per replica -> 2
  decode:  30 x 200 x 0.02 s = 120 sequences / 32 per replica -> 4
(llama-3.1-8b-h100: 32 sequences at 1,600 tokens/s, so 0.02 s per token.)"""

import http.server
import threading
import time
import urllib.request

import grpc
import pytest

from test_keda_client import DEADLINE, KedaLikeClient

RATE, PROMPT, OUTPUT, HIT = 30.0, 2000.0, 200.0, 0.25
LABELS = 'engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"'


def body(t):
    n = RATE * t
    lines = []

    def counter(name, v, extra=""):
        lines.append(f"# TYPE {name} counter")
        lines.append(f"{name}_total{{{extra}{LABELS}}} {v}")

    def histogram(name, per_request):
        lines.append(f"# TYPE {name} histogram")
        lines.append(f'{name}_bucket{{engine="0",le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"}} {n}')
        lines.append(f"{name}_count{{{LABELS}}} {n}")
        lines.append(f"{name}_sum{{{LABELS}}} {n * per_request}")

    lines.append("# TYPE vllm:num_requests_running gauge")
    lines.append(f"vllm:num_requests_running{{{LABELS}}} 100.0")
    lines.append("# TYPE vllm:num_requests_waiting gauge")
    lines.append(f"vllm:num_requests_waiting{{{LABELS}}} 0.0")
    counter("vllm:request_success", n, 'finished_reason="stop",')
    counter("vllm:prompt_tokens", n * PROMPT)
    counter("vllm:generation_tokens", n * OUTPUT)
    counter("vllm:prefix_cache_queries", n * PROMPT)
    counter("vllm:prefix_cache_hits", n * PROMPT * HIT)
    histogram("vllm:request_prompt_tokens", PROMPT)
    histogram("vllm:request_generation_tokens", OUTPUT)
    return ("\n".join(lines) + "\n").encode()


@pytest.fixture(scope="module")
def growing_pod():
    t0 = time.time() - 1000.0

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            b = body(time.time() - t0)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(b)))
            self.end_headers()
            self.wfile.write(b)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/metrics"
    srv.shutdown()


CONFIG = """
grpc: {listen: 127.0.0.1:0}
http: {listen: 127.0.0.1:0}
tick_interval_secs: 0.2
store: {path: null}
workloads:
  - name: llama-8b-pd
    namespace: inference
    model: llama-3.1-8b-h100
    min_replicas: 1
    target: {signal: concurrency}
    roles:
      prefill: {max_replicas: 8}
      decode: {max_replicas: 8}
    source: {scrape: {targets: ["URL"], interval_secs: 0.5}}
  - name: llama-8b
    namespace: inference
    model: llama-3.1-8b-h100
    target: {signal: concurrency}
    source: {scrape: {targets: ["URL"], interval_secs: 0.5}}
"""


@pytest.fixture
def client(pb, foresight, growing_pod):
    f = foresight(CONFIG.replace("URL", growing_pod))
    c = KedaLikeClient(pb, f.grpc)
    c.http = f.http
    # Rates need two scrapes: wait for the roles' first answers.
    deadline = time.time() + 20
    while True:
        try:
            c.poll("llama-8b-pd", role="decode")
            break
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.UNAVAILABLE, e.details()
            assert time.time() < deadline, f"no role decision: {e.details()}"
            time.sleep(0.2)
    yield c
    c.channel.close()


def test_each_role_has_its_own_metric_and_answer(client):
    assert client.poll("llama-8b-pd", role="prefill") == ("foresight-llama-8b-pd-prefill-replicas", 2.0, 1.0, True, 2)
    assert client.poll("llama-8b-pd", role="decode") == ("foresight-llama-8b-pd-decode-replicas", 4.0, 1.0, True, 4)
    # Without `role`, the workload's own (monolithic) answer: 100 in flight / 32.
    assert client.poll("llama-8b-pd") == ("foresight-llama-8b-pd-replicas", 4.0, 1.0, True, 4)


def test_stream_is_active_and_stream_metric_spec_name_the_role(client):
    ref = client.ref("llama-8b-pd", role="prefill")
    stream = client.stub.StreamIsActive(ref, timeout=DEADLINE)
    assert next(stream).result is True
    stream.cancel()
    specs = client.stub.StreamMetricSpec(ref, timeout=DEADLINE)
    assert [s.metricName for s in next(specs).metricSpecs] == ["foresight-llama-8b-pd-prefill-replicas"]
    specs.cancel()


def test_a_metric_name_of_the_other_role_is_refused(client):
    ref = client.ref("llama-8b-pd", role="prefill")
    req = client.pb2.GetMetricsRequest(scaledObjectRef=ref, metricName="foresight-llama-8b-pd-decode-replicas")
    with pytest.raises(grpc.RpcError) as e:
        client.stub.GetMetrics(req, timeout=DEADLINE)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize(
    "workload, extra, code, words",
    [
        ("llama-8b-pd", {"role": "prefil"}, grpc.StatusCode.INVALID_ARGUMENT, "`role` must be `prefill` or `decode`"),
        ("llama-8b-pd", {"role": "decode", "encoding": "load"}, grpc.StatusCode.INVALID_ARGUMENT, "replicas only"),
        ("llama-8b", {"role": "prefill"}, grpc.StatusCode.NOT_FOUND, "declares no `prefill` role (roles: none)"),
    ],
)
def test_bad_role_metadata_is_refused_with_a_reason(client, workload, extra, code, words):
    for call in (client.stub.GetMetricSpec, client.stub.IsActive):
        with pytest.raises(grpc.RpcError) as e:
            call(client.ref(workload, **extra), timeout=DEADLINE)
        assert e.value.code() == code
        assert words in e.value.details()


def test_role_answers_are_exported_for_prometheus(client):
    body = urllib.request.urlopen(f"http://{client.http}/metrics", timeout=5).read().decode()
    lines = [l for l in body.splitlines() if l.startswith("foresight_role_")]
    want = {
        ("foresight_role_desired_replicas", "prefill"): 2.0,
        ("foresight_role_desired_replicas", "decode"): 4.0,
        ("foresight_role_unavailable", "prefill"): 0.0,
        ("foresight_role_unavailable", "decode"): 0.0,
    }
    for (name, role), value in want.items():
        match = [l for l in lines if l.startswith(name + "{") and f'role="{role}"' in l and 'workload="llama-8b-pd"' in l]
        assert len(match) == 1, (name, role, lines)
        assert float(match[0].rsplit(" ", 1)[1]) == value, match
    # The workload without roles exports none.
    assert not [l for l in lines if 'workload="llama-8b"' in l], lines
