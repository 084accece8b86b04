"""Regenerate golden.jsonl: small hand-made records whose expected tables are known.

python tests/data/make_golden.py
"""

from __future__ import annotations

import json
from pathlib import Path

SPEC = {
    "model": "mlp",
    "dataset": "digits",
    "data_path": None,
    "batch_size": 32,
    "scaling": "weak",
    "epochs": 2,
    "max_steps": None,
    "warmup_steps": 5,
    "optimizer": "sgd",
    "lr": 0.05,
    "lr_rule": "linear",
    "lr_base_batch": None,
    "lr_warmup_epochs": 0.0,
    "lr_schedule": "cosine",
    "momentum": 0.9,
    "weight_decay": 0.0,
    "seed": 0,
    "threads": 1,
    "precision": "fp32",
    "device": "cpu",
    "bucket_mb": 25.0,
    "grad_sync": True,
    "test_fraction": 0.2,
    "synthetic_samples": 2048,
}
ENV = {"cpu": "Golden CPU", "cpu_count": 2, "libraries": {"torch": "2.13.0"}}


def record(
    n: int,
    engine: str,
    workers: int,
    tp: float,
    acc: float | None,
    seed: int,
    status: str = "ok",
    sync: bool = True,
    error: str | None = None,
) -> dict:
    rec = {
        "schema_version": 1,
        "run_id": f"golden{n}",
        "status": status,
        "error": error,
        "engine": engine,
        "spec": dict(SPEC, seed=seed, grad_sync=sync),
        "world_size": workers,
        "env": ENV,
        "knobs": {"bucket_mb": 25},
    }
    if status == "ok":
        rec.update(
            {
                "throughput": tp,
                "per_rank_throughput": [tp / workers * 0.9, tp / workers * 1.1][:workers]
                if workers > 1
                else [tp],
                "step_times_s": [[0.010, 0.020, 0.030]] * workers,
                "final_accuracy": acc,
                # accuracy 0.5 after 1 s of training, then `acc` after 2 s in all
                "epochs": [
                    {"train_time_s": 1.0, "test_accuracy": 0.5},
                    {"train_time_s": 1.0, "test_accuracy": acc},
                ],
                "resources": {"peak_rss_mb": [400.0] * workers, "cpu_utilisation": [0.9] * workers},
                "fingerprints": {
                    "init_weights": f"init{seed}",
                    "data_order": f"order{workers}-{seed}",
                },
            }
        )
    return rec


def main() -> None:
    recs = []
    for seed, (d1, d2, h1, h2) in enumerate(
        [(100, 150, 80, 120), (110, 160, 82, 125), (90, 140, 78, 115)]
    ):
        recs += [
            record(0, "ddp", 1, d1, 0.97, seed),
            record(0, "ddp", 2, d2, 0.96, seed),
            record(0, "horovod", 1, h1, 0.97, seed),
            record(0, "horovod", 2, h2, 0.90, seed),
            record(0, "ddp", 2, 200.0, 0.5, seed, sync=False),
        ]
    recs.append(
        record(
            0,
            "paddle",
            2,
            0.0,
            None,
            0,
            status="timeout",
            error="cell exceeded its time-out of 600s",
        )
    )
    lines = []
    for n, rec in enumerate(recs, start=1):
        rec["run_id"] = f"golden{n}"
        lines.append(json.dumps(rec, sort_keys=True))
    lines.append('{"truncated": ')
    (Path(__file__).parent / "golden.jsonl").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
