"""Measured step costs for the adaptive policy (``analysis.adaptive_policy.StepCosts``), learnt
while a server runs: the runtime feeds every phase it times, the policy asks for any shape.

- verification: a shape seen before (sequences, tokens) answers with its running mean (an
  exponential moving average); any other shape with the least-squares fit
  V = a + b n + c tokens over the shapes' means (``a + c tokens`` while fewer than three
  sequence counts were seen; coefficients clipped at 0);
- drafting: per pass, t / k = d + e n (a mean while one sequence count was seen);
- catch-up: the drafter's prefill fit, p0 + p_tok tokens.

The fits are plain Python (a 3 x 3 solve): the runtime calls them between steps, where a BLAS
call would wake its thread pool on the cores the workers are pinned to.

Until a kind has a measurement, ``prior`` answers (a cost model, or ``AffineCosts`` fitted from
an earlier run); with neither, ``missing()`` names what is still unmeasured, so the caller can
measure it first (the runtime runs one step of each kind before it lets the policy choose).
"""
from __future__ import annotations

from typing import Any, Sequence

from psdlab.analysis.adaptive_policy import StepCosts
from psdlab.analysis.checks import check_range

__all__ = ["MeasuredCosts"]


class MeasuredCosts:
    def __init__(self, prior: StepCosts | None = None, smoothing: float = 0.3):
        self.prior = prior
        self.smoothing = check_range("smoothing", smoothing, 0.0, 1.0, lo_open=True)
        self.v: dict[tuple[int, int], float] = {}      # (n, tokens) -> mean seconds
        self.d: dict[int, float] = {}                  # n -> mean seconds per drafting pass
        self.p: dict[int, float] = {}                  # tokens -> mean drafter prefill seconds
        self._vfit: tuple[float, float, float] | None = None
        self._dfit: tuple[float, float] | None = None
        self._pfit: tuple[float, float] | None = None

    # ------------------------------------------------------------------ observing
    def _ema(self, table: dict, key: Any, value: float) -> None:
        old = table.get(key)
        table[key] = value if old is None else old + self.smoothing * (value - old)

    def observe_verify(self, n: int, tokens: int, seconds: float) -> None:
        if n > 0 and seconds > 0:
            self._ema(self.v, (int(n), int(tokens)), float(seconds))
            self._vfit = None

    def observe_draft(self, n: int, k: int, seconds: float) -> None:
        if n > 0 and k > 0 and seconds > 0:
            self._ema(self.d, int(n), float(seconds) / k)
            self._dfit = None

    def observe_prefill(self, tokens: int, seconds: float) -> None:
        """A drafter prefill (or catch-up) of ``tokens`` tokens."""
        if tokens > 0 and seconds > 0:
            self._ema(self.p, int(tokens), float(seconds))
            self._pfit = None

    def missing(self) -> list[str]:
        """Kinds with neither a measurement nor a prior: 'ar' (a verification with no drafts),
        'spec' (a verification with drafts and a drafting pass)."""
        if self.prior is not None:
            return []
        out = []
        if not any(t == n for n, t in self.v):
            out.append("ar")
        if not self.d or not any(t > n for n, t in self.v):
            out.append("spec")
        return out

    # ------------------------------------------------------------------ fits
    def _verify_fit(self) -> tuple[float, float, float]:
        if self._vfit is None:
            keys = list(self.v)
            y = [self.v[k] for k in keys]
            tok = [float(k[1]) for k in keys]
            if len(set(tok)) < 2:
                self._vfit = (0.0, 0.0, sum(a / b for a, b in zip(y, tok)) / len(y))
                return self._vfit
            coef = None
            if len({k[0] for k in keys}) >= 3:
                coef = _lstsq([[1.0, float(k[0]), float(k[1])] for k in keys], y)
            if coef is None or min(coef) < 0:
                two = _lstsq([[1.0, t] for t in tok], y)
                coef = [0.0, 0.0, 0.0] if two is None else [two[0], 0.0, two[1]]
            a, b, c = (max(x, 0.0) for x in coef)
            self._vfit = (a, b, c)
        return self._vfit

    @staticmethod
    def _line(table: dict[int, float]) -> tuple[float, float]:
        xs = [float(x) for x in table]
        ys = list(table.values())
        mean = sum(ys) / len(ys)
        fit = _lstsq([[1.0, x] for x in xs], ys) if len(xs) >= 2 else None
        if fit is None or fit[0] < 0 or fit[1] < 0:
            return mean, 0.0
        return fit[0], fit[1]

    # ------------------------------------------------------------------ StepCosts
    def verify(self, n: int, k: int) -> float:
        tokens = n * (k + 1)
        if (n, tokens) in self.v:
            return self.v[(n, tokens)]
        if not self.v:
            return self._prior("verify", n, k)
        a, b, c = self._verify_fit()
        return max(a + b * n + c * tokens, 1e-9)

    def draft(self, n: int, k: int) -> float:
        if not self.d:
            return self._prior("draft", n, k)
        if n in self.d:
            return k * self.d[n]
        if self._dfit is None:
            self._dfit = self._line(self.d)
        d, e = self._dfit
        return k * max(d + e * n, 1e-9)

    def catch_up(self, n: int, tokens: int) -> float:
        if tokens <= 0:
            return 0.0
        if not self.p:
            if self.prior is not None:
                return self.prior.catch_up(n, tokens)
            return tokens * self.draft(1, 1) / 8.0       # a guess: a pass feeds ~8 tokens
        if self._pfit is None:
            self._pfit = self._line(self.p)
        p0, pt = self._pfit
        return max(p0 + pt * tokens, 0.0)

    def _prior(self, kind: str, n: int, k: int) -> float:
        if self.prior is None:
            raise ValueError(f"costs: no {kind} time measured yet and no prior; measure "
                             f"{', '.join(self.missing())} first")
        return float(getattr(self.prior, kind)(n, k))

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"verify_shapes": len(self.v), "draft_sizes": len(self.d)}
        if self.v:
            out["verify_fit"] = list(self._verify_fit())
        if self.d:
            out["draft_fit"] = list(self._line(self.d))
        return out


def _lstsq(rows: Sequence[Sequence[float]], ys: Sequence[float]) -> list[float] | None:
    """Least squares by the normal equations, Gauss-Jordan with partial pivoting; None when
    singular."""
    p = len(rows[0])
    a = [[sum(r[i] * r[j] for r in rows) for j in range(p)]
         + [sum(r[i] * y for r, y in zip(rows, ys))] for i in range(p)]
    for col in range(p):
        piv = max(range(col, p), key=lambda i: abs(a[i][col]))
        if abs(a[piv][col]) < 1e-15:
            return None
        a[col], a[piv] = a[piv], a[col]
        for i in range(p):
            if i != col:
                f = a[i][col] / a[col][col]
                a[i] = [x - f * z for x, z in zip(a[i], a[col])]
    return [a[i][p] / a[i][i] for i in range(p)]
