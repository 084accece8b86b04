"""The counted half of the regression gate: instructions, not time, where the work is
deterministic.

The harness's own paths (loading records, `bench compare`, the runner's work around
each step) do the same work every time they run on the same inputs, so their cost
is measured by counting the instructions they execute under Valgrind's callgrind:
one run a side is exact, and a shared 2-core VM whose wall time swings by 25%
between launches moves the count by less than 0.1%. scripts/perfcount_work.py runs
the benchmarks in counted regions (its docstring says how a region is isolated from
the imports); this module launches it under callgrind for a side, reads callgrind's
profiles, and decides:

- "regressed": new/base instructions above 1 + threshold (default +2%), shown with
  the functions whose own instructions grew most;
- "fewer": below 1 - threshold;
- "ok" otherwise.

There is no interval and nothing undecided: a count has no noise to average away,
only the small run-to-run spread the threshold sits well above (docs/development.md).
The functions are callgrind's, so C functions of the interpreter and the extension
modules (pandas, numpy): which kind of work grew (dict lookups, frame evaluation,
pandas' hash tables), not which line of Python.

Like scripts/perfgate.py, a developer tool outside the package: scripts/perf.py and the
tests import it from beside them.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import json
import mmap
import os
import platform
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "perfcount_work.py"
DEFAULT_THRESHOLD = 0.02
REGRESSED, FEWER, OK = "regressed", "fewer", "ok"
# The C function that `sys.call_tracing` runs its callable in: perfcount_work.py's
# regions. Collection is on only inside it and a profile is dumped when it returns.
REGION = "_PyEval_CallTracing"
DUMPS = "callgrind.out"  # region N's profile is DUMPS.N
# The same work every run: no hash randomisation (set and dict orders follow string
# hashes), one thread for every numeric library (threads interleave differently each
# run), and the same clock zone and terminal width for whatever formats text.
COUNT_ENV = {
    "PYTHONHASHSEED": "0",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "TZ": "UTC",
    "COLUMNS": "100",
}
_NAMED = re.compile(r"\((\d+)\)(?: (.*))?")
_RECURSION = re.compile(r"'\d+$")  # callgrind's recursion-depth suffix: f'2 is f


@dataclasses.dataclass(frozen=True)
class Profile:
    """One callgrind dump: its instructions in all, and each function's own."""

    total: int
    functions: Mapping[str, int]  # "function [object file]" -> self instructions


class ParseError(ValueError):
    """A callgrind profile this parser cannot read."""


def _name(value: str, names: dict[str, str]) -> str:
    """A name in callgrind's compressed form: "(7) name" defines 7, "(7)" refers to it."""
    m = _NAMED.fullmatch(value.strip())
    if not m:
        return value.strip()
    if m[2] is not None:
        names[m[1]] = m[2]
        return m[2]
    if m[1] not in names:
        raise ParseError(f"name ({m[1]}) used before it was defined")
    return names[m[1]]


def parse(text: str) -> Profile:
    """A callgrind profile (its format: valgrind.org/docs/manual/cl-format.html).

    Self cost is every cost line of a function except the one after `calls=`, which is
    the inclusive cost of that call, already counted in the callee's own lines.
    """
    files: dict[str, str] = {}
    fns: dict[str, str] = {}
    objs: dict[str, str] = {}
    positions, ir, total = 1, 0, None
    ob, fn, after_call = "", "", False
    own: dict[str, int] = defaultdict(int)
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if line[:1].isdigit() or line[:1] in "+-*":
            if after_call:
                after_call = False  # the call's inclusive cost: the callee's own lines have it
                continue
            fields = line.split()
            if len(fields) > positions + ir:
                own[f"{_RECURSION.sub('', fn)} [{os.path.basename(ob)}]"] += int(
                    fields[positions + ir]
                )
        elif sep and key in ("ob", "cob"):
            name = _name(value, objs)
            ob = name if key == "ob" else ob
        elif sep and key in ("fn", "cfn"):
            name = _name(value, fns)
            fn = name if key == "fn" else fn
        elif sep and key in ("fl", "fi", "fe", "cfi", "cfl"):
            _name(value, files)
        elif sep and key == "calls":
            after_call = True
        elif line.startswith("positions:"):
            positions = len(line.split(":", 1)[1].split())
        elif line.startswith("events:"):
            events = line.split(":", 1)[1].split()
            if "Ir" not in events:
                raise ParseError(f"no Ir among the events {events}")
            ir = events.index("Ir")
        elif line.startswith(("totals:", "summary:")):
            total = int(line.split(":", 1)[1].split()[ir])
    functions = dict(own)
    return Profile(sum(functions.values()) if total is None else total, functions)


def read(path: Path) -> Profile:
    return parse(path.read_text(errors="replace"))


@dataclasses.dataclass(frozen=True)
class CountChange:
    """One benchmark's instructions, base and new, and what the gate makes of them."""

    name: str
    base: int
    new: int
    threshold: float
    grew: tuple[tuple[str, int, int], ...] = ()  # (function, base, new), most grown first

    @property
    def ratio(self) -> float:
        return self.new / self.base if self.base else float("inf")

    @property
    def outcome(self) -> str:
        if self.ratio > 1 + self.threshold:
            return REGRESSED
        if self.ratio < 1 - self.threshold:
            return FEWER
        return OK

    @property
    def regressed(self) -> bool:
        return self.outcome == REGRESSED

    def verdict(self) -> str:
        change = f"{self.ratio - 1:+.2%}"
        if self.outcome == REGRESSED:
            return f"REGRESSED ({change}, more than +{self.threshold:.0%})"
        if self.outcome == FEWER:
            return f"fewer ({change})"
        return f"ok ({change}, within {self.threshold:.0%})"


def grew(base: Profile, new: Profile, top: int = 8) -> list[tuple[str, int, int]]:
    """The functions whose own instructions grew most from base to new: (name, base, new)."""
    names = set(base.functions) | set(new.functions)
    rows = [(n, base.functions.get(n, 0), new.functions.get(n, 0)) for n in names]
    up = sorted((r for r in rows if r[2] > r[1]), key=lambda r: (r[1] - r[2], r[0]))
    return up[:top]


def changes(
    base: Mapping[str, Profile], new: Mapping[str, Profile], threshold: float = DEFAULT_THRESHOLD
) -> list[CountChange]:
    """Every benchmark both sides counted, by name; the grown functions of a regression."""
    out = []
    for name in sorted(set(base) & set(new)):
        c = CountChange(name, base[name].total, new[name].total, threshold)
        if c.regressed:
            c = dataclasses.replace(c, grew=tuple(grew(base[name], new[name])))
        out.append(c)
    return out


def render(found: Sequence[CountChange]) -> str:
    """A table for people: one line per benchmark; under a regression, what grew."""
    width = max((len(c.name) for c in found), default=9)
    lines = [f"{'benchmark':<{width}}  {'base instr':>15}  {'new instr':>15}  new/base  verdict"]
    for c in found:
        lines.append(
            f"{c.name:<{width}}  {c.base:>15,}  {c.new:>15,}  {c.ratio:8.4f}  {c.verdict()}"
        )
        if c.grew:
            lines.append(
                f"  {'':<{width}}functions whose own instructions grew most (base -> new):"
            )
        for fn, b, n in c.grew:
            lines.append(f"    {n - b:>+15,}  {fn}  ({b:,} -> {n:,})")
    return "\n".join(lines)


# -- counting a side ------------------------------------------------------------------


class CountError(RuntimeError):
    """A side could not be counted (no valgrind, a stripped interpreter, a failed run)."""


def valgrind(out: Path, regions_only: bool = False) -> list[str]:
    """callgrind, collecting only inside the regions and dumping each to out/callgrind.out.N;
    with `regions_only`, instrumenting nothing until the process asks (perfcount_work's
    Regions does, around each region).

    Without address randomisation (`setarch -R`, where the system allows it): CPython's
    attribute cache is indexed by the addresses of names, so the same code counted its
    cache misses differently from run to run, moving `bench compare`'s count by up to
    0.3%; with the addresses fixed, runs of the same code count within 0.02%."""
    path = shutil.which("valgrind")
    if path is None:
        raise CountError("valgrind is not installed (apt-get install valgrind): nothing counted")
    return [*_no_aslr(), path, "--tool=callgrind", f"--toggle-collect={REGION}",
            f"--dump-after={REGION}", "--dump-line=no", f"--callgrind-out-file={out / DUMPS}",
            f"--log-file={out / 'valgrind.log'}",
            *(["--instr-atstart=no"] if regions_only else [])]  # fmt: skip


# Callgrind's client requests (valgrind/callgrind.h: VG_USERREQ_TOOL_BASE('C','T') + 4, + 5)
START_INSTRUMENTATION, STOP_INSTRUMENTATION = 0x43540004, 0x43540005
# Valgrind's client-request sequence on x86-64 (valgrind.h: the four rotations of
# __SPECIAL_INSTRUCTION_PREAMBLE, then xchg rbx,rbx), as a function of the request
# block's address that returns Valgrind's reply. Natively it does nothing: the
# rotations add up to 128 bits and the exchange is with itself; it returns 0.
REQUEST_X86_64 = bytes.fromhex(
    "4889f8"  # mov rax, rdi: the request block
    "31d2"  # xor edx, edx: the reply when nothing answers
    "48c1c703" "48c1c70d" "48c1c73d" "48c1c733"  # rol rdi, 3 / 13 / 61 / 51
    "4887db"  # xchg rbx, rbx: the request
    "4889d0"  # mov rax, rdx
    "c3"  # ret
)  # fmt: skip


class ClientRequest:
    """Valgrind client requests from Python, without a compiled module: REQUEST_X86_64 in
    a page of executable memory, called through ctypes."""

    def __init__(self) -> None:
        self.page = mmap.mmap(
            -1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC
        )
        self.page.write(REQUEST_X86_64)
        address = ctypes.addressof(ctypes.c_char.from_buffer(self.page))
        self.call = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_void_p)(address)

    @staticmethod
    def available() -> bool:
        """Whether this machine can run one (x86-64, executable memory allowed)."""
        if platform.machine() != "x86_64":
            return False
        try:
            ClientRequest()
        except (OSError, ValueError, AttributeError):  # W^X policies refuse the page
            return False
        return True

    def __call__(self, code: int) -> int:
        block = (ctypes.c_uint64 * 6)(code, 0, 0, 0, 0, 0)
        return int(self.call(ctypes.addressof(block)))


@functools.cache
def instrument_regions() -> bool:
    """Whether callgrind instruments the counted regions only (perfcount_work.Regions)."""
    return ClientRequest.available()


@functools.cache
def _no_aslr() -> tuple[str, ...]:
    setarch = shutil.which("setarch")
    argv = (setarch, platform.machine(), "-R") if setarch else ()
    if argv and subprocess.run([*argv, "true"], capture_output=True).returncode != 0:
        return ()  # a container that forbids it: the counts spread more, still well in bounds
    return argv


def fixed_addresses() -> bool:
    """Whether counts run with address randomisation off (see `valgrind`)."""
    return bool(_no_aslr())


def command(tree: Path, out: Path, records: Path | None, python: str = sys.executable) -> list[str]:
    """scripts/perfcount_work.py under callgrind for the packages in `tree`."""
    regions_only = instrument_regions()
    argv = [*valgrind(out, regions_only), python, str(WORKLOAD), str(tree), "--manifest",
            str(out / "manifest.json"), "--dumps", str(out / DUMPS)]  # fmt: skip
    argv += ["--instrument-regions"] if regions_only else []
    return argv + (["--records", str(records)] if records else [])


# What a count imports of a side: copied out of it, so that both sides are fresh trees
PACKAGES = ("bench", "runners", "models")


def side_tree(source: Path, dest: Path) -> Path:
    """The side's packages copied to `dest` and compiled there, through that path.

    Both sides must reach the interpreter alike, so that their heaps are laid out alike
    (see `valgrind`): a fresh base worktree has no bytecode, and a working tree has its
    own, written from another path, so importing them compiled one side and fixed up the
    other's file names. Copies at paths of one length (the gate's old/ and new/),
    compiled before the count (natively, in seconds; under callgrind it would take
    minutes), are imported alike."""
    for name in PACKAGES:
        shutil.copytree(source / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(dest)], check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    return dest


def start(
    tree: Path, out: Path, env: Mapping[str, str], records: Path | None, cwd: Path
) -> subprocess.Popen[str]:
    """Launch the count of one side (both sides run at once: a count does not mind)."""
    out.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        command(tree, out, records), cwd=cwd, env={**env, **COUNT_ENV}, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip


def collect(out: Path) -> dict[str, Profile]:
    """Each benchmark's profile from a finished count: dump N is the manifest's region N
    (calibration regions of injected work are not benchmarks)."""
    labels = json.loads((out / "manifest.json").read_text())["regions"]
    dumps = out / DUMPS
    if Path(f"{dumps}.{len(labels) + 1}").exists():
        raise CountError(f"more counted regions than the {len(labels)} run in {out}: something "
                         f"else called sys.call_tracing, so dumps and benchmarks do not match")  # fmt: skip
    got = {}
    for i, label in enumerate(labels, 1):
        dump = Path(f"{dumps}.{i}")
        profile = read(dump) if dump.exists() else Profile(0, {})
        if profile.total == 0:
            raise CountError(f"region {label} counted nothing: valgrind sees no {REGION} in "
                             f"{sys.executable} (a stripped interpreter?)")  # fmt: skip
        if ":" not in label:
            got[label] = profile
    return got


def finish(proc: subprocess.Popen[str], out: Path, timeout: float) -> dict[str, Profile]:
    try:
        log, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise CountError(f"the count in {out} ran past {timeout:.0f} s") from None
    if proc.returncode != 0 or not (out / "manifest.json").exists():
        raise CountError(f"the count in {out} failed (exit {proc.returncode}):\n{log[-3000:]}")
    return collect(out)
