"""How requests differ, measured against the prediction: the check behind tail latencies.

A run's mean TPOT follows the mean acceptance of its requests; its p99 end-to-end latency, over
a few dozen requests, is the slowest one or two of them, so it follows the low tail of
per-request acceptance (and, lightly loaded, little else).  For each compared configuration
this module puts the measured requests (all repeats) beside their replays (each repeat's
replay, first seed): quantiles of each request's tokens emitted per verification, and the
slowest request's end-to-end latency (median over repeats).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable, Sequence

import numpy as np

from psdlab.analysis.trace import Trace

#: the quantiles of per-request tokens per verification shown
QUANTILES = (5, 50, 95)


def per_request_emitted(trace: Trace) -> np.ndarray:
    """Each request's tokens emitted per verification (requests with a verification)."""
    emitted: dict[str, int] = defaultdict(int)
    count: dict[str, int] = defaultdict(int)
    for step in trace.steps:
        for v in step.verified:
            if v.proposed > 0:
                emitted[str(v.req)] += v.emitted
                count[str(v.req)] += 1
    return np.array([emitted[r] / count[r] for r in emitted], dtype=float)


def slowest_e2e(trace: Trace) -> float | None:
    """The largest arrival-to-finish time of the trace's requests."""
    times = [r.finish - r.arrival for r in trace.requests]
    return float(max(times)) if times else None


def _quantiles(traces: Iterable[Trace]) -> tuple[int, list[float] | None]:
    vals = [per_request_emitted(t) for t in traces]
    allv = np.concatenate(vals) if vals else np.array([])
    if allv.size == 0:
        return 0, None
    return int(allv.size), [float(np.percentile(allv, q)) for q in QUANTILES]


def _median_slowest(traces: Sequence[Trace]) -> float | None:
    vals = [v for v in (slowest_e2e(t) for t in traces) if v is not None]
    return float(np.median(vals)) if vals else None


def spread_rows(validation: Any, names: set[str] | None = None) -> list[dict[str, Any]]:
    """One row per drafted configuration (of ``names``): measured and predicted quantiles of
    per-request tokens per verification, and the slowest request's latency."""
    out = []
    for c in validation.comparisons:
        if names is not None and c.name not in names:
            continue
        reps = c.repeats or [c.trace]
        sims = c.sim_repeats or ([c.sim_trace] if c.sim_trace is not None else [])
        n_m, q_m = _quantiles(reps)
        n_p, q_p = _quantiles(sims)
        if q_m is None or q_p is None:
            continue
        out.append({"config": c.name, "requests": n_m, "replayed_requests": n_p,
                    "measured_quantiles": q_m, "predicted_quantiles": q_p,
                    "measured_slowest_e2e_s": _median_slowest(reps),
                    "predicted_slowest_e2e_s": _median_slowest(sims)})
    return out


def spread_md(rows: Sequence[dict[str, Any]], held: set[str]) -> list[str]:
    """The report's section."""
    if not rows:
        return []
    from psdlab.validation.report import md_table
    q = " / ".join(f"p{x}" for x in QUANTILES)

    def f(vals: Sequence[float]) -> str:
        return " / ".join(f"{v:.2f}" for v in vals)

    def s(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.2f}"

    body = [[r["config"], "held out" if r["config"] in held else "calibration",
             str(r["requests"]), f(r["measured_quantiles"]), f(r["predicted_quantiles"]),
             s(r["measured_slowest_e2e_s"]), s(r["predicted_slowest_e2e_s"])] for r in rows]
    return ["## How requests differ: measured against the prediction", "",
            "Each request's tokens emitted per verification, over all repeats of a "
            "configuration (measured) and over each repeat's replay, first seed (predicted; "
            "acceptance from the chosen model). p99 end-to-end over a run's requests is its "
            "slowest one or two, so it follows the low quantile; the slowest request's "
            "latency is the median over repeats.", "",
            md_table(["config", "prompts", "requests", f"measured {q}", f"predicted {q}",
                      "slowest e2e measured (s)", "slowest e2e predicted (s)"], body), ""]
