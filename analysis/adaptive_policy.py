"""One adaptive speculation policy: AR, SD(k) or PSD(k) for the next step, from the live state.

The same rule drives the simulator (``sim.adaptive``: what-if), the runtime (``runtime``'s
``--mode adaptive``: real) and the planner (``sim.policy_search``: where it switches).

Prediction (the batch model of ``analysis.theory.batch``, with per-position acceptance): with
n = min(running + waiting, slots) sequences in the next step and a_1, a_2, ... the running
per-position acceptance rates (a_i = P(draft i accepted | drafts 1..i-1 accepted)), a
sequence emits E(k) = 1 + sum_{i<=k} prod_{j<=i} a_j tokens per verification, and

    AR    : n tokens per step of V(n, 0)
    SD(k) : n E(k) tokens per step of t(n, k) + V(n, k)         (drafter on its own device)
    PSD(k): (n/2) E(k) tokens per step of max(t(h, k), V(h, k)) + o  (two batches, h = n/2;
            an odd n alternates batches of ceil and floor n/2: the mean of the two steps; with
            one sequence PSD runs SD steps, and is predicted so)

Scores are tokens per second (objective ``throughput``) or tokens per second per device
(``per-device``: PSD and SD hold the drafter's device too).  Switching is not free, and the
costs are part of the score of a candidate that is not the current choice: resuming
speculation after AR steps makes the drafter catch up on the tokens it missed (a prefill of
``drafter_lag`` tokens), and entering PSD drafts one batch alone before the two overlap.  The
score of a switch is tokens / (step + cost / amortize_steps).

Hysteresis: the policy leaves its current choice only when one challenger beats it by more
than ``margin`` (relative) at ``hold`` consecutive decisions, so a state that wanders around a
boundary does not make it flap.  ``AdaptivePolicy.stats`` counts decisions, switches (by
transition) and the switch costs the executing layer reports as paid (``note_cost``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol

from psdlab.analysis.checks import (check_choice, check_fields, check_int, check_nonnegative,
                                    check_range)
from psdlab.analysis.modes import STEP_MODES, Mode, check_mode

__all__ = ["OBJECTIVES", "PolicyConfig", "LiveState", "StepCosts", "AffineCosts",
           "Candidate", "Decision", "AdaptivePolicy", "AcceptanceTracker", "emitted",
           "predict_candidates", "rank", "policy_config"]



class StepCosts(Protocol):
    """Step times in seconds by batch shape (measured, or a cost model's estimate)."""

    def verify(self, n: int, k: int) -> float: ...          # target: n sequences, k drafts each

    def draft(self, n: int, k: int) -> float: ...           # drafter: k tokens for n sequences

    def catch_up(self, n: int, tokens: int) -> float: ...   # drafter feeds tokens it missed


@dataclass(frozen=True)
class AffineCosts:
    """V(n, k) = c0 + c_seq n + c_tok n (k + 1); t(n, k) = k (d0 + d_seq n) (as
    ``theory.batch``); catch-up = p0 + p_tok tokens (a drafter prefill)."""
    c0: float
    c_seq: float = 0.0
    c_tok: float = 0.0
    d0: float = 0.0
    d_seq: float = 0.0
    p0: float = 0.0
    p_tok: float = 0.0

    def __post_init__(self) -> None:
        for name in ("c0", "c_seq", "c_tok", "d0", "d_seq", "p0", "p_tok"):
            check_nonnegative(f"costs.{name}", getattr(self, name))

    def verify(self, n: int, k: int) -> float:
        return self.c0 + self.c_seq * n + self.c_tok * n * (k + 1)

    def draft(self, n: int, k: int) -> float:
        return k * (self.d0 + self.d_seq * n)

    def catch_up(self, n: int, tokens: int) -> float:
        return self.p0 + self.p_tok * tokens if tokens > 0 else 0.0


def emitted(rates: tuple[float, ...], k: int) -> float:
    """E(k) = 1 + sum_{i<=k} prod_{j<=i} a_j; positions past the list use its last rate (equals
    ``GeometricRate(a).emitted(k)`` when every rate is a)."""
    total, run = 1.0, 1.0
    for i in range(k):
        run *= rates[min(i, len(rates) - 1)] if rates else 0.0
        total += run
    return total


def _objective_devices(mode: Mode) -> int:
    return 1 if mode == "ar" else 2


#: score per candidate: tokens per second, or per device (the drafter's device counts)
OBJECTIVES: dict[str, Callable[[Mode, float], float]] = {
    "throughput": lambda mode, rate: rate,
    "per-device": lambda mode, rate: rate / _objective_devices(mode),
}


@dataclass(frozen=True)
class PolicyConfig:
    """The policy's settings (``policy_config(dict)`` reads them from a config table)."""
    modes: tuple[Mode, ...] = STEP_MODES
    k_choices: tuple[int, ...] = (1, 2, 3, 4)
    objective: str = "throughput"
    margin: float = 0.05           # a challenger must beat the current choice by this much ...
    hold: int = 3                  # ... at this many consecutive decisions
    amortize_steps: int = 16       # a switch's cost is spread over this many steps
    psd_overhead: float = 0.0      # o: seconds per PSD step (the sync point)
    prior_acceptance: float = 0.7  # per-position acceptance before any measurement
    prior_weight: float = 4.0      # pseudo-verifications behind the prior
    decay: float = 0.995           # acceptance counts fade by this factor per update

    def __post_init__(self) -> None:
        modes = tuple(self.modes)
        if not modes:
            raise ValueError("adaptive.modes: must name at least one of ar, sd, psd")
        object.__setattr__(self, "modes", tuple(check_mode(f"adaptive.modes[{i}]", m, STEP_MODES)
                                                for i, m in enumerate(modes)))
        ks = tuple(check_int(f"adaptive.k_choices[{i}]", k, 1, 64)
                   for i, k in enumerate(self.k_choices))
        if not ks and modes != ("ar",):
            raise ValueError("adaptive.k_choices: must list at least one k in [1, 64]")
        object.__setattr__(self, "k_choices", tuple(sorted(set(ks))))
        check_choice("adaptive.objective", self.objective, tuple(OBJECTIVES))
        check_range("adaptive.margin", self.margin, 0.0, 10.0)
        check_int("adaptive.hold", self.hold, 1, 10_000)
        check_int("adaptive.amortize_steps", self.amortize_steps, 1, 1_000_000)
        check_nonnegative("adaptive.psd_overhead", self.psd_overhead)
        check_range("adaptive.prior_acceptance", self.prior_acceptance, 0.0, 1.0)
        check_range("adaptive.prior_weight", self.prior_weight, 0.0, 1e9)
        check_range("adaptive.decay", self.decay, 0.0, 1.0, lo_open=True)


def policy_config(raw: Mapping[str, Any] | None) -> PolicyConfig:
    """A PolicyConfig from a config table; unknown keys are one-line errors."""
    raw = dict(raw or {})
    check_fields(raw, "adaptive", optional=tuple(PolicyConfig.__dataclass_fields__),
                 named=False)
    for key in ("modes", "k_choices"):
        if key in raw and not isinstance(raw[key], (list, tuple)):
            raise ValueError(f"adaptive.{key}: expected a list, got {raw[key]!r}")
    return PolicyConfig(**raw)


@dataclass(frozen=True)
class LiveState:
    """What the server knows at a step boundary."""
    running: int                      # sequences admitted and generating
    waiting: int                      # arrived, not yet admitted
    slots: int                        # most sequences that can run at once
    acceptance: tuple[float, ...]     # running per-position acceptance a_1, a_2, ...
    drafter_lag: int = 0              # tokens of running sequences the drafter has not seen

    def __post_init__(self) -> None:
        check_int("state.running", self.running, 0)
        check_int("state.waiting", self.waiting, 0)
        check_int("state.slots", self.slots, 1)
        check_int("state.drafter_lag", self.drafter_lag, 0)
        for i, a in enumerate(self.acceptance):
            check_range(f"state.acceptance[{i}]", a, 0.0, 1.0)

    @property
    def batch(self) -> int:
        """Sequences the next steps will carry: the running ones plus those admission adds."""
        return min(self.running + self.waiting, self.slots)


@dataclass(frozen=True)
class Candidate:
    mode: Mode
    k: int
    tokens_per_step: float
    step_time: float
    switch_cost: float
    score: float

    @property
    def label(self) -> str:
        return "ar" if self.mode == "ar" else f"{self.mode}{self.k}"


def predict_candidates(cfg: PolicyConfig, state: LiveState, costs: StepCosts,
            current: tuple[Mode, int] | None = None) -> list[Candidate]:
    """Every allowed candidate's predicted step, with the cost of switching to it from
    ``current`` (None: no cost), in the order of ``cfg.modes`` then k."""
    n = max(state.batch, 1)
    h = (n + 1) // 2
    rates = state.acceptance or (cfg.prior_acceptance,)
    score_of = OBJECTIVES[cfg.objective]
    out = []
    for mode in cfg.modes:
        for k in ((0,) if mode == "ar" else cfg.k_choices):
            if mode == "ar":
                tokens, step = float(n), costs.verify(n, 0)
            elif mode == "sd" or n < 2:        # PSD with one sequence runs SD steps
                tokens, step = n * emitted(rates, k), costs.draft(n, k) + costs.verify(n, k)
            else:                              # batches of h and l = n - h verified in turn
                lo = n - h
                tokens = n / 2 * emitted(rates, k)
                step = 0.5 * (max(costs.draft(lo, k), costs.verify(h, k))
                              + max(costs.draft(h, k), costs.verify(lo, k))) + cfg.psd_overhead
            cost = _switch_cost(cfg, state, costs, current, mode, k, n, h)
            if step <= 0 or not math.isfinite(step):
                raise ValueError(f"costs: step time of {mode} k={k} at n={n} must be finite "
                                 f"and > 0, got {step!r}")
            rate = tokens / (step + cost / cfg.amortize_steps)
            out.append(Candidate(mode, k, tokens, step, cost, score_of(mode, rate)))
    return out


def _switch_cost(cfg: PolicyConfig, state: LiveState, costs: StepCosts,
                 current: tuple[Mode, int] | None, mode: Mode, k: int, n: int, h: int) -> float:
    if current is None or current == (mode, k):
        return 0.0
    cost = 0.0
    if mode != "ar" and current[0] == "ar":
        cost += costs.catch_up(n, state.drafter_lag)       # the drafter catches up
    if mode == "psd" and current[0] != "psd":
        cost += costs.draft(h, k)                          # one batch drafted alone
    return cost


def rank(cfg: PolicyConfig, state: LiveState, costs: StepCosts,
         current: tuple[Mode, int] | None = None) -> Candidate:
    """The best candidate, without hysteresis (ties: the earlier one in
    ``predict_candidates``'s order, so AR before SD before PSD and the smaller k first)."""
    cands = predict_candidates(cfg, state, costs, current)
    best = cands[0]
    for c in cands[1:]:
        if c.score > best.score:
            best = c
    return best


@dataclass(frozen=True)
class Decision:
    mode: Mode
    k: int
    switched: bool
    predicted: dict[str, float]        # candidate label -> score
    challenger: str | None = None      # a candidate that beat the current one this time

    @property
    def label(self) -> str:
        return "ar" if self.mode == "ar" else f"{self.mode}{self.k}"


@dataclass
class AdaptivePolicy:
    """`decide` once per step boundary; keeps the current choice and the hysteresis streak."""
    cfg: PolicyConfig = field(default_factory=PolicyConfig)
    current: tuple[Mode, int] | None = None
    streak: int = 0
    challenger: tuple[Mode, int] | None = None
    stats: dict[str, Any] = field(default_factory=lambda: {
        "decisions": 0, "switches": 0, "transitions": {}, "switch_cost_s": {}})

    def decide(self, state: LiveState, costs: StepCosts) -> Decision:
        cands = predict_candidates(self.cfg, state, costs, self.current)
        predicted = {c.label: c.score for c in cands}
        best = cands[0]
        for c in cands[1:]:
            if c.score > best.score:
                best = c
        self.stats["decisions"] += 1
        if self.current is None:
            self.current = (best.mode, best.k)
            return Decision(best.mode, best.k, False, predicted)
        here = next((c for c in cands if (c.mode, c.k) == self.current), None)
        target = (best.mode, best.k)
        if here is None:                   # not allowed by the settings any more
            return self._switch(target, predicted)
        if target == self.current or best.score <= here.score * (1.0 + self.cfg.margin):
            self.streak, self.challenger = 0, None
            return Decision(*self.current, False, predicted)
        self.streak = self.streak + 1 if self.challenger == target else 1
        self.challenger = target
        if self.streak >= self.cfg.hold:
            return self._switch(target, predicted)
        return Decision(*self.current, False, predicted, challenger=best.label)

    def _switch(self, target: tuple[Mode, int], predicted: dict[str, float]) -> Decision:
        old = self.current
        self.current, self.streak, self.challenger = target, 0, None
        self.stats["switches"] += 1
        key = f"{_label(old)}->{_label(target)}"
        self.stats["transitions"][key] = self.stats["transitions"].get(key, 0) + 1
        return Decision(target[0], target[1], True, predicted)

    def note_cost(self, kind: str, seconds: float) -> None:
        """Count a switch cost the executing layer paid (``catch_up``, ``psd_startup``,
        ``drafts_dropped``)."""
        costs = self.stats["switch_cost_s"]
        costs[kind] = costs.get(kind, 0.0) + float(seconds)


def _label(choice: tuple[Mode, int] | None) -> str:
    if choice is None:
        return "none"
    return "ar" if choice[0] == "ar" else f"{choice[0]}{choice[1]}"


class AcceptanceTracker:
    """Running per-position acceptance: a verification that proposed p drafts and accepted a
    tried positions 1..min(a + 1, p) and passed 1..a.  Counts fade by ``decay`` per update and
    start from ``prior_weight`` pseudo-verifications at ``prior``."""

    def __init__(self, prior: float = 0.7, prior_weight: float = 4.0, decay: float = 0.995,
                 positions: int = 64):
        self.prior, self.w, self.decay = float(prior), float(prior_weight), float(decay)
        self.tried = [0.0] * positions
        self.passed = [0.0] * positions
        self.seen = 0

    @classmethod
    def for_config(cls, cfg: PolicyConfig) -> "AcceptanceTracker":
        return cls(cfg.prior_acceptance, cfg.prior_weight, cfg.decay)

    def update(self, rows: list[tuple[int, int]]) -> None:
        """``rows``: (proposed, accepted) per verified sequence of one step."""
        if not any(p > 0 for p, _ in rows):
            return
        d = self.decay
        self.tried = [x * d for x in self.tried]
        self.passed = [x * d for x in self.passed]
        for p, a in rows:
            for i in range(min(a + 1, p, len(self.tried))):
                self.tried[i] += 1.0
                if i < a:
                    self.passed[i] += 1.0
            self.seen = max(self.seen, min(p, len(self.tried)))

    def rates(self, k: int | None = None) -> tuple[float, ...]:
        """a_1..a_k (default: the positions seen so far, at least one)."""
        k = max(k if k is not None else self.seen, 1)
        out: list[float] = []
        for i in range(min(k, len(self.tried))):
            if i >= max(self.seen, 1) and out:      # never tried: as the last position seen
                out.append(out[-1])
                continue
            num = self.passed[i] + self.w * self.prior
            den = self.tried[i] + self.w
            out.append(num / den if den > 0 else self.prior)
        return tuple(out)
