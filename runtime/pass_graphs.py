"""A model's static passes (`runtime.static_pass`), one per shape, made when its worker starts.

`StaticPasses` holds, for each `PassShape` a runner can use (pass widths x batch buckets x key
span buckets), the static input buffer and a *replayer*: on CUDA a captured
``torch.cuda.CUDAGraph`` (`capture_cuda`: two warm-up runs on a side stream, then one capture,
all graphs of one model sharing one memory pool, as vLLM's CUDA-graph runner does); on CPU, or
when asked, the same static pass run eagerly (`capture_eager`).  Capture is injectable, so CPU
tests drive the selection, packing and replay logic through a fake.

With ``PassPlan.fused`` each pass kind is compiled once over all its buckets and the inputs
take the grid layout of `runtime.fused_passes`; with ``PassPlan.draft_k`` the drafter's k passes
are also made per shape as one callable (`fused_passes.draft_loop`), captured like a pass, and
`draft` replays it.

`forward` picks the smallest shape that fits (width, rows, span), packs the rows into the host
image of the input buffer, copies it with one host-to-device copy, replays, updates the host
lengths and returns a view of the shape's output (valid until that shape is replayed again;
the runner consumes it in stream order first).  A call that fits no shape returns None and
the runner takes its dynamic (eager) path: chunked prefill does.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

import torch

from psdlab.runtime.fused_passes import FusedInputs, FusedKinds, bind_loop, fused_batch_buckets
from psdlab.runtime.kv_cache import KVCache
from psdlab.runtime.model import Transformer, host_to_device
from psdlab.runtime.static_pass import (PassInputs, PassShape, batch_buckets, span_buckets,
                                        static_forward)


class Replayer(Protocol):
    def replay(self) -> torch.Tensor: ...


Capture = Callable[[Callable[[], torch.Tensor], torch.device], Replayer]


class EagerReplayer:
    """The static pass run eagerly at each replay (CPU, and the reference for graphs)."""

    def __init__(self, fn: Callable[[], torch.Tensor], device: torch.device) -> None:
        self.fn = fn

    def replay(self) -> torch.Tensor:
        return self.fn()


def capture_eager(fn: Callable[[], torch.Tensor], device: torch.device) -> Replayer:
    return EagerReplayer(fn, device)


class GraphReplayer:
    """One CUDA graph of a static pass; ``replay`` launches it on the current stream."""

    def __init__(self, fn: Callable[[], torch.Tensor], device: torch.device,
                 pool: Any) -> None:
        side = torch.cuda.Stream(device=device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(2):                      # kernels chosen and buffers made first
                fn()
        torch.cuda.current_stream(device).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        # thread_local: the other model's worker thread may allocate while this one captures
        with torch.cuda.graph(self.graph, pool=pool, capture_error_mode="thread_local"):
            self.out = fn()

    def replay(self) -> torch.Tensor:
        self.graph.replay()
        return self.out


def capture_cuda() -> Capture:
    """A capture function whose graphs share one memory pool (one model's graphs are replayed
    one at a time, so their intermediates may share memory; outputs stay referenced)."""
    pool = torch.cuda.graph_pool_handle()

    def capture(fn: Callable[[], torch.Tensor], device: torch.device) -> Replayer:
        return GraphReplayer(fn, device, pool)
    return capture


@dataclass(frozen=True)
class PassPlan:
    """Which static shapes a runner makes: ``widths`` as (tokens per row, only_last) pairs;
    batch buckets up to ``max_rows``; key spans up to the cache's max_len.  ``uniform``: one
    batch bucket (``max_rows``) and one span (max_len) for every pass, so every pass of the
    model has the same shape: the batch-invariant mode (`docs/cuda.md`)."""
    widths: tuple[tuple[int, bool], ...]
    max_rows: int
    uniform: bool = False
    compile: str = "off"     # "default": each static pass through inductor (fused kernels)
                             # before capture, one compile per shape; "eager": dynamo only
    fused: Any = None        # a torch.compile backend ("inductor", "eager", "aot_eager", or a
                             # callable such as dynamo's CompileCounter): each pass kind
                             # compiled once over every bucket (`runtime.fused_passes`)
    draft_k: int = 0         # > 0: also the drafter's k passes as one callable per shape
    draft_probs: bool = False  # the k-pass callable also leaves each step's softmax

    def shapes(self, max_len: int) -> list[PassShape]:
        rows = (self.max_rows,) if self.uniform else batch_buckets(self.max_rows)
        if self.fused is not None:          # no bucket 1: dynamo would specialise it
            rows = fused_batch_buckets(rows)
        spans = (max_len,) if self.uniform else span_buckets(max_len)
        return [PassShape(b, w, s, last and w > 1) for w, last in self.widths
                for b in rows for s in spans]


class StaticPasses:
    """Every static shape of one model and cache, made (captured) at construction."""

    def __init__(self, model: Transformer, cache: KVCache, plan: PassPlan,
                 capture: Capture) -> None:
        if cache.scratch_slot < 0:
            raise ValueError("cache: static passes need a cache with a scratch slot")
        self.model, self.cache, self.plan = model, cache, plan
        self.vocab = int(model.cfg.vocab_size)
        self.passes: dict[PassShape, tuple[PassInputs, Replayer]] = {}
        self.loops: dict[PassShape, tuple[PassInputs, Replayer, torch.Tensor | None]] = {}
        t0 = time.perf_counter()
        grid = plan.fused is not None or plan.draft_k > 0
        kinds = FusedKinds(model, cache, plan.fused) if grid else None
        for shape in plan.shapes(cache.max_len):
            inp: PassInputs
            if kinds is not None:
                grid_inp = FusedInputs(shape, cache.device)
                inp, fn = grid_inp, kinds.bind(grid_inp)
            else:
                inp = PassInputs(shape, cache.device)
                fn = _bind(model, cache, inp, plan.compile)
            self.passes[shape] = (inp, capture(fn, cache.device))
        for shape in plan.shapes(cache.max_len) if plan.draft_k else ():
            if kinds is not None and (shape.only_last or shape.tokens == 1):
                loop_inp = FusedInputs(shape, cache.device)
                run, probs = bind_loop(kinds, loop_inp, plan.draft_k, self.vocab,
                                       plan.draft_probs)
                self.loops[shape] = (loop_inp, capture(run, cache.device), probs)
        self.setup_s = time.perf_counter() - t0
        self._widths = sorted({s.tokens for s in self.passes})
        self._rows = sorted({s.rows for s in self.passes})
        self._spans = sorted({s.span for s in self.passes})

    def info(self) -> dict[str, object]:
        out: dict[str, object] = {"static_shapes": len(self.passes),
                                  "static_setup_s": self.setup_s, "widths": self._widths,
                                  "rows": self._rows, "spans": self._spans}
        if self.loops:
            out["draft_loops"] = len(self.loops)
        return out

    def select(self, n: int, width: int, span: int, only_last: bool,
               among: Any = None) -> PassShape | None:
        """The smallest shape holding n rows of width tokens over span keys; an only_last
        request may take a full-width shape (its last tokens are picked after).  ``among``:
        the shapes to choose from (default: the passes')."""
        best = None
        for shape in self.passes if among is None else among:
            if (shape.rows < n or shape.tokens < width or shape.span < span
                    or (shape.only_last and not only_last)):
                continue
            key = (shape.tokens, shape.rows, shape.span, not shape.only_last)
            if best is None or key < best[0]:
                best = (key, shape)
        return None if best is None else best[1]

    def forward(self, slots: list[int], rows: list[list[int]] | None, only_last: bool,
                tokens: torch.Tensor | None = None) -> torch.Tensor | None:
        """Append ``rows`` (host lists; or ``tokens`` [n, 1] on the device when rows is None)
        to ``slots``; logits [n, W, V] ([n, 1, V] with only_last), or None if no shape fits.
        Host lists are checked by the caller (`Transformer._check_rows`)."""
        n = len(slots)
        lens = [len(r) for r in rows] if rows is not None else [1] * n
        start = [self.cache.host_lengths[s] for s in slots]
        span = max(a + b for a, b in zip(start, lens))
        shape = self.select(n, max(lens), span, only_last)
        if shape is None:
            return None
        inp, replayer = self.passes[shape]
        inp.fill(inp.pack(shape, rows, slots, start, self.cache.scratch_slot))
        if tokens is not None:
            inp.fill_tokens(tokens)
        out = replayer.replay()
        for s, a, b in zip(slots, start, lens):
            self.cache.host_lengths[s] = a + b
        if only_last and not shape.only_last and shape.tokens > 1:
            last = host_to_device(torch.tensor([x - 1 for x in lens], dtype=torch.long),
                                  out.device)
            return out[:n].gather(1, last.view(n, 1, 1).expand(n, 1, out.shape[-1]))
        return out[:n, :1] if only_last else out[:n]


    def draft(self, slots: list[int], rows: list[list[int]], k: int
              ) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        """The drafter's k passes as one replay: append ``rows`` (each row's unseen tokens) and
        k - 1 greedy picks to ``slots``; the picks [n, k] and each step's softmax [n, k, V]
        (None unless the plan keeps them), both on the device; None if no k-pass shape fits
        or ``k`` is not the plan's.  Host lists are checked by the caller."""
        if k != self.plan.draft_k or not self.loops:
            return None
        lens = [len(r) for r in rows]
        start = [self.cache.host_lengths[s] for s in slots]
        span = max(a + b for a, b in zip(start, lens)) + k - 1
        shape = self.select(len(slots), max(lens), span, True, among=self.loops)
        if shape is None:
            return None
        inp, replayer, probs = self.loops[shape]
        inp.fill(inp.pack(shape, rows, slots, start, self.cache.scratch_slot))
        picks = replayer.replay()
        for s, a, b in zip(slots, start, lens):
            self.cache.host_lengths[s] = a + b + k - 1
        n = len(slots)
        return picks[:n], (probs[:n] if probs is not None else None)


def _bind(model: Transformer, cache: KVCache, inp: PassInputs, compile_mode: str = "off"
          ) -> Callable[[], torch.Tensor]:
    forward: Callable[..., torch.Tensor] = static_forward
    if compile_mode != "off":       # a fresh compiled function per shape: shapes are static
        forward = torch.compile(static_forward, dynamic=False,
                                backend="eager" if compile_mode == "eager" else "inductor")

    def run() -> torch.Tensor:
        with torch.inference_mode():
            return forward(model, cache, inp)
    return run
