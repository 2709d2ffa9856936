"""The acceptance pool: greedy match patterns of prompts no timed calibration run served
(``runtime.acceptance_probe``), as data for the acceptance model.

A timed calibration run serves a few dozen prompts, and what the held-out prompts' acceptance
can be predicted from is the calibration prompts' *population*: with 96 calibration prompts
the sampling error of their mean alone was a standard error of 3.4% on every held-out
throughput and TPOT (measured).  The pool adds many more calibration-side prompts at little
cost: with greedy decoding a prompt's SD verifications at any k follow from its match pattern
alone (``walk``: a verification at output position n proposes min(k, L - n - 1) draft tokens,
as the runtime does for an output of L tokens, accepts the run of matches from n, and the
next starts after the target's token), so the pool's patterns enter the fit as the
verifications the calibration runs' k would have made (``pool_verifications``), and the
pattern-resampling model draws from them like from the runs' own patterns.  A prompt a timed
run served keeps its traced verifications; the pool never overrides them.

File ``acceptance_pool.json`` in a demo folder: ``{"prompts": {ID: PATTERN}, "max_new_tokens":
L, "wall_s": ..., "splits": [...]}`` (``write_pool`` / ``read_pool``).
"""
from __future__ import annotations

import json
import os
from typing import AbstractSet, Any, Iterator, Mapping, Sequence

from psdlab.analysis.trace import Trace
from psdlab.validation.acceptance.transfer import Trials, Verification, prompt_of, trials

POOL_FILE = "acceptance_pool.json"


def walk(pattern: str, k: int) -> list[tuple[int, int, int]]:
    """(output position drafted from, proposed, accepted) of each greedy SD verification of a
    request whose output is ``len(pattern)`` tokens long (character 0, the prefill's token, is
    never drafted; an unknown position ``.`` ends a run of matches like a mismatch)."""
    if k < 1:
        raise ValueError(f"k: must be at least 1, got {k}")
    out: list[tuple[int, int, int]] = []
    length, n = len(pattern), 1
    while n < length:
        proposed = min(k, length - n - 1)
        accepted = 0
        while accepted < proposed and pattern[n + accepted] == "1":
            accepted += 1
        out.append((n, proposed, accepted))
        n += accepted + 1
    return out


def calibration_ks(traces: Sequence[Trace]) -> list[int]:
    """The k of the traces' drafting runs (the pool is walked at each)."""
    return sorted({int(t.run.k) for t in traces if int(t.run.k or 0) > 0})


def pool_verifications(pool: Mapping[str, str], ks: Sequence[int],
                       exclude: AbstractSet[str] = frozenset()) -> Iterator[Verification]:
    """The verifications each pool prompt (not in ``exclude``) would show at each k."""
    for prompt, pattern in sorted(pool.items()):
        if prompt in exclude:
            continue
        for k in ks:
            for n, proposed, accepted in walk(pattern, k):
                yield prompt, True, n, proposed, accepted


def served(traces: Sequence[Trace]) -> set[str]:
    """The prompts the traces' requests served."""
    return {prompt_of(r.id) for t in traces for r in t.requests}


def acceptance_data(traces: Sequence[Trace], pool: Mapping[str, str] | None = None
                    ) -> Trials:
    """The trials the acceptance fit takes: the traces' and the pool's (prompts the traces
    did not serve, walked at the traces' k)."""
    if not pool:
        return trials(traces)
    return trials(traces, pool_verifications(pool, calibration_ks(traces), served(traces)))


def merged_patterns(found: Mapping[str, str] | None, pool: Mapping[str, str] | None,
                    traces: Sequence[Trace]) -> dict[str, str] | None:
    """The runs' own patterns (``found``, by request id) plus the pool's for prompts the runs
    did not serve; None when neither has any."""
    out = dict(found or {})
    taken = served(traces)
    out.update({p: pat for p, pat in (pool or {}).items() if p not in taken})
    return out or None


def write_pool(path: str, patterns: Mapping[str, str], **meta: Any) -> None:
    """Write the pool file (atomically: a temporary file renamed into place)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump({"prompts": dict(patterns), **meta}, fh, indent=1)
    os.replace(tmp, path)


def read_pool(path: str) -> dict[str, str] | None:
    """The pool's patterns, or None when there is no pool file; a malformed file is an error
    naming the field."""
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as fh:
        doc = json.load(fh)
    prompts = doc.get("prompts") if isinstance(doc, dict) else None
    if not isinstance(prompts, dict) or not all(isinstance(v, str) and set(v) <= set("01.")
                                                for v in prompts.values()):
        raise ValueError(f"{path}: field 'prompts' must map prompt ids to pattern strings "
                         "of 1, 0 and '.'")
    return {str(k): v for k, v in prompts.items()}
