"""How much of a prediction's error the measurement's own noise explains.

A validation compares each prediction with the *median* of a configuration's repeated runs.
That median is itself a random quantity: on a shared machine the same configuration, run twice,
differs by several percent (the repeats' spread in the report).  Even a perfect simulator then
shows errors, and the largest of them over several held-out runs is what a bound on the worst
run judges.  This module puts a number on it:

- ``pooled_cv``: the run-to-run coefficient of variation of one metric, pooled over every
  configuration with repeats (relative deviations from the configuration's mean,
  ``sum(dev^2) / sum(n - 1)``);
- ``median_se``: the standard error of the median of n runs with that CV (n = 1, 2: the run,
  the mean; n = 3: sqrt(0.4487) sigma, the exact value for normal noise; more: the asymptotic
  1.2533 sigma / sqrt(n));
- ``row_noise``: the standard error of a comparison row's *measured* value: a metric of one
  configuration; a PSD/SD ratio (a closed-form speedup's relative error, or a gain in
  percentage points: 100 (1 + g) times it) from the pooled CV of the per-round ratios
  PSD_r / SD_r (the demo runs a pair's SD and PSD back to back, so what the two runs of a
  round share cancels), or, without paired repeats, from the two medians' errors taken as
  independent (sqrt(se_psd^2 + se_sd^2));
- ``break_chance``: the probability that noise alone, with a perfect prediction, puts at least
  one of the rows beyond the bound: ``1 - prod_i (2 Phi(b / se_i) - 1)``.

The calibration runs are noisy too, which shifts every prediction by one common error; that
is not counted, so the chance is a lower bound for a simulator calibrated from the same
machine.
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

from psdlab.analysis.metrics import summarize

#: var(median of 3) / var(one) for normal noise
_MEDIAN3 = 0.4487

#: the measured metric behind a row's metric (gain and speedup rows)
_RATIO_OF = {"gain.throughput_tok_s": "throughput_tok_s",
             "gain.decode_throughput_tok_s": "decode_throughput_tok_s",
             "speedup.steady": "steady_decode_throughput_tok_s",
             "speedup.decode": "decode_throughput_tok_s"}


def median_se(cv: float, n: int) -> float:
    """Relative standard error of the median of ``n`` runs whose CV is ``cv``."""
    if n < 1:
        raise ValueError(f"n: need at least one run, got {n}")
    if n <= 2:
        return cv / math.sqrt(n)
    if n == 3:
        return cv * math.sqrt(_MEDIAN3)
    return 1.2533 * cv / math.sqrt(n)


def pooled_cv(groups: Iterable[Sequence[float | None]]) -> float | None:
    """Pooled run-to-run CV over groups of repeated measurements of one metric (groups with
    fewer than two values, a missing value or a zero mean are skipped); None without any."""
    ss, dof = 0.0, 0
    for vals in groups:
        if len(vals) < 2 or any(v is None for v in vals):
            continue
        mean = sum(vals) / len(vals)                          # type: ignore[arg-type]
        if mean == 0:
            continue
        ss += sum((v / mean - 1.0) ** 2 for v in vals)        # type: ignore[operator]
        dof += len(vals) - 1
    return math.sqrt(ss / dof) if dof else None


def repeat_values(validation: Any) -> dict[str, list[dict[str, float | None]]]:
    """Per configuration, the flattened metrics of each of its repeats."""
    from psdlab.validation.compare import flatten
    return {c.name: [flatten(summarize(t)) for t in (c.repeats or [c.trace])]
            for c in validation.comparisons}


def metric_cvs(values: Mapping[str, Sequence[Mapping[str, float | None]]]
               ) -> dict[str, float | None]:
    """The pooled CV of every metric the repeats have."""
    keys = {k for runs in values.values() for r in runs for k in r}
    return {k: pooled_cv([[r.get(k) for r in runs] for runs in values.values()])
            for k in sorted(keys)}


def ratio_cvs(values: Mapping[str, Sequence[Mapping[str, Any]]],
              pairs: Mapping[str, tuple[str, str]]) -> dict[str, float | None]:
    """Per ratio metric, the pooled CV of the per-round ratios PSD_r / SD_r over the pairs
    whose SD and PSD configurations have the same number (>= 2) of repeats (the r-th repeats
    of both ran in one round)."""
    out: dict[str, float | None] = {}
    for base in sorted(set(_RATIO_OF.values())):
        groups = []
        for sd, psd in pairs.values():
            a, b = values.get(sd, ()), values.get(psd, ())
            if len(a) != len(b) or len(a) < 2:
                continue
            ratios = [None if x.get(base) in (None, 0) or y.get(base) is None
                      else y[base] / x[base] for x, y in zip(a, b)]
            groups.append(ratios)
        out[base] = pooled_cv(groups)
    return out


def row_noise(row: Any, values: Mapping[str, Sequence[Mapping[str, Any]]],
              cvs: Mapping[str, float | None], pairs: Mapping[str, tuple[str, str]],
              ratio_cv: Mapping[str, float | None] | None = None) -> float | None:
    """Standard error of ``row.measured`` from run-to-run noise, in the row's error units
    (relative, or percentage points for a gain); None when it cannot be told."""
    metric = row.metric
    for suffix in (".det", ".slowdown", ".predicted"):
        if metric.endswith(suffix):
            metric = metric[: -len(suffix)]
    if metric in _RATIO_OF:
        if row.run not in pairs:
            return None
        base = _RATIO_OF[metric]
        sd, psd = pairs[row.run]
        if sd not in values or psd not in values:
            return None
        paired = (ratio_cv or {}).get(base)
        n_sd, n_psd = len(values[sd]), len(values[psd])
        if paired is not None and n_sd == n_psd and n_sd >= 2:
            rel = median_se(paired, n_sd)
        elif cvs.get(base) is not None:
            rel = math.hypot(median_se(cvs[base], n_sd),        # type: ignore[arg-type]
                             median_se(cvs[base], n_psd))       # type: ignore[arg-type]
        else:
            return None
        if metric.startswith("gain."):
            return None if row.measured is None else 100.0 * (1.0 + row.measured) * rel
        return rel
    cv = cvs.get(metric)
    if cv is None or row.run not in values:
        return None
    return median_se(cv, len(values[row.run]))


def break_chance(ses: Sequence[float], bound: float) -> float | None:
    """P(at least one |N(0, se_i^2)| > bound): how often noise alone breaks the bound."""
    if not ses:
        return None
    inside = 1.0
    for se in ses:
        inside *= math.erf(bound / (se * math.sqrt(2.0))) if se > 0 else 1.0
    return 1.0 - inside


def noise_of(validation: Any) -> tuple[dict[str, float | None], Any]:
    """(pooled CVs, row -> standard error function) for one validation."""
    values = repeat_values(validation)
    cvs = metric_cvs(values)
    pairs = {g.name: (g.sd, g.psd) for g in validation.gains}
    rcv = ratio_cvs(values, pairs)
    return cvs, lambda row: row_noise(row, values, cvs, pairs, rcv)
