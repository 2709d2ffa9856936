"""The runtime's ``--mode adaptive``: before every step, ``analysis.adaptive_policy`` chooses AR,
SD(k) (drafter on its own core, then the target) or PSD(k) (two batches, overlapped), from the
live state and the costs measured in this run (``analysis.adaptive_costs``).

The step loop (``runtime.step_loop``) keeps its two-batch manager in this mode and runs the
chosen step with its own AR / SD / PSD code, so every output is the target's: greedy output is
the target-only output whatever the policy picks.  Switching costs are the real ones: after
AR steps (and for sequences admitted during AR: their prompts, which the drafter then skips)
the drafter's next ``draft`` command catches up on the tokens it missed (counted here as
``catch_up_tokens``); entering PSD drafts one batch alone first; leaving PSD drops the drafts
of the batch that was ready (``drafts_dropped``).  Until a kind of step has been timed and no
prior costs were given, the driver runs one AR step and one SD step first to measure them.
After each step it reads the step's phases from the trace: phase times feed the cost tables,
verified rows the acceptance tracker; the policy's counts go into the trace's
``run.extra["adaptive"]`` at the end.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from psdlab.analysis.adaptive_costs import MeasuredCosts
from psdlab.analysis.adaptive_policy import (AcceptanceTracker, AdaptivePolicy, LiveState,
                                             PolicyConfig)
from psdlab.analysis.modes import Mode


class AdaptiveDriver:
    def __init__(self, cfg: Any, loop: Any):
        pcfg = cfg.adaptive_policy or PolicyConfig(k_choices=tuple(range(1, cfg.k + 1)))
        self.policy = AdaptivePolicy(pcfg)
        self.tracker = AcceptanceTracker.for_config(pcfg)
        self.costs = MeasuredCosts(cfg.adaptive_prior)
        self.mode: tuple[Mode, int] | None = None
        self.seen_steps = 0
        self.counts = {"steps_ar": 0, "steps_sd": 0, "steps_psd": 0, "switches": 0,
                       "catch_up_tokens": 0, "drafts_dropped": 0, "probe_steps": 0}
        self.timeline: list[list[Any]] = []
        self.overhead: float | None = None
        self.drafter_label = loop.drafter.label if loop.drafter is not None else None

    def feeds(self) -> bool:
        """Whether admissions prefill the drafter too: only while the policy speculates (before
        the first step and during AR the drafter catches up on the whole prompt when
        speculation starts)."""
        return self.mode is not None and self.mode[0] != "ar"

    # ------------------------------------------------------------------ one step
    def step(self, loop: Any) -> None:
        if loop.drafter is None:                    # the drafter died: target-only from here
            loop._serial_step(list(loop.active.values()), draft=False)
            return
        missing = self.costs.missing()
        choice: tuple[Mode, int]
        if missing:
            self.counts["probe_steps"] += 1
            choice = ("ar", 0) if "ar" in missing else ("sd", max(self.policy.cfg.k_choices))
        else:
            d = self.policy.decide(self._state(loop), self.costs)
            choice = (d.mode, d.k)
        self._enter(loop, choice)
        mode, k = choice
        lag = self._lag(loop) if mode != "ar" else 0
        self.counts["catch_up_tokens"] += lag
        self.counts[f"steps_{mode}"] += 1
        loop.k = max(k, 1)
        if mode == "ar":
            loop._serial_step(list(loop.active.values()), draft=False)
        elif mode == "sd":
            loop._serial_step(list(loop.active.values()), draft=True)
        else:
            loop._psd_step()
        self._absorb(loop, skip_draft=lag > 0)

    def _state(self, loop: Any) -> LiveState:
        t = loop.now_rel()
        waiting = sum(1 for r in loop.waiting if r.arrival <= t)
        lag = self._lag(loop)
        return LiveState(running=len(loop.active), waiting=waiting, slots=loop.cfg.slots,
                         acceptance=self.tracker.rates(max(self.policy.cfg.k_choices)),
                         drafter_lag=lag)

    @staticmethod
    def _lag(loop: Any) -> int:
        """Tokens the drafter has not seen beyond the usual one or two (bonus, last draft)."""
        return sum(max(0, len(s.tokens) - s.valid_len("drafter") - 2)
                   for s in loop.active.values())

    def _enter(self, loop: Any, choice: tuple[Mode, int]) -> None:
        if choice == self.mode:
            return
        if self.mode is not None:
            self.counts["switches"] += 1
            if self.mode[0] == "psd" and choice[0] != "psd":
                dropped = 0
                for s in loop.active.values():
                    dropped += len(s.drafts)
                    s.drafts, s.draft_probs = [], None
                self.counts["drafts_dropped"] += dropped
                loop.pending = None
        self.timeline.append([round(loop.now_rel(), 6), "ar" if choice[0] == "ar"
                              else f"{choice[0]}{choice[1]}"])
        self.mode = choice

    # ------------------------------------------------------------------ measuring
    def _absorb(self, loop: Any, skip_draft: bool) -> None:
        steps = loop.tracer.trace.steps
        for rec in steps[self.seen_steps:]:
            draft = verify = None
            for ph in rec.phases:
                dt = ph.end - ph.start
                if ph.kind == "verify":
                    verify = dt
                    self.costs.observe_verify(ph.seqs, ph.tokens, dt)
                elif ph.kind == "draft":
                    draft = dt
                    if not skip_draft:
                        self.costs.observe_draft(ph.seqs, -(-ph.tokens // max(ph.seqs, 1)), dt)
                elif ph.kind == "prefill" and ph.device == self.drafter_label:
                    self.costs.observe_prefill(ph.tokens, dt)
            if rec.overlapped and draft is not None and verify is not None:
                over = max(0.0, (rec.end - rec.start) - max(draft, verify))
                self.overhead = over if self.overhead is None else (
                    self.overhead + 0.3 * (over - self.overhead))
                self.policy.cfg = dataclasses.replace(self.policy.cfg,
                                                      psd_overhead=self.overhead)
            self.tracker.update([(v.proposed, v.accepted) for v in rec.verified])
        self.seen_steps = len(steps)

    def summary(self) -> dict[str, Any]:
        st = self.policy.stats
        return {**self.counts, "transitions": dict(st["transitions"]),
                "decisions": st["decisions"], "timeline": self.timeline,
                "psd_overhead_s": self.overhead, "costs": self.costs.describe(),
                "acceptance": list(self.tracker.rates(max(self.policy.cfg.k_choices))),
                "policy": {f.name: getattr(self.policy.cfg, f.name)
                           for f in dataclasses.fields(self.policy.cfg)}}
