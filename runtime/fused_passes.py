"""Static passes compiled once per pass kind, and the drafter's k passes as one callable.

`runtime.pass_graphs` makes one static pass per shape (pass width x batch bucket x key-span
bucket).  Compiling each shape with inductor fuses its ~50 small kernels per layer but costs a
compile per shape (about 21 s each on an H200, 24 shapes per model).  Here each *pass kind*
(tokens per row, only the last token's logits) is compiled once with the batch bucket and the
key span symbolic (``torch._dynamo.mark_dynamic``): every bucket of the kind reuses the one
compiled graph, and on CUDA each bucket is then captured as a CUDA graph from it
(`pass_graphs.capture_cuda`), so a pass is one replay of fused kernels.

The inputs of a fused shape (`FusedInputs`) hold the same numbers as `PassInputs` in one int64
buffer viewed as ``[T + 3, Bp]`` (the tokens transposed, then each row's slot, start length and
token count): one tensor whose second dimension is the batch bucket, and ``keys`` =
arange(span), whose length is the span; every size inside the pass comes from those two
(`static_pass.pass_body`).  Batch bucket 1 is left out where ``max_rows`` > 1 (a one-row call
takes bucket 2): dynamo specialises a dimension of size 1, which would compile a second graph.

`draft_loop` is the drafter's drafting phase as one callable: the first pass over each row's
unseen tokens, then k - 1 one-token passes, each fed the greedy argmax of the last on the
device; the proposals [Bp, k] and, when asked, each step's softmax [Bp, k, V] stay on the device
(the verify reads them there).  Captured once per shape, the k passes are one replay with no
host gap between them.
"""
from __future__ import annotations

import types
from typing import Any, Callable

import torch

from psdlab.runtime.kv_cache import KVCache
from psdlab.runtime.model import Transformer, pinned
from psdlab.runtime.static_pass import PassInputs, PassShape, pass_body

#: a single pass on fused inputs: (grid [T + 3, Bp], keys [span], T, only_last) -> logits
SinglePass = Callable[[torch.Tensor, torch.Tensor, int, bool], torch.Tensor]


def fused_batch_buckets(buckets: tuple[int, ...]) -> tuple[int, ...]:
    """The batch buckets of a fused kind: ``buckets`` without 1 unless 1 is the only one."""
    kept = tuple(b for b in buckets if b > 1)
    return kept or buckets


class FusedInputs(PassInputs):
    """`PassInputs` laid out as ``grid`` [T + 3, Bp] (tokens transposed, then slots, start
    lengths, token counts) plus ``keys`` = arange(span); the batch and span dimensions are
    marked dynamic, so one compiled graph takes every bucket."""

    def __init__(self, shape: PassShape, device: torch.device) -> None:
        self.shape = shape
        b, t = shape.rows, shape.tokens
        # the grid is the buffer itself, not a view of one: a compiled graph guards on a
        # view's base, which the drafting loop's grids (`draft_loop`) do not have
        self.grid = self.buf = torch.zeros((t + 3, b), dtype=torch.long, device=device)
        self.tokens = self.grid[:t].T                   # [Bp, T], a view
        self.slots, self.start, self.num = self.grid[t], self.grid[t + 1], self.grid[t + 2]
        self.keys = torch.arange(shape.span, device=device)
        if b > 1:
            torch._dynamo.mark_dynamic(self.grid, 1)
        torch._dynamo.mark_dynamic(self.keys, 0)

    def fill(self, host: torch.Tensor) -> None:
        """Write the host image (`pack`) with one copy."""
        self.grid.copy_(pinned(host, self.grid.device).view(self.grid.shape), non_blocking=True)

    @staticmethod
    def pack(shape: PassShape, rows: list[list[int]] | None, slots: list[int],
             start: list[int], scratch: int) -> torch.Tensor:
        """`PassInputs.pack`'s numbers in the grid's order (tokens column by column)."""
        flat = PassInputs.pack(shape, rows, slots, start, scratch)
        b, t = shape.rows, shape.tokens
        return torch.cat((flat[:b * t].view(b, t).T.reshape(-1), flat[b * t:]))


def fused_pass(model: Transformer, cache: KVCache, grid: torch.Tensor, keys: torch.Tensor,
               tokens: int, only_last: bool) -> torch.Tensor:
    """One static pass of ``tokens`` places per row on a grid (`FusedInputs`): logits
    [Bp, T, V] ([Bp, 1, V] with only_last), as `static_pass.static_forward` gives."""
    t = tokens
    return pass_body(model, cache, grid[:t].T, grid[t], grid[t + 1], grid[t + 2], keys,
                     only_last, gather_span=True)


def _fresh_copy(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``fn`` with a code object of its own named ``name``: dynamo keeps its compiled graphs
    per code object and what it learnt of their shapes (which dimensions and ints changed
    between calls) per file, line and name, so each kind of each model gets its own and sees
    one width and one only_last: they stay constants, and only the marked dims are dynamic."""
    code = fn.__code__.replace(co_name=name, co_qualname=name)
    return types.FunctionType(code, fn.__globals__, name, fn.__defaults__, fn.__closure__)


class FusedKinds:
    """One model and cache's single passes: compiled by ``backend`` once per pass kind
    (tokens, only_last) on first use (``backend`` None: run eagerly, the uncompiled
    reference).  ``fullgraph``: a graph break is an error, not a silent split of the fused
    region."""

    _made = 0           # compiled kinds made in this process (each name unique)

    def __init__(self, model: Transformer, cache: KVCache, backend: Any) -> None:
        self.model, self.cache = model, cache
        self.backend = backend
        self._fns: dict[tuple[int, bool], Callable[..., torch.Tensor]] = {}
        # the model keeps its RoPE frequencies per device in a dict filled on first use: fill
        # it now, or the first compile would guard on its being empty and compile again
        model._rope(torch.zeros((1, 1), dtype=torch.long, device=cache.device), torch.float32)

    def _fn(self, tokens: int, only_last: bool) -> Callable[..., torch.Tensor]:
        fn = self._fns.get((tokens, only_last))
        if fn is None:
            fn = fused_pass
            if self.backend is not None:
                FusedKinds._made += 1
                name = f"fused_pass_t{tokens}{'_last' if only_last else ''}_{FusedKinds._made}"
                fn = torch.compile(_fresh_copy(fused_pass, name), backend=self.backend,
                                   fullgraph=True)
            self._fns[(tokens, only_last)] = fn
        return fn

    def __call__(self, grid: torch.Tensor, keys: torch.Tensor, tokens: int,
                 only_last: bool) -> torch.Tensor:
        return self._fn(tokens, only_last)(self.model, self.cache, grid, keys, tokens,
                                           only_last)

    def bind(self, inp: FusedInputs) -> Callable[[], torch.Tensor]:
        """The pass of ``inp``'s shape as a no-argument callable (what capture takes)."""
        shape = inp.shape

        def run() -> torch.Tensor:
            with torch.no_grad():       # not inference_mode: see `bind_loop`
                return self(inp.grid, inp.keys, shape.tokens, shape.only_last)
        return run


def draft_loop(single: SinglePass, inp: FusedInputs, k: int,
               probs_out: torch.Tensor | None = None) -> torch.Tensor:
    """The drafter's k passes: the first over ``inp`` (each row's unseen tokens; its last
    token's logits), then k - 1 one-token passes, each on the greedy pick of the pass before,
    all on the device.  Returns the picks [Bp, k]; writes each step's softmax (fp32) into
    ``probs_out`` [Bp, k, V] when given.  The rows' cache lengths grow by their token count
    plus k - 1 (padding rows stay on the scratch slot)."""
    shape = inp.shape
    if not (shape.only_last or shape.tokens == 1):
        raise ValueError("shape: a drafting loop starts from an only_last or one-token pass")
    logits = single(inp.grid, inp.keys, shape.tokens, shape.only_last)[:, 0]
    slots, start, num = inp.slots, inp.start, inp.num
    picks = []
    for j in range(k):
        tok = logits.argmax(-1)
        picks.append(tok)
        if probs_out is not None:
            probs_out[:, j].copy_(torch.softmax(logits.float(), dim=-1))
        if j == k - 1:
            break
        start = start + num
        num = (num > 0).to(num.dtype)
        grid = torch.stack((tok, slots, start, num))
        if shape.rows > 1:              # marked as the buffers are: the same compiled graph
            torch._dynamo.mark_dynamic(grid, 1)
        logits = single(grid, inp.keys, 1, False)[:, 0]
    return torch.stack(picks, dim=1)


def bind_loop(single: SinglePass, inp: FusedInputs, k: int, vocab: int,
              with_probs: bool) -> tuple[Callable[[], torch.Tensor], torch.Tensor | None]:
    """`draft_loop` over ``inp`` as a no-argument callable, and its probabilities' buffer."""
    probs = (torch.zeros((inp.shape.rows, k, vocab), dtype=torch.float32,
                         device=inp.buf.device) if with_probs else None)

    def run() -> torch.Tensor:
        # no_grad, not inference_mode: the loop's one-token grids are made inside it, and an
        # inference tensor's dispatch keys differ from the buffers' (a guard, a recompile)
        with torch.no_grad():
            return draft_loop(single, inp, k, probs)
    return run, probs
