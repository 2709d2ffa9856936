"""Option groups that several `psdlab` commands share (argparse only: the parsers' options, no
logic).  The commands in psdlab.commands hold nothing but `register` and `run`, so what two of
them add to their parsers alike lives here."""
from __future__ import annotations

import argparse


def add_worker_args(p: argparse.ArgumentParser) -> None:
    """Where and how the two workers run (`psdlab run`, `psdlab bench-runtime`)."""
    from psdlab.runtime.devices import COMPILE_MODES
    from psdlab.runtime.pass_modes import PASSES

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
    p.add_argument("--passes", choices=PASSES, default="auto",
                   help="auto: fused-k on a GPU (static passes compiled once per pass kind, a "
                        "CUDA graph per bucket, the drafter's k passes in one graph), eager "
                        "dynamic passes on CPU; static: the graph-safe passes run eagerly; "
                        "graphs: CUDA graphs without compiling (docs/cuda.md)")
    p.add_argument("--batch-invariant", action="store_true",
                   help="every target pass one shape, so bf16 greedy output equals AR's "
                        "(needs static passes or graphs)")


def add_override_args(p: argparse.ArgumentParser) -> None:
    """Options that override fields of the config file (`psdlab simulate`)."""
    from psdlab.analysis.modes import TRACE_MODES

    p.add_argument("--mode", choices=TRACE_MODES,
                   help="server.mode (adaptive: set server.mode = \"adaptive\" in the config)")
    p.add_argument("--k", type=int, help="server.k: draft tokens per step")
    p.add_argument("--m", type=int, help="server.m: max sequences (per batch for psd)")
    p.add_argument("--policy", choices=("paper", "rebalance"), help="server.policy (psd)")
    p.add_argument("--requests", type=int, help="number of requests")
    p.add_argument("--seed", type=int, help="random seed")
    p.add_argument("--workload", metavar="FILE",
                   help="replace the config's workload by the requests of FILE (a vLLM or SGLang "
                        "bench result, an Azure, BurstGPT or Mooncake trace, ShareGPT, "
                        "Spec-Bench, ...: psdlab.analysis.formats); all of them unless "
                        "--requests caps it")
    add_file_workload_args(p)
    p.add_argument("--engine-step", metavar="NAME",
                   help="server.engine_step: host work around the passes, a preset of "
                        "sim/costs/engine_steps.toml (vllm-v0, vllm-v1, torch), 'preset' (the "
                        "target GPU cost preset's) or 'none'")


def add_file_workload_args(p: argparse.ArgumentParser) -> None:
    """--format and --max-model-len beside a command's own --workload FILE (`psdlab simulate`,
    `psdlab plan`)."""
    p.add_argument("--format", metavar="F", help="FILE's format (default: told by content)")
    p.add_argument("--max-model-len", type=int, default=None, metavar="N",
                   help="with --workload: refuse requests whose prompt + output exceed N "
                        "tokens, as vLLM does (counted in one warning line)")


#: the deployment options of the one-command forms (`psdlab plan`, `psdlab simulate`)
DEPLOYMENT_OPTIONS = ("target", "gpu", "tp", "drafter", "drafter_gpu", "drafter_tp", "alpha",
                      "engine", "dtype")


def add_deployment_args(p: argparse.ArgumentParser, what: str) -> argparse._ArgumentGroup:
    """What runs where, for a command's one-command form (no config): sim.quick_plan."""
    q = p.add_argument_group(f"{what} in one command (no config)")
    q.add_argument("--target", metavar="NAME|config.json",
                   help="the target: a catalog name, Hugging Face id or config.json path")
    q.add_argument("--gpu", metavar="NAME", help="the target's GPU (a hardware preset)")
    q.add_argument("--tp", type=int, help="the target's tensor parallelism (1)")
    q.add_argument("--drafter", metavar="NAME|config.json", help="the drafter (none: AR only)")
    q.add_argument("--drafter-gpu", metavar="NAME",
                   help="the drafter's GPU (default: one more --gpu)")
    q.add_argument("--drafter-tp", type=int, help="the drafter's tensor parallelism (1)")
    q.add_argument("--alpha", type=float, help="per-token acceptance rate, assumed (0.8)")
    q.add_argument("--engine", help="GPU cost preset (vllm-cudagraph)")
    q.add_argument("--dtype", help="weights' dtype (bf16)")
    return q


def one_command_options(args: argparse.Namespace, names: tuple[str, ...]) -> dict[str, object]:
    """The one-command options given (not None), by name."""
    return {n: getattr(args, n) for n in names if getattr(args, n) is not None}


def check_one_command(args: argparse.Namespace, given: dict[str, object], command: str) -> bool:
    """True: the one-command form (no config; --target and --gpu given); a config with those
    options, or neither, is a one-line error (``ValueError``)."""
    if args.config is not None:
        if given:
            first = next(iter(given)).replace("_", "-")
            raise ValueError(f"--{first}: only without a config file (the one-command "
                             f"{command}); the config says it")
        return False
    if "target" not in given or "gpu" not in given:
        raise ValueError(f"{command}: a config file, or --target and --gpu (the one-command "
                         f"{command}; see psdlab {command} --help)")
    return True
