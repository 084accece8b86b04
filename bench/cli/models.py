"""`bench models`: the reference models, with their default dataset and batch."""

from __future__ import annotations

import argparse

import models

DESCRIPTION = "List the reference models every engine trains."


def add_arguments(p: argparse.ArgumentParser) -> None:
    """No arguments."""


def run(args: argparse.Namespace) -> int:
    width = max(map(len, models.names()))
    for name in models.names():
        m = models.get(name)
        print(
            f"{name:{width}} {m.description} "
            f"(default dataset {m.default_dataset}, batch {m.default_batch})"
        )
    return 0
