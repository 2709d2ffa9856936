"""What makes a PSD run inside vLLM batch-parallel, read from the scheduler's event log.

`PSDScheduler.events` records, per step n, ``("submit", n, d)`` when the drafting of half d is
dispatched to the drafter, ``("scheduled", n, v)`` when the verify half v is handed to vLLM,
``("output", n, v)`` when its result comes back and ``("collect", n, d)`` when the drafts come
back.  A step is *overlapped* when it drafts the other half (d != v); then the drafting must be
dispatched before the verification is scheduled and collected after its output (so the drafter
works for the whole verification, whatever the two take on the clock), and the next overlapped
step verifies the half this one drafted.  A sequential step (one non-empty half: the tail of an
offline run) drafts its own verify half and collects before scheduling it.

Free of vLLM, so the rule is tested on its own; the benchmark and the vLLM tests apply it to real
runs.  How much the two phases intersect in time is a measurement (`benchmarks/bench_vllm.py`),
not part of the structure.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class Structure:
    steps: int                  # steps with a scheduled verify half
    overlapped: int             # of which drafted the other half
    sequential: int             # of which drafted their own half first
    alternations: int           # consecutive overlapped steps checked for alternation
    problems: tuple[str, ...]   # every violated rule, one line each

    @property
    def ok(self) -> bool:
        return not self.problems


def psd_structure(events: Iterable[tuple[str, int, int | None]]) -> Structure:
    """Check the event log of one PSD run (see the module docstring)."""
    pos: dict[tuple[str, int], tuple[int, int | None]] = {}
    problems: list[str] = []
    for i, (kind, step, half) in enumerate(events):
        if (kind, step) in pos:
            problems.append(f"step {step}: two {kind!r} events")
        pos[(kind, step)] = (i, half)
    steps = sorted(s for (k, s) in pos if k == "scheduled")
    overlapped: dict[int, tuple[int | None, int | None]] = {}
    sequential = 0
    for n in steps:
        i_sched, v = pos[("scheduled", n)]
        out = pos.get(("output", n))
        if out is None or out[0] < i_sched or out[1] != v:
            problems.append(f"step {n}: no output of half {v} after it was scheduled")
        sub, col = pos.get(("submit", n)), pos.get(("collect", n))
        if sub is None:
            continue
        d = sub[1]
        if col is None or col[1] != d or col[0] < sub[0]:
            problems.append(f"step {n}: drafting of half {d} dispatched but never collected")
            continue
        if d == v:
            sequential += 1
            if col[0] > i_sched:
                problems.append(f"step {n}: sequential drafting collected after scheduling")
            continue
        overlapped[n] = (v, d)
        if sub[0] > i_sched:
            problems.append(f"step {n}: drafting of half {d} dispatched after half {v} "
                            "was scheduled")
        if out is not None and col[0] < out[0]:
            problems.append(f"step {n}: drafts of half {d} collected before half {v}'s output")
    alternations = 0
    for n, (_v, d) in overlapped.items():
        nxt = overlapped.get(n + 1)
        if nxt is not None:
            alternations += 1
            if nxt[0] != d:
                problems.append(f"step {n + 1}: verifies half {nxt[0]}, not the half {d} "
                                f"drafted in step {n}")
    return Structure(steps=len(steps), overlapped=len(overlapped), sequential=sequential,
                     alternations=alternations, problems=tuple(problems))
