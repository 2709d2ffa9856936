"""Greedy traces built from match patterns, for the acceptance tests: each request walks its
pattern at k the way greedy SD does (``sim.acceptance_matches``), one verification per request
per step."""
from __future__ import annotations

from typing import Mapping

from psdlab.analysis.trace import RequestRecord, RunInfo, StepRecord, Trace, Verified


def greedy_trace(patterns: Mapping[str, str], k: int, length: int | None = None, *,
                 cap_at_end: bool = True, mode: str = "sd-sep") -> Trace:
    """A greedy run over ``patterns`` (request id -> string of 1 / 0, position 0 the
    prefill's) at k: a verification at output position n proposes k draft tokens (with
    ``cap_at_end``, min(k, L - n - 1), as the runtime does for an output of L tokens),
    accepts the run of matches from n and emits one more; a request ends at ``length``
    tokens (default: its pattern's length)."""
    ends = {key: length or len(p) for key, p in patterns.items()}
    steps, pos, t = [], {key: 1 for key in patterns}, 0.0
    while True:
        rows = []
        for key, pat in patterns.items():
            n = pos[key]
            if n >= ends[key]:
                continue
            p = min(k, ends[key] - n - 1) if cap_at_end else k
            a = 0
            while a < p and pat[n + a] == "1":
                a += 1
            rows.append(Verified(key, p, a, a + 1))
            pos[key] = n + a + 1
        if not rows:
            break
        steps.append(StepRecord(len(steps), t, t + 0.1, (), tuple(rows)))
        t += 0.1
    reqs = [RequestRecord(key, 0.0, 0.0, 0.05, t, 10, ends[key]) for key in patterns]
    return Trace(RunInfo(mode=mode, k=k, m=len(patterns), source="runtime",
                         extra={"temperature": 0.0}), steps, reqs)
