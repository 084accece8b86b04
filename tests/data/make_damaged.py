"""Regenerate damaged.jsonl: records of the wrong shape between two good ones.

python tests/data/make_damaged.py

Each damaged line carries `_expect`, the field its load problem must name (an
unknown extra field, which the loader tolerates). The two good lines (ddp at 1
and 2 workers, model "lenet", so a comparison of their own) must always come
through into every report.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from make_golden import record


def good(n: int, workers: int) -> dict[str, Any]:
    rec = record(n, "ddp", workers, 100.0 * workers, 0.9, 0)
    rec["spec"] = dict(rec["spec"], model="lenet")
    rec["run_id"] = f"good{n}"
    return rec


def damaged() -> list[tuple[str, dict[str, Any]]]:
    """(field the problem must name, record) for each damaged case."""
    base = good(0, 1)
    cases: list[tuple[str, dict[str, Any]]] = [
        # the cases that crashed compare or export
        ("spec", {"spec": 123}),
        ("throughput", {"throughput": None}),
        ("world_size", {"world_size": "two"}),
        ("epochs[0]", {"epochs": ["one", "two"]}),
        ("engine", {"engine": ["ddp"]}),
        ("status", {"status": "ok<script>"}),
        # every other way a top-level field can be of the wrong type
        ("throughput", {"throughput": "fast"}),
        ("throughput", {"throughput": True}),
        ("step_times_s", {"step_times_s": "0.1"}),
        ("step_times_s[0][1]", {"step_times_s": [[0.1, "x"]]}),
        ("per_rank_throughput", {"per_rank_throughput": 5}),
        ("final_accuracy", {"final_accuracy": "high"}),
        ("epochs[0].train_time_s", {"epochs": [{"train_time_s": "1s"}]}),
        ("epochs[0].test_accuracy", {"epochs": [{"test_accuracy": [1]}]}),
        ("env", {"env": "linux"}),
        ("env.libraries", {"env": {"libraries": ["torch"]}}),
        ("env.cpu_count", {"env": {"cpu": "x", "cpu_count": "2"}}),
        ("labels", {"labels": ["a"]}),
        ("knobs", {"knobs": "none"}),
        ("resources.peak_rss_mb", {"resources": {"peak_rss_mb": "400"}}),
        ("resources", {"resources": []}),
        ("fingerprints", {"fingerprints": "abc"}),
        ("fingerprints.init_weights", {"fingerprints": {"init_weights": 7}}),
        ("flops_per_sample", {"flops_per_sample": "many"}),
        ("input_pipeline", {"input_pipeline": 3}),
        ("nodes", {"nodes": "2"}),
        ("step_losses", {"step_losses": {"0": 1.0}}),
        ("error", {"error": 5}),
        ("kind", {"kind": "weird"}),
        ("run_id", {"run_id": 5}),
        ("schema_version", {"schema_version": "1"}),
        ("spec.seed", {"spec": dict(base["spec"], seed="zero")}),
        ("spec.grad_sync", {"spec": dict(base["spec"], grad_sync="yes")}),
        ("spec.model", {"spec": dict(base["spec"], model=["lenet"])}),
        ("launcher", {"launcher": 5}),
        ("launcher.argv", {"launcher": {"name": "bench run", "argv": "python x.py"}}),
        ("engine_options", {"engine_options": ["a=1"]}),
        ("hosts", {"hosts": "vm"}),
        ("dataset", {"dataset": "digits"}),
        ("results", {"results": "fast"}),
    ]
    out = []
    for i, (field, change) in enumerate(cases, start=1):
        rec = {**base, "run_id": f"damaged{i}", **change, "_expect": field}
        out.append((field, rec))
    # a required field missing on an ok record
    rec = {k: v for k, v in base.items() if k != "step_times_s"}
    out.append(("step_times_s", {**rec, "run_id": "damaged-missing", "_expect": "step_times_s"}))
    return out


def main() -> None:
    lines = [json.dumps(good(1, 1), sort_keys=True)]
    lines += [json.dumps(rec, sort_keys=True) for _, rec in damaged()]
    lines.append(json.dumps(good(2, 2), sort_keys=True))
    # non-finite numbers: Python's json reads these literals, JSON does not allow them
    lines.append(
        json.dumps(
            {**good(3, 1), "throughput": float("nan"), "run_id": "damaged-nan"}, sort_keys=True
        )[:-1]
        + ', "_expect": "throughput"}'
    )
    (Path(__file__).parent / "damaged.jsonl").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
