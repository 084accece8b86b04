"""The shape of the code, held by tests: one dependency direction, one place per engine,
short functions, and frameworks imported lazily and only where they are needed.

The layering itself is stated as import-linter contracts in pyproject.toml; CI runs
`lint-imports` (scripts/test.sh), and the first test here runs it too, so that a
plain `pytest` refuses a cycle as well.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import engines
from tests.conftest import ROOT

LIBRARY = ("bench", "runners", "models")
# Where an engine may be named: its registry entry, its adapter, its entry script.
ENGINE_HOMES = ("bench/engines/", "runners/adapters/", "runners/hvd.py", "runners/ddp.py",
                "runners/paddle_dp.py")  # fmt: skip
# String constants equal to an engine's name that are not about the engine, with why.
NOT_ENGINE_BRANCHES = {
    ("bench/core/machine.py", "paddle"): "the paddle library's version in the record",
    ("bench/core/machine.py", "horovod"): "the horovod library's version in the record",
}
LONGEST_FUNCTION = 60
# Imported inside functions on purpose: a framework loads only in the process that
# trains with it (and after its thread variables are set); matplotlib only when an
# HTML report is drawn.
LAZY = ("torch", "paddle", "horovod", "matplotlib", "pynvml")


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for package in LIBRARY:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield str(path.relative_to(ROOT)), ast.parse(path.read_text())


def _functions(tree: ast.Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def test_the_layering_contracts_hold() -> None:
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint, "import-linter is a dev dependency: run scripts/setup.sh"
    proc = subprocess.run([lint], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_no_branch_on_a_named_engine_outside_its_entry() -> None:
    """Every engine quirk is a field of its registry entry: nothing else names one."""
    names = {e.value for e in engines.Engine}
    found = []
    for path, tree in _modules():
        if path.startswith(ENGINE_HOMES):
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "Engine"
                and node.attr.lower() in names
            ):
                found.append(f"{path}:{node.lineno}: Engine.{node.attr}")
            if (
                isinstance(node, ast.Constant)
                and node.value in names
                and (path, node.value) not in NOT_ENGINE_BRANCHES
            ):
                found.append(f"{path}:{node.lineno}: {node.value!r}")
    assert found == [], "engine named outside its entry:\n" + "\n".join(found)


def test_no_function_is_longer_than_a_screen() -> None:
    long = [
        f"{path}:{fn.lineno} {fn.name} ({fn.end_lineno - fn.lineno + 1} lines)"
        for path, tree in _modules()
        for fn in _functions(tree)
        if fn.end_lineno is not None and fn.end_lineno - fn.lineno + 1 > LONGEST_FUNCTION
    ]
    assert long == [], "\n".join(long)


def _binds_a_std_stream(node: ast.expr | None) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr in ("stdout", "stderr")
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    )


def test_no_default_binds_the_standard_streams_at_import() -> None:
    """A default of sys.stdout is the stream of the moment the module was imported: a
    caller that has since replaced it (pytest's capture, a redirect) would be written
    past, or to a closed file. None, resolved when called, is what the suite uses."""
    bound = []
    for path, tree in _modules():
        for node in ast.walk(tree):
            defaults: list[ast.expr | None] = []
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                defaults = [*node.args.defaults, *node.args.kw_defaults]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                defaults = [node.value]  # a dataclass field's default
            bound += [f"{path}:{d.lineno}" for d in defaults if d and _binds_a_std_stream(d)]
    assert bound == [], "\n".join(bound)


def test_only_frameworks_are_imported_inside_functions() -> None:
    """No import hides a cycle inside a function: module-level imports are what the
    layering contracts see. Frameworks are the exception, on purpose (LAZY)."""
    hidden = []
    for path, tree in _modules():
        for fn in _functions(tree):
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    modules = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    modules = [node.module or "."]
                else:
                    continue
                hidden += [
                    f"{path}:{node.lineno} {fn.name}: {m}"
                    for m in modules
                    if m.split(".")[0] not in LAZY
                ]
    assert hidden == [], "\n".join(hidden)


@pytest.mark.parametrize("package", ["bench", "runners", "models"])
def test_every_module_states_its_purpose(package: str) -> None:
    bare = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.stat().st_size and ast.get_docstring(ast.parse(path.read_text())) is None
    ]
    assert bare == []


def test_the_harness_collectives_under_horovod_carry_fixed_names() -> None:
    """Unnamed, Horovod names each call anew and keeps every name in its response cache:
    at 2 workers the runner's steps slowed epoch after epoch, to 0.88 of Horovod's own
    recipe over 75 epochs (docs/methodology.md). Every collective call the runners make
    through `hvd` names itself (the recipe's broadcasts at build time excepted, once)."""
    once = {"broadcast_parameters", "broadcast_optimizer_state"}
    unnamed = []
    for rel, tree in _modules():
        if not rel.startswith("runners/"):
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Attribute | ast.Name)
                and (getattr(node.func.value, "attr", None) or getattr(node.func.value, "id", None))
                == "hvd"
                and node.func.attr.startswith(("allreduce", "allgather", "broadcast", "alltoall"))
                and node.func.attr not in once
                and not any(k.arg == "name" for k in node.keywords)
            ):
                unnamed.append(f"{rel}:{node.lineno} hvd.{node.func.attr}")
    assert unnamed == []
