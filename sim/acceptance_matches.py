"""The ``matches`` acceptance model: each request's greedy match pattern, position by position.

With greedy decoding the accepted count is not random.  Write ``g_r(j) = 1`` when the drafter's
greedy token at output position j of request r (given the target's output before j) equals the
target's token there, else 0.  A verification that drafts k tokens from position n accepts the
run of ones ``g_r(n), g_r(n+1), ...``, capped at k; the next one starts at n + accepted + 1.
The pattern g_r does not depend on k, the batch or the schedule, so patterns recovered from
traces at some k (``validation.acceptance.match_patterns``) predict the acceptance of the
same requests at any other k, batch size or arrival pattern.

Spec: ``{"name": "matches", "requests": {"ID": "0111.10...", ...}, "fallback": SPEC}``: one
string per request id, character j for output position j: ``1`` match, ``0`` no match, ``.``
not known (position 0 is the prefill's token, never drafted).  Unknown positions, positions
past the end of a string and requests whose id is not listed (or a workload without ids) draw
from ``fallback``, a ``positional`` or ``geometric`` spec: the i-th draft token of a proposal
is accepted with that model's conditional rate for position i.  Requests are matched by the
workload's ``keys`` (``sim.workloads``: the ``key`` column of a replay file).

Interface beyond ``sim.acceptance.AcceptanceModel``: ``needs_keys`` (``request_params`` takes
the workload's keys and returns each request's row in the table, -1 for none) and
``sample_at(rng, params, k, pos)``, the accepted counts when drafting from output positions
``pos`` (``sim.trajectories`` calls it).  ``sample`` without positions draws from the fallback.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from psdlab.analysis.checks import check_fields, check_range
from psdlab.sim.acceptance import (
    GeometricAcceptance,
    KeyedAcceptanceModel,
    PositionalAcceptance,
    make_basic_acceptance,
)
from psdlab.sim.acceptance_draws import KMAX, leading_accepted

SYMBOLS = {"1": 1, "0": 0, ".": -1}


def parse_pattern(text: Any, where: str) -> np.ndarray:
    """A pattern string as int8 (1, 0, -1 unknown)."""
    if not isinstance(text, str):
        raise ValueError(f"{where}: expected a string of 1, 0 and '.', got {text!r}")
    bad = sorted(set(text) - set(SYMBOLS))
    if bad:
        raise ValueError(f"{where}: unexpected character {bad[0]!r} (allowed: 1, 0, '.')")
    return np.array([SYMBOLS[c] for c in text], dtype=np.int8)


def pattern_text(values: Sequence[int]) -> str:
    """The inverse of ``parse_pattern``."""
    return "".join("1" if v == 1 else "0" if v == 0 else "." for v in values)


@dataclass(eq=False)
class MatchAcceptance(KeyedAcceptanceModel):
    keys: tuple[str, ...]
    table: np.ndarray            # int8 [n_keys, width]: 1, 0, -1 unknown (padding: -1)
    rates: tuple[float, ...]     # fallback conditional rate per draft position
    fallback_spec: dict = field(default_factory=dict)
    kind = "matches"
    needs_keys = True

    def __post_init__(self) -> None:
        self.row_of = {k: i for i, k in enumerate(self.keys)}

    def _rates(self, kmax: int) -> np.ndarray:
        r = np.asarray(self.rates, dtype=float)
        return r[:kmax] if kmax <= r.size else np.concatenate([r, np.full(kmax - r.size, r[-1])])

    def request_params(self, rng, n, keys: Sequence[str] | None = None) -> np.ndarray:
        if keys is None:
            return np.full(n, -1.0)
        if len(keys) != n:
            raise ValueError(f"keys: {len(keys)} keys for {n} requests")
        return np.array([self.row_of.get(str(k), -1) for k in keys], dtype=float)

    def known(self, params: np.ndarray, pos: np.ndarray, kmax: int) -> np.ndarray:
        """[n, kmax] pattern values at positions pos .. pos + kmax - 1 (-1 unknown)."""
        rows = np.asarray(params, dtype=np.int64)
        cols = np.asarray(pos, dtype=np.int64)[:, None] + np.arange(kmax)[None, :]
        out = np.full(cols.shape, -1, dtype=np.int8)
        width = self.table.shape[1]
        ok = (rows[:, None] >= 0) & (cols < width) & (cols >= 0)
        r = np.broadcast_to(rows[:, None], cols.shape)
        out[ok] = self.table[r[ok], cols[ok]]
        return out

    def sample_at(self, rng, params, k, pos) -> np.ndarray:
        params = np.asarray(params, dtype=float)
        n = params.size

        def trials(kmax: int) -> np.ndarray:
            known = self.known(params, np.broadcast_to(np.asarray(pos), (n,)), kmax)
            drawn = rng.random((n, kmax)) < self._rates(kmax)
            return np.where(known >= 0, known == 1, drawn)

        return leading_accepted(n, k, trials)

    def sample(self, rng, params, k) -> np.ndarray:
        n = np.asarray(params).size
        return self.sample_at(rng, np.full(n, -1.0), k, np.zeros(n, dtype=np.int64))

    def expected_accepted(self, k: int) -> float:
        from psdlab.analysis.checks import check_int
        k = check_int("k", k, 0, KMAX)
        return float(np.cumprod(self._rates(k)).sum()) if k else 0.0

    def describe(self) -> dict[str, Any]:
        return {"name": self.kind, "requests": len(self.keys), "fallback": self.fallback_spec}


def _fallback_rates(spec: Any, where: str) -> tuple[float, ...]:
    if not isinstance(spec, Mapping) or spec.get("name") not in ("positional", "geometric"):
        raise ValueError(f"{where}: expected a 'positional' or 'geometric' acceptance spec, "
                         f"got {spec!r}")
    model = make_basic_acceptance(spec, where)
    if spec["name"] == "geometric":
        assert isinstance(model, GeometricAcceptance)
        return (float(model.alpha),)
    assert isinstance(model, PositionalAcceptance)
    return tuple(float(r) for r in model.rates)


def make_matches(spec: Mapping[str, Any], where: str) -> MatchAcceptance:
    check_fields(spec, where, optional=("requests", "fallback"))
    reqs = spec.get("requests")
    if not isinstance(reqs, Mapping):
        raise ValueError(f"{where}.requests: expected a table of request id -> pattern string")
    if "fallback" not in spec:
        raise ValueError(f"{where}.fallback: missing (a positional or geometric spec)")
    rates = _fallback_rates(spec["fallback"], f"{where}.fallback")
    for i, r in enumerate(rates):
        check_range(f"{where}.fallback.rates[{i}]", r, 0.0, 1.0)
    keys = tuple(str(k) for k in reqs)
    rows = [parse_pattern(v, f"{where}.requests.{k}") for k, v in reqs.items()]
    width = max((r.size for r in rows), default=0)
    table = np.full((len(rows), width), -1, dtype=np.int8)
    for i, row in enumerate(rows):
        table[i, :row.size] = row
    return MatchAcceptance(keys, table, rates, dict(spec["fallback"]))
