"""Reader for Spec-Bench questions (hemingkx/Spec-Bench ``data/spec_bench/question.jsonl``).

JSONL, one question a line: ``{"question_id": 81, "category": "writing", "turns": [...]}``
(some lines also carry ``reference``).  A request is the first turn as prompt text; its
length is a whitespace-word count unless a tokenizer is given.  The file has no output
lengths (``output_len`` is the ``output_len`` argument, 0 by default) and no times: arrivals
are all 0, or evenly spaced at ``rate``.
"""
from __future__ import annotations

from typing import Any

from .build import even_arrivals, build_file_workload
from .errors import fail
from .fields import Field, Tokenizer, count_tokens, get, to_int, to_text
from .parsing import PathLike, iter_jsonl, json_keys_of_first_line
from .records import FileWorkload

NAME = "specbench"
KIND = "workload"


def sniff(head: str) -> bool:
    """Whether ``head`` (the start of a file) is Spec-Bench: its first record's keys."""
    return {"question_id", "turns"} <= json_keys_of_first_line(head)


def read(path: PathLike, *, tokenizer: Tokenizer | None = None, output_len: int = 0,
         rate: float | None = None, category: str | None = None) -> FileWorkload:
    """The questions; ``category`` keeps only that category (e.g. "translation")."""
    rows: list[dict[str, Any]] = []
    for line, obj in iter_jsonl(path):
        turns = get(obj, "turns", path, line)
        if not isinstance(turns, list) or not turns:
            raise fail(path, "expected a non-empty list of turns", line=line, field="turns")
        cat = obj.get("category")
        if category is not None and cat != category:
            continue
        prompt = to_text(turns[0], Field(path, line, "turns"))
        qid = to_int(get(obj, "question_id", path, line), Field(path, line, "question_id"))
        rows.append({"input_len": count_tokens(prompt, tokenizer), "output_len": output_len,
                     "text": prompt, "session": str(cat) if cat is not None else None,
                     "source": f"{NAME}:question {qid}"})
    if not rows:
        raise fail(path, f"no question of category {category!r}")
    times, note = even_arrivals(len(rows), rate)
    notes = [note, f"output lengths not in the file: {output_len}",
             "lengths: " + ("tokenizer" if tokenizer else "whitespace words")]
    return build_file_workload(NAME, path, list(zip(times, rows)), notes)
