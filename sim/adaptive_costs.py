"""Phase times of the adaptive server (``sim.adaptive``) and the policy's cost estimate.

A verification is one target pass (``sim.step_plan.cost_time``); a drafting phase is k
sequential drafter passes plus the drafter's ``phase_overhead``; either is followed by the
engine step's host work when the config names one (``sim.costs.engine_step.StepHost``, bound
to the step's mode: the adaptive server's drafter always has a device of its own).  The step
times use the same cost models as the fixed modes (``sim.step_plan``); the policy's estimate
(``ModelCosts``) uses them at the running sequences' mean context.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from psdlab.sim.step_plan import cost_time, prefill_time


def draft_time(drafter: Any, n: int, k: int, ctx: int) -> float:
    """k sequential drafter passes over n sequences (contexts ctx + j n), plus its
    ``phase_overhead`` (as ``sim.step_plan``)."""
    if n <= 0 or k <= 0:
        return 0.0
    j = np.arange(k)
    per = cost_time(drafter, np.full(k, n), np.full(k, n), ctx + j * n)
    total = 0.0
    for x in per.tolist():
        total += x
    return total + float(getattr(drafter, "phase_overhead", 0.0))


def capped_draft_phase(drafter: Any, host: Any, ks: np.ndarray, ctx: np.ndarray) -> float:
    """Drafter passes j = 0..max k_i - 1 over the sequences with k_i > j (contexts ``ctx`` + j
    each; ``server.cap_proposals``), plus its ``phase_overhead`` and the host work."""
    kmax = int(ks.max()) if ks.size else 0
    if kmax <= 0:
        return 0.0
    j = np.arange(kmax)
    sel = ks[None, :] > j[:, None]
    n = sel.sum(axis=1)
    per = cost_time(drafter, n, n, (ctx[None, :] * sel).sum(axis=1) + j * n)
    total = 0.0
    for x in per.tolist():
        total += x
    total += float(getattr(drafter, "phase_overhead", 0.0))
    if host is None:
        return total
    return float(host.draft(np.array([total]), np.array([n[0]]), np.array([int(ks.sum())]),
                            np.array([kmax]))[0])


def verify_phase(target: Any, host: Any, n: int, tokens: int, ctx: int) -> float:
    """One target pass over ``tokens`` scheduled tokens of n sequences, plus the host work."""
    gpu = cost_time(target, [n], [tokens], [ctx])
    if host is not None:
        gpu = host.verify(gpu, np.array([n]), np.array([tokens]))
    return float(gpu[0])


def draft_phase(drafter: Any, host: Any, n: int, k: int, ctx: int) -> float:
    """k drafter passes over n sequences (``draft_time``), plus the host work."""
    t = draft_time(drafter, n, k, ctx)
    if host is None or n <= 0 or k <= 0:
        return t
    return float(host.draft(np.array([t]), np.array([n]), np.array([n * k]),
                            np.array([k]))[0])


class ModelCosts:
    """The policy's cost estimate from the cost models (and the engine step's host work, as an
    SD step has it, when ``host`` is given), at the running sequences' mean context rounded to
    ``CTX_STEP`` tokens; answers are memoised in ``memo`` (shared across steps)."""

    CTX_STEP = 64

    def __init__(self, target: Any, drafter: Any, mean_ctx: float, memo: dict | None = None,
                 host: Any = None):
        self.target, self.drafter, self.host = target, drafter, host
        self.ctx = int(round(float(mean_ctx) / self.CTX_STEP)) * self.CTX_STEP
        self.memo = {} if memo is None else memo

    def verify(self, n: int, k: int) -> float:
        key = ("v", n, k, self.ctx)
        if key not in self.memo:
            self.memo[key] = verify_phase(self.target, self.host, n, n * (k + 1), n * self.ctx)
        return self.memo[key]

    def draft(self, n: int, k: int) -> float:
        key = ("d", n, k, self.ctx)
        if key not in self.memo:
            self.memo[key] = draft_phase(self.drafter, self.host, n, k, n * self.ctx)
        return self.memo[key]

    def catch_up(self, n: int, tokens: int) -> float:
        if tokens <= 0:
            return 0.0
        return float(prefill_time(self.drafter, np.array([n]), np.array([tokens]))[0])
