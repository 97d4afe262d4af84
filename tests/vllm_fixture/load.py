"""The synthetic load of one vLLM pod, fed through vLLM's own stats path.

`Pod` draws the requests finishing each step, packs them into vLLM's own
stats objects (SchedulerStats, IterationStats, FinishedRequestStats), hands
them to PrometheusStatLogger.record() per engine, calls
record_admission_rejection() / record_sleep_state(), and keeps the truth it
recorded for the --truth file (README "Truth file").
"""

from __future__ import annotations

import argparse
import json
import math
import random

# Synthetic request shape: per request a log-normal prompt and wanted output,
# a max_tokens (reaching it: "length"; aborts get half), prefix-cache hits of
# prompt x U(0, 2H) in whole blocks, exponential queue time, prefill at a fixed
# token rate; TTFT = overhead + queue + prefill, e2e = TTFT + (gen - 1) TPOT.
PROMPT_MEAN, PROMPT_SIGMA = 1000.0, 0.8  # log-normal prompt tokens
GEN_MEAN, GEN_SIGMA = 200.0, 0.9  # log-normal wanted generation tokens
MAX_TOKENS_CHOICES = (512, 1024, 2048, 4096)  # the request's max_tokens
BLOCK_SIZE = 16  # prefix-cache hits are whole blocks
PREFILL_TOKENS_PER_S = 8000.0
TPOT_RANGE = (0.015, 0.030)  # seconds per output token, uniform per request
FRONTEND_OVERHEAD_S = 0.002
REJECT_MAX_REQS_FRACTION = 0.75  # the rest: max_num_queued_tokens


def poisson(rng: random.Random, lam: float) -> int:
    if lam <= 0:
        return 0
    if lam > 30:  # normal approximation, never hit at test rates
        return max(0, int(round(rng.gauss(lam, math.sqrt(lam)))))
    limit, k, prod = math.exp(-lam), 0, rng.random()
    while prod > limit:
        k += 1
        prod *= rng.random()
    return k


class Arrivals:
    """Events per step at `rate`/s: uniform carries the fraction, so the count
    over any window is rate x elapsed, to within one event."""

    def __init__(self, mode: str, rng: random.Random):
        self.mode, self.rng, self.acc = mode, rng, 0.0

    def take(self, rate: float, dt: float) -> int:
        if self.mode == "poisson":
            return poisson(self.rng, rate * dt)
        self.acc += rate * dt
        n = int(self.acc)
        self.acc -= n
        return n


def hist() -> dict:
    return {"sum": 0.0, "count": 0}


def new_engine_truth(reasons: list[str]) -> dict:
    return {
        "request_success": 0,
        "request_success_by_reason": {r: 0 for r in reasons},
        "prompt_tokens": 0,
        "generation_tokens": 0,
        "prefix_cache_queries": 0,
        "prefix_cache_hits": 0,
        "request_queue_time_seconds": hist(),
        "request_prompt_tokens": hist(),
        "request_generation_tokens": hist(),
        "e2e_request_latency_seconds": hist(),
        "time_to_first_token_seconds": hist(),
    }


class Pod:
    """One pod's engines: vLLM's logger, the load fed to it, and the truth."""

    def __init__(self, a: argparse.Namespace):
        self.a = a
        # Imported only now: PROMETHEUS_MULTIPROC_DIR must be set before.
        from vllm.config import make_vllm_config
        from vllm.v1.engine import FinishReason
        from vllm.v1.metrics import loggers, stats

        self.loggers, self.stats, self.FinishReason = loggers, stats, FinishReason
        self.reasons = [str(r) for r in FinishReason]
        self.config = make_vllm_config(a.model, a.max_model_len)
        self.engine_indexes = list(range(a.engines))
        self.rng = random.Random(a.seed)
        self.req_arrivals = [Arrivals(a.arrivals, self.rng) for _ in self.engine_indexes]
        self.rej_arrivals = Arrivals(a.arrivals, self.rng)
        mu = lambda mean, sigma: math.log(mean) - sigma * sigma / 2  # noqa: E731
        self.prompt_mu, self.gen_mu = mu(PROMPT_MEAN, PROMPT_SIGMA), mu(GEN_MEAN, GEN_SIGMA)
        self.epoch = -1
        self.sleeping, self.level = False, 0
        self.new_logger()

    def new_logger(self):
        """What a (re)started vLLM API server does: build the logger, log the
        engine config, and re-announce the sleep state."""
        self.logger = self.loggers.PrometheusStatLogger(self.config, self.engine_indexes)
        self.logger.log_engine_initialized()
        if self.sleeping:
            self.logger.record_sleep_state(1, self.level)
        self.epoch += 1
        self.engine_truth = [new_engine_truth(self.reasons) for _ in self.engine_indexes]
        self.rejections = {r: 0 for r in self.loggers.ADMISSION_REASONS}

    def set_sleep(self, sleeping: bool, level: int):
        if (sleeping, level) == (self.sleeping, self.level):
            return
        self.sleeping, self.level = sleeping, level
        # As AsyncLLM.sleep() / wake_up() do.
        self.logger.record_sleep_state(*((1, level) if sleeping else (0, 0)))

    def gauges(self, e: int, elapsed: float) -> tuple[int, int, int, float]:
        a = self.a
        if self.sleeping:
            return 0, 0, 0, 0.0
        f = 1.0
        if a.vary_period > 0:
            phase = 2 * math.pi * (elapsed / a.vary_period + e / (8 * a.engines))
            f = 1.0 + 0.5 * math.sin(phase)
        return (
            int(round(a.running * f)),
            int(round(a.waiting_capacity * f)),
            int(round(a.waiting_deferred * f)),
            min(1.0, a.kv_cache_usage * f),
        )

    def make_request(self):
        a, rng, FR = self.a, self.rng, self.FinishReason
        max_tokens = rng.choice(MAX_TOKENS_CHOICES)
        prompt = int(round(rng.lognormvariate(self.prompt_mu, PROMPT_SIGMA)))
        prompt = min(max(prompt, 1), max(1, a.max_model_len - max_tokens))
        want = max(1, int(round(rng.lognormvariate(self.gen_mu, GEN_SIGMA))))
        if rng.random() < a.abort_fraction:
            reason, gen = FR.ABORT, max(1, min(want, max_tokens) // 2)
        elif want >= max_tokens:
            reason, gen = FR.LENGTH, max_tokens
        else:
            reason, gen = FR.STOP, want
        frac = min(1.0, rng.uniform(0.0, 2.0 * a.prefix_hit_ratio))
        # Whole blocks, and never the last prompt token (vLLM recomputes it).
        hits = min(int(prompt * frac), prompt - 1) // BLOCK_SIZE * BLOCK_SIZE
        queued = rng.expovariate(1.0 / a.queue_mean) if a.queue_mean > 0 else 0.0
        prefill = (prompt - hits) / PREFILL_TOKENS_PER_S + 0.005
        tpot = rng.uniform(*TPOT_RANGE)
        decode = (gen - 1) * tpot
        ttft = FRONTEND_OVERHEAD_S + queued + prefill
        return self.stats.FinishedRequestStats(
            finish_reason=reason,
            request_id=None,
            e2e_latency=ttft + decode,
            num_prompt_tokens=prompt,
            num_preemptions=0,
            num_generation_tokens=gen,
            max_tokens_param=max_tokens,
            queued_time=queued,
            prefill_time=prefill,
            inference_time=prefill + decode,
            decode_time=decode,
            mean_time_per_output_token=tpot if gen > 1 else 0,
            num_cached_tokens=hits,
        ), ttft

    def step(self, dt: float, elapsed: float) -> dict:
        """One round: record() per engine, then admission rejections."""
        a, S = self.a, self.stats
        engines_out = {}
        for e in self.engine_indexes:
            n = 0 if self.sleeping else self.req_arrivals[e].take(a.rps / a.engines, dt)
            running, waiting_cap, waiting_def, kv = self.gauges(e, elapsed)
            sched = S.SchedulerStats(
                num_running_reqs=running,
                num_waiting_reqs=waiting_cap,
                num_skipped_waiting_reqs=waiting_def,
                kv_cache_usage=kv,
            )
            it = S.IterationStats()
            truth = self.engine_truth[e]
            queue_times = []
            for _ in range(n):
                req, ttft = self.make_request()
                # What the scheduler and output processor would have gathered.
                sched.prefix_cache_stats.record(
                    num_tokens=req.num_prompt_tokens,
                    num_hits=req.num_cached_tokens,
                    preempted=False,
                )
                pts = it.prompt_token_stats
                pts.computed += req.num_prompt_tokens - req.num_cached_tokens
                pts.local_cache_hit += req.num_cached_tokens
                pts.cached_tokens += req.num_cached_tokens
                pts.total += req.num_prompt_tokens
                it.num_generation_tokens += req.num_generation_tokens
                it.time_to_first_tokens_iter.append(ttft)
                if req.num_generation_tokens > 1:
                    it.inter_token_latencies_iter.append(req.mean_time_per_output_token)
                it.n_params_iter.append(1)
                it.max_num_generation_tokens_iter.append(req.max_tokens_param)
                it.finished_requests.append(req)
                # The truth, accumulated in the order the logger observes.
                truth["request_success"] += 1
                truth["request_success_by_reason"][str(req.finish_reason)] += 1
                for key, v in (
                    ("request_queue_time_seconds", req.queued_time),
                    ("request_prompt_tokens", req.num_prompt_tokens),
                    ("request_generation_tokens", req.num_generation_tokens),
                    ("e2e_request_latency_seconds", req.e2e_latency),
                    ("time_to_first_token_seconds", ttft),
                ):
                    truth[key]["sum"] += v
                    truth[key]["count"] += 1
                queue_times.append(req.queued_time)
            truth["prompt_tokens"] += it.num_prompt_tokens
            truth["generation_tokens"] += it.num_generation_tokens
            truth["prefix_cache_queries"] += sched.prefix_cache_stats.queries
            truth["prefix_cache_hits"] += sched.prefix_cache_stats.hits

            self.logger.record(sched, it, engine_idx=e)

            out = {
                "num_requests_running": running,
                "num_requests_waiting": waiting_cap + waiting_def,
                "num_requests_waiting_capacity": waiting_cap,
                "num_requests_waiting_deferred": waiting_def,
                "kv_cache_usage_perc": kv,
            }
            out.update(json.loads(json.dumps(truth)))  # a copy
            out["step_finished"] = n
            if not a.no_queue_times:
                out["step_queue_times"] = queue_times
            engines_out[str(e)] = out

        if not self.sleeping:
            for _ in range(self.rej_arrivals.take(a.reject_rps, dt)):
                reason = self.loggers.ADMISSION_REASONS[
                    0 if self.rng.random() < REJECT_MAX_REQS_FRACTION else 1
                ]
                self.logger.record_admission_rejection(reason)
                self.rejections[reason] += 1
        return engines_out

    def total(self, engines_out: dict) -> dict:
        outs = list(engines_out.values())
        tot: dict = {}
        for key, v in outs[0].items():
            if key == "kv_cache_usage_perc":
                vals = [o[key] for o in outs]
                tot["kv_cache_usage_perc_mean"] = sum(vals) / len(vals)
                tot["kv_cache_usage_perc_max"] = max(vals)
            elif key == "step_queue_times":
                tot[key] = [q for o in outs for q in o[key]]
            elif isinstance(v, dict):
                tot[key] = {k: sum(o[key][k] for o in outs) for k in v}
            else:
                tot[key] = sum(o[key] for o in outs)
        return tot

    def truth_line(self, k: int, t: float, elapsed: float, restarted: bool,
                   engines_out: dict) -> dict:
        """Step k's line of the truth file (schema in the README)."""
        return {
            "step": k,
            "t": t,
            "elapsed": elapsed,
            "epoch": self.epoch,
            "restart": restarted,
            "sleeping": self.sleeping,
            "sleep_level": self.level if self.sleeping else 0,
            "engine_sleep_state": {
                "awake": 0 if self.sleeping else 1,
                "weights_offloaded": int(self.sleeping and self.level == 1),
                "discard_all": int(self.sleeping and self.level == 2),
            },
            "admission_rejections": dict(self.rejections),
            "admission_rejections_total": sum(self.rejections.values()),
            "engines": engines_out,
            "total": self.total(engines_out),
        }
