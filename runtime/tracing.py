"""Writing the analysis/ trace while the runtime runs.

`RuntimeTracer` wraps `analysis.trace.TraceWriter` (one line per record, flushed as written, so
Ctrl-C or a crash leaves a readable file) and keeps the same records in memory for the run's
summary.  All times come in as absolute ``time.perf_counter()`` readings (CLOCK_MONOTONIC on
Linux, shared by the controller and the worker processes) and are written as seconds since the
run's ``t0``.
"""
from __future__ import annotations

import os
import platform
from typing import Any, Iterable

from psdlab.analysis.version import __version__
from psdlab.analysis.trace import (Phase, RequestRecord, RunInfo, StepRecord, Trace, TraceWriter,
                                   Verified)


def software_versions() -> dict[str, str]:
    import torch
    out = {"python": platform.python_version(), "torch": torch.__version__}
    out["psdlab"] = __version__
    return out


class RuntimeTracer:
    """Collects phases of the current step and writes step and request records."""

    def __init__(self, path: str | os.PathLike | None, run: RunInfo, t0: float):
        self.t0 = t0
        self.trace = Trace(run=run)
        self._writer = TraceWriter(path, run)
        self._phases: list[Phase] = []
        self.index = 0

    def rel(self, t: float) -> float:
        return max(0.0, t - self.t0)

    def phase(self, kind: str, device: str, start: float, end: float, seqs: int,
              tokens: int, chunks: int = 0, context: int = 0) -> Phase:
        """Record one phase; ``context``: the tokens already in its sequences' KV caches
        when it started, summed (``Phase.context``)."""
        p = Phase(kind=kind, device=device, start=self.rel(start), end=max(self.rel(start),
                  self.rel(end)), seqs=int(seqs), tokens=int(tokens), context=int(context),
                  chunks=int(chunks))
        self._phases.append(p)
        return p

    def pending_phases(self) -> list[Phase]:
        return list(self._phases)

    def step(self, start: float, end: float, verified: Iterable[Verified] = (),
             verify_batch: int | None = None, draft_batch: int | None = None,
             overlapped: bool = False) -> StepRecord | None:
        """Write the step made of the phases collected since the last step (none: no-op)."""
        if not self._phases:
            return None
        phases = tuple(self._phases)
        s = min([self.rel(start)] + [p.start for p in phases])
        e = max([self.rel(end)] + [p.end for p in phases])
        rec = StepRecord(index=self.index, start=s, end=e, phases=phases,
                         verified=tuple(verified), verify_batch=verify_batch,
                         draft_batch=draft_batch, overlapped=overlapped)
        self._writer.step(rec)
        self.trace.steps.append(rec)
        self._phases = []
        self.index += 1
        return rec

    def request(self, rid: Any, arrival: float, admitted: float, first_token: float,
                finish: float, prompt_len: int, output_len: int,
                batch: int | None = None) -> RequestRecord:
        a = self.rel(arrival) if arrival >= self.t0 else 0.0
        ad = max(a, self.rel(admitted))
        ft = max(ad, self.rel(first_token))
        fi = max(ft, self.rel(finish))
        rec = RequestRecord(id=rid, arrival=a, admitted=ad, first_token=ft, finish=fi,
                            prompt_len=int(prompt_len), output_len=int(output_len), batch=batch)
        self._writer.request(rec)
        self.trace.requests.append(rec)
        return rec

    def close(self) -> None:
        self._writer.close()


def overlap_seconds(phases: Iterable[Phase]) -> float:
    """Time during which some draft phase and some verify phase of one step ran at once."""
    drafts = [(p.start, p.end) for p in phases if p.kind == "draft"]
    verifies = [(p.start, p.end) for p in phases if p.kind == "verify"]
    return sum(max(0.0, min(d1, v1) - max(d0, v0)) for d0, d1 in drafts for v0, v1 in verifies)
