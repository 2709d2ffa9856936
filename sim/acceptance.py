"""Acceptance models: how many of k draft tokens the target accepts, chosen by name.

Specs (``make_acceptance(spec)``):

- ``{"name": "geometric", "alpha": 0.8}``: each draft token is accepted with probability alpha
  independently; the count is the number of leading successes, truncated at k.
  E[accepted | k] = alpha (1 - alpha^k) / (1 - alpha).
- ``{"name": "positional", "rates": [0.9, 0.8, ...]}``: the i-th draft token (1-based) is
  accepted with probability rates[i-1] given that all before it were; positions beyond the list
  use its last rate.  E = sum_i prod_{j<=i} rates[j].
- ``{"name": "beta", "mean": 0.8, "concentration": 10}``: each request draws its own alpha ~
  Beta(mean * conc, (1 - mean) * conc) at arrival, then geometric.  E uses the exact moments
  E[alpha^i] = prod_{j<i} (a + j) / (a + b + j).
- ``{"name": "replay", "trace": "run.jsonl", "beyond": "clip"}``: replays the accepted counts of
  a psdlab trace's step records (``verified`` rows, in file order: step by step, sequence by
  sequence), cycling back to the start when exhausted, one count per sampled sequence.  Each
  count is clipped to the k asked for.  When k exceeds the proposal length that was measured,
  a fully accepted record is censored (the trace cannot say how many more would have passed):
  ``beyond = "clip"`` (default) returns the measured count (a lower bound), ``beyond =
  "geometric"`` extends it with geometric draws at the trace's per-token acceptance rate.  An
  inline ``{"name": "replay", "counts": [...], "proposed": k}`` replays a list instead.
- ``{"name": "matches", "requests": {ID: "0111.1..."}, "fallback": SPEC}``: each request's
  greedy match pattern, position by position (``sim.acceptance_matches``): exact for greedy
  decoding at any k, for the requests and positions it knows.
- ``{"name": "fitted", "styles": {...}, "default": b, "draft": [...], "output": d, "sigma": s}``:
  a logistic model per draft position, request style, output position and request level
  (``sim.acceptance_fitted``), for requests no calibration saw.
- ``{"name": "resampled", "styles": {style: ["0111.1...", ...]}, "fallback": SPEC}``: each
  request draws the whole match pattern of a calibration request of its style
  (``sim.acceptance_resampled``), for requests no calibration saw.

Interface: ``request_params(rng, n)`` gives the per-request parameter drawn at arrival (the
alpha for geometric and beta; rates[0] for positional; the index of the record the request would
start at for replay -- informational), ``sample(rng, params, k)`` the accepted count per
sequence (ints in [0, k_i], vectorised over sequences), ``expected_accepted(k)``.  Replay keeps a
cursor (its only state): ``reset()`` rewinds it; a fresh model starts at the first record.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from psdlab.analysis.checks import check_choice, check_fields, check_int, check_range
from psdlab.sim.acceptance_draws import KMAX, leading_accepted
from psdlab.sim.acceptance_draws import k_array as _k_array



class AcceptanceModel:
    """Base class; see the module docstring."""
    kind = ""

    def request_params(self, rng: np.random.Generator, n: int) -> np.ndarray:
        raise NotImplementedError

    def sample(self, rng: np.random.Generator, params: np.ndarray, k) -> np.ndarray:
        raise NotImplementedError

    def expected_accepted(self, k: int) -> float:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {"name": self.kind}


class KeyedAcceptanceModel(AcceptanceModel):
    """Base class of the pattern-based models (``matches``, ``fitted``, ``resampled``):
    ``request_params`` also takes the workload's request keys, and ``sample_at(rng, params, k,
    pos)`` gives the accepted counts when drafting from output positions ``pos``."""
    needs_keys = True

    def request_params(self, rng: np.random.Generator, n: int,
                       keys: Sequence[Any] | None = None) -> np.ndarray:
        raise NotImplementedError

    def sample_at(self, rng: np.random.Generator, params: np.ndarray, k,
                  pos) -> np.ndarray:
        raise NotImplementedError


def _geometric_counts(rng: np.random.Generator, alpha: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Leading successes of Bernoulli(alpha) trials, truncated at k (vectorised)."""
    alpha = np.broadcast_to(np.asarray(alpha, dtype=float), k.shape)
    # numpy's geometric(p) counts trials up to and including the first success (>= 1), so with
    # p = 1 - alpha it is 1 + (leading acceptances).  alpha = 1 never fails: take k.
    p_fail = np.maximum(1.0 - alpha, 1e-300)
    counts = rng.geometric(p_fail) - 1 if k.size else np.zeros(0, dtype=np.int64)
    counts = np.where(alpha >= 1.0, k, counts)
    return np.minimum(counts, k).astype(np.int64)


def _geometric_mean(alpha: float, k: int) -> float:
    if alpha >= 1.0:
        return float(k)
    return alpha * (1.0 - alpha ** k) / (1.0 - alpha)


@dataclass(frozen=True)
class GeometricAcceptance(AcceptanceModel):
    alpha: float
    kind = "geometric"

    def request_params(self, rng, n):
        return np.full(n, self.alpha)

    def sample(self, rng, params, k):
        params = np.asarray(params, dtype=float)
        return _geometric_counts(rng, params, _k_array(k, params.size))

    def expected_accepted(self, k):
        return _geometric_mean(self.alpha, check_int("k", k, 0, KMAX))

    def describe(self):
        return {"name": self.kind, "alpha": self.alpha}


@dataclass(frozen=True)
class BetaAcceptance(AcceptanceModel):
    mean: float
    concentration: float
    kind = "beta"

    @property
    def ab(self) -> tuple[float, float]:
        return self.mean * self.concentration, (1.0 - self.mean) * self.concentration

    def request_params(self, rng, n):
        a, b = self.ab
        return rng.beta(a, b, n)

    def sample(self, rng, params, k):
        params = np.asarray(params, dtype=float)
        return _geometric_counts(rng, params, _k_array(k, params.size))

    def expected_accepted(self, k):
        k = check_int("k", k, 0, KMAX)
        a, b = self.ab
        total, moment = 0.0, 1.0
        for j in range(k):
            moment *= (a + j) / (a + b + j)          # E[alpha^(j+1)]
            total += moment
        return total

    def describe(self):
        return {"name": self.kind, "mean": self.mean, "concentration": self.concentration}


@dataclass(frozen=True)
class PositionalAcceptance(AcceptanceModel):
    rates: tuple[float, ...]
    kind = "positional"

    def _rates(self, k: int) -> np.ndarray:
        r = np.asarray(self.rates, dtype=float)
        if k <= r.size:
            return r[:k]
        return np.concatenate([r, np.full(k - r.size, r[-1])])

    def request_params(self, rng, n):
        return np.full(n, self.rates[0])

    def sample(self, rng, params, k):
        n = np.asarray(params).size
        return leading_accepted(n, k, lambda kmax: rng.random((n, kmax)) < self._rates(kmax))

    def expected_accepted(self, k):
        k = check_int("k", k, 0, KMAX)
        return float(np.cumprod(self._rates(k)).sum()) if k else 0.0

    def describe(self):
        return {"name": self.kind, "rates": list(self.rates)}


@dataclass(eq=False)
class ReplayAcceptance(AcceptanceModel):
    counts: np.ndarray            # measured accepted counts, in order
    proposed: np.ndarray          # the proposal length each was measured at
    beyond: str = "clip"
    source: str = ""
    cursor: int = field(default=0)
    kind = "replay"

    @property
    def alpha_hat(self) -> float:
        """Per-token acceptance rate of the trace (accepted / (accepted + rejections))."""
        rejections = int((self.counts < self.proposed).sum())
        acc = int(self.counts.sum())
        return acc / (acc + rejections) if acc + rejections else 0.0

    def reset(self) -> None:
        self.cursor = 0

    def request_params(self, rng, n):
        return np.full(n, float(self.cursor % self.counts.size))

    def _take(self, n: int) -> np.ndarray:
        idx = (self.cursor + np.arange(n)) % self.counts.size
        self.cursor = int((self.cursor + n) % self.counts.size)
        return idx

    def sample(self, rng, params, k):
        n = np.asarray(params).size
        karr = _k_array(k, n)
        idx = self._take(n)
        counts, proposed = self.counts[idx], self.proposed[idx]
        if self.beyond == "geometric":
            censored = (counts >= proposed) & (karr > proposed)
            if censored.any():
                extra = _geometric_counts(rng, np.full(int(censored.sum()), self.alpha_hat),
                                          karr[censored] - proposed[censored])
                counts = counts.copy()
                counts[censored] += extra
        return np.minimum(counts, karr).astype(np.int64)

    def expected_accepted(self, k):
        k = check_int("k", k, 0, KMAX)
        base = np.minimum(self.counts, k).astype(float)
        if self.beyond == "geometric":
            censored = (self.counts >= self.proposed) & (k > self.proposed)
            a = self.alpha_hat
            base[censored] += [_geometric_mean(a, int(k - p)) for p in self.proposed[censored]]
        return float(base.mean())

    def describe(self):
        return {"name": self.kind, "trace": self.source, "records": int(self.counts.size),
                "beyond": self.beyond}


# ---------------------------------------------------------------------------- factory

def _require(spec: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in spec:
        raise ValueError(f"{where}.{key}: missing (required by {spec.get('name')!r})")
    return spec[key]


def load_replay_counts(path: str | os.PathLike, where: str = "acceptance.trace"
                       ) -> tuple[np.ndarray, np.ndarray]:
    """(accepted, proposed) of every verified row of a psdlab trace, in file order."""
    from psdlab.analysis.trace import StepRecord, iter_records
    acc: list[int] = []
    prop: list[int] = []
    name = os.fspath(path)
    with open(path, encoding="utf-8") as fh:
        for rec in iter_records(fh, name):
            if isinstance(rec, StepRecord):
                for v in rec.verified:
                    acc.append(v.accepted)
                    prop.append(v.proposed)
    if not acc:
        raise ValueError(f"{where}: {name} has no verified rows in its step records")
    return np.asarray(acc, dtype=np.int64), np.asarray(prop, dtype=np.int64)


def _make_replay(spec: Mapping[str, Any], where: str) -> ReplayAcceptance:
    check_fields(spec, where, optional=("trace", "counts", "proposed", "beyond"))
    beyond = check_choice(f"{where}.beyond", spec.get("beyond", "clip"), ("clip", "geometric"))
    if ("trace" in spec) == ("counts" in spec):
        raise ValueError(f"{where}.trace: give exactly one of 'trace' (a psdlab trace file) or "
                         f"'counts' (a list)")
    if "trace" in spec:
        if "proposed" in spec:
            raise ValueError(f"{where}.proposed: only with 'counts' (a trace records its own)")
        counts, proposed = load_replay_counts(spec["trace"], f"{where}.trace")
        return ReplayAcceptance(counts=counts, proposed=proposed, beyond=beyond,
                                source=os.fspath(spec["trace"]))
    raw = spec["counts"]
    if not isinstance(raw, (list, tuple)) or not raw:
        raise ValueError(f"{where}.counts: expected a non-empty list of integers >= 0")
    prop = check_int(f"{where}.proposed", _require(spec, "proposed", where), 1, KMAX)
    counts = np.asarray([check_int(f"{where}.counts[{i}]", c, 0, prop) for i, c in enumerate(raw)],
                        dtype=np.int64)
    return ReplayAcceptance(counts=counts, proposed=np.full(counts.size, prop, dtype=np.int64),
                            beyond=beyond, source="inline")


def make_basic_acceptance(spec: Mapping[str, Any], where: str = "acceptance"
                          ) -> AcceptanceModel:
    """Build a geometric, positional, beta or replay model from its spec (module docstring);
    ``sim.acceptance_registry.make_acceptance`` builds every model by name."""
    if not isinstance(spec, Mapping):
        raise ValueError(f"{where}: expected a table with a 'name', got {spec!r}")
    name = spec.get("name")
    if name == "geometric":
        check_fields(spec, where, optional=("alpha",))
        return GeometricAcceptance(check_range(f"{where}.alpha", _require(spec, "alpha", where),
                                               0.0, 1.0))
    if name == "positional":
        check_fields(spec, where, optional=("rates",))
        rates = _require(spec, "rates", where)
        if not isinstance(rates, (list, tuple)) or not rates:
            raise ValueError(f"{where}.rates: expected a non-empty list of numbers in [0, 1]")
        return PositionalAcceptance(tuple(check_range(f"{where}.rates[{i}]", r, 0.0, 1.0)
                                          for i, r in enumerate(rates)))
    if name == "beta":
        check_fields(spec, where, optional=("mean", "concentration"))
        mean = check_range(f"{where}.mean", _require(spec, "mean", where), 0.0, 1.0,
                           lo_open=True, hi_open=True)
        conc = check_range(f"{where}.concentration", _require(spec, "concentration", where),
                           0.0, 1e6, lo_open=True)
        return BetaAcceptance(mean, conc)
    if name == "replay":
        return _make_replay(spec, where)
    raise ValueError(f"{where}.name: unknown acceptance model {name!r}; known: "
                     f"{', '.join(BASIC_MODELS)}")


#: the models this module builds; ``sim.acceptance_registry`` adds the pattern-based ones
BASIC_MODELS = ("geometric", "positional", "beta", "replay")
