"""Per pass kind, how long one forward takes: psdlab eager (dynamic shapes), psdlab static passes
(CUDA graphs on a GPU), Hugging Face eager on the same shapes in the same process, and the
memory-streaming floor (weights + the KV read, over the GPU's bandwidth from
``sim/costs/hardware.toml``).  Part of `psdlab bench-gpu` (`validation.gpu.bench_gpu`).

Each pass is timed alone, ``repeats`` times after ``warm`` untimed ones, host to host with a
device sync on either side (what the engine's step waits for); every time is kept, so the
table gives the median and the max of each shape: a stall cannot hide in a mean.  The cache is
rolled back after each pass, so every repeat sees the same context.  ``pass_table`` puts them
side by side at the bench's largest m, as a `PassTable` (its JSON: `validation.gpu.gpu_results`).
"""
from __future__ import annotations

import functools
import statistics
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping

from psdlab.runtime.pass_modes import PASS_MODES

#: pass kinds: (name, model role, tokens per row (None: k + 1), only the last token's logits,
#: passes (None: k: a whole drafting phase, `ModelRunner.draft`; one graph with --passes fused-k))
KINDS = (("ar_decode", "target", 1, False, 1), ("verify", "target", None, False, 1),
         ("draft", "drafter", 1, True, 1), ("draft_k", "drafter", 1, True, None))


def kind_passes(kind: str, k: int) -> int:
    """How many forward passes one timed call of ``kind`` is (its floor is that many)."""
    return next(k if n is None else n for name, _r, _w, _l, n in KINDS if name == kind)


def floor_ms(cfg: Any, rows: int, context: int, dtype_bytes: int, bw_gbs: float | None
             ) -> float | None:
    """Weights once plus every row's K and V over ``context`` tokens, at the memory bandwidth."""
    if not bw_gbs:
        return None
    d, f, L = cfg.hidden_size, cfg.intermediate_size, cfg.num_layers
    kv = cfg.num_kv_heads * cfg.head_dim
    attn = d * (cfg.num_heads * cfg.head_dim) * 2 + d * kv * 2
    params = L * (attn + 3 * d * f) + cfg.vocab_size * d * (1 if cfg.tie_word_embeddings else 2)
    kv_read = rows * context * L * 2 * kv
    return 1e3 * (params + kv_read) * dtype_bytes / (bw_gbs * 1e9)


def hardware_bandwidth(device_name: str) -> tuple[str | None, float | None]:
    """The hardware.toml entry whose key is in the GPU's name (e.g. h200), and its GB/s."""
    from psdlab.sim.costs.catalog import hardware_catalog
    name = device_name.lower().replace(" ", "")
    for key, spec in sorted(hardware_catalog().items(), key=lambda kv: -len(kv[0])):
        if key.replace("-", "") in name:
            return key, spec.memory_bw_gbs
    return None, None


@dataclass(frozen=True)
class PassStats:
    """One pass kind's timed repeats (ms); ``x_floor``: the median over the streaming floor,
    where there is one."""
    median_ms: float
    max_ms: float
    min_ms: float
    n: int
    x_floor: float | None = None


@dataclass(frozen=True)
class StaticSetup:
    """The static passes a runner made at start (None: it runs dynamic passes)."""
    static_setup_s: float | None
    static_shapes: int | None


@dataclass(frozen=True)
class PassTimes:
    """One implementation's passes of one role: per pass kind its times; psdlab's static setup,
    or Hugging Face's `generate` time per new token, or why Hugging Face could not run."""
    kinds: Mapping[str, PassStats]
    setup: StaticSetup | None = None
    generate_ms_per_token: float | None = None
    error: str | None = None


#: a cell of the pass table: the times, or why there are none
PassCell = PassStats | str | None


@dataclass(frozen=True)
class KindRow:
    """One pass kind of one role ("target:verify"): the floor and each implementation's cell."""
    name: str
    floor_ms: float | None
    cells: Mapping[str, PassCell]


@dataclass(frozen=True)
class RolePasses:
    """One role's rows and each psdlab variant's static setup; with Hugging Face, its
    `generate` time per new token."""
    role: str
    kinds: tuple[KindRow, ...]
    setups: Mapping[str, StaticSetup]
    with_hf: bool
    hf_generate_ms_per_token: float | None


@dataclass(frozen=True)
class PassTable:
    """`pass_table`'s result: at batch m, context tokens and draft length k, each role's
    pass kinds against the floor (weights + KV at ``memory_bw_gbs`` of ``hardware``)."""
    m: int
    k: int
    context: int
    hardware: str | None
    memory_bw_gbs: float | None
    static_passes: str
    variants: Mapping[str, Mapping[str, str]]      # label -> RunnerConfig overrides (as text)
    roles: tuple[RolePasses, ...]


def _stats(times_ms: list[float]) -> PassStats:
    return PassStats(median_ms=statistics.median(times_ms), max_ms=max(times_ms),
                     min_ms=min(times_ms), n=len(times_ms))


def time_calls(fn: Callable[[], Any], sync: Callable[[], None], warm: int, repeats: int
               ) -> list[float]:
    """Milliseconds of each of ``repeats`` calls of ``fn`` after ``warm`` untimed ones."""
    out = []
    for i in range(warm + repeats):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        if i >= warm:
            out.append(1e3 * (time.perf_counter() - t0))
    return out


def psdlab_pass_times(spec: Any, runner_cfg: Any, role: str, m: int, k: int,
                      prompts: list[list[int]], warm: int, repeats: int,
                      sync: Callable[[], None]) -> PassTimes:
    """Each pass kind of ``role`` at batch m on a `ModelRunner` built from ``runner_cfg``."""
    from psdlab.runtime.runner import ModelRunner
    widths = ((1, True), (k + 1, True)) if role == "drafter" else ((1, False), (k + 1, False))
    runner = ModelRunner(replace(runner_cfg, spec=spec, max_slots=m, static_widths=widths))
    slots = list(range(m))
    runner.feed(slots, [0] * m, prompts[:m])
    keep = [runner.cache.host_lengths[s] for s in slots]
    out: dict[str, PassStats] = {}
    for name, who, width, last, passes in KINDS:
        if who != role:
            continue
        w = k + 1 if width is None else width
        rows = [[p[-1]] * w for p in prompts[:m]]
        call = (functools.partial(_one_pass, runner, slots, rows, last, keep) if passes == 1
                else functools.partial(runner.draft, slots, keep, rows, [k] * m))
        out[name] = _stats(time_calls(call, sync, warm, repeats))
    info = runner.info()
    return PassTimes(out, setup=StaticSetup(static_setup_s=info.get("static_setup_s"),
                                            static_shapes=info.get("static_shapes")))


def _one_pass(runner: Any, slots: list[int], rows: list[list[int]], last: bool,
              keep: list[int]) -> None:
    runner._forward(slots, rows, only_last=last)
    runner._rollback(slots, keep)


def hf_pass_times(hf_config: dict, dtype: Any, device: str, role: str, m: int, k: int,
                  prompts: list[list[int]], warm: int, repeats: int,
                  sync: Callable[[], None]) -> PassTimes:
    """Hugging Face's LlamaForCausalLM (eager) on the same shapes: a forward of [m, w] tokens
    on a prefilled DynamicCache, cropped back after each; and `generate`'s time per new token
    (greedy, the same prompts) from two lengths."""
    import warnings

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    with torch.device(device):
        model = LlamaForCausalLM(LlamaConfig(**hf_config)).to(dtype).eval()
    ids = torch.tensor([p for p in prompts[:m]], device=device)
    out: dict[str, PassStats] = {}
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated")
        past = model(input_ids=ids, use_cache=True).past_key_values
        n0 = ids.shape[1]
        for name, who, width, _last, passes in KINDS:
            if who != role:
                continue
            w = k + 1 if width is None else width
            step = ids[:, -1:].expand(m, w).contiguous()
            call = (functools.partial(_hf_step, model, step, past, n0) if passes == 1 else
                    functools.partial(_hf_draft, model, step, past, n0, k))
            out[name] = _stats(time_calls(call, sync, warm, repeats))
        gen = {}
        for new in (1, 9):
            kw = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False,
                      attention_mask=torch.ones_like(ids), pad_token_id=0)
            gen[new] = statistics.median(time_calls(functools.partial(model.generate, ids,
                                                                      **kw), sync, 1, 3))
    return PassTimes(out, generate_ms_per_token=(gen[9] - gen[1]) / 8)


def _hf_step(model: Any, step: Any, past: Any, keep: int) -> None:
    model(input_ids=step, past_key_values=past, use_cache=True)
    _crop(past, keep, step.shape[1])


def _hf_draft(model: Any, step: Any, past: Any, keep: int, k: int) -> None:
    """k greedy one-token steps, each fed the argmax of the last (a drafting phase)."""
    for _ in range(k - 1):
        step = model(input_ids=step, past_key_values=past, use_cache=True
                     ).logits[:, -1:].argmax(-1)
    model(input_ids=step, past_key_values=past, use_cache=True)
    _crop(past, keep, k)


def _crop(cache: Any, keep: int, added: int) -> None:
    """Back to ``keep`` tokens: transformers < 5.2x crops to a length, later ones take minus
    the tokens to drop."""
    try:
        cache.crop(keep)
    except ValueError:
        cache.crop(-added)


def static_passes(passes: str) -> str:
    """The static passes beside a run's resolved ``passes``: its own, or run eagerly where it
    runs dynamic passes (CPU)."""
    return "static" if passes == "dynamic" else passes


def _sync(device: str) -> Any:
    import torch
    if device.startswith("cuda"):
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def pass_table(cfg: Any, models: Mapping[str, tuple[Any, dict]], base: Any, requests: list,
               machine: Mapping[str, Any], variants: dict[str, dict[str, Any]] | None = None,
               roles: tuple[str, ...] = ("target", "drafter"), with_hf: bool = True
               ) -> PassTable:
    """At the largest m, per pass kind: each psdlab variant (RunnerConfig overrides; default
    eager and static), Hugging Face eager, the floor and each one's ratio to it (``cfg``: the
    bench's `GpuBenchConfig`; ``models``: per role its ModelSpec and HF config)."""
    m = max(cfg.batches)
    prompts = [list(requests[i % len(requests)].prompt_ids) for i in range(m)]
    static = static_passes(base.passes)
    variants = variants or {"psdlab_eager": {"passes": "dynamic"},
                            "psdlab_static": {"passes": static},
                            "psdlab_static_invariant": {"passes": static, "uniform": True},
                            # on a GPU whose default is fused: the graphs without compiling
                            **({"psdlab_graphs": {"passes": "graphs"}}
                               if PASS_MODES[static].fused and cfg.device != "cpu" else {})}
    key, bw = hardware_bandwidth(machine.get("gpus", ["cpu"])[0])
    return PassTable(m=m, k=cfg.k, context=cfg.prompt_len, hardware=key, memory_bw_gbs=bw,
                     static_passes=static,
                     variants={k: {f: str(v) for f, v in o.items()} for k, o in variants.items()},
                     roles=tuple(_role_passes(cfg, models[role], base, role, prompts, variants,
                                              with_hf, bw) for role in roles))


def _role_passes(cfg: Any, model: tuple[Any, dict], base: Any, role: str,
                 prompts: list[list[int]], variants: dict[str, dict[str, Any]], with_hf: bool,
                 bw: float | None) -> RolePasses:
    """One role's rows of `pass_table`: each variant's passes, Hugging Face's, the floor."""
    import torch

    from psdlab.runtime.model_config import ModelConfig
    from psdlab.runtime.runner import RunnerConfig
    m, sync, (spec, hf) = len(prompts), _sync(cfg.device), model
    dtype = getattr(torch, base.dtype)
    rc = RunnerConfig(spec=spec, device=cfg.device, dtype=base.dtype, max_len=base.max_len,
                      seed=cfg.seed)
    row = {label: psdlab_pass_times(spec, replace(rc, **over), role, m, cfg.k, prompts, 3,
                                    cfg.repeats, sync) for label, over in variants.items()}
    if with_hf:
        try:
            row["hf_eager"] = hf_pass_times(hf, dtype, cfg.device, role, m, cfg.k,
                                            prompts, 3, cfg.repeats, sync)
        except Exception as exc:        # transformers' API moves; the table says why
            row["hf_eager"] = PassTimes({}, error=f"{type(exc).__name__}: {exc}".splitlines()[0])
    mc = ModelConfig.from_hf(hf)
    kinds = []
    for kind in next(iter(row.values())).kinds:
        width = cfg.k + 1 if kind == "verify" else 1
        fl = floor_ms(mc, m, cfg.prompt_len + width, 2 if dtype != torch.float32 else 4, bw)
        fl = fl * kind_passes(kind, cfg.k) if fl else fl
        cells: dict[str, PassCell] = {}
        for lab, times in row.items():
            got = times.kinds.get(kind)
            if fl and got is not None:
                got = replace(got, x_floor=got.median_ms / fl)
            cells[lab] = got if got is not None else times.error
        kinds.append(KindRow(f"{role}:{kind}", fl, cells))
    return RolePasses(role=role, kinds=tuple(kinds),
                      setups={lab: t.setup for lab, t in row.items() if t.setup is not None},
                      with_hf=with_hf,
                      hf_generate_ms_per_token=(row["hf_eager"].generate_ms_per_token
                                                if with_hf else None))
