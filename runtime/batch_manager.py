"""The two batches of the runtime's PSD loop (``runtime.step_loop``) and of the vLLM halves.

The rule -- a new sequence joins the smaller batch (ties: the batch about to be drafted); at
every step boundary, after the admissions, the most recently admitted sequences move from the
larger batch to the smaller one until they differ by at most one, preferring sequences that
hold no drafts -- lives in ``analysis.batch_rule``, the one copy the simulator uses too
(``sim.batch_assignment``, policy ``rebalance``), so a replay puts every sequence where the run did.
This module only adapts it to the loop's call (``rebalance(prefer=..., admitted=...)``).

Unlike the paper's counter (new requests always join the draft batch; finished ones leave a
hole), the rule keeps the batches balanced after finishes and arrivals alike.
"""
from __future__ import annotations

from typing import Hashable, Iterable, Mapping

from psdlab.analysis.batch_rule import TwoBatches


class BatchManager(TwoBatches):
    """Membership of two batches with a per-batch capacity (``analysis.batch_rule.TwoBatches``)."""

    def rebalance(self, prefer: Iterable[Hashable] = (),
                  admitted: Mapping[Hashable, float] | None = None
                  ) -> list[tuple[Hashable, int, int]]:
        """Move sequences until the sizes differ by at most one; ``prefer`` lists the
        sequences cheapest to move (holding no drafts); among them (else among all) the most
        recently admitted one moves (``admitted``: a sequence's admission order; without it,
        the order of `assign`).  Returns the moves as (seq, from, to)."""
        preferred = set(prefer)
        return self.rebalance_moves(lambda s: s not in preferred, admitted)
