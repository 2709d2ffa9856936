"""Does a new prompt set draft like the sets before it?  Every shipped prompt set's acceptance
level, its spread beyond prompt sampling, and how well the earlier sets predict the next.

    .venv/bin/python scripts/acceptance_by_set.py -o results/acceptance/NAME
    .venv/bin/python scripts/acceptance_by_set.py --patterns NAME-patterns.json -o NAME

Probes, untimed, every prompt of every split of ``runtime/data/prompts.jsonl`` with the demo's
pair (the cached target and drafter, ``runtime.pair.prepare_pair``; ``runtime.acceptance_probe``:
greedy, so the patterns do not depend on the machine's speed) at the demo's request length,
or reads the patterns a former call wrote (``--patterns``).  Writes ``NAME-patterns.json``
(the patterns, with machine, date and commit) and ``NAME.txt`` (what it prints):

- per split in writing order (``validation.set_shift.WRITING_ORDER``), at k = 3 and 4: the
  acceptance rate (each pattern walked at k once per output length the demo's requests have),
  its bootstrap SE over prompts within style, the relative SE of one run's window of 32 of its
  prompts (the SE scaled by sqrt(n / 32)), and per style;
- the between-set SD of the levels beyond sampling (``validation.set_shift.between_set_sd``),
  over the sets written after ``train``/``heldout`` and over all;
- forward chaining (``validation.set_shift.forward_chain``): each set predicted from the sets
  written before it by three rules (pooled, previous set, linear trend), relative errors; once
  from every earlier set, once from the earlier later sets only (as the demo's pool).

``--transfer``: then, for each set written after ``train``/``heldout``, every candidate of the
demo's acceptance model (``validation.acceptance_transfer.CANDIDATES``, and pattern
resampling by style) fitted as the demo fits its pool -- the other later sets' patterns walked
at the calibration k (2 and 4) -- and simulated on the set's prompts at k = 3 and 4
(``validation.set_shift.simulated_rate``): predicted / measured - 1.  The last case is the
demo's own pool (``validation.demo_prompts.pool_list``) predicting its held-out split.

A diagnostic of why held-out acceptance misses: nothing here feeds the demo's prediction.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections import defaultdict

from psdlab.validation.set_shift import WRITING_ORDER

KS = (3, 4)
#: prompts a demo run serves (``validation.runs.Plan.num_prompts``)
WINDOW = 32


def shipped() -> list:
    from psdlab.runtime.prompts import load_prompts
    return load_prompts(split="all")


def probe_all(prompts: list) -> tuple[dict[str, str], int, float]:
    """Patterns of every prompt with the demo's pair; (patterns, max_new_tokens, wall s)."""
    from psdlab.runtime.acceptance_probe import probe_patterns
    from psdlab.runtime.pair import prepare_pair
    from psdlab.runtime.session import load_tokenizer
    from psdlab.validation.demo_prompts import _encode
    from psdlab.validation.runs import DEMO_MAX_NEW_TOKENS
    pair = prepare_pair(progress=True)
    items = _encode(load_tokenizer(pair.tokenizer_dir), prompts)
    t = time.perf_counter()
    patterns = probe_patterns(pair.target_dir, pair.drafter_dir, items, DEMO_MAX_NEW_TOKENS)
    return patterns, DEMO_MAX_NEW_TOKENS, time.perf_counter() - t


def machine() -> dict:
    flags = ""
    try:
        with open("/proc/cpuinfo") as fh:
            info = fh.read()
        model = next((ln.split(":", 1)[1].strip() for ln in info.splitlines()
                      if ln.startswith("model name")), platform.processor())
        flags = " ".join(f for f in ("avx2", "avx512f", "avx512_fp16", "amx_tile")
                         if f" {f}" in info)
    except OSError:
        model = platform.processor()
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=False).stdout.strip()
    except OSError:
        commit = ""
    return {"cpu": model, "flags": flags, "cores": os.cpu_count(), "commit": commit,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def _lengths():
    """The output lengths the demo's requests draw (240 of them, seeded as the plan draws)."""
    from psdlab.validation import set_shift
    from psdlab.validation.runs import default_plan
    return set_shift.output_lengths(default_plan().output_lengths(240))


def report(prompts: list, patterns: dict[str, str], max_new: int) -> list[str]:
    from psdlab.validation import set_shift
    lengths = _lengths()
    by_split: dict[str, list] = defaultdict(list)
    for p in prompts:
        if p.id in patterns:
            by_split[p.split].append(p)
    order = [s for s in set_shift.WRITING_ORDER if by_split.get(s)]
    lines = [f"patterns: {len(patterns)} prompts, {max_new} tokens each; output lengths "
             f"{min(lengths)}-{max(lengths)}, 240 drawn as the demo draws its requests"]
    for k in KS:
        levels = []
        lines.append(f"\nk = {k}: acceptance rate (accepted / proposed), bootstrap SE "
                     f"within style (window: the relative SE of {WINDOW} of its prompts, the SE "
                     f"scaled by sqrt(n / {WINDOW})), by style")
        for s in order:
            ps = by_split[s]
            rate, se = set_shift.level([patterns[p.id] for p in ps], [p.style for p in ps],
                                       k, lengths)
            levels.append(set_shift.SetLevel(s, len(ps), rate, se))
            styles = sorted({p.style for p in ps})
            per = []
            for st in styles:
                sub = [patterns[p.id] for p in ps if p.style == st]
                r, _ = set_shift.level(sub, [st] * len(sub), k, lengths, draws=1)
                per.append(f"{st} {r:.3f}")
            win = se * (len(ps) / WINDOW) ** 0.5 / rate
            lines.append(f"  {s:8s} n={len(ps):3d}  {rate:.3f} +- {se:.3f} (window {win:4.1%})  "
                         + ", ".join(per))
        later = [lv for lv in levels if lv.split not in ("train", "heldout")]
        lines.append(f"  between-set SD beyond sampling: {set_shift.between_set_sd(later):.4f}"
                     f" over {len(later)} later sets, "
                     f"{set_shift.between_set_sd(levels):.4f} over all {len(levels)}")
        first = order.index("fresh") if "fresh" in order else 2
        lines += _chain_lines("every set before it", set_shift.forward_chain(levels, first))
        lines += _chain_lines("the later sets before it (as the demo's pool: no train, no "
                              "heldout)", set_shift.forward_chain(later, 1))
    return lines


def _chain_lines(title: str, chain: list) -> list[str]:
    from psdlab.validation.set_shift import PREDICTORS
    names = list(PREDICTORS)
    lines = [f"  forward chaining, each set from {title}: predicted / measured - 1",
             "    " + f"{'set':8s} " + " ".join(f"{n:>13s}" for n in names)]
    for split, errs in chain:
        lines.append("    " + f"{split:8s} " + " ".join(f"{errs[n]:+13.1%}" for n in names))
    if chain:
        lines.append("    " + f"{'mean |e|':8s} " + " ".join(
            f"{sum(abs(e[n]) for _, e in chain) / len(chain):13.1%}" for n in names))
    return lines


#: the sets written after ``train`` and ``heldout``
LATER = tuple(s for s in WRITING_ORDER if s not in ("train", "heldout"))
RESAMPLED = "resampled patterns (by style)"


def _resampled_rate(fit_set: list, test: list, patterns: dict[str, str], k: int,
                    lengths) -> float:
    """A new request draws a whole pattern of a fitting prompt of its style: the fitting
    set's walked counts, each style weighed by the test set's share of it."""
    from collections import Counter
    from psdlab.validation.set_shift import prompt_counts
    want, have = Counter(p.style for p in test), Counter(p.style for p in fit_set)
    acc = prop = 0.0
    for p in fit_set:
        if want[p.style]:
            a, q = prompt_counts(patterns[p.id], k, lengths)
            acc += a * want[p.style] / have[p.style]
            prop += q * want[p.style] / have[p.style]
    return acc / prop


def transfer(prompts: list, patterns: dict[str, str], lengths) -> list[str]:
    """Every candidate fitted on the other later sets, predicting each later set."""
    from psdlab.sim.acceptance_fitted import make_fitted
    from psdlab.validation import set_shift
    from psdlab.validation.acceptance_pool import pool_verifications
    from psdlab.validation.acceptance_transfer import CANDIDATES, fit, trials
    from psdlab.validation.demo_prompts import SIDE_SPLITS, pool_list
    have = [p for p in prompts if p.id in patterns]
    cases = [(f"other later sets -> {s}", [p for p in have if p.split in LATER and
                                            p.split != s], [p for p in have if p.split == s])
             for s in LATER if any(p.split == s for p in have)]
    pool_ids = {p.id for p in pool_list()}
    held = SIDE_SPLITS["heldout"]
    demo_fit = [p for p in have if p.id in pool_ids]
    if demo_fit and any(p.split == held for p in have):
        cases.append((f"demo pool -> {held}", demo_fit, [p for p in have if p.split == held]))
    names = [c[0] for c in CANDIDATES] + [RESAMPLED]
    errs: dict[str, list[float]] = {n: [] for n in names}
    lines = ["", "transfer: each candidate fitted as the demo fits its pool (patterns walked at "
             "k = 2 and 4), predicting a set it never saw; predicted / measured - 1 at k = 3, 4"]
    for title, fit_set, test in cases:
        if not fit_set or not test:
            continue
        data = trials([], pool_verifications({p.id: patterns[p.id] for p in fit_set}, (2, 4)))
        truth = {k: set_shift.level([patterns[p.id] for p in test], [p.style for p in test],
                                    k, lengths) for k in KS}
        lines.append(f"  {title} ({len(fit_set)} fitting prompts, {len(test)} predicted; "
                     + ", ".join(f"k={k} measured {r:.3f} +- {se:.3f}"
                                 for k, (r, se) in truth.items()) + ")")
        for cand in CANDIDATES:
            model = make_fitted(fit(cand, data).spec(), "fit")
            e = [set_shift.simulated_rate(model, [p.id for p in test], lengths, k) /
                 truth[k][0] - 1 for k in KS]
            errs[cand[0]].extend(e)
            lines.append(f"    {cand[0]:42s} " + " ".join(f"{x:+7.1%}" for x in e))
        e = [_resampled_rate(fit_set, test, patterns, k, lengths) / truth[k][0] - 1 for k in KS]
        errs[RESAMPLED].extend(e)
        lines.append(f"    {RESAMPLED:42s} " + " ".join(f"{x:+7.1%}" for x in e))
    lines.append("  mean |error| over every case and k:")
    for n in names:
        if errs[n]:
            lines.append(f"    {n:42s} {sum(map(abs, errs[n])) / len(errs[n]):7.1%}"
                         f"   mean error {sum(errs[n]) / len(errs[n]):+7.1%}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--patterns", help="read the patterns a former call wrote (no probing)")
    ap.add_argument("-o", "--out", help="write OUT-patterns.json and OUT.txt")
    ap.add_argument("--transfer", action="store_true",
                    help="also fit every acceptance candidate on the other sets and predict each")
    args = ap.parse_args(argv)
    prompts = shipped()
    if args.patterns:
        try:
            with open(args.patterns, encoding="utf-8") as fh:
                saved = json.load(fh)
            patterns, max_new, meta = saved["patterns"], int(saved["max_new_tokens"]), saved
        except (OSError, ValueError, KeyError) as e:
            print(f"patterns: cannot read {args.patterns} ({e})", file=sys.stderr)
            return 2
    else:
        patterns, max_new, wall = probe_all(prompts)
        meta = {**machine(), "probe_wall_s": round(wall, 1)}
        if args.out:
            os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
            with open(args.out + "-patterns.json", "w", encoding="utf-8") as fh:
                json.dump({**meta, "max_new_tokens": max_new, "patterns": patterns}, fh,
                          indent=0, sort_keys=True)
    known = {p.id for p in prompts}
    unknown = sorted(set(patterns) - known)
    if unknown:
        print(f"patterns: {len(unknown)} ids not in the shipped prompts, e.g. {unknown[0]}",
              file=sys.stderr)
        return 2
    head = [f"machine: {meta.get('cpu', '?')} ({meta.get('flags', '')}), "
            f"{meta.get('cores', '?')} cores; probed {meta.get('date', '?')} at commit "
            f"{meta.get('commit', '?')}"]
    lines = head + report(prompts, patterns, max_new)
    if args.transfer:
        lines += transfer(prompts, patterns, _lengths())
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        with open(args.out + ".txt", "w", encoding="utf-8") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
