"""Re-run an entry script under the project's .venv when started by another Python.

`horovodrun -np 4 runners/hvd.py` executes the script through its shebang, whose
`python3` may be the system interpreter without torch; rather than fail on an
import, hand over to .venv/bin/python when that exists. Standard library only.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path


def ensure_venv() -> None:
    if all(importlib.util.find_spec(m) for m in ("numpy", "torch")):
        return
    venv_python = Path(__file__).resolve().parent.parent / ".venv" / "bin" / "python"
    if venv_python.exists() and Path(sys.executable).resolve() != venv_python.resolve():
        os.execv(str(venv_python), [str(venv_python), sys.argv[0], *sys.argv[1:]])
    sys.exit(
        "error: numpy and torch are not importable from this Python; run scripts/setup.sh "
        "and use .venv/bin/python (or activate .venv)"
    )
