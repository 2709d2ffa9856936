"""The co-run probe: the drafter's and the target's passes at the same time on their own
devices, no PSD controller, against each alone (``analysis.contention`` says what it is for
and how it is fitted).

On the engine's real workers, one group of ``seqs`` slots is filled to ``context`` tokens on
both; then, ``reps`` times and for each k in ``ks`` (the order rotating so that no kind always
runs first), it times: the verification alone (``seqs`` x (k + 1) tokens), the drafting phase
alone (k one-token passes), the two one after the other from this driver (SD-sep's
structure: submit the draft, wait, submit the verification, wait), and the two at once (PSD's
structure: submit the draft, submit the verification, wait for both).  The passes keep the
cache at ``context`` (``keep``), so every repeat is the same shape.  It takes a few seconds
and writes no trace.
"""
from __future__ import annotations

import time
from typing import Any, Sequence

from psdlab.analysis.checks import check_int
from psdlab.analysis.contention import CorunProbe, CorunShape, layout_of
from psdlab.runtime.context_timing import PROBE_TOKEN


def _limits(workers: Sequence[Any]) -> tuple[int, int]:
    infos = [getattr(w, "info", None) or {} for w in workers]
    return (min(int(i.get("max_len", 1 << 30)) for i in infos),
            min(int(i.get("vocab_size", PROBE_TOKEN + 1)) for i in infos))


def corun_probe(target: Any, drafter: Any, *, seqs: int = 4, ks: Sequence[int] = (2, 4),
                context: int = 64, reps: int = 8, slots: int = 8) -> CorunProbe:
    """The probe's record (module docstring) on two workers (``runtime.workers``: ``submit``
    / ``wait`` giving each command's start and end on its device's clock)."""
    seqs = check_int("seqs", seqs, minimum=1)
    reps = check_int("reps", reps, minimum=2)
    context = check_int("context", context, minimum=1)
    ks = [check_int("ks", k, minimum=1) for k in ks]
    if not ks:
        raise ValueError("ks: need at least one k")
    if seqs > slots:
        raise ValueError(f"seqs: {seqs} sequences need {seqs} slots, the workers have {slots}")
    max_len, vocab = _limits([target, drafter])
    if context + max(ks) + 2 > max_len:
        raise ValueError(f"context: the workers' KV caches hold {max_len} tokens, too few for "
                         f"{context} tokens of context and k = {max(ks)}")
    token = min(PROBE_TOKEN, vocab - 1)
    group = list(range(seqs))
    for w in (target, drafter):
        w.submit("feed", group, [0] * seqs, [[token] * context] * seqs)
    for w in (target, drafter):
        w.wait()
    keep, pending = [context] * seqs, [[token]] * seqs
    runs: dict[int, dict[str, list[float]]] = {k: {n: [] for n in CorunShape.SERIES}
                                               for k in ks}

    def verify(k: int) -> None:
        target.submit("verify", group, keep, pending, [[token] * k] * seqs, None)

    def draft(k: int) -> None:
        drafter.submit("draft", group, keep, pending, [k] * seqs)

    def solo(k: int) -> None:
        verify(k)
        r = target.wait()
        runs[k]["solo_verify_s"].append(r.end - r.start)
        draft(k)
        r = drafter.wait()
        runs[k]["solo_draft_s"].append(r.end - r.start)

    def serial(k: int) -> None:
        t0 = time.perf_counter()
        draft(k)
        d = drafter.wait()
        verify(k)
        v = target.wait()
        wall = time.perf_counter() - t0
        runs[k]["serial_host_s"].append(wall - (d.end - d.start) - (v.end - v.start))

    def corun(k: int) -> None:
        t0 = time.perf_counter()
        draft(k)
        verify(k)
        v = target.wait()
        d = drafter.wait()
        wall = time.perf_counter() - t0
        dv, dd = v.end - v.start, d.end - d.start
        runs[k]["corun_verify_s"].append(dv)
        runs[k]["corun_draft_s"].append(dd)
        runs[k]["corun_overlap_s"].append(max(0.0, min(v.end, d.end) - max(v.start, d.start)))
        runs[k]["corun_host_s"].append(wall - max(dv, dd))

    kinds = (solo, serial, corun)
    for rep in range(reps):
        for j, k in enumerate(ks if rep % 2 == 0 else list(reversed(ks))):
            shift = (rep + j) % len(kinds)
            for kind in kinds[shift:] + kinds[:shift]:
                kind(k)
    for w in (target, drafter):
        w.submit("release", group)
        w.wait()
    labels = (str(getattr(target, "label", "target")), str(getattr(drafter, "label", "drafter")))
    return CorunProbe(layout_of({"target": labels[0], "drafter": labels[1]}), labels,
                      tuple(CorunShape(seqs, k, context,
                                       **{n: tuple(v) for n, v in runs[k].items()})
                            for k in ks))


def probe_pair(target_dir: str, drafter_dir: str, *, seqs: int = 4, ks: Sequence[int] = (2, 4),
               context: int = 64, reps: int = 12, backend: str | None = None) -> CorunProbe:
    """The probe on a model pair's own workers (drafter and target each in its own process on
    its own core where two cores are free, as ``psdlab run`` places them), after one warm-up
    of every kind so first-touch costs are not measured."""
    import os

    from psdlab.runtime.controller import Engine, EngineConfig
    from psdlab.runtime.runner import ModelSpec
    seqs = check_int("--batch", seqs, minimum=1, maximum=256)
    ks = [check_int("--k", k, minimum=1, maximum=16) for k in ks]
    if backend is None:
        backend = "process" if {0, 1} <= set(os.sched_getaffinity(0)) else "inline"
    cfg = EngineConfig(mode="psd", k=max(ks), batch=seqs, max_new_tokens=2, ignore_eos=True,
                       max_len=max(256, context + max(ks) + 8), backend=backend)
    with Engine(cfg, ModelSpec(target_dir), ModelSpec(drafter_dir)) as eng:
        corun_probe(eng.target, eng.drafter, seqs=seqs, ks=ks, context=context, reps=2,
                    slots=cfg.slots)
        return corun_probe(eng.target, eng.drafter, seqs=seqs, ks=ks, context=context,
                           reps=reps, slots=cfg.slots)
