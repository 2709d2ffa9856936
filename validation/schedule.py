"""Does a replay take the run's schedule?  Step-by-step agreement of two traces.

A trace's *schedule* is its sequence of steps, each told by what it did: a prefill of n
sequences (``("P", n)``), or the set of requests it verified.  With greedy decoding and the
match-pattern acceptance (``sim.acceptance_matches``) the simulator knows how many tokens each
verification accepts, so the replay of an offline run should make the same steps in the same
order; where it does not, the two engines' rules differ (admission, batch assignment,
rebalancing, the SD fallback, the proposal cap) or a position the patterns do not know drew a
different count.  The simulator numbers the replayed requests in the run's admission order
(``validation.compare.write_replay``), which ``schedule`` undoes.
"""
from __future__ import annotations

from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any, Hashable, Mapping

from psdlab.analysis.trace import Trace


def admission_index(trace: Trace) -> dict[Hashable, int]:
    """Request id -> its position in the run's admission order (the replay's numbering)."""
    from psdlab.validation.compare import admission_order
    return {r.id: i for i, r in enumerate(admission_order(trace))}


def schedule(trace: Trace, ids: Mapping[Hashable, int] | None = None) -> list[tuple]:
    """Per step in time order: ("P", n) for a prefill of n sequences, else the sorted
    verified request ids (mapped through ``ids`` when given); steps that only drafted are
    left out (the runtime and the simulator write PSD's first draft alike, but a drafter-only
    step is not a decision about who is served)."""
    out: list[tuple] = []
    for s in sorted(trace.steps, key=lambda x: (x.start, x.index)):
        pre = [p for p in s.phases if p.kind == "prefill"]
        if pre:
            out.append(("P", int(pre[0].seqs)))
        elif s.verified:
            out.append(tuple(sorted(ids[v.req] if ids is not None else v.req
                                    for v in s.verified)))
    return out


@dataclass(frozen=True)
class Agreement:
    steps_measured: int
    steps_replayed: int
    matched: int                 # steps in common blocks of the two sequences
    first_difference: int | None  # index of the first differing step (None: identical)

    @property
    def share(self) -> float:
        """Matched steps over the longer schedule (1: the same schedule)."""
        n = max(self.steps_measured, self.steps_replayed)
        return self.matched / n if n else 1.0

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "share": self.share}


def agreement(measured: Trace, replayed: Trace) -> Agreement:
    """How far the replay's schedule follows the measured run's."""
    a = schedule(measured, admission_index(measured))
    b = schedule(replayed)
    blocks = SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y),
                 None if len(a) == len(b) else min(len(a), len(b)))
    return Agreement(len(a), len(b), sum(m.size for m in blocks), first)


def agreement_rows(validation: Any, names: set[str] | None = None) -> list[dict[str, Any]]:
    """Per compared configuration (those in ``names`` when given): the agreement of its
    first run with that run's replay (first simulator seed)."""
    out = []
    for c in validation.comparisons:
        if c.sim_trace is None or (names is not None and c.name not in names):
            continue
        ag = agreement(c.trace, c.sim_trace)
        out.append({"run": c.name, **ag.to_dict()})
    return out
