"""Every error the suite reports to a user, in one hierarchy.

A `BenchError` is something wrong with what the user asked for, or with where
results go: the command-line layer prints its message in one line, without a
traceback, and exits with status 2. Each subclass keeps the built-in base it
has always had (ValueError, OSError, RuntimeError), so code that catches those
keeps working. The message always names the problem and what to do about it.
"""

from __future__ import annotations

import signal


class BenchError(Exception):
    """A problem the user can fix; the message says how."""


class InputError(BenchError, ValueError):
    """Anything wrong with what the user asked for: reported without a traceback."""


class SpecError(InputError):
    """A run specification that cannot be honoured; the message names the field."""


class DataError(InputError):
    """A dataset that cannot be loaded; the message says where to put its files."""


class SweepError(InputError):
    """A sweep that cannot start; the message names the setting."""


class LinkError(InputError):
    """A link that cannot be emulated here; the message says what to do."""


class PredictError(InputError):
    """Records or inputs the scaling model cannot use; the message names them."""


class CheckError(InputError):
    """A regression threshold that does not parse (e.g. `--fail throughput:5%`)."""


class LaunchError(BenchError, RuntimeError):
    """A launcher that cannot be found or a plan that cannot be placed."""


class SlurmError(LaunchError):
    """No usable allocation, a plan that does not fit it, or a submission that failed."""


class RecordsError(BenchError, OSError):
    """The results location cannot be used; the message says what to do."""


class Interrupted(BaseException):
    """SIGTERM or SIGHUP reached a command: it stops as on Ctrl-C (a BaseException, so
    nothing on the way up mistakes it for an error to handle)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name
