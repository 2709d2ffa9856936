"""Predict what ``vllm bench serve`` would measure, from a calibration (``BenchFit``).

:func:`predict_bench` simulates a workload file's requests (any format
``analysis.formats`` reads: typically the detailed result of the run being predicted, for its
lengths and arrivals) under the calibrated models, emulates the client's concurrency cap
(``replay.client_send_times``: TTFT and E2EL count from the send, as vLLM's do) and
returns the result in vLLM bench's keys and units (``analysis.formats.vllm_bench_write``).
Its ``spec_decode_*`` figures count the simulated run's drafts as vLLM's counters do, so on a
short run they carry that run's sampling noise; ``psdlab.prediction.expected_acceptance_length``
is the calibrated model's own value, 1 + E[accepted per draft of k tokens], which vLLM's
counter ratio (accepted / drafts + 1) tends to over many drafts (Wald's identity: a request's
last, truncated step still counts its full draft and every accepted token).
:func:`simulated_bench` does the same for any simulator config.
"""
from __future__ import annotations

import math
import os
import tempfile
from typing import Any

import numpy as np

from psdlab.analysis.formats.vllm_bench_write import bench_result_from_trace
from psdlab.sim.sim_config import SimConfig
from psdlab.sim.simulation import simulate
from psdlab.validation.serving_results.calibration import BenchFit
from psdlab.validation.serving_results.replay import client_send_times


def simulated_bench(cfg: SimConfig, *, request_rate: float | None = None,
                    max_concurrency: int | None = None, detailed: bool = True,
                    model_id: str | None = None) -> dict[str, Any]:
    """Simulate ``cfg`` (step-level trace, in memory) and return its vLLM bench result."""
    if max_concurrency is not None and max_concurrency < 1:
        raise ValueError(f"max_concurrency: must be >= 1, got {max_concurrency}")
    result = simulate(cfg.replace(trace_level="step", trace_path=None))
    reqs = sorted(result.trace.requests, key=lambda r: (r.arrival, str(r.id)))
    sends = client_send_times(np.array([r.arrival for r in reqs]),
                              np.array([r.finish for r in reqs]), max_concurrency)
    send_of = {r.id: float(s) for r, s in zip(reqs, sends)}
    return bench_result_from_trace(result.trace, detailed=detailed, request_rate=request_rate,
                                   max_concurrency=max_concurrency, send_times=send_of,
                                   model_id=model_id)


def predict_bench(fit: BenchFit, workload_path: str, *, mode: str, k: int,
                  request_rate: float | None, max_concurrency: int | None,
                  seed: int = 0) -> dict[str, Any]:
    """vLLM bench's result (its keys and units) predicted for ``workload_path``'s requests
    served in ``mode`` with ``k`` draft tokens; ``request_rate`` None keeps the file's own
    arrivals, a number re-times them to that rate, inf sends them all at once."""
    with tempfile.TemporaryDirectory(prefix="psdlab-bench-predict-") as folder:
        source = _poisson_if_simultaneous(workload_path, request_rate, seed, folder)
        if source == workload_path:
            cfg = fit.sim_config(workload_path, mode, k, request_rate=request_rate,
                                 max_concurrency=max_concurrency, seed=seed)
        else:
            cfg = fit.sim_config(workload_path, mode, k, max_concurrency=max_concurrency,
                                 seed=seed).replace(workload={"name": "replay",
                                                              "path": source})
        return _predict(fit, cfg, workload_path, mode=mode, k=k, request_rate=request_rate,
                        max_concurrency=max_concurrency, seed=seed)


def _poisson_if_simultaneous(path: str, rate: float | None, seed: int, folder: str) -> str:
    """``path`` itself, or -- when a finite ``rate`` is asked of a file whose requests all
    arrive at once (a run at rate inf), which cannot be re-timed -- a replay CSV of its
    requests at Poisson arrivals of that rate (vLLM bench's default arrival process), seeded."""
    if rate is None or math.isinf(rate):
        return path
    from psdlab.sim.workloads import requests_from_file
    reqs = requests_from_file({"name": "file", "path": path}, "workload")
    if reqs.arrival.size < 2 or float(reqs.arrival.max() - reqs.arrival.min()) > 0:
        return path
    if not rate > 0:
        raise ValueError(f"request_rate: must be > 0 (inf: all at once), got {rate}")
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, reqs.arrival.size)
    out = os.path.join(folder, "poisson.csv")
    with open(out, "w", encoding="utf-8") as fh:
        fh.write("arrival,prompt_len,output_len\n")
        for a, p, o in zip(np.cumsum(gaps) - gaps[0], reqs.prompt_len, reqs.output_len):
            fh.write(f"{float(a)!r},{int(p)},{int(o)}\n")
    return out


def _predict(fit: BenchFit, cfg: SimConfig, workload_path: str, *, mode: str, k: int,
             request_rate: float | None, max_concurrency: int | None,
             seed: int) -> dict[str, Any]:
    rate = request_rate
    if rate is None:
        from psdlab.analysis.formats.detect import read_workload
        wl = read_workload(workload_path)
        rate = wl.mean_rate() if len(wl) > 1 else math.inf
    doc = simulated_bench(cfg, request_rate=rate, max_concurrency=max_concurrency)
    doc["psdlab"] = {**doc["psdlab"], "prediction": {
        "calibration_inputs": list(fit.inputs), "workload": workload_path, "mode": mode,
        "k": k, "request_rate": None if request_rate is None or math.isinf(request_rate)
        else request_rate, "max_concurrency": max_concurrency, "seed": seed,
        "expected_acceptance_length": expected_acceptance_length(fit, mode, k)}}
    return doc


def expected_acceptance_length(fit: BenchFit, mode: str, k: int) -> float | None:
    """1 + the expected accepted tokens of a k-token draft under the fit's acceptance model
    (module docstring); None for AR or a fit without acceptance."""
    if mode == "ar" or not k or fit.acceptance is None:
        return None
    from psdlab.sim.acceptance_registry import make_acceptance
    return 1.0 + make_acceptance(dict(fit.acceptance)).expected_accepted(k)
