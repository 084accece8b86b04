"""`bench predict`: a scaling model of each engine's step time, fitted to measured records.

`model` is the arithmetic (ring all-reduce, CPU sharing, overlap), `inputs` turns
records into per-run and per-record values, `report` makes predictions with their
intervals, records and tables, and checks them against runs. docs/prediction.md
states the model and what each term is measured from.
"""

from bench.core.errors import PredictError
from bench.predict.inputs import Sample, grad_bytes_of, samples
from bench.predict.model import (
    Fit,
    LatencySplit,
    Layout,
    LinkCost,
    RecordCost,
    Target,
    record_cost,
    ring_factor,
    split_latency,
)
from bench.predict.report import (
    CAPTION,
    FILE,
    Prediction,
    bound_reasons,
    check,
    error_interval,
    predict,
    render_check,
    render_text,
    run,
    table,
    to_record,
    what_if,
)

__all__ = [
    "CAPTION",
    "FILE",
    "Fit",
    "LatencySplit",
    "Layout",
    "LinkCost",
    "PredictError",
    "Prediction",
    "RecordCost",
    "Sample",
    "Target",
    "bound_reasons",
    "check",
    "error_interval",
    "grad_bytes_of",
    "predict",
    "record_cost",
    "render_check",
    "render_text",
    "ring_factor",
    "run",
    "samples",
    "split_latency",
    "table",
    "to_record",
    "what_if",
]
