"""Importers of other engines' traces, and ``load_traces``, which reads psdlab traces and the
supported foreign formats alike, telling them apart by content (not by file name)."""
from __future__ import annotations

import json
import os

from psdlab.analysis.trace import Trace, TraceFormatError, read_trace
from psdlab.validation.importers.minedraft import looks_like_minedraft, read_minedraft

FORMATS = ("psdlab", "minedraft")


def _first_object(path: str | os.PathLike) -> tuple[int, object] | None:
    name = os.fspath(path)
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if line.strip():
                try:
                    return lineno, json.loads(line)
                except json.JSONDecodeError as exc:
                    raise TraceFormatError(f"{name}:{lineno}: not valid JSON ({exc.msg}); the "
                                           f"file may be truncated or corrupt") from None
    return None


def first_record_format(name: str, first: tuple[int, object] | None) -> str:
    """'psdlab' or 'minedraft', from a file's first record (line number, object; None when
    the file has no record): the one place that tells the step-trace formats apart, for
    ``trace_file_format`` (a path) and ``calibrate_files.traces_of`` (bytes already read)."""
    if first is None:
        raise TraceFormatError(f"{name}: empty file (no records)")
    lineno, obj = first
    if isinstance(obj, dict) and obj.get("type") in ("run", "step", "request"):
        return "psdlab"
    if looks_like_minedraft(obj):
        return "minedraft"
    raise TraceFormatError(f"{name}:{lineno}: neither a psdlab trace (first record "
                           f"'type': 'run') nor a MineDraft trace ('traces': [...])")


def trace_file_format(path: str | os.PathLike) -> str:
    """'psdlab' or 'minedraft', from the first record of the file."""
    try:
        first = _first_object(path)
    except UnicodeDecodeError:
        raise TraceFormatError(f"{os.fspath(path)}: not a text file (not UTF-8); expected a "
                               f"JSONL trace") from None
    return first_record_format(os.fspath(path), first)


def load_traces(path: str | os.PathLike) -> list[Trace]:
    """Every trace in a file: one for a psdlab trace, one per benchmark run for MineDraft."""
    if trace_file_format(path) == "minedraft":
        return read_minedraft(path)
    return [read_trace(path)]
