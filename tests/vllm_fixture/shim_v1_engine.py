"""Stand-in for `vllm.v1.engine` (the real package imports torch, numpy,
msgspec and the engine's request/output types).

The metrics code needs only FinishReason (the `finished_reason` label values
of vllm:request_success come from its __str__); it and FINISH_REASON_STRINGS
are executed verbatim from the cached wheel's source by vllm_loader.lift().
"""

# The names the lifted vLLM code refers to (unused to a linter's eyes).
import enum  # noqa: F401

import vllm_loader

vllm_loader.lift(
    "vllm/v1/engine/__init__.py", ["FINISH_REASON_STRINGS", "FinishReason"], globals()
)
