"""The PSD drafter for vLLM: psdlab's own draft model in its own process on its own device.

`DraftClient` owns one `runtime.workers` worker (a process pinned to a CPU core with one torch
thread; or a thread on a CUDA device) running `runtime.runner.ModelRunner` with the draft
model and its own KV cache.  The vLLM scheduler calls `submit(requests)` with the token ids of
the half to draft and, a step later, `collect()` for the drafts; between the two calls vLLM's
target verifies the other half, so drafting and verification overlap.

The client keeps, per request, a drafter cache slot and the tokens that slot holds; each draft
call rolls the slot back to the longest prefix still valid (what the target accepted) and feeds
only the new tokens.  Drafts are greedy (the drafter's argmax): vLLM's rejection sampler then
treats them as one-hot proposals, which keeps the output exactly the target's distribution at
any temperature (and token-for-token the target's greedy output at temperature 0).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Sequence

from psdlab.runtime.workers import Result


@dataclass(frozen=True)
class DraftConfig:
    """Where the drafter runs and how much it drafts."""
    model: str                 # HF-format directory of the draft model
    k: int                     # draft tokens per request per step
    max_slots: int             # requests the drafter holds at once (vLLM's max_num_seqs)
    max_len: int               # context length (vLLM's max_model_len)
    device: str = "cpu"
    core: int | None = 0       # CPU: the core the drafter process is pinned to
    dtype: str = "float32"
    backend: str = "process"   # "process" (CPU), "thread" (CUDA), "inline" (tests)
    spin_s: float = 1.0        # process backend: busy-wait this long for the next batch
                               # before blocking (the drafter owns its core; a blocked
                               # process wakes up late, after a short target step is over)

    @property
    def label(self) -> str:
        return f"cpu:{self.core}" if self.device == "cpu" else f"{self.device}/drafter"


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class DraftClient:
    """Submit-then-collect drafting of one batch of requests at a time."""

    def __init__(self, cfg: DraftConfig):
        from psdlab.runtime.drafter_build import preferred_dtype, runnable_dtype
        from psdlab.runtime.runner import ModelSpec, RunnerConfig
        from psdlab.runtime.workers import WorkerSpec, InlineWorker, ProcessWorker, ThreadWorker
        self.cfg = cfg
        # the drafter runs in the dtype its directory asks for (the shipped one: bfloat16)
        dtype = runnable_dtype(preferred_dtype(cfg.model) or cfg.dtype)
        runner = RunnerConfig(spec=ModelSpec(path=cfg.model), device=cfg.device, dtype=dtype,
                              max_slots=cfg.max_slots, max_len=cfg.max_len + cfg.k + 1)
        proc = cfg.backend == "process"
        spec = WorkerSpec(role="drafter", runner=runner, label=cfg.label,
                          core=cfg.core if proc else None, spin_s=cfg.spin_s if proc else 0.0)
        cls = {"process": ProcessWorker, "thread": ThreadWorker, "inline": InlineWorker}
        self.worker = cls[cfg.backend](spec)
        if hasattr(self.worker, "ready"):
            self.worker.ready()
        self._free = list(range(cfg.max_slots))
        self._slot: dict[Hashable, int] = {}
        self._held: dict[Hashable, list[int]] = {}   # tokens the slot's cache holds
        self._pending: list[tuple[Hashable, int]] | None = None   # (req, base length)
        #: what the drafter was asked to do, summed over calls (benchmarks read it): rows
        #: drafted, tokens fed (the unseen ones: bonus, accepted drafts, or a rebuilt cache)
        #: and tokens drafted
        self.stats = {"calls": 0, "rows": 0, "fed_tokens": 0, "drafted_tokens": 0,
                      "draft_s": 0.0}

    @property
    def busy(self) -> bool:
        return self._pending is not None

    def release(self, rid: Hashable) -> None:
        """Forget a request that left (finished, aborted, preempted); frees its slot."""
        slot = self._slot.pop(rid, None)
        self._held.pop(rid, None)
        if slot is not None:
            self._free.append(slot)

    def submit(self, requests: Sequence[tuple[Hashable, Sequence[int], int]]) -> bool:
        """Start drafting; ``requests`` holds (id, all token ids so far, k for it >= 1).
        Returns False (nothing submitted) when the list is empty."""
        if self._pending is not None:
            raise RuntimeError("drafter: collect() the previous batch first")
        rows = [(rid, list(toks), int(k)) for rid, toks, k in requests if k >= 1 and toks]
        rows = [r for r in rows if r[0] in self._slot or self._free]
        for rid, _, _ in rows:
            if rid not in self._slot:
                self._slot[rid] = self._free.pop()
                self._held[rid] = []
        if not rows:
            return False
        slots, keep, feed, ks = [], [], [], []
        for rid, toks, k in rows:
            held = self._held[rid]
            kept = min(_common_prefix(held, toks), len(toks) - 1)
            slots.append(self._slot[rid])
            keep.append(kept)
            feed.append(toks[kept:])
            ks.append(k)
            self._held[rid] = toks
        self.worker.submit("draft", slots, keep, feed, ks)
        self.stats["calls"] += 1
        self.stats["rows"] += len(rows)
        self.stats["fed_tokens"] += sum(len(f) for f in feed)
        self.stats["drafted_tokens"] += sum(ks)
        self._pending = [(rid, len(toks)) for rid, toks, _ in rows]
        return True

    def collect(self) -> tuple[dict[Hashable, tuple[int, list[int]]], Result | None]:
        """Wait for the submitted batch: {id: (base length, drafts)} and the worker's timed
        result (None when nothing was pending)."""
        if self._pending is None:
            return {}, None
        pending, self._pending = self._pending, None
        res = self.worker.wait()
        self.stats["draft_s"] += res.end - res.start
        drafts, _probs = res.value
        out = {}
        for (rid, base), d in zip(pending, drafts):
            if rid in self._held:
                # the cache now also holds the first k-1 drafts
                self._held[rid] = self._held[rid] + list(d[:-1])
            out[rid] = (base, [int(x) for x in d])
        return out, res

    def close(self) -> None:
        if self._pending is not None:
            try:
                self.worker.wait()
            except Exception:
                pass
            self._pending = None
        self.worker.close()
