"""Reading a step-level trace (``analysis.trace``: the format, re-exported there): each
record is validated and a malformed one rejected with the line number and the field."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from typing import Any, Iterable, Iterator

from .checks import RecordFields
from .trace_records import (PHASE_KINDS, READABLE_VERSIONS, LeftOut, Phase, RequestRecord,
                            RunInfo, StepRecord, Trace, TraceFormatError, Verified,
                            declared_requests)

def _fields(obj: dict[str, Any], where: str, prefix: str = "") -> RecordFields:
    """A trace record's fields (``analysis.checks.RecordFields``), errors naming line and
    field as TraceFormatError."""
    return RecordFields(obj, where, prefix, error=TraceFormatError)


def _parse_run(f: RecordFields) -> RunInfo:
    schema = f.get("schema", "int")
    if schema not in READABLE_VERSIONS:
        raise f.fail("schema", f"trace schema version {schema} is not supported by this psdlab "
                               f"(reads {', '.join(map(str, READABLE_VERSIONS))})")
    return RunInfo(
        mode=f.get("mode", "str"), k=f.nonneg_int("k"), m=f.nonneg_int("m"),
        source=f.get("source", "str"), devices=f.get("devices", "dict", optional=True, default={}),
        models=f.get("models", "dict", optional=True, default={}),
        workload=f.get("workload", "dict", optional=True, default={}),
        seed=f.get("seed", "int", optional=True),
        versions=f.get("versions", "dict", optional=True, default={}),
        extra=f.get("extra", "dict", optional=True, default={}), schema=schema)


def _parse_phase(obj: Any, where: str, name: str) -> Phase:
    if not isinstance(obj, dict):
        raise TraceFormatError(f"{where}: field '{name}': expected an object, got {obj!r}")
    f = _fields(obj, where, prefix=f"{name}.")
    kind = f.get("kind", "str")
    if kind not in PHASE_KINDS:
        raise f.fail("kind", f"must be one of {', '.join(PHASE_KINDS)}, got {kind!r}")
    start, end = f.get("start", "num"), f.get("end", "num")
    if end < start:
        raise f.fail("end", f"ends before it starts ({end} < {start})")
    return Phase(kind=kind, device=f.get("device", "str"), start=start, end=end,
                 seqs=f.nonneg_int("seqs"), tokens=f.nonneg_int("tokens"),
                 context=f.nonneg_int("context", optional=True, default=0),
                 chunks=f.nonneg_int("chunks", optional=True, default=0))


_VERIFIED_FIELDS = ("req", "proposed", "accepted", "emitted")


def _parse_verified(row: Any, where: str, name: str) -> Verified:
    """One ``[req, proposed, accepted, emitted]`` row; errors name the row and the sub-field,
    e.g. ``field 'verified[2].accepted'``."""
    def fail(sub: str, what: str) -> TraceFormatError:
        return TraceFormatError(f"{where}: field '{name}{sub}': {what}")

    if not isinstance(row, list) or len(row) != 4:
        raise fail("", f"expected [req, proposed, accepted, emitted], got {row!r}")
    if isinstance(row[0], bool) or not isinstance(row[0], (int, str)):
        raise fail(".req", f"expected an integer or string id, got {row[0]!r}")
    for sub, x in zip(_VERIFIED_FIELDS[1:], row[1:]):
        if isinstance(x, bool) or not isinstance(x, int) or x < 0:
            raise fail(f".{sub}", f"expected a non-negative integer, got {x!r}")
    req, proposed, accepted, emitted = row
    if accepted > proposed:
        raise fail(".accepted", f"accepted {accepted} > proposed {proposed}")
    if emitted > accepted + 1:
        raise fail(".emitted", f"emitted {emitted} > accepted {accepted} + 1 (at most one "
                               f"bonus or correction token per step)")
    return Verified(req=req, proposed=proposed, accepted=accepted, emitted=emitted)


def _parse_batch(f: RecordFields, name: str) -> int | None:
    value = f.get(name, "int", optional=True)
    if value is not None and value not in (0, 1):
        raise f.fail(name, f"must be 0, 1 or null, got {value}")
    return value


def _parse_step(f: RecordFields) -> StepRecord:
    start, end = f.get("start", "num"), f.get("end", "num")
    if end < start:
        raise f.fail("end", f"step ends before it starts ({end} < {start})")
    phases = tuple(_parse_phase(p, f.where, f"phases[{i}]")
                   for i, p in enumerate(f.get("phases", "list")))
    verified = tuple(_parse_verified(v, f.where, f"verified[{i}]")
                     for i, v in enumerate(f.get("verified", "list")))
    preempted = f.get("preempted", "list", optional=True, default=[])
    for i, req in enumerate(preempted):
        if isinstance(req, bool) or not isinstance(req, (int, str)):
            raise f.fail(f"preempted[{i}]", f"expected an integer or string id, got {req!r}")
    return StepRecord(index=f.nonneg_int("index"), start=start, end=end, phases=phases,
                      verified=verified, verify_batch=_parse_batch(f, "verify_batch"),
                      draft_batch=_parse_batch(f, "draft_batch"),
                      overlapped=f.get("overlapped", "bool", optional=True, default=False),
                      preempted=tuple(preempted))


def _parse_request(f: RecordFields) -> RequestRecord:
    rec = RequestRecord(
        id=f.get("id", "id"), arrival=f.get("arrival", "num"), admitted=f.get("admitted", "num"),
        first_token=f.get("first_token", "num"), finish=f.get("finish", "num"),
        prompt_len=f.nonneg_int("prompt_len"), output_len=f.nonneg_int("output_len"),
        batch=_parse_batch(f, "batch"), preemptions=f.nonneg_int("preemptions", optional=True,
                                                                 default=0))
    order = (("arrival", rec.arrival), ("admitted", rec.admitted),
             ("first_token", rec.first_token), ("finish", rec.finish))
    for (before, t0), (name, t1) in zip(order, order[1:]):
        if t1 < t0:
            raise f.fail(name, f"must be >= {before} (arrival <= admitted <= first_token <= "
                               f"finish), got {t1} < {t0}")
    return rec


def parse_record(obj: Any, where: str, *, after_run: bool) -> RunInfo | StepRecord | RequestRecord:
    """Validate one decoded JSON object; ``after_run`` says whether a 'run' record came first."""
    if not isinstance(obj, dict):
        raise TraceFormatError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    kind = obj.get("type")
    f = _fields(obj, where)
    if kind == "run":
        if after_run:
            raise f.fail("type", "a second 'run' record")
        return _parse_run(f)
    if not after_run:
        raise f.fail("type", f"the first record must be 'run', got {kind!r}")
    if kind == "step":
        return _parse_step(f)
    if kind == "request":
        return _parse_request(f)
    raise f.fail("type", f"must be 'run', 'step' or 'request', got {kind!r}")


class TruncatedTraceWarning(UserWarning):
    """The last line of a trace was cut short (a run that crashed mid-write) and was skipped."""


class PartialTraceWarning(TruncatedTraceWarning):
    """A trace read as partial (``Trace.left_out``): requests declared but not finished, or a
    last line cut mid-record; the one warning ``read_trace`` gives names what it left out."""


@dataclass
class _Cut:
    """Where ``_records`` found an invalid line (raised if any line follows it)."""
    message: str
    line: int
    byte: int


def _records(lines: Iterable[str | bytes], name: str, cuts: list[_Cut]) -> Iterator[Any]:
    """``iter_records`` without its warning: a last line that is not JSON, or not UTF-8 and
    without its newline (a writer that stopped mid-line, a file cut at any byte), is appended
    to ``cuts``."""
    seen_run = False
    cut: _Cut | None = None
    offset = 0
    for lineno, line in enumerate(lines, start=1):
        where = f"{name}:{lineno}"
        at, offset = offset, offset + (len(line) if isinstance(line, bytes)
                                       else len(line.encode("utf-8", "surrogatepass")))
        if cut is not None and line.strip():
            raise TraceFormatError(cut.message)
        if isinstance(line, bytes):
            raw = line
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                message = (f"{where}: not valid UTF-8 ({exc.reason} at byte {exc.start}); the "
                           f"file may be corrupt")
                if raw.endswith(b"\n"):       # a whole line: corrupt, not cut
                    raise TraceFormatError(message) from None
                cut = _Cut(message, lineno, at)      # the last line, cut mid-character
                continue
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            why = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
            cut = _Cut(f"{where}: not valid JSON ({why}); the file may be truncated or corrupt",
                       lineno, at)
            continue
        record = parse_record(obj, where, after_run=seen_run)
        seen_run = True
        yield record
    if cut is not None:
        if not seen_run:
            raise TraceFormatError(cut.message)
        cuts.append(cut)
    if not seen_run:
        raise TraceFormatError(f"{name}: empty trace (no 'run' record)")


def iter_records(lines: Iterable[str | bytes], name: str = "<trace>") -> Iterator[Any]:
    """Parse and validate records one by one; raises TraceFormatError('name:LINE: ...').
    Lines may be str or UTF-8 bytes.  A last line that is not valid JSON or UTF-8 (a writer
    that stopped mid-line) ends the trace with one TruncatedTraceWarning instead; an invalid
    line with records after it is an error."""
    cuts: list[_Cut] = []
    kept = 0
    for record in _records(lines, name, cuts):
        kept += 1
        yield record
    if cuts:
        import warnings
        warnings.warn(f"{name}:{cuts[0].line}: last line is cut short (a run that stopped "
                      f"mid-write?); read the {kept} record(s) before it",
                      TruncatedTraceWarning, stacklevel=2)


def _drop_unfinished(steps: list[StepRecord], finished: set[Any]) -> tuple[list[StepRecord],
                                                                          set[Any], int]:
    """The steps with the verified and preempted rows of requests not in ``finished`` dropped
    (phases kept whole); the ids dropped and the rows."""
    orphans: set[Any] = set()
    rows = 0
    out = []
    for s in steps:
        bad = [v for v in s.verified if v.req not in finished]
        gone = [r for r in s.preempted if r not in finished]
        if bad or gone:
            orphans.update(v.req for v in bad)
            orphans.update(gone)
            rows += len(bad) + len(gone)
            s = replace(s, verified=tuple(v for v in s.verified if v.req in finished),
                        preempted=tuple(r for r in s.preempted if r in finished))
        out.append(s)
    return out, orphans, rows


def trace_from_lines(lines: Iterable[str | bytes], name: str = "<trace>") -> Trace:
    """A whole trace from its lines, the one place a trace is assembled from records (files
    read by ``read_trace``, bytes by ``validation.calibrate_files``).

    A partial trace -- a run interrupted (the run record declares more requests than there are
    request records, ``declared_requests``) or a file cut at any byte (its last line cut
    mid-record) -- is read on
    the requests it completed: a cut last line is ignored; the steps are kept whole (their
    phases are what the passes took) but their verified and preempted rows of requests with
    no request record are dropped, so every request a step names has its record and every
    reader sees the same requests.  ``Trace.left_out`` says what was left out and one
    ``PartialTraceWarning`` names it."""
    cuts: list[_Cut] = []
    records = _records(lines, name, cuts)
    run = next(records)
    steps: list[StepRecord] = []
    requests: list[RequestRecord] = []
    for rec in records:
        (steps if isinstance(rec, StepRecord) else requests).append(rec)
    declared = declared_requests(run)
    left_out = None
    if cuts or (declared is not None and len(requests) < declared):
        steps, orphans, rows = _drop_unfinished(steps, {r.id for r in requests})
        unfinished = max(len(orphans), declared - len(requests) if declared is not None else 0)
        left_out = LeftOut(name=name, declared=declared, finished=len(requests),
                           unfinished=unfinished, dropped_rows=rows,
                           cut_line=cuts[0].line if cuts else None,
                           cut_byte=cuts[0].byte if cuts else None)
        import warnings
        warnings.warn(left_out.message(), PartialTraceWarning, stacklevel=2)
    return Trace(run=run, steps=steps, requests=requests, left_out=left_out)


def read_trace(path: str | os.PathLike) -> Trace:
    """Read and validate a whole trace file (a partial one as ``trace_from_lines`` says)."""
    with open(path, "rb") as fh:
        return trace_from_lines(fh, os.fspath(path))
