"""The ways a runner may run its decode passes (``--passes``), as data in one registry.

Each `PassMode` says whether the passes are the graph-safe static ones (`runtime.static_pass`),
whether they are captured as CUDA graphs on a CUDA device (`runtime.pass_graphs`), whether
that needs CUDA, whether each pass kind is compiled once over every batch and key-span bucket
(`runtime.fused_passes`), and whether the drafter's k passes run as one callable (one graph on
CUDA).  ``auto`` is not a mode: `runtime.runner.resolve_passes` picks one per device.  No
torch here: the command-line parsers read the names.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PassMode:
    """One value of ``--passes``."""
    name: str
    static: bool            # the static passes (bucketed shapes, every index on the device)
    graphs: bool            # captured as CUDA graphs when the device is CUDA
    needs_cuda: bool        # refused on any other device
    fused: bool             # one torch.compile per pass kind, batch and span buckets dynamic
    draft_loop: bool        # the drafter's k passes in one callable (one graph on CUDA)
    help: str


PASS_MODES: dict[str, PassMode] = {m.name: m for m in (
    PassMode("dynamic", False, False, False, False, False,
             "host-planned shapes, eager (the CPU default)"),
    PassMode("static", True, False, False, False, False,
             "the static passes run eagerly (the reference the CPU tests check)"),
    PassMode("graphs", True, True, True, False, False,
             "static passes captured as CUDA graphs, one per shape"),
    PassMode("graphs-k", True, True, True, False, True,
             "graphs, and the drafter's k passes captured as one graph"),
    PassMode("fused", True, True, False, True, False,
             "static passes compiled once per pass kind (buckets dynamic), then one CUDA "
             "graph per bucket on CUDA"),
    PassMode("fused-k", True, True, False, True, True,
             "fused, and the drafter's k passes in one graph (the CUDA default)"),
)}

#: the values of ``--passes``: ``auto`` (`runtime.runner.resolve_passes`), then every mode
PASSES: tuple[str, ...] = ("auto", *PASS_MODES)

#: what ``auto`` is on a CUDA device with ``--compile off``
CUDA_DEFAULT_PASSES = "fused-k"
