"""Batch-aware model of AR, SD and PSD: throughput and per-token latency from step times.

Inputs: a verification time V(m, k) (target scores k draft tokens + 1 for each of m sequences;
V(m, 0) is a plain autoregressive step), a drafting time t(m, k) (drafter proposes k tokens for
m sequences), an acceptance model giving the expected tokens a sequence *emits* per verified
step, E(k) (bonus token included; E(0) = 1), a PSD per-step overhead o (the sync point), and the
number of target devices D (SD's drafter shares them; PSD's drafter gets one more, D + 1).

Per mode, with m sequences per batch:
    AR : step V(m,0);            tokens/step m;      TPOT V(m,0)
    SD : step t(m,k) + V(m,k);   tokens/step m E(k); TPOT step / E(k)
    PSD: two batches of m; step max(t(m,k), V(m,k)) + o verifies one batch, so tokens/step
         m E(k), and each sequence is verified every other step: TPOT 2 step / E(k).
Throughput = tokens/step / step.  Note PSD's TPOT is >= SD's at the same m whenever o >= 0
(2 max(t, V) >= t + V): PSD buys throughput with concurrency, not per-request speed.

Comparisons (each result carries its `basis` label):
    iso-batch       SD m vs PSD 2 x m (the paper's setting: PSD holds 2m requests)
    iso-concurrency SD m vs PSD 2 x m/2 (same requests in flight; m even)
    per-device      iso-batch throughput divided by devices: SD on D, PSD on D + 1
Break-even: `break_even_overhead` is the PSD overhead o* at which PSD's throughput equals SD's
under the basis (PSD wins iff o < o*).  At equal k: iso-batch o* = min(t, V); per-device
o* = (t + V) D/(D + 1) - max(t, V); iso-concurrency o* = (t(m) + V(m))/2 - max(t(m/2), V(m/2)).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from psdlab.analysis.checks import check_choice, check_int, check_nonnegative, check_range
from psdlab.analysis.modes import SPEC_MODES, check_mode

__all__ = ["AffineVerifyTime", "AffineDraftTime", "GeometricRate", "BatchModel",
           "ModeResult", "Comparison", "BASES", "ar", "sd", "psd", "best_k", "compare",
           "compare_all"]

StepTime = Callable[[float, int], float]
BASES = ("iso-batch", "iso-concurrency", "per-device")


@dataclass(frozen=True)
class AffineVerifyTime:
    """V(m, k) = c0 + c_seq m + c_tok m (k + 1)  (seconds)."""
    c0: float
    c_seq: float = 0.0
    c_tok: float = 0.0

    def __post_init__(self) -> None:
        for name in ("c0", "c_seq", "c_tok"):
            check_nonnegative(name, getattr(self, name))

    def __call__(self, m: float, k: int) -> float:
        return self.c0 + self.c_seq * m + self.c_tok * m * (k + 1)


@dataclass(frozen=True)
class AffineDraftTime:
    """t(m, k) = k (d0 + d_seq m): k sequential drafter passes of one token per sequence."""
    d0: float
    d_seq: float = 0.0

    def __post_init__(self) -> None:
        for name in ("d0", "d_seq"):
            check_nonnegative(name, getattr(self, name))

    def __call__(self, m: float, k: int) -> float:
        return k * (self.d0 + self.d_seq * m)


@dataclass(frozen=True)
class GeometricRate:
    """i.i.d. per-token acceptance a: E(k) = (1 - a^(k+1)) / (1 - a) emitted tokens per step."""
    a: float

    def __post_init__(self) -> None:
        check_range("a", self.a, 0.0, 1.0, hi_open=True)

    def emitted(self, k: int) -> float:
        return float((1.0 - self.a ** (k + 1)) / (1.0 - self.a))


@dataclass(frozen=True)
class BatchModel:
    """Step times, acceptance, PSD overhead per step (s) and target device count."""
    verify_time: StepTime
    draft_time: StepTime
    acceptance: GeometricRate
    psd_overhead: float = 0.0
    target_devices: int = 1

    def __post_init__(self) -> None:
        check_nonnegative("psd_overhead", self.psd_overhead)
        check_int("target_devices", self.target_devices, minimum=1)


@dataclass(frozen=True)
class ModeResult:
    """One mode's operating point. `m` is sequences per batch; concurrency = m * batches."""
    mode: str
    m: int
    batches: int
    devices: int
    k: int
    step_time: float
    tokens_per_step: float
    throughput: float
    tpot: float

    @property
    def concurrency(self) -> int:
        return self.m * self.batches

    @property
    def per_device_throughput(self) -> float:
        return self.throughput / self.devices


def _time(fn: StepTime, name: str, m: float, k: int) -> float:
    value = float(fn(m, k))
    if not np.isfinite(value) or value < 0:
        raise ValueError(f"{name}: step time must be finite and >= 0, got {value!r} "
                         f"at m={m}, k={k}")
    return value


def _m(m) -> int:
    return check_int("m", m, minimum=1)


def _k(k) -> int:
    return check_int("k", k, minimum=1)


def _result(mode: str, m: int, batches: int, devices: int, k: int, step: float,
            tokens: float, verify_every: int) -> ModeResult:
    if step <= 0:
        raise ValueError(f"step time: must be > 0 for {mode} at m={m}, k={k}")
    per_seq = tokens / m
    return ModeResult(mode=mode, m=m, batches=batches, devices=devices, k=k, step_time=step,
                      tokens_per_step=tokens, throughput=tokens / step,
                      tpot=verify_every * step / per_seq)


def ar(model: BatchModel, m: int) -> ModeResult:
    """Plain autoregressive decoding, batch m, on the target devices."""
    m = _m(m)
    step = _time(model.verify_time, "verify_time", m, 0)
    return _result("ar", m, 1, model.target_devices, 0, step, float(m), 1)


def sd(model: BatchModel, m: int, k: int) -> ModeResult:
    """Standard SD, batch m, draft length k; the drafter shares the target devices."""
    m, k = _m(m), _k(k)
    step = _time(model.draft_time, "draft_time", m, k) + _time(model.verify_time,
                                                               "verify_time", m, k)
    return _result("sd", m, 1, model.target_devices, k, step,
                   m * model.acceptance.emitted(k), 1)


def psd(model: BatchModel, m: int, k: int) -> ModeResult:
    """Parallel SD, two batches of m each, one more device for the drafter."""
    m, k = _m(m), _k(k)
    step = max(_time(model.draft_time, "draft_time", m, k),
               _time(model.verify_time, "verify_time", m, k)) + model.psd_overhead
    return _result("psd", m, 2, model.target_devices + 1, k, step,
                   m * model.acceptance.emitted(k), 2)


def best_k(model: BatchModel, mode: str, m: int, k_max: int = 16) -> ModeResult:
    """The k in 1..k_max that maximises `mode`'s throughput (ties: smallest k)."""
    check_mode("mode", mode, SPEC_MODES)
    k_max = check_int("k_max", k_max, minimum=1)
    fn = sd if mode == "sd" else psd
    results = [fn(model, m, k) for k in range(1, k_max + 1)]
    return max(results, key=lambda r: (r.throughput, -r.k))


@dataclass(frozen=True)
class Comparison:
    """SD vs PSD under one labelled basis. gain: PSD/SD throughput (per device for
    'per-device'); latency_ratio: PSD/SD TPOT; break_even_overhead: PSD overhead o* at which
    gain = 1 (PSD wins iff its overhead < o*; negative: never)."""
    basis: str
    ar: ModeResult
    sd: ModeResult
    psd: ModeResult
    gain: float
    latency_ratio: float
    break_even_overhead: float

    @property
    def psd_wins(self) -> bool:
        return self.gain > 1.0


def _psd_m(basis: str, m: int) -> int:
    if basis == "iso-concurrency":
        if m % 2:
            raise ValueError(f"m: must be even for iso-concurrency (PSD runs 2 x m/2), got {m}")
        return m // 2
    return m


def compare(model: BatchModel, m: int, basis: str = "iso-batch", k: int | None = None,
            k_max: int = 16) -> Comparison:
    """Compare SD (batch m) with PSD under `basis`; k=None picks each mode's optimal k."""
    check_choice("basis", basis, BASES)
    m = _m(m)
    pm = _psd_m(basis, m)
    s = best_k(model, "sd", m, k_max) if k is None else sd(model, m, k)
    p = best_k(model, "psd", pm, k_max) if k is None else psd(model, pm, k)
    dev_s, dev_p = (s.devices, p.devices) if basis == "per-device" else (1, 1)
    gain = (p.throughput / dev_p) / (s.throughput / dev_s)
    needed_step = p.tokens_per_step * s.step_time * dev_s / (s.tokens_per_step * dev_p)
    bare = p.step_time - model.psd_overhead
    return Comparison(basis=basis, ar=ar(model, m), sd=s, psd=p, gain=gain,
                      latency_ratio=p.tpot / s.tpot, break_even_overhead=needed_step - bare)


def compare_all(model: BatchModel, m: int, k: int | None = None,
                k_max: int = 16) -> list[Comparison]:
    """All three bases (iso-concurrency only when m is even)."""
    bases = [b for b in BASES if b != "iso-concurrency" or _m(m) % 2 == 0]
    return [compare(model, m, b, k, k_max) for b in bases]
