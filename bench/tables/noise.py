"""Noise at each level of a cell: windows inside a launch, and launches.

A cell's throughput varies at two levels. Inside one launch, its timed windows differ a
little; between launches, each launch has luck of its own (where the scheduler put the
threads, what the page cache held, the machine's state). Repeating at the level that
does not vary buys nothing: Kalibera and Jones, "Rigorous Benchmarking in Reasonable
Time" (ISMM 2013), choose the repetitions at each level from the variance measured there
and its cost. With y the log throughput of a window:

- within: the pooled variance of windows around their launch's mean (s2_w);
- between: the variance of launch means less what the windows explain,
  s2_b = max(0, var(launch means) - s2_w / w), w the windows a launch has;
- costs: a window's seconds (c_w) and a launch's fixed seconds, its start-up, training
  and profiling: the launch's seconds less its windows' (c_l).

The variance of a cell's mean over L launches of w windows is (s2_b + s2_w / w) / L,
which is cheapest for a given precision at w* = sqrt(c_l s2_w / (c_w s2_b)) windows a
launch (their equation for two levels). How many more launches would settle a
head-to-head is a question of its pair, answered once, with its reading
(bench/tables/decided.py).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pandas as pd


@dataclasses.dataclass(frozen=True)
class Levels:
    launches: int
    windows: float  # a launch's windows, on average
    within: float | None  # s2_w: variance of log window throughput inside a launch
    between: float | None  # s2_b: variance of launch means beyond what windows explain
    headline: float | None  # variance of log headline throughput between launches
    window_s: float | None
    launch_s: float | None  # a launch's fixed seconds (start-up, training, profiling)

    def best_windows(self) -> float | None:
        """Kalibera and Jones' windows per launch; inf when launches do not vary beyond
        their windows (then one long launch is best), None when unmeasured."""
        if None in (self.within, self.between, self.window_s, self.launch_s):
            return None
        assert self.within is not None and self.between is not None
        assert self.window_s is not None and self.launch_s is not None
        if self.between == 0:
            return math.inf
        return max(1.0, math.sqrt(self.launch_s * self.within / (self.window_s * self.between)))


def levels(cell: pd.DataFrame) -> Levels:
    """The levels of one cell's ok launches (frame rows: `windows`, `launch_s`, `throughput`)."""
    stats = [w for w in cell["windows"] if isinstance(w, dict) and w.get("n", 0) >= 2]
    tput = [float(t) for t in cell["throughput"] if isinstance(t, int | float) and t > 0]
    headline = float(np.var(np.log(tput), ddof=1)) if len(tput) >= 2 else None
    launch = [float(s) for s in cell["launch_s"] if isinstance(s, int | float) and s > 0]
    if not stats:
        return Levels(len(cell), math.nan, None, None, headline, None, None)
    n = np.array([w["n"] for w in stats], dtype=np.float64)
    within = float(np.sum((n - 1) * np.array([w["log_var"] for w in stats])) / np.sum(n - 1))
    mean_w = float(np.mean(n))
    between = None
    if len(stats) >= 2:
        means = np.array([w["log_mean"] for w in stats])
        between = max(0.0, float(np.var(means, ddof=1)) - within / mean_w)
    window_s = float(np.median([w["window_s"] for w in stats]))
    launch_s = max(0.0, float(np.median(launch)) - mean_w * window_s) if launch else None
    return Levels(len(cell), mean_w, within, between, headline, window_s, launch_s)


def _root(var: float | None) -> float:
    return math.nan if var is None else math.sqrt(var)


def rows(gdf: pd.DataFrame) -> pd.DataFrame:
    """The noise table of one comparison: a row per (engine, workers) of ok launches;
    numbers stay numbers (NaN where unmeasured), compare formats them."""
    out: list[dict[str, Any]] = []
    if gdf.empty:
        return pd.DataFrame()
    for (engine, workers), cell in gdf.groupby(["engine", "workers"]):
        lv = levels(cell)
        best = lv.best_windows()
        out.append(
            {
                "engine": engine,
                "workers": int(workers),
                "launches": lv.launches,
                "windows": lv.windows,
                "within": _root(lv.within),
                "between": _root(lv.between),
                "launch CV": _root(lv.headline),
                "launch s": math.nan if lv.launch_s is None else lv.launch_s,
                "window s": math.nan if lv.window_s is None else lv.window_s,
                "best windows": math.nan if best is None else best,
            }
        )
    return pd.DataFrame(out).sort_values(["workers", "engine"]).reset_index(drop=True)


KEY = (
    "noise: within = CV of windows inside a launch; between = CV of launches beyond what "
    "their windows explain; launch CV = CV of the headline throughput across launches; "
    "launch s = a launch's seconds besides its windows; best windows = windows a launch "
    "that make a precision cheapest (Kalibera-Jones) (docs/methodology.md#noise-at-each-level)"
)
