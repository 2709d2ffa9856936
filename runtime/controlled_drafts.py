"""Controlled-acceptance drafting for validation experiments.

The drafter still does its real compute (so the drafting time t is real), but the tokens sent
for verification are replaced: draft position j of a sequence is the target's known greedy
continuation with probability ``alpha`` and a different token otherwise.  The known
continuation comes from a reference target-only (AR, greedy) run of the same requests.  Since
verification is real, the output stays lossless (it equals the target's greedy output); only
the acceptance is controlled: P(accept position j | positions before accepted) = alpha.

Runs in this mode are labelled in the trace: ``run.extra["drafter"] = "controlled"`` and
``run.extra["controlled_alpha"]``.
"""
from __future__ import annotations

from typing import Hashable, Mapping, Sequence

import numpy as np

from psdlab.analysis.checks import check_range


class ControlledProposer:
    """Replaces a drafter's proposals by the reference continuation with probability alpha."""

    def __init__(self, alpha: float, reference: Mapping[Hashable, Sequence[int]],
                 vocab_size: int, seed: int = 0):
        self.alpha = check_range("controlled_alpha", alpha, 0.0, 1.0)
        if vocab_size < 2:
            raise ValueError(f"vocab_size: must be >= 2, got {vocab_size}")
        self.reference = {k: list(v) for k, v in reference.items()}
        self.vocab_size = int(vocab_size)
        self.rng = np.random.default_rng(seed)

    def propose(self, req: Hashable, generated: int, own: Sequence[int]) -> list[int]:
        """Proposals for a sequence that has ``generated`` output tokens so far, given the
        drafter's own tokens ``own`` (used where the reference has run out)."""
        ref = self.reference.get(req, [])
        out = []
        for j, tok in enumerate(own):
            pos = generated + j
            if pos >= len(ref):
                out.append(int(tok))
                continue
            want = int(ref[pos])
            if self.rng.random() < self.alpha:
                out.append(want)
            else:
                out.append(int((want + 1 + self.rng.integers(self.vocab_size - 1))
                               % self.vocab_size))
        return out

    def labels(self) -> dict[str, object]:
        return {"drafter": "controlled", "controlled_alpha": self.alpha}
