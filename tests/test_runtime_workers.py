"""Worker plumbing: the idle wait (busy-poll, then block) and which workers spin."""
from __future__ import annotations

import multiprocessing as mp
import threading
import time

import pytest

from psdlab.runtime.workers import _await_command

torch = pytest.importorskip("torch")

from psdlab.runtime.controller import Engine, EngineConfig  # noqa: E402
from psdlab.runtime.runner import ModelSpec  # noqa: E402
from runtime_engine_util import needs_two_cores, shared_pair  # noqa: E402

models = pytest.fixture(scope="module")(shared_pair)


class _CountingConn:
    """A real pipe end that counts its polls: ``poll(0)`` (non-blocking) and ``poll(None)``."""

    def __init__(self, conn):
        self.conn, self.nonblocking, self.blocking = conn, 0, 0

    def poll(self, timeout=0.0):
        if timeout is None:
            self.blocking += 1
        else:
            self.nonblocking += 1
        return self.conn.poll(timeout)


class _StepClock:
    """A clock that advances ``step`` seconds per reading (no real time passes)."""

    def __init__(self, step: float):
        self.t, self.step, self.readings = 0.0, step, 0

    def __call__(self) -> float:
        self.readings += 1
        self.t += self.step
        return self.t


@pytest.mark.parametrize("spin_s", [0.0, 0.05, 5.0])
def test_await_command_returns_at_once_when_a_command_is_waiting(spin_s):
    a, b = mp.Pipe()
    a.send(("verify", ()))
    conn = _CountingConn(b)
    how = _await_command(conn, spin_s, clock=_StepClock(0.01))
    assert how == ("spun" if spin_s > 0 else "blocked")
    assert conn.nonblocking == (1 if spin_s > 0 else 0)     # found on the first poll
    assert conn.blocking == (0 if spin_s > 0 else 1)
    assert b.recv() == ("verify", ())


def test_await_command_spins_for_its_window_then_blocks_until_the_command():
    """No command during the 0.2 s window (20 clock steps of 10 ms): 19 non-blocking polls,
    then one blocking poll that returns when the command arrives."""
    a, b = mp.Pipe()
    clock = _StepClock(0.01)
    sender = threading.Thread(target=lambda: (time.sleep(0.05), a.send(None)))

    class _SendWhenBlocking(_CountingConn):
        def poll(self, timeout=0.0):
            if timeout is None and not sender.is_alive() and self.blocking == 0:
                sender.start()
            return super().poll(timeout)

    conn = _SendWhenBlocking(b)
    how = _await_command(conn, 0.2, clock=clock)
    sender.join()
    assert how == "blocked"
    assert conn.blocking == 1 and conn.nonblocking == 19
    assert b.recv() is None


def test_await_command_without_spin_never_polls_in_a_loop():
    a, b = mp.Pipe()
    a.send(("draft", ()))
    conn = _CountingConn(b)
    clock = _StepClock(1.0)
    assert _await_command(conn, 0.0, clock=clock) == "blocked"
    assert conn.nonblocking == 0 and clock.readings == 0


def test_await_command_returns_on_a_closed_pipe_without_spinning_out():
    a, b = mp.Pipe()
    a.close()
    conn = _CountingConn(b)
    clock = _StepClock(0.01)
    assert _await_command(conn, 10.0, clock=clock) == "spun"   # EOF reads as ready
    assert conn.nonblocking == 1 and clock.readings == 2       # 10 s window, one poll
    with pytest.raises(EOFError):
        b.recv()


@pytest.mark.e2e
@needs_two_cores
@pytest.mark.parametrize("mode,spins", [("sd-sep", True), ("psd", True), ("sd", False)])
def test_workers_spin_only_on_cores_of_their_own(models, mode, spins):
    cfg = EngineConfig(mode=mode, batch=2, max_new_tokens=4, backend="process", idle_spin_s=0.5)
    with Engine(cfg, ModelSpec(str(models["target"])), ModelSpec(str(models["other"]))) as eng:
        got = {w.spec.role: w.spec.spin_s for w in eng.workers.values()}
    assert got == ({"target": 0.5, "drafter": 0.5} if spins else {"target": 0.0, "drafter": 0.0})


def test_draft_feeds_unseen_tokens_in_one_batched_pass(models):
    """Rows of 1-3 unseen tokens (bonus token, or last draft + bonus) go through one ragged
    forward, not one forward per slot; the proposals equal slot-by-slot feeding."""
    from psdlab.runtime.runner import ModelRunner, RunnerConfig

    cfg = RunnerConfig(ModelSpec(str(models["noisy"])), max_slots=4, max_len=64)
    prompts = [[5, 9, 11, 3], [7, 2], [13, 14, 15, 16, 17], [4]]
    rows = [[21, 22, 23], [24], [25, 26], [27]]

    def prefilled():
        r = ModelRunner(cfg)
        r.feed([0, 1, 2, 3], [0] * 4, prompts)
        return r

    batched = prefilled()
    calls = []
    forward, forward_next = batched._forward, batched._forward_next
    batched._forward = lambda *a, **kw: calls.append(len(a[0])) or forward(*a, **kw)
    batched._forward_next = lambda *a, **kw: calls.append(-len(a[0])) or forward_next(*a, **kw)
    got, _ = batched.draft([0, 1, 2, 3], [len(p) for p in prompts], rows, [3, 3, 3, 3])
    # three passes of the whole batch: the ragged catch-up, then two of the picks kept on the
    # device (negative: `_forward_next`)
    assert calls == [4, -4, -4]

    serial = prefilled()                          # reference: heads fed one slot at a time
    for slot, (p, r) in enumerate(zip(prompts, rows)):
        if len(r) > 1:
            serial.feed([slot], [len(p)], [r[:-1]])
    keep = [len(p) + len(r) - 1 for p, r in zip(prompts, rows)]
    want, _ = serial.draft([0, 1, 2, 3], keep, [[r[-1]] for r in rows], [3, 3, 3, 3])
    assert got == want


def test_padded_width_leaves_the_slow_gemm_row_counts():
    from psdlab.runtime.runner import SLOW_GEMM_ROWS, padded_width
    for batch in range(1, 9):
        for width in range(1, 20):
            got = padded_width(batch, width, True)
            assert got >= width and batch * got not in SLOW_GEMM_ROWS
            assert got == width or batch * width in SLOW_GEMM_ROWS
            assert padded_width(batch, width, False) == width
    assert padded_width(3, 5, True) == 6 and padded_width(1, 12, True) == 16


def test_padding_a_forward_does_not_change_its_results(models):
    """A 3 x 5 verification is padded to 3 x 6 in fp32 on CPU; the emitted tokens and the
    logits of the real positions are those of the unpadded forward."""
    from psdlab.runtime.runner import ModelRunner, RunnerConfig

    def runner(pad: bool):
        r = ModelRunner(RunnerConfig(ModelSpec(str(models["target"])), max_slots=4, max_len=64))
        r.pad_slow_gemm = pad
        r.feed([0, 1, 2], [0] * 3, [[5, 9, 11, 3], [7, 2, 8, 8], [13, 14, 15, 16]])
        return r

    seen = []
    padded, plain = runner(True), runner(False)
    forward = padded.model.forward_planned
    padded.model.forward_planned = lambda tokens, *a, **kw: seen.append(
        tuple(tokens.shape)) or forward(tokens, *a, **kw)
    args = ([0, 1, 2], [4, 4, 4], [[1], [2], [3]], [[4, 5, 6, 7]] * 3, None)
    assert padded.verify(*args) == plain.verify(*args)
    assert seen == [(3, 6)]
    rows = [[9, 8, 7, 6, 5]] * 3
    a = padded._forward([0, 1, 2], rows)
    b = plain._forward([0, 1, 2], rows)
    assert a.shape[1] == 6 and b.shape[1] == 5
    torch.testing.assert_close(a[:, :5], b, atol=1e-4, rtol=1e-4)
