"""Greedy match patterns of many prompts, measured without timing them: the acceptance pool.

With greedy decoding a request's acceptance is its match pattern (``sim.acceptance_matches``):
at output position j, does the drafter's greedy token, given the prompt and the target's
output before j, equal the target's token j?  That needs no speculative run at all: the
target's greedy output (an AR run of the real engine, EOS ignored as in the demo's runs)
and one teacher-forced pass of the drafter over prompt + output give every position at
once, where a timed SD run sees only the positions its verifications reach.  So a pool of
prompts many times larger than the timed calibration runs serve costs a fraction of their
time, and the acceptance model (``validation.acceptance.cross_validation``) learns the population of
prompts from it rather than from the few dozen a timed run serves.

``probe_patterns`` splits the prompts over ``workers`` processes, each pinned to its own
core with one torch thread and its own inline engine (the target in the runs' dtype, the
drafter pass in the dtype the runs' drafter uses).  Pattern strings follow
``sim.acceptance_matches``: character 0 is the prefill's token (``.``, never drafted), then
``1`` / ``0`` per output position.  Its timing is not a measurement: nothing here is traced.
"""
from __future__ import annotations

import os
from typing import Sequence

import torch

from psdlab.analysis.checks import check_int
from psdlab.runtime.model import Transformer

#: sequences per teacher-forced drafter pass
_PASS_BATCH = 16


@torch.no_grad()
def batch_matches(drafter: Transformer,
                  seqs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> list[str]:
    """Patterns of (prompt, output) pairs, right-padded into one causal pass (a causal model
    never looks at the padding after a sequence, so no mask is needed)."""
    width = max(len(p) + len(o) for p, o in seqs)
    rows = [list(p) + list(o) + [0] * (width - len(p) - len(o)) for p, o in seqs]
    logits = drafter.forward_no_cache(torch.tensor(rows, dtype=torch.long))
    out = []
    for (p, o), lg in zip(seqs, logits):
        n = len(o)
        if n < 2:
            out.append("." * n)
            continue
        # the drafter's guess for output token j (j >= 1) is its argmax after token j - 1
        guess = lg[len(p):len(p) + n - 1].argmax(-1).tolist()
        out.append("." + "".join("1" if g == t else "0" for g, t in zip(guess, o[1:])))
    return out


def _shard(job: tuple) -> dict[str, str]:
    """One process's share: AR run of the target, then the drafter's teacher-forced passes."""
    target_dir, drafter_dir, items, max_new, core, batch = job
    if core is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {core})
    torch.set_num_threads(1)
    from psdlab.runtime.drafter_build import preferred_dtype, runnable_dtype
    from psdlab.runtime.controller import Engine, EngineConfig
    from psdlab.runtime.requests import Request
    from psdlab.runtime.runner import ModelSpec
    from psdlab.runtime.weights import load_model
    cfg = EngineConfig(mode="ar", k=1, batch=batch, max_new_tokens=max_new, ignore_eos=True,
                       max_len=1024, backend="inline", seed=0)
    with Engine(cfg, ModelSpec(target_dir), None, None) as eng:
        res = eng.run([Request(rid, tuple(ids), 0.0, None, max_new) for rid, ids in items])
    if res.error:
        raise RuntimeError(f"acceptance probe: {res.error}")
    outputs = {str(o.id): tuple(o.token_ids) for o in res.outputs}
    # the dtype the runs' drafter uses (``runtime.controller``: the directory's, else the runs')
    dtype = getattr(torch, runnable_dtype(preferred_dtype(drafter_dir) or cfg.dtype))
    drafter, _ = load_model(drafter_dir, dtype=dtype)
    pairs = [(str(rid), tuple(ids), outputs[str(rid)]) for rid, ids in items]
    found: dict[str, str] = {}
    for b in range(0, len(pairs), _PASS_BATCH):
        chunk = pairs[b:b + _PASS_BATCH]
        for (rid, _, _), pat in zip(chunk, batch_matches(drafter, [(p, o) for _, p, o in chunk])):
            found[rid] = pat
    return found


def probe_patterns(target_dir: str, drafter_dir: str,
                   prompts: Sequence[tuple[str, Sequence[int]]], max_new_tokens: int, *,
                   workers: int = 2, batch: int = 32) -> dict[str, str]:
    """The greedy match pattern (``max_new_tokens`` long) of every (id, prompt token ids),
    over ``workers`` processes (one per core; 1: in this process)."""
    check_int("max_new_tokens", max_new_tokens, 2)
    check_int("workers", workers, 1, 64)
    check_int("batch", batch, 1, 256)
    if not prompts:
        return {}
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    workers = min(workers, len(prompts), max(1, len(cores)))
    jobs = [(target_dir, drafter_dir, list(prompts[w::workers]), max_new_tokens,
             cores[w] if workers > 1 else None, batch) for w in range(workers)]
    if workers == 1:
        parts = [_shard(jobs[0])]
    else:
        import multiprocessing as mp
        with mp.get_context("spawn").Pool(workers) as pool:
            parts = pool.map(_shard, jobs)
    merged: dict[str, str] = {}
    for part in parts:
        merged.update(part)
    return {str(rid): merged[str(rid)] for rid, _ in prompts}


@torch.no_grad()
def prompt_agreement(target_dir: str, drafter_dir: str,
                     prompts: Sequence[tuple[str, Sequence[int]]], skip: int = 0
                     ) -> dict[str, dict[str, float]]:
    """How well the drafter agrees with the target on each prompt's own tokens, from one
    teacher-forced pass of each model over the prompt (no generation): per prompt id,
    ``agree`` (the share of positions from ``skip`` on -- e.g. past a shared chat-template
    prefix -- where both models' greedy next tokens are equal) and ``overlap`` (the mean of
    sum_v min(p_target, p_drafter), the chance a sampled draft token would be accepted).  A
    candidate covariate of a prompt's acceptance that needs the prompt only."""
    from psdlab.runtime.drafter_build import preferred_dtype, runnable_dtype
    from psdlab.runtime.weights import load_model
    check_int("skip", skip, 0)
    target, _ = load_model(target_dir, dtype=torch.float32)
    drafter, _ = load_model(drafter_dir, dtype=getattr(torch, runnable_dtype(
        preferred_dtype(drafter_dir) or "float32")))
    out: dict[str, dict[str, float]] = {}
    for b in range(0, len(prompts), _PASS_BATCH):
        chunk = [(str(rid), list(ids)) for rid, ids in prompts[b:b + _PASS_BATCH]]
        width = max(len(ids) for _, ids in chunk)
        rows = torch.tensor([ids + [0] * (width - len(ids)) for _, ids in chunk])
        lt = target.forward_no_cache(rows).float()
        ld = drafter.forward_no_cache(rows).float()
        for (rid, ids), t, d in zip(chunk, lt, ld):
            span = slice(min(skip, len(ids) - 1), len(ids))
            t, d = t[span], d[span]
            overlap = torch.minimum(t.softmax(-1), d.softmax(-1)).sum(-1)
            out[rid] = {"agree": float((t.argmax(-1) == d.argmax(-1)).float().mean()),
                        "overlap": float(overlap.mean())}
    return out
