"""The ``resampled`` acceptance model: a new request's greedy match pattern drawn from the
patterns of calibration requests of its style.

Greedy acceptance is decided by a request's match pattern (``sim.acceptance_matches``): which
output positions the drafter's greedy token equals the target's.  A prompt no calibration run
served has no pattern, and this model makes no parametric guess at one: each request draws,
at arrival, the whole pattern of one calibration request of its style (its key up to the first
``-``, ``sim.acceptance_fitted.style_of``; keys of no listed style, or no keys, draw from
every pattern).  What the calibration prompts show -- how acceptance changes along a proposal
and along the output, how much requests differ and the shape of that spread, runs of matches
-- carries over as it is, at any k; what it cannot know is which of them a new prompt is like.

Spec: ``{"name": "resampled", "styles": {"chat": ["0110...", ...], ...}, "fallback": SPEC}``
(pattern strings as in ``sim.acceptance_matches``: ``1``, ``0``, ``.`` unknown; unknown
positions and positions past a pattern's end draw from ``fallback``, a ``positional`` or
``geometric`` spec).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from psdlab.analysis.checks import check_fields, check_int
from psdlab.sim.acceptance import KeyedAcceptanceModel
from psdlab.sim.acceptance_draws import KMAX
from psdlab.sim.acceptance_fitted import style_of
from psdlab.sim.acceptance_matches import MatchAcceptance, make_matches

#: seed and grid of the deterministic estimate in ``expected_accepted``
_EXPECT_SEED = 0


@dataclass(eq=False)
class ResampledAcceptance(KeyedAcceptanceModel):
    pool: MatchAcceptance                   # every pattern, one table row each
    rows_by_style: dict[str, np.ndarray]    # style -> rows of ``pool``
    kind = "resampled"
    needs_keys = True

    def rows_for(self, key: Any) -> np.ndarray:
        rows = self.rows_by_style.get(style_of(key)) if key is not None else None
        return rows if rows is not None and rows.size else np.arange(len(self.pool.keys))

    def request_params(self, rng, n, keys: Sequence[Any] | None = None) -> np.ndarray:
        """Each request's drawn row of the pattern table."""
        if keys is not None and len(keys) != n:
            raise ValueError(f"keys: {len(keys)} keys for {n} requests")
        out = np.empty(n)
        for i in range(n):
            rows = self.rows_for(None if keys is None else keys[i])
            out[i] = rows[rng.integers(rows.size)]
        return out

    def sample_at(self, rng, params, k, pos) -> np.ndarray:
        return self.pool.sample_at(rng, params, k, pos)

    def sample(self, rng, params, k) -> np.ndarray:
        n = np.asarray(params).size
        return self.pool.sample_at(rng, params, k, np.ones(n, dtype=np.int64))

    def expected_accepted(self, k: int) -> float:
        """E[accepted] of a k-token draft from a random pattern and output position (every
        pattern's positions 1 .. its length - 1 alike; unknown positions from a fixed-seed
        draw of the fallback)."""
        k = check_int("k", k, 0, KMAX)
        width = self.pool.table.shape[1]
        if k == 0 or width < 2:
            return 0.0 if k == 0 else self.pool.expected_accepted(k)
        rows, pos = np.meshgrid(np.arange(len(self.pool.keys)), np.arange(1, width))
        got = self.pool.sample_at(np.random.default_rng(_EXPECT_SEED), rows.ravel().astype(float),
                                  k, pos.ravel())
        return float(np.mean(got))

    def describe(self) -> dict[str, Any]:
        return {"name": self.kind, "patterns": len(self.pool.keys),
                "styles": {s: int(r.size) for s, r in self.rows_by_style.items()},
                "fallback": self.pool.fallback_spec}


def make_resampled(spec: Mapping[str, Any], where: str) -> ResampledAcceptance:
    check_fields(spec, where, optional=("styles", "fallback"))
    styles = spec.get("styles")
    if not isinstance(styles, Mapping) or not styles:
        raise ValueError(f"{where}.styles: expected a table of style -> list of pattern "
                         f"strings")
    table: dict[str, str] = {}
    rows_by_style: dict[str, np.ndarray] = {}
    for style, patterns in styles.items():
        if not isinstance(patterns, (list, tuple)) or not patterns:
            raise ValueError(f"{where}.styles.{style}: expected a non-empty list of pattern "
                             f"strings")
        start = len(table)
        for j, p in enumerate(patterns):
            table[f"{style}#{j}"] = p
        rows_by_style[str(style)] = np.arange(start, len(table))
    if "fallback" not in spec:
        raise ValueError(f"{where}.fallback: missing (a positional or geometric spec)")
    pool = make_matches({"name": "matches", "requests": table, "fallback": spec["fallback"]},
                        where)
    return ResampledAcceptance(pool, rows_by_style)


def resampled_spec(patterns: Mapping[str, str], fallback: Mapping[str, Any]) -> dict[str, Any]:
    """The spec of the patterns of requests ``patterns`` (request id -> pattern), grouped by
    style (sorted, for a deterministic spec)."""
    styles: dict[str, list[str]] = {}
    for rid in sorted(patterns):
        styles.setdefault(style_of(rid), []).append(patterns[rid])
    return {"name": "resampled", "styles": styles, "fallback": dict(fallback)}
