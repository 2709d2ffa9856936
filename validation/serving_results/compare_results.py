"""Predicted vs measured for serving-benchmark results (``psdlab validate`` on vLLM / SGLang
bench results): each result's requests (arrivals, lengths, the run's concurrency cap, mode
and k) are served by the simulator with a calibration from bench results
(``calibration.BenchFit``), and the prediction (``predict``) is compared with what
the benchmark measured, metric by metric, in vLLM bench's keys and units.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Sequence

from psdlab.validation.serving_results.calibration import BenchFit
from psdlab.validation.serving_results.predict import predict_bench
from psdlab.validation.serving_results.replay import load_bench_run

#: the metrics compared, in vLLM bench's keys (ms, tokens/s, requests/s)
METRICS = ("mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms",
           "mean_itl_ms", "mean_e2el_ms", "output_throughput", "request_throughput",
           "spec_decode_acceptance_length")


@dataclass(frozen=True)
class BenchRow:
    result: str
    metric: str
    predicted: float | None
    measured: float | None

    @property
    def error(self) -> float | None:
        """predicted / measured - 1 (None when either is missing or measured is 0)."""
        if self.predicted is None or not self.measured:
            return None
        return self.predicted / self.measured - 1.0

    def to_dict(self) -> dict[str, Any]:
        return {"result": self.result, "metric": self.metric, "predicted": self.predicted,
                "measured": self.measured, "error": self.error}


def _measured(raw: dict[str, Any], metric: str) -> float | None:
    value = raw.get(metric)
    if value is None and metric == "spec_decode_acceptance_length":
        value = raw.get("accept_length")                     # SGLang's name
    if value is None and metric.endswith("_e2el_ms"):
        value = raw.get(metric.replace("e2el", "e2e_latency"))
    return None if value is None else float(value)


def compare_bench(fit: BenchFit, results: Sequence[str], *, seeds: int = 3
                  ) -> list[BenchRow]:
    """Rows of predicted (mean over ``seeds`` simulator seeds) vs measured per result."""
    if seeds < 1:
        raise ValueError(f"seeds: must be >= 1, got {seeds}")
    rows: list[BenchRow] = []
    for path in results:
        run = load_bench_run(path)
        k = run.k or fit.k or 0
        s = run.summary
        preds = [predict_bench(fit, path, mode=run.mode, k=k, request_rate=None,
                               max_concurrency=s.max_concurrency, seed=seed)
                 for seed in range(seeds)]
        for metric in METRICS:
            measured = _measured(dict(s.raw), metric)
            values = [p[metric] for p in preds if p.get(metric) is not None]
            predicted = statistics.fmean(values) if values else None
            if measured is None and predicted is None:
                continue
            rows.append(BenchRow(path, metric, predicted, measured))
    return rows


def format_rows(rows: Sequence[BenchRow]) -> str:
    """The rows as a plain-text table."""
    lines = [f"{'result':<36}{'metric':<32}{'predicted':>12}{'measured':>12}{'error':>9}"]
    for r in rows:
        pred = "-" if r.predicted is None else f"{r.predicted:.4g}"
        meas = "-" if r.measured is None else f"{r.measured:.4g}"
        err = "-" if r.error is None else f"{100 * r.error:+.1f}%"
        name = r.result if len(r.result) <= 35 else "..." + r.result[-32:]
        lines.append(f"{name:<36}{r.metric:<32}{pred:>12}{meas:>12}{err:>9}")
    return "\n".join(lines)
