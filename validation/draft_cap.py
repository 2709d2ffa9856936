"""Proposals capped near the end of a request: the work the replay must not over-count.

The runtime never drafts past a request's output budget: a sequence with ``R`` tokens still to
generate gets ``min(k, R - 1)`` draft tokens (``runtime.requests``), so the last steps of every
request draft and verify fewer tokens, and a drafting forward pass is skipped for a sequence
whose cap is reached (the drafter runs ``max_i k_i`` one-token passes over the sequences still
drafting).  The simulator drafts ``k`` tokens every step and caps only what a verification
emits, which gives the same number of steps (``P(emit = R)`` is the probability that the
first ``R - 1`` drafts are accepted either way) but more drafting and verification work.  With
outputs of a few tens of tokens and k = 4 about a tenth of all draft tokens fall away, and SD
(whose step is draft + verify) was replayed that much too slow.

``cap_ratios`` measures the effect on a workload by Monte Carlo with the calibrated acceptance
model: ``tokens`` = E[draft tokens proposed] / (k x verifications), and ``forwards`` =
E[drafting passes of a batch of m] / k, with the batch's members' caps drawn independently from
the per-step distribution (a pass is skipped only when every member is capped).
The verification pads its rows to the longest one, so its work follows ``forwards`` too.
``replay_scales`` turns them into (target, drafter) cost multipliers of a full step of the run
under the fitted per-forward coefficients; ``validation.compare`` applies them to the replay.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from analysis.checks import check_int


@dataclass(frozen=True)
class CapRatios:
    tokens: float      # draft tokens proposed / (k x verifications)
    forwards: float    # drafting passes per step / k, for a batch of m


def cap_distribution(output_lens: Sequence[int], k: int, acceptance: Any, *, reps: int = 64,
                     seed: int = 0) -> np.ndarray:
    """Counts of steps by draft length 0..k over the requests (each ``reps`` times): a request
    of L output tokens has 1 after prefill, then drafts min(k, L - n - 1) tokens per step and
    emits min(accepted + 1, L - n)."""
    k = check_int("k", k, 1, 64)
    rng = np.random.default_rng(seed)
    counts = np.zeros(k + 1, dtype=np.int64)
    for length in output_lens:
        n = np.ones(reps, dtype=np.int64)
        params = acceptance.request_params(rng, reps)
        while True:
            live = n < int(length)
            if not live.any():
                break
            kk = np.clip(np.minimum(k, int(length) - n - 1), 0, k)
            acc = acceptance.sample(rng, params, np.where(live, kk, 0))
            counts += np.bincount(kk[live], minlength=k + 1)
            n = np.where(live, n + np.minimum(acc + 1, int(length) - n), n)
    return counts


def cap_ratios(output_lens: Sequence[int], k: int, m: int, acceptance: Any, *,
               reps: int = 64, seed: int = 0) -> CapRatios:
    """CapRatios of a workload (module docstring)."""
    counts = cap_distribution(output_lens, k, acceptance, reps=reps, seed=seed)
    total = counts.sum()
    if total == 0:
        return CapRatios(1.0, 1.0)
    p = counts / total
    tokens = float(np.arange(k + 1) @ p) / k
    cdf = np.cumsum(p)                           # P(cap <= j)
    m = check_int("m", m, 1)
    # E[max of m] = sum_{j=1..k} P(max >= j) = sum_j (1 - P(cap <= j - 1)^m)
    forwards = float(sum(1.0 - cdf[j - 1] ** m for j in range(1, k + 1))) / k
    return CapRatios(tokens, forwards)


def replay_scales(ratios: CapRatios, k: int, m: int, target: Mapping[str, float],
                  drafter: Mapping[str, float]) -> tuple[float, float]:
    """(target, drafter) multipliers: capped over uncapped time of a full step of m sequences
    under per-forward coefficients ``{"base", "per_seq", "per_token"}`` (context terms left
    out: they scale with the same tokens)."""
    db, ds = drafter.get("base", 0.0), drafter.get("per_seq", 0.0) + drafter.get("per_token", 0.0)
    full_d = k * db + ds * m * k
    capped_d = ratios.forwards * k * db + ds * m * k * ratios.tokens
    tb, ts, tt = target.get("base", 0.0), target.get("per_seq", 0.0), target.get("per_token", 0.0)
    full_v = tb + ts * m + tt * m * (k + 1)
    # the runtime pads a verification to the longest row: capped rows save only when all are
    capped_v = tb + ts * m + tt * m * (1 + k * ratios.forwards)
    return (capped_v / full_v if full_v > 0 else 1.0, capped_d / full_d if full_d > 0 else 1.0)
