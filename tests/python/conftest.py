"""Fixtures for the black-box tests: compile proto/externalscaler.proto with
grpcio-tools into a temporary package, and run the real `foresight` binary."""

import functools
import http.server
import importlib
import json
import urllib.request
import os
import pathlib
import subprocess
import sys
import threading
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def pb(tmp_path_factory):
    """The generated modules (externalscaler_pb2, externalscaler_pb2_grpc)."""
    out = tmp_path_factory.mktemp("gen")
    from grpc_tools import protoc

    rc = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{ROOT / 'proto'}",
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            str(ROOT / "proto" / "externalscaler.proto"),
        ]
    )
    assert rc == 0, "protoc failed on proto/externalscaler.proto"
    sys.path.insert(0, str(out))
    pb2 = importlib.import_module("externalscaler_pb2")
    grpc_mod = importlib.import_module("externalscaler_pb2_grpc")
    return pb2, grpc_mod


@pytest.fixture(scope="session")
def fake_vllm():
    """Base URL of a server for the fixed vLLM bodies in tests/fixtures/fake-vllm/."""
    handler = functools.partial(
        http.server.SimpleHTTPRequestHandler, directory=str(ROOT / "tests" / "fixtures" / "fake-vllm")
    )
    handler.log_message = lambda *a: None
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def foresight_bin():
    path = os.environ.get("FORESIGHT_BIN", str(ROOT / "target" / "debug" / "foresight"))
    assert os.path.exists(path), f"{path} missing: build first (scripts/test does)"
    return path


class Foresight:
    """A running `foresight serve --config FILE`."""

    def __init__(self, config_text, tmp_path):
        cfg = tmp_path / "foresight.yaml"
        cfg.write_text(config_text)
        self.log = []
        self.proc = subprocess.Popen(
            [foresight_bin(), "--log-format", "json", "serve", "--config", str(cfg)],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "RUST_LOG": "info"},
        )
        self.grpc = None
        ready = threading.Event()

        def read():
            for line in self.proc.stderr:
                self.log.append(line)
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                if ev.get("message") == "listening":
                    self.grpc = ev["grpc"]
                    self.http = ev["http"]
                    ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(30):
            self.stop()
            raise AssertionError("foresight did not start:\n" + "".join(self.log))
        # Ready = every workload has a decision (its first scrape is in).
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                if urllib.request.urlopen(f"http://{self.http}/readyz", timeout=2).status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise AssertionError("foresight never became ready:\n" + "".join(self.log))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def foresight(tmp_path):
    started = []

    def start(config_text):
        f = Foresight(config_text, tmp_path)
        started.append(f)
        return f

    yield start
    for f in started:
        f.stop()
