"""Every command README.md, docs/*.md and results/reference/README.md show, run as typed.

tests/test_docs.py parses each command; this file runs them. From a scratch folder laid
out as a user's checkout (the repository's folders and files linked, a `results/` of its
own holding a copy of the committed reference, `.venv` the environment running the
tests) and with the environment's bin folder first on PATH (as after `source
.venv/bin/activate`), every line of a fenced `bash` block runs through bash in reading
order: README.md, then docs/ A-Z, then the reference's README, as one user typing them
top to bottom, so that `bench compare results/` reads what `bench run` wrote. A command
a page shows that an earlier page showed too runs once. Each must exit 0, or the code
its page gives (EXIT).

Only sizes are cut, by the flags each page names in its one "For a quick try" paragraph:
`KEY`: `FLAGS` pairs, read from the page here. A command gets the flags of every key it
matches, appended (so a size it sets, `--repeats 5` or `--budget 20m`, is cut); a flag
that says what runs (SCOPE: engines, workers, models, dataset) may only fill in what the
command leaves to its default; a `--dry-run`, which launches nothing, runs as shown.

A command that cannot run here by its nature is in EXCLUDED with the reason, and that
table must name only commands the pages show; one this machine lacks something for
(root, MPI, a `.venv` that scripts/setup.sh would not change) skips, saying what.

Then the figures: the output and tables README.md and the reference's README quote are
checked against the output of the command they name (and the dates and durations against
the committed records they come from).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

import models
from bench.engines import horovod
from tests.conftest import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
        ROOT / "results" / "reference" / "README.md"]  # fmt: skip
REFERENCE = ROOT / "results" / "reference"
# what a checkout holds besides results/ and .venv, linked into the scratch folder
LINKED = ("README.md", "bench", "constraints.txt", "docs", "experiments", "models",
          "pyproject.toml", "runners", "scripts", "tests", ".ci")  # fmt: skip
COMMAND_TIMEOUT_S = 600
# flags that say what runs rather than how much: a quick try may not change them
SCOPE = {"--engines", "--workers", "--models", "--model", "--datasets", "--dataset"}
MPI = "mpi" in horovod.built_controllers() and shutil.which("mpirun") is not None

SLURM = "needs a Slurm cluster (tests/test_slurm.py runs bench in a private one)"
PERF = (
    "the performance gate: launches paired until decided, minutes a run (CI runs it "
    "after the tests; tests/test_perfgate.py checks its decisions)"
)
NETNS = (
    "what bench runs inside its namespace pair, M, RATE and B standing for values "
    "(tests/test_netem.py checks what it set)"
)
# Shown, not run here: each command as its page shows it (comment dropped), and why.
EXCLUDED = {
    "bash scripts/test.sh": "the whole test suite, this file included",
    "bench run --hosts <node1>:2,<node2>:2 --iface <iface>": (
        "placeholders for your hosts and network (tests/test_multinode.py runs "
        "multi-node across two network namespaces)"
    ),
    "srun --mpi=pmix --ntasks 2 python runners/hvd.py --model lenet": (
        "inside a Slurm allocation (tests/test_launch_as_typed.py runs it in a private cluster)"
    ),
    "salloc --nodes 1 --ntasks-per-node 2": (
        f"an interactive Slurm allocation; the lines after it run here without one. {SLURM}"
    ),
    (
        "bench run --submit --workers 1,2,4 --models mlp,lenet --sbatch-arg=--partition=cpu "
        "--sbatch-arg=--nodes=2 --sbatch-arg=--ntasks-per-node=2"
    ): f"submits to a cluster with a 2-node partition `cpu`; {SLURM}",
    "ip link set dev bench0 mtu M": NETNS,
    "tc qdisc replace dev bench0 root tbf rate RATE burst B latency 10ms": NETNS,
    "bash scripts/perf.sh": PERF,
    "bash scripts/perf.sh --base HEAD~3": PERF,
    "bash scripts/perf.sh --base-file .ci/perf-base --budget 6m": PERF,
    "BENCH_PERF_SLOWDOWN=0.15 BENCH_PERF_SLOWDOWN_ENGINE=ddp bash scripts/perf.sh --base HEAD": PERF,
    "bash scripts/perf_calibrate.sh DIR 10": f"twenty gate runs, hours; DIR a placeholder. {PERF}",
    # as the page's line reads once its quotes are parsed
    "KINDS=same more-bench_compare more-runner_steps BUDGET=6m bash scripts/perf_calibrate.sh DIR 5": (
        f"fifteen gate runs, most of an hour; DIR a placeholder. {PERF}"
    ),
}
# A code other than 0 that a page gives: (code, the page's words, what the output says).
EXIT = {
    "bench compare --base results/reference/cpu-2core-digits --new results": (
        2,
        "and exits 2 (nothing was compared)",
        "no cell is present in both results/reference/cpu-2core-digits and results",
    ),
    "BENCH_PERF_EXTRA_WORK=0.05 BENCH_PERF_EXTRA_WORK_IN=bench_compare bash scripts/perf.sh --base HEAD": (
        1,
        "bench compare doing 5% more work: must fail",
        "REGRESSION in instructions beyond +2%: bench_compare",
    ),
}
# usage.md's words for what a root user adds to mpirun (the tests run as root in CI)
AS_ROOT = "(as root, OpenMPI also wants `--allow-run-as-root`)"


def _old(root: Path) -> None:
    """`old/`, which the pages name as an earlier results folder: the records so far."""
    (root / "old").mkdir(exist_ok=True)
    if not (root / "old" / "runs.jsonl").exists():
        shutil.copy2(root / "results" / "runs.jsonl", root / "old" / "runs.jsonl")


# What a page takes as there for a command (`old/`: an earlier results/), made just before
# the command first runs.
PRESUMES: dict[str, Callable[[Path], None]] = {
    "bench compare --base old/ --new results/ --fail throughput:5%": _old,
    "bench compare --base old/ --new results/": _old,
}


def _fences(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block."""
    return re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)


def _words(line: str) -> list[str]:
    return shlex.split(line, comments=True)


def shown(path: Path) -> list[str]:
    """The commands of `path`'s bash blocks as shown, continuations joined, comments
    dropped, one space between words."""
    out = []
    for lang, body in _fences(path.read_text()):
        if lang != "bash":
            continue
        for line in body.replace("\\\n", " ").splitlines():
            if words := _words(line):
                out.append(" ".join(words))
    return out


QUICK_PAIR = re.compile(r"`([^`]+)`\)?: `(--[^`]+)`")


def _quick_paragraphs(path: Path) -> list[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text)]
    return [p for p in paragraphs if "quick try" in p.lower() and QUICK_PAIR.search(p)]


def quick_flags(path: Path) -> list[tuple[str, list[str]]]:
    """(key, flags) pairs of the page's "For a quick try" paragraph, in its order."""
    paragraphs = _quick_paragraphs(path)
    assert len(paragraphs) <= 1, f"{path.name}: one quick-try paragraph a page"
    return [(k, shlex.split(f)) for p in paragraphs for k, f in QUICK_PAIR.findall(p)]


def applies(key: str, words: list[str]) -> bool:
    """Whether a quick-try key names this command: `runners/` any runner script; else
    the key's leading words begin the command and its flags are among the command's."""
    if key.endswith("/"):
        return any(w.startswith(key) for w in words)
    head = [k for k in key.split() if not k.startswith("--")]
    return words[: len(head)] == head and all(k in words for k in key.split()[len(head) :])


@dataclasses.dataclass(frozen=True)
class Typed:
    """A command as a page shows it, and what runs here."""

    doc: str
    line: str  # as shown, comment dropped
    words: tuple[str, ...]  # the line (as offered for this machine), then the quick flags

    @property
    def shell(self) -> str:
        return shlex.join(self.words)

    @property
    def added(self) -> list[str]:
        return list(self.words[len(_offered(_words(self.line))) :])


def _offered(words: list[str]) -> list[str]:
    """As its page offers where this machine needs it: mpirun as root (AS_ROOT)."""
    if words[0] == "mpirun" and os.geteuid() == 0:
        return [words[0], "--allow-run-as-root", *words[1:]]
    return words


def typed(path: Path) -> list[Typed]:
    pairs = quick_flags(path)
    out = []
    for line in shown(path):
        if line in EXCLUDED:
            continue
        words = _words(line)
        run = _offered(words)
        for key, flags in pairs:
            if applies(key, words) and "--dry-run" not in words:  # a dry run has no size
                run += flags
        out.append(Typed(str(path.relative_to(ROOT)), line, tuple(run)))
    return out


ALL = [t for path in DOCS for t in typed(path)]


@dataclasses.dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def tail(self) -> str:
        return f"exit {self.returncode}\n{self.stdout[-3000:]}\n{self.stderr[-3000:]}"


class Checkout:
    """The scratch checkout, and every command run in it so far."""

    def __init__(self, root: Path) -> None:
        self.root = root
        for name in LINKED:
            if (ROOT / name).exists():
                (root / name).symlink_to(ROOT / name)
        (root / ".venv").symlink_to(Path(sys.prefix))
        shutil.copytree(REFERENCE, root / "results" / "reference",
                        ignore=shutil.ignore_patterns("runs", "report.html"))  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HOROVOD_", "OMPI_"))}
        self.env = {
            **env,
            "PATH": f"{Path(sys.executable).parent}:{env.get('PATH', '')}",
            "VIRTUAL_ENV": sys.prefix,
            "XDG_CACHE_HOME": str(root / ".cache"),  # the peak is this checkout's
            "COLUMNS": "200",  # a wide terminal: no figure is read across a wrapped line
        }
        self.ran: dict[str, Ran] = {}
        self.skipped: dict[str, str] = {}
        self.next = 0

    def shell(self, command: str) -> Ran:
        """`command` through bash in the checkout; its whole session killed at the limit."""
        start = time.monotonic()
        proc = subprocess.Popen(
            ["bash", "-c", command],
            cwd=self.root,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            err += f"\n[killed after {COMMAND_TIMEOUT_S} s]"
        return Ran(proc.returncode, out, err, time.monotonic() - start)

    def through(self, index: int) -> Ran:
        """ALL[index]'s run, after every command before it (each once)."""
        while self.next <= index:
            self.once(ALL[self.next])
            self.next += 1
        return self.result(ALL[index])

    def once(self, t: Typed) -> None:
        """Run `t` unless it ran, or this machine lacks what it needs."""
        if t.shell in self.ran or t.shell in self.skipped:
            return
        reason = self.missing(t)
        if reason:
            self.skipped[t.shell] = reason
            return
        if t.line in PRESUMES:
            PRESUMES[t.line](self.root)
        self.ran[t.shell] = self.shell(t.shell)

    def result(self, t: Typed) -> Ran:
        if t.shell in self.skipped:
            pytest.skip(self.skipped[t.shell])
        return self.ran[t.shell]

    def alone(self, doc: str, line: str) -> Ran:
        """The command a page shows as `line`, run without the ones before it (for those
        that read only the committed reference)."""
        t = next((t for t in ALL if t.doc == doc and t.line == line), None)
        assert t, f"{doc} no longer shows `{line}`"
        self.once(t)
        return self.result(t)

    def missing(self, t: Typed) -> str | None:
        """What this machine lacks for `t`, if anything."""
        words = list(t.words)
        if words[:2] == ["bash", "scripts/run.sh"]:
            check = self.shell("bash scripts/setup.sh --check")
            if check.returncode != 0:
                return "scripts/run.sh would install into .venv first: " + check.stdout.strip()
        if "--emulate-link" in words:
            if os.geteuid() != 0:
                return "--emulate-link needs root"
            if shutil.which("ip") is None or shutil.which("tc") is None:
                return "--emulate-link needs ip and tc (iproute2)"
        if words[0] == "mpirun" and not MPI:
            return "Horovod without MPI, or no mpirun on PATH"
        return None


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Checkout:
    return Checkout(tmp_path_factory.mktemp("checkout"))


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


# --- the commands ------------------------------------------------------------------


COMMAND_WORDS = ("bench ", "horovodrun ", "torchrun ", "python ", "mpirun ", "srun ",
                 "salloc ", "bash ", "source ", ".venv/", "ip ", "tc ")  # fmt: skip


def test_every_command_shown_is_run_or_excluded_by_name() -> None:
    """A command only a bash block can hold, and every exclusion, presumption and exit
    code names a command a page shows: a new command runs unless excluded on purpose."""
    found = {line for path in DOCS for line in shown(path)}
    assert set(EXCLUDED) <= found, set(EXCLUDED) - found
    assert set(PRESUMES) <= found, set(PRESUMES) - found
    assert set(EXIT) <= found, set(EXIT) - found
    assert {t.line for t in ALL} == found - set(EXCLUDED)
    for path in DOCS:
        for lang, body in _fences(path.read_text()):
            if lang != "bash":
                hidden = [ln for ln in body.splitlines() if ln.lstrip().startswith(COMMAND_WORDS)]
                assert not hidden, f"{path.name}: commands outside a bash block: {hidden}"


def test_the_codes_and_offers_are_the_pages_own() -> None:
    pages = [REFERENCE / "README.md", *DOCS]
    text = " ".join(" ".join(page.read_text().split()) for page in pages)
    for _code, words, _said in EXIT.values():
        assert words in text, words
    assert AS_ROOT in " ".join((ROOT / "docs" / "usage.md").read_text().split())


def test_a_quick_try_only_cuts_sizes() -> None:
    """Every key of a page's quick try names a command of that page, and no flag it adds
    changes what a command says runs (only what it leaves to its default)."""
    for path in DOCS:
        lines = [_words(line) for line in shown(path) if line not in EXCLUDED]
        for key, flags in quick_flags(path):
            assert flags, f"{path.name}: `{key}` with no flags"
            assert any(applies(key, words) for words in lines), f"{path.name}: `{key}` names none"
    for t in ALL:
        named = set(_words(t.line)) & SCOPE & set(t.added)
        assert not named, f"{t.doc}: the quick try changes {named} of `{t.line}`"
    slow = [t for t in ALL if t.words[:2] in (("bench", "run"), ("bench", "tune"))]
    assert all("--max-steps" in t.words or "--dry-run" in t.words for t in slow), [
        t.line for t in slow if "--max-steps" not in t.words and "--dry-run" not in t.words
    ]


@pytest.mark.distributed
@pytest.mark.parametrize("index", range(len(ALL)), ids=[f"{t.doc}: {t.line}" for t in ALL])
def test_each_command_runs_as_typed(checkout: Checkout, index: int) -> None:
    t = ALL[index]
    ran = checkout.through(index)
    code, _, said = EXIT.get(t.line, (0, "", ""))
    assert ran.returncode == code, f"{t.shell}\n{ran.tail()}"
    assert said in ran.stdout + ran.stderr, ran.tail()


# --- the figures ---------------------------------------------------------------------

NUMBER = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?%?|\d+(?:\.\d+)?%?")
README = ROOT / "README.md"
REF_README = REFERENCE / "README.md"


def _flat(text: str) -> str:
    return " ".join(text.split())


def _tables(text: str, first: str) -> list[list[list[str]]]:
    """The Markdown tables of `text` whose first header cell is `first`: rows of cells,
    header and separator dropped."""
    out, rows = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
            continue
        if rows and rows[0][0] == first:
            out.append([r for r in rows[2:]])
        rows = []
    return out


def _sections(output: str) -> list[list[str]]:
    """A compare output's comparisons: their lines, each starting at an unindented one."""
    sections: list[list[str]] = []
    for line in output.splitlines():
        if line and not line[0].isspace():
            sections.append([])
        if sections:
            sections[-1].append(line.strip())
    return sections


def _row_is_in(row: list[str], lines: list[str]) -> bool:
    """Every figure of a table row is on the lines of its engine (or on every row's)."""
    engine = row[0]
    mine = [ln for ln in lines if ln.startswith(f"{engine} ") or ln.startswith("on every row")]
    return set(NUMBER.findall(" ".join(row[1:]))) <= set(NUMBER.findall(" ".join(mine)))


def test_the_readme_summary_is_what_compare_prints(checkout: Checkout) -> None:
    """The README's screen of the reference, line by line (a line ending in `...` as far
    as it goes), in what the command it names prints."""
    m = re.search(
        r"as `(bench compare [^`]+)` prints it:\s*```\n(.*?)```", README.read_text(), re.S
    )
    assert m, "README.md no longer shows what bench compare prints, naming the command"
    ran = checkout.alone("results/reference/README.md", m[1])
    assert ran.returncode == 0, ran.tail()
    printed = _flat(ran.stdout)
    for line in m[2].splitlines():
        want = _flat(line).removesuffix(" ...")
        assert want in printed, f"README.md shows `{want}`; {m[1]} prints:\n{ran.stdout}"


def test_the_per_cell_tables_are_what_compare_prints(checkout: Checkout) -> None:
    """README's lenet table and the reference README's lenet and mlp tables: every figure
    of a row on its engine's lines of one comparison (comm % is on the `why` line)."""
    ran = checkout.alone(
        "results/reference/README.md", "bench compare results/reference/cpu-2core-digits"
    )
    sections = _sections(ran.stdout)
    tables = [t for path in (README, REF_README) for t in _tables(path.read_text(), "engine")]
    rows = [r for t in tables for r in t if len(r) == 6]
    assert len(rows) == 9, rows  # README's 3 rows, the reference's 3 + 3
    for row in rows:
        assert any(_row_is_in(row, s) for s in sections), f"{row} is not what compare prints"


def test_the_tune_tables_are_what_compare_prints(checkout: Checkout) -> None:
    ran = checkout.alone(
        "results/reference/README.md", "bench compare results/reference/tune-lenet-2workers"
    )
    best = ran.stdout.split("best against best")[1].splitlines()
    lines = [ln.strip() for ln in best]
    rows = [r for path in (README, REF_README) for t in _tables(path.read_text(), "engine")
            for r in t if len(r) == 5]  # fmt: skip
    assert len(rows) == 6, rows
    for row in rows:
        assert _row_is_in(row, lines), f"{row} is not what compare prints:\n{ran.stdout}"
        mine = " ".join(ln for ln in lines if ln.startswith(f"{row[0]} "))
        assert row[3] in mine, row  # the tuned knobs, or "its defaults won"


def test_the_scaling_model_figures_are_what_its_check_prints(checkout: Checkout) -> None:
    line = "bench predict results/reference/predict-check-2026-12-03 --fit-link 500mbit --fit-workers 2 --check"
    ran = checkout.alone("results/reference/README.md", line)
    assert ran.returncode == 0, ran.tail()
    found = re.findall(
        r"^\s*(ddp|horovod|paddle): ([\d.]+)%; covered (\d+)/(\d+)", ran.stdout, re.M
    )
    per = {e: (err, int(c), int(n)) for e, err, c, n in found}
    assert set(per) == {"ddp", "horovod", "paddle"}, ran.stdout
    covered = sum(c for _, c, _ in per.values()), sum(n for _, _, n in per.values())
    readme, ref = _flat(README.read_text()), _flat(REF_README.read_text())
    assert line in readme
    for text, words in ((readme, "median error"), (ref, "median absolute error")):
        m = re.search(rf"{words} ddp ([\d.]+)%, horovod ([\d.]+)%, paddle ([\d.]+)%; "
                      r"(\d+) of (\d+) (?:prediction )?intervals", text)  # fmt: skip
        assert m, words
        assert m.groups()[:3] == tuple(per[e][0] for e in ("ddp", "horovod", "paddle"))
        assert (int(m[4]), int(m[5])) == covered


def test_the_gate_calibration_tables_are_what_perf_table_prints(checkout: Checkout) -> None:
    line = ".venv/bin/python scripts/perf_table.py --from-csv results/reference/perf-gate-2026-12-03/minima.csv"
    ran = checkout.alone("results/reference/README.md", line)
    assert ran.returncode == 0, ran.tail()
    printed = [ln for ln in ran.stdout.splitlines() if ln.startswith("|")]
    doc = (ROOT / "docs" / "development.md").read_text().splitlines()
    shown_rows = [
        ln
        for ln in doc
        if ln.startswith(("| same ", "| slow ", "| test_", "| gate run", "| benchmark | sd"))
    ]
    assert [ln for ln in printed if not ln.startswith("|---")] == shown_rows


def _records(name: str) -> list[dict[str, Any]]:
    lines = (REFERENCE / name / "runs.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _span(recs: list[dict[str, Any]]) -> tuple[datetime, datetime]:
    return (min(datetime.fromisoformat(r["run_start"]) for r in recs),
            max(datetime.fromisoformat(r["run_stop"]) for r in recs))  # fmt: skip


def _section(text: str, heading: str) -> str:
    return _flat(text.split(heading)[1].split("\n## ")[0])


def test_the_reference_dates_and_durations_are_its_records() -> None:
    ref = REF_README.read_text()
    sweep = _records("cpu-2core-digits")
    start, stop = _span(sweep)
    text = _section(ref, "## `cpu-2core-digits/`")
    assert f"{len(sweep)} runs, all ok" in text and {r["status"] for r in sweep} == {"ok"}
    assert f"{start:%Y-%m-%d}, {start:%H:%M} to {stop:%H:%M} UTC" in text
    m = re.search(r"commit (\w+) \(clean tree\), measurement protocol (\d+)", text)
    assert m and all(r["env"]["git"]["commit"].startswith(m[1]) for r in sweep)
    assert not any(r["env"]["git"]["dirty"] for r in sweep)
    assert {r["protocol_version"] for r in sweep} == {int(m[2])}
    minutes = (stop - start).total_seconds() / 60
    assert f"{len(sweep)} runs, took {minutes:.1f} minutes" in _flat(README.read_text())

    tune = _records("tune-lenet-2workers")
    start, stop = _span(tune)
    minutes = (stop - start).total_seconds() / 60
    text = _section(ref, "## `tune-lenet-2workers/`")
    assert f"{start:%Y-%m-%d}, {start:%H:%M} to {stop:%H:%M} UTC" in text
    assert f"It took {minutes:.1f} minutes" in text
    assert f"lenet, 2 workers, {minutes:.1f} minutes" in _flat(README.read_text())

    start, stop = _span(_records("predict-check-2026-12-03"))
    text = _section(ref, "## `predict-check-2026-12-03/`")
    assert f"{start:%Y-%m-%d} {start:%H:%M}-{stop:%H:%M} UTC" in text


def test_the_spread_the_reference_quotes_is_its_records() -> None:
    """Horovod at 2 workers on mlp, the five runs' lowest and highest samples/s."""
    runs = [r["throughput"] for r in _records("cpu-2core-digits")
            if r["engine"] == "horovod" and r["world_size"] == 2
            and r["spec"]["model"] == "mlp" and r["spec"]["grad_sync"]]  # fmt: skip
    low, high = min(runs) / 1000, max(runs) / 1000
    assert len(runs) == 5
    assert f"ran from {low:.1f}k to {high:.1f}k samples/s" in _flat(REF_README.read_text())


def test_lenets_gradient_size_is_its_parameters() -> None:
    """39 KB: lenet's fp32 parameters on the bundled digits (8x8, 10 classes)."""
    shapes = models.get("lenet").param_shapes((1, 8, 8), 10)
    kb = round(sum(math.prod(shape) for shape, _ in shapes.values()) * 4 / 1000)
    assert f"lenet's {kb} KB of gradients" in _flat(README.read_text())
    assert f"lenet's gradients ({kb} KB)" in _flat(REF_README.read_text())


def test_the_default_sweeps_size_is_what_its_dry_run_plans(checkout: Checkout) -> None:
    ran = checkout.alone("docs/usage.md", "bench run --dry-run")
    cells = re.findall(r"^# (\d+) cells", ran.stdout + ran.stderr, re.M)
    assert cells, ran.tail()
    assert f"cells: {cells[0]} runs (the committed" in _flat(README.read_text())


def test_a_figure_from_a_past_measurement_names_what_made_it() -> None:
    """The harness against each engine's recipe (README) is a study's: it names its script."""
    text = _flat(README.read_text())
    m = re.search(
        r"Horovod 1\.008 / 1\.012 .*?\((1\.14 / 1\.05); `([^`]+)`, (\d{4}-\d\d-\d\d)\)", text
    )
    assert m, "README.md's harness figures no longer name the script that measured them"
    assert (ROOT / m[2]).is_file()
