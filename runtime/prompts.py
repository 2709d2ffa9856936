"""The prompt set that ships with psdlab (``runtime/data/prompts.jsonl``) and its loader.

Each line of the file is one JSON object ``{"id", "style", "split", "text"}``. The split into
``train`` (used to distil the drafter) and ``heldout`` (used to measure it) is fixed in the file,
so every machine sees the same prompts on each side.  Split ``fresh`` (120 prompts, 24 a
style, written on 2026-12-01 after the drafter was distilled and after every earlier demo had
run) was the held-out side of demos I-K; split ``fresh2`` (240 prompts, 48 a style, written
later that day, after demo K, by two writers on disjoint topics) that of demos L-N; split
``fresh3`` (240 prompts, 48 a style, written after demo N, again by two writers on disjoint
topics) that of demos O and P and the calibration side since; split ``fresh4`` (240 prompts, 48
a style, written after demo P by two writers on disjoint topics, near-duplicates of any earlier
prompt rewritten) that of demos Q and R; split ``fresh5`` (240 prompts, 48 a style, written
after demo R the same way) that of demos S-W; split ``fresh6`` (240 prompts, 48 a style,
written on 2026-12-02 after demo W by two writers on disjoint topics -- the sea and coasts;
music, theatre and film -- near-duplicates of any earlier prompt rewritten) that of demos X
and Y; split ``fresh7`` (240 prompts, 48 a style, written after demo Y by two writers on
disjoint topics -- law, government and civic life; deserts, polar regions and caves -- word-set
Jaccard at most 0.45 against any earlier prompt) that of demos Z and AA; split ``fresh8`` (240
prompts, 48 a style, written after demo AA by two writers on disjoint topics -- medicine and
the human body; sport and games -- three near-duplicates rewritten, word-set Jaccard at most
0.46 against any earlier prompt) that of demos AB and AC (and of diagnostic demo AD, whose
traces the cost model's context and table changes were worked out on); split ``fresh9`` (240
prompts, 48 a style, written after demo AD by two writers on disjoint topics -- architecture,
cities and infrastructure; crafts made by hand -- word-set Jaccard at most 0.41 against any
earlier prompt) that of demos AE and AF; split ``fresh10`` (240 prompts, 48 a style, written
after demo AF by two writers on disjoint topics -- geology, volcanoes and earthquakes; insects,
spiders and other small creatures -- word-set Jaccard at most 0.45 against any earlier prompt)
that of demos AG and AH (and of diagnostic demo AI, whose traces the verify phases' padded
context was measured on); split ``fresh11`` (240 prompts, 48 a style, written on 2026-12-03
after demo AI by two writers on disjoint topics -- railways, aviation and long-distance travel;
birds, migration and birdwatching -- word-set Jaccard at most 0.45 against any earlier prompt)
is the demo's held-out side now: prompts that no choice in psdlab's design was made on.
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
            return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
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
