"""Does a prompt's own text tell how well it will draft?  A candidate covariate for the
acceptance model that needs the prompt only, checked against the prompts' greedy acceptance.

    .venv/bin/python scripts/prompt_agreement.py PATTERNS.json -o results/acceptance/NAME
    .venv/bin/python scripts/prompt_agreement.py PATTERNS.json --features NAME-features.json

Features (``runtime.acceptance_probe.prompt_agreement``: one teacher-forced pass of the target
and of the drafter over each shipped prompt in the chat template, no generation, past the
template's shared prefix): ``agree``, the share of prompt positions where both models' greedy
next tokens are equal, and ``overlap``, the mean of sum_v min(p, q).  A prompt's acceptance is
its rate at k = 4 in PATTERNS (``scripts/acceptance_by_set.py``'s patterns file: accepted /
proposed of its pattern walked over the demo's output lengths).  Writes ``NAME-features.json``
and ``NAME.txt`` (what it prints):

- per feature, the correlation with a prompt's acceptance within each style, over the sets
  written after ``train``/``heldout`` (``validation.set_shift.LATER``);
- per set: its level and each feature's mean;
- transfer: each later set's level predicted from the other later sets, once from their
  style levels alone (weighted by the set's style mix) and once with a within-style linear
  term in the feature (fitted on the other sets, applied to the set's own prompts):
  predicted / measured - 1.  A covariate that explained the sets' differences would shrink
  these errors.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from psdlab.validation.set_shift import LATER, prompt_counts, walk_lengths

K = 4
FEATURES = ("agree", "overlap")


def measure(prompts: list) -> tuple[dict, int]:
    """Features of every prompt; (features, shared prefix length)."""
    from psdlab.runtime.acceptance_probe import prompt_agreement
    from psdlab.runtime.pair import prepare_pair
    from psdlab.runtime.session import load_tokenizer
    from psdlab.validation.demo_prompts import encode
    pair = prepare_pair(progress=True)
    items = encode(load_tokenizer(pair.tokenizer_dir), prompts)
    a, b = items[0][1], items[1][1]
    skip = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
    return prompt_agreement(pair.target_dir, pair.drafter_dir, items, skip), skip


def rates(patterns: dict[str, str]) -> dict[str, float]:
    """Each prompt's acceptance rate at K over the demo's output lengths."""
    from psdlab.validation.runs import default_plan
    lengths = walk_lengths(default_plan())
    out = {}
    for pid, pat in patterns.items():
        acc, prop = prompt_counts(pat, K, lengths)
        out[pid] = acc / prop if prop else float("nan")
    return out


def transfer(rows: list[tuple[str, str, float, float]], target: str, with_feature: bool
             ) -> float:
    """Predicted / measured - 1 of split ``target``'s mean rate, fitted on the other rows."""
    train = [r for r in rows if r[0] != target]
    test = [r for r in rows if r[0] == target]
    pred = []
    for _, style, _, x in test:
        same = [r for r in train if r[1] == style] or train     # a style the others lack
        ys, xs = np.array([r[2] for r in same]), np.array([r[3] for r in same])
        slope = np.polyfit(xs, ys, 1)[0] if with_feature and xs.std() > 0 else 0.0
        pred.append(ys.mean() + slope * (x - xs.mean()))
    return float(np.mean(pred) / np.mean([r[2] for r in test]) - 1.0)


def report(features: dict, patterns: dict[str, str]) -> list[str]:
    from psdlab.runtime.prompts import load_prompts
    meta = {p.id: p for p in load_prompts(split="all")}
    rate = rates(patterns)
    ids = [pid for pid in patterns if pid in features and pid in meta]
    later = [pid for pid in ids if meta[pid].split in LATER]
    styles = sorted({meta[pid].style for pid in ids})
    out = [f"{len(ids)} prompts with features and patterns; acceptance rate at k = {K}", "",
           "within-style correlation of a prompt's rate with its feature (later sets pooled):",
           "  feature  " + "  ".join(f"{s:>9s}" for s in styles)]
    for f in FEATURES:
        cs = []
        for s in styles:
            of = [pid for pid in later if meta[pid].style == s]
            cs.append(np.corrcoef([features[p][f] for p in of], [rate[p] for p in of])[0, 1])
        out.append(f"  {f:8s} " + "  ".join(f"{c:+9.2f}" for c in cs))
    out += ["", "per set: mean rate, mean feature"]
    splits = [s for s in ("train", "heldout", *LATER) if any(meta[p].split == s for p in ids)]
    for s in splits:
        of = [p for p in ids if meta[p].split == s]
        out.append(f"  {s:8s} n={len(of):3d}  rate {np.mean([rate[p] for p in of]):.3f}  "
                   + "  ".join(f"{f} {np.mean([features[p][f] for p in of]):.3f}"
                               for f in FEATURES))
    out += ["", "transfer to each later set from the other later sets: predicted / measured - 1",
            "  set       style mix  " + "  ".join(f"+{f:>8s}" for f in FEATURES)]
    errs: dict[str, list[float]] = {"style mix": [], **{f: [] for f in FEATURES}}
    for s in [x for x in splits if x in LATER]:
        base = [(meta[p].split, meta[p].style, rate[p], 0.0) for p in later]
        e0 = transfer(base, s, False)
        errs["style mix"].append(e0)
        cells = []
        for f in FEATURES:
            e = transfer([(meta[p].split, meta[p].style, rate[p], features[p][f])
                          for p in later], s, True)
            errs[f].append(e)
            cells.append(f"{100 * e:+8.1f}%")
        out.append(f"  {s:8s} {100 * e0:+9.1f}%  " + "  ".join(cells))
    out.append("  mean |e|  " + "  ".join(f"{100 * np.mean(np.abs(v)):8.1f}%"
                                          for v in errs.values()))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("patterns", help="a patterns file of scripts/acceptance_by_set.py")
    ap.add_argument("--features", help="read the features a former call wrote")
    ap.add_argument("-o", "--out", help="write OUT-features.json and OUT.txt")
    args = ap.parse_args(argv)
    try:
        with open(args.patterns, encoding="utf-8") as fh:
            patterns = dict(json.load(fh)["patterns"])
        if args.features:
            with open(args.features, encoding="utf-8") as fh:
                features = json.load(fh)["features"]
        else:
            from psdlab.runtime.prompts import load_prompts
            t = time.perf_counter()
            features, skip = measure(load_prompts(split="all"))
            if args.out:
                from acceptance_by_set import machine
                with open(f"{args.out}-features.json", "w", encoding="utf-8") as fh:
                    json.dump({**machine(), "skip": skip, "wall_s":
                               round(time.perf_counter() - t, 1), "features": features}, fh)
    except (OSError, KeyError, ValueError) as exc:
        print(f"prompt_agreement: {exc}", file=sys.stderr)
        return 2
    lines = report(features, patterns)
    print("\n".join(lines))
    if args.out:
        with open(f"{args.out}.txt", "w", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    raise SystemExit(main())
