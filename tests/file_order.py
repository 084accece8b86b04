"""The order the test files are handed out in when two processes share the machine.

Under pytest-xdist's `--dist loadfile` (scripts/test.sh) each process takes the next file
from one queue when its own is nearly done. xdist sorts that queue by test count, which
says nothing about how long a file runs; the run's length depends on the order in three
ways, and this order is chosen for each:

- A file marked `alone` has the machine to itself (conftest.machine_turn), the other
  process idle meanwhile, and it first waits for whatever that process is running.
  So the `alone` files go first, each followed by one of the shortest files: the other
  process takes that short file and then waits out the alone turn, instead of an alone
  turn waiting for a long file to end.
- The longest files next, the shortest last (longest processing time first): the two
  processes then end close together instead of one running a long file at the end
  while the other idles.
- A run several files read (conftest.once_per_run: the shared sweep, the ResNet-18
  runs) is built by the first file that asks, while a reader in the other process
  waits for it. With the long files first, the first reader builds it while the other
  process is inside the longest file, which reads none.

The seconds per file come from a whole run (`tests/file_seconds.tsv` under the rootdir,
written by `scripts/test_durations.py --write tests/file_seconds.tsv --waits LOG run.xml`,
LOG the waits log the run's summary names); a file it does not list counts as the median
file. Stale figures cost a run time, never a result: every file still runs, each whole in
one process, and the shared runs hold whatever the order; a table that does not read is
warned of and the files are ordered without it. A plugin (conftest.py's `pytest_plugins`),
so that the order is the suite's however pytest is started, xdist's own reordering off.
"""

from __future__ import annotations

import statistics
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

TABLE = Path("tests") / "file_seconds.tsv"  # under the rootdir


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """xdist would sort the files by test count again after this order (its default
    --loadscope-reorder, which no flag can be told apart from)."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every file's tests kept together, in their own order, the files in `order`'s."""
    files = [item.nodeid.split("::", 1)[0] for item in items]
    # a file's mark, as conftest._machine_turn reads it (on the module, not a test)
    modules = [item.getparent(pytest.Module) for item in items]
    alone = {
        f
        for module, f in zip(modules, files, strict=True)
        if module is not None and module.get_closest_marker("alone")
    }
    table = config.rootpath / TABLE
    try:
        seconds = load_seconds(table) if table.is_file() else {}
    except ValueError as exc:
        warnings.warn(pytest.PytestWarning(f"{exc}: the files run in name order"), stacklevel=1)
        seconds = {}
    rank = {f: i for i, f in enumerate(order(files, alone, seconds))}
    items.sort(key=lambda item: rank[item.nodeid.split("::", 1)[0]])  # stable: within a file


def load_seconds(path: Path) -> dict[str, float]:
    """{test file (as pytest names it, `tests/test_x.py`): seconds} from the table."""
    out: dict[str, float] = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        name, _, seconds = line.partition("\t")
        try:
            out[name] = float(seconds)
        except ValueError:
            problem = f"{path}:{number}: expected `file<TAB>seconds`, got {line!r}"
            raise ValueError(problem) from None
    return out


def order(files: Iterable[str], alone: set[str], seconds: Mapping[str, float]) -> list[str]:
    """`files` in the order to hand them out: each `alone` file followed by one of the
    shortest others, the shortest first, then the rest, the longest first (ties by name,
    so that every process computes the same order)."""
    files = list(dict.fromkeys(files))
    default = statistics.median(seconds.values()) if seconds else 0.0

    def longest_first(f: str) -> tuple[float, str]:
        return -seconds.get(f, default), f

    first = sorted((f for f in files if f in alone), key=longest_first)
    rest = sorted((f for f in files if f not in alone), key=longest_first)
    out = []
    for f in first:  # each alone turn's neighbour: a short file, not a long one started
        out += [f, rest.pop()] if rest else [f]
    return out + rest
