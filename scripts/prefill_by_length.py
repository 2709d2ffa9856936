"""How the target's measured prefill times compare with the demo's calibrated prefill cost model,
by prompt length, on the calibration runs and on the held-out runs apart: whether the cost
model transfers to prompt lengths the calibration did not serve.

    .venv/bin/python scripts/prefill_by_length.py psdlab-demo [--edges 35,45,55,100,125,135]
        [--passes 128,1]

Single-sequence target prefills only (a prefill of several prompts feeds them one after
another, so its time mixes several lengths); one line per side and length bucket: the count,
total measured / total predicted time, and the mean measured time.  The prediction charges
each pass over a 128-token chunk (``analysis.chunking``) when the trace records the passes,
or ``--passes`` gives the rule for older traces.  A diagnostic of the reasons for a miss, not
a fit: nothing is written.
"""
from __future__ import annotations

import argparse
import glob
import os
import sys


def _prefills(folder: str, cal, rule=None) -> dict[str, list[tuple[int, float, float]]]:
    """(prompt tokens, measured s, predicted s) of every single-sequence target prefill, by
    side (``calibration`` / ``heldout``, from the run's demo role).  ``rule``: the passes of a
    phase that records none (a trace older than ``Phase.chunks``), by this chunking."""
    from dataclasses import replace
    from psdlab.analysis.trace import read_trace
    from psdlab.validation.calibrate import design
    out: dict[str, list[tuple[int, float, float]]] = {"calibration": [], "heldout": []}
    for path in sorted(glob.glob(os.path.join(folder, "traces", "*.jsonl"))):
        tr = read_trace(path)
        role = (tr.run.extra or {}).get("demo_role")
        side = {"calibrate": "calibration", "validate": "heldout"}.get(role)
        target = tr.run.devices.get("target")
        if side is None:
            continue
        for step in tr.steps:
            for ph in step.phases:
                if (ph.kind == "prefill" and ph.device == target and ph.seqs == 1
                        and ph.end > ph.start):
                    if rule is not None and not ph.chunks:
                        ph = replace(ph, chunks=rule.passes([ph.tokens]))
                    pred = float(cal.costs["prefill"].predict(design("prefill", [ph]))[0])
                    out[side].append((int(ph.tokens), ph.end - ph.start, pred))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("demo", help="a demo folder (holds model.json and traces/)")
    ap.add_argument("--edges", default="35,45,55,100,125,135",
                    help="bucket edges in prompt tokens, comma-separated, increasing")
    ap.add_argument("--passes", default=None, metavar="CHUNK,LEAVE",
                    help="for traces that record no prefill passes (written before psdlab "
                         "recorded them): count them by this rule, e.g. 128,1 (the runtime's "
                         "target prefill); recorded passes always win")
    args = ap.parse_args(argv)
    rule = None
    if args.passes is not None:
        from psdlab.analysis.chunking import chunking_from
        try:
            parts = [int(x) for x in args.passes.split(",")]
        except ValueError:
            parts = args.passes       # not integers: chunking_from names the field and form
        try:
            rule = chunking_from(parts, "--passes")
        except ValueError as exc:
            print(exc, file=sys.stderr)
            return 2
    try:
        edges = [int(x) for x in args.edges.split(",")]
        if edges != sorted(set(edges)) or edges[0] < 1:
            raise ValueError
    except ValueError:
        print(f"--edges: expected increasing positive integers, got {args.edges!r}",
              file=sys.stderr)
        return 2
    model = os.path.join(args.demo, "model.json")
    if not os.path.isfile(model):
        print(f"demo: no model.json in {args.demo}", file=sys.stderr)
        return 2
    from psdlab.validation.model_file import read_model
    from psdlab.validation.replay_model import calibration_view
    cal = calibration_view(read_model(model))
    if "prefill" not in cal.costs:
        print(f"demo: {model} has no prefill cost model", file=sys.stderr)
        return 2
    bounds = [0, *edges, 10 ** 9]
    for side, rows in _prefills(args.demo, cal, rule).items():
        longest = max((t for t, _, _ in rows), default=0)
        print(f"{side}: {len(rows)} single-sequence target prefills, longest {longest} tokens")
        for lo, hi in zip(bounds, bounds[1:]):
            got = [(m, p) for t, m, p in rows if lo <= t < hi]
            if got:
                meas, pred = sum(m for m, _ in got), sum(p for _, p in got)
                top = "" if hi == 10 ** 9 else f"{hi - 1}"
                print(f"  tokens {lo:>4}-{top:<4}: n {len(got):>4}  measured / predicted "
                      f"{meas / pred:.3f}  mean measured {1e3 * meas / len(got):.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
