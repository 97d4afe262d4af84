"""Stand-in for `vllm.v1.metrics.perf` (the real module imports torch and
pydantic at the top, for its FLOPs/bytes model of the network).

PrometheusStatLogger always builds PerfMetricsProm, which registers the
vllm:estimated_{flops,read_bytes,write_bytes}_per_gpu_total counters, so those
families are in every real vLLM 0.34 exposition.  PerfStats, DebugPerfStats,
PerfMetricsLogging and PerfMetricsProm are executed verbatim from the cached
wheel's source by vllm_loader.lift(); only the model-analysis classes (which
need torch and pydantic, and only run on the engine side when MFU stats are
enabled) are left out.
"""

# The names the lifted vLLM code refers to (unused to a linter's eyes).
import time  # noqa: F401
from dataclasses import dataclass  # noqa: F401

import prometheus_client  # noqa: F401

import vllm.envs as envs  # noqa: F401
from vllm.config import VllmConfig  # noqa: F401
from vllm.logger import init_logger  # noqa: F401
from vllm.v1.metrics.utils import create_metric_per_engine  # noqa: F401

import vllm_loader

logger = init_logger("vllm.v1.metrics.perf")

vllm_loader.lift(
    "vllm/v1/metrics/perf.py",
    ["DebugPerfStats", "PerfStats", "PerfMetricsLogging", "PerfMetricsProm"],
    globals(),
)
