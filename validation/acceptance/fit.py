"""Fit the simulator's acceptance models from the verified rows of traces.

- Per-position conditional rates: rate[j] = P(draft token j+1 accepted | tokens 1..j accepted).
  A row [req, proposed p, accepted a] tried position j when j < p and a >= j, and accepted it
  when a > j.  95% Wilson intervals per position.
- Per-request spread: each request's token acceptance probability alpha_i is estimated from its
  rows (successes S_i = sum a, Bernoulli trials N_i = sum (a + [a < p]): acceptance stops at the
  first rejection, which does not change the Bernoulli likelihood) and a Beta(mean,
  concentration) is fitted to the alpha_i by the method of moments, with the binomial noise
  of short requests subtracted from their variance.  95% intervals by a seeded bootstrap over
  requests.
- Greedy traces (all of them): each request's match pattern, position by position
  (``validation.acceptance.match_patterns``), the ``matches`` model, which then is the default.
- Traces whose rows are spread from per-step totals (imported engines that log only totals, run
  extra ``verified_rows = "step-totals"``) identify neither; from those only the overall
  verification success rate is used, turned into a geometric per-token rate alpha.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
from scipy import optimize

from psdlab.analysis.trace import Trace

#: marker an importer puts in ``run.extra["verified_rows"]`` when rows come from step totals
STEP_TOTALS = "step-totals"
#: concentration reported when the data show no spread beyond binomial noise
MAX_CONCENTRATION = 1e6
_BOOTSTRAP = 200


@dataclass(frozen=True)
class AcceptanceFit:
    method: str                                  # "per-row" or "geometric-from-totals"
    rates: tuple[float, ...]                     # per-position conditional rates
    rates_ci: tuple[tuple[float, float], ...]
    trials: tuple[int, ...]                      # rows that tried each position
    mean: float                                  # Beta mean (per-token acceptance)
    mean_ci: tuple[float, float]
    concentration: float | None                  # Beta concentration (None: not identified)
    concentration_ci: tuple[float, float] | None
    n_requests: int
    n_rows: int
    vsr: float                                   # accepted / proposed draft tokens
    notes: tuple[str, ...] = field(default=())
    patterns: Any = None                         # acceptance.match_patterns.Patterns (greedy)

    def specs(self) -> dict[str, dict]:
        """Acceptance specs for ``sim.acceptance_registry.make_acceptance``, by name: ``positional``
        and ``beta`` from per-row data, ``geometric`` from per-step totals."""
        out: dict[str, dict] = {}
        if self.method != "per-row":
            out["geometric"] = {"name": "geometric", "alpha": self.mean}
            return out
        if self.rates:
            out["positional"] = {"name": "positional", "rates": list(self.rates)}
        if self.concentration is not None and 0 < self.mean < 1:
            out["beta"] = {"name": "beta", "mean": self.mean,
                           "concentration": self.concentration}
        if self.patterns is not None and "positional" in out:
            out["matches"] = self.patterns.spec(out["positional"])
        return out

    @property
    def default(self) -> str:
        """The spec name to use when none is asked for: the greedy match patterns when the
        traces are greedy, else the per-position rates (per-row data) or geometric."""
        if self.method != "per-row":
            return "geometric"
        return "matches" if self.patterns is not None and self.rates else "positional"

    def to_dict(self) -> dict:
        return {
            "method": self.method, "rates": list(self.rates),
            "rates_ci95": [list(c) for c in self.rates_ci], "trials": list(self.trials),
            "mean": self.mean, "mean_ci95": list(self.mean_ci),
            "concentration": self.concentration,
            "concentration_ci95": None if self.concentration_ci is None
            else list(self.concentration_ci),
            "n_requests": self.n_requests, "n_rows": self.n_rows, "vsr": self.vsr,
            "notes": list(self.notes),
            "match_patterns": None if self.patterns is None else self.patterns.to_dict(),
        }


def wilson(successes: int, trials: int, z: float = 1.959964) -> tuple[float, float]:
    """95% Wilson score interval for a binomial proportion."""
    if trials == 0:
        return 0.0, 1.0
    p = successes / trials
    denom = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * np.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    return float(max(0.0, centre - half)), float(min(1.0, centre + half))


def positional_rates(p: np.ndarray, a: np.ndarray):
    """Per-position conditional rates, Wilson CIs and trial counts (positions with trials)."""
    kmax = int(p.max()) if len(p) else 0
    rates, cis, trials = [], [], []
    for j in range(kmax):
        tried = int(np.sum((p > j) & (a >= j)))
        if tried == 0:
            break
        ok = int(np.sum(a > j))
        rates.append(ok / tried)
        cis.append(wilson(ok, tried))
        trials.append(tried)
    return tuple(rates), tuple(cis), tuple(trials)


def beta_moments(s: np.ndarray, n: np.ndarray) -> tuple[float, float]:
    """Method of moments for a Beta spread of per-request rates: (mean, concentration) from
    successes s of n trials per request.  The mean is the plain mean of the rates x = s/n (a
    trial-weighted mean would be biased: requests that accept more run more trials); the
    spread is their variance less the binomial noise, estimated without bias by
    mean(x(1-x)/(n-1)); concentration = mean(1-mean)/spread - 1.  Requests with < 2 trials
    are left out."""
    keep = n >= 2
    s, n = s[keep], n[keep]
    if len(n) == 0:
        return float("nan"), MAX_CONCENTRATION
    x = s / n
    mu = float(x.mean())
    if len(n) < 2 or mu <= 0 or mu >= 1:
        return mu, MAX_CONCENTRATION
    spread = float(x.var(ddof=1) - np.mean(x * (1 - x) / (n - 1)))
    if spread <= 0:
        return mu, MAX_CONCENTRATION
    return mu, float(np.clip(mu * (1 - mu) / spread - 1, 1e-6, MAX_CONCENTRATION))


def _detail_rows(traces: Sequence[Trace]):
    p, a, key = [], [], []
    for ti, tr in enumerate(traces):
        if tr.run.extra.get("verified_rows") == STEP_TOTALS:
            continue
        for step in tr.steps:
            for v in step.verified:
                if v.proposed > 0:
                    p.append(v.proposed)
                    a.append(v.accepted)
                    key.append((ti, str(v.req)))
    return np.array(p, dtype=int), np.array(a, dtype=int), key


def _per_request(p: np.ndarray, a: np.ndarray, key: list) -> tuple[np.ndarray, np.ndarray]:
    s_by: defaultdict[Any, int] = defaultdict(int)
    n_by: defaultdict[Any, int] = defaultdict(int)
    for pi, ai, k in zip(p, a, key):
        s_by[k] += int(ai)
        n_by[k] += int(ai) + int(ai < pi)
    keys = list(s_by)
    return (np.array([s_by[k] for k in keys], dtype=float),
            np.array([n_by[k] for k in keys], dtype=float))


def _bootstrap_beta(s: np.ndarray, n: np.ndarray, seed: int):
    rng = np.random.default_rng(seed)
    means, concs = [], []
    for _ in range(_BOOTSTRAP):
        idx = rng.integers(0, len(s), len(s))
        mu, c = beta_moments(s[idx], n[idx])
        means.append(mu)
        concs.append(c)
    q = (2.5, 97.5)
    return tuple(map(float, np.percentile(means, q))), tuple(map(float, np.percentile(concs, q)))


def fit_acceptance(traces: Sequence[Trace], *, seed: int = 0) -> AcceptanceFit:
    """Fit the per-position rates and the per-request Beta spread (module docstring)."""
    p, a, key = _detail_rows(traces)
    if len(p) == 0:
        return _fit_from_totals(traces, seed)
    rates, cis, trials = positional_rates(p, a)
    s, n = _per_request(p, a, key)
    mu, conc = beta_moments(s, n)
    notes = []
    if len(s) >= 2:
        mean_ci, conc_ci = _bootstrap_beta(s, n, seed)
    else:
        mean_ci, conc_ci = wilson(int(s.sum()), int(n.sum())), (0.0, MAX_CONCENTRATION)
        notes.append("one request only: the per-request spread is not identified")
    if conc >= MAX_CONCENTRATION:
        notes.append("no per-request spread beyond binomial noise (concentration capped)")
    from psdlab.validation.acceptance.match_patterns import match_patterns
    patterns = match_patterns(traces) if all_greedy(traces) else None
    if patterns is not None:
        notes.append(f"greedy traces: match patterns of {len(patterns.patterns)} requests, "
                     f"{patterns.coverage:.0%} of their positions known "
                     f"({patterns.conflicts} disagreements between runs)")
    return AcceptanceFit(method="per-row", rates=rates, rates_ci=cis, trials=trials, mean=mu,
                         mean_ci=mean_ci, concentration=conc, concentration_ci=conc_ci,
                         n_requests=len(s), n_rows=len(p), vsr=float(a.sum() / p.sum()),
                         notes=tuple(notes), patterns=patterns)


def all_greedy(traces: Sequence[Trace]) -> bool:
    """Every trace with draft rows was decoded greedily (``run.extra["temperature"] == 0``)."""
    from psdlab.validation.acceptance.match_patterns import is_greedy
    drafted = [t for t in traces if any(v.proposed > 0 for s in t.steps for v in s.verified)]
    return bool(drafted) and all(is_greedy(t) for t in drafted)


def _expected_accepted(alpha: float, k: np.ndarray) -> np.ndarray:
    """E[accepted] of a k-token draft under a geometric per-token rate alpha."""
    if alpha >= 1:
        return k.astype(float)
    return alpha * (1 - alpha ** k) / (1 - alpha)


def fit_geometric_alpha(k: np.ndarray, accepted: np.ndarray) -> float:
    """The alpha whose expected accepted count over drafts of lengths k matches the total."""
    k = np.asarray(k, dtype=float)
    target = float(np.sum(accepted))
    if target <= 0:
        return 0.0
    if target >= k.sum():
        return 1.0
    return float(optimize.brentq(lambda x: _expected_accepted(x, k).sum() - target, 0.0,
                                 1 - 1e-12))


def _step_totals(traces: Sequence[Trace]):
    """Per step: draft length per sequence (k), sequences verified, accepted total."""
    ks, seqs, acc = [], [], []
    for tr in traces:
        for step in tr.steps:
            rows = [v for v in step.verified if v.proposed > 0]
            if rows:
                ks.append(max(v.proposed for v in rows))
                seqs.append(len(rows))
                acc.append(sum(v.accepted for v in rows))
    return np.array(ks), np.array(seqs), np.array(acc)


def _fit_from_totals(traces: Sequence[Trace], seed: int) -> AcceptanceFit:
    ks, seqs, acc = _step_totals(traces)
    if len(ks) == 0:
        raise ValueError("traces: no verified draft tokens to fit an acceptance model to "
                         "(all runs autoregressive?)")
    per_seq_k = np.repeat(ks, seqs)
    alpha = fit_geometric_alpha(per_seq_k, np.array([acc.sum()]))
    rng = np.random.default_rng(seed)
    boot = []
    for _ in range(_BOOTSTRAP):
        idx = rng.integers(0, len(ks), len(ks))
        boot.append(fit_geometric_alpha(np.repeat(ks[idx], seqs[idx]), np.array([acc[idx].sum()])))
    lo, hi = map(float, np.percentile(boot, (2.5, 97.5)))
    ci = (lo, hi)
    kmax = int(ks.max())
    return AcceptanceFit(
        method="geometric-from-totals", rates=(alpha,) * kmax, rates_ci=(ci,) * kmax,
        trials=(0,) * kmax, mean=alpha, mean_ci=ci, concentration=None, concentration_ci=None,
        n_requests=0, n_rows=int(seqs.sum()), vsr=float(acc.sum() / (ks * seqs).sum()),
        notes=("the traces log only per-step totals: per-position rates assume one geometric "
               "per-token rate, and the per-request spread is not identified",))
