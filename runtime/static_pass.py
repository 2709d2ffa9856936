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
    keys = torch.arange(inp.shape.span, device=inp.buf.device)
    return pass_body(model, cache, inp.tokens, inp.slots, inp.start, inp.num, keys,
                     inp.shape.only_last)


def pass_body(model: Transformer, cache: KVCache, tokens: torch.Tensor, slots: torch.Tensor,
              start: torch.Tensor, num: torch.Tensor, keys: torch.Tensor,
              only_last: bool, gather_span: bool = False) -> torch.Tensor:
    """`static_forward` on tensors alone: tokens [Bp, T], per row its slot, start length and
    token count [Bp], and the key places ``keys`` = arange(span).  Every size comes from a
    tensor's shape, so a compiler may keep Bp and the span symbolic (`runtime.fused_passes`).
    ``gather_span``: read each row's keys with one gather at (slot, head, ``keys``) instead of
    a slice of the span then a gather of the slots (the same values; a slice is a view whose
    strides differ when the span is the cache's whole length, which a compiler would guard
    on and compile again)."""
    dev = tokens.device
    b, t = tokens.shape
    span = keys.shape[0]
    steps = torch.arange(t, device=dev)
    pos = start[:, None] + steps                                    # [Bp, T]
    valid = steps[None] < num[:, None]                              # [Bp, T]
    scratch = cache.scratch_slot
    w_slot = torch.where(valid, slots[:, None], scratch).reshape(-1)
    w_pos = torch.where(valid, pos, steps[None]).reshape(-1)       # scratch: columns 0..T-1
    r_slot = torch.where(num > 0, slots, scratch)
    new_len = start + num
    mask = (((keys <= pos[:, :, None]) & (keys < new_len[:, None, None])) | (keys == 0))
    heads = torch.arange(cache.cfg.num_kv_heads, device=dev)

    def hook(layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        kc, vc = cache.k[layer], cache.v[layer]
        # [Bp, H, T, D] -> [Bp*T, H, D], written at (slot, head, position)
        kn = k.transpose(1, 2).reshape(b * t, -1, k.shape[-1]).to(kc.dtype)
        vn = v.transpose(1, 2).reshape(b * t, -1, v.shape[-1]).to(vc.dtype)
        kc.index_put_((w_slot[:, None], heads[None], w_pos[:, None]), kn)
        vc.index_put_((w_slot[:, None], heads[None], w_pos[:, None]), vn)
        if gather_span:
            where = (r_slot[:, None, None], heads[None, :, None], keys[None, None, :])
            keys_, values = kc[where], vc[where]
        else:
            keys_ = kc[:, :, :span].index_select(0, r_slot)
            values = vc[:, :, :span].index_select(0, r_slot)
        return keys_.to(k.dtype), values.to(v.dtype)

    x = model._run(torch.where(valid, tokens, 0), pos, mask[:, None], hook)
    cache.lengths.index_copy_(0, r_slot, torch.where(num > 0, new_len, 0))
    if only_last:
        last = (num - 1).clamp(min=0)
        x = x[torch.arange(b, device=dev), last][:, None]
    return model._head(x)
