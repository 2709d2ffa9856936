"""Reader for the Mooncake traces (kvcache-ai/Mooncake, FAST'25 release and the arXiv trace).

JSONL, one request a line: ``{"timestamp": <ms>, "input_length": N, "output_length": M,
"hash_ids": [...]}``; ``timestamp`` is the arrival in milliseconds from the trace start and
``hash_ids`` name the request's 512-token prefix blocks (equal ids = shareable KV cache).
No prompt text.
"""
from __future__ import annotations

from typing import Any

from .build import build_file_workload
from .fields import Field, get, opt_list, to_int
from .parsing import PathLike, iter_jsonl, json_keys_of_first_line
from .records import FileWorkload
from .timestamps import TimeColumn

NAME = "mooncake"
KIND = "workload"


def sniff(head: str) -> bool:
    """Whether ``head`` (the start of a file) is a Mooncake trace: its first record's keys."""
    return {"timestamp", "input_length", "output_length"} <= json_keys_of_first_line(head)


def read(path: PathLike) -> FileWorkload:
    clock = TimeColumn(path, "timestamp", numeric_unit="ms")
    rows: list[tuple[float, dict[str, Any]]] = []
    for line, obj in iter_jsonl(path):
        t = clock.seconds(get(obj, "timestamp", path, line), line)
        hashes = opt_list(obj, "hash_ids", path, line) or []
        rows.append((t, {
            "input_len": to_int(get(obj, "input_length", path, line),
                                Field(path, line, "input_length")),
            "output_len": to_int(get(obj, "output_length", path, line),
                                 Field(path, line, "output_length")),
            "hash_ids": tuple(to_int(h, Field(path, line, "hash_ids")) for h in hashes),
            "source": f"{NAME}:line {line}"}))
    return build_file_workload(NAME, path, rows)
