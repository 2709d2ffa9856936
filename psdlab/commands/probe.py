"""`psdlab probe`: the co-run probe on the real model pair (or given model folders): both
models' passes alone and at once on their own devices, no PSD controller; writes the record
that `psdlab calibrate --corun-probe` (and the demo) predicts PSD from, and prints its fit."""
from __future__ import annotations

import argparse
import json
import sys


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "probe", help="co-run probe: the drafter's and target's passes at once vs alone",
        description="Time the verification and the drafting phase of the model pair alone, "
                    "one after the other and at the same time on their own devices (two CPU "
                    "cores here), a few seconds, no PSD controller; write the record "
                    "(corun_probe.json) that `psdlab calibrate --corun-probe` predicts PSD "
                    "from with AR and SD runs alone, and print the contention it measured.")
    p.add_argument("-o", "--output", default="corun_probe.json", metavar="FILE",
                   help="where to write the record (default ./corun_probe.json; a folder: "
                        "corun_probe.json in it, e.g. beside your calibration traces)")
    p.add_argument("--batch", type=int, default=4, metavar="M",
                   help="sequences per pass, 1..256 (default 4)")
    p.add_argument("--k", default="2,4", metavar="K,K",
                   help="draft tokens per step to probe, each 1..16 (default 2,4)")
    p.add_argument("--context", type=int, default=64, metavar="N",
                   help="context tokens per sequence, 1..2048 (default 64)")
    p.add_argument("--reps", type=int, default=12, metavar="N",
                   help="repeats of each timing, 2..1000 (default 12)")
    p.add_argument("--target", default=None, metavar="DIR",
                   help="target model directory (HF format) instead of the real pair")
    p.add_argument("--draft", default=None, metavar="DIR", help="drafter model directory")
    p.add_argument("--json", action="store_true", help="print the fit as one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from psdlab.analysis.checks import check_int, check_output_path
    from psdlab.analysis.contention import fit_corun
    import os
    if not os.path.isdir(args.output):
        check_output_path("--output", args.output)
    ks = []
    for part in str(args.k).split(","):
        try:
            ks.append(check_int("--k", int(part), minimum=1, maximum=16))
        except ValueError:
            raise ValueError(f"--k: each k must be an integer in 1..16, got {part!r}") from None
    check_int("--batch", args.batch, minimum=1, maximum=256)
    check_int("--context", args.context, minimum=1, maximum=2048)
    check_int("--reps", args.reps, minimum=2, maximum=1000)
    from psdlab.validation.demo.run_demo import resolve_pair
    target, drafter, _ = resolve_pair(args.target, args.draft, quiet=args.json)
    from psdlab.runtime.corun_probe import probe_pair
    from psdlab.validation.corun_file import write_corun
    probe = probe_pair(target, drafter, seqs=args.batch, ks=ks, context=args.context,
                       reps=args.reps)
    path = write_corun(args.output, probe)
    fit = fit_corun(probe)
    if args.json:
        print(json.dumps({"file": path, **fit.to_dict()}, indent=1))
        return 0
    print(f"co-run probe on {probe.devices[0]} (target) + {probe.devices[1]} (drafter), "
          f"{probe.layout}: contention c target {fit.target:+.3f}, drafter {fit.drafter:+.3f}; "
          f"host time a co-run step hides vs a serial one {1e3 * fit.host_saving_s:.3f} ms")
    print(f"{'seqs':>5} {'k':>3} {'ctx':>5} {'verify x':>9} {'draft x':>8} {'c_t':>7} {'c_d':>7}")
    for s in fit.shapes:
        print(f"{s.seqs:>5} {s.k:>3} {s.context:>5} {s.slowdown_verify:>9.3f} "
              f"{s.slowdown_draft:>8.3f} {s.target:>+7.3f} {s.drafter:>+7.3f}")
    print(f"wrote {path}", file=sys.stderr)
    return 0
