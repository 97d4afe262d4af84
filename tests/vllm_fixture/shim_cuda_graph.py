"""Stand-in for `vllm.compilation.cuda_graph` (the real module imports torch
and the CUDA-graph capture machinery).

Only CUDAGraphStat (a field of SchedulerStats) and CUDAGraphLogging (imported
by loggers.py, used by the console logger only) are needed; both are executed
verbatim from the cached wheel's source by vllm_loader.lift().
"""

# The names the lifted vLLM code refers to (unused to a linter's eyes).
import dataclasses  # noqa: F401
from collections import Counter  # noqa: F401
from collections.abc import Callable  # noqa: F401
from typing import Any  # noqa: F401

from vllm.config import CUDAGraphMode  # noqa: F401
from vllm.logger import init_logger  # noqa: F401

import vllm_loader

logger = init_logger("vllm.compilation.cuda_graph")

vllm_loader.lift(
    "vllm/compilation/cuda_graph.py", ["CUDAGraphStat", "CUDAGraphLogging"], globals()
)
