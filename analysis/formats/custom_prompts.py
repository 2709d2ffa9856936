"""Reader for vLLM's custom benchmark dataset (``vllm bench serve --dataset-name custom``).

JSONL, one prompt a line: ``{"prompt": "What is the capital of India?"}`` with an optional
``"output_tokens": 10``.  Prompt lengths are whitespace-word counts unless a tokenizer is
given; a line without ``output_tokens`` gets the ``output_len`` argument (0 by default).
The file has no times: arrivals are all 0, or evenly spaced at ``rate``.
"""
from __future__ import annotations

from typing import Any

from .build import even_arrivals, build_file_workload
from .fields import Field, Tokenizer, count_tokens, get, to_int, to_text
from .parsing import PathLike, iter_jsonl, json_keys_of_first_line
from .records import FileWorkload

NAME = "custom_prompts"
KIND = "workload"


def sniff(head: str) -> bool:
    """Whether ``head`` (the start of a file) is a ``{"prompt": ...}`` JSONL file."""
    return "prompt" in json_keys_of_first_line(head)


def read(path: PathLike, *, tokenizer: Tokenizer | None = None, output_len: int = 0,
         rate: float | None = None) -> FileWorkload:
    rows: list[dict[str, Any]] = []
    missing = 0
    for line, obj in iter_jsonl(path):
        prompt = to_text(get(obj, "prompt", path, line), Field(path, line, "prompt"))
        if obj.get("output_tokens") is None:
            missing += 1
            out = output_len
        else:
            out = to_int(obj["output_tokens"], Field(path, line, "output_tokens"))
        rows.append({"input_len": count_tokens(prompt, tokenizer), "output_len": out,
                     "text": prompt, "source": f"{NAME}:line {line}"})
    times, note = even_arrivals(len(rows), rate)
    notes = [note, "lengths: " + ("tokenizer" if tokenizer else "whitespace words")]
    if missing:
        notes.append(f"{missing} prompts without output_tokens: {output_len}")
    return build_file_workload(NAME, path, list(zip(times, rows)), notes)
