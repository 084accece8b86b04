"""The environment allow-list: which variables a record or a kept log may hold.

Only variables that change how an engine behaves are ever recorded (threads,
Horovod, NCCL/Gloo, CUDA, Paddle flags, the launchers' rendezvous); any other
variable of the user's shell (tokens, passwords, paths) is dropped wherever a
launcher echoes the environment, and values of variables named like secrets are
masked in every text file a cell leaves.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# The allow-list: variables that change how an engine behaves (threads, Horovod,
# NCCL/Gloo, CUDA, Paddle flags, the launchers' rendezvous). Only these are ever
# recorded or kept in a log copied into results; any other variable of the shell
# (tokens, passwords, paths) is dropped wherever a launcher echoes the environment.
BEHAVIOUR_PREFIXES = (
    "OMP_",
    "MKL_",
    "OPENBLAS_",
    "KMP_",
    "NCCL_",
    "GLOO_",
    "HOROVOD_",
    "CUDA_",
    "NVIDIA_",
    "FLAGS_",
    "PADDLE_",
    "TORCH_",
    "TORCHELASTIC_",
)
BEHAVIOUR_NAMES = frozenset(
    {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}
)
# Never kept, even under an allowed prefix: names that say they hold a secret.
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|API_?KEY|PRIVATE|AUTH|COOKIE", re.I)
REDACTED = "<redacted>"


def allowed_var(name: str) -> bool:
    """Whether environment variable `name` is on the allow-list (see BEHAVIOUR_PREFIXES)."""
    return (name.startswith(BEHAVIOUR_PREFIXES) or name in BEHAVIOUR_NAMES) and not (
        SECRET_NAME.search(name)
    )


def allowed_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The allow-listed part of an environment, sorted by name."""
    return {k: v for k, v in sorted(environ.items()) if allowed_var(k)}


_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.S)
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")  # how environment variables are spelled
# Shell words after which a new command, with its own leading assignments, starts.
_COMMAND_START = frozenset({"env", "exec", "&&", "||", ";", "|", "sudo", "nohup"})


def _scrub_words(words: Sequence[str]) -> list[str]:
    out: list[str] = []
    leading = True  # assignments before a command's name are its environment
    for word in words:
        m = _ASSIGNMENT.fullmatch(word)
        if m and leading:
            if allowed_var(m[1]):
                out.append(word)
            continue  # an environment entry off the allow-list: dropped
        if m and _ENV_NAME.fullmatch(m[1]) and not allowed_var(m[1]):
            out.append(f"{m[1]}={REDACTED}")  # looks like one elsewhere: masked in place
            continue
        if leading and word.startswith("-"):  # env's own options (-i, -u NAME)
            out.append(word)
            continue
        leading = os.path.basename(word) in _COMMAND_START
        if "=" in word and any(c.isspace() for c in word):
            word = scrub_shell(word)  # a command line passed as one word (sh -c, ssh)
        out.append(word)
    return out


def scrub_shell(command: str) -> str:
    """A shell command line with environment assignments off the allow-list removed."""
    try:
        words = shlex.split(command)
    except ValueError:  # unbalanced quotes: mask every assignment-shaped word instead
        return re.sub(
            r"(?<![A-Za-z0-9_])([A-Z_][A-Z0-9_]*)=\S*",
            lambda m: m[0] if allowed_var(m[1]) else f"{m[1]}={REDACTED}",
            command,
        )
    scrubbed = _scrub_words(words)
    if scrubbed == words:
        return command
    ops = {"&&", "||", ";", "|"}
    return " ".join(w if w in ops else shlex.quote(w) for w in scrubbed)


def scrub_argv(argv: Sequence[str]) -> list[str]:
    """An argv list without environment entries off the allow-list.

    `env K=V ... cmd` (how horovodrun starts its workers) and leading `K=V` words
    keep only allowed variables; any other KEY=VALUE spelled like an environment
    variable has its value masked; a word holding a whole shell command line is
    scrubbed the same way.
    """
    return _scrub_words([str(a) for a in argv])


def scrub_launcher(launcher: Mapping[str, Any]) -> dict[str, Any]:
    """A record's launcher block with every argv (or list of argvs) scrubbed."""

    def scrub(value: Any) -> Any:
        if isinstance(value, list) and value and all(isinstance(v, list) for v in value):
            return [scrub(v) for v in value]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return scrub_argv(value)
        if isinstance(value, str):
            return scrub_shell(value)
        return value

    return {k: scrub(v) for k, v in launcher.items()}


def _secret_values(environ: Mapping[str, str]) -> list[str]:
    # values long enough not to match by chance, of variables named like secrets
    return sorted(
        {v for k, v in environ.items() if SECRET_NAME.search(k) and len(v) >= 6},
        key=len,
        reverse=True,
    )


def _scrub_text(text: str, secrets: Sequence[str]) -> str:
    lines = []
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        # paddle.distributed.launch logs its whole os.environ as "environ({...})"
        if stripped.startswith("environ({") and stripped.endswith("})"):
            try:
                env = ast.literal_eval(stripped[len("environ(") : -1])
                line = f"environ({allowed_env(env)!r})" + ("\n" if line.endswith("\n") else "")
            except (ValueError, SyntaxError):
                line = f"environ({{}})  # {REDACTED}\n"
        lines.append(line)
    text = "".join(lines)
    for value in secrets:
        text = text.replace(value, REDACTED)
    return text


def scrub_log_dir(folder: str | Path, environ: Mapping[str, str] | None = None) -> list[Path]:
    """Remove environment variables off the allow-list from a cell's logs; returns files changed.

    Launchers write the environment into their logs (paddle's envlog.N, backup_env.N.json
    and its "environ({...})" line), and a worker may print it on a crash: those keep
    only allowed variables, and the values of variables named like secrets in
    `environ` (default: this process's) are masked in every text file.
    """
    secrets = _secret_values(os.environ if environ is None else environ)
    changed: list[Path] = []
    root = Path(folder)
    if not root.is_dir():
        return changed
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.is_symlink():
            continue
        try:
            raw = path.read_bytes()
        except OSError:
            continue
        if b"\0" in raw[:4096]:
            continue  # binary (a timeline is text; nothing binary holds the environment)
        text = raw.decode("utf-8", errors="replace")
        new = text
        if path.name.startswith("envlog."):
            new = "".join(
                line
                for line in text.splitlines(keepends=True)
                if allowed_var(line.partition("=")[0])
            )
        elif path.name.startswith("backup_env.") and path.suffix == ".json":
            try:
                new = json.dumps(allowed_env(json.loads(text)), indent=4)
            except (ValueError, AttributeError):
                new = "{}"
        new = _scrub_text(new, secrets)
        if new != text:
            try:
                path.write_text(new)
            except OSError as exc:  # the cell's record matters more; say what was left
                print(f"warning: cannot scrub {path}: {exc.strerror}", file=sys.stderr)
                continue
            changed.append(path)
    return changed
