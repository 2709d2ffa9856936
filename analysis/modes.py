"""The serving modes, named once: ``Mode`` and the sets of modes each layer accepts.

- ``ar``: autoregressive decoding, no drafter.
- ``sd``: speculative decoding, drafter and target alternate on the target's device(s).
- ``sd-sep``: SD with the drafter on its own device (still alternating).
- ``psd``: batch-parallel SD, two batches: one drafts while the other verifies.
- ``adaptive``: a policy picks AR, SD(k) or PSD(k) step by step (``analysis.adaptive_policy``).

Modes are plain strings in configs, traces and CSVs; ``Mode`` is their type.
"""
from __future__ import annotations

from typing import Any, Literal, cast, get_args

__all__ = ["Mode", "SERVER_MODES", "TRACE_MODES", "STEP_MODES", "SPEC_MODES", "VLLM_MODES",
           "DRAFTING_MODES", "check_mode"]

Mode = Literal["ar", "sd", "sd-sep", "psd", "adaptive"]

#: every mode a simulated or real server runs in (``[server] mode``)
SERVER_MODES: tuple[Mode, ...] = get_args(Mode)
#: the fixed modes a trace's run records (adaptive runs record steps of these)
TRACE_MODES: tuple[Mode, ...] = ("ar", "sd", "sd-sep", "psd")
#: what the adaptive policy switches between, one step at a time
STEP_MODES: tuple[Mode, ...] = ("ar", "sd", "psd")
#: the modes with a drafter in a theory comparison
SPEC_MODES: tuple[Mode, ...] = ("sd", "psd")
#: the fixed modes whose traces have drafting phases (the figures' and reports' SD/PSD runs)
DRAFTING_MODES: tuple[Mode, ...] = ("sd", "sd-sep", "psd")
#: what psdlab runs inside vLLM (``psdlab run --engine vllm``, ``runtime.vllm_ext``): ``sd`` is
#: vLLM's own draft-model SD; ``sd-sep`` and ``adaptive`` have no vLLM counterpart
VLLM_MODES: tuple[Mode, ...] = ("ar", "sd", "psd")


def check_mode(name: str, value: Any, allowed: tuple[Mode, ...] = SERVER_MODES) -> Mode:
    """``value`` as a Mode, or a one-line ValueError naming ``name`` and the allowed modes."""
    if value not in allowed:
        raise ValueError(f"{name}: must be one of {', '.join(allowed)}, got {value!r}")
    return cast(Mode, value)
