"""Trace records from plans: step records (one per simulated step) and request records, and
the sinks the execution paths hand them to (``sim.server_protocol.RecordSink``): ``Sink`` streams a
``sim.core.Core`` run to its trace file; ``AdaptiveSink`` keeps an adaptive run in memory and
writes it at the end (its header carries the run's switch counts)."""
from __future__ import annotations

from typing import Callable

import numpy as np

from psdlab.analysis.trace import Phase, RequestRecord, RunInfo, StepRecord, Trace, Verified
from psdlab.sim.step_plan import proposal_caps


def step_records(core, p) -> list[StepRecord]:
    """The step records of plan ``p`` (call before ``core.commit(p)``): one per step, two for
    a step that starts with a prefill segment (the prefill, then the decode work; both carry
    the step's index), as the runtime writes a prefill as a step of its own."""
    if not p.detail:
        raise ValueError("step_records: the plan was built without step detail "
                         "(core.step_detail is False)")
    out = []
    acc, emit = core.traj.acc, core.traj.emit
    karr = core.karr
    for j in range(p.S):
        phases = []
        riding = []        # a prefill chunk in the verify pass (scheduler "v1") stays with it
        for ph in p.phases:
            if ph.seqs[j] <= 0:
                continue
            start = float(p.starts[j, ph.seg])
            phases.append(Phase(kind=ph.kind, device=ph.device, start=start,
                                end=start + float(ph.dur[j]), seqs=int(ph.seqs[j]),
                                tokens=int(ph.tokens[j]), context=int(ph.ctx[j])))
            riding.append(ph.rides)
        verified: tuple = ()
        rows = _verified_rows(p, j)
        if rows is not None:
            ids, idx = rows
            order = np.argsort(ids, kind="stable")
            ids, idx = ids[order], idx[order]
            prop, got = karr[ids], acc[idx].astype(np.int64)
            if core.cap_proposals:
                prop, got = capped_rows(core, ids, idx)
            verified = tuple(Verified(req=r, proposed=kk, accepted=a, emitted=e)
                             for r, kk, a, e in zip(ids.tolist(), prop.tolist(),
                                                    got.tolist(), emit[idx].tolist()))
        vb = db = None
        if p.verify_batch is not None:
            vb = int(p.verify_batch[j]) if p.verify_batch[j] >= 0 else None
            db = int(p.draft_batch[j]) if p.draft_batch[j] >= 0 else None
        start = float(p.starts[j, 0])
        pre = [ph for ph, rd in zip(phases, riding) if ph.kind == "prefill" and not rd]
        rest = [ph for ph, rd in zip(phases, riding) if ph.kind != "prefill" or rd]
        preempted = tuple(core.preempted_now) if j == 0 else ()
        if pre and rest:
            # the prefill segment runs before the step's decode segments: written as a step
            # of its own, as the runtime writes it, so decode metrics count the same work
            cut = min(ph.start for ph in rest)
            out.append(StepRecord(index=core.step + j, start=start, end=cut,
                                  phases=tuple(pre), preempted=preempted))
            start, phases, preempted = cut, rest, ()
        out.append(StepRecord(index=core.step + j, start=start,
                              end=p.step_end(j), phases=tuple(phases), verified=verified,
                              verify_batch=vb, draft_batch=db,
                              overlapped=bool(p.overlapped and rows is not None
                                              and (db is not None or p.verify_batch is None)),
                              preempted=preempted))
    return out


def capped_rows(core, ids: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(proposed, accepted) when proposals are capped at the output budget
    (``server.cap_proposals``): a request with R tokens still to generate proposes
    min(k, R - 1) and accepts at most that (the pre-sampled count may run past it; the
    emitted tokens are the same either way)."""
    prop = proposal_caps(core, ids, core.traj.ctx[idx])
    return prop, np.minimum(core.traj.acc[idx].astype(np.int64), prop)


def _verified_rows(p, j: int):
    """(request ids, flat trajectory indices) verified in step j of plan p, or None."""
    if p.rows is not None:
        return p.rows(j)
    si = int(p.vset_of_step[j])
    if si < 0:
        return None
    vs = p.vsets[si]
    return vs.ids, vs.flat + int(p.q_of_step[j])


def request_record(core, r: int) -> RequestRecord:
    b = int(core.last_batch[r])
    return RequestRecord(id=int(r), arrival=float(core.arrival[r]),
                         admitted=float(core.admitted_t[r]), first_token=float(core.first_t[r]),
                         finish=float(core.finish_t[r]), prompt_len=int(core.prompt[r]),
                         output_len=int(core.output[r]),
                         batch=b if core.spec.batches == 2 and b >= 0 else None,
                         preemptions=int(core.preempts[r]))


class Sink:
    """Collects records in memory (for the metrics) and writes them to the trace file."""

    def __init__(self, writer, trace, level: str, on_finish: Callable[[int], None] | None = None):
        self.writer, self.trace, self.level = writer, trace, level
        self.on_finish = on_finish
        self._done: list[int] = []

    def step_records(self, core, p) -> list[StepRecord]:
        """Build the plan's step records (before ``core.commit``); none below level step."""
        return step_records(core, p) if self.level == "step" else []

    def write(self, core, recs: list[StepRecord]) -> None:
        """After ``core.commit``: each step record, then the requests that finished in it.
        Below level step the request records are built in bulk by ``finalize``."""
        if self.on_finish is not None and core.finished_steps:
            self.on_finish(sum(len(v) for _, v in core.finished_steps))
        if self.level != "step":
            for _, ids in core.finished_steps:
                self._done.extend(ids)
            return
        by_step = dict(core.finished_steps)
        base = recs[0].index if recs else 0
        per_step: dict[int, list[StepRecord]] = {}
        for rec in recs:                     # a step with a prefill has two records
            per_step.setdefault(rec.index - base, []).append(rec)
        last = max([max(per_step, default=-1)] + list(by_step))
        for j in range(last + 1):
            for rec in per_step.get(j, ()):
                self.trace.steps.append(rec)
                if self.writer is not None:
                    self.writer.step(rec)
            for r in by_step.get(j, ()):
                self._request(request_record(core, r))

    def _request(self, rec: RequestRecord) -> None:
        self.trace.requests.append(rec)
        if self.writer is not None and self.level != "none":
            self.writer.request(rec)

    def finalize(self, core) -> None:
        """Build the request records collected below level step (in completion order)."""
        if not self._done:
            return
        ids = np.asarray(self._done, dtype=np.int64)
        self._done = []
        batch = core.last_batch[ids]
        two = core.spec.batches == 2
        batch = [b if two and b >= 0 else None for b in batch.tolist()]
        cols = zip(ids.tolist(), core.arrival[ids].tolist(), core.admitted_t[ids].tolist(),
                   core.first_t[ids].tolist(), core.finish_t[ids].tolist(),
                   core.prompt[ids].tolist(), core.output[ids].tolist(), batch,
                   core.preempts[ids].tolist())
        recs = [RequestRecord(id=r, arrival=a, admitted=ad, first_token=ft, finish=fi,
                              prompt_len=p, output_len=o, batch=b, preemptions=pr)
                for r, a, ad, ft, fi, p, o, b, pr in cols]
        self.trace.requests.extend(recs)
        if self.writer is not None and self.level != "none":
            for rec in recs:
                self.writer.request(rec)


def adaptive_step_records(server, step) -> list[StepRecord]:
    """The records of an adaptive server's step (``sim.adaptive.Step``; call before
    ``server.commit``): its prefill, then its decode work, as ``step_records`` writes them."""
    ends = step.ends
    starts = [server.now] + ends[:-1]
    out = []
    idx = server.step
    decode: list[Phase] = []
    pre: list[Phase] = []
    for seg, s0 in zip(step.segments, starts, strict=True):
        for kind, dev, dur, n, tok, ctx in seg:
            ph = Phase(kind=kind, device=dev, start=s0, end=s0 + dur, seqs=n, tokens=tok,
                       context=ctx)
            (pre if kind == "prefill" else decode).append(ph)
    preempted = tuple(server.kv.preempted_now)    # on the step's first record, as Core's
    if pre:
        out.append(StepRecord(index=idx, start=starts[0], end=ends[0], phases=tuple(pre),
                              preempted=preempted))
        preempted = ()
    if decode:
        s0 = ends[0] if pre else starts[0]
        ver = tuple(Verified(req=r, proposed=p, accepted=a, emitted=e)
                    for r, p, a, e in step.verified)
        out.append(StepRecord(index=idx, start=s0, end=ends[-1], phases=tuple(decode),
                              preempted=preempted,
                              verified=ver, verify_batch=step.verify_batch,
                              draft_batch=step.draft_batch,
                              overlapped=bool(step.verify_batch is not None and ver
                                              and step.draft_batch is not None
                                              and step.draft_batch != step.verify_batch)))
    return out


class AdaptiveSink:
    """The records of an adaptive run (``sim.adaptive``): kept in memory; ``finalize`` adds the
    switch summary to the header and writes the trace file (steps, then requests)."""

    def __init__(self, trace: Trace, level: str, out_path: str | None,
                 on_finish: Callable[[int], None] | None = None):
        self.trace, self.level, self.out_path = trace, level, out_path
        self.on_finish = on_finish

    def step_records(self, server, step) -> list[StepRecord]:
        return adaptive_step_records(server, step) if self.level == "step" else []

    def write(self, server, recs: list[StepRecord]) -> None:
        self.trace.steps.extend(recs)
        for r in server.finished:
            self.trace.requests.append(server.request_record(r))
        if self.on_finish is not None and server.finished:
            self.on_finish(len(server.finished))

    def finalize(self, server) -> None:
        from psdlab.analysis.trace import write_trace
        run = self.trace.run
        self.trace.run = RunInfo(**{**vars(run), "extra": {**run.extra,
                                                           "adaptive": server.summary()}})
        if self.out_path:
            keep = (self.trace if self.level == "step"
                    else Trace(run=self.trace.run, requests=self.trace.requests))
            write_trace(self.out_path, keep)
