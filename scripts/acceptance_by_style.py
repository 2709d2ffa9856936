"""How the demo's served prompts accept drafts against the acceptance pool, by side, k and
style, at the same k and the same output lengths: whether the held-out prompts draft like the
calibration population the acceptance model learned.

    .venv/bin/python scripts/acceptance_by_style.py psdlab-demo

One line per side (``calibration``: the calibration and repeat runs; ``heldout``: the judged
held-out runs) and k: the measured acceptance rate (accepted / proposed draft tokens over every
verification, so a request that drafts badly weighs by the verifications it takes, as it does
in TPOT) and the pool's (every pool pattern walked greedily at that k, ``validation.
acceptance_pool.walk``, once for each output length the side's requests had), overall and by
style.  A prompt's style is the acceptance model's (``sim.acceptance_fitted.style_of``: the
id's text before the first ``-``).
Under each held-out line, what prompt sampling alone gives: sets of as many pool prompts, with
the held-out side's style mix, drawn with replacement (``--draws``, seed 0): the spread of
their pooled rate and how often it falls as low as the held-out side's.
``--by-split``: under each held-out line, the pool's rate by the split of
``runtime/data/prompts.jsonl`` its prompts come from (the same walk), so a trend between prompt
sets shows.
A diagnostic of the reasons for a miss, not a fit: nothing is written.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
from collections import Counter, defaultdict

import numpy as np

from psdlab.sim.acceptance_fitted import style_of
from psdlab.validation.acceptance_transfer import prompt_of

SIDES = {"calibrate": "calibration", "repeat": "calibration", "validate": "heldout"}


def _served(folder: str) -> dict[tuple[str, int], dict]:
    """(side, k) -> accepted / proposed / verifications by style, the output lengths and the
    prompts served."""
    from psdlab.analysis.trace import read_trace
    out: dict[tuple[str, int], dict] = {}
    for path in sorted(glob.glob(os.path.join(folder, "traces", "*.jsonl"))):
        tr = read_trace(path)
        side = SIDES.get((tr.run.extra or {}).get("demo_role"))
        if side is None or not tr.run.k:
            continue
        d = out.setdefault((side, int(tr.run.k)), {"acc": defaultdict(lambda: [0, 0, 0]),
                                                     "lengths": Counter(), "prompts": set()})
        for r in tr.requests:
            d["lengths"][int(r.output_len)] += 1
            d["prompts"].add(prompt_of(r.id))
        for step in tr.steps:
            for v in step.verified:
                row = d["acc"][style_of(v.req)]
                row[0] += v.accepted
                row[1] += v.proposed
                row[2] += 1
    return out


def walk_pool(pool: dict[str, str], k: int, lengths: Counter
              ) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Style, accepted and proposed draft tokens of each pool prompt walked greedily at k
    (``validation.acceptance_pool.walk``), once per served output length, weighted by how
    often the side served it (``validation.set_shift.walked_counts``)."""
    from psdlab.validation.set_shift import walked_counts
    rids = sorted(pool)
    counts = walked_counts([pool[r] for r in rids], k, lengths)
    return [style_of(r) for r in rids], counts[:, 0], counts[:, 1]


def chance(walked: tuple[list[str], np.ndarray, np.ndarray], mix: Counter, measured: float,
           draws: int, seed: int = 0) -> tuple[float, float] | None:
    """Prompt sampling alone: sets of pool prompts (``walked``, from `walk_pool`) with the
    side's style mix (``mix``: prompts per style, drawn with replacement within the style),
    their pooled acceptance rate over ``draws`` draws; (its SD relative to the pool's rate,
    the share of draws at or below ``measured``).  None when a style of the mix has no pool
    prompt."""
    names, acc, prop = walked
    members = {s: np.flatnonzero(np.asarray(names) == s) for s in mix}
    if not names or any(m.size == 0 for m in members.values()) or prop.sum() == 0:
        return None
    rng = np.random.default_rng(seed)
    rates = np.empty(draws)
    for i in range(draws):
        pick = np.concatenate([rng.choice(members[s], n) for s, n in sorted(mix.items())])
        rates[i] = acc[pick].sum() / max(prop[pick].sum(), 1.0)
    return float(rates.std() / (acc.sum() / prop.sum())), float(np.mean(rates <= measured))


def _sum_by(keys: list[str], walked: tuple[list[str], np.ndarray, np.ndarray]
            ) -> dict[str, list[float]]:
    """Accepted / proposed draft tokens of the walked pool, summed by each row's key."""
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for key, a, p in zip(keys, walked[1], walked[2]):
        out[key][0] += a
        out[key][1] += p
    return out


def _by_style(walked: tuple[list[str], np.ndarray, np.ndarray]) -> dict[str, list[float]]:
    """Accepted / proposed draft tokens of the walked pool, summed by style."""
    return _sum_by(walked[0], walked)


def by_split(walked: tuple[list[str], np.ndarray, np.ndarray], ids: list[str],
             split_of: dict[str, str]) -> dict[str, list[float]]:
    """Accepted / proposed draft tokens of the walked pool (``walk_pool``, whose rows follow
    the sorted pool ids ``ids``), summed by each prompt's split (``other``: not in the file)."""
    return _sum_by([split_of.get(prompt_of(rid), "other") for rid in ids], walked)


def _rate(rows) -> float:
    acc, prop = sum(r[0] for r in rows), sum(r[1] for r in rows)
    return acc / prop if prop else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("demo", help="a demo folder (holds traces/ and acceptance_pool.json)")
    ap.add_argument("--draws", type=int, default=2000,
                    help="bootstrap draws for the chance line of each held-out k (0: none)")
    ap.add_argument("--by-split", action="store_true",
                    help="the pool's rate by prompt split under each held-out line")
    args = ap.parse_args(argv)
    if args.draws < 0:
        print(f"--draws: must be >= 0, got {args.draws}", file=sys.stderr)
        return 2
    pool_file = os.path.join(args.demo, "acceptance_pool.json")
    if not os.path.isfile(pool_file):
        print(f"demo: no acceptance_pool.json in {args.demo}", file=sys.stderr)
        return 2
    with open(pool_file, encoding="utf-8") as fh:
        pool = json.load(fh).get("prompts") or {}
    served = _served(args.demo)
    split_of: dict[str, str] = {}
    if args.by_split:
        from psdlab.runtime.prompts import load_prompts
        split_of = {p.id: p.split for p in load_prompts(split="all")}
    if not served:
        print(f"demo: no drafting runs with a demo role in {args.demo}/traces", file=sys.stderr)
        return 2
    for (side, k), d in sorted(served.items()):
        walked = walk_pool(pool, k, d["lengths"])
        pooled = _by_style(walked)
        acc = d["acc"]
        by_style = "; ".join(f"{s} {_rate([acc[s]]):.3f} / {_rate([pooled[s]]):.3f}"
                             for s in sorted(acc))
        verifs = sum(r[2] for r in acc.values())
        measured = _rate(acc.values())
        print(f"{side:>11} k={k}: measured {measured:.3f} ({verifs} verifications) "
              f"/ pool {_rate(pooled.values()):.3f} ({len(pool)} prompts); by style, "
              f"measured / pool: {by_style}")
        if args.draws and side == "heldout":
            mix = Counter(style_of(p) for p in d["prompts"])
            got = chance(walked, mix, measured, args.draws)
            if got is not None:
                print(f"{'':>11}   chance alone: sets of {sum(mix.values())} pool prompts "
                      f"with this style mix ({args.draws} draws): SD {100 * got[0]:.1f}% of "
                      f"the pool's rate; {100 * got[1]:.1f}% of draws at or below "
                      f"{measured:.3f}")
        if args.by_split and side == "heldout":
            rows = by_split(walked, sorted(pool), split_of)
            count = Counter(split_of.get(prompt_of(i), "other") for i in pool)
            print(f"{'':>11}   pool by split: " + "; ".join(
                f"{name} {_rate([r]):.3f} ({count[name]} prompts)"
                for name, r in sorted(rows.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
