"""How much of a prediction's error the measurement's own noise explains.

A validation compares each prediction with the *median* of a configuration's repeated runs.
That median is itself a random quantity: on a shared machine the same configuration, run twice,
differs by several percent (the repeats' spread in the report).  Even a perfect simulator then
shows errors, and the largest of them over several held-out runs is what a bound on the worst
run judges.  This module puts a number on it:

- ``pooled_cv``: the run-to-run coefficient of variation of one metric, pooled over
  configurations with repeats (relative deviations from the configuration's mean,
  ``sum(dev^2) / sum(n - 1)``), within each *class* of configurations (``noise_class``: the
  arrival pattern; under Poisson arrivals a window of prompts that drafts badly also fills the
  batches, so the TPOT of a Poisson run varies about twice as much as an offline one's), a
  metric a class has no repeats of taking the pool of all;
- ``median_se``: the standard error of the median of n runs with that CV (n = 1, 2: the run,
  the mean; n = 3: sqrt(0.4487) sigma, the exact value for normal noise; more: the asymptotic
  1.2533 sigma / sqrt(n));
- ``row_noise``: the standard error of a comparison row's *measured* value: a metric of one
  configuration; a PSD/SD ratio (a closed-form speedup's relative error, or a gain in
  percentage points: 100 (1 + g) times it) from the pooled CV of the per-round ratios
  PSD_r / SD_r (the demo runs a pair's SD and PSD back to back, so what the two runs of a
  round share cancels), or, without paired repeats, from the two medians' errors taken as
  independent (sqrt(se_psd^2 + se_sd^2));
- ``break_chance`` (``validation.noise_chance``): the probability that noise alone, with a
  perfect prediction, puts at least one of the rows beyond the bound:
  ``1 - prod_i (2 Phi(b / se_i) - 1)`` for independent rows.
  The SD and PSD runs of one workload serve the same prompts in the same round, so their
  errors are correlated (``pair_correlations``: the pooled correlation of their per-round
  deviations; between two medians of n >= 3 runs, less, ``median_correlation``); such a pair of
  rows counts with the bivariate normal's probability of both inside the bound
  (``inside_both``), so correlated rows are not counted as two independent chances.

- ``calibration_se``: the calibration runs are noisy too, and their noise moves every
  prediction of one metric by one common error (the cost model's level is set by the
  calibration runs' total time, ``validation.nnls_fit``'s ``match_total``).  Run speed does not
  carry from one run to the next on the demo's machine (measured: neighbouring runs' speeds
  are no closer than any two runs'), so that level's standard error is the calibration
  configurations' pooled CV of the metric over the square root of the calibration runs.
  ``break_chance`` integrates over that
  common shift (``common``) for the metrics of one configuration (throughput, TPOT, p99); a
  PSD/SD ratio (gain, speedup) is taken to cancel it, as both runs of a pair are predicted
  from one level.

``NoiseModel.at_repeats`` gives the same noise with n runs of every configuration (the
rows' SEs, their links and the common shift as n runs would have them), from which
``validation.demo.noise_budget`` finds the repeats a bound would need.

What the chance still leaves out, so it stays a lower bound: the acceptance model's own
sampling error on a new prompt set (``validation.set_level`` reports it separately), the
contention coefficient's sampling error (PSD rows only), and the amplification of a cost-level
shift by queueing under Poisson arrivals (its p99 moves more than the level).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from psdlab.analysis.checks import check_int
from psdlab.analysis.metrics import summarize
from psdlab.validation.noise_chance import break_chance

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
        known = [v for v in vals if v is not None]
        if len(vals) < 2 or len(known) < len(vals):
            continue
        mean = sum(known) / len(known)
        if mean == 0:
            continue
        ss += sum((v / mean - 1.0) ** 2 for v in known)
        dof += len(vals) - 1
    return math.sqrt(ss / dof) if dof else None


def repeat_values(validation: Any) -> dict[str, list[dict[str, float | None]]]:
    """Per configuration, the flattened metrics of each of its repeats."""
    from psdlab.validation.compare import flatten
    return {c.name: [flatten(summarize(t)) for t in (c.repeats or [c.trace])]
            for c in validation.comparisons}


def noise_class(trace: Any) -> str:
    """The class a configuration's noise is pooled in: its arrival pattern (``offline``, or
    ``timed`` for arrivals at given times, e.g. Poisson)."""
    return str((getattr(trace.run, "workload", None) or {}).get("arrivals", "offline"))


def metric_cvs(values: Mapping[str, Sequence[Mapping[str, float | None]]]
               ) -> dict[str, float | None]:
    """The pooled CV of every metric the repeats have."""
    keys = {k for runs in values.values() for r in runs for k in r}
    return {k: pooled_cv([[r.get(k) for r in runs] for runs in values.values()])
            for k in sorted(keys)}


def _or(own: Mapping[str, float | None], overall: Mapping[str, float | None]
        ) -> dict[str, float | None]:
    """``own``'s value per key of ``overall``, ``overall``'s where ``own`` has none."""
    return {k: own[k] if own.get(k) is not None else v for k, v in overall.items()}


def class_cvs(values: Mapping[str, Sequence[Mapping[str, float | None]]],
              classes: Mapping[str, str]) -> dict[str, dict[str, float | None]]:
    """Per configuration, the pooled CV of every metric over the configurations of its class
    (``classes``: configuration -> class); a metric its class has no repeats of (or a
    configuration without a class) takes the pool of all configurations."""
    overall = metric_cvs(values)
    by_class = {c: metric_cvs({n: v for n, v in values.items() if classes.get(n) == c})
                for c in set(classes.values())}
    return {name: _or(by_class.get(classes.get(name, ""), {}), overall) for name in values}


def _paired(values: Mapping[str, Sequence[Mapping[str, Any]]],
            pairs: Mapping[str, tuple[str, str]]) -> list[tuple[Sequence, Sequence]]:
    """The (SD repeats, PSD repeats) of the pairs with the same number (>= 2) of repeats."""
    out = []
    for sd, psd in pairs.values():
        a, b = values.get(sd, ()), values.get(psd, ())
        if len(a) == len(b) >= 2:
            out.append((a, b))
    return out


def ratio_cvs(values: Mapping[str, Sequence[Mapping[str, Any]]],
              pairs: Mapping[str, tuple[str, str]]) -> dict[str, float | None]:
    """Per ratio metric, the pooled CV of the per-round ratios PSD_r / SD_r over the pairs
    whose SD and PSD configurations have the same number (>= 2) of repeats (the r-th repeats
    of both ran in one round)."""
    out: dict[str, float | None] = {}
    for base in sorted(set(_RATIO_OF.values())):
        groups = [[None if x.get(base) in (None, 0) or y.get(base) is None
                   else y[base] / x[base] for x, y in zip(a, b)]
                  for a, b in _paired(values, pairs)]
        out[base] = pooled_cv(groups)
    return out


def pair_correlations(values: Mapping[str, Sequence[Mapping[str, Any]]],
                      pairs: Mapping[str, tuple[str, str]]) -> dict[str, float | None]:
    """Per metric, the correlation of the SD and PSD runs' per-round relative deviations
    (each from its configuration's mean), pooled over the pairs with the same number (>= 2)
    of repeats; None where a metric has no such pair or no spread."""
    paired = _paired(values, pairs)
    keys = {k for a, b in paired for r in (*a, *b) for k in r}
    out: dict[str, float | None] = {}
    for key in sorted(keys):
        sxy = sxx = syy = 0.0
        for a, b in paired:
            xs, ys = [r.get(key) for r in a], [r.get(key) for r in b]
            if any(v is None for v in (*xs, *ys)) or not sum(xs) or not sum(ys):
                continue
            mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
            dx, dy = [x / mx - 1 for x in xs], [y / my - 1 for y in ys]
            sxy += sum(x * y for x, y in zip(dx, dy))
            sxx += sum(x * x for x in dx)
            syy += sum(y * y for y in dy)
        out[key] = (max(-1.0, min(1.0, sxy / math.sqrt(sxx * syy)))
                    if sxx > 0 and syy > 0 else None)
    return out


@lru_cache(maxsize=256)
def median_correlation(rho: float, n: int, draws: int = 40000) -> float:
    """Correlation of the medians of n paired runs whose own correlation is ``rho``, for
    normal noise: n <= 2, the mean's, ``rho``; more, from ``draws`` simulated sets (seed 0,
    so the same every time; the asymptotic ``(2 / pi) asin(rho)`` is reached only slowly:
    at n = 7 and rho = 0.9 the medians correlate 0.77, not 0.71)."""
    rho = max(-1.0, min(1.0, rho))
    if n <= 2 or abs(rho) == 1.0:
        return rho
    rng = np.random.default_rng(0)
    a = rng.standard_normal((draws, n))
    b = rho * a + math.sqrt(1.0 - rho * rho) * rng.standard_normal((draws, n))
    return float(np.corrcoef(np.median(a, axis=1), np.median(b, axis=1))[0, 1])


def row_noise(row: Any, values: Mapping[str, Sequence[Mapping[str, Any]]],
              cvs: Mapping[str, float | None], pairs: Mapping[str, tuple[str, str]],
              ratio_cv: Mapping[str, float | None] | None = None,
              config_cvs: Mapping[str, Mapping[str, float | None]] | None = None,
              repeats: int | None = None) -> float | None:
    """Standard error of ``row.measured`` from run-to-run noise, in the row's error units
    (relative, or percentage points for a gain); None when it cannot be told.  ``cvs``: the
    pooled CVs; ``config_cvs``: per configuration, the CVs to use instead (``class_cvs``);
    ``repeats``: the number of runs every configuration is taken to have (None: its own)."""
    def count(name: str) -> int:
        return len(values[name]) if repeats is None else repeats

    def of(name: str) -> Mapping[str, float | None]:
        return (config_cvs or {}).get(name, cvs)

    metric = base_metric(row.metric)
    if metric in _RATIO_OF:
        if row.run not in pairs:
            return None
        base = _RATIO_OF[metric]
        sd, psd = pairs[row.run]
        if sd not in values or psd not in values:
            return None
        paired = (ratio_cv or {}).get(base)
        n_sd, n_psd = count(sd), count(psd)
        if paired is not None and n_sd == n_psd and n_sd >= 2:
            rel = median_se(paired, n_sd)
        elif ((cv_sd := of(sd).get(base)) is not None
              and (cv_psd := of(psd).get(base)) is not None):
            rel = math.hypot(median_se(cv_sd, n_sd), median_se(cv_psd, n_psd))
        else:
            return None
        if metric.startswith("gain."):
            return None if row.measured is None else 100.0 * (1.0 + row.measured) * rel
        return rel
    cv = of(row.run).get(metric)
    if cv is None or row.run not in values:
        return None
    return median_se(cv, count(row.run))


def base_metric(metric: str) -> str:
    """A row's metric without its variant suffix (``.det``, ``.slowdown``, ``.predicted``)."""
    for suffix in (".det", ".slowdown", ".predicted"):
        if metric.endswith(suffix):
            metric = metric[: -len(suffix)]
    return metric


def calibration_se(values: Mapping[str, Sequence[Mapping[str, float | None]]],
                   calibration: Iterable[str]) -> dict[str, float]:
    """Per metric of one configuration, the standard error of the common shift the
    calibration runs' noise puts on every prediction: their pooled run-to-run CV over the
    square root of their number (module docstring); empty without calibration repeats."""
    cal = {n: values[n] for n in calibration if n in values}
    runs = sum(len(v) for v in cal.values())
    if runs == 0:
        return {}
    return {k: cv / math.sqrt(runs) for k, cv in metric_cvs(cal).items()
            if cv is not None and k not in _RATIO_OF}


@dataclass(frozen=True)
class NoiseModel:
    """One validation's noise: pooled and per-configuration CVs, per-round ratio CVs and the
    SD/PSD pairs' correlations (``noise_of``)."""
    values: Mapping[str, Sequence[Mapping[str, Any]]]
    cvs: Mapping[str, float | None]
    config_cvs: Mapping[str, Mapping[str, float | None]]
    pairs: Mapping[str, tuple[str, str]]
    ratio_cv: Mapping[str, Mapping[str, float | None]]       # class -> ratio metric -> cv
    correlations: Mapping[str, Mapping[str, float | None]]   # class -> metric -> rho
    classes: Mapping[str, str]
    common: Mapping[str, float] = field(default_factory=dict)  # metric -> calibration_se
    #: runs behind ``common`` and the configurations they are repeats of
    calibration_runs: int = 0
    calibration_configs: int = 0
    #: the number of runs every configuration is taken to have (None: its own; `at_repeats`)
    repeats: int | None = None

    def at_repeats(self, n: int) -> "NoiseModel":
        """The same noise with ``n`` runs of every configuration (the calibration's too): what
        each row's SE and the common shift would be with that many repeats."""
        n = check_int("repeats", n, 1)
        runs = self.calibration_configs * n
        scale = math.sqrt(self.calibration_runs / runs) if runs else 0.0
        return replace(self, repeats=n, common={k: v * scale for k, v in self.common.items()})

    def runs(self, name: str) -> int:
        """The runs behind configuration ``name``'s median (``repeats`` where set)."""
        return len(self.values.get(name, ())) if self.repeats is None else self.repeats

    def common_se(self, row: Any) -> float:
        """SE of the calibration's common shift on a row's metric (0 for a PSD/SD ratio and
        a metric without one)."""
        return float(self.common.get(base_metric(row.metric), 0.0))

    def se(self, row: Any) -> float | None:
        sd = self.pairs.get(row.run, (row.run,))[0]
        return row_noise(row, self.values, self.cvs, self.pairs,
                         self.ratio_cv.get(self.classes.get(sd, ""), self.ratio_cv.get("", {})),
                         self.config_cvs, self.repeats)

    def chance(self, rows: Sequence[Any], bound: float) -> float | None:
        """P(noise alone breaks ``bound`` on at least one of ``rows``) (`break_chance` with
        the rows' SEs, their links and the common shift); None when a row's SE is unknown."""
        ses = [self.se(r) for r in rows]
        known = [se for se in ses if se is not None and se > 0]
        if not ses or len(known) < len(ses):
            return None
        return break_chance(known, bound, self.links(rows), self.common_se(rows[0]))

    def links(self, rows: Sequence[Any]) -> list[tuple[int, int, float]]:
        """(i, j, correlation of their medians) for rows i, j of one metric that are the SD
        and PSD configurations of one pair (gain rows are one per pair: none)."""
        at = {(r.run, base_metric(r.metric)): i for i, r in enumerate(rows)}
        psd_of = {sd: psd for sd, psd in self.pairs.values()}
        out = []
        for (run, metric), i in at.items():
            j = at.get((psd_of.get(run), metric))
            rho = self.correlations.get(self.classes.get(run, ""), {}).get(metric)
            if j is not None and rho is not None:
                out.append((i, j, median_correlation(rho, self.runs(run))))
        return out


def noise_of(validation: Any) -> NoiseModel:
    """The noise model of one validation: CVs pooled within each configuration's class
    (``noise_class``), per-round ratio CVs and pair correlations within each class (a ratio
    CV a class has no pairs for: the pool of all pairs, under class ``""``), and the
    calibration's common shift per metric from its ``calibration`` configurations."""
    values = repeat_values(validation)
    classes = {c.name: noise_class(c.trace) for c in validation.comparisons}
    pairs = {g.name: (g.sd, g.psd) for g in validation.gains}
    by_class = {c: {n: p for n, p in pairs.items() if classes.get(p[0]) == c}
                for c in set(classes.values())}
    overall = ratio_cvs(values, pairs)
    rcv = {c: _or(ratio_cvs(values, ps), overall) for c, ps in by_class.items()}
    rcv[""] = overall
    cal = [n for n in getattr(validation, "calibration", ()) if n in values]
    return NoiseModel(values, metric_cvs(values), class_cvs(values, classes), pairs, rcv,
                      {c: pair_correlations(values, ps) for c, ps in by_class.items()},
                      classes, calibration_se(values, cal),
                      sum(len(values[n]) for n in cal), len(cal))
