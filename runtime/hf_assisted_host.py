"""Hugging Face assisted generation's host time per step, measured (issue 45).

``model.generate(..., assistant_model=drafter)`` is the loop behind Hugging Face's speculative
decoding (and Spec-Bench's SpS rows).  One iteration (a *step*) asks the assistant for
candidates (``AssistedCandidateGenerator.get_candidates``: a nested ``assistant.generate`` of
k tokens), runs the target once over them, compares, appends, crops both caches and updates
the candidate strategy.  Host time of a step = its wall time minus the time inside the
target's and the assistant's ``forward``; it splits into

- ``draft_host``: ``get_candidates`` less the assistant's passes (its ``generate`` call: the
  generation config, logits processors and stopping criteria it builds, its own loop, the
  cache crop before drafting);
- ``crop``: cropping the target's cache after verification;
- ``strategy``: ``update_candidate_strategy``;
- ``verify_host``: the rest (input preparation, logits slicing, argmax and comparison, the
  concatenation, model-kwargs update, stopping criteria).

AR (``generate`` without an assistant): a step runs from one target pass's start to the
next's; host = that interval less the pass.  Steps are split at ``get_candidates`` calls
(assisted) or target passes (AR); the first step (prefill) and the last (``generate``'s
finalisation) are dropped.  Each time is taken in wall time and in this thread's CPU time.
Greedy decoding with no logits processor (the default for greedy), ``num_assistant_tokens_schedule=
"constant"`` and ``assistant_confidence_threshold=0`` so every step drafts exactly k tokens (a
generation that meets the end-of-sequence token stops early: fewer steps, same per-step work).
"""
from __future__ import annotations

import time
from typing import Any, Callable, Iterator
from contextlib import ExitStack, contextmanager

#: what a step's host time splits into (ms)
PARTS = ("draft_host", "crop", "strategy", "verify_host")


class StepClock:
    """Accumulates wall and thread-CPU time per key; one record per step."""

    def __init__(self) -> None:
        self.acc: dict[str, float] = {}
        self.steps: list[dict[str, float]] = []
        self.depth: dict[str, int] = {}
        self.in_candidates = False
        self._t0 = self._c0 = 0.0
        self.open = False

    def add(self, key: str, dt: float, dcpu: float) -> None:
        self.acc[key] = self.acc.get(key, 0.0) + dt
        self.acc[key + "_cpu"] = self.acc.get(key + "_cpu", 0.0) + dcpu

    def boundary(self) -> None:
        """Close the open step (if any) and open the next one now."""
        t, c = time.perf_counter(), time.thread_time()
        if self.open:
            self.steps.append({"wall": t - self._t0, "wall_cpu": c - self._c0, **self.acc})
        self.acc, self._t0, self._c0, self.open = {}, t, c, True

    def drop_open(self) -> None:
        self.acc, self.open = {}, False

    def timed(self, key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` timed under ``key`` (outermost call only, so nested calls count once)."""
        def call(*a: Any, **kw: Any) -> Any:
            if self.depth.get(key, 0):
                return fn(*a, **kw)
            self.depth[key] = 1
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return fn(*a, **kw)
            finally:
                self.add(key, time.perf_counter() - t0, time.thread_time() - c0)
                self.depth[key] = 0
        return call


def _hook_passes(clock: StepClock, model: Any, key: str, on_start: Callable[[], None] | None
                 ) -> list[Any]:
    """Forward pre/post hooks timing ``model``'s passes under ``key`` (and counting them)."""
    start: list[tuple[float, float]] = []

    def pre(_m: Any, _a: Any) -> None:
        if on_start is not None:
            on_start()
        start.append((time.perf_counter(), time.thread_time()))

    def post(_m: Any, _a: Any, _o: Any) -> None:
        t0, c0 = start.pop()
        clock.add(key, time.perf_counter() - t0, time.thread_time() - c0)
        clock.acc[key + "_n"] = clock.acc.get(key + "_n", 0.0) + 1.0
    return [model.register_forward_pre_hook(pre), model.register_forward_hook(post)]


@contextmanager
def _patched(obj: Any, name: str, wrap: Callable[[Any], Any]) -> Iterator[None]:
    old = obj.__dict__[name]
    setattr(obj, name, wrap(old))
    try:
        yield
    finally:
        setattr(obj, name, old)


@contextmanager
def instrument(target: Any, assistant: Any | None) -> Iterator[StepClock]:
    """Time the passes, the candidate generation, the cache crops and the strategy update."""
    from transformers import cache_utils
    from transformers.generation import candidate_generator as cg

    clock = StepClock()
    handles = _hook_passes(clock, target, "fwd_target",
                           clock.boundary if assistant is None else None)
    if assistant is not None:
        handles += _hook_passes(clock, assistant, "fwd_draft", None)
    gen = cg.AssistedCandidateGenerator

    def wrap_candidates(fn: Any) -> Any:
        timed = clock.timed("candidates", fn)

        def call(*a: Any, **kw: Any) -> Any:
            clock.boundary()
            clock.in_candidates = True
            try:
                return timed(*a, **kw)
            finally:
                clock.in_candidates = False
        return call

    def wrap_crop(fn: Any) -> Any:
        def call(self: Any, *a: Any, **kw: Any) -> Any:
            if clock.in_candidates:                    # the assistant's crop: draft side
                return fn(self, *a, **kw)
            return clock.timed("crop", fn)(self, *a, **kw)
        return call
    croppers = [c for c in vars(cache_utils).values() if isinstance(c, type)
                and issubclass(c, cache_utils.Cache) and "crop" in c.__dict__]
    try:
        with ExitStack() as stack:
            stack.enter_context(_patched(gen, "get_candidates", wrap_candidates))
            stack.enter_context(_patched(gen, "update_candidate_strategy",
                                         lambda fn: clock.timed("strategy", fn)))
            for c in croppers:
                stack.enter_context(_patched(c, "crop", wrap_crop))
            yield clock
    finally:
        for h in handles:
            h.remove()


def step_parts(s: dict[str, float]) -> dict[str, float]:
    """One step record (seconds) -> host time and its parts (ms), draft passes counted."""
    fwd_t, fwd_d = s.get("fwd_target", 0.0), s.get("fwd_draft", 0.0)
    host = s["wall"] - fwd_t - fwd_d
    host_cpu = (s.get("wall_cpu", s["wall"]) - s.get("fwd_target_cpu", 0.0)
                - s.get("fwd_draft_cpu", 0.0))
    draft_host = s.get("candidates", 0.0) - fwd_d
    draft_host_cpu = s.get("candidates_cpu", 0.0) - s.get("fwd_draft_cpu", 0.0)
    crop, strategy = s.get("crop", 0.0), s.get("strategy", 0.0)
    return {"host": 1e3 * host, "host_cpu": 1e3 * host_cpu, "wall": 1e3 * s["wall"],
            "forward": 1e3 * (fwd_t + fwd_d), "forward_target": 1e3 * fwd_t,
            "forward_draft": 1e3 * fwd_d, "draft_host": 1e3 * draft_host,
            "crop": 1e3 * crop, "strategy": 1e3 * strategy,
            "verify_host": 1e3 * (host - draft_host - crop - strategy),
            "target_host": 1e3 * (host - draft_host),
            "draft_host_cpu": 1e3 * draft_host_cpu,
            "target_host_cpu": 1e3 * (host_cpu - draft_host_cpu),
            "draft_passes": s.get("fwd_draft_n", 0.0), "target_passes": s.get("fwd_target_n", 0.0)}


def assisted_decode_steps(steps: list[dict[str, float]], k: int) -> list[dict[str, float]]:
    """The steady steps of one generate call: the first (prefill) dropped, and in assisted
    generation only steps that drafted exactly k tokens with one target pass."""
    out = [step_parts(s) for s in steps[1:]]
    if k:
        out = [s for s in out if s["draft_passes"] == k and s["target_passes"] == 1]
    return out


def generate_steps(target: Any, assistant: Any | None, prompt: Any, k: int,
                   new_tokens: int) -> list[dict[str, float]]:
    """One greedy ``generate`` call, instrumented; its steady steps (ms)."""
    import torch
    kw: dict[str, Any] = dict(max_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    if assistant is not None:
        assistant.generation_config.num_assistant_tokens = k
        assistant.generation_config.num_assistant_tokens_schedule = "constant"
        assistant.generation_config.assistant_confidence_threshold = 0.0
        kw["assistant_model"] = assistant
    with instrument(target, assistant) as clock, torch.inference_mode():
        target.generate(prompt, **kw)
        clock.drop_open()                      # the last step holds generate's finalisation
    return assisted_decode_steps(clock.steps, k if assistant is not None else 0)
