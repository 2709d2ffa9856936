"""Plain table writers shared by the reports: a CSV file and a markdown table."""
from __future__ import annotations

import csv
from typing import Any, Iterable, Mapping, Sequence


def write_table_csv(path: str, columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> str:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(columns)
        for r in rows:
            w.writerow(["" if r.get(c) is None else r.get(c) for c in columns])
    return path


def _cell(value: object) -> str:
    """A markdown table cell: a literal ``|`` (as in ``|error|``) escaped, not a column break."""
    return str(value).replace("|", "\\|")


def md_table(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in r) + " |" for r in body]
    return "\n".join(lines)
