"""How an engine feeds a prompt to a model: the rule the runtime follows and the simulator costs.

psdlab's runtime (``runtime.runner``) prefills one slot at a time, in passes of at most
``chunk`` prompt tokens, and leaves the last ``leave`` tokens for one batched pass over all
new sequences (the target leaves 1, its first-token pass; the drafter leaves none).  A prompt
of T tokens therefore costs ``ceil((T - leave) / chunk)`` passes of its own -- one up to
``chunk + leave`` tokens, two just above -- each paying a forward pass's fixed cost (reading
the weights).  The runtime records the count in a prefill phase (``Phase.chunks``), the
calibration charges its per-sequence term per pass, and a cost model that knows the rule
(``sim.costs``: ``CostModel.chunking``) charges a simulated prefill the same way, so a prompt
longer than any calibration prompt is costed as the engine will run it, not by extrapolating
a straight line.  At least one pass is counted per sequence (a prompt no longer than
``leave`` still pays for its slot).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from psdlab.analysis.checks import check_int


@dataclass(frozen=True)
class Chunking:
    """Prompt tokens fed per pass (``chunk``) and tokens left to the batched pass (``leave``)."""
    chunk: int
    leave: int = 0

    def __post_init__(self) -> None:
        check_int("chunking.chunk", self.chunk, 1, 1 << 20)
        check_int("chunking.leave", self.leave, 0, 1 << 20)

    def passes_each(self, lengths: Sequence[int] | np.ndarray) -> np.ndarray:
        """Passes of each prompt (int64 array, one entry per length, each >= 1)."""
        t = np.asarray(lengths, dtype=np.int64)
        return np.maximum(1, -(-(t - self.leave) // self.chunk))

    def passes(self, lengths: Sequence[int] | np.ndarray) -> int:
        """Passes of a prefill of these prompts (the sum of `passes_each`)."""
        return int(self.passes_each(lengths).sum())

    def to_list(self) -> list[int]:
        return [self.chunk, self.leave]


def chunking_from(value: Any, where: str) -> Chunking | None:
    """A `Chunking` from its ``[chunk, leave]`` form (None or [] -> None: one pass per
    sequence); anything else gets a one-line error naming ``where``."""
    if value is None or (isinstance(value, (list, tuple)) and not value):
        return None
    if (not isinstance(value, (list, tuple)) or len(value) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
        raise ValueError(f"{where}: must be [chunk, leave] (integers, chunk >= 1, leave >= 0),"
                         f" got {value!r}")
    try:
        return Chunking(int(value[0]), int(value[1]))
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def chunkings_from(doc: Mapping[str, Any] | None, where: str) -> dict[str, Chunking]:
    """``{role: [chunk, leave]}`` (a trace's ``run.extra`` entry or a model file's meta) as
    Chunkings by role."""
    if doc is None:
        return {}
    if not isinstance(doc, Mapping):
        raise ValueError(f"{where}: must be an object {{role: [chunk, leave]}}, got {doc!r}")
    out = {}
    for role, value in doc.items():
        rule = chunking_from(value, f"{where}.{role}")
        if rule is not None:
            out[str(role)] = rule
    return out
