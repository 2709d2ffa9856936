"""Block-based KV-cache capacity (vLLM style) and preemption by recomputation.

A running request whose cache holds ``ctx`` tokens needs ``ceil((ctx + k + 1) / block_size)``
blocks for its next step (the k drafts plus the bonus token are written during verification).
Before every step the server checks that the running requests' blocks fit in ``kv_blocks``; if
not it preempts requests (the most recently admitted first; the rebalance policy takes it from
the larger batch) until they fit.  A preempted request frees its blocks, goes back to the front
of the queue and, when admitted again, is prefilled anew over its prompt and the tokens it has
generated (recomputation); it keeps its output so far.  ``kv_blocks = 0`` means unlimited.
"""
from __future__ import annotations

import numpy as np


def blocks(ctx, lookahead, block_size: int):
    """Blocks needed for caches of ``ctx`` tokens plus ``lookahead`` (k + 1; vectorised)."""
    return (np.asarray(ctx, dtype=np.int64) + (np.asarray(lookahead) + block_size - 1)) \
        // block_size


def check_fits(prompt: np.ndarray, output: np.ndarray, lookahead, block_size: int,
               capacity: int) -> None:
    """Reject a workload with a request that could never fit alone in the KV cache."""
    if capacity <= 0 or prompt.size == 0:
        return
    need = blocks(prompt.astype(np.int64) + output, lookahead, block_size)
    worst = int(np.argmax(need))
    if need[worst] > capacity:
        raise ValueError(f"server.kv_blocks: request {worst} needs {int(need[worst])} blocks "
                         f"(prompt {int(prompt[worst])} + output {int(output[worst])} tokens, "
                         f"block_size {block_size}) but the capacity is {capacity}")
