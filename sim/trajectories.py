"""Per-request token trajectories, sampled once before the run.

Why: acceptance depends only on the request (its parameter, its k) and not on which step or
batch verifies it, so the accepted counts of a request's 1st, 2nd, ... verification can be drawn
up front.  Both execution paths -- the step-by-step SimPy processes and the vectorised fast path
(``sim.fast``) -- then read the same numbers, which makes them give *identical* traces for the
same seed, however many steps the fast path advances at once.

Layout (request-major flat arrays): request i owns entries ``off[i] .. off[i] + nsteps[i]``
(``nsteps[i] + 1`` entries).  Entry ``off[i] + j`` holds, for its (j+1)-th verification,
``acc`` (accepted draft tokens) and ``emit`` (tokens appended = min(acc + 1, remaining)), and
``ctx`` = the tokens in its KV cache before that verification = prompt + 1 + tokens emitted by
the j earlier verifications (the 1 is the first token, which the prefill produces).  The last
entry (j = nsteps) has acc = emit = 0 and ctx = prompt + output_len.
"""
from __future__ import annotations

import json
import os
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

#: trajectories kept per process by `cached_trajectories` (a plan's bisection trials of one
#: configuration draw the same ones: same seed, lengths, k and acceptance; only arrivals move);
#: $PSDLAB_PLAN_REUSE=0 turns it off, with the plan's shared cost tables
#: (`benchmarks/plan_speed.py` times both ways)
CACHE_SIZE = 0 if os.environ.get("PSDLAB_PLAN_REUSE") == "0" else 32
#: larger draws (entries: verifications over all requests) are not kept: a plan's trials are
#: small, and 32 large simulations would hold gigabytes
CACHE_MAX_ENTRIES = 1 << 20
_CACHE: OrderedDict[tuple, "Trajectories"] = OrderedDict()


@dataclass(frozen=True)
class Trajectories:
    off: np.ndarray      # int64 [N]
    nsteps: np.ndarray   # int64 [N]: verifications needed (output_len - 1 tokens)
    acc: np.ndarray      # int8/int16 [total]
    emit: np.ndarray     # int8/int16 [total]
    ctx: np.ndarray      # int64 [total]


def cached_trajectories(seed: np.random.SeedSequence, acceptance_spec: Mapping[str, Any],
                        acceptance: Any, params: np.ndarray, k: np.ndarray,
                        prompt: np.ndarray, output: np.ndarray) -> "Trajectories":
    """`sample_trajectories` with ``np.random.default_rng(seed)``, remembered per process:
    the draws are a function of the seed and of these inputs alone, so a repeat returns the
    same (read-only) arrays without drawing again.  The key holds the seed's entropy and spawn
    key, the acceptance spec as given and the bytes of the per-request inputs."""
    if CACHE_SIZE <= 0:
        return sample_trajectories(np.random.default_rng(seed), acceptance, params, k, prompt,
                                   output)
    key = (repr(seed.entropy), tuple(seed.spawn_key),
           json.dumps(dict(acceptance_spec), sort_keys=True, default=str),
           params.tobytes(), k.tobytes(), prompt.tobytes(), output.tobytes())
    hit = _CACHE.get(key)
    if hit is not None:
        _CACHE.move_to_end(key)
        return hit
    traj = sample_trajectories(np.random.default_rng(seed), acceptance, params, k, prompt,
                               output)
    if traj.ctx.size > CACHE_MAX_ENTRIES:
        return traj
    for arr in (traj.off, traj.nsteps, traj.acc, traj.emit, traj.ctx):
        arr.flags.writeable = False                 # shared between runs: nobody writes
    _CACHE[key] = traj
    while len(_CACHE) > CACHE_SIZE:
        _CACHE.popitem(last=False)
    return traj


def sample_trajectories(rng: np.random.Generator, acceptance, params: np.ndarray,
                        k: np.ndarray, prompt: np.ndarray, output: np.ndarray) -> Trajectories:
    """Draw every request's accepted counts, round by round (round r = every request's
    (r+1)-th verification, vectorised over the requests still generating).  A model with
    ``sample_at`` (``sim.acceptance_matches``) also gets each request's output position.

    ``acceptance`` is None for AR (k = 0: one token per step, nothing drawn)."""
    n = output.size
    remaining = output.astype(np.int64) - 1
    if (remaining < 0).any():
        bad = int(np.flatnonzero(remaining < 0)[0])
        raise ValueError(f"workload: output_len must be >= 1, got {output[bad]} for request {bad}")
    if acceptance is None or not k.any():
        nsteps = remaining.copy()
        rounds: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        return _assemble(n, nsteps, prompt, rounds, ar=True)
    # compact arrays of the requests still generating (ids ascending), shrunk every round
    ids = np.flatnonzero(remaining > 0)
    par, kk, rem = params[ids], k[ids], remaining[ids]
    pos = np.ones(ids.size, dtype=np.int64)         # output position of the next draft token
    at_pos = getattr(acceptance, "sample_at", None)
    nsteps = np.zeros(n, dtype=np.int64)
    rounds = []
    while ids.size:
        acc = np.asarray(acceptance.sample(rng, par, kk) if at_pos is None
                         else at_pos(rng, par, kk, pos), dtype=np.int64)
        emit = np.minimum(acc + 1, rem)
        rounds.append((ids, acc, emit))
        rem = rem - emit
        pos = pos + emit
        keep = rem > 0
        if not keep.all():
            nsteps[ids[~keep]] = len(rounds)          # done after this many verifications
            ids, par, kk, rem, pos = ids[keep], par[keep], kk[keep], rem[keep], pos[keep]
    return _assemble(n, nsteps, prompt, rounds, ar=False)


def _assemble(n: int, nsteps: np.ndarray, prompt: np.ndarray, rounds, *, ar: bool) -> Trajectories:
    sizes = nsteps + 1
    off = np.zeros(n, dtype=np.int64)
    if n:
        np.cumsum(sizes[:-1], out=off[1:])
    total = int(sizes.sum())
    acc = np.zeros(total, dtype=np.int16)
    emit = np.zeros(total, dtype=np.int16)
    if ar:
        emit[:] = 1
        emit[off + nsteps] = 0
    else:
        for r, (ids, a, e) in enumerate(rounds):
            pos = off[ids] + r
            acc[pos] = a
            emit[pos] = e
    # exclusive cumulative sum of emitted tokens, restarted at each request
    # (in place: fresh 8-byte-per-entry arrays cost more in page faults than the sums)
    ctx = emit.astype(np.int64)
    np.cumsum(ctx, out=ctx)
    ctx -= emit
    ctx += np.repeat(prompt.astype(np.int64) + 1 - ctx[off], sizes)
    return Trajectories(off=off, nsteps=nsteps, acc=acc, emit=emit, ctx=ctx)
