"""psdlab-format traces (`analysis.trace`) written from inside vLLM's scheduler.

`VllmTracer` turns what the scheduler sees -- when it handed a batch to the model, when the
output came back, which requests were scheduled with which drafts and how many tokens each
got back, when the drafter worked -- into `StepRecord`s and `RequestRecord`s.  A step's record
is written once the drafting that overlapped it has been collected (the next step), so each
record holds both phases.  Times are ``time.perf_counter()`` readings (CLOCK_MONOTONIC, shared
with the drafter process) written as seconds since the tracer started.
"""
from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass, field
from typing import Any, Hashable

from psdlab.analysis.version import __version__
from psdlab.analysis.trace import (Phase, RequestRecord, RunInfo, StepRecord, Trace, TraceWriter,
                                   Verified)


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in ("vllm", "torch"):
        try:
            out[name] = __import__(name).__version__
        except Exception:   # pragma: no cover - reported, not needed
            pass
    out["psdlab"] = __version__
    return out


@dataclass
class _Req:
    arrival: float
    prompt_len: int
    admitted: float | None = None
    first_token: float | None = None
    output_len: int = 0
    preemptions: int = 0
    batch: int | None = None


@dataclass
class _Step:
    start: float
    end: float
    target_phases: list[Phase]
    verified: list[Verified]
    verify_batch: int | None
    draft_batch: int | None
    draft_phase: Phase | None = None
    before: Phase | None = None      # sequential SD: drafted before verifying
    preempted: list[Any] = field(default_factory=list)


class VllmTracer:
    """Collects one pending step at a time and the live requests' timestamps."""

    def __init__(self, path: str | os.PathLike | None, run: RunInfo):
        self.t0 = time.perf_counter()
        self.trace = Trace(run=run)
        self._writer = TraceWriter(path, run)
        self._reqs: dict[Hashable, _Req] = {}
        self._pending: _Step | None = None
        self._upcoming: Phase | None = None
        self.index = 0

    def rel(self, t: float) -> float:
        return max(0.0, t - self.t0)

    # ------------------------------------------------------------ requests
    def arrived(self, rid: Hashable, prompt_len: int, when: float | None = None) -> None:
        self._reqs.setdefault(rid, _Req(arrival=self.rel(when or time.perf_counter()),
                                        prompt_len=int(prompt_len)))

    def scheduled(self, rid: Hashable, when: float) -> None:
        r = self._reqs.get(rid)
        if r is not None and r.admitted is None:
            r.admitted = max(r.arrival, self.rel(when))

    def emitted(self, rid: Hashable, n: int, when: float, batch: int | None) -> None:
        r = self._reqs.get(rid)
        if r is None or n <= 0:
            return
        if r.first_token is None:
            r.first_token = self.rel(when)
        r.output_len += n
        r.batch = batch if batch is not None else r.batch

    def preempted(self, rid: Hashable) -> None:
        if rid in self._reqs:
            self._reqs[rid].preemptions += 1

    def finished(self, rid: Hashable, when: float, output_len: int | None = None) -> None:
        r = self._reqs.pop(rid, None)
        if r is None:
            return
        fin = self.rel(when)
        admitted = r.admitted if r.admitted is not None else fin
        admitted = max(r.arrival, min(admitted, fin))
        first = r.first_token if r.first_token is not None else fin
        first = min(max(admitted, first), fin)
        rec = RequestRecord(id=_jsonable_id(rid), arrival=r.arrival, admitted=admitted,
                            first_token=first, finish=fin, prompt_len=r.prompt_len,
                            output_len=int(output_len if output_len is not None
                                           else r.output_len),
                            batch=r.batch, preemptions=r.preemptions)
        self._writer.request(rec)
        self.trace.requests.append(rec)

    # ------------------------------------------------------------ steps
    def step(self, start: float, end: float, device: str, scheduled: dict[Any, int],
             new: set[Any], verified: list[Verified], verify_batch: int | None = None,
             draft_batch: int | None = None, preempted: list[Any] | None = None) -> None:
        """The target's part of a step: a ``prefill`` phase for the requests scheduled for the
        first time, a ``verify`` phase for the others (both span the one forward pass);
        written when `draft_done` or `flush` comes."""
        self.flush()
        s, e = self.rel(start), max(self.rel(start), self.rel(end))
        phases = []
        pre = [n for r, n in scheduled.items() if r in new]
        dec = [n for r, n in scheduled.items() if r not in new]
        if pre:
            phases.append(Phase(kind="prefill", device=device, start=s, end=e, seqs=len(pre),
                                tokens=sum(pre)))
        if dec or not pre:
            phases.append(Phase(kind="verify", device=device, start=s, end=e, seqs=len(dec),
                                tokens=sum(dec)))
        self._pending = _Step(start=s, end=e, target_phases=phases, verified=verified,
                              verify_batch=verify_batch, draft_batch=draft_batch,
                              before=self._upcoming, preempted=list(preempted or []))
        self._upcoming = None

    def draft_done(self, device: str, start: float, end: float, seqs: int, tokens: int,
                   upcoming: bool = False) -> None:
        """Drafting collected from the drafter: by default the drafting that ran during the
        pending step; ``upcoming=True``: drafting done just before the next `step` (the
        sequential-SD fallback), which that step's record will hold."""
        ph = Phase(kind="draft", device=device, start=self.rel(start),
                   end=max(self.rel(start), self.rel(end)), seqs=int(seqs), tokens=int(tokens))
        if upcoming or self._pending is None:
            self._upcoming = ph
        elif self._pending.draft_phase is None:
            self._pending.draft_phase = ph

    def flush(self) -> None:
        """Write the pending step."""
        s, self._pending = self._pending, None
        if s is None:
            return
        phases = list(s.target_phases)
        for ph in (s.draft_phase, s.before):
            if ph is not None:
                phases.append(ph)
        phases.sort(key=lambda p: p.start)
        overlapped = any(p.kind == "draft" and min(p.end, s.end) > max(p.start, s.start)
                         for p in phases)
        rec = StepRecord(index=self.index, start=min(p.start for p in phases),
                         end=max(p.end for p in phases), phases=tuple(phases),
                         verified=tuple(s.verified), verify_batch=s.verify_batch,
                         draft_batch=s.draft_batch if s.draft_phase is not None else None,
                         overlapped=overlapped,
                         preempted=tuple(_jsonable_id(p) for p in s.preempted))
        self._writer.step(rec)
        self.trace.steps.append(rec)
        self.index += 1

    def close(self) -> None:
        self.flush()
        now = time.perf_counter()
        for rid in list(self._reqs):
            self.finished(rid, now)
        self._writer.close()


def _jsonable_id(rid: Hashable) -> int | str:
    if isinstance(rid, bool) or not isinstance(rid, (int, str)):
        return str(rid)
    return rid
