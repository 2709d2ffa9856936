"""Which half of vLLM's running requests is verified this step and which is drafted.

`Halves` is the PSD bookkeeping of the vLLM scheduler, kept free of vLLM so it can be tested
(and reasoned about) on its own.  Each step the scheduler calls `begin_step(running)` with the
ids of vLLM's running requests; it drops ids that left (finished, aborted, preempted), puts ids
it has not seen (new or resumed) into the smaller half, moves the most recently admitted
requests until the halves differ by at most one (preferring requests that hold no drafts) --
the rule of ``analysis.batch_rule``, through `runtime.batch_manager.BatchManager`, the same one
the runtime loop and the simulator use -- and returns the half to verify now.  The other half
is drafted concurrently.

The verify half alternates: normally it is the half drafted in the previous step.  When that
half is empty it is the other one, and with a single non-empty half the step falls back to
sequential SD (drafted, then verified) -- the tail of an offline run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Iterable

from psdlab.runtime.batch_manager import BatchManager


@dataclass(frozen=True)
class HalvesPlan:
    """The plan of one step: which half is verified, which drafted (None: nothing to draft
    concurrently, i.e. sequential SD), and the members of each."""
    verify: int
    draft: int | None
    verify_ids: tuple[Hashable, ...]
    draft_ids: tuple[Hashable, ...]
    moved: tuple[tuple[Hashable, int, int], ...] = ()
    gone: tuple[Hashable, ...] = ()

    @property
    def overlapped(self) -> bool:
        return self.draft is not None


class Halves:
    """Two halves of at most ``capacity`` requests each (``capacity`` = ceil(max_num_seqs/2))."""

    def __init__(self, capacity: int):
        self.bm = BatchManager(capacity)
        self.next_verify = 0

    def __contains__(self, rid: Hashable) -> bool:
        return rid in self.bm

    def sizes(self) -> tuple[int, int]:
        return self.bm.size(0), self.bm.size(1)

    def half_of(self, rid: Hashable) -> int | None:
        return self.bm.get(rid)

    def members(self, half: int) -> list[Hashable]:
        return self.bm.members(half)

    def sync(self, running: Iterable[Hashable], prefer_new: int | None = None) -> list[Hashable]:
        """Make the halves hold exactly ``running``; new ids join the smaller half (ties:
        ``prefer_new``).  Returns the ids that left."""
        running = list(running)
        alive = set(running)
        gone = [r for r in self.bm.ids() if r not in alive]
        for r in gone:
            self.bm.remove(r)
        for r in running:
            if r not in self.bm:
                self.bm.assign(r, prefer_new)
        return gone

    def refresh(self, running: Iterable[Hashable], has_drafts: Iterable[Hashable] = ()
                ) -> tuple[tuple[Hashable, ...], tuple[tuple[Hashable, int, int], ...]]:
        """Sync with vLLM's running list and rebalance (between steps too: after finishes
        and aborts).  Returns (ids that left, moves)."""
        gone = tuple(self.sync(running, prefer_new=1 - self.next_verify))
        with_drafts = set(has_drafts)
        return gone, tuple(self.bm.rebalance_moves(lambda r: r in with_drafts))

    def begin_step(self, running: Iterable[Hashable],
                   has_drafts: Iterable[Hashable] = ()) -> HalvesPlan:
        """Sync with vLLM's running list, rebalance, and plan this step."""
        gone, moved = self.refresh(running, has_drafts)
        v = self.next_verify
        if self.bm.size(v) == 0 and self.bm.size(1 - v) > 0:
            v = 1 - v
        d: int | None = 1 - v if self.bm.size(1 - v) > 0 else None
        self.next_verify = 1 - v if d is not None else v
        return HalvesPlan(verify=v, draft=d, verify_ids=tuple(self.bm.members(v)),
                        draft_ids=tuple(self.bm.members(d)) if d is not None else (),
                        moved=moved, gone=gone)

    def admit(self, new_ids: Iterable[Hashable], plan: HalvesPlan) -> None:
        """Requests vLLM admitted during this step (prefilled with the verify half): they join
        the smaller half, ties going to this step's verify half (drafted next step)."""
        for r in new_ids:
            if r not in self.bm and self.bm.has_room():
                self.bm.assign(r, plan.verify)
