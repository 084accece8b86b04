"""How a run measures throughput, and the version of that protocol its records carry.

Steps are timed in windows: one device synchronisation per window, warm-up steps
excluded, per-step times from device events where there are any (the protocol
itself is runners/protocol/timing.py). These settings change no trained number,
so they are not part of the run spec.
"""

from __future__ import annotations

import argparse
import dataclasses

from bench.core.errors import InputError

# The measurement protocol a record was taken under. The rule: bump it whenever a
# change alters what a timing means (what a window or a step covers, where the clock
# starts and stops, what is synchronised), so that a number taken before the change
# can never be compared with one taken after it. Resume reruns cells recorded under
# another version, and `bench compare` keeps the versions apart and says so.
#   1: every step synchronised and timed alone (records without window fields)
#   2: steps timed in windows with one synchronisation each, measured until steady
PROTOCOL_VERSION = 2


@dataclasses.dataclass(frozen=True)
class Measure:
    """How a run measures throughput (not part of the spec: it changes no trained number).

    Steps are timed in windows of `window_steps`. After training, more windows are
    measured (training on, after the final weights and accuracy are taken) until the
    95% interval of the median window throughput is within +-`target_ci` of it, or
    the timed seconds reach `cap_s`; 0 turns the extension off. Then `profile_steps`
    more steps are timed phase by phase (forward, backward, optimizer, communication:
    runners/protocol/profile.py) for the step breakdown; they come after every timed
    window, so they never touch a reported throughput; 0 turns them off. After those,
    `trace_steps` more run under the engine's own profiler, for a trace its viewer opens
    (runners/protocol/trace.py); 0, or no profiled steps, turns that off.
    """

    window_steps: int = 10
    target_ci: float = 0.02
    cap_s: float = 3.0  # the default sweep (54 runs) stays under 10 minutes on 2 cores
    profile_steps: int = 10
    trace_steps: int = 3
    # each worker and its engine's threads on cores of their own (runners/protocol/affinity.py)
    pin_cores: bool = False

    def check(self) -> Measure:
        if self.window_steps < 1:
            raise InputError(f"--window-steps must be >= 1, got {self.window_steps}")
        if not 0 <= self.target_ci < 1:
            raise InputError(f"--target-ci must be in [0, 1) (0.02 is +-2%), got {self.target_ci}")
        if self.cap_s < 0:
            raise InputError(f"--measure-cap-s must be >= 0, got {self.cap_s}")
        if self.profile_steps < 0:
            raise InputError(
                f"--profile-steps must be >= 0 (0: no breakdown), got {self.profile_steps}"
            )
        if self.trace_steps < 0:
            raise InputError(f"--trace-steps must be >= 0 (0: no trace), got {self.trace_steps}")
        return self


def add_measure_flags(parser: argparse.ArgumentParser) -> None:
    """--window-steps, --target-ci, --measure-cap-s, --profile-steps and --trace-steps
    (runners and `bench run` alike)."""
    d = Measure()
    group = parser.add_argument_group("measurement (changes no trained number)")
    group.add_argument(
        "--window-steps",
        type=int,
        default=None,
        help=f"steps per timed window, one device synchronisation each (default: {d.window_steps})",
    )
    group.add_argument(
        "--target-ci",
        type=float,
        default=None,
        help="after training, measure more windows until the 95%% interval of the median "
        f"window throughput is within +- this fraction; 0: off (default: {d.target_ci})",
    )
    group.add_argument(
        "--measure-cap-s",
        type=float,
        default=None,
        help=f"stop measuring more windows once timed steps took this long (default: {d.cap_s})",
    )
    group.add_argument(
        "--profile-steps",
        type=int,
        default=None,
        help="after the timed windows, time this many steps phase by phase for the step "
        f"breakdown (never part of a throughput); 0: off (default: {d.profile_steps})",
    )
    group.add_argument(
        "--trace-steps",
        type=int,
        default=None,
        help="after the profiled steps, run this many under the engine's own profiler and "
        "keep its trace (gzipped Chrome-trace JSON, named in the record's traces; under "
        "bench run, the first repeat of each cell keeps one); 0, or --profile-steps 0: "
        f"off (default: {d.trace_steps})",
    )
    add_pin_flag(group)


def add_pin_flag(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--pin-cores",
        action="store_true",
        default=None,
        help="pin each worker and its engine's threads to an equal share of the CPUs, "
        "where there is one a worker (default: the OS places them)",
    )


def measure_from_args(args: argparse.Namespace) -> Measure:
    """The Measure given by parsed flags (unset ones keep their defaults); checked."""
    given = {
        "window_steps": getattr(args, "window_steps", None),
        "target_ci": getattr(args, "target_ci", None),
        "cap_s": getattr(args, "measure_cap_s", None),
        "profile_steps": getattr(args, "profile_steps", None),
        "trace_steps": getattr(args, "trace_steps", None),
        "pin_cores": getattr(args, "pin_cores", None),
    }
    return Measure(**{k: v for k, v in given.items() if v is not None}).check()
