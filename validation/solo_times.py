"""The solo time of an overlapped phase: what a PSD run's draft or verify phase would have
taken with the other device idle, the reference ``validation.replay_model`` measures overlap
contention, overlap factors and step-time spread against.

- **Same shape**: on a CPU a pass's time is a step function of its shape (kind, sequences,
  tokens), which the affine fit smooths over; so the solo time of a phase is the median of the
  serial phases of its shape (``serial_reference``) when serial steps had that shape often
  enough (MIN_REFERENCE), else the affine fit -- and only same-shape phases are compared when
  there are enough of them (``strict``): the fit's own error at a shape would read as
  contention.
- **Same time**: a shared machine's speed drifts between runs (the demo's repeats of one
  configuration differ by up to ~15-20% on a 2-core VM); compared with the serial phases of
  every calibration run, the overlapped phases of a PSD run that ran on a slow minute read
  that drift as contention (measured: fitted per calibration round, the contention was
  0.05 / 0.04 on one round and 0.14 / 0.20 on the next).  So an overlapped trace's reference is
  its **neighbour** first (``neighbour``: the serial run of the same workload -- same k, m,
  arrivals and prompts, ``run.extra["workload_key"]`` -- that started nearest in time, which
  in the demo is its back-to-back SD run), and the pooled serial reference only for shapes the
  neighbour lacks (``references``).  Traces without a workload key or a start time (older
  files, simulated ones) keep the pooled reference.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

from psdlab.validation.phase_model import design
from psdlab.analysis.trace import Trace

#: fewest serial phases of one shape for a same-shape solo reference
MIN_REFERENCE = 5

Reference = Mapping[tuple[str, int, int], float]


def is_decode(step) -> bool:
    kinds = {p.kind for p in step.phases}
    return "prefill" not in kinds and "verify" in kinds


def shape(ph: Any) -> tuple[str, int, int]:
    return (ph.kind, int(ph.seqs), int(ph.tokens))


def serial_reference(traces: Sequence[Trace]) -> dict[tuple[str, int, int], float]:
    """Median time of the serial (not overlapped) draft and verify phases of decode steps by
    shape, for shapes seen at least MIN_REFERENCE times (traces as
    ``validation.calibrate.with_draft_forwards`` gives them: verify tokens at their padded
    width)."""
    times: dict[tuple[str, int, int], list[float]] = defaultdict(list)
    for tr in traces:
        for s in tr.steps:
            if s.overlapped or not is_decode(s):
                continue
            for ph in s.phases:
                if ph.kind in ("draft", "verify") and ph.seqs > 0 and ph.end > ph.start:
                    times[shape(ph)].append(ph.end - ph.start)
    return {k: float(np.median(v)) for k, v in times.items() if len(v) >= MIN_REFERENCE}


def _started(tr: Trace) -> float | None:
    t = tr.run.extra.get("run_started")
    return float(t) if isinstance(t, (int, float)) else None


def _has_serial_drafts(tr: Trace) -> bool:
    return any(not s.overlapped and is_decode(s) and any(p.kind == "draft" for p in s.phases)
               for s in tr.steps)


def neighbour(tr: Trace, traces: Sequence[Trace]) -> Trace | None:
    """The serial run (one with serial decode steps that drafted) of ``tr``'s workload
    (``run.extra["workload_key"]``) that started nearest in time to it; None when ``tr`` has
    no workload key or start time, or no such run is among ``traces``."""
    key, t0 = tr.run.extra.get("workload_key"), _started(tr)
    if key is None or t0 is None:
        return None
    same = [(start, t) for t in traces if t is not tr and t.run.extra.get("workload_key") == key
            and (start := _started(t)) is not None and _has_serial_drafts(t)]
    return min(same, key=lambda st: abs(st[0] - t0))[1] if same else None


def references(traces: Sequence[Trace], pooled: Reference | None = None
               ) -> list[dict[tuple[str, int, int], float]]:
    """Per trace, the solo-time reference of its overlapped phases: its neighbour's serial
    medians, the pooled ones (``serial_reference`` of all traces) for the other shapes."""
    pooled = serial_reference(traces) if pooled is None else pooled
    out = []
    for tr in traces:
        near = neighbour(tr, traces) if any(s.overlapped for s in tr.steps) else None
        out.append({**pooled, **(serial_reference([near]) if near is not None else {})})
    return out


def solo(cal: Any, ref: Reference, ph: Any, strict: bool = False) -> float | None:
    """Solo time of a decode phase: the same-shape serial median, else (unless ``strict``)
    the affine fit."""
    hit = ref.get(shape(ph))
    if hit is not None or strict:
        return hit
    name = ph.kind
    if name not in cal.costs or ph.seqs <= 0 or ph.tokens <= 0:
        return None
    return float(cal.costs[name].predict(design(name, [ph]))[0])


def _enough(pairs: Iterable[tuple[Reference, Any]]) -> bool:
    """Whether enough (MIN_REFERENCE) of the phases have a same-shape entry in their
    reference to compare with those alone."""
    return sum(shape(ph) in ref for ref, ph in pairs) >= MIN_REFERENCE


def strict(ref: Reference, phases: Sequence[Any]) -> bool:
    """Whether enough of ``phases`` have a same-shape reference (MIN_REFERENCE) to use those
    alone."""
    return _enough((ref, ph) for ph in phases)


def overlapped_pairs(trace: Trace) -> Iterator[tuple[Any, Any]]:
    """(draft phase, verify phase) of each overlapped decode step with one of each."""
    for s in trace.steps:
        if not s.overlapped or not is_decode(s):
            continue
        d = [p for p in s.phases if p.kind == "draft"]
        v = [p for p in s.phases if p.kind == "verify"]
        if len(d) == 1 and len(v) == 1:
            yield d[0], v[0]


def _overlap(a: Any, b: Any) -> float:
    return max(0.0, min(a.end, b.end) - max(a.start, b.start))


def overlapped_solo(cal: Any, traces: Sequence[Trace], pooled: Reference | None = None
                    ) -> Iterator[tuple[int, Any, float, float]]:
    """(index of its trace, phase, time the other device was busy during it, solo time) of
    the draft and verify phases of overlapped steps, each trace against its own reference
    (``references``); over the phases whose shape the reference has when there are enough
    of them (MIN_REFERENCE, counted over all traces' phases), else with the affine fit for
    the other shapes."""
    refs = references(traces, pooled)
    pairs = [(i, refs[i], d, v) for i, tr in enumerate(traces) for d, v in overlapped_pairs(tr)]
    use_ref = {k: _enough((p[1], p[j]) for p in pairs)
               for j, k in ((2, "draft"), (3, "verify"))}
    for i, ref, d, v in pairs:
        o = _overlap(d, v)
        for ph in (d, v):
            w = solo(cal, ref, ph, use_ref[ph.kind])
            if w is not None:
                yield i, ph, o, w
