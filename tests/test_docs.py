"""The README and docs/ stay true: every link resolves, every command they show parses.

A `bench` line is parsed by the real parser of its subcommand; a runner line
(`horovodrun ... runners/hvd.py ARGS`) by that runner's parser; a script named
must exist. Nothing is run here: tests/test_docs_as_typed.py runs every command as
typed, and checks the figures quoted beside them.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

from bench import cli
from bench.contract.spec import RunSpec
from bench.engines import Engine
from bench.sweep import SweepConfig, load_config_file, plan
from runners import hvd
from runners.protocol.main import build_parser
from tests.conftest import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
        ROOT / "results" / "reference" / "README.md"]  # fmt: skip
RUNNERS = {"runners/hvd.py": Engine.HOROVOD, "runners/ddp.py": Engine.DDP,
           "runners/paddle_dp.py": Engine.PADDLE}  # fmt: skip
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _blocks(text: str) -> list[str]:
    """Lines of the fenced code blocks of a Markdown text, continuations joined."""
    blocks = re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
    return [line for block in blocks for line in block.replace("\\\n", " ").splitlines()]


def _commands(path: Path) -> list[list[str]]:
    out = []
    for line in _blocks(path.read_text()):
        line = line.split(" #")[0].strip()
        if line.startswith(
            ("bench ", "horovodrun ", "torchrun ", "python -m paddle", "bash scripts/")
        ):
            out.append(shlex.split(line))
    return out


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_resolves(path: Path) -> None:
    broken = []
    for target in LINK.findall(path.read_text()):
        if target.startswith(("http://", "https://", "mailto:", "#")):
            continue
        file = target.split("#")[0]
        if not (path.parent / file).exists():
            broken.append(target)
    assert broken == []


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_shown_parses(path: Path) -> None:
    for argv in _commands(path):
        if argv[0] == "bash":
            assert (ROOT / argv[1]).is_file(), argv
            continue
        if argv[0] == "bench":
            args = [a for a in argv[1:] if a != "..."]
            try:
                cli.parser(args[0]).parse_args(args)
            except SystemExit:
                pytest.fail(f"{path.name}: {shlex.join(argv)} does not parse")
            continue
        script = next((a for a in argv if a in RUNNERS), None)
        assert script, f"no runner in {shlex.join(argv)}"
        args = argv[argv.index(script) + 1 :]
        if script == "runners/hvd.py":  # the synthetic benchmark's flags it takes
            translated = hvd.translate(args)
            assert not isinstance(translated, str), translated
            args = translated
        build_parser(RUNNERS[script]).parse_args(args)


# A script named where a command starts, not after its interpreter: `scripts/x.py ARGS`
# runs the file itself, so it needs its shebang and the executable bit.
SCRIPT = re.compile(r"(?<![\w./-])scripts/[\w.-]+\.(?:py|sh)\b")
INTERPRETER = re.compile(r"(?:\bbash|\bsh|\bpython3?|/python3?)\s+$")


def _run_directly(path: Path) -> set[str]:
    """The scripts `path` names other than after bash or python (its prose included:
    `then scripts/test_durations.py /tmp/run.xml` is a command too)."""
    named = set()
    for line in path.read_text().splitlines():
        for m in SCRIPT.finditer(line):
            if not INTERPRETER.search(line[: m.start()]):
                named.add(m.group(0))
    return named


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_script_the_docs_run_directly_is_executable(path: Path) -> None:
    for name in sorted(_run_directly(path)):
        script = ROOT / name
        assert script.is_file(), f"{path.name} names {name}, which does not exist"
        assert os.access(script, os.X_OK), f"{name} is run directly but not executable"
        assert script.read_text().startswith("#!"), f"{name} is run directly but has no shebang"


def test_the_compare_scale_size_quoted_is_what_its_script_writes(tmp_path: Path) -> None:
    """The one figure of reading-compare's 10,000-record measurement that needs no clock:
    the size of what tests/benchmarks/compare_scale.py writes (it grows with the records)."""
    from tests.benchmarks import compare_scale

    path = tmp_path / "runs.jsonl"
    compare_scale.write_records(path, 500)  # its 10,000, at a twentieth
    mb = path.stat().st_size / 1e6 * 10_000 / 500
    text = (ROOT / "docs" / "reading-compare.md").read_text()
    quoted = re.search(r"\| 10,000 \(compare_scale[^|]*\| ([\d,]+) MB \|", text)
    assert quoted, "reading-compare.md no longer quotes the size compare_scale.py writes"
    size = int(quoted[1].replace(",", ""))
    assert abs(size - mb) < 0.05 * mb, f"it writes {mb:.0f} MB, the doc says {size}"


def test_the_readme_shows_every_command_and_the_page_for_newcomers() -> None:
    """Every subcommand is in the README's commands, and the mapping page is linked."""
    text = (ROOT / "README.md").read_text()
    shown = {argv[1] for argv in _commands(ROOT / "README.md") if argv[0] == "bench" and argv[1:]}
    assert set(cli.COMMANDS) <= shown, set(cli.COMMANDS) - shown
    assert "(docs/coming-from.md)" in text


def test_the_readme_is_a_first_five_minutes() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 200
    assert "bash scripts/run.sh" in text and "bash scripts/test.sh" in text


def test_the_reference_says_how_to_use_it_from_another_machine() -> None:
    """--base/--new refuses across machines, so the reference's README says what carries
    over instead: the same sweep, printed beside it, compared by ratios."""
    text = (ROOT / "results" / "reference" / "README.md").read_text()
    section = text.split("## Using it from another machine")[1].split("\n## ")[0]
    assert "bench compare results/ results/reference/cpu-2core-digits" in section
    assert "ratios" in section.lower() and "efficiency" in section


def test_the_example_sweep_file_loads_and_plans() -> None:
    """The config file the README points to is a valid sweep: 3 engines x 2 worker counts
    x lenet x 5 repeats, plus compute-only twins of the 2-worker cells."""
    settings, spec = load_config_file(ROOT / "docs" / "sweep.example.toml")
    cells = plan(SweepConfig.from_dict(settings), RunSpec.from_dict(spec))
    timed = [c for c in cells if c.spec.grad_sync]
    assert len(timed) == 3 * 2 * 5 and len(cells) - len(timed) == 3 * 5
    assert {c.spec.epochs for c in cells} == {2}
