"""Supported versions: requires-python true to the code, and the constraints setup uses."""

from __future__ import annotations

import re
import tomllib

from tests.conftest import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _name(requirement: str) -> str:
    """PEP 503 normalised distribution name of a requirement string."""
    match = re.match(r"[A-Za-z0-9._-]+", requirement.strip())
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def test_requires_python_matches_the_code() -> None:
    uses_tomllib = [
        p for p in ROOT.glob("*/*.py") if re.search(r"^import tomllib", p.read_text(), re.M)
    ]
    assert uses_tomllib  # the reason for the bound
    assert PYPROJECT["project"]["requires-python"] == ">=3.11"  # tomllib is 3.11+
    assert PYPROJECT["tool"]["ruff"]["target-version"] == "py311"
    assert PYPROJECT["tool"]["mypy"]["python_version"] == "3.11"


def test_constraints_pin_every_dependency_exactly() -> None:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep and re.fullmatch(r"[0-9][0-9A-Za-z.]*", version), line
            pins[_name(name)] = version
    project = PYPROJECT["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    wanted += project["optional-dependencies"]["paddle"]
    missing = sorted({_name(r) for r in wanted} - set(pins))
    assert not missing, f"add to constraints.txt: {missing}"
    assert "bench" not in pins and "horovod" not in pins  # editable / built by setup.sh


def test_setup_installs_through_the_constraints() -> None:
    lines = (ROOT / "scripts" / "setup.sh").read_text().splitlines()
    installs = [ln for ln in lines if re.search(r'"\$\{pip\[@\]\}" install', ln)]
    assert installs
    # the GPU wheels come from other indexes, which carry other version sets
    other_index = [ln for ln in installs if "INDEX" in ln or "-gpu==" in ln]
    unpinned = [ln for ln in installs if '"${pin[@]}"' not in ln and ln not in other_index]
    assert not unpinned, unpinned
    assert any('pin=(-c "$root/constraints.txt")' in ln for ln in lines)
