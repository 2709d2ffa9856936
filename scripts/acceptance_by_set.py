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
import sys
import time
from collections import Counter, defaultdict

import numpy as np

from psdlab.validation.set_shift import LATER, walk_lengths

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
    from psdlab.validation.demo_prompts import encode
    from psdlab.validation.runs import DEMO_MAX_NEW_TOKENS
    pair = prepare_pair(progress=True)
    items = encode(load_tokenizer(pair.tokenizer_dir), prompts)
    t = time.perf_counter()
    patterns = probe_patterns(pair.target_dir, pair.drafter_dir, items, DEMO_MAX_NEW_TOKENS)
    return patterns, DEMO_MAX_NEW_TOKENS, time.perf_counter() - t


def machine() -> dict:
    """The header fields of a patterns file (``validation.results_file``'s machine and git)."""
    from psdlab.validation.results_file import git_info, machine_info
    info = machine_info()
    return {"cpu": info["cpu_model"], "flags": " ".join(info["cpu_flags"]),
            "cores": info["cpus"], "commit": git_info()["short"] or "",
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def _lengths() -> Counter:
    """The walk's weights: output lengths as the demo's plan draws them."""
    from psdlab.validation.runs import default_plan
    return walk_lengths(default_plan())


#: (k, prompt id) -> (accepted, proposed) of its pattern walked at k (`walked_counts`)
Walked = dict[tuple[int, str], tuple[float, float]]


def walk_all(patterns: dict[str, str], lengths: Counter, ks: tuple[int, ...]) -> Walked:
    """Every pattern walked once at each of ``ks``, for the report and the transfer table."""
    from psdlab.validation.set_shift import prompt_counts
    return {(k, pid): prompt_counts(pat, k, lengths) for k in ks for pid, pat in patterns.items()}


def _level(walked: Walked, prompts: list, k: int, draws: int = 400) -> tuple[float, float]:
    from psdlab.validation.set_shift import counts_level
    return counts_level(np.array([walked[k, p.id] for p in prompts], float).reshape(-1, 2),
                        [p.style for p in prompts], k, draws)


def report(prompts: list, walked: Walked, lengths: Counter, n_patterns: int,
           max_new: int) -> list[str]:
    from psdlab.validation import set_shift
    by_split: dict[str, list] = defaultdict(list)
    for p in prompts:
        if (KS[0], p.id) in walked:
            by_split[p.split].append(p)
    order = [s for s in set_shift.WRITING_ORDER if by_split.get(s)]
    lines = [f"patterns: {n_patterns} prompts, {max_new} tokens each; output lengths "
             f"{min(lengths)}-{max(lengths)}, 240 drawn as the demo draws its requests"]
    for k in KS:
        levels = []
        lines.append(f"\nk = {k}: acceptance rate (accepted / proposed), bootstrap SE "
                     f"within style (window: the relative SE of {WINDOW} of its prompts, the SE "
                     f"scaled by sqrt(n / {WINDOW})), by style")
        for s in order:
            ps = by_split[s]
            rate, se = _level(walked, ps, k)
            levels.append(set_shift.SetLevel(s, len(ps), rate, se))
            per = [f"{st} {_level(walked, [p for p in ps if p.style == st], k, 1)[0]:.3f}"
                   for st in sorted({p.style for p in ps})]
            win = se * (len(ps) / WINDOW) ** 0.5 / rate
            lines.append(f"  {s:8s} n={len(ps):3d}  {rate:.3f} +- {se:.3f} (window {win:4.1%})  "
                         + ", ".join(per))
        later = [lv for lv in levels if lv.split in LATER]
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


RESAMPLED = "resampled patterns (by style)"


def _resampled_rate(fit_set: list, test: list, walked: Walked, k: int) -> float:
    """A new request draws a whole pattern of a fitting prompt of its style: the fitting
    set's walked counts, each style weighed by the test set's share of it."""
    want, have = Counter(p.style for p in test), Counter(p.style for p in fit_set)
    acc = prop = 0.0
    for p in fit_set:
        if want[p.style]:
            a, q = walked[k, p.id]
            acc += a * want[p.style] / have[p.style]
            prop += q * want[p.style] / have[p.style]
    return acc / prop


def transfer(prompts: list, patterns: dict[str, str], walked: Walked,
             lengths: Counter) -> list[str]:
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
        truth = {k: _level(walked, test, k) for k in KS}
        lines.append(f"  {title} ({len(fit_set)} fitting prompts, {len(test)} predicted; "
                     + ", ".join(f"k={k} measured {r:.3f} +- {se:.3f}"
                                 for k, (r, se) in truth.items()) + ")")
        for cand in CANDIDATES:
            model = make_fitted(fit(cand, data).spec(), "fit")
            e = [set_shift.simulated_rate(model, [p.id for p in test], lengths, k) /
                 truth[k][0] - 1 for k in KS]
            errs[cand[0]].extend(e)
            lines.append(f"    {cand[0]:42s} " + " ".join(f"{x:+7.1%}" for x in e))
        e = [_resampled_rate(fit_set, test, walked, k) / truth[k][0] - 1 for k in KS]
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
    lengths = _lengths()
    walked = walk_all(patterns, lengths, KS)
    lines = head + report(prompts, walked, lengths, len(patterns), max_new)
    if args.transfer:
        lines += transfer(prompts, patterns, walked, lengths)
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        with open(args.out + ".txt", "w", encoding="utf-8") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
