"""`psdlab run`: serve prompts with AR, SD, SD-separate, PSD or the adaptive policy (AR / SD /
PSD and k chosen per step) for real and write the trace."""
from __future__ import annotations

import argparse
import json
import sys

from psdlab.analysis.modes import SERVER_MODES
from psdlab.runtime.devices import COMPILE_MODES


def add_worker_args(p: argparse.ArgumentParser) -> None:
    """Where and how the two workers run (shared with bench-runtime)."""
    p.add_argument("--drafter-core", type=int, default=0)
    p.add_argument("--target-core", type=int, default=1)
    p.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="float32")
    p.add_argument("--drafter-dtype", choices=("float32", "float16", "bfloat16"), default=None,
                   help="drafter dtype (default: what the drafter asks for, e.g. the shipped "
                        "drafter runs in bfloat16; else --dtype)")
    p.add_argument("--idle-spin-s", type=float, default=1.0,
                   help="a worker waiting for its next command busy-polls this many seconds "
                        "before it sleeps (keeps idle cores awake between steps; 0: sleep)")
    p.add_argument("--compile", choices=COMPILE_MODES,
                   default="off",
                   help="run each pass's layers through torch.compile (reduce-overhead: CUDA "
                        "graphs on GPU; eager: dynamo tracing only); with --passes graphs, "
                        "default puts each static pass through inductor before capture")
    p.add_argument("--passes", choices=("auto", "dynamic", "static", "graphs"), default="auto",
                   help="auto: CUDA graphs of static passes on a GPU, eager dynamic passes on "
                        "CPU; static: the graph-safe passes run eagerly (docs/cuda.md)")
    p.add_argument("--batch-invariant", action="store_true",
                   help="every target pass one shape, so bf16 greedy output equals AR's "
                        "(needs static passes or graphs)")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "run", help="run AR / SD / SD-sep / PSD for real and write a step-level trace",
        description="Serve prompts with real models (drafter and target on separate devices: "
                    "CPU cores or CUDA streams) and write the analysis trace as it runs. By "
                    "default uses the real SmolLM2-135M pair; --target/--draft take other "
                    "HF-format directories.")
    p.add_argument("--mode", choices=SERVER_MODES, default="psd",
                   help="adaptive: AR, SD(k) or PSD(k) chosen before every step from the "
                        "measured step times and acceptance (--batch = sequences at most)")
    p.add_argument("--policy", default=None, metavar="JSON",
                   help="adaptive: the policy's settings as a JSON object (keys of the "
                        "simulator's [adaptive] table: modes, k_choices, margin, hold, ...; "
                        "default k_choices 1..k)")
    p.add_argument("--policy-costs", default=None, metavar="JSON",
                   help="adaptive: step costs to start from, a JSON object of "
                        "analysis.adaptive_policy.AffineCosts fields (c0, c_tok, d0, ...); "
                        "default: one AR and one SD step measure them first")
    p.add_argument("--k", type=int, default=4, help="draft tokens per sequence per step")
    p.add_argument("--batch", type=int, default=4,
                   help="m: sequences verified per step (PSD keeps two batches of m)")
    p.add_argument("--max-num-seqs", type=int, default=None,
                   help="running sequences at most (default m; 2m for PSD)")
    p.add_argument("--prompts", default=None,
                   help="prompts file: psdlab JSONL ({\"id\", \"style\", \"text\"} or "
                        "prompt_ids lines), or any format with prompt text (ShareGPT, "
                        "Spec-Bench, vLLM custom JSONL: told by content); default: the shipped "
                        "held-out prompts")
    p.add_argument("--format", default=None, metavar="F",
                   help="the --prompts file's format (psdlab.analysis.formats name, e.g. "
                        "sharegpt, specbench, custom_prompts; default: told by content)")
    p.add_argument("--num-prompts", type=int, default=None, help="use the first N prompts")
    p.add_argument("--trace", required=True, help="trace output (JSONL)")
    p.add_argument("--outputs", default=None, help="write one JSON line per request")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--ignore-eos", action="store_true", help="always generate max-new-tokens")
    p.add_argument("--max-len", type=int, default=1024, help="context length per sequence")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--arrivals", default="offline",
                   help="offline | poisson:RATE | gap:SECONDS | times:T1,T2,...")
    p.add_argument("--target", default=None, help="target model directory (HF format)")
    p.add_argument("--draft", default=None, help="drafter model directory (HF format)")
    p.add_argument("--controlled-alpha", type=float, default=None,
                   help="controlled acceptance: propose the target's greedy continuation with "
                        "probability ALPHA per token (lossless; labelled in the trace)")
    p.add_argument("--device", default="cpu", help="cpu, or a CUDA device such as cuda:0")
    p.add_argument("--drafter-device", default=None,
                   help="CUDA: put the drafter on this GPU (default: a second stream on --device)")
    p.add_argument("--backend", choices=("process", "thread", "inline"), default=None,
                   help="worker backend (default: one process per device; threads for a "
                        "drafter and a target on one CUDA device, as two streams)")
    add_worker_args(p)
    p.add_argument("--json", action="store_true", help="print the metrics summary as JSON")
    p.add_argument("--engine", choices=("psdlab", "vllm"), default="psdlab",
                   help="psdlab's own runtime, or vLLM v1 (modes ar, sd = vLLM's draft-model "
                        "SD, psd; needs the vllm extra)")
    p.set_defaults(func=run)


def engine_config(args: argparse.Namespace, eos: int | None):
    from psdlab.runtime.devices import default_backend
    from psdlab.runtime.controller import EngineConfig
    backend = args.backend or default_backend(args.device, args.drafter_device)
    policy, prior = adaptive_settings(args)
    return EngineConfig(
        mode=args.mode, k=args.k, batch=args.batch, max_num_seqs=args.max_num_seqs,
        max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p,
        seed=args.seed, ignore_eos=args.ignore_eos, eos_token_id=eos, max_len=args.max_len,
        backend=backend, device=args.device, drafter_device=args.drafter_device,
        drafter_core=args.drafter_core,
        target_core=args.target_core, dtype=args.dtype, drafter_dtype=args.drafter_dtype,
        controlled_alpha=args.controlled_alpha, idle_spin_s=args.idle_spin_s,
        compile=getattr(args, "compile", "off"), passes=getattr(args, "passes", "auto"),
        batch_invariant=getattr(args, "batch_invariant", False), adaptive_policy=policy,
        adaptive_prior=prior)


def adaptive_settings(args: argparse.Namespace):
    """(PolicyConfig | None, AffineCosts | None) from --policy / --policy-costs."""
    from psdlab.analysis.adaptive_policy import AffineCosts, policy_config
    raw_policy, raw_costs = getattr(args, "policy", None), getattr(args, "policy_costs", None)
    if args.mode != "adaptive":
        if raw_policy or raw_costs:
            raise ValueError("--policy: only with --mode adaptive")
        return None, None
    policy = prior = None
    for name, raw in (("--policy", raw_policy), ("--policy-costs", raw_costs)):
        if raw is None:
            continue
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            raise ValueError(f"{name}: not a JSON object: {raw!r}") from None
        if not isinstance(value, dict):
            raise ValueError(f"{name}: expected a JSON object, got {raw!r}")
        if name == "--policy":
            policy = policy_config(value)
        else:
            fields = AffineCosts.__dataclass_fields__
            bad = [key for key in value if key not in fields]
            if bad:
                raise ValueError(f"--policy-costs: unknown key {bad[0]!r} (allowed: "
                                 f"{', '.join(fields)})")
            prior = AffineCosts(**value)
    if policy is None:
        policy = policy_config({"k_choices": list(range(1, args.k + 1))})
    return policy, prior


def run(args: argparse.Namespace) -> int:
    from psdlab.analysis.checks import check_int
    if getattr(args, "engine", "psdlab") == "vllm":
        from psdlab.runtime.vllm_ext.cli import run_command
        return run_command(args)
    if args.num_prompts is not None:
        check_int("num_prompts", args.num_prompts, minimum=1)
    if args.format is not None and args.prompts is None:
        raise ValueError("--format: only with --prompts")
    engine_config(args, None)                       # validate arguments before loading models
    from psdlab.runtime import run_setup as session
    models = session.resolve_models(args.target, args.draft, args.mode != "ar",
                                    progress=not args.json)
    tokenizer = session.load_tokenizer(models.tokenizer)
    cfg = engine_config(args, session.eos_of(tokenizer, models.target))
    requests = session.load_requests(args.prompts, tokenizer, args.arrivals, args.num_prompts,
                                     args.seed, format=args.format)
    bar = _progress_bar(len(requests), disable=args.json)
    from psdlab.runtime.workers import WorkerDied, WorkerError
    try:
        result = session.run_requests(cfg, models, requests, args.trace, tokenizer,
                                      progress=bar.update_to if bar else None)
    except (WorkerDied, WorkerError) as exc:
        print(f"psdlab run: error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    finally:
        if bar:
            bar.close()
    if args.outputs:
        with open(args.outputs, "w", encoding="utf-8") as fh:
            for o in result.outputs:
                fh.write(json.dumps(o.to_json()) + "\n")
    _report(args, result)
    if result.error:
        print(f"psdlab run: error: {result.error}", file=sys.stderr)
        return 1
    if result.interrupted:
        print("psdlab run: interrupted; the trace holds every step written so far",
              file=sys.stderr)
        return 130
    return 0


def _report(args: argparse.Namespace, result) -> None:
    from psdlab.analysis.metrics import summarize
    summary = summarize(result.trace)
    errors = [o for o in result.outputs if o.error]
    summary.update({"interrupted": result.interrupted, "drafter_failure": result.drafter_failure,
                    "request_errors": len(errors)})
    adaptive = result.trace.run.extra.get("adaptive")
    if adaptive is not None:
        summary["adaptive"] = adaptive
    if args.json:
        print(json.dumps(summary, default=str))
        return
    keys = ("requests", "output_tokens", "decode_throughput_tok_s", "throughput_tok_s",
            "mean_acceptance_length", "acceptance_rate", "mean_draft_time_s",
            "mean_verify_time_s", "draft_hidden_fraction")
    print(f"mode {args.mode}  k {args.k}  m {args.batch}  trace {args.trace}")
    for key in keys:
        if key in summary:
            value = summary[key]
            print(f"  {key:26s} {value:.4g}" if isinstance(value, float) else
                  f"  {key:26s} {value}")
    if adaptive is not None:
        steps = ", ".join(f"{m} {adaptive[f'steps_{m}']}" for m in ("ar", "sd", "psd"))
        print(f"  {'adaptive steps':26s} {steps}; switches {adaptive['switches']}")
    for o in errors:
        print(f"  request {o.id}: error: {o.error}")


class _Bar:
    def __init__(self, total: int):
        from tqdm import tqdm
        self._bar = tqdm(total=total, unit="req", file=sys.stderr, desc="psdlab run")

    def update_to(self, done: int, total: int) -> None:
        self._bar.update(done - self._bar.n)

    def close(self) -> None:
        self._bar.close()


def _progress_bar(total: int, disable: bool) -> _Bar | None:
    if disable or not sys.stderr.isatty():
        return None
    return _Bar(total)
