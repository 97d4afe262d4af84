#!/usr/bin/env python3
"""vllm-fixture: vLLM 0.34.0's own Prometheus metrics code as a test "pod".

The command line, and the pod's process: signals, life cycle, HTTP serving
with a vLLM API server's routing (vllm_routes).  The load fed to vLLM's
PrometheusStatLogger is in load.py, the capture command in capture.py.  Run
through scripts/vllm-fixture, which fetches and caches the vLLM modules
(README.md).  Commands:

  pod      one vLLM API server's metrics, served on 127.0.0.1, with the truth
           it recorded written as JSON lines.
  capture  run pods briefly and save their /metrics bodies as served, for
           GET /metrics and for each Accept / Accept-Encoding that
           prometheus_client's negotiating app (/metrics/) tells apart.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

# Neither imports prometheus_client, which must wait for PROMETHEUS_MULTIPROC_DIR.
import vllm_loader  # noqa: E402
from load import Pod  # noqa: E402

VLLM_VERSION = vllm_loader.VLLM_VERSION
DEFAULT_MODEL = "meta-llama/Llama-3.1-8B-Instruct"


# --------------------------------------------------------------------------
# command line


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="scripts/vllm-fixture",
        description="vLLM 0.34.0's own metrics code (PrometheusStatLogger) under "
        "synthetic load, served by prometheus_client, as a test fixture.",
    )
    sub = p.add_subparsers(dest="cmd", required=True)

    pod = sub.add_parser(
        "pod",
        help="run one vLLM 'pod' (an API server with --engines data-parallel engines)",
        description="Run one vLLM 'pod': an API server with N data-parallel engines "
        "(engine label '0'..'N-1') whose metrics are recorded by vLLM's "
        "PrometheusStatLogger every --step seconds and served at "
        "http://127.0.0.1:PORT/metrics.",
    )
    g = pod.add_argument_group("serving")
    g.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0: any free port)")
    g.add_argument("--ready-file", metavar="PATH",
                   help='once listening, write {"port", "pid", ...} here (atomically)')
    g.add_argument("--http", choices=("vllm", "negotiate"), default="vllm",
                   help="vllm (default): route as vLLM 0.34's API server does: GET /metrics "
                        "exactly is prometheus-fastapi-instrumentator's handler (text "
                        "format, Content-Type text/plain; version=1.0.0, whatever the "
                        "Accept, no gzip); /metrics/<anything> is prometheus_client's app "
                        "(Accept negotiation, gzip); other paths 404.  negotiate: every "
                        "path is prometheus_client's app (as start_http_server)")
    g.add_argument("--multiprocess", action="store_true",
                   help="as vLLM with --api-server-count > 1: PROMETHEUS_MULTIPROC_DIR set "
                        "to a fresh temp dir, registry from get_prometheus_registry() "
                        "(a MultiProcessCollector: no _created samples)")
    g = pod.add_argument_group("model and engines")
    g.add_argument("--model", default=DEFAULT_MODEL, help="served model name (model_name label)")
    g.add_argument("--max-model-len", type=int, default=131072,
                   help="max_model_len (sets the request-token histogram buckets)")
    g.add_argument("--engines", type=int, default=1, help="data-parallel engines")
    g = pod.add_argument_group("load (per pod; spread evenly over engines)")
    g.add_argument("--rps", type=float, default=10.0, help="requests finishing per second")
    g.add_argument("--arrivals", choices=("uniform", "poisson"), default="uniform",
                   help="uniform: exactly rps x elapsed (fraction carried); poisson: "
                        "Poisson counts per step")
    g.add_argument("--running", type=int, default=8, help="num_requests_running per engine")
    g.add_argument("--waiting-capacity", type=int, default=2,
                   help="waiting requests (reason=capacity) per engine")
    g.add_argument("--waiting-deferred", type=int, default=1,
                   help="waiting requests (reason=deferred) per engine")
    g.add_argument("--kv-cache-usage", type=float, default=0.4,
                   help="kv_cache_usage_perc per engine (fraction)")
    g.add_argument("--vary-period", type=float, default=0.0, metavar="SECS",
                   help="if > 0, running/waiting/kv gauges follow 1 + 0.5 sin(2 pi t / SECS) "
                        "(engine e of N later by e/(8N) of a period); 0: constant")
    g.add_argument("--prefix-hit-ratio", type=float, default=0.3,
                   help="mean fraction of prompt tokens that hit the prefix cache")
    g.add_argument("--queue-mean", type=float, default=0.2,
                   help="mean of the exponential queue time (seconds)")
    g.add_argument("--abort-fraction", type=float, default=0.01,
                   help="fraction of requests finishing as 'abort'")
    g.add_argument("--reject-rps", type=float, default=0.0,
                   help="admission rejections per second (record_admission_rejection)")
    g.add_argument("--seed", type=int, default=0, help="seed of all draws")
    g.add_argument("--step", type=float, default=0.1, help="seconds between record() rounds")
    g = pod.add_argument_group("life cycle")
    g.add_argument("--sleep-level", type=int, choices=(0, 1, 2), default=0,
                   help="engines asleep (1: weights_offloaded, 2: discard_all; 0: awake); "
                        "from the start, or from --sleep-after")
    g.add_argument("--sleep-after", type=float, metavar="SECS",
                   help="fall asleep (at --sleep-level, default 1) SECS after start")
    g.add_argument("--wake-after", type=float, metavar="SECS", help="wake up SECS after start")
    g.add_argument("--restart-after", type=float, metavar="SECS",
                   help="re-create the logger SECS after start (counters restart from 0, "
                        "as a restarted pod's); not with --multiprocess")
    g.add_argument("--freeze-after", type=float, metavar="SECS",
                   help="stop recording SECS after start (no more steps, truth lines, "
                        "sleep/wake/restart) and keep serving the metrics as they are, "
                        "so every later scrape sees the same vLLM values")
    g.add_argument("--duration", type=float, metavar="SECS", help="exit after SECS")
    g.add_argument("--truth", metavar="PATH", help="append one JSON line per step (README)")
    g.add_argument("--no-queue-times", action="store_true",
                   help="leave out the per-step lists of queue-time observations")
    g.add_argument("--exit-on-stdin-close", action="store_true",
                   help="exit when stdin reaches EOF (give the pod a pipe as stdin)")
    g.add_argument("--die-with-parent", action="store_true",
                   help="Linux: get SIGTERM when the parent dies (PR_SET_PDEATHSIG; note: "
                        "when the spawning *thread* exits)")

    cap = sub.add_parser(
        "capture",
        help="save real /metrics bodies for each Accept header into OUTDIR",
        description="Start pods (2 engines, load, admission rejections; a --multiprocess "
        "one; a sleeping one) that freeze before the scrapes, wait, then GET /metrics/ "
        "over HTTP with each Accept (and Accept-Encoding: gzip) that prometheus_client's "
        "app distinguishes, and GET /metrics (a vLLM API server's own handler); save "
        "the bodies as served (HELP text redacted unless --keep-help), check that each "
        "pod's bodies carry the same vLLM values, and write capture.json (file -> path, "
        "headers, checks).",
    )
    cap.add_argument("outdir")
    cap.add_argument("--wait", type=float, default=3.0,
                     help="seconds of load before scraping (the pods freeze 0.5 s earlier)")
    h = cap.add_mutually_exclusive_group()
    h.add_argument("--redact-help", dest="redact_help", action="store_true", default=True,
                   help="(default) replace every # HELP text by '%s' in the saved "
                        "bodies: the corpus keeps data, not vLLM's prose" % "(help text omitted)")
    h.add_argument("--keep-help", dest="redact_help", action="store_false",
                   help="save the bodies exactly as served, HELP text included")

    a = p.parse_args(argv)
    if a.cmd == "pod":
        if a.engines < 1:
            p.error("--engines must be >= 1")
        if a.step <= 0:
            p.error("--step must be > 0")
        if a.multiprocess and a.restart_after is not None:
            p.error("--restart-after is not supported with --multiprocess")
        if not 0 <= a.prefix_hit_ratio <= 1:
            p.error("--prefix-hit-ratio must be in [0, 1]")
        if a.freeze_after is not None and a.freeze_after < 0:
            p.error("--freeze-after must be >= 0")
    return a


# --------------------------------------------------------------------------
# pod process


def write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def vllm_routes(registry, negotiating_app):
    """WSGI routing of a vLLM 0.34 API server's metrics endpoints.

    vLLM's attach_router (vllm/entrypoints/serve/instrumentator/metrics.py)
    first calls prometheus-fastapi-instrumentator's
    `Instrumentator(...).expose(app)`, which registers GET /metrics, then
    appends `Mount("/metrics", make_asgi_app(registry))` with the path regex
    ^/metrics(?P<path>.*)$.  Starlette matches routes in order, so GET /metrics
    is answered by the instrumentator's handler and only /metrics<suffix>
    (e.g. /metrics/) reaches prometheus_client's negotiating app.
    `instrumentator_metrics` below follows prometheus-fastapi-instrumentator
    8.1.0's handler (expose(), should_gzip=False as vLLM leaves it).
    """
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
    from prometheus_client import multiprocess as mp

    def instrumentator_metrics(environ, start_response):
        ephemeral_registry = registry
        if "PROMETHEUS_MULTIPROC_DIR" in os.environ:
            ephemeral_registry = CollectorRegistry()
            mp.MultiProcessCollector(ephemeral_registry)
        body = generate_latest(ephemeral_registry)
        start_response("200 OK", [
            ("Content-Type", CONTENT_TYPE_LATEST),
            ("Content-Length", str(len(body))),
        ])
        return [b"" if environ["REQUEST_METHOD"] == "HEAD" else body]

    def app(environ, start_response):
        path, method = environ.get("PATH_INFO", ""), environ["REQUEST_METHOD"]
        if path == "/metrics" and method in ("GET", "HEAD"):
            return instrumentator_metrics(environ, start_response)
        if path.startswith("/metrics"):
            return negotiating_app(environ, start_response)
        body = b'{"detail":"Not Found"}'
        start_response("404 Not Found", [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(body))),
        ])
        return [body]

    return app


def serve_http(port: int, registry, mode: str):
    """prometheus_client's threaded WSGI server on 127.0.0.1 (as
    start_http_server), with vLLM's routing unless mode == 'negotiate'."""
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    from prometheus_client import make_wsgi_app
    from prometheus_client.exposition import ThreadingWSGIServer

    class Quiet(WSGIRequestHandler):
        def log_message(self, format, *args):
            pass

    app = make_wsgi_app(registry)
    if mode == "vllm":
        app = vllm_routes(registry, app)
    httpd = make_server("127.0.0.1", port, app, ThreadingWSGIServer, handler_class=Quiet)
    threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True, name="http"
    ).start()
    return httpd


def die_with_parent() -> None:
    import ctypes

    PR_SET_PDEATHSIG = 1
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        print("vllm-fixture: prctl(PR_SET_PDEATHSIG) failed", file=sys.stderr)
    if os.getppid() == 1:  # the parent is already gone
        sys.exit(0)


def run_pod(a: argparse.Namespace) -> int:
    t_start = time.time()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    if a.die_with_parent:
        die_with_parent()
    if a.exit_on_stdin_close:
        def watch_stdin():
            # os.read, not sys.stdin: a daemon thread blocked in a buffered
            # read would abort the interpreter's shutdown.
            try:
                while os.read(0, 65536):
                    pass
            except OSError:
                pass
            stop.set()

        threading.Thread(target=watch_stdin, daemon=True, name="stdin-watch").start()

    # vLLM's log lines go to stderr, keeping stdout quiet.
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    mpdir = None
    if a.multiprocess:
        assert "prometheus_client" not in sys.modules
        mpdir = tempfile.mkdtemp(prefix="vllm-fixture-mp-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = mpdir
    else:
        os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)

    vllm_loader.install(cache_dir())
    from vllm.v1.metrics.prometheus import get_prometheus_registry

    pod = Pod(a)
    if a.sleep_level and a.sleep_after is None:
        pod.set_sleep(True, a.sleep_level)
    # vLLM's api server serves get_prometheus_registry(): REGISTRY (with the
    # process/platform/gc collectors) or, multiprocess, a MultiProcessCollector.
    registry = get_prometheus_registry()

    truth = open(a.truth, "a", encoding="utf-8") if a.truth else None
    mono0 = time.monotonic()
    last = mono0
    k = 0

    def do_step(restarted: bool) -> None:
        nonlocal last, k
        now = time.monotonic()
        engines_out = pod.step(now - last, now - mono0)
        t = time.time()  # right after this step's record() calls
        last = now
        if truth is not None:
            line = pod.truth_line(k, t, now - mono0, restarted, engines_out)
            truth.write(json.dumps(line, separators=(",", ":")) + "\n")
            truth.flush()
        k += 1

    do_step(False)  # gauges set before anyone can scrape
    httpd = serve_http(a.port, registry, a.http)
    port = httpd.server_port
    if a.ready_file:
        write_atomic(a.ready_file, json.dumps({
            "port": port,
            "pid": os.getpid(),
            "metrics_url": f"http://127.0.0.1:{port}/metrics",
            "model": a.model,
            "engines": a.engines,
            "multiprocess": bool(a.multiprocess),
            "http": a.http,
            "vllm": VLLM_VERSION,
            "started": t_start,
            "ready": time.time(),
        }) + "\n")
    print(f"vllm-fixture: pod pid {os.getpid()} serving http://127.0.0.1:{port}/metrics",
          file=sys.stderr, flush=True)

    restarted_done = a.restart_after is None
    sleep_done = a.sleep_after is None
    wake_done = a.wake_after is None
    try:
        while not stop.is_set():
            next_t = mono0 + k * a.step
            if stop.wait(max(0.0, next_t - time.monotonic())):
                break
            elapsed = time.monotonic() - mono0
            if a.duration is not None and elapsed >= a.duration:
                break
            if a.freeze_after is not None and elapsed >= a.freeze_after:
                print(f"vllm-fixture: pod pid {os.getpid()} frozen after {k} steps",
                      file=sys.stderr, flush=True)
                wait_frozen(stop, mono0, a.duration)
                break
            if not sleep_done and elapsed >= a.sleep_after:
                sleep_done = True
                pod.set_sleep(True, a.sleep_level or 1)
            if not wake_done and elapsed >= a.wake_after:
                wake_done = True
                pod.set_sleep(False, 0)
            restarted = False
            if not restarted_done and elapsed >= a.restart_after:
                restarted_done = restarted = True
                pod.new_logger()
                last = time.monotonic()  # a restarted pod has nothing carried over
            do_step(restarted)
    finally:
        httpd.shutdown()
        httpd.server_close()
        if truth is not None:
            truth.close()
        if mpdir is not None:
            import shutil

            shutil.rmtree(mpdir, ignore_errors=True)
    return 0


def wait_frozen(stop: threading.Event, mono0: float, duration: float | None) -> None:
    """Serve only (the HTTP thread goes on) until stopped or --duration is up."""
    while True:
        left = 1.0 if duration is None else mono0 + duration - time.monotonic()
        # Short waits keep SIGTERM and the stdin watcher prompt.
        if left <= 0 or stop.wait(min(left, 1.0)):
            return


def cache_dir() -> str:
    d = os.environ.get("FORESIGHT_VLLM_CACHE")
    if not d:
        d = str(HERE.parent.parent / ".cache" / f"vllm-{VLLM_VERSION}")
    return d


def main(argv: list[str]) -> int:
    a = parse_args(argv)
    import importlib.util

    if importlib.util.find_spec("prometheus_client") is None:  # finds, does not import
        raise SystemExit(
            f"vllm-fixture: {sys.executable} has no prometheus_client; install "
            "tests/python/requirements.txt (scripts/test makes .venv with it) or set "
            "FORESIGHT_VLLM_PYTHON"
        )
    if a.cmd == "pod":
        return run_pod(a)
    if a.cmd == "capture":
        # The capture pods import prometheus_client themselves; importing it
        # here (for the parsers) must not set multiprocess mode for them.
        os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
        import capture

        return capture.run_capture(a)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
