"""The batch manager: which batch a request joins, leaves, or moves to.

For PSD there are two batches of at most m requests each; the other modes have one batch of at
most m.  Policies are chosen by name (``server.policy``):

- ``paper`` (MineDraft's rules): before the first step a new request joins the smaller batch;
  afterwards every new request joins the current *draft* batch (the one drafted in the next
  step) and waits if that batch is full; a finished or preempted request gives its place back.
  Nothing else rebalances, so preemptions and uneven completions can leave the batches uneven
  for good (the paper's admitted weakness).  Preemption victim: the most recently admitted.
- ``rebalance``: a new request joins the smaller batch (the draft batch on ties); the victim of
  a preemption is the most recently admitted request of the larger batch; and at every step
  boundary, after admission, while the sizes differ by more than one, the most recently
  admitted request of the larger batch (preferring requests without drafts ready: not drafted
  yet, or, with ``server.cap_proposals``, at their last token) moves to the smaller one -- the
  runtime's rule (``runtime.batch_manager``), so a replay keeps every request where the run
  had it.  A moved
  request loses the drafts it had (it is drafted again with its new batch).  Promise: at every
  step boundary, after admission and rebalancing, |size0 - size1| <= 1.
"""
from __future__ import annotations

from typing import Callable

import numpy as np


class BatchManager:
    """Membership of the batches (lists of request ids in admission order)."""

    def __init__(self, nbatches: int, m: int, policy: str):
        self.batches: list[list[int]] = [[] for _ in range(nbatches)]
        self.m = m
        self.policy = POLICIES[policy]
        self.policy_name = policy
        self.next_draft = 0          # PSD: batch drafted next in the alternation
        self.started = False         # a step has run

    # ------------------------------------------------------------------ queries
    def sizes(self) -> list[int]:
        return [len(b) for b in self.batches]

    def running(self) -> int:
        return sum(len(b) for b in self.batches)

    def free_slots(self) -> int:
        return self.m * len(self.batches) - self.running()

    def batch_of(self, req: int) -> int:
        for i, b in enumerate(self.batches):
            if req in b:
                return i
        raise KeyError(req)

    # ------------------------------------------------------------------ changes
    def choose(self) -> int | None:
        """The batch the next new request joins, or None if it must wait."""
        if len(self.batches) == 1:
            return 0 if len(self.batches[0]) < self.m else None
        return self.policy.choose(self)

    def add(self, req: int, batch: int) -> None:
        self.batches[batch].append(req)

    def remove(self, req: int, batch: int) -> None:
        self.batches[batch].remove(req)

    def victim(self, admit_seq: np.ndarray) -> tuple[int, int]:
        """(request, batch) to preempt."""
        if len(self.batches) == 1:
            return PaperPolicy.victim(self, admit_seq)
        return self.policy.victim(self, admit_seq)

    def rebalance(self, ready: np.ndarray, admit_seq: np.ndarray) -> list[int]:
        """Move requests between batches per the policy; returns the moved ids."""
        if len(self.batches) == 1:
            return []
        return self.policy.rebalance(self, ready, admit_seq)


def _latest(reqs: list[int], admit_seq: np.ndarray) -> int:
    return max(reqs, key=lambda r: admit_seq[r])


class PaperPolicy:
    @staticmethod
    def choose(bm: BatchManager) -> int | None:
        if not bm.started:
            s0, s1 = bm.sizes()
            b = 0 if s0 <= s1 else 1
        else:
            b = bm.next_draft
        return b if len(bm.batches[b]) < bm.m else None

    @staticmethod
    def victim(bm: BatchManager, admit_seq: np.ndarray) -> tuple[int, int]:
        cands = [(r, i) for i, b in enumerate(bm.batches) for r in b]
        return max(cands, key=lambda rb: admit_seq[rb[0]])

    @staticmethod
    def rebalance(bm: BatchManager, ready: np.ndarray, admit_seq: np.ndarray) -> list[int]:
        return []


class RebalancePolicy:
    @staticmethod
    def choose(bm: BatchManager) -> int | None:
        s = bm.sizes()
        b = bm.next_draft if s[0] == s[1] else int(np.argmin(s))
        return b if s[b] < bm.m else None

    @staticmethod
    def victim(bm: BatchManager, admit_seq: np.ndarray) -> tuple[int, int]:
        s = bm.sizes()
        b = int(np.argmax(s)) if s[0] != s[1] else bm.next_draft
        if not bm.batches[b]:
            b = 1 - b
        return _latest(bm.batches[b], admit_seq), b

    @staticmethod
    def rebalance(bm: BatchManager, ready: np.ndarray, admit_seq: np.ndarray) -> list[int]:
        moved = []
        while True:
            s = bm.sizes()
            if abs(s[0] - s[1]) <= 1:
                return moved
            src = 0 if s[0] > s[1] else 1
            cands = bm.batches[src]
            unready = [r for r in cands if not ready[r]]
            req = _latest(unready or cands, admit_seq)
            bm.remove(req, src)
            bm.add(req, 1 - src)
            moved.append(req)


POLICIES: dict[str, Callable] = {"paper": PaperPolicy, "rebalance": RebalancePolicy}
