"""Graph-safe forward passes: fixed shapes per bucket, every index on the device.

A *static pass* appends ``T`` tokens per row to ``Bp`` cache slots and returns logits, like
`Transformer.forward_planned`, but nothing in it depends on host values: the batch is padded
to a bucket (``Bp`` rows), every row carries ``T`` token places (the pass kind fixes ``T``: 1
for an AR or drafting pass, ``k + 1`` for a verification), and attention reads a fixed key
span ``S`` with the mask built on the device from device-side start lengths.  The inputs live
in one static int64 buffer (`PassInputs`), written by one host-to-device copy before the pass;
so the same pass can be captured once as a CUDA graph and replayed (`runtime.pass_graphs`).

Padding never touches a real row: a padding row (and a row's places past its token count)
writes its K/V into the cache's scratch slot (`KVCache.scratch_slot`, never handed to a
sequence) and reads only that slot.  Positions past a row's count are computed and thrown away.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from psdlab.runtime.kv_cache import KVCache
from psdlab.runtime.model import Transformer, pinned

#: key spans are multiples of this (and the largest is the cache's max_len)
SPAN_QUANTUM = 64


def batch_buckets(max_rows: int) -> tuple[int, ...]:
    """1, 2, 4, ... up to the first power of two >= max_rows, the last one capped at max_rows."""
    out, b = [], 1
    while b < max_rows:
        out.append(b)
        b *= 2
    out.append(max_rows)
    return tuple(out)


def span_buckets(max_len: int, quantum: int = SPAN_QUANTUM) -> tuple[int, ...]:
    """quantum, 2 quantum, 4 quantum, ... below max_len, then max_len."""
    out, s = [], quantum
    while s < max_len:
        out.append(s)
        s *= 2
    out.append(max_len)
    return tuple(out)


def bucket_of(n: int, buckets: tuple[int, ...], field: str = "rows") -> int:
    """The smallest bucket >= n; ValueError naming the field when none is."""
    for b in buckets:
        if b >= n:
            return b
    raise ValueError(f"{field}: {n} is more than the largest bucket {buckets[-1]}")


@dataclass(frozen=True)
class PassShape:
    """One bucket of one pass kind: ``rows`` x ``tokens`` places, keys over ``span``."""
    rows: int
    tokens: int
    span: int
    only_last: bool = False


class PassInputs:
    """The pass's static inputs in one int64 device buffer: tokens [Bp, T], then per row its
    slot, its start length and its token count.  ``fill`` writes them with one copy."""

    def __init__(self, shape: PassShape, device: torch.device) -> None:
        self.shape = shape
        b, t = shape.rows, shape.tokens
        self.buf = torch.zeros(b * (t + 3), dtype=torch.long, device=device)
        self.tokens = self.buf[:b * t].view(b, t)
        self.slots, self.start, self.num = (self.buf[b * t + i * b:b * t + (i + 1) * b]
                                            for i in range(3))

    @staticmethod
    def pack(shape: PassShape, rows: list[list[int]] | None, slots: list[int],
             start: list[int], scratch: int) -> torch.Tensor:
        """The host image of the buffer: real rows first, padding rows on the scratch slot.
        ``rows`` None: the tokens are copied from the device separately (`fill_tokens`)."""
        b, t = shape.rows, shape.tokens
        n = len(slots)
        flat = [0] * (b * t)
        num = [0] * b
        for i in range(n):
            r = rows[i] if rows is not None else [0]
            flat[i * t:i * t + len(r)] = r
            num[i] = len(r)
        pad = b - n
        return torch.tensor(flat + list(slots) + [scratch] * pad + list(start) + [0] * pad + num,
                            dtype=torch.long)

    def fill(self, host: torch.Tensor) -> None:
        self.buf.copy_(pinned(host, self.buf.device), non_blocking=True)

    def fill_tokens(self, tokens: torch.Tensor) -> None:
        """Rows' tokens from the device (the previous pass's picks) [n, T'] with T' <= T."""
        n, width = tokens.shape
        self.tokens[:n, :width].copy_(tokens)


def static_forward(model: Transformer, cache: KVCache, inp: PassInputs) -> torch.Tensor:
    """The pass itself (device ops only): logits [Bp, T, V] ([Bp, 1, V] at each row's last
    token with ``only_last``).  Writes the real tokens' K/V into their slots, the rest into
    the scratch slot, and the rows' new lengths into ``cache.lengths``."""
    shape = inp.shape
    dev = inp.buf.device
    b, t, span = shape.rows, shape.tokens, shape.span
    steps = torch.arange(t, device=dev)
    pos = inp.start[:, None] + steps                                # [Bp, T]
    valid = steps[None] < inp.num[:, None]                          # [Bp, T]
    scratch = cache.scratch_slot
    w_slot = torch.where(valid, inp.slots[:, None], scratch).reshape(-1)
    w_pos = torch.where(valid, pos, steps[None]).reshape(-1)       # scratch: columns 0..T-1
    r_slot = torch.where(inp.num > 0, inp.slots, scratch)
    new_len = inp.start + inp.num
    keys = torch.arange(span, device=dev)
    mask = (((keys <= pos[:, :, None]) & (keys < new_len[:, None, None])) | (keys == 0))
    heads = torch.arange(cache.cfg.num_kv_heads, device=dev)

    def hook(layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        kc, vc = cache.k[layer], cache.v[layer]
        # [Bp, H, T, D] -> [Bp*T, H, D], written at (slot, head, position)
        kn = k.transpose(1, 2).reshape(b * t, -1, k.shape[-1]).to(kc.dtype)
        vn = v.transpose(1, 2).reshape(b * t, -1, v.shape[-1]).to(vc.dtype)
        kc.index_put_((w_slot[:, None], heads[None], w_pos[:, None]), kn)
        vc.index_put_((w_slot[:, None], heads[None], w_pos[:, None]), vn)
        keys_ = kc[:, :, :span].index_select(0, r_slot)
        values = vc[:, :, :span].index_select(0, r_slot)
        return keys_.to(k.dtype), values.to(v.dtype)

    x = model._run(torch.where(valid, inp.tokens, 0), pos, mask[:, None], hook)
    cache.lengths.index_copy_(0, r_slot, torch.where(inp.num > 0, new_len, 0))
    if shape.only_last:
        last = (inp.num - 1).clamp(min=0)
        x = x[torch.arange(b, device=dev), last][:, None]
    return model._head(x)
