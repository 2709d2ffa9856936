"""What a calibration from benchmark results can and cannot identify, in words.

Two kinds of notes: those that follow from what the inputs are (one load only, no AR run, one
k, acceptance from a mean only, ITL mixing host and device time) and those that the fit
itself shows (two coefficients whose linearised estimates are strongly correlated; an
interval much wider than its estimate).
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from psdlab.validation.serving_results.acceptance_counts import AcceptanceEstimate
from psdlab.validation.serving_results.replay import BenchRun

#: |correlation| above which two coefficients are reported as not separately identified
CORRELATED = 0.9
#: an interval wider than this many times its estimate is reported as weakly identified
WIDE = 2.0


def _load(r: BenchRun) -> tuple[Any, Any]:
    rate = r.summary.request_rate
    return ("inf" if rate is not None and math.isinf(rate) else rate,
            r.summary.max_concurrency)


def input_notes(runs: Sequence[BenchRun], acc: AcceptanceEstimate | None,
                with_counters: bool, prior: float | None = None) -> list[str]:
    ar = [r for r in runs if not r.spec]
    sd = [r for r in runs if r.spec]
    notes = [
        "step costs are host and device time together: vLLM's ITL is the client's gap "
        "between streamed chunks (scheduling, sampling, detokenisation and HTTP included); "
        "nothing in these inputs separates host from device time",
        "TTFT includes the request's round trip and tokenisation; they are folded into the "
        "prefill's cost (target base and per_token)"]
    if len({_load(r) for r in ar}) == 1:
        rate, conc = _load(ar[0])
        notes.append(f"one AR load only (request rate {rate}, max concurrency {conc}): the "
                     f"batch size varies little, so the fixed step cost (target.base) and the "
                     f"per-sequence cost (target.per_seq) are not separated; only their sum at "
                     f"the run's batch sizes is pinned")
    if ar:
        notes.append("target.per_context is identified only by TPOT growing with the context "
                     "inside these runs; longer contexts than theirs are extrapolated")
    if prior is not None:
        notes.append(f"structural prior: every drafter coefficient is {prior:.4g} x the "
                     f"target's (validation.serving_results.drafter_prior); the split of a "
                     f"speculative step "
                     f"between target and drafter comes from this prior, not from the data, "
                     f"and the drafter's intervals are the target's times the ratio")
    if len({_load(r) for r in sd}) == 1 and prior is None:
        rate, conc = _load(sd[0])
        notes.append(f"one speculative load only (request rate {rate}, max concurrency {conc}): "
                     f"the drafter's fixed cost per forward (drafter.base) and its cost per "
                     f"sequence (drafter.per_token) are not separated; their sum at the run's "
                     f"batch sizes is what is pinned")
    if sd and not ar and prior is None:
        notes.append("no AR run: target and drafter costs are fitted jointly on speculative "
                     "runs, which time only k drafting forwards plus one verification "
                     "together; their split is not identified by these data (AR predictions "
                     "are then unreliable: give an AR run, or a structural prior "
                     "drafter_to_target_ratio / --drafter-ratio) and target.per_context is "
                     "fixed at 0")
    elif sd and not ar:
        notes.append("no AR run: the target's costs are fitted on speculative runs through "
                     "the prior's tie; target.per_context is fixed at 0")
    if sd and len({r.k for r in sd}) == 1:
        notes.append(f"the speculative runs draft one k ({sd[0].k}) only: a fixed cost per "
                     f"drafting phase cannot be told from the drafter's per-forward base")
    if acc is not None:
        notes.append(f"acceptance from {acc.source}")
        notes.extend(acc.notes)
        if not with_counters:
            notes.append("acceptance: no /metrics snapshots given; the results' own "
                         "spec-decode figures were used")
    return notes


def fit_notes(intervals: Mapping[str, tuple[float, float]], correlations: Mapping[str, float],
              costs: Mapping[str, Mapping[str, Any]]) -> list[str]:
    notes = []
    if any(not math.isfinite(rho) for rho in correlations.values()):
        notes.append("the fit's Jacobian is singular (too few requests, or a coefficient that "
                     "does not move the replayed latencies): no correlations")
    for pair, rho in correlations.items():
        if math.isfinite(rho) and abs(rho) > CORRELATED:
            a, b = pair.split("~")
            notes.append(f"{a} and {b} are not separately identified (correlation {rho:+.2f} "
                         f"of the linearised fit): the data pin a combination of them")
    for name, (lo, hi) in intervals.items():
        role, _, term = name.partition(".")
        if role not in costs:
            continue
        value = float(costs[role].get(term, 0.0))
        if hi - lo > WIDE * max(value, 1e-12):
            notes.append(f"{name} is weakly identified: {1e3 * value:.4g} ms, 95% interval "
                         f"[{1e3 * lo:.4g}, {1e3 * hi:.4g}] ms")
    return notes


def identifiability_notes(runs: Sequence[BenchRun], acc: AcceptanceEstimate | None,
                          intervals: Mapping[str, tuple[float, float]],
                          correlations: Mapping[str, float],
                          costs: Mapping[str, Mapping[str, Any]], *,
                          with_counters: bool, prior: float | None = None) -> list[str]:
    """All notes: from the inputs first, then from the fit (``prior``: the structural
    prior's drafter-to-target ratio, when one was used)."""
    return (input_notes(runs, acc, with_counters, prior)
            + fit_notes(intervals, correlations, costs))
