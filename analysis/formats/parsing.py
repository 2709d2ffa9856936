"""Reading the raw shapes the foreign formats share: whole text, JSONL and CSV with a header.

Each helper reports problems as :class:`~.errors.FormatError` with the file and line, says
so when a file is empty, and treats a cut-short last line (a crashed writer) as the end of
the file with one :class:`~.errors.TruncatedInputWarning`.
"""
from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterator, Sequence
from typing import Any

from .errors import fail, warn_truncated

PathLike = str | os.PathLike[str]
SNIFF_BYTES = 64 * 1024


def read_text(path: PathLike) -> str:
    """The file's text (UTF-8, a BOM dropped); a :class:`FormatError` if it is empty."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise fail(path, f"not UTF-8 text (byte {e.start})") from None
    if not text.strip():
        raise fail(path, "the file is empty")
    return text


def head_text(path: PathLike, size: int = SNIFF_BYTES) -> str:
    """The first ``size`` bytes of the file as text (for detection by content)."""
    with open(path, "rb") as f:
        data = f.read(size)
    return data.decode("utf-8-sig", errors="replace")


def first_line(head: str) -> str:
    """The first non-blank line of ``head`` (stripped)."""
    for line in head.splitlines():
        if line.strip():
            return line.strip()
    return ""


def csv_header_has(head: str, columns: tuple[str, ...]) -> bool:
    """Whether the first line of ``head`` is a CSV header naming every one of ``columns``."""
    header = {h.strip() for h in first_line(head).split(",")}
    return all(c in header for c in columns)


def json_keys_of_first_line(head: str) -> set[str]:
    """Top-level keys of the JSON object on the first line of ``head``; when that line does
    not hold a whole object (a detailed benchmark result longer than ``head``, or an indented
    object), the keys seen at depth one in ``head``."""
    line = first_line(head)
    if not line.startswith("{"):
        return set()
    try:
        obj = json.loads(line)
    except json.JSONDecodeError:  # a long first line, or an indented object
        return _keys_at_depth_one(head[head.index("{"):])
    return set(obj) if isinstance(obj, dict) else set()


def _keys_at_depth_one(text: str) -> set[str]:
    """Keys of the outermost object in a JSON prefix, by a small scan (strings, nesting)."""
    keys: set[str] = set()
    depth, i, n = 0, 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            rest = text[j + 1:j + 40].lstrip()
            if depth == 1 and rest.startswith(":"):
                keys.add(text[i + 1:j])
            i = j + 1
            continue
        if c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
        i += 1
    return keys


def iter_jsonl(path: PathLike) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each non-blank line of a JSONL file.  A malformed line is
    an error, except the last one, which is taken as cut short: a warning, and the end."""
    lines = read_text(path).splitlines()
    last = max(i for i, line in enumerate(lines, 1) if line.strip())
    kept = 0
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            if lineno == last:
                if kept == 0:
                    raise fail(path, f"its only record is cut short ({e.msg})",
                               line=lineno) from None
                warn_truncated(path, lineno, kept)
                return
            raise fail(path, f"not valid JSON ({e.msg}, column {e.colno})",
                       line=lineno) from None
        if not isinstance(obj, dict):
            raise fail(path, f"expected a JSON object, found {type(obj).__name__}",
                       line=lineno)
        kept += 1
        yield lineno, obj


def iter_csv(path: PathLike, required: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    """``(line number, row)`` for each data row of a CSV file with a header line, after
    checking that the header names every ``required`` column.  A row with too few fields is
    an error, except the last, which is taken as cut short: a warning, and the end."""
    text = read_text(path)
    reader = csv.reader(io.StringIO(text))
    header = [h.strip() for h in next(reader)]
    missing = [c for c in required if c not in header]
    if missing:
        raise fail(path, f"missing column '{missing[0]}' (columns found: {', '.join(header)})",
                   line=1)
    rows: list[tuple[int, list[str]]] = []
    for row in reader:
        if row and any(cell.strip() for cell in row):
            rows.append((reader.line_num, row))
    if not rows:
        raise fail(path, "the file has a header but no rows")
    for k, (lineno, row) in enumerate(rows):
        if len(row) < len(header):
            if k == len(rows) - 1 and k > 0:
                warn_truncated(path, lineno, k)
                return
            raise fail(path, f"expected {len(header)} fields, found {len(row)}", line=lineno)
        if len(row) > len(header):
            raise fail(path, f"expected {len(header)} fields, found {len(row)}", line=lineno)
        yield lineno, {name: cell.strip() for name, cell in zip(header, row)}


def load_json_document(path: PathLike) -> Any:
    """The JSON value of a whole file; a malformed file names the line and column."""
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as e:
        raise fail(path, f"not valid JSON ({e.msg}, column {e.colno})", line=e.lineno) from None
