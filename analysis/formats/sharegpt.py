"""Reader for ShareGPT conversation dumps (e.g. ``ShareGPT_V3_unfiltered_cleaned_split.json``).

A JSON list ``[{"id": ..., "conversations": [{"from": "human", "value": ...},
{"from": "gpt", "value": ...}, ...]}, ...]``.  A request is the first human turn (its text is
the prompt) with the gpt reply that follows it (its length is the output length); lengths
are whitespace-word counts unless a tokenizer is given.  Conversations without a human turn
and a reply after it are skipped (counted in the notes), as serving benchmarks skip them.
The dump keeps no times: arrivals are all 0, or evenly spaced at ``rate``.
"""
from __future__ import annotations

from typing import Any

from .build import even_arrivals, build_file_workload
from .errors import fail
from .fields import Field, Tokenizer, count_tokens, to_text
from .parsing import PathLike, load_json_document
from .records import FileWorkload

NAME = "sharegpt"
KIND = "workload"
HUMAN = ("human", "user")
REPLY = ("gpt", "chatgpt", "assistant", "bard", "bing")


def sniff(head: str) -> bool:
    """Whether ``head`` (the start of a file) is a ShareGPT dump: a JSON list of objects with
    ``conversations``."""
    text = head.lstrip()
    return text.startswith("[") and '"conversations"' in text[:8192]


def _conv_field(k: int) -> str:
    return f"[{k}].conversations"


def _turns(item: Any, k: int, path: PathLike) -> list[dict[str, Any]]:
    if not isinstance(item, dict):
        raise fail(path, f"expected an object, found {type(item).__name__}", field=f"[{k}]")
    turns = item.get("conversations")
    if not isinstance(turns, list):
        found = "missing" if turns is None else f"expected a list, found {type(turns).__name__}"
        raise fail(path, found, field=_conv_field(k))
    for j, turn in enumerate(turns):
        if not isinstance(turn, dict) or "from" not in turn or "value" not in turn:
            raise fail(path, "expected {\"from\": ..., \"value\": ...}",
                       field=f"{_conv_field(k)}[{j}]")
    return turns


def read(path: PathLike, *, tokenizer: Tokenizer | None = None,
         rate: float | None = None) -> FileWorkload:
    data = load_json_document(path)
    if not isinstance(data, list):
        raise fail(path, f"expected a JSON list of conversations, found {type(data).__name__}")
    if not data:
        raise fail(path, "the list of conversations is empty")
    rows: list[dict[str, Any]] = []
    skipped = 0
    for k, item in enumerate(data):
        turns = _turns(item, k, path)
        ask = next((j for j, t in enumerate(turns) if t["from"] in HUMAN), None)
        reply = None if ask is None else next(
            (j for j in range(ask + 1, len(turns)) if turns[j]["from"] in REPLY), None)
        if ask is None or reply is None:
            skipped += 1
            continue
        prompt = to_text(turns[ask]["value"], Field(path, None, f"{_conv_field(k)}[{ask}].value"))
        answer = to_text(turns[reply]["value"],
                         Field(path, None, f"{_conv_field(k)}[{reply}].value"))
        rows.append({"input_len": count_tokens(prompt, tokenizer),
                     "output_len": count_tokens(answer, tokenizer), "text": prompt,
                     "session": str(item.get("id")) if item.get("id") is not None else None,
                     "source": f"{NAME}:[{k}]"})
    if not rows:
        raise fail(path, f"no conversation has a human turn with a reply ({skipped} skipped)")
    times, note = even_arrivals(len(rows), rate)
    notes = [note, "lengths: " + ("tokenizer" if tokenizer else "whitespace words")]
    if skipped:
        notes.append(f"{skipped} conversations without a human turn and a reply skipped")
    return build_file_workload(NAME, path, list(zip(times, rows)), notes)
