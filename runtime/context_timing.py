"""How a decode pass's time grows with its KV context, measured in a controlled experiment.

A calibration run's phases vary their context only a little inside one shape (the contexts of
the requests in a batch, tens of tokens), and what else varies with it inside a run (its place
among admissions and prefills, the machine's drift) makes the within-shape slope unstable:
one calibration read the target at 77 us and the drafter at 103 us per context token,
another at 26.8 us and 39 us, and the held-out runs, over prompts longer than the
calibration's, were then predicted 12-22% too slow in their drafts and verifications.  This probe
holds everything but the context fixed: one group of ``seqs`` slots is filled to ``contexts[0]``
tokens per sequence and another to
``contexts[1]``, and the same verification (``seqs`` x (k + 1) tokens) and the same drafting
phase (k one-token passes) are timed on each, alternately, ``reps`` times.  The slope is the
difference of the mean times over the difference of the summed contexts (for the drafting
phase, over k times it: each pass reads the whole context), with its standard error from the
repeats.  It runs on the real workers before the timed runs, untimed as a run (its phases go
into no trace); ``validation.calibrate`` fixes the decode fits' ``per_context`` at it.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from psdlab.analysis.checks import check_int

#: token id the probe feeds (any id of the vocabulary: the time of a pass does not depend on
#: which tokens it carries); a smaller vocabulary's last id
PROBE_TOKEN = 42


def _timed(worker: Any, method: str, *args: Any) -> float:
    worker.submit(method, *args)
    res = worker.wait()
    return float(res.end - res.start)


def _fill(workers: Sequence[Any], groups: dict[int, list[int]], token: int) -> None:
    """Fill every group of slots to its context on every worker; each worker's feed of a
    group is submitted to all workers before any is waited for, so the workers fill at once."""
    for context, slots in groups.items():
        for w in workers:
            w.submit("feed", slots, [0] * len(slots), [[token] * context] * len(slots))
        for w in workers:
            w.wait()


def _limits(workers: Sequence[Any]) -> tuple[int, int]:
    """(the shortest KV cache, the smallest vocabulary) over the workers (``info``)."""
    infos = [getattr(w, "info", None) or {} for w in workers]
    return (min(int(i.get("max_len", 1 << 30)) for i in infos),
            min(int(i.get("vocab_size", PROBE_TOKEN + 1)) for i in infos))


def _slope(lo: Sequence[float], hi: Sequence[float], span: float) -> dict[str, float]:
    """(mean hi - mean lo) / span with its standard error (the two means independent)."""
    def mean_var(xs: Sequence[float]) -> tuple[float, float]:
        m = sum(xs) / len(xs)
        v = sum((x - m) ** 2 for x in xs) / max(len(xs) - 1, 1)
        return m, v / len(xs)
    (m_lo, v_lo), (m_hi, v_hi) = mean_var(lo), mean_var(hi)
    return {"slope": (m_hi - m_lo) / span, "se": math.sqrt(v_lo + v_hi) / span,
            "mean_lo_s": m_lo, "mean_hi_s": m_hi}


def context_probe(target: Any, drafter: Any | None, *, seqs: int = 4, k: int = 3,
                  contexts: tuple[int, int] = (64, 384), reps: int = 8,
                  slots: int = 8) -> dict[str, Any]:
    """Per role, the time per summed context token of a verification (``target``) and of one
    drafting pass (``drafter``; None: none), measured on the workers (module docstring).
    ``slots``: how many KV slots the workers have (two groups of ``seqs`` are used and
    released again).  The high context is lowered to fit the workers' KV caches
    (``info["max_len"]``: it and the k + 1 tokens a pass appends)."""
    seqs = check_int("seqs", seqs, minimum=1)
    k = check_int("k", k, minimum=1)
    reps = check_int("reps", reps, minimum=2)
    lo_c, hi_c = (check_int("contexts", c, minimum=1) for c in contexts)
    if hi_c <= lo_c:
        raise ValueError(f"contexts: need low < high, got {contexts}")
    if 2 * seqs > slots:
        raise ValueError(f"seqs: two groups of {seqs} need {2 * seqs} slots, the workers "
                         f"have {slots}")
    workers = {"target": target, **({"drafter": drafter} if drafter is not None else {})}
    max_len, vocab = _limits(list(workers.values()))
    hi_c = min(hi_c, max_len - k - 2)
    if hi_c <= lo_c:
        raise ValueError(f"contexts: the workers' KV caches hold {max_len} tokens, too few "
                         f"for a probe above {lo_c} tokens of context")
    token = min(PROBE_TOKEN, vocab - 1)
    groups = {lo_c: list(range(seqs)), hi_c: list(range(seqs, 2 * seqs))}
    _fill(list(workers.values()), groups, token)
    times: dict[str, dict[int, list[float]]] = {r: {lo_c: [], hi_c: []} for r in workers}
    pending, drafts = [[token]] * seqs, [[token] * k] * seqs
    for rep in range(reps):
        order = (lo_c, hi_c) if rep % 2 == 0 else (hi_c, lo_c)
        for c in order:
            keep = [c] * seqs
            times["target"][c].append(_timed(target, "verify", groups[c], keep, pending,
                                             drafts, None))
            if drafter is not None:
                times["drafter"][c].append(_timed(drafter, "draft", groups[c], keep, pending,
                                                  [k] * seqs))
    for w in workers.values():
        w.submit("release", groups[lo_c] + groups[hi_c])
        w.wait()
    span = seqs * (hi_c - lo_c)
    out: dict[str, Any] = {"seqs": seqs, "k": k, "contexts": [lo_c, hi_c], "reps": reps,
                           "verify": _slope(times["target"][lo_c], times["target"][hi_c], span)}
    if drafter is not None:
        out["draft"] = _slope(times["drafter"][lo_c], times["drafter"][hi_c], k * span)
    return out
