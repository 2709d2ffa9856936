"""Reader for the BurstGPT trace (HPMLL/BurstGPT: ChatGPT and GPT-4 traffic on Azure).

CSV with the header ``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type``
(BurstGPT_1/_2); the later release adds ``Session ID`` and ``Elapsed time`` after
``Timestamp``.  ``Timestamp`` is seconds from 0:00 of the trace's first day; ``Response
tokens`` is 0 for failed requests (kept, as the trace keeps them).  No prompt text.
"""
from __future__ import annotations

from typing import Any

from .build import build_file_workload
from .fields import Field, to_int
from .parsing import PathLike, csv_header_has, iter_csv
from .records import FileWorkload
from .timestamps import TimeColumn

NAME = "burstgpt"
KIND = "workload"
COLUMNS = ("Timestamp", "Request tokens", "Response tokens")


def sniff(head: str) -> bool:
    """Whether ``head`` (the start of a file) is a BurstGPT trace: its header line."""
    return csv_header_has(head, COLUMNS)


def read(path: PathLike, *, model: str | None = None) -> FileWorkload:
    """The trace's requests; ``model`` keeps only rows whose ``Model`` is that name."""
    clock = TimeColumn(path, "Timestamp", numeric_unit="s")
    rows: list[tuple[float, dict[str, Any]]] = []
    for line, row in iter_csv(path, COLUMNS):
        if model is not None and row.get("Model") != model:
            continue
        t = clock.seconds(row["Timestamp"], line)
        rows.append((t, {
            "input_len": to_int(row["Request tokens"], Field(path, line, "Request tokens")),
            "output_len": to_int(row["Response tokens"], Field(path, line, "Response tokens")),
            "model": row.get("Model") or None,
            "session": row.get("Session ID") or None,
            "source": f"{NAME}:line {line}"}))
    notes = [f"only Model == {model!r}"] if model is not None else []
    return build_file_workload(NAME, path, rows, notes)
