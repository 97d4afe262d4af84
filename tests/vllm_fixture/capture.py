"""The capture command: save real /metrics bodies of fixture pods, and check them.

Starts pods (`fixture.py pod`) that freeze before the scrapes, so every body of
one pod carries the same vLLM values whatever the Accept; fetches /metrics and
/metrics/ with each Accept / Accept-Encoding that matters; saves the bodies (by
default with the # HELP text redacted) and capture.json: where each file came
from and what the checks found.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import math
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vllm_loader import VLLM_VERSION

FIXTURE = Path(__file__).resolve().parent / "fixture.py"
PREFIX = "vllm-0.34"
HELP_PLACEHOLDER = b"(help text omitted)"
FREEZE_MARGIN_S = 0.5  # the pods freeze this long before the scrapes start

ACCEPTS = {
    "text": "text/plain;version=0.0.4",
    "om-underscores": "text/plain;version=0.0.4;q=0.9,application/openmetrics-text;"
    "version=1.0.0;q=0.5",
    "om-utf8": "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8",
    # Prometheus 2.42+'s scrape Accept header (scrape_protocols default).
    "prometheus2": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
    "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
}


def http_get(port: int, path: str, headers: dict) -> tuple[int, dict, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers=headers)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


# --------------------------------------------------------------------------
# HELP redaction


def _help_name_end(line: bytes) -> int:
    """End of the metric name in a `# HELP name text` line (the name may be
    quoted, `"vllm:x"`, with `\\"` and `\\\\` escaped)."""
    i = len(b"# HELP ")
    if line[i:i + 1] != b'"':
        j = line.find(b" ", i)
        return len(line) if j == -1 else j
    i += 1
    while i < len(line):
        c = line[i:i + 1]
        if c == b"\\":
            i += 2
        elif c == b'"':
            return i + 1
        else:
            i += 1
    raise SystemExit(f"capture: unterminated quoted name: {line[:80]!r}")


def redact_help(body: bytes) -> bytes:
    """Every `# HELP <name> <text>` line's text replaced by HELP_PLACEHOLDER;
    every other byte as it was."""
    lines = body.split(b"\n")
    for i, line in enumerate(lines):
        if line.startswith(b"# HELP "):
            lines[i] = line[:_help_name_end(line)] + b" " + HELP_PLACEHOLDER
    return b"\n".join(lines)


# --------------------------------------------------------------------------
# checks


def _sample_name(line: str) -> str:
    """Metric name of an exposition sample line (also the quoted UTF-8 form
    `{"vllm:x",label="v"} 1`)."""
    if line.startswith('{"'):
        return line[2:line.index('"', 2)]
    end = len(line)
    for ch in "{ ":
        i = line.find(ch)
        if i != -1:
            end = min(end, i)
    return line[:end]


def _type_name(line: str) -> str:  # '# TYPE name type' (name possibly quoted)
    rest = line[len("# TYPE "):]
    return rest[1:rest.index('"', 1)] if rest.startswith('"') else rest.split(" ")[0]


def _is_om(content_type: str) -> bool:
    return content_type.startswith("application/openmetrics-text")


def check_body(name: str, body: bytes, content_type: str, multiprocess: bool) -> dict:
    """Check a body's structure, and say whether prometheus_client's own parser
    for that format reads it back (it does not always: see the README)."""
    text = body.decode("utf-8")
    om = _is_om(content_type)
    if om and not text.endswith("# EOF\n"):
        raise SystemExit(f"{name}: OpenMetrics body does not end with '# EOF'")
    families, samples, renamed = [], 0, 0
    family = None
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            family = _type_name(line)
            families.append(family)
        elif line and not line.startswith("#"):
            samples += 1
            sname = _sample_name(line)
            if family is None:
                raise SystemExit(f"{name}: sample before any # TYPE: {line[:80]}")
            if not sname.startswith(family):
                escaped = family.replace(":", "_").replace(".", "_")
                if not sname.startswith(escaped):
                    raise SystemExit(f"{name}: sample {sname} under # TYPE {family}")
                renamed += 1
    if not any("request_success" in f for f in families):
        raise SystemExit(f"{name}: no request_success family")
    if multiprocess and "_created" in text:
        raise SystemExit(f"{name}: a multiprocess body has _created samples")
    if om:
        from prometheus_client.openmetrics.parser import text_string_to_metric_families
    else:
        from prometheus_client.parser import text_string_to_metric_families
    try:
        parsed = len(list(text_string_to_metric_families(text)))
        parser = f"ok ({parsed} families)"
    except Exception as e:  # noqa: BLE001 - reported, not fatal
        parser = f"{type(e).__name__}: {e}"
    return {
        "families": len(families),
        "samples": samples,
        "samples_named_unlike_their_type_line": renamed,
        "prometheus_client_parser": parser,
    }


def vllm_values(body: bytes, content_type: str) -> dict:
    """{(sample name, sorted labels): value} of the `vllm:` samples, read by
    prometheus_client's parser for the body's format."""
    text = body.decode("utf-8")
    if _is_om(content_type):
        from prometheus_client.openmetrics.parser import text_string_to_metric_families

        if "escaping=underscores" in content_type:
            # Samples are `vllm_...` under `# TYPE vllm:...`, which the parser
            # rejects ("Clashing name"): map the names back first.
            text = "\n".join("vllm:" + ln[5:] if ln.startswith("vllm_") else ln
                             for ln in text.split("\n"))
    else:
        from prometheus_client.parser import text_string_to_metric_families
    values = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.startswith("vllm:"):
                key = (s.name, tuple(sorted(s.labels.items())))
                if key in values:
                    raise SystemExit(f"capture: sample {key} twice in one body")
                values[key] = s.value
    return values


def _same(x: float, y: float) -> bool:
    return x == y or (math.isnan(x) and math.isnan(y))


def same_values(bodies: dict) -> dict:
    """Compare the vLLM sample values of one pod's bodies {file: (body,
    content_type)} with its first body's."""
    ref_name = next(iter(bodies))
    ref = vllm_values(*bodies[ref_name])
    result = {"reference": ref_name, "vllm_samples": len(ref), "ok": True, "files": {}}
    for fname, (body, ctype) in bodies.items():
        got = vllm_values(body, ctype)
        missing = sorted(set(ref) - set(got))
        extra = sorted(set(got) - set(ref))
        differ = sorted(k for k in set(ref) & set(got) if not _same(ref[k], got[k]))
        if missing or extra or differ:
            result["ok"] = False
            result["files"][fname] = {
                "missing": len(missing), "extra": len(extra), "differ": len(differ),
                "first": [str(k) for k in (differ + missing + extra)[:3]],
            }
        else:
            result["files"][fname] = f"same ({len(got)} vllm: samples)"
    return result


def same_as_twin(gz_plain: bytes, twin: bytes) -> dict:
    """A gzip body against its identity twin: identical, or differing only in
    non-vLLM sample lines (process/gc collectors move between two GETs)."""
    if gz_plain == twin:
        return {"ok": True, "result": "identical bytes"}
    a, b = gz_plain.split(b"\n"), twin.split(b"\n")
    if len(a) != len(b):
        return {"ok": False, "result": f"{len(a)} lines, twin {len(b)}"}
    names = set()
    for x, y in zip(a, b):
        if x != y:
            name = _sample_name(x.decode("utf-8"))
            if x.startswith(b"#") or name.startswith(("vllm:", "vllm_")):
                return {"ok": False, "result": f"differs: {x[:80]!r} vs {y[:80]!r}"}
            names.add(name)
    return {"ok": True, "result": "same but non-vLLM samples: " + ", ".join(sorted(names))}


# --------------------------------------------------------------------------
# the capture


def start_pods(scratch: Path, specs: dict, procs: dict) -> dict:
    """Start one pod per {name: args} into procs; return their ports once all
    serve."""
    ports = {}
    for name, args in specs.items():
        procs[name] = subprocess.Popen(
            [sys.executable, str(FIXTURE), "pod", "--port", "0",
             "--ready-file", str(scratch / f"{name}.json"), *args],
            stdin=subprocess.PIPE,
        )
    deadline = time.monotonic() + 60
    for name in specs:
        ready = scratch / f"{name}.json"
        while not ready.exists():
            if procs[name].poll() is not None:
                raise SystemExit(f"capture: pod {name} exited early")
            if time.monotonic() > deadline:
                raise SystemExit(f"capture: pod {name} not ready")
            time.sleep(0.05)
        ports[name] = json.loads(ready.read_text())["port"]
    return ports


def stop_pods(procs: dict) -> None:
    for p in procs.values():
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs.values():
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()


def capture_plan() -> list[tuple]:
    """(file, pod, path, accept, accept_encoding).  A vLLM API server answers
    GET /metrics itself (text, whatever the Accept: fixture.vllm_routes) and
    /metrics/ with prometheus_client's negotiating app.  Each gzip body is
    fetched right after its identity twin, for the twin check."""
    plan = []
    for key in ("text", "om-underscores", "om-utf8"):
        plan.append((f"{PREFIX}-{key}.txt", "normal", "/metrics/", ACCEPTS[key], None))
        plan.append((f"{PREFIX}-{key}.txt.gz", "normal", "/metrics/", ACCEPTS[key], "gzip"))
    plan.append((f"{PREFIX}-prometheus2.txt", "normal", "/metrics/", ACCEPTS["prometheus2"], None))
    plan.append((f"{PREFIX}-api.txt", "normal", "/metrics", ACCEPTS["prometheus2"], "gzip"))
    plan.append((f"{PREFIX}-multiprocess.txt", "multiprocess", "/metrics", ACCEPTS["text"], None))
    plan.append((f"{PREFIX}-multiprocess-negotiated.txt", "multiprocess", "/metrics/",
                 ACCEPTS["text"], None))
    plan.append((f"{PREFIX}-sleeping.txt", "sleeping", "/metrics", ACCEPTS["text"], None))
    return plan


def run_capture(a: argparse.Namespace) -> int:
    out = Path(a.outdir)
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="vllm-fixture-capture-"))
    freeze = max(0.0, a.wait - FREEZE_MARGIN_S)
    common = ["--engines", "2", "--rps", "20", "--reject-rps", "2", "--seed", "1",
              "--freeze-after", f"{freeze:g}", "--exit-on-stdin-close"]
    pods_spec = {
        "normal": [],
        "multiprocess": ["--multiprocess"],
        "sleeping": ["--sleep-level", "1"],
    }
    procs = {}
    try:
        ports = start_pods(scratch, {n: common + x for n, x in pods_spec.items()}, procs)
        # Each pod's clock started before it was ready, so all are frozen by now.
        time.sleep(max(a.wait, freeze + FREEZE_MARGIN_S))

        import prometheus_client

        index = {
            "vllm": VLLM_VERSION,
            "prometheus_client": getattr(prometheus_client, "__version__", None)
            or _dist_version("prometheus_client"),
            "python": sys.version.split()[0],
            "captured_at": time.time(),
            "help": "redacted" if a.redact_help else "as served",
            "pods": {name: " ".join(common + extra) for name, extra in pods_spec.items()},
            "files": {},
        }
        if a.redact_help:
            index["help_placeholder"] = HELP_PLACEHOLDER.decode()
        saved = {}  # file -> (plain saved body, content type, pod)
        for fname, podname, path, accept, enc in capture_plan():
            headers = {"Accept": accept, "Accept-Encoding": enc or "identity"}
            status, h, body = http_get(ports[podname], path, headers)
            if status != 200:
                raise SystemExit(f"capture: {fname}: HTTP {status}")
            ctype, cenc = h.get("content-type", ""), h.get("content-encoding")
            plain, data = body, body
            if fname.endswith(".gz"):
                if cenc != "gzip":
                    raise SystemExit(f"capture: {fname}: asked gzip, got {cenc!r}")
                plain = gzip.decompress(body)
            if a.redact_help:
                plain = redact_help(plain)
                # mtime=0: the same body gives the same file.
                data = gzip.compress(plain, mtime=0) if fname.endswith(".gz") else plain
            (out / fname).write_bytes(data)
            saved[fname] = (plain, ctype, podname)
            check = check_body(fname, plain, ctype, podname == "multiprocess")
            if fname.endswith(".gz"):
                check["gzip_twin"] = same_as_twin(plain, saved[fname[:-3]][0])
            index["files"][fname] = {
                "pod": podname,
                "path": path,
                "accept": accept,
                "accept_encoding": headers["Accept-Encoding"],
                "content_type": ctype,
                "content_encoding": cenc,
                "bytes": len(data),
                "served_bytes": len(body),
                "check": check,
            }
            print(f"{fname:40} {path:10} {ctype}" + (f"  [{cenc}]" if cenc else ""))

        # Frozen pods: every body of one pod has the same vLLM values.
        index["same_vllm_values"] = {
            pod: same_values({f: (b, ct) for f, (b, ct, p) in saved.items() if p == pod})
            for pod in pods_spec
        }
        (out / "capture.json").write_text(json.dumps(index, indent=2) + "\n")
        failed = [f"{pod}: vLLM values differ between bodies"
                  for pod, r in index["same_vllm_values"].items() if not r["ok"]]
        failed += [f"{f}: {e['check']['gzip_twin']['result']}"
                   for f, e in index["files"].items()
                   if "gzip_twin" in e["check"] and not e["check"]["gzip_twin"]["ok"]]
        if failed:
            raise SystemExit("capture: " + "; ".join(failed) + f" (see {out}/capture.json)")
        for pod, r in index["same_vllm_values"].items():
            print(f"{pod}: {len(r['files'])} bodies, same {r['vllm_samples']} vllm: sample values")
    finally:
        stop_pods(procs)
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


def _dist_version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None
