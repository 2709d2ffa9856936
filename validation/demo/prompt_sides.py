"""Which prompts a demo run serves: the two disjoint prompt sides, the window of a side each
run takes, and the acceptance pool.

The ``calibration`` side is split ``fresh3`` of ``runtime/data/prompts.jsonl`` and the
``heldout`` side split ``fresh11`` (``SIDE_SPLITS``; 240 prompts, 48 a style, each): no choice
in the acceptance model, the cost model, the plan or the judgement was made looking at the
held-out side.  Splits that earlier judgements were made on are never held out again.  Each
side is listed round-robin over its styles; every repeat of a workload serves the next window
of a side's list (`prompt_windows`), its SD and PSD runs the same one (and all calibration
runs of one repeat the same one).

The acceptance pool (`pool_list`, ``validation.acceptance.pool``) is calibration data whose
greedy match patterns are measured untimed (``runtime.acceptance_probe``), for prompts no timed
calibration run serves: the splits of ``POOL_SPLITS``, of some only every n-th prompt of each
style (``POOL_EVERY``, to keep the probe within the demo's time budget).  Each of these sets
was written by writers of its own, so together they span how far a new set's acceptance may
lie from any one of them.  Splits ``train`` and ``heldout`` stay out: the drafter was
distilled on ``train``, and ``heldout``, written with it, drafts better than any set written
since.  The pool never holds a held-out or training prompt.
"""
from __future__ import annotations

from typing import Any, Sequence

from psdlab.analysis.checks import check_choice

PROMPT_SIDES = ("calibration", "heldout")
#: the split of ``runtime/data/prompts.jsonl`` each side draws from
SIDE_SPLITS = {"calibration": "fresh3", "heldout": "fresh11"}
#: the splits the acceptance pool draws from (never the held-out side's, never ``train`` or
#: ``heldout``, module docstring)
POOL_SPLITS = ("fresh", "fresh2", "fresh3", "fresh4", "fresh5", "fresh6")
#: of these pool splits, every n-th prompt of each style (in file order) joins (the rest: all)
POOL_EVERY = {"fresh2": 3, "fresh4": 3, "fresh5": 3, "fresh6": 3}


def prompt_sides(items: Sequence[tuple[str, str]]) -> dict[str, list[int]]:
    """Split (id, style) items into the two sides: within each style (sorted), alternately
    calibration / held-out, the alternation running on across styles so the sides differ by
    one prompt at most and every style with two or more prompts is on both.  Each side is
    listed round-robin over its styles (first of each style, then second, ...), so the first
    n prompts of a side -- what a run of n requests serves -- hold every style about equally."""
    order = sorted(range(len(items)), key=lambda i: (items[i][1], items[i][0]))
    sides: dict[str, list[int]] = {s: [] for s in PROMPT_SIDES}
    for j, i in enumerate(order):
        sides[PROMPT_SIDES[j % 2]].append(i)
    return {side: _round_robin(members, items) for side, members in sides.items()}


def _round_robin(members: list[int], items: Sequence[tuple[str, str]]) -> list[int]:
    by_style: dict[str, list[int]] = {}
    for i in members:
        by_style.setdefault(items[i][1], []).append(i)
    queues = [by_style[s] for s in sorted(by_style)]
    out: list[int] = []
    for turn in range(max((len(q) for q in queues), default=0)):
        out += [q[turn] for q in queues if turn < len(q)]
    return out


def _cycle(items: list[tuple[str, tuple[int, ...]]], n: int) -> list[tuple[str, tuple[int, ...]]]:
    """n requests serving ``items`` in turn; the r-th serving of a prompt has id ``ID~r``."""
    if not items:
        raise ValueError("prompts: no prompts on this side")
    out = []
    for i in range(n):
        rid, ids = items[i % len(items)]
        turn = i // len(items) + 1
        out.append((rid if turn == 1 else f"{rid}~{turn}", ids))
    return out


def side_list(side: str) -> list[Any]:
    """The shipped prompts (``runtime.prompts.Prompt``) of one side, in the side's order: its
    split (``SIDE_SPLITS``; of split ``heldout``, the side's half by `prompt_sides`),
    round-robin over its styles."""
    check_choice("side", side, PROMPT_SIDES)
    from psdlab.runtime.prompts import load_prompts
    prompts = load_prompts(split=SIDE_SPLITS[side])
    items = [(p.id, p.style) for p in prompts]
    if SIDE_SPLITS[side] == "heldout":
        return [prompts[i] for i in prompt_sides(items)[side]]
    return [prompts[i] for i in _round_robin(list(range(len(prompts))), items)]


def pool_list() -> list[Any]:
    """The acceptance pool's prompts: the shipped prompts of ``POOL_SPLITS`` (of a split in
    ``POOL_EVERY``, every n-th of each style, the first included), in file order."""
    from psdlab.runtime.prompts import load_prompts
    out = []
    for split in POOL_SPLITS:
        seen: dict[str, int] = {}
        for p in load_prompts(split=split):
            i = seen[p.style] = seen.get(p.style, -1) + 1
            if i % POOL_EVERY.get(split, 1) == 0:
                out.append(p)
    return out


def pool_splits_text() -> str:
    """The pool's splits in words, e.g. ``heldout, fresh and fresh2 (1 in 2 of each style)``."""
    names = [s if s not in POOL_EVERY else f"{s} (1 in {POOL_EVERY[s]} of each style)"
             for s in POOL_SPLITS]
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else names[0]


def encode(tokenizer: Any, prompts: Sequence[Any]) -> list[tuple[str, tuple[int, ...]]]:
    """(id, prompt token ids) of shipped prompts in the tokenizer's chat template."""
    out = []
    for p in prompts:
        ids = tokenizer(p.chat_text(tokenizer), add_special_tokens=False)["input_ids"]
        out.append((p.id, tuple(int(x) for x in ids)))
    return out


def pool_prompts(tokenizer: Any, prompt_ids: Sequence[Sequence[int]] | None = None
                 ) -> list[tuple[str, tuple[int, ...]]]:
    """(id, prompt token ids) of the acceptance pool (`pool_list`) in the chat template; with
    ``prompt_ids`` (tiny test models), the calibration side of those (`side_prompts`)."""
    if prompt_ids is not None:
        return side_prompts(tokenizer, prompt_ids, "calibration")
    return encode(tokenizer, pool_list())


def side_prompts(tokenizer: Any, prompt_ids: Sequence[Sequence[int]] | None = None,
                 side: str = "heldout") -> list[tuple[str, tuple[int, ...]]]:
    """(id, prompt token ids) of every prompt of one side (`side_list`) in the chat
    template, in the side's order; with ``prompt_ids`` (e.g. for tiny test models without a
    tokenizer) alternate ones of those (even indices: calibration; odd: held out; ids
    ``test-I``)."""
    check_choice("side", side, PROMPT_SIDES)
    if prompt_ids is not None:
        return [(f"test-{i}", tuple(int(x) for x in p)) for i, p in enumerate(prompt_ids)
                if i % 2 == PROMPT_SIDES.index(side) or len(prompt_ids) == 1]
    return encode(tokenizer, side_list(side))


def window(items: Sequence[tuple[str, tuple[int, ...]]], offset: int, n: int
           ) -> list[tuple[str, tuple[int, ...]]]:
    """n requests over ``items`` from position ``offset`` on, wrapping around (`_cycle`)."""
    if not items:
        raise ValueError("prompts: no prompts on this side")
    o = offset % len(items)
    return _cycle(list(items[o:]) + list(items[:o]), n)


def demo_requests(tokenizer: Any, n: int, prompt_ids: Sequence[Sequence[int]] | None = None,
                  side: str = "heldout", offset: int = 0) -> list[tuple[str, tuple[int, ...]]]:
    """n requests over one side's prompts (`side_prompts`) from position ``offset`` on."""
    return window(side_prompts(tokenizer, prompt_ids, side), offset, n)


def window_key(run: Any) -> tuple[str, str, int]:
    """The runs that serve one window: the SD and PSD runs of one repeat of a workload (their
    gain is measured on the same prompts); and every calibration run of one repeat, whatever
    its k (so the fit's terms for k, the draft positions, are not confounded with which
    prompts each k served)."""
    if getattr(run, "role", None) == "calibrate":
        return (run.prompts, "calibrate", run.rep)
    return (run.prompts, run.workload, run.rep)


def prompt_windows(runs: Sequence[Any], side_sizes: dict[str, int], n: int
                   ) -> dict[str, int]:
    """Where in its side's prompt list each run starts: every window key (`window_key`) of a
    side gets the next window of n prompts, so the runs of one side tile its whole list (and
    wrap around) instead of serving the same n prompts again."""
    seen: dict[tuple[str, str, int], int] = {}
    count = {s: 0 for s in side_sizes}
    out = {}
    for r in runs:
        key = window_key(r)
        if key not in seen:
            seen[key] = (count[r.prompts] * n) % max(side_sizes[r.prompts], 1)
            count[r.prompts] += 1
        out[r.name] = seen[key]
    return out
