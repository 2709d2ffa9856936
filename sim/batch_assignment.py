"""The batch manager: which batch a request joins, leaves, or moves to.

For PSD there are two batches of at most m requests each; the other modes have one batch of at
most m.  Policies are chosen by name (``server.policy``):

- ``paper`` (MineDraft's rules): before the first step a new request joins the smaller batch;
  afterwards every new request joins the current *draft* batch (the one drafted in the next
  step) and waits if that batch is full; a finished or preempted request gives its place back.
  Nothing else rebalances, so preemptions and uneven completions can leave the batches uneven
  for good (the paper's admitted weakness).  Preemption victim: the most recently admitted.
- ``rebalance``: the PSD rule of ``analysis.batch_rule``, the one copy the runtime
  (``runtime.batch_manager``) and the vLLM extension use too, so a replay keeps every request
  where the run had it: a new request joins the smaller batch (the draft batch on ties); the
  victim of a preemption is the most recently admitted request of the larger batch (ties: the
  draft batch); and at every step boundary, after admission, while the sizes differ by more
  than one, the most recently admitted request of the larger batch (preferring requests
  without drafts ready: not drafted yet, or, with ``server.cap_proposals``, at their last
  token) moves to the smaller one.  A moved request loses the drafts it had (it is drafted
  again with its new batch).  Promise: at every step boundary, after admission and
  rebalancing, |size0 - size1| <= 1.  The fast paths (``sim.step_layout``, ``sim.lanes``) call
  ``analysis.batch_rule.join`` for each admission; ``tests/test_batch_rule.py`` checks that
  every path picks the same batches.
"""
from __future__ import annotations

import numpy as np

from psdlab.analysis import batch_rule as rule


class BatchAssignment:
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


class PaperPolicy:
    """MineDraft's rules; only the first-step choice (the smaller batch, ties: batch 0) and
    "the most recently admitted" are the shared rule's pieces."""

    @staticmethod
    def choose(bm: BatchAssignment) -> int | None:
        if not bm.started:
            return rule.join(bm.sizes(), 0, bm.m)
        b = bm.next_draft
        return b if len(bm.batches[b]) < bm.m else None

    @staticmethod
    def victim(bm: BatchAssignment, admit_seq: np.ndarray) -> tuple[int, int]:
        r = rule.latest((r for b in bm.batches for r in b), admit_seq)
        return r, bm.batch_of(r)

    @staticmethod
    def rebalance(bm: BatchAssignment, ready: np.ndarray, admit_seq: np.ndarray) -> list[int]:
        return []


class RebalancePolicy:
    """The PSD rule of ``analysis.batch_rule``, over the simulator's batches."""

    @staticmethod
    def choose(bm: BatchAssignment) -> int | None:
        return rule.join(bm.sizes(), bm.next_draft, bm.m)

    @staticmethod
    def victim(bm: BatchAssignment, admit_seq: np.ndarray) -> tuple[int, int]:
        return rule.victim(bm.batches, admit_seq, bm.next_draft)

    @staticmethod
    def rebalance(bm: BatchAssignment, ready: np.ndarray, admit_seq: np.ndarray) -> list[int]:
        moves = rule.rebalance(bm.batches, admit_seq, lambda r: bool(ready[r]))
        return [r for r, _src, _dst in moves]


POLICIES: dict[str, type[PaperPolicy] | type[RebalancePolicy]] = {
    "paper": PaperPolicy, "rebalance": RebalancePolicy}
