"""The runs of `psdlab demo`'s measurement plan (`validation.demo.measurement_plan`) and their
order: one measured run (`RunSpec`), rounds of repeats in seeded random order
(`repeated_order`, `spread_rounds`), the SD/PSD pair a run belongs to (`block_of`) and whether
a repeat block still fits the time left (`repeat_fits`)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Collection, Sequence

from psdlab.analysis.checks import check_choice, check_int
from psdlab.validation.demo.prompt_sides import PROMPT_SIDES

ROLES = ("calibrate", "validate", "repeat", "reference")
RUN_MODES = ("ar", "sd-sep", "psd")


@dataclass(frozen=True)
class RunSpec:
    """One measured run; ``arrivals`` is ``offline`` or ``poisson`` (rate set by the plan)."""
    name: str
    mode: str
    k: int
    batch: int
    arrivals: str = "offline"
    role: str = "calibrate"
    config: str = ""                   # the configuration repeated (default: the name)
    rep: int = 1                       # which repeat of the configuration (1 = first)
    prompts: str = ""                  # prompt side; default: calibration for calibrate/repeat

    def __post_init__(self) -> None:
        if not self.config:
            object.__setattr__(self, "config", self.name)
        if not self.prompts:
            object.__setattr__(self, "prompts", "calibration"
                               if self.role in ("calibrate", "repeat") else "heldout")
        check_choice("prompts", self.prompts, PROMPT_SIDES)
        check_choice("mode", self.mode, RUN_MODES)
        check_int("k", self.k, 0 if self.mode == "ar" else 1, 16)
        check_int("batch", self.batch, 1, 64)
        check_choice("arrivals", self.arrivals, ("offline", "poisson"))
        check_choice("role", self.role, ROLES)

    @property
    def workload(self) -> str:
        """Runs with the same workload key and repeat serve the same requests at the same
        times (each repeat its own window of prompts, `prompt_windows`)."""
        return f"k{self.k}_m{self.batch}_{self.arrivals}_{self.prompts}"


def spread_rounds(count: int, rounds: int) -> set[int]:
    """The rounds a block with ``count`` repeats runs in, spread evenly over ``rounds`` (first
    and last included), so that blocks with fewer repeats sit at the same mean time as the
    others and a steady drift of the machine's speed does not favour one group."""
    if count >= rounds:
        return set(range(rounds))
    if count == 1:
        return {0}
    return {int(round(i * (rounds - 1) / (count - 1))) for i in range(count)}


def repeated_order(blocks: Sequence[Sequence[RunSpec]], repeats: int | Sequence[int],
                   seed: int, first: str | None = None) -> tuple[RunSpec, ...]:
    """Rounds, each running every block once in a seeded random order (the runs of a block
    back to back, in seeded random order); ``repeats``: the number of rounds, or one count
    per block (a block with fewer repeats than rounds runs in rounds spread evenly over them,
    ``spread_rounds``).  With ``first``, the
    block holding that config leads the first round.  With more than one round, run names
    get ``_rN``."""
    import numpy as np
    counts = [repeats] * len(blocks) if isinstance(repeats, int) else list(repeats)
    if len(counts) != len(blocks):
        raise ValueError(f"repeats: {len(counts)} counts for {len(blocks)} blocks")
    for c in counts:
        check_int("repeats", c, 1, 20)
    rounds = max(counts, default=1)
    active = [spread_rounds(c, rounds) for c in counts]
    rng = np.random.default_rng(seed)
    out: list[RunSpec] = []
    for r in range(rounds):
        perm = [int(i) for i in rng.permutation(len(blocks)) if r in active[int(i)]]
        lead = [i for i in perm if first in {x.config for x in blocks[i]}] if first else []
        if r == 0 and lead:
            perm.remove(lead[0])
            perm.insert(0, lead[0])
        for i in perm:
            runs = list(blocks[i])
            if len(runs) > 1 and rng.random() < 0.5:
                runs.reverse()
            rep = sorted(active[i]).index(r) + 1
            out += [replace(x, name=f"{x.name}_r{rep}" if rounds > 1 else x.name, rep=rep)
                    for x in runs]
    return tuple(out)


def repeat_fits(runs: Sequence[RunSpec], i: int, walls: dict[str, float], left_s: float,
                skipped: Collection[str] = ()) -> bool:
    """Whether the repeat block of run i (`block_of`) fits in the ``left_s`` seconds before
    the deadline, each run taking its configuration's first wall time (``walls``).  A block
    of another role must also leave time for every calibration repeat after it that is not
    ``skipped``: on a slow machine the budget cuts held-out repeats before the calibration's
    last round (the calibration's runs set every prediction, and one window of 32 prompts
    is too few to calibrate on)."""
    block = block_of(runs, i)
    need = sum(walls.get(r.config, 0.0) for r in block)
    if block[0].role != "calibrate":            # the rest of its block is not calibration
        need += sum(walls.get(r.config, 0.0) for r in runs[i + 1:]
                    if r.role == "calibrate" and r.rep > 1 and r.name not in skipped)
    return need <= left_s


def block_of(runs: Sequence[RunSpec], i: int) -> list[RunSpec]:
    """Run i and the runs next to it of the same repeat and workload (its SD/PSD pair)."""
    def mate(j: int) -> bool:
        return (0 <= j < len(runs) and runs[j].rep == runs[i].rep
                and runs[j].workload == runs[i].workload)
    lo, hi = i, i
    while mate(lo - 1):
        lo -= 1
    while mate(hi + 1):
        hi += 1
    return list(runs[lo:hi + 1])
