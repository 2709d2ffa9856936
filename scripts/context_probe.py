"""The controlled context probe on this machine's cores, outside a demo: how a verification and
a drafting phase slow down with their KV context (``runtime.context_probe``).

    .venv/bin/python scripts/context_probe.py [--k 3 4] [--seqs 4] [--repeat 2]

Starts the shipped model pair on two worker processes (drafter on core 0, target on core 1,
as the demo does), runs the probe at each k (and ``--repeat`` times each, to show its own
spread), and prints one JSON line per probe: the slopes in seconds per summed context token
(the draft's per pass) with their standard errors and mean times at the two contexts.  The
demo runs the same probe once before its runs and calibrates on it; this script is how its
figures are reproduced and how far they move from one probe to the next.
"""
from __future__ import annotations

import argparse
import json
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--k", type=int, nargs="+", default=[4], help="draft lengths (default 4)")
    ap.add_argument("--seqs", type=int, default=4, help="sequences a pass (default 4)")
    ap.add_argument("--repeat", type=int, default=1, help="probes per k (default 1)")
    args = ap.parse_args()
    from psdlab.runtime.context_probe import context_probe
    from psdlab.runtime.engine import Engine, EngineConfig
    from psdlab.runtime.runner import ModelSpec
    from psdlab.validation.demo import resolve_pair
    target, drafter, _ = resolve_pair(None, None, True)
    cfg = EngineConfig(mode="psd", k=max(args.k), batch=args.seqs, max_new_tokens=16,
                       ignore_eos=True, max_len=1024, backend="process")
    with Engine(cfg, ModelSpec(target), ModelSpec(drafter)) as eng:
        for k in args.k:
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                got = context_probe(eng.target, eng.drafter, seqs=args.seqs, k=k,
                                    slots=cfg.slots)
                print(json.dumps({**got, "wall_s": round(time.perf_counter() - t0, 2)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
