"""Export a psdlab trace as a Chrome-trace / Perfetto timeline (Trace Event Format JSON).

Open the output in https://ui.perfetto.dev or chrome://tracing.  Layout:

- one process per device (sorted by name), its phases as ``"X"`` complete events named after
  the phase kind and, in PSD, the batch (``draft b1``, ``verify b0``);
- a ``steps`` process with one ``"X"`` event per step (index, batches, overlap, acceptance);
- a ``requests`` process with one thread per request and its lifetime as consecutive events
  ``queued`` (arrival -> admitted), ``prefill`` (admitted -> first token) and ``decode``
  (first token -> finish).

Times are microseconds from the start of the run (``ts``/``dur``).
"""
from __future__ import annotations

import json
import os
from typing import Any

from psdlab.analysis.trace import Phase, RequestRecord, StepRecord, Trace, record_to_dict

US = 1e6
STEPS_LANE = "steps"
REQUESTS_LANE = "requests"


def _meta(name: str, pid: int, args: dict[str, Any], tid: int = 0) -> dict[str, Any]:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": args}


def _complete(name: str, cat: str, start: float, end: float, pid: int, tid: int,
              args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "cat": cat, "ph": "X", "ts": start * US,
            "dur": max(0.0, end - start) * US, "pid": pid, "tid": tid, "args": args}


def _phase_name(phase: Phase, step: StepRecord) -> str:
    batch = {"draft": step.draft_batch, "verify": step.verify_batch}.get(phase.kind)
    return phase.kind if batch is None else f"{phase.kind} b{batch}"


def _phase_args(phase: Phase, step: StepRecord) -> dict[str, Any]:
    args = {"step": step.index, "seqs": phase.seqs, "tokens": phase.tokens}
    if getattr(phase, "context", 0):
        args["context"] = phase.context
    return args


def _step_event(step: StepRecord, pid: int) -> dict[str, Any]:
    args: dict[str, Any] = {"index": step.index, "verify_batch": step.verify_batch,
            "draft_batch": step.draft_batch, "overlapped": step.overlapped,
            "sequences": len(step.verified),
            "proposed": sum(v.proposed for v in step.verified),
            "accepted": sum(v.accepted for v in step.verified),
            "emitted": sum(v.emitted for v in step.verified)}
    if step.preempted:
        args["preempted"] = list(step.preempted)
    return _complete(f"step {step.index}", "step", step.start, step.end, pid, 0, args)


def _request_events(req: RequestRecord, pid: int, tid: int) -> list[dict[str, Any]]:
    args = {"id": req.id, "prompt_len": req.prompt_len, "output_len": req.output_len,
            "batch": req.batch, "preemptions": req.preemptions}
    spans = (("queued", req.arrival, req.admitted), ("prefill", req.admitted, req.first_token),
             ("decode", req.first_token, req.finish))
    events = [_meta("thread_name", pid, {"name": f"req {req.id}"}, tid)]
    events += [_complete(name, f"request.{name}", a, b, pid, tid, args)
               for name, a, b in spans if b > a]
    return events


def to_chrome_trace(trace: Trace) -> dict[str, Any]:
    """The trace as a Trace Event Format object (``traceEvents`` plus metadata)."""
    devices = sorted({p.device for s in trace.steps for p in s.phases})
    pid_of = {d: i + 1 for i, d in enumerate(devices)}
    steps_pid, requests_pid = len(devices) + 1, len(devices) + 2
    events: list[dict[str, Any]] = []
    for device, pid in pid_of.items():
        events.append(_meta("process_name", pid, {"name": f"device {device}"}))
        events.append(_meta("process_sort_index", pid, {"sort_index": pid}))
        events.append(_meta("thread_name", pid, {"name": device}))
    for pid, name in ((steps_pid, STEPS_LANE), (requests_pid, REQUESTS_LANE)):
        events.append(_meta("process_name", pid, {"name": name}))
        events.append(_meta("process_sort_index", pid, {"sort_index": pid}))
    events.append(_meta("thread_name", steps_pid, {"name": STEPS_LANE}))
    for step in trace.steps:
        events.append(_step_event(step, steps_pid))
        for p in step.phases:
            events.append(_complete(_phase_name(p, step), p.kind, p.start, p.end,
                                    pid_of[p.device], 0, _phase_args(p, step)))
    ordered = sorted(trace.requests, key=lambda r: (r.arrival, str(r.id)))
    for tid, req in enumerate(ordered, start=1):
        events.extend(_request_events(req, requests_pid, tid))
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"psdlab_run": record_to_dict(trace.run)}}


def write_chrome_trace(trace: Trace, path: str | os.PathLike) -> int:
    """Write ``to_chrome_trace(trace)`` as JSON to ``path``; returns the number of events."""
    timeline = to_chrome_trace(trace)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(timeline, fh, separators=(",", ":"), allow_nan=False)
    return len(timeline["traceEvents"])
