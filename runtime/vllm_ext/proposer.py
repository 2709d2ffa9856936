"""A no-op proposer for vLLM's ``speculative_config.method="custom_class"``.

PSD drafts outside the model runner (in the drafter process, see `runtime.vllm_ext.psd_drafter`)
and hands the drafts to the scheduler; the runner only needs speculative decoding switched on
so that scheduled draft tokens are verified by vLLM's own rejection sampler.  This proposer
therefore proposes nothing and costs nothing.
"""
from __future__ import annotations

from typing import Any


class NullProposer:
    """Proposes no tokens; vLLM builds it with its VllmConfig."""

    def __init__(self, vllm_config: Any = None, *args: Any, **kwargs: Any):
        self.vllm_config = vllm_config

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        return None

    def propose(self, sampled_token_ids: Any, *args: Any, **kwargs: Any) -> list[list[int]]:
        return [[] for _ in range(len(sampled_token_ids))]


#: the value of ``speculative_config.model`` that selects it
NULL_PROPOSER = f"{__name__}.NullProposer"
