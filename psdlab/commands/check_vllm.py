"""`psdlab check-vllm -o DIR`: the real loop against vLLM's own server and client.

In the vLLM environment: starts ``vllm serve`` (vLLM's OpenAI-compatible server, CPU) once per
server configuration -- AR, and vLLM's draft-model speculative decoding with psdlab's committed
drafter at each k of ``--ks`` -- with the target's threads on ``--target-core``; drives each with
vLLM's own ``vllm bench serve`` at each rate of ``--rates`` on the same prompts (``--repeats``
runs of every configuration), snapshots ``/metrics`` around every run; runs a co-run probe of
the model pair and PSD inside vLLM offline (psdlab's plugin) at ``--psd-ks`` on the same
prompts; then fits on the calibration (by default every rate of the SD server with the largest
k) and predicts the other servers and the PSD runs (`validation.vllm_check.harness`,
`validation.vllm_check.judgement`, `validation.vllm_check.psd_check`).
Writes ``DIR/check_vllm.json``, ``DIR/check_vllm.md``, the bench results (``DIR/bench``),
the snapshots (``DIR/metrics``), the PSD traces and probe (``DIR/psd``), all again in one file
(``DIR/runs.json``, what ``--reuse`` reads) and the logs (``DIR/logs``).
"""
from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "check-vllm", help="benchmark vLLM's own server with vLLM's own client (AR and SD), "
                           "calibrate on one server's rates, predict the other servers",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None)
    p.add_argument("-o", "--out", required=True, metavar="DIR", help="output directory")
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    p.add_argument("--rates", default="0.5,1", metavar="R,R",
                   help="request rates (req/s, > 0) of vLLM bench's Poisson arrivals "
                        "(default 0.5,1)")
    p.add_argument("--ks", default="4,2", metavar="K,K",
                   help="draft lengths of the SD servers, 1-16 (default 4,2)")
    p.add_argument("--calibration", default=None, metavar="CONFIG",
                   help="what the fit sees: a server (sd-k4: all its rates, fitted jointly) "
                        "or one configuration (sd-k4@0.5); default: every rate of the SD "
                        "server with the largest k (its first rate when it is the only server)")
    p.add_argument("--num-prompts", type=int, default=24, help="prompts per run (default 24)")
    p.add_argument("--output-len", type=int, default=32,
                   help="output tokens per request, EOS ignored (default 32)")
    p.add_argument("--repeats", type=int, default=2,
                   help="runs of every configuration (their spread is the noise), >= 1 "
                        "(default 2)")
    p.add_argument("--no-ar", action="store_true", help="no AR server")
    p.add_argument("--tiny", action="store_true",
                   help="the tiny random model pair (runtime/vllm_ext/tiny.py), for CI")
    p.add_argument("--target", default=None, help="target HF directory (default: SmolLM2)")
    p.add_argument("--draft", default=None,
                   help="draft HF directory (default: psdlab's committed drafter)")
    p.add_argument("--target-core", type=int, default=1,
                   help="core of the target's threads (VLLM_CPU_OMP_THREADS_BIND); -1: unbound")
    p.add_argument("--client-core", type=int, default=0,
                   help="core of the bench client (taskset); -1: unbound")
    p.add_argument("--startup-timeout", type=float, default=600.0,
                   help="seconds to wait for a server's /health (default 600)")
    p.add_argument("--bench-timeout", type=float, default=900.0,
                   help="seconds one bench run may take (default 900)")
    p.add_argument("--server-command", default=None, metavar="CMD",
                   help="launcher the serve arguments are appended to (default: vLLM's CLI, "
                        "python -m psdlab.runtime.vllm_ext.vllm_cli)")
    p.add_argument("--reuse", action="store_true",
                   help="start no server: judge the runs DIR/check_vllm.json already records "
                        "again (e.g. with another --calibration), their files from "
                        "DIR/runs.json (else DIR/bench and DIR/metrics); writes "
                        "DIR/check_vllm-<calibration>.json and .md")
    p.add_argument("--drafter-ratio", default="configs", metavar="R|configs|none",
                   help="structural prior for the fit: a drafter forward pass costs R target "
                        "passes (a number in (0, 10]); 'configs' (default): R from the two "
                        "served models' config.json (validation.serving_results.drafter_prior); "
                        "'none': no "
                        "prior, so an SD-only calibration cannot split its step between target "
                        "and drafter")
    p.add_argument("--psd-ks", default="auto", metavar="K,K|auto|none",
                   help="draft lengths of PSD inside vLLM (psdlab's plugin, offline, each run "
                        "--repeats times, held out: predicted from the calibration and a "
                        "co-run probe); auto (default): the calibrated k and one other; none: "
                        "no PSD runs")
    p.add_argument("--psd-batch", type=int, default=4, metavar="M",
                   help="PSD's m, requests verified per step (2m in flight), 1-64 (default 4)")
    p.add_argument("--probe-reps", type=int, default=12, metavar="N",
                   help="repeats of each co-run probe timing, 2-1000 (default 12)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bootstrap", type=int, default=10,
                   help="bootstrap replicates of the fit's intervals (default 10)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from psdlab.analysis.checks import check_output_path
    from psdlab.validation.vllm_check.harness import check_vllm_command, settings_from_options
    check_output_path("--out", args.out, folder=True)           # before any server starts
    s = settings_from_options(
        rates=args.rates, ks=args.ks, calibration=args.calibration,
        num_prompts=args.num_prompts, output_len=args.output_len, repeats=args.repeats,
        no_ar=args.no_ar, tiny=args.tiny, target=args.target, draft=args.draft,
        target_core=args.target_core, client_core=args.client_core,
        startup_timeout=args.startup_timeout, bench_timeout=args.bench_timeout,
        server_command=args.server_command, drafter_ratio=args.drafter_ratio, seed=args.seed,
        bootstrap=args.bootstrap, psd_ks=args.psd_ks, psd_batch=args.psd_batch,
        probe_reps=args.probe_reps)
    print(check_vllm_command(s, args.out, sys.argv[2:], reuse=args.reuse, as_json=args.json))
    return 0
