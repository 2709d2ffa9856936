"""Replaying a serving benchmark's requests through the simulator.

A vLLM ``bench serve --save-detailed`` or SGLang ``bench_serving --output-details`` result
(``analysis.formats``) holds, per request, when the client sent it, its prompt and output
lengths and what it measured (TTFT, inter-token latencies, end-to-end latency).
:func:`load_bench_run` turns one into a :class:`BenchRun` (the successful requests, sorted by
send time; the mode and k the result's speculative-decoding fields imply);
:func:`replay_times` simulates those requests, sent at the recorded send times, under given
cost and acceptance models and returns each request's simulated TTFT and TPOT, the
quantities the calibration fits (``validation.serving_results.calibration``).

The simulated requests arrive at the *send* times (``start_times``), because vLLM's TTFT
counts from the send: a client that caps its concurrency holds requests back, and that wait
(``queue_times``) is not the server's.  For a prediction of a new setting the client's cap is
emulated after the fact by :func:`client_send_times`.
"""
from __future__ import annotations

import bisect
import csv
import math
import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from psdlab.analysis.formats.detect import detect_format, module_for
from psdlab.analysis.formats.errors import fail
from psdlab.analysis.formats.records import BenchSummary
from psdlab.analysis.modes import check_mode
from psdlab.sim.sim_config import SimModel, ServerConfig, SimConfig
from psdlab.sim.simulation import simulate

BENCH_FORMATS = ("vllm_bench", "sglang_bench")
#: vLLM's default max_num_seqs, the server's batch cap when no base config gives one
DEFAULT_M = 256


@dataclass(frozen=True, eq=False)
class BenchRun:
    """The successful requests of one benchmark result, sorted by send time."""
    path: str
    summary: BenchSummary
    mode: str                      # "ar" or "sd" (from the result's spec-decode fields)
    k: int | None                  # draft length the per-position rates imply (sd)
    send_s: np.ndarray             # send times, s after the first send
    prompt: np.ndarray             # prompt tokens
    output: np.ndarray             # output tokens
    ttft_s: np.ndarray             # measured TTFT (s)
    tpot_s: np.ndarray             # measured (e2el - ttft) / (output - 1); nan for output <= 1
    dropped: int                   # failed or empty requests left out

    def __len__(self) -> int:
        return int(self.send_s.size)

    @property
    def spec(self) -> bool:
        return self.mode != "ar"


def read_bench(path: str, format: str | None = None) -> BenchSummary:
    """A vLLM or SGLang bench result (detected by content); anything else is a one-line
    error naming the file."""
    fmt = format or detect_format(path)
    if fmt not in BENCH_FORMATS:
        raise fail(path, f"is {fmt}, not a vLLM or SGLang serving-benchmark result "
                   f"(allowed: {', '.join(BENCH_FORMATS)})")
    summary: BenchSummary = module_for(fmt).read(path)
    return summary


def bench_inputs(paths: Sequence[str]) -> bool:
    """Whether the inputs are serving-benchmark results (all of them; a mix is a one-line
    error): how ``psdlab calibrate`` and ``validate`` tell them from psdlab traces."""
    from psdlab.analysis.formats.errors import FormatError
    kinds = []
    for path in paths:
        try:
            kinds.append(detect_format(path) in BENCH_FORMATS)
        except FormatError:
            kinds.append(False)
    if any(kinds) and not all(kinds):
        bad = paths[kinds.index(False)]
        raise ValueError(f"{bad}: not a vLLM or SGLang bench result, but the other inputs are; "
                         f"give one kind of input at a time")
    return bool(kinds) and all(kinds)


def _spec_mode(s: BenchSummary) -> tuple[str, int | None]:
    if s.per_position_acceptance:
        return "sd", len(s.per_position_acceptance)
    if s.acceptance_length is not None or s.num_drafts:
        return "sd", None
    return "ar", None


def load_bench_run(path: str, format: str | None = None) -> BenchRun:
    """The requests of a detailed bench result (module docstring).  A result without the
    per-request lists, or with no successful request, is a one-line error."""
    s = read_bench(path, format)
    for key, value in (("input_lens", s.input_lens), ("output_lens", s.output_lens),
                       ("ttfts", s.ttfts_s)):
        if value is None:
            raise fail(path, "no per-request detail (saved without --save-detailed / "
                       "--output-details); the calibration needs it", field=key)
    assert s.input_lens is not None and s.output_lens is not None and s.ttfts_s is not None
    n = len(s.input_lens)
    if s.e2els_s is not None:
        e2el = list(s.e2els_s)
    elif s.itls_s is not None:                      # SGLang keeps no latencies: ttft + itls
        e2el = [t + sum(row) for t, row in zip(s.ttfts_s, s.itls_s)]
    else:
        raise fail(path, "no per-request end-to-end latency ('latencies') or ITLs ('itls')",
                   field="latencies")
    if s.start_times_s is not None:
        sends = list(s.start_times_s)
    else:
        from psdlab.analysis.formats.build import even_arrivals
        sends = even_arrivals(n, s.request_rate)[0]
    ok = [i for i in range(n)
          if not (s.errors and s.errors[i]) and s.output_lens[i] > 0 and s.ttfts_s[i] > 0
          and e2el[i] >= s.ttfts_s[i]]
    if not ok:
        raise fail(path, f"none of its {n} requests succeeded (errors, or no output)",
                   field="output_lens")
    ok.sort(key=lambda i: sends[i])
    t0 = sends[ok[0]]
    out = np.array([s.output_lens[i] for i in ok], dtype=np.int64)
    ttft = np.array([s.ttfts_s[i] for i in ok], dtype=float)
    e2 = np.array([e2el[i] for i in ok], dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(out > 1, (e2 - ttft) / np.maximum(out - 1, 1), np.nan)
    mode, k = _spec_mode(s)
    return BenchRun(path=str(path), summary=s, mode=mode, k=k,
                    send_s=np.array([sends[i] - t0 for i in ok], dtype=float),
                    prompt=np.array([max(1, s.input_lens[i]) for i in ok], dtype=np.int64),
                    output=out, ttft_s=ttft, tpot_s=tpot, dropped=n - len(ok))


def step_time_cv(run: BenchRun) -> float | None:
    """The spread of step times the client saw, from consecutive inter-token latencies inside
    each request (a robust CV: the MAD of their log differences / sqrt(2), scaled to a normal
    SD); batch changes between the two steps add to it, so it is an upper bound.  None without
    ITLs (fewer than 20 pairs)."""
    rows = run.summary.itls_s or ()
    diffs: list[float] = []
    for row in rows:
        x = np.array([v for v in row if v > 0], dtype=float)
        if x.size >= 3:
            diffs.extend(np.diff(np.log(x)).tolist())
    if len(diffs) < 20:
        return None
    d = np.asarray(diffs)
    return float(1.4826 * np.median(np.abs(d - np.median(d))) / math.sqrt(2.0))


def write_replay_csv(run: BenchRun, folder: str) -> str:
    """The run's requests as a ``replay`` workload CSV in ``folder`` (send times as
    arrivals); returns its path."""
    path = os.path.join(folder, f"replay-{abs(hash(run.path)) % 10**8}-{len(run)}.csv")
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["arrival", "prompt_len", "output_len"])
        for a, p, o in zip(run.send_s.tolist(), run.prompt.tolist(), run.output.tolist()):
            w.writerow([repr(float(a)), int(p), int(o)])
    return path


def server_for(mode: str, k: int | None, base: ServerConfig | None,
               max_concurrency: int | None = None) -> ServerConfig:
    """The replay's server: the base config's (batch cap, policy, KV) in ``mode``/``k``; the
    batch cap lowered to a client's concurrency cap (half of it per batch for psd)."""
    m = base.m if base is not None else DEFAULT_M
    if max_concurrency is not None:
        m = min(m, max(1, math.ceil(max_concurrency / 2)) if mode == "psd" else max_concurrency)
    kw: dict[str, Any] = {} if base is None else {
        "policy": base.policy, "kv_blocks": base.kv_blocks, "block_size": base.block_size,
        "cap_proposals": base.cap_proposals}
    # a serving engine returns a step's outputs when the whole step is done (vLLM, SGLang)
    return ServerConfig(mode=check_mode("mode", mode), k=(k or 1) if mode != "ar" else 0, m=m,
                        first_token="step", **kw)


def replay_config(workload: Mapping[str, Any], n: int, server: ServerConfig,
                  target_cost: Mapping[str, Any], drafter_cost: Mapping[str, Any] | None,
                  acceptance: Mapping[str, Any] | None, *, seed: int = 0,
                  trace_level: str = "request", jitter_cv: float = 0.0) -> SimConfig:
    """The simulator config of one replay (no trace file is written); ``jitter_cv``: gamma
    step-time jitter (``sim.costs.step_jitter``), 0 for none."""
    from psdlab.sim.sim_config import TraceConfig
    spec = server.mode != "ar"
    return SimConfig(
        server=server, target=SimModel("target", "sim:target", dict(target_cost)),
        drafter=(SimModel("drafter", "sim:drafter", dict(drafter_cost))
                 if spec and drafter_cost is not None else None),
        acceptance=dict(acceptance) if spec and acceptance else {"name": "none"},
        workload=dict(workload), requests=n, seed=seed,
        jitter={"dist": "gamma", "cv": jitter_cv} if jitter_cv > 0 else None,
        trace=TraceConfig(path=None, level=trace_level))


def replay_times(cfg: SimConfig) -> tuple[np.ndarray, np.ndarray]:
    """Simulated TTFT and TPOT (s) of each request, in the workload's arrival order (TPOT
    nan for one-token outputs)."""
    result = simulate(cfg)
    reqs = sorted(result.trace.requests, key=lambda r: int(r.id))
    first = np.array([r.first_token - r.arrival for r in reqs], dtype=float)
    out = np.array([r.output_len for r in reqs], dtype=float)
    span = np.array([r.finish - r.first_token for r in reqs], dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(out > 1, span / np.maximum(out - 1, 1), np.nan)
    return first, tpot


def client_send_times(arrivals: np.ndarray, finishes: np.ndarray,
                      max_concurrency: int | None) -> np.ndarray:
    """When a client that keeps at most ``max_concurrency`` requests open sends each request
    (in arrival order, first come first served): at its arrival, or when the request that
    frees its slot finishes.  ``finishes`` are the simulated finish times of the same requests
    (a server whose batch cap is the client's cap admits them in the same order)."""
    a = np.asarray(arrivals, dtype=float)
    if max_concurrency is None or a.size <= max_concurrency:
        return a.copy()
    f = np.asarray(finishes, dtype=float)
    order = np.argsort(a, kind="stable")
    sends = np.empty_like(a)
    done: list[float] = []
    for rank, i in enumerate(order):
        if rank < max_concurrency:
            sends[i] = a[i]
        else:
            # the slot frees when the (rank - c + 1)-th of the earlier requests finishes
            sends[i] = max(a[i], done[rank - max_concurrency])
        bisect.insort(done, float(f[i]))
    return sends
