"""Synthetic serving-benchmark results for the bench-calibration tests: a known cost model
simulated (with step-time jitter, so the data are not the replay itself) and written by the
vLLM bench writer, as ``vllm bench serve --save-result --save-detailed`` would."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from psdlab.analysis.formats.vllm_bench_write import write_bench_result
from psdlab.sim.sim_config import config_from_dict
from psdlab.validation.serving_results.predict import simulated_bench

TRUE_TARGET = {"name": "affine", "base": 0.012, "per_seq": 0.0006, "per_token": 4e-5,
               "per_context": 0.0}
TRUE_DRAFTER = {"name": "affine", "base": 0.002, "per_token": 1e-4}
TRUE_RATES = [0.85, 0.6, 0.4]        # conditional, k = 3


def synth_config(mode: str, rate: float, n: int, seed: int, *, jitter: float = 0.05,
                 drafter: dict[str, Any] | None = None):
    raw: dict[str, Any] = {
        "seed": seed, "requests": n,
        "server": {"mode": mode, "k": 3 if mode != "ar" else 0, "m": 256,
                   "first_token": "step"},
        "target": {"name": "target", "cost": TRUE_TARGET},
        "workload": {"name": "poisson", "rate": rate,
                     "prompt": {"name": "lognormal", "mean": 300, "median": 250, "max": 1000},
                     "output": {"name": "lognormal", "mean": 60, "median": 50, "max": 200}}}
    if math.isinf(rate):                      # vLLM bench's --request-rate inf: all at once
        raw["workload"] = {k: v for k, v in raw["workload"].items() if k != "rate"}
        raw["workload"]["name"] = "offline"
    if jitter:
        raw["jitter"] = {"dist": "gamma", "cv": jitter}
    if mode != "ar":
        raw["drafter"] = {"name": "drafter", "cost": drafter or TRUE_DRAFTER}
        raw["acceptance"] = {"name": "positional", "rates": TRUE_RATES}
    return config_from_dict(raw)


def write_synth(folder: Path, name: str, mode: str, rate: float, n: int, seed: int = 1,
                **kw: Any) -> Path:
    path = folder / f"{name}.json"
    write_bench_result(path, simulated_bench(synth_config(mode, rate, n, seed, **kw),
                                             request_rate=rate))
    return path
