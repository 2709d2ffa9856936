"""The step-level trace: psdlab's one format, written by the runtime and the simulator alike.

A trace is JSONL, one record per line, flushed as it is written:

- ``run`` (first line): schema version, mode, k, batch size m, devices, models, workload,
  seed, software versions, source ("runtime", "sim" or an imported engine), free-form extra.
- ``step``: one engine step.  ``phases`` lists what ran (draft / verify / prefill) on which
  device with start and end times (seconds on one monotonic clock, 0 = start of the run), the
  number of sequences and tokens and, optionally, ``context`` (tokens already in the KV cache
  of its sequences when it starts; 0 = not recorded) and, for a prefill, optionally
  ``chunks`` (the passes its prompts were fed in, ``analysis.chunking``); ``verified``
  lists, per verified sequence, the request id, the draft tokens proposed, accepted, and the
  tokens emitted (bonus included); ``overlapped`` says whether drafting ran concurrently with
  verification.
- ``request``: id, arrival, admitted, first token, finish, prompt length, output length, batch
  (0/1 for PSD, None otherwise), preemptions.

Readers validate each record and reject a malformed one with the line number and the field.
A partial trace (an interrupted run, a file cut at any byte) reads on the requests it
completed, with one warning naming what was left out (``trace_read.trace_from_lines``).
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict
from typing import IO, Any

from .trace_read import (PartialTraceWarning, TruncatedTraceWarning, iter_records, parse_record,
                         read_trace, trace_from_lines)
from .trace_records import (PHASE_KINDS, READABLE_VERSIONS, SCHEMA_VERSION, LeftOut, Phase,
                            RequestRecord, RunInfo, StepRecord, Trace, TraceFormatError,
                            Verified, declared_requests)

__all__ = ["PHASE_KINDS", "READABLE_VERSIONS", "SCHEMA_VERSION", "LeftOut", "Phase",
           "RequestRecord", "RunInfo", "StepRecord", "Trace", "TraceFormatError", "Verified",
           "TraceWriter", "PartialTraceWarning", "TruncatedTraceWarning", "declared_requests",
           "dumps", "iter_records", "parse_record", "read_trace", "record_to_dict",
           "trace_from_lines", "write_trace"]

# The records are in ``trace_records``, the reader in ``trace_read``; this module is the
# format's one import name (every public name above) and holds the writer.

# ---------------------------------------------------------------------------- encoding

def _phase_to_dict(phase: Phase) -> dict[str, Any]:
    out = asdict(phase)
    if not phase.chunks:
        del out["chunks"]
    return out


def _step_to_dict(step: StepRecord) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": "step", "index": step.index, "start": step.start, "end": step.end,
        "phases": [_phase_to_dict(p) for p in step.phases],
        "verified": [[v.req, v.proposed, v.accepted, v.emitted] for v in step.verified],
        "verify_batch": step.verify_batch, "draft_batch": step.draft_batch,
        "overlapped": step.overlapped,
    }
    if step.preempted:
        out["preempted"] = list(step.preempted)
    return out


def record_to_dict(record: RunInfo | StepRecord | RequestRecord) -> dict[str, Any]:
    """The JSON object written for a record (``verified`` rows are [req, proposed, accepted,
    emitted] lists to keep step lines short)."""
    if isinstance(record, StepRecord):
        return _step_to_dict(record)
    if isinstance(record, RunInfo):
        return {"type": "run", **asdict(record)}
    if isinstance(record, RequestRecord):
        return {"type": "request", **asdict(record)}
    raise TypeError(f"not a trace record: {type(record).__name__}")


def dumps(record: RunInfo | StepRecord | RequestRecord) -> str:
    return json.dumps(record_to_dict(record), separators=(",", ":"), allow_nan=False)


class TraceWriter:
    """Writes a trace file record by record, flushing each line so that a crash or Ctrl-C
    leaves every record written so far readable.  Use as a context manager.

    Each record is checked by the reader's own validation before it is written (``validate``,
    on by default), so a writer cannot produce a file its reader rejects; the error names the
    line it would have had.  ``path=None`` gives a writer that does nothing (no file, no
    checks), so callers can trace optionally at no cost."""

    def __init__(self, path: str | os.PathLike | None, run: RunInfo, *, fsync: bool = False,
                 validate: bool = True):
        self.path = path
        self._fsync = fsync
        self._validate = validate
        self._name = os.fspath(path) if path else "<trace>"
        self._lines = 0
        self._closed = False
        self.steps_written = 0
        self.requests_written = 0
        if not isinstance(run, RunInfo):
            raise TypeError(f"the first record must be a RunInfo, got {type(run).__name__}")
        self._file: IO[str] | None = open(path, "w", encoding="utf-8") if path else None
        try:
            self._write(run)
        except BaseException:
            self.close()
            raise

    def _write(self, record: RunInfo | StepRecord | RequestRecord) -> None:
        if self._closed:
            raise ValueError(f"{self._name}: trace writer is closed")
        if self._file is None:
            return
        obj = record_to_dict(record)
        where = f"{self._name}:{self._lines + 1}"
        if self._validate:
            parse_record(obj, where, after_run=self._lines > 0)
        line = json.dumps(obj, separators=(",", ":"), allow_nan=False)
        self._lines += 1
        self._file.write(line + "\n")
        self._file.flush()
        if self._fsync:
            os.fsync(self._file.fileno())

    def step(self, record: StepRecord) -> None:
        if not isinstance(record, StepRecord):
            raise TypeError(f"step() takes a StepRecord, got {type(record).__name__}")
        self._write(record)
        self.steps_written += 1

    def request(self, record: RequestRecord) -> None:
        if not isinstance(record, RequestRecord):
            raise TypeError(f"request() takes a RequestRecord, got {type(record).__name__}")
        self._write(record)
        self.requests_written += 1

    def close(self) -> None:
        self._closed = True
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def write_trace(path: str | os.PathLike, trace: Trace) -> None:
    """Write a whole in-memory trace (steps first, then requests)."""
    with TraceWriter(path, trace.run) as writer:
        for s in trace.steps:
            writer.step(s)
        for r in trace.requests:
            writer.request(r)
