"""The shape of the code, held by tests: one dependency direction, one place per engine,
short functions, and frameworks imported lazily and only where they are needed.

The layering itself is stated as import-linter contracts in pyproject.toml; CI runs
`lint-imports` (scripts/test.sh), and the first test here runs it too, so that a
plain `pytest` refuses a cycle as well. An engine is named only in its homes: not as
a string, a list of engines, an identifier, a flag, or one of its options' names.
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
ENGINE_HOMES = (
    "bench/engines/",
    "runners/adapters/",
    "runners/hvd.py",
    "runners/ddp.py",
    "runners/paddle_dp.py",
)
# String constants equal to an engine's name that are not about the engine, with why.
NOT_ENGINE_BRANCHES = {
    ("bench/core/machine.py", "paddle"): "the paddle library's version in the record",
    ("bench/core/machine.py", "horovod"): "the horovod library's version in the record",
}
# Strings equal to an engine option's name that are not that option, with why.
NOT_ENGINE_OPTIONS = {
    ("bench/records/types.py", "cycle_time_ms"): "the knob's stored type, declared with the record",
    ("bench/records/migrations.py", "cycle_time_ms"): "older records' knob, brought forward",
    ("bench/render/plots.py", "timeline"): "the record's timeline summary, drawn for "
    "any engine that writes one",
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
                and _engine_list(node.value, names)
                and (path, node.value) not in NOT_ENGINE_BRANCHES
            ):
                found.append(f"{path}:{node.lineno}: {node.value!r}")
    assert found == [], "engine named outside its entry:\n" + "\n".join(found)


def _engine_list(value: object, names: set[str]) -> bool:
    """An engine's name, or a comma list of them ("horovod,ddp,paddle": a default that
    is the registry's to give, which lists every engine)."""
    return isinstance(value, str) and all(part.strip() in names for part in value.split(","))


def _engine_words() -> set[str]:
    """The words that name an engine: its name and its entry script's (`hvd`)."""
    return {w for e in engines.Engine for w in (e.value, engines.get(e).runner.stem)}


def _names_an_engine(text: str, sep: str, words: set[str]) -> bool:
    """Whether some run of `sep`-separated words of `text` is an engine's word."""
    parts = text.lower().split(sep)
    runs = (sep.join(parts[i:j]) for i in range(len(parts)) for j in range(i + 1, len(parts) + 1))
    return any(run in words for run in runs)


def _identifiers(node: ast.AST) -> Iterator[str]:
    """The names `node` binds or reads: variables, attributes, arguments, keywords,
    functions, classes and import aliases."""
    if isinstance(node, ast.Name):
        yield node.id
    elif isinstance(node, ast.Attribute):
        yield node.attr
    elif isinstance(node, ast.arg | ast.keyword) and node.arg:
        yield node.arg
    elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        yield node.name
    elif isinstance(node, ast.alias):
        yield node.asname or node.name.split(".")[-1]


def test_no_identifier_or_flag_names_an_engine_outside_its_entry() -> None:
    """A setting for one engine is a field of its entry (`trace_flag`, `trace_option`),
    never a generic config field or flag that carries its name (`hvd_timeline`). Models
    are left out: a model builds itself per framework, and Paddle the framework shares
    its engine's name."""
    words = _engine_words()
    found = []
    for path, tree in _modules():
        if path.startswith(ENGINE_HOMES) or path.startswith("models/"):
            continue
        for node in ast.walk(tree):
            found += [
                f"{path}:{getattr(node, 'lineno', '?')}: {name}"
                for name in _identifiers(node)
                if _names_an_engine(name, "_", words)
            ]
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value.startswith("--")
                and _names_an_engine(node.value[2:], "-", words)
            ):
                found.append(f"{path}:{node.lineno}: {node.value!r}")
    assert found == [], "engine named outside its entry:\n" + "\n".join(found)


def test_no_engine_option_is_read_outside_its_entry() -> None:
    """An option's meaning elsewhere comes from its entry (the default a variant leaves
    unsaid: `variant_options`; options that are paths: their declared kind), never from
    its name spelled in generic code (`knobs.get("controller")`)."""
    options = {k for e in engines.Engine for k in engines.get(e).options}
    assert {"controller", "timeline"} <= options  # the check sees Horovod's options
    found = [
        f"{path}:{node.lineno}: {node.value!r}"
        for path, tree in _modules()
        if not path.startswith(ENGINE_HOMES)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and node.value in options
        and (path, node.value) not in NOT_ENGINE_OPTIONS
    ]
    assert found == [], "engine option named outside its entry:\n" + "\n".join(found)


def test_the_engine_checks_see_each_form() -> None:
    """Each form the checks above refuse is caught, and ordinary words are not."""
    words, names = _engine_words(), {e.value for e in engines.Engine}
    assert _names_an_engine("hvd_timeline", "_", words)
    assert _names_an_engine("hvd-timeline", "-", words)
    assert _names_an_engine("use_paddle_dp", "_", words)
    assert not _names_an_engine("engine_traces", "_", words)
    assert not _names_an_engine("ddpx_thing", "_", words)
    assert _engine_list("horovod,ddp,paddle", names)
    assert _engine_list("ddp", names)
    assert not _engine_list("ddp, or the fastest", names)


def _probe_sources() -> set[str]:
    """The free text an engine's own adapter writes into a record (its probe's `source`;
    the shared base's generic texts are no engine's)."""
    found = set()
    for path, tree in _modules():
        if not path.startswith("runners/adapters/") or path.endswith("base.py"):
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "source" for t in node.targets)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                found.add(node.value.value)
    return found


def test_no_engine_is_recognised_by_its_prose() -> None:
    """A quirk is a registry field (e.g. `comm_inside_backward`), never a phrase of an
    adapter's free text matched in the library."""
    prose = _probe_sources()
    assert any("inside backward" in p for p in prose)  # the check sees Paddle's probe
    found = [
        f"{path}:{node.lineno}: {node.value!r}"
        for path, tree in _modules()
        if path.startswith("bench/")
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and " " in node.value.strip()  # a phrase, not a word any text may hold
        and any(node.value in p for p in prose)
    ]
    assert found == [], "an engine recognised by its prose:\n" + "\n".join(found)


def test_no_function_is_longer_than_a_screen() -> None:
    long = [
        f"{path}:{fn.lineno} {fn.name} ({fn.end_lineno - fn.lineno + 1} lines)"
        for path, tree in _modules()
        for fn in _functions(tree)
        if fn.end_lineno is not None and fn.end_lineno - fn.lineno + 1 > LONGEST_FUNCTION
    ]
    assert long == [], "\n".join(long)


STREAMS = ("stdout", "stderr", "__stdout__", "__stderr__")


def _stream_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """(names bound to the sys module, names bound to one of its streams) in `tree`."""
    modules, streams = {"sys"}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name == "sys"}
        elif isinstance(node, ast.ImportFrom) and node.module == "sys":
            streams |= {a.asname or a.name for a in node.names if a.name in STREAMS}
    return modules, streams


def _uses_a_stream(node: ast.AST, names: tuple[set[str], set[str]]) -> bool:
    modules, streams = names
    for n in ast.walk(node):
        of_sys = isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
        if of_sys and n.attr in STREAMS and n.value.id in modules:  # type: ignore[attr-defined]
            return True
        if isinstance(n, ast.Name) and n.id in streams:
            return True
    return False


def _evaluated_at_import(tree: ast.Module) -> Iterator[ast.AST]:
    """Expressions evaluated once, when the module is imported: every default (of a
    def or a lambda), and what module and class bodies assign (a dataclass field's
    default among them)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.arguments):
            yield from (d for d in [*node.defaults, *node.kw_defaults] if d is not None)
    bodies = [tree.body] + [n.body for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    for body in bodies:
        for stmt in body:
            if isinstance(stmt, ast.Assign | ast.AnnAssign) and stmt.value is not None:
                yield stmt.value


def test_no_default_binds_the_standard_streams_at_import() -> None:
    """sys.stdout read at import is the stream of that moment: a caller that has since
    replaced it (pytest's capture, a redirect) would be written past, or to a closed
    file. None, resolved when called, is what the suite uses."""
    bound = [
        f"{path}:{getattr(node, 'lineno', '?')}"
        for path, tree in _modules()
        for node in _evaluated_at_import(tree)
        if _uses_a_stream(node, _stream_names(tree))
    ]
    assert bound == [], "\n".join(bound)


def test_the_stream_check_sees_aliases_lambdas_and_fields() -> None:
    caught = [
        "import sys as s\ndef f(out=s.stdout): pass",
        "from sys import stderr as e\ng = lambda out=e: out",
        "import sys\nclass C:\n    out: object = field(default=sys.stdout)",
        "import sys\nOUT = partial(print, file=sys.stderr)",
        "import sys\ndef f(*, out=None if 0 else sys.stdout): pass",
    ]
    fine = ["import sys\ndef f(out=None):\n    out = sys.stdout if out is None else out"]
    for source, expect in [(c, True) for c in caught] + [(f, False) for f in fine]:
        tree = ast.parse(source)
        names = _stream_names(tree)
        assert any(_uses_a_stream(n, names) for n in _evaluated_at_import(tree)) is expect, source


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
    recipe over 75 epochs (docs/findings.md). Every collective call the runners make
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


def _entry_modules() -> set[str]:
    """Where the library is entered: `bench` and each subcommand's module (loaded by
    name), the runners' entry scripts, and the adapters the registry names."""
    from bench import cli

    entries = {"bench.__main__", "bench.cli", *(module for module, _ in cli.COMMANDS.values())}
    entries |= {f"runners.{p.stem}" for p in (ROOT / "runners").glob("*.py") if p.stem[0] != "_"}
    entries |= {engines.get(e).adapter.partition(":")[0] for e in engines.Engine}
    return entries


def test_every_library_module_is_reached_from_an_entry_point() -> None:
    """Nothing under bench/ exists only for tests or experiments: every module is imported,
    directly or not, by the `bench` command, a runner or an adapter (import graph by
    grimp, import-linter's own)."""
    import grimp

    graph = grimp.build_graph("bench", "runners", "models")
    reached = set(_entry_modules())
    for entry in list(reached):
        reached |= graph.find_upstream_modules(entry)
    packages = {
        ".".join(p.relative_to(ROOT).parent.parts) for p in (ROOT / "bench").rglob("__init__.py")
    }
    orphans = sorted(
        m for m in graph.modules if m.startswith("bench") and m not in reached | packages
    )
    assert orphans == [], f"modules no entry point imports: {orphans}"


def test_every_public_function_and_class_is_used_by_the_library() -> None:
    """A public function or class of bench/, runners/ or models/ that no library code
    names (only tests or an experiment, say) is dead weight in the product."""
    used: set[str] = set()
    defined: list[tuple[str, str]] = []
    for path, tree in _modules():
        defined += [
            (path, node.name)
            for node in tree.body
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and not node.name.startswith("_")
        ]
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                used.add(node.id)
            elif isinstance(node, ast.Attribute):
                used.add(node.attr)
            elif isinstance(node, ast.alias):
                used.add(node.name.rpartition(".")[2])
    used |= {engines.get(e).adapter.partition(":")[2] for e in engines.Engine}  # by name
    assert [d for d in defined if d[1] not in used] == []


def test_no_package_folder_outgrows_a_room() -> None:
    """A package folder (its subfolders counted) over 3,500 lines holds several concerns:
    split it into rooms that each say what they hold."""
    for package in LIBRARY:
        for folder in [ROOT / package, *(p for p in (ROOT / package).rglob("*") if p.is_dir())]:
            if folder.name == "__pycache__" or not (folder / "__init__.py").exists():
                continue
            lines = sum(len(p.read_text().splitlines()) for p in folder.rglob("*.py"))
            if folder != ROOT / package:
                assert lines <= 3500, f"{folder.relative_to(ROOT)}: {lines} lines"
