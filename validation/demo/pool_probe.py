"""The demo's acceptance pool: which prompts it probes, the probe run, and where the file lives.

Before the timed runs, `psdlab demo` measures the greedy match patterns (untimed,
``runtime.acceptance_probe``) of every acceptance-pool prompt (``validation.demo.prompt_sides.
pool_list``: calibration-side prompts, never a held-out one) that no timed calibration run of
the plan serves, and writes them to ``acceptance_pool.json`` beside the traces
(``validation.acceptance.pool``).  The calibration then fits the acceptance model on the timed
calibration runs plus the pool.  A re-analysis (``psdlab demo --traces DIR/traces``) reads
the pool file of the folder that holds the traces.
"""
from __future__ import annotations

import os
import time
from typing import Any, Mapping, Sequence

from psdlab.validation.acceptance.pool import POOL_FILE, read_pool, write_pool
from psdlab.validation.acceptance.transfer import prompt_of
from psdlab.validation.demo.prompt_sides import (POOL_SPLITS, PROMPT_SIDES, pool_prompts,
                                            prompt_windows, side_prompts, window)


def served_calibration(plan: Any, sides: Mapping[str, Sequence[tuple[str, Any]]]
                       ) -> set[str]:
    """The prompts the plan's timed calibration-side runs serve (their windows)."""
    starts = prompt_windows(plan.runs, {s: len(p) for s, p in sides.items()}, plan.num_prompts)
    return {prompt_of(rid) for r in plan.runs if r.prompts == "calibration"
            for rid, _ in window(sides["calibration"], starts[r.name], plan.num_prompts)}


def probe_pool(plan: Any, target_dir: str, drafter_dir: str, tokenizer: Any,
               prompt_ids: Sequence[Sequence[int]] | None, out_dir: str) -> dict[str, Any]:
    """Probe the pool's prompts that no timed calibration run serves; write the pool file;
    return what was done (the patterns, wall time, file)."""
    from psdlab.runtime.acceptance_probe import probe_patterns
    sides = {s: side_prompts(tokenizer, prompt_ids, s) for s in PROMPT_SIDES}
    taken = served_calibration(plan, sides)
    todo = [item for item in pool_prompts(tokenizer, prompt_ids)
            if prompt_of(item[0]) not in taken]
    held = {prompt_of(rid) for rid, _ in sides["heldout"]}
    if any(prompt_of(rid) in held for rid, _ in todo):
        raise ValueError("acceptance pool: holds a held-out prompt")
    t = time.perf_counter()
    patterns = probe_patterns(target_dir, drafter_dir, todo, plan.max_new_tokens)
    wall = time.perf_counter() - t
    path = os.path.join(out_dir, POOL_FILE)
    write_pool(path, patterns, max_new_tokens=plan.max_new_tokens, wall_s=wall,
               splits=list(POOL_SPLITS) if prompt_ids is None else ["test prompt ids"])
    return {"patterns": patterns, "wall_s": wall, "file": path}


def pool_for(trace_dir: str) -> dict[str, str] | None:
    """The pool file of the demo folder holding ``trace_dir`` (None when it has none)."""
    return read_pool(os.path.join(os.path.dirname(os.path.abspath(trace_dir)), POOL_FILE))
