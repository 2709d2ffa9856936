"""The PSD batch-assignment rule, in one place: which batch a new request joins, which requests
move when the two batches drift apart, and which request a preemption takes.

PSD keeps its running requests in batch 0 and batch 1 (at most ``capacity`` each): each step
the target verifies one batch while the drafter drafts the other.  The rule, used by the
runtime (``runtime.batch_manager``), the vLLM extension (``runtime.vllm_ext.halves``) and every
simulator path (``sim.batch_assignment``, policy ``rebalance``; ``sim.step_layout`` and
``sim.lanes`` call `join` per admission):

- **join**: a new request joins the smaller batch with room; on equal sizes, the batch about
  to be drafted (so it gets drafts soonest), else batch 0.  Both full: it waits.
- **rebalance** (at a step boundary, after the admissions): while the sizes differ by two or
  more, the most recently admitted request of the larger batch moves to the end of the smaller
  one -- among the requests holding no drafts if there are any (moving one that holds drafts
  throws them away).
- **victim** (preemption under a KV limit): the most recently admitted request of the larger
  batch; on equal sizes, of the batch about to be drafted.

"Most recently admitted" is the largest admission rank (a request readmitted after a
preemption takes a new rank).  The functions are pure over sizes, member lists and ranks;
`TwoBatches` is the membership (ids, ranks) the runtime and the vLLM halves share.
"""
from __future__ import annotations

from typing import Callable, Hashable, Iterable, Protocol, Sequence, TypeVar

from psdlab.analysis.checks import check_int

H = TypeVar("H", bound=Hashable)


class Rank(Protocol):
    """Admission rank by request id: a dict, or a numpy array indexed by integer ids."""

    def __getitem__(self, key, /): ...


# ---------------------------------------------------------------------------- pure rule

def smaller(sizes: Sequence[int], tie: int) -> int:
    """The smaller of two batches; ``tie`` when they are the same size."""
    if sizes[0] == sizes[1]:
        return tie
    return 0 if sizes[0] < sizes[1] else 1


def larger(sizes: Sequence[int], tie: int) -> int:
    """The larger of two batches; ``tie`` when they are the same size."""
    if sizes[0] == sizes[1]:
        return tie
    return 0 if sizes[0] > sizes[1] else 1


def join(sizes: Sequence[int], draft: int | None, capacity: int) -> int | None:
    """The batch a new request joins: the smaller one (ties: ``draft``, the batch drafted
    next, else 0), or None when both hold ``capacity`` requests.  With equal capacities the
    smaller batch is the one with room whenever either has room."""
    b = smaller(sizes, 0 if draft is None else draft)
    return b if sizes[b] < capacity else None


def latest(members: Iterable[H], rank: Rank) -> H:
    """The most recently admitted of ``members`` (largest rank)."""
    return max(members, key=lambda r: rank[r])


def mover(members: Sequence[H], rank: Rank, holds_drafts: Callable[[H], bool]) -> H:
    """The request that leaves ``members`` (the larger batch) in a rebalance: the most
    recently admitted of those holding no drafts, else of all."""
    free = [r for r in members if not holds_drafts(r)]
    return latest(free or members, rank)


def rebalance(batches: Sequence[list[H]], rank: Rank, holds_drafts: Callable[[H], bool]
              ) -> list[tuple[H, int, int]]:
    """Move requests (in place, to the end of the smaller batch) until the two sizes differ
    by at most one; returns the moves as (request, from, to) in order."""
    moves: list[tuple[H, int, int]] = []
    while abs(len(batches[0]) - len(batches[1])) >= 2:
        src = 0 if len(batches[0]) > len(batches[1]) else 1
        pick = mover(batches[src], rank, holds_drafts)
        batches[src].remove(pick)
        batches[1 - src].append(pick)
        moves.append((pick, src, 1 - src))
    return moves


def victim(batches: Sequence[Sequence[H]], rank: Rank, draft: int) -> tuple[H, int]:
    """(request, batch) a preemption takes: the most recently admitted of the larger batch
    (ties: ``draft``); the other batch if that one is empty."""
    b = larger([len(batches[0]), len(batches[1])], draft)
    if not batches[b]:
        b = 1 - b
    return latest(batches[b], rank), b


# ---------------------------------------------------------------------------- membership

class TwoBatches:
    """Membership of two batches of at most ``capacity`` requests, with admission ranks.

    `assign` applies `join` and gives the request the next rank; `rebalance` applies the
    rule's moves with those ranks (or with ranks the caller keeps)."""

    def __init__(self, capacity: int):
        self.capacity = check_int("batch", capacity, minimum=1)
        self.batches: tuple[list[Hashable], list[Hashable]] = ([], [])
        self._where: dict[Hashable, int] = {}
        self._rank: dict[Hashable, int] = {}
        self._admitted = 0

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, seq: Hashable) -> bool:
        return seq in self._where

    def ids(self) -> list[Hashable]:
        """Every member, in admission order."""
        return sorted(self._where, key=self._rank.__getitem__)

    def sizes(self) -> tuple[int, int]:
        return len(self.batches[0]), len(self.batches[1])

    def size(self, batch: int) -> int:
        return len(self.batches[batch])

    def members(self, batch: int) -> list[Hashable]:
        return list(self.batches[batch])

    def batch_of(self, seq: Hashable) -> int:
        return self._where[seq]

    def get(self, seq: Hashable) -> int | None:
        """The batch of ``seq``, or None if it is not a member."""
        return self._where.get(seq)

    def has_room(self) -> bool:
        return join(self.sizes(), None, self.capacity) is not None

    def assign(self, seq: Hashable, draft_batch: int | None = None) -> int:
        """Put a new request in the batch `join` picks (ties: ``draft_batch``, else 0)."""
        if seq in self._where:
            raise ValueError(f"seq: {seq!r} is already in batch {self._where[seq]}")
        chosen = join(self.sizes(), draft_batch, self.capacity)
        if chosen is None:
            raise ValueError(f"batch: both batches are full (capacity {self.capacity})")
        self.batches[chosen].append(seq)
        self._where[seq] = chosen
        self._rank[seq] = self._admitted
        self._admitted += 1
        return chosen

    def remove(self, seq: Hashable) -> None:
        batch = self._where.pop(seq)
        del self._rank[seq]
        self.batches[batch].remove(seq)

    def rebalance_moves(self, holds_drafts: Callable[[Hashable], bool],
                        rank: Rank | None = None) -> list[tuple[Hashable, int, int]]:
        """`rebalance` with this membership's ranks (or ``rank``); returns the moves."""
        moves = rebalance(self.batches, self._rank if rank is None else rank, holds_drafts)
        for seq, _src, dst in moves:
            self._where[seq] = dst
        return moves

    def victim(self, draft: int) -> tuple[Hashable, int]:
        """The request a preemption takes (`victim`), not removed."""
        return victim(self.batches, self._rank, draft)
