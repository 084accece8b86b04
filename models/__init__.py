"""Reference models: a registry of name -> `ModelDef`.

A model is defined once per framework (torch and paddle) and initialised once in
numpy, so every engine starts from the same bytes. The harness never knows a
model by name: it asks the registry. Adding a model is one file plus an entry in
`_MODULES` below.
"""

from __future__ import annotations

import importlib

from models.base import ModelDef, init_weights, weights_fingerprint

# name -> module defining MODEL: a ModelDef. Imported lazily so that listing
# models does not import a framework.
_MODULES = {
    "mlp": "models.mlp",
    "lenet": "models.lenet",
}


class UnknownModelError(KeyError):
    def __str__(self) -> str:  # KeyError quotes its message; this one reads as a sentence
        return str(self.args[0])


def names() -> list[str]:
    return sorted(_MODULES)


def get(name: str) -> ModelDef:
    """The model registered as `name`; an unknown name lists the known ones."""
    if name not in _MODULES:
        raise UnknownModelError(f"unknown model {name!r}; choose one of: {', '.join(names())}")
    model: ModelDef = importlib.import_module(_MODULES[name]).MODEL
    return model


__all__ = ["ModelDef", "UnknownModelError", "get", "init_weights", "names", "weights_fingerprint"]
