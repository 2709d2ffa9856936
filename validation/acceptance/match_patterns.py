"""Recover each request's greedy match pattern from traces (the ``matches`` acceptance model).

With greedy decoding, a verification of request r that drafted p tokens from output position
n and accepted a of them shows ``g_r(n .. n+a-1) = 1`` and, when a < p, ``g_r(n+a) = 0``
(``sim.acceptance_matches``).  Positions come from the trace alone: the prefill writes
position 0, and each verification's ``emitted`` tokens advance the request's position, in
step order.  Runs at different k visit different positions, so a few runs cover most of
them.  Where runs disagree (a near-tie flipped by the numerics of another batch shape) the
majority wins and a tie is left unknown.

Only greedy traces qualify (``run.extra["temperature"] == 0``): with sampling the pattern
is random and the statistical models (per-position rates, per-request spread) apply.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from psdlab.analysis.trace import Trace
from psdlab.sim.acceptance_matches import pattern_text


def is_greedy(trace: Trace) -> bool:
    temp = (trace.run.extra or {}).get("temperature")
    return isinstance(temp, (int, float)) and not isinstance(temp, bool) and temp == 0


@dataclass(frozen=True)
class Patterns:
    patterns: dict[str, str]     # request id -> pattern string (1, 0, '.')
    observed: int                # positions with at least one observation
    conflicts: int               # of those, positions where runs disagreed
    ties: int                    # conflicts left unknown (as many 1s as 0s)
    coverage: float              # observed / positions 1 .. output_len - 1 of the requests

    def spec(self, fallback: dict) -> dict:
        """The ``matches`` acceptance spec of these patterns (``fallback``: a positional or
        geometric spec for unknown positions)."""
        return {"name": "matches", "requests": dict(self.patterns), "fallback": dict(fallback)}

    def to_dict(self) -> dict:
        return {"requests": len(self.patterns), "observed": self.observed,
                "conflicts": self.conflicts, "ties": self.ties, "coverage": self.coverage}


def observations(trace: Trace) -> dict[str, dict[int, list[int]]]:
    """request id -> position -> the values seen there (1 match, 0 no match)."""
    pos: dict[str, int] = defaultdict(lambda: 1)
    seen: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for step in sorted(trace.steps, key=lambda s: (s.start, s.index)):
        for v in step.verified:
            rid = str(v.req)
            n = pos[rid]
            for j in range(v.accepted):
                seen[rid][n + j].append(1)
            if v.accepted < v.proposed:
                seen[rid][n + v.accepted].append(0)
            pos[rid] = n + v.emitted
    return seen


def match_patterns(traces: Sequence[Trace]) -> Patterns | None:
    """The patterns of the greedy traces' requests; None when no trace is greedy or no
    position was observed."""
    greedy = [t for t in traces if is_greedy(t)]
    if not greedy:
        return None
    merged: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    lengths: dict[str, int] = {}
    for tr in greedy:
        for rid, by_pos in observations(tr).items():
            for p, vals in by_pos.items():
                merged[rid][p].extend(vals)
        for r in tr.requests:
            lengths[str(r.id)] = int(r.output_len)
    observed = conflicts = ties = 0
    out: dict[str, str] = {}
    for rid, by_pos in merged.items():
        width = max(max(by_pos) + 1, lengths.get(rid, 0))
        row = np.full(width, -1, dtype=np.int8)
        for p, vals in by_pos.items():
            observed += 1
            ones = sum(vals)
            if 0 < ones < len(vals):
                conflicts += 1
            if 2 * ones == len(vals):
                ties += 1
                continue
            row[p] = 1 if 2 * ones > len(vals) else 0
        out[rid] = pattern_text(row.tolist())
    if not observed:
        return None
    total = sum(max(0, lengths.get(rid, len(p)) - 1) for rid, p in out.items())
    return Patterns(out, observed, conflicts, ties, observed / total if total else 0.0)
