"""Slot-based KV cache with ragged per-sequence lengths and cheap rollback.

Each of `max_slots` slots holds one sequence.  Per layer, K and V are tensors
[max_slots, num_kv_heads, max_len, head_dim]; `lengths[s]` is how many positions of slot s are
valid.  Entries at positions >= lengths[s] are stale and never read (the model masks them), so
rolling back after a rejected draft is just lowering `lengths` (`truncate`), and freeing a slot
is setting its length to 0 (`reset`).
"""
from __future__ import annotations

import torch

from psdlab.analysis.checks import check_int
from psdlab.runtime.config import ModelConfig


class KVCache:
    """Per-layer K/V storage for `max_slots` sequences of up to `max_len` tokens each."""

    def __init__(self, cfg: ModelConfig, max_slots: int, max_len: int,
                 device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> None:
        self.cfg = cfg
        self.max_slots = check_int("max_slots", max_slots, minimum=1)
        self.max_len = check_int("max_len", max_len, minimum=1)
        self.device = torch.device(device)
        self.dtype = dtype
        shape = (self.max_slots, cfg.num_kv_heads, self.max_len, cfg.head_dim)
        self.k = [torch.zeros(shape, device=self.device, dtype=dtype) for _ in range(cfg.num_layers)]
        self.v = [torch.zeros(shape, device=self.device, dtype=dtype) for _ in range(cfg.num_layers)]
        self.lengths = torch.zeros(self.max_slots, dtype=torch.long, device=self.device)

    @property
    def nbytes(self) -> int:
        """Bytes held by the K and V tensors."""
        return sum(t.numel() * t.element_size() for t in self.k + self.v)

    def as_slots(self, slots: torch.Tensor | list[int] | int) -> torch.Tensor:
        """slots as a LongTensor on the cache device; ValueError if out of range."""
        s = torch.as_tensor(slots, dtype=torch.long, device=self.device).reshape(-1)
        if s.numel() and (int(s.min()) < 0 or int(s.max()) >= self.max_slots):
            raise ValueError(f"slots: must be in [0, {self.max_slots - 1}], got {s.tolist()}")
        return s

    def check_append(self, slots: torch.Tensor, num_new: torch.Tensor) -> None:
        """Raise ValueError (naming max_len) if appending num_new tokens would overflow a slot."""
        new_len = self.lengths[slots] + num_new.to(self.device)
        if new_len.numel() and int(new_len.max()) > self.max_len:
            worst = int(new_len.argmax())
            raise ValueError(
                f"max_len: sequence in slot {int(slots[worst])} would reach "
                f"{int(new_len[worst])} tokens, more than max_len={self.max_len}")

    def truncate(self, slots: torch.Tensor | list[int] | int,
                 new_lengths: torch.Tensor | list[int] | int) -> None:
        """Roll slots back to new_lengths (<= their current lengths); O(1), no data moved."""
        s = self.as_slots(slots)
        n = torch.as_tensor(new_lengths, dtype=torch.long, device=self.device).reshape(-1)
        if n.numel() == 1 and s.numel() != 1:
            n = n.expand(s.numel())
        if n.shape != s.shape:
            raise ValueError(f"new_lengths: expected {s.numel()} values, got {n.numel()}")
        cur = self.lengths[s]
        if n.numel() and (bool((n < 0).any()) or bool((n > cur).any())):
            raise ValueError(f"new_lengths: must be in [0, current length] per slot, got "
                             f"{n.tolist()} for current lengths {cur.tolist()}")
        self.lengths[s] = n

    def reset(self, slots: torch.Tensor | list[int] | int | None = None) -> None:
        """Free slots (all slots when None) by setting their lengths to 0."""
        if slots is None:
            self.lengths.zero_()
            return
        self.lengths[self.as_slots(slots)] = 0

    def __repr__(self) -> str:
        return (f"KVCache(max_slots={self.max_slots}, max_len={self.max_len}, "
                f"layers={self.cfg.num_layers}, device={self.device}, dtype={self.dtype})")
