"""Which spec fields identify a comparison group and a sweep cell, stable across versions."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

from bench.contract.spec import RunSpec
from bench.core.errors import SpecError

# The spec fields each identity hash covered when it was introduced: the comparison
# group (bench compare) and the cell key (bench run's resume). A field added since
# enters a hash only when it differs from its default, so a new field at its default
# neither splits a comparison nor makes a finished cell run again.
GROUP_FIELDS_V1 = frozenset(
    [
        "batch_size",
        "bucket_mb",
        "data_path",
        "dataset",
        "device",
        "epochs",
        "grad_sync",
        "lr",
        "lr_base_batch",
        "lr_rule",
        "lr_schedule",
        "lr_warmup_epochs",
        "max_steps",
        "model",
        "momentum",
        "optimizer",
        "precision",
        "scaling",
        "seed",
        "synthetic_samples",
        "test_fraction",
        "threads",
        "warmup_steps",
        "weight_decay",
    ]
)
CELL_FIELDS_V1 = GROUP_FIELDS_V1 | frozenset(
    ["allow_tf32", "augment", "bn_buffers", "bn_eps", "bn_momentum", "grad_compression"]
)


def canonical(spec: Mapping[str, Any], covered: frozenset[str]) -> dict[str, Any]:
    """`spec` as identity hashes see it: normalised through `RunSpec.from_dict` (a
    missing field takes its default), then fields outside `covered` left out while
    they hold their default. Data `from_dict` refuses (an older or damaged record) is
    hashed as it is."""
    return dict(_canonical(json.dumps(spec, sort_keys=True, default=str), covered))


@functools.lru_cache(maxsize=4096)
def _canonical(text: str, covered: frozenset[str]) -> tuple[tuple[str, Any], ...]:
    data = json.loads(text)
    try:
        full = RunSpec.from_dict(data).to_dict()
    except (SpecError, TypeError, ValueError):
        return tuple(data.items()) if isinstance(data, dict) else ()
    defaults = RunSpec().to_dict()
    return tuple(
        (k, v) for k, v in full.items() if k in covered or k not in defaults or v != defaults[k]
    )
