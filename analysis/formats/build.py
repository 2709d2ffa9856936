"""Turning a reader's raw rows into a :class:`~.records.FileWorkload`: refuse a negative arrival
(one line naming the row), sort by arrival (stably; rows out of order are noted and warned
about in one line) and count arrivals from the first request."""
from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import Any

from .records import WorkloadRequest, FileWorkload


def build_file_workload(fmt: str, path: str | os.PathLike[str],
                  rows: Sequence[tuple[float, dict[str, Any]]],
                  notes: Sequence[str] = ()) -> FileWorkload:
    """``rows`` are ``(arrival in seconds on any origin, WorkloadRequest fields but
    arrival_s)`` in file order."""
    notes = list(notes)
    for t, fields in rows:
        if t < 0:
            where = fields.get("source") or fmt
            raise ValueError(f"{os.fspath(path)}: {where}: arrival: must be >= 0 (a time since "
                             f"the trace's start or the epoch), got {t:g} s")
    order = sorted(range(len(rows)), key=lambda i: rows[i][0])
    if order != list(range(len(rows))):
        moved = sum(1 for k, i in enumerate(order) if k != i)
        notes.append(f"{moved} rows were out of arrival order; sorted by arrival")
        warnings.warn(f"{os.fspath(path)}: {moved} of {len(rows)} requests were out of "
                      f"arrival order; sorted by arrival", stacklevel=2)
    base = rows[order[0]][0] if rows else 0.0
    records = tuple(WorkloadRequest(arrival_s=max(0.0, rows[i][0] - base), **rows[i][1])
                    for i in order)
    return FileWorkload(records, fmt, os.fspath(path), tuple(notes))


def even_arrivals(n: int, rate: float | None) -> tuple[list[float], str]:
    """Arrival times for ``n`` requests sent at ``rate`` per second when the file keeps no
    times, and the note that says so."""
    if rate is None:
        return [0.0] * n, "the file keeps no arrival times and no request rate: all at 0 s"
    if rate == float("inf"):
        return [0.0] * n, "request rate inf: all requests arrive at 0 s"
    return ([i / rate for i in range(n)],
            (f"the file keeps no arrival times: evenly spaced at the request rate {rate:g}/s "
            "(the run drew random gaps, which are lost)"))
