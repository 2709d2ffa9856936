"""The ``fitted`` acceptance model: a logistic model of each draft token's acceptance that
transfers to requests the calibration never saw (``validation.acceptance.transfer`` fits it).

The i-th draft token (1-based) of a proposal drafted from output position ``pos`` sits at
output position n = pos + i - 1.  Given that tokens 1 .. i-1 were accepted, it is accepted
with probability

    q = sigmoid(b[style] + u * exp(g * (min(i, P) - 1)) + c[i] + d * log(n))

- ``b[style]``: the request's style (its key up to the first ``-``: the shipped prompt ids are
  ``chat-14``, ``code-12``, ...); keys of no listed style use ``default``;
- ``u ~ Normal(0, sigma^2)``: the request's own level, drawn once at arrival (the per-request
  spread: some prompts are easy to draft for, some hard; the levels of one run's requests are
  drawn together by Latin hypercube sampling, ``stratified_normal``: each exactly normal, the
  run's levels spread evenly over the distribution, so a prediction averaged over few seeds
  does not inherit those seeds' luck), weighing ``exp(g (min(i, P) - 1))``
  at draft position i (``spread_growth`` g, 0 by default: one weight; P: the length of the
  ``draft`` list), so the spread between requests may grow or shrink along a proposal;
- ``c[i]``: the draft position (positions beyond the list use its last entry): how acceptance
  changes along a proposal, which is how it changes with k;
- ``d``: the trend along the output (log of the output position).

Spec: ``{"name": "fitted", "styles": {"chat": 1.2, ...}, "default": 1.0, "draft": [0.0, 0.3,
...], "output": 0.0, "sigma": 0.5, "spread_growth": 0.0, "ref_position": 16}``
(``ref_position``: the output position ``expected_accepted`` evaluates at, for callers that
know no position).

Interface as ``sim.acceptance_matches``: ``needs_keys`` (``request_params(rng, n, keys)``
returns each request's ``[b[style], u]``, an [n, 2] array) and ``sample_at(rng, params, k,
pos)``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
from scipy.special import ndtri

from psdlab.analysis.checks import check_fields, check_int, check_range
from psdlab.sim.acceptance import KeyedAcceptanceModel
from psdlab.sim.acceptance_draws import KMAX, leading_accepted

#: the expectation over u: a midpoint rule over z = u / sigma in [-7, 7] (the acceptance
#: probabilities are steep in u where the spread grows along a proposal, which a few
#: Gauss-Hermite nodes integrate badly)
_Z = np.linspace(-7.0, 7.0, 801)
_ZW = np.exp(-0.5 * _Z ** 2) / np.exp(-0.5 * _Z ** 2).sum()


def style_of(key: Any) -> str:
    """The style part of a request key: the text before the first ``-``."""
    return str(key).split("-", 1)[0]


def stratified_normal(rng: np.random.Generator, n: int) -> np.ndarray:
    """n standard normal draws by Latin hypercube sampling: draw i is the normal quantile of a
    uniform point in stratum pi(i) of n equal-probability strata (pi a random permutation).
    Each draw is exactly N(0, 1); together they cover the distribution evenly, so a run's mean
    over its requests carries far less of the draws' own noise than n independent draws."""
    if n <= 0:
        return np.zeros(0)
    q = (rng.permutation(n) + rng.random(n)) / n
    return ndtri(np.clip(q, 1e-12, 1.0 - 1e-12))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


@dataclass(frozen=True)
class FittedAcceptance(KeyedAcceptanceModel):
    styles: tuple[tuple[str, float], ...]
    default: float
    draft: tuple[float, ...]
    output: float = 0.0
    sigma: float = 0.0
    ref_position: float = 16.0
    spread_growth: float = 0.0
    kind = "fitted"
    needs_keys = True

    def base(self, key: Any) -> float:
        return dict(self.styles).get(style_of(key), self.default)

    def _draft(self, kmax: int) -> np.ndarray:
        c = np.asarray(self.draft, dtype=float)
        return c[:kmax] if kmax <= c.size else np.concatenate([c, np.full(kmax - c.size, c[-1])])

    def request_params(self, rng, n, keys: Sequence[Any] | None = None) -> np.ndarray:
        """[n, 2]: each request's style level and own level u."""
        if keys is not None and len(keys) != n:
            raise ValueError(f"keys: {len(keys)} keys for {n} requests")
        base = (np.full(n, self.default) if keys is None
                else np.array([self.base(k) for k in keys], dtype=float))
        return np.column_stack([base, self.sigma * stratified_normal(rng, n)
                                if self.sigma > 0 else np.zeros(n)])

    def spread_weights(self, kmax: int) -> np.ndarray:
        """The weight of the request level u at draft positions 1 .. kmax."""
        i = np.minimum(np.arange(kmax), len(self.draft) - 1)
        return np.exp(self.spread_growth * i)

    def probabilities(self, params: np.ndarray, pos: np.ndarray, kmax: int) -> np.ndarray:
        """[n, kmax] conditional acceptance probabilities of draft positions 1 .. kmax for
        requests of ``params`` (``request_params`` rows)."""
        par = np.asarray(params, dtype=float).reshape(-1, 2)
        n_out = np.maximum(np.asarray(pos, dtype=float)[:, None] + np.arange(kmax)[None, :], 1.0)
        eta = (par[:, :1] + par[:, 1:] * self.spread_weights(kmax)[None, :]
               + self._draft(kmax)[None, :] + self.output * np.log(n_out))
        return _sigmoid(eta)

    def sample_at(self, rng, params, k, pos) -> np.ndarray:
        params = np.asarray(params, dtype=float).reshape(-1, 2)
        n = len(params)
        return leading_accepted(n, k, lambda kmax: rng.random((n, kmax)) < self.probabilities(
            params, np.broadcast_to(np.asarray(pos), (n,)), kmax))

    def sample(self, rng, params, k) -> np.ndarray:
        n = len(np.asarray(params).reshape(-1, 2))
        return self.sample_at(rng, params, k, np.full(n, self.ref_position))

    def expected_accepted(self, k: int, base: float | None = None,
                          position: float | None = None) -> float:
        """E[accepted] of a k-token draft, over u, for a request of level ``base`` (default:
        ``default``) drafting from ``position`` (default: ``ref_position``)."""
        k = check_int("k", k, 0, KMAX)
        if k == 0:
            return 0.0
        u = self.sigma * _Z
        b = self.default if base is None else base
        pos = self.ref_position if position is None else position
        q = self.probabilities(np.column_stack([np.full(u.size, b), u]), np.full(u.size, pos), k)
        return float(np.sum(_ZW * np.cumprod(q, axis=1).sum(axis=1)))

    def describe(self) -> dict[str, Any]:
        return {"name": self.kind, "styles": dict(self.styles), "default": self.default,
                "draft": list(self.draft), "output": self.output, "sigma": self.sigma,
                "spread_growth": self.spread_growth, "ref_position": self.ref_position}


def _num(spec: Mapping[str, Any], key: str, where: str, default: float | None = None,
         lo: float = -50.0, hi: float = 50.0) -> float:
    if key not in spec:
        if default is None:
            raise ValueError(f"{where}.{key}: missing (required by 'fitted')")
        return default
    return float(check_range(f"{where}.{key}", spec[key], lo, hi))


def make_fitted(spec: Mapping[str, Any], where: str) -> FittedAcceptance:
    check_fields(spec, where, optional=("styles", "default", "draft", "output", "sigma",
                                        "spread_growth", "ref_position"))
    styles = spec.get("styles", {})
    if not isinstance(styles, Mapping):
        raise ValueError(f"{where}.styles: expected a table of style -> logit")
    draft = spec.get("draft")
    if not isinstance(draft, (list, tuple)) or not draft:
        raise ValueError(f"{where}.draft: expected a non-empty list of logit offsets")
    return FittedAcceptance(
        styles=tuple((str(s), float(check_range(f"{where}.styles.{s}", v, -50.0, 50.0)))
                     for s, v in styles.items()),
        default=_num(spec, "default", where),
        draft=tuple(float(check_range(f"{where}.draft[{i}]", c, -50.0, 50.0))
                    for i, c in enumerate(draft)),
        output=_num(spec, "output", where, 0.0),
        sigma=_num(spec, "sigma", where, 0.0, 0.0, 20.0),
        spread_growth=_num(spec, "spread_growth", where, 0.0, -5.0, 5.0),
        ref_position=_num(spec, "ref_position", where, 16.0, 1.0, 1e6))
