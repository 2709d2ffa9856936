"""Linear layers with oneDNN-packed weights, for inference on CPU.

`torch.nn.Linear` on CPU multiplies by the weight through MKL in its row-major [out, in]
layout; for the few rows of a decode or verify pass that reads the weights at a fraction of
the memory bandwidth.  vLLM's CPU backend reorders every weight once, at load, into oneDNN's
blocked layout and multiplies with a cached primitive (``onednn_mm``); `pack_linears` does the
same for psdlab's runner with PyTorch's own oneDNN ops (``torch.ops.mkldnn``:
``_reorder_linear_weight`` at load, ``_linear_pointwise`` per pass).

Measured on this project's 2-core VM (one core, 2026-12-01, ``benchmarks/bench_cpu_linear.py``;
git history holds the file): the matrix products of one 4-row pass of SmolLM2-135M take 73.3 ms with
``nn.Linear`` and 44.6 ms packed in float32 (38.3 and 25.3 ms
in bfloat16); the runner's draft call (4 rows, k = 4) of the target in float32 372 and 245 ms.
On that machine packed products were also invariant to the number of rows, bit for bit (a
row's result did not depend on the rows beside it; MKL's are not in float32), and showed none
of MKL's slow row counts (9-15 rows); other CPUs' kernels may block rows differently.

Packing is used only where it is known to work: a CPU tensor, float32 (or bfloat16 where oneDNN
has native bf16), a PyTorch built with oneDNN, and a self-check against ``F.linear`` at load;
anything else keeps ``nn.Linear``.  The dense weights a packed layer replaces are dropped (a
tied output head keeps the embedding's dense copy for the lookup and gets its own packed one).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

#: rows the packed layout is tuned for (oneDNN's batch-size hint; any row count works)
ROWS_HINT = 4


def packing_supported(dtype: torch.dtype) -> bool:
    """True when this PyTorch can pack linear weights of ``dtype`` for CPU and the packed
    product agrees with ``F.linear`` on a small check."""
    if dtype not in (torch.float32, torch.bfloat16) or not torch.backends.mkldnn.is_available():
        return False
    ops = torch.ops.mkldnn
    if not (hasattr(ops, "_reorder_linear_weight") and hasattr(ops, "_linear_pointwise")):
        return False
    if dtype == torch.bfloat16 and not ops._is_mkldnn_bf16_supported():
        return False
    try:
        g = torch.Generator().manual_seed(0)
        w = torch.randn(24, 16, generator=g).to(dtype)
        x = torch.randn(3, 16, generator=g).to(dtype)
        got = PackedLinear(w, None)(x).float()
        want = F.linear(x, w).float()
    except (RuntimeError, NotImplementedError):
        return False
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    return bool(torch.allclose(got, want, rtol=tol, atol=tol * float(want.abs().max())))


class PackedLinear(nn.Module):
    """``y = x W^T + b`` with W held in oneDNN's packed layout (inference only)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        with torch.no_grad():
            self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), ROWS_HINT)
            self.bias = None if bias is None else bias.detach().clone()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, packed"


def pack_linears(model: nn.Module) -> int:
    """Replace every CPU ``nn.Linear`` of ``model`` by a `PackedLinear` when
    `packing_supported` for its dtype; returns how many were replaced (0: left as is)."""
    targets = [(parent, name, child) for parent in model.modules()
               for name, child in parent.named_children() if type(child) is nn.Linear]
    if not targets:
        return 0
    weight = targets[0][2].weight
    if weight.device.type != "cpu" or not packing_supported(weight.dtype):
        return 0
    for parent, name, child in targets:
        setattr(parent, name, PackedLinear(child.weight, child.bias))
    return len(targets)
