"""Stand-in for `vllm.v1.spec_decode.metrics` (the real module imports numpy,
used only by the console logger's summary).

SpecDecodingStats (a field of SchedulerStats), SpecDecodingLogging and
SpecDecodingProm are executed verbatim from the cached wheel's source by
vllm_loader.lift().  With speculative_config=None (as here) SpecDecodingProm
registers nothing, as in a real vLLM run without speculative decoding.
"""

# The names the lifted vLLM code refers to (unused to a linter's eyes).
import time  # noqa: F401
from dataclasses import dataclass, field  # noqa: F401

import prometheus_client  # noqa: F401

from vllm.config import SpeculativeConfig  # noqa: F401
from vllm.logger import init_logger  # noqa: F401
from vllm.v1.metrics.utils import create_metric_per_engine  # noqa: F401

import vllm_loader

logger = init_logger("vllm.v1.spec_decode.metrics")

vllm_loader.lift(
    "vllm/v1/spec_decode/metrics.py",
    ["SpecDecodingStats", "SpecDecodingLogging", "SpecDecodingProm"],
    globals(),
)
