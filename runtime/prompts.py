"""The prompt set that ships with psdlab (``runtime/data/prompts.jsonl``) and its loader.

Each line of the file is one JSON object ``{"id", "style", "split", "text"}``; a line without
``split`` counts as ``heldout``, so any user file of ``{"id", "style", "text"}`` lines loads.
The splits are fixed in the file, so every machine sees the same prompts on each side:

- ``train``: the prompts the drafter was distilled on; ``heldout``: written with them, used to
  measure the drafter;
- ``fresh``, ``fresh2`` ... ``fresh11``: later sets of 120-240 prompts (24-48 a style), each
  written after the previous one by writers on topics of their own (word-set Jaccard at most
  about 0.45 against every earlier prompt), the way the next set of real traffic differs from
  the last.  The demo calibrates on one of them and holds out another
  (``validation.demo.prompt_sides``); docs/demo-lessons.md says why a set, once judged on,
  is not held out again.

``Prompt.chat_text`` wraps a prompt in the tokenizer's chat template, which is how the runtime
and the drafter scripts feed prompts to the instruct model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from psdlab.analysis.checks import check_choice

DEFAULT_PROMPTS = Path(__file__).resolve().parent / "data" / "prompts.jsonl"
SPLITS = ("train", "heldout", "fresh", "fresh2", "fresh3", "fresh4", "fresh5", "fresh6",
          "fresh7", "fresh8", "fresh9", "fresh10", "fresh11", "all")
_FIELDS = ("id", "style", "text")


@dataclass(frozen=True)
class Prompt:
    """One prompt: a unique id, a style (chat, code, summarise, ...) and the user's text."""

    id: str
    style: str
    text: str
    split: str = "heldout"

    def chat_text(self, tokenizer: Any) -> str:
        """The prompt as one user turn in the tokenizer's chat template, ready for generation."""
        messages = [{"role": "user", "content": self.text}]
        if getattr(tokenizer, "chat_template", None):
            return tokenizer.apply_chat_template(messages, tokenize=False,
                                                 add_generation_prompt=True)
        return self.text


def _parse_line(line: str, lineno: int, path: Path) -> Prompt:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{path}:{lineno}: expected a JSON object")
    for field in _FIELDS:
        if not isinstance(obj.get(field), str) or not obj[field]:
            raise ValueError(f"{path}:{lineno}: field '{field}' must be a non-empty string")
    split = obj.get("split", "heldout")
    if split not in SPLITS[:-1]:
        raise ValueError(f"{path}:{lineno}: field 'split' must be one of "
                         f"{', '.join(SPLITS[:-1])}, got {split!r}")
    return Prompt(id=obj["id"], style=obj["style"], text=obj["text"], split=split)


def load_prompts(path: str | Path | None = None, split: str = "heldout") -> list[Prompt]:
    """Load prompts from a JSONL file (default: the shipped set), keeping one split or ``all``.

    A line may omit ``split`` (it then counts as held-out), so any user file of
    ``{"id", "style", "text"}`` lines is accepted. Ids must be unique.
    """
    check_choice("split", split, SPLITS)
    file = Path(path) if path is not None else DEFAULT_PROMPTS
    if not file.is_file():
        raise FileNotFoundError(f"prompts file not found: {file}")
    prompts: list[Prompt] = []
    seen: set[str] = set()
    with file.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            prompt = _parse_line(line, lineno, file)
            if prompt.id in seen:
                raise ValueError(f"{file}:{lineno}: duplicate prompt id {prompt.id!r}")
            seen.add(prompt.id)
            prompts.append(prompt)
    if split != "all":
        prompts = [p for p in prompts if p.split == split]
    if not prompts:
        raise ValueError(f"{file}: no prompts in split {split!r}")
    return prompts
