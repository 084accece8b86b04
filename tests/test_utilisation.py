"""Utilisation: FLOP counts checked against torch's counter, a measured peak, and a
figure compare refuses to print when it would exceed 100%."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import models
from bench import cli, records
from bench.measure import peak
from bench.records.types import LoadedRecord, RunRecord
from bench.render import formats
from bench.tables import derived
from runners.protocol import fields
from tests.shared_sweep import SharedSweep


@pytest.mark.parametrize("name", models.names())
def test_model_flop_counts_match_torchs_own_counter(name: str) -> None:
    m = models.get(name)
    assert m.flops is not None, f"{name} has no FLOP count: utilisation cannot be computed"
    shape = m.synthetic_shape
    classes = 61 if m.tokens else 10  # a transformer's vocabulary: its output layer
    net = m.torch(shape, classes).eval()
    x = torch.randint(0, classes, (1, *shape)) if m.tokens else torch.randn(1, *shape)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        net(x)
    # torch counts the matrix products and convolutions, 2 FLOPs per multiply-add, as ours
    assert m.flops(shape, classes) == pytest.approx(counter.get_total_flops(), rel=0.01)


def test_the_peak_is_measured_once_per_machine_and_cached_beside_the_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    calls: list[int] = []
    real = peak.measure_alone

    def counted(*args: Any, **kwargs: Any) -> dict[str, Any]:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(peak, "measure_alone", counted)
    assert cli.main(["peak", "--results", str(tmp_path / "a")]) == 0
    (entry,) = json.loads((tmp_path / "a" / peak.FILE).read_text()).values()
    assert entry["gflops"] > 0 and entry["threads"] == 1 and entry["precision"] == "fp32"
    # another results folder on this machine reuses the measurement; --remeasure does not
    assert cli.main(["peak", "--results", str(tmp_path / "b")]) == 0
    (again,) = json.loads((tmp_path / "b" / peak.FILE).read_text()).values()
    assert entry["origin"] == "measured" and again["origin"] == "user cache"
    assert again == {**entry, "origin": "user cache", "copied_from": again["copied_from"]}
    assert len(calls) == 1 and "reused from the user cache" in capsys.readouterr().out
    assert cli.main(["peak", "--results", str(tmp_path / "b"), "--remeasure"]) == 0
    assert len(calls) == 2 and "GFLOP/s" in capsys.readouterr().out
    assert cli.main(["peak", "--threads", "0"]) == 2
    assert "--threads takes integers" in capsys.readouterr().err


def test_a_record_says_where_its_peak_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Measured for its results folder, or copied from the per-user cache (which file),
    and when it was measured: in the record's `peak`, and in what bench peak prints."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    when = "2026-12-01T09:30:00Z"

    def measured(threads: int, precision: str, device: str) -> dict[str, Any]:
        return {"gflops": 50.0, "n": 256, "threads": threads, "precision": precision,
                "device": device, "measured": when}  # fmt: skip

    monkeypatch.setattr(peak, "measure_alone", measured)
    record = cast(RunRecord, {"spec": {"threads": 1, "precision": "fp32", "device": "cpu"}})
    assert fields.peak_fields(record, str(tmp_path / "a")) == {}  # none cached: no peak
    assert cli.main(["peak", "--results", str(tmp_path / "a")]) == 0
    assert f"measured {when}; {tmp_path / 'a' / peak.FILE}" in capsys.readouterr().out
    here = fields.peak_fields(record, str(tmp_path / "a"))["peak"]
    assert (here["origin"], here["measured"]) == ("measured", when)
    assert here["source"] == str(tmp_path / "a" / peak.FILE) and "copied_from" not in here
    # a second folder on the machine reuses the first measurement, and says from where
    assert cli.main(["peak", "--results", str(tmp_path / "b")]) == 0
    shared = cache / "bench" / peak.FILE
    assert f"measured {when}, reused from the user cache {shared}" in capsys.readouterr().out
    copied = fields.peak_fields(record, str(tmp_path / "b"))["peak"]
    assert (copied["origin"], copied["copied_from"]) == ("user cache", str(shared))
    assert copied["measured"] == when and copied["source"] == str(tmp_path / "b" / peak.FILE)


def test_peak_help_names_the_per_user_cache(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["peak", "--help"])
    out = capsys.readouterr().out
    assert "~/.cache/bench/peak-flops.json" in out and "$XDG_CACHE_HOME" in out


def _record(**over: Any) -> LoadedRecord:
    rec = {
        "world_size": 2,
        "cpu_budget": {"usable_cpus": 2},
        "peak": {"gflops": 100.0, "threads": 1},
    }
    return cast(LoadedRecord, {**rec, **over})


def test_the_peak_capacity_counts_the_cores_workers_share() -> None:
    assert derived.peak_capacity(_record()) == 200  # two one-thread workers, two CPUs
    # four workers across two namespaces of this one 2-CPU machine share its two cores
    emulated = _record(world_size=4, link={"rate_bps": 10**9, "emulated": True})
    assert derived.peak_capacity(emulated) == 200
    assert derived.peak_capacity(_record(world_size=4, nodes=2)) == 400  # two machines
    gpu = _record(world_size=4, peak={"gflops": 1000.0, "device": "cuda"})
    assert derived.peak_capacity(gpu) == 4000
    assert str(derived.peak_capacity(_record(peak={}))) == "nan"


@pytest.mark.distributed  # reads the session's sweep (multi-process launches)
def test_a_run_names_its_peak_and_compare_refuses_utilisation_above_it(
    shared_sweep: SharedSweep,
) -> None:
    # ddp at 1 worker from the session's sweep, whose peak was measured into its results
    # folder first, whatever else runs: bench run measures only on a quiet machine
    results = shared_sweep.results
    assert "bench run: peak " in shared_sweep.stderr
    rec = shared_sweep.run("ddp", 1)
    entry = rec["peak"]
    assert entry["gflops"] > 0 and entry["source"] == str(results / peak.FILE)
    assert entry["key"] in json.loads((results / peak.FILE).read_text())
    text = formats.render(records.load([results]), "text", 0.95, show={"per rank", "notes"})
    assert text is not None
    flops, throughput = rec.get("flops_per_sample"), rec.get("throughput")
    assert flops is not None and throughput is not None
    share = 100 * throughput * flops["train"] / 1e9 / entry["gflops"]
    assert f"{share:.1f}%" in text and "'of peak'" in text
    # a peak below what the run achieved is a broken figure: refused, with the reason
    rec["peak"] = {**entry, "gflops": share / 200 * entry["gflops"] / 100}
    one = records.Loaded([cast(LoadedRecord, rec)], [], [])
    text = formats.render(one, "text", 0.95, show={"per rank", "notes"}) or ""
    assert "refused: above the measured peak" in text and "utilisation refused for ddp np=1" in text
