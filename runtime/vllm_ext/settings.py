"""Settings of psdlab's vLLM schedulers, carried in ``vllm_config.additional_config["psdlab"]``.

The scheduler is built inside vLLM's engine core (possibly another process), so everything it
needs travels as a plain dict in vLLM's own ``additional_config``: the mode, k, the trace path,
the draft model and where the drafter runs, and labels for the trace.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from psdlab.analysis.checks import check_choice, check_int
from psdlab.analysis.modes import VLLM_MODES, Mode, check_mode
from psdlab.analysis.trace import RunInfo

KEY = "psdlab"


@dataclass(frozen=True)
class PsdSettings:
    mode: Mode = "psd"
    k: int = 4
    trace: str | None = None
    draft_model: str | None = None
    drafter_device: str = "cpu"
    drafter_core: int | None = 0
    drafter_backend: str = "process"
    dtype: str = "float32"
    target_label: str = "cpu:1"
    batch: int = 0                      # m: requests verified per step
    seed: int | None = None
    workload: dict[str, Any] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_mode("mode", self.mode, VLLM_MODES)
        check_int("k", self.k, minimum=1, maximum=16)
        check_choice("drafter_backend", self.drafter_backend, ("process", "thread", "inline"))
        if self.mode == "psd" and not self.draft_model:
            raise ValueError("draft_model: PSD needs a draft model directory")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_vllm_config(cls, vllm_config: Any) -> "PsdSettings":
        extra = getattr(vllm_config, "additional_config", None) or {}
        raw = extra.get(KEY)
        if raw is None:
            raise ValueError(f"additional_config: missing the '{KEY}' settings of the psdlab "
                             f"scheduler")
        return cls(**raw)

    def draft_config(self, max_slots: int, max_len: int):
        from psdlab.runtime.vllm_ext.psd_drafter import DraftConfig
        return DraftConfig(model=str(self.draft_model), k=self.k, max_slots=max_slots,
                           max_len=max_len, device=self.drafter_device,
                           core=self.drafter_core, dtype=self.dtype,
                           backend=self.drafter_backend)

    @property
    def drafter_label(self) -> str:
        return (f"cpu:{self.drafter_core}" if self.drafter_device == "cpu"
                else f"{self.drafter_device}/drafter")


def cpu_binding() -> dict[str, Any]:
    """Where the engine's thread really runs (read, not configured): its CPU affinity and
    torch's intra-op thread count."""
    import torch
    aff = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {"target_affinity": aff, "target_torch_threads": torch.get_num_threads()}


def run_info(s: PsdSettings, vllm_config: Any) -> RunInfo:
    from psdlab.runtime.vllm_ext.tracer import versions
    sched = vllm_config.scheduler_config
    devices = {"target": s.target_label}
    if s.mode == "psd":
        devices["drafter"] = s.drafter_label
    m = s.batch or (sched.max_num_seqs // 2 if s.mode == "psd" else sched.max_num_seqs)
    return RunInfo(mode=s.mode, k=s.k if s.mode != "ar" else 0, m=int(m), source="vllm",
                   devices=devices, models=dict(s.models), workload=dict(s.workload),
                   seed=s.seed, versions=versions(),
                   extra={"engine": "vllm", "max_num_seqs": sched.max_num_seqs,
                          "max_model_len": vllm_config.model_config.max_model_len,
                          **cpu_binding(),
                          "sd_draft_inside_verify": s.mode == "sd"})
