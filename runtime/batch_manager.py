"""The two batches of PSD and the rule that keeps them balanced.

PSD keeps up to 2m running sequences in batch 0 and batch 1: each step the target verifies one
batch while the drafter drafts the other.  A new sequence joins the smaller batch (ties go to
the batch about to be drafted, so it gets drafts soonest); at every step boundary, after the
admissions, `rebalance` moves the most recently admitted sequences from the larger batch to
the smaller one until they differ by at most one, preferring sequences that hold no drafts
(moving one that does throws its drafts away).  Admitting first lets new sequences fill the
batch that finishes emptied, so fewer drafts are thrown away; it is also the simulator's order
(``sim.batching``, policy ``rebalance``), so a replay puts every sequence where the run did.

Unlike the paper's counter (new requests always join the draft batch; finished ones leave a
hole), this keeps the batches balanced after finishes and arrivals alike.
"""
from __future__ import annotations

from typing import Hashable, Iterable, Mapping

from psdlab.analysis.checks import check_int


class BatchManager:
    """Membership of two batches with a per-batch capacity."""

    def __init__(self, capacity: int):
        self.capacity = check_int("batch", capacity, minimum=1)
        self.batches: tuple[list[Hashable], list[Hashable]] = ([], [])
        self._where: dict[Hashable, int] = {}

    def __len__(self) -> int:
        return len(self._where)

    def size(self, batch: int) -> int:
        return len(self.batches[batch])

    def members(self, batch: int) -> list[Hashable]:
        return list(self.batches[batch])

    def batch_of(self, seq: Hashable) -> int:
        return self._where[seq]

    def has_room(self) -> bool:
        return any(len(b) < self.capacity for b in self.batches)

    def assign(self, seq: Hashable, draft_batch: int | None = None) -> int:
        """Put a new sequence in the smaller batch with room (ties: ``draft_batch``, else 0)."""
        if seq in self._where:
            raise ValueError(f"seq: {seq!r} is already in batch {self._where[seq]}")
        open_ = [b for b in (0, 1) if len(self.batches[b]) < self.capacity]
        if not open_:
            raise ValueError(f"batch: both batches are full (capacity {self.capacity})")
        tie = draft_batch if draft_batch in open_ else open_[0]
        chosen = min(open_, key=lambda b: (len(self.batches[b]), b != tie))
        self.batches[chosen].append(seq)
        self._where[seq] = chosen
        return chosen

    def remove(self, seq: Hashable) -> None:
        batch = self._where.pop(seq)
        self.batches[batch].remove(seq)

    def rebalance(self, prefer: Iterable[Hashable] = (),
                  admitted: Mapping[Hashable, float] | None = None
                  ) -> list[tuple[Hashable, int, int]]:
        """Move sequences until the sizes differ by at most one; ``prefer`` lists the
        sequences cheapest to move; among them (else among all) the most recently admitted
        one moves (``admitted``: a sequence's admission order; without it, the one that
        joined its batch last).  Returns the moves as (seq, from, to)."""
        preferred = set(prefer)
        moves = []
        while abs(len(self.batches[0]) - len(self.batches[1])) >= 2:
            src = 0 if len(self.batches[0]) > len(self.batches[1]) else 1
            dst = 1 - src
            candidates = self.batches[src]
            pool = [s for s in candidates if s in preferred] or candidates
            pick = (max(pool, key=lambda s: admitted[s]) if admitted is not None
                    else pool[-1])
            candidates.remove(pick)
            self.batches[dst].append(pick)
            self._where[pick] = dst
            moves.append((pick, src, dst))
        return moves
