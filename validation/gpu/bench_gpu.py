"""`psdlab bench-gpu`: the one GPU command.  In one process, within ``budget_s``:

1. **Passes** (`validation.gpu.passes`): per pass kind (the target's AR decode and (k + 1)-token
   verification, the drafter's drafting pass) at the largest m, psdlab eager, psdlab's static
   passes (CUDA graphs on a GPU), Hugging Face eager and the streaming floor; median and max.
2. **Runs** at each m (`validation.gpu.layouts.run_layout`: AR, SD-separate, PSD at 2 x m and
   at 2 x m/2, ``rounds`` times interleaved, on two streams of one GPU or two GPUs): PSD/SD-sep
   measured against the closed form (t + V) / max(t, V), the simulator calibrated on AR, SD-sep
   and the co-run probe of the layout's workers and judged on every PSD run (PSD predicted
   before it ran), and each phase kind's median / max step time from the traces.
3. **The lossless rule** (`docs/cuda.md`): PSD == SD-separate token for token; against AR, each
   first divergence with the target's top-2 logit margin there, accepted only within
   `MARGIN_ULPS` bf16 spacings of the top logit; and the batch-invariant mode (every target
   pass one shape), where AR, SD-separate and PSD must agree exactly.

Models: Hugging Face safetensors directories (``target_dir`` / ``drafter_dir``), else seeded
random Llama-style models (1.3B target, 0.15B drafter on a GPU; tiny ones for ``device="cpu"``,
the dry run CI does) with controlled acceptance (``controlled_alpha``: the drafter's passes run
for real, its proposals are the AR continuation with probability alpha per position).
Everything goes to ``out``: the traces, each m's model file, ``summary.json`` (rewritten after
each section; `validation.gpu.gpu_results.GpuBenchSummary`) and ``summary.md``.
"""
from __future__ import annotations

import functools
import json
import statistics
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from psdlab.validation.gpu.gpu_results import (SECTIONS, GpuBenchConfig, GpuBenchSummary,
                                               GpuSections, InvariantCheck, PhaseSpread,
                                               RunFigure)
from psdlab.validation.gpu.lossless import lossless
from psdlab.validation.gpu.passes import PassTable, pass_table, static_passes

if TYPE_CHECKING:
    from psdlab.runtime.runner import ModelSpec

SIZES = {
    "1.3b": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=24,
                 num_attention_heads=16, num_key_value_heads=8),
    "0.15b": dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=8,
                  num_attention_heads=12, num_key_value_heads=4),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2),
    "tiny-draft": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                       num_attention_heads=2, num_key_value_heads=1),
}
#: the inductor section runs only with this much budget left (two compiles of the target)
COMPILE_RESERVE_S = 120.0


def hf_config(size: str, vocab: int, max_len: int) -> dict:
    return {"model_type": "llama", "vocab_size": vocab, "max_position_embeddings": max_len,
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
            "hidden_act": "silu", **SIZES[size]}


def build_random(config: dict, seed: int, device: Any, dtype: Any) -> tuple[Any, Any]:
    """ModelSpec factory: a random-weight Transformer built from an HF-style config."""
    from psdlab.runtime.model_config import ModelConfig
    from psdlab.runtime.weights import random_model
    cfg = ModelConfig.from_hf(config)
    return random_model(cfg, seed=seed, device=device, dtype=dtype), cfg


@functools.lru_cache(maxsize=4)
def _shared_random(config_json: str, seed: int, device: str, dtype: Any) -> tuple[Any, Any]:
    return build_random(json.loads(config_json), seed, device, dtype)


def build_random_shared(config: dict, seed: int, device: Any, dtype: Any) -> tuple[Any, Any]:
    """On CUDA one copy per process (thread workers and the pass table share its read-only
    weights); on CPU a fresh one (each runner packs its own linears)."""
    if str(device).startswith("cuda"):
        return _shared_random(json.dumps(config, sort_keys=True), seed, str(device), dtype)
    return build_random(config, seed, device, dtype)


def _models(cfg: GpuBenchConfig, max_len: int) -> dict[str, tuple[ModelSpec, dict]]:
    """Per role its ModelSpec and HF config (for the Hugging Face comparison)."""
    from psdlab.runtime.runner import ModelSpec
    out: dict[str, tuple[ModelSpec, dict]] = {}
    for role, path, size, seed in (("target", cfg.target_dir, cfg.target_size, 1),
                                   ("drafter", cfg.drafter_dir, cfg.drafter_size, 2)):
        if path:
            hf = json.loads((Path(path) / "config.json").read_text())
            out[role] = (ModelSpec(path=path), hf)
        else:
            hf = hf_config(size, cfg.vocab, max_len)
            out[role] = (ModelSpec(factory=functools.partial(build_random_shared, hf, seed),
                                   label=f"random-llama-{size}"), hf)
    return out


def _requests(cfg: GpuBenchConfig, vocab: int) -> list[Any]:
    import torch

    from psdlab.runtime.requests import Request
    gen = torch.Generator().manual_seed(cfg.seed)
    return [Request(f"r{i}", tuple(torch.randint(0, vocab, (cfg.prompt_len,),
                                                 generator=gen).tolist()))
            for i in range(cfg.num_prompts)]


def phase_spread(trace_dir: Path) -> dict[str, PhaseSpread]:
    """Per phase kind over every timed trace: median and max seconds, and max / median."""
    from psdlab.analysis.trace import read_trace
    by: dict[str, list[float]] = {}
    for path in sorted(trace_dir.glob("*.jsonl")):
        for step in read_trace(str(path)).steps:
            for p in step.phases:
                by.setdefault(p.kind, []).append(p.end - p.start)
    return {k: PhaseSpread(median_ms=1e3 * statistics.median(v), max_ms=1e3 * max(v),
                           max_over_median=max(v) / statistics.median(v), n=len(v))
            for k, v in by.items() if v}


def invariant_check(cfg: GpuBenchConfig, models: dict[str, tuple[ModelSpec, dict]], base: Any,
                    requests: list) -> InvariantCheck:
    """AR, SD-separate and PSD with every target pass one shape: outputs must be equal."""
    from psdlab.runtime.controller import Engine
    m = min(cfg.batches)
    inv = replace(base, batch=m, batch_invariant=True, max_num_seqs=None, mode="psd",
                  controlled_alpha=None,
                  passes=static_passes(base.passes))
    outs: dict[str, list] = {}
    with Engine(inv, models["target"][0], models["drafter"][0]) as eng:
        for mode in ("ar", "sd-sep", "psd"):
            res = eng.run(requests, None, config=replace(inv, mode=mode))
            outs[mode] = [o.token_ids for o in res.outputs]
    return InvariantCheck(
        m=m, equal=all(v == outs["ar"] for v in outs.values()),
        first_divergence={k: next((j for j, (x, y) in enumerate(zip(v, outs["ar"])) if x != y),
                                  None) for k, v in outs.items()},
        requests_equal_to_ar={k: sum(a == b for a, b in zip(v, outs["ar"]))
                              for k, v in outs.items()},
        requests=len(requests))


@dataclass
class _BenchRun:
    """One run of the bench: its config, inputs and clock, and what it has done so far (the
    sections, what it skipped), of which each save writes the summary."""
    cfg: GpuBenchConfig
    say: Any
    t0: float
    out: Path
    models: dict[str, tuple[ModelSpec, dict]]
    requests: list[Any]
    base: Any
    machine: Mapping[str, Any]
    passes: str
    sections: GpuSections
    skipped: list[str] = field(default_factory=list)

    def left(self) -> float:
        return self.cfg.budget_s - (time.perf_counter() - self.t0)

    def save(self, lossless: bool | None = None) -> GpuBenchSummary:
        """The summary so far (with ``lossless``: the final one) into summary.json and .md."""
        from psdlab.validation.gpu.gpu_report import gpu_markdown
        summary = GpuBenchSummary(
            machine=self.machine, dry_run=self.cfg.device == "cpu", config=self.cfg,
            passes=self.passes, models={r: v[0].name() for r, v in self.models.items()},
            sections=self.sections, skipped=tuple(self.skipped),
            wall_s=time.perf_counter() - self.t0, lossless=lossless)
        (self.out / "summary.json").write_text(json.dumps(summary.to_dict(), indent=1,
                                                          default=str) + "\n")
        (self.out / "summary.md").write_text(gpu_markdown(summary))
        return summary


def _engine_base(cfg: GpuBenchConfig, max_len: int) -> tuple[str, Any]:
    """The resolved passes and the EngineConfig every section starts from."""
    from psdlab.runtime.controller import EngineConfig
    from psdlab.runtime.runner import resolve_passes
    passes = resolve_passes(cfg.passes, cfg.device.split(":")[0], "off")
    base = EngineConfig(mode="psd", k=cfg.k, batch=max(cfg.batches),
                        max_new_tokens=cfg.max_new_tokens, ignore_eos=True, max_len=max_len,
                        device=cfg.device, dtype=cfg.dtype, passes=passes,
                        controlled_alpha=cfg.controlled_alpha, seed=cfg.seed,
                        batch_invariant=cfg.batch_invariant and passes != "dynamic")
    return passes, base


def _runs_section(run: _BenchRun) -> dict[str, RunFigure]:
    """AR, SD-sep and PSD at each m while the budget lasts (summary.json after each)."""
    import torch

    from psdlab.validation.gpu.layouts import layouts, run_layout
    cfg, models, base, out = run.cfg, run.models, run.base, run.out
    gpus = 0 if cfg.device == "cpu" else torch.cuda.device_count()
    layout = layouts(cfg.device, gpus)[0]
    prompts = [list(r.prompt_ids) for r in run.requests]
    target_model = models["target"][0].load(torch.device(cfg.device),
                                            getattr(torch, cfg.dtype))[0]
    runs: dict[str, RunFigure] = {}
    run.sections = replace(run.sections, runs={})
    for m in sorted(cfg.batches) if "runs" in cfg.sections else ():
        spent = time.perf_counter() - run.t0
        if runs and spent / (len(runs) + 1) > run.left():
            run.skipped.append(f"runs at m={m}: {run.left():.0f} s of the budget left")
            continue
        run.say(f"bench-gpu: AR, SD-sep and PSD at m={m} ({layout.name})")
        done = run_layout(layout, models["target"][0], models["drafter"][0], run.requests,
                          replace(base, batch=m), out / f"m{m}", cfg.rounds, keep_outputs=True)
        assert done.outputs is not None
        runs[str(m)] = RunFigure(
            run=done, phase_spread=phase_spread(out / f"m{m}" / layout.name),
            lossless_rule=lossless(dict(done.outputs), prompts, target_model, cfg.device),
            batch_invariant=base.batch_invariant)
        run.sections = replace(run.sections, runs=dict(runs))
        run.save()
    return runs


def _compiled_section(run: _BenchRun) -> None:
    """The target's passes compiled by inductor (GPU only, with budget left), else skipped."""
    cfg = run.cfg
    if "compiled" not in cfg.sections:
        pass
    elif cfg.device != "cpu" and run.left() > COMPILE_RESERVE_S:
        # inductor's fused kernels inside psdlab's graphs: one compile per shape, so one shape
        # per pass kind (uniform: m rows over max_len keys), the target only
        run.say("bench-gpu: the target's passes compiled by inductor, then captured")
        compiled: PassTable = pass_table(
            cfg, run.models, run.base, run.requests, run.machine, roles=("target",),
            with_hf=False, variants={"psdlab_graphs_inductor": {
                "passes": "graphs", "compile": "default", "uniform": True}})
        run.sections = replace(run.sections, compiled=compiled)
    else:
        run.skipped.append("inductor-compiled passes: GPU only, and "
                           f"{COMPILE_RESERVE_S:.0f} s of budget")


def run_gpu_bench(cfg: GpuBenchConfig, say: Any = print) -> GpuBenchSummary:
    """Every section in order while the budget lasts; summary.json after each."""
    import torch

    from psdlab.validation.gpu.layouts import machine
    t0 = time.perf_counter()
    cpu = cfg.device == "cpu"
    if not cpu and not torch.cuda.is_available():
        raise ValueError("device: no CUDA device here; use --device cpu for the dry run")
    max_len = cfg.prompt_len + cfg.max_new_tokens + cfg.k + 8
    models = _models(cfg, max_len)
    vocab = int(models["target"][1]["vocab_size"])
    requests = _requests(cfg, vocab)
    passes, base = _engine_base(cfg, max_len)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    run = _BenchRun(cfg, say, t0, out, models, requests, base, machine(cfg.device), passes,
                    GpuSections())
    if "passes" in cfg.sections:
        say(f"bench-gpu: passes on {cfg.device} ({passes})")
        run.sections = replace(run.sections,
                               passes=pass_table(cfg, models, base, requests, run.machine))
        run.save()
    if "invariant" in cfg.sections:
        say("bench-gpu: the batch-invariant mode (AR, SD-sep, PSD)")
        run.sections = replace(run.sections,
                               batch_invariant=invariant_check(cfg, models, base, requests))
        run.save()
    runs = _runs_section(run)
    _compiled_section(run)
    inv = run.sections.batch_invariant
    return run.save(lossless=all(f.lossless_rule.holds for f in runs.values())
                    and (inv is None or inv.equal))


def gpu_config(options: dict[str, Any]) -> GpuBenchConfig:
    """The config of `psdlab bench-gpu`'s options (its parsed arguments as a dict; None: the
    default), checked with one-line errors naming the flags."""
    from types import SimpleNamespace

    from psdlab.analysis.checks import check_choice, check_int, check_range
    args = SimpleNamespace(**options)
    if not args.device.startswith(("cpu", "cuda")):
        raise ValueError(f"--device: cpu or cuda:N, got {args.device!r}")
    cpu = args.device == "cpu"
    given: dict[str, Any] = {k: v for k, v in options.items() if v is not None and k in
                             GpuBenchConfig.__dataclass_fields__}
    if args.batches is not None:
        try:
            given["batches"] = tuple(int(x) for x in args.batches.split(","))
        except ValueError:
            raise ValueError(f"--batches: comma-separated integers >= 1, got "
                             f"{args.batches!r}") from None
        for m in given["batches"]:
            check_int("--batches", m, minimum=1, maximum=512)
    if args.sections is not None:
        given["sections"] = tuple(x for x in args.sections.split(",") if x)
        if not given["sections"] or any(x not in SECTIONS for x in given["sections"]):
            raise ValueError(f"--sections: a comma-separated subset of {','.join(SECTIONS)}, "
                             f"got {args.sections!r}")
    if args.controlled_alpha is not None:
        given["controlled_alpha"] = (None if args.controlled_alpha in ("none", "") else
                                     check_range("--controlled-alpha",
                                                 float(args.controlled_alpha), 0.0, 1.0))
    elif args.target is not None:
        given["controlled_alpha"] = None        # a real pair: its own acceptance
    for size in ("target_size", "drafter_size"):
        if size in given:
            check_choice(f"--{size.replace('_', '-')}", given[size], tuple(sorted(SIZES)))
    if (args.target is None) != (args.drafter is None):
        raise ValueError("--target/--drafter: give both model directories or neither")
    given["target_dir"], given["drafter_dir"] = args.target, args.drafter
    if cpu:                                      # the dry run: tiny models in float32
        given = {"target_size": "tiny", "drafter_size": "tiny-draft", "vocab": 256,
                 "dtype": "float32", **given}
    cfg = GpuBenchConfig(**given)
    check_int("--k", cfg.k, minimum=1, maximum=16)
    for name in ("num_prompts", "prompt_len", "max_new_tokens", "rounds", "repeats"):
        check_int(f"--{name.replace('_', '-')}", getattr(cfg, name), minimum=1)
    check_range("--budget-s", cfg.budget_s, 1.0, 86400.0)
    return cfg


def bench_gpu_command(options: dict[str, Any], as_json: bool = False) -> tuple[str, bool]:
    """`psdlab bench-gpu`: run the benchmark its options describe (progress printed unless
    ``as_json``); the text to print (summary.md, or summary.json's path and verdict as one
    JSON object) and whether the lossless rule held."""
    cfg = gpu_config(options)
    if cfg.device == "cpu":
        import torch
        torch.set_num_threads(1)
    summary = run_gpu_bench(cfg, say=(lambda s: None) if as_json else print)
    if as_json:
        text = json.dumps({"summary": f"{cfg.out}/summary.json", "lossless": summary.lossless,
                           "wall_s": summary.wall_s})
    else:
        text = (Path(cfg.out) / "summary.md").read_text()
    return text, bool(summary.lossless)
