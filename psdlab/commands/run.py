"""`psdlab run`: serve prompts with AR, SD, SD-separate, PSD or the adaptive policy (AR / SD /
PSD and k chosen per step) for real and write the trace.  This module parses the arguments and
prints; ``runtime.run_command.serve_command`` does the rest."""
from __future__ import annotations

import argparse
import sys

from psdlab.analysis.modes import SERVER_MODES
from psdlab.cli_options import add_worker_args


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
                   help="m: sequences verified per step, 1..4096 (PSD keeps two batches of m)")
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


def run(args: argparse.Namespace) -> int:
    from psdlab.runtime.run_command import serve_command
    printout = serve_command(args)
    for line in printout.out:
        print(line)
    for line in printout.err:
        print(line, file=sys.stderr)
    return printout.code
