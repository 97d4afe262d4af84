"""Puts vLLM's own metrics modules on the import path, without torch.

The vLLM sources come from the released wheel (scripts/vllm-fixture fetches it
from PyPI, pinned by sha256, and extracts only WHEEL_MEMBERS into a cache
directory; nothing of vLLM is committed here). `install(cache_dir)` then:

  * registers the packages on the way (vllm, vllm.v1, vllm.distributed, ...) as
    plain package objects whose __path__ is the cached directory, so their real
    __init__.py files (which import torch, CUDA, the whole engine) never run,
    while the real leaf modules below them import from the cached files as
    usual: vllm/v1/metrics/{loggers,stats,prometheus,utils,buckets,
    cache_hit_source}.py, vllm/envs.py, vllm/logger.py, vllm/logging_utils/,
    vllm/plugins/__init__.py and the KV/EC connector metrics modules;
  * registers the shim modules (shim_*.py beside this file) under the names of
    the few vLLM modules on that import path that import torch or large
    dependency trees.  Where a shim needs vLLM classes (FinishReason,
    PerfMetricsProm, SpecDecodingProm, CUDAGraphStat, ...) it does not copy
    them: `lift()` executes those definitions verbatim from the cached wheel
    source, so they are vLLM's code, line numbers and all.

Run as a script it extracts a wheel: `vllm_loader.py extract WHEEL DEST`.
"""

from __future__ import annotations

import ast
import fnmatch
import importlib.util
import os
import sys
import types
import zipfile
from pathlib import Path

VLLM_VERSION = "0.34.0"
MARKER = ".complete"
HERE = Path(__file__).resolve().parent

# What is taken out of the wheel.  Real modules are imported as they are; the
# ones marked "source" are only read by lift() or by shim_config.
WHEEL_MEMBERS = [
    "vllm/v1/metrics/*.py",  # real (perf.py: source, it imports torch/pydantic)
    "vllm/envs.py",  # real
    "vllm/logger.py",  # real
    "vllm/logging_utils/*.py",  # real
    "vllm/plugins/__init__.py",  # real
    "vllm/distributed/kv_transfer/kv_connector/v1/metrics.py",  # real
    "vllm/distributed/ec_transfer/ec_connector/metrics.py",  # real
    "vllm/v1/spec_decode/metrics.py",  # source (numpy at import)
    "vllm/v1/engine/__init__.py",  # source (torch, msgspec, the engine)
    "vllm/compilation/cuda_graph.py",  # source (torch)
    "vllm/config/cache.py",  # source (CacheConfig's field list)
    "vllm-*.dist-info/licenses/LICENSE",
    "vllm-*.dist-info/METADATA",
]

# Packages registered empty (their real __init__.py is not run).
PACKAGES = [
    "vllm",
    "vllm.v1",
    "vllm.v1.metrics",
    "vllm.v1.spec_decode",
    "vllm.compilation",
    "vllm.distributed",
    "vllm.distributed.kv_transfer",
    "vllm.distributed.kv_transfer.kv_connector",
    "vllm.distributed.kv_transfer.kv_connector.v1",
    "vllm.distributed.ec_transfer",
    "vllm.distributed.ec_transfer.ec_connector",
]

# vLLM module -> shim file beside this one (loaded in this order).
SHIMS = {
    "vllm.config": "shim_config.py",
    "vllm.compilation.cuda_graph": "shim_cuda_graph.py",
    "vllm.v1.metrics.perf": "shim_perf.py",
    "vllm.v1.spec_decode.metrics": "shim_spec_decode_metrics.py",
    "vllm.v1.engine": "shim_v1_engine.py",
    "vllm.distributed.kv_transfer.kv_connector.factory": "shim_connector_factory.py",
    "vllm.distributed.ec_transfer.ec_connector.factory": "shim_connector_factory.py",
}

_cache_dir: Path | None = None


def cache_dir() -> Path:
    if _cache_dir is None:
        raise RuntimeError("vllm_loader.install() has not been called")
    return _cache_dir


def source_path(relpath: str) -> Path:
    """Path of a file of the wheel in the cache, e.g. 'vllm/v1/engine/__init__.py'."""
    return cache_dir() / relpath


def lift(relpath: str, names: list[str], namespace: dict) -> None:
    """Execute the top-level definitions `names` of a cached vLLM source file
    verbatim into `namespace` (a shim module's globals), in file order.

    Raises if one is missing, so a changed wheel is noticed, not papered over.
    """
    path = source_path(relpath)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    wanted = set(names)
    picked = []
    for node in tree.body:
        defined = set()
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            defined = {node.name}
        elif isinstance(node, ast.Assign):
            defined = {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            defined = {node.target.id}
        if defined & wanted:
            picked.append(node)
            wanted -= defined
    if wanted:
        raise RuntimeError(f"{relpath}: no top-level definition of {sorted(wanted)}")
    code = compile(ast.Module(body=picked, type_ignores=[]), str(path), "exec")
    exec(code, namespace)


def _package(name: str, cache: Path) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__path__ = [str(cache.joinpath(*name.split(".")))]
    mod.__package__ = name
    mod.__file__ = None
    return mod


def _bind(name: str, mod: types.ModuleType) -> None:
    sys.modules[name] = mod
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, mod)


def install(cache: str | os.PathLike) -> None:
    """Make `import vllm.v1.metrics.loggers` work from the cache, torch-free."""
    global _cache_dir
    cache = Path(cache).resolve()
    if not (cache / MARKER).is_file():
        raise SystemExit(
            f"vllm-fixture: no vLLM cache at {cache} (run scripts/vllm-fixture, "
            "which fetches it)"
        )
    if "vllm" in sys.modules:
        raise RuntimeError("vllm is already imported")
    _cache_dir = cache
    for name in PACKAGES:
        _bind(name, _package(name, cache))
    for name, filename in SHIMS.items():
        spec = importlib.util.spec_from_file_location(name, HERE / filename)
        mod = importlib.util.module_from_spec(spec)
        if name == "vllm.v1.engine":
            mod.__path__ = []  # a package in vLLM; nothing else below it is used
        _bind(name, mod)
        spec.loader.exec_module(mod)


def _matches(name: str, pattern: str) -> bool:
    # '*' stays within one directory level (fnmatch's alone would cross '/').
    return name.count("/") == pattern.count("/") and fnmatch.fnmatchcase(name, pattern)


def extract(wheel: str, dest: str) -> None:
    """Extract WHEEL_MEMBERS of `wheel` into `dest`; write the marker last."""
    dest_path = Path(dest)
    n = 0
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            if info.is_dir() or not any(_matches(info.filename, p) for p in WHEEL_MEMBERS):
                continue
            target = dest_path / info.filename
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(zf.read(info))
            n += 1
    for pat in WHEEL_MEMBERS:
        if not any(_matches(p.relative_to(dest_path).as_posix(), pat) for p in dest_path.rglob("*")):
            raise SystemExit(f"vllm-fixture: the wheel has nothing matching {pat}")
    print(f"vllm-fixture: extracted {n} files of {Path(wheel).name}", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "extract":
        extract(sys.argv[2], sys.argv[3])
    else:
        raise SystemExit("usage: vllm_loader.py extract WHEEL DEST")
