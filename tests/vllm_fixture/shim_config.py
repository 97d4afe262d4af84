"""Stand-in for `vllm.config` (the real package imports torch, pydantic,
transformers and most of the engine).

It holds only what the metrics code reads: PrometheusStatLogger's __init__,
record(), record_sleep_state(), record_admission_rejection() and
log_engine_initialized(), and the connector/spec-decode/perf metrics classes
it builds.  The class names the real modules import (VllmConfig,
SupportsMetricsInfo, KVTransferConfig, ECTransferConfig, SpeculativeConfig,
CUDAGraphMode) exist because annotations such as `KVTransferConfig | None` are
evaluated when those modules are imported.

CacheConfig carries the field names of vLLM 0.34.0's real CacheConfig, read
from the cached wheel's vllm/config/cache.py, with their declared defaults and
the values a single-GPU run fills in after profiling: its metrics_info() (the
real one, `str()` of every field) gives vllm:cache_config_info its label set.
"""

from __future__ import annotations

import ast
import enum
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import vllm_loader


@runtime_checkable
class SupportsMetricsInfo(Protocol):
    def metrics_info(self) -> dict[str, str]: ...


class CUDAGraphMode(enum.Enum):
    NONE = 0
    PIECEWISE = 1
    FULL = 2
    FULL_DECODE_ONLY = (FULL, NONE)
    FULL_AND_PIECEWISE = (FULL, PIECEWISE)


class SpeculativeConfig:  # never instantiated here (speculative_config=None)
    pass


class KVTransferConfig:  # never instantiated here (kv_transfer_config=None)
    kv_connector: str | None = None
    is_kv_consumer: bool = False


class ECTransferConfig:  # never instantiated here (ec_transfer_config=None)
    ec_connector: str | None = None


@dataclass
class ModelConfig:
    served_model_name: str
    max_model_len: int
    is_diffusion: bool = False


@dataclass
class ObservabilityConfig:
    show_hidden_metrics: bool = False
    kv_cache_metrics: bool = False
    custom_histogram_buckets: dict[str, list[float]] | None = None
    cudagraph_metrics: bool = False


# What a single-GPU run of an 8B model has in CacheConfig after start-up
# (block size resolved, memory profiled); other fields keep their defaults.
CACHE_CONFIG_RUNTIME = {
    "block_size": 16,
    "gpu_memory_utilization": 0.92,
    "enable_extensible_kv_cache": False,
    "num_gpu_blocks": 29750,
    "num_cpu_blocks": 0,
    "effective_attention_block_size": 16,
    "kv_cache_size_tokens": 476000,
    "kv_cache_max_concurrency": 3.63,
    "hash_block_size": 16,
    "cache_hit_alignment_tokens": 16,
}


def _real_cache_config_fields() -> list[tuple[str, Any]]:
    """(name, default) of each dataclass field of vLLM's CacheConfig, in order.
    Private fields (leading '_') and ClassVars are left out."""
    path = vllm_loader.source_path("vllm/config/cache.py")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    cls = next(
        n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "CacheConfig"
    )
    out = []
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        name = node.target.id
        if name.startswith("_") or ast.unparse(node.annotation).startswith("ClassVar"):
            continue
        default: Any = None
        value = node.value
        if isinstance(value, ast.Call):  # Field(default=..)/field(default_factory=..)
            for kw in value.keywords:
                if kw.arg == "default":
                    default = ast.literal_eval(kw.value)
                elif kw.arg == "default_factory":
                    default = {"list": [], "dict": {}}[ast.unparse(kw.value)]
        elif value is not None:
            default = ast.literal_eval(value)
        out.append((name, default))
    return out


class CacheConfig:
    def __init__(self, **overrides: Any):
        for name, default in _real_cache_config_fields():
            setattr(self, name, overrides.pop(name, CACHE_CONFIG_RUNTIME.get(name, default)))
        if overrides:
            raise TypeError(f"not CacheConfig fields: {sorted(overrides)}")

    # Verbatim vllm/config/cache.py CacheConfig.metrics_info.
    def metrics_info(self):
        # convert cache_config to dict(key: str, value: str) for prometheus
        # metrics info
        return {key: str(value) for key, value in self.__dict__.items()}


@dataclass
class VllmConfig:
    model_config: ModelConfig
    cache_config: CacheConfig
    observability_config: ObservabilityConfig = field(default_factory=ObservabilityConfig)
    speculative_config: SpeculativeConfig | None = None
    kv_transfer_config: KVTransferConfig | None = None
    ec_transfer_config: ECTransferConfig | None = None
    lora_config: Any = None
    watermark_config: Any = None


def make_vllm_config(served_model_name: str, max_model_len: int) -> VllmConfig:
    return VllmConfig(
        model_config=ModelConfig(served_model_name, max_model_len),
        cache_config=CacheConfig(),
    )
