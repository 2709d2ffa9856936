"""Reader for the Azure LLM inference traces (AzurePublicDataset, 2023 and 2024).

CSV with the header ``TIMESTAMP,ContextTokens,GeneratedTokens``: one row per request, its
invocation time as a date-time (2023: ``2023-11-16 18:15:46.6805900``; 2024:
``2024-05-10 00:00:00.009930+00:00``, sometimes without the fraction), prompt tokens and
generated tokens.  No prompt text (withheld for privacy).
"""
from __future__ import annotations

from typing import Any

from .build import build_file_workload
from .fields import Field, to_int
from .parsing import PathLike, csv_header_has, iter_csv
from .records import FileWorkload
from .timestamps import TimeColumn

NAME = "azure"
KIND = "workload"
COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def sniff(head: str) -> bool:
    """Whether ``head`` (the start of a file) is an Azure LLM trace: its header line."""
    return csv_header_has(head, COLUMNS)


def read(path: PathLike) -> FileWorkload:
    clock = TimeColumn(path, "TIMESTAMP", numeric_unit=None)
    rows: list[tuple[float, dict[str, Any]]] = []
    for line, row in iter_csv(path, COLUMNS):
        t = clock.seconds(row["TIMESTAMP"], line)
        rows.append((t, {
            "input_len": to_int(row["ContextTokens"], Field(path, line, "ContextTokens")),
            "output_len": to_int(row["GeneratedTokens"], Field(path, line, "GeneratedTokens")),
            "source": f"{NAME}:line {line}"}))
    return build_file_workload(NAME, path, rows)
