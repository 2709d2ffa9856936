"""The controller: admission, prefill and the AR / SD / SD-sep / PSD step loops.

Modes (``EngineConfig.mode``):

- ``ar``: target only; each step verifies every running sequence with no drafts.
- ``sd``: drafter and target on one device, one after the other (draft, then verify).
- ``sd-sep``: the same schedule with the two workers on separate devices (no overlap).
- ``psd``: two batches; each step the target verifies batch X with the drafts made in the
  previous step while the drafter drafts batch Y; then they swap (a sync point).  The first
  draft is not overlapped; when one batch is empty the engine falls back to SD steps.
- ``adaptive``: before every step ``runtime.adaptive_driver`` chooses AR, SD(k) on separate
  devices or PSD(k), from the live state and the step times measured in the run
  (``analysis.adaptive_policy``); ``batch`` is then the most sequences running at once.

Requests arrive offline or at given times and are admitted while fewer than ``max_num_seqs``
run (PSD: also room in a batch); admission prefills them on the target (and on the drafter,
at the same time).  A prompt that does not fit the context is rejected with an error and the
others go on.  If the drafter's process dies the engine says so and finishes the running
requests target-only.  The first Ctrl-C stops after the current step and leaves a valid trace.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Hashable, Sequence

from psdlab.analysis.checks import check_choice, check_int, check_range
from psdlab.analysis.modes import SERVER_MODES, Mode, ModeSpec, check_mode, mode_spec
from psdlab.analysis.trace import RunInfo
from psdlab.runtime.devices import COMPILE_MODES
from psdlab.runtime.drafter_build import preferred_dtype, runnable_dtype
from psdlab.runtime.step_loop import _Loop
from psdlab.runtime.requests import Request
from psdlab.runtime.run_state import EngineResult
from psdlab.runtime.runner import (PASSES, PREFILL_RULES, ModelSpec, RunnerConfig,
                                   resolve_passes)
from psdlab.runtime.tracing import software_versions
from psdlab.runtime.workers import WorkerSpec, start_workers


@dataclass(frozen=True)
class EngineConfig:
    mode: Mode = "psd"
    k: int = 4
    batch: int = 4                      # m: sequences verified per step
    max_num_seqs: int | None = None     # default m (ar/sd/sd-sep), 2m (psd)
    max_new_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    ignore_eos: bool = False
    eos_token_id: int | None = None
    max_len: int = 2048                 # context: prompt + output tokens per sequence
    backend: str = "process"            # process (CPU cores) | thread (CUDA) | inline
    device: str = "cpu"                 # "cpu" or a CUDA device such as "cuda:0"
    drafter_device: str | None = None   # CUDA: another GPU for the drafter (default: a
                                        # second stream on ``device``)
    drafter_core: int = 0
    target_core: int = 1
    dtype: str = "float32"
    drafter_dtype: str | None = None    # default: what the drafter directory asks for, else dtype
    controlled_alpha: float | None = None
    compile: str = "off"                # torch.compile of the passes (runtime.runner)
    passes: str = "auto"                # runtime.pass_modes.PASSES (auto: fused-k on CUDA)
    batch_invariant: bool = False       # static passes: every target pass one shape (m slots
                                        # x k + 1 tokens x max_len keys), so bf16 greedy output
                                        # equals AR's token for token (docs/cuda.md)
    adaptive_policy: Any = None         # mode adaptive: an analysis.adaptive_policy.PolicyConfig
                                        # (default: k_choices 1..k)
    adaptive_prior: Any = None          # mode adaptive: StepCosts to start from (default: none;
                                        # one AR and one SD step measure them first)
    idle_spin_s: float = 1.0            # process backend: a worker waiting for its next command
                                        # busy-polls this long before it blocks (not when the
                                        # two workers share a core)

    def __post_init__(self) -> None:
        check_mode("mode", self.mode, SERVER_MODES)
        if not self.spec.runtime:                       # ModeSpec.runtime (docs/dsd.md)
            raise ValueError(f"mode: {self.mode!r} runs in the simulator only (psdlab simulate)")
        check_int("k", self.k, minimum=1, maximum=64)
        check_int("batch", self.batch, 1, 4096)         # as the simulator's server.m
        if self.max_num_seqs is not None:
            check_int("max_num_seqs", self.max_num_seqs, minimum=1)
        check_int("max_new_tokens", self.max_new_tokens, minimum=1)
        check_range("temperature", self.temperature, 0.0, 100.0)
        check_range("top_p", self.top_p, 0.0, 1.0, lo_open=True)
        check_int("max_len", self.max_len, minimum=2)
        check_choice("backend", self.backend, ("inline", "thread", "process"))
        check_range("idle_spin_s", self.idle_spin_s, 0.0, 60.0)
        check_choice("compile", self.compile, COMPILE_MODES)
        check_choice("passes", self.passes, PASSES)
        if self.batch_invariant and resolve_passes(
                self.passes, self.device.split(":")[0], self.compile) == "dynamic":
            raise ValueError(f"batch_invariant: needs static passes (passes static, graphs or "
                             f"fused; auto is fused-k on CUDA only), got passes {self.passes} on "
                             f"{self.device}")
        check_choice("dtype", self.dtype, ("float32", "float16", "bfloat16"))
        if self.drafter_dtype is not None:
            check_choice("drafter_dtype", self.drafter_dtype, ("float32", "float16", "bfloat16"))
        if self.controlled_alpha is not None:
            check_range("controlled_alpha", self.controlled_alpha, 0.0, 1.0)
            if self.temperature != 0.0 or not self.spec.drafting:
                raise ValueError("controlled_alpha: needs greedy decoding (temperature 0) and a "
                                 f"drafting mode, got temperature {self.temperature}, mode "
                                 f"{self.mode}")

    @property
    def spec(self) -> ModeSpec:
        """The mode's entry in the registry (``analysis.modes``)."""
        return mode_spec(self.mode)

    @property
    def slots(self) -> int:
        """Sequences the workers hold: ``max_num_seqs``, else m per batch in flight
        (``ModeSpec.held_per_m``)."""
        return self.max_num_seqs or self.spec.held_per_m * self.batch



def _labels(cfg: EngineConfig) -> tuple[str, str, int | None, int | None]:
    """Trace device labels and CPU cores of (drafter, target): a drafter that shares the
    target's device (``ModeSpec.drafter``) gets the target's label and core."""
    shared = cfg.spec.drafter == "shared"
    if cfg.device.startswith("cuda"):
        if shared:
            return cfg.device, cfg.device, None, None
        if cfg.drafter_device not in (None, cfg.device):
            return cfg.drafter_device, cfg.device, None, None
        return f"{cfg.device}/s1", f"{cfg.device}/s0", None, None
    if cfg.backend == "inline":
        return "cpu:inline", "cpu:inline", None, None
    d_core = cfg.target_core if shared else cfg.drafter_core
    return f"cpu:{d_core}", f"cpu:{cfg.target_core}", d_core, cfg.target_core


class Engine:
    """Owns the workers; `run` serves one set of requests and writes one trace."""

    def __init__(self, cfg: EngineConfig, target: ModelSpec, drafter: ModelSpec | None = None,
                 tokenizer: Any = None):
        if cfg.spec.drafting and drafter is None:
            raise ValueError(f"draft: mode {cfg.mode} needs a drafter model")
        self.cfg, self.target_spec, self.drafter_spec = cfg, target, drafter
        self.tokenizer = tokenizer
        d_label, t_label, d_core, t_core = _labels(cfg)
        self.drafter_dtype: str | None = None
        base = RunnerConfig(spec=target, device=cfg.device, dtype=cfg.dtype,
                            max_slots=cfg.slots, max_len=cfg.max_len, seed=cfg.seed,
                            temperature=cfg.temperature, top_p=cfg.top_p,
                            host_outputs=cfg.backend == "process", compile=cfg.compile,
                            passes=cfg.passes, uniform=cfg.batch_invariant,
                            static_widths=(((cfg.k + 1, False),) if cfg.batch_invariant else
                                           ((1, False), (cfg.k + 1, False))))
        shared = cfg.spec.drafter == "shared"          # co-located: no streams of its own
        streams = cfg.device.startswith("cuda") and not shared
        d_device = cfg.device if shared else (cfg.drafter_device or cfg.device)
        spin = cfg.idle_spin_s if d_core != t_core else 0.0
        specs = [WorkerSpec("target", base, t_label, core=t_core, stream=streams, spin_s=spin)]
        if cfg.spec.drafting:
            assert drafter is not None                   # checked at the top
            self.drafter_dtype = cfg.drafter_dtype or runnable_dtype(
                preferred_dtype(drafter.path) or cfg.dtype, d_device)
            specs.append(WorkerSpec("drafter", replace(base, spec=drafter, seed=cfg.seed + 1,
                                                       device=d_device, dtype=self.drafter_dtype,
                                                       uniform=False, draft_k=cfg.k,
                                                       static_widths=((1, True),
                                                                      (cfg.k + 1, True))),
                                    d_label, core=d_core, stream=streams, spin_s=spin))
        self.workers = start_workers(cfg.backend, specs)
        self.target = self.workers["target"]
        self.drafter = self.workers.get("drafter")
        self.vocab_size = int(self.target.info.get("vocab_size", 0))
        if self.drafter is not None and self.drafter.info.get("vocab_size") != self.vocab_size:
            self.close()
            raise ValueError(f"draft: vocabulary size {self.drafter.info.get('vocab_size')} "
                             f"differs from the target's {self.vocab_size}")

    def close(self) -> None:
        for w in self.workers.values():
            w.close()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def run(self, requests: Sequence[Request], trace_path: Any = None,
            reference: dict[Hashable, list[int]] | None = None,
            progress: Callable[[int, int], None] | None = None,
            on_step: Callable[[_Loop, int], bool | None] | None = None,
            run_extra: dict[str, Any] | None = None,
            config: EngineConfig | None = None) -> EngineResult:
        """Serve ``requests`` to completion (or Ctrl-C) and return their outputs.  ``config``
        may change the schedule for this run (mode among sd-sep/psd/ar, k, batch, ...) on the
        same workers; it must fit their slots and devices."""
        saved = self.cfg
        if config is not None:
            self._check_override(config)
            self.cfg = config
        try:
            loop = _Loop(self, list(requests), reference, progress, on_step)
            info = self.run_info(len(requests), run_extra, loop)
            return loop.execute(info, trace_path)
        finally:
            self.cfg = saved

    def _check_override(self, config: EngineConfig) -> None:
        fixed = ("device", "drafter_device", "backend", "dtype", "drafter_dtype", "max_len",
                 "temperature", "top_p", "seed", "passes", "batch_invariant")
        changed = [f for f in fixed if getattr(config, f) != getattr(self.cfg, f)]
        if changed:
            raise ValueError(f"config: {', '.join(changed)} cannot change between runs")
        if config.slots > self.cfg.slots:
            raise ValueError(f"config: needs {config.slots} slots, the workers hold "
                             f"{self.cfg.slots}")
        if (config.spec.drafter == "shared") != (self.cfg.spec.drafter == "shared"):
            raise ValueError("mode: sd (co-located) and separate devices need new workers")
        if config.spec.drafting and self.drafter is None:
            raise ValueError(f"mode: {config.mode} needs a drafter; these workers have none")

    def run_info(self, n: int, extra: dict[str, Any] | None, loop: Any) -> RunInfo:
        cfg = self.cfg
        devices = {"target": self.target.label}
        models = {"target": self.target_spec.name()}
        if self.drafter is not None:
            assert self.drafter_spec is not None         # a drafter worker has its spec
            devices["drafter"] = self.drafter.label
            models["drafter"] = self.drafter_spec.name()
        more = {"backend": cfg.backend, "temperature": cfg.temperature, "top_p": cfg.top_p,
                "max_num_seqs": cfg.slots, "dtype": cfg.dtype, "ignore_eos": cfg.ignore_eos,
                "batch_invariant": cfg.batch_invariant,
                # how each worker runs its passes, and the warm-up its start did (every static
                # shape captured or run once before the first timed step)
                "passes": {role: {k: w.info.get(k) for k in ("passes", "static_shapes",
                                                              "static_setup_s")}
                           for role, w in self.workers.items()}}
        more["prefill_chunking"] = {role: rule.to_list() for role, rule in PREFILL_RULES.items()
                                    if role == "target" or self.drafter is not None}
        if self.drafter is not None:
            more["drafter_dtype"] = self.drafter_dtype
        if loop.controlled is not None:
            more.update(loop.controlled.labels())
        more.update(extra or {})
        return RunInfo(mode=cfg.mode, k=cfg.k if cfg.spec.drafting else 0, m=cfg.batch,
                       source="runtime", devices=devices, models=models,
                       workload={"requests": n, "max_new_tokens": cfg.max_new_tokens,
                                 "arrivals": "offline" if all(r.arrival == 0 for r in
                                                              loop.requests) else "timed"},
                       seed=cfg.seed, versions=software_versions(), extra=more)
