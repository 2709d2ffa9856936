"""Measured decode passes by shape: what the replay uses where a CPU's pass time is a step
function of the shape that no affine fit says.

A CPU's GEMM time is not monotonic in the rows it multiplies (kernel blocking: 4 x 5 rows can
run faster than 2 x 5 or 3 x 5, and on the demo's machine a drafting pass over 4 sequences
costs little more than one over 3, but much more than one over 1).  So the calibration keeps,
for every shape it saw at least MIN_TABLE times, the mean solo time and the mean context of
its passes (the mean, not the median: the replay's times add up, and a pass's time is skewed
to the right, so a median under-predicts every shape's total by the skew: 3-5% measured);
``sim.costs.calibrated`` takes that time for the shape (moved by the fit's context slope from the
shape's mean context to the one asked for) and the affine fit
elsewhere.  Rows: (sequences, tokens, mean seconds, phases, mean context).

- ``verify_table``: the target's verification passes by (sequences, padded tokens), over
  every decode step (overlapped phases divided by the overlap factor).  Tokens are counted at
  the padded width the target computes (``with_draft_forwards``: a row of 5 and a row of 1
  cost 2 x 5), which is what the simulator asks for.
- ``draft_table``: the drafter's one-token passes by sequences (tokens = sequences), from the
  serial steps' draft phases whose pass count is known (``DraftPhase.forwards``): a phase of
  k passes gives the pass time (phase time - the fit's per-phase cost) / k at its mean pass
  context, context + seqs (k - 1) / 2 -- the simulator charges k passes and the per-phase
  cost once, so a table time is one pass.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import numpy as np

from psdlab.analysis.trace import Trace

#: fewest phases of one shape for a table entry
MIN_TABLE = 5

Row = tuple[int, int, float, int, float]


def _rows(times: dict[tuple[int, int], list[float]],
          contexts: dict[tuple[int, int], list[float]]) -> tuple[Row, ...]:
    return tuple((sq, tk, float(np.mean(v)), len(v), float(np.mean(contexts[(sq, tk)])))
                 for (sq, tk), v in sorted(times.items()) if len(v) >= MIN_TABLE)


def phase_context(phase) -> float:
    """A phase's context tokens (0 in traces that record none)."""
    return float(getattr(phase, "context", 0) or 0)


def verify_table(traces: Sequence[Trace], overlap: float = 1.0) -> tuple[Row, ...]:
    """The target's verification passes by shape (module docstring), from traces that went
    through ``validation.calibrate.with_draft_forwards`` (verify tokens at their padded
    width)."""
    times: dict[tuple[int, int], list[float]] = defaultdict(list)
    contexts: dict[tuple[int, int], list[float]] = defaultdict(list)
    for tr in traces:
        for st in tr.steps:
            if any(p.kind == "prefill" for p in st.phases):
                continue
            for p in st.phases:
                if p.kind == "verify" and p.seqs > 0 and p.end > p.start:
                    d = (p.end - p.start) / (overlap if st.overlapped else 1.0)
                    times[(int(p.seqs), int(p.tokens))].append(d)
                    contexts[(int(p.seqs), int(p.tokens))].append(phase_context(p))
    return _rows(times, contexts)


def draft_table(traces: Sequence[Trace], per_phase: float = 0.0) -> tuple[Row, ...]:
    """The drafter's one-token passes by sequences, from serial draft phases (module
    docstring), from traces that went through ``validation.calibrate.with_draft_forwards``
    (draft phases with their pass count); ``per_phase``: the draft fit's fixed cost per phase,
    taken off first."""
    times: dict[tuple[int, int], list[float]] = defaultdict(list)
    contexts: dict[tuple[int, int], list[float]] = defaultdict(list)
    for tr in traces:
        for st in tr.steps:
            if st.overlapped or any(p.kind == "prefill" for p in st.phases):
                continue
            for p in st.phases:
                k = int(getattr(p, "forwards", 0) or 0)
                if p.kind != "draft" or k <= 0 or p.seqs <= 0 or p.end <= p.start:
                    continue
                n = int(p.seqs)
                times[(n, n)].append(max(p.end - p.start - per_phase, 0.0) / k)
                contexts[(n, n)].append(phase_context(p) + n * (k - 1) / 2)
    return _rows(times, contexts)
