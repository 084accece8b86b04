"""Reference models: a registry of name -> `ModelDef`.

A model is defined once per framework (torch and paddle) and initialised once in
numpy, so every engine starts from the same bytes. The harness never knows a
model by name: it asks the registry. Adding a model is one file plus an entry in
`_MODULES` below.
"""

from __future__ import annotations

import importlib

from bench.core.errors import InputError
from models.base import ModelDef, init_weights, weights_fingerprint

# name -> module defining MODEL: a ModelDef. A model module holds only metadata
# (description, default dataset, batch, kind, input shapes) and numpy code at import;
# its torch and paddle builders import their framework when called. So listing
# models or resolving a spec's default dataset never loads a framework
# (tests/test_imports.py holds every model to that).
_MODULES = {
    "mlp": "models.mlp:MODEL",
    "lenet": "models.lenet:MODEL",
    "resnet18": "models.resnet:RESNET18",
    "resnet50": "models.resnet:RESNET50",
    "transformer": "models.transformer:MODEL",
}


class UnknownModelError(InputError):
    """A model name that is not registered; the message lists the ones that are."""


def names() -> list[str]:
    return sorted(_MODULES)


def get(name: str) -> ModelDef:
    """The model registered as `name`; an unknown name lists the known ones."""
    if name not in _MODULES:
        raise UnknownModelError(f"unknown model {name!r}; choose one of: {', '.join(names())}")
    module, _, attr = _MODULES[name].partition(":")
    model: ModelDef = getattr(importlib.import_module(module), attr)
    return model


__all__ = ["ModelDef", "UnknownModelError", "get", "init_weights", "names", "weights_fingerprint"]
