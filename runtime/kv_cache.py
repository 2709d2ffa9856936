"""Slot-based KV cache with ragged per-sequence lengths and cheap rollback.

Each of `max_slots` slots holds one sequence.  Per layer, K and V are tensors
[max_slots, num_kv_heads, max_len, head_dim]; `lengths[s]` is how many positions of slot s are
valid.  Entries at positions >= lengths[s] are stale and never read (the model masks them), so
rolling back after a rejected draft is just lowering `lengths` (`truncate`), and freeing a slot
is setting its length to 0 (`reset`).

The lengths live twice: ``lengths`` on the device (what the attention mask reads) and
``host_lengths`` (a Python list, the same numbers) so that planning a forward -- spans, write
positions, bounds checks -- needs no device-to-host copy: on a GPU every such copy is a sync
that stalls the host until the stream drains.  Every change goes through this class, which
updates both.
"""
from __future__ import annotations

import torch

from psdlab.analysis.checks import check_int
from psdlab.runtime.model_config import ModelConfig


class KVCache:
    """Per-layer K/V storage for `max_slots` sequences of up to `max_len` tokens each."""

    def __init__(self, cfg: ModelConfig, max_slots: int, max_len: int,
                 device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                 scratch: bool = False) -> None:
        self.cfg = cfg
        self.max_slots = check_int("max_slots", max_slots, minimum=1)
        self.max_len = check_int("max_len", max_len, minimum=1)
        self.device = torch.device(device)
        self.dtype = dtype
        # static passes (`runtime.static_pass`) send padding to one more slot, never a sequence's
        self.scratch_slot = self.max_slots if scratch else -1
        rows = self.max_slots + (1 if scratch else 0)
        shape = (rows, cfg.num_kv_heads, self.max_len, cfg.head_dim)
        self.k = [torch.zeros(shape, device=self.device, dtype=dtype)
                  for _ in range(cfg.num_layers)]
        self.v = [torch.zeros(shape, device=self.device, dtype=dtype)
                  for _ in range(cfg.num_layers)]
        self.lengths = torch.zeros(rows, dtype=torch.long, device=self.device)
        self.host_lengths: list[int] = [0] * self.max_slots

    @property
    def nbytes(self) -> int:
        """Bytes held by the K and V tensors."""
        return sum(t.numel() * t.element_size() for t in self.k + self.v)

    def check_slots(self, slots: list[int]) -> list[int]:
        """Host-side range check of slot ids; ValueError naming the field."""
        if slots and (min(slots) < 0 or max(slots) >= self.max_slots):
            raise ValueError(f"slots: must be in [0, {self.max_slots - 1}], got {slots}")
        return slots

    def check_append(self, slots: list[int], num_new: list[int]) -> list[int]:
        """New lengths after appending; ValueError (naming max_len) if a slot would overflow."""
        new_len = [self.host_lengths[s] + n for s, n in zip(slots, num_new)]
        if new_len and max(new_len) > self.max_len:
            worst = max(range(len(new_len)), key=new_len.__getitem__)
            raise ValueError(
                f"max_len: sequence in slot {slots[worst]} would reach "
                f"{new_len[worst]} tokens, more than max_len={self.max_len}")
        return new_len

    def advance(self, slots: list[int], slots_dev: torch.Tensor, new_len: list[int],
                new_len_dev: torch.Tensor) -> None:
        """Record appended tokens: the same new lengths on the host and on the device."""
        for s, n in zip(slots, new_len):
            self.host_lengths[s] = n
        self.lengths[slots_dev] = new_len_dev

    def truncate(self, slots: torch.Tensor | list[int] | int,
                 new_lengths: torch.Tensor | list[int] | int) -> None:
        """Roll slots back to new_lengths (<= their current lengths); O(1), no data moved."""
        s = self.check_slots(_ints(slots))
        n = _ints(new_lengths)
        if len(n) == 1 and len(s) != 1:
            n = n * len(s)
        if len(n) != len(s):
            raise ValueError(f"new_lengths: expected {len(s)} values, got {len(n)}")
        cur = [self.host_lengths[x] for x in s]
        if any(v < 0 or v > c for v, c in zip(n, cur)):
            raise ValueError(f"new_lengths: must be in [0, current length] per slot, got "
                             f"{n} for current lengths {cur}")
        self._set(s, n)

    def reset(self, slots: torch.Tensor | list[int] | int | None = None) -> None:
        """Free slots (all slots when None) by setting their lengths to 0."""
        if slots is None:
            self.lengths.zero_()
            self.host_lengths = [0] * self.max_slots
            return
        s = self.check_slots(_ints(slots))
        self._set(s, [0] * len(s))

    def _set(self, slots: list[int], values: list[int]) -> None:
        if not slots:
            return
        for x, v in zip(slots, values):
            self.host_lengths[x] = v
        idx = torch.tensor(slots, dtype=torch.long).to(self.device)
        self.lengths[idx] = torch.tensor(values, dtype=torch.long).to(self.device)

    def __repr__(self) -> str:
        return (f"KVCache(max_slots={self.max_slots}, max_len={self.max_len}, "
                f"layers={self.cfg.num_layers}, device={self.device}, dtype={self.dtype})")


def _ints(x: torch.Tensor | list[int] | int) -> list[int]:
    """Host ints of a tensor, list or int (a tensor on a GPU is copied: the generic path)."""
    if isinstance(x, torch.Tensor):
        return [int(v) for v in x.reshape(-1).tolist()]
    if isinstance(x, int):
        return [x]
    return [int(v) for v in x]
