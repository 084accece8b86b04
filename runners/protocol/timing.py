"""The timed region: steps in windows, one device synchronisation per window, and
measurement-only windows after training until throughput is steady."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from bench.measure import stats
from bench.measure.window import Measure
from runners.adapters.base import EngineAdapter
from runners.protocol.turns import TURNS


def timed_window(adapter: EngineAdapter, steps: Sequence[tuple[Any, float]]) -> Window:
    """The timed region: train `steps` back to back and time them as one window.

    Invariants, which make the numbers those of the engine and not of the harness:
    - every batch and learning rate was prepared before the window starts;
    - nothing inside reads a value back from the device: losses stay device tensors,
      read after the window;
    - exactly one device synchronisation, after the last step: queued work is waited
      for once, so a GPU never idles between steps for the host's sake;
    - per-step times come from the adapter's timer (CUDA events on a torch GPU, the
      host clock otherwise), whose marks do not wait for the device;
    - the window's time is the host clock from before the first step to after the
      synchronisation, so it covers all device work the steps queued.
    """
    timer = adapter.step_timer(len(steps))
    losses: list[Any] = []
    TURNS.wait()  # benchmark-only turn-taking (runners/protocol/turns.py); off: no-op
    t0 = time.perf_counter()
    for batch, lr in steps:
        timer.mark()
        losses.append(adapter.train_step(batch, lr))
    timer.mark()
    adapter.synchronize()
    seconds = time.perf_counter() - t0
    TURNS.done()
    return Window(seconds, timer.step_times(), losses)


@dataclasses.dataclass
class Window:
    seconds: float
    step_times: list[float]
    losses: list[Any]


def _windows(first_step: int, n_steps: int, warmup: int, size: int) -> list[tuple[int, int, bool]]:
    """(start, stop, timed) index ranges of one epoch's steps: warm-up steps form their
    own untimed window, the rest windows of `size` (the epoch's last may be shorter)."""
    out = []
    s = 0
    if first_step < warmup:
        s = min(warmup - first_step, n_steps)
        out.append((0, s, False))
    while s < n_steps:
        out.append((s, min(s + size, n_steps), True))
        s = out[-1][1]
    return out


def _window_estimate(tput: Sequence[float]) -> tuple[stats.Estimate, float | None]:
    est = stats.median_interval(tput)
    return est, stats.relative_half_width(est)


class _Progress:
    """When this rank last got past a collective. An exception after a silence as long as
    the collective time-out is a peer that stopped answering, whatever the engine calls it
    (Gloo says "Timed out", Horovod only "has been shut down"): the run is a `timeout`."""

    def __init__(self) -> None:
        self.at = time.monotonic()

    def mark(self) -> None:
        self.at = time.monotonic()

    def silent_for(self) -> float:
        return time.monotonic() - self.at


PROGRESS = _Progress()


@dataclasses.dataclass
class EpochTiming:
    """What one epoch's timed loop leaves behind (see `timed_loop`)."""

    losses: list[Any]  # one loss per step, as the engine's device values (read after)
    train_time: float  # seconds of every window, warm-up windows included
    step_times: list[float]  # per-step seconds of the timed windows
    window_s: list[float]  # seconds of each timed window
    window_n: list[int]  # steps in each timed window
    loop_wall: float  # wall clock from the first timed window to the last window's end


def timed_loop(
    adapter: EngineAdapter,
    plan: Sequence[tuple[Any, float]],
    first_step: int,
    warmup_steps: int,
    window_steps: int,
    on_first_timed: Callable[[], None],
) -> EpochTiming:
    """The timed region: one epoch's `plan` of (batch, learning rate) steps, in windows.

    Invariants, which make the engines' numbers comparable:
    - everything a step needs is prepared before the call (batches built and staged,
      learning rates computed): no input work runs inside a window;
    - a window is `timed_window`: its steps, then exactly one device synchronisation;
      no collective of the harness, gather, print or loss read-back runs in a window
      (losses are returned as device values and read after the loop);
    - steps before `warmup_steps` (counted from the run's first step, `first_step`
      being this epoch's) run in untimed windows, and no window mixes warm-up and
      timed steps (`_windows`);
    - `loop_wall` runs from the first timed window to the end, so whatever the harness
      does between windows counts against the loop throughput; `on_first_timed` is
      called once, just before the first timed window.
    """
    out = EpochTiming([], 0.0, [], [], [], 0.0)
    mark = None
    for start, stop, is_timed in _windows(first_step, len(plan), warmup_steps, window_steps):
        if is_timed and mark is None:
            on_first_timed()  # the contention probe: measuring apparatus, not the loop's work
            mark = time.perf_counter()
        win = timed_window(adapter, plan[start:stop])
        PROGRESS.mark()
        out.losses.extend(win.losses)
        out.train_time += win.seconds
        if is_timed:
            out.step_times.extend(win.step_times)
            out.window_s.append(win.seconds)
            out.window_n.append(stop - start)
    if mark is not None:
        out.loop_wall = time.perf_counter() - mark
    return out


@dataclasses.dataclass
class Steady:
    """The windows of a run once throughput is measured (see `measure_until_steady`)."""

    all_windows: np.ndarray  # [rank, window] seconds
    tput: list[float]  # global samples/s of each window, timed by its slowest rank
    est: stats.Estimate  # the window median with its interval
    half: float | None  # the interval's half width relative to the median
    extra: int  # measurement-only steps after the trained result
    stopped_by: str  # target_ci | time_cap | disabled


def measure_until_steady(
    adapter: EngineAdapter,
    measure: Measure,
    global_batch: int,
    timed: list[float],
    window_s: list[float],
    window_n: list[int],
    next_chunk: Callable[[], list[tuple[Any, float]]],
) -> Steady:
    """Training's timed windows, then measurement-only windows until the window median's
    95% interval is within `measure.target_ci` or the timed seconds reach `measure.cap_s`.

    Every rank takes the same decision from gathered times. Each extra window's steps
    come from `next_chunk`, prepared before the window as in training; `timed`,
    `window_s` and `window_n` are extended in place.
    """
    all_windows = adapter.allgather(np.asarray(window_s, dtype=np.float64))  # [world, n]
    tput = (global_batch * np.asarray(window_n) / all_windows.max(axis=0)).tolist()
    est, half = _window_estimate(tput)
    extra = 0
    stopped_by = "disabled" if measure.target_ci == 0 else "target_ci"
    while measure.target_ci > 0 and (half is None or half > measure.target_ci):
        spent = float(all_windows.sum(axis=1).max()) if all_windows.size else 0.0
        if spent >= measure.cap_s:
            stopped_by = "time_cap"
            break
        # prepared outside the timed window, like every epoch's batches
        chunk = next_chunk()
        win = timed_window(adapter, chunk)
        timed.extend(win.step_times)
        window_s.append(win.seconds)
        window_n.append(len(chunk))
        extra += len(chunk)
        new = adapter.allgather(np.asarray([win.seconds], dtype=np.float64))
        all_windows = np.concatenate([all_windows, new], axis=1)
        tput.append(global_batch * len(chunk) / float(new.max()))
        est, half = _window_estimate(tput)
    return Steady(all_windows, tput, est, half, extra, stopped_by)
