"""Draft acceptance per position from what vLLM and SGLang record.

vLLM counts, over a run, the drafts (one per sequence and step that proposed), the draft
tokens, the accepted tokens and, per draft position i, the drafts whose token i was accepted
(``/metrics`` counters, whose before/after difference covers the run, or the bench result's
``spec_decode_*`` figures, which are that difference).  Position i's share
``p_i = accepted_i / drafts`` is *unconditional* (token i and all before it accepted); the
simulator's ``positional`` model wants the *conditional* rates ``r_i = p_i / p_(i-1)``.
SGLang records only the mean acceptance length, from which a geometric per-token rate is
solved (the per-position shape is then an assumption, and said so).

Intervals: Wilson 95% on each ``p_i`` (drafts as trials), carried to ``r_i`` through the same
ratio (an approximation: the counts of two positions are not independent).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from psdlab.analysis.formats.vllm_metrics import check_same_server
from psdlab.analysis.formats.vllm_metrics import read as read_metrics
from psdlab.validation.serving_results.replay import BenchRun

Z95 = 1.959964


@dataclass(frozen=True)
class AcceptanceEstimate:
    per_position: tuple[float, ...]            # unconditional p_i (vLLM's figure)
    per_position_ci95: tuple[tuple[float, float], ...]
    rates: tuple[float, ...]                   # conditional r_i (the simulator's model)
    drafts: int | None                         # trials behind the intervals (None: unknown)
    source: str                                # where it came from
    notes: tuple[str, ...]

    def spec(self) -> dict[str, Any]:
        """The simulator's acceptance spec (``sim.acceptance``: positional)."""
        return {"name": "positional", "rates": list(self.rates)}

    @property
    def k(self) -> int:
        return len(self.per_position)

    def mean_acceptance_length(self) -> float:
        return 1.0 + sum(self.per_position)


def wilson_of_rate(p: float, n: int | None) -> tuple[float, float]:
    """Wilson 95% interval of a proportion ``p`` of ``n`` trials ((p, p) without n)."""
    if not n:
        return p, p
    d = 1 + Z95 ** 2 / n
    c = (p + Z95 ** 2 / (2 * n)) / d
    h = Z95 * math.sqrt(p * (1 - p) / n + Z95 ** 2 / (4 * n * n)) / d
    return max(0.0, c - h), min(1.0, c + h)


def conditional(per_position: Sequence[float]) -> tuple[float, ...]:
    """``r_i = p_i / p_(i-1)`` (``p_0 = 1``), clipped to [0, 1]; 0 after a zero."""
    out, prev = [], 1.0
    for p in per_position:
        out.append(min(1.0, max(0.0, p / prev)) if prev > 0 else 0.0)
        prev = p
    return tuple(out)


def _estimate(per_pos: Sequence[float], drafts: int | None, source: str,
              notes: Sequence[str] = ()) -> AcceptanceEstimate:
    ps = tuple(float(p) for p in per_pos)
    cis = tuple(wilson_of_rate(p, drafts) for p in ps)
    k = len(ps)
    base_notes = [f"acceptance at draft positions beyond {k} is not identified (the inputs "
                  f"draft {k} tokens; the positional model repeats position {k}'s rate)"]
    if drafts is None:
        base_notes.append("acceptance: the number of drafts is unknown, so no interval")
    return AcceptanceEstimate(ps, cis, conditional(ps), drafts, source,
                              tuple(notes) + tuple(base_notes))


def from_counters(before: str, after: str) -> AcceptanceEstimate:
    """From two ``/metrics`` snapshots taken around the runs (their difference)."""
    a, b = read_metrics(after), read_metrics(before)
    check_same_server(before, after)
    pairs = [("vllm:spec_decode_num_drafts_total", a.num_drafts, b.num_drafts),
             ("vllm:spec_decode_num_draft_tokens_total", a.num_draft_tokens, b.num_draft_tokens),
             ("vllm:spec_decode_num_accepted_tokens_total", a.num_accepted_tokens,
              b.num_accepted_tokens)]
    pairs += [(f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}}', x, y)
              for i, (x, y) in enumerate(zip(a.accepted_per_pos, b.accepted_per_pos))]
    for name, x, y in pairs:
        if x < y:
            raise ValueError(f"{after}: field '{name}': {x} is below {y} in {before} (the "
                             f"snapshots swapped, or the server restarted between them)")
    diff = a.minus(b)
    if diff.num_drafts <= 0:
        raise ValueError(f"{after} minus {before}: field 'vllm:spec_decode_num_drafts_total': "
                         f"no drafts between the snapshots (same snapshot twice, or no "
                         f"speculative requests ran?)")
    if not diff.accepted_per_pos:
        raise ValueError(f"{after}: field 'vllm:spec_decode_num_accepted_tokens_per_pos_total':"
                         f" no per-position counters")
    return _estimate(diff.acceptance_per_position(), diff.num_drafts,
                     f"/metrics counters ({before} -> {after})")


def _geometric_alpha(length: float, k: int) -> float:
    """The per-token rate a with 1 + a (1 - a^k) / (1 - a) = length (bisection)."""
    target = min(max(length - 1.0, 0.0), float(k))
    lo, hi = 0.0, 1.0
    for _ in range(80):
        mid = (lo + hi) / 2
        if sum(mid ** j for j in range(1, k + 1)) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def from_runs(runs: Sequence[BenchRun], k_default: int | None) -> AcceptanceEstimate:
    """Pooled over the speculative runs: their per-position rates weighted by drafts (vLLM),
    else a geometric rate solved from the mean acceptance length (SGLang)."""
    spec = [r for r in runs if r.spec]
    if not spec:
        raise ValueError("results: no speculative-decoding run to take acceptance from")
    with_pos = [r for r in spec if r.summary.per_position_acceptance]
    if with_pos:
        k = max(len(r.summary.per_position_acceptance or ()) for r in with_pos)
        known = all(r.summary.num_drafts for r in with_pos)
        weights = [float(r.summary.num_drafts or 1) for r in with_pos]
        pooled = []
        for i in range(k):
            num = sum(w * ((r.summary.per_position_acceptance or ())[i]
                           if i < len(r.summary.per_position_acceptance or ()) else 0.0)
                      for w, r in zip(weights, with_pos))
            pooled.append(num / sum(weights))
        drafts = int(sum(weights)) if known else None
        names = ", ".join(r.path for r in with_pos)
        return _estimate(pooled, drafts, f"spec_decode_per_position_acceptance_rates of {names}")
    lengths = [r.summary.acceptance_length for r in spec if r.summary.acceptance_length]
    if not lengths:
        raise ValueError(f"{spec[0].path}: field 'spec_decode_per_position_acceptance_rates': "
                         f"missing, and no acceptance length either")
    if k_default is None:
        raise ValueError(f"{spec[0].path}: field 'accept_length': the draft length k is not in "
                         f"the file; give --config CONFIG.toml whose [server] k is the run's")
    mean_len = sum(lengths) / len(lengths)
    alpha = _geometric_alpha(mean_len, k_default)
    return _estimate([alpha ** (i + 1) for i in range(k_default)], None,
                     f"mean acceptance length {mean_len:.3f} (geometric, k = {k_default})",
                     ("acceptance: only the mean acceptance length is recorded; the "
                      "per-position shape is assumed geometric",))


