"""The jump over an idle interval to the next arrival, shared by the simulator's servers
(`sim.core.Core`, `sim.adaptive.AdaptiveServer`): the clock must land on or after the arrival
whatever the float rounding, and that request then counts as arrived."""
from __future__ import annotations

from typing import Any

import numpy as np


class ArrivalClock:
    """Mixin; the server provides ``arrival``, ``arr_ptr``, ``now``, ``waiting``, ``counters``."""

    arrival: np.ndarray
    arr_ptr: int
    now: float
    waiting: Any
    counters: dict[str, int]

    def idle_delay(self) -> float:
        """Seconds to the next arrival, rounded up so that now + delay >= arrival."""
        a = float(self.arrival[self.arr_ptr])
        d = a - self.now
        while self.now + d < a:
            d = float(np.nextafter(d, np.inf))
        return d

    def after_idle(self, now: float) -> None:
        """The clock jumped to the next arrival: that request has arrived whatever rounding."""
        self.now = now
        self.waiting.append(self.arr_ptr)
        self.arr_ptr += 1
        self.counters["arrivals"] += 1
        self.counters["idle_jumps"] += 1
